// Prefill attention on Hopper's warpgroup MMA (wgmma, sm_90a): the flash kernel of
// attention_flash.cu (same parameters, tiles, masking, online softmax, sinks, sliding windows
// and FP8 caches; read its header first) with both products issued by a warpgroup of 128 threads
// from shared memory instead of mma.sync fed by ldmatrix. Floors and measurements:
// docs/performance.md.
//
// Why: at 8,192 tokens the mma.sync kernel reaches about 250 TFLOP/s at head_dim 128 (a third
// of the H200's dense bf16 rate): every K and V fragment passes through registers (ldmatrix)
// for every 16-row tile, and the products of one warp wait on its own loads. wgmma reads both
// operands of S = Q·Kᵀ and B = V of O += P·V straight from shared memory, 64 rows × N columns an
// instruction, asynchronously.
//
// Layout. A block owns one tile of up to FWG_BQ = 128 rows of one q head (the same tiles and
// grid as attention_flash.cu) and runs two warpgroups of 64 rows each. Q, and each stage of K
// and V, sit in shared memory in wgmma's 128-byte-swizzle layout: a row's 64-column halves
// (128 bytes) are separate blocks of R rows × 128 bytes, and 16-byte chunk c of row r lies at
// chunk c ^ (r % 8) of its 128 bytes (every block 1024-byte aligned, so the hardware's swizzle,
// which reads address bits, matches). Per key tile (BK keys, two cp.async stages) a warpgroup
//   S [64 × BK] = Q·Kᵀ: D/16 wgmma with A = Q and B = K, both K-major descriptors (a 16-column
//     step moves the start address 32 bytes inside the 128-byte rows);
//   masks and runs the online softmax on S's accumulators (rows g and g + 8 of each warp's 16,
//     the mma.sync fragment layout, which wgmma's accumulators share);
//   O [64 × D] += P·V: BK/16 wgmma with A = P from registers (the accumulators rounded to bf16
//     are already the A fragment) and B = V, an N-major descriptor (imm-trans-b: V's rows are
//     keys, its 64-column halves LBO apart, 8-key groups SBO = 1024 bytes apart).
// Each group of products is committed and waited for before its accumulators are read.
//
// sm_90a only (the loader compiles capability 9.0 as sm_90a); elsewhere the kernels trap and
// the launcher never picks them. The host emulation runs every wgmma as its documented
// arithmetic on the same descriptors and swizzle (kernels/dev/host_emulation/flash_test.h).
//
// Symbols: attention_flash_wg[_win]_<q dtype>[_kv8]_d<D> for D = 64, 128, 256.

#define FWG_BQ 128

// A block's shape by head_dim: two warpgroups of 64 rows; BK keys a stage (128 at D = 128,
// where S and O take 64 accumulators each; 64 at D = 64 and 256).
template <int D> struct FwgCfg {
    static constexpr int THREADS = 256;
    static constexpr int BQ = FWG_BQ;
    static constexpr int BK = D == 128 ? 128 : 64;
    static constexpr int CH = D / 8;                // 16-byte chunks of a row
    static constexpr int Q_BYTES = BQ * D * 2;      // bf16 rows
    static constexpr int KV_BYTES = BK * D * 2;     // one of K or V, one stage
    static constexpr int SMEM = 1024 + Q_BYTES + 4 * KV_BYTES; // + 1024: the base aligned
};

