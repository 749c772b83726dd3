#!/usr/bin/env bash
# pahole.sh LIB STRUCT... - every growable public struct (tidemark.h,
# "Structs a caller fills") is laid out without a hole and without tail
# padding, as LIB's debug information shows it: a field a later header adds
# must never land in bytes an older program's initializer left unset.
# Exit 0: all clean; 1: a hole, padding, or a struct not found; 77: cannot
# tell (no pahole, or a library built without debug information).
set -u
lib=$1
shift
if ! command -v pahole >/dev/null; then
    echo "SKIP: pahole not installed (package dwarves; make test-deps)"
    exit 77
fi
if ! readelf -S "$lib" | grep -q '\.debug_info'; then
    echo "SKIP: $lib has no debug information (build RelWithDebInfo or Debug)"
    exit 77
fi
fail=0
for s in "$@"; do
    # pahole warns on stderr about DWARF tags it does not know (C11 _Atomic)
    out=$(pahole -C "$s" "$lib" 2>/dev/null)
    if [ -z "$out" ]; then
        echo "FAIL: struct $s is not in $lib's debug information"
        fail=1
    elif grep -Eq 'XXX|holes:|padding:' <<<"$out"; then
        echo "FAIL: struct $s has a hole or padding (pair 4-byte fields; see tidemark.h):"
        echo "$out"
        fail=1
    else
        echo "ok: struct $s, $(grep -o 'size: [0-9]*' <<<"$out" | head -1) bytes, no hole, no padding"
    fi
done
exit $fail
