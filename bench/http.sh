#!/usr/bin/env bash
# HTTP side by side: tools/call through every server on this machine at
# once, from the same load generator (tidemark-rps, bench/rps.c), 2025-11-25
# era (a session per connection), 1, 16 and 64 keep-alive connections:
#   floor           tidemark-floor (bench/floor.c): an epoll server that
#                   answers any POST with a canned SSE answer at once; what
#                   the kernel, loopback and the load generator allow
#   TS SDK          the official TypeScript SDK (peers/) with its examples'
#                   in-memory event store (bench/sdk_echo_server.mjs)
#   memory, SQLite process, SQLite power, Redis power
#                   tidemark-server on --store memory, sqlite (process /
#                   power durability), redis-server (appendfsync always)
#   Redis ceilings  tidemark-floor --redis (the floor, each answer after a
#                   grouped RPUSH) and tidemark-redis-call (bench/redis_call.c:
#                   the Redis store's own scripts for one ledger_append fused
#                   into one script call, no server), on the same redis-server
#   Redis, 3 nodes  three tidemark-server nodes on one redis-server behind
#                   HAProxy round-robin (bench/cluster.mjs), when node and
#                   haproxy are here
# for `echo` (read-only) and `ledger_append` (non-idempotent, atomic; every
# call a new entry), with the ratio of each cell to the floor's; the raw
# one-row fsync'd SQLite commit loop (bench/sqlite_floor.c) in the same run,
# and the same loop writing a row into each of 10 tables a commit;
# then N standalone GET streams held open on tidemark-server memory (its
# RSS) and one notifications/resources/updated fanned out to N subscribed
# sessions of tidemark-everything memory (bench/streams.c); then tools/call
# echo p50 with 100 sessions in the store and with N x 10 (memory, SQLite
# power): latency must stay flat as sessions accumulate.
# Each cell is the median of REPS runs of SECONDS; within a repetition the
# targets run one after the other for each cell, so a busy moment of the
# shared machine hits all of them. Every answer is checked.
#
#   bash bench/http.sh BUILD_DIR [REPS] [SECONDS] [N]     (part of make bench)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:?usage: http.sh BUILD_DIR [REPS] [SECONDS] [N]}"
reps="${2:-3}"
secs="${3:-3}"
nscale="${4:-10000}"
build="$(cd "$build" && pwd)"
bin="$build/bin"
node="${NODE:-node}"
for b in tidemark-server tidemark-everything tidemark-rps tidemark-floor tidemark-sqlite-floor tidemark-streams \
    tidemark-redis-call; do
    [ -x "$bin/$b" ] || { echo "bench/http.sh: $bin/$b not built" >&2; exit 1; }
done
warm=0.5
awk -v s="$secs" 'BEGIN {exit !(s < 1)}' && warm=0.2
scratch="$(mktemp -d "$build/http-bench.XXXXXX")"
pids=()
cleanup() {
    set +e
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$scratch"
}
trap cleanup EXIT
log() { echo "bench/http.sh: $*" >&2; }

# The scale part needs N client and N server descriptors: raise the soft
# limit to the hard one (inherited by every process started here).
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
fdmax="$(ulimit -n)"
[ "$fdmax" = unlimited ] && fdmax=1048576
nwant="$nscale"
[ "$nscale" -gt $((fdmax - 600)) ] && nscale=$((fdmax - 600))

free_port() {
    "$node" -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}

