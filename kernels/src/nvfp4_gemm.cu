// NVFP4 weights times 16-256 bf16 rows on tensor cores, each weight converted once a block
// (nvfp4_gemm_r<RT>_x<NX>_w<WARPS>, issue 35; docs/nvfp4.md, "CUDA, the tile GEMM"). sm_80+,
// any M and N, K % 32 == 0. Compiled after nvfp4.cu (one module): it reuses that file's exact A operand
// (nvfp4_pair_bits, mul_bf16x2, nvfp4_scale_pairs) and its permuted k order.
//
// Why: gemv_nvfp4_mma_r2_b<NB> gives a block 32 weight rows and only 8·NB (at most 32) x rows,
// so at 64 or 128 rows each weight is converted to its bf16 operand 2-4 times and the kernel is
// bound by the conversion (H200, a 27B step's GEMVs: 33.7 ms at 64 rows, 60.3 at 128).
//
// Layout: out^T = W · x^T as in nvfp4.cu (W's rows the mma's A rows, x rows its B columns). A
// block owns WARPS·16·RT weight rows (blockIdx.y) and 8·NX x rows (blockIdx.x, the fastest, so
// a weight block's x chunks run together and share its bytes in L2). Each warp owns its own
// 16·RT weight rows and every x row of the block: it loads its rows' packed bytes straight from
// global into registers (PF 128-wide k slices in flight, as nvfp4_mma_tiles does) and converts
// each weight once, in registers, into the mma's A operand; nothing of W goes through shared
// memory and no two warps convert the same weight. The x rows of a slice are shared by the
// warps: cp.async brings them into shared memory (two stages: slice j + 1 lands while slice j
// is multiplied), and each lane reads its 16-byte words with one 16-byte shared load, permuted
// in registers to the weights' k order (pair_halves: the mma k order of nvfp4.cu, lane t owning
// k 32t..32t + 31 of a slice). A staged x row is 256 bytes + 16 of padding, and the 16-byte
// chunks of lanes t = 2, 3 swap bit 1 of their index: the eight lanes of a quarter warp then
// read eight different bank groups (conflict-free 16-byte loads).
//
// Exactness: the A operand is nvfp4.cu's (e2m1 · e4m3 · 2^-8, no rounding), the mma sums exact
// products in f32; the row's sum is multiplied by 2^8 · the row's multiplier at the end (as
// gemv_nvfp4_mma_*). x rows past M and k past K are zeros in shared memory (cp.async's
// zero-fill), weights past K zeros in registers; rows past N read the last row, not written.
//
// Floor (a 27B decode step's GEMVs, 64 layers: 24.4 G weights, 13.7 GB of NVFP4 bytes; 2 · 24.4
// G FLOP a row of x): bytes at 4.8-4.0 TB/s (H200) 2.9-3.4 ms; mma.sync bf16 at an assumed 500
// TFLOP/s (cuBLAS's bf16 GEMM reaches 470 at 128 rows) 3.1 ms at 32 rows, 6.2 at 64, 12.5 at
// 128. Issue slots (SASS, CUDA 13, sm_90a): a slice's loop costs a warp 12.0-12.8 instructions
// an HMMA at NX = 4, 8.3-9.0 at NX = 8, RT = 1, 6.4 at RT = 2 (conversion: 5 a pair of
// weights, once a block; a 16-byte shared load and 4 prmt a tile of 8 x rows and 2 k16 steps;
// the cp.async of x): 4.5 ms at 32 rows, 5.8 at 64, 10.2 at 128 of an H200's ~1.05 T
// warp-instructions a second. Expected, not yet measured on a GPU: ~5-6 ms at 32 rows, ~7-9 at
// 64, ~13-16 at 128 (GEMV: 17.1, 33.7, 60.3).

#define NVFP4_GEMM_SLICE 128  // k a slice: a lane's 16 packed bytes (32 weights) a row
#define NVFP4_GEMM_X_ROW 272  // bytes of a staged x row: a slice's 256 + 16 of padding

// Byte offset of 16-byte chunk c (0..15) in a staged x row: lanes t = 2, 3 (chunks 8..15)
// flip bit 1 of the chunk index, so with the 17-chunk row stride the 8 lanes of a quarter warp
// (rows g, g + 1, lanes t = 0..3, one word w) hit 8 distinct 16-byte bank groups.
__device__ __forceinline__ int nvfp4_gemm_chunk(int c) { return 16 * (c ^ ((c >> 2) & 2)); }

