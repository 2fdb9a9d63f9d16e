// The paged KV cache: writing a step's keys and values, and causal attention over block tables.
//
// Cache layer layout `[num_blocks, block_size, nkv, hd]` (bf16), for k and v alike; position p of
// a sequence lives in block table[p / block_size] at offset p % block_size.
//
// write_kv: one block per token copies its k and v heads from the fused qkv row to its slot,
// narrowing to bf16. Slots were range-checked on the host.
//
// paged_attention: one kernel for prefill and decode. A block of ATTN_WARPS warps owns one
// (token row, group of G q heads): grid.x = row (so long prefills fit), grid.y = head group. The row attends to
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
// one slice of the row's keys per block (grid.z = split; a row's range cut evenly) and stores its unnormalised state (m, l, acc) in
// f32; attention_merge then combines a row's splits with the same rescaling and writes bf16.
//
// A block serves G q heads of one kv head (G = 1, 2 or 4, dividing the GQA group), so the keys
// and values are read once for the G heads rather than once per head.
//
// The float32 path (`--dtype float32`): an f32 cache and an f32 output, through the same
// attention_impl; the fp32 kernels take f32 qkv, cache and output.
//
// The FP8 cache (`--kv-cache-dtype fp8`, prelude/fp8.cuh's KV_FP8_GROUP): write_kv_<qkv>_kv8 stores
// e4m3 bytes and group scales; attention reads `e4m3 · scale` through kv_value. Every attention
// kernel takes the two scale regions last (null, and unused, for bf16 and f32 caches).
//
// Sliding windows and sinks: every attention kernel takes `window` (> 0: a row at position q
// sees keys q - window < p <= q; 0: all of 0..=q) and `sinks` (null, or [nh] f32 logits that
// join each head's softmax denominator with no value, gpt-oss). A window is a runtime bound on
// the key loop's start, computed once a block, so a kernel without one runs the loop it always
// did; the keys before the window are never read. A sink is folded in once, where the states
// are normalised: merge_attention_states (plain) or attention_merge (split-K).
//
// Symbols: block_table_write, write_kv_<qkv dtype>, paged_attention[_split]_<qkv dtype>_d<32·NPER>_g<G>,
// attention_merge; write_kv_fp32, paged_attention[_split]_fp32_d<D>_g<G>, attention_merge_fp32;
// write_kv_<qkv dtype>_kv8, paged_attention[_split]_<qkv dtype>_kv8_d<D>_g<G>.

#define ATTN_WARPS 4

template <typename T, typename TC>
__device__ void write_kv_impl(TC* k_cache, TC* v_cache, const T* qkv, const u32* slot_mapping,
                              int num_heads, int num_kv_heads, int head_dim) {
    const u64 row = blockIdx.x;
    const int slot_len = num_kv_heads * head_dim;
    const u64 width = (u64)(num_heads + 2 * num_kv_heads) * head_dim;
    const T* k = qkv + row * width + (u64)num_heads * head_dim;
    const T* v = k + slot_len;
    const u64 dst = (u64)slot_mapping[row] * slot_len;
    for (int e = threadIdx.x; e < slot_len; e += blockDim.x) {
        k_cache[dst + e] = from_f32<TC>(to_f32(k[e]));
        v_cache[dst + e] = from_f32<TC>(to_f32(v[e]));
    }
}

// block_table_write: one step's changes to the block tables the engine keeps on the device
// (`cuda/block_tables.rs`), a block a change: change w writes its `count` ids to
// tables[row · width + start ..]. `writes` holds the (row, start, count, first id) quads of
// every change, then the ids (the fourth field indexes `writes`). Rows, ranges and ids were
// checked on the host.
extern "C" __global__ void block_table_write(u32* tables, const u32* writes, int width) {
    pdl_start();
    const u32* w = writes + 4 * (u64)blockIdx.x;
    u32* dst = tables + (u64)w[0] * width + w[1];
    const u32* ids = writes + w[3];
    for (u32 i = threadIdx.x; i < w[2]; i += blockDim.x) dst[i] = ids[i];
}

