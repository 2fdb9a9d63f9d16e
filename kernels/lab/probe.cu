// Synchronisation probes, for cuda_check's moe-speed (no model runs them): what one link of a
// chain of kernels costs inside a CUDA graph (each launched with programmatic dependent launch,
// as the engine launches everything), what one grid-wide barrier costs inside one kernel
// (lab.cuh's grid_sync), and what one hand-off of a flag between blocks costs. A one-token
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
// streaming rate); bit 1: no loads ahead of the wait; bit 2: the hand-off with the flag in the
// data (skel_wait_ll; `out` then holds a u64 a stage a block, zero before the launch), every
// thread spinning on its word, or with bit 3 too, warp 0 alone spinning on the stage's words
// and passing them on through shared memory. Dynamic shared memory: SKEL_THREADS / 32 words,
// then two words a block of the grid (bit 3: a stage's words, by the parity of the stage, so a
// thread still reading one stage's never meets the next one's writes). The step a persistent
// decode kernel could reach, before its arithmetic: docs/performance.md.
struct SkelStage {
    u64 offset;  // bytes into the weights, a multiple of 16
    u64 bytes;   // a multiple of 16
    u32 producers;
    u32 ahead;  // bit 0: known ahead; bit 1: routed (decode_skeleton_tma's second ring)
};
constexpr u32 SKEL_AHEAD_BIT = 1, SKEL_ROUTED_BIT = 2;

constexpr int SKEL_THREADS = 512;
constexpr int SKEL_AHEAD = 8;

__device__ __forceinline__ u32 fold4(u32 acc, u32x4 v) { return acc ^ v.x ^ v.y ^ v.z ^ v.w; }

// Spins on a hand-off this many times at most before the skeleton gives up and says so
// (`failed`): a probe must not hang a check.
constexpr u32 SKEL_SPIN_LIMIT = 1u << 24;

// The threads that take part in a stage's hand-off: the whole block, or (decode_skeleton_tma)
// its consumer warps alone, through named barrier 1.
constexpr int TMA_CONSUMERS = SKEL_THREADS;
template <bool CONSUMERS> __device__ __forceinline__ void skel_sync() {
    if constexpr (CONSUMERS) {
        bar_named_sync(1, TMA_CONSUMERS);
    } else {
        __syncthreads();
    }
}

// Spins until ready() (bounded): gives up after SKEL_SPIN_LIMIT tries, or once another thread
// has given up (`failed`, read every EVERY tries), and then says so in `failed`.
template <u32 EVERY, class Ready>
__device__ __forceinline__ void skel_spin_until(Ready ready, u32* failed) {
    for (u32 i = 0; !ready(); ++i) {
        if (i == SKEL_SPIN_LIMIT || (i % EVERY == EVERY - 1 && load_acquire_u32(failed) != 0)) {
            atomicExch(failed, 1u);
            return;
        }
#ifdef METRALE_HOST_EMULATION
        emu_yield();
#endif
    }
}

// Waits (bounded) until `counter` reaches `need`.
__device__ __forceinline__ void skel_spin(const u32* counter, u32 need, u32* failed) {
    skel_spin_until<1>([&] { return load_acquire_u32(counter) >= need; }, failed);
}

// Thread 0 waits until done[s − 1] counts stage s − 1's producers (bounded), then the block.
template <bool CONSUMERS = false>
__device__ __forceinline__ void skel_wait(const SkelStage* stages, int s, u32* done, u32* failed) {
    if (threadIdx.x == 0) {
        skel_spin(done + s - 1, stages[s - 1].producers, failed);
        __threadfence();
    }
    skel_sync<CONSUMERS>();
}

// Block b's share of a stage: chunks [lo, hi) of its 16-byte chunks (empty past its producers;
// a producer's share may be empty too, and it still publishes).
__device__ __forceinline__ void skel_share(const SkelStage& st, u32 b, u64& lo, u64& hi) {
    const u64 chunks = st.bytes / 16, per = (chunks + st.producers - 1) / st.producers;
    lo = b < st.producers ? min(chunks, b * per) : 0;
    hi = b < st.producers ? min(chunks, lo + per) : 0;
}

