// Multi-head latent attention (DeepSeek-V2/V3's MLA), the absorbed form, over the paged cache of
// compressed rows `[num_blocks, block_size, latent + rope]` (one row a token: the normalised
// c_kv, then the rotated k_pe every head shares; the CPU reference's layout,
// engine/src/backend/cpu/mla.rs). Launchers: engine/src/backend/cuda/mla.rs.
//
//   0. mla_rope_kv_*: grid (T, ceil((heads + 1) / MLA_ROPE_WARPS)), a warp a (token, q head)
//      rotating the head's last `rope` values in place, and one more warp a token rotating the
//      latent row's k_pe and copying the whole row to its cache slot (the row as rotated and
//      rounded to the activations' type, as write_kv reads it). Interleaved pairs (x[2i],
//      x[2i + 1]) come out evens then odds, as transformers' apply_rotary_pos_emb_interleave
//      leaves them; otherwise neox halves. cos/sin as rope.cu: sincosf(inv_freq[i] · pos) in
//      f32 times the table's scale (YaRN's mscale), the CPU's arithmetic.
//   1. mla_q_absorb_*: grid (heads, ceil(T / MLA_QT)), a block a (head, up to MLA_QT tokens):
//      q_lat = W_UK[h]ᵀ · q_nope (W_UK[h] the head's `nope` rows of kv_b [heads·(nope + v),
//      latent]) in f32, written with the head's q_pe (widened) as one f32 query row
//      qf [T, heads, latent + rope]; threads stride the latent columns, so each weight row is
//      read once, coalesced, for all the block's tokens.
//   2. mla_attend_*: grid (T, ceil(heads / MLA_HG), splits), a block of MLA_HG warps a (token,
//      group of MLA_HG heads, slice of the causal range 0..=position cut evenly into `splits`).
//      Tiles of MLA_TILE cached rows are staged in shared memory (16-byte loads when the row
//      allows), each read once for the group's MLA_HG heads: warp h scores the tile's rows for
//      head h (lanes split the row, a shuffle sum; scale applied after the dot, as the CPU), and
//      keeps that head's online softmax (running max, sum); then every thread owns latent
//      columns tid and tid + 256 of all MLA_HG heads and adds the tile's weighted c_kv rows to
//      them (f32). The unnormalised state (m, l, acc[latent]) of each (token, head, split) goes
//      to `partial` [T, heads, splits, latent + 2] (an empty slice writes m = -inf, l = 0).
//   3. mla_out_*: grid (heads, ceil(T / MLA_QT)): merges each token's splits (weights
//      exp(m_s − max m), as attention_merge) into o_lat in shared memory, then out[t, h·v + j] =
//      W_UV[h][j] · o_lat (W_UV[h] the head's `v` rows after its `nope`), a warp a row j read
//      once for the block's tokens.
//
// Byte floor of a decode step (DeepSeek-V3: 128 heads, latent 512, rope 64, nope 128, v 128,
// bf16): a layer reads kv_b once (128 · 256 · 512 · 2 = 32 MiB; stages 1 and 3 read it once per
// MLA_QT tokens) plus each sequence's cached rows (1,152 bytes a token), so batch 1 at 4k of
// context is 32 MiB + 4.5 MiB ≈ 11 µs a layer at 3.35 TB/s (H100). Stage 2 reads each row once a
// head group (16 groups at 128 heads): the repeats hit L2 when the groups of a (token, split)
// run together, which the grid order (x = token, y = group) favours. Not yet measured on a GPU.
//
// Prefill: the same kernels, a block a (row, head group) over its row's whole causal range (the
// rows of a chunk re-read the cache: quadratic in the chunk, fine for the fixture sizes, the
// place a tensor-core latent kernel would go). Limits: latent <= MLA_MAX_LATENT (512),
// latent + rope <= MLA_MAX_ROW (576), rope <= 2 · 32 · MLA_ROPE_PAIRS (128), nope <= 512.
//
// Types: _bf16 (bf16 activations, bf16 weights and cache), _f32 (f32 activations, bf16 weights
// and cache) and _fp32 (the float32 path: f32 everything). mla_attend_bf16 / _fp32 / _kv8 by
// the cache type (its query rows are f32 for all), mla_out_bf16 / _fp32 by the weights (bf16
// weights write bf16 out, the float32 path f32). The FP8 cache (`--kv-cache-dtype fp8`,
// mla_rope_kv_*_kv8, mla_attend_kv8) stores c_kv and k_pe as two head vectors of the FP8
// format (prelude/fp8.cuh: e4m3 bytes, one scale a 128 values), as the CPU rounds them; the
// scales [blocks, block_size, ceil(row / 128)] follow the bytes, so the latent must be a
// multiple of 128 (DeepSeek's 512) and rope at most 128 for the two vectors' groups to be the
// row's. A tile then stages 32 rows of bytes and their scales, 576 bytes a row of V3's.
//
// Versions tried: this one (the first).

