// RMSNorm, and the decoder's fused "residual += x; out = rms_norm(residual) * w".
//
// One block per row. Pass one reads the row (and for the fused op adds x into the residual,
// rounds it to the residual's type and stores it back), summing squares in f32; a block
// reduction gives 1/sqrt(mean + eps). Pass two reads the row again (now from L1/L2: a row is at
// most a few tens of KB) and writes w * (v * inv) as bf16, the operand type of the GEMM that
// follows. Each thread reads back only what it wrote itself, so no barrier is needed between the
// residual store and the second pass. The arithmetic is the CPU reference's, in its order.
//
// Symbols: rms_norm_<x dtype>, add_rms_norm_<residual dtype>_<x dtype>; w is bf16, out is bf16.
// The float32 path's rms_norm_fp32 and add_rms_norm_fp32 take and give f32 everywhere.
//
// rms_norm_cols_<x dtype> (MiniMax-M2's q and k norms, each over all heads of the fused qkv):
// the same norm over columns start .. start + n of each row of x [rows, cols], in place (out is
// x, of x's type: the norm's second pass reads each element before the same thread writes it).
// _f32 and _bf16 take a bf16 weight; _fp32 (the float32 path) an f32 one.

// Values a thread holds in registers when a row fits (hidden <= NORM_REGS · blockDim): every
// load of the row is issued before the first is waited for (a strided loop waits for each in
// turn: a 5,120-wide decode row is five round trips a thread), the weight's loads are issued
// before the kernel waits for the one before it (weights are never written), and pass two
// reuses the values. Each thread sums the same elements in the same order either way.
#define NORM_REGS 8
// Threads a norm block may have (norm.rs's norm_threads: up to 1024 for a decode row): the
// bound keeps ptxas at 64 registers a thread (the fused op's register path took 68 unbounded,
// and a 1024-thread launch then failed for want of registers).
#define NORM_MAX_THREADS 1024

// The register path's weight (its loads issued before the kernel waits for the one before it:
// weights are never written), then the wait.
template <typename TW>
__device__ __forceinline__ void norm_weight_regs(float (&wv)[NORM_REGS], const TW* w, int hidden) {
#pragma unroll
    for (int j = 0; j < NORM_REGS; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        wv[j] = i < hidden ? to_f32(w[i]) : 0.f;
    }
    pdl_start();
}

// The register path's pass two: o = w · (v · inv).
template <typename TO>
__device__ __forceinline__ void norm_store_regs(TO* o, const float (&wv)[NORM_REGS], const float (&v)[NORM_REGS],
                                                float inv, int hidden) {
#pragma unroll
    for (int j = 0; j < NORM_REGS; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        if (i < hidden) o[i] = from_f32<TO>(wv[j] * (v[j] * inv));
    }
}

// One block per row of `hidden` values, rows `stride` elements apart (hidden for a whole row).
// Waits for the kernel before it (pdl_start) itself.
template <typename TO, typename TX, typename TW>
__device__ void rms_norm_impl(TO* out, const TX* x, const TW* w, int hidden, float eps,
                              u64 stride) {
    const u64 row = blockIdx.x;
    const TX* xr = x + row * stride;
    TO* o = out + row * stride;
    const int n = blockDim.x;
    if (hidden <= NORM_REGS * n) {
        float wv[NORM_REGS], v[NORM_REGS];
        norm_weight_regs(wv, w, hidden);
        float ss = 0.f;
#pragma unroll
        for (int j = 0; j < NORM_REGS; ++j) {
            const int i = threadIdx.x + j * n;
            v[j] = i < hidden ? to_f32(xr[i]) : 0.f;
        }
#pragma unroll
        for (int j = 0; j < NORM_REGS; ++j) ss += v[j] * v[j];
        norm_store_regs(o, wv, v, 1.0f / sqrtf(block_sum(ss) / (float)hidden + eps), hidden);
        return;
    }
    pdl_start();
    float ss = 0.f;
    for (int i = threadIdx.x; i < hidden; i += n) {
        const float v = to_f32(xr[i]);
        ss += v * v;
    }
    const float inv = 1.0f / sqrtf(block_sum(ss) / (float)hidden + eps);
    for (int i = threadIdx.x; i < hidden; i += n)
        o[i] = from_f32<TO>(to_f32(w[i]) * (to_f32(xr[i]) * inv));
}

