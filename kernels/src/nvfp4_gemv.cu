// ---- gemv_nvfp4_mma_r<RT>_b<NB>: NVFP4 weights times decode batches of bf16 rows on tensor
// cores (issue 35; docs/nvfp4.md) ---------------------------------------------------------------
//
// W's rows the A operand of mma.sync m16n8k16 (RT tiles of 16 rows a block), x rows its B columns
// (NB tiles of 8), 8 warps splitting K in 128-wide slices, lane (g, t) holding the 16 packed bytes
// of rows g and g + 8 at k = 128j + 32t, word q's nibbles paired (e_I, e_I+4) so that both halves
// of an A register come from one shift of the word (nvfp4.cu's design note); every product
// exact, f32 sums, the row's sum times 2^8 · global at the end. The loop is issue-bound, so what
// it issues is what was cut against the first version (deleted; its SASS loop, sm_90a: 7.5
// instructions a weight byte at 8 x rows, 9.4 at 16, 12.1 at 32; here 6.1, 7.3 and 11.2):
//
// - A pair's bits by one integer multiply: the pair's two nibbles isolated (one and), times
//   2^a + 2^(a+6) places a copy of each nibble with its code at bits 6..8 of its half and a second
//   copy with its sign at bit 15 (the copies do not overlap, so no carries), and one and keeps
//   those bits: three instructions a pair, the multiply on the FMA pipe (nvfp4_pair_bits: a shift
//   and a mask for the code, another pair for the sign, on the integer pipe). Pairs 2 and 3 of a
//   word come from the word shifted right by 8 (one shift for both). With four x tiles (NB = 4)
//   the multiply's temporaries make ptxas spill at 128 registers: those keep nvfp4_pair_bits.
// - The steady state loads BATCH whole slices (every lane inside K) without predicates, and
//   loads the next batch's weights and scales before converting the current one (two register
//   buffers, PIPE), so a warp's loads stay in flight while it converts. The slices of the last
//   partial batch (and the one past a K that is not a multiple of 128) go one at a time through
//   a predicated path (without PIPE, every slice does).
// - x rows past M read x's last row (their sums are not written) and a row's scale bytes are a
//   32-bit offset from one pointer: no predicate or null test an x load, fewer registers.
//
// Measured (H100, a 27B step's GEMVs, performance log part 17): 6.70 ms at one x row, 8.76 at
// 16, 13.39 at 32, 24.18 at 64 (the first version: 7.24, 10.74, 17.24, 34.38).

// Pair J (0 or 1) of src as nvfp4_pair_bits<J> gives it: nibbles J and J + 4 of src as a bf16
// pair of e2m1 · 2^-126 (code at bits 6..8 of each half, sign at 15).
template <int J> __device__ __forceinline__ u32 nvfp4_pair_bits_mul(u32 src) {
    constexpr u32 SPREAD = (1u << (6 - 4 * J)) | (1u << (12 - 4 * J));
    return ((src & (0x000f000fu << (4 * J))) * SPREAD) & 0x81c081c0u;
}

// The scale formats of the slice loops below: BLOCK values a scale byte, SLICE scale bytes a
// row's slice, a lane's scale bytes of the j-th slice from p (load; p: the scales +
// lane_offset(t) + the row's and the first slice's offsets), the two bf16 pairs its words
// multiply by (pairs: words 0-1, then 2-3), and a row sum's factor.
//   - Fp4SliceNv (NVFP4, the dense GEMV and moe_fp4_small.cu): two E4M3 bytes a lane, as
//     e4m3 · 2^118 (nvfp4_scale_pairs); a row's sums times 2^8 · its global.
//   - Fp4SliceMx (MXFP4, moe_fp4_small.cu): one E8M0 byte b a lane, exact for every b as
//     moe_mma_fp4.cu's MmaMx: times 2^(min(b, 128) − 1), then 2^(max(b, 128) − 128) (the second
//     factor 1 for the scales checkpoints hold, but always applied); a row's sums times 1.
struct Fp4SliceNv {
    static constexpr int BLOCK = 16;
    static constexpr bool TWO = false;  // one multiply a pair
    __device__ __forceinline__ static int lane_offset(int t) { return 2 * t; }
    static constexpr int SLICE = 8;  // scale bytes a row's 128-wide slice
    __device__ __forceinline__ static u32 load(const unsigned char* p, int j) {
        return ((const unsigned short*)p)[4 * j];
    }
    __device__ __forceinline__ static void pairs(u32 sc, u32 (&s)[2], u32& s2) {
        nvfp4_scale_pairs(sc, s);
        s2 = 0u;
    }
    __device__ __forceinline__ static float row_factor(const float* globals, u64 row) { return 256.0f * globals[row]; }
};
struct Fp4SliceMx {
    static constexpr int BLOCK = 32;
    static constexpr bool TWO = true;  // two multiplies a pair
    __device__ __forceinline__ static int lane_offset(int t) { return t; }
    static constexpr int SLICE = 4;
    __device__ __forceinline__ static u32 load(const unsigned char* p, int j) { return p[4 * j]; }
    __device__ __forceinline__ static void pairs(u32 b, u32 (&s)[2], u32& s2) {
        const u32 f1 = ((b < 128u ? b : 128u) + 126u) << 7, f2 = ((b > 128u ? b : 128u) - 1u) << 7;
        s[0] = s[1] = f1 | (f1 << 16);
        s2 = f2 | (f2 << 16);
    }
    __device__ __forceinline__ static float row_factor(const float*, u64) { return 1.0f; }
};

