// ---- NVFP4 weights times NVFP4 activations on Blackwell's block-scaled FP4 tensor cores
// (sm_120a / sm_121a: GeForce RTX 50, RTX PRO 6000, DGX Spark; issue 35, docs/nvfp4.md) --------
//
// The Hopper kernels (nvfp4_gemv.cu, nvfp4_gemm.cu) widen every E2M1 weight to bf16 and keep the
// activations bf16 (weight-only). Blackwell's consumer chips multiply E2M1 by E2M1 with the
// E4M3 block scales applied by the tensor core itself (`mma.sync ... kind::mxf4nvf4
// .block_scale.scale_vec::4X`, m16n8k64): no conversion instruction a weight, a quarter of the
// bytes of an FP8 operand. That needs the activations in NVFP4 too (W4A4, what ModelOpt's NVFP4
// checkpoints are calibrated for), so a product is two launches:
//
// 1. quant_nvfp4_rows: each x row (bf16) to NVFP4 with a per-row global g = amax / (6 · 448)
//    (dynamic, per token: no calibrated `input_scale` needed, and dummy weights have none),
//    each 16 values a block scale s = e4m3(amax_block / (6 · g)) (round to nearest even,
//    saturating at 448) and the values e2m1(x / (e4m3(s) · g)), rounded to nearest even on the
//    E2M1 grid and saturated at ±6 (ModelOpt's and cvt.rn.satfinite.e2m1x2's rounding). The
//    host's copy is engine/src/backend/nvfp4_act.rs; the two agree bit for bit.
// 2. gemm_nvfp4_w4a4_r<RT>_b<NB>: the weight's rows the A operand (RT tiles of 16 rows a block),
//    the quantized x rows the B operand (NB tiles of 8), 8 warps splitting K in 64-wide steps;
//    per step and tile a lane loads four 32-bit words of weights (rows g and g + 8, k 8t.. and
//    32 + 8t..: the PTX ISA's fragments for 4-bit types, the checkpoint's own byte order), one
//    word of the row's four scale bytes (lane t = 1 gives row g + 8's, t = 0 row g's), and per
//    x tile two words and one scale word: no conversion at all. Out = sum · multiplier[n] · g[m].
//    Plain (L1-allocating) 4-byte loads: lanes t = 0..3 read 16 bytes of a row's 32-byte sector
//    and the next load the other 16, so the sector is fetched from L2 once.
//
// Untested on hardware (no Blackwell GPU has run it): checked by the host emulation against a
// double-precision sum of the quantized values (`EMU_ONLY=nvfp4_w4a4`) and compiled by NVRTC for
// sm_120a in the loader's tests. Off unless `gemm.nvfp4_w4a4` is set (docs/cuda.md); elsewhere
// (and on sm_100, whose FP4 tensor cores are tcgen05's) the weight-only kernels run.

// E2M1 code of a magnitude a >= 0: round to nearest, ties to the even code (0.25 -> 0, 0.75 ->
// 1.0, 1.25 -> 1.0, 1.75 -> 2.0, 2.5 -> 2.0, 3.5 -> 4.0, 5 -> 4.0), saturating at 6 (NaN -> 0).
__device__ __forceinline__ u32 e2m1_code(float a) {
    return (u32)(a > 0.25f) + (u32)(a >= 0.75f) + (u32)(a > 1.25f) + (u32)(a >= 1.75f) +
           (u32)(a > 2.5f) + (u32)(a >= 3.5f) + (u32)(a > 5.f);
}

// One block a row of x [m, k] (k % 64 == 0): q [m, k / 2] packed (element 2i the low nibble of
// byte i), sc [m, k / 16] E4M3 block scales, g [m] the rows' globals. 256 threads.
extern "C" __global__ void __launch_bounds__(256)
    quant_nvfp4_rows(unsigned char* q, unsigned char* sc, float* g, const bf16* x, int k) {
    pdl_start();
    const u64 row = blockIdx.x;
    const bf16* xr = x + row * (u64)k;
    float amax = 0.f;
    for (int i = threadIdx.x; i < k; i += blockDim.x) amax = fmaxf(amax, fabsf(to_f32(xr[i])));
    amax = block_max(amax);
    const float gx = amax / 2688.f;  // 6 · 448
    if (threadIdx.x == 0) g[row] = gx;
    const int blocks = k >> 4;
    for (int b = threadIdx.x; b < blocks; b += blockDim.x) {
        const u32x4 h0 = load_cached((const u32x4*)(xr + 16 * b)), h1 = load_cached((const u32x4*)(xr + 16 * b) + 1);
        const u32 hw[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
        float v[16];
        float bmax = 0.f;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            v[2 * i] = __uint_as_float(hw[i] << 16);
            v[2 * i + 1] = __uint_as_float(hw[i] & 0xffff0000u);
            bmax = fmaxf(bmax, fmaxf(fabsf(v[2 * i]), fabsf(v[2 * i + 1])));
        }
        u32 sbyte = 0u;
        float d = 0.f;
        if (gx > 0.f) {
            sbyte = f32_to_e4m3(bmax / (6.f * gx));
            d = e4m3_value(sbyte) * gx;
        }
        u32 word[2] = {0u, 0u};
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            const u32 code = d > 0.f ? e2m1_code(fabsf(v[i]) / d) : 0u;
            const u32 nib = code | (__float_as_uint(v[i]) >> 31 << 3);
            word[i >> 3] |= nib << (4 * (i & 7));
        }
        *(u32x2*)(q + row * (u64)(k >> 1) + 8 * b) = u32x2{word[0], word[1]};
        sc[row * (u64)blocks + b] = (unsigned char)sbyte;
    }
}

