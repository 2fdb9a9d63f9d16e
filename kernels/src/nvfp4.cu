// NVFP4 weights kept packed on the GPU, weight-only (issue 35; docs/nvfp4.md): w as the
// checkpoint stores it, packed E2M1 [N, K / 2] (element 2i the low nibble of byte i, a nibble
// sign << 3 | code), one E4M3 scale byte [N, K / 16] per 16 values of a row, and one f32
// multiplier [N] a row (ModelOpt's weight_scale_2, 1 / weight_global_scale for
// compressed-tensors; a row's own so fused projections keep each part's global). A weight's
// value is e2m1 · (e4m3 · global): 0.5625 bytes a weight instead of bf16's 2.
//
// e2m1_exact (prelude/fp4.cuh): a nibble's exact value.
//
// gemv_nvfp4_mma_r<RT>_b<NB> (any M, K % 32 == 0, sm_80+): the product on tensor cores, the
// serving path for up to gemm.nvfp4_mma_rows rows (nvfp4_mma_tiles below): a weight costs
// about 2.4 instructions (its bf16 A operand) whatever the number of x rows.
// gemv_nvfp4_mma2_r<RT>_b<NB> (nvfp4_gemv.cu, gemm.nvfp4_gemv = v2): the same product with fewer
// instructions a weight.
// gemv_nvfp4_rows: any K % 16 == 0 (scalar loads), one x row at a time (the lab's first
// version, kernels/dev/nvfp4/gemv_nvfp4.cu; not launched: the host emulation's reference for
// the value decode).
// dequant_nvfp4_bf16 (K % 32 == 0): the weight as bf16 [N, K] for GEMMs of more rows (cuBLAS's
// bf16 GEMM on the scratch copy): e2m1 · f32(e4m3 · global), rounded once to bf16.
// fill_random_nvfp4_bytes: dummy NVFP4 weights drawn on the device, byte for byte what
// `random_nvfp4_parts` gives on the host (`HostData::RandomNvfp4`): the splitmix64 chunks of
// fill_random_fp8, each draw's bits from `shift` up, or'ed with `bits` (packed pairs: the top
// byte; E4M3 scales: the top three bits as the mantissa of 0x38, values 1 to 1.875).
//
// Versions tried: gemv_nvfp4_m<M> (M = 1..8, a warp a weight row, each weight widened to f32 for
// every x row, ~8 instructions a weight a row): on an H100 (performance log parts 13 and 14)
// 1.0-1.6 TB/s at one row, each further row adding about the one-row time; a 27B step's GEMVs
// 9.37 ms at one row against the tensor-core kernel's 7.23, 176 at eight against 8.23.
// Deleted.

#define NVFP4_WARPS 8

extern "C" __global__ void __launch_bounds__(NVFP4_WARPS * 32)
    gemv_nvfp4_rows(float* out, const bf16* x, const unsigned char* w, const unsigned char* scales,
                    const float* globals, int m_total, int n_total, int k) {
    pdl_start();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int n = blockIdx.x * NVFP4_WARPS + warp;
    if (n >= n_total) return;
    const int blocks = k >> 4;
    const unsigned char* wr = w + (u64)n * (k >> 1);
    const unsigned char* sr = scales + (u64)n * blocks;
    for (int m = 0; m < m_total; ++m) {
        const bf16* xr = x + (u64)m * k;
        float acc = 0.f;
        for (int b = lane; b < blocks; b += 32) {
            float part = 0.f;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const u32 byte = wr[b * 8 + j];
                part = fmaf(e2m1_exact(byte & 15u), to_f32(xr[b * 16 + 2 * j]), part);
                part = fmaf(e2m1_exact(byte >> 4), to_f32(xr[b * 16 + 2 * j + 1]), part);
            }
            acc = fmaf(e4m3_value(sr[b]) * globals[n], part, acc);
        }
        acc = warp_sum(acc);
        if (lane == 0) out[(u64)m * n_total + n] = acc;
    }
}

