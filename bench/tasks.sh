#!/usr/bin/env bash
# The tasks extension (io.modelcontextprotocol/tasks) under load, from
# tidemark-rps (bench/rps.c) against tidemark-everything, on one node
# (SQLite, the default durability) and on three nodes (Redis with
# appendfsync always, HAProxy round-robin in front: bench/cluster.mjs, the
# multi-node tests' cluster):
#   create -> terminal: sequential tasks from one connection, each a
#     tools/call slow_compute {seconds: 0} then tasks/get back to back (not
#     at the suggested pollIntervalMs of 500 ms) until a terminal status;
#     latency from sending the call to the first terminal tasks/get.
#   tasks/get: one completed task read back to back from 1 and from 16
#     keep-alive connections.
# Each cell is the median of REPS runs of SECONDS (the tasks column: all
# tasks of all runs). Every answer is checked; a wrong one fails the script.
#
#   bash bench/tasks.sh BUILD_DIR [REPS] [SECONDS]      (part of make bench)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:?usage: tasks.sh BUILD_DIR [REPS] [SECONDS]}"
reps="${2:-3}"
secs="${3:-3}"
server="$build/bin/tidemark-everything"
rps="$build/bin/tidemark-rps"
node="${NODE:-node}"
for b in "$server" "$rps"; do
    [ -x "$b" ] || { echo "bench/tasks.sh: $b not built" >&2; exit 1; }
done
scratch="$(mktemp -d "$build/tasks-bench.XXXXXX")"
pid="" cpid=""
cleanup() {
    set +e
    [ -n "$pid" ] && kill "$pid" 2>/dev/null
    if [ -n "$cpid" ]; then
        exec 3>&- # the cluster stops when its stdin ends
        for _ in $(seq 300); do kill -0 "$cpid" 2>/dev/null || break; sleep 0.05; done
        kill "$cpid" 2>/dev/null
    fi
    wait 2>/dev/null
    rm -rf "$scratch"
}
trap cleanup EXIT

start_sqlite() { # -> sets url
    "$server" --listen 127.0.0.1:0 --store "sqlite:$scratch/tasks.db" --log-level warn \
        >"$scratch/out" 2>"$scratch/err" &
    pid=$!
    for _ in $(seq 200); do
        url="$(sed -n 's/^listening on //p' "$scratch/out")"
        [ -n "$url" ] && return 0
        sleep 0.05
    done
    echo "bench/tasks.sh: tidemark-everything did not start: $(cat "$scratch/err")" >&2
    exit 1
}
stop_sqlite() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""; }

start_cluster() { # -> sets url, or returns 1 with the reason in $skip
    skip=""
    if ! command -v "$node" >/dev/null; then skip="no node"; return 1; fi
    mkfifo "$scratch/ctl"
    "$node" "$root/bench/cluster.mjs" "$server" 3 <"$scratch/ctl" >"$scratch/cluster.out" \
        2>"$scratch/cluster.err" &
    cpid=$!
    exec 3>"$scratch/ctl"
    for _ in $(seq 600); do
        url="$(sed -n 's/^url //p' "$scratch/cluster.out")"
        [ -n "$url" ] && return 0
        skip="$(sed -n 's/^skip //p' "$scratch/cluster.out")"
        [ -n "$skip" ] && { skip="no $skip"; return 1; }
        kill -0 "$cpid" 2>/dev/null || break
        sleep 0.05
    done
    echo "bench/tasks.sh: the cluster did not start: $(cat "$scratch/cluster.err")" >&2
    exit 1
}

median() { sort -n | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
sum() { awk '{s+=$1} END {print s+0}'; }
field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p"; }

# Every measurement of one setup, interleaved within each repetition.
measure() { # setup-name url
    local f="$scratch/$1"
    : >"$f.task"; : >"$f.get1"; : >"$f.get16"
    for _ in $(seq "$reps"); do
        "$rps" --url "$2" --method task --conns 1 --seconds "$secs" --warmup 0.3 >>"$f.task"
        "$rps" --url "$2" --method tasks/get --conns 1 --seconds "$secs" --warmup 0.3 >>"$f.get1"
        "$rps" --url "$2" --method tasks/get --conns 16 --seconds "$secs" --warmup 0.3 >>"$f.get16"
    done
}

task_row() { # label setup-name
    local f="$scratch/$2.task"
    printf '%-16s %7s %8s %8s %15s %10s\n' "$1" "$(field calls <"$f" | sum)" \
        "$(field p50_ms <"$f" | median)" "$(field p99_ms <"$f" | median)" \
        "$(field done_at_create <"$f" | sum)" "$(field gets_per_task <"$f" | median)"
}

get_rows() { # label setup-name
    for c in 1 16; do
        local f="$scratch/$2.get$c"
        printf '%-16s %6s %10s %8s %8s\n' "$1" "$c" "$(field rps <"$f" | median)" \
            "$(field p50_ms <"$f" | median)" "$(field p99_ms <"$f" | median)"
    done
}

start_sqlite
measure sqlite "$url"
stop_sqlite
three="yes"
if start_cluster; then measure redis "$url"; else three="skipped ($skip)"; fi

echo
echo "## Tasks: create -> terminal, sequential tasks from 1 connection (tasks/get back to back; median of $reps x ${secs} s)"
printf '%-16s %7s %8s %8s %15s %10s\n' setup tasks p50_ms p99_ms done_at_create gets/task
task_row "sqlite, 1 node" sqlite
[ "$three" = yes ] && task_row "redis, 3 nodes" redis
echo
echo "## Tasks: tasks/get of one completed task, gets/s (median of $reps x ${secs} s)"
printf '%-16s %6s %10s %8s %8s\n' setup conns gets/s p50_ms p99_ms
get_rows "sqlite, 1 node" sqlite
if [ "$three" = yes ]; then get_rows "redis, 3 nodes" redis; else echo "redis, 3 nodes: $three"; fi
