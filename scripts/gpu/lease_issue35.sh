#!/usr/bin/env bash
# Issue 35's lease (NVFP4 weights measurable on Hopper with dummy weights), from the repository
# root, with .gpu/bins.tar.gz holding cuda_check (--features lab), met (--features cuda) and
# metralectl (scripts/gpu/pack.sh builds and packs them).
#   lease_issue35.sh nvfp4   Qwen3.6-27B's shape (scripts/gpu/qwen3.6-27b-*-config.json, dummy
#                            weights drawn on the GPU) in NVFP4, FP8 and bf16, one server each:
#                            metralectl bench ladders at CONC (default 1,4,16,64), REPS
#                            (default 1), ISL 128, OSL 256, --max-batch-size MAX_BATCH (default 64: the recurrent
#                            state of 64 sequences beside bf16's 55 GB fits an 80 GB H100).
#                            About 2 minutes a format. FORMATS picks them (default
#                            "nvfp4 fp8 bf16").
#   lease_issue35.sh gemv    cuda_check's NVFP4 GEMV table only (cuda_check
#                            section nvfp4-speed): NVFP4 / FP8 / bf16 matmuls at the 27B's
#                            shapes, 1 to 32 rows, µs, TB/s and the byte floor. Under a minute.
#   lease_issue35.sh check   cuda_check's ops and ops-f32 sections (the dummy NVFP4 upload
#                            checks: the device's draw byte for byte the host's; the NVFP4
#                            matmuls against the CPU), then the GEMV table; THEN="nvfp4" goes on
#                            to the ladders in the same call.
# One kernel cache for every process. Under $OUT: summary.txt, record-27b-<format>.json
# (unsigned: sign them on the build machine, docs/benchmarks.md) and all.tgz (every log).
LEASE=issue35
# shellcheck source=scripts/gpu/lease_common.sh
. "$(dirname "$0")/lease_common.sh"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH=$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
W=$ROOT_OUT/work
gemv() {
    timeout ${GEMV_TIMEOUT:-150} .gpu/bin/cuda_check \
        --only nvfp4-speed >"$W/gemv.log" 2>&1
    { echo "== gemv rc $?"; grep -E 'nvfp4|rows|FAIL|stopped' "$W/gemv.log" | head -70; } >>"$S"
}
case ${1:-nvfp4} in
check)
    timeout ${CHECK_TIMEOUT:-300} .gpu/bin/cuda_check \
        --only ops,ops-nvfp4,ops-f32,nvfp4-speed \
        >"$W/check.log" 2>&1
    { echo "== check rc $?"; grep -E 'FAIL' "$W/check.log" | sort -u | head -30
      grep -E 'nvfp4' "$W/check.log" | head -30
      grep -E ': (passed|[0-9]+ FAILED|skipped|FAILED)' "$W/check.log" | head -20; } >>"$S"
    gemv
    if [ -n "$THEN" ]; then
        tar czf "$ROOT_OUT/check.tgz" -C "$W" . 2>/dev/null
        exec env -u THEN bash "$0" $THEN
    fi
    ;;
gemv)
    gemv
    ;;
nvfp4)
    for f in ${FORMATS:-nvfp4 fp8 bf16}; do
        case $f in
        nvfp4) cfg=qwen3.6-27b-nvfp4-config.json ;;
        fp8) cfg=qwen3.6-27b-fp8-config.json ;;
        bf16) cfg=qwen3.6-27b-config.json ;;
        *) echo "unknown format $f" >>"$S"; continue ;;
        esac
        o=$W/27b-$f
        mkdir -p "$o"
        OUT=$o MODEL_CONFIG=scripts/gpu/$cfg MODEL_NAME=qwen3.6-27b-$f-shape OSL=256 \
            REPS=${REPS:-1} CONC=${CONC:-1,4,16,64} MAX_BATCH=${MAX_BATCH:-64} METRALE_GPU_BIN=.gpu/bin \
            BENCH_TIMEOUT=${BENCH_TIMEOUT:-150} bash scripts/gpu/bench_record.sh >"$o/bench.txt" 2>&1
        { echo "== 27b $f"; grep -E 'weights:|error|Error' "$o/serve.txt" | head -4
          grep -v 'step profile' "$o/bench.txt" | tail -n 10
          grep 'step profile' "$o/bench.txt" | tail -n 2; } >>"$S"
        [ -f "$o/record.json" ] && cp "$o/record.json" "$ROOT_OUT/record-27b-$f.json"
    done
    ;;
*)
    echo "usage: lease_issue35.sh nvfp4|gemv|check" >&2
    exit 2
    ;;
esac
lease_end