#define MLA_ROPE_WARPS 4
#define MLA_ROPE_PAIRS 2
#define MLA_QT 8
#define MLA_HG 8
#define MLA_THREADS 256
#define MLA_MAX_LATENT 512
#define MLA_MAX_ROW 576
#define MLA_MAX_NOPE 512
#define MLA_TILE_BYTES (16 * MLA_MAX_ROW * 2)

// ---- 0. rotation and cache write -------------------------------------------------------------

// Rotate x[0 .. 2·half) (one warp; lane i takes pairs i, i + 32, ...): all the warp's reads
// happen before its writes (x is rotated in place and interleaved pairs move).
template <typename T>
__device__ void mla_rotate(T* x, int half, float pos, const float* inv_freq, float scale,
                           bool interleaved) {
    const int lane = threadIdx.x & 31;
    float x1[MLA_ROPE_PAIRS], x2[MLA_ROPE_PAIRS];
#pragma unroll
    for (int k = 0; k < MLA_ROPE_PAIRS; ++k) {
        const int i = lane + 32 * k;
        if (i < half) {
            x1[k] = to_f32(x[interleaved ? 2 * i : i]);
            x2[k] = to_f32(x[interleaved ? 2 * i + 1 : i + half]);
        }
    }
    __syncwarp();
#pragma unroll
    for (int k = 0; k < MLA_ROPE_PAIRS; ++k) {
        const int i = lane + 32 * k;
        if (i < half) {
            float s, c;
            sincosf(inv_freq[i] * pos, &s, &c);
            c *= scale;
            s *= scale;
            x[i] = from_f32<T>(x1[k] * c - x2[k] * s);
            x[i + half] = from_f32<T>(x2[k] * c + x1[k] * s);
        }
    }
    __syncwarp();
}

template <typename T, typename TC>
__device__ void mla_rope_kv_impl(T* q, T* latent, TC* cache, const u32* positions,
                                 const u32* slot_mapping, const float* inv_freq, float scale,
                                 int heads, int nope, int rope, int lat, int interleaved,
                                 float* scales = nullptr) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int head = blockIdx.y * MLA_ROPE_WARPS + warp;
    if (head > heads) return;  // whole warp leaves; no block barrier below
    const u64 t = blockIdx.x;
    const float pos = (float)positions[t];
    const int half = rope / 2;
    if (head < heads) {
        T* x = q + t * (u64)heads * (nope + rope) + (u64)head * (nope + rope) + nope;
        mla_rotate(x, half, pos, inv_freq, scale, interleaved != 0);
        return;
    }
    const int row = lat + rope;
    T* kv = latent + t * (u64)row;
    mla_rotate(kv + lat, half, pos, inv_freq, scale, interleaved != 0);
    TC* dst = cache + (u64)slot_mapping[t] * row;
    if constexpr (sizeof(TC) == 1) {
        // The FP8 cache: c_kv and k_pe each stored as a head vector of their own (their own
        // group scales, as the CPU rounds them); lat % 128 == 0, so the row's scale groups
        // are c_kv's lat / 128 and k_pe's one.
        const int groups = (row + KV_FP8_GROUP - 1) / KV_FP8_GROUP;
        float* sc = scales + (u64)slot_mapping[t] * groups;
        store_head_fp8((unsigned char*)dst, sc, kv, lat);
        store_head_fp8((unsigned char*)dst + lat, sc + lat / KV_FP8_GROUP, kv + lat, rope);
    } else {
        for (int d = lane; d < row; d += 32) dst[d] = from_f32<TC>(to_f32(kv[d]));
    }
}

