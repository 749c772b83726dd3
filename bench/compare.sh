#!/usr/bin/env bash
# Side by side: the headline figures of BASE (a commit) against the working
# tree, in one run, so that a regression shows as a ratio.
#   bash bench/compare.sh BASE [ROUNDS] [SECONDS] [STREAMS]     (make bench-compare BASE=...)
# NEW=<commit> in the environment (make bench-compare ... NEW=...) compares
# with that commit, built in a worktree too, instead of the working tree.
# BASE is built in a git worktree (build-compare/base-<sha>, only
# tidemark-server, RelWithDebInfo); the working tree in build-compare/new
# (tidemark-server and the load generators, which both sides share). Both
# servers run on this machine at once; every figure is measured ROUNDS (3)
# times, base and new interleaved (the order flips each round), and the
# medians are printed with new/base:
#   stream     one tools/call stream {n: 10000} (a fresh 2025 session, a
#              progress token), events/s from sending the POST to the end of
#              its answer, on memory, SQLite process, SQLite power (and
#              Redis power when redis-server is here)
#   echo, ledger_append   tidemark-rps, 1 and 16 connections, SECONDS (2)
#              each, on SQLite power (echo writes nothing: durability is
#              measured by ledger_append and stream); ledger_append from 16
#              connections on Redis power too (both sides on one
#              redis-server, databases 1 and 2, never at once)
#   resume     GET with Last-Event-ID of a 1,000-event stream, ms (SQLite power)
#   RSS        STREAMS (10000) open GET streams on a fresh memory server
#              (tidemark-streams), MB, once per side
#   instructions per streamed event, callgrind, one 2,000-event stream on
#              SQLite power, when valgrind is here (once per side; exact)
#   TS SDK     the same stream from the TypeScript SDK server
#              (bench/sdk_echo_server.mjs, when node and the pinned SDK are
#              here), in the same rounds: one figure, printed after the table
#              with the new SQLite power stream's multiple of it
# Wall-clock figures move with the shared machine's load: read the ratios,
# and the instruction counts when they disagree.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
base="${1:?usage: compare.sh BASE [ROUNDS] [SECONDS] [STREAMS]}"
rounds="${2:-3}"
secs="${3:-2}"
nstreams="${4:-10000}"
out="$root/build-compare"
sha="$(git -C "$root" rev-parse --short "$base^{commit}")"
wt="$out/base-$sha"
log() { echo "bench/compare.sh: $*" >&2; }
mkdir -p "$out"

cfg=(-DTIDEMARK_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo)
if [ ! -d "$wt/src" ]; then
    log "worktree for $sha"
    git -C "$root" worktree add --detach "$wt" "$sha" >/dev/null
fi
newsrc="$root"
newname="working tree at $(git -C "$root" rev-parse --short HEAD)"
if [ -n "${NEW:-}" ]; then
    nsha="$(git -C "$root" rev-parse --short "$NEW^{commit}")"
    newsrc="$out/new-$nsha"
    newname="$nsha"
    [ -d "$newsrc/src" ] || git -C "$root" worktree add --detach "$newsrc" "$nsha" >/dev/null
fi
log "building base $sha and $newname"
cmake -S "$wt" -B "$wt/build" "${cfg[@]}" >/dev/null
cmake --build "$wt/build" -j2 --target tidemark-server >"$out/base.log" 2>&1 ||
    { log "base build failed: $out/base.log"; exit 1; }
rm -f "$out/new/CMakeCache.txt" # the source may change between runs
cmake -S "$newsrc" -B "$out/new" "${cfg[@]}" >/dev/null
cmake --build "$out/new" -j2 --target tidemark-server tidemark-rps tidemark-streams \
    >"$out/new.log" 2>&1 || { log "build failed: $out/new.log"; exit 1; }
declare -A srvbin=([base]="$wt/build/bin/tidemark-server" [new]="$out/new/bin/tidemark-server")
bin="$out/new/bin"

