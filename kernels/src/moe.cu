// Mixture-of-experts (Qwen3-MoE's sparse MLP), none of whose launches waits on the host, so a
// decode step with experts is captured into its CUDA graph like any other. Which launches run
// depends on the step's T tokens and k experts a token (the launcher, moe.rs, picks):
//
//   - T · k <= 1024 (MOE_PLAN_MAX_PAIRS) and T <= 8 (MOE_FUSED_DOWN_TOKENS), every decode step
//     of up to 8 sequences: three launches, moe_plan_* (moe_plan_one_*, one warp, at T = 1),
//     moe_gate_up_dec_* (T = 1, rows 16-byte aligned; else moe_gate_up_*), moe_down_combine_*.
//   - T · k <= 1024, T > 8: four, moe_plan_*, moe_gate_up_*, moe_down_*, moe_combine.
//   - T · k > 1024: six, moe_route_*, moe_group, moe_active, moe_gate_up_*, moe_down_*,
//     moe_combine.
//   - Steps whose pairs average 4 an expert (bf16 experts) or 2 (FP8), any of the routings
//     above: moe_gate_up_* and moe_down_* are replaced by moe_mma.cu's tensor-core grouped
//     GEMMs (moe_tiles, moe_gate_up_mma_*, moe_down_mma_*), which write the same act and ys
//     rows for moe_combine.
//
// The paths compute the same values: moe_plan writes what the three routing launches write,
// entry for entry, and moe_down_combine adds the same products in the same order as moe_down +
// moe_combine, so the output is the same bit for bit (checked in the host emulation and by
// cuda_check on the GPU).
//
//   1. moe_route_*: one warp per token. Softmax over the E router logits in f32, then the top-k
//      by (logit descending, expert index ascending): the order of the logits' bits is total
//      (the CPU reference sorts with f32::total_cmp), so both sides pick the same experts,
//      ties included, whatever rounding their exp has. The k choices are written sorted by
//      expert index, each with its routing weight (renormalised to sum to one when asked), so
//      that stage 5 adds a token's experts in the CPU reference's order.
//   2. moe_group: one block per expert counts the (token, slot) pairs routed to it and the
//      pairs routed to lower experts (its offset), then writes its pairs' indices in order into
//      its range of the permutation (a block-wide ballot scan: stable, no atomics). offsets has
//      E + 1 entries. moe_active (one block) lists the experts that have pairs.
//      moe_plan_*: 1 and 2 in one block of 1024 threads, for steps of at most 1024 pairs (see
//      its comment).
//   3. moe_gate_up_*: grid (I / 8, min(E, pairs)), block row r taking the r-th expert that has
//      pairs (rows past their count return at once); a warp owns output j of expert e: it
//      streams the gate and up weight rows j and I + j once (16-byte loads, no L1 allocation)
//      and applies them to up to MOE_MT routed tokens at a time (their x rows through L1), then
//      silu(g) * u, rounded to bf16, into act [pairs, I] at the pair's own row (token · k +
//      slot). Only the chosen experts get blocks, so a decode step reads only their weights.
//   4. moe_down_*: grid (H / 8, min(E, pairs)), the same way; a warp owns output column c of
//      expert e and streams its down row once against the expert's act rows; the f32 result
//      goes to ys [pairs, H] at the pair's row.
//   5. moe_combine: out[t, c] = Σ_slot weight · ys, slots in ascending expert order, starting
//      from 0: the CPU reference's sum, term for term. No float atomics anywhere, so the
//      output does not depend on scheduling and greedy decoding is reproducible.
//      moe_down_combine_*: 4 and 5 in one launch for steps of at most 8 tokens, a block per
//      output element, a warp per slot (see its comment).
//
// Weights: bf16 (`_bf16`) or e4m3 bytes with one f32 scale per 128 columns of each row (`_fp8`:
// Qwen's fine-grained FP8 128 x 128 block scales, expanded to every row at load; value = fp8 ·
// scale), dequantized in registers. The rows are
// 16-byte aligned when the row length is a multiple of 8 (bf16) or 16 (fp8); other lengths
// take the scalar loop (`VEC` false). These read bf16 x rows and write the SiLU products as
// bf16 (the down projection's operand).
//
// The float32 path (`_fp32`: moe_gate_up_fp32, moe_down_fp32, moe_down_combine_fp32): f32
// weights (FP8 checkpoints dequantized to f32 at load), f32 x rows and f32 SiLU products, the
// same code on the scalar loop (coalesced 4-byte loads across the warp): nothing is rounded
// below f32, so the output differs from the CPU reference only by the order of f32 sums.
//
// Versions tried: six launches at every size (not timed on the GPU); this one (see
// docs/performance.md). For long prompts these CUDA-core kernels read each expert's weight row
// once per 8 of its tokens: a 2048-token 30B-A3B chunk took 15.4 ms (bf16) and 25.7 ms (FP8) a
// layer, against 1.2 and 1.8 ms on moe_mma.cu's tensor cores.

#define MOE_WARPS 8
#define MOE_MT 8
#define MOE_MAX_TOP_K 16

// f32 bits mapped so that unsigned order is f32::total_cmp's order.
__device__ __forceinline__ u32 total_order_key(float v) {
    const u32 u = __float_as_uint(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// ---- 1. routing ----------------------------------------------------------------------------

// The warp's best (key, index): highest key, then lowest index; every lane gets it.
__device__ __forceinline__ void warp_best(u32& key, int& idx) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const u32 k2 = shfl_xor_u32(key, o);
        const int i2 = (int)shfl_xor_u32((u32)idx, o);
        if (k2 > key || (k2 == key && i2 < idx)) {
            key = k2;
            idx = i2;
        }
    }
}

// One token's routing, by a whole warp (every lane calls; lane 0 writes the token's k ids and
// weights at ids[0..k), weights[0..k)).
template <typename T>
__device__ void moe_route_token_any(int* ids, float* weights, const T* row, int experts, int top_k,
                                int norm_topk_prob) {
    const int lane = threadIdx.x & 31;
    float mx = NEG_INF;
    for (int e = lane; e < experts; e += 32) mx = fmaxf(mx, to_f32(row[e]));
    mx = warp_max(mx);
    float sum = 0.f;
    for (int e = lane; e < experts; e += 32) sum += expf(to_f32(row[e]) - mx);
    sum = warp_sum(sum);
    // Selection: round j takes the best (key, index) strictly after the previous choice.
    int chosen[MOE_MAX_TOP_K];
    u32 last_key = 0xffffffffu;
    int last_idx = -1;
    for (int j = 0; j < top_k; ++j) {
        u32 best_key = 0;
        int best_idx = 0x7fffffff;
        for (int e = lane; e < experts; e += 32) {
            const u32 key = total_order_key(to_f32(row[e]));
            const bool after = key < last_key || (key == last_key && e > last_idx);
            const bool better = key > best_key || (key == best_key && e < best_idx);
            if (after && better) {
                best_key = key;
                best_idx = e;
            }
        }
        warp_best(best_key, best_idx);
        chosen[j] = best_idx;
        last_key = best_key;
        last_idx = best_idx;
    }
    if (lane != 0) return;
    // Probabilities of the chosen, their total in choice order (the CPU's), then the k pairs
    // written by ascending expert index.
    float prob[MOE_MAX_TOP_K];
    float total = 0.f;
    for (int j = 0; j < top_k; ++j) {
        prob[j] = expf(to_f32(row[chosen[j]]) - mx) / sum;
        total += prob[j];
    }
    int prev = -1;
    for (int j = 0; j < top_k; ++j) {
        int pick = -1;
        for (int i = 0; i < top_k; ++i)
            if (chosen[i] > prev && (pick < 0 || chosen[i] < chosen[pick])) pick = i;
        prev = chosen[pick];
        ids[j] = chosen[pick];
        weights[j] = norm_topk_prob ? prob[pick] / total : prob[pick];
    }
}

