#!/usr/bin/env bash
# Issue 31's lease, from the repository root, with .gpu/bins.tar.gz holding met (--features cuda),
# cuda_check (--features lab) and metralectl (docs/cuda.md says how to build and pack them).
#   lease_issue31.sh check            every correctness section of cuda_check (no speed sections)
#   lease_issue31.sh ladders SHAPES   the serving ladders of SHAPES (8b 30b 30b-fp8 35b 35b-fp8),
#                                     each with the workload of the record it replaces
#   lease_issue31.sh ab SHAPES        C=1,2,4 with 3 reps, the build before the change
#                                     (.gpu/base.tar.gz: met) and this one, alternating
# One kernel cache for every process, so NVRTC compiles once a call. Under $OUT: summary.txt,
# record-<shape>.json (unsigned: sign them on the build machine, docs/benchmarks.md) and all.tgz
# (every log).
cd "$(dirname "$0")/../.." || exit 2
ROOT_OUT=${OUT:-/tmp/metrale-issue31}
mkdir -p "$ROOT_OUT/work" .gpu/bin
tar xzf .gpu/bins.tar.gz -C .gpu/bin || exit 2
if [ -f .gpu/base.tar.gz ]; then
    mkdir -p .gpu/base && tar xzf .gpu/base.tar.gz -C .gpu/base && cp .gpu/bin/metralectl .gpu/base/
fi
export METRALE_KERNEL_CACHE=/tmp/metrale-kernel-cache
mkdir -p "$METRALE_KERNEL_CACHE"
S=$ROOT_OUT/summary.txt
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
tar czf "$ROOT_OUT/all.tgz" -C "$ROOT_OUT/work" . 2>/dev/null
rm -rf "$ROOT_OUT/work"
cat "$S"
