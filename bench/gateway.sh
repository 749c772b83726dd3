#!/usr/bin/env bash
# Gateways side by side: the official server-everything (stdio) behind
# tidemark-gateway (memory store, and SQLite at the default durability) and
# behind supergateway 4.0.0 (stdio -> Streamable HTTP, --stateful), in one
# run:
#   tools/call echo from 16 keep-alive connections (tidemark-rps, a 2025
#     session per connection, --echo-arg message), the median of REPS runs of
#     SECONDS, the three interleaved within a repetition;
#   the cut-and-resume scenario (tests/integration/sdk_client.mjs, profile
#     everything: the official TypeScript SDK client cut after 5 of 40
#     progress notifications, then resumed with Last-Event-ID): each
#     gateway's real result is printed, not asserted.
#
#   bash bench/gateway.sh BUILD_DIR [REPS] [SECONDS]      (part of make bench)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:?usage: gateway.sh BUILD_DIR [REPS] [SECONDS]}"
reps="${2:-3}"
secs="${3:-3}"
gateway="$build/bin/tidemark-gateway"
rps="$build/bin/tidemark-rps"
node="${NODE:-node}"
everything="$root/peers/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
superg="$root/peers/node_modules/supergateway/dist/index.js"
for b in "$gateway" "$rps"; do
    [ -x "$b" ] || { echo "bench/gateway.sh: $b not built" >&2; exit 1; }
done
for f in "$everything" "$superg"; do
    [ -f "$f" ] || { echo "bench/gateway.sh: $f not installed (npm ci in peers/)" >&2; exit 1; }
done
scratch="$(mktemp -d "$build/gateway-bench.XXXXXX")"
pids=()
cleanup() { set +e; for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$scratch"; }
trap cleanup EXIT

free_port() { "$node" -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'; }
wait_port() { # port pid errfile: until something accepts on port (60 s), while pid lives
    local end=$((SECONDS + 60))
    while [ "$SECONDS" -lt "$end" ]; do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        if ! kill -0 "$2" 2>/dev/null; then
            echo "bench/gateway.sh: the process for port $1 exited; its stderr:" >&2
            cat "$3" >&2; exit 1
        fi
        sleep 0.05
    done
    echo "bench/gateway.sh: nothing listens on $1 after 60 s; stderr so far:" >&2
    cat "$3" >&2; exit 1
}
start_tidemark() { # name store -> url in $url
    local port; port="$(free_port)"
    "$gateway" --listen "127.0.0.1:$port" --store "$2" --log-level warn \
        --stdio "$node $everything stdio" >"$scratch/$1.out" 2>"$scratch/$1.err" &
    pids+=($!)
    wait_port "$port" "$!" "$scratch/$1.err"
    url="http://127.0.0.1:$port/mcp"
}
start_super() { # -> url in $url
    local port; port="$(free_port)"
    "$node" "$superg" --stdio "$node $everything stdio" --outputTransport streamableHttp --stateful \
        --port "$port" --logLevel none >"$scratch/super.out" 2>"$scratch/super.err" &
    pids+=($!)
    wait_port "$port" "$!" "$scratch/super.err"
    url="http://127.0.0.1:$port/mcp"
}
median() { sort -n | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p"; }

start_tidemark memory memory; u_mem="$url"
start_tidemark sqlite "sqlite:$scratch/gw.db"; u_sql="$url"
start_super; u_sup="$url"
names=(tidemark-memory tidemark-sqlite supergateway)
urls=("$u_mem" "$u_sql" "$u_sup")

echo
echo "## Gateways: server-everything behind each, tools/call echo from 16 connections"
echo "## (median of $reps x ${secs} s, calls/s and p50 ms; a session per connection)"
for i in 0 1 2; do : >"$scratch/r$i"; done
for _ in $(seq "$reps"); do
    for i in 0 1 2; do
        "$rps" --url "${urls[$i]}" --conns 16 --seconds "$secs" --warmup 1 --echo-arg message \
            >>"$scratch/r$i" 2>>"$scratch/rps.err" || echo "(errors from ${names[$i]})" >>"$scratch/r$i.bad"
    done
done
printf '%-18s %10s %8s %8s\n' gateway calls/s p50_ms p99_ms
for i in 0 1 2; do
    r=$(field rps <"$scratch/r$i" | median); p=$(field p50_ms <"$scratch/r$i" | median)
    q=$(field p99_ms <"$scratch/r$i" | median)
    printf '%-18s %10s %8s %8s%s\n' "${names[$i]}" "${r:-0}" "${p:--}" "${q:--}" \
        "$([ -s "$scratch/r$i.bad" ] && echo '  (some runs had wrong answers)')"
done

echo
echo "## The cut-and-resume scenario (official SDK client, cut after 5 of 40 progress), as it came out"
for i in 0 1 2; do
    out="$(SDK_CLIENT_PROFILE=everything TIDEMARK_PEERS_DIR="$root/peers" \
        "$node" "$root/tests/integration/sdk_client.mjs" "${urls[$i]}" 2>&1 || true)"
    line="$(printf '%s\n' "$out" | grep -E '^(PASS|FAIL) 4|^FAIL' | head -1)"
    printf '%-18s %s\n' "${names[$i]}" "${line:-$(printf '%s\n' "$out" | tail -1)}"
done
