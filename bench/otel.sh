#!/usr/bin/env bash
# What tracing costs (issue 33), side by side:
#  1. instructions per tools/call echo (callgrind, server process, memory
#     store, both eras, 1 connection) of BASE_BUILD's tidemark-server (no
#     tracing compiled in) and NEW_BUILD's with tracing compiled in but not
#     configured (no OTEL_* variable): the target is within 2 %;
#  2. calls/s of NEW_BUILD's tidemark-server with tracing off and with
#     every call sampled (OTEL_TRACES_SAMPLER=always_on, exported over
#     OTLP/HTTP to a local receiver that answers 200), memory store,
#     1 and 16 connections, both eras, off and on interleaved in each
#     repetition, median of REPS runs of SECONDS: the target is on >= 0.9 x off.
#
#   bash bench/otel.sh BASE_BUILD NEW_BUILD [REPS] [SECONDS] [CG_SECONDS]
# PARTS="cg rps" (default) runs both parts; PARTS=cg or PARTS=rps one.
# OTLP_PROTOCOL: the encoding of the traced runs (http/protobuf, the
# default, or http/json).
# CG_ROUNDS (3): callgrind rounds, base and new interleaved; the median is
# printed (one count moves by about 2 % from run to run with batching).
set -euo pipefail
parts="${PARTS:-cg rps}"
base="$(cd "${1:?usage: otel.sh BASE_BUILD NEW_BUILD [REPS] [SECONDS] [CG_SECONDS]}" && pwd)"
new="$(cd "${2:?usage: otel.sh BASE_BUILD NEW_BUILD [REPS] [SECONDS] [CG_SECONDS]}" && pwd)"
reps="${3:-5}"
secs="${4:-3}"
cgsecs="${5:-5}"
proto="${OTLP_PROTOCOL:-http/protobuf}"
rps="$new/bin/tidemark-rps"
for b in "$base/bin/tidemark-server" "$new/bin/tidemark-server" "$rps"; do
    [ -x "$b" ] || { echo "bench/otel.sh: $b not built" >&2; exit 1; }
done
for t in valgrind callgrind_control node; do
    command -v "$t" >/dev/null || { echo "bench/otel.sh: $t not found" >&2; exit 1; }
done
scratch="$(mktemp -d "${TMPDIR:-/tmp}/otel-bench.XXXXXX")"
pid="" rpid=""
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null
    [ -n "$rpid" ] && kill "$rpid" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$scratch"
}
trap cleanup EXIT

