// Prefill attention on tensor cores, flash-attention style (mma.sync m16n8k16, bf16 operands,
// f32 accumulators), over the paged KV cache: a chunk's query rows against every key of their
// sequence up to each row's position (the cached prefix and the chunk itself, which write_kv
// has already put in the cache). sm_80 and newer; a module of its own so an older GPU still
// loads attention.cu.
//
// Why: the decode kernels (attention.cu, attention_mma.cu) take one query row a block, so a
// prompt of T tokens reads its keys T times; here a block takes FLASH_BQ rows of one q head and
// reads each key tile once into shared memory for all of them, and both products (S = Q·Kᵀ and
// O += P·V) run on the tensor cores. Floors and measurements: docs/performance.md.
//
// Layout. A block owns one tile of up to FLASH_BQ = 128 consecutive rows of one sequence
// (`tiles`: (first row, end row) pairs, built by the host heaviest first) and one q head (grid
// x = tile · num_heads + head, so the heads of a tile, which share its kv heads' keys through
// L2, run together); its warps own 16 · MW rows each (FlashCfg). Q (converted to bf16) sits in
// shared memory; keys and values stream through a two-stage cp.async pipeline of BK-key tiles,
// each key's 16-byte chunks at swizzled columns (chunk ^ (row % 8)) so ldmatrix reads eight
// rows without bank conflicts. Per key tile a warp, for each of its 16-row tiles,
//   S [16 × BK] = Q·Kᵀ: A = Q by ldmatrix (rows × dims), B = K by ldmatrix (keys × dims is Kᵀ
//     as the column-major B the mma wants);
//   applies the causal mask (key > the row's position: -inf) and the online softmax in log2
//     units (running max m and lane-partial sum l of rows g and g + 8);
//   O [16 × D] += P·V: A = P straight from S's accumulators (rounded to bf16), B = V by
//     ldmatrix.trans (keys × dims is the row-major k × n B needs transposed).
// A warp skips a key tile that is past all its rows' positions (the causal triangle's upper
// half) and masks only tiles that reach past its smallest position.
//
// Precision: q, p and the cache enter the products as bf16 (q is rounded once, p once per key),
// as in FlashAttention; sums are f32. An FP8 cache (`_kv8`) is widened to bf16 and multiplied by
// its group scale (prelude/fp8.cuh: ceil(D / 128) scales a (slot, kv head)) while it goes to
// shared memory, one more rounding of each key and value.
//
// A sliding window (the _win build, `window` > 0: a row at q sees keys q - window < p <= q; a
// build of its own because the plain D = 128 build uses all 255 registers already) starts the
// key-tile loop at the tile holding the block's first visible key (the earliest row's window
// start), so no key tile before it is loaded; every tile it computes takes the two-sided mask
// (one unsigned compare a score, the row's position read from shared memory: the D = 128 FP8
// build has no register left for it). Sinks (null: none, else [nh] f32 logits, gpt-oss) join
// each row's denominator when it is normalised, in both builds.
//
// Symbols: attention_flash[_win]_<q dtype>[_kv8]_d<D> for D = 64, 128, 256.

// Rows of a tile at every head_dim (FLASH_TILE_ROWS in batch.rs).
#define FLASH_BQ 128

// A block's shape by head_dim: WARPS warps of MW 16-row tiles each, BK keys a pipeline stage.
// MW = 2 (each K and V fragment read from shared memory feeds two products, halving those reads
// per FLOP) below head_dim 256, where a warp's 16 × 256 accumulators leave no registers for a
// second tile; the alternatives measured are in docs/performance-log part 6.
template <int D> struct FlashCfg {
    static constexpr int MW = D <= 128 ? 2 : 1;
    static constexpr int WARPS = FLASH_BQ / (16 * MW);
    static constexpr int THREADS = WARPS * 32;
    static constexpr int BQ = FLASH_BQ;
    static constexpr int BK = D <= 128 ? 64 : 32;
    static constexpr int CH = D / 8; // 16-byte chunks of a row
    // Q, then two stages of K and V: bf16 rows of D.
    static constexpr int SMEM = (BQ + 4 * BK) * D * 2;
};