// One 128-wide k slice of this warp's tiles: q[r][h] / sc[r][h] the packed bytes and scale pair
// of rows g and g + 8 of tile r (this lane's 32 weights each), xg the lane's x row g of the
// staged slice (n8 tile nb at + 8·nb rows). Tiles of x rows past M (zeros) are multiplied
// too: a branch a tile made each tile's shared load and two dependent mmas a basic block of
// their own, serialized (SASS), for savings only in a block's last chunk of x rows.
template <int RT, int NX>
__device__ __forceinline__ void nvfp4_gemm_slice(float (&acc)[RT][NX][4], const u32x4 (&q)[RT][2],
                                                 const u32 (&sc)[RT][2], const unsigned char* xg) {
    const int t = threadIdx.x & 3;
    u32 s[RT][2][2];
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) nvfp4_scale_pairs(sc[r][h], s[r][h]);
#pragma unroll
    for (int w = 0; w < 4; ++w) {
        u32 a0[RT][4], a1[RT][4];
#pragma unroll
        for (int r = 0; r < RT; ++r) {
            const u32 w0 = w == 0 ? q[r][0].x : w == 1 ? q[r][0].y : w == 2 ? q[r][0].z : q[r][0].w;
            const u32 w1 = w == 0 ? q[r][1].x : w == 1 ? q[r][1].y : w == 2 ? q[r][1].z : q[r][1].w;
            const u32 s0 = s[r][0][w >> 1], s1 = s[r][1][w >> 1];
            a0[r][0] = mul_bf16x2(nvfp4_pair_bits<0>(w0), s0);
            a0[r][1] = mul_bf16x2(nvfp4_pair_bits<1>(w0), s0);
            a0[r][2] = mul_bf16x2(nvfp4_pair_bits<2>(w0), s0);
            a0[r][3] = mul_bf16x2(nvfp4_pair_bits<3>(w0), s0);
            a1[r][0] = mul_bf16x2(nvfp4_pair_bits<0>(w1), s1);
            a1[r][1] = mul_bf16x2(nvfp4_pair_bits<1>(w1), s1);
            a1[r][2] = mul_bf16x2(nvfp4_pair_bits<2>(w1), s1);
            a1[r][3] = mul_bf16x2(nvfp4_pair_bits<3>(w1), s1);
        }
        const int chunk = nvfp4_gemm_chunk(4 * t + w);
        u32 b[NX][4];
#pragma unroll
        for (int nb = 0; nb < NX; ++nb) {
            const u32x4 xv = *(const u32x4*)(xg + 8 * nb * NVFP4_GEMM_X_ROW + chunk);
            b[nb][0] = pair_halves<false>(xv.x, xv.z);
            b[nb][1] = pair_halves<true>(xv.x, xv.z);
            b[nb][2] = pair_halves<false>(xv.y, xv.w);
            b[nb][3] = pair_halves<true>(xv.y, xv.w);
        }
        // The two k16 steps one after the other, so that no mma waits on the one before.
#pragma unroll
        for (int nb = 0; nb < NX; ++nb)
#pragma unroll
            for (int r = 0; r < RT; ++r)
                mma_bf16(acc[r][nb], a0[r][0], a1[r][0], a0[r][1], a1[r][1], b[nb][0], b[nb][1]);
#pragma unroll
        for (int nb = 0; nb < NX; ++nb)
#pragma unroll
            for (int r = 0; r < RT; ++r)
                mma_bf16(acc[r][nb], a0[r][2], a1[r][2], a0[r][3], a1[r][3], b[nb][2], b[nb][3]);
    }
}