#define MLA_ROPE_KV(SUFFIX, T, TC)                                                                 \
    extern "C" __global__ void mla_rope_kv_##SUFFIX(                                               \
        T* q, T* latent, TC* cache, const u32* positions, const u32* slot_mapping,                 \
        const float* inv_freq, float scale, int heads, int nope, int rope, int lat,                \
        int interleaved) {                                                                         \
        pdl_start();                                                                               \
        mla_rope_kv_impl(q, latent, cache, positions, slot_mapping, inv_freq, scale, heads, nope,  \
                         rope, lat, interleaved);                                                  \
    }

MLA_ROPE_KV(bf16, bf16, bf16)
MLA_ROPE_KV(f32, float, bf16)
MLA_ROPE_KV(fp32, float, float)

// The FP8 cache (`_kv8`): e4m3 bytes [blocks, block_size, lat + rope], then the scales
// [blocks, block_size, lat / 128 + 1].
#define MLA_ROPE_KV8(SUFFIX, T)                                                                    \
    extern "C" __global__ void mla_rope_kv_##SUFFIX##_kv8(                                         \
        T* q, T* latent, unsigned char* cache, const u32* positions, const u32* slot_mapping,      \
        const float* inv_freq, float scale, int heads, int nope, int rope, int lat,                \
        int interleaved, float* scales) {                                                          \
        pdl_start();                                                                               \
        mla_rope_kv_impl(q, latent, cache, positions, slot_mapping, inv_freq, scale, heads, nope,  \
                         rope, lat, interleaved, scales);                                          \
    }

MLA_ROPE_KV8(bf16, bf16)
MLA_ROPE_KV8(f32, float)

// ---- 1. the query in the latent space -----------------------------------------------------------

template <typename T, typename TW>
__device__ void mla_q_absorb_impl(float* qf, const T* q, const TW* kv_b, int tokens, int heads,
                                  int nope, int rope, int v, int lat) {
    __shared__ float qn[MLA_QT][MLA_MAX_NOPE];
    const int h = blockIdx.x, t0 = blockIdx.y * MLA_QT;
    const int nt = min(MLA_QT, tokens - t0);
    const u64 qw = (u64)heads * (nope + rope);
    // The block's tokens' q_nope (rows past the last token zero: their sums are never written).
    for (int i = threadIdx.x; i < MLA_QT * nope; i += blockDim.x) {
        const int j = i / nope, d = i % nope;
        qn[j][d] = j < nt ? to_f32(q[(t0 + j) * qw + (u64)h * (nope + rope) + d]) : 0.f;
    }
    __syncthreads();
    const u64 row = lat + rope;
    const TW* w = kv_b + (u64)h * (nope + v) * lat;  // W_UK[h]: nope rows of lat
    for (int l = threadIdx.x; l < lat; l += blockDim.x) {
        float acc[MLA_QT];
#pragma unroll
        for (int j = 0; j < MLA_QT; ++j) acc[j] = 0.f;
        for (int d = 0; d < nope; ++d) {
            const float wv = to_f32(w[(u64)d * lat + l]);
#pragma unroll
            for (int j = 0; j < MLA_QT; ++j) acc[j] += qn[j][d] * wv;
        }
        for (int j = 0; j < nt; ++j) qf[((u64)(t0 + j) * heads + h) * row + l] = acc[j];
    }
    // The head's q_pe after its latent query, widened.
    for (int i = threadIdx.x; i < nt * rope; i += blockDim.x) {
        const int j = i / rope, d = i % rope;
        qf[((u64)(t0 + j) * heads + h) * row + lat + d] =
            to_f32(q[(t0 + j) * qw + (u64)h * (nope + rope) + nope + d]);
    }
}