// Routing of one token by one warp with its logits in registers (experts <= 32 · MOE_ROUTE_REGS,
// so up to 256): the same max, sum, choices and weights as moe_route_token_any, term for term
// (each lane visits its experts in the same ascending order), without re-reading the row for
// each of the top_k selection rounds; lane j keeps choice j, and the k lanes compute their
// probabilities, the choice-order total (every lane adds the k probabilities in choice order,
// as the CPU does) and their rank by expert index in parallel instead of lane 0 sorting alone.
// With `chosen` (the k choices in order, found by moe_rank_choices), the selection rounds are
// skipped and everything else is the same.
#define MOE_ROUTE_REGS 8

template <typename T>
__device__ void moe_route_token_regs(int* ids, float* weights, const T* row, int experts,
                                     int top_k, int norm_topk_prob,
                                     const int* chosen = nullptr) {
    const int lane = threadIdx.x & 31;
    float v[MOE_ROUTE_REGS];
    u32 key[MOE_ROUTE_REGS];
    float mx = NEG_INF;
#pragma unroll
    for (int i = 0; i < MOE_ROUTE_REGS; ++i) {
        const int e = lane + 32 * i;
        v[i] = e < experts ? to_f32(row[e]) : NEG_INF;
        key[i] = total_order_key(v[i]);
        if (e < experts) mx = fmaxf(mx, v[i]);
    }
    mx = warp_max(mx);
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < MOE_ROUTE_REGS; ++i)
        if (lane + 32 * i < experts) sum += expf(v[i] - mx);
    sum = warp_sum(sum);
    int mine = 0;  // lane j < top_k: choice j
    u32 last_key = 0xffffffffu;
    int last_idx = -1;
    if (chosen != nullptr) mine = lane < top_k ? chosen[lane] : 0;
    for (int j = 0; chosen == nullptr && j < top_k; ++j) {
        u32 best_key = 0;
        int best_idx = 0x7fffffff;
#pragma unroll
        for (int i = 0; i < MOE_ROUTE_REGS; ++i) {
            const int e = lane + 32 * i;
            const bool after = key[i] < last_key || (key[i] == last_key && e > last_idx);
            const bool better = key[i] > best_key || (key[i] == best_key && e < best_idx);
            if (e < experts && after && better) {
                best_key = key[i];
                best_idx = e;
            }
        }
        warp_best(best_key, best_idx);
        if (lane == j) mine = best_idx;
        last_key = best_key;
        last_idx = best_idx;
    }
    const float prob = lane < top_k ? expf(to_f32(row[mine]) - mx) / sum : 0.f;
    float total = 0.f;
    int rank = 0;
    for (int j = 0; j < top_k; ++j) {
        total += __shfl_sync(0xffffffffu, prob, j);
        rank += __shfl_sync(0xffffffffu, mine, j) < mine;
    }
    if (lane < top_k) {
        ids[rank] = mine;
        weights[rank] = norm_topk_prob ? prob / total : prob;
    }
}

template <typename T>
__device__ void moe_route_token(int* ids, float* weights, const T* row, int experts, int top_k,
                                int norm_topk_prob) {
    if (experts <= 32 * MOE_ROUTE_REGS)
        moe_route_token_regs(ids, weights, row, experts, top_k, norm_topk_prob);
    else
        moe_route_token_any(ids, weights, row, experts, top_k, norm_topk_prob);
}

template <typename T>
__device__ void moe_route_impl(int* ids, float* weights, const T* logits, int tokens, int experts,
                               int top_k, int norm_topk_prob) {
    const int t = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (t >= tokens) return;
    moe_route_token(ids + (u64)t * top_k, weights + (u64)t * top_k, logits + (u64)t * experts,
                    experts, top_k, norm_topk_prob);
}

extern "C" __global__ void moe_route_f32(int* ids, float* weights, const float* logits, int tokens,
                                         int experts, int top_k, int norm_topk_prob) {
    pdl_start();
    moe_route_impl(ids, weights, logits, tokens, experts, top_k, norm_topk_prob);
}

extern "C" __global__ void moe_route_bf16(int* ids, float* weights, const bf16* logits, int tokens,
                                          int experts, int top_k, int norm_topk_prob) {
    pdl_start();
    moe_route_impl(ids, weights, logits, tokens, experts, top_k, norm_topk_prob);
}

// ---- 2. grouping ---------------------------------------------------------------------------

// Sum of an int over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ int block_sum_int(int v) {
    __shared__ int scratch[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += (int)shfl_xor_u32((u32)v, o);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < warps ? scratch[lane] : 0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += (int)shfl_xor_u32((u32)v, o);
    return v;
}

// Stable compaction across the block: the threads whose `keep` is true write `value` to
// dst[done + their rank among this call's keepers]; returns done plus how many kept. Every
// thread of the block calls it (blockDim.x a multiple of 32).
__device__ int block_compact(bool keep, int value, int* dst, int done) {
    __shared__ int warp_counts[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const u32 mask = __ballot_sync(0xffffffffu, keep);
    __syncthreads();
    if (lane == 0) warp_counts[warp] = __popc(mask);
    __syncthreads();
    int before = 0, all = 0;
    for (int w = 0; w < warps; ++w) {
        before += w < warp ? warp_counts[w] : 0;
        all += warp_counts[w];
    }
    if (keep) dst[done + before + __popc(mask & ((1u << lane) - 1u))] = value;
    return done + all;
}

extern "C" __global__ void moe_group(int* offsets, int* perm, const int* ids, int pairs,
                                     int experts) {
    pdl_start();
    const int e = blockIdx.x;
    int lt = 0, eq = 0;
    for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
        const int id = ids[p];
        lt += id < e;
        eq += id == e;
    }
    const int start = block_sum_int(lt);
    const int count = block_sum_int(eq);
    if (threadIdx.x == 0) {
        offsets[e] = start;
        if (e == experts - 1) offsets[experts] = start + count;
    }
    if (count == 0) return;
    int done = 0;
    for (int base = 0; base < pairs; base += blockDim.x) {
        const int p = base + threadIdx.x;
        done = block_compact(p < pairs && ids[p] == e, p, perm + start, done);
    }
}

