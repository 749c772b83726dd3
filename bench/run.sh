#!/usr/bin/env bash
# Run tidemark-bench once and keep its report.
#
#   bash bench/run.sh [BUILD_DIR] [tidemark-bench options...]     (make bench)
#
# The report is printed and written to bench/results/<UTC date-time>.txt and
# bench/results/latest.txt. Scratch databases go into BUILD_DIR, not /tmp:
# /tmp is often tmpfs, where fsync is free and 'power' would measure nothing.
# Progress lines go to stderr only, so the files hold just the report.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-build}"
[ $# -gt 0 ] && shift
case "$build" in /*) ;; *) build="$root/$build" ;; esac
bin="$build/bin/tidemark-bench"
if [ ! -x "$bin" ]; then
    echo "bench/run.sh: $bin not built (it needs libcurl: apt-get install libcurl4-openssl-dev," >&2
    echo "then cmake -S . -B build && cmake --build build)" >&2
    exit 1
fi

results="$root/bench/results"
mkdir -p "$results"
stamp="$(date -u +%Y%m%d-%H%M%S)"
out="$results/$stamp.txt"
tmp="$out.tmp"
trap 'rm -f "$tmp"' EXIT

{
    rev="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    if [ -n "$(git -C "$root" status --porcelain -- src include 2>/dev/null)" ]; then
        rev="$rev+uncommitted library changes"
    fi
    echo "# tidemark $rev; $(uname -srm); $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')"
} >"$tmp"

# The report goes to the file and the terminal; a failed run keeps no file.
if ! "$bin" --dir "$build" "$@" | tee -a "$tmp"; then
    echo "bench/run.sh: tidemark-bench failed; no results written" >&2
    exit 1
fi
# Then the scripts, in order (each into the same report):
#   instructions.sh  instructions per echo call (callgrind): both eras on
#                memory and SQLite;
#   requests.sh  the request path: both eras on memory and SQLite;
#   tasks.sh     the tasks extension: create -> terminal, tasks/get on one
#                node (SQLite) and three (Redis behind HAProxy);
#   http.sh      HTTP side by side: a floor server, the TypeScript SDK and
#                tidemark on memory / SQLite / Redis; the raw SQLite loop;
#                10,000 streams;
#   gateway.sh   server-everything behind tidemark-gateway and behind
#                supergateway: rps and the cut-and-resume run.
for script in instructions requests tasks http gateway; do
    if ! bash "$root/bench/$script.sh" "$build" | tee -a "$tmp"; then
        echo "bench/run.sh: bench/$script.sh failed; no results written" >&2
        exit 1
    fi
done
mv "$tmp" "$out"
cp "$out" "$results/latest.txt"
echo "results: ${out#$root/} (and bench/results/latest.txt)"
