// QK-norm then rotary embedding, in place on the fused qkv rows `[T, (nh + 2·nkv)·hd]`.
//
// One warp per (token, q-or-k head); a block holds ROPE_WARPS heads of one token (grid.x = token,
// grid.y = group of heads). The warp reads its head (lane i holds dims i, i+32, ...), sums squares
// with a shuffle reduction, and writes the normalised, weighted values to its slice of shared
// memory, because a rotated pair (d, d + rotary_dim/2) may sit on two different lanes. After a
// __syncwarp each lane rotates its dims from shared memory and stores them back in the row's type.
// cos/sin are computed, not tabled: the angle is inv_freq[i] * position in f32, then precise
// sincosf (no fast math: at long contexts angles reach 1e5 rad, where __sinf is wrong), exactly as
// the CPU reference and transformers do. v heads are not touched. head_dim <= ROPE_MAX_DIM.
//
// qk_norm_rope_kv also writes each token's k heads (as rotated) and v heads (grid.y covers them
// too) to its slot of the bf16 paged cache, exactly what write_kv would then copy: one launch a
// layer fewer on the decode path. Slots were range-checked on the host.
//
// With an FP8 cache (qk_norm_rope_kv_<qkv dtype>_kv8) each k and v head is stored by one warp
// through store_head_fp8 (group scales, e4m3 bytes; see prelude/fp8.cuh), the k head once rotated.
//
// Symbols: qk_norm_rope_<qkv dtype>, qk_norm_rope_kv_<qkv dtype>[_kv8]; q_w/k_w are bf16, inv_freq f32.
// The float32 path's qk_norm_rope_fp32 and qk_norm_rope_kv_fp32 take f32 qkv, weights and cache.
// rope_kv_<qkv dtype>[_kv8] and rope_kv_fp32 are the same without the norm (Llama, Mistral): the
// heads are rotated as they are, and the cache written.

#define ROPE_WARPS 4
#define ROPE_MAX_DIM 256

template <typename T, typename TW, typename TC, bool KV, bool NORM = true>
__device__ void qk_norm_rope_impl(T* qkv, const u32* positions, const TW* q_w, const TW* k_w,
                                  const float* inv_freq, int num_heads, int num_kv_heads,
                                  int head_dim, int half_rot, float scale, float eps,
                                  TC* k_cache, TC* v_cache, const u32* slot_mapping,
                                  float* k_scales = nullptr, float* v_scales = nullptr) {
    // An FP8 cache (TC = unsigned char): head vectors go through store_head_fp8.
    constexpr bool FP8 = sizeof(TC) == 1;
    const int groups = (head_dim + KV_FP8_GROUP - 1) / KV_FP8_GROUP;
    __shared__ float normed[ROPE_WARPS][ROPE_MAX_DIM];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int head = blockIdx.y * ROPE_WARPS + warp;
    const int last = num_heads + (KV ? 2 : 1) * num_kv_heads;
    if (head >= last) return;  // whole warp leaves; no block barrier below
    const u64 row = blockIdx.x;
    const u64 width = (u64)(num_heads + 2 * num_kv_heads) * head_dim;
    T* x = qkv + row * width + (u64)head * head_dim;
    // With KV, the token's k and v heads also go to its cache slot (what write_kv does).
    const u64 slot = KV ? (u64)slot_mapping[row] * num_kv_heads * head_dim : 0;
    // The cache row of this token's kv head `h` (FP8 scales index).
    const u64 cache_row0 = KV ? (u64)slot_mapping[row] * num_kv_heads : 0;
    if (KV && head >= num_heads + num_kv_heads) {
        const int vh = head - num_heads - num_kv_heads;
        TC* dst = v_cache + slot + (u64)vh * head_dim;
        if constexpr (FP8) {
            store_head_fp8((unsigned char*)dst, v_scales + (cache_row0 + vh) * groups, x, head_dim);
        } else {
            for (int d = lane; d < head_dim; d += 32) dst[d] = from_f32<TC>(to_f32(x[d]));
        }
        return;
    }
    const TW* w = head < num_heads ? q_w : k_w;
    float* t = normed[warp];

    if constexpr (NORM) {
        float ss = 0.f;
        for (int d = lane; d < head_dim; d += 32) {
            const float v = to_f32(x[d]);
            ss += v * v;
        }
        const float inv = 1.0f / sqrtf(warp_sum(ss) / (float)head_dim + eps);
        for (int d = lane; d < head_dim; d += 32) t[d] = to_f32(w[d]) * (to_f32(x[d]) * inv);
    } else {
        // Models without QK-norm (rope_kv_*): the head as it is.
        for (int d = lane; d < head_dim; d += 32) t[d] = to_f32(x[d]);
    }
    __syncwarp();

    const float pos = (float)positions[row];
    for (int d = lane; d < head_dim; d += 32) {
        float v;
        if (d < 2 * half_rot) {
            const int i = d < half_rot ? d : d - half_rot;
            float s, c;
            sincosf(inv_freq[i] * pos, &s, &c);
            c *= scale;
            s *= scale;
            const float x1 = t[i], x2 = t[i + half_rot];
            v = d < half_rot ? x1 * c - x2 * s : x2 * c + x1 * s;
        } else {
            v = t[d];
        }
        x[d] = from_f32<T>(v);
        if constexpr (KV && !FP8) {
            if (head >= num_heads)
                k_cache[slot + (u64)(head - num_heads) * head_dim + d] =
                    from_f32<TC>(to_f32(x[d]));
        }
    }
    if constexpr (KV && FP8) {
        if (head >= num_heads) {
            // The k head as rotated and rounded to T, as write_kv would read it.
            __syncwarp();
            const int kh = head - num_heads;
            store_head_fp8((unsigned char*)k_cache + slot + (u64)kh * head_dim,
                           k_scales + (cache_row0 + kh) * groups, x, head_dim);
        }
    }
}

