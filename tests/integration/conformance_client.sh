#!/usr/bin/env bash
# Run one client scenario of the official MCP conformance suite against
# CLIENT (the runner starts the scenario's server and runs CLIENT with the
# server URL appended, scenario name in MCP_CONFORMANCE_SCENARIO). Pass only
# when the runner exits 0 and reports every check passed with 0 failed and
# 0 warnings ("Passed: N/N, 0 failed, 0 warnings", N >= 1).
#   conformance_client.sh PEERS_DIR CLIENT SCENARIO
set -uo pipefail
[ $# -eq 3 ] || { echo "usage: $0 PEERS_DIR CLIENT SCENARIO" >&2; exit 2; }
peers="$1"; client="$2"; scenario="$3"
suite="$peers/node_modules/@modelcontextprotocol/conformance/dist/index.js"
[ -f "$suite" ] || { echo "conformance suite not installed in $peers (run scripts/install-deps.sh)" >&2; exit 1; }
[ -x "$client" ] || { echo "no client program at $client" >&2; exit 1; }
case "$client" in *' '*) echo "the runner splits --command on spaces: $client" >&2; exit 1;; esac
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
node "$suite" client --command "$client" --scenario "$scenario" --timeout 30000 >"$out" 2>&1
rc=$?
line="$(grep -E '^Passed: [0-9]+/[0-9]+, [0-9]+ failed, [0-9]+ warnings' "$out" | tail -n 1)"
ok=0
if [[ $rc -eq 0 && "$line" =~ ^Passed:\ ([0-9]+)/([0-9]+),\ 0\ failed,\ 0\ warnings ]] &&
   [ "${BASH_REMATCH[1]}" -ge 1 ] && [ "${BASH_REMATCH[1]}" -eq "${BASH_REMATCH[2]}" ] &&
   grep -q 'OVERALL: PASSED' "$out"; then
    ok=1
fi
if [ $ok -ne 1 ]; then
    echo "conformance client $scenario: FAILED (exit $rc; ${line:-no result line})" >&2
    # The runner's whole report: checks, the client's stdout/stderr on error.
    sed 's/\x1b\[[0-9;]*m//g' "$out" >&2
    exit 1
fi
echo "conformance client $scenario: $line"