median() { sort -n | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

wait_url() { # file -> prints the URL the process printed
    for _ in $(seq 600); do
        local u
        u="$(sed -n 's/^listening on //p' "$1")"
        [ -n "$u" ] && { echo "$u"; return 0; }
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    echo "bench/otel.sh: did not start: $(tail -3 "$scratch/err")" >&2
    return 1
}

# cg BIN ERA [VAR=VALUE...] -> "calls instructions_per_call" (as
# bench/instructions.sh); with tracing on, the exporter's work is counted
# too: the dump waits for the queue to be exported (schedule delay 200 ms).
cg() {
    local bin="$1" era="$2"
    shift 2
    : >"$scratch/out"
    env "$@" valgrind --tool=callgrind --compress-strings=no --compress-pos=no \
        --callgrind-out-file="$scratch/cg.%p" "$bin" --listen 127.0.0.1:0 --store memory \
        --log-level warn >"$scratch/out" 2>"$scratch/err" &
    pid=$!
    local url res calls dump ir
    url="$(wait_url "$scratch/out")"
    "$rps" --url "$url" --era "$era" --conns 1 --seconds 2 --warmup 0 >/dev/null
    sleep 1
    callgrind_control -z "$pid" >/dev/null 2>&1
    res="$("$rps" --url "$url" --era "$era" --conns 1 --seconds "$cgsecs" --warmup 0)"
    sleep 1
    callgrind_control -d "$pid" >/dev/null 2>&1
    calls="$(sed -n 's/.* calls=\([0-9]*\).*/\1/p' <<<"$res")"
    kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
    dump="$(ls "$scratch"/cg.*.[0-9]* | sort -t. -k3 -n | tail -1)"
    ir="$(sed -n 's/^summary: //p' "$dump" | head -1)"
    rm -f "$scratch"/cg.*
    echo "$calls $((ir / calls))"
}

# The OTLP receiver: answers every POST 200 and counts bytes, nothing
# more (it shares the 2 cores with the server: parsing the JSON here would
# be charged to tracing; the server's own counters say what was exported).
cat >"$scratch/recv.mjs" <<'EOF'
import { createServer } from "node:http";
let posts = 0, bytes = 0;
const s = createServer((q, r) => {
  q.on("data", (d) => { bytes += d.length; });
  q.on("end", () => { posts++; r.writeHead(200, { "content-type": "application/json" }); r.end("{}"); });
});
process.on("SIGTERM", () => { console.log(`posts ${posts} bytes ${bytes}`); process.exit(0); });
s.listen(0, "127.0.0.1", () => console.log(`listening on http://127.0.0.1:${s.address().port}`));
EOF
node "$scratch/recv.mjs" >"$scratch/recv" 2>&1 &
rpid=$!
for _ in $(seq 100); do grep -q '^listening' "$scratch/recv" && break; sleep 0.05; done
otlp="$(sed -n 's/^listening on //p' "$scratch/recv")"

if [[ " $parts " == *" cg "* ]]; then
echo "## Instructions per tools/call echo: no tracing compiled in vs compiled in, unconfigured"
echo "## (callgrind, server process, memory store, ${cgsecs} s from 1 connection)"
echo "base: $base  new: $new"
echo "## and, as a CPU-cost proxy for the calls/s target, new with every call sampled and"
echo "## exported as $proto (the exporter thread's instructions included)"
printf '%-8s %10s %10s %8s %10s %8s   %s\n' era base new new/base on new/on "rounds (base / new / on)"
for era in legacy modern; do
    bs=() ns=() os=()
    for _ in $(seq "${CG_ROUNDS:-3}"); do
        read -r _ b <<<"$(cg "$base/bin/tidemark-server" "$era")"
        read -r _ n <<<"$(cg "$new/bin/tidemark-server" "$era")"
        read -r _ o <<<"$(cg "$new/bin/tidemark-server" "$era" OTEL_EXPORTER_OTLP_ENDPOINT="$otlp" \
            OTEL_EXPORTER_OTLP_PROTOCOL="$proto" OTEL_TRACES_SAMPLER=always_on OTEL_BSP_SCHEDULE_DELAY=200)"
        bs+=("$b"); ns+=("$n"); os+=("$o")
    done
    b=$(printf '%s\n' "${bs[@]}" | median); n=$(printf '%s\n' "${ns[@]}" | median)
    o=$(printf '%s\n' "${os[@]}" | median)
    printf '%-8s %10s %10s %8s %10s %8s   %s / %s / %s\n' "$era" "$b" "$n" \
        "$(awk -v a="$n" -v b="$b" 'BEGIN {printf "%.4f", a / b}')" "$o" \
        "$(awk -v a="$o" -v b="$n" 'BEGIN {printf "%.3f", b / a}')" "${bs[*]}" "${ns[*]}" "${os[*]}"
done
fi
[[ " $parts " == *" rps "* ]] || exit 0


start() { # mode (off|on) -> sets url
    if [ "$1" = on ]; then
        OTEL_EXPORTER_OTLP_ENDPOINT="$otlp" OTEL_EXPORTER_OTLP_PROTOCOL="$proto" \
        OTEL_TRACES_SAMPLER=always_on OTEL_SERVICE_NAME=bench \
            "$new/bin/tidemark-server" --listen 127.0.0.1:0 --store memory --log-level warn \
            >"$scratch/out" 2>"$scratch/err" &
    else
        "$new/bin/tidemark-server" --listen 127.0.0.1:0 --store memory --log-level warn \
            >"$scratch/out" 2>"$scratch/err" &
    fi
    pid=$!
    url="$(wait_url "$scratch/out")"
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""; }
field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p"; }

echo
echo "## Calls/s, tracing off vs on with every call sampled (memory store, median of $reps x ${secs} s)"
printf '%-8s %-6s %10s %10s %8s %10s %10s\n' era conns off on on/off exported dropped
for era in legacy modern; do
    for conns in 1 16; do
        : >"$scratch/off"; : >"$scratch/on"; dropped=0; exported=0
        for _ in $(seq "$reps"); do
            for mode in off on; do
                start "$mode"
                "$rps" --url "$url" --era "$era" --conns "$conns" --seconds "$secs" --warmup 0.5 >>"$scratch/$mode"
                if [ "$mode" = on ]; then
                    curl -s "${url%/mcp}/metrics" >"$scratch/metrics"
                    d="$(sed -n 's/^tidemark_otel_spans_dropped_total //p' "$scratch/metrics")"
                    e="$(sed -n 's/^tidemark_otel_spans_exported_total //p' "$scratch/metrics")"
                    dropped=$((dropped + ${d:-0})); exported=$((exported + ${e:-0}))
                fi
                stop
            done
        done
        off=$(field rps <"$scratch/off" | median); on=$(field rps <"$scratch/on" | median)
        printf '%-8s %-6s %10s %10s %8s %10s %10s\n' "$era" "$conns" "$off" "$on" \
            "$(awk -v a="$on" -v b="$off" 'BEGIN {printf "%.3f", b ? a / b : 0}')" "$exported" "$dropped"
    done
done
kill "$rpid"; wait "$rpid" 2>/dev/null || true; rpid=""
echo
echo "receiver: $(grep '^posts' "$scratch/recv" || echo 'posts ?') in all; exported/dropped: the"
echo "server's counters at the end of each run (spans still queued then are in neither)"