// A thread a 16-byte chunk (32 weights): one load, four 16-byte stores.
extern "C" __global__ void dequant_nvfp4_bf16(bf16* out, const unsigned char* w, const unsigned char* scales,
                                              const float* globals, u64 rows, int k) {
    pdl_start();
    const u64 chunks = rows * (u64)(k >> 5);
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < chunks; i += (u64)gridDim.x * blockDim.x) {
        const u64 e0 = i << 5, r = e0 / (u64)k;
        const float g = globals[r];
        const unsigned char* sp = scales + (e0 >> 4);
        fp4_chunk_to_bf16(load_stream((const u32x4*)w + i), e4m3_value(sp[0]) * g,
                          e4m3_value(sp[1]) * g, out + e0);
    }
}

// Thread `chunk` draws bytes [chunk · 65536, +65536) in order, as random_nvfp4_parts does.
extern "C" __global__ void fill_random_nvfp4_bytes(unsigned char* out, u64 n, u64 seed, int shift, u32 bits) {
    pdl_start();
    u64 start, end, state;
    if (!random_chunk(n, seed, &start, &end, &state)) return;
    for (u64 i = start; i < end; ++i) {
        state = splitmix64(state);
        out[i] = (unsigned char)((u32)(state >> shift) | bits);
    }
}

// ---- NVFP4 weights times bf16 rows on tensor cores (gemv_nvfp4_mma_r<RT>_b<NB>) -------------
//
// out^T = W · x^T as in fp8_mma.cuh: W's rows the mma's A operand (RT tiles of 16 rows a block),
// x rows its B columns (NB tiles of 8 a block; grid.x walks chunks of 8·NB rows of x, the
// fastest so that a weight row block's chunks run together and share its bytes in L2), the
// block's FP8_MMA_WARPS warps splitting K into 128-wide slices (warp w: slices w, w + 8, ...),
// BATCH slices' weight loads in flight a warp. In a slice lane (g, t) loads the 16 packed bytes
// (32 weights, two scale blocks) of rows g and g + 8 at k = 128j + 32t and the matching 32
// elements of its x row, and the mma's k order is permuted to what those loads give: word q of
// the 16 bytes (8 nibbles e0..e7) makes two k16 steps, pairs (e0, e4), (e1, e5) then (e2, e6),
// (e3, e7); x's pairs are permuted alike (pair_halves).
//
// A operand, exactly: a pair's nibbles placed in a bf16 pair (nvfp4_pair_bits: code at bits
// 6..8, sign at 15) are e2m1 · 2^-126 (code 1, 0.5, a bf16 subnormal), and one bf16x2 multiply
// by e4m3 · 2^118 gives e2m1 · e4m3 · 2^-8 with no rounding (at most six significant bits,
// at least 2^-18; bf16x2 arithmetic keeps subnormals, as e4m3_halves_to_bf16x2 relies on).
// Products with x are exact in the mma's f32 sums; the row's sum is scaled by 2^8 · global at
// the end. The same arithmetic as the CPU's (exact products, f32 sums) in another order.
// Cost a weight: 5 instructions a pair of weights + the pair's share of the mma, about a third
// of the deleted CUDA-core GEMV's for one row, and the same for 8 rows of x.

// Nibbles I and I + 4 of w as a bf16 pair of value · 2^-126 (low half element I).
template <int I> __device__ __forceinline__ u32 nvfp4_pair_bits(u32 w) {
    constexpr int MAG = 6 - 4 * I, SGN = 12 - 4 * I;
    const u32 mag = (MAG >= 0 ? w << (MAG & 31) : w >> ((-MAG) & 31)) & 0x01c001c0u;
    return mag | ((w << SGN) & 0x80008000u);
}

// a · b for two bf16 pairs, each product rounded once (exact for the products made here).
__device__ __forceinline__ u32 mul_bf16x2(u32 a, u32 b) {
#ifdef METRALE_HOST_EMULATION
    return pack_bf16(lo(a) * lo(b), hi(a) * hi(b));
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    asm volatile("trap;");
    return a;
#else
    u32 r;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(0x80008000u));
    return r;
