#!/usr/bin/env bash
# Issue 33's lease (MTP that pays), from the repository root, with .gpu/bins.tar.gz holding met
# (--features cuda) and metralectl (docs/cuda.md says how to build and pack them).
#   lease_issue33.sh spec    Qwen3.6-35B-A3B FP8 shape (dummy weights, ISL 128, OSL 256): plain,
#                            then --speculative --num-drafts 3 at forced acceptance 0.7 and at 0,
#                            one server each, side by side in one run. RUNS picks them (default
#                            "plain spec07 spec0"; fixed07 and fixed0 are the same with
#                            --speculative-draft-cost 0: always 3 drafts, no adaptive drafting).
#                            CONC (default 1,4,8,16) and REPS (default 2) override the ladder.
# One kernel cache for every process. Under $OUT: summary.txt, record-<run>.json (unsigned:
# sign them on the build machine, docs/benchmarks.md) and all.tgz (every log).
LEASE=issue33
# shellcheck source=scripts/gpu/lease_common.sh
. "$(dirname "$0")/lease_common.sh"
case ${1:-spec} in
spec)
    for run in ${RUNS:-plain spec07 spec0}; do
        flags= force= conc=${CONC:-1,4,8,16}
        case $run in
        spec07) flags="--speculative --num-drafts 3" force=0.7 ;;
        spec0) flags="--speculative --num-drafts 3" force=0 ;;
        fixed07) flags="--speculative --num-drafts 3 --speculative-draft-cost 0" force=0.7 ;;
        fixed0) flags="--speculative --num-drafts 3 --speculative-draft-cost 0" force=0 ;;
        esac
        o=$ROOT_OUT/work/$run
        mkdir -p "$o"
        env ${force:+METRALE_SPEC_FORCE_ACCEPT=$force} MET_FLAGS="$flags" OUT=$o \
            MODEL_CONFIG=scripts/gpu/qwen3.6-35b-a3b-fp8-config.json \
            MODEL_NAME=qwen3.6-35b-a3b-fp8-shape OSL=256 REPS=${REPS:-2} CONC=$conc \
            METRALE_GPU_BIN=.gpu/bin BENCH_TIMEOUT=${BENCH_TIMEOUT:-200} \
            bash scripts/gpu/bench_record.sh >"$o/bench.txt" 2>&1
        { echo "== $run ($flags, forced acceptance ${force:-none})"; grep -v 'step profile' "$o/bench.txt" | tail -n 10
          grep 'step profile' "$o/bench.txt" | tail -n 3; grep -iE 'graph|error' "$o/serve.txt" | head -5
          grep -E '^metrale:spec_decode' "$o/bench.txt" | head -6; } >>"$S"
        [ -f "$o/record.json" ] && cp "$o/record.json" "$ROOT_OUT/record-$run.json"
    done
    ;;
esac
lease_end
