// Fine-grained FP8 weights (Qwen's `*-FP8` checkpoints) used as they are stored: e4m3 bytes
// [N, K] and one f32 scale per 128 columns of each row ([N, ceil(K/128)]: the checkpoint's
// 128 x 128 block scales expanded to every row at load, so fused q|k|v and gate|up weights need
// no block bookkeeping; 4 bytes per 128 weights, 3% more to read).
//
// gemv_fp8_m<M> (M = 1..8, K % 16 == 0): decode steps. One warp owns output column n for all M
// rows and streams w's row n with 16-byte loads that bypass L1 (16 weights a load, four loads
// in flight a lane before the first is used), widens the bytes to their exact values in
// registers (prelude's e4m3x4_values: hardware conversions on sm_89+), sums a 16-byte chunk's
// products with the matching 32 bytes of each bf16 x row (through L1) in f32 and adds the sum
// times the chunk's scale (16 weights share a 128-column block). Half the bytes of the bf16
// GEMV (gemv.cu) per weight: the floor of a decode step's weights halves. Scaling each weight
// (the bits placed and multiplied, five instructions a weight) made the kernel issue-bound:
// on the H200 the qkv GEMV of 30B-A3B at batch 1 issued 8.7 instructions a weight and moved
// 1.2 TB/s (ncu).
// gemv_fp8_rows: the same for any K (scalar loads), one row of x at a time.
//
// dequant_fp8_bf16: the weight as bf16 ([N, K], grid-stride), for GEMMs of more rows, which go
// to cuBLAS's bf16 tensor-core GEMM on that scratch copy (the value rounded once more, to bf16).
// dequant_fp8_fp32: the same in f32 (e4m3 · scale, one rounding: the CPU loader's value bit for
// bit), how the float32 path keeps dummy FP8 weights.
//
// fill_random_fp8: dummy FP8 weights drawn on the device, byte for byte what
// `HostData::RandomFp8` gives on the host: the same splitmix64 chunks as fill_random_bf16, each
// draw's top byte with bit 6 cleared (sign, exponent 0..7, any mantissa: values up to ±1.875,
// never NaN), and one scale everywhere (chosen on the host so the values have the asked std).
//
// Versions tried: this one (not yet timed on the GPU).

#define FP8_WARPS 8

template <int M>
__device__ __forceinline__ void fp8_chunk(float* acc, u32x4 q, float scale, const bf16* x, int k, int c) {
    const u32 words[4] = {q.x, q.y, q.z, q.w};
    float w[16];
#pragma unroll
    for (int j = 0; j < 4; ++j) e4m3x4_values(words[j], w + 4 * j);
#pragma unroll
    for (int m = 0; m < M; ++m) {
        const u32x4* xp = (const u32x4*)(x + (u64)m * k) + 2 * c;
        const u32x4 a = load_cached(xp), b = load_cached(xp + 1);
        const u32 xs[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        float part = 0.f;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            part = fmaf(w[2 * i], lo(xs[i]), part);
            part = fmaf(w[2 * i + 1], hi(xs[i]), part);
        }
        acc[m] = fmaf(scale, part, acc[m]);
    }
}

template <int M>
__device__ void gemv_fp8_impl(float* out, const bf16* x, const unsigned char* w, const float* scales,
                              int n_total, int k) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int n = blockIdx.x * FP8_WARPS + warp;
    if (n >= n_total) return;
    const int chunks = k >> 4;
    const u32x4* wr = (const u32x4*)(w + (u64)n * k);
    const float* sr = scales + (u64)n * ((k + 127) >> 7);
    // gemv.cu's prologue: the first 128 chunks and their scales before waiting on x's writer.
    u32x4 a[4];
    float s[4];
    const bool first = row_prologue(a, wr, chunks, lane);
    if (first) {
#pragma unroll
        for (int i = 0; i < 4; ++i) s[i] = sr[(lane + 32 * i) >> 3];
    }
    pdl_start();
    float acc[M];
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] = 0.f;
    int c = lane;
    if (first) {
        for (;;) {
#pragma unroll
            for (int i = 0; i < 4; ++i) fp8_chunk<M>(acc, a[i], s[i], x, k, c + 32 * i);
            c += 128;
            if (c + 96 >= chunks) break;
            load4(a, wr, c);
#pragma unroll
            for (int i = 0; i < 4; ++i) s[i] = sr[(c + 32 * i) >> 3];
        }
    }
    for (; c < chunks; c += 32) fp8_chunk<M>(acc, load_stream(wr + c), sr[c >> 3], x, k, c);
