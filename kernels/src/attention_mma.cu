// Paged attention on tensor cores (mma.sync m16n8k16, bf16 in, f32 accumulate): the decode
// kernel for head_dim 64 or 128 on sm_80 and newer, in a module of its own so an older GPU that
// cannot compile it still gets attention.cu's kernels.
//
// Why: attention.cu's CUDA-core kernel spends about 400 instructions a warp on every 2 KB of keys
// and values (dot products, shuffles, exponentials, the weighted sum, one head of the GQA group
// at a time) and reads the cache at 2.2–2.4 TB/s at 128 sequences: it is issue-bound. Here the
// two products of a 16-key tile are 2·D/16 + D/8 mma instructions for every head of the group at
// once, about 200 instructions a warp for 8 KB.
//
// Layout. A block of MMA_WARPS warps owns one (token row, kv head) and all `group` q heads that
// share the kv head (group = nh / nkv, at most 16): they are the rows of the mma's 16-row A
// operand (rows past the group are zero). Warp w takes the 16-key tiles w, w + MMA_WARPS, ... of
// the row's causal range with its own online softmax, and the warps' states are merged through
// shared memory at the end, as in attention.cu (split-K: the same partial states and the same
// attention_merge). Lane (g = lane / 4, t = lane % 4) holds, per the mma fragment layouts,
//   S = Q·Kᵀ (A = Q [16 heads × 16 dims], B = Kᵀ [16 dims × 8 keys]): scores of heads g and
//     g + 8 for keys 2t, 2t + 1 of each 8-key half of the tile, the softmax rows it keeps;
//   Oᵀ = Vᵀ·Pᵀ (A = Vᵀ [16 dims × 16 keys], B = Pᵀ [16 keys × 8 heads], straight from S's
//     accumulators): dims × heads, so the accumulators are D/16 tiles, not D/8 tiles with half
//     their rows empty, and a group of up to 8 heads takes D/16 products a tile.
// Nothing is staged through shared memory: the sum over head_dim does not depend on the order of
// the dims, so the k index of each q·k step is permuted to match what one 16-byte load of a key
// gives a lane (dims 32c + 8t .. 32c + 8t + 7 of key g: step 2c takes the first four, step
// 2c + 1 the last four; q is loaded in the same order), and the output dims are permuted so a
// lane loads D/8 consecutive dims of four keys (rows g and g + 8 of Oᵀ tile j are dims
// D/8 · g + j and D/8 · g + D/16 + j), undone when the accumulators go to shared memory. Keys
// past the row's end are masked (score -inf, value zeroed: a stale slot may hold anything).
//
// Precision: the products take bf16 operands, so a weight p goes in as two bf16 terms, p_hi =
// bf16(p) and p_lo = bf16(p - p_hi) (two mma instructions a tile for P·V instead of one): p is
// carried to about 2^-17 of itself rather than bf16's 2^-9, which on short rows of small outputs
// was ten times the kernel's tolerance. An f32 q is split the same way; a bf16 q is exact.
//
// An FP8 cache (`_kv8`, see prelude/fp8.cuh): a lane loads 8 bytes where a bf16 cache gives it 16
// and widens them to bf16 exactly (e4m3 has 4 significant bits), so the products are unchanged;
// each key's scale multiplies its scores before the softmax and each value's scale the weights
// given to Oᵀ += Vᵀ·Pᵀ (the running sum l keeps the plain weights). The scales come from the
// clamped keys, so a masked key's weight stays 0.
//
// A sliding window (`window` > 0) starts the tile loop at the window's first 16-key tile and
// masks the keys of that tile before it; sinks (null: none) join the softmax denominator in
// merge_attention_states or attention_merge, as in attention.cu.
//
// Symbols: paged_attention_mma[_split]_<qkv dtype>[_kv8]_d<D>[_wide] (_wide: groups of 9 to 16
// heads, which use the A operand's upper 8 rows too).

#define MMA_WARPS 4

