#!/usr/bin/env bash
# The authorization scenarios of the official conformance suite
# (0.2.0-alpha.12, peers: conformance2) against CLIENT, each with its exact
# count of checks passed, none failed, no warnings:
#   client_auth_conformance.sh PEERS_DIR CLIENT 2025-11-25   client --suite auth --spec-version 2025-11-25
#   client_auth_conformance.sh PEERS_DIR CLIENT 2025-03-26   the two 2025-03-26 backcompat scenarios
#   client_auth_conformance.sh PEERS_DIR CLIENT 2026-07-28   the auth/* scenarios of --requirements
#                                                            2026-07-28 (extensions are not scored)
set -uo pipefail
[ $# -eq 3 ] || { echo "usage: $0 PEERS_DIR CLIENT REVISION" >&2; exit 2; }
peers="$1"; client="$2"; rev="$3"
here="$(cd "$(dirname "$0")" && pwd)"
suite="$peers/node_modules/conformance2/dist/index.js"
[ -f "$suite" ] || { echo "conformance2 not installed in $peers (run scripts/install-deps.sh)" >&2; exit 1; }
[ -x "$client" ] || { echo "no client program at $client" >&2; exit 1; }
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
run() { node --import "$here/node22-shim.mjs" "$suite" client --command "$client" --timeout 30000 "$@" >>"$out" 2>&1; }
case "$rev" in
  2025-11-25)
    run --suite auth --spec-version 2025-11-25
    declare -A want=([auth/metadata-default]=18 [auth/metadata-var1]=18 [auth/metadata-var2]=18
      [auth/metadata-var3]=18 [auth/basic-cimd]=13 [auth/scope-from-www-authenticate]=14
      [auth/scope-from-scopes-supported]=14 [auth/scope-omitted-when-undefined]=14
      [auth/scope-step-up]=22 [auth/scope-retry-limit]=26 [auth/token-endpoint-auth-basic]=19
      [auth/token-endpoint-auth-post]=19 [auth/token-endpoint-auth-none]=19 [auth/pre-registration]=13) ;;
  2025-03-26)
    # One scenario per run: the runner prints "Passed: N/N" for each.
    for s in auth/2025-03-26-oauth-metadata-backcompat auth/2025-03-26-oauth-endpoint-fallback; do
      echo "=== $s" >>"$out"; run --scenario "$s" --spec-version 2025-03-26
    done
    sed -i 's/\x1b\[[0-9;]*m//g' "$out"
    # Rewrite each single-scenario result as the suite's one-line form.
    awk '/^=== /{s=$2} /^Passed: [0-9]+\/[0-9]+, 0 failed, 0 warnings/{v=$2; sub(/,$/,"",v); split(v,a,"/"); if (a[1]==a[2]) print "✓ " s ": " a[1] " passed, 0 failed"}' "$out" >"$out.sum"; cat "$out.sum" >>"$out"; rm -f "$out.sum"
    declare -A want=([auth/2025-03-26-oauth-metadata-backcompat]=12 [auth/2025-03-26-oauth-endpoint-fallback]=7) ;;
  2026-07-28)
    run --requirements 2026-07-28
    declare -A want=([auth/metadata-default]=18 [auth/metadata-var1]=18 [auth/metadata-var2]=18
      [auth/metadata-var3]=18 [auth/basic-cimd]=12 [auth/scope-from-www-authenticate]=14
      [auth/scope-from-scopes-supported]=14 [auth/scope-omitted-when-undefined]=14
      [auth/scope-step-up]=25 [auth/scope-retry-limit]=27 [auth/token-endpoint-auth-basic]=19
      [auth/token-endpoint-auth-post]=19 [auth/token-endpoint-auth-none]=19 [auth/pre-registration]=12
      [auth/resource-mismatch]=3 [auth/offline-access-scope]=12 [auth/offline-access-not-supported]=14
      [auth/authorization-server-migration]=27 [auth/iss-supported]=14 [auth/iss-not-advertised]=14
      [auth/iss-supported-missing]=13 [auth/iss-wrong-issuer]=13 [auth/iss-unexpected]=13
      [auth/iss-normalized]=13 [auth/metadata-issuer-mismatch]=5) ;;
  *) echo "no expected counts for revision $rev" >&2; exit 2 ;;
esac
sed -i 's/\x1b\[[0-9;]*m//g' "$out"
fail=0 total=0
for s in $(printf '%s\n' "${!want[@]}" | sort); do
  line="$(grep -E "^✓ $s: [0-9]+ passed, 0 failed$" "$out" | head -n 1)"
  n="$(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"$line")"
  if [ -z "$line" ] || [ "$n" != "${want[$s]}" ]; then
    echo "FAIL $s: want ${want[$s]} passed, 0 failed; got: $(grep -E "^[✓✗] $s:" "$out" || echo 'not run')"
    fail=1
  else
    echo "ok   $s: $n passed"
    total=$((total + n))
  fi
done
# Every scored auth scenario is listed above: one run but not listed fails too.
extra="$(grep -E '^[✓✗] auth/' "$out" | sed -E 's/^[✓✗] ([^:]+):.*/\1/' | while read -r s; do
  [ -n "${want[$s]+x}" ] || grep -q "^$s\$" <<<"auth/client-credentials-jwt
auth/client-credentials-basic
auth/enterprise-managed-authorization
auth/dpop
auth/dpop-nonce
auth/wif-jwt-bearer" || echo "$s"; done)"
if [ -n "$extra" ]; then echo "FAIL auth scenarios without expected counts: $extra"; fail=1; fi
if [ $fail -ne 0 ]; then
  echo "--- the runner's report ---" >&2
  cat "$out" >&2
  exit 1
fi
echo "conformance2 client auth, $rev: ${#want[@]} scenarios, $total checks passed"