#pragma unroll
    for (int m = 0; m < M; ++m) {
        const float v = warp_sum(acc[m]);
        if (lane == 0) out[(u64)m * n_total + n] = v;
    }
}

// BLOCKS: blocks a multiprocessor at least (the register cap; M = 1, 2, the decode steps of
// one or two sequences: larger M would spill). Left to itself the compiler gave every M 86
// registers a thread, two blocks a multiprocessor: the qkv GEMV of 30B-A3B at batch 1 (640
// blocks) then ran in three waves, 9.1 µs for 10.5 MB (ncu, H200, boost clocks).
#define GEMV_FP8(M, BLOCKS)                                                                        \
    extern "C" __global__ void __launch_bounds__(FP8_WARPS * 32, BLOCKS)                           \
        gemv_fp8_m##M(float* out, const bf16* x, const unsigned char* w, const float* scales,      \
                      int n, int k) {                                                              \
        gemv_fp8_impl<M>(out, x, w, scales, n, k);                                                 \
    }

GEMV_FP8(1, 4)
GEMV_FP8(2, 4)
GEMV_FP8(3, 1)
GEMV_FP8(4, 1)
GEMV_FP8(5, 1)
GEMV_FP8(6, 1)
GEMV_FP8(7, 1)
GEMV_FP8(8, 1)

// gemv_fp8_full_r<R>g<G> (M = 1, K <= 512 · G, K % 16 == 0): gemv_fp8_m1 with a warp's whole
// rows and their scales loaded before it waits on x's writer (gemv.cu's gemv_full: the same
// idea and launcher rule). A row's chunks in gemv_fp8_m1's order: the same sums bit for bit.
template <int R, int G>
__device__ void gemv_fp8_full_impl(float* out, const bf16* x, const unsigned char* w,
                                   const float* scales, int n_total, int k) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int n0 = (blockIdx.x * FP8_WARPS + warp) * R;
    if (n0 >= n_total) return;
    const int chunks = k >> 4, groups = (k + 127) >> 7;
    u32x4 a[R][G];
    float s[R][G];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const u64 n = (u64)min(n0 + r, n_total - 1);
        const u32x4* wr = (const u32x4*)(w + n * k);
        const float* sr = scales + n * groups;
#pragma unroll
        for (int u = 0; u < G; ++u)
            if (lane + 32 * u < chunks) {
                a[r][u] = load_stream(wr + lane + 32 * u);
                s[r][u] = sr[(lane + 32 * u) >> 3];
            }
    }
    pdl_start();
#pragma unroll
    for (int r = 0; r < R; ++r) {
        float acc[1] = {0.f};
#pragma unroll
        for (int u = 0; u < G; ++u)
            if (lane + 32 * u < chunks) fp8_chunk<1>(acc, a[r][u], s[r][u], x, k, lane + 32 * u);
        const float v = warp_sum(acc[0]);
        if (lane == 0 && n0 + r < n_total) out[n0 + r] = v;
    }
}

#define GEMV_FP8_FULL(R, G, BLOCKS)                                                                \
    extern "C" __global__ void __launch_bounds__(FP8_WARPS * 32, BLOCKS)                           \
        gemv_fp8_full_r##R##g##G(float* out, const bf16* x, const unsigned char* w,                \
                                 const float* scales, int n, int k) {                              \
        gemv_fp8_full_impl<R, G>(out, x, w, scales, n, k);                                         \
    }

GEMV_FP8_FULL(2, 4, 3)
GEMV_FP8_FULL(1, 8, 3)

