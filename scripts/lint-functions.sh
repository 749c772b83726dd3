#!/usr/bin/env bash
# Lists library functions longer than MAX lines (default 100) and fails when
# there is any. A function is what runs from a '{' in column 0 to the next
# '}' in column 0 (the layout every file here uses); its name is taken from
# the line that opens it. Usage: lint-functions.sh [MAX] [DIR...]
set -euo pipefail
max="${1:-100}"
shift || true
dirs=("$@")
[ "${#dirs[@]}" -gt 0 ] || dirs=("$(cd "$(dirname "$0")/.." && pwd)/src")
files=$(find "${dirs[@]}" -name '*.c' | sort)
[ -n "$files" ] || { echo "lint-functions: no .c files in ${dirs[*]}" >&2; exit 2; }
# shellcheck disable=SC2086
awk -v max="$max" '
    FNR == 1 { depth = 0 }
    /^[A-Za-z_].*\(/ { sig = $0; sigline = FNR }
    /^\{/ { if (sigline) { start = FNR; name = sig; open = 1 } }
    /^\}/ {
        if (open) {
            n = FNR - start - 1
            if (n > max) { printf "%s:%d: %d lines: %s\n", FILENAME, sigline, n, name; bad++ }
            open = 0; sigline = 0
        }
    }
    END { if (bad) { printf "%d function(s) longer than %d lines\n", bad, max; exit 1 } }
' $files
