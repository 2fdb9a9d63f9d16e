// Just enough CUDA to run our kernels on the host: one std::thread per CUDA thread of a block,
// blocks one after another, std::barrier for __syncthreads / __syncwarp, and a per-warp exchange
// for __shfl_xor_sync. `__shared__` becomes `static` (blocks never overlap). `launch_all` runs
// every block at once instead, for kernels with grid-wide barriers (grid_sync); those keep their
// shared memory in the dynamic buffer (emu_dyn_smem), one per block. It checks the
// kernels' logic (indexing, reductions, barriers, online softmax) where no GPU is at hand; it
// says nothing about speed or the memory model. run.sh builds and runs test.cpp with it.
#pragma once
#define METRALE_HOST_EMULATION 1
#define _GNU_SOURCE 1
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

using std::max;
using std::min;

struct dim3 { unsigned x = 1, y = 1, z = 1; };
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __restrict__
#define __launch_bounds__(...)

struct Warp {
    std::unique_ptr<std::barrier<>> bar;
    float f[32];
    unsigned u[32];
    unsigned a[32][4], b[32][2], s[32][2];
    const void* p[32];
};
// A block's barrier and warps; each thread points at its own block's.
struct Block {
    std::unique_ptr<std::barrier<>> bar;
    std::vector<std::unique_ptr<Warp>> warps;
    std::vector<unsigned char> smem;  // dynamic shared memory (launch_all)
    // Named barriers (bar.sync id, count: a subset of the block), made by the first thread to
    // reach one.
    std::mutex named_mutex;
    std::unique_ptr<std::barrier<>> named[16];
    explicit Block(unsigned n, size_t smem_bytes) : bar(std::make_unique<std::barrier<>>(n)), smem(smem_bytes) {
        for (unsigned w = 0; w < (n + 31) / 32; ++w) {
            auto wp = std::make_unique<Warp>();
            wp->bar = std::make_unique<std::barrier<>>(std::min(32u, n - 32 * w));
            warps.push_back(std::move(wp));
        }
    }
};
inline thread_local Block* t_block;
struct WarpsOfBlock {
    Warp* operator[](unsigned w) const { return t_block->warps[w].get(); }
};
inline WarpsOfBlock g_warps;