// The block's word: every thread's acc folded together (thread 0's return value; the others'
// is not the word).
template <bool CONSUMERS> __device__ __forceinline__ u32 skel_fold_block(u32 acc, u32* folded) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc ^= shfl_xor_u32(acc, o);
    if (threadIdx.x % 32 == 0) folded[threadIdx.x / 32] = acc;
    skel_sync<CONSUMERS>();
    u32 r = 0;
    if (threadIdx.x == 0)
        for (int i = 0; i < SKEL_THREADS / 32; ++i) r ^= folded[i];
    return r;
}

// A producer's last act in a stage: its word, then its count in done[s].
template <bool CONSUMERS = false>
__device__ __forceinline__ void skel_publish(u32 acc, u32* folded, int s, u32* done, u32* out) {
    const u32 r = skel_fold_block<CONSUMERS>(acc, folded);
    if (threadIdx.x == 0) {
        out[(u64)s * gridDim.x + blockIdx.x] = r;
        __threadfence();
        atomicAdd(done + s, 1u);
    }
    skel_sync<CONSUMERS>();
}

// The hand-off with the flag in the data (mode bit 2), as NCCL's low-latency protocol does it:
// a producer stores its word and the stage's tag (s + 1) together as one 8-byte word, with no
// fence and no counter to wait on; each consumer thread spins on the very word it reads, so a
// hand-off is one store seen by one load instead of a fenced count, a flag, then the data.
__device__ __forceinline__ u64 load_relaxed_u64(const u64* p) {
#ifdef METRALE_HOST_EMULATION
    return __atomic_load_n(p, __ATOMIC_RELAXED);
#else
    u64 v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
#endif
}
__device__ __forceinline__ void store_relaxed_u64(u64* p, u64 v) {
#ifdef METRALE_HOST_EMULATION
    __atomic_store_n(p, v, __ATOMIC_RELAXED);
#else
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#endif
}
// This thread's word of stage s − 1 once it carries the tag s (bounded; when it gave up, what
// the word held then).
__device__ __forceinline__ u32 skel_wait_ll(const u64* word, int s, u32* failed) {
    u64 v = 0;
    skel_spin_until<1024>(
        [&] {
            v = load_relaxed_u64(word);
            return (u32)(v >> 32) == (u32)s;
        },
        failed);
    return (u32)v;
}
__device__ __forceinline__ void skel_publish_ll(u32 acc, u32* folded, int s, u32* done, u64* out) {
    const u32 r = skel_fold_block<false>(acc, folded);
    if (threadIdx.x == 0) {
        store_relaxed_u64(out + (u64)s * gridDim.x + blockIdx.x, (u64)(s + 1) << 32 | r);
        atomicAdd(done + s, 1u);  // counted for the check only: nobody waits on it
    }
    __syncthreads();
}

