#!/usr/bin/env bash
# Instructions per tools/call echo in tidemark-server, counted by callgrind:
# instructions do not depend on what else the shared machine is doing, so
# a change to the request path shows here when calls/s is too noisy.
# For each store (memory, SQLite power) and era (2025-11-25 with a session
# per connection, 2026-07-28 without): the server runs under
# valgrind --tool=callgrind; tidemark-rps warms it up from one connection
# (WARM seconds), the counters are zeroed (callgrind_control -z), tidemark-rps
# makes calls for SECONDS, the counters are dumped (callgrind_control -d);
# instructions/call = the dump's total (every thread of the server process,
# user space) / the calls tidemark-rps counted. The issue's target: 60,000.
# First the same count for tidemark-deps-floor (bench/deps_floor.c): what
# libmicrohttpd and jansson alone cost for the exchange; each row is also
# printed as a multiple of it.
#
#   bash bench/instructions.sh BUILD_DIR [SECONDS] [WARM]     (part of make bench)
set -euo pipefail
build="${1:?usage: instructions.sh BUILD_DIR [SECONDS] [WARM]}"
secs="${2:-5}"
warm="${3:-2}"
build="$(cd "$build" && pwd)"
bin="$build/bin"
for t in valgrind callgrind_control; do
    command -v "$t" >/dev/null || { echo "bench/instructions.sh: $t not found (apt-get install valgrind)" >&2; exit 1; }
done
scratch="$(mktemp -d "$build/instructions-bench.XXXXXX")"
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$scratch"; }
trap cleanup EXIT

# measure STORE ERA -> prints "calls instructions_per_call"
measure() {
    local store="$1" era="$2" uri="$1" url=""
    [ "$store" = sqlite ] && uri="sqlite:$scratch/$era.db"
    local cmd=("$bin/tidemark-server" --listen 127.0.0.1:0 --store "$uri" --log-level warn)
    [ "$store" = deps ] && cmd=("$bin/tidemark-deps-floor")
    : >"$scratch/out"
    # self-contained dumps (no name compression across parts)
    valgrind --tool=callgrind --compress-strings=no --compress-pos=no \
        --callgrind-out-file="$scratch/cg.$store.$era.%p" "${cmd[@]}" \
        >"$scratch/out" 2>"$scratch/err" &
    pid=$!
    for _ in $(seq 600); do
        url="$(sed -n 's/^listening on //p' "$scratch/out")"
        [ -n "$url" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    [ -n "$url" ] || { echo "bench/instructions.sh: server did not start: $(tail -3 "$scratch/err")" >&2; exit 1; }
    "$bin/tidemark-rps" --url "$url" --era "$era" --conns 1 --seconds "$warm" --warmup 0 >/dev/null
    callgrind_control -z "$pid" >/dev/null
    local res calls
    res="$("$bin/tidemark-rps" --url "$url" --era "$era" --conns 1 --seconds "$secs" --warmup 0)"
    callgrind_control -d "$pid" >/dev/null
    calls="$(sed -n 's/.* calls=\([0-9]*\).*/\1/p' <<<"$res")"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    pid=""
    # the dump of the zeroed interval is the highest-numbered part
    local dump ir
    dump="$(ls "$scratch"/cg."$store"."$era".*.[0-9]* 2>/dev/null | sort -t. -k5 -n | tail -1)"
    ir="$(sed -n 's/^summary: //p' "$dump" | head -1)"
    [ -n "$calls" ] && [ "$calls" -gt 0 ] && [ -n "$ir" ] ||
        { echo "bench/instructions.sh: no measurement ($res)" >&2; exit 1; }
    echo "$calls $((ir / calls))"
}

echo
echo "## Instructions per tools/call echo (callgrind, server process, ${secs} s from 1 connection)"
printf '%-8s %-8s %8s %18s %10s\n' store era calls instructions/call target
declare -A floor
for era in legacy modern; do
    m="$(measure deps "$era")" || exit 1
    read -r calls per <<<"$m"
    floor[$era]=$per
done
for store in memory sqlite; do
    for era in legacy modern; do
        m="$(measure "$store" "$era")" || exit 1
        read -r calls per <<<"$m"
        met="not met"
        [ "$per" -le 60000 ] && met="met"
        printf '%-8s %-8s %8s %18s %10s %-8s %5.2f x deps floor\n' "$store" "$era" "$calls" "$per" 60000 "$met" \
            "$(awk -v a="$per" -v b="${floor[$era]}" 'BEGIN { print a / b }')"
    done
done
echo
echo "deps floor (tidemark-deps-floor: libmicrohttpd with tidemark's options and pool, the body"
echo "parsed, the answer built and dumped by jansson, nothing of tidemark's): legacy ${floor[legacy]},"
echo "modern ${floor[modern]} instructions per call: what those two libraries cost here for the"
echo "exchange, used as tidemark uses them, before any work of tidemark's."
