#!/usr/bin/env bash
# model/check.sh - model-check Tidemark's core invariants with spin
# (model/README.md): every model's safety assertions and LTL properties must
# hold, and every known-bad variant must produce a counterexample (a model
# that stopped saying anything fails here). Exit 0 when all is as expected,
# 1 otherwise, 77 when spin is not installed.
#
#   bash model/check.sh              run everything (MODEL_JOBS=2 at once)
#   bash model/check.sh -k DIR       keep pan sources and trails in DIR
#   (environment: SPIN, CC, MODEL_JOBS; MODEL_ONLY=REGEX runs the checks
#   whose names match)
set -u

if [ "${1:-}" = --one ]; then
    one=1
    shift
else
    one=0
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CC=${CC:-cc}
SPIN=${SPIN:-spin}

# One check: NAME MODEL "DEFINES" KIND PROPS EXPECT
#   KIND safety: assertions and end states, no never claim (pan -DNOCLAIM)
#   KIND ltl:    each named LTL property in PROPS (comma-separated; a name
#                written !name must fail: its claim, not an assertion); with
#                EXPECT fail every property must fail and the model's
#                assertions are left out (-DLTL_ONLY)
#   EXPECT pass: no error, search complete; fail: at least one error
run_one() {
    local name=$1 model=$2 defs=$3 kind=$4 props=$5 expect=$6
    local dir="$work/$name"
    mkdir -p "$dir" && cp "$here/$model" "$dir/" || return 1
    cd "$dir" || return 1
    local sdefs="$defs" cdefs=""
    [ "$kind" = safety ] && cdefs="-DNOCLAIM -DSAFETY"
    [ "$kind" = ltl ] && [ "$expect" = fail ] && sdefs="$sdefs -DLTL_ONLY"
    # shellcheck disable=SC2086
    if ! "$SPIN" $sdefs -a "$model" > spin.out 2>&1; then
        echo "FAIL $name: spin -a failed"; sed 's/^/    /' spin.out; return 1
    fi
    # shellcheck disable=SC2086
    if ! $CC -O0 -pipe -w -DNOFAIR $cdefs -o pan pan.c 2> cc.out; then
        echo "FAIL $name: cc pan.c failed"; sed 's/^/    /' cc.out; return 1
    fi
    local list=safety rc=0
    [ "$kind" = ltl ] && list=${props//,/ }
    for p in $list; do
        local want=$expect
        case $p in '!'*) p=${p#!}; want=fail ;; esac
        local flags="-m200000 -w20"
        [ "$kind" = ltl ] && flags="$flags -a -N $p"
        # shellcheck disable=SC2086
        ./pan $flags > "pan-$p.out" 2>&1
        local errs states what
        errs=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "pan-$p.out" | tail -1)
        states=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' "pan-$p.out" | tail -1)
        what=$(grep -m1 -E 'violated|acceptance cycle|invalid end state' "pan-$p.out" | sed 's/^pan:[0-9]*: *//')
        if [ -z "$errs" ]; then
            echo "FAIL $name [$p]: pan gave no verdict"; sed 's/^/    /' "pan-$p.out"; rc=1; continue
        fi
        if [ "$want" = pass ]; then
            if [ "$errs" = 0 ] && grep -qE 'max search depth too small|Search not completed' "pan-$p.out"; then
                echo "FAIL $name [$p]: search incomplete"; rc=1
            elif [ "$errs" = 0 ]; then
                echo "ok   $name [$p]: holds, $states states"
            else
                echo "FAIL $name [$p]: $what"; rc=1
                echo "    trail (kept with -k DIR): cd DIR/$name && spin $sdefs -t -p $model"
            fi
        else
            if [ "$errs" != 0 ] && [ "$kind" = ltl ] && ! [[ "$what" == *'!('* || "$what" == *acceptance* ]]; then
                echo "FAIL $name [$p]: expected the claim to fail, an assertion did: $what"; rc=1
            elif [ "$errs" != 0 ]; then
                echo "ok   $name [$p]: counterexample as expected: $what"
            else
                echo "FAIL $name [$p]: expected a counterexample, none found ($states states)"; rc=1
            fi
        fi
    done
    return $rc
}

if [ $one = 1 ]; then
    work=$1
    shift
    IFS='|' read -r name model defs kind props expect <<< "$1"
    run_one "$name" "$model" "$defs" "$kind" "$props" "$expect"
    exit $?
fi

if ! command -v "$SPIN" > /dev/null 2>&1; then
    echo "model/check.sh: spin is not installed (Debian package spin): skipped"
    exit 77
fi
if ! command -v "$CC" > /dev/null 2>&1; then
    echo "model/check.sh: no C compiler ($CC) to build pan"
    exit 1
fi

if [ "${1:-}" = -k ]; then
    work=$2
    mkdir -p "$work"
else
    work=$(mktemp -d "${TMPDIR:-/tmp}/tidemark-model.XXXXXX")
    trap 'rm -rf "$work"' EXIT
fi