// A lane's operands of one 64-wide step j: a[r] rows g / g + 8 of weight tile r (k 8t.. and 32 +
// 8t..), sa[r] its scale word, b[nb] x tile nb's column g, sb[nb] its scale word.
template <int RT, int NB> struct W4a4Step {
    u32 a[RT][4], sa[RT], b[NB][2], sb[NB];
};

template <int RT, int NB>
__device__ __forceinline__ void w4a4_load(W4a4Step<RT, NB>& s, const unsigned char* const (&wr)[RT][2],
                                          const unsigned char* const (&wsr)[RT],
                                          const unsigned char* const (&xr)[NB],
                                          const unsigned char* const (&xsr)[NB], int j) {
    const int t = threadIdx.x & 3;
#pragma unroll
    for (int r = 0; r < RT; ++r) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const unsigned char* p = wr[r][h] + 32 * (u64)j + 4 * t;
            s.a[r][h] = *(const u32*)p;
            s.a[r][2 + h] = *(const u32*)(p + 16);
        }
        s.sa[r] = *(const u32*)(wsr[r] + 4 * (u64)j);
    }
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
        const unsigned char* p = xr[nb] + 32 * (u64)j + 4 * t;
        s.b[nb][0] = *(const u32*)p;
        s.b[nb][1] = *(const u32*)(p + 16);
        s.sb[nb] = *(const u32*)(xsr[nb] + 4 * (u64)j);
    }
}

template <int RT, int NB>
__device__ __forceinline__ void w4a4_mma(float (&acc)[RT][NB][4], const W4a4Step<RT, NB>& s) {
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int nb = 0; nb < NB; ++nb)
            mma_nvfp4(acc[r][nb], s.a[r][0], s.a[r][1], s.a[r][2], s.a[r][3], s.b[nb][0], s.b[nb][1],
                      s.sa[r], s.sb[nb]);
}

// Grid (x chunks of 8·NB rows, weight blocks of 16·RT rows), FP8_MMA_WARPS · 32 threads; k % 64
// == 0. w: the F4 tensor's packed rows [n, k / 2], ws its scale bytes [n, k / 16], wm its rows'
// multipliers; xq, xs, xg: quant_nvfp4_rows' output for x [m, k].
template <int RT, int NB>
__device__ __forceinline__ void gemm_nvfp4_w4a4_impl(float* out, const unsigned char* xq, const unsigned char* xs,
                                                      const float* xg, const unsigned char* w,
                                                      const unsigned char* ws, const float* wm,
                                                      int m_total, int n_total, int k) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int m0 = blockIdx.x * 8 * NB, n0 = blockIdx.y * 16 * RT;
    const unsigned char* wr[RT][2];
    const unsigned char* wsr[RT];
#pragma unroll
    for (int r = 0; r < RT; ++r) {
        // Rows past the matrix read its last row (their sums are not written).
        u64 n[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            n[h] = (u64)min(n0 + 16 * r + 8 * h + g, n_total - 1);
            wr[r][h] = w + n[h] * (u64)(k >> 1);
        }
        // Lane t = 1 supplies row g + 8's scales, the others row g's (only t = 0 and 1 are read).
        wsr[r] = ws + (t == 1 ? n[1] : n[0]) * (u64)(k >> 4);  // a select: no indexed local array
    }
    const unsigned char* xr[NB];
    const unsigned char* xsr[NB];
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
        const u64 mm = (u64)min(m0 + 8 * nb + g, m_total - 1);
        xr[nb] = xq + mm * (u64)(k >> 1);
        xsr[nb] = xs + mm * (u64)(k >> 4);
    }
    float acc[RT][NB][4] = {};
    const int steps = k >> 6;
    // Weights are never written: the first step's loads may overlap the kernel before. The x
    // loads come after the wait (quant_nvfp4_rows wrote them).
    W4a4Step<RT, NB> cur{}, next{};
    int j = warp;
    pdl_start();
    if (j < steps) w4a4_load<RT, NB>(cur, wr, wsr, xr, xsr, j);
    while (j < steps) {
        const int jn = j + FP8_MMA_WARPS;
        if (jn < steps) w4a4_load<RT, NB>(next, wr, wsr, xr, xsr, jn);
        w4a4_mma<RT, NB>(acc, cur);
        cur = next;
        j = jn;
    }
    if (!fp8_mma_reduce<RT * NB>(&acc[0][0][0])) return;
    mma_tile_store(out, acc, n0, m0, n_total, m_total, [&](int n, int m) { return wm[n] * xg[m]; });
}

#define GEMM_NVFP4_W4A4(RT, NB, BLOCKS)                                                            \
    extern "C" __global__ void __launch_bounds__(FP8_MMA_WARPS * 32, BLOCKS) gemm_nvfp4_w4a4_r##RT##_b##NB( \
        float* out, const unsigned char* xq, const unsigned char* xs, const float* xg,             \
        const unsigned char* w, const unsigned char* ws, const float* wm, int m_total,             \
        int n_total, int k) {                                                                      \
        gemm_nvfp4_w4a4_impl<RT, NB>(out, xq, xs, xg, w, ws, wm, m_total, n_total, k);             \
    }

// (RT, NB, blocks a multiprocessor): two tiles of 16 weight rows a block (nvfp4_gemv.cu's
// measured shape on Hopper); one x tile up to 8 rows, two up to 16, four beyond (chunks of 32 x
// rows). Four x tiles and two steps in flight need more than 128 registers (ptxas for sm_120a:
// 60 bytes of spills at 2 blocks; 255 registers at one), so that build runs one block a
// multiprocessor; the others take 72 and 96.
GEMM_NVFP4_W4A4(2, 1, 2)
GEMM_NVFP4_W4A4(2, 2, 2)
GEMM_NVFP4_W4A4(2, 4, 1)
