#!/usr/bin/env bash
# pg_cluster.sh: throw-away PostgreSQL clusters for tests (primary + N
# streaming standbys), each node on a loopback port picked here, its data,
# log and socket under DIR. Never touches a system cluster. Run as root, the
# servers run as the `postgres` user (runuser); DIR is chowned to it.
#
#   pg_cluster.sh start DIR [STANDBYS]  initdb n0, database `tidemark`, STANDBYS
#                                       standbys n1.. (pg_basebackup -R, application
#                                       name sN), waits until all stream as quorum
#                                       standbys of 'ANY 1 (s1, ..)'. Writes
#                                       DIR/cluster.env; prints the libpq URI of
#                                       every node (target_session_attrs=read-write)
#   pg_cluster.sh stop DIR              stop every node (immediate; then SIGKILL)
#   pg_cluster.sh kill DIR N            SIGKILL node N's postmaster and all its children
#   pg_cluster.sh start-node DIR N      start node N (as it is configured)
#   pg_cluster.sh stop-node DIR N       stop node N (fast shutdown)
#   pg_cluster.sh promote DIR N         promote standby N; waits until it accepts writes;
#                                       its synchronous_standby_names become
#                                       'ANY 1 (the other nodes' names)'
#   pg_cluster.sh follow DIR N M        make standby N stream from node M; waits
#   pg_cluster.sh rejoin DIR N M        node N (a former primary, say) copied afresh
#                                       from node M (pg_basebackup), streaming from it
#   pg_cluster.sh lsn DIR N             primary: current WAL LSN; standby: received
#                                       (replayed when nothing received yet)
#   pg_cluster.sh most-advanced DIR N.. the node among N.. with the highest received LSN
#   pg_cluster.sh psql DIR N SQL        run SQL on node N (database tidemark), print
#                                       the rows unaligned, no header
#   pg_cluster.sh uri DIR [N]           the URI of every node, or of node N alone
#
# Node N's application name is sN. Every node starts with
# synchronous_standby_names = 'ANY 1 (s1, .., sSTANDBYS)' (none with no standby), fsync and synchronous_commit on, trust
# authentication on loopback and the socket. Only the URI (or the asked
# value) goes to stdout; progress and errors go to stderr. Exit 77 when the
# PostgreSQL server binaries are not installed (scripts/install-deps.sh --test).
# Environment: PG_BIN (default: newest /usr/lib/postgresql/*/bin),
# PG_CLUSTER_TIMEOUT_S (30): deadline of every wait.
set -euo pipefail
unset PGHOST PGHOSTADDR PGPORT PGDATABASE PGUSER PGSERVICE PGOPTIONS \
      PGTARGETSESSIONATTRS PGSSLMODE PGPASSWORD PGCONNECT_TIMEOUT 2>/dev/null || true