#define WRITE_KV(SUFFIX, T, TC)                                                                    \
    extern "C" __global__ void write_kv_##SUFFIX(TC* k_cache, TC* v_cache, const T* qkv,            \
                                                 const u32* slot_mapping, int num_heads,           \
                                                 int num_kv_heads, int head_dim) {                 \
        pdl_start();                                                                               \
        write_kv_impl(k_cache, v_cache, qkv, slot_mapping, num_heads, num_kv_heads, head_dim);     \
    }

WRITE_KV(f32, float, bf16)
WRITE_KV(bf16, bf16, bf16)
WRITE_KV(fp32, float, float)

// The FP8 cache (`_kv8`): a warp per head vector (the token's nkv k heads, then its v heads)
// finds its group scales and stores e4m3 bytes (store_head_fp8). k_scales / v_scales are the
// layers' scale regions ([slots, nkv, groups] f32).
template <typename T>
__device__ void write_kv_fp8_impl(unsigned char* k_cache, unsigned char* v_cache, float* k_scales,
                                  float* v_scales, const T* qkv, const u32* slot_mapping,
                                  int num_heads, int num_kv_heads, int head_dim) {
    const u64 row = blockIdx.x;
    const int warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const u64 width = (u64)(num_heads + 2 * num_kv_heads) * head_dim;
    const T* k = qkv + row * width + (u64)num_heads * head_dim;
    const int groups = (head_dim + KV_FP8_GROUP - 1) / KV_FP8_GROUP;
    const u64 slot = slot_mapping[row];
    for (int h = warp; h < 2 * num_kv_heads; h += warps) {
        const bool is_v = h >= num_kv_heads;
        const u64 r = slot * num_kv_heads + (is_v ? h - num_kv_heads : h);
        store_head_fp8((is_v ? v_cache : k_cache) + r * head_dim,
                       (is_v ? v_scales : k_scales) + r * groups, k + (u64)h * head_dim, head_dim);
    }
}

#define WRITE_KV_FP8(SUFFIX, T)                                                                    \
    extern "C" __global__ void write_kv_##SUFFIX##_kv8(                                            \
        unsigned char* k_cache, unsigned char* v_cache, float* k_scales, float* v_scales,          \
        const T* qkv, const u32* slot_mapping, int num_heads, int num_kv_heads, int head_dim) {    \
        pdl_start();                                                                               \
        write_kv_fp8_impl(k_cache, v_cache, k_scales, v_scales, qkv, slot_mapping, num_heads,      \
                          num_kv_heads, head_dim);                                                 \
    }

WRITE_KV_FP8(f32, float)
WRITE_KV_FP8(bf16, bf16)