#define MLA_Q_ABSORB(SUFFIX, T, TW)                                                                \
    extern "C" __global__ void __launch_bounds__(MLA_THREADS) mla_q_absorb_##SUFFIX(              \
        float* qf, const T* q, const TW* kv_b, int tokens, int heads, int nope, int rope, int v,   \
        int lat) {                                                                                 \
        pdl_start();                                                                               \
        mla_q_absorb_impl(qf, q, kv_b, tokens, heads, nope, rope, v, lat);                         \
    }

MLA_Q_ABSORB(bf16, bf16, bf16)
MLA_Q_ABSORB(f32, float, bf16)
MLA_Q_ABSORB(fp32, float, float)

// ---- 2. scores, softmax and the attended latent -------------------------------------------------

// Element d of a staged tile row j as f32: bf16 and f32 as they are, e4m3 times its group's
// scale (the FP8 cache; one rounding, the host's e4m3 · s).
__device__ __forceinline__ float mla_tile_value(const bf16* t, const float*, int at, int) {
    return to_f32(t[at]);
}
__device__ __forceinline__ float mla_tile_value(const float* t, const float*, int at, int) {
    return t[at];
}
__device__ __forceinline__ float mla_tile_value(const unsigned char* t, const float* sc, int at,
                                                int d) {
    return e4m3_value(t[at]) * sc[d / KV_FP8_GROUP];
}