// The byte offset of 16-byte chunk c (0 .. D/8) of row r in a swizzled tile of R rows.
template <int R> __device__ __forceinline__ u32 fwg_at(int r, int c) {
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
template <int R, class A, class B> inline void emu_wg_mma(float (&d)[R], A a, B b, bool acc) {
    const int w = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    for (int i = 0; i < R; ++i) {
        const int row = 16 * w + g + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * t + (i & 1);
        float sum = 0.f;
        for (int k = 0; k < 16; ++k) sum += a(row - 16 * w, k) * b(k, col);
        d[i] = (acc ? d[i] : 0.f) + sum;
    }
}
template <int R> inline void wg_ss(float (&d)[R], u64 a, u64 b, int accumulate) {
    const int w = (threadIdx.x >> 5) & 3;
    emu_wg_mma(d, [&](int r, int k) { return emu_wg_kmajor(a, 16 * w + r, k); },
               [&](int k, int n) { return emu_wg_kmajor(b, n, k); }, accumulate != 0);
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
__device__ __forceinline__ void wg_wait() {}
__device__ __forceinline__ void fence_proxy_async() {}
template <int R> __device__ __forceinline__ void wg_keep(float (&)[R]) {}
#define METRALE_WGMMA 1
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900)
#define METRALE_WGMMA 1
__device__ __forceinline__ u32 wg_smem_addr(const void* p) {
    return (u32)__cvta_generic_to_shared(p);
}
// Orders this warpgroup's register and shared-memory accesses before the wgmma that follow.
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
// Every committed group of this warpgroup done.
__device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
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

#ifdef METRALE_WGMMA
template <typename T, typename TC, int D, bool WIN>
__device__ void attention_flash_wg_impl(bf16* out, const T* qkv, const TC* k_cache,
                                        const TC* v_cache, const u32* positions,
                                        const u32* row_seq, const u32* block_tables,
                                        const u32* tiles, int max_blocks, int block_size,
                                        int num_heads, int num_kv_heads, float scale,
                                        const float* k_scales, const float* v_scales, int window,
                                        const float* sinks) {
    using C = FwgCfg<D>;
    constexpr int BQ = C::BQ, BK = C::BK;
    constexpr int NS = BK / 8; // 8-key column blocks of S
    constexpr int NO = D / 8;  // 8-dim column blocks of O
#ifdef METRALE_HOST_EMULATION
    alignas(1024) static unsigned char raw[C::SMEM];
    emu_wg_smem = raw;
#else
    extern __shared__ __attribute__((aligned(1024))) unsigned char flash_wg_smem[];
    unsigned char* const raw = flash_wg_smem;
    if (blockDim.x != C::THREADS) asm volatile("trap;");
#endif
    // The swizzle reads address bits: every tile starts on a 1024-byte boundary.
    unsigned char* const smem = raw + ((1024u - (wg_smem_addr(raw) & 1023u)) & 1023u);
    __shared__ int row_pos[BQ];
    __shared__ int tile_len, tile_lo;
    unsigned char* const qs = smem;
    unsigned char* const kvs = smem + C::Q_BYTES; // stage s: K at s · 2 · KV_BYTES, V after

    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int tile = (int)(blockIdx.x / num_heads), head = (int)(blockIdx.x % num_heads);
    const int kv_head = head / (num_heads / num_kv_heads);
    const int row0 = (int)tiles[2 * tile], row_end = (int)tiles[2 * tile + 1];
    const u64 width = (u64)(num_heads + 2 * num_kv_heads) * D;
    const u32* table = block_tables + (u64)row_seq[row0] * max_blocks;
    const int win = WIN ? window : 1 << 30;

    flash_tile_rows<T, D, BQ, C::THREADS>(row_pos, qs, qkv, positions, row0, row_end, width, head,
                                          [](int r, int c) { return fwg_at<BQ>(r, c); });
    fence_proxy_async();
    __syncthreads();
    if (threadIdx.x == 0) flash_tile_span<BQ, WIN>(row_pos, win, tile_len, tile_lo);
    // The warpgroup's rows: 64 from gr0; this thread's are rows g and g + 8 of its warp's 16.
    const int gr0 = 64 * wg, wr0 = gr0 + 16 * warp;
    const int pos0 = row_pos[wr0 + g], pos1 = row_pos[wr0 + g + 8];
    int gmax = -1, gmin = 1 << 30;
    for (int r = 0; r < 64; ++r) {
        gmax = max(gmax, row_pos[gr0 + r]);
        gmin = min(gmin, row_pos[gr0 + r]);
    }
    __syncthreads();
    const int len = tile_len;
    const int j0 = (WIN ? tile_lo : 0) / BK, ntiles = (len + BK - 1) / BK;

    const float scale_log2 = scale * 1.4426950408889634f;
    float o[NO * 4];
#pragma unroll
    for (int i = 0; i < NO * 4; ++i) o[i] = 0.f;
    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};

    auto stage = [&](int st) { return kvs + st * (2 * C::KV_BYTES); };
    // Key tile `kb` into stage `st`: as attention_flash.cu's, in the swizzled layout.
    auto load = [&](int st, int kb) {
        flash_load_tile<TC, D, C::BK, C::THREADS>(stage(st), stage(st) + C::KV_BYTES, k_cache,
                                               v_cache, k_scales, v_scales, table, block_size,
                                               num_kv_heads, kv_head, kb, len,
                                               [](int r, int c) { return fwg_at<C::BK>(r, c); });
        cp_async_commit();
    };
    if (j0 < ntiles) load(j0 & 1, j0 * BK);
    const u32 q_addr = wg_smem_addr(qs) + gr0 * 128;

    for (int j = j0; j < ntiles; ++j) {
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads();
        if (j + 1 < ntiles) load((j + 1) & 1, (j + 1) * BK);
        const int kb = j * BK;
        // Every key of the tile is after every row of this warpgroup (uniform in it: wgmma is
        // issued by all 128 threads or none).
        if (kb > gmax) continue;
        const u32 k_addr = wg_smem_addr(stage(j & 1)), v_addr = k_addr + C::KV_BYTES;

        // S = Q·Kᵀ: 16 columns a step, inside the 128-byte half h = kk / 4 of each row.
        float s[NS * 4];
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const u32 off = (kk & 3) * 32;
            wg_ss(s, wg_desc(q_addr + (kk >> 2) * (BQ * 128) + off, 16, 1024),
                  wg_desc(k_addr + (kk >> 2) * (BK * 128) + off, 16, 1024), kk > 0);
        }
        wg_commit();
        wg_wait();
        wg_keep(s);
        wg_keep(o);

        const bool mask = kb + BK - 1 > gmin;
#pragma unroll
        for (int n = 0; n < NS; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int key = kb + 8 * n + 2 * t + (e & 1);
                const int p = e >> 1 ? pos1 : pos0;
                float& v = s[4 * n + e];
                if (WIN)
                    v = (u32)(p - key) < (u32)window ? v * scale_log2 : NEG_INF;
                else
                    v = mask && key > p ? NEG_INF : v * scale_log2;
            }
        // The online softmax of rows g (e = 0, 1) and g + 8 (e = 2, 3).
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float mx = NEG_INF;
#pragma unroll
            for (int n = 0; n < NS; ++n) mx = fmaxf(mx, fmaxf(s[4 * n + 2 * h], s[4 * n + 2 * h + 1]));
            const float mn = fmaxf(m[h], quad_max(mx));
            const float base = mn == NEG_INF ? 0.f : mn;
            const float corr = exp2_fast(m[h] - base);
            m[h] = mn;
            float sum = 0.f;
#pragma unroll
            for (int n = 0; n < NS; ++n) {
                s[4 * n + 2 * h] = exp2_fast(s[4 * n + 2 * h] - base);
                s[4 * n + 2 * h + 1] = exp2_fast(s[4 * n + 2 * h + 1] - base);
                sum += s[4 * n + 2 * h] + s[4 * n + 2 * h + 1];
            }
            l[h] = l[h] * corr + sum;
#pragma unroll
            for (int n = 0; n < NO; ++n) {
                o[4 * n + 2 * h] *= corr;
                o[4 * n + 2 * h + 1] *= corr;
            }
        }
        // O += P·V, 16 keys a step: P's A fragment is S's accumulators of key blocks 2 · k2
        // and 2 · k2 + 1, rounded to bf16.
        u32 p[BK / 16][4];
