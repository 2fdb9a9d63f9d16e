// The experts' small-step kernels with their weights streamed through a cp.async pipeline
// (issue 34): moe_gate_up_fp8_pipe and moe_down_fp8_pipe compute what the FP8 _any builds in
// moe_mma.cu compute (same grid, same outputs, same sums in the same order, so the same bits),
// but no weight passes through registers on its way in. Appended to moe_mma.cu in one module
// (small_block_expert, fp8_mma_slice). Which runs: the tuning's moe.small_mma (`pipe`, the
// default: on an H100 0.88-0.94x the _any kernels' time at 128-256 tokens, even at 16-64;
// the bf16 twins measured 1.02-1.07x slower and were deleted: docs/performance-log part 13).
//
// Why: at batch 128 the _any kernels hold each warp's weight loads in registers (4 k slices of
// 16 rows x 64 B), so bytes in flight cost registers: 106-116 a thread, 2 blocks of 256 an SM,
// half the cycles waiting on global loads, 2.1-2.7 TB/s of the ~4 (docs/cuda-kernels-moe.md, "the
// experts at high concurrency"). Here a block's weight tile streams through shared memory
// PIPE_STAGES k slices deep, a copy costing no register, so the kernel fits 80 registers and 3
// blocks an SM, with 2 slices (40 KB) a block in flight while the third is multiplied.
//
// A block: the _any block's rows. gate_up: grid (ceil(I / 64), min(E, pairs)), block row y the
// y-th active expert, 128 weight rows = warp w's 16: gate rows j = 64 bx + 8 w + (0..7) then the
// up rows of the same j; down: grid (ceil(H / 128), min(E, pairs)), rows c = 128 bx + 16 w +
// (0..15). Rows past the matrix read its last row (not written). The expert's pairs in chunks of
// PIPE_PAIRS (two n8 tiles), and the loop runs over (chunk, k slice) as one sequence, so the
// next chunk's first slices load while the current chunk's last ones are multiplied.
//
// A stage (one k slice of PIPE_ROW_BYTES bytes a weight row: 128 FP8 columns):
//   weights: 128 rows x 128 B, copied 16 B a lane, 8 lanes along a row (a warp instruction
//     reads 4 rows x 128 B, each a whole L2 line); stored with the row's 16-byte chunks XOR
//     swizzled by its parity (c ^ 4 (r & 1)) so that the mma's loads of
//     rows g and g + 1 by one quarter-warp fall in different banks.
//   x: the chunk's 16 activation rows at the slice's columns (bf16), rows padded by 16 bytes
//     (the same bank spread for their 16-byte loads); rows past the chunk's pairs zero-filled.
//   FP8 scales: the 128 rows' scale of this slice's 128-column group (4-byte copies).
// The mma's k order within a 64-column slice is prelude/fp8_mma.cuh's (lane (g, t) takes 16
// columns at 16t of rows g and g + 8 and of x row g), and a slice's sum is scaled and added as
// fp8_mma_tiles adds it, so the results are the _any kernels' bit for bit.
//
// Why 128 B a row a stage and not 512 (lanes along a whole 512-byte run): a stage is 128 rows
// x the row bytes, and at 512 B that is 64 KB a stage, one block an SM. Fewer rows a block
// would cut the stage but multiply the x re-reads (each block reads its chunk's x rows once a
// slice: 1/8 of its weight bytes at 8 pairs an expert with 128 rows, 1/2 with 32).

#define PIPE_WARPS 8
#define PIPE_ROWS (16 * PIPE_WARPS) // weight rows of a block
#define PIPE_ROW_BYTES 128          // bytes of a weight row in one stage
#define PIPE_STAGES 3
#define PIPE_PAIRS 16 // pairs a chunk (two n8 tiles)
#define PIPE_X_PAD 16 // bytes after each staged x row

// A stage's layout (moe_mma.rs's pipe_smem mirrors it).
struct PipeCfg {
    static constexpr int BK = PIPE_ROW_BYTES; // k columns a stage (one byte each)
    static constexpr int W_BYTES = PIPE_ROWS * PIPE_ROW_BYTES;
    static constexpr int X_ROW = BK * 2 + PIPE_X_PAD; // bytes of a staged x row
    static constexpr int X_CHUNKS = BK * 2 / 16;      // its 16-byte copies
    static constexpr int X_BYTES = PIPE_PAIRS * X_ROW;
    static constexpr int S_BYTES = PIPE_ROWS * 4; // a scale a row (BK = 128)
    static constexpr int STAGE = W_BYTES + X_BYTES + S_BYTES;
    static constexpr int SMEM = PIPE_STAGES * STAGE;
    // The XOR of a row's 16-byte chunk index (see the header).
    static __device__ __forceinline__ int swizzle(int r) { return (r & 1) << 2; }
};
static_assert(PIPE_ROW_BYTES == 128, "one FP8 scale group a stage, 8 chunks a row");

