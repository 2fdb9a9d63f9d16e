#!/usr/bin/env bash
# Issue 32's lease (prefill on tensor cores), from the repository root, with .gpu/bins.tar.gz
# holding met (--features cuda), cuda_check (--features lab) and metralectl (docs/cuda.md).
#   lease_issue32.sh check          every correctness section of cuda_check, then the prefill
#                                   attention kernel benchmark (section prefill-attn)
#   lease_issue32.sh ttft SHAPES    long prompts (OSL 16) on `met serve`, the flash kernel on and
#                                   off (METRALE_ATTN_FLASH_MIN_ROWS=off) side by side in one run;
#                                   SHAPES: 8b (ISL 8192 at C=1 and 8, ISL 32768 at C=1), 35b-fp8
#                                   (ISL 8192 at C=1); FLASH=on runs only the flash side
# One kernel cache for every process. Under $OUT: summary.txt, record-<shape>-<isl>-<run>.json
# (unsigned: sign them on the build machine, docs/benchmarks.md) and all.tgz (every log).
LEASE=issue32
# shellcheck source=scripts/gpu/lease_common.sh
. "$(dirname "$0")/lease_common.sh"
what=${1:-check}
shift
case $what in
check)
    export CHECK_TIMEOUT=${CHECK_TIMEOUT:-480}
    export CHECK_ARGS=${CHECK_ARGS:-"--skip speed,moe-speed,profile"}
    OUT=$ROOT_OUT/work/check bash scripts/gpu/check.sh >/dev/null 2>&1
    rc=$?
    {
        echo "== check rc $rc"
        grep -E 'FAIL' "$ROOT_OUT/work/check/check.log" | sort -u | head -40
        grep -E 'paged_attention.*flash' "$ROOT_OUT/work/check/check.log" | head -20
        cat "$ROOT_OUT/work/check/summary.txt"
    } >>"$S"
    ;;
ttft)
    for shape in "$@"; do
        case $shape in
        8b) cfg=qwen3-8b-config.json name=qwen3-8b-shape runs=${RUNS:-"8192:1,8 32768:1"} ;;
        35b-fp8) cfg=qwen3.6-35b-a3b-fp8-config.json name=qwen3.6-35b-a3b-fp8-shape runs="8192:1" ;;
        *) echo "unknown shape $shape" >>"$S"; continue ;;
        esac
        for run in $runs; do for flash in ${FLASH:-on off}; do
            isl=${run%%:*} conc=${run#*:}
            o=$ROOT_OUT/work/$shape-$isl-$flash
            mkdir -p "$o"
            flag=16
            [ $flash = off ] && flag=off
            METRALE_ATTN_FLASH_MIN_ROWS=$flag OUT=$o MODEL_CONFIG=scripts/gpu/$cfg MODEL_NAME=$name \
                ISL=$isl OSL=16 REPS=3 CONC=$conc MAX_SEQ_LEN=$((isl + 64)) MAX_BATCHED=8192 \
                METRALE_GPU_BIN=.gpu/bin BENCH_TIMEOUT=${BENCH_TIMEOUT:-200} \
                bash scripts/gpu/bench_record.sh >"$o/bench.txt" 2>&1
            { echo "== $shape ISL $isl flash $flash"; grep -v 'step profile' "$o/bench.txt" | tail -n 8; } >>"$S"
            [ -f "$o/record.json" ] && cp "$o/record.json" "$ROOT_OUT/record-$shape-$isl-$flash.json"
        done; done
    done
    ;;
esac
lease_end
