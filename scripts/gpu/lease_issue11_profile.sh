#!/usr/bin/env bash
# Issue 11's profiling lease in one call, from the repository root, with $METRALE_GPU_BIN
# (.gpu/bin) holding cuda_check (docs/cuda.md says how to build it): moe-speed at batch 1 (the
# sync probe, the persistent-kernel skeleton, the A/B lines), then the FP8 and the bf16 batch-1
# configs under Nsight Compute for each kernel's own time (serialised, no programmatic dependent
# launch overlap, L2 left as the step leaves it). Under $OUT: moe-speed.log, ncu-{fp8,bf16}.csv
# (scripts/gpu/ncu_step.py folds them into a step's table).
cd "$(dirname "$0")/../.." || exit 2
BIN=${METRALE_GPU_BIN:-.gpu/bin}
OUT=${OUT:-/tmp/metrale-issue11-profile}
mkdir -p "$OUT"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH=$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$CUDA_HOME/bin:$PATH
export METRALE_KERNEL_CACHE=/tmp/metrale-kernel-cache
mkdir -p "$METRALE_KERNEL_CACHE"
export METRALE_MOE_SPEED_BATCHES=1 METRALE_MOE_SPEED_PREFILL=0
ONLY=moe-speed
timeout 240 "$BIN/cuda_check" --only $ONLY >"$OUT/moe-speed.log" 2>&1
echo "moe-speed rc $?"
grep -E 'sync probe|skeleton|B=1 ctx 128 graph  |FAIL' "$OUT/moe-speed.log" | awk '!seen[$0]++'
command -v ncu || { echo "no ncu"; exit 0; }
for m in fp8 bf16; do
    # The load's fill kernels, the probes and the skeleton run but are not profiled.
    METRALE_MOE_SPEED_ONLY=$m timeout 150 ncu --clock-control none --cache-control none \
        --metrics gpu__time_duration.sum --csv -k 'regex:^(?!fill_|sync_probe|decode_skeleton)' \
        --launch-count 1100 "$BIN/cuda_check" --only $ONLY >"$OUT/ncu-$m.csv" 2>"$OUT/ncu-$m.err"
    echo "ncu $m rc $? rows $(grep -c gpu__time_duration "$OUT/ncu-$m.csv")"
    tail -n 3 "$OUT/ncu-$m.err"
done