inline void __syncthreads() { t_block->bar->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { g_warps[threadIdx.x / 32]->bar->arrive_and_wait(); }
inline unsigned char* emu_dyn_smem() { return t_block->smem.data(); }
// Named barrier `id` of this block, made by the first thread to reach it with its count.
inline std::barrier<>* emu_named(int id, unsigned count) {
    std::lock_guard<std::mutex> g(t_block->named_mutex);
    if (!t_block->named[id]) t_block->named[id] = std::make_unique<std::barrier<>>(count);
    return t_block->named[id].get();
}
// bar.sync id, count: the first `count` threads to arrive at barrier `id` go on together.
inline void emu_named_barrier(int id, unsigned count) { emu_named(id, count)->arrive_and_wait(); }
// bar.arrive id, count: counted toward barrier `id`'s `count`, without waiting.
inline void emu_named_arrive(int id, unsigned count) { (void)emu_named(id, count)->arrive(); }
// A shared-memory mbarrier (16 bytes reserved where the device uses 8): pending arrivals and
// transaction bytes of the current phase; the phase completes when both are zero, and the
// arrivals start again from `init`. One lock for all of them: the emulation is about logic.
struct EmuMbar { unsigned init, arrivals, phase; int tx; };
inline std::mutex emu_mbar_mutex;
inline void emu_mbar_complete(EmuMbar* m) {
    if (m->arrivals == 0 && m->tx == 0) {
        ++m->phase;
        m->arrivals = m->init;
    }
}
inline void emu_mbar_init(void* p, unsigned count) {
    std::lock_guard<std::mutex> g(emu_mbar_mutex);
    *(EmuMbar*)p = EmuMbar{count, count, 0, 0};
}
// An arrival that first expects `tx` more bytes (0: a plain arrive).
inline void emu_mbar_arrive(void* p, unsigned tx) {
    std::lock_guard<std::mutex> g(emu_mbar_mutex);
    EmuMbar* m = (EmuMbar*)p;
    m->tx += (int)tx;
    --m->arrivals;
    emu_mbar_complete(m);
}
// Whether the phase of this parity has completed (mbarrier.try_wait.parity).
inline bool emu_mbar_test(void* p, unsigned parity) {
    std::lock_guard<std::mutex> g(emu_mbar_mutex);
    return (((EmuMbar*)p)->phase & 1u) != parity;
}
// cp.async.bulk global -> shared with complete_tx on the barrier: the copy at once.
inline void emu_bulk_copy(void* dst, const void* src, unsigned bytes, void* p) {
    memcpy(dst, src, bytes);
    std::lock_guard<std::mutex> g(emu_mbar_mutex);
    EmuMbar* m = (EmuMbar*)p;
    m->tx -= (int)bytes;
    emu_mbar_complete(m);
}
inline void emu_yield() { std::this_thread::yield(); }
inline float __shfl_xor_sync(unsigned, float v, int o) {
    Warp* w = g_warps[threadIdx.x / 32];
    int lane = threadIdx.x % 32;
    w->f[lane] = v;
    w->bar->arrive_and_wait();
    float r = w->f[lane ^ o];
    w->bar->arrive_and_wait();
    return r;
}
inline float __shfl_sync(unsigned, float v, int src) {
    Warp* w = g_warps[threadIdx.x / 32];
    int lane = threadIdx.x % 32;
    w->f[lane] = v;
    w->bar->arrive_and_wait();
    float r = w->f[src & 31];
    w->bar->arrive_and_wait();
    return r;
}
inline int __shfl_sync(unsigned m, int v, int src) { return (int)__shfl_sync(m, (float)v, src); }
// Round-to-nearest arithmetic intrinsics (the device uses them to forbid FMA contraction; the
// host compiler targets x86-64 without FMA, so plain operators are the same operations).
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __logf(float x) { return logf(x); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __longlong_as_double(long long u) { double d; memcpy(&d, &u, 8); return d; }
inline long long __double_as_longlong(double d) { long long r; memcpy(&r, &d, 8); return r; }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicExch(unsigned* p, unsigned v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicOr(unsigned* p, unsigned v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
// The lanes of this thread's warp holding the same value (every lane of the warp must call).
inline unsigned __match_any_sync(unsigned, unsigned v) {
    Warp* w = g_warps[threadIdx.x / 32];
    unsigned lane = threadIdx.x % 32, n = std::min(32u, blockDim.x - threadIdx.x / 32 * 32);
    w->u[lane] = v;
    w->bar->arrive_and_wait();
    unsigned m = 0;
    for (unsigned l = 0; l < n; ++l)
        if (w->u[l] == v) m |= 1u << l;
    w->bar->arrive_and_wait();
    return m;
}
// The mma emulations: every lane of the warp calls with its fragment registers; they are
// published to the warp, each lane unpacks the whole A [16][K] and B [K][8] with `unpack(l, A, B,
// a, b)` (lane l's registers), and adds its four elements of A·B to c: rows g, g, g + 8, g + 8,
// columns 2t, 2t + 1, 2t, 2t + 1 (g = lane / 4, t = lane % 4), summed in f32.
template <int K, class Unpack>
inline void emu_mma(float c[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                    unsigned b1, Unpack unpack) {
    Warp* w = g_warps[threadIdx.x / 32];
    const unsigned lane = threadIdx.x % 32;
    w->a[lane][0] = a0; w->a[lane][1] = a1; w->a[lane][2] = a2; w->a[lane][3] = a3;
    w->b[lane][0] = b0; w->b[lane][1] = b1;
    w->bar->arrive_and_wait();
    float A[16][K], B[K][8];
    for (unsigned l = 0; l < 32; ++l) unpack(l / 4, l % 4, A, B, w->a[l], w->b[l]);
    w->bar->arrive_and_wait();
    const unsigned g = lane / 4, t = lane % 4;
    const unsigned rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int i = 0; i < 4; ++i) {
        float sum = 0.f;
        for (int k = 0; k < K; ++k) sum += A[rows[i]][k] * B[k][cols[i]];
        c[i] += sum;
    }
}
// mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32 as the PTX ISA lays out its fragments: a0..a3 =
// A[g][2t..], A[g + 8][2t..], A[g][2t + 8..], A[g + 8][2t + 8..]; b0, b1 = B[2t..][g],
// B[2t + 8..][g] (each register a bf16 pair, the lower index in the low half).
// m16n8k16 with 16-bit operands, `value` reading one (its bits) as a float.
template <class Value>
inline void emu_mma_m16n8k16(float c[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                             unsigned b0, unsigned b1, Value value) {
    emu_mma<16>(c, a0, a1, a2, a3, b0, b1, [value](unsigned g, unsigned t, float (*A)[16], float (*B)[8], const unsigned* a, const unsigned* b) {
        auto half = [value](unsigned reg, int h) { return value(h ? reg >> 16 : reg & 0xffffu); };
        for (int h = 0; h < 2; ++h) {
            A[g][2 * t + h] = half(a[0], h);
            A[g + 8][2 * t + h] = half(a[1], h);
            A[g][2 * t + 8 + h] = half(a[2], h);
            A[g + 8][2 * t + 8 + h] = half(a[3], h);
            B[2 * t + h][g] = half(b[0], h);
            B[2 * t + 8 + h][g] = half(b[1], h);
        }
    });
}
inline void emu_mma_m16n8k16_bf16(float c[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                  unsigned b0, unsigned b1) {
    emu_mma_m16n8k16(c, a0, a1, a2, a3, b0, b1, [](unsigned bits) { unsigned u = bits << 16; float f; memcpy(&f, &u, 4); return f; });
}
// mma.sync.m16n8k8.row.col.f32.tf32.tf32.f32: a0..a3 = A[g][t], A[g + 8][t], A[g][t + 4],
// A[g + 8][t + 4]; b0, b1 = B[t][g], B[t + 4][g]; each register an f32 of which the top 19 bits
// count (the low 13 dropped, as the tensor core reads them).
inline void emu_mma_m16n8k8_tf32(float c[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                 unsigned b0, unsigned b1) {
    emu_mma<8>(c, a0, a1, a2, a3, b0, b1, [](unsigned g, unsigned t, float (*A)[8], float (*B)[8], const unsigned* a, const unsigned* b) {
        auto value = [](unsigned bits) { bits &= 0xffffe000u; float f; memcpy(&f, &bits, 4); return f; };
        A[g][t] = value(a[0]);
        A[g + 8][t] = value(a[1]);
        A[g][t + 4] = value(a[2]);
        A[g + 8][t + 4] = value(a[3]);
        B[t][g] = value(b[0]);
        B[t + 4][g] = value(b[1]);
    });
}
// f32 -> f16 bits, rounded to nearest even (cvt.rn.f16.f32): overflow to inf, subnormals
// kept, NaN quieted.
inline unsigned emu_f16_bits(float f) {
    unsigned u; memcpy(&u, &f, 4);
    const unsigned sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u;
    if (a >= 0x477ff000u) return sign | 0x7c00u;  // 65520 and up round to inf
    if (a < 0x38800000u) {  // below 2^-14: a multiple of 2^-24
        float v; memcpy(&v, &a, 4);
        return sign | (unsigned)std::nearbyint(v * 16777216.0f);
    }
    unsigned r = a - 0x38000000u;  // the exponent rebiased from 127 to 15
    r += 0xfffu + ((r >> 13) & 1u);
    return sign | (r >> 13);
}
// f16 bits -> their value.
inline float emu_f16_value(unsigned h) {
    const unsigned e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    const float s = (h & 0x8000u) ? -1.f : 1.f;
    if (e == 0) return s * std::ldexp((float)m, -24);
    if (e == 31) return m ? NAN : s * INFINITY;
    return s * std::ldexp((float)(m | 0x400u), (int)e - 25);
}
// mma.sync.m16n8k16.row.col.f32.f16.f16.f32: the bf16 fragments' layout with f16 pairs (the
// products of two f16 are exact in f32).
inline void emu_mma_m16n8k16_f16(float c[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                 unsigned b0, unsigned b1) {
    emu_mma_m16n8k16(c, a0, a1, a2, a3, b0, b1, [](unsigned bits) { return emu_f16_value(bits); });
}
// An e4m3 byte's value.
inline float emu_e4m3(unsigned b) {
    const float sign = (b & 0x80) ? -1.f : 1.f;
    const int e = (b >> 3) & 0xf, m = b & 7;
    if (e == 0xf && m == 7) return NAN;
    return e == 0 ? sign * m / 8.f * std::ldexp(1.f, -6) : sign * (1 + m / 8.f) * std::ldexp(1.f, e - 7);
}
// mma.sync.m16n8k32.row.col.f32.e4m3.e4m3.f32 (the PTX ISA's fragments for 8-bit types): a0..a3
// = A[g][4t..], A[g + 8][4t..], A[g][16 + 4t..], A[g + 8][16 + 4t..]; b0, b1 = B[4t..][g],
// B[16 + 4t..][g] (four bytes a register, the lower k in the low byte). The products of e4m3
// values are exact in f32; the hardware's sum order and truncation differ in the last bits.
inline void emu_mma_m16n8k32_e4m3(float c[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                  unsigned b0, unsigned b1) {
    emu_mma<32>(c, a0, a1, a2, a3, b0, b1, [](unsigned g, unsigned t, float (*A)[32], float (*B)[8], const unsigned* a, const unsigned* b) {
        auto byte = [](unsigned reg, int i) { return emu_e4m3((reg >> (8 * i)) & 0xffu); };
        for (int i = 0; i < 4; ++i) {
            A[g][4 * t + i] = byte(a[0], i);
            A[g + 8][4 * t + i] = byte(a[1], i);
            A[g][16 + 4 * t + i] = byte(a[2], i);
            A[g + 8][16 + 4 * t + i] = byte(a[3], i);
            B[4 * t + i][g] = byte(b[0], i);
            B[16 + 4 * t + i][g] = byte(b[1], i);
        }
    });
}
// mma.sync.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X.f32.e2m1.e2m1.f32.ue4m3
// with selectors {0, 0}, as the PTX ISA lays out 4-bit fragments: a0..a3 = A[g][8t..],
// A[g + 8][8t..], A[g][32 + 8t..], A[g + 8][32 + 8t..]; b0, b1 = B[8t..][g], B[32 + 8t..][g]
// (eight nibbles a register, the lower k in the low nibble); scale_A of row g from lane 4g's
// sa, of row g + 8 from lane 4g + 1's; scale_B of column g from lane 4g's sb; byte c of a
// scale word scales k 16c .. 16c + 15. Each 16-wide chunk's sum of E2M1 products is exact in
// f32; the chunks are added scaled, in k order (the hardware's order may differ in the last bits).
inline float emu_e2m1(unsigned nib) {
    static const float mag[8] = {0.f, .5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
    return (nib & 8) ? -mag[nib & 7] : mag[nib & 7];
}
inline void emu_mma_m16n8k64_nvfp4(float c[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                   unsigned b0, unsigned b1, unsigned sa, unsigned sb) {
    Warp* w = g_warps[threadIdx.x / 32];
    const unsigned lane = threadIdx.x % 32;
    w->a[lane][0] = a0; w->a[lane][1] = a1; w->a[lane][2] = a2; w->a[lane][3] = a3;
    w->b[lane][0] = b0; w->b[lane][1] = b1;
    w->s[lane][0] = sa; w->s[lane][1] = sb;
    w->bar->arrive_and_wait();
    float A[16][64], B[64][8], SA[16][4], SB[4][8];
    auto nib = [](unsigned reg, int i) { return emu_e2m1((reg >> (4 * i)) & 15u); };
    auto scale = [](unsigned reg, int c) { return emu_e4m3((reg >> (8 * c)) & 0x7fu); };
    for (unsigned l = 0; l < 32; ++l) {
        const unsigned g = l / 4, t = l % 4;
        const unsigned* a = w->a[l];
        const unsigned* b = w->b[l];
        for (int i = 0; i < 8; ++i) {
            A[g][8 * t + i] = nib(a[0], i);
            A[g + 8][8 * t + i] = nib(a[1], i);
            A[g][32 + 8 * t + i] = nib(a[2], i);
            A[g + 8][32 + 8 * t + i] = nib(a[3], i);
            B[8 * t + i][g] = nib(b[0], i);
            B[32 + 8 * t + i][g] = nib(b[1], i);
        }
        for (int ch = 0; ch < 4; ++ch) {
            if (t == 0) SA[g][ch] = scale(w->s[l][0], ch), SB[ch][g] = scale(w->s[l][1], ch);
            if (t == 1) SA[g + 8][ch] = scale(w->s[l][0], ch);
        }
    }
    w->bar->arrive_and_wait();
    const unsigned g = lane / 4, t = lane % 4;
    const unsigned rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int i = 0; i < 4; ++i) {
        float sum = 0.f;
        for (int ch = 0; ch < 4; ++ch) {
            float part = 0.f;
            for (int k = 16 * ch; k < 16 * ch + 16; ++k) part += A[rows[i]][k] * B[k][cols[i]];
            sum += part * (SA[rows[i]][ch] * SB[ch][cols[i]]);
        }
        c[i] += sum;
    }
}
// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lane l gives row l % 8 of matrix l / 8;
// lane (g, t) gets, of each matrix i, row g's elements 2t, 2t + 1 (trans: rows 2t, 2t + 1's
// element g), the lower index in the low half.
inline void emu_ldmatrix_x4(unsigned r[4], const void* p, bool trans) {
    Warp* w = g_warps[threadIdx.x / 32];
    const unsigned lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    w->p[lane] = p;
    w->bar->arrive_and_wait();
    for (int i = 0; i < 4; ++i) {
        const unsigned char* const* rows = (const unsigned char* const*)&w->p[8 * i];
        unsigned short e0, e1;
        if (trans) {
            memcpy(&e0, rows[2 * t] + 2 * g, 2);
            memcpy(&e1, rows[2 * t + 1] + 2 * g, 2);
        } else {
            memcpy(&e0, rows[g] + 4 * t, 2);
            memcpy(&e1, rows[g] + 4 * t + 2, 2);
        }
        r[i] = (unsigned)e0 | ((unsigned)e1 << 16);
    }
    w->bar->arrive_and_wait();
}
// Bit l set when lane l of this thread's warp passes a true `pred` (every lane must call).
inline unsigned __ballot_sync(unsigned, int pred) {
    Warp* w = g_warps[threadIdx.x / 32];
    unsigned lane = threadIdx.x % 32, n = std::min(32u, blockDim.x - threadIdx.x / 32 * 32);
    w->u[lane] = pred != 0;
    w->bar->arrive_and_wait();
    unsigned m = 0;
    for (unsigned l = 0; l < n; ++l)
        if (w->u[l]) m |= 1u << l;
    w->bar->arrive_and_wait();
    return m;
}
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __ffs(int v) { return __builtin_ffs(v); }
inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }

// Blocks one after another, each with `smem_bytes` of dynamic shared memory (emu_dyn_smem);
// `reversed`: the last block first (for kernels whose blocks meet through counters, whose result
// must not depend on the order blocks finish in).
template <class F> void launch_smem(dim3 grid, dim3 block, size_t smem_bytes, F f, bool reversed = false) {
    gridDim = grid;
    blockDim = block;
    unsigned n = block.x, blocks = grid.x * grid.y * grid.z;
    for (unsigned i = 0; i < blocks; ++i) {
        const unsigned b = reversed ? blocks - 1 - i : i;
        const unsigned bx = b % grid.x, by = b / grid.x % grid.y, bz = b / grid.x / grid.y;
        Block blk(n, smem_bytes);
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < n; ++t)
            ts.emplace_back([=, &blk] {
                threadIdx = dim3{t, 0, 0};
                blockIdx = dim3{bx, by, bz};
                t_block = &blk;
                f();
            });
        for (auto& t : ts) t.join();
    }
}
template <class F> void launch(dim3 grid, dim3 block, F f) { launch_smem(grid, block, 0, f); }

// Every block of a one-dimensional grid at once (grid.x · block.x host threads), each with
// `smem_bytes` of dynamic shared memory: for kernels that wait on each other across the grid.
template <class F> void launch_all(dim3 grid, dim3 block, size_t smem_bytes, F f) {
    gridDim = grid;
    blockDim = block;
    std::vector<std::unique_ptr<Block>> blocks;
    for (unsigned bx = 0; bx < grid.x; ++bx) blocks.push_back(std::make_unique<Block>(block.x, smem_bytes));
    std::vector<std::thread> ts;
    for (unsigned bx = 0; bx < grid.x; ++bx)
        for (unsigned t = 0; t < block.x; ++t)
            ts.emplace_back([=, &blocks] {
                threadIdx = dim3{t, 0, 0};
                blockIdx = dim3{bx, 0, 0};
                t_block = blocks[bx].get();
                f();
            });
    for (auto& t : ts) t.join();
}
