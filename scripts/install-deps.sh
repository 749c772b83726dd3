#!/usr/bin/env bash
# Installs what Tidemark needs on a bare Debian machine. Idempotent: a
# package already present is not reinstalled.
#   install-deps.sh         what building and running the programs needs (make run)
#   install-deps.sh --test  and what the tests need (make test): cmocka, the
#                           peers the tests start (redis-server, HAProxy, Node.js
#                           and the pinned npm peers in the git-ignored folder
#                           peers/node_modules), clang for the fuzzers, TSan
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"

pkgs=(build-essential cmake pkg-config libmicrohttpd-dev libjansson-dev
      libsqlite3-dev libhiredis-dev libcurl4-openssl-dev libgnutls28-dev
      librhonabwy-dev
      # libpq-dev: the PostgreSQL store's client library
      libpq-dev
      # libprotobuf-c-dev + protobuf-c-compiler: OTLP traces as http/protobuf
      libprotobuf-c-dev protobuf-c-compiler)
test_pkgs=(libcmocka-dev redis-server haproxy nodejs npm curl
      # clang + libclang-rt-14-dev: libFuzzer and its sanitizers (build-fuzz);
      # llvm: llvm-symbolizer for their stack traces; libtsan2: gcc's
      # ThreadSanitizer runtime (build-tsan)
      clang libclang-rt-14-dev llvm libtsan2
      # openssl: the CA and certificates tls_transport makes
      openssl
      # valgrind: callgrind's instruction counts (bench/instructions.sh)
      valgrind
      # postgresql-15: the clusters the PostgreSQL store tests start (initdb,
      # pg_basebackup, pg_ctl; never the system cluster); patroni + etcd-server:
      # the failover manager in the HA test
      postgresql-15 postgresql-client-15 patroni etcd-server
      # spin: the model checker (make model); dwarves (pahole) and
      # abigail-tools (abidiff): the public ABI checks
      spin dwarves abigail-tools)
with_tests=0
[ "${1:-}" = "--test" ] && with_tests=1
[ "$with_tests" = 1 ] && pkgs+=("${test_pkgs[@]}")
missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        # nodejs/npm may come from outside Debian; accept a working binary.
        case "$p" in
            nodejs) command -v node >/dev/null && continue ;;
            npm) command -v npm >/dev/null && continue ;;
        esac
        missing+=("$p")
    fi
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "install-deps: installing ${missing[*]}"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q
    $SUDO apt-get install -y -q "${missing[@]}"
fi

if [ "$with_tests" = 1 ] && [ -f "$here/peers/package-lock.json" ]; then
    stamp="$here/peers/node_modules/.tidemark-lock"
    if [ ! -f "$stamp" ] || ! cmp -s "$here/peers/package-lock.json" "$stamp"; then
        echo "install-deps: npm ci in peers/"
        (cd "$here/peers" && npm ci --no-audit --no-fund)
        cp "$here/peers/package-lock.json" "$stamp"
    fi
fi
