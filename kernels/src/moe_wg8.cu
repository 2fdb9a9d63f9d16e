// The grouped expert GEMMs with e4m3 activations on Hopper's FP8 warpgroup MMA (sm_90a):
// moe_gate_up_wg_fp8act and moe_down_wg_fp8act, the wgmma twins of moe_mma.cu's
// moe_*_mma_fp8act (the tuning's moe.fp8_activations with moe.fp8act_kernel = wgmma, the
// default, on a capability-9.0 GPU).
// Same parameters, tiles (moe_tiles_wg's 128 pairs), row gathering and epilogues as moe_wg.cu
// (read its header first); the same arithmetic as the mma.sync fp8act build up to the order of
// the exact e4m3 products: a 128-column group's products summed by wgmma into `part`, then
// folded into the result as acc = fmaf(w_scale · a_scale, part, acc), moe_mma.cu's fold.
//
// Why: moe_wg.cu's FP8 build widens every weight byte to bf16 in shared memory (a pass over the
// stage and a second barrier) and multiplies at the bf16 rate: 163 TFLOP/s on the 35B-A3B's
// 8k-token prefill (docs/performance-log part 28), the largest part of its TTFT. Here both
// operands stay e4m3 as they arrive (no widening pass) and the products run at the FP8 rate.
//
// A block: 256 threads, 128 pairs × BN = 128 weight rows, k in stages of BK = 128 columns
// (128 bytes: one row of the 128-byte swizzle, and one scale group). Warpgroup w takes pairs
// 64w .. 64w + 63 against all 128 weight rows: four m64n128k32 a stage into part, waited for,
// then folded with the stage's scales (A rows' and weight rows', copied with the stage).
// gate_up: weight rows 0-63 are the gate rows of the block's 64 act columns, 64-127 their up
// rows, so part[i] and part[i + 32] are one act element. A stage's loads go out S - 1 stages
// ahead into the slot the previous stage used, which both warpgroups finished reading (their
// products waited for) before the iteration's barrier. k must be a multiple of 16 (whole
// 16-byte copies; moe_plan's rule for FP8 experts); columns past k are zero-filled.

#define MWG8_BN 128
#define MWG8_BK 128

// A block's shared memory: per stage the A tile (128 rows × 128 bytes, swizzled), the weight
// tile (128 rows × 128 bytes, swizzled), the A rows' and the weight rows' scales of the stage's
// group (128 f32 each) and padding to the next 1024-byte boundary; + 1024 to align the base.
// moe_mma.rs's launch_shape mirrors SMEM.
struct Mwg8Cfg {
    static constexpr int THREADS = 256, BM = MWG_BM, BN = MWG8_BN, BK = MWG8_BK, STAGES = 5;
    static constexpr int A_BYTES = BM * BK, W_BYTES = BN * BK;
    static constexpr int STAGE = A_BYTES + W_BYTES + 1024;
    static constexpr int SMEM = 1024 + STAGES * STAGE;
    static_assert(STAGE % 1024 == 0, "every swizzled tile starts on a 1024-byte boundary");
    static_assert(4 * (BM + BN) <= 1024, "both scale rows fit the stage's last 1024 bytes");
};

#ifdef METRALE_WGMMA
// Stage kt (k columns 128 kt ..) into st by cp.async, the copies dealt to the block's threads from
// `tid`: the A rows' and the weight rows' 16-byte chunks into their swizzled places, then the
// rows' scales of the stage's group (A rows' first, then the weight rows'); zeros past the
// pairs, the rows and k. a_row / w_row: the block's row tables (-1: no row).
__device__ __forceinline__ void mwg8_load(unsigned char* st, int kt, const unsigned char* a,
                                          const float* a_scales, const unsigned char* w,
                                          const float* w_scales, const int* a_row,
                                          const int* w_row, int k, int groups, int tid) {
    using C = Mwg8Cfg;
    unsigned char* const sw = st + C::A_BYTES;
#pragma unroll 4
    for (int c = tid; c < C::BM * 8; c += C::THREADS) {
        const int r = c >> 3, ch = c & 7, kk = kt * C::BK + ch * 16;
        const bool ok = a_row[r] >= 0 && kk < k;
        cp_async<16>(st + wg_sw128<C::BM>(r, ch), ok ? a + (u64)a_row[r] * k + kk : a, ok);
    }
#pragma unroll 4
    for (int c = tid; c < C::BN * 8; c += C::THREADS) {
        const int r = c >> 3, ch = c & 7, kk = kt * C::BK + ch * 16;
        const bool ok = w_row[r] >= 0 && kk < k;
        cp_async<16>(sw + wg_sw128<C::BN>(r, ch), ok ? w + (u64)w_row[r] * k + kk : w, ok);
    }
    for (int i = tid; i < C::BM + C::BN; i += C::THREADS) {
        const int row = i < C::BM ? a_row[i] : w_row[i - C::BM];
        const float* const base = i < C::BM ? a_scales : w_scales;
        cp_async<4>(sw + C::W_BYTES + 4 * i, row >= 0 ? base + (u64)row * groups + kt : base,
                    row >= 0);
    }
}

