#!/usr/bin/env bash
# `met serve --device cuda` on the GPU machine, from the repository root, with binaries built on
# the build machine in $METRALE_GPU_BIN (.gpu/bin, see docs/cuda.md):
#   1. a fixture model served on CUDA (bf16, the float32 path, bf16 with the FP8 KV cache) and
#      on the CPU (with an FP8-rounding cache for the last): greedy completions must be
#      identical (bf16 may flip near-ties; with the FP8 cache the count is reported only: the
#      device rounds bf16 values to e4m3 where the CPU rounds f32 ones, and one e4m3 step,
#      2^-4 of a value, is enough to move a greedy path on these random fixtures);
#   1b. each hybrid fixture with its MTP head on CUDA with --speculative against without:
#      greedy completions must be identical (verify steps replay CUDA graphs);
#   2. Qwen3-8B's shape with dummy weights on CUDA: a quick throughput ladder over HTTP
#      (SKIP_LADDER=1 skips it).
# Writes $OUT/serve.log and $OUT/ladder.json; ends within about 5 minutes.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
BIN=${METRALE_GPU_BIN:-.gpu/bin}
OUT=${OUT:-/tmp/metrale-serve-check}
mkdir -p "$OUT"
LOG=$OUT/serve.log
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH=$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null' EXIT

wait_ready() {
    for _ in $(seq 1 600); do
        curl -sf "$1/ready" >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    echo "server $1 never became ready" | tee -a "$LOG"
    return 1
}

{
    model=tests/fixtures/models/qwen3-gqa-tied
    "$BIN/met" serve "$model" --device cpu --port 8102 --model-name t >/dev/null 2>&1 &
    cpu_pid=$!
    # The FP8 KV cache is compared with a CPU server whose cache rounds the same way.
    "$BIN/met" serve "$model" --device cpu --kv-cache-dtype fp8 --port 8104 --model-name t \
        >/dev/null 2>&1 &
    cpu8_pid=$!
    # ONLY_SPEC=1 runs 1b alone.
    [ "${ONLY_SPEC:-0}" = 1 ] || for variant in bfloat16 float32 fp8kv; do
        case $variant in
            fp8kv) flags=(--dtype bfloat16 --kv-cache-dtype fp8); cpu=http://127.0.0.1:8104 ;;
            *) flags=(--dtype "$variant"); cpu=http://127.0.0.1:8102 ;;
        esac
        echo "== 1. fixture on cuda ($variant) and cpu, greedy over HTTP"
        "$BIN/met" serve "$model" --device cuda "${flags[@]}" --port 8101 --model-name t \
            >"$OUT/cuda-serve-$variant.txt" 2>&1 &
        PIDS+=($!)
        wait_ready http://127.0.0.1:8101 && wait_ready "$cpu" &&
            timeout 120 python3 scripts/gpu/http_probe.py equal http://127.0.0.1:8101 "$cpu"
        echo "equal exit ($variant): $?"
        cat "$OUT/cuda-serve-$variant.txt"
        kill "${PIDS[@]}" 2>/dev/null
        wait "${PIDS[@]}" 2>/dev/null
        PIDS=()
    done
    kill "$cpu_pid" "$cpu8_pid" 2>/dev/null
    wait 2>/dev/null
    # MTP speculative decoding (verify steps and the head's chained passes replayed as CUDA
    # graphs) must not change greedy output: each hybrid fixture with its MTP head, with and
    # without --speculative (drafting every step: --speculative-draft-cost 0). The same with
    # --enforce-eager (every pass eager) drafts the same tokens: its acceptance counters are
    # printed beside the graphed server's.
    for model in qwen3_5-hybrid-dense qwen3_5-hybrid-moe; do
        echo "== 1b. $model on cuda, --speculative --num-drafts 3 against plain, greedy over HTTP"
        "$BIN/met" serve "tests/fixtures/models/$model" --device cuda --port 8105 --model-name t \
            --gpu-memory-utilization 0.3 \
            >"$OUT/plain-$model.txt" 2>&1 &
        PIDS+=($!)
        wait_ready http://127.0.0.1:8105
        # The speculative servers one at a time, after the plain one is up, each allowed 0.6 of
        # the GPU: a server counts every process's memory as in use (the plain one's 0.3 too).
        spec=(--speculative --num-drafts 3 --speculative-draft-cost 0 --gpu-memory-utilization 0.6)
        for eager in 0 1; do
            port=$((8106 + eager))
            "$BIN/met" serve "tests/fixtures/models/$model" --device cuda --port $port --model-name t \
                "${spec[@]}" $([ $eager = 1 ] && echo --enforce-eager) \
                >"$OUT/spec-$eager-$model.txt" 2>&1 &
            pid=$!
            what="speculative, $([ $eager = 1 ] && echo eager || echo graphs), $model"
            if wait_ready http://127.0.0.1:$port; then
                timeout 120 python3 scripts/gpu/http_probe.py equal http://127.0.0.1:$port \
                    http://127.0.0.1:8105
                echo "equal exit ($what): $?"
            else
                echo "equal exit ($what): no server"
            fi
            curl -s "http://127.0.0.1:$port/metrics" | grep -E '^(vllm|metrale):spec_decode' \
                | grep -v '_created' >"$OUT/spec-metrics-$port-$model.txt"
            grep -iE 'error|warn' "$OUT/spec-$eager-$model.txt" | head -5
            kill $pid 2>/dev/null
            wait $pid 2>/dev/null
        done
        # Concurrent requests batch by timing, and a near-tie may round another way at another
        # batch size, so equal counters are expected, not guaranteed: both are printed.
        if cmp -s "$OUT/spec-metrics-8106-$model.txt" "$OUT/spec-metrics-8107-$model.txt"; then
            echo "drafts graphed = eager ($model): acceptance counters equal"
        else
            echo "drafts graphed vs eager ($model): acceptance counters differ"
            diff "$OUT/spec-metrics-8106-$model.txt" "$OUT/spec-metrics-8107-$model.txt" | head -12
        fi
        head -8 "$OUT/spec-metrics-8106-$model.txt"
        kill "${PIDS[@]}" 2>/dev/null
        wait "${PIDS[@]}" 2>/dev/null
        PIDS=()
    done
    [ "${SKIP_LADDER:-0}" = 1 ] && exit 0

    echo "== 2. Qwen3-8B shape, dummy weights, cuda"
    dir=$(mktemp -d)
    cp scripts/gpu/qwen3-8b-config.json "$dir/config.json"
    cp models/demo/tokenizer.json models/demo/tokenizer_config.json "$dir/"
    SECONDS=0
    "$BIN/met" serve "$dir" --device cuda --load-format dummy --port 8103 --model-name q8 \
        --max-seq-len 4096 --max-batch-size 128 --max-num-batched-tokens 8192 >"$OUT/q8-serve.txt" 2>&1 &
    PIDS+=($!)
    if wait_ready http://127.0.0.1:8103; then
        echo "8B dummy ready in ${SECONDS} s"
        cat "$OUT/q8-serve.txt"
        timeout 240 python3 scripts/gpu/http_probe.py ladder http://127.0.0.1:8103 --isl 128 --osl 256 \
            --conc 1,8,32,64,128 --out "$OUT/ladder.json"
        echo "ladder exit: $?"
        curl -s http://127.0.0.1:8103/metrics | grep -E '^vllm:(num_preemptions_total|kv_cache_usage_perc|time_to_first_token_seconds_(sum|count))'
    else
        cat "$OUT/q8-serve.txt"
    fi
} 2>&1 | tee -a "$LOG"