// The byte offset of 16-byte chunk c of row r of a swizzled bf16 tile of D-wide rows.
template <int D> __device__ __forceinline__ u32 flash_at(int r, int c) {
    return (u32)(r * (D / 8) + (c ^ (r & 7))) * 16u;
}

// Eight bf16 (a u32x4 of pairs) times `s`, rounded back to bf16.
__device__ __forceinline__ u32x4 scale_bf16x8(u32x4 v, float s) {
    return u32x4{pack_bf16(lo(v.x) * s, hi(v.x) * s), pack_bf16(lo(v.y) * s, hi(v.y) * s),
                 pack_bf16(lo(v.z) * s, hi(v.z) * s), pack_bf16(lo(v.w) * s, hi(v.w) * s)};
}

// 16-byte chunk c (eight values) of the key and value of an FP8 cache's row `head` (slot · kv
// heads + kv head), as stored: their e4m3 bytes and group scales (zeros where !ok, which widen
// to zeros).
struct FlashFp8Chunk {
    u32x2 k, v;
    float ks, vs;
};
template <int D>
__device__ __forceinline__ FlashFp8Chunk flash_fp8_load(const unsigned char* k_cache,
                                                        const unsigned char* v_cache,
                                                        const float* k_scales,
                                                        const float* v_scales, u64 head, int c,
                                                        bool ok) {
    constexpr int G = (D + 127) / 128; // FP8 scale groups of a head vector
    FlashFp8Chunk x{u32x2{0u, 0u}, u32x2{0u, 0u}, 0.f, 0.f};
    if (ok) {
        const u64 grp = head * G + (8 * c) / 128;
        x = FlashFp8Chunk{*(const u32x2*)(k_cache + head * D + 8 * c),
                          *(const u32x2*)(v_cache + head * D + 8 * c), k_scales[grp],
                          v_scales[grp]};
    }
    return x;
}
// The chunk widened to bf16 and scaled, into shared memory at kd / vd.
__device__ __forceinline__ void flash_fp8_store(unsigned char* kd, unsigned char* vd,
                                                const FlashFp8Chunk& x) {
    *(u32x4*)kd = scale_bf16x8(e4m3x8_to_bf16x8(x.k), x.ks);
    *(u32x4*)vd = scale_bf16x8(e4m3x8_to_bf16x8(x.v), x.vs);
}

// 16-byte chunk c of the key and value of cache row `head` into shared memory at kd / vd:
// cp.async for a bf16 cache, widened and scaled through registers for an FP8 one; zeros where
// !ok.
template <typename TC, int D>
__device__ __forceinline__ void flash_copy_chunk(unsigned char* kd, unsigned char* vd,
                                                 const TC* k_cache, const TC* v_cache,
                                                 const float* k_scales, const float* v_scales,
                                                 u64 head, int c, bool ok) {
    if constexpr (sizeof(TC) == 1) {
        flash_fp8_store(kd, vd,
                        flash_fp8_load<D>(k_cache, v_cache, k_scales, v_scales, head, c, ok));
    } else {
        cp_async<16>(kd, k_cache + head * D + 8 * c, ok);
        cp_async<16>(vd, v_cache + head * D + 8 * c, ok);
    }
}