#endif
}

// A row's two scale bytes of a slice lane (sc: block 2t in the low byte) as the broadcast
// bf16 pairs (s0, s0) and (s1, s1) of e4m3 · 2^118 (exact: four significant bits).
__device__ __forceinline__ void nvfp4_scale_pairs(u32 sc, u32 (&s)[2]) {
    const u32 v = mul_bf16x2(e4m3_halves_to_bf16x2(byte_halves<0x4140>(sc)), 0x7a807a80u);
    s[0] = pair_halves<false>(v, v);
    s[1] = pair_halves<true>(v, v);
}

#define NVFP4_MMA_SLICE_BYTES 64  // a row's packed bytes in a 128-wide slice

// This warp's share of RT weight tiles against NB tiles of 8 x rows (the fp8_mma_tiles layout):
// rows[r] = tile r's rows g and g + 8 (k / 2 packed bytes each), scs[r] their scale rows,
// xrows[nb] this lane's x row of B tile nb (k bf16, or null for zeros). Lanes past K (the last
// slice of a K that is not a multiple of 128) read zeros.
template <int RT, int NB, int BATCH>
__device__ __forceinline__ void nvfp4_mma_tiles(float (&acc)[RT][NB][4],
                                                const unsigned char* const (&rows)[RT][2],
                                                const unsigned char* const (&scs)[RT][2],
                                                const bf16* const (&xrows)[NB], int k) {
    const int t = threadIdx.x & 3, first = threadIdx.x >> 5;
    const int slices = (k + 127) >> 7;
    const u32x4 zero{0u, 0u, 0u, 0u};
    bool waited = false;
    for (int j0 = first; j0 < slices; j0 += FP8_MMA_WARPS * BATCH) {
        u32x4 q[BATCH][RT][2];
        u32 sc[BATCH][RT][2];
#pragma unroll
        for (int i = 0; i < BATCH; ++i) {
            const int j = j0 + FP8_MMA_WARPS * i;
            const bool live = j < slices && 128 * j + 32 * t < k;
#pragma unroll
            for (int r = 0; r < RT; ++r)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    q[i][r][h] = live ? load_stream((const u32x4*)(rows[r][h] + NVFP4_MMA_SLICE_BYTES * (u64)j) + t)
                                      : zero;
                    sc[i][r][h] = live ? *(const unsigned short*)(scs[r][h] + 8 * (u64)j + 2 * t) : 0u;
                }
        }
        if (!waited) {
            pdl_start();  // weights are never written: their loads may overlap the kernel before
            waited = true;
        }
#pragma unroll
        for (int i = 0; i < BATCH; ++i) {
            const int j = j0 + FP8_MMA_WARPS * i;
            if (j >= slices) continue;
            const bool live = 128 * j + 32 * t < k;
            u32 s[RT][2][2];
#pragma unroll
            for (int r = 0; r < RT; ++r)
#pragma unroll
                for (int h = 0; h < 2; ++h) nvfp4_scale_pairs(sc[i][r][h], s[r][h]);
#pragma unroll
            for (int w = 0; w < 4; ++w) {
                u32 b[NB][4];
#pragma unroll
                for (int nb = 0; nb < NB; ++nb) {
                    const u32x4 xv = live && xrows[nb]
                                         ? load_cached((const u32x4*)(xrows[nb] + 128 * (u64)j + 32 * t) + w)
                                         : zero;
                    b[nb][0] = pair_halves<false>(xv.x, xv.z);
                    b[nb][1] = pair_halves<true>(xv.x, xv.z);
                    b[nb][2] = pair_halves<false>(xv.y, xv.w);
                    b[nb][3] = pair_halves<true>(xv.y, xv.w);
                }
#pragma unroll
                for (int r = 0; r < RT; ++r) {
                    const u32 w0 = w == 0 ? q[i][r][0].x : w == 1 ? q[i][r][0].y : w == 2 ? q[i][r][0].z : q[i][r][0].w;
                    const u32 w1 = w == 0 ? q[i][r][1].x : w == 1 ? q[i][r][1].y : w == 2 ? q[i][r][1].z : q[i][r][1].w;
                    const u32 s0 = s[r][0][w >> 1], s1 = s[r][1][w >> 1];
                    const u32 a0[4] = {mul_bf16x2(nvfp4_pair_bits<0>(w0), s0), mul_bf16x2(nvfp4_pair_bits<1>(w0), s0),
                                       mul_bf16x2(nvfp4_pair_bits<2>(w0), s0), mul_bf16x2(nvfp4_pair_bits<3>(w0), s0)};
                    const u32 a1[4] = {mul_bf16x2(nvfp4_pair_bits<0>(w1), s1), mul_bf16x2(nvfp4_pair_bits<1>(w1), s1),
                                       mul_bf16x2(nvfp4_pair_bits<2>(w1), s1), mul_bf16x2(nvfp4_pair_bits<3>(w1), s1)};
#pragma unroll
                    for (int nb = 0; nb < NB; ++nb) {
                        mma_bf16(acc[r][nb], a0[0], a1[0], a0[1], a1[1], b[nb][0], b[nb][1]);
                        mma_bf16(acc[r][nb], a0[2], a1[2], a0[3], a1[3], b[nb][2], b[nb][3]);
                    }
                }
            }
        }
    }
    if (!waited) pdl_start();  // a warp with no slice still waits before anything is written
}

