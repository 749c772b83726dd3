#!/usr/bin/env bash
# Run the official MCP conformance suite (server side, --suite all) against
# URL and require every scenario to pass: exit 0, 32 scenarios with a check
# mark, none with a cross, and "0 failed" in the total.
#   conformance_server.sh PEERS_DIR URL
set -uo pipefail
peers="$1"; url="$2"
suite="$peers/node_modules/@modelcontextprotocol/conformance/dist/index.js"
[ -f "$suite" ] || { echo "conformance suite not installed in $peers (run scripts/install-deps.sh)" >&2; exit 1; }
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
node "$suite" server --url "$url" --suite all >"$out" 2>&1
rc=$?
sed -n '/=== SUMMARY ===/,$p' "$out"
passed=$(grep -c '^✓ ' "$out")
failed=$(grep -c '^✗ ' "$out")
if [ $rc -ne 0 ] || [ "$passed" -ne 32 ] || [ "$failed" -ne 0 ] || ! grep -q '^Total: [0-9]* passed, 0 failed' "$out"; then
    echo "conformance: FAILED (exit $rc, $passed scenarios passed, $failed failed)" >&2
    grep -v '^\s*$' "$out" | tail -n 80 >&2
    exit 1
fi
echo "conformance: all $passed scenarios passed"
