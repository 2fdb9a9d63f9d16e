// Mixture-of-experts (Qwen3-MoE's sparse MLP), none of whose launches waits on the host, so a
// decode step with experts is captured into its CUDA graph like any other. Which launches run
// depends on the step's T tokens and k experts a token (the launcher, moe.rs, picks):
//
//   - T · k <= 1024 (MOE_PLAN_MAX_PAIRS) and T <= 8 (MOE_FUSED_DOWN_TOKENS), every decode step
//     of up to 8 sequences: three launches, moe_plan_* (moe_plan_one_*, one warp, at T = 1),
//     moe_gate_up_dec_* (T = 1, rows 16-byte aligned, or FP4: moe_fp4.cu; else
//     moe_gate_up_*), moe_down_combine_* (moe_down_combine_dec{cols}_* at T = 1).
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
// MiniMax-M2's experts (fused_moe_sigmoid, engine/src/backend/cuda/minimax.rs) are these
// launches with stage 1 scored by sigmoid and a correction bias (MoeSigmoid below: the
// *_sigmoid_* twins of moe_route_*, moe_plan_* and moe_plan_one_*); grouping, every expert
// kernel (CUDA cores and tensor cores, bf16 and FP8) and the weighted sum are the same.
//
// gpt-oss's experts (fused_moe_clamped, engine/src/backend/cuda/gpt_oss.rs) take the routing
// launches above with norm_topk_prob, then moe_gate_up_clamped_* (moe_gate_up with the gate|up
// bias and the clamped SwiGLU, prelude/moe_act.cuh's MoeClampedAct), moe_down_* and
// moe_combine_bias_* (below: moe_combine with each slot's down bias) where the plan keeps them
// on the CUDA cores (FP4 stacks at one token: moe_gate_up_clamped_dec_* and
// moe_down_combine_dec{cols}_* with the down bias, moe_fp4.cu); else the tensor-core kernels'
// clamped builds (moe_mma.cu, moe_mma_fp4.cu).
//
// Versions tried: six launches at every size (not timed on the GPU); this one (see
// docs/performance.md). For long prompts these CUDA-core kernels read each expert's weight row
// once per 8 of its tokens: a 2048-token 30B-A3B chunk took 15.4 ms (bf16) and 25.7 ms (FP8) a
// layer, against 1.2 and 1.8 ms on moe_mma.cu's tensor cores.

#define MOE_WARPS 8
#define MOE_MT 8
#define MOE_MAX_TOP_K 16

// The routing's scorings (MoeSoftmax, MoeSigmoid), total_order_key and warp_best are in
// moe_score.cu, compiled just before this file.

// ---- 1. routing ----------------------------------------------------------------------------