TIMEOUT_S=${PG_CLUSTER_TIMEOUT_S:-30}
log() { printf 'pg_cluster: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

find_pg_bin() {
  if [[ -n "${PG_BIN:-}" ]]; then printf '%s\n' "$PG_BIN"; return; fi
  local d best=""
  for d in /usr/lib/postgresql/*/bin; do
    [[ -x "$d/initdb" ]] && best=$d   # glob order: the last is the newest major
  done
  if [[ -z "$best" ]] && command -v initdb >/dev/null 2>&1; then
    best=$(dirname "$(command -v initdb)")
  fi
  printf '%s\n' "$best"
}

# as_pg CMD..: run CMD as the owner of the data directories.
as_pg() {
  if [[ $EUID -eq 0 ]]; then
    runuser -u postgres -- env -C / "$@"
  else
    "$@"
  fi
}

now_s() { date +%s; }

load_env() {
  [[ -f "$DIR/cluster.env" ]] || die "$DIR/cluster.env: no cluster here"
  # shellcheck disable=SC1091
  source "$DIR/cluster.env"
}

port_of() { local v="PORT$1"; [[ -n "${!v:-}" ]] || die "no node $1"; printf '%s\n' "${!v}"; }
datadir() { printf '%s/n%s\n' "$DIR" "$1"; }

# Postmaster PID from the node's lock file (empty when not running).
pid_of() {
  local f; f="$(datadir "$1")/postmaster.pid"
  [[ -f "$f" ]] || return 0
  local p; p=$(head -n1 "$f" 2>/dev/null || true)
  if [[ -n "$p" ]] && alive "$p"; then printf '%s\n' "$p"; fi
}

# A process exists and is not a zombie.
alive() {
  local st
  st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n "$st" && "$st" != Z ]]
}

q() { # q N SQL: run SQL on node N (tidemark database), rows unaligned
  local port; port=$(port_of "$1")
  PGCONNECT_TIMEOUT=3 "$PG_BIN/psql" -X -q -A -t -v ON_ERROR_STOP=1 \
    -h 127.0.0.1 -p "$port" -U postgres -d "${3:-tidemark}" -c "$2"
}

free_ports() { # free_ports K: K distinct loopback ports free right now
  local py=/usr/bin/python3   # not a version manager's shim: one fork
  [[ -x $py ]] || py=$(command -v python3 || true)
  if [[ -n "$py" ]]; then
    "$py" - "$1" <<'EOF'
import socket, sys
ss = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); ss.append(s)
print(" ".join(str(s.getsockname()[1]) for s in ss))
EOF
  else
    local out=() p
    while (( ${#out[@]} < $1 )); do
      p=$(( 20000 + RANDOM % 30000 ))
      if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && [[ " ${out[*]} " != *" $p "* ]]; then
        out+=("$p")
      fi
    done
    echo "${out[*]}"
  fi
}

write_env() {
  local f="$DIR/cluster.env" i
  # KEY='value' lines: sourceable, and easy to parse (no value holds a quote)
  {
    printf "PG_BIN='%s'\nPG_DIR='%s'\nNODES=%d\nSOCKDIR='%s'\n" "$PG_BIN" "$DIR" "$NODES" "$SOCKDIR"
    for ((i = 0; i < NODES; i++)); do
      printf "PORT%d=%d\n" "$i" "$(port_of "$i")"
      printf "PID%d=%s\n" "$i" "$(pid_of "$i")"
      printf "URI%d='%s'\n" "$i" "$(node_uri "$i")"
    done
    printf "URI='%s'\n" "$(all_uri)"
  } >"$f.tmp"
  mv "$f.tmp" "$f"
}

node_uri() {
  printf 'postgresql://postgres@127.0.0.1:%d/tidemark?connect_timeout=2\n' "$(port_of "$1")"
}
all_uri() {
  local i hosts=""
  for ((i = 0; i < NODES; i++)); do hosts+="${hosts:+,}127.0.0.1:$(port_of "$i")"; done
  printf 'postgresql://postgres@%s/tidemark?target_session_attrs=read-write&connect_timeout=2\n' "$hosts"
}

sync_names() {
  local i names=""
  for ((i = 1; i < NODES; i++)); do names+="${names:+, }s$i"; done
  if [[ -n "$names" ]]; then printf "ANY 1 (%s)" "$names"; fi
}

# node.conf: what differs between nodes (included last by postgresql.conf).
write_node_conf() { # write_node_conf N PORT [UPSTREAM_PORT]
  local f; f="$(datadir "$1")/node.conf"
  {
    printf "port = %d\n" "$2"
    printf "cluster_name = 'tm-n%d'\n" "$1"
    if [[ -n "${3:-}" ]]; then
      printf "primary_conninfo = 'host=127.0.0.1 port=%d user=postgres application_name=s%d connect_timeout=2'\n" "$3" "$1"
    fi
  } >"$f"
  [[ $EUID -ne 0 ]] || chown postgres: "$f"
}

base_conf() { # settings of every node (appended to postgresql.conf by initdb's owner)
  cat <<EOF

# ---- pg_cluster.sh (test cluster) ----
listen_addresses = '127.0.0.1'
unix_socket_directories = '$SOCKDIR'
max_connections = 100
shared_buffers = 16MB
fsync = on
synchronous_commit = on
full_page_writes = on
wal_level = replica
wal_log_hints = on
max_wal_senders = 10
max_replication_slots = 10
wal_keep_size = '256MB'
hot_standby = on
hot_standby_feedback = on
wal_receiver_status_interval = 1s
wal_sender_timeout = 5s
wal_receiver_timeout = 5s
wal_retrieve_retry_interval = 500ms
logging_collector = off
log_line_prefix = '%m [%p] %a '
include_if_exists = 'node.conf'
EOF
}

hba_conf() {
  cat <<'EOF'
# pg_cluster.sh: a test cluster, trust on the socket and loopback only
local   all             all                         trust
local   replication     all                         trust
host    all             all         127.0.0.1/32    trust
host    replication     all         127.0.0.1/32    trust
EOF
}

# A killed postmaster's lock files (its socket's, its data directory's)
# name its PID, and until this machine's init reaps it the zombie still
# answers kill(pid, 0): a new postmaster on that port or directory refuses
# to start ("Is another postmaster (PID ...) using socket file"; seen when
# a node killed moments before was copied back). A lock whose owner is dead
# or a zombie holds nothing: removed before a start.
clear_stale_locks() { # clear_stale_locks N
  local sock; sock="$SOCKDIR/.s.PGSQL.$(port_of "$1")"
  local f p
  for f in "$sock.lock" "$(datadir "$1")/postmaster.pid"; do
    [[ -f "$f" ]] || continue
    p=$(head -n1 "$f" 2>/dev/null || true)
    if [[ -z "$p" ]] || ! alive "$p"; then
      rm -f "$f"
      [[ "$f" != "$sock.lock" ]] || rm -f "$sock"
    fi
  done
}

pg_start() { # pg_start N: start node N, wait until it accepts connections
  local d; d=$(datadir "$1")
  clear_stale_locks "$1"
  as_pg "$PG_BIN/pg_ctl" -D "$d" -l "$DIR/n$1.log" -w -t "$TIMEOUT_S" start >/dev/null ||
    { tail -n 20 "$DIR/n$1.log" >&2 || true; die "node $1 did not start (log: $DIR/n$1.log)"; }
}

# make_traversable DIR: the postgres user needs search (x) permission on
# every ancestor; a private temp dir (0700, root) gets o+x, nothing more.
make_traversable() {
  [[ $EUID -eq 0 ]] || return 0
  local p="" part
  local IFS=/
  for part in ${1#/}; do
    p+="/$part"
    if ! runuser -u postgres -- test -x "$p"; then
      log "chmod o+x $p (the postgres user must reach $1)"
      chmod o+x "$p"
    fi
  done
}

wait_streaming() { # wait_streaming PRIMARY NAME..: each NAME streams as quorum/sync standby
  local prim=$1; shift
  local deadline=$(( $(now_s) + TIMEOUT_S )) n ok st
  while :; do
    ok=1
    for n in "$@"; do
      st=$(q "$prim" "SELECT state || ':' || sync_state FROM pg_stat_replication WHERE application_name = '$n'" 2>/dev/null | head -n1 || true)
      case "$st" in
        streaming:quorum|streaming:sync|streaming:potential) ;;
        streaming:async) [[ -n "$(sync_names)" ]] && ok=0 ;;
        *) ok=0 ;;
      esac
    done
    (( ok )) && return 0
    (( $(now_s) < deadline )) || die "standbys $* not streaming from node $prim after ${TIMEOUT_S}s"
    sleep 0.1
  done
}

cmd_start() {
  local standbys=${1:-0}
  [[ "$standbys" =~ ^[0-9]+$ ]] || die "STANDBYS must be a number"
  [[ ! -e "$DIR/cluster.env" ]] || die "$DIR already holds a cluster (stop it, remove the directory)"
  mkdir -p "$DIR"
  DIR=$(cd "$DIR" && pwd)
  NODES=$((standbys + 1))
  make_traversable "$DIR"
  # A socket path is at most 107 bytes: a deep DIR gets a short socket dir.
  SOCKDIR=$DIR
  if (( ${#DIR} > 80 )); then SOCKDIR=$(mktemp -d /tmp/pgsock.XXXXXX); chmod 755 "$SOCKDIR"; fi
  [[ $EUID -ne 0 ]] || chown postgres: "$DIR" "$SOCKDIR"
  local ports; read -r -a ports <<<"$(free_ports "$NODES")"
  local i
  for ((i = 0; i < NODES; i++)); do eval "PORT$i=${ports[$i]}"; done
  local t0; t0=$(date +%s.%N)

  as_pg "$PG_BIN/initdb" -D "$DIR/n0" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 -N \
    >"$DIR/initdb.log" 2>&1 || { cat "$DIR/initdb.log" >&2; die "initdb failed"; }
  base_conf | as_pg tee -a "$DIR/n0/postgresql.conf" >/dev/null
  hba_conf | as_pg tee "$DIR/n0/pg_hba.conf" >/dev/null
  write_node_conf 0 "$PORT0"
  write_env
  pg_start 0
  q 0 "CREATE DATABASE tidemark" postgres >/dev/null

  # Standbys copied in parallel; the names are set after (a primary with
  # synchronous_standby_names and no standby would hold CREATE DATABASE).
  local pids=()
  for ((i = 1; i < NODES; i++)); do
    as_pg "$PG_BIN/pg_basebackup" -h 127.0.0.1 -p "$PORT0" -U postgres -D "$DIR/n$i" \
      -R -X stream -c fast -N -d "application_name=s$i" >"$DIR/basebackup$i.log" 2>&1 &
    pids+=($!)
  done
  for ((i = 1; i < NODES; i++)); do
    wait "${pids[$((i - 1))]}" || { cat "$DIR/basebackup$i.log" >&2; die "pg_basebackup of node $i failed"; }
    # -R wrote a primary_conninfo into postgresql.auto.conf: node.conf says it
    as_pg sed -i '/^primary_conninfo/d' "$DIR/n$i/postgresql.auto.conf"
    local p="PORT$i"
    write_node_conf "$i" "${!p}" "$PORT0"
  done
  local names; names=$(sync_names)
  for ((i = 0; i < NODES; i++)); do
    if [[ -n "$names" ]]; then
      printf "synchronous_standby_names = '%s'\n" "$names" | as_pg tee -a "$DIR/n$i/postgresql.conf" >/dev/null
    fi
  done
  for ((i = 1; i < NODES; i++)); do pg_start "$i" & pids[i - 1]=$!; done
  for ((i = 1; i < NODES; i++)); do wait "${pids[$((i - 1))]}"; done
  [[ -z "$names" ]] || q 0 "SELECT pg_reload_conf()" >/dev/null
  local all=(); for ((i = 1; i < NODES; i++)); do all+=("s$i"); done
  (( NODES == 1 )) || wait_streaming 0 "${all[@]}"
  write_env
  log "$NODES node(s) up in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s, ports ${ports[*]}, dir $DIR"
  all_uri
}

# kill_node N: SIGKILL node N's postmaster and every process it forked (each
# child runs in a session of its own, so no process group holds them all).
# The postmaster is stopped first so that it forks nothing while its
# children are listed, and killed last.
kill_node() {
  local pid; pid=$(pid_of "$1")
  [[ -n "$pid" ]] || return 0
  kill -STOP "$pid" 2>/dev/null || true
  # children first: one outliving the postmaster by a moment is told of its
  # death (PR_SET_PDEATHSIG) and says goodbye to its client, which a dying
  # machine would not
  local procs; procs="$(pgrep -P "$pid" | tr '\n' ' ') $pid"
  # shellcheck disable=SC2086
  kill -9 $procs 2>/dev/null || true
  local deadline=$(( $(now_s) + TIMEOUT_S )) p
  for p in $procs; do
    while alive "$p"; do
      (( $(now_s) < deadline )) || die "node $1: process $p still alive after SIGKILL"
      sleep 0.02
    done
  done
}

cmd_stop() {
  local i d
  for ((i = 0; i < NODES; i++)); do
    d=$(datadir "$i")
    if [[ -n "$(pid_of "$i")" ]]; then
      as_pg "$PG_BIN/pg_ctl" -D "$d" -m immediate -w -t 10 stop >/dev/null 2>&1 || true
    fi
    kill_node "$i"
  done
  if [[ "$SOCKDIR" != "$DIR" && "$SOCKDIR" == /tmp/pgsock.* ]]; then rm -rf "$SOCKDIR"; fi
  write_env
  log "stopped $NODES node(s) in $DIR"
}

cmd_promote() {
  local n=$1
  as_pg "$PG_BIN/pg_ctl" -D "$(datadir "$n")" -w -t "$TIMEOUT_S" promote >/dev/null
  # Accepting writes as libpq's target_session_attrs=read-write sees it.
  local deadline=$(( $(now_s) + TIMEOUT_S ))
  until [[ "$(q "$n" "SHOW transaction_read_only" 2>/dev/null || true)" == off ]]; do
    (( $(now_s) < deadline )) || die "node $n not read-write after promote"
    sleep 0.05
  done
  # The new primary waits for ANY 1 of the other nodes (their application names).
  local i names=""
  for ((i = 0; i < NODES; i++)); do (( i == n )) || names+="${names:+, }s$i"; done
  if [[ -n "$(sync_names)" && -n "$names" ]]; then
    q "$n" "ALTER SYSTEM SET synchronous_standby_names = 'ANY 1 ($names)'" >/dev/null
    q "$n" "SELECT pg_reload_conf()" >/dev/null
  fi
  log "node $n promoted (synchronous_standby_names 'ANY 1 ($names)')"
}

# rejoin N M: node N (a dead or diverged former primary, say) copied afresh
# from node M and streaming from it.
cmd_rejoin() {
  local n=$1 m=$2
  [[ "$n" != "$m" ]] || die "a node cannot follow itself"
  if [[ -n "$(pid_of "$n")" ]]; then
    as_pg "$PG_BIN/pg_ctl" -D "$(datadir "$n")" -m immediate -w -t 10 stop >/dev/null 2>&1 || true
  fi
  kill_node "$n"
  rm -rf "$(datadir "$n")"
  as_pg "$PG_BIN/pg_basebackup" -h 127.0.0.1 -p "$(port_of "$m")" -U postgres -D "$(datadir "$n")" \
    -R -X stream -c fast -N >"$DIR/basebackup$n.log" 2>&1 ||
    { cat "$DIR/basebackup$n.log" >&2; die "pg_basebackup of node $n from node $m failed"; }
  as_pg sed -i '/^primary_conninfo/d' "$(datadir "$n")/postgresql.auto.conf"
  write_node_conf "$n" "$(port_of "$n")" "$(port_of "$m")"
  pg_start "$n"
  wait_streaming "$m" "s$n"
  write_env
  log "node $n copied from node $m and streaming from it"
}

cmd_follow() {
  local n=$1 m=$2
  [[ "$n" != "$m" ]] || die "a node cannot follow itself"
  [[ -f "$(datadir "$n")/standby.signal" ]] || die "node $n is not a standby (a former primary needs pg_rewind)"
  write_node_conf "$n" "$(port_of "$n")" "$(port_of "$m")"
  if [[ -n "$(pid_of "$n")" ]]; then
    as_pg "$PG_BIN/pg_ctl" -D "$(datadir "$n")" -l "$DIR/n$n.log" -m fast -w -t "$TIMEOUT_S" restart >/dev/null
  else
    pg_start "$n"
  fi
  wait_streaming "$m" "s$n"
  write_env
  log "node $n streams from node $m"
}

lsn_of() {
  q "$1" "SELECT CASE WHEN pg_is_in_recovery() THEN coalesce(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()) ELSE pg_current_wal_lsn() END"
}

lsn_num() { # 'X/Y' -> integer
  local hi=${1%/*} lo=${1#*/}
  printf '%d\n' $(( (16#$hi << 32) | 16#$lo ))
}

cmd_most_advanced() {
  local best="" best_v=-1 n l v
  for n in "$@"; do
    l=$(lsn_of "$n" 2>/dev/null || true)
    [[ -n "$l" ]] || { log "node $n: no LSN (down?)"; continue; }
    v=$(lsn_num "$l")
    log "node $n: $l"
    if (( v > best_v )); then best=$n; best_v=$v; fi
  done
  [[ -n "$best" ]] || die "none of nodes $* answered"
  printf '%s\n' "$best"
}

main() {
  local cmd=${1:-}; shift || true
  case "$cmd" in
    start|stop|kill|start-node|stop-node|promote|follow|rejoin|lsn|most-advanced|psql|uri) ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
  PG_BIN=$(find_pg_bin)
  if [[ -z "$PG_BIN" || ! -x "$PG_BIN/initdb" || ! -x "$PG_BIN/pg_ctl" ]]; then
    log "SKIP: PostgreSQL server binaries (initdb, pg_ctl) not installed (scripts/install-deps.sh --test)"
    exit 77
  fi
  [[ $EUID -ne 0 ]] || id postgres >/dev/null 2>&1 || die "run as root: a 'postgres' user is needed"
  DIR=${1:?DIR missing}; shift
  if [[ "$cmd" == start ]]; then cmd_start "$@"; return; fi
  DIR=$(cd "$DIR" && pwd)
  local pgbin=$PG_BIN
  load_env
  PG_BIN=$pgbin
  case "$cmd" in
    stop) cmd_stop ;;
    kill) kill_node "${1:?N missing}"; write_env; log "node $1 killed" ;;
    start-node) pg_start "${1:?N missing}"; write_env ;;
    stop-node)
      as_pg "$PG_BIN/pg_ctl" -D "$(datadir "${1:?N missing}")" -m fast -w -t "$TIMEOUT_S" stop >/dev/null
      write_env ;;
    promote) cmd_promote "${1:?N missing}"; write_env ;;
    follow) cmd_follow "${1:?N missing}" "${2:?M missing}" ;;
    rejoin) cmd_rejoin "${1:?N missing}" "${2:?M missing}" ;;
    lsn) lsn_of "${1:?N missing}" ;;
    most-advanced) (( $# )) || die "most-advanced needs node numbers"; cmd_most_advanced "$@" ;;
    psql) q "${1:?N missing}" "${2:?SQL missing}" ;;
    uri) if (( $# )); then node_uri "$1"; else all_uri; fi ;;
  esac
}

main "$@"
