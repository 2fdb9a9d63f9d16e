// ---- FP8 weights times a few bf16 rows on tensor cores (gemv_fp8_mma in fp8.cu, the small-step
// expert kernels in moe_mma.cu) --------------------------------------------------------------
//
// out^T = W · x^T with W's rows as the mma's A operand (16 rows a tile) and x rows as its B
// columns (8 a tile). A block of FP8_MMA_WARPS warps owns NT tiles and splits K into 64-wide slices
// (warp w: slices w, w + 8, ...), each warp holding BATCH slices' weight loads in flight. In a
// slice lane (g = lane / 4, t = lane % 4) loads 16 bytes of tile rows g and g + 8 at
// k = 64j + 16t and the matching 16 elements of x row g (a null row reads as zeros), and the
// mma's k order is permuted to what those loads give (moe_mma.cu's trick; the sum over k does
// not depend on it): step s (of four k16 steps) takes k 16t + 4s + {0, 1} as its 2t.. and
// 16t + 4s + {2, 3} as its 2t + 8... Bytes are widened to bf16 exactly (e4m3x8_to_bf16x8),
// products are exact and summed in f32, and a slice's sum is scaled by its row's 128-column
// scale; the warps' sums are added in warp order (fp8_mma_reduce). The same arithmetic as the
// CUDA-core FP8 kernels (exact products, f32 sums, a scale per partial sum) in another order.
// Needs K % 64 == 0 and rows 16-byte aligned.
#define FP8_MMA_WARPS 8

// Slice j of tile rows g and g + 8 (q0, q1: 16 bytes each) widened to bf16 pairs: a0 / a1 hold
// k 16t .. 16t + 7 of rows g / g + 8, c0 / c1 k 16t + 8 .. 16t + 15.
struct Fp8Slice {
    u32x4 a0, a1, c0, c1;
};
__device__ __forceinline__ Fp8Slice fp8_widen(u32x4 q0, u32x4 q1) {
    return Fp8Slice{e4m3x8_to_bf16x8(u32x2{q0.x, q0.y}), e4m3x8_to_bf16x8(u32x2{q1.x, q1.y}),
                    e4m3x8_to_bf16x8(u32x2{q0.z, q0.w}), e4m3x8_to_bf16x8(u32x2{q1.z, q1.w})};
}

// A widened slice against x row g's 16 elements (xa, xb), into this lane's four sums (rows g,
// g + 8 x columns 2t, 2t + 1) with the rows' scales s0, s1.
__device__ __forceinline__ void fp8_mma_slice(float acc[4], const Fp8Slice& w, float s0, float s1,
                                              u32x4 xa, u32x4 xb) {
    float part[4] = {0.f, 0.f, 0.f, 0.f};
    mma_bf16(part, w.a0.x, w.a1.x, w.a0.y, w.a1.y, xa.x, xa.y);
    mma_bf16(part, w.a0.z, w.a1.z, w.a0.w, w.a1.w, xa.z, xa.w);
    mma_bf16(part, w.c0.x, w.c1.x, w.c0.y, w.c1.y, xb.x, xb.y);
    mma_bf16(part, w.c0.z, w.c1.z, w.c0.w, w.c1.w, xb.z, xb.w);
    acc[0] = fmaf(s0, part[0], acc[0]);
    acc[1] = fmaf(s0, part[1], acc[1]);
    acc[2] = fmaf(s1, part[2], acc[2]);
    acc[3] = fmaf(s1, part[3], acc[3]);
}

// The weight formats fp8_mma_tiles takes (WF): how a lane loads its 16 values of a row's
// 64-wide slice j (WORDS 16-byte words, and the factor s of the slice's sum, from the row's
// ScaleRow) and widens them (rows g and g + 8) to an Fp8Slice; row_at / scale_at: a row and its
// scales from column k0 on (moe_mma.cu's staged chunks). Fp8Rows: e4m3 bytes, a float scale
// per 128 columns. Bf16Rows: bf16 rows used as they are (two 16-byte loads; no scales, s = 1).
// moe_mma_fp4.cu's Fp4Rows: packed FP4 nibbles with their block scales.
struct Fp8Rows {
    using ScaleRow = const float*;
    static constexpr int WORDS = 1;
    __device__ __forceinline__ static void load(u32x4 (&q)[WORDS], float& s, const unsigned char* row,
                                                ScaleRow sc, int j, int t) {
        q[0] = load_stream((const u32x4*)row + 4 * j + t);
        s = sc[j >> 1];
    }
    __device__ __forceinline__ static Fp8Slice widen(const u32x4 (&q0)[WORDS], const u32x4 (&q1)[WORDS]) {
        return fp8_widen(q0[0], q1[0]);
    }
    __device__ __forceinline__ static const unsigned char* row_at(const unsigned char* r, int k0) { return r + k0; }
    __device__ __forceinline__ static ScaleRow scale_at(ScaleRow sc, int k0) { return sc + (k0 >> 7); }
};
struct Bf16Rows {
    using ScaleRow = const float*;
    static constexpr int WORDS = 2;
    __device__ __forceinline__ static void load(u32x4 (&q)[WORDS], float& s, const unsigned char* row,
                                                ScaleRow, int j, int t) {
        const u32x4* r = (const u32x4*)row + 8 * j + 2 * t;
        q[0] = load_stream(r);
        q[1] = load_stream(r + 1);
        s = 1.0f;
    }
    __device__ __forceinline__ static Fp8Slice widen(const u32x4 (&q0)[WORDS], const u32x4 (&q1)[WORDS]) {
        return Fp8Slice{q0[0], q1[0], q0[1], q1[1]};
    }
    __device__ __forceinline__ static const unsigned char* row_at(const unsigned char* r, int k0) { return r + 2 * k0; }
    __device__ __forceinline__ static ScaleRow scale_at(ScaleRow sc, int) { return sc; }
};
// The format of a weight element type: bf16 rows, else FP8 bytes.
template <typename W> struct RowsOf {
    using T = Fp8Rows;
};
template <> struct RowsOf<bf16> {
    using T = Bf16Rows;
};

