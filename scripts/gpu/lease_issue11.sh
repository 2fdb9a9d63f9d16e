#!/usr/bin/env bash
# Issue 11's lease in one call, from the repository root, with $METRALE_GPU_BIN (.gpu/bin) holding
# cuda_check, met and metralectl (docs/cuda.md says how to build them): the ops, sampling and
# e2e checks, moe-speed at batch 1 and 8 (the sync probe, the decode skeletons, the A/B lines of
# every switch), then, if every check passed, the
# 30B-A3B-shape serving ladders in bf16 and FP8 for signed records (sign them on the build
# machine: docs/benchmarks.md). One kernel cache for every process, so NVRTC compiles once.
# Under $OUT: check/{check.log,summary.txt}, {bf16,fp8}/{record.json,serve.txt}.
cd "$(dirname "$0")/../.." || exit 2
ROOT_OUT=${OUT:-/tmp/metrale-issue11}
export METRALE_KERNEL_CACHE=/tmp/metrale-kernel-cache
mkdir -p "$METRALE_KERNEL_CACHE" "$ROOT_OUT/check"
export CHECK_TIMEOUT=300
export CHECK_ARGS=${CHECK_ARGS:-"--skip kernels,ops-f32,e2e-f32,ops-kv8,e2e-kv8,hybrid,speed,profile"}
export METRALE_MOE_SPEED_BATCHES=1,8 METRALE_MOE_SPEED_PREFILL=0
OUT=$ROOT_OUT/check bash scripts/gpu/check.sh >/dev/null 2>&1
rc=$?
rm -f "$ROOT_OUT/check/results.json"
L=$ROOT_OUT/check/check.log
grep -E 'FAIL' "$L" | sort -u | head -20
grep -E 'passed in|FAILED in|sync probe|skeleton' "$L" | sort -u
grep -E '30B-A3B (bf16|fp8) B=(1|8) ctx|down \+ combine dec|speed of bf16' "$L" | awk '!seen[$0]++'
echo "check rc $rc"
# A build that fails its checks gets no records.
[ "$rc" = 0 ] || exit "$rc"
# LADDERS=fp8 records only the FP8 ladder (a change that touches FP8 kernels alone).
for m in ${LADDERS:-bf16 fp8}; do
    if [ $m = bf16 ]; then cfg=scripts/gpu/qwen3-30b-a3b-config.json; name=qwen3-30b-a3b-shape
    else cfg=scripts/gpu/qwen3-30b-a3b-fp8-config.json; name=qwen3-30b-a3b-fp8-shape; fi
    mkdir -p "$ROOT_OUT/$m"
    OUT=$ROOT_OUT/$m MODEL_CONFIG=$cfg MODEL_NAME=$name CONC=1,2,4,8,16,32,64,128 OSL=256 REPS=1 \
        bash scripts/gpu/bench_record.sh 2>&1 | grep -vE '^\s*$' | tail -25
    rm -f "$ROOT_OUT/$m/version.json"
done
ls -la "$ROOT_OUT"/*
