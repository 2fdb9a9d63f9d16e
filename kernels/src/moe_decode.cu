// moe.cu's kernels for decode-sized steps (compiled with moe.cu as one module: Module::Moe's
// source is moe.cu then this file): the loads of a row all in flight, and the one-token
// router + plan. The design, the routing and the paths that pick these are in moe.cu's header.

// ---- decode-sized steps: a lane's loads of a row all in flight -----------------------------

// At a decode step an expert has one pair or a few, so a warp's time is the latency of its
// weight loads, not their number: moe_rows_dot issues one 16-byte load a row per loop trip and
// waits for it (on the H200, 30B-A3B at batch 1, moe_gate_up_fp8_vec moved 1.1 TB/s at base
// clocks). These helpers load a lane's chunks of a group, `G` chunks 32 apart in each of `NW`
// rows, into registers at once, then take their products in moe_rows_dot's order (chunk by
// chunk, ascending, the same fused multiply-adds): the same sums bit for bit.

// One 16-byte chunk of a weight row, as loaded: bf16 (8 weights) or e4m3 (16, with the scale of
// their 128-column block).
// XWORDS: the 16-byte words of bf16 x a chunk's columns span.
struct ChunkBf16 {
    static constexpr int XWORDS = 1;
    u32x4 q;
};
struct ChunkFp8 {
    static constexpr int XWORDS = 2;
    u32x4 q;
    float s;  // the scale of the chunk's 128-column block
};
template <typename Row> struct ChunkOf;
template <> struct ChunkOf<RowBf16> {
    using T = ChunkBf16;
    static constexpr int elems = 8;
};
template <> struct ChunkOf<RowFp8> {
    using T = ChunkFp8;
    static constexpr int elems = 16;
};

__device__ __forceinline__ ChunkBf16 load_chunk(const RowBf16& r, int c) {
    return ChunkBf16{load_stream((const u32x4*)r.w + c)};
}
__device__ __forceinline__ ChunkFp8 load_chunk(const RowFp8& r, int c) {
    return ChunkFp8{load_stream((const u32x4*)r.w + c), r.scales[c >> 3]};
}

// acc += a loaded chunk · the same columns of x, given as loaded: one 16-byte word of bf16 x
// for a bf16 chunk, two for an e4m3 one (four for an FP4 one: moe_fp4.cu).
__device__ __forceinline__ void dot_loaded(float& acc, const ChunkBf16& k, const u32x4* xa) {
    acc = dot8(acc, k.q, xa[0]);
}
__device__ __forceinline__ void dot_loaded(float& acc, const ChunkFp8& k, const u32x4* xa) {
    const u32x4 a = xa[0], b = xa[1];
    const float xv[16] = {lo(a.x), hi(a.x), lo(a.y), hi(a.y), lo(a.z), hi(a.z), lo(a.w), hi(a.w),
                          lo(b.x), hi(b.x), lo(b.y), hi(b.y), lo(b.z), hi(b.z), lo(b.w), hi(b.w)};
    const u32 ws[4] = {k.q.x, k.q.y, k.q.z, k.q.w};
    float w[16];
#pragma unroll
    for (int j = 0; j < 4; ++j) e4m3x4_values(ws[j], w + 4 * j);
    float part = 0.f;
#pragma unroll
    for (int i = 0; i < 16; ++i) part = fmaf(w[i], xv[i], part);
    acc = fmaf(k.s, part, acc);
}

// acc[r] += chunk c of row r · the same columns of x (bf16), for the NW rows.
template <int NW, typename Chunk>
__device__ __forceinline__ void dot_chunk(float* acc, const Chunk (&k)[NW], const bf16* x, int c) {
    constexpr int words = Chunk::XWORDS;
    const u32x4* xp = (const u32x4*)x + words * c;
    u32x4 xa[words];
#pragma unroll
    for (int i = 0; i < words; ++i) xa[i] = load_cached(xp + i);
#pragma unroll
    for (int r = 0; r < NW; ++r) dot_loaded(acc[r], k[r], xa);
}

// A lane's chunks c0, c0 + 32, ..., c0 + 32 (G − 1) of the NW rows (those below `chunks`).
template <int G, int NW, typename Row, typename Chunk>
__device__ __forceinline__ void load_group(Chunk (&g)[G][NW], const Row* rows, int c0, int chunks) {
#pragma unroll
    for (int u = 0; u < G; ++u)
#pragma unroll
        for (int r = 0; r < NW; ++r) g[u][r] = c0 + 32 * u < chunks ? load_chunk(rows[r], c0 + 32 * u) : Chunk{};
}

