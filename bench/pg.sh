#!/usr/bin/env bash
# bench/pg.sh BUILD [REPS] [SECONDS]: the PostgreSQL store beside its ceiling,
# side by side in one run (issue 29's targets).
#
# A throw-away 3-node PostgreSQL 15 cluster on loopback (tests/tools/pg_cluster.sh:
# a primary and two standbys, synchronous_standby_names 'ANY 1 (s1, s2)'), then
# REPS interleaved rounds (default 3) of SECONDS each (default 5):
#   pgbench        one-row INSERT + COMMIT on that cluster, 1 and 16 clients:
#                  the ceiling (every commit waits for a standby, as ours do)
#   pg             tidemark-server --store <the cluster> --durability replicated:
#                  ledger_append (2025 era, tidemark-rps) from 1 and 16 connections,
#                  and one tools/call stream of 10,000 progress events read to
#                  its end (curl): durable streamed events/s
#   sqlite         tidemark-server on SQLite power, the same figures, for reference
#   pgcall         one pgbench client running the statements the pg server's
#                  writer sends for ledger_appends, on that server's schema, with
#                  no server in the way: per call the stream's open, the record's
#                  begin and check, the row in a savepoint, the priming event and
#                  response (tm_append); per transaction one NOTIFY and COMMIT, in
#                  one pipeline. 1 call a transaction (a serial call), and 16 (a
#                  batch as large as 16 connections can make): calls/s, the
#                  most a call that commits what ours does reaches from 1 and
#                  from 16 connections (16 clients of a transaction each would
#                  queue on the ledger's row counter and the NOTIFY lock)
#   base           with PG_BASE_BUILD=DIR (the build directory of another
#                  commit's worktree, e.g. build-compare/base-<sha>/build that
#                  make bench-compare leaves): its tidemark-server on the same
#                  cluster, the same figures as pg, interleaved with them
# Medians are printed with the ratios the targets name; the report goes to
# PG_BENCH_OUT when set (the smoke test's /dev/null), else to
# bench/results/pg-YYYYMMDD-HHMMSS.txt. Exit 77 when PostgreSQL is not installed.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-build}"
reps="${2:-3}"
secs="${3:-5}"
case "$build" in /*) ;; *) build="$here/$build" ;; esac # BUILD: absolute, or from the top
bin="$build/bin"
for b in tidemark-server tidemark-rps; do
    [ -x "$bin/$b" ] || { echo "pg.sh: $bin/$b is missing (cmake --build $build)" >&2; exit 1; }
done
pgbin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | tail -1)"
[ -x "$pgbin/pgbench" ] || { echo "pg.sh: pgbench not installed: skipped" >&2; exit 77; }
scratch="$(mktemp -d /tmp/tm-bench-pg-XXXXXX)"
mkdir -p "$here/bench/results"
out="${PG_BENCH_OUT:-$here/bench/results/pg-$(date +%Y%m%d-%H%M%S).txt}"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    bash "$here/tests/tools/pg_cluster.sh" stop "$scratch/pg" >/dev/null 2>&1 || true
    rm -rf "$scratch"
}
trap cleanup EXIT
log() { printf 'pg.sh: %s\n' "$*" >&2; }

uri="$(bash "$here/tests/tools/pg_cluster.sh" start "$scratch/pg" 2 2>"$scratch/cluster.log")" ||
    { rc=$?; cat "$scratch/cluster.log" >&2; exit $rc; }
primary="$(bash "$here/tests/tools/pg_cluster.sh" uri "$scratch/pg" 0)"
psql -q "$primary" -c "CREATE TABLE IF NOT EXISTS bench_ceiling(id bigserial PRIMARY KEY, v text)"
echo "INSERT INTO bench_ceiling(v) VALUES ('x');" >"$scratch/ceiling.sql"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start() { # NAME ARGS... -> url[NAME]
    local name=$1 port
    shift
    port="$(free_port)"
    "$bin/tidemark-server" --listen "127.0.0.1:$port" --log-level warn "$@" >"$scratch/$name.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 1 200); do
        curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
        sleep 0.05
    done
    url[$name]="http://127.0.0.1:$port/mcp"
}
declare -A url
start pg --store "$uri" --durability replicated
base="${PG_BASE_BUILD:-}"
if [ -n "$base" ]; then
    [ -x "$base/bin/tidemark-server" ] || { echo "pg.sh: $base/bin/tidemark-server is missing" >&2; exit 1; }
    base_rev="$(git -C "$base/.." rev-parse --short HEAD 2>/dev/null || echo "$base")"
    saved_bin=$bin
    bin="$base/bin"
    # its own database: a build refuses a schema newer than its own
    psql -q "$primary" -c "CREATE DATABASE tidemark_base"
    start base --store "${uri/\/tidemark\?//tidemark_base?}" --durability replicated
    bin=$saved_bin
fi
start sqlite --store "sqlite:$scratch/tm.db"

# N ledger_appends in one transaction, as the pg server's writer sends a
# batch of N calls (their statements and arguments as PostgreSQL's statement
# log shows them, one NOTIFY naming every stream), each under a new request
# key, for session $sid of node $node.
call_sql() { # N
    local resp i k notify=""
    resp="$(printf '{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"appended"}],"structuredContent":{"entry":"bench","key":"%s/i:1"}}}' "$sid" |
        od -An -tx1 | tr -d ' \n')"
    for i in $(seq 1 "$1"); do
        echo "\\set k$i random(1, 1000000000000)"
    done
    printf '%s\n' '\startpipeline' 'BEGIN;'
    for i in $(seq 1 "$1"); do
        k=":k$i"
        cat <<SQL
INSERT INTO tm_streams(session, name) SELECT :sid, 'b' || $k WHERE EXISTS (SELECT 1 FROM tm_sessions WHERE id = :sid) ON CONFLICT (session, name) DO UPDATE SET closed = false RETURNING head;
SELECT tm_req_begin(:sid, convert_to('b:' || $k, 'UTF8'), 'ledger_append', 'b' || $k, '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ledger_append","arguments":{"entry":"bench"}}}', tm_now(), :node);
SELECT tm_req_mine(:sid, convert_to('b:' || $k, 'UTF8'), :node);
SAVEPOINT fx;
SELECT tm_row_insert('ledger', '{"created_ms":1796590371313,"entry":"bench","request_key":"$sid/i:1","session":"$sid"}');
RELEASE SAVEPOINT fx;
SELECT tm_append(:sid, 'b' || $k, '0123456789abcdef', '\\x$resp'::bytea, ARRAY[0, $((${#resp} / 2))], true, convert_to('b:' || $k, 'UTF8'), tm_now(), 0, NULL, :node);
SQL
        notify="$notify || E'\\n' || :sid || E'\\tb' || $k || E'\\t2'"
    done
    cat <<SQL
SELECT pg_notify('tm_commits', :node $notify);
COMMIT;
\\endpipeline
SQL
}
pgcall_cps() { # N: calls/s of one pgbench client running call_sql N; no figure when a statement failed
    local o rc=0
    o="$("$pgbin/pgbench" -n -M prepared -f "$scratch/call$1.sql" -D "sid=$sid" -D "node=$node" -c 1 \
        -j 1 -T "$secs" "$primary" 2>"$scratch/pgcall.err")" || rc=1
    if [ "$rc" -ne 0 ] || grep -q 'aborted\|ERROR' "$scratch/pgcall.err"; then
        grep -m2 -i 'error\|aborted' "$scratch/pgcall.err" >&2
        return 1
    fi
    printf '%s\n' "$o" | sed -n 's/^tps = \([0-9.]*\).*/\1/p' | awk -v n="$1" '{printf "%.0f\n", $1 * n}'
}
pgbench_tps() { # CLIENTS
    "$pgbin/pgbench" -n -f "$scratch/ceiling.sql" -c "$1" -j "$1" -T "$secs" "$primary" 2>/dev/null |
        sed -n 's/^tps = \([0-9.]*\).*/\1/p'
}
rps() { # TARGET CONNS
    "$bin/tidemark-rps" --url "${url[$1]}" --era legacy --tool ledger_append --conns "$2" \
        --seconds "$secs" | sed -n 's/.* rps=\([0-9.]*\) .*/\1/p'
}
new_session() { # TARGET -> its new session's id
    curl -s -D- -o /dev/null -X POST "${url[$1]}" -H 'content-type: application/json' \
        -H 'accept: application/json, text/event-stream' \
        -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}' |
        tr -d '\r' | sed -n 's/^[Mm]cp-[Ss]ession-[Ii]d: //p'
}
stream_eps() { # TARGET: one tools/call stream of 10,000 progress events, read to the end
    local sid t0 t1 n
    sid="$(new_session "$1")"
    t0="$(date +%s.%N)"
    n="$(curl -sN -X POST "${url[$1]}" -H 'content-type: application/json' \
        -H 'accept: application/json, text/event-stream' -H "mcp-session-id: $sid" \
        -H 'mcp-protocol-version: 2025-11-25' --max-time 120 \
        -d '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"stream","arguments":{"n":10000},"_meta":{"progressToken":"p"}}}' |
        grep -c '^id: ' || true)"
    t1="$(date +%s.%N)"
    awk -v n="$n" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", n / (b - a) }'
}
sid="$(new_session pg || true)"
node=pgbench # its records are its own: tm_req_mine and tm_append check the node they name
[ -n "$sid" ] || { log "no session on the pg server: $(tail -2 "$scratch/pg.log")"; exit 1; }
call_sql 1 >"$scratch/call1.sql"
call_sql 16 >"$scratch/call16.sql"
median() { sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }

