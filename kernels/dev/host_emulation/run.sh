#!/usr/bin/env bash
# Run every kernel on the host under a small CUDA emulation (emu.h) and compare it with a plain
# C++ reference (test.cpp). Needs g++ 11+ (C++20 <barrier>); no GPU, no CUDA. Exit status 1 on a
# failure. The kernels are compiled as NVRTC compiles them: the prelude's headers in lib.rs's
# PRELUDE order, then each module's files in Module::source's order (the lab's last).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$here/../../src
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
{
    echo '#include "emu.h"'
    for h in types reduce loads cp_async pdl rows attention fp8 fp4 random mma fp8_mma moe_act wgmma barrier; do
        echo "// prelude/$h.cuh"
        cat "$src/prelude/$h.cuh"
    done
    for f in convert embedding norm rope attention attention_mma attention_flash attention_flash_wg activation softmax gemv sample mla \
        moe_score moe moe_decode moe_fp4 moe_mma moe_mma_fp4 moe_pipe moe_wg moe_wg8 fp8 fp8_gemm_rows nvfp4 nvfp4_gemv nvfp4_gemm nvfp4_w4a4 moe_fp4_small hybrid hybrid_chunk hybrid_decode mamba2 mamba2_chunk ../lab/lab.cuh ../lab/probe.cu; do
        case $f in *.cu | *.cuh) ;; *) f=$f.cu ;; esac
        echo "// $f"
        cat "$src/$f"
    done
} >"$work/kernels_all.h"
g++ -std=c++20 -O1 -pthread -w -I"$here" -I"$work" -o "$work/test" "$here/test.cpp"
"$work/test"
