// FP8 weights times one bf16 row on tensor cores, for one-token steps (a decode step of one
// sequence): gemv_fp8_one_kw* (the dense projections), moe_gate_up_one_fp8 and
// moe_down_combine_one_fp8 (the chosen experts). Needs sm_89 (cvt.rn.f16x2.e4m3x2; the engine
// takes these only there), K % 128 == 0 and 16-byte aligned rows.
//
// Why they were tried: the CUDA-core FP8 kernels (fp8.cu's gemv_fp8_m1, moe.cu's decode
// kernels) spend about 3.7 instructions a weight: 1.5 to widen e4m3 to f32 (two cvt a pair, to
// f16 and then to f32), one to widen the bf16 x element, one multiply-add, and a share of the
// loads and the scale. At one token they ran at 1.4-1.9 TB/s where the bf16 kernels of the same
// shape reach 2.2-3.1 with twice the bytes (docs/performance.md, issue 11), and the guess was
// issue slots. Here a weight costs half a cvt (e4m3 pair -> f16 pair, exact) and a share of one
// mma: about one instruction a weight. The guess was wrong (below).
//
// The product (x as the A operand of f16 mma.sync, 8 weight rows its B columns, x staged in
// shared memory as f16 times a power of two) is described with its building blocks in
// prelude.cuh ("FP8 weights times one row on tensor cores"). Each block stages x itself after
// the wait on x's writer. Checked against the CPU within the FP8 tolerances (cuda_check) and
// against exact sums (the host emulation).
//
// Measured (H200, 30B-A3B FP8 at batch 1, cuda_check moe-speed graph steps, 2026-12-01):
// slower than the CUDA-core kernels, a step 2.99 ms against 2.84 (the dense GEMVs 0.68 ms of
// it against 0.58, the MoE blocks 1.33 against 1.30). At one token these kernels wait rather
// than issue: the staging of x (a block-wide max, then the f16 copy, two barriers) sits on the
// critical path after the wait, where the CUDA-core kernels multiply as soon as x arrives.
// Off by default (METRALE_FP8_ONE=1 / CudaBackend::set_fp8_one); moe_one_fp8_mma, whose
// staging of x overlaps the router, is where the building blocks pay off.

// The building blocks (the x staging, one_slice, one_rows) are prelude's: moe.cu's
// moe_one_fp8_mma takes its products the same way.
#define ONE_WARPS 8

// Sums of the KW warps of each tile of the block, added in warp order: lanes 0..3 of warp w
// put acc (columns 2t, 2t + 1) in red[w]; thread i < 8 · tiles then reads its column's sum.
__device__ __forceinline__ void one_reduce(float (*red)[8], const float acc[2]) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane < 4) {
        red[warp][2 * lane] = acc[0];
        red[warp][2 * lane + 1] = acc[1];
    }
    __syncthreads();
}

// ---- The dense projections: out[n] = Σ_k x[k] · w[n, k] · scale ----------------------------
// A block of ONE_WARPS warps: 8 / KW tiles of 8 output columns, KW warps a tile splitting k.
template <int KW>
__device__ void gemv_fp8_one_impl(float* out, const bf16* x, const unsigned char* w,
                                  const float* scales, int n, int k) {
    DYNAMIC_SMEM(u32, xs);
    __shared__ float red[ONE_WARPS][8];
    __shared__ float scratch[32];
    constexpr int TILES = ONE_WARPS / KW;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int tile = blockIdx.x * TILES + warp / KW;
    const int groups = k >> 7;
    const u64 r = (u64)min(tile * 8 + g, n - 1);
    const u64 c0 = (u64)min(tile * 8 + 2 * t, n - 1), c1 = (u64)min(tile * 8 + 2 * t + 1, n - 1);
    int begin, end;
    one_range(k >> 6, warp % KW, KW, begin, end);
    float acc[2] = {0.f, 0.f};
    F16Scale s{1.f, 1.f};
    one_rows(acc, w + r * k, scales + c0 * groups, scales + c1 * groups, begin, end, xs, [&] {
        pdl_start();
        s = stage_x_block(xs, x, k, scratch);
    });
    one_reduce(red, acc);
    if ((int)threadIdx.x < 8 * TILES) {
        const int tl = threadIdx.x >> 3, col = (blockIdx.x * TILES + tl) * 8 + (threadIdx.x & 7);
        float v = 0.f;
#pragma unroll
        for (int kw = 0; kw < KW; ++kw) v += red[tl * KW + kw][threadIdx.x & 7];
        if (col < n) out[col] = v * s.up;
    }
}

#define GEMV_FP8_ONE(KW)                                                                           \
    extern "C" __global__ void __launch_bounds__(ONE_WARPS * 32, 3)                                \
        gemv_fp8_one_kw##KW(float* out, const bf16* x, const unsigned char* w,                     \
                            const float* scales, int n, int k) {                                   \
        gemv_fp8_one_impl<KW>(out, x, w, scales, n, k);                                            \
    }

GEMV_FP8_ONE(1)
GEMV_FP8_ONE(2)
GEMV_FP8_ONE(4)
GEMV_FP8_ONE(8)

