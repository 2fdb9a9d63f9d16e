// Device helpers shared by every kernel file, one header per concern (src/prelude/*.cuh, this
// one first; lib.rs's PRELUDE is their concatenation in the order each needs the ones before).
// The loader pastes that text in front of each `.cu` source before compiling it, so the kernels
// need no `#include` at all: NVRTC then needs no CUDA headers, and a machine with only the driver
// and libnvrtc can build them.
//
// bf16 is handled as its 16-bit pattern: widening to f32 is a shift, narrowing rounds to nearest
// even exactly as the `half` crate does on the host (NaN stays NaN, quieted), so the device and
// the CPU reference agree bit for bit on every conversion.

typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

struct bf16 {
    unsigned short bits;
};

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(bf16 v) { return __uint_as_float(((u32)v.bits) << 16); }

template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ bf16 from_f32<bf16>(float v) {
    u32 u = __float_as_uint(v);
    bf16 r;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        r.bits = (unsigned short)((u >> 16) | 0x40u);
        return r;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    r.bits = (unsigned short)(u >> 16);
    return r;
}

#define NEG_INF (__int_as_float(0xff800000))

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