// One token's routing, by a whole warp (every lane calls; lane 0 writes the token's k ids and
// weights at ids[0..k), weights[0..k)), experts scored by `sc` (MoeSoftmax, MoeSigmoid).
template <typename T, typename S>
__device__ void moe_route_token_any(int* ids, float* weights, const T* row, int experts, int top_k,
                                    S sc) {
    const int lane = threadIdx.x & 31;
    sc.setup_row(row, experts);
    sc.setup_groups(row, experts);
    // Selection: round j takes the best (key, index) strictly after the previous choice.
    int chosen[MOE_MAX_TOP_K];
    u32 last_key = 0xffffffffu;
    int last_idx = -1;
    for (int j = 0; j < top_k; ++j) {
        u32 best_key = 0;
        int best_idx = 0x7fffffff;
        for (int e = lane; e < experts; e += 32) {
            const u32 key = total_order_key(sc.rank(to_f32(row[e]), e));
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
        prob[j] = sc.prob(to_f32(row[chosen[j]]));
        total += prob[j];
    }
    int prev = -1;
    for (int j = 0; j < top_k; ++j) {
        int pick = -1;
        for (int i = 0; i < top_k; ++i)
            if (chosen[i] > prev && (pick < 0 || chosen[i] < chosen[pick])) pick = i;
        prev = chosen[pick];
        ids[j] = chosen[pick];
        weights[j] = sc.weight(prob[pick], total);
    }
}

// Routing of one token by one warp with its logits in registers (experts <= 32 · MOE_ROUTE_REGS,
// so up to 256): the same setup, choices and weights as moe_route_token_any, term for term
// (each lane visits its experts in the same ascending order), without re-reading the row for
// each of the top_k selection rounds; lane j keeps choice j, and the k lanes compute their
// probabilities, the choice-order total (every lane adds the k probabilities in choice order,
// as the CPU does) and their rank by expert index in parallel instead of lane 0 sorting alone.
// With `chosen` (the k choices in order, found by moe_rank_choices), the selection rounds are
// skipped and everything else is the same.
#define MOE_ROUTE_REGS 8

template <typename T, typename S>
__device__ void moe_route_token_regs(int* ids, float* weights, const T* row, int experts,
                                     int top_k, S sc, const int* chosen = nullptr) {
    const int lane = threadIdx.x & 31;
    float v[MOE_ROUTE_REGS];
    u32 key[MOE_ROUTE_REGS];
    if (chosen == nullptr) sc.setup_groups(row, experts);
#pragma unroll
    for (int i = 0; i < MOE_ROUTE_REGS; ++i) {
        const int e = lane + 32 * i;
        v[i] = e < experts ? to_f32(row[e]) : NEG_INF;
        key[i] = e < experts ? total_order_key(sc.rank(v[i], e)) : 0u;
    }
    sc.setup_regs(v, experts);
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
    const float prob = lane < top_k ? sc.prob(to_f32(row[mine])) : 0.f;
    float total = 0.f;
    int rank = 0;
    for (int j = 0; j < top_k; ++j) {
        total += __shfl_sync(0xffffffffu, prob, j);
        rank += __shfl_sync(0xffffffffu, mine, j) < mine;
    }
    if (lane < top_k) {
        ids[rank] = mine;
        weights[rank] = sc.weight(prob, total);
    }
}

template <typename T, typename S>
__device__ void moe_route_token(int* ids, float* weights, const T* row, int experts, int top_k,
                                S sc) {
    if (experts <= 32 * MOE_ROUTE_REGS)
        moe_route_token_regs(ids, weights, row, experts, top_k, sc);
    else
        moe_route_token_any(ids, weights, row, experts, top_k, sc);
}

template <typename T, typename S>
__device__ void moe_route_impl(int* ids, float* weights, const T* logits, int tokens, int experts,
                               int top_k, S sc) {
    const int t = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (t >= tokens) return;
    moe_route_token(ids + (u64)t * top_k, weights + (u64)t * top_k, logits + (u64)t * experts,
                    experts, top_k, sc);
}

extern "C" __global__ void moe_route_f32(int* ids, float* weights, const float* logits, int tokens,
                                         int experts, int top_k, int norm_topk_prob) {
    pdl_start();
    moe_route_impl(ids, weights, logits, tokens, experts, top_k, MoeSoftmax{norm_topk_prob});
}

extern "C" __global__ void moe_route_bf16(int* ids, float* weights, const bf16* logits, int tokens,
                                          int experts, int top_k, int norm_topk_prob) {
    pdl_start();
    moe_route_impl(ids, weights, logits, tokens, experts, top_k, MoeSoftmax{norm_topk_prob});
}

// MiniMax-M2's and DeepSeek-V3's routing (fused_moe_sigmoid): moe_route_* scored by MoeSigmoid,
// the correction bias f32 [E], n_group expert groups of which topk_group are kept (1 and 1: all).
#define MOE_ROUTE_SIGMOID(SUFFIX, T)                                                               \
    extern "C" __global__ void moe_route_sigmoid_##SUFFIX(int* ids, float* weights,                \
                                                          const T* logits, int tokens,             \
                                                          int experts, int top_k,                  \
                                                          int norm_topk_prob, const float* bias,   \
                                                          float scaling, int n_group,              \
                                                          int topk_group) {                        \
        pdl_start();                                                                               \
        moe_route_impl(ids, weights, logits, tokens, experts, top_k,                               \
                       MoeSigmoid{norm_topk_prob, bias, scaling, n_group, topk_group});            \
    }

MOE_ROUTE_SIGMOID(f32, float)
MOE_ROUTE_SIGMOID(bf16, bf16)

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

// Grouping and the active list of a step of at most MOE_PLAN_MAX_PAIRS pairs whose ids are
// written, by one block (any multiple of 32 threads, at most 1024): the same offsets, perm and
// active as moe_group + moe_active, entry for entry. The pairs are cut into chunks of 32, a warp
// a chunk; in a chunk, the lanes routed to the same expert find each other with one match, so a
// pair's rank among its expert's pairs of the chunk is a popcount, and the chunk's count of each
// expert goes into a shared histogram [chunk][expert]. Each expert's column is then summed over
// the chunks in order (each entry becomes the expert's pairs in earlier chunks), the experts'
// totals scanned into the offsets, and every pair written at offset + earlier chunks + its rank:
// the pairs of an expert in pair order, as moe_group's stable scan writes them. Experts are
// taken MOE_PLAN_HIST at a time (one pass over the pairs each). A few barriers instead of the
// E / 32 · pairs / 32 ballot steps a warp took before (62 us at 1024 pairs on the H200, 30B-A3B
// at batch 128; docs/performance-log/2026-12-04-session-4.md).
#define MOE_PLAN_THREADS 1024
#define MOE_PLAN_MAX_PAIRS 1024
#define MOE_PLAN_HIST 256

