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

// A persistent decode step's skeleton (a design probe; no model runs it): one launch, blocks
// resident at once, walks a table of stages in order, one a step's op (a layer's qkv, its
// attention, o, router, experts' gate|up, their down; then the LM head and the argmax). Stage s
// streams `bytes` of weight memory no other stage reads, split over its first `producers`
// blocks; each producer folds its bytes into one word, stores it and counts itself into
// done[s] (a fenced atomic). A block starts stage s's arithmetic once done[s − 1] counts all of
// s − 1's producers: a flag hand-off from the blocks that produce to the blocks that consume,
// not a grid barrier (a block with no share of a stage goes straight on). A stage marked
// `ahead` (weights whose addresses do not depend on the step: all but the routed experts'
// gate|up) has each thread's first SKEL_AHEAD loads issued before that wait, so the bytes
// stream while the hand-off lands. `mode` bit 0: no waits at all (the bytes at this kernel's
// streaming rate); bit 1: no loads ahead of the wait. The step a persistent decode kernel
// could reach, before its arithmetic: docs/performance.md.
struct SkelStage {
    u64 offset;  // bytes into the weights, a multiple of 16
    u64 bytes;   // a multiple of 16
    u32 producers;
    u32 ahead;
};

constexpr int SKEL_THREADS = 512;
constexpr int SKEL_AHEAD = 8;

__device__ __forceinline__ u32 fold4(u32 acc, u32x4 v) { return acc ^ v.x ^ v.y ^ v.z ^ v.w; }

// Spins on a hand-off this many times at most before the skeleton gives up and says so
// (`failed`): a probe must not hang a check.
constexpr u32 SKEL_SPIN_LIMIT = 1u << 24;

// Thread 0 waits until done[s − 1] counts stage s − 1's producers (bounded), then the block.
__device__ __forceinline__ void skel_wait(const SkelStage* stages, int s, u32* done, u32* failed) {
    if (threadIdx.x == 0) {
        const u32 need = stages[s - 1].producers;
        for (u32 i = 0; load_acquire_u32(done + s - 1) < need; ++i) {
            if (i == SKEL_SPIN_LIMIT || load_acquire_u32(failed) != 0) {
                atomicExch(failed, 1u);
                break;
            }
#ifdef METRALE_HOST_EMULATION
            emu_yield();
#endif
        }
        __threadfence();
    }
    __syncthreads();
}

// Block b's share of a stage: chunks [lo, hi) of its 16-byte chunks (empty past its producers;
// a producer's share may be empty too, and it still publishes).
__device__ __forceinline__ void skel_share(const SkelStage& st, u32 b, u64& lo, u64& hi) {
    const u64 chunks = st.bytes / 16, per = (chunks + st.producers - 1) / st.producers;
    lo = b < st.producers ? min(chunks, b * per) : 0;
    hi = b < st.producers ? min(chunks, lo + per) : 0;
}

// A producer's last act in a stage: its word, then its count in done[s].
__device__ __forceinline__ void skel_publish(u32 acc, u32* folded, int s, u32* done, u32* out) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc ^= shfl_xor_u32(acc, o);
    if (threadIdx.x % 32 == 0) folded[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        u32 r = 0;
        for (int i = 0; i < SKEL_THREADS / 32; ++i) r ^= folded[i];
        out[(u64)s * gridDim.x + blockIdx.x] = r;
        __threadfence();
        atomicAdd(done + s, 1u);
    }
    __syncthreads();
}

extern "C" __global__ void __launch_bounds__(SKEL_THREADS)
    decode_skeleton(const u32x4* weights, const SkelStage* stages, int n, u32* done, u32* out,
                    u32* failed, int mode) {
    pdl_start();
    DYNAMIC_SMEM(u32, folded);  // SKEL_THREADS / 32 words (dynamic: the host emulation runs
                                // every block at once, and a static array would be shared)
    const u32 b = blockIdx.x, t = threadIdx.x, grid = gridDim.x;
    const bool wait = (mode & 1) == 0, ahead_ok = (mode & 2) == 0;
    for (int s = 0; s < n; ++s) {
        const SkelStage st = stages[s];
        u64 lo, hi;
        skel_share(st, b, lo, hi);
        const bool mine = b < st.producers;  // a producer publishes even an empty share
        const u32x4* w = weights + st.offset / 16;
        u32x4 pre[SKEL_AHEAD];
        const bool early = mine && st.ahead && ahead_ok;
        if (early) {
#pragma unroll
            for (int i = 0; i < SKEL_AHEAD; ++i) {
                const u64 c = lo + t + (u64)i * SKEL_THREADS;
                pre[i] = c < hi ? load_stream(w + c) : u32x4{0, 0, 0, 0};
            }
        }
        u32 acc = 0;
        if (wait && s > 0) {
            skel_wait(stages, s, done, failed);
            // The previous stage's output, as a consumer reads its x: from L2.
            acc = (u32)load_l2((const int*)out + (u64)(s - 1) * grid + t % stages[s - 1].producers);
        }
        if (!mine) continue;
        if (!early) {
#pragma unroll
            for (int i = 0; i < SKEL_AHEAD; ++i) {
                const u64 c = lo + t + (u64)i * SKEL_THREADS;
                pre[i] = c < hi ? load_stream(w + c) : u32x4{0, 0, 0, 0};
            }
        }
#pragma unroll
        for (int i = 0; i < SKEL_AHEAD; ++i) acc = fold4(acc, pre[i]);
        u64 c = lo + t + (u64)SKEL_AHEAD * SKEL_THREADS;
        for (; c + SKEL_THREADS < hi; c += 2 * SKEL_THREADS) {
            const u32x4 v0 = load_stream(w + c), v1 = load_stream(w + c + SKEL_THREADS);
            acc = fold4(fold4(acc, v0), v1);
        }
        for (; c < hi; c += SKEL_THREADS) acc = fold4(acc, load_stream(w + c));
        skel_publish(acc, folded, s, done, out);
    }
}