scratch="$(mktemp -d "$out/run.XXXXXX")" # on disk: fsync must cost what it costs
pids=()
cleanup() {
    set +e
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$scratch"
}
trap cleanup EXIT
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

declare -A url pid
# start NAME CMD...: waits for its "listening on URL" line (20 s)
start() {
    local name="$1"; shift
    : >"$scratch/$name.out"
    "$@" >"$scratch/$name.out" 2>"$scratch/$name.err" &
    pid[$name]=$!
    pids+=("$!")
    local deadline=$((SECONDS + 20))
    while [ $SECONDS -lt $deadline ]; do
        url[$name]="$(sed -n 's/^listening on //p' "$scratch/$name.out")"
        [ -n "${url[$name]}" ] && return 0
        kill -0 "${pid[$name]}" 2>/dev/null || break
        sleep 0.05
    done
    log "$name did not start: $(tail -3 "$scratch/$name.err")"
    exit 1
}
stop() { kill "${pid[$1]}" 2>/dev/null || true; wait "${pid[$1]}" 2>/dev/null || true; }

rport=""
if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
    rport=$((20000 + RANDOM % 20000))
    mkdir -p "$scratch/redis"
    redis-server --port "$rport" --bind 127.0.0.1 --dir "$scratch/redis" --appendonly yes \
        --appendfsync always --save '' --protected-mode no --daemonize no --loglevel warning \
        >"$scratch/redis.out" 2>&1 &
    pids+=("$!")
    for _ in $(seq 200); do
        [ "$(redis-cli -h 127.0.0.1 -p "$rport" PING 2>/dev/null)" = PONG ] && break
        sleep 0.05
    done
    [ "$(redis-cli -h 127.0.0.1 -p "$rport" PING 2>/dev/null)" = PONG ] || rport=""
fi
stores=(memory sqlproc sqlpower)
[ -n "$rport" ] && stores+=(redis)
store_args() { # SIDE STORE
    case "$2" in
    memory) echo "--store memory" ;;
    sqlproc) echo "--store sqlite:$scratch/$1-process.db --durability process" ;;
    sqlpower) echo "--store sqlite:$scratch/$1-power.db" ;;
    redis) echo "--store redis://127.0.0.1:$rport/$([ "$1" = base ] && echo 1 || echo 2)" ;;
    esac
}
for side in base new; do
    for s in "${stores[@]}"; do
        # shellcheck disable=SC2046
        start "$side.$s" "${srvbin[$side]}" --listen 127.0.0.1:0 --log-level warn $(store_args "$side" "$s")
    done
done
node="${NODE:-node}"
sdk=""
if command -v "$node" >/dev/null && (cd "$root" && "$node" -e "import('./tests/integration/sdk_resolve.mjs').then(m => m.sdkRoot())") \
    >/dev/null 2>&1; then
    start sdk "$node" "$root/bench/sdk_echo_server.mjs"
    sdk=1
fi

