// Device helpers shared by every kernel file. The loader pastes this text in front of each `.cu`
// source before compiling it, so the kernels need no `#include` at all: NVRTC then needs no CUDA
// headers, and a machine with only the driver and libnvrtc can build them.
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

// Maximum over the whole block; every thread gets it. Same rules as block_sum.
__device__ float block_max(float v) {
    __shared__ float scratch[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return warp_max(lane < warps ? scratch[lane] : NEG_INF);
}

// 16-byte loads (8 bf16) through inline PTX, so no vector-type header is needed: `load_stream`
// reads data used once (no L1 allocation), `load_cached` data many threads re-read.
struct u32x4 {
    u32 x, y, z, w;
};

#ifdef METRALE_HOST_EMULATION
__device__ __forceinline__ u32x4 load_stream(const u32x4* p) { return *p; }
__device__ __forceinline__ u32x4 load_cached(const u32x4* p) { return *p; }
#else
__device__ __forceinline__ u32x4 load_stream(const u32x4* p) {
    u32x4 r;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p));
    return r;
}

__device__ __forceinline__ u32x4 load_cached(const u32x4* p) {
    u32x4 r;
    asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p));
    return r;
}
#endif

// Two bf16 in a u32: element 2i in the low half, 2i + 1 in the high half.
__device__ __forceinline__ float lo(u32 u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float hi(u32 u) { return __uint_as_float(u & 0xffff0000u); }

// 2^x through the hardware's approximation (about 2 ulp); 2^-inf = 0.
__device__ __forceinline__ float exp2_fast(float x) {
#ifdef METRALE_HOST_EMULATION
    return exp2f(x);
#else
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
#endif
}

// The end of an attention block: STATES online-softmax states (max m, sum l, weighted sum acc)
// of each of its `heads` q heads, in shared memory, merged with the usual rescaling. m is in
// natural-log units, or log2 units when LOG2. A state with no key has m = -inf and weighs 0.
// PARTIAL (split-K): each head's merged, unnormalised state (m in natural units, l, acc) goes to
// its slot of `partial` for attention_merge; else the normalised output goes to `out` in its
// type TO (bf16, or f32 for the float32 path).
template <int STATES, int ROWS, int DIM, bool PARTIAL, bool LOG2, typename TO>
__device__ void merge_attention_states(const float (&pm)[STATES][ROWS],
                                       const float (&pl)[STATES][ROWS],
                                       const float (&pa)[STATES][ROWS][DIM], int heads, int head0,
                                       u64 row, int num_heads, int head_dim, TO* out,
                                       float* partial) {
    for (int h = 0; h < heads; ++h) {
        const int head = head0 + h;
        float m_all = NEG_INF;
#pragma unroll
        for (int w = 0; w < STATES; ++w) m_all = fmaxf(m_all, pm[w][h]);
        float weight[STATES];
        float l_all = 0.f;
#pragma unroll
        for (int w = 0; w < STATES; ++w) {
            const float dm = pm[w][h] - m_all;
            weight[w] = pm[w][h] == NEG_INF ? 0.f : LOG2 ? exp2_fast(dm) : expf(dm);
            l_all += pl[w][h] * weight[w];
        }
        if (PARTIAL) {
            const int splits = gridDim.z;
            float* st =
                partial + ((row * num_heads + head) * splits + blockIdx.z) * (u64)(head_dim + 2);
            if (threadIdx.x == 0) {
                st[0] = LOG2 && m_all != NEG_INF ? m_all * 0.6931471805599453f : m_all;
                st[1] = l_all;
            }
            for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
                float sum = 0.f;
#pragma unroll
                for (int w = 0; w < STATES; ++w) sum += pa[w][h][d] * weight[w];
                st[2 + d] = sum;
            }
        } else {
            // The block's first state holds key 0, so l_all > 0.
            const float inv_l = 1.0f / l_all;
            TO* o = out + row * ((u64)num_heads * head_dim) + (u64)head * head_dim;
            for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
                float sum = 0.f;
#pragma unroll
                for (int w = 0; w < STATES; ++w) sum += pa[w][h][d] * weight[w];
                o[d] = from_f32<TO>(sum * inv_l);
            }
        }
    }
}

// Fine-grained FP8 weights: e4m3fn bytes (bias 7, no infinities) times an f32 scale. Placing a
// byte's exponent and mantissa bits at bit 20 of an f32 gives its value times 2^-120 (its
// subnormals become f32 subnormals), so value · scale = that float · (scale · 2^120) in one
// rounding, the CPU loader's `e4m3 · scale` bit for bit, for scales below 2^8 (a checkpoint's
// scales are amax / 448 of a block of weights, far below). The NaN bytes 0x7f / 0xff, which no
// quantizer writes (it clamps to ±448), read as ±480 here.
__device__ __forceinline__ float fp8_scale120(float scale) { return scale * __uint_as_float(0x7b800000u); }
// The low byte of b, times the scale given as fp8_scale120(scale).
__device__ __forceinline__ float e4m3_scaled(u32 b, float scale120) {
    return __uint_as_float(((b & 0x7fu) << 20) | ((b & 0x80u) << 24)) * scale120;
}

// Dummy weights: `HostData::Random`'s stream (and RandomFp8's): chunks of RANDOM_CHUNK elements,
// chunk c starting from splitmix64(seed ^ c * golden), one splitmix64 step per element.
#define RANDOM_CHUNK 65536ull

__device__ __forceinline__ u64 splitmix64(u64 z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// The elements [start, end) this thread's chunk draws and the stream's state before the first;
// false when the chunk is past n.
__device__ __forceinline__ bool random_chunk(u64 n, u64 seed, u64* start, u64* end, u64* state) {
    const u64 chunk = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    *start = chunk * RANDOM_CHUNK;
    if (*start >= n) return false;
    *end = *start + RANDOM_CHUNK < n ? *start + RANDOM_CHUNK : n;
    *state = splitmix64(seed ^ (chunk * 0x9e3779b97f4a7c15ull));
    return true;
}