// One block's share of attention for (row = blockIdx.x / (nh/G), heads G·(blockIdx.x % (nh/G)) ..)
// over keys [begin, end) of the row's causal range. The G heads of a block share one kv head
// (G divides the group size nh / nkv), so each key and value is read once for all of them: at
// Qwen3-8B's GQA (4 q heads a kv head) that is a quarter of the KV traffic of a block per head.
// PARTIAL = false: all keys, the normalised output written as bf16. PARTIAL = true (split-K,
// split = blockIdx.z): each head's unnormalised state (m, l, acc[hd]) goes to `partial` for
// attention_merge; a split past the row's last key writes an empty state.
template <typename T, typename TC, typename TO, int NPER, int G, bool PARTIAL>
__device__ void attention_impl(TO* out, float* partial, const T* qkv, const TC* k_cache,
                               const TC* v_cache, const u32* positions, const u32* row_seq,
                               const u32* block_tables, int max_blocks, int block_size,
                               int num_heads, int num_kv_heads, int head_dim, float scale,
                               const float* k_scales, const float* v_scales, int window,
                               const float* sinks) {
    __shared__ float part_m[ATTN_WARPS][G], part_l[ATTN_WARPS][G];
    __shared__ float part_acc[ATTN_WARPS][G][NPER * 32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    // Block x = row · (nh / G) + head group: a row's head groups are neighbouring blocks, so
    // they run together and read the kv heads of each cached token side by side (one token's
    // heads are contiguous in the cache) rather than 256-byte pieces of it at different times.
    const int head_groups = num_heads / G;
    const u64 row = blockIdx.x / head_groups;
    const int head0 = (int)(blockIdx.x % head_groups) * G;
    const int kv_head = head0 / (num_heads / num_kv_heads);
    const u64 width = (u64)(num_heads + 2 * num_kv_heads) * head_dim;
    const u32* table = block_tables + (u64)row_seq[row] * max_blocks;
    const int len = (int)positions[row] + 1;
    // A sliding window (window > 0) starts the key loop at the row's first visible key, so the
    // keys before it are never read.
    const int key0 = window > 0 ? max(0, len - window) : 0;
    // Split-K: the row's own range [key0, len) cut evenly into gridDim.z slices, so a row's
    // result depends only on its length and the split count (not on the batch's longest row).
    const int per_split = PARTIAL ? (len - key0 + (int)gridDim.z - 1) / (int)gridDim.z : 0;
    const int begin = key0 + (PARTIAL ? (int)blockIdx.z * per_split : 0);
    const int end = PARTIAL ? min(len, begin + per_split) : len;
    const int groups = (head_dim + KV_FP8_GROUP - 1) / KV_FP8_GROUP;  // FP8 cache scales a row

    float qr[G][NPER], acc[G][NPER], m[G], l[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        const T* q = qkv + row * width + (u64)(head0 + g) * head_dim;
#pragma unroll
        for (int i = 0; i < NPER; ++i) {
            const int d = lane + 32 * i;
            qr[g][i] = d < head_dim ? to_f32(q[d]) : 0.f;
            acc[g][i] = 0.f;
        }
        m[g] = NEG_INF;
        l[g] = 0.f;
    }
    // Two keys an iteration (p and p + ATTN_WARPS), so their loads and reductions overlap: a
    // decode block is latency-bound, not bandwidth-bound.
    for (int p = begin + warp; p < end; p += 2 * ATTN_WARPS) {
        const int p1 = p + ATTN_WARPS;
        const bool two = p1 < end;
        // Cache rows (a token's head vector) of the two keys, and their first elements.
        const u64 r0 =
            ((u64)table[p / block_size] * block_size + p % block_size) * num_kv_heads + kv_head;
        const u64 r1 =
            two ? ((u64)table[p1 / block_size] * block_size + p1 % block_size) * num_kv_heads +
                      kv_head
                : r0;
        const u64 base0 = r0 * head_dim, base1 = r1 * head_dim;
        float k0[NPER], v0[NPER], k1[NPER], v1[NPER], s0[G], s1[G];
#pragma unroll
        for (int i = 0; i < NPER; ++i) {
            const int d = lane + 32 * i;
            const bool in = d < head_dim;
            k0[i] = in ? kv_value(k_cache, k_scales, r0, base0, d, groups) : 0.f;
            v0[i] = in ? kv_value(v_cache, v_scales, r0, base0, d, groups) : 0.f;
            k1[i] = in ? kv_value(k_cache, k_scales, r1, base1, d, groups) : 0.f;
            v1[i] = in ? kv_value(v_cache, v_scales, r1, base1, d, groups) : 0.f;
        }
#pragma unroll
        for (int g = 0; g < G; ++g) {
            s0[g] = 0.f;
            s1[g] = 0.f;
#pragma unroll
            for (int i = 0; i < NPER; ++i) {
                s0[g] += qr[g][i] * k0[i];
                s1[g] += qr[g][i] * k1[i];
            }
        }
#pragma unroll
        for (int g = 0; g < G; ++g) {
            s0[g] = warp_sum(s0[g]) * scale;
            s1[g] = two ? warp_sum(s1[g]) * scale : NEG_INF;
        }
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const float m_new = fmaxf(m[g], fmaxf(s0[g], s1[g]));
            const float correction = expf(m[g] - m_new);  // 0 on the first key (m = -inf)
            const float w0 = expf(s0[g] - m_new);
            const float w1 = expf(s1[g] - m_new);  // 0 when there is no second key
            l[g] = l[g] * correction + w0 + w1;
#pragma unroll
            for (int i = 0; i < NPER; ++i)
                acc[g][i] = acc[g][i] * correction + w0 * v0[i] + w1 * v1[i];
            m[g] = m_new;
        }
    }

#pragma unroll
    for (int g = 0; g < G; ++g) {
        if (lane == 0) {
            part_m[warp][g] = m[g];
            part_l[warp][g] = l[g];
        }
#pragma unroll
        for (int i = 0; i < NPER; ++i) part_acc[warp][g][lane + 32 * i] = acc[g][i];
    }
    __syncthreads();

    merge_attention_states<ATTN_WARPS, G, NPER * 32, PARTIAL, false>(
        part_m, part_l, part_acc, G, head0, row, num_heads, head_dim, out, partial, sinks);
}

