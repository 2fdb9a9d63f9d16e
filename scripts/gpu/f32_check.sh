#!/usr/bin/env bash
# The float32 path's checks on the GPU machine in one go, in parallel where they share nothing
# but the GPU: cuda_check's ops-f32 + e2e-f32 (every fixture), its bf16 e2e
# and ops for comparison, `met score --dtype float32` against the cpu on the MoE, FP8 and hybrid
# fixtures, and scripts/gpu/hf_bf16_gap.py (transformers' own bf16 gap). Binaries from $BIN
# (default .gpu-f32), fixtures from $FIXTURES (default tests/fixtures); logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
BIN=${BIN:-.gpu-f32}
FIXTURES=${FIXTURES:-tests/fixtures}
OUT=${OUT:-/tmp/metrale-f32-check}
LIMIT=${CHECK_TIMEOUT:-270}
mkdir -p "$OUT"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH=$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export RUST_BACKTRACE=1 PYTHONUNBUFFERED=1
skip_all=kernels,ops,ops-nemotron-moe,sampling,e2e,ops-f32,e2e-f32,ops-kv8,e2e-kv8,kv-groups,hybrid,speed,moe-speed,profile
# cuda_check running only the sections named in $2, into $OUT/$1.
check() {
    local skip
    skip=$(printf '%s' "$skip_all" | tr , '\n' | grep -vxF -f <(printf '%s' "$2" | tr , '\n') | paste -sd,)
    mkdir -p "$OUT/$1"
    METRALE_KERNEL_CACHE=$(mktemp -d) timeout -k 10 "$LIMIT" "$BIN/cuda_check" --fixtures "$FIXTURES" \
        --out "$OUT/$1" --skip "$skip" >"$OUT/$1/log.txt" 2>&1
    echo "cuda_check $2: exit $?" >>"$OUT/$1/log.txt"
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$OUT/machine.txt" 2>&1
check f32 ops-f32,e2e-f32 &
check e2e e2e &
check ops ops &
timeout -k 10 "$LIMIT" python3 scripts/gpu/hf_bf16_gap.py --fixtures "$FIXTURES" --out "$OUT/hf" >"$OUT/hf_bf16_gap.txt" 2>&1 &
{
    toks=1487,1439,198,54,1354,385,1066,312
    for model in qwen3-moe-fp8 qwen3-moe-mixed qwen3_5-hybrid-moe-fp8 qwen3_5-hybrid-dense; do
        for dev in "cuda --dtype float32" cuda cpu; do
            # shellcheck disable=SC2086
            r=$(METRALE_KERNEL_CACHE=/tmp/met-kc timeout -k 5 60 "$BIN/met" score "$FIXTURES/models/$model" --device $dev --tokens "$toks" --top-k 1 2>&1)
            echo "$model --device $dev: exit $? $(printf '%s' "$r" | grep -o '"sum_logprob":[^,]*' || printf '%s' "$r" | tail -n 2)"
        done
    done
} >"$OUT/met_score.txt" 2>&1 &
wait
for d in f32 e2e ops; do cat "$OUT/$d/summary.txt" 2>/dev/null; done
cat "$OUT/met_score.txt"
tail -n 15 "$OUT/hf_bf16_gap.txt"
tar -C "$OUT" -czf "$OUT/all.tgz" f32 e2e ops hf 2>/dev/null
rm -rf "$OUT/f32" "$OUT/e2e" "$OUT/ops" "$OUT/hf"