#define QK_NORM_ROPE(SUFFIX, T, TW, TC)                                                            \
    extern "C" __global__ void qk_norm_rope_##SUFFIX(                                              \
        T* qkv, const u32* positions, const TW* q_w, const TW* k_w, const float* inv_freq,         \
        int num_heads, int num_kv_heads, int head_dim, int half_rot, float scale, float eps) {     \
        pdl_start();                                                                               \
        qk_norm_rope_impl<T, TW, TC, false>(qkv, positions, q_w, k_w, inv_freq, num_heads,         \
                                            num_kv_heads, head_dim, half_rot, scale, eps, nullptr, \
                                            nullptr, nullptr);                                     \
    }                                                                                              \
    extern "C" __global__ void qk_norm_rope_kv_##SUFFIX(                                           \
        T* qkv, const u32* positions, const TW* q_w, const TW* k_w, const float* inv_freq,         \
        int num_heads, int num_kv_heads, int head_dim, int half_rot, float scale, float eps,       \
        TC* k_cache, TC* v_cache, const u32* slot_mapping) {                                       \
        pdl_start();                                                                               \
        qk_norm_rope_impl<T, TW, TC, true>(qkv, positions, q_w, k_w, inv_freq, num_heads,          \
                                           num_kv_heads, head_dim, half_rot, scale, eps, k_cache,  \
                                           v_cache, slot_mapping);                                 \
    }

QK_NORM_ROPE(f32, float, bf16, bf16)
QK_NORM_ROPE(bf16, bf16, bf16, bf16)
QK_NORM_ROPE(fp32, float, float, float)

// The FP8 cache (`_kv8`): the same, storing the k and v heads with store_head_fp8 into the
// e4m3 bytes and the layers' scale regions k_scales / v_scales.
#define QK_NORM_ROPE_KV8(SUFFIX, T, TW)                                                            \
    extern "C" __global__ void qk_norm_rope_kv_##SUFFIX##_kv8(                                     \
        T* qkv, const u32* positions, const TW* q_w, const TW* k_w, const float* inv_freq,         \
        int num_heads, int num_kv_heads, int head_dim, int half_rot, float scale, float eps,       \
        unsigned char* k_cache, unsigned char* v_cache, const u32* slot_mapping, float* k_scales,  \
        float* v_scales) {                                                                         \
        pdl_start();                                                                               \
        qk_norm_rope_impl<T, TW, unsigned char, true>(                                             \
            qkv, positions, q_w, k_w, inv_freq, num_heads, num_kv_heads, head_dim, half_rot,       \
            scale, eps, k_cache, v_cache, slot_mapping, k_scales, v_scales);                       \
    }

QK_NORM_ROPE_KV8(f32, float, bf16)
QK_NORM_ROPE_KV8(bf16, bf16, bf16)

// Rotation and cache write without QK-norm (Llama, Mistral): the same kernel, NORM off.
#define ROPE_KV(SUFFIX, T, TC)                                                                     \
    extern "C" __global__ void rope_kv_##SUFFIX(                                                   \
        T* qkv, const u32* positions, const float* inv_freq, int num_heads, int num_kv_heads,      \
        int head_dim, int half_rot, float scale, TC* k_cache, TC* v_cache,                         \
        const u32* slot_mapping) {                                                                 \
        pdl_start();                                                                               \
        qk_norm_rope_impl<T, T, TC, true, false>(qkv, positions, nullptr, nullptr, inv_freq,       \
                                                 num_heads, num_kv_heads, head_dim, half_rot,      \
                                                 scale, 0.f, k_cache, v_cache, slot_mapping);      \
    }

ROPE_KV(f32, float, bf16)
ROPE_KV(bf16, bf16, bf16)
ROPE_KV(fp32, float, float)

#define ROPE_KV8(SUFFIX, T)                                                                        \
    extern "C" __global__ void rope_kv_##SUFFIX##_kv8(                                             \
        T* qkv, const u32* positions, const float* inv_freq, int num_heads, int num_kv_heads,      \
        int head_dim, int half_rot, float scale, unsigned char* k_cache, unsigned char* v_cache,   \
        const u32* slot_mapping, float* k_scales, float* v_scales) {                               \
        pdl_start();                                                                               \
        qk_norm_rope_impl<T, T, unsigned char, true, false>(                                       \
            qkv, positions, nullptr, nullptr, inv_freq, num_heads, num_kv_heads, head_dim,         \
            half_rot, scale, 0.f, k_cache, v_cache, slot_mapping, k_scales, v_scales);             \
    }

ROPE_KV8(f32, float)
ROPE_KV8(bf16, bf16)
