#!/usr/bin/env bash
# Issue 32's mixed load on the GPU machine, from the repository root: `met serve --device cuda`
# on Qwen3-8B's shape (dummy weights; MODEL_CONFIG / MODEL_NAME pick another), then
# `metralectl bench --mixed`: STREAMS (16) streams decoding (ISL 128, OSL 256), alone and then
# while a LONG_ISL-token (8192) prompt arrives every LONG_EVERY (1s), DURATION (30s) a phase.
# MAX_BATCHED (8192) is the server's --max-num-batched-tokens: run it at 8192 and at 512 to
# compare token budgets; SERVE_EXTRA adds serve flags (e.g. --prefill-chunk-with-decodes 512).
# Binaries from $METRALE_GPU_BIN (.gpu/bin); the record is written
# unsigned to $OUT/mixed.json (sign it on the build machine, docs/benchmarks.md).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
BIN=${METRALE_GPU_BIN:-.gpu/bin}
OUT=${OUT:-/tmp/metrale-mixed}
mkdir -p "$OUT"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH=$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
dir=$(mktemp -d)
cp "${MODEL_CONFIG:-scripts/gpu/qwen3-8b-config.json}" "$dir/config.json" || exit 2
cp models/demo/tokenizer.json models/demo/tokenizer_config.json "$dir/"
long=${LONG_ISL:-8192}
"$BIN/met" serve "$dir" --device cuda --load-format dummy --port 8104 \
    --model-name "${MODEL_NAME:-qwen3-8b-shape}" --no-tui --max-seq-len $((long + 128)) \
    --max-batch-size 128 --max-num-batched-tokens "${MAX_BATCHED:-8192}" ${SERVE_EXTRA:-} >"$OUT/serve.txt" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null' EXIT
for _ in $(seq 1 600); do
    curl -sf http://127.0.0.1:8104/ready >/dev/null 2>&1 && break
    sleep 0.2
done
timeout "${BENCH_TIMEOUT:-240}" "$BIN/metralectl" bench --url http://127.0.0.1:8104 --mixed \
    --streams "${STREAMS:-16}" --isl 128 --osl 256 --long-isl "$long" --long-osl 16 \
    --long-every "${LONG_EVERY:-1s}" --duration "${DURATION:-30s}" --warmup 1 \
    --record "$OUT/mixed.json"
echo "bench exit: $?"
