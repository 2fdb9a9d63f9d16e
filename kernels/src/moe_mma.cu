// Mixture-of-experts expert GEMMs on tensor cores, for steps with many tokens an expert (prefill
// chunks, large decode batches): fused_moe's stages 3 and 4 (moe.cu's header) as two grouped
// GEMMs, one launch each over all experts, in place of moe_gate_up_* and moe_down_*, which apply
// each weight row to 8 tokens at a time on the CUDA cores. Routing, grouping and moe_combine are
// moe.cu's, so the output is summed in the CPU reference's order as before; in a module of its
// own because mma.sync needs sm_80 (e4m3 operands sm_89), so an older GPU still loads moe.cu.
//
//   moe_tiles: one block lists the BM-row tiles of the grouped pairs, (expert, first row of its
//     range) each, from the offsets (no host round trip, so decode graphs can hold it); entries
//     past the count are -1. The grids' x runs over an upper bound of that count,
//     min(pairs, (pairs + E · (BM - 1)) / BM), and blocks with no tile return at once.
//   moe_gate_up_mma_*: grid (tiles, ceil(I / 64)); block (tile, j) computes act[pair, j·64 ..
//     j·64 + 63] for the tile's pairs: the gate rows j·64.. and the up rows I + j·64.. of the
//     expert's weight are one 128-row B tile, laid out so that each thread holds gate and up of
//     the same (pair, column) and writes silu(g) · u rounded to bf16 at the pair's row, as
//     moe_gate_up_* does. The A rows are x's rows of the pairs' tokens (pair / top_k), gathered
//     through perm.
//   moe_down_mma_*: grid (tiles, ceil(H / 128)); ys[pair, c] = act[pair] · W2_e[c] in f32 at the
//     pair's row. With no tiles, offsets and perm (null pointers) it is a plain GEMM of `rows`
//     rows, one expert: out[m, n] = a[m] · w[n] (fp8.rs's FP8 matmul for prefill-sized GEMMs).
//   moe_quant_fp8_*: a warp per row quantizes activations per 128 columns for the `_fp8act`
//     builds (the FP8 KV cache's rule: s = amax / 448, e4m3(x / s)).
//   moe_gate_up_clamped_mma_bf16, moe_gate_up_clamped_bf16_small_any: gpt-oss's experts
//     (gpt_oss.rs): the bf16 gate|up kernels with what joins gate and up a template parameter
//     (prelude/moe_act.cuh): the gate|up bias [E, 2I] added and the clamped SwiGLU in place of
//     silu(g) · u, the CUDA-core moe_gate_up_clamped_*'s f32 operations. Down is unchanged.
//
// A block is BM = 64 rows (pairs) × BN = 128 weight rows, k in stages of 32 through a cp.async
// pipeline (rows past the tile, weight rows past the matrix and k past its end are zero-filled);
// its warps are 2 × (warps / 2), each 32 rows × BN / (warps / 2) columns, m16 × n8 mma tiles. No
// ldmatrix and no swizzle: the sum over k does not depend on the order of k, so a lane's k
// indices are permuted to what one load of a row gives it (attention_mma.cu's trick): lane (g =
// lane / 4, t = lane % 4) loads elements 8t .. 8t + 7 of a 32-wide k slice of A rows g and g + 8
// and of B row (weight row) g; with bf16, elements 8t + 4s + {0, 1} are the mma's k 2t + {0, 1}
// of step s (of two k16 steps) and 8t + 4s + {2, 3} its 2t + 8 + {0, 1}; with e4m3 (one k32
// step) bytes 8t .. 8t + 3 are its k 4t .., bytes 8t + 4 .. its 16 + 4t ... Rows of 64 bytes
// (bf16) or 32 (e4m3) make these 16- and 8-byte shared loads free of bank conflicts.
//
// Builds (the weights' type, then what the mma multiplies):
//   _bf16: bf16 x and weights, m16n8k16 bf16. 4 warps of 32 × 64.
//   _fp8: FP8 weights (e4m3 bytes, one f32 scale per 128 columns of each row), bf16 activations:
//     a weight byte is widened to bf16 exactly (prelude's e4m3x8_to_bf16x8, no scale), the
//     products of a 128-column group are summed apart and added as acc += scale · part. The
//     same arithmetic as moe_*_fp8 (exact products, f32 sums, the scale applied to a group's
//     sum) in another order. 8 warps of 32 × 32 (two sets of accumulators).
//   _fp8act: FP8 weights and activations quantized to e4m3 per token and 128 columns
//     (moe_quant_fp8_*, like transformers' fine-grained FP8 path and DeepSeek's), m16n8k32 e4m3
//     (sm_89+), a group's sum scaled by a_scale · w_scale. Halves the A bytes and doubles the
//     mma's k, at the cost of rounding every activation to 4 significant bits.
//   _nvfp4, _mxfp4 (moe_mma_fp4.cu, compiled after this file): _bf16 with packed FP4 stacks,
//     each weight widened to bf16 exactly as its B tile is loaded (moe_mma_impl's WL loader),
//     NVFP4's per-row multipliers applied to the sums in the epilogue.
//
// Which build runs (moe_mma.rs): _bf16 for bf16 experts, _fp8 for FP8 ones, _nvfp4 / _mxfp4
// for FP4 ones; _fp8act only when
// asked (CudaBackend::set_fp8_activations): on the H200 it was 12% faster than _fp8 on a
// 2048-token chunk (1573 against 1796 us) and 7% on the whole 30B-A3B prefill (121 against 130
// ms), for 25 times the error (rms 4.1e-2 to 4.4e-2 of the output's against 1.6e-3; the CPU
// reference keeps activations exact).
//
// Times (H200, fused_moe alone at 30B-A3B's shape, 2048 tokens = 16384 pairs, top-8 of 128,
// routing and moe_combine included; floors: the experts' weights once at 4 TB/s, 302 us bf16 and
// 156 us FP8, and 155 GFLOP at 780 TFLOP/s, 198 us):
//   moe_gate_up_* + moe_down_* on the CUDA cores:   bf16 15425 us, FP8 25739 us.
//   this file, 64-row blocks (the one kept):        bf16 1208 us (128 TFLOP/s), FP8 1796,
//                                                   e4m3 activations 1573.
//   128-row blocks (8 warps of 64 × 32 for bf16, 16 of 32 × 32 for FP8; 4 stages in 64 KB and
//   48 KB): bf16 1340, FP8 2161, e4m3 1904, and slower at every smaller size too (at 16
//   tokens 488 against 360 us), though each weight tile is read by fewer blocks.
// Nsight Compute on the 64-row bf16 kernels in a 30B-A3B prefill (at its base clocks): 24% of
// warp slots occupied (4 blocks of 4 warps a multiprocessor, by registers and shared memory),
// 57% of the SM's issue throughput, L2 44-65%, DRAM 20-33%; 41% of the cycles between a warp's
// instructions are waits on fixed-latency dependencies. Latency-bound: more warps or more
// independent work a warp (interleaving the two k16 steps of a tile across accumulators, larger
// k slices, ldmatrix), or Hopper's wgmma with TMA, are the next steps.

