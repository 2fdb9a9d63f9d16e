#!/usr/bin/env bash
# Issue 31's lease, from the repository root, with .gpu/bins.tar.gz holding met (--features cuda),
# cuda_check (--features lab) and metralectl (docs/cuda.md says how to build and pack them).
#   lease_issue31.sh check            every correctness section of cuda_check (no speed sections)
#   lease_issue31.sh ladders SHAPES   the serving ladders of SHAPES (8b 30b 30b-fp8 35b 35b-fp8),
#                                     each with the workload of the record it replaces
#   lease_issue31.sh ab SHAPES        C=1,2,4 with 3 reps, the build before the change
#                                     (.gpu/base.tar.gz: met) and this one, alternating
#   lease_issue31.sh serve            serve_check.sh without its ladder: a fixture served on
#                                     CUDA (bf16, float32, FP8 cache) against the CPU over HTTP
# One kernel cache for every process, so NVRTC compiles once a call. Under $OUT: summary.txt,
# record-<shape>.json (unsigned: sign them on the build machine, docs/benchmarks.md) and all.tgz
# (every log).
LEASE=issue31
# shellcheck source=scripts/gpu/lease_common.sh
. "$(dirname "$0")/lease_common.sh"
if [ -f .gpu/base.tar.gz ]; then
    mkdir -p .gpu/base && tar xzf .gpu/base.tar.gz -C .gpu/base && cp .gpu/bin/metralectl .gpu/base/
fi
what=${1:-check}
shift
case $what in
check)
    export CHECK_TIMEOUT=${CHECK_TIMEOUT:-420}
    export CHECK_ARGS=${CHECK_ARGS:-"--skip speed,moe-speed,profile"}
    OUT=$ROOT_OUT/work/check bash scripts/gpu/check.sh >/dev/null 2>&1
    rc=$?
    {
        echo "== check rc $rc"
        grep -E 'FAIL' "$ROOT_OUT/work/check/check.log" | sort -u | head -40
        cat "$ROOT_OUT/work/check/summary.txt"
        grep -E '^met score' "$ROOT_OUT/work/check/check.log"
    } >>"$S"
    ;;
serve)
    OUT=$ROOT_OUT/work/serve SKIP_LADDER=1 METRALE_GPU_BIN=.gpu/bin \
        timeout -k 5 ${SERVE_TIMEOUT:-300} bash scripts/gpu/serve_check.sh >/dev/null 2>&1
    rc=$?
    {
        echo "== serve_check rc $rc"
        grep -E '^== |^equal|differ|error' "$ROOT_OUT/work/serve/serve.log" | head -30
    } >>"$S"
    ;;
ladders | ab)
    runs=new
    [ "$what" = ab ] && runs="base new base new"
    for shape in "$@"; do for run in $runs; do
        osl=256 reps=1
        case $shape in
        8b) cfg=qwen3-8b-config.json name=qwen3-8b-shape osl=1024 reps=3 ;;
        30b) cfg=qwen3-30b-a3b-config.json name=qwen3-30b-a3b-shape ;;
        30b-fp8) cfg=qwen3-30b-a3b-fp8-config.json name=qwen3-30b-a3b-fp8-shape ;;
        35b) cfg=qwen3.6-35b-a3b-config.json name=qwen3.6-35b-a3b-shape ;;
        35b-fp8) cfg=qwen3.6-35b-a3b-fp8-config.json name=qwen3.6-35b-a3b-fp8-shape ;;
        *) echo "unknown shape $shape" >>"$S"; continue ;;
        esac
        bin=.gpu/bin conc=1,2,4,8,16,32,64,128
        if [ "$what" = ab ]; then
            reps=3 conc=1,2,4
            [ "$run" = base ] && bin=.gpu/base
        fi
        o=$ROOT_OUT/work/$shape-$run-$RANDOM
        mkdir -p "$o"
        OUT=$o MODEL_CONFIG=scripts/gpu/$cfg MODEL_NAME=$name OSL=$osl REPS=$reps CONC=$conc \
            METRALE_GPU_BIN=$bin BENCH_TIMEOUT=${BENCH_TIMEOUT:-240} \
            bash scripts/gpu/bench_record.sh >"$o/bench.txt" 2>&1
        { echo "== $shape ($run)"; tail -n 16 "$o/bench.txt" | grep -v 'step profile'; } >>"$S"
        [ "$what" = ladders ] && [ -f "$o/record.json" ] && cp "$o/record.json" "$ROOT_OUT/record-$shape.json"
    done; done
    ;;
esac
lease_end