// Both entry points take the same arguments (the plain kernel ignores partial, the split
// kernel ignores out), so one launcher serves both.
#define PAGED_ATTENTION(SUFFIX, T, TC, TO, NPER, G)                                                \
    extern "C" __global__ void paged_attention_##SUFFIX(                                           \
        TO* out, float* partial, const T* qkv, const TC* k_cache, const TC* v_cache,               \
        const u32* positions, const u32* row_seq, const u32* block_tables, int max_blocks,         \
        int block_size, int num_heads, int num_kv_heads, int head_dim, float scale,                \
        const float* k_scales, const float* v_scales, int window, const float* sinks) {            \
        pdl_start();                                                                               \
        attention_impl<T, TC, TO, NPER, G, false>(out, partial, qkv, k_cache, v_cache, positions,  \
                                                  row_seq, block_tables, max_blocks, block_size,   \
                                                  num_heads, num_kv_heads, head_dim, scale,        \
                                                  k_scales, v_scales, window, sinks);              \
    }                                                                                              \
    extern "C" __global__ void paged_attention_split_##SUFFIX(                                     \
        TO* out, float* partial, const T* qkv, const TC* k_cache, const TC* v_cache,               \
        const u32* positions, const u32* row_seq, const u32* block_tables, int max_blocks,         \
        int block_size, int num_heads, int num_kv_heads, int head_dim, float scale,                \
        const float* k_scales, const float* v_scales, int window, const float* sinks) {            \
        pdl_start();                                                                               \
        attention_impl<T, TC, TO, NPER, G, true>(out, partial, qkv, k_cache, v_cache, positions,   \
                                                 row_seq, block_tables, max_blocks, block_size,    \
                                                 num_heads, num_kv_heads, head_dim, scale,         \
                                                 k_scales, v_scales, window, sinks);               \
    }

