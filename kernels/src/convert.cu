// Filling and casting whole tensors.
//
// fill_random_bf16 makes dummy weights on the device, value for value the stream that
// `HostTensor::to_f32` draws on the host (then rounded to bf16): the tensor is cut into chunks of
// 65536 elements, chunk c starts from splitmix64(seed ^ c * golden) and steps splitmix64 once per
// element. One thread walks one chunk in order, so a tensor of n elements runs n / 65536 threads;
// that is enough to fill an 8B model in well under a second and keeps the CPU and CUDA dummy models
// the same model. fill_const_bf16 and the casts are plain grid-stride loops. The _f32 fills serve
// the float32 path (the values the host draws, unrounded).

// Uniform values in [-half_width, half_width), as `HostData::Random` describes them.
template <typename T>
__device__ void fill_random_impl(T* out, u64 n, u64 seed, float half_width) {
    u64 start, end, state;
    if (!random_chunk(n, seed, &start, &end, &state)) return;
    for (u64 i = start; i < end; ++i) {
        state = splitmix64(state);
        const float u = (float)(u32)(state >> 40) / 16777216.0f;
        out[i] = from_f32<T>((2.0f * u - 1.0f) * half_width);
    }
}

extern "C" __global__ void fill_random_bf16(bf16* out, u64 n, u64 seed, float half_width) {
    pdl_start();
    fill_random_impl(out, n, seed, half_width);
}

extern "C" __global__ void fill_random_f32(float* out, u64 n, u64 seed, float half_width) {
    pdl_start();
    fill_random_impl(out, n, seed, half_width);
}

template <typename T>
__device__ void fill_const_impl(T* out, u64 n, float value) {
    const T v = from_f32<T>(value);
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
        out[i] = v;
}

extern "C" __global__ void fill_const_bf16(bf16* out, u64 n, float value) {
    pdl_start();
    fill_const_impl(out, n, value);
}

extern "C" __global__ void fill_const_f32(float* out, u64 n, float value) {
    pdl_start();
    fill_const_impl(out, n, value);
}

extern "C" __global__ void cast_f32_bf16(bf16* out, const float* in, u64 n) {
    pdl_start();
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
        out[i] = from_f32<bf16>(in[i]);
}

extern "C" __global__ void cast_bf16_f32(float* out, const bf16* in, u64 n) {
    pdl_start();
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
        out[i] = to_f32(in[i]);
}