// The experts that have pairs, in order: active[0..count), count in active[experts]. A ballot
// scan over the experts like moe_group's; every thread of the block calls it.
__device__ void moe_active_block(int* active, const int* offsets, int experts) {
    int done = 0;
    for (int base = 0; base < experts; base += blockDim.x) {
        const int e = base + threadIdx.x;
        done = block_compact(e < experts && offsets[e + 1] > offsets[e], e, active, done);
    }
    if (threadIdx.x == 0) active[experts] = done;
}

// One block. The expert kernels' grids have min(E, pairs) rows, block row r serving active[r],
// so a decode step launches blocks only for the experts its tokens chose (8 of 128 at batch 1)
// instead of exiting from the other 120's.
extern "C" __global__ void moe_active(int* active, const int* offsets, int experts) {
    pdl_start();
    moe_active_block(active, offsets, experts);
}

// ---- 1 + 2 in one block, for small steps --------------------------------------------------

// Routing, grouping and the active list of a step of at most MOE_PLAN_MAX_PAIRS pairs, in one
// block of MOE_PLAN_THREADS: the same ids, weights, offsets, perm and active as moe_route_* +
// moe_group + moe_active, entry for entry. Each warp routes tokens warp, warp + 32, ... with
// moe_route_token (the same code, so the same choices and weights); the ids are copied to
// shared memory; then warp w takes experts w, w + 32, ...: it counts the pairs routed below the
// expert (its offset) and to it by ballots over the pairs in order, and writes its pairs' indices
// in pair order (stable, as moe_group's scan is); last, the block lists the active experts from
// the offsets as moe_active does. Grouping costs each warp E / 32 · pairs / 32 ballot steps,
// which is why larger steps take the three-launch path, a block per expert.
#define MOE_PLAN_THREADS 1024
#define MOE_PLAN_MAX_PAIRS 1024

template <typename T>
__device__ void moe_plan_impl(int* ids, float* weights, int* offsets, int* perm, int* active,
                              const T* logits, int tokens, int experts, int top_k,
                              int norm_topk_prob) {
    __shared__ int sid[MOE_PLAN_MAX_PAIRS];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const int pairs = tokens * top_k;
    for (int t = warp; t < tokens; t += warps)
        moe_route_token(ids + (u64)t * top_k, weights + (u64)t * top_k,
                        logits + (u64)t * experts, experts, top_k, norm_topk_prob);
    __syncthreads(); // the block's global writes are visible to the block past the barrier
    for (int p = threadIdx.x; p < pairs; p += blockDim.x) sid[p] = ids[p];
    __syncthreads();
    for (int e = warp; e < experts; e += warps) {
        int lt = 0, eq = 0;
        for (int base = 0; base < pairs; base += 32) {
            const int p = base + lane;
            const int id = p < pairs ? sid[p] : experts; // past the end: neither below nor e
            lt += __popc(__ballot_sync(0xffffffffu, id < e));
            eq += __popc(__ballot_sync(0xffffffffu, id == e));
        }
        if (lane == 0) {
            offsets[e] = lt;
            if (e == experts - 1) offsets[experts] = lt + eq;
        }
        // done and eq are the same in every lane: the loop is warp-uniform.
        int done = 0;
        for (int base = 0; done < eq; base += 32) {
            const int p = base + lane;
            const bool keep = p < pairs && sid[p] == e;
            const u32 mask = __ballot_sync(0xffffffffu, keep);
            if (keep) perm[lt + done + __popc(mask & ((1u << lane) - 1u))] = p;
            done += __popc(mask);
        }
    }
    __syncthreads();
    moe_active_block(active, offsets, experts);
}

// moe_plan for a step of one token (every decode step at batch 1), by one warp: the token's k
// experts are distinct and moe_route_token writes them sorted by expert, so its pairs are
// already grouped: perm is the identity, the active list is ids, and offsets[e] counts the ids
// below e. The same ids, weights, offsets, perm and active (entries 0..k and E) as moe_plan,
// without its block-wide barriers.
// After one warp has routed one token (ids sorted by expert): its pairs in order (perm) and
// the active experts with their count; returns this lane's expert (lanes past top_k: 0).
__device__ __forceinline__ int moe_plan_one_active(int* perm, int* active, const int* ids,
                                                   int experts, int top_k) {
    const int lane = threadIdx.x & 31;
    __syncwarp();  // the lanes' ids are visible to the warp past it
    const int mine = lane < top_k ? ids[lane] : 0;
    if (lane < top_k) {
        perm[lane] = lane;
        active[lane] = mine;
    }
    if (lane == 0) active[experts] = top_k;
    return mine;
}

template <typename T>
__device__ void moe_plan_one_impl(int* ids, float* weights, int* offsets, int* perm, int* active,
                                  const T* logits, int experts, int top_k, int norm_topk_prob) {
    const int lane = threadIdx.x & 31;
    moe_route_token(ids, weights, logits, experts, top_k, norm_topk_prob);
    const int mine = moe_plan_one_active(perm, active, ids, experts, top_k);
    for (int e0 = 0; e0 <= experts; e0 += 32) {  // warp-uniform trips: the shuffles need all
        const int e = e0 + lane;
        int below = 0;
        for (int j = 0; j < top_k; ++j) below += __shfl_sync(0xffffffffu, mine, j) < e;
        if (e <= experts) offsets[e] = below;
    }
}

extern "C" __global__ void moe_plan_one_f32(int* ids, float* weights, int* offsets, int* perm,
                                            int* active, const float* logits, int experts,
                                            int top_k, int norm_topk_prob) {
    pdl_start();
    moe_plan_one_impl(ids, weights, offsets, perm, active, logits, experts, top_k, norm_topk_prob);
}

extern "C" __global__ void moe_plan_one_bf16(int* ids, float* weights, int* offsets, int* perm,
                                             int* active, const bf16* logits, int experts,
                                             int top_k, int norm_topk_prob) {
    pdl_start();
    moe_plan_one_impl(ids, weights, offsets, perm, active, logits, experts, top_k, norm_topk_prob);
}

extern "C" __global__ void __launch_bounds__(MOE_PLAN_THREADS)
    moe_plan_f32(int* ids, float* weights, int* offsets, int* perm, int* active,
                 const float* logits, int tokens, int experts, int top_k, int norm_topk_prob) {
    pdl_start();
    moe_plan_impl(ids, weights, offsets, perm, active, logits, tokens, experts, top_k,
                  norm_topk_prob);
}

extern "C" __global__ void __launch_bounds__(MOE_PLAN_THREADS)
    moe_plan_bf16(int* ids, float* weights, int* offsets, int* perm, int* active,
                  const bf16* logits, int tokens, int experts, int top_k, int norm_topk_prob) {
    pdl_start();
    moe_plan_impl(ids, weights, offsets, perm, active, logits, tokens, experts, top_k,
                  norm_topk_prob);
}

// ---- weight rows: bf16, or e4m3 bytes with block scales ------------------------------------

