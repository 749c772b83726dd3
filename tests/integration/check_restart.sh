#!/usr/bin/env bash
# Run tidemark-check against a Tidemark server with --restart-cmd: the server
# is killed (-9) and started again on the same port and the same store.
#
#   check_restart.sh SERVER_BINARY [server flags...] -- CHECK_BINARY [check flags...]
#
# The server first binds port 0 (a free port the kernel picks); its URL is
# appended to the check's arguments, with --restart-cmd "check_restart.sh
# --restart WORKDIR". That restart form reads the server's PID and command
# line from WORKDIR, kills it by PID, waits until it is gone, starts it again
# with --listen 127.0.0.1:PORT and returns once it prints its listening line.
# Exits with the check's status; the server is stopped by PID at the end.
set -uo pipefail

# wait_listening OUT PID: print the URL once the server reports it (10 s).
wait_listening() {
    local out="$1" pid="$2" url=""
    for _ in $(seq 1 200); do
        url="$(sed -n 's/^listening on \(http[^ ]*\)$/\1/p' "$out" | head -1)"
        [ -n "$url" ] && { echo "$url"; return 0; }
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.05
    done
    return 1
}

# gone PID: the process has exited (a zombie awaiting its parent counts).
gone() {
    local st
    st="$(ps -o stat= -p "$1" 2>/dev/null | tr -d ' ')"
    [ -z "$st" ] || [ "${st#Z}" != "$st" ]
}

if [ "${1:-}" = "--restart" ]; then
    work="$2"
    pid="$(cat "$work/pid")"
    kill -KILL "$pid" 2>/dev/null
    for _ in $(seq 1 200); do gone "$pid" && break; sleep 0.05; done
    gone "$pid" || { echo "check_restart.sh: server $pid did not die" >&2; exit 1; }
    n=$(( $(cat "$work/starts") + 1 )); echo "$n" >"$work/starts"
    # shellcheck disable=SC1091
    . "$work/cmd"   # sets bin, port, sargs
    out="$work/server.$n.out"
    "$bin" --listen "127.0.0.1:$port" "${sargs[@]}" >"$out" 2>>"$work/server.log" </dev/null &
    echo $! >"$work/pid"
    if ! wait_listening "$out" $! >/dev/null; then
        echo "check_restart.sh: server did not restart on port $port" >&2
        tail -n 20 "$work/server.log" >&2
        exit 1
    fi
    echo "check_restart.sh: server restarted (pid $(cat "$work/pid"), port $port)" >&2
    exit 0
fi

bin="$1"; shift
sargs=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do sargs+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] || { echo "check_restart.sh: no check command" >&2; exit 2; }

work="$(mktemp -d)"
stop_server() {
    local pid
    pid="$(cat "$work/pid" 2>/dev/null)"
    [ -n "$pid" ] || return 0
    if ! gone "$pid"; then
        kill -TERM "$pid" 2>/dev/null
        for _ in $(seq 1 200); do gone "$pid" && break; sleep 0.05; done
        kill -KILL "$pid" 2>/dev/null
    fi
    return 0
}
trap 'stop_server; rm -rf "$work"' EXIT

echo 1 >"$work/starts"
"$bin" --listen 127.0.0.1:0 "${sargs[@]}" >"$work/server.1.out" 2>"$work/server.log" </dev/null &
pid0=$!
disown "$pid0"   # the restart kills it with -9: no job-status noise from bash
echo "$pid0" >"$work/pid"
url="$(wait_listening "$work/server.1.out" "$pid0")" || {
    echo "check_restart.sh: server did not start" >&2
    cat "$work/server.log" >&2
    exit 1
}
port="${url#http://127.0.0.1:}"; port="${port%%/*}"
{ printf 'bin=%q\nport=%q\nsargs=(' "$bin" "$port"; printf '%q ' "${sargs[@]}"; printf ')\n'; } >"$work/cmd"

self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
"$@" --restart-cmd "$(printf '%q --restart %q' "$self" "$work")" "$url"
rc=$?
if [ $rc -ne 0 ]; then
    echo "---- server log (tail) ----" >&2
    tail -n 50 "$work/server.log" >&2
fi
exit $rc
