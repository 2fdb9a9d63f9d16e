// Matrix times a few vectors, for decode steps: out[m, n] = sum_k x[m, k] * w[n, k] (f32 out),
// with x bf16 [M, K], w bf16 [N, K] (the checkpoint's out × in layout), M <= 8.
//
// At batch 1-8 a decode step's GEMMs are pure weight streaming (the floor is N·K·2 bytes over
// the HBM bandwidth); cuBLAS's GEMM kernels run there at about 60% of it. Here one warp owns one
// output column n for all M rows: it streams w's row n with 16-byte loads that bypass L1
// (ld.global.nc.L1::no_allocate: each weight byte is read once), four loads in flight a lane
// before the first is used, and takes the matching 16 bytes of each x row through L1 (x is a few
// KB that every warp re-reads). Products accumulate in f32 per lane, then one warp reduction per
// row. Requires K % 8 == 0 (rows 16-byte aligned: device allocations are 256-byte aligned);
// the launcher falls back to cuBLAS otherwise.
//
// Versions tried (H200, Qwen3-8B shapes, M = 1): cuBLAS GemmEx bf16→f32 (baseline, see
// docs/performance.md); this kernel.
//
// Symbols: gemv_m<M> for M = 1..8; gemv_bias_m1, gemv_m1 adding a bf16 bias to each output
// column (gpt-oss's biased projections at one row: the sum, then the add, as matmul then
// add_bias make it, one launch fewer).

#define GEMV_WARPS 8

template <int M>
__device__ __forceinline__ void gemv_chunk(float* acc, u32x4 wv, const u32x4* x, int chunks, int c) {
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] = dot8(acc[m], wv, load_cached(x + (u64)m * chunks + c));
}

template <int M, bool BIAS = false>
__device__ void gemv_impl(float* out, const bf16* x, const bf16* w, int n_total, int k,
                          const bf16* bias = nullptr) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int n = blockIdx.x * GEMV_WARPS + warp;
    if (n >= n_total) return;
    const int chunks = k >> 3;
    const u32x4* wr = (const u32x4*)(w + (u64)n * k);
    const u32x4* xr = (const u32x4*)x;
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
            for (int i = 0; i < 4; ++i) gemv_chunk<M>(acc, a[i], xr, chunks, c + 32 * i);
            c += 128;
            if (c + 96 >= chunks) break;
            load4(a, wr, c);
        }
    }
    for (; c < chunks; c += 32) gemv_chunk<M>(acc, load_stream(wr + c), xr, chunks, c);
#pragma unroll
    for (int m = 0; m < M; ++m) {
        const float v = warp_sum(acc[m]);
        if (lane == 0) out[(u64)m * n_total + n] = BIAS ? v + to_f32(bias[n]) : v;
    }
}

#define GEMV(M)                                                                                    \
    extern "C" __global__ void gemv_m##M(float* out, const bf16* x, const bf16* w, int n, int k) { \
        gemv_impl<M>(out, x, w, n, k);                                                             \
    }

GEMV(1)
GEMV(2)
GEMV(3)
GEMV(4)
GEMV(5)
GEMV(6)
GEMV(7)
GEMV(8)

extern "C" __global__ void gemv_bias_m1(float* out, const bf16* x, const bf16* w, int n, int k,
                                        const bf16* bias) {
    gemv_impl<1, true>(out, x, w, n, k, bias);
}

// gemv_full_r<R>g<G> (M = 1, K <= 256 · G, K % 8 == 0): gemv_m1 with a warp's whole rows loaded
// before it waits on x's writer: R rows a warp (R · 8 a block), G 16-byte chunks of each a lane,
// so a grid that fits the GPU at once has every weight byte in flight while the kernel before
// it runs (gemv_m1 loads the first 128 chunks of a row: a quarter of o's at K = 4096, and a
// one-token qkv GEMV of 640 blocks is more than a wave). The launcher takes it only when the
// grid fits in one wave at the kernel's blocks a multiprocessor. A row's chunks are taken in
// gemv_m1's order (lane, lane + 32, ...), the same sums bit for bit.
template <int R, int G>
__device__ void gemv_full_impl(float* out, const bf16* x, const bf16* w, int n_total, int k) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int n0 = (blockIdx.x * GEMV_WARPS + warp) * R;
    if (n0 >= n_total) return;
    const int chunks = k >> 3;
    const u32x4* xr = (const u32x4*)x;
    u32x4 a[R][G];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const u32x4* wr = (const u32x4*)(w + (u64)min(n0 + r, n_total - 1) * k);