// Key tile `kb` (BK keys from key kb of the sequence whose table is `table`) of kv head
// `kv_head` into stage buffers ks / vs: cp.async for a bf16 cache, widened and scaled through
// registers for an FP8 one. Keys at or past `len` read zeros (a stale slot may hold anything,
// and a masked key's value still meets a weight of 0). Keys before a window's start (a tile
// may begin up to three blocks of 16 before a row's window) may lie in blocks a sliding KV
// group released (`kv_cache/grouped.rs`): their table entries are then the null block 0, whose
// contents are finite (zeros, or a padding row's key and value), so they are read as they are
// and, masked, meet a weight of exactly 0.
// BK keys a tile, THREADS threads a block, `at(r, c)` the byte offset of 16-byte chunk c of row
// r (each kernel's swizzle: flash_at here, prelude/wgmma.cuh's wg_sw128 in attention_flash_wg.cu).
template <typename TC, int D, int BK, int THREADS, typename At>
__device__ __forceinline__ void flash_load_tile(unsigned char* ks, unsigned char* vs,
                                                const TC* k_cache, const TC* v_cache,
                                                const float* k_scales, const float* v_scales,
                                                const u32* table, int block_size,
                                                int num_kv_heads, int kv_head, int kb, int len,
                                                At at_of) {
    constexpr int CH = D / 8;
    // A power-of-two block size (the usual 16) finds a key's block by a shift, not a division.
    const bool pow2 = (block_size & (block_size - 1)) == 0;
    const int shift = __ffs(block_size) - 1;
    for (int i = threadIdx.x; i < BK * CH; i += THREADS) {
        const int r = i / CH, c = i % CH, key = kb + r;
        const bool ok = key < len;
        const int blk = pow2 ? key >> shift : key / block_size;
        const int in = pow2 ? key & (block_size - 1) : key - blk * block_size;
        const u64 slot = ok ? (u64)table[blk] * block_size + in : 0;
        const u64 head = slot * num_kv_heads + kv_head;
        flash_copy_chunk<TC, D>(ks + at_of(r, c), vs + at_of(r, c), k_cache, v_cache, k_scales,
                                v_scales, head, c, ok);
    }
}

template <typename TC, int D>
__device__ __forceinline__ void flash_load_kv(unsigned char* ks, unsigned char* vs,
                                              const TC* k_cache, const TC* v_cache,
                                              const float* k_scales, const float* v_scales,
                                              const u32* table, int block_size, int num_kv_heads,
                                              int kv_head, int kb, int len) {
    using C = FlashCfg<D>;
    flash_load_tile<TC, D, C::BK, C::THREADS>(ks, vs, k_cache, v_cache, k_scales, v_scales, table,
                                              block_size, num_kv_heads, kv_head, kb, len,
                                              [](int r, int c) { return flash_at<D>(r, c); });
}

// A tile's rows: each row's position into row_pos (-1 past the tile), and its q rows as bf16
// (zeros past the tile) into qs at `at_of(r, c)`, BQ rows by THREADS threads.
template <typename T, int D, int BQ, int THREADS, typename At>
__device__ __forceinline__ void flash_tile_rows(int* row_pos, unsigned char* qs, const T* qkv,
                                                const u32* positions, int row0, int row_end,
                                                u64 width, int head, At at_of) {
    constexpr int CH = D / 8;
    for (int r = threadIdx.x; r < BQ; r += THREADS)
        row_pos[r] = row0 + r < row_end ? (int)positions[row0 + r] : -1;
    for (int i = threadIdx.x; i < BQ * CH; i += THREADS) {
        const int r = i / CH, c = i % CH, row = row0 + r;
        u32x4 v = u32x4{0u, 0u, 0u, 0u};
        if (row < row_end) {
            const T* q = qkv + (u64)row * width + (u64)head * D + 8 * c;
            if constexpr (sizeof(T) == 2) {
                v = *(const u32x4*)q;
            } else {
                const float4 a = *(const float4*)q, b = *(const float4*)(q + 4);
                v = u32x4{pack_bf16(a.x, a.y), pack_bf16(a.z, a.w), pack_bf16(b.x, b.y),
                          pack_bf16(b.z, b.w)};
            }
        }
        *(u32x4*)(qs + at_of(r, c)) = v;
    }
}

// The keys a tile reads (thread 0, after the barrier that published row_pos): its largest
// position + 1, and the first key any row sees (a window's start; 0 without WIN).
template <int BQ, bool WIN>
__device__ __forceinline__ void flash_tile_span(const int* row_pos, int win, int& tile_len,
                                                int& tile_lo) {
    int m = -1, key0 = 1 << 30;
    for (int r = 0; r < BQ; ++r) {
        m = max(m, row_pos[r]);
        if (WIN && row_pos[r] >= 0) key0 = min(key0, row_pos[r] - win + 1);
    }
    tile_len = m + 1;
    tile_lo = WIN ? max(0, min(key0, m)) : 0;
}