// One block (see the header). GATE: out is act [pairs, n] bf16 (silu(gate) · up), w [E, 2n, k],
// src x [*, k] read at row perm / div; else out is ys [pairs, n] f32, w [E, n, k], src act
// [pairs, k] (div 1). k % BK == 0 (the launcher's rule); scales [E · rows, k / 128].
template <bool GATE>
__device__ void moe_pipe_impl(void* out, const bf16* src, const unsigned char* w, const float* scales,
                              const int* offsets, const int* active, const int* perm,
                              int experts, int div, int n, int k) {
    using C = PipeCfg;
    pdl_start();
    const int e = small_block_expert(active, experts);
    if (e < 0) return;
    unsigned char* const smem = dyn_smem(); // PIPE_STAGES stages of PipeCfg::STAGE bytes
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int first = offsets[e], count = offsets[e + 1] - first;
    const int slices = k / C::BK, groups = (k + 127) >> 7;
    const int total = (count + PIPE_PAIRS - 1) / PIPE_PAIRS * slices;

    // The global row of the block's weight row r (clamped into the matrix).
    auto w_row = [&](int r) -> u64 {
        if (GATE) {
            const int j = min((int)blockIdx.x * 64 + 8 * (r >> 4) + (r & 7), n - 1);
            return (u64)e * 2 * n + ((r >> 3) & 1) * n + j;
        }
        return (u64)e * n + min((int)blockIdx.x * PIPE_ROWS + r, n - 1);
    };
    // This thread's copies of a stage: weight rows r0 + 32 i (r0 = tid >> 3), chunk tid & 7;
    // the scale of row tid (tid < 128); x row tid / X_CHUNKS, chunk tid % X_CHUNKS (while inside
    // a stage). Row r0 + 32 i is the matrix row j0 + STEP i of wbase's (clamped), so a thread
    // keeps one pointer, not one a copy (registers).
    constexpr int W_COPIES = PIPE_ROWS * 8 / (PIPE_WARPS * 32), STEP = GATE ? 16 : 32;
    const int r0 = tid >> 3;
    const u64 kbytes = (u64)k;
    const int j0 = GATE ? (int)blockIdx.x * 64 + 8 * (r0 >> 4) + (r0 & 7)
                        : (int)blockIdx.x * PIPE_ROWS + r0;
    const unsigned char* const wbase =
        (const unsigned char*)w + (GATE ? (u64)e * 2 * n + ((r0 >> 3) & 1) * n : (u64)e * n) * kbytes +
        16 * (tid & 7);
    const float* ssrc = scales + w_row(min(tid, PIPE_ROWS - 1)) * groups;
    const int xr = tid / C::X_CHUNKS, xc = tid % C::X_CHUNKS;

    // Stage `i` of the (chunk, slice) sequence into its slot. The loads run in order, so the
    // chunk's x row is looked up when its first slice loads.
    int l_slice = 0, l_chunk = 0;
    const bf16* xsrc = nullptr; // this thread's x row of the loading chunk, or null
    auto load = [&](int i) {
        unsigned char* const st = smem + (i % PIPE_STAGES) * C::STAGE;
        if (l_slice == 0) {
            const int p = l_chunk * PIPE_PAIRS + xr;
            xsrc = xr < PIPE_PAIRS && p < count ? src + (u64)(perm[first + p] / div) * k : nullptr;
        }
        const int kb = l_slice * PIPE_ROW_BYTES; // byte offset into a weight row
#pragma unroll
        for (int c = 0; c < W_COPIES; ++c) {
            const int r = (tid >> 3) + 32 * c, ch = (tid & 7) ^ C::swizzle(r);
            const u64 row = (u64)min(j0 + STEP * c, n - 1);
            cp_async<16>(st + r * PIPE_ROW_BYTES + 16 * ch, wbase + row * kbytes + kb, true);
        }
        if (xr < PIPE_PAIRS) {
            const bf16* s = xsrc ? xsrc + l_slice * C::BK + 8 * xc : src;
            cp_async<16>(st + C::W_BYTES + xr * C::X_ROW + 16 * xc, s, xsrc != nullptr);
        }
        if (tid < PIPE_ROWS)
            cp_async<4>(st + C::W_BYTES + C::X_BYTES + 4 * tid, ssrc + l_slice, true);
        if (++l_slice == slices) {
            l_slice = 0;
            ++l_chunk;
        }
    };

    // Slice `slot`'s products into acc: this warp's rows 16 warp + (g, g + 8) against the
    // chunk's x rows g and g + 8, 64 columns at a time.
    float acc[2][4] = {};
    auto compute = [&](int slot) {
        const unsigned char* const st = smem + slot * C::STAGE;
        const unsigned char* const w0 = st + (16 * warp + g) * PIPE_ROW_BYTES;
        const unsigned char* const w1 = w0 + 8 * PIPE_ROW_BYTES;
        const int sw = C::swizzle(g); // rows g and g + 8 have g's parity
        const float* sc = (const float*)(st + C::W_BYTES + C::X_BYTES) + 16 * warp + g;
        const float s0 = sc[0], s1 = sc[8];
#pragma unroll 1 // two slices; both in flight at once spilled at 80 registers
        for (int s = 0; s < C::BK / 64; ++s) {
            const int c = (4 * s + t) ^ sw;
            const Fp8Slice ws = fp8_widen(lds16(w0 + 16 * c), lds16(w1 + 16 * c));
#pragma unroll
            for (int nb = 0; nb < 2; ++nb) {
                const unsigned char* xp =
                    st + C::W_BYTES + (g + 8 * nb) * C::X_ROW + 128 * s + 32 * t;
                fp8_mma_slice(acc[nb], ws, s0, s1, lds16(xp), lds16(xp + 16));
            }
        }
    };

    // A chunk's results (the _any kernels' epilogues), then its sums cleared.
    auto finish = [&](int chunk) {
        const int start = first + chunk * PIPE_PAIRS, np = min(count - chunk * PIPE_PAIRS, PIPE_PAIRS);
#pragma unroll
        for (int nb = 0; nb < 2; ++nb) {
            if (GATE) {
                const int j = (int)blockIdx.x * 64 + 8 * warp + g;
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    const int col = 8 * nb + 2 * t + i;
                    if (j < n && col < np) {
                        const float gs = acc[nb][i], us = acc[nb][2 + i];
                        ((bf16*)out)[(u64)perm[start + col] * n + j] =
                            from_f32<bf16>(gs / (1.0f + expf(-gs)) * us);
                    }
                }
            } else {
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int c = (int)blockIdx.x * PIPE_ROWS + 16 * warp + g + 8 * (i >> 1);
                    const int col = 8 * nb + 2 * t + (i & 1);
                    if (c < n && col < np) ((float*)out)[(u64)perm[start + col] * n + c] = acc[nb][i];
                }
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[nb][i] = 0.f;
        }
    };

