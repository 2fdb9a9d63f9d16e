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
    unsigned char* const smem = wg_dyn_smem<C::SMEM, C::THREADS>();
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
                                          [](int r, int c) { return wg_sw128<BQ>(r, c); });
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
                                               [](int r, int c) { return wg_sw128<C::BK>(r, c); });
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
        const auto sc = [&](int n, int e) -> float& { return s[4 * n + e]; };
        flash_scale_mask<NS, WIN>(sc, [&](int h) { return h ? pos1 : pos0; }, kb, t, mask, window,
                                  scale_log2);
        flash_online_softmax<NS, NO>(sc, [&](int n, int e) -> float& { return o[4 * n + e]; }, m, l);
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
