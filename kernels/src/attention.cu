// The paged KV cache: writing a step's keys and values, and causal attention over block tables.
//
// Cache layer layout `[num_blocks, block_size, nkv, hd]` (bf16), for k and v alike; position p of
// a sequence lives in block table[p / block_size] at offset p % block_size.
//
// write_kv: one block per token copies its k and v heads from the fused qkv row to its slot,
// narrowing to bf16. Slots were range-checked on the host.
//
// paged_attention: one kernel for prefill and decode. A block of ATTN_WARPS warps owns one
// (token row, q head) pair: grid.x = row (so long prefills fit), grid.y = head. The row attends to
// keys 0..=positions[row] of its sequence (causal; earlier chunks of a chunked prefill are already
// in the cache), reading kv head h / (nh / nkv) (GQA). Warp w takes keys w, w + ATTN_WARPS, ...;
// for each key the warp computes q·k with lanes splitting head_dim (lane i holds dims i, i+32, ...
// in NPER registers, NPER = head_dim / 32 rounded up, a template parameter so the arrays stay in
// registers) and one shuffle reduction, then updates its online softmax (running max m, sum l, and
// the weighted sum of v in registers), all in f32. At the end the warps' partial states are merged
// through shared memory with the usual rescaling by exp(m_w - max m) and written as bf16. Block
// tables were checked on the host: every entry a row can reach names a block of the cache.
//
// Split-K (flash-decoding) for few rows over long contexts, where rows × heads blocks would
// leave most of the GPU idle: paged_attention_split runs the same loop over one slice of
// keys_per_split keys per block (grid.z = split) and stores its unnormalised state (m, l, acc) in
// f32; attention_merge then combines a row's splits with the same rescaling and writes bf16.
//
// One block per (row, head) still re-reads the shared kv head for each q head of its group (L2
// absorbs most of it); a block per kv head serving its whole group is the next step.
//
// Symbols: write_kv_<qkv dtype>, paged_attention[_split]_<qkv dtype>_d<32·NPER>,
// attention_merge.

#define ATTN_WARPS 4

template <typename T>
__device__ void write_kv_impl(bf16* k_cache, bf16* v_cache, const T* qkv, const u32* slot_mapping,
                              int num_heads, int num_kv_heads, int head_dim) {
    const u64 row = blockIdx.x;
    const int slot_len = num_kv_heads * head_dim;
    const u64 width = (u64)(num_heads + 2 * num_kv_heads) * head_dim;
    const T* k = qkv + row * width + (u64)num_heads * head_dim;
    const T* v = k + slot_len;
    const u64 dst = (u64)slot_mapping[row] * slot_len;
    for (int e = threadIdx.x; e < slot_len; e += blockDim.x) {
        k_cache[dst + e] = from_f32<bf16>(to_f32(k[e]));
        v_cache[dst + e] = from_f32<bf16>(to_f32(v[e]));
    }
}

#define WRITE_KV(SUFFIX, T)                                                                        \
    extern "C" __global__ void write_kv_##SUFFIX(bf16* k_cache, bf16* v_cache, const T* qkv,        \
                                                 const u32* slot_mapping, int num_heads,           \
                                                 int num_kv_heads, int head_dim) {                 \
        write_kv_impl(k_cache, v_cache, qkv, slot_mapping, num_heads, num_kv_heads, head_dim);     \
    }

WRITE_KV(f32, float)
WRITE_KV(bf16, bf16)

// One block's share of attention for (row = blockIdx.x, head = blockIdx.y): keys [begin, end) of
// the row's causal range. PARTIAL = false: all keys, the normalised output written as bf16.
// PARTIAL = true (split-K, split = blockIdx.z): the block's unnormalised state (m, l, acc[hd])
// goes to `partial` for attention_merge; a split past the row's last key writes an empty state.
template <typename T, int NPER, bool PARTIAL>
__device__ void attention_impl(bf16* out, float* partial, const T* qkv, const bf16* k_cache,
                               const bf16* v_cache, const u32* positions, const u32* row_seq,
                               const u32* block_tables, int max_blocks, int block_size,
                               int num_heads, int num_kv_heads, int head_dim, float scale,
                               int keys_per_split) {
    __shared__ float part_m[ATTN_WARPS], part_l[ATTN_WARPS];
    __shared__ float part_acc[ATTN_WARPS][NPER * 32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const u64 row = blockIdx.x;
    const int head = blockIdx.y;
    const int kv_head = head / (num_heads / num_kv_heads);
    const u64 width = (u64)(num_heads + 2 * num_kv_heads) * head_dim;
    const T* q = qkv + row * width + (u64)head * head_dim;
    const u32* table = block_tables + (u64)row_seq[row] * max_blocks;
    const int len = (int)positions[row] + 1;
    const int begin = PARTIAL ? (int)blockIdx.z * keys_per_split : 0;
    const int end = PARTIAL ? min(len, begin + keys_per_split) : len;

    float qr[NPER], acc[NPER];
#pragma unroll
    for (int i = 0; i < NPER; ++i) {
        const int d = lane + 32 * i;
        qr[i] = d < head_dim ? to_f32(q[d]) : 0.f;
        acc[i] = 0.f;
    }
    float m = NEG_INF, l = 0.f;
    for (int p = begin + warp; p < end; p += ATTN_WARPS) {
        const u64 base =
            (((u64)table[p / block_size] * block_size + p % block_size) * num_kv_heads + kv_head) *
            head_dim;
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < NPER; ++i) {
            const int d = lane + 32 * i;
            if (d < head_dim) s += qr[i] * to_f32(k_cache[base + d]);
        }
        s = warp_sum(s) * scale;
        const float m_new = fmaxf(m, s);
        const float correction = expf(m - m_new);  // 0 on the first key (m = -inf)
        const float weight = expf(s - m_new);
        l = l * correction + weight;
#pragma unroll
        for (int i = 0; i < NPER; ++i) {
            const int d = lane + 32 * i;
            const float v = d < head_dim ? to_f32(v_cache[base + d]) : 0.f;
            acc[i] = acc[i] * correction + weight * v;
        }
        m = m_new;
    }

    if (lane == 0) {
        part_m[warp] = m;
        part_l[warp] = l;
    }
#pragma unroll
    for (int i = 0; i < NPER; ++i) part_acc[warp][lane + 32 * i] = acc[i];
    __syncthreads();

    // Merge the warps. A warp with no keys has m = -inf, l = acc = 0 and weighs 0; when no warp
    // had a key (an empty split) every weight is 0 rather than exp(-inf - -inf) = NaN.
    float m_all = part_m[0];
#pragma unroll
    for (int w = 1; w < ATTN_WARPS; ++w) m_all = fmaxf(m_all, part_m[w]);
    float scale_w[ATTN_WARPS];
    float l_all = 0.f;
#pragma unroll
    for (int w = 0; w < ATTN_WARPS; ++w) {
        scale_w[w] = m_all == NEG_INF ? 0.f : expf(part_m[w] - m_all);
        l_all += part_l[w] * scale_w[w];
    }
    if (PARTIAL) {
        const int splits = gridDim.z;
        float* st = partial + ((row * num_heads + head) * splits + blockIdx.z) * (u64)(head_dim + 2);
        if (threadIdx.x == 0) {
            st[0] = m_all;
            st[1] = l_all;
        }
        for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
            float sum = 0.f;
#pragma unroll
            for (int w = 0; w < ATTN_WARPS; ++w) sum += part_acc[w][d] * scale_w[w];
            st[2 + d] = sum;
        }
    } else {
        // Warp 0 holds key 0, so l_all > 0.
        const float inv_l = 1.0f / l_all;
        bf16* o = out + row * ((u64)num_heads * head_dim) + (u64)head * head_dim;
        for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
            float sum = 0.f;
#pragma unroll
            for (int w = 0; w < ATTN_WARPS; ++w) sum += part_acc[w][d] * scale_w[w];
            o[d] = from_f32<bf16>(sum * inv_l);
        }
    }
}