H=(-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream')
# session URL -> prints the new 2025 session's id
session() {
    local sid
    sid="$(curl -s -D - -o /dev/null "${H[@]}" "$1" -d '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"compare","version":"1"}}}' |
        tr -d '\r' | sed -n 's/^[Mm]cp-[Ss]ession-[Ii]d: //p')"
    curl -s -o /dev/null "${H[@]}" -H "Mcp-Session-Id: $sid" -H 'MCP-Protocol-Version: 2025-11-25' \
        "$1" -d '{"jsonrpc":"2.0","method":"notifications/initialized"}'
    echo "$sid"
}
# stream_call URL N FILE -> prints seconds; the answer in FILE (checked)
stream_call() {
    local sid t
    sid="$(session "$1")"
    t="$(curl -s -o "$3" -w '%{time_total}' "${H[@]}" -H "Mcp-Session-Id: $sid" \
        -H 'MCP-Protocol-Version: 2025-11-25' "$1" \
        -d "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"stream\",\"arguments\":{\"n\":$2},\"_meta\":{\"progressToken\":\"p\"}}}")"
    [ "$(grep -c '^data: .*notifications/progress' "$3")" = "$2" ] && grep -q "streamed $2" "$3" ||
        { log "stream of $2 on $1: incomplete answer"; exit 1; }
    echo "$sid $t"
}
stream_eps() { # URL -> events/s
    local r
    r="$(stream_call "$1" 10000 "$scratch/answer")"
    awk -v t="${r#* }" 'BEGIN {printf "%.0f\n", 10000 / t}'
}
resume_ms() { # URL -> ms for a GET of the 1,000 events after the priming one
    local r sid first t
    r="$(stream_call "$1" 1000 "$scratch/answer")"
    sid="${r% *}"
    first="$(sed -n 's/^id: //p' "$scratch/answer" | head -1 | tr -d '\r')"
    t="$(curl -s -o "$scratch/resumed" -w '%{time_total}' -H 'Accept: text/event-stream' \
        -H "Mcp-Session-Id: $sid" -H 'MCP-Protocol-Version: 2025-11-25' -H "Last-Event-ID: $first" "$1")"
    [ "$(grep -c '^data: .*notifications/progress' "$scratch/resumed")" = 1000 ] ||
        { log "resume on $1: not 1,000 events"; exit 1; }
    awk -v t="$t" 'BEGIN {printf "%.2f\n", t * 1000}'
}
rps() { # URL TOOL CONNS -> calls/s
    local tool=()
    [ "$2" = ledger_append ] && tool=(--tool ledger_append)
    "$bin/tidemark-rps" --url "$1" --era legacy --conns "$3" --seconds "$secs" --warmup 0.3 "${tool[@]}" |
        sed -n 's/.* rps=\([0-9.]*\).*/\1/p'
}

declare -A vals # "figure|side" -> values, one a line
sdk_eps="" # the TS SDK's stream events/s, one a line
figures=()
add() { # FIGURE SIDE VALUE
    [[ " ${figures[*]} " == *" $1 "* ]] || figures+=("$1")
    vals["$1|$2"]+="$3"$'\n'
}
declare -A sname=([memory]="memory" [sqlproc]="SQLite process" [sqlpower]="SQLite power" [redis]="Redis power")
for r in $(seq "$rounds"); do
    order=(base new)
    [ $((r % 2)) -eq 0 ] && order=(new base)
    log "round $r/$rounds (${order[*]})"
    for s in "${stores[@]}"; do
        for side in "${order[@]}"; do add "stream_events/s_${s}" "$side" "$(stream_eps "${url[$side.$s]}")"; done
    done
    for tool in echo ledger_append; do
        for c in 1 16; do
            for side in "${order[@]}"; do
                add "${tool}_${c}conn_calls/s_sqlpower" "$side" "$(rps "${url[$side.sqlpower]}" "$tool" "$c")"
            done
        done
    done
    if [ -n "$rport" ]; then
        for side in "${order[@]}"; do
            add "ledger_append_16conn_calls/s_redis" "$side" "$(rps "${url[$side.redis]}" ledger_append 16)"
        done
    fi
    for side in "${order[@]}"; do add "resume_1000_ms_sqlpower" "$side" "$(resume_ms "${url[$side.sqlpower]}")"; done
    [ -n "$sdk" ] && sdk_eps+="$(stream_eps "${url[sdk]}")"$'\n'
done
for side in base new; do for s in "${stores[@]}"; do stop "$side.$s"; done; done
[ -n "$sdk" ] && stop sdk