// acc[r] += row r · x over the whole rows, the lane's first group already in g (loaded by
// load_group at c0 = lane); g holds the last group after.
template <int G, int NW, typename Row, typename Chunk>
__device__ __forceinline__ void dot_rows_from(float* acc, Chunk (&g)[G][NW], const Row* rows,
                                              const bf16* x, int chunks) {
    const int lane = threadIdx.x & 31;
    for (int b = 0;;) {
#pragma unroll
        for (int u = 0; u < G; ++u)
            if (b + lane + 32 * u < chunks) dot_chunk<NW>(acc, g[u], x, b + lane + 32 * u);
        b += 32 * G;
        if (b >= chunks) break;
        load_group<G, NW>(g, rows, b + lane, chunks);
    }
}

// Chunks a lane loads at once: the 2048 columns of a gate|up row pair (the Qwen3 MoE models'
// hidden size: one group), 1024 of a down row.
template <typename Row, int COLUMNS> struct DecGroup {
    static constexpr int G = COLUMNS / (32 * ChunkOf<Row>::elems);
};

// Row `row` of a weight stored as [rows, k] (experts stacked): bf16, or fp8 with its scales
// expanded to one row of ceil(k / 128) per weight row (the loader's layout, see weights.rs).
__device__ __forceinline__ RowBf16 weight_row(const bf16* w, const float*, u64 row, int k) {
    return RowBf16{w + row * k};
}
__device__ __forceinline__ RowFp8 weight_row(const unsigned char* w, const float* scales, u64 row,
                                             int k) {
    return RowFp8{w + row * k, scales + row * (u64)((k + 127) >> 7)};
}
__device__ __forceinline__ RowF32 weight_row(const float* w, const float*, u64 row, int k) {
    return RowF32{w + row * k};
}

// The expert block row blockIdx.y serves (active[blockIdx.y]), or -1 past the active count.
__device__ __forceinline__ int block_expert(const int* active, int experts) {
    return (int)blockIdx.y < active[experts] ? active[blockIdx.y] : -1;
}

// MoeSiluAct, MoeClampedAct: prelude/moe_act.cuh (moe_mma.cu's tensor-core kernels share them).

// A: the activation type (x rows and the SiLU products): bf16, or float on the float32 path.
// F: the activation between the products (MoeSiluAct, MoeClampedAct, MoeRelu2Act); its FAN
// says how many weight rows output j reads: 2, gate row j and up row I + j of the expert's
// [2·I, H] (SwiGLU), or 1, up row j of its [I, H] (Nemotron-H's un-gated relu² experts, whose
// product is handed to f as u).
template <bool VEC, typename W, typename A, typename F = MoeSiluAct>
__device__ void moe_gate_up_impl(A* act, const A* x, const W* w, const float* scales,
                                 const int* offsets, const int* active, const int* perm,
                                 int experts, int top_k, int inter, int hidden, F f = F{}) {
    constexpr int FAN = F::FAN;
    static_assert(FAN == 1 || FAN == 2, "an output reads a gate and an up row, or an up row");
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int e = block_expert(active, experts), j = blockIdx.x * MOE_WARPS + warp;
    if (e < 0 || j >= inter) return;
    const int start = offsets[e], end = offsets[e + 1];
    const u64 base = (u64)e * FAN * inter;
    using Row = decltype(weight_row(w, scales, 0, 0));
    Row rows[FAN];
    rows[0] = weight_row(w, scales, base + j, hidden);
    if constexpr (FAN == 2) rows[1] = weight_row(w, scales, base + inter + j, hidden);
    for (int p0 = start; p0 < end; p0 += MOE_MT) {
        const int n = min(MOE_MT, end - p0);
        int pair[MOE_MT];
        u64 xoff[MOE_MT];
        float acc[FAN][MOE_MT];
#pragma unroll
        for (int m = 0; m < MOE_MT; ++m) {
            pair[m] = m < n ? perm[p0 + m] : 0;
            xoff[m] = (u64)(pair[m] / top_k) * hidden;
#pragma unroll
            for (int r = 0; r < FAN; ++r) acc[r][m] = 0.f;
        }
        moe_rows_dot<VEC, FAN>(acc, rows, x, xoff, n, hidden);
#pragma unroll
        for (int m = 0; m < MOE_MT; ++m) {
            const float g = FAN == 2 ? warp_sum(acc[0][m]) : 0.f;
            const float u = warp_sum(acc[FAN - 1][m]);
            if (lane == 0 && m < n)
                act[(u64)pair[m] * inter + j] = from_f32<A>(f(g, u, e, j, inter));
        }
    }
}