#pragma unroll
        for (int k2 = 0; k2 < BK / 16; ++k2) {
            p[k2][0] = pack_bf16(s[8 * k2], s[8 * k2 + 1]);
            p[k2][1] = pack_bf16(s[8 * k2 + 2], s[8 * k2 + 3]);
            p[k2][2] = pack_bf16(s[8 * k2 + 4], s[8 * k2 + 5]);
            p[k2][3] = pack_bf16(s[8 * k2 + 6], s[8 * k2 + 7]);
        }
        wg_fence();
#pragma unroll
        for (int k2 = 0; k2 < BK / 16; ++k2)
            wg_rs(o, p[k2], wg_desc(v_addr + k2 * 16 * 128, BK * 128, 1024));
        wg_commit();
        wg_wait();
        wg_keep(o);
    }
    cp_async_wait<0>();

    // Normalise and store rows g and g + 8 (rows past the tile are not).
    const u64 ow = (u64)num_heads * D;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const float sum = quad_sum(l[h]);
        float inv = sum > 0.f ? 1.f / sum : 0.f;
        if (sinks != nullptr && sum > 0.f) {
            const float sk = sinks[head] * 1.4426950408889634f;
            const float mx = fmaxf(m[h], sk), f = exp2_fast(m[h] - mx);
            inv = f / (sum * f + exp2_fast(sk - mx));
        }
        const int r = row0 + wr0 + g + 8 * h;
        if (r >= row_end) continue;
        bf16* dst = out + (u64)r * ow + (u64)head * D + 2 * t;
