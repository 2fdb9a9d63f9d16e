// moe_mma.cu's 64-row tensor-core expert GEMMs on FP4 expert stacks as they are stored (issues
// 34/35): moe_gate_up_mma_{nvfp4,mxfp4}, moe_down_mma_{nvfp4,mxfp4} and gpt-oss's
// moe_gate_up_clamped_mma_{nvfp4,mxfp4}; and (at the end) its decode-batch _small_any kernels
// on the same stacks. Compiled after moe_mma.cu (one module): each kernel is
// moe_mma_impl's bf16 build (MODE 0: the same tiles, grid, warps, A operand, mma and
// activation functors) with MmaFp4Tile as its B-tile loader, so no bf16 copy of the stacks is
// made (it wrote 1.6 GB a layer at gpt-oss-20b's shape) and the kernels read 0.5625 (NVFP4) or
// 0.53 (MXFP4) bytes a weight where the bf16 build reads 2.
//
// Layout (moe_fp4.cu's): w packed E2M1 pairs [E · rows, k / 2] (element 2i the low nibble of
// byte i), scales one byte per BLOCK values of a row [E · rows, k / BLOCK], globals one f32 a
// row (NVFP4 only: a value is e2m1 · e4m3 · global). k % 32 == 0 (the plan's alignment): a
// 32-wide k slice of a row is 16 packed bytes.
//
// The B tile: each k slice of the block's 128 weight rows is 512 chunks of 8 values (4 packed
// bytes and their block's scale byte); thread tid takes chunk tid % 4 of rows tid / 4 + 32i (i
// < 4), so a quarter warp's 16-byte shared stores fill two whole 64-byte rows (no bank
// conflicts) and a warp's 4-byte loads read 8 rows' 16 contiguous bytes. The loads of slice s
// are issued one iteration before its conversion and stores (moe_mma_impl's REG loader), so
// their latency overlaps a slice of mma; the slot they fill is free by then (see moe_mma_impl).
//
// Exactness: a value is widened to the bf16 operand with no rounding. A nibble's code bits
// placed at bits 6..8 of a bf16 (sign at 15) are e2m1 · 2^-126 (code 1 a bf16 subnormal, which
// bf16x2 arithmetic keeps), and one bf16x2 multiply by a power of two or a 4-bit scale is
// exact while the product stays in bf16's range:
//   - NVFP4: times e4m3 · 2^118 gives e2m1 · e4m3 · 2^-8: at most 6 significant bits, between
//     2^-18 and 10.5, exact. The mma's f32 sums of exact products are then multiplied by
//     2^8 · the row's global in the epilogue (for gate|up before the activation: gate's and
//     up's rows each their own; for down per output column), as nvfp4.cu's GEMMs do. Against
//     the CPU reference (e2m1 · f32(e4m3 · global) per weight) the rounding is in another order
//     only.
//   - MXFP4: times 2^(min(b, 128) − 1), then 2^(max(b, 128) − 128) (b the E8M0 byte; both
//     factors normal bf16s for every b from 0 to 254, the second 1 for the scales checkpoints
//     use) gives e2m1 · 2^(b − 127) exactly: bf16 has f32's exponent range, the smallest
//     values (0.5 · 2^-127 = 2^-128) are bf16 subnormals (exact: multiples of 2^-133), and the
//     values past f32's range (4 · 2^126 and up) become infinities, as f32 makes them on the
//     CPU. No factor in the epilogue. The same values as dequant_mxfp4_bf16's copy, bit for bit.
//
// Cost beside the bf16 build: a thread's slice is 4 + 4 global loads (bytes and scales), about
// 7 instructions a pair of values (a prmt, shifts and masks, one or two bf16x2 multiplies) and 4
// 16-byte shared stores, where the bf16 build issues 6 cp.async; its mma and shared loads are
// the same. Floor at gpt-oss-20b's shape (32 experts of [5760, 2880] and [2880, 2880] MXFP4,
// 0.53 bytes a weight: 13.2 MB an expert a layer): the experts a step touches read once, 0.11
// ms a layer with all 32 at 4 TB/s, where the bf16 copy wrote and read 1.6 GB a layer (about
// 0.8 ms) before the GEMMs began. Measured (H100, performance log parts 18-19): 0.71 ms a
// layer at 16 to 256 tokens, flat: at decode batches the tiles' mma and widening of 64 rows
// bound them, not the loads (a 4-deep register prefetch of the packed slices left them at 0.76).
// Decode batches take the _small_any kernels below.