#define MMA_BM 64
#define MWG_BM 128 // moe_wg.cu's tiles
#define MMA_BN 128
#define MMA_BK 32
#define MMA_GROUP 128 // columns of an FP8 scale (tensor.rs's FP8_BLOCK)
#define MMA_TILE_THREADS 256

// ---- the tile list -------------------------------------------------------------------------

// Exclusive prefix sum of v over the block (blockDim.x a multiple of 32, at most 1024); total
// gets the block's sum. Every thread calls.
__device__ int block_exclusive_scan(int v, int* total) {
    __shared__ int warp_sums[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    int incl = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int up = (int)__float_as_uint(__shfl_sync(0xffffffffu, __int_as_float(incl), lane - o));
        if (lane >= o) incl += up;
    }
    __syncthreads();
    if (lane == 31) warp_sums[warp] = incl;
    __syncthreads();
    int before = 0, all = 0;
    for (int w = 0; w < warps; ++w) {
        before += w < warp ? warp_sums[w] : 0;
        all += warp_sums[w];
    }
    *total = all;
    return before + incl - v;
}

// tiles[2y], tiles[2y + 1] = (expert, first row of its range) of tile y, experts in order, each
// expert's ceil(count / BM) tiles in row order; (-1, 0) from the count to max_tiles.
// offsets: E + 1 entries (moe_group's or moe_plan's). One block of MMA_TILE_THREADS.
// moe_tiles: MMA_BM rows (the mma.sync kernels'); moe_tiles_wg: MWG_BM (moe_wg.cu's).
template <int BM>
__device__ void moe_tiles_impl(int* tiles, const int* offsets, int experts, int max_tiles) {
    pdl_start();
    int done = 0;
    for (int base = 0; base < experts; base += blockDim.x) {
        const int e = base + threadIdx.x;
        const int n = e < experts ? (offsets[e + 1] - offsets[e] + BM - 1) / BM : 0;
        int total;
        const int first = done + block_exclusive_scan(n, &total);
        for (int j = 0; j < n; ++j) {
            const int y = first + j;
            if (y < max_tiles) {
                tiles[2 * y] = e;
                tiles[2 * y + 1] = j * BM;
            }
        }
        done += total;
    }
    for (int y = done + threadIdx.x; y < max_tiles; y += blockDim.x) {
        tiles[2 * y] = -1;
        tiles[2 * y + 1] = 0;
    }
}
extern "C" __global__ void moe_tiles(int* tiles, const int* offsets, int experts, int max_tiles) {
    moe_tiles_impl<MMA_BM>(tiles, offsets, experts, max_tiles);
}
extern "C" __global__ void moe_tiles_wg(int* tiles, const int* offsets, int experts,
                                        int max_tiles) {
    moe_tiles_impl<MWG_BM>(tiles, offsets, experts, max_tiles);
}

// ---- the grouped GEMMs ---------------------------------------------------------------------

// A block's shape. MODE 0: bf16 activations and weights; 1: bf16 activations, FP8 weights; 2:
// e4m3 activations (with their scales) and FP8 weights. A and W: bytes an element; the warps are
// 2 (rows) × WARPS / 2 (columns), each MT m16 tiles × WN n8 tiles: 32 × 64 with bf16 weights,
// 32 × 32 with FP8 (their two sets of accumulators must fit 128 registers); STAGES k slices in
// flight, in dynamic shared memory (SMEM bytes; moe_mma.rs mirrors these numbers).
template <int MODE> struct MmaCfg {
    static constexpr int A = MODE == 2 ? 1 : 2, W = MODE == 0 ? 2 : 1;
    static constexpr int WARPS = MODE == 0 ? 4 : 8, WARPS_M = 2;
    static constexpr int MT = MMA_BM / 16 / WARPS_M, WN = MMA_BN / 8 / (WARPS / WARPS_M);
    static constexpr int STAGE = MMA_BM * MMA_BK * A + MMA_BN * MMA_BK * W;
    static constexpr int STAGES = MODE == 0 ? 3 : MODE == 1 ? 4 : 6;
    static constexpr int SMEM = STAGES * STAGE;
};

// The first (FIRST) or second of two arrays of one type, chosen at compile time.
template <bool FIRST, typename T> __device__ __forceinline__ T& pick(T& a, T& b) {
    if constexpr (FIRST) return a;
    else return b;
}