// RT m16 tiles of weight rows a warp, NX n8 tiles of x rows a block, WARPS warps, PF slices of
// weights in flight a warp.
template <int RT, int NX, int WARPS, int PF>
__device__ __forceinline__ void nvfp4_gemm_impl(float* out, const bf16* x, const unsigned char* w,
                                                const unsigned char* scales, const float* globals,
                                                int m_total, int n_total, int k) {
    constexpr int BX = 8 * NX, THREADS = 32 * WARPS, STAGE = BX * NVFP4_GEMM_X_ROW;
    __shared__ __attribute__((aligned(16))) unsigned char xs[2 * STAGE];
    const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int m0 = blockIdx.x * BX, n0 = (blockIdx.y * WARPS + (tid >> 5)) * 16 * RT;
    const int mrows = min(BX, m_total - m0);
    const int slices = (k + NVFP4_GEMM_SLICE - 1) / NVFP4_GEMM_SLICE;

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
    // Slice j's packed bytes and scale pairs of this lane (zeros past K or past the last slice).
    auto load_w = [&](int j, u32x4 (&qq)[RT][2], u32 (&ss)[RT][2]) {
        const bool live = j < slices && NVFP4_GEMM_SLICE * j + 32 * t < k;
#pragma unroll
        for (int r = 0; r < RT; ++r)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                qq[r][h] = live ? load_stream((const u32x4*)(rows[r][h] + 64 * (u64)j) + t) : u32x4{0u, 0u, 0u, 0u};
                ss[r][h] = live ? *(const unsigned short*)(scs[r][h] + 8 * (u64)j + 2 * t) : 0u;
            }
    };
    // Slice j of the block's x rows into stage `slot`, 16-byte chunks (zeros past M and K): this
    // thread copies chunk `ch` of rows row0, row0 + THREADS / 16, ... (its address arithmetic
    // hoisted out of the slice loop).
    constexpr int RSTEP = THREADS / 16;
    const int ch = tid & 15, row0 = tid >> 4;
    const u64 x_off = (u64)(m0 + row0) * k + 8 * ch, x_step = (u64)RSTEP * k;
    unsigned char* const x_dst = xs + row0 * NVFP4_GEMM_X_ROW + nvfp4_gemm_chunk(ch);
    auto load_x = [&](int j, int slot) {
        const bool k_ok = NVFP4_GEMM_SLICE * j + 8 * ch < k;
#pragma unroll
        for (int i = 0; i < BX / RSTEP; ++i) {
            const bool ok = k_ok && row0 + RSTEP * i < mrows;
            const bf16* src = ok ? x + x_off + x_step * i + NVFP4_GEMM_SLICE * j : x;
            cp_async<16>(x_dst + slot * STAGE + RSTEP * i * NVFP4_GEMM_X_ROW, src, ok);
        }
        cp_async_commit();
    };

    u32x4 q[PF][RT][2];
    u32 sc[PF][RT][2];
#pragma unroll
    for (int i = 0; i < PF; ++i) load_w(i, q[i], sc[i]);
    pdl_start();  // weights are never written: their first loads may overlap the kernel before
    load_x(0, 0);

    float acc[RT][NX][4] = {};
    const unsigned char* xg = xs + g * NVFP4_GEMM_X_ROW;
    // Slots of the weight ring are compile-time (u), so the ring stays in registers.
    for (int j0 = 0; j0 < slices; j0 += PF) {
#pragma unroll
        for (int u = 0; u < PF; ++u) {
            const int j = j0 + u;
            if (j >= slices) break;
            cp_async_wait<0>();
            __syncthreads();  // slice j staged; every warp is done with slice j - 1's stage
            if (j + 1 < slices) load_x(j + 1, (j + 1) & 1);
            u32x4 cur[RT][2];
            u32 csc[RT][2];
#pragma unroll
            for (int r = 0; r < RT; ++r)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    cur[r][h] = q[u][r][h];
                    csc[r][h] = sc[u][r][h];
                }
            load_w(j + PF, q[u], sc[u]);
            nvfp4_gemm_slice<RT, NX>(acc, cur, csc, xg + (j & 1) * STAGE);
        }
    }

    // The multipliers of this lane's rows first: out may alias globals as far as the compiler
    // knows, so a load after each store would serialize them.
    float scale[RT][2];
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h)
            scale[r][h] = 256.0f * globals[min(n0 + 16 * r + 8 * h + g, n_total - 1)];
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int nb = 0; nb < NX; ++nb)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int n = n0 + 16 * r + g + 8 * (i >> 1), m = m0 + 8 * nb + 2 * t + (i & 1);
                if (n < n_total && m < m_total)
                    out[(u64)m * n_total + n] = acc[r][nb][i] * scale[r][i >> 1];
            }
}

#define NVFP4_GEMM(RT, NX, WARPS, PF, BLOCKS)                                                      \
    extern "C" __global__ void __launch_bounds__(WARPS * 32, BLOCKS)                               \
        nvfp4_gemm_r##RT##_x##NX##_w##WARPS(float* out, const bf16* x, const unsigned char* w,     \
                                            const unsigned char* scales, const float* globals,     \
                                            int m_total, int n_total, int k) {                     \
        nvfp4_gemm_impl<RT, NX, WARPS, PF>(out, x, w, scales, globals, m_total, n_total, k);       \
    }

// (RT, NX, warps, slices in flight, blocks a multiprocessor the registers are bounded for):
// blocks of 32 x rows (up to 32 rows) or 64, of 64 weight rows (four warps), 128 (four warps of
// two tiles: half the shared loads and permutes a mma) or 32 (two warps: twice the blocks, for
// the [5120, *] matrices that make only 80 blocks of 64 rows for 132 multiprocessors).
NVFP4_GEMM(1, 4, 4, 3, 4)
NVFP4_GEMM(1, 4, 2, 3, 8)
NVFP4_GEMM(1, 8, 4, 3, 3)
NVFP4_GEMM(1, 8, 2, 3, 6)
NVFP4_GEMM(2, 8, 4, 2, 2)
