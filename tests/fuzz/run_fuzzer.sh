#!/bin/sh
# run_fuzzer.sh BIN FUZZ_SRC_DIR TARGET WORK_DIR MAX_LEN
# Runs one libFuzzer binary for FUZZ_SECONDS (default 10) seconds, starting
# from the committed corpus FUZZ_SRC_DIR/corpus/TARGET and the regression
# inputs FUZZ_SRC_DIR/regressions/TARGET, which it only reads: inputs that
# find new coverage go to WORK_DIR/corpus (kept between runs), a crashing,
# leaking or slow input to WORK_DIR/crash-*, leak-*, timeout-*. Exits
# nonzero on any of those (libFuzzer's own exit status).
set -eu
bin=$1 src=$2 target=$3 work=$4 maxlen=$5
secs=${FUZZ_SECONDS:-10}
mkdir -p "$work/corpus"
set -- "$work/corpus" "$src/corpus/$target"
[ -d "$src/regressions/$target" ] && set -- "$@" "$src/regressions/$target"
dict=""
[ -f "$src/dict/$target.dict" ] && dict="-dict=$src/dict/$target.dict"
echo "run_fuzzer: $target for ${secs}s (artifacts in $work)"
# -timeout: one input running over 10 s is a failure (a hang).
# -rss_limit_mb: memory over 2 GiB is a failure.
exec "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len="$maxlen" \
    -print_final_stats=1 -artifact_prefix="$work/" $dict "$@"
