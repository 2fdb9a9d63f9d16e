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
// grid as attention_flash.cu) and runs three warpgroups: a producer and two consumers of 64 rows
// each (FlashAttention-3's warp specialization). Q, and each stage of K and V, sit in shared
// memory in wgmma's 128-byte-swizzle layout: a row's 64-column halves (128 bytes) are separate
// blocks of R rows × 128 bytes, and 16-byte chunk c of row r lies at chunk c ^ (r % 8) of its
// 128 bytes (every block 1024-byte aligned, so the hardware's swizzle, which reads address bits,
// matches).
//   The producer (registers lowered to FWG_PRODUCER_REGS) fills a ring of STAGES stages of BK
//     keys: cp.async for a bf16 cache (each thread's arrival on the stage's `full` mbarrier
//     lands with its copies), widened and scaled through registers for an FP8 one. It refills a
//     stage once both consumers have released it (`empty`, one arrival a consumer warp).
//   Each consumer (registers raised to FWG_CONSUMER_REGS), per key tile:
//     S [64 × BK] = Q·Kᵀ: D/16 wgmma with A = Q and B = K, both K-major descriptors (a
//       16-column step moves the start address 32 bytes inside the 128-byte rows);
//     masks and runs the online softmax on S's accumulators (rows g and g + 8 of each warp's
//       16, the mma.sync fragment layout, which wgmma's accumulators share);
//     O [64 × D] += P·V: BK/16 wgmma with A = P from registers (the accumulators rounded to
//       bf16 are already the A fragment) and B = V, an N-major descriptor (imm-trans-b: V's rows
//       are keys, its 64-column halves LBO apart, 8-key groups SBO = 1024 bytes apart).
//   The consumers take turns issuing their products (ping-pong, named barriers 1 and 2): one
//   issues S (or P·V) and hands the turn over, so the tensor cores run the other's products
//   while the first runs its softmax. No block-wide barrier inside the loop.
// The measurements behind this design (an unpipelined two-warpgroup build loading with every
// thread, and FlashAttention-3's intra-warpgroup overlap): docs/performance-log part 26.
//
// sm_90a only (the loader compiles capability 9.0 as sm_90a); elsewhere the kernels trap and
// the launcher never picks them. The host emulation runs every wgmma as its documented
// arithmetic on the same descriptors and swizzle, and the barriers as their documented
// behaviour (kernels/dev/host_emulation/flash_test.h).
//
// Symbols: attention_flash_wg[_win]_<q dtype>[_kv8]_d<D> for D = 64, 128, 256.

#define FWG_BQ 128
#define FWG_PRODUCER_REGS 72
#define FWG_CONSUMER_REGS 216

// A block's shape by head_dim: a producer and two consumer warpgroups of 64 rows; BK keys a
// stage (128 at D = 128, where S and O take 64 accumulators each; 64 at D = 64 and 256), STAGES
// stages of K and V, then the stages' `full` and `empty` mbarriers (16 bytes each: the emulation
// keeps more than the device's 8).
template <int D> struct FwgCfg {
    static constexpr int THREADS = 384;
    static constexpr int BQ = FWG_BQ;
    static constexpr int BK = D == 128 ? 128 : 64;
    static constexpr int STAGES = D == 64 ? 4 : 2;
    static constexpr int Q_BYTES = BQ * D * 2;      // bf16 rows
    static constexpr int KV_BYTES = BK * D * 2;     // one of K or V, one stage
    static constexpr int BAR_BYTES = 2 * STAGES * 16;
    static constexpr int SMEM = 1024 + Q_BYTES + 2 * STAGES * KV_BYTES + BAR_BYTES;
};