// A grouped-GEMM block's tile: moe_tiles' entry blockIdx.x, or (null tiles: a dense GEMM)
// rows BM · blockIdx.x .. of `rows`. Writes each of its BM rows' pair (out_row; -1 past the
// tile's pairs) and A row (the pair / a_div) and returns its expert (0 for a dense GEMM; -1:
// no tile, the block has nothing to do). moe_mma_impl's and moe_wg_impl's.
template <int BM>
__device__ __forceinline__ int moe_tile_rows(int* a_row, int* out_row, const int* tiles,
                                             const int* offsets, const int* perm, int rows,
                                             int a_div) {
    int e = 0, start = (int)blockIdx.x * BM, end = rows;
    if (tiles) {
        e = tiles[2 * blockIdx.x];
        if (e < 0) return -1;
        start = offsets[e] + tiles[2 * blockIdx.x + 1];
        end = offsets[e + 1];
    }
    const int count = min(BM, end - start);
    for (int r = (int)threadIdx.x; r < BM; r += (int)blockDim.x) {
        const int p = r < count ? (perm ? perm[start + r] : start + r) : -1;
        out_row[r] = p;
        a_row[r] = p < 0 ? -1 : p / a_div;
    }
    return e;
}

// The weight row of each of a block's BN B rows (-1 past the matrix) for its columns from n0 =
// blockIdx.y · (GATE ? BN / 2 : BN), which it returns: gate_up's rows 0 .. BN / 2 - 1 are the
// gate rows of the block's columns and the rest their up rows (w [E, 2n, k]); down's are rows
// n0 .. of expert e (w [E, n, k]). The caller syncs before reading the table.
template <int BN, bool GATE>
__device__ __forceinline__ int moe_tile_w_rows(int* w_row, int e, int n) {
    const int n0 = (int)blockIdx.y * (GATE ? BN / 2 : BN);
    for (int r = (int)threadIdx.x; r < BN; r += (int)blockDim.x) {
        const int j = n0 + (GATE ? r % (BN / 2) : r);
        const int row = GATE ? e * 2 * n + (r < BN / 2 ? 0 : n) + j : e * n + j;
        w_row[r] = j < n ? row : -1;
    }
    return n0;
}

// How moe_mma_impl's B tiles arrive. MmaStoredW: the weights as stored (w, w_scales), copied
// by cp.async with A's chunks. The other loader, moe_mma_fp4.cu's MmaFp4Tile (REG): FP4 weights
// loaded into registers one slice ahead (fetch), written widened to bf16 into MODE 0's B rows
// (put) a slice later, and a factor of each weight row's sums (row_scale) in the epilogue.
struct MmaStoredW {
    static constexpr bool REG = false;
};

// One block of the grouped GEMM (see the header). GATE: gate_up + f (w is [E, 2n, k], out bf16
// act [pairs, n]; f: prelude/moe_act.cuh's SiLU or gpt-oss's clamped SwiGLU with its bias);
// else out is f32 [pairs, n] and w [E, n, k]. A row of pair p is row p / a_div of a ([*, k];
// a_scales [*, ceil(k / 128)] for MODE 2). tiles == nullptr: one expert, rows 0 .. rows of a,
// no permutation (the dense GEMM). WL: the B tiles' loader (MmaStoredW, or MmaFp4Tile with
// MODE 0, whose w and w_scales are then unused).
template <int MODE, bool GATE, typename F = MoeSiluAct, typename WL = MmaStoredW>
__device__ void moe_mma_impl(void* out, const void* a, const float* a_scales, const void* w,
                             const float* w_scales, const int* tiles, const int* offsets,
                             const int* perm, int rows, int a_div, int n, int k, F f = F(),
                             WL wl = WL()) {
    using C = MmaCfg<MODE>;
    constexpr int BM = MMA_BM;
    constexpr int THREADS = C::WARPS * 32, WARP_COLS = C::WARPS / C::WARPS_M;
    constexpr int MT = C::MT, WN = C::WN, WROWS = 16 * MT; // a warp's rows
    constexpr int A_ROW = MMA_BK * C::A, W_ROW = MMA_BK * C::W; // bytes of a row in a stage
    constexpr int CA = A_ROW / 16, CW = W_ROW / 16; // 16-byte chunks of a row in a stage
#ifdef METRALE_HOST_EMULATION
    alignas(16) static unsigned char smem[C::SMEM];
#else
    extern __shared__ __attribute__((aligned(16))) unsigned char moe_mma_smem[];
    unsigned char* const smem = moe_mma_smem; // C::SMEM bytes
#endif
    __shared__ int a_row[BM];     // the A row of each tile row, -1 past the tile's pairs
    __shared__ int out_row[BM];   // its pair (output row), -1 past them
    __shared__ int w_row[MMA_BN]; // the weight row of each B row, -1 past the matrix

    const int e = moe_tile_rows<BM>(a_row, out_row, tiles, offsets, perm, rows, a_div);
    if (e < 0) return;
    const int n0 = moe_tile_w_rows<MMA_BN, GATE>(w_row, e, n);
    const int tid = threadIdx.x;
    __syncthreads();

    const unsigned char* a8 = (const unsigned char*)a;
    const unsigned char* w8 = (const unsigned char*)w;
    // k slice kt into stage slot `slot`: A rows, then B rows, 16-byte chunks.
    auto load = [&](int kt, int slot) {
        unsigned char* sa = smem + slot * C::STAGE;
        unsigned char* sw = sa + BM * A_ROW;
#pragma unroll
        for (int c = tid; c < BM * CA + (WL::REG ? 0 : MMA_BN * CW); c += THREADS) {
            if (c < BM * CA) {
                const int r = c / CA, ch = c % CA;
                const int kk = kt * MMA_BK + ch * (16 / C::A);
                const bool ok = a_row[r] >= 0 && kk < k;
                const unsigned char* src = ok ? a8 + ((u64)a_row[r] * k + kk) * C::A : a8;
                cp_async<16>(sa + r * A_ROW + ch * 16, src, ok);
            } else {
                const int r = (c - BM * CA) / CW, ch = (c - BM * CA) % CW;
                const int kk = kt * MMA_BK + ch * (16 / C::W);
                const bool ok = w_row[r] >= 0 && kk < k;
                const unsigned char* src = ok ? w8 + ((u64)w_row[r] * k + kk) * C::W : w8;
                cp_async<16>(sw + r * W_ROW + ch * 16, src, ok);
            }
        }
    };

    const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int wm = warp / WARP_COLS, wn = warp % WARP_COLS;
    // The B row of the warp's n8 tile nt (gate_up: its first WN / 2 tiles are gate rows, the
    // rest the up rows of the same columns).
    auto tile_row = [&](int nt) {
        if (GATE) {
            constexpr int HALF = WN / 2;
            return (nt < HALF ? 0 : MMA_BN / 2) + (wn * HALF + nt % HALF) * 8;
        }
        return (wn * WN + nt) * 8;
    };
    float acc[MT][WN][4];
    float part[MT][WN][4]; // MODE > 0: the current scale group's sums
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < WN; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[mt][nt][i] = part[mt][nt][i] = 0.f;
    // Where the products go: straight into acc (bf16 weights) or into the group's sums.
    auto& sums = pick<MODE == 0>(acc, part);

    // The products of stage slot `slot` (one 32-wide k slice).
    auto compute = [&](int slot) {
        const unsigned char* sa = smem + slot * C::STAGE + (wm * WROWS + g) * A_ROW;
        const unsigned char* sw = smem + slot * C::STAGE + BM * A_ROW + g * W_ROW;
        if constexpr (C::A == 2) {
            u32x4 lo8[MT], hi8[MT]; // rows g and g + 8 of each m16 tile: k 8t .. 8t + 7
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                lo8[mt] = lds16(sa + mt * 16 * A_ROW + 16 * t);
                hi8[mt] = lds16(sa + (mt * 16 + 8) * A_ROW + 16 * t);
            }
#pragma unroll
            for (int nt = 0; nt < WN; ++nt) {
                const unsigned char* wp = sw + tile_row(nt) * W_ROW;
                u32x4 b;
                if constexpr (C::W == 2) b = lds16(wp + 16 * t);
                else b = e4m3x8_to_bf16x8(lds8(wp + 8 * t));
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma_bf16(sums[mt][nt], lo8[mt].x, hi8[mt].x, lo8[mt].y, hi8[mt].y, b.x, b.y);
                    mma_bf16(sums[mt][nt], lo8[mt].z, hi8[mt].z, lo8[mt].w, hi8[mt].w, b.z, b.w);
                }
            }
        } else {
            u32x2 lo8[MT], hi8[MT];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                lo8[mt] = lds8(sa + mt * 16 * A_ROW + 8 * t);
                hi8[mt] = lds8(sa + (mt * 16 + 8) * A_ROW + 8 * t);
            }