// The bf16 pair (nibble 2P in the low half, 2P + 1 in the high half) of byte P of w as
// e2m1 · 2^-126 each; w4 = w >> 4.
template <int P> __device__ __forceinline__ u32 mma_fp4_pair(u32 w, u32 w4) {
#ifdef METRALE_HOST_EMULATION
    const u32 y = ((w >> (8 * P)) & 0xffu) | (((w4 >> (8 * P)) & 0xffu) << 16);
#else
    // Byte P of w into byte 0, of w4 into byte 2 (bytes 1 and 3: anything, masked below).
    constexpr u32 SEL = P | (P << 4) | ((4 + P) << 8) | ((4 + P) << 12);
    u32 y;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(y) : "r"(w), "r"(w4), "n"(SEL));
#endif
    return ((y << 6) & 0x01c001c0u) | ((y << 12) & 0x80008000u);
}

// The scale formats (moe_fp4.cu's Fp4Nv and Fp4Mx are in the other module): BLOCK values a
// scale byte; widen(q, b): 8 packed values q and their block's scale byte b as 8 bf16 in k
// order; row_scale: the factor of a weight row's sums.
struct MmaNv {
    static constexpr int BLOCK = 16;
    __device__ __forceinline__ static u32x4 widen(u32 q, u32 b) {
        // e4m3 · 2^118 (0x7a800000), four significant bits: its bf16 is the f32's top half.
        const u32 f = __float_as_uint(e4m3_value(b) * __uint_as_float(0x7a800000u)) >> 16;
        const u32 ff = f | (f << 16), q4 = q >> 4;
        return u32x4{mul_bf16x2(mma_fp4_pair<0>(q, q4), ff),
                     mul_bf16x2(mma_fp4_pair<1>(q, q4), ff),
                     mul_bf16x2(mma_fp4_pair<2>(q, q4), ff),
                     mul_bf16x2(mma_fp4_pair<3>(q, q4), ff)};
    }
    __device__ __forceinline__ static float row_scale(const float* globals, int row) {
        return 256.0f * globals[max(row, 0)];
    }
};
struct MmaMx {
    static constexpr int BLOCK = 32;
    __device__ __forceinline__ static u32x4 widen(u32 q, u32 b) {
        b &= 0xffu;
        const u32 f1 = ((b < 128u ? b : 128u) + 126u) << 7, f2 = ((b > 128u ? b : 128u) - 1u) << 7;
        const u32 ff1 = f1 | (f1 << 16), ff2 = f2 | (f2 << 16), q4 = q >> 4;
        return u32x4{mul_bf16x2(mul_bf16x2(mma_fp4_pair<0>(q, q4), ff1), ff2),
                     mul_bf16x2(mul_bf16x2(mma_fp4_pair<1>(q, q4), ff1), ff2),
                     mul_bf16x2(mul_bf16x2(mma_fp4_pair<2>(q, q4), ff1), ff2),
                     mul_bf16x2(mul_bf16x2(mma_fp4_pair<3>(q, q4), ff1), ff2)};
    }
    __device__ __forceinline__ static float row_scale(const float*, int) { return 1.0f; }
};