// gemv_fp8_mma (M <= 8, K % 64 == 0, sm_80+): the same product on tensor cores (prelude's
// fp8_mma_tiles), so a weight costs a fraction of an instruction instead of gemv_fp8_m<M>'s
// widen and multiply-add for each of the M rows: a block of 8 warps owns 16 output columns,
// x's rows are the mma's B columns (rows past M read as zeros and are not written). On the H200
// (30B-A3B FP8, graph steps): batch 8 9.18 -> 8.18 ms; batch 1 2.85 -> 2.96 ms, so one-row
// products keep gemv_fp8_m1.
extern "C" __global__ void __launch_bounds__(FP8_MMA_WARPS * 32)
    gemv_fp8_mma(float* out, const bf16* x, const unsigned char* w, const float* scales,
                 int m_total, int n_total, int k) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int n0 = blockIdx.x * 16, groups = (k + 127) >> 7;
    // Rows past the matrix read its last row (their sums are not written).
    const u64 r0 = (u64)min(n0 + g, n_total - 1), r1 = (u64)min(n0 + g + 8, n_total - 1);
    const unsigned char* const rows[1][2] = {{w + r0 * k, w + r1 * k}};
    const float* const scs[1][2] = {{scales + r0 * groups, scales + r1 * groups}};
    const bf16* const xrows[1] = {g < m_total ? x + (u64)g * k : nullptr};
    float acc[1][1][4] = {};
    fp8_mma_tiles<1, 1, 4>(acc, rows, scs, xrows, k, true);
    if (!fp8_mma_reduce<1>(&acc[0][0][0])) return;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int n = n0 + g + 8 * (i >> 1), m = 2 * t + (i & 1);
        if (n < n_total && m < m_total) out[(u64)m * n_total + n] = acc[0][0][i];
    }
}

// gemv_bf16_mma (M <= 8, K % 64 == 0, sm_80+): gemv_fp8_mma for bf16 weights (fp8_mma_tiles'
// Bf16Rows: a lane loads its 16 elements of each weight row as two 16-byte loads, no scale),
// for the 2-8-row products cuBLAS serves slowly: an MTP verify step's rows (k + 1 a sequence)
// and small decode batches on bf16 weights (blas.rs's matmul_op; one row keeps gemv_m1).
extern "C" __global__ void __launch_bounds__(FP8_MMA_WARPS * 32)
    gemv_bf16_mma(float* out, const bf16* x, const bf16* w, int m_total, int n_total, int k) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int n0 = blockIdx.x * 16;
    const u64 r0 = (u64)min(n0 + g, n_total - 1), r1 = (u64)min(n0 + g + 8, n_total - 1);
    const unsigned char* const rows[1][2] = {
        {(const unsigned char*)(w + r0 * k), (const unsigned char*)(w + r1 * k)}};
    const float* const scs[1][2] = {{nullptr, nullptr}};
    const bf16* const xrows[1] = {g < m_total ? x + (u64)g * k : nullptr};
    float acc[1][1][4] = {};
    fp8_mma_tiles<1, 1, 4, true, Bf16Rows>(acc, rows, scs, xrows, k, true);
    if (!fp8_mma_reduce<1>(&acc[0][0][0])) return;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int n = n0 + g + 8 * (i >> 1), m = 2 * t + (i & 1);
        if (n < n_total && m < m_total) out[(u64)m * n_total + n] = acc[0][0][i];
    }
}

// gemv_fp8_mma_many (any M, K % 64 == 0, sm_80+): gemv_fp8_mma for decode batches of more than
// 8 rows, 32 rows (four B tiles sharing each widened weight slice) a chunk, the chunks one after
// another in the block (each after the first reads the block's 16 weight rows again, from L2).
// Below the launcher's FP8_MMA_MAX_ROWS it replaces passes of gemv_fp8_m8 (each widening and
// multiplying every weight for each row) and, from 33 rows, a bf16 copy of the weight + cuBLAS
// (5 bytes a weight). Two blocks a multiprocessor at least: 128 registers (four slices' loads in
// flight a warp took 132 unbounded and spilled at 128, so two).
extern "C" __global__ void __launch_bounds__(FP8_MMA_WARPS * 32, 2)
    gemv_fp8_mma_many(float* out, const bf16* x, const unsigned char* w, const float* scales,
                      int m_total, int n_total, int k) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int n0 = blockIdx.x * 16, groups = (k + 127) >> 7;
    const u64 r0 = (u64)min(n0 + g, n_total - 1), r1 = (u64)min(n0 + g + 8, n_total - 1);
    const unsigned char* const rows[1][2] = {{w + r0 * k, w + r1 * k}};
    const float* const scs[1][2] = {{scales + r0 * groups, scales + r1 * groups}};
    for (int m0 = 0; m0 < m_total; m0 += 32) {
        const bf16* xrows[4];
#pragma unroll
        for (int nb = 0; nb < 4; ++nb) {
            const int m = m0 + 8 * nb + g;
            xrows[nb] = m < m_total ? x + (u64)m * k : nullptr;
        }
        float acc[1][4][4] = {};
        fp8_mma_tiles<1, 4, 2>(acc, rows, scs, xrows, k, m0 == 0);
        if (fp8_mma_reduce<4>(&acc[0][0][0])) {
#pragma unroll
            for (int nb = 0; nb < 4; ++nb)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int n = n0 + g + 8 * (i >> 1), m = m0 + 8 * nb + 2 * t + (i & 1);
                    if (n < n_total && m < m_total) out[(u64)m * n_total + n] = acc[0][nb][i];
                }
        }
        __syncthreads();  // warp 0 has read the shared sums before the next chunk writes them
    }
}