// Head groups G with G · NPER <= 32 (the registers of q and the accumulators).
#define PAGED_ATTENTION_GROUPS(TS, T, TC, TO, D, NPER)                                             \
    PAGED_ATTENTION(TS##_d##D##_g1, T, TC, TO, NPER, 1)                                            \
    PAGED_ATTENTION(TS##_d##D##_g2, T, TC, TO, NPER, 2)                                            \
    PAGED_ATTENTION(TS##_d##D##_g4, T, TC, TO, NPER, 4)

PAGED_ATTENTION_GROUPS(f32, float, bf16, bf16, 32, 1)
PAGED_ATTENTION_GROUPS(f32, float, bf16, bf16, 64, 2)
PAGED_ATTENTION_GROUPS(f32, float, bf16, bf16, 128, 4)
PAGED_ATTENTION_GROUPS(f32, float, bf16, bf16, 256, 8)
PAGED_ATTENTION_GROUPS(bf16, bf16, bf16, bf16, 32, 1)
PAGED_ATTENTION_GROUPS(bf16, bf16, bf16, bf16, 64, 2)
PAGED_ATTENTION_GROUPS(bf16, bf16, bf16, bf16, 128, 4)
PAGED_ATTENTION_GROUPS(bf16, bf16, bf16, bf16, 256, 8)
PAGED_ATTENTION_GROUPS(fp32, float, float, float, 32, 1)
PAGED_ATTENTION_GROUPS(fp32, float, float, float, 64, 2)
PAGED_ATTENTION_GROUPS(fp32, float, float, float, 128, 4)
PAGED_ATTENTION_GROUPS(fp32, float, float, float, 256, 8)
// The FP8 cache (`_kv8`), for head dims the tensor-core kernel does not take.
PAGED_ATTENTION_GROUPS(f32_kv8, float, unsigned char, bf16, 32, 1)
PAGED_ATTENTION_GROUPS(f32_kv8, float, unsigned char, bf16, 64, 2)
PAGED_ATTENTION_GROUPS(f32_kv8, float, unsigned char, bf16, 128, 4)
PAGED_ATTENTION_GROUPS(f32_kv8, float, unsigned char, bf16, 256, 8)
PAGED_ATTENTION_GROUPS(bf16_kv8, bf16, unsigned char, bf16, 32, 1)
PAGED_ATTENTION_GROUPS(bf16_kv8, bf16, unsigned char, bf16, 64, 2)
PAGED_ATTENTION_GROUPS(bf16_kv8, bf16, unsigned char, bf16, 128, 4)
PAGED_ATTENTION_GROUPS(bf16_kv8, bf16, unsigned char, bf16, 256, 8)

// The same attention with 16-byte loads, for head_dim D = 64, 128 or 256 exactly (a bf16 cache):
// LPK = D / 8 lanes hold one key (8 dims a lane), so a warp reads KPW = 32 / LPK keys a step,
// each lane with one 16-byte load of k and one of v, instead of one key a step in 2-byte loads.
// A key's dot product is reduced across its LPK lanes (xor shuffles within the lane group).
// Every lane group keeps its own online-softmax state; the ATTN_WARPS · KPW states are merged at
// the end as in attention_impl. Steps where some groups have no key run uniformly (their score
// is -inf, weight 0), so the shuffles never diverge.
template <typename T, int D, int G, bool PARTIAL>
__device__ void attention_vec_impl(bf16* out, float* partial, const T* qkv, const bf16* k_cache,
                                   const bf16* v_cache, const u32* positions, const u32* row_seq,
                                   const u32* block_tables, int max_blocks, int block_size,
                                   int num_heads, int num_kv_heads, float scale, int window,
                                   const float* sinks) {
    constexpr int LPK = D / 8;
    constexpr int KPW = 32 / LPK;
    constexpr int STATES = ATTN_WARPS * KPW;
    __shared__ float part_m[STATES][G], part_l[STATES][G];
    __shared__ float part_acc[STATES][G][D];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int sub = lane / LPK, sl = lane % LPK;
    const int state = warp * KPW + sub;
    // Block x = row · (nh / G) + head group: a row's head groups are neighbouring blocks, so
    // they run together and read the kv heads of each cached token side by side (one token's
    // heads are contiguous in the cache) rather than 256-byte pieces of it at different times.
    const int head_groups = num_heads / G;
    const u64 row = blockIdx.x / head_groups;
    const int head0 = (int)(blockIdx.x % head_groups) * G;
    const int kv_head = head0 / (num_heads / num_kv_heads);
    const u64 width = (u64)(num_heads + 2 * num_kv_heads) * D;
    const u32* table = block_tables + (u64)row_seq[row] * max_blocks;
    const int len = (int)positions[row] + 1;
    // A sliding window (window > 0) starts the key loop at the row's first visible key, so the
    // keys before it are never read.
    const int key0 = window > 0 ? max(0, len - window) : 0;
    // Split-K: the row's own range [key0, len) cut evenly into gridDim.z slices, so a row's
    // result depends only on its length and the split count (not on the batch's longest row).
    const int per_split = PARTIAL ? (len - key0 + (int)gridDim.z - 1) / (int)gridDim.z : 0;
    const int begin = key0 + (PARTIAL ? (int)blockIdx.z * per_split : 0);
    const int end = PARTIAL ? min(len, begin + per_split) : len;

    float qr[G][8], acc[G][8], m[G], l[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        const T* q = qkv + row * width + (u64)(head0 + g) * D + sl * 8;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            qr[g][j] = to_f32(q[j]);
            acc[g][j] = 0.f;
        }
        m[g] = NEG_INF;
        l[g] = 0.f;
    }
    // Two keys a state an iteration (p and p + STATES), and the next iteration's pair loaded
    // before this one's is used (registers double-buffered): a warp always has 2-4 16-byte
    // loads a lane in flight, even while it computes. The pair shares one rescale of the
    // running state (three exponentials for two keys instead of four). Every K/V byte is read
    // by exactly one block, so the loads bypass L1.
    const int step = 2 * STATES;
    bool nvalid[2];
    u32x4 nk[2], nv[2];
    auto fetch = [&](int q0) {
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            const int pu = q0 + u * STATES + sub;
            nvalid[u] = pu < end;
            nk[u] = nv[u] = u32x4{0u, 0u, 0u, 0u};
            if (nvalid[u]) {
                const u64 base = (((u64)table[pu / block_size] * block_size + pu % block_size) *
                                      num_kv_heads + kv_head) * D + sl * 8;
                nk[u] = load_stream((const u32x4*)(k_cache + base));
                nv[u] = load_stream((const u32x4*)(v_cache + base));
            }
        }
    };
    fetch(begin + warp * KPW);
    for (int p0 = begin + warp * KPW; p0 < end; p0 += step) {
        bool valid[2];
        u32x4 kv[2], vv[2];
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            valid[u] = nvalid[u];
            kv[u] = nk[u];
            vv[u] = nv[u];
        }
        if (p0 + step < end) fetch(p0 + step);
        float s[2][G];
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            const float kf[8] = {lo(kv[u].x), hi(kv[u].x), lo(kv[u].y), hi(kv[u].y),
                                 lo(kv[u].z), hi(kv[u].z), lo(kv[u].w), hi(kv[u].w)};
#pragma unroll
            for (int g = 0; g < G; ++g) {
                float d = 0.f;
#pragma unroll
                for (int j = 0; j < 8; ++j) d = fmaf(qr[g][j], kf[j], d);
                s[u][g] = d;
            }
        }
#pragma unroll
        for (int o = LPK / 2; o > 0; o >>= 1)
#pragma unroll
            for (int u = 0; u < 2; ++u)
#pragma unroll
                for (int g = 0; g < G; ++g) s[u][g] += __shfl_xor_sync(0xffffffffu, s[u][g], o);
        const float v0[8] = {lo(vv[0].x), hi(vv[0].x), lo(vv[0].y), hi(vv[0].y),
                             lo(vv[0].z), hi(vv[0].z), lo(vv[0].w), hi(vv[0].w)};
        const float v1[8] = {lo(vv[1].x), hi(vv[1].x), lo(vv[1].y), hi(vv[1].y),
                             lo(vv[1].z), hi(vv[1].z), lo(vv[1].w), hi(vv[1].w)};
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const float s0 = valid[0] ? s[0][g] * scale : NEG_INF;
            const float s1 = valid[1] ? s[1][g] * scale : NEG_INF;
            const float m_new = fmaxf(m[g], fmaxf(s0, s1));
            // No key yet in this state (m_new = -inf): keep it empty.
            const bool empty = m_new == NEG_INF;
            const float correction = empty ? 1.f : expf(m[g] - m_new);
            const float w0 = empty ? 0.f : expf(s0 - m_new);
            const float w1 = empty ? 0.f : expf(s1 - m_new);
            l[g] = l[g] * correction + w0 + w1;
#pragma unroll
            for (int j = 0; j < 8; ++j)
                acc[g][j] = fmaf(w1, v1[j], fmaf(w0, v0[j], acc[g][j] * correction));
            m[g] = m_new;
        }
    }

