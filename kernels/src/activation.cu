// SwiGLU's gate: out = silu(gate) * up, where each row of gate_up `[T, 2·I]` holds gate then up.
//
// A grid-stride loop over the T·I outputs: consecutive threads take consecutive columns, so the
// gate and up reads and the bf16 writes are all coalesced. silu(g) = g / (1 + exp(-g)) in f32, the
// CPU reference's formula; the result is bf16, the operand type of the down projection.
//
// Symbols: silu_mul_<gate_up dtype>; silu_mul_fp32 (f32 in and out) for the float32 path.

template <typename T, typename TO>
__device__ void silu_mul_impl(TO* out, const T* gate_up, u64 rows, u64 inter) {
    const u64 n = rows * inter;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        const u64 r = i / inter, j = i % inter;
        const float g = to_f32(gate_up[r * 2 * inter + j]);
        const float u = to_f32(gate_up[r * 2 * inter + inter + j]);
        out[i] = from_f32<TO>(g / (1.0f + expf(-g)) * u);
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
