#!/usr/bin/env bash
# Issue 31's lease, from the repository root, with .gpu/bins.tar.gz holding met (--features cuda),
# cuda_check (--features lab) and metralectl (docs/cuda.md says how to build and pack them).
#   lease_issue31.sh check            every correctness section of cuda_check (no speed sections)
#   lease_issue31.sh ladders SHAPES   the serving ladders of SHAPES (8b 30b 30b-fp8 35b 35b-fp8),
#                                     each with the workload of the record it replaces
# One kernel cache for every process, so NVRTC compiles once a call. Under $OUT: summary.txt,
# record-<shape>.json (unsigned: sign them on the build machine, docs/benchmarks.md) and all.tgz
# (every log).
cd "$(dirname "$0")/../.." || exit 2
ROOT_OUT=${OUT:-/tmp/metrale-issue31}
mkdir -p "$ROOT_OUT/work" .gpu/bin
tar xzf .gpu/bins.tar.gz -C .gpu/bin || exit 2
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
ladders)
    for shape in "$@"; do
        osl=256 reps=1
        case $shape in
        8b) cfg=qwen3-8b-config.json name=qwen3-8b-shape osl=1024 reps=3 ;;
        30b) cfg=qwen3-30b-a3b-config.json name=qwen3-30b-a3b-shape ;;
        30b-fp8) cfg=qwen3-30b-a3b-fp8-config.json name=qwen3-30b-a3b-fp8-shape ;;
        35b) cfg=qwen3.6-35b-a3b-config.json name=qwen3.6-35b-a3b-shape ;;
        35b-fp8) cfg=qwen3.6-35b-a3b-fp8-config.json name=qwen3.6-35b-a3b-fp8-shape ;;
        *) echo "unknown shape $shape" >>"$S"; continue ;;
        esac
        o=$ROOT_OUT/work/$shape
        mkdir -p "$o"
        OUT=$o MODEL_CONFIG=scripts/gpu/$cfg MODEL_NAME=$name OSL=$osl REPS=$reps \
            BENCH_TIMEOUT=${BENCH_TIMEOUT:-240} bash scripts/gpu/bench_record.sh >"$o/bench.txt" 2>&1
        { echo "== $shape"; tail -n 16 "$o/bench.txt"; } >>"$S"
        [ -f "$o/record.json" ] && cp "$o/record.json" "$ROOT_OUT/record-$shape.json"
    done
    ;;
esac
tar czf "$ROOT_OUT/all.tgz" -C "$ROOT_OUT/work" . 2>/dev/null
rm -rf "$ROOT_OUT/work"
cat "$S"
