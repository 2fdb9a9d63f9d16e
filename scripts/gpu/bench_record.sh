#!/usr/bin/env bash
# A `metralectl bench` record of `met serve --device cuda` on Qwen3-8B's shape (dummy weights,
# bf16) on the GPU machine, from the repository root: the CUDA issue's workload (128-token
# prompts, 1024 generated, greedy, concurrency 1..128, 1 warm-up + 3 timed reps a rung).
# MODEL_CONFIG picks another shape's config.json (MODEL_NAME names it), e.g. Qwen3-30B-A3B:
#   MODEL_CONFIG=scripts/gpu/qwen3-30b-a3b-config.json MODEL_NAME=qwen3-30b-a3b-shape
#   MODEL_CONFIG=scripts/gpu/qwen3-30b-a3b-fp8-config.json MODEL_NAME=qwen3-30b-a3b-fp8-shape
# (an FP8 quantization_config makes the dummy projections FP8, drawn on the GPU; an NVFP4 one,
# e.g. scripts/gpu/qwen3.6-27b-nvfp4-config.json, NVFP4 where the config's ignore list allows).
# MAX_BATCH (default 128) is met's --max-batch-size: a hybrid's recurrent state is held for
# that many sequences (the 27B's: 151 MB each).
# Binaries built on the build machine in $METRALE_GPU_BIN (.gpu/bin): `met` (--features cuda)
# and `metralectl`. The record is written unsigned ($OUT/record.json): the signing key never
# travels to this machine; sign it on the build machine with `metralectl sign`.
# Also writes $OUT/serve.txt (met's log, with its step profile: METRALE_STEP_PROFILE) and
# $OUT/version.json (met's GET /version). BENCH_FLAGS adds metralectl bench flags (e.g.
# "--response-format json_object --against http://127.0.0.1:8104": a constrained ladder with the
# free one beside it on the same server).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
BIN=${METRALE_GPU_BIN:-.gpu/bin}
# The lease scripts unpack .gpu/bins.tar.gz (lease_common.sh); this one runs what is there.
[ -x "$BIN/met" ] && [ -x "$BIN/metralectl" ] || { echo "no $BIN/met or $BIN/metralectl: unpack .gpu/bins.tar.gz there first"; exit 2; }
OUT=${OUT:-/tmp/metrale-bench}
mkdir -p "$OUT"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH=$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
dir=$(mktemp -d)
MODEL_CONFIG=${MODEL_CONFIG:-scripts/gpu/qwen3-8b-config.json}
MODEL_NAME=${MODEL_NAME:-qwen3-8b-shape}
cp "$MODEL_CONFIG" "$dir/config.json" || exit 2
cp models/demo/tokenizer.json models/demo/tokenizer_config.json "$dir/"
# The demo tokenizer's end-of-sequence ids (models/demo/generation_config.json's) and nothing
# else, so sampling defaults stay greedy: constrained requests (--response-format) are refused
# without an end-of-sequence id, since their replies could never end.
echo '{"eos_token_id": [6002, 6000]}' >"$dir/generation_config.json"
METRALE_STEP_PROFILE=${METRALE_STEP_PROFILE:-512} "$BIN/met" serve "$dir" --device cuda \
    --load-format dummy --port 8104 --model-name "$MODEL_NAME" --no-tui \
    --max-seq-len "${MAX_SEQ_LEN:-2048}" --max-batch-size "${MAX_BATCH:-128}" --max-num-batched-tokens "${MAX_BATCHED:-8192}" \
    ${MET_FLAGS:-} >"$OUT/serve.txt" 2>&1 &
PID=$!
# Stop the server and wait until it has exited: the next run's server binds the same port and
# metrics socket (a lease that started the next one at once found both still held).
stop_server() { kill -INT $PID 2>/dev/null; for _ in $(seq 1 100); do kill -0 $PID 2>/dev/null || return; sleep 0.1; done; kill -9 $PID 2>/dev/null; wait $PID 2>/dev/null; }
trap stop_server EXIT
ready=
for _ in $(seq 1 600); do
    curl -sf http://127.0.0.1:8104/ready >/dev/null 2>&1 && ready=1 && break
    kill -0 $PID 2>/dev/null || break
    sleep 0.2
done
if [ -z "$ready" ]; then
    echo "met serve never became ready:"
    tail -n 30 "$OUT/serve.txt"
    exit 1
fi
curl -s http://127.0.0.1:8104/version >"$OUT/version.json"
# BENCH_DEADLINE (epoch seconds, e.g. from steps.sh): the bench gets what the server's start
# left of it, so a slow start does not cut the ladder short by a fixed allowance.
if [ -n "${BENCH_DEADLINE:-}" ]; then
    BENCH_TIMEOUT=$((BENCH_DEADLINE - $(date +%s) - 5))
fi
timeout "${BENCH_TIMEOUT:-420}" "$BIN/metralectl" bench --url http://127.0.0.1:8104 \
    --endpoint "${ENDPOINT:-completions}" --concurrency "${CONC:-1,2,4,8,16,32,64,128}" \
    --isl "${ISL:-128}" --osl "${OSL:-1024}" --reps "${REPS:-3}" --warmup 1 \
    --record "$OUT/record.json" ${BENCH_FLAGS:-}
echo "bench exit: $?"
curl -s http://127.0.0.1:8104/metrics | grep -E '^vllm:(num_preemptions_total|kv_cache_usage_perc)|^metrale:spec_decode_(drafts_per_step|acceptance_per_pos)'
grep 'step profile' "$OUT/serve.txt" | tail -n 40