template <typename TC>
__device__ void mla_attend_impl(float* partial, const float* qf, const TC* cache,
                                const u32* positions, const u32* row_seq, const u32* block_tables,
                                int max_blocks, int block_size, int heads, int rope, int lat,
                                float scale, const float* scales = nullptr) {
    // Rows a tile stages: 16 of bf16, 8 of f32, 32 of e4m3 (the same bytes).
    constexpr int TILE = MLA_TILE_BYTES / (MLA_MAX_ROW * (int)sizeof(TC));
    constexpr bool FP8 = sizeof(TC) == 1;
    // An FP8 row's group scales (lat / 128 + 1 <= MLA_MAX_ROW / 128 + 1).
    constexpr int SG = FP8 ? MLA_MAX_ROW / KV_FP8_GROUP + 1 : 1;
    __shared__ float tsc[FP8 ? TILE : 1][SG];
    __shared__ float qs[MLA_HG][MLA_MAX_ROW];
    __shared__ u32 tile_words[MLA_TILE_BYTES / 4];  // u32x4 stores are four 4-byte stores
    __shared__ float probs[MLA_HG][TILE];
    __shared__ float alpha[MLA_HG];
    TC* tile = (TC*)tile_words;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const u64 t = blockIdx.x;
    const int h0 = blockIdx.y * MLA_HG;
    const int hg = min(MLA_HG, heads - h0);
    const int row = lat + rope;
    const int splits = gridDim.z;
    const int len = (int)positions[t] + 1;  // causal: rows 0..=position
    const int per_split = (len + splits - 1) / splits;
    const int begin = blockIdx.z * per_split;
    const int end = min(len, begin + per_split);
    const u32* table = block_tables + (u64)row_seq[t] * max_blocks;
    for (int i = threadIdx.x; i < hg * row; i += blockDim.x)
        qs[i / row][i % row] = qf[(t * heads + h0 + i / row) * (u64)row + i % row];
    // Warp h's softmax state for head h0 + h (every lane holds it).
    float m = NEG_INF, l = 0.f;
    // acc[h][k]: latent column threadIdx.x + MLA_THREADS · k of head h0 + h.
    float acc[MLA_HG][2];
#pragma unroll
    for (int h = 0; h < MLA_HG; ++h) acc[h][0] = acc[h][1] = 0.f;
    // 16-byte loads when a row is whole 16-byte chunks (then every row starts on one).
    const int chunk = 16 / (int)sizeof(TC);
    const bool vec = row % chunk == 0;
    const int groups = (row + KV_FP8_GROUP - 1) / KV_FP8_GROUP;
    for (int p0 = begin; p0 < end; p0 += TILE) {
        const int n = min(TILE, end - p0);
        __syncthreads();  // the previous tile's readers are done (and qs is written)
        if constexpr (FP8) {
            for (int i = threadIdx.x; i < n * groups; i += blockDim.x) {
                const int j = i / groups, p = p0 + j;
                const u64 slot = (u64)table[p / block_size] * block_size + p % block_size;
                tsc[j][i % groups] = scales[slot * groups + i % groups];
            }
        }
        if (vec) {
            const int per_row = row / chunk;
            for (int i = threadIdx.x; i < n * per_row; i += blockDim.x) {
                const int j = i / per_row, c = i % per_row;
                const int p = p0 + j;
                const u64 slot = (u64)table[p / block_size] * block_size + p % block_size;
                ((u32x4*)(tile + j * row))[c] = load_stream((const u32x4*)(cache + slot * row) + c);
            }
        } else {
            for (int i = threadIdx.x; i < n * row; i += blockDim.x) {
                const int j = i / row, d = i % row;
                const int p = p0 + j;
                const u64 slot = (u64)table[p / block_size] * block_size + p % block_size;
                tile[j * row + d] = cache[slot * row + d];
            }
        }
        __syncthreads();
        if (warp < hg) {
            // Head h0 + warp: the tile's scores, then its online softmax.
            float s[TILE];
            float tile_max = NEG_INF;
#pragma unroll
            for (int j = 0; j < TILE; ++j) {
                float dot = 0.f;
                if (j < n) {
                    for (int d = lane; d < row; d += 32)
                        dot += qs[warp][d] * mla_tile_value(tile, tsc[FP8 ? j : 0], j * row + d, d);
                }
                dot = warp_sum(dot);
                s[j] = j < n ? dot * scale : NEG_INF;
                tile_max = fmaxf(tile_max, s[j]);
            }
            const float m_new = fmaxf(m, tile_max);
            const float a = m == NEG_INF ? 0.f : expf(m - m_new);
            float sum = 0.f;
#pragma unroll
            for (int j = 0; j < TILE; ++j) {
                const float e = j < n ? expf(s[j] - m_new) : 0.f;
                sum += e;
                if (lane == 0) probs[warp][j] = e;
            }
            l = l * a + sum;
            m = m_new;
            if (lane == 0) alpha[warp] = a;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            const int c = threadIdx.x + MLA_THREADS * k;
            if (c >= lat) continue;
#pragma unroll
            for (int h = 0; h < MLA_HG; ++h) {
                if (h >= hg) continue;
                float a = acc[h][k] * alpha[h];
                for (int j = 0; j < n; ++j)
                    a += probs[h][j] * mla_tile_value(tile, tsc[FP8 ? j : 0], j * row + c, c);
                acc[h][k] = a;
            }
        }
    }
    // The states: warp h's (m, l), every thread's columns.
    const u64 stride = (u64)lat + 2;
    __syncthreads();
    if (warp < hg && lane == 0) {
        float* st = partial + ((t * heads + h0 + warp) * splits + blockIdx.z) * stride;
        st[0] = m;
        st[1] = l;
    }
#pragma unroll
    for (int k = 0; k < 2; ++k) {
        const int c = threadIdx.x + MLA_THREADS * k;
        if (c >= lat) continue;
#pragma unroll
        for (int h = 0; h < MLA_HG; ++h) {
            if (h >= hg) continue;
            partial[((t * heads + h0 + h) * splits + blockIdx.z) * stride + 2 + c] = acc[h][k];
        }
    }
}

#define MLA_ATTEND(SUFFIX, TC)                                                                     \
    extern "C" __global__ void __launch_bounds__(MLA_THREADS) mla_attend_##SUFFIX(                \
        float* partial, const float* qf, const TC* cache, const u32* positions,                    \
        const u32* row_seq, const u32* block_tables, int max_blocks, int block_size, int heads,    \
        int rope, int lat, float scale) {                                                          \
        pdl_start();                                                                               \
        mla_attend_impl(partial, qf, cache, positions, row_seq, block_tables, max_blocks,          \
                        block_size, heads, rope, lat, scale);                                      \
    }