// A row of the weight: where it starts, and (fp8) the scales of its 128-wide column blocks.
struct RowBf16 {
    const bf16* w;
};
struct RowFp8 {
    const unsigned char* w;
    const float* scales; // the row's scales: one per 128 columns
};
struct RowF32 {
    const float* w;
};

// 8 elements of a bf16 row (chunk c = elements 8c..8c+7) as floats.
__device__ __forceinline__ void row_chunk8(const RowBf16& r, int c, float* v) {
    const u32x4 q = load_stream((const u32x4*)r.w + c);
    v[0] = lo(q.x); v[1] = hi(q.x); v[2] = lo(q.y); v[3] = hi(q.y);
    v[4] = lo(q.z); v[5] = hi(q.z); v[6] = lo(q.w); v[7] = hi(q.w);
}
__device__ __forceinline__ float row_at(const RowBf16& r, int k) { return to_f32(r.w[k]); }
__device__ __forceinline__ float row_at(const RowF32& r, int k) { return r.w[k]; }
__device__ __forceinline__ float row_at(const RowFp8& r, int k) {
    return e4m3_scaled(r.w[k], fp8_scale120(r.scales[k >> 7]));
}

// ---- 3. gate_up + SiLU, 4. down ------------------------------------------------------------

// x rows (bf16, or f32 on the float32 path) of the routed tokens against one or two weight rows.
// acc[m] += row · x[rows[m]]. VEC (bf16 only): K % 8 == 0 (bf16 rows and the x rows 16-byte
// aligned).
template <bool VEC, int NW, typename Row, typename A>
__device__ __forceinline__ void moe_dot(float (*acc)[MOE_MT], const Row* rows, const A* x,
                                        const u64* xoff, int n, int k) {
    const int lane = threadIdx.x & 31;
    if constexpr (VEC) {
        const int chunks = k >> 3;
        for (int c = lane; c < chunks; c += 32) {
            float w[NW][8];
#pragma unroll
            for (int r = 0; r < NW; ++r) row_chunk8(rows[r], c, w[r]);
#pragma unroll
            for (int m = 0; m < MOE_MT; ++m) {
                if (m < n) {
                    const u32x4 q = load_cached((const u32x4*)(x + xoff[m]) + c);
                    const float xv[8] = {lo(q.x), hi(q.x), lo(q.y), hi(q.y),
                                         lo(q.z), hi(q.z), lo(q.w), hi(q.w)};
#pragma unroll
                    for (int r = 0; r < NW; ++r)
#pragma unroll
                        for (int i = 0; i < 8; ++i) acc[r][m] = fmaf(w[r][i], xv[i], acc[r][m]);
                }
            }
        }
    } else {
        for (int kk = lane; kk < k; kk += 32) {
            float w[NW];
#pragma unroll
            for (int r = 0; r < NW; ++r) w[r] = row_at(rows[r], kk);
#pragma unroll
            for (int m = 0; m < MOE_MT; ++m)
                if (m < n) {
                    const float xv = to_f32(x[xoff[m] + kk]);
#pragma unroll
                    for (int r = 0; r < NW; ++r) acc[r][m] = fmaf(w[r], xv, acc[r][m]);
                }
        }
    }
}

// FP8 rows, 16 elements (one 16-byte load) at a time; K % 16 == 0. The 16 weights of a chunk
// share one scale (16 · 8 = 128 columns a scale), so the chunk's products are summed on the
// bytes' exact values (prelude's e4m3x4_values: hardware conversions on sm_89+, 1.5
// instructions a weight) and the sum is scaled once, fmaf(scale, sum, acc). On the H200 (ncu,
// 30B-A3B at batch 1) moe_gate_up_fp8_vec took 44 µs at base clocks against bf16's 26 µs with
// a scale per weight, 43 µs with the sum scaled once on bytes widened by placing their bits
// (five instructions a weight); the bytes also stay packed until used (see the loop), for more
// resident warps. The decode kernels below (dot_chunk) compute the same sums.
template <int NW>
__device__ __forceinline__ void moe_dot_fp8_vec(float (*acc)[MOE_MT], const RowFp8* rows,
                                                const bf16* x, const u64* xoff, int n, int k) {
    const int lane = threadIdx.x & 31;
    const int chunks = k >> 4;
    for (int c = lane; c < chunks; c += 32) {
        // The bytes stay packed (4 registers a row, not 16 floats) and are widened where they
        // are used: fewer registers, more warps resident to hide the loads' latency.
        u32 words[NW][4];
        float s[NW];
#pragma unroll
        for (int r = 0; r < NW; ++r) {
            const u32x4 q = load_stream((const u32x4*)rows[r].w + c);
            s[r] = rows[r].scales[c >> 3];
            words[r][0] = q.x;
            words[r][1] = q.y;
            words[r][2] = q.z;
            words[r][3] = q.w;
        }
#pragma unroll
        for (int m = 0; m < MOE_MT; ++m) {
            if (m < n) {
                const u32x4* xp = (const u32x4*)(x + xoff[m]) + 2 * c;
                const u32x4 a = load_cached(xp), b = load_cached(xp + 1);
                const float xv[16] = {lo(a.x), hi(a.x), lo(a.y), hi(a.y), lo(a.z), hi(a.z),
                                      lo(a.w), hi(a.w), lo(b.x), hi(b.x), lo(b.y), hi(b.y),
                                      lo(b.z), hi(b.z), lo(b.w), hi(b.w)};
#pragma unroll
                for (int r = 0; r < NW; ++r) {
                    float w[16];
#pragma unroll
                    for (int j = 0; j < 4; ++j) e4m3x4_values(words[r][j], w + 4 * j);
                    float part = 0.f;
#pragma unroll
                    for (int i = 0; i < 16; ++i) part = fmaf(w[i], xv[i], part);
                    acc[r][m] = fmaf(s[r], part, acc[r][m]);
                }
            }
        }
    }
}

template <bool VEC, int NW>
__device__ __forceinline__ void moe_rows_dot(float (*acc)[MOE_MT], const RowBf16* rows,
                                             const bf16* x, const u64* xoff, int n, int k) {
    moe_dot<VEC, NW>(acc, rows, x, xoff, n, k);
}
template <bool VEC, int NW>
__device__ __forceinline__ void moe_rows_dot(float (*acc)[MOE_MT], const RowFp8* rows,
                                             const bf16* x, const u64* xoff, int n, int k) {
    if constexpr (VEC) moe_dot_fp8_vec<NW>(acc, rows, x, xoff, n, k);
    else moe_dot<false, NW>(acc, rows, x, xoff, n, k);
}
template <bool VEC, int NW>
__device__ __forceinline__ void moe_rows_dot(float (*acc)[MOE_MT], const RowF32* rows,
                                             const float* x, const u64* xoff, int n, int k) {
    static_assert(!VEC, "f32 rows take the scalar loop");
    moe_dot<false, NW>(acc, rows, x, xoff, n, k);
}

// ---- decode-sized steps: a lane's loads of a row all in flight -----------------------------

