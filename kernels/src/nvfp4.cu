// NVFP4 weights kept packed on the GPU, weight-only (issue 35; docs/nvfp4.md): w as the
// checkpoint stores it, packed E2M1 [N, K / 2] (element 2i the low nibble of byte i, a nibble
// sign << 3 | code), one E4M3 scale byte [N, K / 16] per 16 values of a row, and one f32
// multiplier [N] a row (ModelOpt's weight_scale_2, 1 / weight_global_scale for
// compressed-tensors; a row's own so fused projections keep each part's global). A weight's
// value is e2m1 · (e4m3 · global): 0.5625 bytes a weight instead of bf16's 2.
//
// e2m1_exact: a nibble's value by placing its three code bits at f32 bit 22 (exponent field e,
// mantissa top bit m: 2^(e-127)·(1 + m/2), and for e = 0 the subnormal m·2^-127) and
// multiplying by 2^126: the E2M1 value exactly (subnormals kept: NVRTC is not given ftz).
//
// gemv_nvfp4_m<M> (M = 1..4, K % 32 == 0): decode steps. A warp owns output row n for all M
// rows of x and streams w's row n with 16-byte loads that bypass L1 (32 weights a load, four
// loads in flight a lane, as gemv_fp8_m<M>), widens them in registers, dots each 16-value block
// with the x rows in f32 and adds the block's sum times e4m3 · global. The floor is 0.28 of
// the bf16 GEMV's bytes.
// gemv_nvfp4_rows: any K % 16 == 0 (scalar loads), one x row at a time (the lab's first
// version, kernels/dev/nvfp4/gemv_nvfp4.cu).
// dequant_nvfp4_bf16 (K % 32 == 0): the weight as bf16 [N, K] for GEMMs of more rows (cuBLAS's
// bf16 GEMM on the scratch copy): e2m1 · f32(e4m3 · global), rounded once to bf16.
// fill_random_nvfp4_bytes: dummy NVFP4 weights drawn on the device, byte for byte what
// `random_nvfp4_parts` gives on the host (`HostData::RandomNvfp4`): the splitmix64 chunks of
// fill_random_fp8, each draw's bits from `shift` up, or'ed with `bits` (packed pairs: the top
// byte; E4M3 scales: the top three bits as the mantissa of 0x38, values 1 to 1.875).
//
// Versions tried: this one. On an H100 (docs/performance-log part 13) m1 streams 1.0-1.6 TB/s
// and each further row adds about the first row's time (every warp re-reads its x rows from
// cache for each 32-weight chunk: 4 bytes of x a weight a row), so m5..m8 (192 us at 8 rows of
// Qwen3.6-27B's in_proj against ~115 for the bf16 copy and cuBLAS) were deleted; more than 4
// rows take the copy.

#define NVFP4_WARPS 8

__device__ __forceinline__ float e2m1_exact(u32 nibble) {
    return __uint_as_float(((nibble & 7u) << 22) | ((nibble & 8u) << 28)) * __uint_as_float(0x7e800000u);
}

// Sum over one 16-byte chunk (32 weights, two scale blocks) for M rows of x.
template <int M>
__device__ __forceinline__ void nvfp4_chunk(float* acc, u32x4 q, u32 sc2, float global, const bf16* x,
                                            int k, int c) {
    const u32 words[4] = {q.x, q.y, q.z, q.w};
    float w[32];
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int i = 0; i < 8; ++i) w[8 * j + i] = e2m1_exact(words[j] >> (4 * i));
    const float s0 = e4m3_value(sc2 & 0xffu) * global, s1 = e4m3_value((sc2 >> 8) & 0xffu) * global;
#pragma unroll
    for (int m = 0; m < M; ++m) {
        const u32x4* xp = (const u32x4*)(x + (u64)m * k) + 4 * c;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const u32x4 a = load_cached(xp + 2 * h), b = load_cached(xp + 2 * h + 1);
            const u32 xs[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
            float part = 0.f;
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                part = fmaf(w[16 * h + 2 * i], lo(xs[i]), part);
                part = fmaf(w[16 * h + 2 * i + 1], hi(xs[i]), part);
            }
            acc[m] = fmaf(h ? s1 : s0, part, acc[m]);
        }
    }
}

