// FP4 (E2M1) values, two a byte (element 2i the low nibble of byte i, a nibble sign << 3 |
// code), shared by the NVFP4 GEMMs (nvfp4.cu) and the FP4 MoE experts (moe_fp4.cu).
//
// e2m1_exact: a nibble's value by placing its three code bits at f32 bit 22 (exponent field e,
// mantissa top bit m: 2^(e-127)·(1 + m/2), and for e = 0 the subnormal m·2^-127) and
// multiplying by 2^126: the E2M1 value exactly (subnormals kept: NVRTC is not given ftz).
__device__ __forceinline__ float e2m1_exact(u32 nibble) {
    return __uint_as_float(((nibble & 7u) << 22) | ((nibble & 8u) << 28)) * __uint_as_float(0x7e800000u);
}

// An E8M0 scale byte's value, 2^(b − 127), exactly (b = 0 is the f32 subnormal 2^-127; the NaN
// byte 0xff, which the loader refuses, reads as infinity).
__device__ __forceinline__ float e8m0_value(u32 b) {
    b &= 0xffu;
    return __uint_as_float(b == 0u ? 0x00400000u : b << 23);
}

// A 32-value chunk (16 packed bytes, q) as 32 bf16 at `out` (16-byte aligned), each value times
// its scale rounded once: `s_lo` scales values 0..15, `s_hi` 16..31 (NVFP4's two blocks; an
// MXFP4 block's one scale twice). Four 16-byte stores (store16). dequant_nvfp4_bf16, dequant_mxfp4_bf16.
__device__ __forceinline__ void fp4_chunk_to_bf16(u32x4 q, float s_lo, float s_hi, bf16* out) {
    const u32 words[4] = {q.x, q.y, q.z, q.w};
    u32 o[16];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float s = j < 2 ? s_lo : s_hi;
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            const u32 b = words[j] >> (8 * p);
            const u32 l = from_f32<bf16>(e2m1_exact(b & 15u) * s).bits;
            const u32 h = from_f32<bf16>(e2m1_exact((b >> 4) & 15u) * s).bits;
            o[4 * j + p] = l | (h << 16);
        }
    }
#pragma unroll
    for (int v = 0; v < 4; ++v) store16(out + 8 * v, u32x4{o[4 * v], o[4 * v + 1], o[4 * v + 2], o[4 * v + 3]});
}