// moe_mma_impl's FP4 B-tile loader (see the header): 128 threads (MODE 0's 4 warps), 4 chunks of
// 8 values each a slice; q, sb: the fetched slice's packed words and scale bytes (zeros for
// weight rows past the matrix: e2m1 zeros, whatever the scale).
template <typename S> struct MmaFp4Tile {
    static constexpr bool REG = true;
    static constexpr int THREADS = MmaCfg<0>::WARPS * 32, ITEMS = MMA_BN * 4 / THREADS;
    static_assert(THREADS == 128 && MMA_BK == 32, "a thread's chunks: rows tid / 4 + 32i");
    const unsigned char* w;
    const unsigned char* scales;
    const float* globals;
    u32 q[ITEMS], sb[ITEMS];

    __device__ __forceinline__ void fetch(int kt, int k, const int* w_row) {
        const int c = threadIdx.x & 3, kk = kt * MMA_BK + 8 * c;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const int row = w_row[(threadIdx.x >> 2) + 32 * i];
            const bool ok = row >= 0 && kk < k;
            q[i] = ok ? *(const u32*)(w + (u64)row * (u64)(k >> 1) + (kk >> 1)) : 0u;
            sb[i] = ok ? scales[(u64)row * (u64)(k / S::BLOCK) + kk / S::BLOCK] : 0u;
        }
    }
    // sw: the stage's B rows (MMA_BK bf16, 64 bytes each).
    __device__ __forceinline__ void put(unsigned char* sw) const {
        const int c = threadIdx.x & 3;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const u32x4 v = S::widen(q[i], sb[i]);
            unsigned char* dst = sw + ((threadIdx.x >> 2) + 32 * i) * (MMA_BK * 2) + 16 * c;
            *(smem16*)dst = smem16{v.x, v.y, v.z, v.w};
        }
    }
    __device__ __forceinline__ float row_scale(int row) const { return S::row_scale(globals, row); }
};

// The kernels: moe_mma.cu's bf16 parameters, with the scale bytes and the globals (NVFP4's row
// multipliers; nullptr for MXFP4) in place of w_scales. Launched as moe_*_mma_bf16 (MmaCfg<0>:
// 4 warps, its dynamic shared memory), on stacks with h and i multiples of 32.
#define MOE_MMA_FP4_GATE_UP(NAME, S, ACT, ...)                                                    \
    extern "C" __global__ void __launch_bounds__(MmaCfg<0>::WARPS * 32, 3)                         \
        NAME(bf16* act, const bf16* x, const unsigned char* w, const unsigned char* scales,         \
             const float* globals, const int* tiles, const int* offsets, const int* perm,          \
             int top_k, int inter, int hidden __VA_ARGS__) {                                       \
        pdl_start();                                                                               \
        moe_mma_impl<0, true>(act, x, nullptr, nullptr, nullptr, tiles, offsets, perm, 0, top_k,   \
                              inter, hidden, ACT, MmaFp4Tile<S>{w, scales, globals});              \
    }
#define MOE_MMA_FP4_KERNELS(SUFFIX, S)                                                             \
    MOE_MMA_FP4_GATE_UP(moe_gate_up_mma_##SUFFIX, S, MoeSiluAct{}, )                               \
    MOE_MMA_FP4_GATE_UP(moe_gate_up_clamped_mma_##SUFFIX, S,                                       \
                        (MoeClampedAct<bf16>{bias, alpha, limit}), , const bf16* bias,             \
                        float alpha, float limit)                                                  \
    extern "C" __global__ void __launch_bounds__(MmaCfg<0>::WARPS * 32, 3)                         \
        moe_down_mma_##SUFFIX(float* ys, const bf16* act, const unsigned char* w,                  \
                              const unsigned char* scales, const float* globals,                   \
                              const int* tiles, const int* offsets, const int* perm, int rows,     \
                              int hidden, int inter) {                                             \
        pdl_start();                                                                               \
        moe_mma_impl<0, false>(ys, act, nullptr, nullptr, nullptr, tiles, offsets, perm, rows, 1,  \
                               hidden, inter, MoeSiluAct{}, MmaFp4Tile<S>{w, scales, globals});    \
    }

MOE_MMA_FP4_KERNELS(nvfp4, MmaNv)
MOE_MMA_FP4_KERNELS(mxfp4, MmaMx)