__device__ void moe_group_block(int* offsets, int* perm, int* active, const int* ids, int pairs,
                                int experts) {
    __shared__ int hist[MOE_PLAN_MAX_PAIRS / 32][MOE_PLAN_HIST];
    __shared__ int counts[MOE_PLAN_HIST], starts[MOE_PLAN_HIST];
    __shared__ int pass_total;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const u32 below = (1u << lane) - 1u;
    const int chunks = (pairs + 31) >> 5;
    int base = 0; // pairs routed to the experts of earlier passes
    for (int e0 = 0; e0 < experts; e0 += MOE_PLAN_HIST) {
        const int ne = min(MOE_PLAN_HIST, experts - e0);
        for (int i = threadIdx.x; i < chunks * MOE_PLAN_HIST; i += blockDim.x)
            hist[i / MOE_PLAN_HIST][i % MOE_PLAN_HIST] = 0;
        __syncthreads();
        for (int c = warp; c < chunks; c += warps) {
            const int p = (c << 5) + lane;
            const int id = p < pairs ? ids[p] - e0 : -1;
            const bool in = id >= 0 && id < ne;
            const u32 same = __match_any_sync(0xffffffffu, in ? id : -1);
            if (in && (same & below) == 0) hist[c][id] = __popc(same);
        }
        __syncthreads();
        for (int e = threadIdx.x; e < ne; e += blockDim.x) {
            int run = 0;
            for (int c = 0; c < chunks; ++c) {
                const int n = hist[c][e];
                hist[c][e] = run;
                run += n;
            }
            counts[e] = run;
        }
        __syncthreads();
        if (warp == 0) {
            // Lane l scans experts l · per .. l · per + per - 1 (per <= 8).
            const int per = (ne + 31) >> 5;
            int mine = 0;
            for (int i = 0; i < per; ++i) {
                const int e = lane * per + i;
                mine += e < ne ? counts[e] : 0;
            }
            int incl = mine;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const int up = (int)__float_as_uint(__shfl_sync(0xffffffffu, __uint_as_float((u32)incl), lane - o));
                if (lane >= o) incl += up;
            }
            int run = base + incl - mine;
            for (int i = 0; i < per; ++i) {
                const int e = lane * per + i;
                if (e < ne) {
                    offsets[e0 + e] = run;
                    starts[e] = run;
                    run += counts[e];
                }
            }
            if (lane == 31) pass_total = base + incl;
        }
        __syncthreads();
        for (int c = warp; c < chunks; c += warps) {
            const int p = (c << 5) + lane;
            const int id = p < pairs ? ids[p] - e0 : -1;
            const bool in = id >= 0 && id < ne;
            const u32 same = __match_any_sync(0xffffffffu, in ? id : -1);
            if (in) perm[starts[id] + hist[c][id] + __popc(same & below)] = p;
        }
        base = pass_total;
        __syncthreads(); // the next pass rewrites hist, counts and starts
    }
    if (threadIdx.x == 0) offsets[experts] = base;
    __syncthreads(); // the block's global writes are visible to the block past the barrier
    moe_active_block(active, offsets, experts);
}

// Routing, grouping and the active list of a step of at most MOE_PLAN_MAX_PAIRS pairs, in one
// block of MOE_PLAN_THREADS: the same ids, weights, offsets, perm and active as moe_route_* +
// moe_group + moe_active, entry for entry. Each warp routes tokens warp, warp + 32, ... with
// moe_route_token (the same code, so the same choices and weights), then moe_group_block.
// Steps of more tokens than the block has warps route in their own launch (moe_route_*, a warp
// a token over many blocks) and group with moe_group_plan.
template <typename T, typename S>
__device__ void moe_plan_impl(int* ids, float* weights, int* offsets, int* perm, int* active,
                              const T* logits, int tokens, int experts, int top_k, S sc) {
    const int warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int t = warp; t < tokens; t += warps)
        moe_route_token(ids + (u64)t * top_k, weights + (u64)t * top_k,
                        logits + (u64)t * experts, experts, top_k, sc);
    __syncthreads(); // the block's global writes are visible to the block past the barrier
    moe_group_block(offsets, perm, active, ids, tokens * top_k, experts);
}

