// SwiGLU's gate: out = silu(gate) * up, where each row of gate_up `[T, 2·I]` holds gate then up.
//
// A grid-stride loop over the T·I outputs: consecutive threads take consecutive columns, so the
// gate and up reads and the bf16 writes are all coalesced. silu(g) = g / (1 + exp(-g)) in f32, the
// CPU reference's formula; the result is bf16, the operand type of the down projection.
//
// Symbols: silu_mul_<gate_up dtype>; silu_mul_fp32 (f32 in and out) for the float32 path.
//
// gelu_tanh_mul_* is Gemma's gate, the same loop with gelu_tanh(g) = 0.5·g·(1 + tanh(√(2/π)·(g +
// 0.044715·g³))) (torch's approximate="tanh"), tanhf precise as the CPU reference's f32 tanh.
//
// scale_f32 multiplies a tensor in place by a factor (Gemma's embeddings, by sqrt(hidden)).
//
// add_bias_<x dtype>_<bias dtype> adds a linear layer's bias to every row in place (gpt-oss's
// projections and router): x[r, c] += bias[c], the sum in f32 rounded to x's type.

template <typename T, typename TO, bool GELU = false>
__device__ void silu_mul_impl(TO* out, const T* gate_up, u64 rows, u64 inter) {
    const u64 n = rows * inter;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        const u64 r = i / inter, j = i % inter;
        const float g = to_f32(gate_up[r * 2 * inter + j]);
        const float u = to_f32(gate_up[r * 2 * inter + inter + j]);
        float a;
        if constexpr (GELU) {
            a = 0.5f * g * (1.0f + tanhf(0.7978845608f * (g + 0.044715f * g * g * g)));
        } else {
            a = g / (1.0f + expf(-g));
        }
        out[i] = from_f32<TO>(a * u);
    }
}

extern "C" __global__ void silu_mul_f32(bf16* out, const float* gate_up, u64 rows, u64 inter) {
    pdl_start();
    silu_mul_impl(out, gate_up, rows, inter);
}

extern "C" __global__ void silu_mul_bf16(bf16* out, const bf16* gate_up, u64 rows, u64 inter) {
    pdl_start();
    silu_mul_impl(out, gate_up, rows, inter);
}

extern "C" __global__ void silu_mul_fp32(float* out, const float* gate_up, u64 rows, u64 inter) {
    pdl_start();
    silu_mul_impl(out, gate_up, rows, inter);
}

extern "C" __global__ void gelu_tanh_mul_f32(bf16* out, const float* gate_up, u64 rows, u64 inter) {
    pdl_start();
    silu_mul_impl<float, bf16, true>(out, gate_up, rows, inter);
}

extern "C" __global__ void gelu_tanh_mul_bf16(bf16* out, const bf16* gate_up, u64 rows, u64 inter) {
    pdl_start();
    silu_mul_impl<bf16, bf16, true>(out, gate_up, rows, inter);
}

extern "C" __global__ void gelu_tanh_mul_fp32(float* out, const float* gate_up, u64 rows, u64 inter) {
    pdl_start();
    silu_mul_impl<float, float, true>(out, gate_up, rows, inter);
}

extern "C" __global__ void scale_f32(float* x, u64 n, float factor) {
    pdl_start();
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
        x[i] *= factor;
}

template <typename T, typename B>
__device__ void add_bias_impl(T* x, const B* bias, u64 rows, u64 cols) {
    const u64 n = rows * cols;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
        x[i] = from_f32<T>(to_f32(x[i]) + to_f32(bias[i % cols]));
}

extern "C" __global__ void add_bias_f32_bf16(float* x, const bf16* bias, u64 rows, u64 cols) {
    pdl_start();
    add_bias_impl(x, bias, rows, cols);
}

extern "C" __global__ void add_bias_bf16_bf16(bf16* x, const bf16* bias, u64 rows, u64 cols) {
    pdl_start();
    add_bias_impl(x, bias, rows, cols);
}

extern "C" __global__ void add_bias_f32_f32(float* x, const float* bias, u64 rows, u64 cols) {
    pdl_start();
    add_bias_impl(x, bias, rows, cols);
}

extern "C" __global__ void add_bias_bf16_f32(bf16* x, const float* bias, u64 rows, u64 cols) {
    pdl_start();
    add_bias_impl(x, bias, rows, cols);
}