// One slice's A operands of a row pair times its x tiles: w0/w1 word `wq` of rows g / g + 8, s0/s1
// their scale pairs for that word (SC::pairs), b the x fragments of word wq; SC::TWO and `two`
// (warp-uniform): the second factors t0/t1 of MXFP4 scales, applied after.
template <int NB, typename SC = Fp4SliceNv>
__device__ __forceinline__ void nvfp4_mma_word(float (&acc)[NB][4], u32 w0, u32 w1, u32 s0, u32 s1,
                                                const u32 (&b)[NB][4], u32 t0 = 0u, u32 t1 = 0u,
                                                bool two = false) {
    u32 a0[4], a1[4];
    if constexpr (NB < 4) {
        const u32 v0 = w0 >> 8, v1 = w1 >> 8;
        a0[0] = mul_bf16x2(nvfp4_pair_bits_mul<0>(w0), s0), a0[1] = mul_bf16x2(nvfp4_pair_bits_mul<1>(w0), s0);
        a0[2] = mul_bf16x2(nvfp4_pair_bits_mul<0>(v0), s0), a0[3] = mul_bf16x2(nvfp4_pair_bits_mul<1>(v0), s0);
        a1[0] = mul_bf16x2(nvfp4_pair_bits_mul<0>(w1), s1), a1[1] = mul_bf16x2(nvfp4_pair_bits_mul<1>(w1), s1);
        a1[2] = mul_bf16x2(nvfp4_pair_bits_mul<0>(v1), s1), a1[3] = mul_bf16x2(nvfp4_pair_bits_mul<1>(v1), s1);
    } else {
        // Four x tiles leave no registers for the multiply's temporaries (ptxas spills):
        // nvfp4_pair_bits' shifts and masks.
        a0[0] = mul_bf16x2(nvfp4_pair_bits<0>(w0), s0), a0[1] = mul_bf16x2(nvfp4_pair_bits<1>(w0), s0);
        a0[2] = mul_bf16x2(nvfp4_pair_bits<2>(w0), s0), a0[3] = mul_bf16x2(nvfp4_pair_bits<3>(w0), s0);
        a1[0] = mul_bf16x2(nvfp4_pair_bits<0>(w1), s1), a1[1] = mul_bf16x2(nvfp4_pair_bits<1>(w1), s1);
        a1[2] = mul_bf16x2(nvfp4_pair_bits<2>(w1), s1), a1[3] = mul_bf16x2(nvfp4_pair_bits<3>(w1), s1);
    }
    if constexpr (SC::TWO) {
        if (two) {
#pragma unroll
            for (int i = 0; i < 4; ++i) a0[i] = mul_bf16x2(a0[i], t0), a1[i] = mul_bf16x2(a1[i], t1);
        }
    }
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
        mma_bf16(acc[nb], a0[0], a1[0], a0[1], a1[1], b[nb][0], b[nb][1]);
        mma_bf16(acc[nb], a0[2], a1[2], a0[3], a1[3], b[nb][2], b[nb][3]);
    }
}