// ---- decode batches: the _any kernels on packed FP4 stacks ----------------------------------
//
// moe_gate_up_{nvfp4,mxfp4}_small_any, moe_gate_up_clamped_{...}_small_any and
// moe_down_{...}_small_any: moe_mma.cu's _any kernels (a warp owns 8 j, or 16 output columns,
// over the whole k; the expert's pairs are the mma's B columns, 16 a chunk) with Fp4Rows as the
// weight format, for steps of 1 to SMALL_MMA_MAX_TOKENS tokens, where the 64-row tiles above
// run their mma and widening for 64 rows of mostly absent pairs. In a 64-wide k slice lane t
// loads 8 packed bytes (16 values, k 16t .. 16t + 15 of the slice: one NVFP4 block, half an
// MXFP4 one) of rows g and g + 8 and its scale byte, and widens them as the tiles do (MmaNv,
// MmaMx: exact); NVFP4's row multiplier (2^8 · global) is the slice sums' factor. Needs k % 64
// == 0 (the plan's check).
struct Fp4ScaleRow {
    const unsigned char* s;  // the row's scale bytes
    float factor;            // what a slice's sum is multiplied by
};
template <typename S> struct Fp4Rows {
    using ScaleRow = Fp4ScaleRow;
    static constexpr int WORDS = 1;
    // q.x, q.y: the 16 values; q.z: their block's scale byte.
    __device__ __forceinline__ static void load(u32x4 (&q)[WORDS], float& s, const unsigned char* row,
                                                ScaleRow sc, int j, int t) {
        const u32x2 v = load_stream8((const u32x2*)row + 4 * j + t);
        q[0] = u32x4{v.x, v.y, (u32)sc.s[(64 * j + 16 * t) / S::BLOCK], 0u};
        s = sc.factor;
    }
    __device__ __forceinline__ static Fp8Slice widen(const u32x4 (&q0)[WORDS], const u32x4 (&q1)[WORDS]) {
        return Fp8Slice{S::widen(q0[0].x, q0[0].z), S::widen(q1[0].x, q1[0].z),
                        S::widen(q0[0].y, q0[0].z), S::widen(q1[0].y, q1[0].z)};
    }
    __device__ __forceinline__ static const unsigned char* row_at(const unsigned char* r, int k0) {
        return r + (k0 >> 1);
    }
    __device__ __forceinline__ static ScaleRow scale_at(ScaleRow sc, int k0) {
        return ScaleRow{sc.s + k0 / S::BLOCK, sc.factor};
    }
};
// A packed FP4 stack as the _any impls read it (moe_mma.cu's AnyStack).
template <typename S> struct Fp4Stack {
    using F = Fp4Rows<S>;
    const unsigned char* w;
    const unsigned char* scales;
    const float* globals;
    __device__ __forceinline__ const unsigned char* row(u64 r, int k) const { return w + r * (u64)(k >> 1); }
    __device__ __forceinline__ Fp4ScaleRow scale_row(u64 r, int k) const {
        return Fp4ScaleRow{scales + r * (u64)(k / S::BLOCK), S::row_scale(globals, (int)r)};
    }
};

#define MOE_FP4_ANY_GATE_UP(KERNEL, S, ACT, ...)                                                  \
    extern "C" __global__ void __launch_bounds__(FP8_MMA_WARPS * 32)                              \
        KERNEL(bf16* act, const bf16* x, const unsigned char* w, const unsigned char* scales,      \
               const float* globals, const int* offsets, const int* active, const int* perm,      \
               int experts, int top_k, int inter, int hidden __VA_ARGS__) {                       \
        moe_gate_up_any_impl<2, 4, true>(act, x, Fp4Stack<S>{w, scales, globals}, offsets,         \
                                         active, perm, experts, top_k, inter, hidden, ACT);       \
    }
#define MOE_FP4_ANY_KERNELS(SUFFIX, S)                                                            \
    MOE_FP4_ANY_GATE_UP(moe_gate_up_##SUFFIX##_small_any, S, MoeSiluAct{}, )                      \
    MOE_FP4_ANY_GATE_UP(moe_gate_up_clamped_##SUFFIX##_small_any, S,                              \
                        (MoeClampedAct<bf16>{bias, alpha, limit}), , const bf16* bias,            \
                        float alpha, float limit)                                                 \
    extern "C" __global__ void __launch_bounds__(FP8_MMA_WARPS * 32)                              \
        moe_down_##SUFFIX##_small_any(float* ys, const bf16* act, const unsigned char* w,         \
                                      const unsigned char* scales, const float* globals,          \
                                      const int* offsets, const int* active, const int* perm,     \
                                      int experts, int inter, int hidden) {                       \
        moe_down_any_impl<2, 4>(ys, act, Fp4Stack<S>{w, scales, globals}, offsets, active, perm,  \
                                experts, inter, hidden);                                          \
    }

MOE_FP4_ANY_KERNELS(nvfp4, MmaNv)
MOE_FP4_ANY_KERNELS(mxfp4, MmaMx)
