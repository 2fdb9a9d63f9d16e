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
