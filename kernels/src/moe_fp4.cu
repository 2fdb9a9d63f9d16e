// FP4 experts kept packed (compiled with moe.cu and moe_decode.cu as one module): moe.cu's
// CUDA-core expert kernels (moe_gate_up, moe_down, moe_down_combine, gpt-oss's
// moe_gate_up_clamped, Nemotron-H's moe_up_relu2) on E2M1 weights, two a byte as the
// checkpoint stores them, with the scale format a template parameter:
//
//   - NVFP4 (`_nvfp4`, Fp4Nv): one E4M3 scale byte per 16 values of a row and one f32
//     multiplier a row (the expert's global scale repeated for each of its rows: the layout of
//     a 2-D F4 tensor of [E · rows, cols], engine/src/backend/cuda/nvfp4.rs), a value being
//     e2m1 · (e4m3 · multiplier);
//   - MXFP4 (`_mxfp4`, Fp4Mx: gpt-oss's experts): one E8M0 scale byte per 32 values of a row,
//     a value being e2m1 · 2^(e8m0 − 127), exact in f32.
//
// The weights are w: packed bytes [E · rows, cols / 2], scales: bytes [E · rows, cols / BLOCK],
// globals: f32 [E · rows] (NVFP4; unused by MXFP4). Rows are 32-value chunks (cols % 32 == 0,
// 16 bytes: the launcher keeps other shapes widened); a lane loads a chunk with one 16-byte
// load, its x columns with four, and adds each scale block's products on the nibbles' exact
// values (e2m1_exact) in f32 before scaling the block's sum once: fmaf(scale, part, acc), as
// the FP8 kernels do with their 128-column blocks. The routing, the grouping, the SiLU products
// (bf16) and the weighted sums are moe.cu's, unchanged: these kernels hand moe_decode.cu's
// impls a weight "pointer" (Fp4Weights, by value through a pointer) whose weight_row gives a
// RowFp4, and moe_rows_dot for a RowFp4 is moe_dot_fp4 below.
//
// One-token steps take the _dec twins (moe_gate_up_dec_*, moe_gate_up_clamped_dec_*,
// moe_down_combine_dec{1,2,4}_*, below): moe_decode.cu's kernels that issue a lane's loads of a
// row at once, on a chunk type holding the packed bytes and raw scale bytes; the same sums.
//
// Steps with many tokens an expert run the tensor-core tiles on the same packed stacks
// (moe_mma_fp4.cu, in the moe_mma module). dequant_mxfp4_bf16 below (and nvfp4.cu's
// dequant_nvfp4_bf16) widen a stray FP4 stack, one whose pair is of another type or width, to a
// bf16 copy for the step.

// The scale formats: BLOCK values a scale, and a block's scale as f32.
struct Fp4Nv {
    static constexpr int BLOCK = 16;
    __device__ __forceinline__ static float scale(u32 byte, float global) { return e4m3_value(byte) * global; }
};
struct Fp4Mx {
    static constexpr int BLOCK = 32;
    __device__ __forceinline__ static float scale(u32 byte, float) { return e8m0_value(byte); }
};

// The experts' three buffers, handed to the impls in place of a weight pointer.
template <typename S> struct Fp4Weights {
    const unsigned char* w;
    const unsigned char* scales;
    const float* globals;  // NVFP4's per-row multipliers (nullptr for MXFP4)
};

// One weight row of k values: its packed bytes, its scale bytes and its multiplier.
template <typename S> struct RowFp4 {
    const unsigned char* w;
    const unsigned char* s;
    float global;
};

template <typename S>
__device__ __forceinline__ RowFp4<S> weight_row(const Fp4Weights<S>* f, const float*, u64 row, int k) {
    return RowFp4<S>{f->w + row * (u64)(k >> 1), f->scales + row * (u64)(k / S::BLOCK),
                     f->globals != nullptr ? f->globals[row] : 1.0f};
}