// The same skeleton with the weights streamed through shared memory: each thread keeps up to
// RING_ITEMS items of RING_CHUNKS 16-byte chunks in flight with cp.async (into its own slots, so
// it needs no barrier to read them back) and issues them in the stages' order across stage
// boundaries, so that a stage's bytes are on their way while the block waits on the previous
// stage's hand-off and while it drains its own last loads. An item of a stage whose addresses
// depend on the step (`ahead` = 0: the experts' gate|up) is issued only once the block has
// passed that stage's wait. Every thread has the same number of items a stage (a chunk past
// the share is a zero fill), so the block's barriers line up. `mode` bit 0: no waits. Dynamic
// shared memory: RING_ITEMS · RING_CHUNKS · SKEL_THREADS · 16 bytes (192 KB) + 64. It folds the
// same chunks as decode_skeleton: `out` is the same, word for word.
constexpr int RING_ITEMS = 6;
constexpr int RING_CHUNKS = 4;

// cp.async.wait_group with a count known only at run time (at most RING_ITEMS − 1).
__device__ __forceinline__ void cp_async_wait_upto(int pending) {
    switch (pending) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    case 3: cp_async_wait<3>(); break;
    case 4: cp_async_wait<4>(); break;
    default: cp_async_wait<5>(); break;
    }
}

// Items a thread has in stage `st` of block b's share.
__device__ __forceinline__ u64 ring_items(const SkelStage& st, u32 b) {
    u64 lo, hi;
    skel_share(st, b, lo, hi);
    const u64 per_thread = (hi - lo + SKEL_THREADS - 1) / SKEL_THREADS;
    return (per_thread + RING_CHUNKS - 1) / RING_CHUNKS;
}

extern "C" __global__ void __launch_bounds__(SKEL_THREADS)
    decode_skeleton_ring(const u32x4* weights, const SkelStage* stages, int n, u32* done,
                         u32* out, u32* failed, int mode) {
    pdl_start();
    DYNAMIC_SMEM(u32x4, ring);  // [RING_ITEMS][RING_CHUNKS][SKEL_THREADS], then the block's
                                // SKEL_THREADS / 32 folded words
    u32* const folded = (u32*)(ring + RING_ITEMS * RING_CHUNKS * SKEL_THREADS);
    const u32 b = blockIdx.x, t = threadIdx.x, grid = gridDim.x;
    const bool wait = (mode & 1) == 0;
    // The issue cursor: stage is, its item k of items; `gate`: the last stage whose wait this
    // block has passed.
    int is = 0, gate = wait ? 0 : n;
    u64 k = 0, items = n > 0 ? ring_items(stages[0], b) : 0;
    u64 issued = 0, consumed = 0;
    auto issue = [&]() {
        while (issued - consumed < RING_ITEMS) {
            while (is < n && k == items) {
                ++is;
                k = 0;
                items = is < n ? ring_items(stages[is], b) : 0;
            }
            if (is >= n) return;
            const SkelStage st = stages[is];
            if (!st.ahead && is > gate) return;
            u64 lo, hi;
            skel_share(st, b, lo, hi);
            const u32x4* w = weights + st.offset / 16;
            const int slot = (int)(issued % RING_ITEMS);
#pragma unroll
            for (int r = 0; r < RING_CHUNKS; ++r) {
                const u64 c = lo + t + (k * RING_CHUNKS + r) * SKEL_THREADS;
                cp_async<16>(ring + ((u64)slot * RING_CHUNKS + r) * SKEL_THREADS + t,
                             w + (c < hi ? c : 0), c < hi);
            }
            cp_async_commit();
            ++issued;
            ++k;
        }
    };
    for (int s = 0; s < n; ++s) {
        const SkelStage st = stages[s];
        u32 acc = 0;
        if (wait && s > 0) {
            issue();  // what is known ahead goes before the wait
            skel_wait(stages, s, done, failed);
            acc = (u32)load_l2((const int*)out + (u64)(s - 1) * grid + t % stages[s - 1].producers);
        }
        gate = max(gate, s);
        if (b >= st.producers) continue;
        const u64 mine = ring_items(st, b);
        issue();
        for (u64 j = 0; j < mine; ++j) {
            cp_async_wait_upto((int)(issued - consumed - 1));
            const int slot = (int)(consumed % RING_ITEMS);
#pragma unroll
            for (int r = 0; r < RING_CHUNKS; ++r)
                acc = fold4(acc, ring[((u64)slot * RING_CHUNKS + r) * SKEL_THREADS + t]);
            ++consumed;
            issue();
        }
        skel_publish(acc, folded, s, done, out);
    }
}
