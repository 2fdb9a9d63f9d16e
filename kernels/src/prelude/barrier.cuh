// Barriers for warp-specialized kernels (sm_90; attention_flash_wg.cu, the lab's probe.cu):
// shared-memory mbarriers (a producer signals a stage `full`, its consumers signal it `empty`,
// each wait names the phase's parity) and named barriers (bar.sync / bar.arrive on ids 1..15:
// a subset of the block's warps hands a turn to another without stopping the rest). The host
// emulation (emu.h) runs each as its documented behaviour.
#ifdef METRALE_HOST_EMULATION
__device__ __forceinline__ void mbar_init(void* m, u32 count) { emu_mbar_init(m, count); }
__device__ __forceinline__ void mbar_init_fence() {}
__device__ __forceinline__ void mbar_arrive(void* m) { emu_mbar_arrive(m, 0); }
__device__ __forceinline__ void mbar_arrive_expect_tx(void* m, u32 bytes) {
    emu_mbar_arrive(m, bytes);
}
// The emulation's cp.async copies at once: the arrival is immediate.
__device__ __forceinline__ void mbar_arrive_cp_async(void* m) { emu_mbar_arrive(m, 0); }
__device__ __forceinline__ bool mbar_test(void* m, u32 parity) { return emu_mbar_test(m, parity); }
__device__ __forceinline__ void bar_named_sync(int id, int threads) {
    emu_named_barrier(id, (unsigned)threads);
}
__device__ __forceinline__ void bar_named_arrive(int id, int threads) {
    emu_named_arrive(id, (unsigned)threads);
}
#else
__device__ __forceinline__ u32 smem_u32(const void* p) { return (u32)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(void* m, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(m)), "r"(count)
                 : "memory");
}
// The barriers' initialisation made visible to the async proxy (bulk copies, wgmma).
__device__ __forceinline__ void mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(void* m) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(m)) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(void* m, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(m)),
                 "r"(bytes)
                 : "memory");
}
// An arrival once every cp.async this thread issued before it has landed (.noinc: the arrival
// is one of the count the barrier was initialised with).
__device__ __forceinline__ void mbar_arrive_cp_async(void* m) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_u32(m))
                 : "memory");
}
__device__ __forceinline__ bool mbar_test(void* m, u32 parity) {
    u32 ok;
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}"
        : "=r"(ok)
        : "r"(smem_u32(m)), "r"(parity)
        : "memory");
    return ok != 0;
}
// bar.sync: waits until `threads` threads (this warp's among them) reached barrier `id` by
// bar.sync or bar.arrive. bar.arrive: counts this warp's threads and goes on.
__device__ __forceinline__ void bar_named_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void bar_named_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
#endif

// Waits for the phase of this parity of barrier m (the hardware's try_wait sleeps a while
// between tries).
__device__ __forceinline__ void mbar_wait(void* m, u32 parity) {
    while (!mbar_test(m, parity)) {
#ifdef METRALE_HOST_EMULATION
        emu_yield();
#endif
    }
}
