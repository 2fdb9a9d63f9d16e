#!/usr/bin/env bash
# Issue 34's lease (MoE at high concurrency), from the repository root, with .gpu/bins.tar.gz
# holding cuda_check (--features lab), met (--features cuda) and metralectl (docs/cuda.md says
# how to build and pack them).
#   lease_issue34.sh profile   30B-A3B decode steps (cuda_check moe-speed, dummy weights, ctx
#                              128) at BATCHES (default 16,32,128), then the FP8 and bf16 steps
#                              at PROFILE_BATCH (default 128) under Nsight Compute: each kernel's
#                              own time (serialised, no PDL overlap) for about two steps, and
#                              the expert kernels' speed-of-light, occupancy and stall sections.
#   lease_issue34.sh check     cuda_check's kernels, ops, e2e (bf16 and f32) and hybrid sections
#                              (CHECK_SKIP overrides what is skipped); THEN="profile" or THEN=
#                              "ladders SHAPES" goes on in the same call (the check's logs in
#                              check.tgz).
#   lease_issue34.sh ladders SHAPES   metralectl bench ladders (ISL 128, OSL 256, CONC default
#                              1,8,32,64,128) of each shape in SHAPES (30b-fp8 30b 35b-fp8),
#                              one server at a time; record-<shape>.json unsigned.
# Under $OUT: summary.txt, the ncu CSVs and reports, all.tgz (every log).
LEASE=issue34
# shellcheck source=scripts/gpu/lease_common.sh
. "$(dirname "$0")/lease_common.sh"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH=$CUDA_HOME/bin:$PATH
ONLY=moe-speed
W=$ROOT_OUT/work
case ${1:-profile} in
check)
    # The correctness sections the MoE, plan, attention and FP8 GEMM kernels run in.
    timeout ${CHECK_TIMEOUT:-400} .gpu/bin/cuda_check \
        --skip ${CHECK_SKIP:-sampling,ops-kv8,e2e-kv8,speed,moe-speed,prefill-attn,profile} \
        >"$W/check.log" 2>&1
    { echo "== check rc $?"; grep -E 'FAIL' "$W/check.log" | sort -u | head -30
      grep -E ': (passed|[0-9]+ FAILED|skipped|FAILED)' "$W/check.log" | head -20; } >>"$S"
    if [ -n "$THEN" ]; then
        tar czf "$ROOT_OUT/check.tgz" -C "$W" . 2>/dev/null
        exec env -u THEN bash "$0" $THEN
    fi
    ;;
profile)
    METRALE_MOE_SPEED_BATCHES=${BATCHES:-16,32,128} METRALE_MOE_SPEED_PREFILL=0 \
        timeout 300 .gpu/bin/cuda_check --only $ONLY >"$W/moe-speed.log" 2>&1
    { echo "== moe-speed rc $?"; grep -E 'graph|FAIL' "$W/moe-speed.log" | grep -v 'pdl off' | head -60; } >>"$S"
    b=${PROFILE_BATCH:-128}
    for m in fp8 bf16; do
        # The load's fill kernels and the probes run but are not profiled.
        METRALE_MOE_SPEED_ONLY=$m METRALE_MOE_SPEED_BATCHES=$b METRALE_MOE_SPEED_PREFILL=0 \
            timeout 200 ncu --clock-control none --cache-control none \
            --metrics gpu__time_duration.sum --csv \
            -k 'regex:^(?!fill_|sync_probe|decode_skeleton|probe_)' --launch-count ${LAUNCHES:-1800} \
            .gpu/bin/cuda_check --only $ONLY >"$ROOT_OUT/ncu-$m-b$b.csv" 2>"$W/ncu-$m.err"
        echo "== ncu $m rc $? rows $(grep -c gpu__time_duration "$ROOT_OUT/ncu-$m-b$b.csv")" >>"$S"
        tail -n 3 "$W/ncu-$m.err" >>"$S"
    done
    METRALE_MOE_SPEED_ONLY=fp8 METRALE_MOE_SPEED_BATCHES=$b METRALE_MOE_SPEED_PREFILL=0 \
        timeout 150 ncu --clock-control none -k 'regex:moe_(gate_up|down)_fp8_small_any' \
        --launch-skip 2 --launch-count 2 --section SpeedOfLight --section Occupancy \
        --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
        .gpu/bin/cuda_check --only $ONLY >"$ROOT_OUT/ncu-experts-fp8-b$b.txt" 2>&1
    echo "== ncu experts rc $?" >>"$S"
    ;;
ladders)
    shapes="${*:2}"
    for shape in ${shapes:-30b-fp8}; do
        case $shape in
        30b) cfg=qwen3-30b-a3b-config.json name=qwen3-30b-a3b-shape ;;
        30b-fp8) cfg=qwen3-30b-a3b-fp8-config.json name=qwen3-30b-a3b-fp8-shape ;;
        35b-fp8) cfg=qwen3.6-35b-a3b-fp8-config.json name=qwen3.6-35b-a3b-fp8-shape ;;
        *) echo "unknown shape $shape" >>"$S"; continue ;;
        esac
        o=$W/$shape
        mkdir -p "$o"
        OUT=$o MODEL_CONFIG=scripts/gpu/$cfg MODEL_NAME=$name OSL=256 REPS=${REPS:-1} \
            CONC=${CONC:-1,8,32,64,128} METRALE_GPU_BIN=.gpu/bin BENCH_TIMEOUT=${BENCH_TIMEOUT:-240} \
            bash scripts/gpu/bench_record.sh >"$o/bench.txt" 2>&1
        { echo "== $shape"; grep -v 'step profile' "$o/bench.txt" | tail -n 12; } >>"$S"
        [ -f "$o/record.json" ] && cp "$o/record.json" "$ROOT_OUT/record-$shape.json"
    done
    ;;
esac
lease_end
