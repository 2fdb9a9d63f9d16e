// NVFP4 weight-only GEMV for decode steps (issue 35; a first version, in the lab: not yet
// declared in kernels/src/lib.rs nor launched by the CUDA backend, which widens NVFP4 weights to
// bf16 at upload for now; docs/nvfp4.md).
//
// out[m, n] = Σ_k x[m, k] · w[n, k] for M rows of bf16 x, with w as NVFP4 stores it: packed
// E2M1 [N, K / 2] (element 2i the low nibble of byte i, a nibble sign << 3 | code), one E4M3
// scale byte [N, K / 16] per 16 values of a row, and one f32 multiplier [N] a row (ModelOpt's
// weight_scale_2; the host passes 1 / weight_global_scale for compressed-tensors). K % 16 == 0.
// A warp per output column; a lane takes whole 16-value blocks (8 packed bytes and their
// scale), widens them in registers (the E2M1 magnitudes by arithmetic, exact), dots them with
// the x row in f32, adds the block's sum times its E4M3 scale, and lane 0 multiplies the warp's
// sum by the row's global. 4.5 bits of weight a value: the floor of a decode step's weights is
// 0.28 of bf16's. Scalar byte loads: correctness first; the 16-byte streaming loads of
// gemv_fp8_m<M> (fp8.cu) are the next version.
//
// Versions tried: this one (host emulation only; not yet run on a GPU).

#define NVFP4_WARPS 8

// |E2M1 code| as f32: 0, 0.5, 1, 1.5, 2, 3, 4, 6 (exponent e = code >> 1, mantissa code & 1).
__device__ __forceinline__ float e2m1_value(u32 nibble) {
    const u32 c = nibble & 7u, e = c >> 1, m = c & 1u;
    const float mag = e == 0 ? 0.5f * (float)m : (1.f + 0.5f * (float)m) * (float)(1u << (e - 1));
    return (nibble & 8u) ? -mag : mag;
}

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
                part = fmaf(e2m1_value(byte & 15u), to_f32(xr[b * 16 + 2 * j]), part);
                part = fmaf(e2m1_value(byte >> 4), to_f32(xr[b * 16 + 2 * j + 1]), part);
            }
            acc = fmaf(e4m3_value(sr[b]), part, acc);
        }
        acc = warp_sum(acc);
        if (lane == 0) out[(u64)m * n_total + n] = acc * globals[n];
    }
}