#pragma unroll
            for (int nt = 0; nt < WN; ++nt) {
                const u32x2 b = lds8(sw + tile_row(nt) * W_ROW + 8 * t);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
                    mma_m16n8<true>(sums[mt][nt], lo8[mt].x, hi8[mt].x, lo8[mt].y, hi8[mt].y, b.x,
                                    b.y);
            }
        }
    };

    // MODE > 0: the scales of the current group: the weight rows of the lane's columns (2t,
    // 2t + 1 of each n8 tile), and (MODE 2) the A rows of its rows (g, g + 8 of each m16 tile).
    const int groups = (k + MMA_GROUP - 1) / MMA_GROUP;
    float ws[WN][2], as[MT][2];
    auto load_scales = [&](int grp) {
#pragma unroll
        for (int nt = 0; nt < WN; ++nt)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const int r = w_row[tile_row(nt) + 2 * t + j];
                ws[nt][j] = w_scales[(u64)max(r, 0) * groups + grp];
            }
        if (MODE == 2)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int r = a_row[wm * WROWS + mt * 16 + g + 8 * h];
                    as[mt][h] = a_scales[(u64)max(r, 0) * groups + grp];
                }
    };
    auto fold = [&]() {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < WN; ++nt)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const float s = MODE == 2 ? ws[nt][i & 1] * as[mt][i >> 1] : ws[nt][i & 1];
                    acc[mt][nt][i] = fmaf(s, part[mt][nt][i], acc[mt][nt][i]);
                    part[mt][nt][i] = 0.f;
                }
    };

    const int ktiles = (k + MMA_BK - 1) / MMA_BK;
    constexpr int PER_GROUP = MMA_GROUP / MMA_BK;
    // REG loaders: the B rows of stage slot s (MODE 0's layout).
    auto b_rows = [&](int s) { return smem + s * C::STAGE + BM * A_ROW; };
#pragma unroll
    for (int s = 0; s < C::STAGES - 1; ++s) {
        if (s < ktiles) load(s, s);
        if constexpr (WL::REG) {
            if (s < ktiles) {
                wl.fetch(s, k, w_row);
                wl.put(b_rows(s));
            }
        }
        cp_async_commit();
    }
    for (int kt = 0; kt < ktiles; ++kt) {
        cp_async_wait<C::STAGES - 2>();
        __syncthreads(); // slice kt is in; every warp is done with the slot refilled below
        const int next = kt + C::STAGES - 1;
        // REG: slice next - 1 (fetched one iteration ago) into its slot, which every warp left
        // at iteration kt - 2 and none reads before kt + 1's barrier; then slice next fetched.
        if constexpr (WL::REG) {
            if (kt > 0 && next - 1 < ktiles) wl.put(b_rows((next - 1) % C::STAGES));
            if (next < ktiles) wl.fetch(next, k, w_row);
        }
        if (next < ktiles) load(next, next % C::STAGES);
        cp_async_commit();
        if (MODE > 0 && kt % PER_GROUP == 0) load_scales(kt / PER_GROUP);
        compute(kt % C::STAGES);
        if (MODE > 0 && (kt % PER_GROUP == PER_GROUP - 1 || kt == ktiles - 1)) fold();
    }
    cp_async_wait<0>();
    // REG: each weight row's factor (a lane's columns 2t, 2t + 1 of each n8 tile).
    if constexpr (WL::REG) {
#pragma unroll
        for (int nt = 0; nt < WN; ++nt)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const float m = wl.row_scale(w_row[tile_row(nt) + 2 * t + j]);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) acc[mt][nt][j] *= m, acc[mt][nt][2 + j] *= m;
            }
    }

    // Epilogue: rows g and g + 8 of each m16 tile, columns 2t and 2t + 1 of each n8 tile.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int p = out_row[wm * WROWS + mt * 16 + g + 8 * h];
            if (p < 0) continue;
            if (GATE) {
                bf16* act = (bf16*)out + (u64)p * n;
#pragma unroll
                for (int nt = 0; nt < WN / 2; ++nt) {
                    const int j = n0 + (wn * (WN / 2) + nt) * 8 + 2 * t;
                    if (j >= n) continue;
#pragma unroll
                    for (int i = 0; i < 2; ++i) {
                        const float gv = acc[mt][nt][2 * h + i], uv = acc[mt][nt + WN / 2][2 * h + i];
                        act[j + i] = from_f32<bf16>(f(gv, uv, e, j + i, n));
                    }
                }
            } else {
                float* y = (float*)out + (u64)p * n;
#pragma unroll
                for (int nt = 0; nt < WN; ++nt) {
                    const int c = n0 + (wn * WN + nt) * 8 + 2 * t;
                    if (c >= n) continue;
                    y[c] = acc[mt][nt][2 * h];
                    y[c + 1] = acc[mt][nt][2 * h + 1];
                }
            }
        }
}