// At a decode step an expert has one pair or a few, so a warp's time is the latency of its
// weight loads, not their number: moe_rows_dot issues one 16-byte load a row per loop trip and
// waits for it (on the H200, 30B-A3B at batch 1, moe_gate_up_fp8_vec moved 1.1 TB/s at base
// clocks). These helpers load a lane's chunks of a group, `G` chunks 32 apart in each of `NW`
// rows, into registers at once, then take their products in moe_rows_dot's order (chunk by
// chunk, ascending, the same fused multiply-adds): the same sums bit for bit.

// One 16-byte chunk of a weight row, as loaded: bf16 (8 weights) or e4m3 (16, with the scale of
// their 128-column block).
struct ChunkBf16 {
    u32x4 q;
};
struct ChunkFp8 {
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
// for a bf16 chunk, two for an e4m3 one.
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
    constexpr int words = sizeof(Chunk) > sizeof(u32x4) ? 2 : 1; // x words a chunk covers
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

// A: the activation type (x rows and the SiLU products): bf16, or float on the float32 path.
template <bool VEC, typename W, typename A>
__device__ void moe_gate_up_impl(A* act, const A* x, const W* w, const float* scales,
                                 const int* offsets, const int* active, const int* perm,
                                 int experts, int top_k, int inter, int hidden) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int e = block_expert(active, experts), j = blockIdx.x * MOE_WARPS + warp;
    if (e < 0 || j >= inter) return;
    const int start = offsets[e], end = offsets[e + 1];
    const u64 base = (u64)e * 2 * inter;
    const auto row_g = weight_row(w, scales, base + j, hidden);
    const decltype(row_g) rows[2] = {row_g, weight_row(w, scales, base + inter + j, hidden)};
    for (int p0 = start; p0 < end; p0 += MOE_MT) {
        const int n = min(MOE_MT, end - p0);
        int pair[MOE_MT];
        u64 xoff[MOE_MT];
        float acc[2][MOE_MT];
#pragma unroll
        for (int m = 0; m < MOE_MT; ++m) {
            pair[m] = m < n ? perm[p0 + m] : 0;
            xoff[m] = (u64)(pair[m] / top_k) * hidden;
            acc[0][m] = acc[1][m] = 0.f;
        }
        moe_rows_dot<VEC, 2>(acc, rows, x, xoff, n, hidden);
#pragma unroll
        for (int m = 0; m < MOE_MT; ++m) {
            const float g = warp_sum(acc[0][m]), u = warp_sum(acc[1][m]);
            if (lane == 0 && m < n)
                act[(u64)pair[m] * inter + j] = from_f32<A>(g / (1.0f + expf(-g)) * u);
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
// and slot-order sum as moe_down_combine's: the same output bit for bit.
template <int COLS, typename W>
__device__ void moe_down_combine_dec_impl(float* out, const bf16* act, const W* w,
                                          const float* scales, const int* ids,
                                          const float* weights, int tokens, int top_k, int inter,
                                          int hidden) {
    __shared__ float terms[MOE_MAX_TOP_K][COLS];
    const int slot = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const u64 t = blockIdx.x % (unsigned)tokens;
    const u64 c0 = (u64)(blockIdx.x / (unsigned)tokens) * COLS;
    const u64 p = t * top_k + slot;
    const u64 e = (u64)load_l2(ids + p);
    const float weight = load_l2(weights + p);
    using Row = decltype(weight_row(w, scales, 0, 0));
    constexpr int G = DecGroup<Row, 1024>::G;
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
        const float y = warp_sum(acc[0]);
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
template <typename W>
__device__ void moe_gate_up_dec_impl(bf16* act, const bf16* x, const W* w, const float* scales,
                                     const int* offsets, const int* active, const int* perm,
                                     int experts, int top_k, int inter, int hidden) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int e = block_expert(active, experts), j = blockIdx.x * MOE_WARPS + warp;
    if (e < 0 || j >= inter) return;
    const u64 base = (u64)e * 2 * inter;
    const auto row_g = weight_row(w, scales, base + j, hidden);
    using Row = decltype(weight_row(w, scales, 0, 0));
    constexpr int G = DecGroup<Row, 2048>::G;
    const Row rows[2] = {row_g, weight_row(w, scales, base + inter + j, hidden)};
    const int chunks = hidden / ChunkOf<Row>::elems;
    typename ChunkOf<Row>::T g[G][2];
    load_group<G, 2>(g, rows, lane, chunks);
    const int start = offsets[e], end = offsets[e + 1];
    for (int p = start; p < end; ++p) {
        // A row of one group stays in g for every pair; a longer one streams again (from L2).
        if (p > start && chunks > 32 * G) load_group<G, 2>(g, rows, lane, chunks);
        const int pair = perm[p];
        float acc[2] = {0.f, 0.f};
        dot_rows_from<G, 2>(acc, g, rows, x + (u64)(pair / top_k) * hidden, chunks);
        const float gs = warp_sum(acc[0]), us = warp_sum(acc[1]);
        if (lane == 0) act[(u64)pair * inter + j] = from_f32<bf16>(gs / (1.0f + expf(-gs)) * us);
    }
}

// BLOCKS: blocks a multiprocessor at least (the register cap): 2 · G chunks are 64 registers
// of bf16 rows, 40 of FP8 ones.
#define MOE_GATE_UP_DEC(SUFFIX, W, BLOCKS)                                                        \
    extern "C" __global__ void __launch_bounds__(MOE_WARPS * 32, BLOCKS) moe_gate_up_dec_##SUFFIX( \
        bf16* act, const bf16* x, const W* w, const float* scales, const int* offsets,            \
        const int* active, const int* perm, int experts, int top_k, int inter, int hidden) {      \
        pdl_start();                                                                              \
        moe_gate_up_dec_impl(act, x, w, scales, offsets, active, perm, experts, top_k, inter,     \
                             hidden);                                                             \
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
// router's matmul + moe_plan_one.
extern "C" __global__ void __launch_bounds__(MOE_WARPS * 32)
    moe_router_plan_one(float* logits, const bf16* x, const bf16* router, int experts,
                        int hidden, u32* ticket, int* ids, float* weights, int* offsets,
                        int* perm, int* active, int top_k, int norm_topk_prob) {
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
        if (lane == 0) logits[e] = v;
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
                          norm_topk_prob);
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
    moe_route_token_regs(ids, weights, (const float*)row, experts, top_k, norm_topk_prob, chosen);
    moe_plan_one_active(perm, active, ids, experts, top_k);
    if (lane == 0) *ticket = 0u;
}

// ---- one token, one launch: routing, gate|up and down across the whole GPU ----------------

// The whole MoE block of a one-token step (router, routing, gate|up + SiLU, down and the
// weighted sum) in one launch of one block a multiprocessor, with two grid-wide barriers
// (grid_sync) where the three launches of moe_router_plan_one, moe_gate_up_dec_* and
// moe_down_combine_* have kernel boundaries. What it gains over them: no launch gaps, and the
// down rows the token's experts need for this block's output columns are copied into shared
// memory (cp.async) while gate|up streams, so down starts from shared memory after the second
// barrier instead of a cold read. The same products in the same order as those three kernels:
// the same logits, act and out, bit for bit.
//
//   0. Before waiting on x's writer: warp w of block b loads router row w · gridDim.x + b (the
//      rows spread over the blocks) as moe_router_plan_one does, then takes its product with x
//      into logits (global, f32), and so on for rows a grid of warps further. Barrier.
//   1. Every block routes the token itself (warp 0, moe_route_token on the logits copied from
//      L2 into shared memory): the ids in expert order and their weights, in shared memory.
//   2. Block b owns output columns [b · cols, b · cols + cols) of down: it starts the copies of
//      the k experts' down rows for them (and their scales) into shared memory, then its warps
//      take gate|up items (slot s, column j) from its share of the k · I items, two in flight a
//      warp, with moe_gate_up_dec's loads and sums, writing act[s, j] (bf16, global). Waits
//      for its copies (bf16 rows: one item in flight a warp). Barrier.
//   3. The act rows (k · I bf16, from L2) into shared memory; warp w takes (column, slot)
//      items: the down row · act row as moe_down_combine's lanes and order have it, then the
//      column's weight · y terms added in slot order (moe_down_combine's thread 0 sum).
//
// Shared memory (dynamic, sized by the launcher): down rows [cols · k][I] weights, act [k][I]
// bf16, the down rows' scales [cols · k][ceil(I / 128)] (FP8), logits [E] f32, ids and weights
// [MOE_MAX_TOP_K], terms [cols · k] f32. Needs H and I multiples of 16 (FP8) or 8 (bf16).
#define MOE_ONE_WARPS 16

// moe_one's phase 0: warp w of block b takes router rows w · gridDim.x + b, w · gridDim.x + b
// + a grid of warps, ... into logits (global, f32), as moe_router_plan_one computes them (the
// first row loaded, then `wait`: the wait on x's writer, pdl_start, and what may follow it;
// the router is never written). Every thread calls this.
template <class Wait>
__device__ __forceinline__ void moe_one_router(float* logits, const bf16* x, const bf16* router,
                                               int experts, int hidden, Wait wait) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const int nb = gridDim.x, b = blockIdx.x;
    constexpr int G = DecGroup<RowBf16, 2048>::G;
    const int chunks = hidden >> 3;
    int e = warp * nb + b;
    RowBf16 r{router + (u64)min(e, experts - 1) * hidden};
    ChunkBf16 g[G][1];
    if (e < experts) load_group<G, 1>(g, &r, lane, chunks);
    wait();
    for (; e < experts; e += warps * nb) {  // more rows than warps: the next rows after
        if (e >= warp * nb + b + warps * nb) {
            r = RowBf16{router + (u64)e * hidden};
            load_group<G, 1>(g, &r, lane, chunks);
        }
        float acc[1] = {0.f};
        dot_rows_from<G, 1>(acc, g, &r, x, chunks);
        const float v = warp_sum(acc[0]);
        if (lane == 0) logits[e] = v;
    }
}

// moe_one's phase 1, after the first barrier: warp 0 routes the token from the logits (copied
// from L2 into logit_s) into ids_s / wts_s; the block then sees them.
__device__ __forceinline__ void moe_one_route(int* ids_s, float* wts_s, float* logit_s,
                                              const float* logits, int experts, int top_k,
                                              int norm_topk_prob) {
    if (threadIdx.x < 32) {
        for (int i = threadIdx.x; i < experts; i += 32) logit_s[i] = load_l2(logits + i);
        __syncwarp();
        moe_route_token(ids_s, wts_s, (const float*)logit_s, experts, top_k, norm_topk_prob);
    }
    __syncthreads();
}

__device__ __forceinline__ ChunkBf16 shared_chunk(const bf16* row, const float*, int c) {
    return ChunkBf16{((const u32x4*)row)[c]};
}
__device__ __forceinline__ ChunkFp8 shared_chunk(const unsigned char* row, const float* scales,
                                                 int c) {
    return ChunkFp8{((const u32x4*)row)[c], scales[c >> 3]};
}

template <typename W>
__device__ void moe_one_impl(float* out, float* logits, bf16* act, const bf16* x,
                             const bf16* router, const W* w13, const float* s13, const W* w2,
                             const float* s2, u32* sync, int experts, int hidden,
                             int inter, int top_k, int norm_topk_prob, int cols) {
    using Row = decltype(weight_row(w13, s13, 0, 0));
    using Chunk = typename ChunkOf<Row>::T;
    constexpr bool FP8 = sizeof(W) == 1;
    DYNAMIC_SMEM(unsigned char, smem);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const int nb = gridDim.x, b = blockIdx.x, rows_b = cols * top_k;
    const int nsc = FP8 ? (inter + 127) >> 7 : 0;
    const u64 row_bytes = (u64)inter * sizeof(W);
    W* const down_s = (W*)smem;
    bf16* const act_s = (bf16*)(smem + rows_b * row_bytes); // 16-byte aligned: I % 8 == 0
    float* const dsc_s = (float*)(act_s + top_k * inter);
    float* const logit_s = dsc_s + rows_b * nsc;
    int* const ids_s = (int*)(logit_s + experts);
    float* const wts_s = (float*)(ids_s + MOE_MAX_TOP_K);
    float* const terms_s = wts_s + MOE_MAX_TOP_K;

    // 0. The router's logits. 1. Routing, in every block.
    moe_one_router(logits, x, router, experts, hidden, [] { pdl_start(); });
    grid_sync(sync);
    moe_one_route(ids_s, wts_s, logit_s, logits, experts, top_k, norm_topk_prob);

    // 2. This block's down rows into shared memory, then its gate|up items.
    const int c0 = b * cols, ncols = max(0, min(cols, hidden - c0));
    {
        const int words = (int)(row_bytes >> 4), n = ncols * top_k;
        for (int i = threadIdx.x; i < n * words; i += blockDim.x) {
            const int r = i / words, word = i - r * words; // r = column · k + slot
            const u64 src = (u64)ids_s[r % top_k] * hidden + c0 + r / top_k;
            cp_async<16>((unsigned char*)down_s + r * row_bytes + 16 * word,
                         (const unsigned char*)w2 + src * row_bytes + 16 * word, true);
        }
        if constexpr (FP8)
            for (int i = threadIdx.x; i < n * nsc; i += blockDim.x) {
                const int r = i / nsc;
                const u64 src = (u64)ids_s[r % top_k] * hidden + c0 + r / top_k;
                cp_async<4>(dsc_s + i, s2 + src * nsc + (i - r * nsc), true);
            }
        cp_async_commit();
    }
    {
        constexpr int G = DecGroup<Row, 2048>::G;
        const int items = top_k * inter;
        const int end = (int)((u64)(b + 1) * items / nb);
        const int chunks = hidden / ChunkOf<Row>::elems;
        auto rows_of = [&](int it, Row* rows) {
            const int s = it / inter, j = it - s * inter;
            const u64 base = (u64)ids_s[s] * 2 * inter;
            rows[0] = weight_row(w13, s13, base + j, hidden);
            rows[1] = weight_row(w13, s13, base + inter + j, hidden);
        };
        auto finish = [&](int it, Chunk (&g)[G][2], const Row* rows) {
            float acc[2] = {0.f, 0.f};
            dot_rows_from<G, 2>(acc, g, rows, x, chunks);
            const float gs = warp_sum(acc[0]), us = warp_sum(acc[1]);
            if (lane == 0) act[it] = from_f32<bf16>(gs / (1.0f + expf(-gs)) * us);
        };
        Row ra[2], rb[2];
        Chunk ga[G][2];
        int it = (int)((u64)b * items / nb) + warp;
        if constexpr (!FP8) {
            // bf16 rows: one item at a time (two would need 128 registers of rows).
            for (; it < end; it += warps) {
                rows_of(it, ra);
                load_group<G, 2>(ga, ra, lane, chunks);
                finish(it, ga, ra);
            }
        }
        Chunk gb[G][2];
        if (FP8 && it < end) {
            rows_of(it, ra);
            load_group<G, 2>(ga, ra, lane, chunks);
        }
        // FP8: two items in flight a warp, the next one's loads out before this one's sums.
        while (FP8 && it < end) {
            const int next = it + warps;
            if (next < end) {
                rows_of(next, rb);
                load_group<G, 2>(gb, rb, lane, chunks);
            }
            finish(it, ga, ra);
            if (next >= end) break;
            it = next + warps;
            if (it < end) {
                rows_of(it, ra);
                load_group<G, 2>(ga, ra, lane, chunks);
            }
            finish(next, gb, rb);
        }
    }
    cp_async_wait<0>();
    grid_sync(sync);

    // 3. Down for this block's columns and the weighted sum.
    {
        const int words = top_k * inter / 8; // 16-byte words of act
        for (int i = threadIdx.x; i < words; i += blockDim.x)
            cp_async<16>((unsigned char*)act_s + 16 * i, (const unsigned char*)act + 16 * i, true);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
        const int chunks = inter / ChunkOf<Row>::elems;
        constexpr int words_a = ChunkOf<Row>::elems / 8; // act words a chunk covers
        for (int r = warp; r < ncols * top_k; r += warps) {
            const int slot = r % top_k;
            const W* row = (const W*)((const unsigned char*)down_s + r * row_bytes);
            const float* sc = dsc_s + r * nsc;
            const u32x4* xa = (const u32x4*)(act_s + slot * inter);
            float acc = 0.f;
            for (int c = lane; c < chunks; c += 32) {
                const Chunk k = shared_chunk(row, sc, c);
                dot_loaded(acc, k, xa + words_a * c);
            }
            const float y = warp_sum(acc);
            if (lane == 0) terms_s[r] = __fmul_rn(wts_s[slot], y);
        }
        __syncthreads();
        for (int ci = threadIdx.x; ci < ncols; ci += blockDim.x) {
            float o = 0.f;
            for (int s = 0; s < top_k; ++s) o = __fadd_rn(o, terms_s[ci * top_k + s]);
            out[c0 + ci] = o;
        }
    }
}

#define MOE_ONE(SUFFIX, W)                                                                         \
    extern "C" __global__ void __launch_bounds__(MOE_ONE_WARPS * 32, 1) moe_one_##SUFFIX(          \
        float* out, float* logits, bf16* act, const bf16* x, const bf16* router, const W* w13,     \
        const float* s13, const W* w2, const float* s2, u32* sync, int experts,                    \
        int hidden, int inter, int top_k, int norm_topk_prob, int cols) {                          \
        moe_one_impl(out, logits, act, x, router, w13, s13, w2, s2, sync, experts, hidden, inter,  \
                     top_k, norm_topk_prob, cols);                                                 \
    }