// SPLIT (the default): this warp's share of the k slices (warp w: w, w + 8, ...), the block's
// warps then adding their sums (fp8_mma_reduce); else every slice, the warp's own tiles.
// This warp's share of NT weight tiles (format WF) against NB tiles of 8 x rows: rows[nt] = the
// starts of tile nt's rows g and g + 8, scs[nt] their scale rows, xrows[nb] this lane's x row of
// B tile nb (column 8nb + g; k bf16, or null for zeros); acc[nt][nb] = rows g, g + 8 x columns
// 8nb + 2t, 8nb + 2t + 1. wait_first: call pdl_start after the first batch's weight loads
// (weights are never written, so those loads may overlap the previous kernel), else the caller
// has waited already.
// SMEM_X: the x rows are in shared memory (plain loads), else global (load_cached).
template <int NT, int NB, int BATCH, bool SPLIT = true, typename WF = Fp8Rows, bool SMEM_X = false>
__device__ __forceinline__ void fp8_mma_tiles(float (&acc)[NT][NB][4],
                                              const unsigned char* const (&rows)[NT][2],
                                              const typename WF::ScaleRow (&scs)[NT][2],
                                              const bf16* const (&xrows)[NB], int k,
                                              bool wait_first) {
    const int t = threadIdx.x & 3;
    const int first = SPLIT ? threadIdx.x >> 5 : 0, step = SPLIT ? FP8_MMA_WARPS : 1;
    const int slices = k >> 6;
    const u32x4 zero{0u, 0u, 0u, 0u};
    bool waited = !wait_first;
    for (int j0 = first; j0 < slices; j0 += step * BATCH) {
        u32x4 q[BATCH][NT][2][WF::WORDS];
        float s[BATCH][NT][2];
#pragma unroll
        for (int i = 0; i < BATCH; ++i) {
            const int j = j0 + step * i;
            if (j < slices) {
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int h = 0; h < 2; ++h)
                        WF::load(q[i][nt][h], s[i][nt][h], rows[nt][h], scs[nt][h], j, t);
            }
        }
        if (!waited) {
            pdl_start();
            waited = true;
        }
#pragma unroll
        for (int i = 0; i < BATCH; ++i) {
            const int j = j0 + step * i;
            if (j < slices) {
                u32x4 xa[NB], xb[NB];
#pragma unroll
                for (int nb = 0; nb < NB; ++nb) {
                    const u32x4* xr = xrows[nb] ? (const u32x4*)xrows[nb] + 2 * t + 8 * j : nullptr;
                    xa[nb] = xr ? (SMEM_X ? xr[0] : load_cached(xr)) : zero;
                    xb[nb] = xr ? (SMEM_X ? xr[1] : load_cached(xr + 1)) : zero;
                }
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const Fp8Slice w = WF::widen(q[i][nt][0], q[i][nt][1]);
#pragma unroll
                    for (int nb = 0; nb < NB; ++nb)
                        fp8_mma_slice(acc[nt][nb], w, s[i][nt][0], s[i][nt][1], xa[nb], xb[nb]);
                }
            }
        }
    }
    if (!waited) pdl_start();  // a warp with no slice still waits before anything is written
}

// The block's sums in warp 0: acc holds N groups of this lane's four sums (every thread calls;
// returns true in warp 0, whose acc then holds the sum over the warps, added in warp order).
template <int N> __device__ __forceinline__ bool fp8_mma_reduce(float* acc) {
    __shared__ float sums[FP8_MMA_WARPS][N * 4][32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < N * 4; ++i) sums[warp][i][lane] = acc[i];
    __syncthreads();
    if (warp != 0) return false;
#pragma unroll
    for (int i = 0; i < N * 4; ++i) {
        float v = sums[0][i][lane];
        for (int w = 1; w < FP8_MMA_WARPS; ++w) v += sums[w][i][lane];
        acc[i] = v;
    }
    return true;
}

// Warp 0's reduced tile (fp8_mma_reduce) into out [m_total, n_total] f32: acc[r][nb] holds this
// lane's sums of weight rows n0 + 16r + g, + 8 against x rows m0 + 8nb + 2t, + 1; each is
// written times f(n, m), only inside out.
template <int RT, int NB, typename F>
__device__ __forceinline__ void mma_tile_store(float* out, const float (&acc)[RT][NB][4], int n0,
                                               int m0, int n_total, int m_total, F f) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int nb = 0; nb < NB; ++nb)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int n = n0 + 16 * r + g + 8 * (i >> 1), m = m0 + 8 * nb + 2 * t + (i & 1);
                if (n < n_total && m < m_total) out[(u64)m * n_total + n] = acc[r][nb][i] * f(n, m);
            }
}