template <bool VEC, typename W, typename A>
__device__ void moe_down_impl(float* ys, const A* act, const W* w, const float* scales,
                              const int* offsets, const int* active, const int* perm, int experts,
                              int inter, int hidden) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int e = block_expert(active, experts), c = blockIdx.x * MOE_WARPS + warp;
    if (e < 0 || c >= hidden) return;
    const int start = offsets[e], end = offsets[e + 1];
    const auto row = weight_row(w, scales, (u64)e * hidden + c, inter);
    for (int p0 = start; p0 < end; p0 += MOE_MT) {
        const int n = min(MOE_MT, end - p0);
        int pair[MOE_MT];
        u64 xoff[MOE_MT];
        float acc[1][MOE_MT];
#pragma unroll
        for (int m = 0; m < MOE_MT; ++m) {
            pair[m] = perm[m < n ? p0 + m : p0];
            xoff[m] = (u64)pair[m] * inter;
            acc[0][m] = 0.f;
        }
        moe_rows_dot<VEC, 1>(acc, &row, act, xoff, n, inter);
#pragma unroll
        for (int m = 0; m < MOE_MT; ++m) {
            const float y = warp_sum(acc[0][m]);
            if (lane == 0 && m < n) ys[(u64)pair[m] * hidden + c] = y;
        }
    }
}

// 4 + 5 in one launch, for steps of at most MOE_FUSED_DOWN_TOKENS tokens: block b computes
// out[t, c] (t = b % T, c = b / T, so the T blocks of a column, which read the same experts' row c
// when their tokens share an expert, run side by side) with one warp per slot (blockDim = 32 · k).
// Warp s takes pair p = t · k + s: its expert's down row c against act row p, with moe_down's
// code (moe_rows_dot, one token), so the same lane partition and order of fused multiply-adds and
// the same warp_sum: the y moe_down writes to ys, bit for bit. Then thread 0 adds the k slots'
// weight · y in slot order from 0, moe_combine's sum term for term. An expert's row is read once
// per token that chose it (moe_down: once per 8 of them); at this few tokens the re-reads come
// from L2, and the launch and the ys round trip are saved.
#define MOE_FUSED_DOWN_TOKENS 8

template <bool VEC, typename W, typename A>
__device__ void moe_down_combine_impl(float* out, const A* act, const W* w, const float* scales,
                                      const int* ids, const float* weights, int tokens, int top_k,
                                      int inter, int hidden) {
    __shared__ float terms[MOE_MAX_TOP_K];  // weight · y of each slot
    const int slot = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const u64 t = blockIdx.x % (unsigned)tokens, c = blockIdx.x / (unsigned)tokens;
    const u64 p = t * top_k + slot;
    const auto row = weight_row(w, scales, (u64)ids[p] * hidden + c, inter);
    const float weight = weights[p];  // loaded beside the row, not after it
    float y;
    if constexpr (VEC) {
        // The row's loads all in flight (a down row of up to 1024 columns is one group).
        using Row = decltype(weight_row(w, scales, 0, 0));
        constexpr int G = DecGroup<Row, 1024>::G;
        typename ChunkOf<Row>::T g[G][1];
        const int chunks = inter / ChunkOf<Row>::elems;
        load_group<G, 1>(g, &row, lane, chunks);
        float acc[1] = {0.f};
        dot_rows_from<G, 1>(acc, g, &row, act + p * inter, chunks);
        y = warp_sum(acc[0]);
    } else {
        u64 xoff[MOE_MT];
        float acc[1][MOE_MT];
#pragma unroll
        for (int m = 0; m < MOE_MT; ++m) {
            xoff[m] = p * inter;
            acc[0][m] = 0.f;
        }
        moe_rows_dot<VEC, 1>(acc, &row, act, xoff, 1, inter);
        y = warp_sum(acc[0][0]);
    }
    if (lane == 0) terms[slot] = __fmul_rn(weight, y);
    __syncthreads();
    if (threadIdx.x == 0) {
        float o = 0.f;
        for (int s = 0; s < top_k; ++s) o = __fadd_rn(o, terms[s]);
        out[t * hidden + c] = o;
    }
}