// ---- The experts' gate|up at one token ------------------------------------------------------
// gate|up [E, 2I, H] FP8 (scales [E · 2I, H / 128]); grid (ceil(I / (4 · tiles)), experts), block
// row y serving the y-th listed expert (moe.cu's block_expert). A tile is 4 outputs j: its B
// columns interleave gate row j and up row j (column 2m: gate j0 + m, 2m + 1: up j0 + m), so lane
// t ends with g and u of j0 + t; act[pair, j] = silu(g) · u as bf16, for the expert's pair (one
// token: one pair an expert).
template <int KW>
__device__ void moe_gate_up_one_impl(bf16* act, const bf16* x, const unsigned char* w,
                                     const float* scales, const int* offsets, const int* active,
                                     const int* perm, int experts, int inter, int hidden) {
    DYNAMIC_SMEM(u32, xs);
    __shared__ float red[ONE_WARPS][8];
    __shared__ float scratch[32];
    constexpr int TILES = ONE_WARPS / KW;
    pdl_start();  // the routing is the previous kernel's
    const int e = (int)blockIdx.y < active[experts] ? active[blockIdx.y] : -1;
    if (e < 0) return;  // the whole block
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int j0 = (blockIdx.x * TILES + warp / KW) * 4;
    const int groups = hidden >> 7;
    const u64 base = (u64)e * 2 * inter;
    const u64 rg = base + (g & 1 ? inter : 0) + min(j0 + (g >> 1), inter - 1);
    const u64 jt = (u64)min(j0 + t, inter - 1);
    int begin, end;
    one_range(hidden >> 6, warp % KW, KW, begin, end);
    float acc[2] = {0.f, 0.f};
    F16Scale s{1.f, 1.f};
    one_rows(acc, w + rg * hidden, scales + (base + jt) * groups,
             scales + (base + inter + jt) * groups, begin, end, xs,
             [&] { s = stage_x_block(xs, x, hidden, scratch); });
    one_reduce(red, acc);
    if ((int)threadIdx.x < 4 * TILES) {
        const int tl = threadIdx.x >> 2, jj = threadIdx.x & 3;
        const int j = (blockIdx.x * TILES + tl) * 4 + jj;
        float gs = 0.f, us = 0.f;
#pragma unroll
        for (int kw = 0; kw < KW; ++kw) {
            gs += red[tl * KW + kw][2 * jj];
            us += red[tl * KW + kw][2 * jj + 1];
        }
        gs *= s.up;
        us *= s.up;
        if (j < inter) {
            const bf16 v = from_f32<bf16>(gs / (1.0f + expf(-gs)) * us);
            for (int p = offsets[e]; p < offsets[e + 1]; ++p) act[(u64)perm[p] * inter + j] = v;
        }
    }
}

#define MOE_GATE_UP_ONE(KW)                                                                        \
    extern "C" __global__ void __launch_bounds__(ONE_WARPS * 32, 3) moe_gate_up_one_fp8_kw##KW(    \
        bf16* act, const bf16* x, const unsigned char* w, const float* scales,                     \
        const int* offsets, const int* active, const int* perm, int experts, int inter,            \
        int hidden) {                                                                              \
        moe_gate_up_one_impl<KW>(act, x, w, scales, offsets, active, perm, experts, inter,         \
                                 hidden);                                                          \
    }

MOE_GATE_UP_ONE(2)
MOE_GATE_UP_ONE(4)
MOE_GATE_UP_ONE(8)

// ---- The experts' down and the weighted sum at one token ----------------------------------
// down [E, H, I] FP8 (scales [E · H, I / 128]); a block of 8 output columns c0.. and top_k warps
// (blockDim = 32 · k), warp s the token's slot s: its expert's 8 down rows against the slot's
// act row (staged by the warp), all of I. The expert and weight were written by the routing
// launch two kernels back, which has completed before gate|up's blocks passed their wait and
// so before this grid started (moe.cu's moe_down_combine_dec says why): the weight rows load
// before the wait, overlapping gate|up's tail. Then out[c] = Σ_s weight_s · y_s in slot order
// from 0 (moe_combine's sum; the slots are in ascending expert order).
__device__ void moe_down_combine_one_impl(float* out, const bf16* act, const unsigned char* w,
                                          const float* scales, const int* ids,
                                          const float* weights, int top_k, int inter,
                                          int hidden) {
    DYNAMIC_SMEM(u32, smem);
    __shared__ float terms[16][8];
    const int slot = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int c0 = blockIdx.x * 8;
    const u64 e = (u64)load_l2(ids + slot);
    const float weight = load_l2(weights + slot);
    const int groups = inter >> 7;
    const u64 r = e * hidden + min(c0 + g, hidden - 1);
    const u64 ca = e * hidden + min(c0 + 2 * t, hidden - 1);
    const u64 cb = e * hidden + min(c0 + 2 * t + 1, hidden - 1);
    u32* const xs = smem + (u64)slot * inter;
    float acc[2] = {0.f, 0.f};
    F16Scale s{1.f, 1.f};
    // One warp walks the whole of I: its batches of ONE_SLICES (12 slices at I = 768: two).
    one_rows(acc, w + r * inter, scales + ca * groups, scales + cb * groups, 0, inter >> 6, xs,
             [&] {
                 pdl_start();
                 s = stage_x_warp(xs, act + (u64)slot * inter, inter);
             });
    if (lane < 4) {
        terms[slot][2 * lane] = __fmul_rn(weight, acc[0] * s.up);
        terms[slot][2 * lane + 1] = __fmul_rn(weight, acc[1] * s.up);
    }
    __syncthreads();
    if (threadIdx.x < 8 && c0 + (int)threadIdx.x < hidden) {
        float o = 0.f;
        for (int k = 0; k < top_k; ++k) o = __fadd_rn(o, terms[k][threadIdx.x]);
        out[c0 + threadIdx.x] = o;
    }
}

extern "C" __global__ void __launch_bounds__(16 * 32, 1)
    moe_down_combine_one_fp8(float* out, const bf16* act, const unsigned char* w,
                             const float* scales, const int* ids, const float* weights, int top_k,
                             int inter, int hidden) {
    moe_down_combine_one_impl(out, act, w, scales, ids, weights, top_k, inter, hidden);
}