extern "C" __global__ void __launch_bounds__(SKEL_THREADS, 1)
    decode_skeleton(const u32x4* weights, const SkelStage* stages, int n, u32* done, u32* out,
                    u32* failed, int mode) {
    pdl_start();
    DYNAMIC_SMEM(u32, folded);  // SKEL_THREADS / 32 words (dynamic: the host emulation runs
                                // every block at once, and a static array would be shared)
    const u32 b = blockIdx.x, t = threadIdx.x, grid = gridDim.x;
    const bool wait = (mode & 1) == 0, ahead_ok = (mode & 2) == 0, ll = (mode & 4) != 0;
    const bool ll_warp = ll && (mode & 8) != 0;
    u64* const out64 = (u64*)out;  // mode bit 2: a word and its tag a producer
    u32* const words2 = folded + SKEL_THREADS / 32;  // mode bit 3: [2][grid]
    for (int s = 0; s < n; ++s) {
        const SkelStage st = stages[s];
        u64 lo, hi;
        skel_share(st, b, lo, hi);
        const bool mine = b < st.producers;  // a producer publishes even an empty share
        const u32x4* w = weights + st.offset / 16;
        u32x4 pre[SKEL_AHEAD];
        const bool early = mine && (st.ahead & SKEL_AHEAD_BIT) && ahead_ok;
        if (early) {
#pragma unroll
            for (int i = 0; i < SKEL_AHEAD; ++i) {
                const u64 c = lo + t + (u64)i * SKEL_THREADS;
                pre[i] = c < hi ? load_stream(w + c) : u32x4{0, 0, 0, 0};
            }
        }
        u32 acc = 0;
        if (wait && s > 0 && ll_warp) {
            const u32 p = stages[s - 1].producers;
            u32* const words = words2 + (s & 1) * grid;
            if (t < 32) {
#pragma unroll 1
                for (u32 j = t; j < p; j += 32)
                    words[j] = skel_wait_ll(out64 + (u64)(s - 1) * grid + j, s, failed);
            }
            __syncthreads();
            acc = words[t % p];
        } else if (wait && s > 0 && ll) {
            acc = skel_wait_ll(out64 + (u64)(s - 1) * grid + t % stages[s - 1].producers, s, failed);
        } else if (wait && s > 0) {
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
        if (ll)
            skel_publish_ll(acc, folded, s, done, out64);
        else
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
            if (!(st.ahead & SKEL_AHEAD_BIT) && is > gate) return;
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

// The skeleton with the weights streamed by the bulk-copy engine (TMA): two producer warps, one
// lane each, copy every stage's share into two rings of shared-memory slots, running ahead of
// the consumers across stage boundaries as far as their ring allows, each slot with a `full`
// mbarrier (its bytes have landed) and an `empty` one (every consumer warp has read it). Ring 0
// carries the weights known ahead (qkv, the KV, o, the router, the LM head), ring 1 the routed
// experts' (SKEL_ROUTED_BIT): its producer waits for the router's hand-off before the first
// stage not known ahead (gate|up), so the dense producer keeps streaming the next layer's
// weights while the router runs and while the experts' bytes stream. The consumer warps
// (TMA_CONSUMERS threads, a 16-byte chunk each of a slot) fold what lands and hand off between
// stages as decode_skeleton does, through a barrier of their own. The rings take `dense` and
// `routed` slots of `slot` bytes (a multiple of TMA_SLOT; each ring at least one slot, all of them
// within TMA_SLOTS · TMA_SLOT bytes and TMA_SLOTS barriers). `mode` bit 0:
// no waits (the bytes at the bulk-copy engine's rate). Dynamic shared memory: TMA_SMEM. The
// same words as decode_skeleton in `out`.
constexpr int TMA_SLOT = 8192;  // the smallest slot, in bytes: TMA_CONSUMERS chunks of 16
constexpr int TMA_SLOTS = 26;
constexpr int TMA_THREADS = TMA_CONSUMERS + 64;
constexpr int TMA_MBAR = 16;  // bytes a barrier takes here (the device uses 8; the emulation 16)
constexpr u32 TMA_SMEM = TMA_SLOTS * TMA_SLOT + 2 * TMA_SLOTS * TMA_MBAR + SKEL_THREADS / 32 * 4;
static_assert(TMA_SLOT == TMA_CONSUMERS * 16, "a slot is one chunk a consumer thread");
static_assert(TMA_SMEM <= 227 * 1024, "a block's shared memory on sm_90");

// The mbarriers are prelude/barrier.cuh's; the bulk copy is this probe's alone.
#ifdef METRALE_HOST_EMULATION
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, u32 bytes, void* m) {
    emu_bulk_copy(dst, src, bytes, m);
}
#else
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, u32 bytes, void* m) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
            smem_u32(dst)),
        "l"(src), "r"(bytes), "r"(smem_u32(m))
        : "memory");
}
#endif

// Waits (bounded) for the phase of this parity of barrier m.
__device__ __forceinline__ void mbar_wait(void* m, u32 parity, u32* failed) {
    skel_spin_until<1024>([&] { return mbar_test(m, parity); }, failed);
}