#pragma unroll
        for (int u = 0; u < G; ++u)
            if (lane + 32 * u < chunks) a[r][u] = load_stream(wr + lane + 32 * u);
    }
    pdl_start();
#pragma unroll
    for (int r = 0; r < R; ++r) {
        float acc[1] = {0.f};
#pragma unroll
        for (int u = 0; u < G; ++u)
            if (lane + 32 * u < chunks) gemv_chunk<1>(acc, a[r][u], xr, chunks, lane + 32 * u);
        const float v = warp_sum(acc[0]);
        if (lane == 0 && n0 + r < n_total) out[n0 + r] = v;
    }
}

// BLOCKS: blocks a multiprocessor the launcher counts on (the register cap).
#define GEMV_FULL(R, G, BLOCKS)                                                                    \
    extern "C" __global__ void __launch_bounds__(GEMV_WARPS * 32, BLOCKS)                          \
        gemv_full_r##R##g##G(float* out, const bf16* x, const bf16* w, int n, int k) {             \
        gemv_full_impl<R, G>(out, x, w, n, k);                                                     \
    }

GEMV_FULL(1, 8, 4)
GEMV_FULL(2, 8, 3)
GEMV_FULL(1, 16, 2)

// The MLP's first half fused: out[m, j] = silu(g) · u with g = x[m]·w[j], u = x[m]·w[I + j] for
// a gate_up weight [2·I, K] (gate rows, then up rows), out bf16 [M, I]. One warp owns output j
// and streams both of its weight rows (eight 16-byte loads in flight a lane), so the [M, 2·I]
// f32 intermediate and the separate silu_mul launch of the unfused path disappear. Per lane the
// products accumulate in the same order as gemv_impl, so g and u, and hence the result, equal
// the unfused path's bit for bit.
//
// Symbols: gemv_silu_m<M> for M = 1..8.
template <int M>
__device__ void gemv_silu_impl(bf16* out, const bf16* x, const bf16* w, int inter, int k) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int j = blockIdx.x * GEMV_WARPS + warp;
    if (j >= inter) return;
    const int chunks = k >> 3;
    const u32x4* wg = (const u32x4*)(w + (u64)j * k);
    const u32x4* wu = (const u32x4*)(w + (u64)(inter + j) * k);
    const u32x4* xr = (const u32x4*)x;
    u32x4 a[4], b[4];
    const bool first = row_prologue(a, wg, chunks, lane);
    row_prologue(b, wu, chunks, lane);
    pdl_start();
    float g[M], u[M];
#pragma unroll
    for (int m = 0; m < M; ++m) g[m] = u[m] = 0.f;
    int c = lane;
    if (first) {
        for (;;) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                gemv_chunk<M>(g, a[i], xr, chunks, c + 32 * i);
                gemv_chunk<M>(u, b[i], xr, chunks, c + 32 * i);
            }
            c += 128;
            if (c + 96 >= chunks) break;
            load4(a, wg, c);
            load4(b, wu, c);
        }
    }
    for (; c < chunks; c += 32) {
        gemv_chunk<M>(g, load_stream(wg + c), xr, chunks, c);
        gemv_chunk<M>(u, load_stream(wu + c), xr, chunks, c);
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
        const float gs = warp_sum(g[m]);
        const float us = warp_sum(u[m]);
        if (lane == 0) out[(u64)m * inter + j] = from_f32<bf16>(gs / (1.0f + expf(-gs)) * us);
    }
}

#define GEMV_SILU(M)                                                                               \
    extern "C" __global__ void gemv_silu_m##M(bf16* out, const bf16* x, const bf16* w, int inter,  \
                                              int k) {                                             \
        gemv_silu_impl<M>(out, x, w, inter, k);                                                    \
    }

GEMV_SILU(1)
GEMV_SILU(2)
GEMV_SILU(3)
GEMV_SILU(4)
GEMV_SILU(5)
GEMV_SILU(6)
GEMV_SILU(7)
GEMV_SILU(8)