// The producer's share (its 128 threads) of key tile kb into stage (ks, vs): thread t copies
// 16-byte chunk t % CH of rows t / CH + j · (128 / CH). The rows' block-table entries are read
// G at a time before any of their copies goes out, so the reads' latencies overlap (read and
// copied one row at a time, each copy waited on its own table read and the producer could not
// keep the consumers fed: part 27 of the performance log). Otherwise flash_load_tile's rules:
// zeros at and past `len`, an FP8 cache widened and scaled.
template <typename TC, int D, int BK>
__device__ __forceinline__ void fwg_load_tile(unsigned char* ks, unsigned char* vs,
                                              const TC* k_cache, const TC* v_cache,
                                              const float* k_scales, const float* v_scales,
                                              const u32* table, int block_size, int num_kv_heads,
                                              int kv_head, int kb, int len) {
    constexpr int CH = D / 8, STEP = 128 / CH, RPT = BK / STEP, G = RPT < 8 ? RPT : 8;
    static_assert(RPT % G == 0, "whole batches of rows");
    const bool pow2 = (block_size & (block_size - 1)) == 0;
    const int shift = __ffs(block_size) - 1;
    const int c = (int)threadIdx.x % CH, r0 = (int)threadIdx.x / CH;
#pragma unroll
    for (int j0 = 0; j0 < RPT; j0 += G) {
        u32 entry[G];
        int in[G]; // the key's place in its block; -1 at and past len
#pragma unroll
        for (int j = 0; j < G; ++j) {
            const int key = kb + r0 + (j0 + j) * STEP;
            const int blk = pow2 ? key >> shift : key / block_size;
            in[j] = key < len ? (pow2 ? key & (block_size - 1) : key - blk * block_size) : -1;
            entry[j] = key < len ? table[blk] : 0u;
        }
        if constexpr (sizeof(TC) == 1) {
            // FP8: the rows' raw bytes and scales loaded FG at a time before any is widened,
            // so their loads overlap too.
            constexpr int FG = G < 2 ? G : 2;
#pragma unroll
            for (int f0 = 0; f0 < G; f0 += FG) {
                FlashFp8Chunk x[FG];
#pragma unroll
                for (int f = 0; f < FG; ++f) {
                    const int j = f0 + f;
                    const bool ok = in[j] >= 0;
                    const u64 slot = ok ? (u64)entry[j] * block_size + in[j] : 0;
                    x[f] = flash_fp8_load<D>(k_cache, v_cache, k_scales, v_scales,
                                             slot * num_kv_heads + kv_head, c, ok);
                }
#pragma unroll
                for (int f = 0; f < FG; ++f) {
                    const u32 at = wg_sw128<BK>(r0 + (j0 + f0 + f) * STEP, c);
                    flash_fp8_store(ks + at, vs + at, x[f]);
                }
            }
        } else {
#pragma unroll
            for (int j = 0; j < G; ++j) {
                const int r = r0 + (j0 + j) * STEP;
                const bool ok = in[j] >= 0;
                const u64 slot = ok ? (u64)entry[j] * block_size + in[j] : 0;
                flash_copy_chunk<TC, D>(ks + wg_sw128<BK>(r, c), vs + wg_sw128<BK>(r, c),
                                        k_cache, v_cache, k_scales, v_scales,
                                        slot * num_kv_heads + kv_head, c, ok);
            }
        }
    }
}

