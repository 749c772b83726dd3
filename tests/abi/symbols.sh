#!/usr/bin/env bash
# symbols.sh LIB LIST HEADER... - LIB exports exactly the symbols of LIST
# (src/tidemark.sym, one name a line), and each of them is declared
# TIDEMARK_API in one of the public HEADERs. A symbol added or removed is
# an ABI change: update LIST in the same commit, on purpose.
set -u
lib=$1 list=$2
shift 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nm -D --defined-only "$lib" | awk '{print $NF}' | sort -u >"$tmp/exported"
grep -v '^[[:space:]]*$' "$list" | sort -u >"$tmp/listed"
if [ ! -s "$tmp/exported" ]; then
    echo "FAIL: nm -D found no symbol in $lib"
    exit 1
fi
fail=0
if ! diff -u "$tmp/listed" "$tmp/exported" >"$tmp/diff"; then
    echo "FAIL: $lib exports other symbols than $list (- listed only, + exported only):"
    cat "$tmp/diff"
    fail=1
fi
while read -r sym; do
    if ! grep -q "TIDEMARK_API.*[ *]$sym(" "$@" && ! grep -q "^[[:space:]]*$sym(" "$@"; then
        echo "FAIL: $sym is exported but declared TIDEMARK_API in no public header"
        fail=1
    fi
done <"$tmp/exported"
[ "$fail" = 0 ] && echo "ok: $(wc -l <"$tmp/exported") symbols, as $list lists them"
exit $fail