MOE_ONE(fp8, unsigned char)
MOE_ONE(bf16, bf16)

// moe_one_fp8_mma: moe_one_fp8's phases and barriers with every expert product on tensor
// cores (prelude's one-token f16 mma: "FP8 weights times one row on tensor cores"). One block
// a multiprocessor has 16 warps where the three launches keep 24 to 64 resident, and moe_one's
// CUDA-core products (3.7 instructions an FP8 weight) left it compute-bound: 7 µs a layer
// slower than the three launches on the H200, 14 µs with 8 warps. Here a weight costs about
// one instruction. x is staged (f16 · 2^-e) right after the wait, before the router's products;
// each slot's act row after the second barrier, by one warp. The router stays on CUDA cores
// (bf16 rows, moe_one's code: the same logits). Not moe_one's act and out bits: the same
// exact products summed in f32 in another order (checked against the CPU and the three
// launches within the FP8 tolerances).
//
//   2. gate|up in tiles of 4 outputs j of one slot (8 B columns: gate and up rows of each j,
//      interleaved as in fp8_one.cu's moe_gate_up_one), block b taking tiles [b · T / nb,
//      (b + 1) · T / nb) of the T = k · I / 4, warps / 4 at a time, 4 warps a tile splitting H;
//      the block adds its warps' sums through shared memory and writes act[s, j] = silu(g) · u.
//   3. Down: a warp a (slot, 8 of the block's columns) tile, its 8 down rows from shared memory
//      against the slot's staged act row, then moe_one's weighted sum in slot order.
//
// Shared memory: down rows [k][cols] (slot-major, a row every I + 64 bytes, so the 8 rows of a
// tile fall on alternate halves of the banks), their scales [k][cols][I / 128] (padded to
// 16 bytes), act staged
// [k][I] (4 bytes an element), x staged [H] (likewise), logits [E], ids, weights, act's
// scales up [MOE_MAX_TOP_K] each, terms [cols][k], the warps' tile sums [MOE_ONE_WARPS][8] and
// a block max's 32 floats. Needs H and I multiples of 128 and blockDim a multiple of 128.
__device__ void moe_one_fp8_mma_impl(float* out, float* logits, bf16* act, const bf16* x,
                                     const bf16* router, const unsigned char* w13,
                                     const float* s13, const unsigned char* w2, const float* s2,
                                     u32* sync, int experts, int hidden, int inter, int top_k,
                                     int norm_topk_prob, int cols) {
    DYNAMIC_SMEM(unsigned char, smem);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int nb = gridDim.x, b = blockIdx.x;
    const int c0 = b * cols, ncols = max(0, min(cols, hidden - c0));
    const int nsc = inter >> 7, hsc = hidden >> 7, stride = inter + 64;
    const int rows_b = cols * top_k;
    unsigned char* const down_s = smem;
    float* const dsc_s = (float*)(down_s + (u64)rows_b * stride);
    u32* const act_s = (u32*)(dsc_s + ((rows_b * nsc + 3) & ~3));  // 16-byte aligned
    u32* const x_s = act_s + top_k * inter;
    float* const logit_s = (float*)(x_s + hidden);
    int* const ids_s = (int*)(logit_s + experts);
    float* const wts_s = (float*)(ids_s + MOE_MAX_TOP_K);
    float* const up_s = wts_s + MOE_MAX_TOP_K;
    float* const terms_s = up_s + MOE_MAX_TOP_K;
    // The warps' tile sums and the block max's scratch (not static __shared__: the host
    // emulation runs this kernel's blocks at once).
    float(*const red)[8] = (float(*)[8])(terms_s + rows_b);
    float* const scratch = (float*)(red + MOE_ONE_WARPS);

    // 0-1. x staged after the wait, the router's logits, the barrier, the routing.
    F16Scale xs{1.f, 1.f};
    moe_one_router(logits, x, router, experts, hidden, [&] {
        pdl_start();
        xs = stage_x_block(x_s, x, hidden, scratch);
    });
    grid_sync(sync);
    moe_one_route(ids_s, wts_s, logit_s, logits, experts, top_k, norm_topk_prob);

    // 2. This block's down rows and their scales into shared memory (slot-major), then its
    // gate|up tiles.
    {
        const int words = inter >> 4, n = ncols * top_k;
        for (int i = threadIdx.x; i < n * words; i += blockDim.x) {
            const int r = i / words, word = i - r * words;  // r = slot · ncols + column
            const u64 src = (u64)ids_s[r / ncols] * hidden + c0 + r % ncols;
            cp_async<16>(down_s + (u64)r * stride + 16 * word, w2 + src * inter + 16 * word, true);
        }
        for (int i = threadIdx.x; i < n * nsc; i += blockDim.x) {
            const int r = i / nsc;
            const u64 src = (u64)ids_s[r / ncols] * hidden + c0 + r % ncols;
            cp_async<4>(dsc_s + i, s2 + src * nsc + (i - r * nsc), true);
        }
        cp_async_commit();
    }
    {
        const int per_round = warps >> 2, q = warp >> 2, kw = warp & 3, tiles_s = inter >> 2;
        const int total = top_k * tiles_s;
        const int t0 = (int)((u64)b * total / nb), t1 = (int)((u64)(b + 1) * total / nb);
        int begin, end;
        one_range(hidden >> 6, kw, 4, begin, end);
        for (int base = t0; base < t1; base += per_round) {
            const int tau = min(base + q, t1 - 1);  // past the range: a valid tile, unused
            const int s = tau / tiles_s, j0 = (tau - s * tiles_s) * 4;
            const u64 e13 = (u64)ids_s[s] * 2 * inter;
            const u64 row = e13 + (g & 1 ? inter : 0) + j0 + (g >> 1);
            float acc[2] = {0.f, 0.f};
            one_rows(acc, w13 + row * hidden, s13 + (e13 + j0 + t) * hsc,
                     s13 + (e13 + inter + j0 + t) * hsc, begin, end, x_s, [] {});
            if (lane < 4) {
                red[warp][2 * lane] = acc[0];
                red[warp][2 * lane + 1] = acc[1];
            }
            __syncthreads();
            if ((int)threadIdx.x < 4 * per_round) {
                const int ql = threadIdx.x >> 2, jj = threadIdx.x & 3, tl = base + ql;
                if (tl < t1) {
                    float gs = 0.f, us = 0.f;
#pragma unroll
                    for (int w = 0; w < 4; ++w) {
                        gs += red[4 * ql + w][2 * jj];
                        us += red[4 * ql + w][2 * jj + 1];
                    }
                    gs *= xs.up;
                    us *= xs.up;
                    const int sl = tl / tiles_s, j = (tl - sl * tiles_s) * 4 + jj;
                    act[(u64)sl * inter + j] = from_f32<bf16>(gs / (1.0f + expf(-gs)) * us);
                }
            }
            __syncthreads();  // red is the next round's
        }
    }
    cp_async_wait<0>();
    grid_sync(sync);

    // 3. Each slot's act row staged by a warp (from L2: other blocks wrote it), then the down
    // tiles from shared memory and the weighted sum.
    for (int s = warp; s < top_k; s += warps) {
        const F16Scale a = stage_x_warp<true>(act_s + (u64)s * inter, act + (u64)s * inter, inter);
        if (lane == 0) up_s[s] = a.up;
    }
    __syncthreads();
    const int ctiles = (ncols + 7) >> 3, slices = inter >> 6;
    for (int it = warp; it < top_k * ctiles; it += warps) {
        const int s = it / ctiles, ct = it - s * ctiles;
        const int cr = min(ct * 8 + g, ncols - 1), ca = min(ct * 8 + 2 * t, ncols - 1);
        const int cb = min(ct * 8 + 2 * t + 1, ncols - 1);
        const unsigned char* wrow = down_s + (u64)(s * ncols + cr) * stride;
        const float* sa = dsc_s + (s * ncols + ca) * nsc;
        const float* sb = dsc_s + (s * ncols + cb) * nsc;
        const u32* xa = act_s + (u64)s * inter;
        float acc[2] = {0.f, 0.f};
        for (int j = 0; j < slices; j += 2) {
            float pa[4] = {0.f, 0.f, 0.f, 0.f}, pb[4] = {0.f, 0.f, 0.f, 0.f};
            one_slice(pa, *(const u32x4*)(wrow + 64 * j + 16 * t), xa, j, t);
            one_slice(pb, *(const u32x4*)(wrow + 64 * (j + 1) + 16 * t), xa, j + 1, t);
            acc[0] = fmaf(sa[j >> 1], pa[0] + pb[0], acc[0]);
            acc[1] = fmaf(sb[j >> 1], pa[1] + pb[1], acc[1]);
        }
        if (lane < 4) {
            const int c = ct * 8 + 2 * lane;
            if (c < ncols) terms_s[c * top_k + s] = __fmul_rn(wts_s[s], acc[0] * up_s[s]);
            if (c + 1 < ncols) terms_s[(c + 1) * top_k + s] = __fmul_rn(wts_s[s], acc[1] * up_s[s]);
        }
    }
    __syncthreads();
    for (int ci = threadIdx.x; ci < ncols; ci += blockDim.x) {
        float o = 0.f;
        for (int s = 0; s < top_k; ++s) o = __fadd_rn(o, terms_s[ci * top_k + s]);
        out[c0 + ci] = o;
    }
}

extern "C" __global__ void __launch_bounds__(MOE_ONE_WARPS * 32, 1) moe_one_fp8_mma(
    float* out, float* logits, bf16* act, const bf16* x, const bf16* router,
    const unsigned char* w13, const float* s13, const unsigned char* w2, const float* s2,
    u32* sync, int experts, int hidden, int inter, int top_k, int norm_topk_prob, int cols) {
    moe_one_fp8_mma_impl(out, logits, act, x, router, w13, s13, w2, s2, sync, experts, hidden,
                         inter, top_k, norm_topk_prob, cols);
}

// ---- 5. combine ----------------------------------------------------------------------------

extern "C" __global__ void moe_combine(float* out, const float* ys, const float* weights,
                                       u64 tokens, int top_k, int hidden) {
    pdl_start();
    const u64 n = tokens * hidden;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        const u64 t = i / hidden, c = i % hidden;
        float o = 0.f;
        for (int s = 0; s < top_k; ++s) {
            const u64 p = t * top_k + s;
            o = __fadd_rn(o, __fmul_rn(weights[p], ys[p * hidden + c]));
        }
        out[i] = o;
    }
}
