#!/usr/bin/env bash
# Profiles one command on the device and writes a kernel-time summary under $OUT/prof-NAME/:
#   bash scripts/gpu/prof.sh NAME -- COMMAND...
# With nsys (Nsight Systems): a trace, then `nsys stats` reports of kernel time by name
# (cuda_gpu_kern_sum), API calls (cuda_api_sum) and the kernel launches in order
# (cuda_gpu_trace, first 4,000 rows), as CSV. Without nsys but with ncu (Nsight Compute): the
# first NCU_COUNT (default 400) kernels, NCU_SKIP (default 0) skipped first, with their
# duration, registers and achieved DRAM throughput. Neither: says so and runs nothing.
# Used as a steps.sh `sh-` step, e.g. (issue 34, the 30B-A3B FP8 decode step at batch 128):
#   CMD_P='METRALE_MOE_SPEED_PREFILL=0 METRALE_MOE_SPEED_ONLY=fp8 METRALE_MOE_SPEED_BATCHES=128 \
#     bash scripts/gpu/prof.sh moe128 -- .gpu/bin/cuda_check --fixtures tests/fixtures \
#     --out /tmp/ccp --only moe-speed' bash scripts/gpu/steps.sh 400 "sh-P@T=300"
set -uo pipefail
name=${1:?usage: prof.sh NAME -- COMMAND...}
shift
[ "${1:-}" = -- ] && shift
d=${OUT:-/tmp/metrale-prof}/prof-$name
mkdir -p "$d"
find_tool() {
    command -v "$1" 2>/dev/null && return
    for p in /usr/local/cuda/bin /opt/nvidia/nsight-systems/*/bin /opt/nvidia/nsight-compute/* \
        /usr/local/cuda/nsight-systems-*/bin /usr/local/cuda/nsight-compute-*; do
        [ -x "$p/$1" ] && { echo "$p/$1"; return; }
    done
    return 1
}
if nsys=$(find_tool nsys); then
    echo "nsys: $nsys" >"$d/tool.txt"
    "$nsys" profile -o "$d/trace" --force-overwrite true -t cuda,nvtx --cuda-graph-trace=node \
        "$@" >"$d/run.txt" 2>&1
    echo "rc $?" >>"$d/run.txt"
    for r in cuda_gpu_kern_sum cuda_api_sum; do
        "$nsys" stats -q -r "$r" -f csv -o "$d/$r" "$d/trace.nsys-rep" >/dev/null 2>&1
    done
    "$nsys" stats -q -r cuda_gpu_trace -f csv "$d/trace.nsys-rep" 2>/dev/null | head -n 4000 \
        >"$d/cuda_gpu_trace.csv"
    rm -f "$d/trace.sqlite"
    # The trace itself is large; keep it only when it fits what a call brings back.
    [ "$(stat -c %s "$d/trace.nsys-rep" 2>/dev/null || echo 0)" -gt 40000000 ] && rm -f "$d/trace.nsys-rep"
elif ncu=$(find_tool ncu); then
    echo "ncu: $ncu" >"$d/tool.txt"
    "$ncu" --launch-skip "${NCU_SKIP:-0}" --launch-count "${NCU_COUNT:-400}" --csv \
        --metrics gpu__time_duration.sum,launch__registers_per_thread,dram__throughput.avg.pct_of_peak_sustained_elapsed \
        "$@" >"$d/ncu.csv" 2>"$d/run.txt"
    echo "rc $?" >>"$d/run.txt"
else
    echo "neither nsys nor ncu found on this machine" | tee "$d/tool.txt"
    exit 3
fi
ls -l "$d"
