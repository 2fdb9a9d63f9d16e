// ---- FP4 experts at decode steps of up to 8 tokens on tensor cores, k split over the warps ----
//
// moe_gate_up_{nvfp4,mxfp4}_small, moe_gate_up_clamped_{nvfp4,mxfp4}_small (gpt-oss) and
// moe_down_{nvfp4,mxfp4}_small: stages 3 and 4 for steps of 1 to 8 tokens on FP4 expert stacks
// as stored (moe_fp4.cu's layout: packed pairs [E · rows, k / 2], scale bytes
// [E · rows, k / BLOCK], NVFP4's f32 multiplier a row), on nvfp4_gemv.cu's slice loop: the
// 8 warps of a block split k into 128-wide slices, a lane's 16-byte loads of rows g and g + 8
// batched and pipelined, each weight widened exactly to bf16 (Fp4SliceNv, Fp4SliceMx) and
// multiplied on tensor cores with f32 sums, the warps' sums added in warp order. The expert's
// pairs (at most 8 at these steps: a token picks an expert once) are the mma's one n8 B tile.
// A warp's k is a few slices at these widths (gpt-oss's 2880: 23 slices over 8 warps), so a
// lane loads all of them at once, up to 3 (gate_up: 2 rows of 2 tiles) or 4 (down) slices, and
// the weights of a block's first slices are in flight before the x rows are read.
// moe_mma.cu's FP8 _small kernels with the FP4 slices; they replace, at these steps, the
// CUDA-core _dec kernels (moe_fp4.cu), which widen every nibble to f32 and multiply it on the
// CUDA cores (about five instructions a weight: issue-bound at 1.0-1.3 TB/s on gpt-oss-20b,
// performance log part 21), and the _small_any kernels (moe_mma_fp4.cu), whose warps walk the
// whole k with 8-byte loads.
//   gate_up: grid (ceil(I / 16), min(E, pairs)); block row r takes the r-th active expert (rows
//     past the count return); gate rows j0 .. j0 + 15 and up rows I + j0 .. as two tiles, so a
//     lane's sums are gate and up of the same j and pair: f(gate, up) rounded to bf16 into act
//     at the pair's row.
//   down: grid (ceil(H / 16), min(E, pairs)): ys[pair, c] in f32, added up (with gpt-oss's
//     down bias) by moe_combine[_bias].
// The routing (offsets, active, perm) is the launch before's output: read after the wait.

// Block row blockIdx.y's expert (e) and its pairs (perm[start ..], n of them, at most 8);
// false past the active count.
__device__ __forceinline__ bool fp4_small_expert(const int* offsets, const int* active, int experts,
                                                 int& e, int& start, int& n) {
    if ((int)blockIdx.y >= active[experts]) return false;
    e = active[blockIdx.y];
    start = offsets[e];
    n = min(offsets[e + 1] - start, 8);
    return true;
}

template <typename SC, typename F>
__device__ void moe_gate_up_fp4_small_impl(bf16* act, const bf16* x, const unsigned char* w,
                                           const unsigned char* scales, const float* globals,
                                           const int* offsets, const int* active, const int* perm,
                                           int experts, int top_k, int inter, int hidden, F f) {
    pdl_start();
    int e, start, n;
    if (!fp4_small_expert(offsets, active, experts, e, start, n)) return;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int j0 = blockIdx.x * 16;
    const u64 base = (u64)e * 2 * inter;
    const unsigned char* rows[2][2];
    u32 soff[2][2];
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            // Rows past I read row I - 1 of their half (their sums are not written).
            const u64 row = base + (u64)r * inter + min(j0 + 8 * h + g, inter - 1);
            rows[r][h] = w + row * (u64)(hidden >> 1) + 16 * t;
            soff[r][h] = (u32)(row * (u64)(hidden / SC::BLOCK));  // the launcher checks < 2^32
        }
    // B column g: the expert's pair g (columns past its pairs read its last pair; not written).
    const bf16* const xrows[1] = {x + (u64)(perm[start + min(g, n - 1)] / top_k) * hidden + 32 * t};
    float acc[2][1][4] = {};
    nvfp4_mma_tiles<2, 1, 1, false, SC, 3>(acc, rows, scales + SC::lane_offset(t), soff, xrows, hidden);
    if (!fp8_mma_reduce<2>(&acc[0][0][0])) return;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int j = j0 + g + 8 * (i >> 1), col = 2 * t + (i & 1);
        if (j < inter && col < n) {
            const float gs = acc[0][0][i] * SC::row_factor(globals, base + j);
            const float us = acc[1][0][i] * SC::row_factor(globals, base + inter + j);
            act[(u64)perm[start + col] * inter + j] = from_f32<bf16>(f(gs, us, e, j, inter));
        }
    }
}

