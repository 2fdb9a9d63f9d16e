// FP8 weights times a decode batch of up to 128 bf16 rows on tensor cores, x and the weight
// staged in shared memory (fp8_gemm_rows_m<M>, M = 16, 32, 64, 128: the most x rows a build
// takes): out[m, n] (f32) = x[m, k] · W[n, k]ᵀ, W e4m3 bytes with one f32 scale per 128
// columns of each row ([n, ceil(k / 128)], fp8.cu's layout). Compiled after fp8.cu (one module).
//
// Why: gemv_fp8_mma_many gives a block 16 weight rows and takes x 32 rows at a time, so every
// block reads all of x from L2, and the block's weight rows once more for each 32 rows. At 128
// rows of Qwen3-30B-A3B's q|k|v ([5120, 2048]) its 320 blocks read 168 MB of x for 10.8 MB of
// weight. Here a block owns 128 weight rows (output columns) and every x row: x is read n / 128
// times (21 MB there) and each weight byte once.
//
// A block: 8 warps; warp w owns the block's weight rows 16w .. 16w + 15 (one m16 A tile:
// prelude/fp8_mma.cuh's layout, W's rows the mma's A rows, x rows its B columns) against all M / 8
// n8 tiles of x rows. k streams through a cp.async pipeline of F8R_STAGES stages of 64 columns
// (three in flight while one is multiplied); a stage holds the block's 128 weight rows × 64 bytes,
// the M x rows × 64 bf16, and the 128 rows' scales of the stage's 128-column group. Per stage a
// lane loads 16 bytes of its rows g and g + 8 (one 16-byte shared load each), widens them once
// (fp8_widen) and multiplies them with 32 bytes of x row g of each n8 tile (fp8_mma_slice): the
// k order and arithmetic of gemv_fp8_mma_many (e4m3 widened to bf16 exactly, exact products
// summed in f32 by mma.sync m16n8k16, each 64-column slice's sum added as fmaf(scale, part, acc)),
// the slices in another grouping. No two warps widen the same weight. x rows past m are zeros in
// shared memory (cp.async's zero fill) and not written; weight rows past n read row n - 1 and are
// not written. Shared loads are free of bank conflicts: a 64-byte weight row puts a
// quarter-warp's rows g, g + 1 at 16t in 128 contiguous bytes, and an x row of 144 bytes (128 +
// 16 of padding) shifts row g + 1 by four banks.
//
// Split k: where the n / 128 column tiles are fewer than the multiprocessors (n = 2048 makes 16)
// the launcher (fp8_tiles.rs) splits k over gridDim.y blocks, each a run of whole slices. A split
// stores its sums to a workspace [splits, tiles, 8 warps, M / 8, 32 lanes, 4] in the registers'
// layout (16-byte stores a lane, a warp's 512 bytes contiguous), then a ticket per column tile
// (an int atomic on the backend's arrival counters, left at zero for the next launch) elects the
// tile's last block, which adds the splits' sums in split order (its own from registers) and
// writes out: no float atomics, and the same bits whatever order the blocks finish in.
//
// Tile sizes. 128 weight rows a block: x's L2 reads fall with the rows a block owns (n / rows
// reads of x), and one warp per m16 tile keeps the 4 · M / 8 accumulators of M = 128 (64 a lane)
// within 128 registers (two blocks a multiprocessor). 64 k columns a stage: one fp8_mma_slice,
// 27 KB a stage at M = 128, so four stages fit two blocks in an H100's 228 KB; the smaller
// builds fit three (M = 64) to five (M = 16) blocks. Splits: the fewest that give the
// multiprocessors 7/8 of a block each, at least 4 slices (the pipeline's depth) a split and at
// most 8 splits: a split adds a write and a read of m · n · 4 bytes of sums, 2.6 MB at [128, 5120].
//
// Floor (bytes once: the weight and its scales, x, out; H100 3.35 TB/s / H200 4.8 TB/s):
//   30B-A3B q|k|v [5120, 2048]: 11.2 MB at 16 rows (3.3 / 2.3 µs), 14.0 MB at 128 (4.2 / 2.9);
//   30B-A3B o [2048, 4096]: 8.9 MB at 16 rows (2.7 / 1.9 µs), 10.7 MB at 128 (3.2 / 2.2);
//   35B-A3B GDN in_proj [12352, 2048]: 26.9 MB at 16 rows (8.0 / 5.6 µs), 32.9 MB at 128 (9.8 / 6.9);
//   27B GDN in_proj [16480, 5120]: 88.2 MB at 16 rows (26.3 / 18.4 µs), 96.8 MB at 128 (28.9 / 20.2).
// At 128 rows the mma work (2 · m · n · k FLOP, 2.7 GFLOP for 30B's q|k|v) is as long again at
// mma.sync's rate, so the kernel is near the balance of bytes and tensor-core time there.
//
// Needs k % 64 == 0 (whole stages; a split starts on a slice), 16-byte aligned rows, sm_80+
// (mma.sync on bf16, cp.async). Versions tried: this one (not yet timed on a GPU).

