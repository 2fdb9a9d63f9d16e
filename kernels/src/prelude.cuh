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

// 16-byte loads (8 bf16) through inline PTX, so no vector-type header is needed: `load_stream`
// reads data used once (no L1 allocation), `load_cached` data many threads re-read.
struct u32x4 {
    u32 x, y, z, w;
};

struct u32x2 {
    u32 x, y;
};

#ifdef METRALE_HOST_EMULATION
__device__ __forceinline__ u32x2 load_stream8(const u32x2* p) { return *p; }
__device__ __forceinline__ u32x4 load_stream(const u32x4* p) { return *p; }
__device__ __forceinline__ u32x4 load_cached(const u32x4* p) { return *p; }
__device__ __forceinline__ float load_l2(const float* p) { return *p; }
__device__ __forceinline__ int load_l2(const int* p) { return *p; }
__device__ __forceinline__ u32x4 load_l2x4(const u32x4* p) { return *p; }
#else
// A value another block wrote during this kernel (after its fence): from L2, past this
// multiprocessor's L1.
__device__ __forceinline__ float load_l2(const float* p) {
    float r;
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(r) : "l"(p));
    return r;
}
__device__ __forceinline__ int load_l2(const int* p) {
    int r;
    asm volatile("ld.global.cg.s32 %0, [%1];" : "=r"(r) : "l"(p));
    return r;
}
__device__ __forceinline__ u32x4 load_l2x4(const u32x4* p) {
    u32x4 r;
    asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}

__device__ __forceinline__ u32x2 load_stream8(const u32x2* p) {
    u32x2 r;
    asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
    return r;
}

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

// A kernel's dynamic shared memory as `T* const name` (the host emulation keeps one buffer a
// block: emu_dyn_smem).
#ifdef METRALE_HOST_EMULATION
#define DYNAMIC_SMEM(T, name) T* const name = (T*)emu_dyn_smem()
#else
#define DYNAMIC_SMEM(T, name)                                                                      \
    extern __shared__ __attribute__((aligned(16))) unsigned char name##_bytes[];                   \
    T* const name = (T*)name##_bytes
#endif

// Global -> shared copies in flight without registers (cp.async, compute capability 8.0 and
// later; a plain copy before): 16 bytes cached in L2 only, or 4 bytes; zeros when !valid (src
// must still be a valid address). commit closes a group; wait<N> returns once at most the N
// most recent groups are still in flight (then __syncthreads makes them visible to the block).
#if defined(METRALE_HOST_EMULATION) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800)
#define METRALE_CP_ASYNC 0
#else
#define METRALE_CP_ASYNC 1
#endif
template <int B>
__device__ __forceinline__ void cp_async(void* dst, const void* src, bool valid) {
    static_assert(B == 16 || B == 4, "cp.async copies 16 bytes (.cg) or 4 (.ca) here");
#if METRALE_CP_ASYNC
    const u32 d = (u32)__cvta_generic_to_shared(dst);
    if constexpr (B == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src),
                     "r"(valid ? 16 : 0)
                     : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src),
                     "r"(valid ? 4 : 0)
                     : "memory");
#else
    if constexpr (B == 16)
        *(u32x4*)dst = valid ? *(const u32x4*)src : u32x4{0u, 0u, 0u, 0u};
    else
        *(u32*)dst = valid ? *(const u32*)src : 0u;
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if METRALE_CP_ASYNC
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N> __device__ __forceinline__ void cp_async_wait() {
#if METRALE_CP_ASYNC
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

// Programmatic dependent launch (the engine's backend/cuda/launch.rs launches every kernel
// with it on sm_90 and later). pdl_wait returns once the kernel before this one in the stream
// has completed and its writes are visible: a kernel calls it before reading anything an
// earlier kernel wrote and before writing anything at all. pdl_launch_next lets the next
// kernel's blocks start (they run up to their own pdl_wait); called right after the wait, it
// keeps at most two kernels resident. Launched without the attribute, or below sm_90, both are
// no-ops. pdl_start is both, at the top of a kernel that has nothing to do before waiting.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_next() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_start() {
    pdl_wait();
    pdl_launch_next();
}