// Launch bounds: at most 128 registers a thread (3 blocks of 128 threads or 2 of 256 a
// multiprocessor). MOE_MMA_GATE_UP: a gate|up kernel NAME applying ACT (an expression of the
// extra parameters, which follow the ints: `, const bf16* bias, ...`, or nothing).
#define MOE_MMA_GATE_UP(NAME, MODE, TA, TW, ACT, ...)                                              \
    extern "C" __global__ void __launch_bounds__(MmaCfg<MODE>::WARPS * 32,                         \
                                                 MmaCfg<MODE>::WARPS == 4 ? 3 : 2)                 \
        NAME(bf16* act, const TA* x, const float* x_scales, const TW* w, const float* w_scales,    \
             const int* tiles, const int* offsets, const int* perm, int top_k, int inter,          \
             int hidden __VA_ARGS__) {                                                             \
        pdl_start();                                                                               \
        moe_mma_impl<MODE, true>(act, x, x_scales, w, w_scales, tiles, offsets, perm, 0, top_k,    \
                                 inter, hidden, ACT);                                              \
    }
#define MOE_MMA_KERNELS(SUFFIX, MODE, TA, TW)                                                      \
    MOE_MMA_GATE_UP(moe_gate_up_mma_##SUFFIX, MODE, TA, TW, MoeSiluAct{}, )                        \
    extern "C" __global__ void __launch_bounds__(MmaCfg<MODE>::WARPS * 32,                         \
                                                 MmaCfg<MODE>::WARPS == 4 ? 3 : 2)                 \
        moe_down_mma_##SUFFIX(float* ys, const TA* act, const float* act_scales, const TW* w,      \
                              const float* w_scales, const int* tiles, const int* offsets,         \
                              const int* perm, int rows, int hidden, int inter) {                  \
        pdl_start();                                                                               \
        moe_mma_impl<MODE, false>(ys, act, act_scales, w, w_scales, tiles, offsets, perm, rows, 1, \
                                  hidden, inter);                                                  \
    }

MOE_MMA_KERNELS(bf16, 0, bf16, bf16)
MOE_MMA_KERNELS(fp8, 1, bf16, unsigned char)
MOE_MMA_KERNELS(fp8act, 2, unsigned char, unsigned char)
// gpt-oss's experts (gpt_oss.rs), bf16 (FP4 stacks: moe_mma_fp4.cu's clamped builds):
// the gate|up bias [E, 2·inter] (bf16, gate first) and the clamped SwiGLU in the epilogue
// (MoeClampedAct: the CUDA-core moe_gate_up_clamped_*'s f32 operations); down is
// moe_down_mma_bf16, its bias added by moe_combine_bias_*.
MOE_MMA_GATE_UP(moe_gate_up_clamped_mma_bf16, 0, bf16, bf16,
                (MoeClampedAct<bf16>{bias, alpha, limit}), , const bf16* bias, float alpha,
                float limit)

// ---- small steps: FP8 experts with a few pairs each ---------------------------------------
//
// moe_gate_up_fp8_small[_any], moe_down_fp8_small[_any]: stages 3 and 4 for decode-sized steps
// with FP8 experts (2 to the launcher's SMALL_MMA_MAX_TOKENS), and moe_*_bf16_small_any the same
// for bf16 experts (fp8_mma_tiles' Bf16Rows; FP4: moe_mma_fp4.cu's _small_any), on prelude's
// fp8_mma_tiles with the expert's pairs as the B columns, instead of the 64-row tensor-core tiles (mostly empty at
// these steps) or the CUDA-core kernels (which widen and multiply every weight for every pair:
// at batch 8 on the H200, 30B-A3B with distinct tokens, ncu had moe_gate_up_fp8_vec and
// moe_down_combine_fp8_vec at 78 and 44 us a layer, 59% and 75% of issue slots, 2.1 and
// 1.9 TB/s).
//   _small (up to 8 tokens: at most 8 pairs an expert, one n8 tile): grid (ceil(I / 16),
//     min(E, pairs)) and (ceil(H / 16), min(E, pairs)), 8 warps splitting k and adding their
//     sums in order; gate_up: gate rows j0 .. j0 + 15 and up rows I + j0 .. as two tiles.
//   _any (more tokens): below.
// Block row r takes the r-th active expert (rows past the count return). gate_up writes
// silu(g) · u rounded to bf16 into act at the pair's row (moe_gate_up_*'s output); down ys[pair,
// c] in f32 (moe_down_*'s), added up by moe_combine.

// The expert of block row blockIdx.y (active[blockIdx.y]), or -1 past the active count.
__device__ __forceinline__ int small_block_expert(const int* active, int experts) {
    return (int)blockIdx.y < active[experts] ? active[blockIdx.y] : -1;
}

