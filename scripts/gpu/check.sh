#!/usr/bin/env bash
# The one script to run on the GPU machine, from the repository root. It builds nothing: it runs
# binaries built on a build machine (docs/cuda.md says how) from $METRALE_GPU_BIN (.gpu/bin):
#   cuda_check  every CUDA op against the CPU reference, the fixture checkpoints against
#               transformers, then a speed probe at Qwen3-8B's shape
#   met         (optional) one `met score --device cuda` as a user would run it
# Full output goes to $OUT/check.log, structured results to $OUT/results.json, the short summary
# to $OUT/summary.txt, which is also printed last. Every step has a time limit, so the script ends
# within about 9 minutes whatever happens. Exit status: cuda_check's (0 pass, 1 a check failed,
# 2 no CUDA backend, 124 timed out).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

BIN=${METRALE_GPU_BIN:-.gpu/bin}
OUT=${OUT:-/tmp/metrale-gpu-check}
LIMIT=${CHECK_TIMEOUT:-420}
mkdir -p "$OUT"
LOG=$OUT/check.log
: >"$LOG"

export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH=$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# A fresh kernel cache: the first load compiles with NVRTC, the check then reloads from it.
export METRALE_KERNEL_CACHE=${METRALE_KERNEL_CACHE:-$(mktemp -d /tmp/metrale-kernels.XXXXXX)}
export RUST_BACKTRACE=1

log() { tee -a "$LOG"; }

{
    echo "== machine ($(date -u +%FT%TZ))"
    uname -srm
    grep -m1 PRETTY_NAME /etc/os-release 2>/dev/null
    timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.max.sm,power.limit \
        --format=csv 2>&1 || echo "nvidia-smi failed or is missing"
    timeout 30 nvidia-smi 2>&1 | head -n 20
    echo "== CUDA at $CUDA_HOME"
    ls "$CUDA_HOME"/lib64/libnvrtc.so.* "$CUDA_HOME"/lib64/libcublas.so.* 2>&1 | head -n 6
    if [ -f "$CUDA_HOME/version.json" ]; then
        grep -A 2 '"cuda_nvrtc"' "$CUDA_HOME/version.json" | grep version
    fi
    ls "$CUDA_HOME"/include/cuda_bf16.h "$CUDA_HOME"/include/cccl 2>&1 | head -n 2
    echo "kernel cache: $METRALE_KERNEL_CACHE"
    echo "== binaries in $BIN"
    ls -l "$BIN" 2>&1
} 2>&1 | log

if [ ! -x "$BIN/cuda_check" ]; then
    echo "== summary" | log
    echo "no $BIN/cuda_check: build it on the build machine (--features lab, its own cargo invocation) and copy it there (docs/cuda.md)" | log
    exit 2
fi
missing=$(ldd "$BIN/cuda_check" 2>&1 | grep 'not found')
[ -n "$missing" ] && echo "ldd: $missing" | log

echo "== cuda_check (limit ${LIMIT}s)" | log
# CHECK_ARGS passes more flags, e.g. CHECK_ARGS="--skip speed,moe-speed,profile".
# shellcheck disable=SC2086
timeout -k 10 "$LIMIT" "$BIN/cuda_check" --fixtures tests/fixtures --out "$OUT" ${CHECK_ARGS:-} 2>&1 | log
rc=${PIPESTATUS[0]}

if [ -x "$BIN/met" ]; then
    # One score through the CLI as a user runs it, on CUDA and on the CPU: a dense fixture and
    # the Qwen3-MoE ones (bf16 and FP8).
    toks=1487,1439,198,54,1354,385,1066,312
    for model in qwen3-gqa-tied qwen3-moe-mixed qwen3-moe-step2 qwen3-moe-fp8 qwen3-moe-fp8-hf; do
        model=tests/fixtures/models/$model
        echo "== met score --device cuda vs cpu ($model)" | log
        # The float32 path runs them all.
        for dev in cuda "cuda --dtype float32" cpu; do
            # shellcheck disable=SC2086
            out=$(timeout -k 5 60 "$BIN/met" score "$model" --device $dev --tokens "$toks" --top-k 1 2>&1)
            met_rc=$?
            sum=$(printf '%s' "$out" | grep -o '"sum_logprob":[^,]*')
            echo "met score --device $dev: exit $met_rc ${sum:-$(printf '%s' "$out" | tail -n 3)}" | log
        done
    done
fi

echo "== summary" | log
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "cuda_check was stopped after ${LIMIT}s (exit $rc); what it finished:" | log
fi
if [ -s "$OUT/summary.txt" ]; then
    log <"$OUT/summary.txt"
else
    echo "cuda_check exited $rc and wrote no summary; the end of its output:" | log
    grep -E 'FAIL|panicked|error' "$LOG" | tail -n 20 | log
fi
met_lines=$(grep -h '^met score' "$LOG")
[ -n "$met_lines" ] && echo "$met_lines" | log
echo "cuda_check exit status: $rc" | log
exit "$rc"
