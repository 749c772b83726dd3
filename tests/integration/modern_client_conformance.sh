#!/usr/bin/env bash
# The client scenarios the 2026-07-28 requirements score, run by conformance
# 0.2.0-alpha.12 (peers: conformance2) against CLIENT. Authorization is out
# of scope: its scenarios are run by the suite but not looked at here. Pass
# only when every other scored scenario passed with exactly its expected
# count of checks and none failed:
#   tools_call 2, request-metadata 8, sep-2322-client-request-state 5,
#   http-standard-headers 9, http-custom-headers 18, http-invalid-tool-headers 12,
#   json-schema-ref-no-deref 1   (55 checks)
# and the one it runs without scoring (added after the release it is
# anchored to): json-schema-2020-12-preservation 9.
# With REVISION 2025-11-25, the same suite's 2025-11-25 requirements (the
# legacy era): initialize 1, tools_call 2, elicitation-sep1034-client-defaults 5,
# sse-retry 3 (11 checks), and json-schema-2020-12-preservation 9 unscored.
#   modern_client_conformance.sh PEERS_DIR CLIENT [REVISION]
set -uo pipefail
[ $# -eq 2 ] || [ $# -eq 3 ] || { echo "usage: $0 PEERS_DIR CLIENT [REVISION]" >&2; exit 2; }
peers="$1"; client="$2"; rev="${3:-2026-07-28}"
here="$(cd "$(dirname "$0")" && pwd)"
suite="$peers/node_modules/conformance2/dist/index.js"
[ -f "$suite" ] || { echo "conformance2 not installed in $peers (run scripts/install-deps.sh)" >&2; exit 1; }
[ -x "$client" ] || { echo "no client program at $client" >&2; exit 1; }
case "$client" in *' '*) echo "the runner splits --command on spaces: $client" >&2; exit 1;; esac
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
node --import "$here/node22-shim.mjs" "$suite" client --command "$client" \
     --requirements "$rev" --timeout 30000 >"$out" 2>&1
sed -i 's/\x1b\[[0-9;]*m//g' "$out"
if [ "$rev" = 2026-07-28 ]; then
  declare -A want=([tools_call]=2 [request-metadata]=8 [sep-2322-client-request-state]=5
                   [http-standard-headers]=9 [http-custom-headers]=18
                   [http-invalid-tool-headers]=12 [json-schema-ref-no-deref]=1
                   [json-schema-2020-12-preservation]=9)
elif [ "$rev" = 2025-11-25 ]; then
  declare -A want=([initialize]=1 [tools_call]=2 [elicitation-sep1034-client-defaults]=5 [sse-retry]=3
                   [json-schema-2020-12-preservation]=9)
else
  echo "no expected counts for revision $rev" >&2; exit 2
fi
fail=0 total=0
for s in "${!want[@]}"; do
  line="$(grep -E "^✓ $s: [0-9]+ passed, 0 failed$" "$out" | head -n 1)"
  n="$(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"$line")"
  if [ -z "$line" ] || [ "$n" != "${want[$s]}" ]; then
    echo "FAIL $s: want ${want[$s]} passed, 0 failed; got: $(grep -E "^[✓✗] $s:" "$out" || echo 'not run')"
    fail=1
  else
    echo "ok   $s: $n passed, 0 failed"
    total=$((total + n))
  fi
done
# Nothing else scored but authorization may fail.
others="$(grep -E '^✗ ' "$out" | grep -v -E '^✗ auth/')"
if [ -n "$others" ]; then
  echo "FAIL scenarios other than authorization failed:"; echo "$others"; fail=1
fi
if [ $fail -ne 0 ]; then
  echo "--- the runner's report ---" >&2
  cat "$out" >&2
  exit 1
fi
echo "conformance2 client, $rev requirements: ${#want[@]} scenarios, $total checks passed (authorization not scored here)"
