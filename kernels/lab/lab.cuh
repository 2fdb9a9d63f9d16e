// The lab's own device helpers (kernels/lab/, compiled only into Module::Probe under the `lab`
// feature): pasted after the serving prelude and before probe.cu. Nothing the engine serves
// with uses them.

// A kernel's dynamic shared memory as `T* const name` (the host emulation keeps one buffer a
// block: emu_dyn_smem).
#ifdef METRALE_HOST_EMULATION
#define DYNAMIC_SMEM(T, name) T* const name = (T*)emu_dyn_smem()
#else
#define DYNAMIC_SMEM(T, name)                                                                      \
    extern __shared__ __attribute__((aligned(16))) unsigned char name##_bytes[];                   \
    T* const name = (T*)name##_bytes
#endif

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

