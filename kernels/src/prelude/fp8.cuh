// Fine-grained FP8 weights: e4m3fn bytes (bias 7, no infinities) times an f32 scale. Placing a
// byte's exponent and mantissa bits at bit 20 of an f32 gives its value times 2^-120 (its
// subnormals become f32 subnormals), so value · scale = that float · (scale · 2^120) in one
// rounding, the CPU loader's `e4m3 · scale` bit for bit, for scales below 2^8 (a checkpoint's
// scales are amax / 448 of a block of weights, far below). The NaN bytes 0x7f / 0xff, which no
// quantizer writes (it clamps to ±448), read as ±480 here.
__device__ __forceinline__ float fp8_scale120(float scale) { return scale * __uint_as_float(0x7b800000u); }
// The low byte of b, times the scale given as fp8_scale120(scale).
__device__ __forceinline__ float e4m3_scaled(u32 b, float scale120) {
    return __uint_as_float(((b & 0x7fu) << 20) | ((b & 0x80u) << 24)) * scale120;
}

// The exact value of e4m3 byte b (low byte): e4m3_scaled with a scale of 1, which has at most
// four significant bits, so the top half of its f32 bits is its bf16 pattern, exactly.
__device__ __forceinline__ float e4m3_value(u32 b) {
    return e4m3_scaled(b, __uint_as_float(0x7b800000u));
}

// The exact values of the four e4m3 bytes of w (byte i into v[i]; never NaN bytes). On sm_89
// and newer two cvt.rn.f16x2.e4m3x2 and four f16 → f32 conversions (e4m3 fits f16 exactly):
// 1.5 instructions a weight where placing the bits (e4m3_scaled) takes five; elsewhere, and
// under the host emulation, e4m3_value: the same values.
__device__ __forceinline__ void e4m3x4_values(u32 w, float* v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    u32 h01, h23;
    asm("{\n\t.reg .b16 a, b;\n\tmov.b32 {a, b}, %2;\n\tcvt.rn.f16x2.e4m3x2 %0, a;\n\t"
        "cvt.rn.f16x2.e4m3x2 %1, b;\n\t}"
        : "=r"(h01), "=r"(h23)
        : "r"(w));
    asm("{\n\t.reg .b16 a, b;\n\tmov.b32 {a, b}, %2;\n\tcvt.f32.f16 %0, a;\n\tcvt.f32.f16 %1, b;\n\t}"
        : "=f"(v[0]), "=f"(v[1])
        : "r"(h01));
    asm("{\n\t.reg .b16 a, b;\n\tmov.b32 {a, b}, %2;\n\tcvt.f32.f16 %0, a;\n\tcvt.f32.f16 %1, b;\n\t}"
        : "=f"(v[2]), "=f"(v[3])
        : "r"(h23));
#else
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = e4m3_value(w >> (8 * i));
#endif
}

// Bytes 0 and 1 of w (e4m3) as a bf16 pair, exactly (byte 0 in the low half).
__device__ __forceinline__ u32 e4m3x2_to_bf16x2(u32 w) {
    return (__float_as_uint(e4m3_value(w & 0xffu)) >> 16) |
           (__float_as_uint(e4m3_value((w >> 8) & 0xffu)) & 0xffff0000u);
}

// The FP8 KV cache (`--kv-cache-dtype fp8`; engine/src/backend/kv_fp8.rs is the host's copy
// and says why): a cached head vector is cut into groups of KV_FP8_GROUP dims; a group keeps
// s = amax / 448 (1 when the group is all zero) as an f32 and its values as e4m3(x / s),
// rounded to nearest even and saturated at ±448; the value read back is e4m3 · s. A layer's
// cache is one buffer: the e4m3 bytes [blocks, block_size, nkv, hd], then (256-byte aligned) the
// scales [blocks, block_size, nkv, ceil(hd / 128)], the layout of FP8 weights' scales.
#define KV_FP8_GROUP 128

__device__ __forceinline__ float kv_fp8_scale(float amax) {
    const float s = amax / 448.f;
    return s > 0.f ? s : 1.f;
}

// x as an e4m3 byte: round to nearest even, saturate finite values at ±448, NaN -> 0x7f.
__device__ __forceinline__ u32 f32_to_e4m3(float x) {
    if (x != x) return 0x7fu;
    const u32 sign = (__float_as_uint(x) >> 24) & 0x80u;
    const float a = fabsf(x);
    if (a >= 448.f) return sign | 0x7eu;
    // Subnormals: multiples of 2^-9 (a · 512 is exact); 8 · 2^-9 encodes as 0x08, 2^-6.
    if (a < 0.015625f) return sign | (u32)rintf(a * 512.f);
    const u32 bits = __float_as_uint(a);
    u32 e = (bits >> 23) - 120u;  // the e4m3 exponent field, 1 ..= 15
    u32 m = (bits >> 20) & 7u;
    const u32 rest = bits & 0xfffffu;
    if (rest > 0x80000u || (rest == 0x80000u && (m & 1u))) {
        if (++m == 8u) {
            m = 0u;
            ++e;
        }
    }
    return sign | (e << 3) | m;
}

// One warp stores head vector x[0, head_dim) in the FP8 cache: its bytes at dst, its group
// scales at scales (written by lane 0).
template <typename T>
__device__ void store_head_fp8(unsigned char* dst, float* scales, const T* x, int head_dim) {
    const int lane = threadIdx.x & 31;
    for (int g0 = 0; g0 < head_dim; g0 += KV_FP8_GROUP) {
        const int end = min(head_dim, g0 + KV_FP8_GROUP);
        float amax = 0.f;
        for (int d = g0 + lane; d < end; d += 32) amax = fmaxf(amax, fabsf(to_f32(x[d])));
        const float s = kv_fp8_scale(warp_max(amax));
        for (int d = g0 + lane; d < end; d += 32)
            dst[d] = (unsigned char)f32_to_e4m3(to_f32(x[d]) / s);
        if (lane == 0) scales[g0 / KV_FP8_GROUP] = s;
    }
}

// Element d of cache row r (a token's head vector; base = r · head_dim) as f32: bf16 and f32
// caches ignore the scales; an FP8 cache multiplies by the row's group scale (one rounding, the
// host's `e4m3 · s`).
__device__ __forceinline__ float kv_value(const bf16* c, const float*, u64, u64 base, int d,
                                          int) {
    return to_f32(c[base + d]);
}
__device__ __forceinline__ float kv_value(const float* c, const float*, u64, u64 base, int d,
                                          int) {
    return c[base + d];
}
__device__ __forceinline__ float kv_value(const unsigned char* c, const float* scales, u64 r,
                                          u64 base, int d, int groups) {
    return e4m3_value(c[base + d]) * scales[r * groups + d / KV_FP8_GROUP];
}
