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