// A stage's products of this warpgroup into part: its 64 A rows from tile row r0 against the
// stage's 128 weight rows, four m64n128k32 over the stage's 128 columns, waited for.
__device__ __forceinline__ void mwg8_products(float (&part)[64], const unsigned char* st, int r0) {
    const u32 a_addr = wg_smem_addr(st) + r0 * 128, b_addr = wg_smem_addr(st + Mwg8Cfg::A_BYTES);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < Mwg8Cfg::BK / 32; ++kk)
        wg_ss8(part, wg_desc(a_addr + 32 * kk, 16, 1024), wg_desc(b_addr + 32 * kk, 16, 1024), kk);
    wg_commit();
    wg_wait<0>();
    wg_keep(part);
}

// A stage's scales as this thread folds them: its rows' (g and g + 8 of its warp's 16 from tile
// row r0) and its columns' (2t, 2t + 1 of each n8 block), read from the stage's scale block;
// then acc += part times both, moe_mma.cu's fold (fmaf of w_scale · a_scale).
struct Mwg8Scales {
    float a0, a1, w[32];
    __device__ __forceinline__ void read(const unsigned char* st, int r0) {
        const float* const sc = (const float*)(st + Mwg8Cfg::A_BYTES + Mwg8Cfg::W_BYTES);
        const int lane = threadIdx.x & 31, r = r0 + 16 * ((threadIdx.x >> 5) & 3) + (lane >> 2);
        const int t = lane & 3;
        a0 = sc[r], a1 = sc[r + 8];
#pragma unroll
        for (int nb = 0; nb < 16; ++nb)
#pragma unroll
            for (int j = 0; j < 2; ++j) w[2 * nb + j] = sc[Mwg8Cfg::BM + 8 * nb + 2 * t + j];
    }
    __device__ __forceinline__ void fold(float (&acc)[64], const float (&part)[64]) const {
#pragma unroll
        for (int nb = 0; nb < 16; ++nb)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const int i = 4 * nb + j;
                acc[i] = fmaf(w[2 * nb + j] * a0, part[i], acc[i]);
                acc[i + 2] = fmaf(w[2 * nb + j] * a1, part[i + 2], acc[i + 2]);
            }
    }
};

// The block's results: rows g and g + 8 of this warp's 16 of the warpgroup's 64 from tile row
// r0 (act [pairs, n] bf16 through f with GATE, else ys [pairs, n] f32).
template <bool GATE, typename F>
__device__ __forceinline__ void mwg8_store(void* out, const float (&acc)[64], const int* out_row,
                                           int r0, int e, int n0, int n, F f) {
    const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int p = out_row[r0 + 16 * warp + g + 8 * h];
        if (p < 0) continue;
        if constexpr (GATE) {
            bf16* act = (bf16*)out + (u64)p * n;
#pragma unroll
            for (int nb = 0; nb < 8; ++nb)
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    const int c = n0 + 8 * nb + 2 * t + j, i = 4 * nb + 2 * h + j;
                    if (c < n) act[c] = from_f32<bf16>(f(acc[i], acc[i + 32], e, c, n));
                }
        } else {
            float* y = (float*)out + (u64)p * n;
#pragma unroll
            for (int nb = 0; nb < 16; ++nb) {
                const int c = n0 + 8 * nb + 2 * t, i = 4 * nb + 2 * h;
                if (c + 1 < n && (n & 1) == 0) {
                    *(float2*)(y + c) = make_float2(acc[i], acc[i + 1]);
                } else {
                    if (c < n) y[c] = acc[i];
                    if (c + 1 < n) y[c + 1] = acc[i + 1];
                }
            }
        }
    }
}