# start NAME CMD... : run CMD (stdout/err in scratch/NAME.*), wait for its
# "listening on URL" line; sets url[NAME] and pid[NAME].
declare -A url pid
start() {
    local name="$1"; shift
    : >"$scratch/$name.out" # before the child opens it: sed reads it at once
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

start_redis() { # -> sets rport, or returns 1
    command -v redis-server >/dev/null && command -v redis-cli >/dev/null || return 1
    rport="$(free_port)"
    mkdir -p "$scratch/redis"
    # No automatic AOF rewrite: a run appends a few hundred MB, and a rewrite
    # (a fork writing the whole dataset) would land in whichever cell runs.
    redis-server --port "$rport" --bind 127.0.0.1 --dir "$scratch/redis" --appendonly yes \
        --appendfsync always --auto-aof-rewrite-percentage 0 --save '' --protected-mode no \
        --daemonize no --loglevel warning >"$scratch/redis.out" 2>&1 &
    pids+=("$!")
    local deadline=$((SECONDS + 20))
    while [ $SECONDS -lt $deadline ]; do
        [ "$(redis-cli -h 127.0.0.1 -p "$rport" PING 2>/dev/null)" = PONG ] && return 0
        sleep 0.05
    done
    log "redis-server did not start: $(tail -3 "$scratch/redis.out")"
    exit 1
}

# Three tidemark-server nodes on one Redis behind HAProxy (bench/cluster.mjs,
# the multi-node tests' cluster); it stops when its stdin (fd 4) closes.
start_cluster() { # -> sets url[redis3], or returns 1 with the reason in skipped[redis3]
    command -v "$node" >/dev/null || { skipped[redis3]="no node"; return 1; }
    mkfifo "$scratch/ctl"
    "$node" "$root/bench/cluster.mjs" "$bin/tidemark-server" 3 <"$scratch/ctl" \
        >"$scratch/cluster.out" 2>"$scratch/cluster.err" &
    pids+=("$!")
    local cpid=$! deadline=$((SECONDS + 30)) why
    exec 4>"$scratch/ctl"
    while [ $SECONDS -lt $deadline ]; do
        url[redis3]="$(sed -n 's/^url //p' "$scratch/cluster.out")"
        [ -n "${url[redis3]}" ] && return 0
        why="$(sed -n 's/^skip //p' "$scratch/cluster.out")"
        [ -n "$why" ] && { skipped[redis3]="no $why"; return 1; }
        kill -0 "$cpid" 2>/dev/null || break
        sleep 0.05
    done
    log "the 3-node cluster did not start: $(tail -3 "$scratch/cluster.err")"
    exit 1
}

targets=(floor)
declare -A label=([floor]="floor" [sdk]="TS SDK 1.32.2" [memory]="tidemark memory"
    [sqlproc]="SQLite process" [sqlpower]="SQLite power" [redis]="Redis power" [redis3]="Redis, 3 nodes")
declare -A skipped
tm=("$bin/tidemark-server" --listen 127.0.0.1:0 --log-level warn)
start floor "$bin/tidemark-floor"
start floorc "$bin/tidemark-floor" --commit "$scratch/floorc.db"
if command -v "$node" >/dev/null && start sdk "$node" "$root/bench/sdk_echo_server.mjs"; then
    targets+=(sdk)
else
    skipped[sdk]="no node"
fi
start memory "${tm[@]}" --store memory
start sqlproc "${tm[@]}" --store "sqlite:$scratch/process.db" --durability process
start sqlpower "${tm[@]}" --store "sqlite:$scratch/power.db"
targets+=(memory sqlproc sqlpower)
if start_redis; then
    start redis "${tm[@]}" --store "redis://127.0.0.1:$rport"
    start floorr "$bin/tidemark-floor" --redis "127.0.0.1:$rport"
    targets+=(redis)
else
    skipped[redis]="no redis-server"
fi
start_cluster && targets+=(redis3)

median() { sort -n | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
field() { sed -n "s/^\(.* \)\{0,1\}$1=\([0-9.]*\).*/\2/p"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", b ? a / b : 0}'; }
conns_list=(1 16 64)
tools=(echo ledger_append)

# One unrecorded pass first: Node's JIT and the servers' caches warm up.
for t in "${targets[@]}"; do
    "$bin/tidemark-rps" --url "${url[$t]}" --era legacy --conns 16 --seconds "$secs" --warmup 0 \
        >/dev/null || { log "warm-up against $t failed"; exit 1; }
done
for r in $(seq "$reps"); do
    for tool in "${tools[@]}"; do
        for c in "${conns_list[@]}"; do
            for t in "${targets[@]}"; do
                log "rep $r/$reps: $tool, $c conns, $t"
                if ! "$bin/tidemark-rps" --url "${url[$t]}" --era legacy --tool "$tool" --conns "$c" \
                    --seconds "$secs" --warmup "$warm" >>"$scratch/$t.$tool.$c"; then
                    log "tidemark-rps failed against $t ($tool, $c conns): $(tail -1 "$scratch/$t.$tool.$c")"
                    exit 1
                fi
            done
        done
    done
    "$bin/tidemark-sqlite-floor" "$scratch/raw.db" "$secs" >>"$scratch/raw"
    "$bin/tidemark-rps" --url "${url[floorc]}" --era legacy --tool ledger_append --conns 1 \
        --seconds "$secs" --warmup "$warm" >>"$scratch/floorc" || { log "tidemark-rps against floor --commit failed"; exit 1; }
    if [ -z "${skipped[redis]:-}" ]; then
        "$bin/tidemark-rps" --url "${url[floorr]}" --era legacy --tool ledger_append --conns 16 \
            --seconds "$secs" --warmup "$warm" >>"$scratch/floorr" || { log "tidemark-rps against floor --redis failed"; exit 1; }
        "$bin/tidemark-redis-call" --redis "127.0.0.1:$rport" --db 15 --conns 16 --seconds "$secs" \
            --warmup "$warm" >>"$scratch/rcall" || { log "tidemark-redis-call failed"; exit 1; }
        redis-cli -h 127.0.0.1 -p "$rport" -n 15 FLUSHDB >/dev/null # its calls' keys
    fi
    "$bin/tidemark-sqlite-floor" "$scratch/raw10.db" "$secs" 10 >>"$scratch/raw10"
done
for t in "${targets[@]}"; do [ "$t" = floor ] || [ "$t" = redis3 ] || stop "$t"; done
stop floor
stop floorc
if [ -z "${skipped[redis]:-}" ]; then stop floorr; fi
[ -n "${url[redis3]:-}" ] && exec 4>&- # the cluster stops its processes

cell() { # target tool conns -> "rps p50/p99 ratio"
    local f="$scratch/$1.$2.$3" fl="$scratch/floor.$2.$3"
    local v; v="$(field rps <"$f" | median)"
    printf '%7s %5s/%-6s %5s' "$v" "$(field p50_ms <"$f" | median)" "$(field p99_ms <"$f" | median)" \
        "$(ratio "$v" "$(field rps <"$fl" | median)")"
}
rps_of() { field rps <"$scratch/$1.$2.$3" | median; }
floor_ratio() { ratio "$(rps_of "$1" "$2" "$3")" "$(rps_of floor "$2" "$3")"; }

for tool in "${tools[@]}"; do
    echo
    echo "## HTTP side by side: tools/call $tool, 2025-11-25 era, calls/s p50/p99 ms and x floor (median of $reps x ${secs} s)"
    printf '%-16s' target
    for c in "${conns_list[@]}"; do printf ' | %-28s' "$c conns"; done
    echo
    for t in floor sdk memory sqlproc sqlpower redis redis3; do
        printf '%-16s' "${label[$t]}"
        if [ -n "${skipped[$t]:-}" ]; then echo " | skipped (${skipped[$t]})"; continue; fi
        for c in "${conns_list[@]}"; do printf ' | %s' "$(cell "$t" "$tool" "$c")"; done
        echo
    done
done

raw="$(field commits_per_s <"$scratch/raw" | median)"
echo
echo "## Raw SQLite commit loop (WAL, synchronous=FULL, one INSERT per transaction; median of $reps x ${secs} s)"
printf 'commits/s %s  p50_us %s  p99_us %s\n' "$raw" "$(field p50_us <"$scratch/raw" | median)" \
    "$(field p99_us <"$scratch/raw" | median)"
raw10="$(field commits_per_s <"$scratch/raw10" | median)"
printf 'the same with a row in each of 10 tables a commit (9 at a random place: ~10 pages, as a\n'
printf 'ledger_append commit writes): commits/s %s  p50_us %s  p99_us %s\n' "$raw10" \
    "$(field p50_us <"$scratch/raw10" | median)" "$(field p99_us <"$scratch/raw10" | median)"
floorc="$(field rps <"$scratch/floorc" | median)"
printf 'the floor server committing the one-row loop'"'"'s row before each answer (--commit), ledger_append\n'
printf 'from 1 conn: calls/s %s  p50_ms %s  p99_ms %s; %s x the loop: the most any server reaches\n' \
    "$floorc" "$(field p50_ms <"$scratch/floorc" | median)" "$(field p99_ms <"$scratch/floorc" | median)" \
    "$(ratio "$floorc" "$raw")"

verdict() { # name value target
    awk -v n="$1" -v v="$2" -v t="$3" 'BEGIN {printf "%-52s %6.2f (target >= %.2f) %s\n", n, v, t, (v >= t ? "met" : "NOT met")}'
}
echo
echo "## Targets"
verdict "16 conns echo: tidemark memory / floor" "$(floor_ratio memory echo 16)" 0.40
verdict "16 conns echo: SQLite power / floor" "$(floor_ratio sqlpower echo 16)" 0.25
verdict "16 conns ledger_append: SQLite power / floor" "$(floor_ratio sqlpower ledger_append 16)" 0.15
verdict "1 conn echo: tidemark memory / floor" "$(floor_ratio memory echo 1)" 0.60
verdict "1 conn ledger_append: SQLite power / raw loop" "$(ratio "$(rps_of sqlpower ledger_append 1)" "$raw")" 0.80
printf '%-52s %6.2f (no target: the pages a commit writes)\n' "1 conn ledger_append: SQLite power / 10-table loop" \
    "$(ratio "$(rps_of sqlpower ledger_append 1)" "$raw10")"
printf '%-52s %6.2f (no target: the ceiling of the 0.80 above)\n' "1 conn ledger_append: floor + one-row commit / raw loop" \
    "$(ratio "$floorc" "$raw")"
if [ -z "${skipped[redis]:-}" ]; then
    verdict "16 conns echo: Redis power (1 node) / floor" "$(floor_ratio redis echo 16)" 0.15
    verdict "16 conns ledger_append: Redis power (1 node) / floor" "$(floor_ratio redis ledger_append 16)" 0.10
    floorr="$(field rps <"$scratch/floorr" | median)"
    printf '%-52s %6.2f (no target: the ceiling of the 0.10 above; %s calls/s)\n' \
        "16 conns ledger_append: floor + Redis group commit / floor" \
        "$(ratio "$floorr" "$(rps_of floor ledger_append 16)")" "$floorr"
    rcall="$(sed -n 's/^calls\/s \([0-9]*\).*/\1/p' "$scratch/rcall" | median)"
    aof="$(sed -n 's/.*aof_bytes\/call \([0-9][0-9]*\)$/\1/p' "$scratch/rcall")"
    [ -n "$aof" ] && aof="$(printf '%s\n' "$aof" | median)" # (none: -1 each time, shown as ?)
    printf '%-52s %6.2f (no target: what the store'"'"'s own writes allow; %s calls/s, %s AOF bytes a call)\n' \
        "16 conns ledger_append: the store's scripts, one a call / floor" \
        "$(ratio "$rcall" "$(rps_of floor ledger_append 16)")" "$rcall" "${aof:-?}"
    printf '%-52s %6.2f (no target)\n' "16 conns ledger_append: Redis power / the store's scripts" \
        "$(ratio "$(rps_of redis ledger_append 16)" "$rcall")"
    if [ -z "${skipped[sdk]:-}" ]; then
        verdict "16 conns echo: Redis power (1 node) / TS SDK" \
            "$(ratio "$(rps_of redis echo 16)" "$(rps_of sdk echo 16)")" 5
    fi
    if [ -z "${skipped[redis3]:-}" ]; then
        printf '%-52s %6.2f (beside 1 node: %.2f; no target)\n' "16 conns echo: Redis, 3 nodes / floor" \
            "$(floor_ratio redis3 echo 16)" "$(floor_ratio redis echo 16)"
    fi
fi
p99_verdict() { # target tool: p99 <= 5 x p50 at 16 connections
    local f="$scratch/$1.$2.16"
    awk -v n="16 conns $2: ${label[$1]} p99 / p50" -v a="$(field p99_ms <"$f" | median)" \
        -v b="$(field p50_ms <"$f" | median)" \
        'BEGIN {v = b > 0 ? a / b : 0; printf "%-52s %6.2f (target <= 5.00) %s\n", n, v, (b > 0 && v <= 5 ? "met" : "NOT met")}'
}
for tool in "${tools[@]}"; do
    for t in memory sqlproc sqlpower redis redis3; do
        if [ -z "${skipped[$t]:-}" ]; then p99_verdict "$t" "$tool"; fi
    done
done

# Scale: N standalone streams (RSS), then N subscribed sessions and one update.
scale_note=""
[ "$nscale" -lt "$nwant" ] && scale_note=" (asked for $nwant; ulimit -n is $fdmax)"
# One address opens every stream: lift the per-address limits (sessions
# too: 4096 per address by default) for the scale rows.
lim=(--max-connections $((nscale + 100)) --max-connections-per-address $((nscale + 100))
     --max-sessions-per-address $((nscale + 100)))
start smem "${tm[@]}" --store memory "${lim[@]}"
log "scale: $nscale streams on tidemark-server memory"
"$bin/tidemark-streams" --url "${url[smem]}" --n "$nscale" --server-pid "${pid[smem]}" >"$scratch/streams" ||
    { log "tidemark-streams failed: $(cat "$scratch/streams")"; exit 1; }
stop smem
start sev "$bin/tidemark-everything" --listen 127.0.0.1:0 --log-level warn --store memory "${lim[@]}"
log "scale: $nscale subscribed sessions on tidemark-everything memory, $reps updates"
"$bin/tidemark-streams" --url "${url[sev]}" --n "$nscale" --server-pid "${pid[sev]}" \
    --subscribe test://watched-resource --trigger update_resource --repeat "$reps" >"$scratch/fanout" ||
    { log "tidemark-streams (fan-out) failed: $(cat "$scratch/fanout")"; exit 1; }
stop sev
start lev "$bin/tidemark-everything" --listen 127.0.0.1:0 --log-level warn --store memory "${lim[@]}"
log "scale: $nscale 2026-07-28 listeners of one uri on tidemark-everything memory, $reps updates"
"$bin/tidemark-streams" --url "${url[lev]}" --n "$nscale" --server-pid "${pid[lev]}" --listen \
    --subscribe test://watched-resource --trigger update_resource --repeat "$reps" >"$scratch/lfanout" ||
    { log "tidemark-streams (listener fan-out) failed: $(cat "$scratch/lfanout")"; exit 1; }
stop lev

# Flat latency: tools/call echo p50 from one connection with 100 sessions in
# the store, then with nsess (N x 10) on the same server (memory, then
# SQLite power); REPS runs of SECONDS each, the median p50.
nsess=$((nscale * 10))
flat() { # NAME STORE (one address makes every session: its limit lifted)
    start "$1" "${tm[@]}" --store "$2" --max-sessions-per-address $((nsess + 100))
    local s0=100 i
    "$bin/tidemark-streams" --url "${url[$1]}" --n "$s0" --sessions-only >"$scratch/$1.fill0" ||
        { log "tidemark-streams --sessions-only failed: $(cat "$scratch/$1.fill0")"; exit 1; }
    for i in $(seq "$reps"); do
        "$bin/tidemark-rps" --url "${url[$1]}" --era legacy --conns 1 --seconds "$secs" --warmup "$warm" \
            >>"$scratch/$1.few" || { log "tidemark-rps against $1 failed"; exit 1; }
    done
    log "flat: $1, growing to $nsess sessions"
    "$bin/tidemark-streams" --url "${url[$1]}" --n $((nsess - s0)) --sessions-only --server-pid "${pid[$1]}" \
        >"$scratch/$1.fill" || { log "tidemark-streams --sessions-only failed: $(cat "$scratch/$1.fill")"; exit 1; }
    for i in $(seq "$reps"); do
        "$bin/tidemark-rps" --url "${url[$1]}" --era legacy --conns 1 --seconds "$secs" --warmup "$warm" \
            >>"$scratch/$1.many" || { log "tidemark-rps against $1 failed"; exit 1; }
    done
    stop "$1"
}
log "flat: p50 with 100 and with $nsess sessions, memory"
flat flatmem memory
log "flat: p50 with 100 and with $nsess sessions, SQLite power"
flat flatsql "sqlite:$scratch/flat.db"

rss_mb="$(awk '{print $1 / 1024}' <<<"$(field rss_kb <"$scratch/streams")")"
echo
echo "## Scale$scale_note"
printf 'streams: %s standalone GET streams (one 2025-11-25 session each) open on tidemark-server memory in %s s; RSS %.1f MB (%.1f MB before) (target < 200 MB) %s\n' \
    "$(field streams <"$scratch/streams")" "$(field open_s <"$scratch/streams")" "$rss_mb" \
    "$(awk '{print $1 / 1024}' <<<"$(field rss_before_kb <"$scratch/streams")")" \
    "$(awk -v m="$rss_mb" 'BEGIN {print m < 200 ? "met" : "NOT met"}')"
fan_line() { # FILE WHAT
    local fan
    fan="$(sed -n 's/.* fanout_ms=\([0-9.]*\).*/\1/p' "$1" | median)"
    printf 'fan-out: %s %s (tidemark-everything memory, RSS %.1f MB), update_resource -> all %s streams got notifications/resources/updated in %s ms, half in %s ms (median of %s) (target < 1000 ms) %s\n' \
        "$(field streams <"$1")" "$2" "$(awk '{print $1 / 1024}' <<<"$(field rss_kb <"$1")")" \
        "$(field received <"$1" | sort -n | head -1)" "$fan" "$(field p50_ms <"$1" | median)" \
        "$reps" "$(awk -v m="$fan" 'BEGIN {print m < 1000 ? "met" : "NOT met"}')"
}
fan_line "$scratch/fanout" "2025-11-25 sessions subscribed to one uri"
fan_line "$scratch/lfanout" "2026-07-28 listeners (subscriptions/listen) of one uri"
flat_line() { # NAME LABEL
    local few many
    few="$(field p50_us <"$scratch/$1.few" | median)"
    many="$(field p50_us <"$scratch/$1.many" | median)"
    printf 'flat: tools/call echo p50 (1 conn, median of %s) on %s: %s us with 100 sessions, %s us with %s (filled in %s s); ratio %s (target <= 1.20) %s\n' \
        "$reps" "$2" "$few" "$many" "$(field sessions <"$scratch/$1.fill" | awk '{print $1 + 100}')" \
        "$(field open_s <"$scratch/$1.fill")" "$(ratio "$many" "$few")" \
        "$(awk -v a="$many" -v b="$few" 'BEGIN {print (b > 0 && a <= 1.2 * b) ? "met" : "NOT met"}')"
}
flat_line flatmem "tidemark-server memory"
flat_line flatsql "tidemark-server SQLite power"