// Any K: a warp per output column, lanes striding over K one byte at a time, row by row of x.
extern "C" __global__ void gemv_fp8_rows(float* out, const bf16* x, const unsigned char* w,
                                         const float* scales, int m_total, int n_total, int k) {
    pdl_start();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int n = blockIdx.x * FP8_WARPS + warp;
    if (n >= n_total) return;
    const unsigned char* wr = w + (u64)n * k;
    const float* sr = scales + (u64)n * ((k + 127) >> 7);
    for (int m = 0; m < m_total; ++m) {
        float acc = 0.f;
        for (int i = lane; i < k; i += 32)
            acc = fmaf(e4m3_scaled(wr[i], fp8_scale120(sr[i >> 7])), to_f32(x[(u64)m * k + i]), acc);
        acc = warp_sum(acc);
        if (lane == 0) out[(u64)m * n_total + n] = acc;
    }
}

template <typename TO>
__device__ void dequant_fp8_impl(TO* out, const unsigned char* w, const float* scales, u64 rows,
                                 int k) {
    const u64 n = rows * k;
    const u64 per_row = (k + 127) >> 7;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        const u64 r = i / k, c = i % k;
        out[i] = from_f32<TO>(e4m3_scaled(w[i], fp8_scale120(scales[r * per_row + (c >> 7)])));
    }
}

extern "C" __global__ void dequant_fp8_bf16(bf16* out, const unsigned char* w, const float* scales,
                                            u64 rows, int k) {
    pdl_start();
    dequant_fp8_impl(out, w, scales, rows, k);
}

// k % 16 == 0: 8 weights a thread (one 8-byte load, one 16-byte store: a warp's loads 256
// contiguous bytes, its stores 512), the same values as dequant_fp8_bf16, the row and column
// kept by for_row_chunks. The per-element kernel above (a 64-bit division an element) moved
// 1 TB/s on the H200: 31 us for the 30B-A3B qkv weight, 4 times cuBLAS's GEMM on the copy at
// 128 rows; the build before this one took 16 weights a thread with a division each.
extern "C" __global__ void dequant_fp8_bf16_vec(bf16* out, const unsigned char* w,
                                                const float* scales, u64 rows, int k) {
    pdl_start();
    const u32 per_row = (u32)k >> 3, scales_per_row = ((u32)k + 127) >> 7;
    for_row_chunks(rows * per_row, per_row, [&](u64 i, u64 r, u32 c) {
        const float s = fp8_scale120(scales[r * scales_per_row + (c >> 4)]);
        const u32x2 q = load_stream8((const u32x2*)w + i);
        const u32 words[2] = {q.x, q.y};
        u32 o[4];
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const u32 lo = from_f32<bf16>(e4m3_scaled(words[j] >> (16 * h), s)).bits;
                const u32 hi = from_f32<bf16>(e4m3_scaled(words[j] >> (16 * h + 8), s)).bits;
                o[2 * j + h] = lo | (hi << 16);
            }
        store16(out + (i << 3), u32x4{o[0], o[1], o[2], o[3]});
    });
}

extern "C" __global__ void dequant_fp8_fp32(float* out, const unsigned char* w, const float* scales,
                                            u64 rows, int k) {
    pdl_start();
    dequant_fp8_impl(out, w, scales, rows, k);
}

// Thread `chunk` draws elements [chunk · 65536, +65536) in order; every thread also sets its
// share of the scales.
extern "C" __global__ void fill_random_fp8(unsigned char* out, u64 n, u64 seed, float* scales,
                                           u64 n_scales, float scale) {
    pdl_start();
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n_scales; i += (u64)gridDim.x * blockDim.x)
        scales[i] = scale;
    u64 start, end, state;
    if (!random_chunk(n, seed, &start, &end, &state)) return;
    for (u64 i = start; i < end; ++i) {
        state = splitmix64(state);
        out[i] = (unsigned char)((state >> 56) & 0xbfu);
    }
}
