// A 32-bit word from lane (this lane ^ o), its bits as they are.
__device__ __forceinline__ u32 shfl_xor_u32(u32 v, int o) {
    return __float_as_uint(__shfl_xor_sync(0xffffffffu, __uint_as_float(v), o));
}

// Sum over the whole block; every thread gets the total. blockDim.x must be a multiple of 32.
// The first barrier lets a kernel call this twice in a row (the scratch is shared).
__device__ float block_sum(float v) {
    __shared__ float scratch[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return warp_sum(lane < warps ? scratch[lane] : 0.f);
}

// Maximum over the whole block; every thread gets it. Same rules as block_sum; `scratch` is
// 32 floats of shared memory (block_max's own, or a kernel's dynamic shared memory: the host
// emulation runs grid-barrier kernels' blocks at once, sharing static __shared__ arrays).
__device__ float block_max_in(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return warp_max(lane < warps ? scratch[lane] : NEG_INF);
}
__device__ float block_max(float v) {
    __shared__ float scratch[32];
    return block_max_in(v, scratch);
}
