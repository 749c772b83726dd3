#!/usr/bin/env bash
# Start a Tidemark server on a free loopback port, run a command against it,
# stop the server by PID, and exit with the command's status.
#
#   with_server.sh SERVER_BINARY [server flags...] -- COMMAND [args...]
#
# In COMMAND's arguments and environment, @URL@ is replaced by the server's
# endpoint URL; TIDEMARK_URL, TIDEMARK_PID and TIDEMARK_SERVER_LOG are exported.
# The server is asked for port 0 and reports the port it bound on stdout.
set -uo pipefail
bin="$1"; shift
sargs=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do sargs+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] || { echo "with_server.sh: no command" >&2; exit 2; }

work="$(mktemp -d)"
out="$work/server.out"; log="$work/server.log"
"$bin" --listen 127.0.0.1:0 "${sargs[@]}" >"$out" 2>"$log" &
pid=$!
# Stop the server by PID: TERM, then KILL after 10 s. Sets server_rc.
server_rc=0
stop_server() {
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null
        for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
        kill -KILL "$pid" 2>/dev/null
    fi
    wait "$pid" 2>/dev/null
    server_rc=$?
}
trap 'stop_server; rm -rf "$work"' EXIT

url=""
for _ in $(seq 1 200); do   # up to 10 s for the listening line
    url="$(sed -n 's/^listening on \(http[^ ]*\)$/\1/p' "$out" | head -1)"
    [ -n "$url" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
done
if [ -z "$url" ]; then
    echo "with_server.sh: server did not start" >&2
    cat "$log" >&2
    exit 1
fi
export TIDEMARK_URL="$url" TIDEMARK_PID="$pid" TIDEMARK_SERVER_LOG="$log"
cmd=()
for a in "$@"; do cmd+=("${a//@URL@/$url}"); done
"${cmd[@]}"
rc=$?
if ! kill -0 "$pid" 2>/dev/null; then
    echo "with_server.sh: server died during the test" >&2
    rc=1
fi
# A clean shutdown exits 0; sanitizer reports (leaks at exit) do not.
stop_server
if [ $server_rc -ne 0 ]; then
    echo "with_server.sh: server exited with status $server_rc on SIGTERM" >&2
    rc=1
fi
if [ $rc -ne 0 ]; then
    echo "---- server log (tail) ----" >&2
    tail -n 50 "$log" >&2
fi
exit $rc
