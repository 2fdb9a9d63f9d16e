// Mixture-of-experts (Qwen3-MoE's sparse MLP), none of whose launches waits on the host, so a
// decode step with experts is captured into its CUDA graph like any other. Which launches run
// depends on the step's T tokens and k experts a token (the launcher, moe.rs, picks):
//
//   - T · k <= 1024 (MOE_PLAN_MAX_PAIRS) and T <= 8 (MOE_FUSED_DOWN_TOKENS), every decode step
//     of up to 8 sequences: three launches, moe_plan_*, moe_gate_up_*, moe_down_combine_*.
//   - T · k <= 1024, T > 8: four, moe_plan_*, moe_gate_up_*, moe_down_*, moe_combine.
//   - T · k > 1024: six, moe_route_*, moe_group, moe_active, moe_gate_up_*, moe_down_*,
//     moe_combine.
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
// take the scalar loop (`VEC` false).
//
// Versions tried: six launches at every size (not timed on the GPU); this one (not yet timed).

#define MOE_WARPS 8
#define MOE_MT 8
#define MOE_MAX_TOP_K 16

// f32 bits mapped so that unsigned order is f32::total_cmp's order.
__device__ __forceinline__ u32 total_order_key(float v) {
    const u32 u = __float_as_uint(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ u32 shfl_xor_u32(u32 v, int o) {
    return __float_as_uint(__shfl_xor_sync(0xffffffffu, __uint_as_float(v), o));
}

// ---- 1. routing ----------------------------------------------------------------------------

// One token's routing, by a whole warp (every lane calls; lane 0 writes the token's k ids and
// weights at ids[0..k), weights[0..k)).
template <typename T>
__device__ void moe_route_token(int* ids, float* weights, const T* row, int experts, int top_k,
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
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const u32 k2 = shfl_xor_u32(best_key, o);
            const int i2 = (int)shfl_xor_u32((u32)best_idx, o);
            if (k2 > best_key || (k2 == best_key && i2 < best_idx)) {
                best_key = k2;
                best_idx = i2;
            }
        }
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
    moe_route_impl(ids, weights, logits, tokens, experts, top_k, norm_topk_prob);
}

extern "C" __global__ void moe_route_bf16(int* ids, float* weights, const bf16* logits, int tokens,
                                          int experts, int top_k, int norm_topk_prob) {
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

extern "C" __global__ void __launch_bounds__(MOE_PLAN_THREADS)
    moe_plan_f32(int* ids, float* weights, int* offsets, int* perm, int* active,
                 const float* logits, int tokens, int experts, int top_k, int norm_topk_prob) {
    moe_plan_impl(ids, weights, offsets, perm, active, logits, tokens, experts, top_k,
                  norm_topk_prob);
}

extern "C" __global__ void __launch_bounds__(MOE_PLAN_THREADS)
    moe_plan_bf16(int* ids, float* weights, int* offsets, int* perm, int* active,
                  const bf16* logits, int tokens, int experts, int top_k, int norm_topk_prob) {
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

// 8 elements of a bf16 row (chunk c = elements 8c..8c+7) as floats.
__device__ __forceinline__ void row_chunk8(const RowBf16& r, int c, float* v) {
    const u32x4 q = load_stream((const u32x4*)r.w + c);
    v[0] = lo(q.x); v[1] = hi(q.x); v[2] = lo(q.y); v[3] = hi(q.y);
    v[4] = lo(q.z); v[5] = hi(q.z); v[6] = lo(q.w); v[7] = hi(q.w);
}
__device__ __forceinline__ float row_at(const RowBf16& r, int k) { return to_f32(r.w[k]); }
__device__ __forceinline__ float row_at(const RowFp8& r, int k) {
    return e4m3_scaled(r.w[k], fp8_scale120(r.scales[k >> 7]));
}

// ---- 3. gate_up + SiLU, 4. down ------------------------------------------------------------

// x rows (bf16) of the routed tokens against one or two weight rows. acc[m] += row · x[rows[m]].
// VEC: K % 8 == 0 (bf16 rows and the x rows 16-byte aligned).
template <bool VEC, int NW, typename Row>
__device__ __forceinline__ void moe_dot(float (*acc)[MOE_MT], const Row* rows, const bf16* x,
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

// FP8 rows, 16 elements (one 16-byte load) at a time; K % 16 == 0.
template <int NW>
__device__ __forceinline__ void moe_dot_fp8_vec(float (*acc)[MOE_MT], const RowFp8* rows,
                                                const bf16* x, const u64* xoff, int n, int k) {
    const int lane = threadIdx.x & 31;
    const int chunks = k >> 4;
    for (int c = lane; c < chunks; c += 32) {
        float w[NW][16];
#pragma unroll
        for (int r = 0; r < NW; ++r) {
            const u32x4 q = load_stream((const u32x4*)rows[r].w + c);
            const float s = fp8_scale120(rows[r].scales[c >> 3]); // 16 · 8 = 128 columns a scale
            const u32 words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
            for (int i = 0; i < 16; ++i) w[r][i] = e4m3_scaled(words[i >> 2] >> (8 * (i & 3)), s);
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
                for (int r = 0; r < NW; ++r)
#pragma unroll
                    for (int i = 0; i < 16; ++i) acc[r][m] = fmaf(w[r][i], xv[i], acc[r][m]);
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

// Row `row` of a weight stored as [rows, k] (experts stacked): bf16, or fp8 with its scales
// expanded to one row of ceil(k / 128) per weight row (the loader's layout, see weights.rs).
__device__ __forceinline__ RowBf16 weight_row(const bf16* w, const float*, u64 row, int k) {
    return RowBf16{w + row * k};
}
__device__ __forceinline__ RowFp8 weight_row(const unsigned char* w, const float* scales, u64 row,
                                             int k) {
    return RowFp8{w + row * k, scales + row * (u64)((k + 127) >> 7)};
}

// The expert block row blockIdx.y serves (active[blockIdx.y]), or -1 past the active count.
__device__ __forceinline__ int block_expert(const int* active, int experts) {
    return (int)blockIdx.y < active[experts] ? active[blockIdx.y] : -1;
}

template <bool VEC, typename W>
__device__ void moe_gate_up_impl(bf16* act, const bf16* x, const W* w, const float* scales,
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
                act[(u64)pair[m] * inter + j] = from_f32<bf16>(g / (1.0f + expf(-g)) * u);
        }
    }
}

template <bool VEC, typename W>
__device__ void moe_down_impl(float* ys, const bf16* act, const W* w, const float* scales,
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

template <bool VEC, typename W>
__device__ void moe_down_combine_impl(float* out, const bf16* act, const W* w, const float* scales,
                                      const int* ids, const float* weights, int tokens, int top_k,
                                      int inter, int hidden) {
    __shared__ float ys[MOE_MAX_TOP_K];
    const int slot = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const u64 t = blockIdx.x % (unsigned)tokens, c = blockIdx.x / (unsigned)tokens;
    const u64 p = t * top_k + slot;
    const auto row = weight_row(w, scales, (u64)ids[p] * hidden + c, inter);
    u64 xoff[MOE_MT];
    float acc[1][MOE_MT];
#pragma unroll
    for (int m = 0; m < MOE_MT; ++m) {
        xoff[m] = p * inter;
        acc[0][m] = 0.f;
    }
    moe_rows_dot<VEC, 1>(acc, &row, act, xoff, 1, inter);
    const float y = warp_sum(acc[0][0]);
    if (lane == 0) ys[slot] = y;
    __syncthreads();
    if (threadIdx.x == 0) {
        float o = 0.f;
        for (int s = 0; s < top_k; ++s) o = __fadd_rn(o, __fmul_rn(weights[t * top_k + s], ys[s]));
        out[t * hidden + c] = o;
    }
}

#define MOE_EXPERT_KERNELS(SUFFIX, W, VEC)                                                        \
    extern "C" __global__ void moe_gate_up_##SUFFIX(                                              \
        bf16* act, const bf16* x, const W* w, const float* scales, const int* offsets,            \
        const int* active, const int* perm, int experts, int top_k, int inter, int hidden) {      \
        moe_gate_up_impl<VEC>(act, x, w, scales, offsets, active, perm, experts, top_k, inter,    \
                              hidden);                                                            \
    }                                                                                             \
    extern "C" __global__ void moe_down_##SUFFIX(float* ys, const bf16* act, const W* w,         \
                                                 const float* scales, const int* offsets,         \
                                                 const int* active, const int* perm, int experts, \
                                                 int inter, int hidden) {                         \
        moe_down_impl<VEC>(ys, act, w, scales, offsets, active, perm, experts, inter, hidden);    \
    }                                                                                             \
    extern "C" __global__ void moe_down_combine_##SUFFIX(                                         \
        float* out, const bf16* act, const W* w, const float* scales, const int* ids,             \
        const float* weights, int tokens, int top_k, int inter, int hidden) {                     \
        moe_down_combine_impl<VEC>(out, act, w, scales, ids, weights, tokens, top_k, inter,       \
                                   hidden);                                                       \
    }

MOE_EXPERT_KERNELS(bf16_vec, bf16, true)
MOE_EXPERT_KERNELS(bf16, bf16, false)
MOE_EXPERT_KERNELS(fp8_vec, unsigned char, true)
MOE_EXPERT_KERNELS(fp8, unsigned char, false)

// ---- 5. combine ----------------------------------------------------------------------------

extern "C" __global__ void moe_combine(float* out, const float* ys, const float* weights,
                                       u64 tokens, int top_k, int hidden) {
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