// One block (see the header). GATE: out is act [pairs, n] bf16 from f(gate, up), w [E, 2n, k];
// else out is ys [pairs, n] f32, w [E, n, k]. A row of pair p is row p / a_div of a [*, k]
// (e4m3, a_scales [*, ceil(k / 128)]); w_scales [rows of w, ceil(k / 128)].
template <bool GATE, typename F = MoeSiluAct>
__device__ void moe_wg8_impl(void* out, const unsigned char* a, const float* a_scales,
                             const unsigned char* w, const float* w_scales, const int* tiles,
                             const int* offsets, const int* perm, int rows, int a_div, int n,
                             int k, F f = F()) {
    using C = Mwg8Cfg;
    constexpr int BM = C::BM, BN = C::BN, BK = C::BK, S = C::STAGES, T = C::THREADS;
    unsigned char* const smem = wg_dyn_smem<C::SMEM, T>();
    __shared__ int a_row[BM], out_row[BM], w_row[BN];

    const int e = moe_tile_rows<BM>(a_row, out_row, tiles, offsets, perm, rows, a_div);
    if (e < 0) return;
    const int n0 = moe_tile_w_rows<BN, GATE>(w_row, e, n);
    const int tid = threadIdx.x;
    __syncthreads();

    const int groups = (k + MMA_GROUP - 1) / MMA_GROUP;
    auto stage = [&](int slot) { return smem + slot * C::STAGE; };
    auto load = [&](int kt, int slot) {
        mwg8_load(stage(slot), kt, a, a_scales, w, w_scales, a_row, w_row, k, groups, tid);
    };

    // The warpgroup and whether it has pairs, read from lane 0 so the compiler knows both are
    // uniform in a warp (wgmma under a branch it cannot prove uniform is serialized).
    const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);
    const bool busy = __shfl_sync(0xffffffffu, out_row[64 * wg] >= 0 ? 1 : 0, 0);
    // Accumulator i of this thread: row 64 · wg + 16 · warp + g + 8 · (i / 2 % 2) of the tile,
    // column 8 · (i / 4) + 2t + i % 2 of the block's weight rows.
    float acc[64], part[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.f;

    const int ktiles = (k + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
        if (s < ktiles) load(s, s);
        cp_async_commit();
    }
    for (int kt = 0; kt < ktiles; ++kt) {
        const int slot = kt % S;
        cp_async_wait<S - 2>();
        fence_proxy_async();
        __syncthreads(); // stage kt is in; both warpgroups are done with stage kt - 1's slot
        if (kt + S - 1 < ktiles) load(kt + S - 1, (kt + S - 1) % S);
        cp_async_commit();
        if (busy) {
            mwg8_products(part, stage(slot), 64 * wg);
            Mwg8Scales sc;
            sc.read(stage(slot), 64 * wg);
            sc.fold(acc, part);
        }
    }
    cp_async_wait<0>();
    if (!busy) return;

    mwg8_store<GATE>(out, acc, out_row, 64 * wg, e, n0, n, f);
}

#define MWG8_BODY(CALL) CALL;
#else
#define MWG8_BODY(CALL) asm volatile("trap;");
#endif

// moe_*_mma_fp8act's parameters; Mwg8Cfg::THREADS threads and ::SMEM bytes of dynamic shared
// memory.
extern "C" __global__ void __launch_bounds__(Mwg8Cfg::THREADS, 1)
    moe_gate_up_wg_fp8act(bf16* act, const unsigned char* x, const float* x_scales,
                          const unsigned char* w, const float* w_scales, const int* tiles,
                          const int* offsets, const int* perm, int top_k, int inter, int hidden) {
    pdl_start();
    MWG8_BODY((moe_wg8_impl<true>(act, x, x_scales, w, w_scales, tiles, offsets, perm, 0, top_k,
                                  inter, hidden)))
}
extern "C" __global__ void __launch_bounds__(Mwg8Cfg::THREADS, 1)
    moe_down_wg_fp8act(float* ys, const unsigned char* act, const float* act_scales,
                       const unsigned char* w, const float* w_scales, const int* tiles,
                       const int* offsets, const int* perm, int rows, int hidden, int inter) {
    pdl_start();
    MWG8_BODY((moe_wg8_impl<false>(ys, act, act_scales, w, w_scales, tiles, offsets, perm, rows, 1,
                                   hidden, inter)))
}
