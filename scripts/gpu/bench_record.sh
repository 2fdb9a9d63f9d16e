#!/usr/bin/env bash
# A signed `metralectl bench` record of `met serve --device cuda` on Qwen3-8B's shape (dummy
# weights, bf16) on the GPU machine, from the repository root. Binaries built on the build machine
# in $METRALE_GPU_BIN: `met` (with --features cuda) and `metralectl`; the secret key in $BENCH_KEY.
# Writes $OUT/record.json(.minisig), $OUT/serve.txt and prints the table.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
BIN=${METRALE_GPU_BIN:-.gpu/bin}
OUT=${OUT:-/tmp/metrale-bench}
KEY=${BENCH_KEY:?set BENCH_KEY to the secret key from metralectl bench keygen}
mkdir -p "$OUT"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH=$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
dir=$(mktemp -d)
cp scripts/gpu/qwen3-8b-config.json "$dir/config.json"
cp models/demo/tokenizer.json models/demo/tokenizer_config.json "$dir/"
"$BIN/met" serve "$dir" --device cuda --load-format dummy --port 8104 --model-name qwen3-8b-shape \
    --max-seq-len 2048 --max-batch-size 128 --max-num-batched-tokens 8192 >"$OUT/serve.txt" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null' EXIT
for _ in $(seq 1 600); do
    curl -sf http://127.0.0.1:8104/ready >/dev/null 2>&1 && break
    sleep 0.2
done
"$BIN/metralectl" bench --url http://127.0.0.1:8104 --endpoint "${ENDPOINT:-chat}" \
    --concurrency "${CONC:-1,4,16,64}" --isl "${ISL:-128}" --osl "${OSL:-256}" \
    --reps "${REPS:-2}" --warmup 1 --record "$OUT/record.json" --sign "$KEY"
echo "bench exit: $?"
"$BIN/metralectl" verify "$OUT/record.json" --pubkey "$KEY.pub"
