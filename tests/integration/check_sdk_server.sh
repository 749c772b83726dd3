#!/usr/bin/env bash
# Run tidemark-check against the official TypeScript SDK's example-style
# server (sdk_server.mjs) and assert only that it completes and prints a
# whole scorecard: the SDK server's results are recorded in
# docs/check-sdk-server.md, not asserted.
#
#   check_sdk_server.sh NODE SDK_SERVER_MJS CHECK_BINARY [check flags...]
set -uo pipefail
node="$1"; server="$2"; shift 2
[ $# -gt 0 ] || { echo "check_sdk_server.sh: no check command" >&2; exit 2; }

work="$(mktemp -d)"
"$node" "$server" --port 0 >"$work/server.out" 2>"$work/server.log" </dev/null &
pid=$!
stop_server() {
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
        kill -KILL "$pid" 2>/dev/null
    fi
    wait "$pid" 2>/dev/null
    return 0
}
trap 'stop_server; rm -rf "$work"' EXIT

url=""
for _ in $(seq 1 300); do   # up to 15 s: node loads the SDK first
    url="$(sed -n 's/^listening on \(http[^ ]*\)$/\1/p' "$work/server.out" | head -1)"
    [ -n "$url" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
done
if [ -z "$url" ]; then
    echo "check_sdk_server.sh: SDK server did not start" >&2
    cat "$work/server.log" >&2
    exit 1
fi

"$@" "$url" >"$work/card.txt"
rc=$?
cat "$work/card.txt"
echo "(tidemark-check exit status $rc: not asserted against the SDK server)"
[ $rc -le 1 ] || { echo "check_sdk_server.sh: tidemark-check exited $rc" >&2; exit 1; }
missing=0
for name in initialize priming_event unique_ids replay_exact replay_repeatable cursor_unknown \
            cursor_foreign cursor_future cursor_stale delete_404 restart; do
    if ! grep -Eq "^$name +(PASS|FAIL|WARN|N/A) " "$work/card.txt"; then
        echo "check_sdk_server.sh: no result line for $name" >&2
        missing=1
    fi
done
grep -Eq '^[0-9]+ passed, [0-9]+ failed$' "$work/card.txt" || {
    echo "check_sdk_server.sh: no summary line" >&2; missing=1; }
exit $missing