// Both entry points take the same arguments (the plain kernel ignores partial and
// keys_per_split, the split kernel ignores out), so one launcher serves both.
#define PAGED_ATTENTION(SUFFIX, T, NPER)                                                           \
    extern "C" __global__ void paged_attention_##SUFFIX(                                           \
        bf16* out, float* partial, const T* qkv, const bf16* k_cache, const bf16* v_cache,         \
        const u32* positions, const u32* row_seq, const u32* block_tables, int max_blocks,         \
        int block_size, int num_heads, int num_kv_heads, int head_dim, float scale,                \
        int keys_per_split) {                                                                      \
        attention_impl<T, NPER, false>(out, partial, qkv, k_cache, v_cache, positions, row_seq,    \
                                       block_tables, max_blocks, block_size, num_heads,            \
                                       num_kv_heads, head_dim, scale, keys_per_split);             \
    }                                                                                              \
    extern "C" __global__ void paged_attention_split_##SUFFIX(                                     \
        bf16* out, float* partial, const T* qkv, const bf16* k_cache, const bf16* v_cache,         \
        const u32* positions, const u32* row_seq, const u32* block_tables, int max_blocks,         \
        int block_size, int num_heads, int num_kv_heads, int head_dim, float scale,                \
        int keys_per_split) {                                                                      \
        attention_impl<T, NPER, true>(out, partial, qkv, k_cache, v_cache, positions, row_seq,     \
                                      block_tables, max_blocks, block_size, num_heads,             \
                                      num_kv_heads, head_dim, scale, keys_per_split);              \
    }

PAGED_ATTENTION(f32_d32, float, 1)
PAGED_ATTENTION(f32_d64, float, 2)
PAGED_ATTENTION(f32_d128, float, 4)
PAGED_ATTENTION(f32_d256, float, 8)
PAGED_ATTENTION(bf16_d32, bf16, 1)
PAGED_ATTENTION(bf16_d64, bf16, 2)
PAGED_ATTENTION(bf16_d128, bf16, 4)
PAGED_ATTENTION(bf16_d256, bf16, 8)

// Split-K epilogue: one block per (row, head) combines the `splits` partial states of
// paged_attention_split (out = Σ acc_s·e^(m_s - M) / Σ l_s·e^(m_s - M), M = max m_s) and writes
// bf16. Split 0 always holds key 0, so M is finite and the sum positive.
extern "C" __global__ void attention_merge(bf16* out, const float* partial, int num_heads,
                                           int head_dim, int splits) {
    const u64 row = blockIdx.x;
    const int head = blockIdx.y;
    const float* st = partial + (row * num_heads + head) * (u64)splits * (head_dim + 2);
    float m_all = NEG_INF;
    for (int s = 0; s < splits; ++s) m_all = fmaxf(m_all, st[s * (head_dim + 2)]);
    float l_all = 0.f;
    for (int s = 0; s < splits; ++s) {
        const float* p = st + s * (head_dim + 2);
        l_all += p[0] == NEG_INF ? 0.f : p[1] * expf(p[0] - m_all);
    }
    const float inv_l = 1.0f / l_all;
    bf16* o = out + row * ((u64)num_heads * head_dim) + (u64)head * head_dim;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float sum = 0.f;
        for (int s = 0; s < splits; ++s) {
            const float* p = st + s * (head_dim + 2);
            if (p[0] != NEG_INF) sum += p[2 + d] * expf(p[0] - m_all);
        }
        o[d] = from_f32<bf16>(sum * inv_l);
    }
}