extern "C" __global__ void __launch_bounds__(TMA_THREADS, 1)
    decode_skeleton_tma(const u32x4* weights, const SkelStage* stages, int n, u32* done,
                        u32* out, u32* failed, int mode, int dense, int routed, int slot) {
    pdl_start();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    // The bulk-copy engine and mbarrier transactions are sm_90's: below it, a failure.
    (void)SKEL_ROUTED_BIT;
    if (threadIdx.x == 0) atomicExch(failed, 1u);
#else
    DYNAMIC_SMEM(unsigned char, smem);  // [TMA_SLOTS][TMA_SLOT] bytes, the barriers (full of
                                        // every slot, then empty of every slot), the words
    u32x4* const slots = (u32x4*)smem;
    unsigned char* const bars = smem + TMA_SLOTS * TMA_SLOT;
    auto full = [&](int k) { return (void*)(bars + k * TMA_MBAR); };
    auto empty = [&](int k) { return (void*)(bars + (TMA_SLOTS + k) * TMA_MBAR); };
    u32* const folded = (u32*)(bars + 2 * TMA_SLOTS * TMA_MBAR);
    const u32 b = blockIdx.x, t = threadIdx.x, grid = gridDim.x;
    const bool wait = (mode & 1) == 0;
    const u64 PER = (u64)slot / 16;  // chunks a slot
    if (dense < 1 || routed < 1 || dense + routed > TMA_SLOTS || slot < TMA_SLOT ||
        slot % TMA_SLOT != 0 || (u64)(dense + routed) * slot > (u64)TMA_SLOTS * TMA_SLOT) {
        if (t == 0) atomicExch(failed, 1u);
        return;
    }
    if (t == 0) {
        for (int k = 0; k < TMA_SLOTS; ++k) {
            mbar_init(full(k), 1);
            mbar_init(empty(k), TMA_CONSUMERS / 32);
        }
        mbar_init_fence();
    }
    __syncthreads();
    if (t >= TMA_CONSUMERS) {  // a producer warp: lane 0 issues its ring's copies
        if (t % 32 != 0) return;
        const u32 ring = (t - TMA_CONSUMERS) / 32;
        const int base = ring ? dense : 0, count = ring ? routed : dense;
        u64 issued = 0;
        for (int s = 0; s < n; ++s) {
            const SkelStage st = stages[s];
            if (((st.ahead & SKEL_ROUTED_BIT) != 0) != (ring == 1) || b >= st.producers) continue;
            if (wait && s > 0 && !(st.ahead & SKEL_AHEAD_BIT))
                skel_spin(done + s - 1, stages[s - 1].producers, failed);
            u64 lo, hi;
            skel_share(st, b, lo, hi);
            for (u64 c = lo; c < hi; c += PER, ++issued) {
                const int k = base + (int)(issued % count);
                if (issued >= (u64)count) mbar_wait(empty(k), (u32)((issued / count - 1) & 1), failed);
                const u32 bytes = (u32)(min(hi - c, PER) * 16);
                mbar_arrive_expect_tx(full(k), bytes);
                bulk_copy(slots + k * PER, weights + st.offset / 16 + c, bytes, full(k));
            }
        }
        return;
    }
    u64 used0 = 0, used1 = 0;  // slots consumed from each ring (scalars: no local array)
    for (int s = 0; s < n; ++s) {
        const SkelStage st = stages[s];
        u32 acc = 0;
        if (wait && s > 0) {
            skel_wait<true>(stages, s, done, failed);
            acc = (u32)load_l2((const int*)out + (u64)(s - 1) * grid + t % stages[s - 1].producers);
        }
        if (b >= st.producers) continue;
        const int ring = (st.ahead & SKEL_ROUTED_BIT) ? 1 : 0;
        const int base = ring ? dense : 0, count = ring ? routed : dense;
        u64 lo, hi;
        skel_share(st, b, lo, hi);
        for (u64 c = lo; c < hi; c += PER) {
            const u64 i = ring ? used1++ : used0++;
            const int k = base + (int)(i % count);
            mbar_wait(full(k), (u32)((i / count) & 1), failed);
            const u64 m = min(hi - c, PER);
            for (u64 q = t; q < m; q += TMA_CONSUMERS) acc = fold4(acc, slots[k * PER + q]);
            __syncwarp();
            if (t % 32 == 0) mbar_arrive(empty(k));
        }
        skel_publish<true>(acc, folded, s, done, out);
    }
#endif
}