// acc[r][m] += row r · x[xoff[m]] for the NW rows and the first n of MOE_MT x rows (bf16,
// k % 32 == 0): a lane takes chunks lane, lane + 32, ... (32 values: 16 bytes of w, 64 of x);
// each block of S::BLOCK values is summed on the exact nibble values, then scaled once. The
// bytes stay packed until used, as in moe_dot_fp8_vec (fewer registers, more resident warps).
template <int NW, typename S>
__device__ __forceinline__ void moe_dot_fp4(float (*acc)[MOE_MT], const RowFp4<S>* rows,
                                            const bf16* x, const u64* xoff, int n, int k) {
    constexpr int NB = 32 / S::BLOCK;  // scale blocks a chunk
    const int lane = threadIdx.x & 31;
    const int chunks = k >> 5;
    for (int c = lane; c < chunks; c += 32) {
        u32 words[NW][4];
        float s[NW][NB];
#pragma unroll
        for (int r = 0; r < NW; ++r) {
            const u32x4 q = load_stream((const u32x4*)rows[r].w + c);
            words[r][0] = q.x;
            words[r][1] = q.y;
            words[r][2] = q.z;
            words[r][3] = q.w;
#pragma unroll
            for (int b = 0; b < NB; ++b) s[r][b] = S::scale(rows[r].s[c * NB + b], rows[r].global);
        }
#pragma unroll
        for (int m = 0; m < MOE_MT; ++m) {
            if (m < n) {
                // x word j (values 8j .. 8j + 7) against word j of each row, into its scale
                // block's sum; x is loaded a word at a time (4 registers, not 16).
                const u32x4* xp = (const u32x4*)(x + xoff[m]) + 4 * c;
                float part[NW][NB];
#pragma unroll
                for (int r = 0; r < NW; ++r)
#pragma unroll
                    for (int b = 0; b < NB; ++b) part[r][b] = 0.f;
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const u32x4 q = load_cached(xp + j);
                    const u32 xw[4] = {q.x, q.y, q.z, q.w};
                    const int b = j * NB / 4;
#pragma unroll
                    for (int r = 0; r < NW; ++r)
#pragma unroll
                        for (int i = 0; i < 4; ++i) {
                            const u32 byte = words[r][j] >> (8 * i);
                            part[r][b] = fmaf(e2m1_exact(byte & 15u), lo(xw[i]), part[r][b]);
                            part[r][b] = fmaf(e2m1_exact((byte >> 4) & 15u), hi(xw[i]), part[r][b]);
                        }
                }
#pragma unroll
                for (int r = 0; r < NW; ++r)
#pragma unroll
                    for (int b = 0; b < NB; ++b) acc[r][m] = fmaf(s[r][b], part[r][b], acc[r][m]);
            }
        }
    }
}

// FP4 rows take the chunk loop whatever VEC says (their rows are always whole 16-byte chunks).
template <bool VEC, int NW, typename S>
__device__ __forceinline__ void moe_rows_dot(float (*acc)[MOE_MT], const RowFp4<S>* rows,
                                             const bf16* x, const u64* xoff, int n, int k) {
    moe_dot_fp4<NW>(acc, rows, x, xoff, n, k);
}

// ---- One-token steps: a lane's loads of a row all in flight (moe_decode.cu's _dec kernels) ---
//
// A chunk as moe_decode.cu's load_group holds it: 16 packed bytes (32 values), the raw scale
// bytes of its blocks (two E4M3 for NVFP4, one E8M0 for MXFP4) and the row's multiplier, the
// scales formed only when used (so a lane's loads all issue before any waits). dot_loaded takes
// moe_dot_fp4's products in its order (word, byte, low nibble then high, each block's sum scaled
// once, blocks ascending), and load_group / dot_rows_from take a lane's chunks in moe_dot_fp4's
// order: the _dec kernels write the same act and out as moe_gate_up_* and moe_down_combine_*,
// bit for bit.
template <typename S> struct ChunkFp4 {
    static constexpr int XWORDS = 4;
    u32x4 q;
    u32 sb;  // scale byte b of the chunk at bits 8b
    float global;
};
template <typename S> struct ChunkOf<RowFp4<S>> {
    using T = ChunkFp4<S>;
    static constexpr int elems = 32;
};

template <typename S>
__device__ __forceinline__ ChunkFp4<S> load_chunk(const RowFp4<S>& r, int c) {
    // NVFP4's two scale bytes a chunk are 2-byte aligned (a row's k / 16 bytes is even).
    const u32 sb = S::BLOCK == 16 ? (u32)((const unsigned short*)r.s)[c] : (u32)r.s[c];
    return ChunkFp4<S>{load_stream((const u32x4*)r.w + c), sb, r.global};
}