template <typename SC>
__device__ void moe_down_fp4_small_impl(float* ys, const bf16* act, const unsigned char* w,
                                        const unsigned char* scales, const float* globals,
                                        const int* offsets, const int* active, const int* perm,
                                        int experts, int inter, int hidden) {
    pdl_start();
    int e, start, n;
    if (!fp4_small_expert(offsets, active, experts, e, start, n)) return;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int c0 = blockIdx.x * 16;
    const u64 base = (u64)e * hidden;
    const unsigned char* rows[1][2];
    u32 soff[1][2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const u64 row = base + min(c0 + 8 * h + g, hidden - 1);
        rows[0][h] = w + row * (u64)(inter >> 1) + 16 * t;
        soff[0][h] = (u32)(row * (u64)(inter / SC::BLOCK));
    }
    const bf16* const xrows[1] = {act + (u64)perm[start + min(g, n - 1)] * inter + 32 * t};
    float acc[1][1][4] = {};
    nvfp4_mma_tiles<1, 1, 1, false, SC, 4>(acc, rows, scales + SC::lane_offset(t), soff, xrows, inter);
    if (!fp8_mma_reduce<1>(&acc[0][0][0])) return;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int c = c0 + g + 8 * (i >> 1), col = 2 * t + (i & 1);
        if (c < hidden && col < n)
            ys[(u64)perm[start + col] * hidden + c] = acc[0][0][i] * SC::row_factor(globals, base + c);
    }
}

#define MOE_FP4_SMALL_GATE_UP(KERNEL, SC, ACT, ...)                                               \
    extern "C" __global__ void __launch_bounds__(FP8_MMA_WARPS * 32, 2)                           \
        KERNEL(bf16* act, const bf16* x, const unsigned char* w, const unsigned char* scales,      \
               const float* globals, const int* offsets, const int* active, const int* perm,      \
               int experts, int top_k, int inter, int hidden __VA_ARGS__) {                       \
        moe_gate_up_fp4_small_impl<SC>(act, x, w, scales, globals, offsets, active, perm,         \
                                       experts, top_k, inter, hidden, ACT);                       \
    }
#define MOE_FP4_SMALL_KERNELS(SUFFIX, SC)                                                         \
    MOE_FP4_SMALL_GATE_UP(moe_gate_up_##SUFFIX##_small, SC, MoeSiluAct{}, )                       \
    MOE_FP4_SMALL_GATE_UP(moe_gate_up_clamped_##SUFFIX##_small, SC,                               \
                          (MoeClampedAct<bf16>{bias, alpha, limit}), , const bf16* bias,          \
                          float alpha, float limit)                                               \
    extern "C" __global__ void __launch_bounds__(FP8_MMA_WARPS * 32, 2)                           \
        moe_down_##SUFFIX##_small(float* ys, const bf16* act, const unsigned char* w,             \
                                  const unsigned char* scales, const float* globals,              \
                                  const int* offsets, const int* active, const int* perm,         \
                                  int experts, int inter, int hidden) {                           \
        moe_down_fp4_small_impl<SC>(ys, act, w, scales, globals, offsets, active, perm, experts,  \
                                    inter, hidden);                                               \
    }

MOE_FP4_SMALL_KERNELS(nvfp4, Fp4SliceNv)
MOE_FP4_SMALL_KERNELS(mxfp4, Fp4SliceMx)
