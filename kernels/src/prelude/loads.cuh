// 16-byte loads (8 bf16) through inline PTX, so no vector-type header is needed: `load_stream`
// reads data used once (no L1 allocation), `load_cached` data many threads re-read; and the
// 16-byte store `store16`. u32x4 is 4-byte aligned, so a plain `*(u32x4*)p = v` compiles to
// four 4-byte stores: on a global row written a 16-byte chunk a thread that made the dequantizing
// kernels 10-15x slower than their bytes (performance log part 17); `store16` is one.
struct u32x4 {
    u32 x, y, z, w;
};

struct u32x2 {
    u32 x, y;
};

#ifdef METRALE_HOST_EMULATION
__device__ __forceinline__ u32 load_stream4(const u32* p) { return *p; }
__device__ __forceinline__ u32x2 load_stream8(const u32x2* p) { return *p; }
__device__ __forceinline__ u32x4 load_stream(const u32x4* p) { return *p; }
__device__ __forceinline__ u32x4 load_cached(const u32x4* p) { return *p; }
__device__ __forceinline__ float load_l2(const float* p) { return *p; }
__device__ __forceinline__ int load_l2(const int* p) { return *p; }
__device__ __forceinline__ u32x4 load_l2x4(const u32x4* p) { return *p; }
__device__ __forceinline__ void store16(void* p, u32x4 v) { *(u32x4*)p = v; }
#else
// v to p (16-byte aligned; global or shared: generic addressing) in one 16-byte store.
__device__ __forceinline__ void store16(void* p, u32x4 v) {
    asm volatile("st.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}
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

__device__ __forceinline__ u32 load_stream4(const u32* p) {
    u32 r;
    asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(r) : "l"(p));
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

// 16 and 8 bytes of shared memory in one load (the types' alignment tells the compiler it may;
// a plain u32x4 is 4-byte aligned and would load as four words).
struct alignas(16) smem16 {
    u32 x, y, z, w;
};
struct alignas(8) smem8 {
    u32 x, y;
};
__device__ __forceinline__ u32x4 lds16(const unsigned char* p) {
    const smem16 v = *(const smem16*)p;
    return u32x4{v.x, v.y, v.z, v.w};
}
__device__ __forceinline__ u32x2 lds8(const unsigned char* p) {
    const smem8 v = *(const smem8*)p;
    return u32x2{v.x, v.y};
}

// The block's dynamic shared memory (the launch's shared_mem_bytes), 16-byte aligned.
__device__ __forceinline__ unsigned char* dyn_smem() {
#ifdef METRALE_HOST_EMULATION
    return emu_dyn_smem();
#else
    extern __shared__ __attribute__((aligned(16))) unsigned char metrale_dyn_smem[];
    return metrale_dyn_smem;
#endif
}
