#!/usr/bin/env bash
# The request path side by side: tools/call echo through tidemark-server in
# the 2025 era (a session per connection) and the 2026-07-28 era (no
# session), on the memory and the SQLite store, from 1 and from 16 keep-alive
# connections (bench/rps.c). Each cell is the median of REPS runs of SECONDS,
# the eras interleaved within a repetition so a busy moment of the shared
# machine hits both; the last column is modern / legacy.
#
#   bash bench/requests.sh BUILD_DIR [REPS] [SECONDS]      (part of make bench)
set -euo pipefail
build="${1:?usage: requests.sh BUILD_DIR [REPS] [SECONDS]}"
reps="${2:-3}"
secs="${3:-3}"
server="$build/bin/tidemark-server"
rps="$build/bin/tidemark-rps"
for b in "$server" "$rps"; do
    [ -x "$b" ] || { echo "bench/requests.sh: $b not built" >&2; exit 1; }
done
scratch="$(mktemp -d "$build/requests-bench.XXXXXX")"
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$scratch"; }
trap cleanup EXIT

start_server() { # store -> sets url
    "$server" --listen 127.0.0.1:0 --store "$1" --log-level warn >"$scratch/out" 2>"$scratch/err" &
    pid=$!
    for _ in $(seq 200); do
        url="$(sed -n 's/^listening on //p' "$scratch/out")"
        [ -n "$url" ] && return 0
        sleep 0.05
    done
    echo "bench/requests.sh: tidemark-server did not start: $(cat "$scratch/err")" >&2
    exit 1
}
stop_server() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""; }
median() { sort -n | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p"; }

echo
echo "## Request path: tools/call echo, calls/s (median of $reps x ${secs} s), p50 ms"
printf '%-8s %-6s %16s %16s %8s\n' store conns legacy modern ratio
for store in memory sqlite; do
    uri="$store"
    [ "$store" = sqlite ] && uri="sqlite:$scratch/bench.db"
    start_server "$uri"
    for conns in 1 16; do
        : >"$scratch/legacy"; : >"$scratch/modern"
        for _ in $(seq "$reps"); do
            for era in legacy modern; do
                "$rps" --url "$url" --era "$era" --conns "$conns" --seconds "$secs" --warmup 0.5 \
                    >>"$scratch/$era"
            done
        done
        l=$(field rps <"$scratch/legacy" | median); lp=$(field p50_ms <"$scratch/legacy" | median)
        m=$(field rps <"$scratch/modern" | median); mp=$(field p50_ms <"$scratch/modern" | median)
        printf '%-8s %-6s %9s %6s %9s %6s %8s\n' "$store" "$conns" "$l" "$lp" "$m" "$mp" \
            "$(awk -v a="$m" -v b="$l" 'BEGIN {printf "%.2f", b ? a / b : 0}')"
    done
    stop_server
done