// A barrier across the whole grid, for a kernel whose blocks are all resident at once (its
// launcher sizes the grid by the multiprocessors and checks the occupancy; otherwise it would
// never return). `bar` is two u32 in global memory that only such barriers touch, both zero
// at first: the arrivals (back to 0 after every barrier, so any grid may use it next) and the
// generation. Each block notes the generation, arrives; the last to arrive clears the arrivals
// and advances the generation, the others wait for it to change. Writes before the barrier
// are visible to every block after it (read them from L2: load_l2, cp.async.cg).
__device__ __forceinline__ u32 load_acquire_u32(const u32* p) {
#ifdef METRALE_HOST_EMULATION
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#else
    u32 v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
#endif
}
__device__ __forceinline__ void grid_sync(u32* bar) {
    __syncthreads();
    if (threadIdx.x == 0) {
        const u32 gen = load_acquire_u32(bar + 1);
        __threadfence();
        if (atomicAdd(bar, 1u) == gridDim.x - 1) {
            atomicExch(bar, 0u);
            __threadfence();
            atomicAdd(bar + 1, 1u);
        } else {
            while (load_acquire_u32(bar + 1) == gen) {
#ifdef METRALE_HOST_EMULATION
                emu_yield();
#endif
            }
        }
        __threadfence();
    }
    __syncthreads();
}

// Four 16-byte loads of a row, chunks c, c + 32, c + 64, c + 96 (a lane's share of 128 chunks).
__device__ __forceinline__ void load4(u32x4* a, const u32x4* row, int c) {
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = load_stream(row + c + 32 * i);
}

// Before a weight-streaming kernel waits on the kernel that wrote its x (pdl_wait above),
// a warp loads its first 128 chunks of a weight row (read-only for the whole run), so that
// their latency overlaps the previous kernel. `first` tells whether the row has a full group of
// 128 chunks. (Also asking L2 for the rest of the row with a bulk prefetch,
// cp.async.bulk.prefetch.L2, made the Qwen3-8B step 10% slower on the H200: each SM's
// bulk-copy unit serves those at a fraction of HBM's bandwidth.)
__device__ __forceinline__ bool row_prologue(u32x4* a, const u32x4* row, int chunks, int lane) {
    const bool first = lane + 96 < chunks;
    if (first) load4(a, row, lane);
    return first;
}