# RSS of STREAMS open GET streams, once per side, each on a fresh memory server
for side in base new; do
    lim=()
    help="$("${srvbin[$side]}" --help 2>&1 || true)" # (grep -q in a pipe: SIGPIPE under pipefail)
    [[ "$help" == *--max-connections-per-address* ]] &&
        lim=(--max-connections $((nstreams + 100)) --max-connections-per-address $((nstreams + 100)))
    [[ "$help" == *--max-sessions-per-address* ]] && # one address opens them all (4096 by default)
        lim+=(--max-sessions-per-address $((nstreams + 100)))
    start "$side.rss" "${srvbin[$side]}" --listen 127.0.0.1:0 --log-level warn --store memory "${lim[@]}"
    log "$nstreams streams on $side"
    if timeout 60 "$bin/tidemark-streams" --url "${url[$side.rss]}" --n "$nstreams" --server-pid "${pid[$side.rss]}" \
        >"$scratch/streams.$side" 2>&1; then
        add "rss_MB_${nstreams}_streams" "$side" \
            "$(sed -n 's/.*rss_kb=\([0-9]*\).*/\1/p' "$scratch/streams.$side" | awk '{printf "%.1f\n", $1 / 1024}')"
    else
        log "tidemark-streams on $side failed: $(tail -2 "$scratch/streams.$side")"
    fi
    stop "$side.rss"
done

# Instructions per streamed event (callgrind; exact, so once per side)
if command -v valgrind >/dev/null && command -v callgrind_control >/dev/null; then
    for side in base new; do
        log "callgrind on $side"
        start "$side.cg" valgrind --tool=callgrind --callgrind-out-file="$scratch/cg.$side.%p" \
            "${srvbin[$side]}" --listen 127.0.0.1:0 --log-level warn --store "sqlite:$scratch/$side-cg.db"
        stream_call "${url[$side.cg]}" 200 "$scratch/answer" >/dev/null # warm
        callgrind_control -z "${pid[$side.cg]}" >/dev/null
        stream_call "${url[$side.cg]}" 2000 "$scratch/answer" >/dev/null
        callgrind_control -d "${pid[$side.cg]}" >/dev/null
        stop "$side.cg"
        dump="$(ls "$scratch/cg.$side".*.[0-9]* | awk -F. '{print $NF, $0}' | sort -n | tail -1 | cut -d' ' -f2-)"
        add "instructions/event_sqlpower" "$side" "$(sed -n 's/^summary: //p' "$dump" | awk '{printf "%.0f\n", $1 / 2000}')"
    done
fi

median() { sort -g | awk '{v[NR] = $1} END {if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }
dirty=""
[ -z "${NEW:-}" ] && ! git -C "$root" diff --quiet HEAD -- src include && dirty=" (+ uncommitted src/include changes)"
echo "## bench-compare: base $sha vs $newname$dirty"
echo "## $(date -u +%Y-%m-%dT%H:%MZ), load average $(cut -d' ' -f1-3 /proc/loadavg), medians of $rounds interleaved rounds (RSS, instructions: one run)"
printf '%-34s %14s %14s %8s\n' figure base new new/base
for f in "${figures[@]}"; do
    b="$(printf '%s' "${vals[$f|base]:-}" | median)"
    n="$(printf '%s' "${vals[$f|new]:-}" | median)"
    ratio="$(awk -v b="$b" -v n="$n" 'BEGIN {if (b > 0) printf "%.2f", n / b; else print "-"}')"
    printf '%-34s %14s %14s %8s\n' "$f" "${b:--}" "${n:--}" "$ratio"
done
if [ -n "$sdk" ]; then
    se="$(printf '%s' "$sdk_eps" | median)"
    ne="$(printf '%s' "${vals[stream_events/s_sqlpower|new]}" | median)"
    printf '%-34s %14s %14s %8s\n' "stream_events/s_ts_sdk" "" "$se" "" # (one server, no side)
    echo "new stream on SQLite power / TS SDK 1.32.2 (its stream tool, in-memory event store): $(awk -v n="$ne" -v s="$se" 'BEGIN {printf "%.1f", n / s}') x"
else
    echo "(TS SDK: skipped, no node or no pinned SDK)"
fi
[ -n "$rport" ] || echo "(Redis: skipped, no redis-server)"
echo "(stream, echo, ledger_append: higher is better; resume, RSS, instructions: lower is better)"