// moe_down_combine for decode steps with 16-byte aligned rows, COLS output columns a block
// (block b: token b % T, columns (b / T) · COLS ..): warp s loads its pair's COLS down rows (contiguous in
// the expert's [H, I] weight) before waiting on gate|up. It may: the pair's expert (ids) and
// weight were written by the routing launch two kernels back, which has completed and flushed
// before this grid starts (gate|up's blocks let it start only after their own wait returned),
// so only act needs the wait; the loads overlap gate|up's tail. Each column's y, weight · y
// and slot-order sum as moe_down_combine's: the same output bit for bit. COLUMNS: the row
// length a lane's loads cover at once (DecGroup). bias: gpt-oss's down bias [E, H] (FP4
// builds, moe_fp4.cu), added to y before the weight as moe_combine_bias does; nullptr: none.
template <int COLS, int COLUMNS = 1024, typename W>
__device__ void moe_down_combine_dec_impl(float* out, const bf16* act, const W* w,
                                          const float* scales, const int* ids,
                                          const float* weights, int tokens, int top_k, int inter,
                                          int hidden, const bf16* bias = nullptr) {
    __shared__ float terms[MOE_MAX_TOP_K][COLS];
    const int slot = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const u64 t = blockIdx.x % (unsigned)tokens;
    const u64 c0 = (u64)(blockIdx.x / (unsigned)tokens) * COLS;
    const u64 p = t * top_k + slot;
    const u64 e = (u64)load_l2(ids + p);
    const float weight = load_l2(weights + p);
    using Row = decltype(weight_row(w, scales, 0, 0));
    constexpr int G = DecGroup<Row, COLUMNS>::G;
    const int chunks = inter / ChunkOf<Row>::elems;
    Row rows[COLS];
    typename ChunkOf<Row>::T g[COLS][G][1];
#pragma unroll
    for (int col = 0; col < COLS; ++col) {
        rows[col] = weight_row(w, scales, e * hidden + c0 + col, inter);
        load_group<G, 1>(g[col], &rows[col], lane, chunks);
    }
    pdl_start();
#pragma unroll
    for (int col = 0; col < COLS; ++col) {
        float acc[1] = {0.f};
        dot_rows_from<G, 1>(acc, g[col], &rows[col], act + p * inter, chunks);
        float y = warp_sum(acc[0]);
        if (bias != nullptr) y = __fadd_rn(y, to_f32(bias[e * hidden + c0 + col]));
        if (lane == 0) terms[slot][col] = __fmul_rn(weight, y);
    }
    __syncthreads();
    if (threadIdx.x < COLS) {
        float o = 0.f;
        for (int s = 0; s < top_k; ++s) o = __fadd_rn(o, terms[s][threadIdx.x]);
        out[t * hidden + c0 + threadIdx.x] = o;
    }
}

#define MOE_DOWN_COMBINE_DEC(SUFFIX, W, COLS)                                                     \
    extern "C" __global__ void moe_down_combine_dec##COLS##_##SUFFIX(                             \
        float* out, const bf16* act, const W* w, const float* scales, const int* ids,             \
        const float* weights, int tokens, int top_k, int inter, int hidden) {                     \
        moe_down_combine_dec_impl<COLS>(out, act, w, scales, ids, weights, tokens, top_k, inter,  \
                                        hidden);                                                  \
    }

