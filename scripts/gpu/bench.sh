#!/usr/bin/env bash
# The CUDA issue's benchmark on the GPU machine, from the repository root, with binaries built on
# the build machine in $METRALE_GPU_BIN (.gpu/bin, see docs/cuda.md):
#   1. `met serve --device cuda` on Qwen3-8B's shape (dummy weights): the ladder over HTTP,
#      128-token prompts, 1024 generated (ignore_eos), greedy, concurrency 1..128, one warm-up
#      and 3 timed reps a rung (scripts/gpu/http_probe.py ladder);
#   2. transformers `generate` on the same shape, bf16, sdpa, at a few batch sizes
#      (scripts/gpu/hf_bench.py), for the side-by-side ratio.
# Writes $OUT/ladder.json, $OUT/hf.json, $OUT/bench.log; ends within about 9 minutes.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
BIN=${METRALE_GPU_BIN:-.gpu/bin}
OUT=${OUT:-/tmp/metrale-bench}
OSL=${OSL:-1024}
CONC=${CONC:-1,2,4,8,16,32,64,128}
REPS=${REPS:-3}
HF_BATCH=${HF_BATCH:-1,8,32}
mkdir -p "$OUT"
LOG=$OUT/bench.log
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH=$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
PID=
trap '[ -n "$PID" ] && kill $PID 2>/dev/null' EXIT

{
    echo "== machine ($(date -u +%FT%TZ))"
    timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.sm,power.limit \
        --format=csv 2>&1
    echo "== 1. met serve --device cuda, Qwen3-8B shape, dummy weights"
    dir=$(mktemp -d)
    cp scripts/gpu/qwen3-8b-config.json "$dir/config.json"
    cp models/demo/tokenizer.json models/demo/tokenizer_config.json "$dir/"
    SECONDS=0
    "$BIN/met" serve "$dir" --device cuda --load-format dummy --port 8103 --model-name q8 \
        --max-seq-len 2048 --max-batch-size 128 --max-num-batched-tokens 8192 \
        ${MET_FLAGS:-} >"$OUT/q8-serve.txt" 2>&1 &
    PID=$!
    ready=
    for _ in $(seq 1 600); do
        curl -sf http://127.0.0.1:8103/ready >/dev/null 2>&1 && ready=1 && break
        sleep 0.2
    done
    cat "$OUT/q8-serve.txt"
    if [ -n "$ready" ]; then
        echo "ready in ${SECONDS} s"
        timeout 420 python3 scripts/gpu/http_probe.py ladder http://127.0.0.1:8103 --isl 128 \
            --osl "$OSL" --conc "$CONC" --reps "$REPS" --warmup 1 --out "$OUT/ladder.json"
        echo "ladder exit: $?"
        curl -s http://127.0.0.1:8103/metrics | grep -E '^vllm:(num_preemptions_total|kv_cache_usage_perc)'
    else
        echo "met serve never became ready"
    fi
    kill $PID 2>/dev/null
    wait $PID 2>/dev/null
    PID=
    echo "== 2. transformers on the same shape"
    timeout 240 python3 scripts/gpu/hf_bench.py --isl 128 --osl 128 --batch "$HF_BATCH" --reps 2 \
        --out "$OUT/hf.json"
    echo "hf exit: $?"
} 2>&1 | tee -a "$LOG"