#pragma unroll
    for (int g = 0; g < G; ++g) {
        if (sl == 0) {
            part_m[state][g] = m[g];
            part_l[state][g] = l[g];
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) part_acc[state][g][sl * 8 + j] = acc[g][j];
    }
    __syncthreads();

    merge_attention_states<STATES, G, D, PARTIAL, false>(part_m, part_l, part_acc, G, head0, row,
                                                         num_heads, D, out, partial, sinks);
}

#define PAGED_ATTENTION_VEC(SUFFIX, T, D, G)                                                       \
    extern "C" __global__ void paged_attention_vec_##SUFFIX(                                       \
        bf16* out, float* partial, const T* qkv, const bf16* k_cache, const bf16* v_cache,         \
        const u32* positions, const u32* row_seq, const u32* block_tables, int max_blocks,         \
        int block_size, int num_heads, int num_kv_heads, int head_dim, float scale,                \
        const float*, const float*, int window, const float* sinks) {                              \
        pdl_start();                                                                               \
        attention_vec_impl<T, D, G, false>(out, partial, qkv, k_cache, v_cache, positions,         \
                                           row_seq, block_tables, max_blocks, block_size,          \
                                           num_heads, num_kv_heads, scale, window, sinks);         \
    }                                                                                              \
    extern "C" __global__ void paged_attention_vec_split_##SUFFIX(                                 \
        bf16* out, float* partial, const T* qkv, const bf16* k_cache, const bf16* v_cache,         \
        const u32* positions, const u32* row_seq, const u32* block_tables, int max_blocks,         \
        int block_size, int num_heads, int num_kv_heads, int head_dim, float scale,                \
        const float*, const float*, int window, const float* sinks) {                              \
        pdl_start();                                                                               \
        attention_vec_impl<T, D, G, true>(out, partial, qkv, k_cache, v_cache, positions,          \
                                          row_seq, block_tables, max_blocks, block_size,           \
                                          num_heads, num_kv_heads, scale, window, sinks);          \
    }