// residual += x, then out = rms_norm(residual) · w; as rms_norm_impl, registers included.
template <typename TO, typename TR, typename TX, typename TW>
__device__ void add_rms_norm_impl(TO* out, TR* residual, const TX* x, const TW* w, int hidden,
                                  float eps) {
    const u64 row = blockIdx.x;
    TR* r = residual + row * hidden;
    const TX* xr = x + row * hidden;
    TO* o = out + row * hidden;
    const int n = blockDim.x;
    if (hidden <= NORM_REGS * n) {
        float wv[NORM_REGS], v[NORM_REGS];
        norm_weight_regs(wv, w, hidden);
        float a[NORM_REGS], b[NORM_REGS];
#pragma unroll
        for (int j = 0; j < NORM_REGS; ++j) {
            const int i = threadIdx.x + j * n;
            a[j] = i < hidden ? to_f32(r[i]) : 0.f;
            b[j] = i < hidden ? to_f32(xr[i]) : 0.f;
        }
        float ss = 0.f;
#pragma unroll
        for (int j = 0; j < NORM_REGS; ++j) {
            const int i = threadIdx.x + j * n;
            const TR sum = from_f32<TR>(a[j] + b[j]);
            if (i < hidden) r[i] = sum;
            v[j] = to_f32(sum);
            ss += v[j] * v[j];
        }
        norm_store_regs(o, wv, v, 1.0f / sqrtf(block_sum(ss) / (float)hidden + eps), hidden);
        return;
    }
    pdl_start();
    float ss = 0.f;
    for (int i = threadIdx.x; i < hidden; i += n) {
        const TR sum = from_f32<TR>(to_f32(r[i]) + to_f32(xr[i]));
        r[i] = sum;
        const float v = to_f32(sum);
        ss += v * v;
    }
    const float inv = 1.0f / sqrtf(block_sum(ss) / (float)hidden + eps);
    for (int i = threadIdx.x; i < hidden; i += n)
        o[i] = from_f32<TO>(to_f32(w[i]) * (to_f32(r[i]) * inv));
}

#define RMS_NORM(SUFFIX, TX)                                                                       \
    extern "C" __global__ void __launch_bounds__(NORM_MAX_THREADS)                                 \
        rms_norm_##SUFFIX(bf16* out, const TX* x, const bf16* w, int hidden, float eps) {         \
        rms_norm_impl(out, x, w, hidden, eps, (u64)hidden);                                        \
    }

RMS_NORM(f32, float)
RMS_NORM(bf16, bf16)

#define RMS_NORM_COLS(SUFFIX, TX, TW)                                                              \
    extern "C" __global__ void __launch_bounds__(NORM_MAX_THREADS)                                 \
        rms_norm_cols_##SUFFIX(TX* x, const TW* w, int start, int n, int cols, float eps) {       \
        rms_norm_impl(x + start, x + start, w, n, eps, (u64)cols);                                 \
    }

RMS_NORM_COLS(f32, float, bf16)
RMS_NORM_COLS(bf16, bf16, bf16)
RMS_NORM_COLS(fp32, float, float)

#define ADD_RMS_NORM(SUFFIX, TR, TX)                                                               \
    extern "C" __global__ void __launch_bounds__(NORM_MAX_THREADS)                                 \
        add_rms_norm_##SUFFIX(bf16* out, TR* residual, const TX* x, const bf16* w, int hidden,    \
                              float eps) {                                                         \
        add_rms_norm_impl(out, residual, x, w, hidden, eps);                                       \
    }

ADD_RMS_NORM(f32_f32, float, float)
ADD_RMS_NORM(f32_bf16, float, bf16)
ADD_RMS_NORM(bf16_f32, bf16, float)
ADD_RMS_NORM(bf16_bf16, bf16, bf16)

extern "C" __global__ void __launch_bounds__(NORM_MAX_THREADS)
    rms_norm_fp32(float* out, const float* x, const float* w, int hidden, float eps) {
    rms_norm_impl(out, x, w, hidden, eps, (u64)hidden);
}

extern "C" __global__ void __launch_bounds__(NORM_MAX_THREADS)
    add_rms_norm_fp32(float* out, float* residual, const float* x, const float* w, int hidden, float eps) {
    add_rms_norm_impl(out, residual, x, w, hidden, eps);
}