// One online-softmax update for one A row (head) of a lane: s = its four scores of the tile
// (already scaled to log2 units, -inf where masked), m/l its running max and (lane-partial) sum.
// Returns the correction for the accumulators and leaves the weights in pa (keys 2t, 2t+1) and
// pb (keys 8 + 2t, 8 + 2t + 1) as bf16 pairs, and their rounding errors in pa_lo and pb_lo.
// With an FP8 cache (SCALED), the weights given to the products are p times the value scales vs
// of their keys (the sum l is of the plain weights).
template <bool SCALED>
__device__ __forceinline__ float softmax_row(const float s[4], float& m, float& l, u32& pa,
                                             u32& pb, u32& pa_lo, u32& pb_lo,
                                             const float (&vs)[4]) {
    const float m_new = fmaxf(m, quad_max(fmaxf(fmaxf(s[0], s[1]), fmaxf(s[2], s[3]))));
    // Every tile has a visible key (a window's first tile holds key0, the others start past
    // it), so m_new is finite; 2^(-inf - m_new) = 0 on the first.
    const float corr = exp2_fast(m - m_new);
    const float p0 = exp2_fast(s[0] - m_new), p1 = exp2_fast(s[1] - m_new);
    const float p2 = exp2_fast(s[2] - m_new), p3 = exp2_fast(s[3] - m_new);
    l = l * corr + ((p0 + p1) + (p2 + p3));
    m = m_new;
    const float w0 = SCALED ? p0 * vs[0] : p0, w1 = SCALED ? p1 * vs[1] : p1;
    const float w2 = SCALED ? p2 * vs[2] : p2, w3 = SCALED ? p3 * vs[3] : p3;
    pa = pack_bf16(w0, w1);
    pb = pack_bf16(w2, w3);
    // What bf16 lost, as a second bf16 pair: hi + lo carries a weight to 2^-17 of itself.
    pa_lo = pack_bf16(w0 - lo(pa), w1 - hi(pa));
    pb_lo = pack_bf16(w2 - lo(pb), w3 - hi(pb));
    return corr;
}

// Head h's q (from `q0`, head 0 of the group, already offset by the lane's 8t dims) as the A
// fragments of the 2·KC q·k steps in the permuted k order; zeros for a head past the group.
template <typename T, int KC>
__device__ __forceinline__ void load_q(u32 (&dst)[2 * KC][2], u32 (&dst_lo)[2 * KC][2],
                                       const T* q0, int h, int group) {
    const bool valid = h < group;
    const T* q = q0 + (u64)(valid ? h : 0) * (KC * 32);
#pragma unroll
    for (int c = 0; c < KC; ++c) {
        float v[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = valid ? to_f32(q[32 * c + j]) : 0.f;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const float* w = v + 4 * half;
            u32(&d)[2] = dst[2 * c + half];
            d[0] = pack_bf16(w[0], w[1]);
            d[1] = pack_bf16(w[2], w[3]);
            // The rounding error, for an f32 q (zero for a bf16 one, and then unused).
            dst_lo[2 * c + half][0] = pack_bf16(w[0] - lo(d[0]), w[1] - hi(d[0]));
            dst_lo[2 * c + half][1] = pack_bf16(w[2] - lo(d[1]), w[3] - hi(d[1]));
        }
    }
}

// o[j] columns 2t and 2t + 1 are heads 2t and 2t + 1 (+ 8 for the wide half), whose softmax
// rows live in lanes 4·2t and 4·(2t + 1): scale each by its head's correction.
template <int MT>
__device__ __forceinline__ void rescale(float (&o)[MT][4], float corr, int t) {
    const float even = __shfl_sync(0xffffffffu, corr, 8 * t);
    const float odd = __shfl_sync(0xffffffffu, corr, 8 * t + 4);
#pragma unroll
    for (int j = 0; j < MT; ++j) {
        o[j][0] *= even;
        o[j][1] *= odd;
        o[j][2] *= even;
        o[j][3] *= odd;
    }
}

// Element e (0 .. D/8) of two keys' dims as a bf16 pair (key a's in the low half).
template <int VC>
__device__ __forceinline__ u32 key_pair(const u32x4 (&a)[VC], const u32x4 (&b)[VC], int e) {
    const u32x4& ca = a[e / 8];
    const u32x4& cb = b[e / 8];
    const int word = (e % 8) / 2;
    const u32 wa = word == 0 ? ca.x : word == 1 ? ca.y : word == 2 ? ca.z : ca.w;
    const u32 wb = word == 0 ? cb.x : word == 1 ? cb.y : word == 2 ? cb.z : cb.w;
    return (e & 1) ? pair_halves<true>(wa, wb) : pair_halves<false>(wa, wb);
}