// A 64-row consumer's raw scores of the key tile from kb with what a row may not see set to
// -inf: keys past its position, or (WIN) outside its window (p - window < key <= p). The scale
// joins the exponent in flash_online_softmax. s(n, e), pos(h): as flash_scale_mask's.
template <int NS, bool WIN, typename S, typename P>
__device__ __forceinline__ void fwg_mask(S s, P pos, int kb, int t, int window) {
#pragma unroll
    for (int n = 0; n < NS; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int key = kb + 8 * n + 2 * t + (e & 1), p = pos(e >> 1);
            const bool hide = WIN ? (u32)(p - key) >= (u32)window : key > p;
            if (hide) s(n, e) = NEG_INF;
        }
}

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
    constexpr int BQ = C::BQ, BK = C::BK, ST = C::STAGES;
    constexpr int NS = BK / 8; // 8-key column blocks of S
    constexpr int NO = D / 8;  // 8-dim column blocks of O
    unsigned char* const smem = wg_dyn_smem<C::SMEM, C::THREADS>();
    __shared__ int row_pos[BQ];
    __shared__ int tile_len, tile_lo;
    unsigned char* const qs = smem;
    unsigned char* const kvs = smem + C::Q_BYTES; // stage s: K at s · 2 · KV_BYTES, V after
    unsigned char* const bars = kvs + 2 * ST * C::KV_BYTES;
    const auto stage = [&](int st) { return kvs + st * (2 * C::KV_BYTES); };
    const auto full = [&](int st) { return (void*)(bars + 16 * st); };
    const auto empty = [&](int st) { return (void*)(bars + 16 * (ST + st)); };

    const int tile = (int)(blockIdx.x / num_heads), head = (int)(blockIdx.x % num_heads);
    const int kv_head = head / (num_heads / num_kv_heads);
    const int row0 = (int)tiles[2 * tile], row_end = (int)tiles[2 * tile + 1];
    const u64 width = (u64)(num_heads + 2 * num_kv_heads) * D;
    const u32* table = block_tables + (u64)row_seq[row0] * max_blocks;
    const int win = WIN ? window : 1 << 30;

    flash_tile_rows<T, D, BQ, C::THREADS>(row_pos, qs, qkv, positions, row0, row_end, width, head,
                                          [](int r, int c) { return wg_sw128<BQ>(r, c); });
    fence_proxy_async();
    if (threadIdx.x == 0) {
        for (int st = 0; st < ST; ++st) {
            mbar_init(full(st), 128); // every producer thread
            mbar_init(empty(st), 8);  // every consumer warp
        }
        mbar_init_fence();
    }
    __syncthreads();
    if (threadIdx.x == 0) flash_tile_span<BQ, WIN>(row_pos, win, tile_len, tile_lo);
    __syncthreads();
    const int len = tile_len;
    const int j0 = (WIN ? tile_lo : 0) / BK, ntiles = (len + BK - 1) / BK;

    // The warpgroup, read from lane 0 so the compiler knows it is uniform in a warp (wgmma under
    // a branch it cannot prove uniform is serialized).
    const int wgi = __shfl_sync(0xffffffffu, (int)(threadIdx.x >> 7), 0);
    if (wgi == 0) {
        // The producer: key tile j into stage (j - j0) % ST once both consumers are done with
        // what the stage held.
        wg_setmaxnreg_dec<FWG_PRODUCER_REGS>();
        for (int j = j0; j < ntiles; ++j) {
            const int it = j - j0, st = it % ST;
            if (it >= ST) mbar_wait(empty(st), (u32)((it / ST - 1) & 1));
            fwg_load_tile<TC, D, BK>(stage(st), stage(st) + C::KV_BYTES, k_cache, v_cache,
                                     k_scales, v_scales, table, block_size, num_kv_heads,
                                     kv_head, j * BK, len);
            if constexpr (sizeof(TC) == 1) {
                // Stores through registers: visible to wgmma's async proxy, then released.
                fence_proxy_async();
                mbar_arrive(full(st));
            } else {
                mbar_arrive_cp_async(full(st));
            }
        }
        return;
    }
    wg_setmaxnreg_inc<FWG_CONSUMER_REGS>();

    // The consumer's rows: 64 from gr0; this thread's are rows g and g + 8 of its warp's 16.
    const int cw = wgi - 1, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int gr0 = 64 * cw, wr0 = gr0 + 16 * warp;
    const int pos0 = row_pos[wr0 + g], pos1 = row_pos[wr0 + g + 8];
    int gmax = -1, gmin = 1 << 30;
    for (int r = 0; r < 64; ++r) {
        gmax = max(gmax, row_pos[gr0 + r]);
        gmin = min(gmin, row_pos[gr0 + r]);
    }

    const float scale_log2 = scale * 1.4426950408889634f;
    float o[NO * 4];