// moe_gate_up for decode steps (the launcher takes it at one token; rows 16-byte aligned): a
// warp owns output j of expert e as in moe_gate_up, but loads its first group of both weight
// rows (all 2048 columns of a 2048-wide row, DecGroup) before it reads the expert's pairs, then
// takes the pairs one at a time against the rows held in registers (rows longer than a group
// stream again for each pair, from L2), holding 2 · G chunks instead of MOE_MT x rows' sums.
// The same products in the same order as moe_gate_up: the same act, bit for bit. H200, 30B-A3B
// (ncu, boost clocks): 14.9 µs a layer at batch 1 with FP8 experts, 1.7 TB/s; re-reading the
// rows for every pair made batch 8 slower than moe_gate_up (8.8 against 6.6 ms a step, bf16).
// COLUMNS: the row length a lane's loads cover at once (DecGroup: 2048 for bf16 and FP8 rows,
// moe_fp4.cu's MOE_FP4_DEC_COLUMNS for FP4 ones); f: the activation (moe_act.cuh, FAN 2).
template <int COLUMNS, typename W, typename F = MoeSiluAct>
__device__ void moe_gate_up_dec_impl(bf16* act, const bf16* x, const W* w, const float* scales,
                                     const int* offsets, const int* active, const int* perm,
                                     int experts, int top_k, int inter, int hidden, F f = F{}) {
    static_assert(F::FAN == 2, "the decode kernel reads a gate and an up row an output");
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int e = block_expert(active, experts), j = blockIdx.x * MOE_WARPS + warp;
    if (e < 0 || j >= inter) return;
    const u64 base = (u64)e * 2 * inter;
    const auto row_g = weight_row(w, scales, base + j, hidden);
    using Row = decltype(weight_row(w, scales, 0, 0));
    constexpr int G = DecGroup<Row, COLUMNS>::G;
    const Row rows[2] = {row_g, weight_row(w, scales, base + inter + j, hidden)};
    const int chunks = hidden / ChunkOf<Row>::elems;
    typename ChunkOf<Row>::T g[G][2];
    load_group<G, 2>(g, rows, lane, chunks);
    const auto fa = f.at(e, j, inter);
    const int start = offsets[e], end = offsets[e + 1];
    for (int p = start; p < end; ++p) {
        // A row of one group stays in g for every pair; a longer one streams again (from L2).
        if (p > start && chunks > 32 * G) load_group<G, 2>(g, rows, lane, chunks);
        const int pair = perm[p];
        float acc[2] = {0.f, 0.f};
        dot_rows_from<G, 2>(acc, g, rows, x + (u64)(pair / top_k) * hidden, chunks);
        const float gs = warp_sum(acc[0]), us = warp_sum(acc[1]);
        if (lane == 0) act[(u64)pair * inter + j] = from_f32<bf16>(fa(gs, us));
    }
}

// BLOCKS: blocks a multiprocessor at least (the register cap): 2 · G chunks are 64 registers
// of bf16 rows, 40 of FP8 ones.
#define MOE_GATE_UP_DEC(SUFFIX, W, BLOCKS)                                                        \
    extern "C" __global__ void __launch_bounds__(MOE_WARPS * 32, BLOCKS) moe_gate_up_dec_##SUFFIX( \
        bf16* act, const bf16* x, const W* w, const float* scales, const int* offsets,            \
        const int* active, const int* perm, int experts, int top_k, int inter, int hidden) {      \
        pdl_start();                                                                              \
        moe_gate_up_dec_impl<2048>(act, x, w, scales, offsets, active, perm, experts, top_k,      \
                                   inter, hidden);                                                \
    }

// moe_gate_up at 3 blocks a multiprocessor (at most 80 registers a thread; 64 spills): a one-token step is
// latency-bound, so resident warps count. On the H200 the FP8 kernel used 128 registers and had
// 23% of its warp slots active (ncu, 30B-A3B at batch 1).
#define MOE_GATE_UP_BLOCKS_PER_SM 3

// W: the weight type; A: the activation type (x and act).
#define MOE_EXPERT_KERNELS(SUFFIX, W, A, VEC)                                                     \
    extern "C" __global__ void __launch_bounds__(MOE_WARPS * 32, MOE_GATE_UP_BLOCKS_PER_SM)      \
        moe_gate_up_##SUFFIX(                                                                     \
        A* act, const A* x, const W* w, const float* scales, const int* offsets,                  \
        const int* active, const int* perm, int experts, int top_k, int inter, int hidden) {      \
        pdl_start();                                                                              \
        moe_gate_up_impl<VEC>(act, x, w, scales, offsets, active, perm, experts, top_k, inter,    \
                              hidden);                                                            \
    }                                                                                             \
    extern "C" __global__ void moe_down_##SUFFIX(float* ys, const A* act, const W* w,            \
                                                 const float* scales, const int* offsets,         \
                                                 const int* active, const int* perm, int experts, \
                                                 int inter, int hidden) {                         \
        pdl_start();                                                                              \
        moe_down_impl<VEC>(ys, act, w, scales, offsets, active, perm, experts, inter, hidden);    \
    }                                                                                             \
    extern "C" __global__ void moe_down_combine_##SUFFIX(                                         \
        float* out, const A* act, const W* w, const float* scales, const int* ids,                \
        const float* weights, int tokens, int top_k, int inter, int hidden) {                     \
        pdl_start();                                                                              \
        moe_down_combine_impl<VEC>(out, act, w, scales, ids, weights, tokens, top_k, inter,       \
                                   hidden);                                                       \
    }

