// Synchronisation probes, for cuda_check's moe-speed (no model runs them): what one link of a
// chain of kernels costs inside a CUDA graph (each launched with programmatic dependent launch,
// as the engine launches everything), what one grid-wide barrier costs inside one kernel
// (prelude's grid_sync), and what one hand-off of a flag between blocks costs. A one-token
// decode step is a chain of about ten dependent kernels a layer: these are the figures a
// kernel-boundary design and a persistent one are measured against (docs/performance.md).

// Nothing but the wait: a graph of these is a chain of links.
extern "C" __global__ void sync_probe_empty(u32* sink) {
    pdl_start();
    if (blockIdx.x == 0 && threadIdx.x == 0) sink[0] += 1u;
}

// `rounds` grid-wide barriers (the launcher's grid is resident at once).
extern "C" __global__ void sync_probe_barriers(u32* bar, int rounds) {
    pdl_start();
    for (int r = 0; r < rounds; ++r) grid_sync(bar);
}

// A token passed around the blocks `rounds` times: thread 0 of block b waits for the counter to
// reach r · n + b, then sets it one higher (after a fence), so one hand-off is a write by one
// multiprocessor seen by the next. The counter starts at 0; the last hand-off, which no block
// waits for, sets it back to 0 for the next launch.
extern "C" __global__ void sync_probe_ring(u32* counter, int rounds) {
    pdl_start();
    if (threadIdx.x != 0) return;
    const u32 n = gridDim.x, b = blockIdx.x;
    for (u32 r = 0; r < (u32)rounds; ++r) {
        const u32 turn = r * n + b;
        while (load_acquire_u32(counter) != turn) {
        }
        __threadfence();
        atomicExch(counter, r + 1 == (u32)rounds && b == n - 1 ? 0u : turn + 1u);
    }
}