#pragma unroll
    for (int s = 0; s < PIPE_STAGES - 1; ++s) {
        if (s < total) load(s);
        cp_async_commit();
    }
    int c_slice = 0, c_chunk = 0;
    for (int i = 0; i < total; ++i) {
        cp_async_wait<PIPE_STAGES - 2>();
        __syncthreads(); // stage i is in; every warp is done with the slot refilled below
        if (i + PIPE_STAGES - 1 < total) load(i + PIPE_STAGES - 1);
        cp_async_commit();
        compute(i % PIPE_STAGES);
        if (++c_slice == slices) {
            finish(c_chunk);
            c_slice = 0;
            ++c_chunk;
        }
    }
    cp_async_wait<0>();
}

// At most 80 registers a thread (3 blocks of 256 an SM; the stages' shared memory allows 3 too).
extern "C" __global__ void __launch_bounds__(PIPE_WARPS * 32, 3)
    moe_gate_up_fp8_pipe(bf16* act, const bf16* x, const unsigned char* w, const float* scales,
                         const int* offsets, const int* active, const int* perm, int experts,
                         int top_k, int inter, int hidden) {
    moe_pipe_impl<true>(act, x, w, scales, offsets, active, perm, experts, top_k, inter, hidden);
}
extern "C" __global__ void __launch_bounds__(PIPE_WARPS * 32, 3)
    moe_down_fp8_pipe(float* ys, const bf16* act, const unsigned char* w, const float* scales,
                      const int* offsets, const int* active, const int* perm, int experts,
                      int inter, int hidden) {
    moe_pipe_impl<false>(ys, act, w, scales, offsets, active, perm, experts, 1, hidden, inter);
}