// Slice j of this lane: its weights q (rows [r][h]) and scale bytes sc, x rows xrows (offset to
// this lane's 32 elements), `live` false for a lane past K (its weights are zeros; x is not read).
template <int RT, int NB, typename SC = Fp4SliceNv>
__device__ __forceinline__ void nvfp4_mma_slice(float (&acc)[RT][NB][4], const u32x4 (&q)[RT][2],
                                                 const u32 (&sc)[RT][2], const bf16* const (&xrows)[NB],
                                                 int j, bool live) {
    const u32x4 zero{0u, 0u, 0u, 0u};
    // MXFP4: a second factor only where a scale byte of the warp's slice is above 128 (a scale
    // above 2^1, which no released checkpoint holds); else it would be exactly 1, so skipping
    // its multiplies (a uniform branch: the warp's vote) gives the same bits, 64 of a gate|up
    // slice's 490 instructions fewer.
    bool two = false;
    if constexpr (SC::TWO) {
#pragma unroll
        for (int r = 0; r < RT; ++r) two = two || sc[r][0] > 128u || sc[r][1] > 128u;
        two = __ballot_sync(0xffffffffu, two) != 0u;
    }
    u32 s[RT][2][2], s2[RT][2];
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) SC::pairs(sc[r][h], s[r][h], s2[r][h]);
#pragma unroll
    for (int w = 0; w < 4; ++w) {
        u32 b[NB][4];
#pragma unroll
        for (int nb = 0; nb < NB; ++nb) {
            const u32x4 xv = live ? load_cached((const u32x4*)(xrows[nb] + 128 * (u64)j) + w) : zero;
            b[nb][0] = pair_halves<false>(xv.x, xv.z);
            b[nb][1] = pair_halves<true>(xv.x, xv.z);
            b[nb][2] = pair_halves<false>(xv.y, xv.w);
            b[nb][3] = pair_halves<true>(xv.y, xv.w);
        }
#pragma unroll
        for (int r = 0; r < RT; ++r) {
            const u32 w0 = w == 0 ? q[r][0].x : w == 1 ? q[r][0].y : w == 2 ? q[r][0].z : q[r][0].w;
            const u32 w1 = w == 0 ? q[r][1].x : w == 1 ? q[r][1].y : w == 2 ? q[r][1].z : q[r][1].w;
            nvfp4_mma_word<NB, SC>(acc[r], w0, w1, s[r][0][w >> 1], s[r][1][w >> 1], b, s2[r][0], s2[r][1], two);
        }
    }
}

// A batch of BATCH whole slices j0, j0 + 8, ... (every lane inside K): weights and scale bytes.
template <int RT, int BATCH, typename SC = Fp4SliceNv>
__device__ __forceinline__ void nvfp4_mma_load(u32x4 (&q)[BATCH][RT][2], u32 (&sc)[BATCH][RT][2],
                                                const unsigned char* const (&rows)[RT][2],
                                                const unsigned char* sbase, const u32 (&soff)[RT][2], int j0) {
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const u32x4* wp = (const u32x4*)(rows[r][h] + NVFP4_MMA_SLICE_BYTES * (u64)j0);
            const unsigned char* sp = sbase + soff[r][h] + SC::SLICE * (u64)j0;
#pragma unroll
            for (int i = 0; i < BATCH; ++i) {
                q[i][r][h] = load_stream(wp + FP8_MMA_WARPS * (NVFP4_MMA_SLICE_BYTES / 16) * i);
                sc[i][r][h] = SC::load(sp, FP8_MMA_WARPS * i);
            }
        }
}

