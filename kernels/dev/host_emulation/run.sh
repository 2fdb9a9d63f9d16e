#!/usr/bin/env bash
# Run every kernel on the host under a small CUDA emulation (emu.h) and compare it with a plain
# C++ reference (test.cpp). Needs g++ 11+ (C++20 <barrier>); no GPU, no CUDA. Exit status 1 on a
# failure. The kernels are compiled as NVRTC compiles them: prelude.cuh, then each .cu file.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$here/../../src
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
{
    echo '#include "emu.h"'
    cat "$src/prelude.cuh"
    for f in convert embedding norm rope attention attention_mma activation softmax gemv sample moe moe_mma fp8 fp8_one hybrid probe; do
        echo "// $f.cu"
        cat "$src/$f.cu"
    done
} >"$work/kernels_all.h"
g++ -std=c++20 -O1 -pthread -w -I"$here" -I"$work" -o "$work/test" "$here/test.cpp"
"$work/test"