// One 16-row tile's scores of the key tile from kb, scaled to log2 units, with what a row may
// not see set to -inf: keys past its position where `mask` (the tile reaches past the warp's
// first row), or, WIN, keys outside its window (p - window < key <= p: one unsigned compare).
// s(n, e): this thread's score e of n8 block n (row g or g + 8 by e / 2, key 8n + 2t + e % 2);
// pos(h): the position of row g (h = 0) or g + 8 (h = 1). Both kernels' fragment layout.
template <int NS, bool WIN, typename S, typename P>
__device__ __forceinline__ void flash_scale_mask(S s, P pos, int kb, int t, bool mask, int window,
                                                 float scale_log2) {
#pragma unroll
    for (int n = 0; n < NS; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int key = kb + 8 * n + 2 * t + (e & 1);
            const int p = pos(e >> 1);
            float& v = s(n, e);
            if (WIN)
                v = (u32)(p - key) < (u32)window ? v * scale_log2 : NEG_INF;
            else
                v = mask && key > p ? NEG_INF : v * scale_log2;
        }
}

// The online softmax step of one 16-row tile's rows g (h = 0: e = 0, 1) and g + 8 (h = 1: e =
// 2, 3): the running max m[h] (log2 units) and sum l[h] (this thread's part) updated, the
// scores turned into weights 2^(s · scale_log2 - m), the outputs o(n, e) (NO n8 blocks)
// rescaled. The scores come scaled from flash_scale_mask here (scale_log2 = 1), raw in
// attention_flash_wg.cu (the scale folded into the exponent's FFMA).
template <int NS, int NO, typename S, typename O>
__device__ __forceinline__ void flash_online_softmax(S s, O o, float (&m)[2], float (&l)[2],
                                                     float scale_log2) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float mx = NEG_INF;
#pragma unroll
        for (int n = 0; n < NS; ++n) mx = fmaxf(mx, fmaxf(s(n, 2 * h), s(n, 2 * h + 1)));
        const float mn = fmaxf(m[h], quad_max(mx) * scale_log2);
        // A row with no key yet keeps m = -inf: subtract 0 instead (every weight is 0).
        const float base = mn == NEG_INF ? 0.f : mn;
        const float corr = exp2_fast(m[h] - base);
        m[h] = mn;
        float sum = 0.f;
#pragma unroll
        for (int n = 0; n < NS; ++n) {
            s(n, 2 * h) = exp2_fast(fmaf(s(n, 2 * h), scale_log2, -base));
            s(n, 2 * h + 1) = exp2_fast(fmaf(s(n, 2 * h + 1), scale_log2, -base));
            sum += s(n, 2 * h) + s(n, 2 * h + 1);
        }
        l[h] = l[h] * corr + sum;
#pragma unroll
        for (int n = 0; n < NO; ++n) {
            o(n, 2 * h) *= corr;
            o(n, 2 * h + 1) *= corr;
        }
    }
}

