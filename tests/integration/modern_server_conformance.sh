#!/usr/bin/env bash
# The official conformance suite 0.2 (peers/node_modules/conformance2)
# against URL, server side:
#   modern_server_conformance.sh PEERS_DIR URL requirements
#       --requirements 2026-07-28: every scenario the requirements file
#       scores for the server (its "server:" list) has a check mark, and
#       their number is that list's length (37 in 0.2.0-alpha.12)
#   modern_server_conformance.sh PEERS_DIR URL scenario NAME
#       one scenario (the pending ones: http-header-validation,
#       http-custom-header-server-validation) must pass with 0 failed
#   modern_server_conformance.sh PEERS_DIR URL 2025-11-25
#       --spec-version 2025-11-25: "0 failed" in the total, exit 0
set -uo pipefail
peers="$1"; url="$2"; mode="$3"
root="$(cd "$(dirname "$0")/../.." && pwd)"
suite="$peers/node_modules/conformance2/dist/index.js"
reqs="$peers/node_modules/conformance2/requirements/2026-07-28.yaml"
[ -f "$suite" ] || { echo "conformance 0.2 not installed in $peers" >&2; exit 1; }
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
run() { node --import "$root/tests/integration/node22-shim.mjs" "$suite" server --url "$url" "$@" >"$out" 2>&1; }
fail() { echo "modern conformance ($mode): FAILED: $*" >&2; grep -v '^\s*$' "$out" | tail -n 120 >&2; exit 1; }
case "$mode" in
requirements)
    run --requirements 2026-07-28; rc=$?
    sed -n '/=== SUMMARY ===/,$p' "$out"
    mapfile -t scored < <(awk '/^server:/{f=1;next} /^[a-z_]+:/{f=0} f && /^  - /{print $2}' "$reqs")
    [ "${#scored[@]}" -eq 37 ] || fail "expected 37 scored server scenarios in $reqs, found ${#scored[@]}"
    n=0
    for s in "${scored[@]}"; do
        if grep -q "^✓ $s: " "$out"; then n=$((n + 1)); else echo "not passed: $s" >&2; fi
    done
    [ "$n" -eq "${#scored[@]}" ] || fail "$n of ${#scored[@]} scored scenarios passed"
    [ $rc -eq 0 ] || fail "exit $rc"
    echo "modern conformance: all $n scored scenarios passed";;
scenario)
    run --spec-version 2026-07-28 --scenario "$4"; rc=$?
    sed -n '/=== SUMMARY ===/,$p' "$out"
    grep -Eq "^Passed: ([1-9][0-9]*)/\1, 0 failed" "$out" || fail "$4 did not pass"
    [ $rc -eq 0 ] || fail "exit $rc"
    echo "modern conformance: $4 passed";;
2025-11-25)
    run --spec-version 2025-11-25; rc=$?
    sed -n '/=== SUMMARY ===/,$p' "$out"
    grep -q '^Total: [1-9][0-9]* passed, 0 failed' "$out" || fail "not every scenario passed"
    ! grep -q '^✗ ' "$out" || fail "a scenario failed"
    [ $rc -eq 0 ] || fail "exit $rc"
    echo "modern conformance: 2025-11-25 all passed";;
*) echo "unknown mode $mode" >&2; exit 2;;
esac