template <int M>
__device__ void gemv_nvfp4_impl(float* out, const bf16* x, const unsigned char* w,
                                const unsigned char* scales, const float* globals, int n_total, int k) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int n = blockIdx.x * NVFP4_WARPS + warp;
    if (n >= n_total) return;
    const int chunks = k >> 5;
    const u32x4* wr = (const u32x4*)(w + (u64)n * (k >> 1));
    const unsigned short* sr = (const unsigned short*)(scales + (u64)n * (k >> 4));
    const float global = globals[n];
    u32x4 a[4];
    const bool first = row_prologue(a, wr, chunks, lane);
    pdl_start();
    float acc[M];
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] = 0.f;
    int c = lane;
    if (first) {
        for (;;) {
#pragma unroll
            for (int i = 0; i < 4; ++i) nvfp4_chunk<M>(acc, a[i], sr[c + 32 * i], global, x, k, c + 32 * i);
            c += 128;
            if (c + 96 >= chunks) break;
            load4(a, wr, c);
        }
    }
    for (; c < chunks; c += 32) nvfp4_chunk<M>(acc, load_stream(wr + c), sr[c], global, x, k, c);
#pragma unroll
    for (int m = 0; m < M; ++m) {
        const float v = warp_sum(acc[m]);
        if (lane == 0) out[(u64)m * n_total + n] = v;
    }
}

#define GEMV_NVFP4(M, BLOCKS)                                                                      \
    extern "C" __global__ void __launch_bounds__(NVFP4_WARPS * 32, BLOCKS)                         \
        gemv_nvfp4_m##M(float* out, const bf16* x, const unsigned char* w,                         \
                        const unsigned char* scales, const float* globals, int n, int k) {         \
        gemv_nvfp4_impl<M>(out, x, w, scales, globals, n, k);                                      \
    }

GEMV_NVFP4(1, 4)
GEMV_NVFP4(2, 4)
GEMV_NVFP4(3, 1)
GEMV_NVFP4(4, 1)

extern "C" __global__ void __launch_bounds__(NVFP4_WARPS * 32)
    gemv_nvfp4_rows(float* out, const bf16* x, const unsigned char* w, const unsigned char* scales,
                    const float* globals, int m_total, int n_total, int k) {
    pdl_start();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int n = blockIdx.x * NVFP4_WARPS + warp;
    if (n >= n_total) return;
    const int blocks = k >> 4;
    const unsigned char* wr = w + (u64)n * (k >> 1);
    const unsigned char* sr = scales + (u64)n * blocks;
    for (int m = 0; m < m_total; ++m) {
        const bf16* xr = x + (u64)m * k;
        float acc = 0.f;
        for (int b = lane; b < blocks; b += 32) {
            float part = 0.f;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const u32 byte = wr[b * 8 + j];
                part = fmaf(e2m1_exact(byte & 15u), to_f32(xr[b * 16 + 2 * j]), part);
                part = fmaf(e2m1_exact(byte >> 4), to_f32(xr[b * 16 + 2 * j + 1]), part);
            }
            acc = fmaf(e4m3_value(sr[b]) * globals[n], part, acc);
        }
        acc = warp_sum(acc);
        if (lane == 0) out[(u64)m * n_total + n] = acc;
    }
}

// A thread a 16-byte chunk (32 weights): one load, four 16-byte stores.
extern "C" __global__ void dequant_nvfp4_bf16(bf16* out, const unsigned char* w, const unsigned char* scales,
                                              const float* globals, u64 rows, int k) {
    pdl_start();
    const u64 chunks = rows * (u64)(k >> 5);
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < chunks; i += (u64)gridDim.x * blockDim.x) {
        const u64 e0 = i << 5, r = e0 / (u64)k;
        const float g = globals[r];
        const unsigned char* sp = scales + (e0 >> 4);
        const float s[2] = {e4m3_value(sp[0]) * g, e4m3_value(sp[1]) * g};
        const u32x4 q = load_stream((const u32x4*)w + i);
        const u32 words[4] = {q.x, q.y, q.z, q.w};
        u32 o[16];
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int p = 0; p < 4; ++p) {
                const u32 b = words[j] >> (8 * p);
                const u32 l = from_f32<bf16>(e2m1_exact(b & 15u) * s[j >> 1]).bits;
                const u32 h = from_f32<bf16>(e2m1_exact(b >> 4) * s[j >> 1]).bits;
                o[4 * j + p] = l | (h << 16);
            }
        u32x4* dst = (u32x4*)(out + e0);
#pragma unroll
        for (int v = 0; v < 4; ++v) dst[v] = u32x4{o[4 * v], o[4 * v + 1], o[4 * v + 2], o[4 * v + 3]};
    }
}

// Thread `chunk` draws bytes [chunk · 65536, +65536) in order, as random_nvfp4_parts does.
extern "C" __global__ void fill_random_nvfp4_bytes(unsigned char* out, u64 n, u64 seed, int shift, u32 bits) {
    pdl_start();
    u64 start, end, state;
    if (!random_chunk(n, seed, &start, &end, &state)) return;
    for (u64 i = start; i < end; ++i) {
        state = splitmix64(state);
        out[i] = (unsigned char)((u32)(state >> shift) | bits);
    }
}