template <typename S>
__device__ __forceinline__ void dot_loaded(float& acc, const ChunkFp4<S>& k, const u32x4* xa) {
    constexpr int NB = 32 / S::BLOCK;
    const u32 words[4] = {k.q.x, k.q.y, k.q.z, k.q.w};
    float part[NB];
#pragma unroll
    for (int b = 0; b < NB; ++b) part[b] = 0.f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const u32 xw[4] = {xa[j].x, xa[j].y, xa[j].z, xa[j].w};
        const int b = j * NB / 4;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const u32 byte = words[j] >> (8 * i);
            part[b] = fmaf(e2m1_exact(byte & 15u), lo(xw[i]), part[b]);
            part[b] = fmaf(e2m1_exact((byte >> 4) & 15u), hi(xw[i]), part[b]);
        }
    }
#pragma unroll
    for (int b = 0; b < NB; ++b) acc = fmaf(S::scale((k.sb >> (8 * b)) & 0xffu, k.global), part[b], acc);
}

// The row length a lane's loads cover at once: 3 chunks of each row a lane, so gpt-oss's 2880
// columns (90 chunks) are one group; longer rows take further groups.
#define MOE_FP4_DEC_COLUMNS 3072

// The FP4 gate|up kernels at 2 blocks a multiprocessor (at most 128 registers a thread): at
// moe_gate_up's 3 (80 registers) ptxas spilled 32 bytes of moe_gate_up_nvfp4 and 4 of
// moe_gate_up_clamped_mxfp4 for sm_90a (two rows' packed words and scales beside 8 x rows'
// sums).
#define MOE_FP4_GATE_UP_BLOCKS_PER_SM 2

// The gate|up kernels' two signatures (moe.cu's parameters with the scale bytes and the
// globals in place of the FP8 scales; gpt-oss's with the gate|up bias, alpha and limit), at 2
// blocks a multiprocessor, each body run with the experts' Fp4Weights `f` in scope.
#define MOE_FP4_GATE_UP_KERNEL(NAME, S, ...)                                                      \
    extern "C" __global__ void __launch_bounds__(MOE_WARPS * 32, MOE_FP4_GATE_UP_BLOCKS_PER_SM)  \
        NAME(bf16* act, const bf16* x, const unsigned char* w, const unsigned char* scales,       \
             const float* globals, const int* offsets, const int* active, const int* perm,        \
             int experts, int top_k, int inter, int hidden) {                                     \
        pdl_start();                                                                              \
        const Fp4Weights<S> f{w, scales, globals};                                                \
        __VA_ARGS__;                                                                              \
    }
#define MOE_FP4_CLAMPED_KERNEL(NAME, S, ...)                                                      \
    extern "C" __global__ void __launch_bounds__(MOE_WARPS * 32, MOE_FP4_GATE_UP_BLOCKS_PER_SM)  \
        NAME(bf16* act, const bf16* x, const unsigned char* w, const unsigned char* scales,       \
             const float* globals, const int* offsets, const int* active, const int* perm,        \
             int experts, int top_k, int inter, int hidden, const bf16* bias, float alpha,        \
             float limit) {                                                                       \
        pdl_start();                                                                              \
        const Fp4Weights<S> f{w, scales, globals};                                                \
        const MoeClampedAct<bf16> clamp{bias, alpha, limit};                                      \
        __VA_ARGS__;                                                                              \
    }