#pragma unroll
        for (int n = 0; n < NO; ++n)
            *(u32*)(dst + 8 * n) = pack_bf16(o[4 * n + 2 * h] * inv, o[4 * n + 2 * h + 1] * inv);
    }
}
#endif

// The same parameters, grid and tiles as attention_flash_*; FwgCfg<D>::THREADS threads and
// FwgCfg<D>::SMEM bytes of dynamic shared memory.
#ifdef METRALE_WGMMA
#define FWG_BODY(T, TC, D, WIN)                                                                    \
    attention_flash_wg_impl<T, TC, D, WIN>(out, qkv, k_cache, v_cache, positions, row_seq,         \
                                           block_tables, tiles, max_blocks, block_size, num_heads, \
                                           num_kv_heads, scale, k_scales, v_scales, window, sinks);
#else
#define FWG_BODY(T, TC, D, WIN) asm volatile("trap;");
#endif
#define ATTENTION_FLASH_WG_ONE(NAME, T, TC, D, WIN)                                                \
    extern "C" __global__ void __launch_bounds__(256, 1)                                           \
        NAME(bf16* out, const T* qkv, const TC* k_cache, const TC* v_cache, const u32* positions,  \
             const u32* row_seq, const u32* block_tables, const u32* tiles, int max_blocks,        \
             int block_size, int num_heads, int num_kv_heads, float scale,                         \
             const float* k_scales, const float* v_scales, int window, const float* sinks) {       \
        pdl_start();                                                                               \
        FWG_BODY(T, TC, D, WIN)                                                                    \
    }
#define ATTENTION_FLASH_WG(SUFFIX, T, TC, D)                                                       \
    ATTENTION_FLASH_WG_ONE(attention_flash_wg_##SUFFIX##_d##D, T, TC, D, false)                    \
    ATTENTION_FLASH_WG_ONE(attention_flash_wg_win_##SUFFIX##_d##D, T, TC, D, true)
#define ATTENTION_FLASH_WG_ALL(SUFFIX, T, TC)                                                      \
    ATTENTION_FLASH_WG(SUFFIX, T, TC, 64)                                                          \
    ATTENTION_FLASH_WG(SUFFIX, T, TC, 128)                                                         \
    ATTENTION_FLASH_WG(SUFFIX, T, TC, 256)
ATTENTION_FLASH_WG_ALL(f32, float, bf16)
ATTENTION_FLASH_WG_ALL(bf16, bf16, bf16)
ATTENTION_FLASH_WG_ALL(f32_kv8, float, unsigned char)
ATTENTION_FLASH_WG_ALL(bf16_kv8, bf16, unsigned char)