template <typename T, typename TC, int D, bool WIN>
__device__ void attention_flash_impl(bf16* out, const T* qkv, const TC* k_cache,
                                     const TC* v_cache, const u32* positions, const u32* row_seq,
                                     const u32* block_tables, const u32* tiles, int max_blocks,
                                     int block_size, int num_heads, int num_kv_heads, float scale,
                                     const float* k_scales, const float* v_scales, int window,
                                     const float* sinks) {
    using C = FlashCfg<D>;
    constexpr int BQ = C::BQ, BK = C::BK, MW = C::MW;
    constexpr int NS = BK / 8; // S tiles (8 keys) of a 16-row tile
    constexpr int NO = D / 8;  // O tiles (8 dims) of a 16-row tile
#ifdef METRALE_HOST_EMULATION
    alignas(16) static unsigned char smem[C::SMEM];
#else
    extern __shared__ __attribute__((aligned(16))) unsigned char flash_smem[];
    unsigned char* const smem = flash_smem;
#endif
    __shared__ int row_pos[BQ]; // each tile row's position, -1 past the tile
    __shared__ int tile_len;    // keys the tile reads: its largest position + 1
    __shared__ int tile_lo;     // the first key any row of the tile sees (0 without a window)
    unsigned char* const qs = smem;
    unsigned char* const kvs = smem + BQ * D * 2; // stage s: K at s · 2 · BK · D · 2, V after

#ifndef METRALE_HOST_EMULATION
    // A launch of other than the build's warps would leave rows unwritten: stop it loudly.
    if (blockDim.x != C::THREADS) asm volatile("trap;");
#endif
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int tile = (int)(blockIdx.x / num_heads), head = (int)(blockIdx.x % num_heads);
    const int kv_head = head / (num_heads / num_kv_heads);
    const int row0 = (int)tiles[2 * tile], row_end = (int)tiles[2 * tile + 1];
    const u64 width = (u64)(num_heads + 2 * num_kv_heads) * D;
    const u32* table = block_tables + (u64)row_seq[row0] * max_blocks;
    // A sliding window (the WIN build, window > 0): a row at position q sees keys
    // q - window < p <= q. Without WIN every window test below is compiled out: the D = 128
    // build already uses all 255 registers, and the window's few more would spill.
    // The build takes window > 0 (the host launches it only then), read from the kernel's
    // parameters where it is used rather than kept in a register.
    const int win = WIN ? window : 1 << 30;

    // Q rows as bf16, zeros past the tile.
    flash_tile_rows<T, D, BQ, C::THREADS>(row_pos, qs, qkv, positions, row0, row_end, width, head,
                                          [](int r, int c) { return flash_at<D>(r, c); });
    __syncthreads();
    if (threadIdx.x == 0) flash_tile_span<BQ, WIN>(row_pos, win, tile_len, tile_lo);
    // The warp's rows: 16 · MW from wr0; this lane's are rows g and g + 8 of each 16-row tile.
    const int wr0 = 16 * MW * warp;
    int pos[MW][2];
#pragma unroll
    for (int mi = 0; mi < MW; ++mi) {
        pos[mi][0] = row_pos[wr0 + 16 * mi + g];
        pos[mi][1] = row_pos[wr0 + 16 * mi + g + 8];
    }
    int wmax = -1, wmin = 1 << 30;
#pragma unroll
    for (int r = 0; r < 16 * MW; ++r) {
        wmax = max(wmax, row_pos[wr0 + r]);
        wmin = min(wmin, row_pos[wr0 + r]);
    }
    __syncthreads();
    const int len = tile_len;
    // The key tiles: from the one holding the tile's first visible key (the window's start;
    // the tiles before it are never loaded) to the one holding its last.
    const int j0 = (WIN ? tile_lo : 0) / BK, ntiles = (len + BK - 1) / BK;

    const float scale_log2 = scale * 1.4426950408889634f;
    float o[MW][NO][4];
    float m[MW][2], l[MW][2];
#pragma unroll
    for (int mi = 0; mi < MW; ++mi) {
#pragma unroll
        for (int j = 0; j < NO; ++j) o[mi][j][0] = o[mi][j][1] = o[mi][j][2] = o[mi][j][3] = 0.f;
        m[mi][0] = m[mi][1] = NEG_INF;
        l[mi][0] = l[mi][1] = 0.f;
    }

    auto stage = [&](int st) { return kvs + st * (2 * BK * D * 2); };
    if (j0 < ntiles) {
        flash_load_kv<TC, D>(stage(j0 & 1), stage(j0 & 1) + BK * D * 2, k_cache, v_cache,
                             k_scales, v_scales, table, block_size, num_kv_heads, kv_head,
                             j0 * BK, len);
        cp_async_commit();
    }
    // Lane addresses of the ldmatrix reads: Q rows (l % 8) + 8 · (l / 8 % 2), column l / 16;
    // K rows (l % 8) + 8 · (l / 16), column l / 8 % 2; V rows as Q's, column l / 16.
    const int q_row = wr0 + (lane & 7) + 8 * ((lane >> 3) & 1), q_col = lane >> 4;
    const int k_row = (lane & 7) + 8 * (lane >> 4), k_col = (lane >> 3) & 1;
    const int v_row = (lane & 7) + 8 * ((lane >> 3) & 1), v_col = lane >> 4;

    for (int j = j0; j < ntiles; ++j) {
        cp_async_wait<0>();
        __syncthreads();
        if (j + 1 < ntiles) {
            unsigned char* nx = stage((j + 1) & 1);
            flash_load_kv<TC, D>(nx, nx + BK * D * 2, k_cache, v_cache, k_scales, v_scales,
                                 table, block_size, num_kv_heads, kv_head, (j + 1) * BK, len);
            cp_async_commit();
        }
        const int kb = j * BK;
        // Every key of the tile is after every row of this warp. (A warp-level skip of tiles
        // before all its rows' windows too would take one register more, which spills the
        // D = 128 build; the block already starts at its rows' first window tile.)
        if (kb > wmax) continue;
        const unsigned char* ks = stage(j & 1);
        const unsigned char* vs = ks + BK * D * 2;

        // S = Q·Kᵀ.
        float s[MW][NS][4];
#pragma unroll
        for (int mi = 0; mi < MW; ++mi)
#pragma unroll
            for (int n = 0; n < NS; ++n) s[mi][n][0] = s[mi][n][1] = s[mi][n][2] = s[mi][n][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            u32 qa[MW][4];
#pragma unroll
            for (int mi = 0; mi < MW; ++mi)
                ldmatrix_x4<false>(qa[mi], qs + flash_at<D>(q_row + 16 * mi, 2 * kk + q_col));
#pragma unroll
            for (int n2 = 0; n2 < BK / 16; ++n2) {
                u32 kf[4];
                ldmatrix_x4<false>(kf, ks + flash_at<D>(16 * n2 + k_row, 2 * kk + k_col));
#pragma unroll
                for (int mi = 0; mi < MW; ++mi) {
                    mma_bf16(s[mi][2 * n2], qa[mi][0], qa[mi][1], qa[mi][2], qa[mi][3], kf[0],
                             kf[1]);
                    mma_bf16(s[mi][2 * n2 + 1], qa[mi][0], qa[mi][1], qa[mi][2], qa[mi][3],
                             kf[2], kf[3]);
                }
            }
        }
        // Scale, and mask keys past each row's position (only where the tile reaches past the
        // warp's smallest one); the _win build masks both ends of each row's window instead,
        // its rows' positions read from shared memory (registers are what the D = 128 FP8
        // build lacks). Then the online softmax of each 16-row tile.
        const bool mask = kb + BK - 1 > wmin;
#pragma unroll
        for (int mi = 0; mi < MW; ++mi) {
            const auto row = [&](int h) {
                return WIN ? row_pos[wr0 + 16 * mi + g + 8 * h] : pos[mi][h];
            };
            flash_scale_mask<NS, WIN>([&](int n, int e) -> float& { return s[mi][n][e]; }, row,
                                      kb, t, mask, window, scale_log2);
        }
#pragma unroll
        for (int mi = 0; mi < MW; ++mi)
            flash_online_softmax<NS, NO>([&](int n, int e) -> float& { return s[mi][n][e]; },
                                         [&](int n, int e) -> float& { return o[mi][n][e]; },
                                         m[mi], l[mi], 1.f);
        // O += P·V, 16 keys at a time.
#pragma unroll
        for (int k2 = 0; k2 < BK / 16; ++k2) {
            u32 p[MW][4];
#pragma unroll
            for (int mi = 0; mi < MW; ++mi) {
                p[mi][0] = pack_bf16(s[mi][2 * k2][0], s[mi][2 * k2][1]);
                p[mi][1] = pack_bf16(s[mi][2 * k2][2], s[mi][2 * k2][3]);
                p[mi][2] = pack_bf16(s[mi][2 * k2 + 1][0], s[mi][2 * k2 + 1][1]);
                p[mi][3] = pack_bf16(s[mi][2 * k2 + 1][2], s[mi][2 * k2 + 1][3]);
            }
#pragma unroll
            for (int dn = 0; dn < D / 16; ++dn) {
                u32 vf[4];
                ldmatrix_x4<true>(vf, vs + flash_at<D>(16 * k2 + v_row, 2 * dn + v_col));
#pragma unroll
                for (int mi = 0; mi < MW; ++mi) {
                    mma_bf16(o[mi][2 * dn], p[mi][0], p[mi][1], p[mi][2], p[mi][3], vf[0], vf[1]);
                    mma_bf16(o[mi][2 * dn + 1], p[mi][0], p[mi][1], p[mi][2], p[mi][3], vf[2],
                             vf[3]);
                }
            }
        }
    }
    cp_async_wait<0>();

    // Normalise and store rows g and g + 8 of each 16-row tile (rows past the tile are not).
    const u64 ow = (u64)num_heads * D;
#pragma unroll
    for (int mi = 0; mi < MW; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float sum = quad_sum(l[mi][h]);
            float inv = sum > 0.f ? 1.f / sum : 0.f;
            // A sink (gpt-oss; null: none): one more logit in the denominator, in log2 units
            // like m, with no value: out = o · 2^(m - M) / (sum · 2^(m - M) + 2^(sink - M)).
            if (sinks != nullptr && sum > 0.f) {
                const float sk = sinks[head] * 1.4426950408889634f;
                const float mx = fmaxf(m[mi][h], sk), f = exp2_fast(m[mi][h] - mx);
                inv = f / (sum * f + exp2_fast(sk - mx));
            }
            const int r = row0 + wr0 + 16 * mi + g + 8 * h;
            if (r >= row_end) continue;
            bf16* dst = out + (u64)r * ow + (u64)head * D + 2 * t;
#pragma unroll
            for (int n = 0; n < NO; ++n)
                *(u32*)(dst + 8 * n) = pack_bf16(o[mi][n][2 * h] * inv, o[mi][n][2 * h + 1] * inv);
        }
}