#pragma unroll
    for (int i = 0; i < NO * 4; ++i) o[i] = 0.f;
    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};
    const u32 q_addr = wg_smem_addr(qs) + gr0 * 128;

    // Turns: consumer 0 issues first; each issues after the other's previous turn (barrier 1:
    // consumer 0 may go, 2: consumer 1 may go). Both take two turns a key tile, so the last
    // hand-over (consumer 1's) is left out and every bar.sync meets its bar.arrive.
    const int last_turn = 2 * (ntiles - j0) - 1;
    int turn = 0;
    // `after`: a value the barrier must wait for. ptxas schedules register arithmetic across a
    // barrier freely (it moved the softmax after the barrier, so the other warpgroup's products
    // waited on it); a barrier id computed from the value cannot be issued before it (the min
    // keeps the id: 15 or 16 is above both).
    const auto take_turn = [&](u32 after) {
        const int id = min(1 + cw, 15 + (int)(after >> 31));
        if (cw == 1 || turn > 0) bar_named_sync(id, 256);
    };
    const auto pass_turn = [&] {
        if (cw == 0 || turn < last_turn) bar_named_arrive(2 - cw, 256);
        ++turn;
    };

    for (int j = j0; j < ntiles; ++j) {
        const int it = j - j0, st = it % ST;
        const int kb = j * BK;
        // Every key of the tile is after every row of this warpgroup (uniform in it: wgmma is
        // issued by all 128 threads or none): it only takes its two turns and releases the
        // stage unread. A path of its own, so no product is issued or waited for under a branch
        // (ptxas would serialize them). Such tiles are the last ones (kb only grows), so the
        // `full` phases this warpgroup skips are never waited for later.
        if (kb > gmax) {
            take_turn(0u);
            pass_turn();
            take_turn(0u);
            pass_turn();
            if (lane == 0) mbar_arrive(empty(st));
            continue;
        }
        mbar_wait(full(st), (u32)((it / ST) & 1));
        fence_proxy_async();
        const u32 k_addr = wg_smem_addr(stage(st)), v_addr = k_addr + C::KV_BYTES;

        // S = Q·Kᵀ: 16 columns a step, inside the 128-byte half h = kk / 4 of each row.
        float s[NS * 4];
        take_turn(0u);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const u32 off = (kk & 3) * 32;
            wg_ss(s, wg_desc(q_addr + (kk >> 2) * (BQ * 128) + off, 16, 1024),
                  wg_desc(k_addr + (kk >> 2) * (BK * 128) + off, 16, 1024), kk > 0);
        }
        wg_commit();
        pass_turn();
        wg_wait();
        wg_keep(s);
        wg_keep(o);

        // Masks only where the tile reaches past the warpgroup's first row (a branch uniform
        // in the warpgroup), or every tile of a window.
        const auto sc = [&](int n, int e) -> float& { return s[4 * n + e]; };
        if (WIN || kb + BK - 1 > gmin)
            fwg_mask<NS, WIN>(sc, [&](int h) { return h ? pos1 : pos0; }, kb, t, window);
        flash_online_softmax<NS, NO>(sc, [&](int n, int e) -> float& { return o[4 * n + e]; },
                                     m, l, scale_log2);
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
        // The turn is taken once the softmax is done (its sums and last weights).
        take_turn(__float_as_uint(l[0]) | __float_as_uint(l[1]) | p[BK / 16 - 1][3]);
        wg_fence();
#pragma unroll
        for (int k2 = 0; k2 < BK / 16; ++k2)
            wg_rs(o, p[k2], wg_desc(v_addr + k2 * 16 * 128, BK * 128, 1024));
        wg_commit();
        pass_turn();
        wg_wait();
        wg_keep(o);
        // This warp has read the stage (its products are done; the warp's lanes together, which
        // wgmma's wait already is on the GPU and the host emulation's per-lane products are not).
        __syncwarp();
        if (lane == 0) mbar_arrive(empty(st));
    }

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
    extern "C" __global__ void __launch_bounds__(384, 1)                                           \
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
