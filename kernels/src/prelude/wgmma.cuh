// Hopper's warpgroup MMA (wgmma.mma_async, sm_90a): shared-memory matrix descriptors in the
// 128-byte-swizzle layout, the fences, commits and waits around them, and the products the
// kernels issue (attention_flash_wg.cu, moe_wg.cu). Elsewhere (other GPUs, the sm_90 build
// without `a`) METRALE_WGMMA stays undefined and the kernels that need it trap.
//
// The swizzled layout: a tile of R rows whose rows are 64 bf16 columns (128 bytes) wide per
// block; wider rows are several such blocks of R × 128 bytes one after another. 16-byte chunk c
// of row r lies at chunk c ^ (r % 8) of its 128 bytes, and every block starts on a 1024-byte
// boundary (the hardware's swizzle reads address bits). A K-major operand's 8-row groups are
// 1024 bytes apart (SBO); a k16 step moves its start 32 bytes inside the 128-byte rows.
//
// The host emulation (kernels/dev/host_emulation) runs each product as its documented arithmetic
// on the same descriptors and swizzle, over the block's shared memory (emu_wg_smem).
// The byte offset of 16-byte chunk c (0 .. D/8) of row r in a swizzled tile of R rows.
template <int R> __device__ __forceinline__ u32 wg_sw128(int r, int c) {
    return (u32)((c >> 3) * (R * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// A shared-memory matrix descriptor, 128-byte swizzle: start address, leading and stride byte
// offsets (each in 16-byte units, 14 bits).
__device__ __forceinline__ u64 wg_desc(u32 addr, u32 lbo, u32 sbo) {
    return (u64)((addr & 0x3FFFFu) >> 4) | ((u64)(lbo >> 4) << 16) | ((u64)(sbo >> 4) << 32) |
           (1ull << 62);
}

#ifdef METRALE_HOST_EMULATION
// The block's shared memory: descriptors hold offsets into it.
inline thread_local const unsigned char* emu_wg_smem;
__device__ __forceinline__ u32 wg_smem_addr(const void* p) {
    return (u32)((const unsigned char*)p - emu_wg_smem);
}
// The bf16 at row r, column k of a K-major operand (A, or B as N × K), and at (k, n) of an
// N-major B: the canonical 128-byte-swizzle layouts the descriptors name.
inline float emu_wg_at(u32 addr) {
    addr ^= ((addr >> 7) & 7u) << 4;
    unsigned short v;
    memcpy(&v, emu_wg_smem + addr, 2);
    const unsigned u = (unsigned)v << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline float emu_wg_kmajor(u64 desc, int r, int k) {
    const u32 start = (u32)(desc & 0x3FFF) << 4, sbo = (u32)((desc >> 32) & 0x3FFF) << 4;
    return emu_wg_at(start + (r >> 3) * sbo + (r & 7) * 128 + 2 * k);
}
inline float emu_wg_nmajor(u64 desc, int k, int n) {
    const u32 start = (u32)(desc & 0x3FFF) << 4, lbo = (u32)((desc >> 16) & 0x3FFF) << 4,
              sbo = (u32)((desc >> 32) & 0x3FFF) << 4;
    return emu_wg_at(start + (n >> 6) * lbo + (k >> 3) * sbo + (k & 7) * 128 + 2 * (n & 63));
}
// This thread's accumulators of a 64 × N product: element i is row 16w + g + 8 · (i / 2 % 2),
// column 8 · (i / 4) + 2t + i % 2 (w: the warp in the warpgroup, g = lane / 4, t = lane % 4).
template <int R, int K = 16, class A, class B> inline void emu_wg_mma(float (&d)[R], A a, B b, bool acc) {
    const int w = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    for (int i = 0; i < R; ++i) {
        const int row = 16 * w + g + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * t + (i & 1);
        float sum = 0.f;
        for (int k = 0; k < K; ++k) sum += a(row - 16 * w, k) * b(k, col);
        d[i] = (acc ? d[i] : 0.f) + sum;
    }
}
template <int R> inline void wg_ss(float (&d)[R], u64 a, u64 b, int accumulate) {
    const int w = (threadIdx.x >> 5) & 3;
    emu_wg_mma(d, [&](int r, int k) { return emu_wg_kmajor(a, 16 * w + r, k); },
               [&](int k, int n) { return emu_wg_kmajor(b, n, k); }, accumulate != 0);
}
// The e4m3 byte at row r, column k of a K-major 8-bit operand (128 columns a swizzled row).
inline float emu_wg_e4m3_kmajor(u64 desc, int r, int k) {
    const u32 start = (u32)(desc & 0x3FFF) << 4, sbo = (u32)((desc >> 32) & 0x3FFF) << 4;
    u32 addr = start + (r >> 3) * sbo + (r & 7) * 128 + k;
    addr ^= ((addr >> 7) & 7u) << 4;
    return emu_e4m3(emu_wg_smem[addr]);
}
inline void wg_ss8(float (&d)[64], u64 a, u64 b, int accumulate) {
    const int w = (threadIdx.x >> 5) & 3;
    emu_wg_mma<64, 32>(d, [&](int r, int k) { return emu_wg_e4m3_kmajor(a, 16 * w + r, k); },
                       [&](int k, int n) { return emu_wg_e4m3_kmajor(b, n, k); }, accumulate != 0);
}
// A from registers: the warp's 16 × 16 A gathered from its lanes' fragments.
template <int R> inline void wg_rs(float (&d)[R], const u32 (&a)[4], u64 b) {
    Warp* wp = g_warps[threadIdx.x / 32];
    const unsigned lane = threadIdx.x % 32;
    for (int i = 0; i < 4; ++i) wp->a[lane][i] = a[i];
    wp->bar->arrive_and_wait();
    float A[16][16];
    auto half = [](unsigned reg, int h) {
        const unsigned u = (h ? reg >> 16 : reg & 0xffffu) << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    };
    for (unsigned l = 0; l < 32; ++l) {
        const unsigned g = l / 4, t = l % 4;
        for (int h = 0; h < 2; ++h) {
            A[g][2 * t + h] = half(wp->a[l][0], h);
            A[g + 8][2 * t + h] = half(wp->a[l][1], h);
            A[g][2 * t + 8 + h] = half(wp->a[l][2], h);
            A[g + 8][2 * t + 8 + h] = half(wp->a[l][3], h);
        }
    }
    wp->bar->arrive_and_wait();
    emu_wg_mma(d, [&](int r, int k) { return A[r][k]; },
               [&](int k, int n) { return emu_wg_nmajor(b, k, n); }, true);
}
__device__ __forceinline__ void wg_fence() {}
__device__ __forceinline__ void wg_commit() {}
template <int N = 0> __device__ __forceinline__ void wg_wait() {}
__device__ __forceinline__ void fence_proxy_async() {}
template <int R> __device__ __forceinline__ void wg_keep(float (&)[R]) {}
template <int N> __device__ __forceinline__ void wg_setmaxnreg_inc() {}
template <int N> __device__ __forceinline__ void wg_setmaxnreg_dec() {}
#define METRALE_WGMMA 1
// The block's shared memory, 1024-byte aligned (BYTES: what the kernel asks for, 1024 more than
// it uses, so the aligned start fits).
template <int BYTES, int THREADS> inline unsigned char* wg_dyn_smem() {
    alignas(1024) static unsigned char raw[BYTES];
    emu_wg_smem = raw;
    return raw;
}
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900)
#define METRALE_WGMMA 1
__device__ __forceinline__ u32 wg_smem_addr(const void* p) {
    return (u32)__cvta_generic_to_shared(p);
}
// The block's dynamic shared memory from its first 1024-byte boundary: the swizzle reads
// address bits (BYTES: what the launch gives, 1024 more than the kernel uses). Traps unless the
// block has THREADS threads (the kernels' launch bounds and register budget assume it).
template <int BYTES, int THREADS> __device__ __forceinline__ unsigned char* wg_dyn_smem() {
    extern __shared__ __attribute__((aligned(1024))) unsigned char wg_smem_raw[];
    if (blockDim.x != THREADS) asm volatile("trap;");
    return wg_smem_raw + ((1024u - (wg_smem_addr(wg_smem_raw) & 1023u)) & 1023u);
}
// Orders this warpgroup's register and shared-memory accesses before the wgmma that follow.
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
// Every committed group of this warpgroup done but the newest N.
template <int N = 0> __device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Shared-memory writes of this thread (st.shared, cp.async) visible to wgmma's async proxy.
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// Pins accumulators in place: no read or write of them moves across this point (after wg_wait,
// so nothing reads them while the products that write them are in flight).
template <int R> __device__ __forceinline__ void wg_keep(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// A warp-specialized block moves registers between its warpgroups: each thread of this
// warpgroup gets N (a multiple of 8, 24..256) once the block's pool has them (inc), or gives
// back down to N (dec). Executed by all four warps of a warpgroup.
template <int N> __device__ __forceinline__ void wg_setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N> __device__ __forceinline__ void wg_setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}
// D[64 × 64] = A · B (+ D when `accumulate`), A and B from shared memory, K-major.
__device__ __forceinline__ void wg_ss(float (&d)[32], u64 a, u64 b, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
                 "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 :
                   "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(a), "l"(b), "r"(accumulate));
}

// D[64 × 128] = A · B (+ D when `accumulate`), A and B from shared memory, K-major.
__device__ __forceinline__ void wg_ss(float (&d)[64], u64 a, u64 b, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 :
                   "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(a), "l"(b), "r"(accumulate));
}

// D[64 × 128] = A · B (+ D when `accumulate`), e4m3 A and B from shared memory, K-major (the
// only layout 8-bit wgmma reads), k 32: the same descriptors as a bf16 k16 step (32 bytes).
__device__ __forceinline__ void wg_ss8(float (&d)[64], u64 a, u64 b, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, %64, %65, p, 1, 1;\n}\n"
                 :
                   "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(a), "l"(b), "r"(accumulate));
}

// D[64 × 64] += A · B, A from registers (each warp's 16 rows as the m16n8k16 A fragment),
// B from shared memory N-major (imm-trans-b 1).
__device__ __forceinline__ void wg_rs(float (&d)[32], const u32 (&a)[4], u64 b) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
                 "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                 :
                   "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

// D[64 × 128] += A · B, A from registers (each warp's 16 rows as the m16n8k16 A fragment),
// B from shared memory N-major (imm-trans-b 1).
__device__ __forceinline__ void wg_rs(float (&d)[64], const u32 (&a)[4], u64 b) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                 :
                   "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

// D[64 × 256] += A · B, A from registers (each warp's 16 rows as the m16n8k16 A fragment),
// B from shared memory N-major (imm-trans-b 1).
__device__ __forceinline__ void wg_rs(float (&d)[128], const u32 (&a)[4], u64 b) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
                 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
                 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
                 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
                 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
                 "}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
                 :
                   "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
                   "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
                   "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
                   "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
                   "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
                   "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
                   "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
                   "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
                   "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

#endif