// out [T, nh·D] bf16; qkv [T, (nh + 2·nkv)·D]; the caches [blocks, block_size, nkv, D] (FP8:
// bytes with their scales at k_scales / v_scales, else unread); tiles: (first row, end row)
// pairs; grid x = tiles · num_heads, FlashCfg<D>::THREADS threads, FlashCfg<D>::SMEM bytes of
// dynamic shared memory. `attention_flash_win_*`: the sliding-window build (window > 0); the
// plain build ignores `window`. Both take sinks (null: none).
#define ATTENTION_FLASH_ONE(NAME, T, TC, D, WIN)                                                   \
    extern "C" __global__ void __launch_bounds__(FlashCfg<D>::THREADS)                             \
        NAME(bf16* out, const T* qkv, const TC* k_cache, const TC* v_cache, const u32* positions,  \
             const u32* row_seq, const u32* block_tables, const u32* tiles, int max_blocks,        \
             int block_size, int num_heads, int num_kv_heads, float scale,                         \
             const float* k_scales, const float* v_scales, int window, const float* sinks) {       \
        pdl_start();                                                                               \
        attention_flash_impl<T, TC, D, WIN>(out, qkv, k_cache, v_cache, positions, row_seq,        \
                                            block_tables, tiles, max_blocks, block_size,           \
                                            num_heads, num_kv_heads, scale, k_scales, v_scales,    \
                                            window, sinks);                                        \
    }
#define ATTENTION_FLASH(SUFFIX, T, TC, D)                                                          \
    ATTENTION_FLASH_ONE(attention_flash_##SUFFIX##_d##D, T, TC, D, false)                          \
    ATTENTION_FLASH_ONE(attention_flash_win_##SUFFIX##_d##D, T, TC, D, true)
#define ATTENTION_FLASH_ALL(SUFFIX, T, TC)                                                         \
    ATTENTION_FLASH(SUFFIX, T, TC, 64)                                                             \
    ATTENTION_FLASH(SUFFIX, T, TC, 128)                                                            \
    ATTENTION_FLASH(SUFFIX, T, TC, 256)
ATTENTION_FLASH_ALL(f32, float, bf16)
ATTENTION_FLASH_ALL(bf16, bf16, bf16)
ATTENTION_FLASH_ALL(f32_kv8, float, unsigned char)
ATTENTION_FLASH_ALL(bf16_kv8, bf16, unsigned char)