# name | model | spin defines | kind | properties | expect
CHECKS="
server|server.pml||safety||pass
server-ltl|server.pml||ltl|wire_le_durable,announced_le_durable|pass
early|server.pml|-DEMIT_EARLY|safety||pass
early-ltl|server.pml|-DEMIT_EARLY|ltl|announced_le_durable,!wire_le_durable|pass
bad-emit-before-commit|server.pml|-DBAD_EMIT_BEFORE_COMMIT|ltl|wire_le_durable|fail
bad-announce|server.pml|-DEMIT_EARLY -DBAD_ANNOUNCE|ltl|announced_le_durable|fail
bad-same-epoch|server.pml|-DBAD_SAME_EPOCH|safety||fail
bad-no-mac|server.pml|-DBAD_NO_MAC|safety||fail
client-atomic|client.pml|-DANY_REPLAY|safety||pass
client-atomic-ltl|client.pml|-DANY_REPLAY|ltl|never_twice,once_or_stop|pass
client-atomic-exact|client.pml||ltl|no_stop|pass
client-after|client.pml|-DCURSOR_AFTER -DANY_REPLAY|ltl|never_twice,once_or_stop|pass
client-after-exact|client.pml|-DCURSOR_AFTER|ltl|!no_stop|pass
client-after-idempotent|client.pml|-DCURSOR_AFTER -DIDEMPOTENT|ltl|never_twice,once_or_stop,no_stop|pass
client-before|client.pml|-DCURSOR_BEFORE -DANY_REPLAY|ltl|never_twice,once_or_stop|pass
client-before-exact|client.pml|-DCURSOR_BEFORE|ltl|!no_stop|pass
bad-cursor-before-dispatch|client.pml|-DCURSOR_BEFORE -DCURSOR_ONLY|safety||fail
bad-cursor-after-dispatch|client.pml|-DCURSOR_AFTER -DCURSOR_ONLY|safety||fail
requests-2025-atomic|requests.pml||safety||pass
requests-2025-atomic-ltl|requests.pml||ltl|at_most_once,true_answer,settles,exactly_once|pass
requests-2025-external|requests.pml|-DEXTERNAL|ltl|at_most_once,true_answer,settles|pass
requests-2026-atomic|requests.pml|-DMODERN|safety||pass
requests-2026-atomic-ltl|requests.pml|-DMODERN|ltl|at_most_once,true_answer,settles,exactly_once|pass
requests-2026-external|requests.pml|-DMODERN -DEXTERNAL|ltl|at_most_once,true_answer,settles|pass
requests-2025-3attempts|requests.pml|-DNATT=3 -DNCRASH=1|safety||pass
requests-2026-3attempts|requests.pml|-DMODERN -DNATT=3 -DNCRASH=1|safety||pass
requests-2025-claim-one-node|requests.pml|-DONE_NODE -DBAD_EEXIST_RUNS|safety||pass
requests-2025-claim-one-node-ltl|requests.pml|-DONE_NODE -DBAD_EEXIST_RUNS|ltl|at_most_once,true_answer,settles,exactly_once|pass
bad-2025-no-claim|requests.pml|-DONE_NODE -DBAD_EEXIST_RUNS -DBAD_NO_CLAIM|safety||fail
bad-2025-eexist-runs|requests.pml|-DBAD_EEXIST_RUNS|safety||fail
bad-run-before-durable|requests.pml|-DBAD_RUN_BEFORE_DURABLE -DEXTERNAL|safety||fail
bad-rerun-external|requests.pml|-DBAD_RERUN_EXTERNAL -DEXTERNAL|safety||fail
bad-no-closed-check|requests.pml|-DBAD_NO_CLOSED_CHECK|safety||fail
failover|failover.pml||safety||pass
failover-ltl|failover.pml||ltl|acked_survive,wire_le_durable|pass
bad-promote-async|failover.pml|-DBAD_PROMOTE_ASYNC|ltl|acked_survive|fail
bad-promote-lagging|failover.pml|-DBAD_PROMOTE_LAGGING|safety||fail
bad-ack-unknown|failover.pml|-DBAD_ACK_UNKNOWN|safety||fail
bad-local-ack|failover.pml|-DBAD_LOCAL_ACK|safety||fail
failover-two-losses|failover.pml|-DTWO_LOSSES|safety||fail
"

start=$(date +%s)
out=$(printf '%s\n' "$CHECKS" | grep -v '^$' | grep -E "^(${MODEL_ONLY:-.*})\|" |
      xargs -d '\n' -P "${MODEL_JOBS:-2}" -n 1 bash "$here/check.sh" --one "$work")
printf '%s\n' "$out"
nfail=$(printf '%s\n' "$out" | grep -c '^FAIL' || true)
nok=$(printf '%s\n' "$out" | grep -c '^ok' || true)
echo "model/check.sh: $nok as expected, $nfail not, in $(( $(date +%s) - start )) s"
[ "$nfail" = 0 ] && [ "$nok" -gt 0 ]