declare -A runs
failed=0
measure() { # KEY CMD...: one figure into runs[KEY]; a failed one is said, not kept, and fails the run
    local key=$1 v
    shift
    if v="$("$@")" && [ -n "$v" ]; then
        runs[$key]+="$v"$'\n'
    else
        log "$key: $* failed: $(tail -2 "$scratch"/*.log "$scratch"/*.err 2>/dev/null | tr '\n' ' ')"
        failed=1
    fi
}
for r in $(seq 1 "$reps"); do
    log "round $r of $reps"
    measure pgbench1 pgbench_tps 1
    measure pg1 rps pg 1
    measure pgcall1 pgcall_cps 1
    [ -n "$base" ] && measure base1 rps base 1
    measure sqlite1 rps sqlite 1
    measure pgbench16 pgbench_tps 16
    measure pg16 rps pg 16
    measure pgcall16 pgcall_cps 16
    [ -n "$base" ] && measure base16 rps base 16
    measure sqlite16 rps sqlite 16
    measure pgstream stream_eps pg
    [ -n "$base" ] && measure basestream stream_eps base
    measure sqlitestream stream_eps sqlite
done
m() { printf '%s' "${runs[$1]:-}" | grep -v '^$' | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf (b > 0 ? "%.2f" : "-"), a / b }'; }
{
    echo "bench/pg.sh $(date -u +%Y-%m-%dT%H:%M:%SZ) $(git -C "$here" rev-parse --short HEAD) reps=$reps seconds=$secs"
    echo "cluster: PostgreSQL $("$pgbin/postgres" --version | awk '{print $3}'), primary + 2 standbys, 'ANY 1 (s1, s2)', loopback; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
    printf '%-44s %12s %12s\n' "median of $reps" "1 conn" "16 conns"
    printf '%-44s %12s %12s\n' "pgbench one-row insert+commit (tps)" "$(m pgbench1)" "$(m pgbench16)"
    printf '%-44s %12s %12s\n' "tidemark ledger_append, PostgreSQL (calls/s)" "$(m pg1)" "$(m pg16)"
    printf '%-44s %12s %12s\n' "tidemark ledger_append, SQLite power" "$(m sqlite1)" "$(m sqlite16)"
    printf '%-44s %12s %12s  (1 / 16 calls a transaction)\n' "pgbench of ledger_append's statements (calls/s)" \
        "$(m pgcall1)" "$(m pgcall16)"
    printf '%-44s %12s %12s  (no server: the ceiling of the targets)\n' "... / pgbench one-row" \
        "$(ratio "$(m pgcall1)" "$(m pgbench1)")" "$(ratio "$(m pgcall16)" "$(m pgbench16)")"
    printf '%-44s %12s %12s  (targets 0.7, 0.8)\n' "PostgreSQL / pgbench" \
        "$(ratio "$(m pg1)" "$(m pgbench1)")" "$(ratio "$(m pg16)" "$(m pgbench16)")"
    printf 'durable streamed events/s, one stream of 10,000: PostgreSQL %s (target >= 50000), SQLite power %s\n' \
        "$(m pgstream)" "$(m sqlitestream)"
    keys="pgbench1 pg1 pgcall1 sqlite1 pgbench16 pg16 pgcall16 sqlite16 pgstream sqlitestream"
    if [ -n "$base" ]; then
        printf '%-44s %12s %12s  stream %s\n' "base $base_rev ledger_append, PostgreSQL" \
            "$(m base1)" "$(m base16)" "$(m basestream)"
        printf '%-44s %12s %12s  stream %s\n' "this build / base" "$(ratio "$(m pg1)" "$(m base1)")" \
            "$(ratio "$(m pg16)" "$(m base16)")" "$(ratio "$(m pgstream)" "$(m basestream)")"
        keys="$keys base1 base16 basestream"
    fi
    echo "every round:"
    for k in $keys; do
        printf '  %-12s %s\n' "$k" "$(printf '%s' "${runs[$k]:-}" | tr '\n' ' ')"
    done
} | tee "$out"
log "report: ${out#$here/}"
exit "$failed"