template <typename T, typename TC, int D, bool WIDE, bool PARTIAL>
__device__ void attention_mma_impl(bf16* out, float* partial, const T* qkv, const TC* k_cache,
                                   const TC* v_cache, const u32* positions, const u32* row_seq,
                                   const u32* block_tables, int max_blocks, int block_size,
                                   int num_heads, int num_kv_heads, float scale,
                                   const float* k_scales, const float* v_scales, int window,
                                   const float* sinks) {
    // An FP8 cache (TC = unsigned char): keys and values are loaded as e4m3 bytes (half the
    // bytes of bf16) and widened to bf16 exactly; a key's scale multiplies its scores, a value's
    // scale its weights (one scale a head vector: D <= 128 is one group).
    constexpr bool FP8 = sizeof(TC) == 1;
    constexpr int KC = D / 32;  // 16-byte chunks of a key a lane loads (one per q·k step pair)
    constexpr int NT = D / 8;   // output tiles of 8 dims; also the dims of a key a lane loads
    constexpr int VC = D / 64;  // 16-byte chunks of those dims
    constexpr int MT = D / 16;  // Oᵀ tiles of 16 dims
    constexpr int ROWS = WIDE ? 16 : 8;
    __shared__ float part_m[MMA_WARPS][ROWS], part_l[MMA_WARPS][ROWS];
    __shared__ float part_acc[MMA_WARPS][ROWS][D];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int group = num_heads / num_kv_heads;
    const u64 row = blockIdx.x / num_kv_heads;
    const int kv_head = (int)(blockIdx.x % num_kv_heads);
    const int head0 = kv_head * group;
    const u64 width = (u64)(num_heads + 2 * num_kv_heads) * D;
    const u32* table = block_tables + (u64)row_seq[row] * max_blocks;
    const int len = (int)positions[row] + 1;
    // A sliding window (window > 0): the row sees keys [key0, len). Tiles start at the multiple
    // of 16 at or below lo (a tile stays inside one cache block), so the keys of the first
    // tile below key0 are masked and none before it are read.
    const int key0 = window > 0 ? max(0, len - window) : 0;
    const int first = key0 & ~15;
    // Split-K: slices of [first, len), a multiple of 16 keys each so tiles never straddle two
    // slices; a slice past the end is empty and writes an empty state.
    int begin = first, end = len;
    if (PARTIAL) {
        const int per = ((len - first + (int)gridDim.z - 1) / (int)gridDim.z + 15) & ~15;
        begin = min(len, first + (int)blockIdx.z * per);
        end = min(len, begin + per);
    }
    // A key p is visible when key0 <= p < end: one unsigned compare (p - key0 wraps below key0).
    const u32 span = (u32)(end - key0);

    // q of heads g and g + 8 as A fragments, in the permuted k order (see the header).
    u32 qa[2 * KC][2], qb[2 * KC][2], qa_lo[2 * KC][2], qb_lo[2 * KC][2];
    const T* q0 = qkv + row * width + (u64)head0 * D + 8 * t;
    load_q<T, KC>(qa, qa_lo, q0, g, group);
    if (WIDE) load_q<T, KC>(qb, qb_lo, q0, g + 8, group);
    constexpr bool Q_LO = sizeof(T) == 4;

    const float scale_log2 = scale * 1.4426950408889634f;
    // Oᵀ for heads 0-7 (o) and 8-15 (o2): o[j] = Oᵀ rows (dims) dim(j, g), dim(j, g + 8),
    // columns (heads) 2t, 2t + 1.
    float o[MT][4], o2[MT][4];  // o2 unused (and compiled away) unless WIDE
#pragma unroll
    for (int j = 0; j < MT; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
#pragma unroll
    for (int j = 0; j < MT; ++j) o2[j][0] = o2[j][1] = o2[j][2] = o2[j][3] = 0.f;
    float m0 = NEG_INF, l0 = 0.f, m1 = NEG_INF, l1 = 0.f;
    // A tile inside one cache block (block_size a multiple of 16; tiles start at multiples of
    // 16): one table lookup a tile.
    const bool aligned = (block_size & 15) == 0;
    for (int base = begin + 16 * warp; base < end; base += 16 * MMA_WARPS) {
        const u64 tile_slot =
            aligned ? (u64)table[base / block_size] * block_size + base % block_size : 0;
        // The cache offset of key `p` of this tile (p < end: the caller clamps).
        auto at = [&](int p) -> u64 {
            const u64 slot = aligned ? tile_slot + (u64)(p - base)
                                     : (u64)table[p / block_size] * block_size + p % block_size;
            return (slot * num_kv_heads + kv_head) * D;
        };
        // Keys g and 8 + g for q·k; keys 2t, 2t + 1, 2t + 8, 2t + 9 for the weighted sum. All
        // loads are issued before any is used.
        u32x4 kc[2][KC], vc[4][VC];
        // FP8: keys 2t, 2t + 1, 2t + 8, 2t + 9 (the lane's scores and weights) scale factors.
        float ks[4], vs[4];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const TC* kp = k_cache + at(min(base + 8 * i + g, end - 1)) + 8 * t;
#pragma unroll
            for (int c = 0; c < KC; ++c) {
                if constexpr (FP8)
                    kc[i][c] = e4m3x8_to_bf16x8(load_stream8((const u32x2*)(kp + 32 * c)));
                else
                    kc[i][c] = load_stream((const u32x4*)(kp + 32 * c));
            }
        }
        bool v_ok[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int p = base + 2 * t + (r & 1) + 8 * (r >> 1);
            v_ok[r] = (u32)(p - key0) < span;
            const u64 off = at(min(p, end - 1));
            const TC* vp = v_cache + off + NT * g;
#pragma unroll
            for (int c = 0; c < VC; ++c) {
                if constexpr (FP8)
                    vc[r][c] = e4m3x8_to_bf16x8(load_stream8((const u32x2*)(vp + 8 * c)));
                else
                    vc[r][c] = load_stream((const u32x4*)(vp + 8 * c));
            }
            if constexpr (FP8) {
                ks[r] = k_scales[off / D];
                vs[r] = v_scales[off / D];
            } else {
                ks[r] = vs[r] = 1.f;
            }
        }

        // S = Q·Kᵀ for keys 0-7 (i = 0) and 8-15 (i = 1) of the tile.
        float s[2][4];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
            for (int st = 0; st < 2 * KC; ++st) {
                const u32 b0 = st & 1 ? kc[i][st / 2].z : kc[i][st / 2].x;
                const u32 b1 = st & 1 ? kc[i][st / 2].w : kc[i][st / 2].y;
                mma_bf16(s[i], qa[st][0], WIDE ? qb[st][0] : 0u, qa[st][1], WIDE ? qb[st][1] : 0u,
                         b0, b1);
                if (Q_LO)
                    mma_bf16(s[i], qa_lo[st][0], WIDE ? qb_lo[st][0] : 0u, qa_lo[st][1],
                             WIDE ? qb_lo[st][1] : 0u, b0, b1);
            }
        }
        // Scale, mask, and the softmax update of rows g (s[.][0..1]) and g + 8 (s[.][2..3]).
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                if constexpr (FP8) s[i][j] *= ks[2 * i + (j & 1)];
                s[i][j] = (u32)(base + 8 * i + 2 * t + (j & 1) - key0) < span ? s[i][j] * scale_log2
                                                                             : NEG_INF;
            }
        // P as the B operand of Oᵀ += Vᵀ·Pᵀ: column (head) g is this lane's softmax row.
        u32 pa0, pb0, pa1 = 0u, pb1 = 0u, la0, lb0, la1 = 0u, lb1 = 0u;
        const float r0[4] = {s[0][0], s[0][1], s[1][0], s[1][1]};
        const float c0 = softmax_row<FP8>(r0, m0, l0, pa0, pb0, la0, lb0, vs);
        rescale<MT>(o, c0, t);
        if (WIDE) {
            const float r1[4] = {s[0][2], s[0][3], s[1][2], s[1][3]};
            const float c1 = softmax_row<FP8>(r1, m1, l1, pa1, pb1, la1, lb1, vs);
            rescale<MT>(o2, c1, t);
        }
        // Masked keys' values are zeroed: their weight is 0, but 0 · NaN is not.
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int c = 0; c < VC; ++c)
                if (!v_ok[r]) vc[r][c] = u32x4{0u, 0u, 0u, 0u};
        // Oᵀ += Vᵀ·Pᵀ, 16 dims at a time: A rows g and g + 8 of tile j are dims dim(j, g) =
        // NT·g + j and NT·g + MT + j (the lane's own dims, e = j and MT + j of its loads), A
        // columns (k) its four keys.