// The kernels. VEC false for every impl: moe_down_combine's VEC loop is the FP8/bf16 decode
// chunks'.
#define MOE_FP4_KERNELS(SUFFIX, S)                                                                \
    MOE_FP4_GATE_UP_KERNEL(moe_gate_up_##SUFFIX, S,                                               \
                           moe_gate_up_impl<false>(act, x, &f, nullptr, offsets, active, perm,    \
                                                   experts, top_k, inter, hidden))                \
    MOE_FP4_CLAMPED_KERNEL(moe_gate_up_clamped_##SUFFIX, S,                                       \
                           moe_gate_up_impl<false>(act, x, &f, nullptr, offsets, active, perm,    \
                                                   experts, top_k, inter, hidden, clamp))         \
    MOE_FP4_GATE_UP_KERNEL(moe_up_relu2_##SUFFIX, S,                                              \
                           moe_gate_up_impl<false>(act, x, &f, nullptr, offsets, active, perm,    \
                                                   experts, top_k, inter, hidden, MoeRelu2Act{})) \
    extern "C" __global__ void moe_down_##SUFFIX(                                                 \
        float* ys, const bf16* act, const unsigned char* w, const unsigned char* scales,          \
        const float* globals, const int* offsets, const int* active, const int* perm,             \
        int experts, int inter, int hidden) {                                                     \
        pdl_start();                                                                              \
        const Fp4Weights<S> f{w, scales, globals};                                                \
        moe_down_impl<false>(ys, act, &f, nullptr, offsets, active, perm, experts, inter,        \
                             hidden);                                                             \
    }                                                                                             \
    extern "C" __global__ void moe_down_combine_##SUFFIX(                                         \
        float* out, const bf16* act, const unsigned char* w, const unsigned char* scales,         \
        const float* globals, const int* ids, const float* weights, int tokens, int top_k,        \
        int inter, int hidden) {                                                                  \
        pdl_start();                                                                              \
        const Fp4Weights<S> f{w, scales, globals};                                                \
        moe_down_combine_impl<false>(out, act, &f, nullptr, ids, weights, tokens, top_k, inter,   \
                                     hidden);                                                     \
    }

MOE_FP4_KERNELS(nvfp4, Fp4Nv)
MOE_FP4_KERNELS(mxfp4, Fp4Mx)

// The one-token kernels (the plan's GateUp::Decode and Down::Combined { cols > 0 }): gate|up
// with SiLU or gpt-oss's clamped SwiGLU, and down + the weighted sum, COLS output columns a
// block, with gpt-oss's down bias when `bias` is not null (moe_combine_bias's terms).
#define MOE_FP4_DEC_KERNELS(SUFFIX, S)                                                            \
    MOE_FP4_GATE_UP_KERNEL(moe_gate_up_dec_##SUFFIX, S,                                           \
                           moe_gate_up_dec_impl<MOE_FP4_DEC_COLUMNS>(                             \
                               act, x, &f, nullptr, offsets, active, perm, experts, top_k, inter, \
                               hidden))                                                           \
    MOE_FP4_CLAMPED_KERNEL(moe_gate_up_clamped_dec_##SUFFIX, S,                                   \
                           moe_gate_up_dec_impl<MOE_FP4_DEC_COLUMNS>(                             \
                               act, x, &f, nullptr, offsets, active, perm, experts, top_k, inter, \
                               hidden, clamp))                                                    \
    MOE_FP4_DOWN_COMBINE_DEC(SUFFIX, S, 1)                                                        \
    MOE_FP4_DOWN_COMBINE_DEC(SUFFIX, S, 2)                                                        \
    MOE_FP4_DOWN_COMBINE_DEC(SUFFIX, S, 4)

#define MOE_FP4_DOWN_COMBINE_DEC(SUFFIX, S, COLS)                                                 \
    extern "C" __global__ void moe_down_combine_dec##COLS##_##SUFFIX(                             \
        float* out, const bf16* act, const unsigned char* w, const unsigned char* scales,         \
        const float* globals, const int* ids, const float* weights, int tokens, int top_k,        \
        int inter, int hidden, const bf16* bias) {                                                \
        const Fp4Weights<S> f{w, scales, globals};                                                \
        moe_down_combine_dec_impl<COLS, MOE_FP4_DEC_COLUMNS>(out, act, &f, nullptr, ids, weights, \
                                                             tokens, top_k, inter, hidden, bias); \
    }

MOE_FP4_DEC_KERNELS(nvfp4, Fp4Nv)
MOE_FP4_DEC_KERNELS(mxfp4, Fp4Mx)

// MXFP4 weights [rows, k] (k % 32 == 0) as bf16, for a stray stack's copy: a thread a packed
// word (8 values; the scale block of 32 is word i / 4), e2m1 · 2^(e8m0 − 127) exactly (bf16
// holds every such value above 2^-133, which no checkpoint scale reaches), one 16-byte store.
extern "C" __global__ void dequant_mxfp4_bf16(bf16* out, const unsigned char* w,
                                              const unsigned char* scales, u64 rows, int k) {
    pdl_start();
    const u64 words = rows * (u64)(k >> 3);
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += (u64)gridDim.x * blockDim.x)
        fp4_word_to_bf16(load_stream4((const u32*)w + i), e8m0_value(scales[i >> 2]), out + (i << 3));
}