#define F8R_WARPS 8
#define F8R_ROWS (16 * F8R_WARPS)  // weight rows (output columns) a block
#define F8R_BK 64                   // k columns a stage: one fp8_mma_slice
#define F8R_X_ROW (2 * F8R_BK + 16) // bytes of a staged x row (16 of padding: see the header)
#define F8R_STAGES 4

// A stage's layout for XT n8 tiles of x rows (fp8_tiles.rs's rows_smem mirrors it): the weight
// rows, the x rows, the weight rows' scales.
template <int XT> struct F8rCfg {
    static constexpr int W_BYTES = F8R_ROWS * F8R_BK;
    static constexpr int X_BYTES = 8 * XT * F8R_X_ROW;
    static constexpr int STAGE = W_BYTES + X_BYTES + 4 * F8R_ROWS;
    static constexpr int SMEM = F8R_STAGES * STAGE;
    // 16-byte x copies a thread makes a stage (M = 16: half the threads make one).
    static constexpr int X_COPIES = (8 * XT * 8 + 32 * F8R_WARPS - 1) / (32 * F8R_WARPS);
};

// One block (see the header): column tile blockIdx.x, split blockIdx.y of gridDim.y; part and
// tickets are used only with more than one split.
template <int XT>
__device__ void fp8_gemm_rows_impl(float* out, float* part, u32* tickets, const bf16* x,
                                   const unsigned char* w, const float* scales, int m_total,
                                   int n_total, int k) {
    using C = F8rCfg<XT>;
    unsigned char* const smem = dyn_smem(); // F8R_STAGES stages of C::STAGE bytes
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int tile = blockIdx.x, n0 = tile * F8R_ROWS, split = blockIdx.y, splits = gridDim.y;
    const int slices = k / F8R_BK, groups = (k + 127) >> 7;
    const int j0 = split * slices / splits, count = (split + 1) * slices / splits - j0;

    // This thread's copies of a stage: weight rows tid / 4 and tid / 4 + 64 (16-byte chunk tid
    // % 4), the scale of row tid (tid < 128), x rows tid / 8 + 32 i (chunk tid % 8). Row
    // pointers are kept, not recomputed a stage.
    const int wr = tid >> 2, wc = tid & 3, xr = tid >> 3, xc = tid & 7;
    const unsigned char* const w_lo = w + (u64)min(n0 + wr, n_total - 1) * k + 16 * wc;
    const unsigned char* const w_hi = w + (u64)min(n0 + wr + 64, n_total - 1) * k + 16 * wc;
    const float* const s_src = scales + (u64)min(n0 + (tid & (F8R_ROWS - 1)), n_total - 1) * groups;
    const bf16* const x_src = x + (u64)xr * k + 8 * xc;
    auto slot = [&](int s) { return smem + (s % F8R_STAGES) * C::STAGE; };
    // Stage s of this split: its weight rows and scales, then (after the wait) its x rows.
    auto load_w = [&](int s) {
        unsigned char* const st = slot(s);
        const int kb = (j0 + s) * F8R_BK;
        cp_async<16>(st + wr * F8R_BK + 16 * wc, w_lo + kb, true);
        cp_async<16>(st + (wr + 64) * F8R_BK + 16 * wc, w_hi + kb, true);
        if (tid < F8R_ROWS) cp_async<4>(st + C::W_BYTES + C::X_BYTES + 4 * tid, s_src + (kb >> 7), true);
    };
    auto load_x = [&](int s) {
        unsigned char* const st = slot(s) + C::W_BYTES + xr * F8R_X_ROW + 16 * xc;
        const int kb = (j0 + s) * F8R_BK;
#pragma unroll
        for (int i = 0; i < C::X_COPIES; ++i) {
            const int r = xr + 32 * i;
            if (r < 8 * XT) {
                const bool ok = r < m_total;
                cp_async<16>(st + 32 * i * F8R_X_ROW, ok ? x_src + (u64)32 * i * k + kb : x, ok);
            }
        }
    };

    // Slot `s`'s products into acc: rows g and g + 8 of this warp's tile against x row g of
    // every n8 tile.
    float acc[XT][4] = {};
    auto compute = [&](int s) {
        const unsigned char* const st = slot(s);
        const unsigned char* const wp = st + (16 * warp + g) * F8R_BK + 16 * t;
        const Fp8Slice ws = fp8_widen(lds16(wp), lds16(wp + 8 * F8R_BK));
        const float* const sc = (const float*)(st + C::W_BYTES + C::X_BYTES) + 16 * warp + g;
        const float s0 = sc[0], s1 = sc[8];
        const unsigned char* const xp = st + C::W_BYTES + g * F8R_X_ROW + 32 * t;
#pragma unroll
        for (int nb = 0; nb < XT; ++nb) {
            const unsigned char* const xq = xp + 8 * nb * F8R_X_ROW;
            fp8_mma_slice(acc[nb], ws, s0, s1, lds16(xq), lds16(xq + 16));
        }
    };

    // Weights are never written: their first stages load before the wait on x's writer. One
    // group for them, then one a stage's x, then one a stage (moe_pipe.cu's count: stage s
    // has landed once at most F8R_STAGES - 2 later groups are pending).
#pragma unroll
    for (int s = 0; s < F8R_STAGES - 1; ++s)
        if (s < count) load_w(s);
    cp_async_commit();
    pdl_start();
#pragma unroll
    for (int s = 0; s < F8R_STAGES - 1; ++s) {
        if (s < count) load_x(s);
        cp_async_commit();
    }
    for (int i = 0; i < count; ++i) {
        cp_async_wait<F8R_STAGES - 2>();
        __syncthreads();  // stage i is in; every warp is done with the slot refilled below
        if (i + F8R_STAGES - 1 < count) {
            load_w(i + F8R_STAGES - 1);
            load_x(i + F8R_STAGES - 1);
        }
        cp_async_commit();
        compute(i);
    }
    cp_async_wait<0>();

    if (splits > 1) {
        // This split's sums in the registers' layout, then the tile's last block adds them all.
        const u64 per_split = (u64)gridDim.x * F8R_WARPS * XT * 128;
        float* const mine = part + (u64)split * per_split + ((u64)tile * F8R_WARPS + warp) * XT * 128 + 4 * lane;
#pragma unroll
        for (int nb = 0; nb < XT; ++nb)
            store16(mine + 128 * nb, u32x4{__float_as_uint(acc[nb][0]), __float_as_uint(acc[nb][1]),
                                           __float_as_uint(acc[nb][2]), __float_as_uint(acc[nb][3])});
        __shared__ int last;
        __threadfence();
        __syncthreads();
        if (tid == 0) {
            last = atomicAdd(tickets + tile, 1u) == (u32)splits - 1;
            if (last) tickets[tile] = 0u;  // for the next launch
        }
        __syncthreads();
        if (!last) return;
        __threadfence();
#pragma unroll
        for (int nb = 0; nb < XT; ++nb) {
            float sum[4];
            for (int s = 0; s < splits; ++s) {
                float v[4] = {acc[nb][0], acc[nb][1], acc[nb][2], acc[nb][3]};
                if (s != split) {
                    const u32x4 q = load_l2x4((const u32x4*)(mine + (s - split) * (long long)per_split + 128 * nb));
                    v[0] = __uint_as_float(q.x), v[1] = __uint_as_float(q.y);
                    v[2] = __uint_as_float(q.z), v[3] = __uint_as_float(q.w);
                }
#pragma unroll
                for (int i = 0; i < 4; ++i) sum[i] = s == 0 ? v[i] : sum[i] + v[i];
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[nb][i] = sum[i];
        }
    }
#pragma unroll
    for (int nb = 0; nb < XT; ++nb)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int n = n0 + 16 * warp + g + 8 * (i >> 1), m = 8 * nb + 2 * t + (i & 1);
            if (n < n_total && m < m_total) out[(u64)m * n_total + n] = acc[nb][i];
        }
}

// M: the most x rows (8 · XT); BLOCKS: blocks a multiprocessor the registers are bounded for
// (the stages' shared memory allows as many on an H100).
#define FP8_GEMM_ROWS(M, BLOCKS)                                                                   \
    extern "C" __global__ void __launch_bounds__(F8R_WARPS * 32, BLOCKS)                           \
        fp8_gemm_rows_m##M(float* out, float* part, u32* tickets, const bf16* x,                   \
                           const unsigned char* w, const float* scales, int m_total, int n_total,  \
                           int k) {                                                                \
        fp8_gemm_rows_impl<M / 8>(out, part, tickets, x, w, scales, m_total, n_total, k);          \
    }

FP8_GEMM_ROWS(16, 4)
FP8_GEMM_ROWS(32, 4)
FP8_GEMM_ROWS(64, 3)
FP8_GEMM_ROWS(128, 2)