template <int RT, int NB, int BATCH>
__device__ __forceinline__ void gemv_nvfp4_mma_impl(float* out, const bf16* x, const unsigned char* w,
                                                    const unsigned char* scales, const float* globals,
                                                    int m_total, int n_total, int k) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int m0 = blockIdx.x * 8 * NB, n0 = blockIdx.y * 16 * RT;
    const unsigned char* rows[RT][2];
    const unsigned char* scs[RT][2];
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            // Rows past the matrix read its last row (their sums are not written).
            const u64 n = (u64)min(n0 + 16 * r + 8 * h + g, n_total - 1);
            rows[r][h] = w + n * (u64)(k >> 1);
            scs[r][h] = scales + n * (u64)(k >> 4);
        }
    const bf16* xrows[NB];
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
        const int m = m0 + 8 * nb + g;
        xrows[nb] = m < m_total ? x + (u64)m * k : nullptr;
    }
    float acc[RT][NB][4] = {};
    nvfp4_mma_tiles<RT, NB, BATCH>(acc, rows, scs, xrows, k);
    if (!fp8_mma_reduce<RT * NB>(&acc[0][0][0])) return;
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int nb = 0; nb < NB; ++nb)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int n = n0 + 16 * r + g + 8 * (i >> 1), m = m0 + 8 * nb + 2 * t + (i & 1);
                if (n < n_total && m < m_total)
                    out[(u64)m * n_total + n] = acc[r][nb][i] * 256.0f * globals[n];
            }
}

#define GEMV_NVFP4_MMA(RT, NB, BATCH, BLOCKS)                                                      \
    extern "C" __global__ void __launch_bounds__(FP8_MMA_WARPS * 32, BLOCKS)                       \
        gemv_nvfp4_mma_r##RT##_b##NB(float* out, const bf16* x, const unsigned char* w,            \
                                     const unsigned char* scales, const float* globals,            \
                                     int m_total, int n_total, int k) {                            \
        gemv_nvfp4_mma_impl<RT, NB, BATCH>(out, x, w, scales, globals, m_total, n_total, k);       \
    }

// (RT, NB, slices in flight, blocks a multiprocessor the registers are bounded for): two
// tiles of 16 weight rows a block, the fastest at every count of x rows from 1 to 128 on an
// H100 at the 27B's shapes; blocks of 16 rows (up to 1.4x slower) and of 64 (1.09-1.41x)
// were deleted (performance log parts 15 and 16).
GEMV_NVFP4_MMA(2, 1, 2, 2)
GEMV_NVFP4_MMA(2, 2, 2, 2)
GEMV_NVFP4_MMA(2, 4, 1, 2)