// rows[r] = tile r's rows g and g + 8 (k / 2 packed bytes each), xrows[nb] this lane's x row of
// B tile nb, rows offset to this lane's 16 bytes (+ 16t), a row's scale bytes at
// sbase (the scales + SC::lane_offset(t)) + soff[r][h] (32-bit offsets: fewer registers).
// REST: slices a warp loads at once past the pipelined batches (moe_fp4_small.cu's kernels,
// whose k is a few slices a warp, load all of a lane's slices at once; the GEMVs one).
template <int RT, int NB, int BATCH, bool PIPE, typename SC = Fp4SliceNv, int REST = 1>
__device__ __forceinline__ void nvfp4_mma_tiles(float (&acc)[RT][NB][4], const unsigned char* const (&rows)[RT][2],
                                                 const unsigned char* sbase, const u32 (&soff)[RT][2],
                                                 const bf16* const (&xrows)[NB], int k) {
    const int t = threadIdx.x & 3, first = threadIdx.x >> 5;
    constexpr int STEP = FP8_MMA_WARPS * BATCH;
    const int whole = k >> 7, slices = (k + 127) >> 7;
    // Batches whose last slice is whole: j0 + 8 (BATCH - 1) < whole.
    int j0 = first;
    u32x4 qa[BATCH][RT][2], qb[BATCH][RT][2];
    u32 sa[BATCH][RT][2], sb[BATCH][RT][2];
    if (PIPE && j0 + FP8_MMA_WARPS * (BATCH - 1) < whole) nvfp4_mma_load<RT, BATCH, SC>(qa, sa, rows, sbase, soff, j0);
    pdl_start();  // weights are never written: their loads may overlap the kernel before
    while (PIPE && j0 + FP8_MMA_WARPS * (BATCH - 1) < whole) {
        if (j0 + STEP + FP8_MMA_WARPS * (BATCH - 1) < whole)
            nvfp4_mma_load<RT, BATCH, SC>(qb, sb, rows, sbase, soff, j0 + STEP);
#pragma unroll
        for (int i = 0; i < BATCH; ++i)
            nvfp4_mma_slice<RT, NB, SC>(acc, qa[i], sa[i], xrows, j0 + FP8_MMA_WARPS * i, true);
        j0 += STEP;
        if (j0 + FP8_MMA_WARPS * (BATCH - 1) >= whole) break;
        if (j0 + STEP + FP8_MMA_WARPS * (BATCH - 1) < whole)
            nvfp4_mma_load<RT, BATCH, SC>(qa, sa, rows, sbase, soff, j0 + STEP);
#pragma unroll
        for (int i = 0; i < BATCH; ++i)
            nvfp4_mma_slice<RT, NB, SC>(acc, qb[i], sb[i], xrows, j0 + FP8_MMA_WARPS * i, true);
        j0 += STEP;
    }
    // The rest REST slices at a time (a warp's loads of them issued together), lanes past K
    // reading zeros (without PIPE, every slice: fewer registers).
    const u32x4 zero{0u, 0u, 0u, 0u};
    for (int j = j0; j < slices; j += FP8_MMA_WARPS * REST) {
        bool live[REST];
        u32x4 q[REST][RT][2];
        u32 sc[REST][RT][2];
#pragma unroll
        for (int i = 0; i < REST; ++i) {
            const int ji = j + FP8_MMA_WARPS * i;
            live[i] = ji < slices && 128 * ji + 32 * t < k;
#pragma unroll
            for (int r = 0; r < RT; ++r)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    q[i][r][h] = live[i] ? load_stream((const u32x4*)(rows[r][h] + NVFP4_MMA_SLICE_BYTES * (u64)ji)) : zero;
                    sc[i][r][h] = live[i] ? SC::load(sbase + soff[r][h] + SC::SLICE * (u64)ji, 0) : 0u;
                }
        }
#pragma unroll
        for (int i = 0; i < REST; ++i)
            // The warp's slices (a slice past the last is skipped by the whole warp).
            if (j + FP8_MMA_WARPS * i < slices)
                nvfp4_mma_slice<RT, NB, SC>(acc, q[i], sc[i], xrows, j + FP8_MMA_WARPS * i, live[i]);
    }
}

template <int RT, int NB, int BATCH, bool PIPE>
__device__ __forceinline__ void gemv_nvfp4_mma_impl(float* out, const bf16* x, const unsigned char* w,
                                                     const unsigned char* scales, const float* globals,
                                                     int m_total, int n_total, int k) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int m0 = blockIdx.x * 8 * NB, n0 = blockIdx.y * 16 * RT;
    const unsigned char* rows[RT][2];
    u32 soff[RT][2];
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            // Rows past the matrix read its last row (their sums are not written).
            const u64 n = (u64)min(n0 + 16 * r + 8 * h + g, n_total - 1);
            rows[r][h] = w + n * (u64)(k >> 1) + 16 * t;
            soff[r][h] = (u32)(n * (u64)(k >> 4));  // the launcher checks n_total · k / 16 < 2^32
        }
    const bf16* xrows[NB];
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
        // Rows past x read its last row (their sums are not written): no predicate a load.
        const int m = min(m0 + 8 * nb + g, m_total - 1);
        xrows[nb] = x + (u64)m * k + 32 * t;
    }
    float acc[RT][NB][4] = {};
    nvfp4_mma_tiles<RT, NB, BATCH, PIPE>(acc, rows, scales + 2 * t, soff, xrows, k);
    if (!fp8_mma_reduce<RT * NB>(&acc[0][0][0])) return;
    mma_tile_store(out, acc, n0, m0, n_total, m_total,
                   [&](int n, int) { return 256.0f * globals[n]; });
}

#define GEMV_NVFP4_MMA(RT, NB, BATCH, PIPE, BLOCKS)                                                     \
    extern "C" __global__ void __launch_bounds__(FP8_MMA_WARPS * 32, BLOCKS)                       \
        gemv_nvfp4_mma_r##RT##_b##NB(float* out, const bf16* x, const unsigned char* w,           \
                                      const unsigned char* scales, const float* globals,           \
                                      int m_total, int n_total, int k) {                           \
        gemv_nvfp4_mma_impl<RT, NB, BATCH, PIPE>(out, x, w, scales, globals, m_total, n_total, k);      \
    }

// (RT, NB, slices a batch, the next batch loaded while converting, blocks a multiprocessor): two
// tiles of 16 weight rows a block (blocks of 16 and 64 rows measured slower, performance log
// parts 15 and 16); fewer slices in flight where more x tiles need the registers (no spills at
// 128 registers).
GEMV_NVFP4_MMA(2, 1, 2, true, 2)
GEMV_NVFP4_MMA(2, 2, 1, true, 2)
GEMV_NVFP4_MMA(2, 4, 1, false, 2)