// moe_group + moe_active in one block for at most MOE_PLAN_MAX_PAIRS pairs (moe_group_block).
extern "C" __global__ void __launch_bounds__(MOE_PLAN_THREADS)
    moe_group_plan(int* offsets, int* perm, int* active, const int* ids, int pairs, int experts) {
    pdl_start();
    moe_group_block(offsets, perm, active, ids, pairs, experts);
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

template <typename T, typename S>
__device__ void moe_plan_one_impl(int* ids, float* weights, int* offsets, int* perm, int* active,
                                  const T* logits, int experts, int top_k, S sc) {
    const int lane = threadIdx.x & 31;
    moe_route_token(ids, weights, logits, experts, top_k, sc);
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
    moe_plan_one_impl(ids, weights, offsets, perm, active, logits, experts, top_k,
                      MoeSoftmax{norm_topk_prob});
}

extern "C" __global__ void moe_plan_one_bf16(int* ids, float* weights, int* offsets, int* perm,
                                             int* active, const bf16* logits, int experts,
                                             int top_k, int norm_topk_prob) {
    pdl_start();
    moe_plan_one_impl(ids, weights, offsets, perm, active, logits, experts, top_k,
                      MoeSoftmax{norm_topk_prob});
}

extern "C" __global__ void __launch_bounds__(MOE_PLAN_THREADS)
    moe_plan_f32(int* ids, float* weights, int* offsets, int* perm, int* active,
                 const float* logits, int tokens, int experts, int top_k, int norm_topk_prob) {
    pdl_start();
    moe_plan_impl(ids, weights, offsets, perm, active, logits, tokens, experts, top_k,
                  MoeSoftmax{norm_topk_prob});
}

extern "C" __global__ void __launch_bounds__(MOE_PLAN_THREADS)
    moe_plan_bf16(int* ids, float* weights, int* offsets, int* perm, int* active,
                  const bf16* logits, int tokens, int experts, int top_k, int norm_topk_prob) {
    pdl_start();
    moe_plan_impl(ids, weights, offsets, perm, active, logits, tokens, experts, top_k,
                  MoeSoftmax{norm_topk_prob});
}

// MiniMax-M2's and DeepSeek-V3's plans (fused_moe_sigmoid): moe_plan_one_* and moe_plan_* scored
// by MoeSigmoid.
#define MOE_PLAN_SIGMOID(SUFFIX, T)                                                                \
    extern "C" __global__ void moe_plan_one_sigmoid_##SUFFIX(                                      \
        int* ids, float* weights, int* offsets, int* perm, int* active, const T* logits,           \
        int experts, int top_k, int norm_topk_prob, const float* bias, float scaling, int n_group, \
        int topk_group) {                                                                          \
        pdl_start();                                                                               \
        moe_plan_one_impl(ids, weights, offsets, perm, active, logits, experts, top_k,             \
                          MoeSigmoid{norm_topk_prob, bias, scaling, n_group, topk_group});         \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(MOE_PLAN_THREADS) moe_plan_sigmoid_##SUFFIX(      \
        int* ids, float* weights, int* offsets, int* perm, int* active, const T* logits,           \
        int tokens, int experts, int top_k, int norm_topk_prob, const float* bias,                 \
        float scaling, int n_group, int topk_group) {                                              \
        pdl_start();                                                                               \
        moe_plan_impl(ids, weights, offsets, perm, active, logits, tokens, experts, top_k,         \
                      MoeSigmoid{norm_topk_prob, bias, scaling, n_group, topk_group});             \
    }

MOE_PLAN_SIGMOID(f32, float)
MOE_PLAN_SIGMOID(bf16, bf16)

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

// gpt-oss's weighted sum (moe_clamped.rs): moe_combine with the down bias [E, H] of each
// slot's expert added to its output first, out[t, c] = Σ_slot weight · (ys + bias[expert, c]):
// the CPU reference's terms (bias after the product, then weighted) in its order (a token's
// ids ascend). B: the bias type (bf16, or float on the float32 path).
template <typename B>
__device__ void moe_combine_bias_impl(float* out, const float* ys, const float* weights,
                                      const int* ids, const B* bias, u64 tokens, int top_k,
                                      int hidden) {
    const u64 n = tokens * hidden;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        const u64 t = i / hidden, c = i % hidden;
        float o = 0.f;
        for (int s = 0; s < top_k; ++s) {
            const u64 p = t * top_k + s;
            const float y = __fadd_rn(ys[p * hidden + c], to_f32(bias[(u64)ids[p] * hidden + c]));
            o = __fadd_rn(o, __fmul_rn(weights[p], y));
        }
        out[i] = o;
    }
}

extern "C" __global__ void moe_combine_bias_bf16(float* out, const float* ys, const float* weights,
                                                 const int* ids, const bf16* bias, u64 tokens,
                                                 int top_k, int hidden) {
    pdl_start();
    moe_combine_bias_impl(out, ys, weights, ids, bias, tokens, top_k, hidden);
}

extern "C" __global__ void moe_combine_bias_f32(float* out, const float* ys, const float* weights,
                                                const int* ids, const float* bias, u64 tokens,
                                                int top_k, int hidden) {
    pdl_start();
    moe_combine_bias_impl(out, ys, weights, ids, bias, tokens, top_k, hidden);
}
