// ---- Tensor cores (sm_80 and newer, e4m3 sm_89: attention_mma.cu and moe_mma.cu call these;
// compiled for an older GPU they trap) ------------------------------------------------------

// c += a·b for one m16n8 tile with f32 accumulators. bf16 (m16n8k16): a = four bf16 pairs (rows
// g / g + 8, k 2t.. / 2t + 8..), b = two (k 2t.. / 2t + 8.., column g). E4M3 (m16n8k32, sm_89+):
// a = rows g / g + 8, k 4t.. / 16 + 4t.. (four bytes each), b = k 4t.. / 16 + 4t.., column g.
// c = rows g and g + 8, columns 2t and 2t + 1 (g = lane / 4, t = lane % 4).
template <bool E4M3>
__device__ __forceinline__ void mma_m16n8(float c[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0,
                                          u32 b1) {
#ifdef METRALE_HOST_EMULATION
    if (E4M3) emu_mma_m16n8k32_e4m3(c, a0, a1, a2, a3, b0, b1);
    else emu_mma_m16n8k16_bf16(c, a0, a1, a2, a3, b0, b1);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    asm volatile("trap;");
#else
#define MMA_M16N8_F32(INSTR)                                                                       \
    asm volatile(INSTR " {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"          \
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                  \
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1))
    if constexpr (E4M3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
        asm volatile("trap;");
#else
        MMA_M16N8_F32("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32");
#endif
    } else {
        MMA_M16N8_F32("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32");
    }
#undef MMA_M16N8_F32
#endif
}
__device__ __forceinline__ void mma_bf16(float c[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0,
                                         u32 b1) {
    mma_m16n8<false>(c, a0, a1, a2, a3, b0, b1);
}

// c += (A · scale_A)(B · scale_B) for one m16n8k64 tile of NVFP4 operands on Blackwell's
// block-scaled FP4 tensor cores (mma.sync ... kind::mxf4nvf4.block_scale.scale_vec::4X, sm_120a
// and sm_121a; traps elsewhere): a0..a3 = eight E2M1 nibbles each (the lower k in the low
// nibble) of A[g][8t..], A[g + 8][8t..], A[g][32 + 8t..], A[g + 8][32 + 8t..]; b0, b1 = B[8t..][g],
// B[32 + 8t..][g]; sa = four E4M3 scale bytes (byte c: k 16c .. 16c + 15) of row g from lanes t =
// 0, of row g + 8 from lanes t = 1 (selectors {0, 0}); sb the same of column g from lanes t = 0.
__device__ __forceinline__ void mma_nvfp4(float c[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1,
                                          u32 sa, u32 sb) {
#ifdef METRALE_HOST_EMULATION
    emu_mma_m16n8k64_nvfp4(c, a0, a1, a2, a3, b0, b1, sa, sb);
#elif defined(__CUDA_ARCH_FEAT_SM120_ALL) || defined(__CUDA_ARCH_FEAT_SM121_ALL)
    asm volatile(
        "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X.f32.e2m1.e2m1.f32.ue4m3 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3}, %10, {0, 0}, %11, {0, 0};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(sa), "r"(sb));
#else
    asm volatile("trap;");
#endif
}

// c += a·b for one m16n8 tile of tf32 operands (m16n8k8, f32 accumulators): a0..a3 = A[g][t],
// A[g + 8][t], A[g][t + 4], A[g + 8][t + 4]; b0, b1 = B[t][g], B[t + 4][g]; c as mma_m16n8's.
// Each register is an f32 of which the tensor core reads the top 19 bits (sign, exponent, ten
// mantissa bits): callers round the low 13 bits off first.
__device__ __forceinline__ void mma_tf32(float c[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0,
                                         u32 b1) {
#ifdef METRALE_HOST_EMULATION
    emu_mma_m16n8k8_tf32(c, a0, a1, a2, a3, b0, b1);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    asm volatile("trap;");
#else
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

// Bytes SEL (a prmt selector: 0x4140 takes bytes 0 and 1, 0x4342 bytes 2 and 3) of w as the
// low bytes of the two halves of a u32.
template <u32 SEL> __device__ __forceinline__ u32 byte_halves(u32 w) {
#ifdef METRALE_HOST_EMULATION
    const int a = SEL & 0xf, b = (SEL >> 8) & 0xf;
    return ((w >> (8 * a)) & 0xffu) | (((w >> (8 * b)) & 0xffu) << 16);
#else
    u32 r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(w), "r"(0u), "n"(SEL));
    return r;
#endif
}

// The e4m3 bytes in the low bytes of t's halves as a bf16 pair, exactly: a byte's exponent and
// mantissa at bit 4 of its half and its sign at bit 15 form the bf16 of its value · 2^-120
// (e4m3's subnormals become bf16 subnormals); one bf16x2 multiply-add by 2^120 (and -0) scales
// both back without rounding (a value of at most four significant bits times a power of two).
// Five instructions a pair, where widening each byte through f32 takes about twelve.
__device__ __forceinline__ u32 e4m3_halves_to_bf16x2(u32 t) {
    const u32 v = ((t << 4) & 0x07f007f0u) | ((t << 8) & 0x80008000u);
#ifdef METRALE_HOST_EMULATION
    const float a = ldexpf(lo(v), 120), b = ldexpf(hi(v), 120);
    return (u32)from_f32<bf16>(a).bits | ((u32)from_f32<bf16>(b).bits << 16);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    asm volatile("trap;");
    return v;
#else
    u32 r;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(v), "r"(0x7b807b80u), "r"(0x80008000u));
    return r;
#endif
}

// Eight e4m3 bytes (an FP8 cache's dims) as the u32x4 of bf16 pairs a 16-byte bf16 load gives.
__device__ __forceinline__ u32x4 e4m3x8_to_bf16x8(u32x2 w) {
    return u32x4{e4m3_halves_to_bf16x2(byte_halves<0x4140>(w.x)),
                 e4m3_halves_to_bf16x2(byte_halves<0x4342>(w.x)),
                 e4m3_halves_to_bf16x2(byte_halves<0x4140>(w.y)),
                 e4m3_halves_to_bf16x2(byte_halves<0x4342>(w.y))};
}

// Two floats as a bf16 pair (lo in the low half), rounded to nearest even.
__device__ __forceinline__ u32 pack_bf16(float lo, float hi) {
#ifdef METRALE_HOST_EMULATION
    return (u32)from_f32<bf16>(lo).bits | ((u32)from_f32<bf16>(hi).bits << 16);
#else
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#endif
}

// a · b for two bf16 pairs, each product rounded once (the FP4 kernels' exact widening:
// nvfp4.cu's operands, moe_mma_fp4.cu's B tiles); sm_80+.
__device__ __forceinline__ u32 mul_bf16x2(u32 a, u32 b) {
#ifdef METRALE_HOST_EMULATION
    return pack_bf16(lo(a) * lo(b), hi(a) * hi(b));
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    asm volatile("trap;");
    return a;
#else
    u32 r;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(0x80008000u));
    return r;
#endif
}

// The low (HIGH = false) or high halves of a and b as one pair: (a's, b's).
template <bool HIGH> __device__ __forceinline__ u32 pair_halves(u32 a, u32 b) {
#ifdef METRALE_HOST_EMULATION
    return HIGH ? (a >> 16) | (b & 0xffff0000u) : (a & 0xffffu) | (b << 16);
#else
    u32 r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "n"(HIGH ? 0x7632 : 0x5410));
    return r;
#endif
}

__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Four 8×8 matrices of 16-bit elements from shared memory (ldmatrix .x4): lane l gives the
// address of row l % 8 of matrix l / 8 (16 bytes); register i of lane (g = lane / 4,
// t = lane % 4) gets matrix i's row g, elements 2t and 2t + 1 (TRANS: elements (2t, g) and
// (2t + 1, g), the transposed matrix's row g), the lower index in the low half: the mma's
// fragment layouts.
template <bool TRANS> __device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], const void* p) {
#ifdef METRALE_HOST_EMULATION
    emu_ldmatrix_x4(r, p, TRANS);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    asm volatile("trap;");
#else
    const u32 a = (u32)__cvta_generic_to_shared(p);
    if constexpr (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
#endif
}