#pragma unroll
        for (int j = 0; j < MT; ++j) {
            const u32 a0 = key_pair(vc[0], vc[1], j), a1 = key_pair(vc[0], vc[1], MT + j);
            const u32 a2 = key_pair(vc[2], vc[3], j), a3 = key_pair(vc[2], vc[3], MT + j);
            mma_bf16(o[j], a0, a1, a2, a3, pa0, pb0);
            mma_bf16(o[j], a0, a1, a2, a3, la0, lb0);
            if (WIDE) {
                mma_bf16(o2[j], a0, a1, a2, a3, pa1, pb1);
                mma_bf16(o2[j], a0, a1, a2, a3, la1, lb1);
            }
        }
    }

    // Each quad's lanes summed different keys; their maxima agree.
    l0 = quad_sum(l0);
    l1 = quad_sum(l1);
    // Softmax states by head (row g, g + 8); accumulators by head 2t, 2t + 1 (+ 8 for o2).
#pragma unroll
    for (int r = 0; r < (WIDE ? 2 : 1); ++r) {
        const int h = g + 8 * r;
        if (h < group && t == 0) {
            part_m[warp][h] = r == 0 ? m0 : m1;
            part_l[warp][h] = r == 0 ? l0 : l1;
        }
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            const int head = 2 * t + c + 8 * r;
            if (head < group) {
#pragma unroll
                for (int j = 0; j < MT; ++j) {
                    const float(&acc)[4] = r == 0 ? o[j] : o2[j];
                    part_acc[warp][head][NT * g + j] = acc[c];
                    part_acc[warp][head][NT * g + MT + j] = acc[2 + c];
                }
            }
        }
    }
    __syncthreads();

    // Merge the warps (m in log2 units).
    merge_attention_states<MMA_WARPS, ROWS, D, PARTIAL, true>(part_m, part_l, part_acc, group,
                                                              head0, row, num_heads, D, out,
                                                              partial, sinks);
}