#define PAGED_ATTENTION_VEC_GROUPS(TS, T, D)                                                       \
    PAGED_ATTENTION_VEC(TS##_d##D##_g1, T, D, 1)                                                   \
    PAGED_ATTENTION_VEC(TS##_d##D##_g2, T, D, 2)                                                   \
    PAGED_ATTENTION_VEC(TS##_d##D##_g4, T, D, 4)

PAGED_ATTENTION_VEC_GROUPS(f32, float, 64)
PAGED_ATTENTION_VEC_GROUPS(f32, float, 128)
PAGED_ATTENTION_VEC_GROUPS(f32, float, 256)
PAGED_ATTENTION_VEC_GROUPS(bf16, bf16, 64)
PAGED_ATTENTION_VEC_GROUPS(bf16, bf16, 128)
PAGED_ATTENTION_VEC_GROUPS(bf16, bf16, 256)

// Split-K epilogue: one block per (row, head) combines the `splits` partial states of
// paged_attention_split (out = Σ acc_s·e^(m_s - M) / Σ l_s·e^(m_s - M), M = max m_s) and writes
// bf16. Split 0 always holds the row's first key, so M is finite and the sum positive. With
// sinks (gpt-oss), head h's sinks[h] joins as one more state of l = 1 and no value. Every load
// is issued at once: a thread a split loads the splits' m and l, and each thread its dimension's acc of
// every split (up to ATTN_MERGE_MAX_SPLITS registers); then the weights e^(m_s - M), and each
// dimension adds its splits' terms in split order. The first version looped over the splits
// three times, a dependent load at a time, and took 21 µs at 64 splits on the H200 (10 µs for
// the attention itself). Every sum is taken in the first version's order with the same
// operations: the same output bit for bit.
#define ATTN_MERGE_MAX_SPLITS 64  // attention.rs MAX_SPLITS

// acc of every split for dimension d (registers: the loop is unrolled to the most splits).
template <int MAXS>
__device__ __forceinline__ void merge_terms(float (&a)[MAXS], const float* st, int stride,
                                            int splits, int d) {
#pragma unroll
    for (int s = 0; s < MAXS; ++s)
        if (s < splits) a[s] = st[(u64)s * stride + 2 + d];
}

// The merge for at most MAXS splits (the kernel takes 8 for short rows: fewer registers and
// shorter unrolled loops; 4 splits took 4.8 µs on the 64-split code against 3.8 before).
template <int MAXS, typename TO>
__device__ void attention_merge_body(TO* out, const float* partial, int num_heads, int head_dim,
                                     int splits, const float* sinks, float* ms, float* ls,
                                     float* ws) {
    const u64 row = blockIdx.x;
    const int head = blockIdx.y, stride = head_dim + 2, d0 = threadIdx.x;
    const float* st = partial + (row * num_heads + head) * (u64)splits * stride;
    float a[MAXS];
    if (d0 < head_dim) merge_terms<MAXS>(a, st, stride, splits, d0);
    for (int s = threadIdx.x; s < splits; s += blockDim.x) {
        ms[s] = st[(u64)s * stride];
        ls[s] = st[(u64)s * stride + 1];
    }
    __syncthreads();
    float m_all = NEG_INF;
    for (int s = 0; s < splits; ++s) m_all = fmaxf(m_all, ms[s]);
    // A sink (gpt-oss; null: none) is one more state: m = sinks[head], l = 1, no value.
    if (sinks != nullptr) m_all = fmaxf(m_all, sinks[head]);
    for (int s = threadIdx.x; s < splits; s += blockDim.x) ws[s] = expf(ms[s] - m_all);
    __syncthreads();
    float l_all = 0.f;
    for (int s = 0; s < splits; ++s) l_all += ms[s] == NEG_INF ? 0.f : ls[s] * ws[s];
    if (sinks != nullptr) l_all += expf(sinks[head] - m_all);
    const float inv_l = 1.0f / l_all;
    TO* o = out + row * ((u64)num_heads * head_dim) + (u64)head * head_dim;
    for (int d = d0; d < head_dim; d += blockDim.x) {
        if (d != d0) merge_terms<MAXS>(a, st, stride, splits, d);
        float sum = 0.f;
#pragma unroll
        for (int s = 0; s < MAXS; ++s)
            if (s < splits && ms[s] != NEG_INF) sum += a[s] * ws[s];
        o[d] = from_f32<TO>(sum * inv_l);
    }
}

template <typename TO>
__device__ void attention_merge_impl(TO* out, const float* partial, int num_heads, int head_dim,
                                     int splits, const float* sinks) {
    __shared__ float ms[ATTN_MERGE_MAX_SPLITS], ls[ATTN_MERGE_MAX_SPLITS], ws[ATTN_MERGE_MAX_SPLITS];
    if (splits <= 8)
        attention_merge_body<8>(out, partial, num_heads, head_dim, splits, sinks, ms, ls, ws);
    else
        attention_merge_body<ATTN_MERGE_MAX_SPLITS>(out, partial, num_heads, head_dim, splits,
                                                    sinks, ms, ls, ws);
}

extern "C" __global__ void attention_merge(bf16* out, const float* partial, int num_heads,
                                           int head_dim, int splits, const float* sinks) {
    pdl_start();
    attention_merge_impl(out, partial, num_heads, head_dim, splits, sinks);
}

extern "C" __global__ void attention_merge_fp32(float* out, const float* partial, int num_heads,
                                                int head_dim, int splits, const float* sinks) {
    pdl_start();
    attention_merge_impl(out, partial, num_heads, head_dim, splits, sinks);
}