// Two bf16 in a u32: element 2i in the low half, 2i + 1 in the high half.
__device__ __forceinline__ float lo(u32 u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float hi(u32 u) { return __uint_as_float(u & 0xffff0000u); }

// acc + Σ a[i]·b[i] over the 8 bf16 pairs of two 16-byte chunks, one fused multiply-add at a
// time in element order (the weight-streaming kernels' inner product; a is the weight).
__device__ __forceinline__ float dot8(float acc, u32x4 a, u32x4 b) {
    acc = fmaf(lo(a.x), lo(b.x), acc);
    acc = fmaf(hi(a.x), hi(b.x), acc);
    acc = fmaf(lo(a.y), lo(b.y), acc);
    acc = fmaf(hi(a.y), hi(b.y), acc);
    acc = fmaf(lo(a.z), lo(b.z), acc);
    acc = fmaf(hi(a.z), hi(b.z), acc);
    acc = fmaf(lo(a.w), lo(b.w), acc);
    acc = fmaf(hi(a.w), hi(b.w), acc);
    return acc;
}

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

// The exact value of e4m3 byte b (low byte): e4m3_scaled with a scale of 1, which has at most
// four significant bits, so the top half of its f32 bits is its bf16 pattern, exactly.
__device__ __forceinline__ float e4m3_value(u32 b) {
    return e4m3_scaled(b, __uint_as_float(0x7b800000u));
}

// The exact values of the four e4m3 bytes of w (byte i into v[i]; never NaN bytes). On sm_89
// and newer two cvt.rn.f16x2.e4m3x2 and four f16 → f32 conversions (e4m3 fits f16 exactly):
// 1.5 instructions a weight where placing the bits (e4m3_scaled) takes five; elsewhere, and
// under the host emulation, e4m3_value: the same values.
__device__ __forceinline__ void e4m3x4_values(u32 w, float* v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    u32 h01, h23;
    asm("{\n\t.reg .b16 a, b;\n\tmov.b32 {a, b}, %2;\n\tcvt.rn.f16x2.e4m3x2 %0, a;\n\t"
        "cvt.rn.f16x2.e4m3x2 %1, b;\n\t}"
        : "=r"(h01), "=r"(h23)
        : "r"(w));
    asm("{\n\t.reg .b16 a, b;\n\tmov.b32 {a, b}, %2;\n\tcvt.f32.f16 %0, a;\n\tcvt.f32.f16 %1, b;\n\t}"
        : "=f"(v[0]), "=f"(v[1])
        : "r"(h01));
    asm("{\n\t.reg .b16 a, b;\n\tmov.b32 {a, b}, %2;\n\tcvt.f32.f16 %0, a;\n\tcvt.f32.f16 %1, b;\n\t}"
        : "=f"(v[2]), "=f"(v[3])
        : "r"(h23));
#else
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = e4m3_value(w >> (8 * i));
#endif
}

// Bytes 0 and 1 of w (e4m3) as a bf16 pair, exactly (byte 0 in the low half).
__device__ __forceinline__ u32 e4m3x2_to_bf16x2(u32 w) {
    return (__float_as_uint(e4m3_value(w & 0xffu)) >> 16) |
           (__float_as_uint(e4m3_value((w >> 8) & 0xffu)) & 0xffff0000u);
}

// The FP8 KV cache (`--kv-cache-dtype fp8`; engine/src/backend/kv_fp8.rs is the host's copy
// and says why): a cached head vector is cut into groups of KV_FP8_GROUP dims; a group keeps
// s = amax / 448 (1 when the group is all zero) as an f32 and its values as e4m3(x / s),
// rounded to nearest even and saturated at ±448; the value read back is e4m3 · s. A layer's
// cache is one buffer: the e4m3 bytes [blocks, block_size, nkv, hd], then (256-byte aligned) the
// scales [blocks, block_size, nkv, ceil(hd / 128)], the layout of FP8 weights' scales.
#define KV_FP8_GROUP 128

__device__ __forceinline__ float kv_fp8_scale(float amax) {
    const float s = amax / 448.f;
    return s > 0.f ? s : 1.f;
}

// x as an e4m3 byte: round to nearest even, saturate finite values at ±448, NaN -> 0x7f.
__device__ __forceinline__ u32 f32_to_e4m3(float x) {
    if (x != x) return 0x7fu;
    const u32 sign = (__float_as_uint(x) >> 24) & 0x80u;
    const float a = fabsf(x);
    if (a >= 448.f) return sign | 0x7eu;
    // Subnormals: multiples of 2^-9 (a · 512 is exact); 8 · 2^-9 encodes as 0x08, 2^-6.
    if (a < 0.015625f) return sign | (u32)rintf(a * 512.f);
    const u32 bits = __float_as_uint(a);
    u32 e = (bits >> 23) - 120u;  // the e4m3 exponent field, 1 ..= 15
    u32 m = (bits >> 20) & 7u;
    const u32 rest = bits & 0xfffffu;
    if (rest > 0x80000u || (rest == 0x80000u && (m & 1u))) {
        if (++m == 8u) {
            m = 0u;
            ++e;
        }
    }
    return sign | (e << 3) | m;
}

// One warp stores head vector x[0, head_dim) in the FP8 cache: its bytes at dst, its group
// scales at scales (written by lane 0).
template <typename T>
__device__ void store_head_fp8(unsigned char* dst, float* scales, const T* x, int head_dim) {
    const int lane = threadIdx.x & 31;
    for (int g0 = 0; g0 < head_dim; g0 += KV_FP8_GROUP) {
        const int end = min(head_dim, g0 + KV_FP8_GROUP);
        float amax = 0.f;
        for (int d = g0 + lane; d < end; d += 32) amax = fmaxf(amax, fabsf(to_f32(x[d])));
        const float s = kv_fp8_scale(warp_max(amax));
        for (int d = g0 + lane; d < end; d += 32)
            dst[d] = (unsigned char)f32_to_e4m3(to_f32(x[d]) / s);
        if (lane == 0) scales[g0 / KV_FP8_GROUP] = s;
    }
}

// Element d of cache row r (a token's head vector; base = r · head_dim) as f32: bf16 and f32
// caches ignore the scales; an FP8 cache multiplies by the row's group scale (one rounding, the
// host's `e4m3 · s`).
__device__ __forceinline__ float kv_value(const bf16* c, const float*, u64, u64 base, int d,
                                          int) {
    return to_f32(c[base + d]);
}
__device__ __forceinline__ float kv_value(const float* c, const float*, u64, u64 base, int d,
                                          int) {
    return c[base + d];
}
__device__ __forceinline__ float kv_value(const unsigned char* c, const float* scales, u64 r,
                                          u64 base, int d, int groups) {
    return e4m3_value(c[base + d]) * scales[r * groups + d / KV_FP8_GROUP];
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

// ---- Tensor cores (sm_80 and newer, e4m3 sm_89: attention_mma.cu and moe_mma.cu call these;
// compiled for an older GPU they trap) ------------------------------------------------------

// c += a·b for one m16n8 tile with f32 accumulators. bf16 (m16n8k16): a = four bf16 pairs (rows
// g / g + 8, k 2t.. / 2t + 8..), b = two (k 2t.. / 2t + 8.., column g). E4M3 (m16n8k32, sm_89+):
// a = rows g / g + 8, k 4t.. / 16 + 4t.. (four bytes each), b = k 4t.. / 16 + 4t.., column g.
// c = rows g and g + 8, columns 2t and 2t + 1 (g = lane / 4, t = lane % 4).
template <bool E4M3>
__device__ __forceinline__ void mma_m16n8(float c[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0,
                                          u32 b1) {
#ifdef METRALE_HOST_EMULATION
    if (E4M3) emu_mma_m16n8k32_e4m3(c, a0, a1, a2, a3, b0, b1);
    else emu_mma_m16n8k16_bf16(c, a0, a1, a2, a3, b0, b1);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    asm volatile("trap;");
#else
#define MMA_M16N8_F32(INSTR)                                                                       \
    asm volatile(INSTR " {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"          \
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                  \
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1))
    if constexpr (E4M3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
        asm volatile("trap;");
#else
        MMA_M16N8_F32("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32");
#endif
    } else {
        MMA_M16N8_F32("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32");
    }
#undef MMA_M16N8_F32
#endif
}
__device__ __forceinline__ void mma_bf16(float c[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0,
                                         u32 b1) {
    mma_m16n8<false>(c, a0, a1, a2, a3, b0, b1);
}

// Bytes SEL (a prmt selector: 0x4140 takes bytes 0 and 1, 0x4342 bytes 2 and 3) of w as the
// low bytes of the two halves of a u32.
template <u32 SEL> __device__ __forceinline__ u32 byte_halves(u32 w) {
#ifdef METRALE_HOST_EMULATION
    const int a = SEL & 0xf, b = (SEL >> 8) & 0xf;
    return ((w >> (8 * a)) & 0xffu) | (((w >> (8 * b)) & 0xffu) << 16);
#else
    u32 r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(w), "r"(0u), "n"(SEL));
    return r;
#endif
}

// The e4m3 bytes in the low bytes of t's halves as a bf16 pair, exactly: a byte's exponent and
// mantissa at bit 4 of its half and its sign at bit 15 form the bf16 of its value · 2^-120
// (e4m3's subnormals become bf16 subnormals); one bf16x2 multiply-add by 2^120 (and -0) scales
// both back without rounding (a value of at most four significant bits times a power of two).
// Five instructions a pair, where widening each byte through f32 takes about twelve.
__device__ __forceinline__ u32 e4m3_halves_to_bf16x2(u32 t) {
    const u32 v = ((t << 4) & 0x07f007f0u) | ((t << 8) & 0x80008000u);
#ifdef METRALE_HOST_EMULATION
    const float a = ldexpf(lo(v), 120), b = ldexpf(hi(v), 120);
    return (u32)from_f32<bf16>(a).bits | ((u32)from_f32<bf16>(b).bits << 16);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    asm volatile("trap;");
    return v;
#else
    u32 r;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(v), "r"(0x7b807b80u), "r"(0x80008000u));
    return r;
#endif
}

// Eight e4m3 bytes (an FP8 cache's dims) as the u32x4 of bf16 pairs a 16-byte bf16 load gives.
__device__ __forceinline__ u32x4 e4m3x8_to_bf16x8(u32x2 w) {
    return u32x4{e4m3_halves_to_bf16x2(byte_halves<0x4140>(w.x)),
                 e4m3_halves_to_bf16x2(byte_halves<0x4342>(w.x)),
                 e4m3_halves_to_bf16x2(byte_halves<0x4140>(w.y)),
                 e4m3_halves_to_bf16x2(byte_halves<0x4342>(w.y))};
}


// ---- FP8 weights times one row on tensor cores, f16 operands (fp8_one.cu, moe.cu's
// moe_one_fp8_mma; sm_89+: compiled for an older GPU they trap) ---------------------------
//
// mma.sync m16n8k16 (f16 in, f32 sums) with x as the A operand and 8 weight rows as the B
// columns: A's 16 rows are all the same x row (so every lane ends with the sums of its columns
// 2t, 2t + 1 in c0 / c1, whatever its g), B's column g is the weight row lane (g = lane / 4,
// t = lane % 4) loads 16 bytes of, at k = 64j + 16t in slice j (64 columns). Slice j's k16
// step s takes k 64j + 16t + 4s + {0, 1} as its logical 2t.. and + {2, 3} as 2t + 8..: word s
// of the lane's 16 bytes widens to exactly b0 and b1 (cvt.rn.f16x2.e4m3x2). The sum over k
// does not depend on that order. A's registers a0..a3 must be four aligned registers holding x
// pairs (P, P, Q, Q) (rows g and g + 8 alike); the staged x is laid out so that one 16-byte
// shared load gives exactly that: each pair twice, a slice's steps s major and lanes t minor
// (the four t of a step read 64 consecutive bytes: no bank conflict). Copying pairs into place
// instead cost four register moves an mma (seen in the SASS).
//
// x reaches the mma as f16, which holds every bf16 significand but not its range: it is staged
// as f16 · 2^-e, e from x's largest magnitude (which lands in [2^14, 2^15)), and the sums are
// multiplied back by 2^e (powers of two: no rounding, except for elements below 2^-24 of that
// scale, 2^-38 of x's largest, which round to f16 subnormals). Products are exact and summed
// in f32 by the tensor core; a 128-column group's sum is scaled by its row's block scale. The
// CUDA-core kernels' arithmetic in another order, so not their bits.

// Slices (64 columns) a warp keeps in flight: 8 16-byte loads a lane, as moe.cu's decode
// gate_up keeps its 2048 columns of two rows.
#define ONE_SLICES 8

// e4m3 bytes 0, 1 of w as an f16 pair (lo) and bytes 2, 3 (hi), exactly.
__device__ __forceinline__ void e4m3x4_f16(u32 w, u32& lo, u32& hi) {
#ifdef METRALE_HOST_EMULATION
    lo = emu_f16_bits(emu_e4m3(w & 0xffu)) | (emu_f16_bits(emu_e4m3((w >> 8) & 0xffu)) << 16);
    hi = emu_f16_bits(emu_e4m3((w >> 16) & 0xffu)) |
         (emu_f16_bits(emu_e4m3((w >> 24) & 0xffu)) << 16);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm("{\n\t.reg .b16 a, b;\n\tmov.b32 {a, b}, %2;\n\tcvt.rn.f16x2.e4m3x2 %0, a;\n\t"
        "cvt.rn.f16x2.e4m3x2 %1, b;\n\t}"
        : "=r"(lo), "=r"(hi)
        : "r"(w));
#else
    asm volatile("trap;");
    lo = hi = w;
#endif
}

// Two f32 as an f16 pair (a in the low half), rounded to nearest even.
__device__ __forceinline__ u32 f16x2_from(float a, float b) {
#ifdef METRALE_HOST_EMULATION
    return emu_f16_bits(a) | (emu_f16_bits(b) << 16);
#else
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
    return r;
#endif
}

// c += a·b, mma.sync m16n8k16 with f16 operands and f32 sums (prelude's mma_m16n8 fragments).
__device__ __forceinline__ void mma_f16(float c[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0,
                                        u32 b1) {
#ifdef METRALE_HOST_EMULATION
    emu_mma_m16n8k16_f16(c, a0, a1, a2, a3, b0, b1);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    asm volatile("trap;");
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

// The power of two that puts amax (>= 0, finite or inf) in [2^14, 2^15): x · down for the f16
// copy, sums · up to undo it. Clamped so both stay normal f32 (x below 2^-85 overall is read as
// tiny, not rescaled further).
struct F16Scale {
    float down, up;
};
__device__ __forceinline__ F16Scale f16_scale(float amax) {
    int e = amax > 0.f ? (int)((__float_as_uint(amax) >> 23) & 0xffu) - 141 : 0;
    e = max(-100, min(113, e));
    return F16Scale{__uint_as_float((u32)(127 - e) << 23), __uint_as_float((u32)(127 + e) << 23)};
}

// A chunk of x: through the read-only path (written before this kernel), or from L2 (L2:
// written by other blocks of this kernel, after a grid barrier).
template <bool L2> __device__ __forceinline__ u32x4 x_chunk(const bf16* x, int c) {
    return L2 ? load_l2x4((const u32x4*)x + c) : load_cached((const u32x4*)x + c);
}

// The largest |x| over 16-byte chunks first, first + step, ... of x (k bf16, k % 8 == 0).
template <bool L2>
__device__ __forceinline__ float chunks_amax(const bf16* x, int k, int first, int step) {
    float m = 0.f;
    for (int c = first; c < (k >> 3); c += step) {
        const u32x4 v = x_chunk<L2>(x, c);
        const u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) m = fmaxf(m, fmaxf(fabsf(lo(w[i])), fabsf(hi(w[i]))));
    }
    return m;
}
// Those chunks of x into xs (k u32: the mma layout above) times `down`. Chunk c is pairs
// 4c .. 4c + 3, in slice j = c / 8 lane t = (c % 8) / 2 steps s0 = 2 (c % 2) and s0 + 1: pairs
// (P, Q) of step s go to xs[64j + 16s + 4t ..] as (P, P, Q, Q).
template <bool L2>
__device__ __forceinline__ void chunks_to_f16(u32* xs, const bf16* x, int k, int first, int step,
                                              float down) {
    for (int c = first; c < (k >> 3); c += step) {
        const u32x4 v = x_chunk<L2>(x, c);
        const u32 w[4] = {v.x, v.y, v.z, v.w};
        u32 h[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) h[i] = f16x2_from(lo(w[i]) * down, hi(w[i]) * down);
        u32* const d = xs + 64 * (c >> 3) + 32 * (c & 1) + 4 * ((c & 7) >> 1);
        *(u32x4*)d = u32x4{h[0], h[0], h[1], h[1]};
        *(u32x4*)(d + 16) = u32x4{h[2], h[2], h[3], h[3]};
    }
}

// The whole block stages x (k bf16) into xs (k u32); returns the scale. Every thread of the
// block calls (it has barriers); xs is readable by all after it. `scratch`: 32 floats of shared
// memory for the block's max (block_max_in).
__device__ __forceinline__ F16Scale stage_x_block(u32* xs, const bf16* x, int k, float* scratch) {
    const float m = block_max_in(chunks_amax<false>(x, k, threadIdx.x, blockDim.x), scratch);
    const F16Scale s = f16_scale(m);
    chunks_to_f16<false>(xs, x, k, threadIdx.x, blockDim.x, s.down);
    __syncthreads();
    return s;
}

// One warp's staging of its own x row (k bf16) into xs; every lane of the warp calls.
template <bool L2 = false>
__device__ __forceinline__ F16Scale stage_x_warp(u32* xs, const bf16* x, int k) {
    const int lane = threadIdx.x & 31;
    const F16Scale s = f16_scale(warp_max(chunks_amax<L2>(x, k, lane, 32)));
    chunks_to_f16<L2>(xs, x, k, lane, 32, s.down);
    __syncwarp();
    return s;
}

// part += slice j of this lane's weight row (its 16 bytes q at k 64j + 16t) against the staged
// x, as the warp's B column g: four k16 steps, an A quad a 16-byte shared load.
__device__ __forceinline__ void one_slice(float part[4], u32x4 q, const u32* xs, int j, int t) {
    const u32 ws[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int s = 0; s < 4; ++s) {
        const u32x4 a = *(const u32x4*)(xs + 64 * j + 16 * s + 4 * t);
        u32 b0, b1;
        e4m3x4_f16(ws[s], b0, b1);
        mma_f16(part, a.x, a.y, a.z, a.w, b0, b1);
    }
}

// A warp's share of a tile: slices [begin, end) (even, whole 128-column groups) of the weight row
// `row` (this lane's B column; k bytes, its scales `sc_row` one per group) into this lane's
// column sums acc[0] / acc[1] (columns 2t / 2t + 1, whose scale rows are sc0 / sc1). The first
// batch's weight and scale loads are issued, then `before` runs (the wait on the previous
// kernel and the staging of x; every thread of the block calls this), then the batches.
template <class Before>
__device__ __forceinline__ void one_rows(float acc[2], const unsigned char* row, const float* sc0,
                                         const float* sc1, int begin, int end, const u32* xs,
                                         Before before) {
    const int t = threadIdx.x & 3;
    bool first = true;
    for (int b = begin;; b += ONE_SLICES) {
        u32x4 q[ONE_SLICES];
        float s0[ONE_SLICES / 2], s1[ONE_SLICES / 2];
#pragma unroll
        for (int i = 0; i < ONE_SLICES; ++i)
            q[i] = b + i < end ? load_stream((const u32x4*)row + 4 * (b + i) + t) : u32x4{0u, 0u, 0u, 0u};
#pragma unroll
        for (int i = 0; i < ONE_SLICES / 2; ++i) {
            s0[i] = b + 2 * i < end ? sc0[(b >> 1) + i] : 0.f;
            s1[i] = b + 2 * i < end ? sc1[(b >> 1) + i] : 0.f;
        }
        if (first) {
            before();
            first = false;
        }
#pragma unroll
        for (int i = 0; i < ONE_SLICES / 2; ++i)
            if (b + 2 * i < end) {
                float pa[4] = {0.f, 0.f, 0.f, 0.f}, pb[4] = {0.f, 0.f, 0.f, 0.f};
                one_slice(pa, q[2 * i], xs, b + 2 * i, t);
                one_slice(pb, q[2 * i + 1], xs, b + 2 * i + 1, t);
                acc[0] = fmaf(s0[i], pa[0] + pb[0], acc[0]);
                acc[1] = fmaf(s1[i], pa[1] + pb[1], acc[1]);
            }
        if (b + ONE_SLICES >= end) break;  // (a warp with no slices still ran `before`)
    }
}

// The slices warp kw of KW takes of `slices`: [kw · per, ...), per even.
__device__ __forceinline__ void one_range(int slices, int kw, int kws, int& begin, int& end) {
    const int per = (((slices + kws - 1) / kws) + 1) & ~1;
    begin = min(slices, kw * per);
    end = min(slices, begin + per);
}

// ---- FP8 weights times a few bf16 rows on tensor cores (gemv_fp8_mma in fp8.cu, the small-step
// expert kernels in moe_mma.cu) --------------------------------------------------------------
//
// out^T = W · x^T with W's rows as the mma's A operand (16 rows a tile) and x rows as its B
// columns (8 a tile). A block of FP8_MMA_WARPS warps owns NT tiles and splits K into 64-wide slices
// (warp w: slices w, w + 8, ...), each warp holding BATCH slices' weight loads in flight. In a
// slice lane (g = lane / 4, t = lane % 4) loads 16 bytes of tile rows g and g + 8 at
// k = 64j + 16t and the matching 16 elements of x row g (a null row reads as zeros), and the
// mma's k order is permuted to what those loads give (moe_mma.cu's trick; the sum over k does
// not depend on it): step s (of four k16 steps) takes k 16t + 4s + {0, 1} as its 2t.. and
// 16t + 4s + {2, 3} as its 2t + 8... Bytes are widened to bf16 exactly (e4m3x8_to_bf16x8),
// products are exact and summed in f32, and a slice's sum is scaled by its row's 128-column
// scale; the warps' sums are added in warp order (fp8_mma_reduce). The same arithmetic as the
// CUDA-core FP8 kernels (exact products, f32 sums, a scale per partial sum) in another order.
// Needs K % 64 == 0 and rows 16-byte aligned.
#define FP8_MMA_WARPS 8

// Slice j of tile rows g and g + 8 (q0, q1: 16 bytes each) widened to bf16 pairs: a0 / a1 hold
// k 16t .. 16t + 7 of rows g / g + 8, c0 / c1 k 16t + 8 .. 16t + 15.
struct Fp8Slice {
    u32x4 a0, a1, c0, c1;
};
__device__ __forceinline__ Fp8Slice fp8_widen(u32x4 q0, u32x4 q1) {
    return Fp8Slice{e4m3x8_to_bf16x8(u32x2{q0.x, q0.y}), e4m3x8_to_bf16x8(u32x2{q1.x, q1.y}),
                    e4m3x8_to_bf16x8(u32x2{q0.z, q0.w}), e4m3x8_to_bf16x8(u32x2{q1.z, q1.w})};
}

// A widened slice against x row g's 16 elements (xa, xb), into this lane's four sums (rows g,
// g + 8 x columns 2t, 2t + 1) with the rows' scales s0, s1.
__device__ __forceinline__ void fp8_mma_slice(float acc[4], const Fp8Slice& w, float s0, float s1,
                                              u32x4 xa, u32x4 xb) {
    float part[4] = {0.f, 0.f, 0.f, 0.f};
    mma_bf16(part, w.a0.x, w.a1.x, w.a0.y, w.a1.y, xa.x, xa.y);
    mma_bf16(part, w.a0.z, w.a1.z, w.a0.w, w.a1.w, xa.z, xa.w);
    mma_bf16(part, w.c0.x, w.c1.x, w.c0.y, w.c1.y, xb.x, xb.y);
    mma_bf16(part, w.c0.z, w.c1.z, w.c0.w, w.c1.w, xb.z, xb.w);
    acc[0] = fmaf(s0, part[0], acc[0]);
    acc[1] = fmaf(s0, part[1], acc[1]);
    acc[2] = fmaf(s1, part[2], acc[2]);
    acc[3] = fmaf(s1, part[3], acc[3]);
}

// SPLIT (the default): this warp's share of the k slices (warp w: w, w + 8, ...), the block's
// warps then adding their sums (fp8_mma_reduce); else every slice, the warp's own tiles.
// BF16W: the weights are bf16 rows instead (rows[nt] point at them as bytes; scs unread, a
// scale of 1): a lane loads its 16 elements of each row as two 16-byte loads, used as they are.
// This warp's share of NT weight tiles against NB tiles of 8 x rows: rows[nt] = the starts of
// tile nt's rows g and g + 8 (k bytes each), scs[nt] their scale rows, xrows[nb] this lane's x
// row of B tile nb (column 8nb + g; k bf16, or null for zeros); acc[nt][nb] = rows g, g + 8 x
// columns 8nb + 2t, 8nb + 2t + 1. wait_first: call pdl_start after the first batch's weight
// loads (weights are never written, so those loads may overlap the previous kernel), else the
// caller has waited already.
template <int NT, int NB, int BATCH, bool SPLIT = true, bool BF16W = false>
__device__ __forceinline__ void fp8_mma_tiles(float (&acc)[NT][NB][4],
                                              const unsigned char* const (&rows)[NT][2],
                                              const float* const (&scs)[NT][2],
                                              const bf16* const (&xrows)[NB], int k,
                                              bool wait_first) {
    const int t = threadIdx.x & 3;
    const int first = SPLIT ? threadIdx.x >> 5 : 0, step = SPLIT ? FP8_MMA_WARPS : 1;
    const int slices = k >> 6;
    const u32x4 zero{0u, 0u, 0u, 0u};
    bool waited = !wait_first;
    for (int j0 = first; j0 < slices; j0 += step * BATCH) {
        u32x4 q[BATCH][NT][2][BF16W ? 2 : 1];
        float s[BATCH][NT][2];
#pragma unroll
        for (int i = 0; i < BATCH; ++i) {
            const int j = j0 + step * i;
            if (j < slices) {
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        if (BF16W) {
                            const u32x4* r = (const u32x4*)rows[nt][h] + 8 * j + 2 * t;
                            q[i][nt][h][0] = load_stream(r);
                            q[i][nt][h][BF16W ? 1 : 0] = load_stream(r + 1);
                            s[i][nt][h] = 1.0f;
                        } else {
                            q[i][nt][h][0] = load_stream((const u32x4*)rows[nt][h] + 4 * j + t);
                            s[i][nt][h] = scs[nt][h][j >> 1];
                        }
                    }
            }
        }
        if (!waited) {
            pdl_start();
            waited = true;
        }
#pragma unroll
        for (int i = 0; i < BATCH; ++i) {
            const int j = j0 + step * i;
            if (j < slices) {
                u32x4 xa[NB], xb[NB];
#pragma unroll
                for (int nb = 0; nb < NB; ++nb) {
                    const u32x4* xr = xrows[nb] ? (const u32x4*)xrows[nb] + 2 * t + 8 * j : nullptr;
                    xa[nb] = xr ? load_cached(xr) : zero;
                    xb[nb] = xr ? load_cached(xr + 1) : zero;
                }
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const Fp8Slice w =
                        BF16W ? Fp8Slice{q[i][nt][0][0], q[i][nt][1][0], q[i][nt][0][BF16W ? 1 : 0],
                                         q[i][nt][1][BF16W ? 1 : 0]}
                              : fp8_widen(q[i][nt][0][0], q[i][nt][1][0]);
#pragma unroll
                    for (int nb = 0; nb < NB; ++nb)
                        fp8_mma_slice(acc[nt][nb], w, s[i][nt][0], s[i][nt][1], xa[nb], xb[nb]);
                }
            }
        }
    }
    if (!waited) pdl_start();  // a warp with no slice still waits before anything is written
}

// The block's sums in warp 0: acc holds N groups of this lane's four sums (every thread calls;
// returns true in warp 0, whose acc then holds the sum over the warps, added in warp order).
template <int N> __device__ __forceinline__ bool fp8_mma_reduce(float* acc) {
    __shared__ float sums[FP8_MMA_WARPS][N * 4][32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < N * 4; ++i) sums[warp][i][lane] = acc[i];
    __syncthreads();
    if (warp != 0) return false;
#pragma unroll
    for (int i = 0; i < N * 4; ++i) {
        float v = sums[0][i][lane];
        for (int w = 1; w < FP8_MMA_WARPS; ++w) v += sums[w][i][lane];
        acc[i] = v;
    }
    return true;
}