// NB: B tiles (8 pairs each).
template <int NB>
__device__ void moe_gate_up_small_impl(bf16* act, const bf16* x, const unsigned char* w,
                                       const float* scales, const int* offsets, const int* active,
                                       const int* perm, int experts, int top_k, int inter,
                                       int hidden) {
    pdl_start();
    const int e = small_block_expert(active, experts);
    if (e < 0) return;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int start = offsets[e], n = min(offsets[e + 1] - start, 8 * NB);
    const int j0 = blockIdx.x * 16, groups = (hidden + 127) >> 7;
    // Rows past I read row I - 1 of their half (their sums are not written).
    const u64 base = (u64)e * 2 * inter;
    const u64 ra = base + min(j0 + g, inter - 1), rb = base + min(j0 + g + 8, inter - 1);
    const unsigned char* const rows[2][2] = {{w + ra * hidden, w + rb * hidden},
                                             {w + (ra + inter) * hidden, w + (rb + inter) * hidden}};
    const float* const scs[2][2] = {{scales + ra * groups, scales + rb * groups},
                                    {scales + (ra + inter) * groups, scales + (rb + inter) * groups}};
    const bf16* xrows[NB];
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
        xrows[nb] = g + 8 * nb < n ? x + (u64)(perm[start + g + 8 * nb] / top_k) * hidden : nullptr;
    float acc[2][NB][4] = {};
    fp8_mma_tiles<2, NB, 2>(acc, rows, scs, xrows, hidden, false);
    if (!fp8_mma_reduce<2 * NB>(&acc[0][0][0])) return;
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int j = j0 + g + 8 * (i >> 1), col = 8 * nb + 2 * t + (i & 1);
            if (j < inter && col < n) {
                const float gs = acc[0][nb][i], us = acc[1][nb][i];
                act[(u64)perm[start + col] * inter + j] =
                    from_f32<bf16>(gs / (1.0f + expf(-gs)) * us);
            }
        }
}

template <int NB>
__device__ void moe_down_small_impl(float* ys, const bf16* act, const unsigned char* w,
                                    const float* scales, const int* offsets, const int* active,
                                    const int* perm, int experts, int inter, int hidden) {
    pdl_start();
    const int e = small_block_expert(active, experts);
    if (e < 0) return;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int start = offsets[e], n = min(offsets[e + 1] - start, 8 * NB);
    const int c0 = blockIdx.x * 16, groups = (inter + 127) >> 7;
    const u64 base = (u64)e * hidden;
    const u64 ra = base + min(c0 + g, hidden - 1), rb = base + min(c0 + g + 8, hidden - 1);
    const unsigned char* const rows[1][2] = {{w + ra * inter, w + rb * inter}};
    const float* const scs[1][2] = {{scales + ra * groups, scales + rb * groups}};
    const bf16* xrows[NB];
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
        xrows[nb] = g + 8 * nb < n ? act + (u64)perm[start + g + 8 * nb] * inter : nullptr;
    float acc[1][NB][4] = {};
    fp8_mma_tiles<1, NB, 2>(acc, rows, scs, xrows, inter, false);
    if (!fp8_mma_reduce<NB>(&acc[0][0][0])) return;
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int c = c0 + g + 8 * (i >> 1), col = 8 * nb + 2 * t + (i & 1);
            if (c < hidden && col < n) ys[(u64)perm[start + col] * hidden + c] = acc[0][nb][i];
        }
}

// SUFFIX: "" (up to 8 tokens, one B tile).
#define MOE_SMALL_KERNELS(SUFFIX, NB)                                                             \
    extern "C" __global__ void __launch_bounds__(FP8_MMA_WARPS * 32)                              \
        moe_gate_up_fp8_small##SUFFIX(bf16* act, const bf16* x, const unsigned char* w,            \
                                      const float* scales, const int* offsets, const int* active,  \
                                      const int* perm, int experts, int top_k, int inter,         \
                                      int hidden) {                                               \
        moe_gate_up_small_impl<NB>(act, x, w, scales, offsets, active, perm, experts, top_k,      \
                                   inter, hidden);                                                \
    }                                                                                             \
    extern "C" __global__ void __launch_bounds__(FP8_MMA_WARPS * 32)                              \
        moe_down_fp8_small##SUFFIX(float* ys, const bf16* act, const unsigned char* w,             \
                                   const float* scales, const int* offsets, const int* active,     \
                                   const int* perm, int experts, int inter, int hidden) {         \
        moe_down_small_impl<NB>(ys, act, w, scales, offsets, active, perm, experts, inter,        \
                                hidden);                                                          \
    }

MOE_SMALL_KERNELS(, 1)

// The _any builds, for steps past 8 tokens (decode batches: a few to a few tens of pairs an
// expert): every warp owns its tiles over the whole k (fp8_mma_tiles without SPLIT), so there is
// no reduction through shared memory, and a block covers 64 j (gate_up) or 128 output columns
// (down) of one expert.
//   gate_up: grid (ceil(I / 64), min(E, pairs)); warp w's tile holds gate rows j = 64 bx + 8 w +
//     g (as rows g) and the up rows of the same j (as rows g + 8), so a lane's four sums are gate
//     and up of one j for two pairs and the product is formed in place.
//   down: grid (ceil(H / 128), min(E, pairs)); warp w's tile is output columns 128 bx + 16 w ..
//     + 15.
// 16 pairs (two B tiles) a chunk, as many chunks as the expert has pairs (each chunk after the
// first reads the warp's weight rows again, from L2). gate_up copies the chunk's x rows once
// into shared memory (MOE_XS_COLS columns at a time, rows padded by 16 bytes so the warp's
// 16-byte loads of 8 rows at one column fall in distinct banks) and every warp reads them there;
// down reads its act rows from L1/L2 in each warp. On the H200 at batch 128 (30B-A3B, ncu, a
// layer) staging took bf16 gate_up from 249 to 212 us and left FP8's level (154 to 152), while
// bf16 down went from 129 to 142 (FP8 84 to 85): both stay DRAM-latency-bound at 2 blocks an SM
// (106-116 registers), L2 at 70-76% whichever way x comes
// (docs/performance-log/2026-12-04-session-4.md). On the H200 (fused_moe alone, 30B-A3B
// FP8, random routing) the version reading x from global against the 64-row tiles: T 32 201
// against 586 us, T 128 290 against 733, T 256 374 against 693; against k split over the warps
// with 16 j a block (an earlier _any) 201 / 290 / 374 against 315 / 432 / 537, and against the
// _small16 build it replaced (two tiles, split k) at T 16 148 against 205 us.
#define MOE_XS_COLS 2048
#define MOE_XS_PAD 8