// gpt-oss's experts (moe_clamped.rs): moe_gate_up with the gate|up bias and the clamped
// SwiGLU (MoeClampedAct); the bias is of the activation type A. Then moe_down_* and
// moe_combine_bias.
#define MOE_GATE_UP_CLAMPED(SUFFIX, W, A, VEC)                                                    \
    extern "C" __global__ void __launch_bounds__(MOE_WARPS * 32, MOE_GATE_UP_BLOCKS_PER_SM)      \
        moe_gate_up_clamped_##SUFFIX(                                                             \
        A* act, const A* x, const W* w, const float* scales, const int* offsets,                  \
        const int* active, const int* perm, int experts, int top_k, int inter, int hidden,        \
        const A* bias, float alpha, float limit) {                                                \
        pdl_start();                                                                              \
        moe_gate_up_impl<VEC>(act, x, w, scales, offsets, active, perm, experts, top_k, inter,    \
                              hidden, MoeClampedAct<A>{bias, alpha, limit});                      \
    }

// Nemotron-H's routed experts (nemotron_moe.rs): moe_gate_up with one weight row an output (up
// [E, I, H], not gated) and relu(u)² (MoeRelu2Act) into act; then moe_down_* / moe_down_combine_*
// and moe_combine, unchanged.
#define MOE_UP_RELU2(SUFFIX, W, A, VEC)                                                           \
    extern "C" __global__ void __launch_bounds__(MOE_WARPS * 32, MOE_GATE_UP_BLOCKS_PER_SM)      \
        moe_up_relu2_##SUFFIX(                                                                    \
        A* act, const A* x, const W* w, const float* scales, const int* offsets,                  \
        const int* active, const int* perm, int experts, int top_k, int inter, int hidden) {      \
        pdl_start();                                                                              \
        moe_gate_up_impl<VEC>(act, x, w, scales, offsets, active, perm, experts, top_k, inter,    \
                              hidden, MoeRelu2Act{});                                             \
    }

MOE_EXPERT_KERNELS(bf16_vec, bf16, bf16, true)
MOE_EXPERT_KERNELS(bf16, bf16, bf16, false)
MOE_EXPERT_KERNELS(fp8_vec, unsigned char, bf16, true)
MOE_EXPERT_KERNELS(fp8, unsigned char, bf16, false)
MOE_EXPERT_KERNELS(fp32, float, float, false)
MOE_GATE_UP_DEC(bf16_vec, bf16, 2)
MOE_DOWN_COMBINE_DEC(bf16_vec, bf16, 1)
MOE_DOWN_COMBINE_DEC(bf16_vec, bf16, 2)
MOE_DOWN_COMBINE_DEC(bf16_vec, bf16, 4)
MOE_DOWN_COMBINE_DEC(fp8_vec, unsigned char, 1)
MOE_DOWN_COMBINE_DEC(fp8_vec, unsigned char, 2)
MOE_DOWN_COMBINE_DEC(fp8_vec, unsigned char, 4)
MOE_GATE_UP_DEC(fp8_vec, unsigned char, 3)
MOE_GATE_UP_CLAMPED(bf16_vec, bf16, bf16, true)
MOE_GATE_UP_CLAMPED(bf16, bf16, bf16, false)
MOE_GATE_UP_CLAMPED(fp32, float, float, false)
MOE_UP_RELU2(bf16_vec, bf16, bf16, true)
MOE_UP_RELU2(bf16, bf16, bf16, false)
MOE_UP_RELU2(fp8_vec, unsigned char, bf16, true)
MOE_UP_RELU2(fp8, unsigned char, bf16, false)
MOE_UP_RELU2(fp32, float, float, false)

