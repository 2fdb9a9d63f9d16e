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
