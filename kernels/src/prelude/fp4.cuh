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

// Eight values (one packed word, q: nibble 2p is value 2p, 2p + 1 its high neighbour) as
// eight bf16 in one 16-byte store at `out` (16-byte aligned), each value times `s` rounded
// once. dequant_nvfp4_bf16, dequant_mxfp4_bf16: a thread a word, so a warp's loads are 128
// contiguous bytes and its stores 512 (the earlier build, a thread a 16-byte chunk with a
// 64-bit division each, moved 0.64 TB/s on an H100: performance log part 17).
__device__ __forceinline__ void fp4_word_to_bf16(u32 q, float s, bf16* out) {
    u32 o[4];
#pragma unroll
    for (int p = 0; p < 4; ++p) {
        const u32 b = q >> (8 * p);
        const u32 l = from_f32<bf16>(e2m1_exact(b & 15u) * s).bits;
        const u32 h = from_f32<bf16>(e2m1_exact((b >> 4) & 15u) * s).bits;
        o[p] = l | (h << 16);
    }
    store16(out, u32x4{o[0], o[1], o[2], o[3]});
}