// The top_k choices of one token by every expert's rank at once (the whole block; experts <=
// blockDim.x): thread e counts the valid experts before it in the order of (logit key
// descending, index ascending), a total order, so the expert of rank j is the j-th choice of
// moe_route_token_regs' selection rounds; chosen[j] = that expert. `row`: the logits in shared
// memory. Ends with a barrier.
__device__ __forceinline__ void moe_rank_choices(int* chosen, const float* row, int experts,
                                                 int top_k) {
    const int e = threadIdx.x;
    if (e < experts) {
        const u32 key = total_order_key(row[e]);
        int rank = 0;
        for (int o = 0; o < experts; ++o) {
            const u32 ko = total_order_key(row[o]);
            rank += ko > key || (ko == key && o < e);
        }
        if (rank < top_k) chosen[rank] = e;
    }
    __syncthreads();
}

// The router's logits and moe_plan_one in one launch, for a step of one token with a bf16
// router [E, H] (H % 8 == 0): block b's warps compute logits b · MOE_WARPS + warp as gemv_m1
// does (the same chunks in the same order, so the same f32 logits bit for bit; the whole row of
// up to 2048 columns loaded before the kernel waits on x's writer), write them to `logits`, and
// the last block to finish (a ticket in global memory, which it sets back to 0 for the next
// launch) copies them to shared memory and routes them: with fewer experts than threads, the
// whole block finds the choices by rank and the offsets a thread each (one warp's eight
// selection rounds and offset sweeps were about a third of the launch's 9 µs on the H200), then
// warp 0 the rest of moe_plan_one_impl; otherwise moe_plan_one_impl's warp alone. The same
// entries either way. One launch and one dependency less per MoE layer at batch 1 than the
// router's matmul + moe_plan_one. bias (gpt-oss's router bias [E], bf16; nullptr for none) is
// added to each logit as gemv_bias_m1 adds it.
extern "C" __global__ void __launch_bounds__(MOE_WARPS * 32)
    moe_router_plan_one(float* logits, const bf16* x, const bf16* router, int experts,
                        int hidden, u32* ticket, int* ids, float* weights, int* offsets,
                        int* perm, int* active, int top_k, int norm_topk_prob, const bf16* bias) {
    __shared__ float row[32 * MOE_ROUTE_REGS];
    __shared__ int chosen[32];
    __shared__ bool last;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int e = blockIdx.x * MOE_WARPS + warp;
    constexpr int G = DecGroup<RowBf16, 2048>::G;
    const RowBf16 w{router + (u64)min(e, experts - 1) * hidden};
    const int chunks = hidden >> 3;
    ChunkBf16 g[G][1];
    load_group<G, 1>(g, &w, lane, chunks);  // the router is never written: load before waiting
    pdl_start();
    if (e < experts) {
        float acc[1] = {0.f};
        dot_rows_from<G, 1>(acc, g, &w, x, chunks);
        const float v = warp_sum(acc[0]);
        if (lane == 0) logits[e] = bias != nullptr ? v + to_f32(bias[e]) : v;
    }
    __threadfence();  // this block's logits are visible device-wide before its ticket
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    if (experts >= (int)blockDim.x || top_k > 32) {
        // More experts than threads: moe_plan_one's warp alone.
        if (warp != 0) return;
        for (int i = lane; i < experts; i += 32) row[i] = load_l2(logits + i);
        __syncwarp();
        moe_plan_one_impl(ids, weights, offsets, perm, active, (const float*)row, experts, top_k,
                          MoeSoftmax{norm_topk_prob});
        if (lane == 0) *ticket = 0u;
        return;
    }
    // The whole block routes: the choices by rank (moe_rank_choices), the offsets a thread
    // each, then warp 0 the rest of moe_plan_one (the same entries, bit for bit).
    for (int i = threadIdx.x; i < experts; i += blockDim.x) row[i] = load_l2(logits + i);
    __syncthreads();
    moe_rank_choices(chosen, row, experts, top_k);
    if ((int)threadIdx.x <= experts) {
        int below = 0;
        for (int j = 0; j < top_k; ++j) below += chosen[j] < (int)threadIdx.x;
        offsets[threadIdx.x] = below;
    }
    if (warp != 0) return;
    moe_route_token_regs(ids, weights, (const float*)row, experts, top_k,
                         MoeSoftmax{norm_topk_prob}, chosen);
    moe_plan_one_active(perm, active, ids, experts, top_k);
    if (lane == 0) *ticket = 0u;
}