MLA_ATTEND(bf16, bf16)
MLA_ATTEND(fp32, float)

extern "C" __global__ void __launch_bounds__(MLA_THREADS)
    mla_attend_kv8(float* partial, const float* qf, const unsigned char* cache,
                   const u32* positions, const u32* row_seq, const u32* block_tables,
                   int max_blocks, int block_size, int heads, int rope, int lat, float scale,
                   const float* scales) {
    pdl_start();
    mla_attend_impl(partial, qf, cache, positions, row_seq, block_tables, max_blocks, block_size,
                    heads, rope, lat, scale, scales);
}

// ---- 3. merge and value up-projection -----------------------------------------------------------

template <typename TW, typename TO>
__device__ void mla_out_impl(TO* out, const float* partial, const TW* kv_b, int tokens, int heads,
                             int nope, int v, int lat, int splits) {
    __shared__ float o_lat[MLA_QT][MLA_MAX_LATENT];
    const int h = blockIdx.x, t0 = blockIdx.y * MLA_QT;
    const int nt = min(MLA_QT, tokens - t0);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const u64 stride = (u64)lat + 2;
    for (int j = nt; j < MLA_QT; ++j)  // rows past the last token: zero, never written out
        for (int c = threadIdx.x; c < lat; c += blockDim.x) o_lat[j][c] = 0.f;
    for (int j = 0; j < nt; ++j) {
        const float* st = partial + ((u64)(t0 + j) * heads + h) * splits * stride;
        // Split 0 holds row 0, so the max is finite and the sum positive.
        float mx = NEG_INF;
        for (int s = 0; s < splits; ++s) mx = fmaxf(mx, st[s * stride]);
        float total = 0.f;
        for (int s = 0; s < splits; ++s) {
            const float ms = st[s * stride];
            total += ms == NEG_INF ? 0.f : st[s * stride + 1] * expf(ms - mx);
        }
        const float inv = 1.0f / total;
        for (int c = threadIdx.x; c < lat; c += blockDim.x) {
            float sum = 0.f;
            for (int s = 0; s < splits; ++s) {
                const float ms = st[s * stride];
                if (ms != NEG_INF) sum += st[s * stride + 2 + c] * expf(ms - mx);
            }
            o_lat[j][c] = sum * inv;
        }
    }
    __syncthreads();
    const TW* w = kv_b + ((u64)h * (nope + v) + nope) * lat;  // W_UV[h]: v rows of lat
    for (int r = warp; r < v; r += warps) {
        float acc[MLA_QT];
#pragma unroll
        for (int j = 0; j < MLA_QT; ++j) acc[j] = 0.f;
        for (int c = lane; c < lat; c += 32) {
            const float wv = to_f32(w[(u64)r * lat + c]);
#pragma unroll
            for (int j = 0; j < MLA_QT; ++j) acc[j] += wv * o_lat[j][c];
        }
#pragma unroll
        for (int j = 0; j < MLA_QT; ++j) acc[j] = warp_sum(acc[j]);
        if (lane == 0)
            for (int j = 0; j < nt; ++j)
                out[(u64)(t0 + j) * heads * v + (u64)h * v + r] = from_f32<TO>(acc[j]);
    }
}

#define MLA_OUT(SUFFIX, TW, TO)                                                                    \
    extern "C" __global__ void __launch_bounds__(MLA_THREADS) mla_out_##SUFFIX(                   \
        TO* out, const float* partial, const TW* kv_b, int tokens, int heads, int nope, int v,     \
        int lat, int splits) {                                                                     \
        pdl_start();                                                                               \
        mla_out_impl(out, partial, kv_b, tokens, heads, nope, v, lat, splits);                     \
    }

MLA_OUT(bf16, bf16, bf16)
MLA_OUT(fp32, float, float)