// The block's dynamic shared memory: 16 x rows of up to MOE_XS_COLS + MOE_XS_PAD elements.
__device__ __forceinline__ bf16* moe_xs() { return (bf16*)dyn_smem(); }

// Columns k0 .. k0 + kc of the chunk's n <= 16 x rows (row r: src row perm[start + r] / div, of
// k elements) into xs (rows of kc + MOE_XS_PAD), a warp a row; the block waits for the copies.
// Every thread calls (a barrier first: the previous chunk's reads are done).
__device__ __forceinline__ void moe_stage_x(bf16* xs, const bf16* src, const int* perm, int start,
                                            int n, int div, int k, int k0, int kc) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads();
    for (int r = warp; r < n; r += (int)(blockDim.x >> 5)) {
        const bf16* row = src + (u64)(perm[start + r] / div) * k + k0;
        bf16* dst = xs + r * (kc + MOE_XS_PAD);
        for (int c = 8 * lane; c < kc; c += 8 * 32) cp_async<16>(dst + c, row + c, true);
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
}

// acc = the tile rows (rows: their starts, k elements of W each; scs their scale rows) against
// the chunk's n <= 8 NB x rows (row r: src row perm[start + r] / div): with STAGE, copied into
// shared memory MOE_XS_COLS columns at a time, else read from global by each warp; BATCH k
// slices of weight loads in flight a warp.
template <typename WF, int NB, int BATCH, bool STAGE>
__device__ __forceinline__ void moe_any_chunk(float (&acc)[1][NB][4],
                                              const unsigned char* const (&rows)[1][2],
                                              const typename WF::ScaleRow (&scs)[1][2],
                                              const bf16* src, const int* perm, int start, int n,
                                              int div, int k) {
    const int g = (threadIdx.x & 31) >> 2;
    if (!STAGE) {
        const bf16* xrows[NB];
#pragma unroll
        for (int nb = 0; nb < NB; ++nb)
            xrows[nb] = g + 8 * nb < n ? src + (u64)(perm[start + g + 8 * nb] / div) * k : nullptr;
        fp8_mma_tiles<1, NB, BATCH, false, WF>(acc, rows, scs, xrows, k, false);
        return;
    }
    bf16* const xs = moe_xs();
    for (int k0 = 0; k0 < k; k0 += MOE_XS_COLS) {
        const int kc = min(MOE_XS_COLS, k - k0);
        moe_stage_x(xs, src, perm, start, n, div, k, k0, kc);
        const bf16* xrows[NB];
#pragma unroll
        for (int nb = 0; nb < NB; ++nb)
            xrows[nb] = g + 8 * nb < n ? xs + (g + 8 * nb) * (kc + MOE_XS_PAD) : nullptr;
        const unsigned char* const rk[1][2] = {{WF::row_at(rows[0][0], k0), WF::row_at(rows[0][1], k0)}};
        const typename WF::ScaleRow sk[1][2] = {{WF::scale_at(scs[0][0], k0), WF::scale_at(scs[0][1], k0)}};
        fp8_mma_tiles<1, NB, BATCH, false, WF, true>(acc, rk, sk, xrows, kc, false);
    }
}

// An expert stack of W elements (FP8 bytes with a float scale per 128 columns, or bf16) as the
// _any impls read it: row r of k columns and its scale row (moe_mma_fp4.cu's Fp4Stack for FP4).
template <typename W> struct AnyStack {
    using F = typename RowsOf<W>::T;
    const W* w;
    const float* scales;
    __device__ __forceinline__ const unsigned char* row(u64 r, int k) const {
        return (const unsigned char*)(w + r * k);
    }
    __device__ __forceinline__ typename F::ScaleRow scale_row(u64 r, int k) const {
        return sizeof(W) == 2 ? nullptr : scales + r * ((k + 127) >> 7);
    }
};

// NB, BATCH, STAGE: moe_any_chunk's (8 NB pairs a chunk). A block's warps take 8 j each,
// blockDim.x / 32 of them (the launch picks). ST: the stack (AnyStack, Fp4Stack); F: what
// joins gate and up (prelude/moe_act.cuh).
template <int NB, int BATCH, bool STAGE, typename ST, typename F>
__device__ void moe_gate_up_any_impl(bf16* act, const bf16* x, const ST st, const int* offsets,
                                     const int* active, const int* perm, int experts, int top_k,
                                     int inter, int hidden, F f) {
    using WF = typename ST::F;
    pdl_start();
    const int e = small_block_expert(active, experts);
    if (e < 0) return;
    const int lane = threadIdx.x & 31, t = lane & 3, warp = threadIdx.x >> 5;
    const int first = offsets[e], count = offsets[e + 1] - first;
    const int j = (blockIdx.x * (blockDim.x >> 5) + warp) * 8 + (lane >> 2);
    // Rows past I read row I - 1 of their half (their sums are not written).
    const u64 rg = (u64)e * 2 * inter + min(j, inter - 1), ru = rg + inter;
    const unsigned char* const rows[1][2] = {{st.row(rg, hidden), st.row(ru, hidden)}};
    const typename WF::ScaleRow scs[1][2] = {{st.scale_row(rg, hidden), st.scale_row(ru, hidden)}};
    // f for this lane's j (its bias read once, before the chunks' stores to act).
    const auto fj = f.at(e, min(j, inter - 1), inter);
    for (int c0 = 0; c0 < count; c0 += 8 * NB) {
        const int start = first + c0, n = min(count - c0, 8 * NB);
        float acc[1][NB][4] = {};
        moe_any_chunk<WF, NB, BATCH, STAGE>(acc, rows, scs, x, perm, start, n, top_k, hidden);
#pragma unroll
        for (int nb = 0; nb < NB; ++nb)
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const int col = 8 * nb + 2 * t + i;
                if (j < inter && col < n) {
                    const float gs = acc[0][nb][i], us = acc[0][nb][2 + i];
                    act[(u64)perm[start + col] * inter + j] =
                        from_f32<bf16>(fj(gs, us));
                }
            }
    }
}