// Same arguments as attention.cu's kernels (head_dim is implied by the variant); grid x =
// row · nkv + kv head, z = splits; MMA_WARPS · 32 threads.
#define PAGED_ATTENTION_MMA(SUFFIX, T, TC, D, WIDE)                                                \
    extern "C" __global__ void paged_attention_mma_##SUFFIX(                                       \
        bf16* out, float* partial, const T* qkv, const TC* k_cache, const TC* v_cache,             \
        const u32* positions, const u32* row_seq, const u32* block_tables, int max_blocks,         \
        int block_size, int num_heads, int num_kv_heads, int head_dim, float scale,                \
        const float* k_scales, const float* v_scales, int window, const float* sinks) {            \
        pdl_start();                                                                               \
        attention_mma_impl<T, TC, D, WIDE, false>(out, partial, qkv, k_cache, v_cache, positions,  \
                                                  row_seq, block_tables, max_blocks, block_size,   \
                                                  num_heads, num_kv_heads, scale, k_scales,        \
                                                  v_scales, window, sinks);                        \
    }                                                                                              \
    extern "C" __global__ void paged_attention_mma_split_##SUFFIX(                                 \
        bf16* out, float* partial, const T* qkv, const TC* k_cache, const TC* v_cache,             \
        const u32* positions, const u32* row_seq, const u32* block_tables, int max_blocks,         \
        int block_size, int num_heads, int num_kv_heads, int head_dim, float scale,                \
        const float* k_scales, const float* v_scales, int window, const float* sinks) {            \
        pdl_start();                                                                               \
        attention_mma_impl<T, TC, D, WIDE, true>(out, partial, qkv, k_cache, v_cache, positions,   \
                                                 row_seq, block_tables, max_blocks, block_size,    \
                                                 num_heads, num_kv_heads, scale, k_scales,         \
                                                 v_scales, window, sinks);                         \
    }

#define PAGED_ATTENTION_MMA_ALL(TS, T, TC)                                                         \
    PAGED_ATTENTION_MMA(TS##_d64, T, TC, 64, false)                                                \
    PAGED_ATTENTION_MMA(TS##_d128, T, TC, 128, false)                                              \
    PAGED_ATTENTION_MMA(TS##_d64_wide, T, TC, 64, true)                                            \
    PAGED_ATTENTION_MMA(TS##_d128_wide, T, TC, 128, true)

PAGED_ATTENTION_MMA_ALL(f32, float, bf16)
PAGED_ATTENTION_MMA_ALL(bf16, bf16, bf16)
PAGED_ATTENTION_MMA_ALL(f32_kv8, float, unsigned char)
PAGED_ATTENTION_MMA_ALL(bf16_kv8, bf16, unsigned char)