// A block's warps take 16 output columns each, blockDim.x / 32 of them.
template <int NB, int BATCH, typename ST>
__device__ void moe_down_any_impl(float* ys, const bf16* act, const ST st, const int* offsets,
                                  const int* active, const int* perm, int experts, int inter,
                                  int hidden) {
    using WF = typename ST::F;
    pdl_start();
    const int e = small_block_expert(active, experts);
    if (e < 0) return;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, warp = threadIdx.x >> 5;
    const int first = offsets[e], count = offsets[e + 1] - first;
    const int c0 = (blockIdx.x * (blockDim.x >> 5) + warp) * 16;
    const u64 base = (u64)e * hidden;
    const u64 ra = base + min(c0 + g, hidden - 1), rb = base + min(c0 + g + 8, hidden - 1);
    const unsigned char* const rows[1][2] = {{st.row(ra, inter), st.row(rb, inter)}};
    const typename WF::ScaleRow scs[1][2] = {{st.scale_row(ra, inter), st.scale_row(rb, inter)}};
    for (int p0 = 0; p0 < count; p0 += 8 * NB) {
        const int start = first + p0, n = min(count - p0, 8 * NB);
        float acc[1][NB][4] = {};
        moe_any_chunk<WF, NB, BATCH, false>(acc, rows, scs, act, perm, start, n, 1, inter);
#pragma unroll
        for (int nb = 0; nb < NB; ++nb)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int c = c0 + g + 8 * (i >> 1), col = 8 * nb + 2 * t + (i & 1);
                if (c < hidden && col < n) ys[(u64)perm[start + col] * hidden + c] = acc[0][nb][i];
            }
    }
}

// MOE_ANY_GATE_UP: a gate|up kernel KERNEL applying ACT (an expression of the extra parameters,
// which follow the ints: `, const bf16* bias, ...`, or nothing). MOE_ANY_KERNELS: NAME fp8 or
// bf16; W: the weights' element type (the bf16 builds ignore scales).
#define MOE_ANY_GATE_UP(KERNEL, W, ACT, ...)                                                      \
    extern "C" __global__ void __launch_bounds__(FP8_MMA_WARPS * 32)                              \
        KERNEL(bf16* act, const bf16* x, const W* w, const float* scales, const int* offsets,     \
               const int* active, const int* perm, int experts, int top_k, int inter,             \
               int hidden __VA_ARGS__) {                                                          \
        moe_gate_up_any_impl<2, 4, true>(act, x, AnyStack<W>{w, scales}, offsets, active, perm,  \
                                         experts, top_k, inter, hidden, ACT);                     \
    }
#define MOE_ANY_KERNELS(NAME, W)                                                                  \
    MOE_ANY_GATE_UP(moe_gate_up_##NAME##_small_any, W, MoeSiluAct{}, )                            \
    extern "C" __global__ void __launch_bounds__(FP8_MMA_WARPS * 32)                              \
        moe_down_##NAME##_small_any(float* ys, const bf16* act, const W* w, const float* scales,  \
                                    const int* offsets, const int* active, const int* perm,       \
                                    int experts, int inter, int hidden) {                         \
        moe_down_any_impl<2, 4>(ys, act, AnyStack<W>{w, scales}, offsets, active, perm, experts,  \
                                inter, hidden);                                                   \
    }

MOE_ANY_KERNELS(fp8, unsigned char)
MOE_ANY_KERNELS(bf16, bf16)
// gpt-oss's bf16 experts at decode batches (gpt_oss.rs): the gate|up bias and the clamped SwiGLU
// as moe_gate_up_clamped_mma_bf16's; down is moe_down_bf16_small_any. NVRTC 13.0 for sm_90 gives
// it 138 registers against the SiLU build's 128, so one block an SM instead of two; bounded to
// two (128 registers) it spills 16 bytes. Not yet measured on a GPU either way.
MOE_ANY_GATE_UP(moe_gate_up_clamped_bf16_small_any, bf16,
                (MoeClampedAct<bf16>{bias, alpha, limit}), , const bf16* bias, float alpha,
                float limit)

// ---- activations as e4m3 (the _fp8act builds) ----------------------------------------------

// q [rows, k] e4m3 and scales [rows, ceil(k / 128)] of x [rows, k]: a warp per row, the FP8 KV
// cache's quantizer (prelude's store_head_fp8) on each row.
template <typename T>
__device__ void moe_quant_fp8_impl(unsigned char* q, float* scales, const T* x, u64 rows, int k) {
    const u64 row = (u64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= rows) return;
    const int groups = (k + MMA_GROUP - 1) / MMA_GROUP;
    store_head_fp8(q + row * k, scales + row * groups, x + row * k, k);
}

extern "C" __global__ void moe_quant_fp8_f32(unsigned char* q, float* scales, const float* x,
                                             u64 rows, int k) {
    pdl_start();
    moe_quant_fp8_impl(q, scales, x, rows, k);
}

extern "C" __global__ void moe_quant_fp8_bf16(unsigned char* q, float* scales, const bf16* x,
                                              u64 rows, int k) {
    pdl_start();
    moe_quant_fp8_impl(q, scales, x, rows, k);
}
