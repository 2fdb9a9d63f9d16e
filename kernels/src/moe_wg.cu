// The grouped expert GEMMs of moe_mma.cu on Hopper's warpgroup MMA (wgmma, sm_90a): the same
// parameters, row gathering and epilogues as moe_gate_up_mma_* / moe_down_mma_* (read
// moe_mma.cu's header first), on 128-pair tiles (moe_tiles_wg) with the products issued by two
// warpgroups straight from shared memory instead of mma.sync fed by shared loads.
//
// Why: the mma.sync kernels reach about 128 TFLOP/s with bf16 experts and 90 with FP8 ones on a
// 2,048-token prefill chunk (Nsight: latency-bound, a quarter of the warp slots occupied): the
// experts are most of a MoE model's prefill (issue 32's 35B-A3B TTFT) and of its large decode
// batches (issue 34). wgmma runs 64 × N × 16 a warpgroup an instruction, asynchronously, so the
// next stage's loads and (FP8) the widening of its weights overlap the products.
//
// A block: one 128-pair tile × BN = 256 weight rows, k in stages of BK = 64 columns (128 bytes
// of bf16: one row of the 128-byte swizzle, prelude/wgmma.cuh), STAGES stages in flight through
// cp.async. Warpgroup w takes the tile's pairs 64w .. 64w + 63 against all 256 weight rows: two
// wgmma m64n128k16 a k16 step (weight rows 0-127 into acc0, 128-255 into acc1), A and B both
// K-major descriptors; a warpgroup whose 64 pairs are all past the tile's count issues none.
// Both warpgroups read the same weights, so a stage's weight bytes (and their widening) serve
// 128 pairs: the 64-pair build of 2026-12-07 read them for 64 and was bound by those reads
// (docs/performance-log). gate_up: weight rows 0-127 are the gate rows of the block's 128 act
// columns, 128-255 the up rows of the same columns, so acc0[i] and acc1[i] are one act element.
//
// Weights:
//   _bf16: B rows copied by cp.async into their swizzled place.
//   _fp8 (e4m3 bytes, one f32 scale per row and 128 columns): the raw bytes and the rows'
//     scales of a stage land unswizzled; before its products every thread widens its share
//     to bf16 as e4m3 · scale (an f32 product) rounded to bf16 (the dense FP8 route's copy,
//     dequant_fp8_bf16) into one of two swizzled B buffers, while the previous stage's
//     products run. Not the mma.sync kernels' exact products with the scale on a group's sum:
//     each weight is off by at most 2^-9 of itself, the rounding a bf16 checkpoint carries;
//     exact sums needed a second set of 128 accumulators a thread, which 128-pair tiles leave
//     no registers for.
// Stage kt's loads go out at iteration kt - (STAGES - 2); a warpgroup keeps one group of
// products in flight (wgmma.wait_group 1), so the slot an iteration refills was last read two
// iterations before, by products both warpgroups have waited for before the iteration's
// barrier.
//
// sm_90a only; elsewhere the kernels trap and moe_mma.rs never picks them (the tuning's
// `moe.expert_gemm = wgmma` on a capability-9.0 GPU). Symbols: moe_gate_up_wg_{bf16,fp8},
// moe_down_wg_{bf16,fp8}, moe_gate_up_clamped_wg_bf16 (gpt-oss's bias and clamped SwiGLU).

#define MWG_BN 256
#define MWG_BK 64

// A block's shared memory by weight type (WMODE 0 bf16, 1 FP8): per stage the A tile (128 rows
// × 128 bytes, swizzled), the weights as they arrive (bf16 swizzled, or raw FP8 rows of 64
// bytes) and (FP8) the stage's 256 row scales; FP8 adds two swizzled bf16 B buffers. + 1024:
// the base aligned for the swizzle. moe_mma.rs mirrors SMEM.
template <int WMODE> struct MwgCfg {
    static constexpr int THREADS = 256, BM = MWG_BM, BN = MWG_BN, BK = MWG_BK, STAGES = 4;
    static constexpr int A_BYTES = BM * BK * 2;
    static constexpr int W_BYTES = BN * BK * (WMODE ? 1 : 2);
    static constexpr int SC_BYTES = WMODE ? BN * 4 : 0;
    static constexpr int STAGE = A_BYTES + W_BYTES + SC_BYTES;
    static constexpr int WIDE = WMODE ? BN * BK * 2 : 0;
    static constexpr int SMEM = 1024 + STAGES * STAGE + 2 * WIDE;
    static_assert(STAGE % 1024 == 0, "every swizzled tile starts on a 1024-byte boundary");
};

// Eight e4m3 bytes times s: each f32 product rounded to bf16 (nearest even).
__device__ __forceinline__ u32x4 mwg_scaled8(u32x2 w, float s) {
    float v[8];
    e4m3x4_values(w.x, v);
    e4m3x4_values(w.y, v + 4);
    return u32x4{pack_bf16(v[0] * s, v[1] * s), pack_bf16(v[2] * s, v[3] * s),
                 pack_bf16(v[4] * s, v[5] * s), pack_bf16(v[6] * s, v[7] * s)};
}

#ifdef METRALE_WGMMA
// One block (see the header). GATE: out is act [pairs, n] bf16 from f(gate, up), w [E, 2n, k];
// else out is ys [pairs, n] f32, w [E, n, k]. A row of pair p is row p / a_div of a [*, k]
// (bf16). tiles == nullptr: one expert, rows 0 .. rows of a, no permutation (a dense GEMM).
template <int WMODE, bool GATE, typename F = MoeSiluAct>
__device__ void moe_wg_impl(void* out, const bf16* a, const void* w, const float* w_scales,
                            const int* tiles, const int* offsets, const int* perm, int rows,
                            int a_div, int n, int k, F f = F()) {
    using C = MwgCfg<WMODE>;
    constexpr int BM = C::BM, BN = C::BN, BK = C::BK, S = C::STAGES, T = C::THREADS;
    unsigned char* const smem = wg_dyn_smem<C::SMEM, T>();
    unsigned char* const wide = smem + S * C::STAGE; // FP8: the two bf16 B buffers
    __shared__ int a_row[BM], out_row[BM], w_row[BN];

    const int e = moe_tile_rows<BM>(a_row, out_row, tiles, offsets, perm, rows, a_div);
    if (e < 0) return;
    // gate_up: rows 0-127 are the gate rows of columns n0 .., rows 128-255 their up rows
    const int n0 = moe_tile_w_rows<BN, GATE>(w_row, e, n);
    const int tid = threadIdx.x;
    __syncthreads();

    const int groups = (k + MMA_GROUP - 1) / MMA_GROUP;
    const unsigned char* w8 = (const unsigned char*)w;
    auto stage = [&](int slot) { return smem + slot * C::STAGE; };
    // k slice kt into stage slot `slot`: A rows, the weight rows, (FP8) the rows' scales of the
    // slice's group; zeros past the tile's pairs, the matrix's rows and k.
    auto load = [&](int kt, int slot) {
        unsigned char* sa = stage(slot);
        unsigned char* sw = sa + C::A_BYTES;
#pragma unroll 4
        for (int c = tid; c < BM * 8; c += T) {
            const int r = c >> 3, ch = c & 7, kk = kt * BK + ch * 8;
            const bool ok = a_row[r] >= 0 && kk < k;
            cp_async<16>(sa + wg_sw128<BM>(r, ch), ok ? a + (u64)a_row[r] * k + kk : a, ok);
        }
        if constexpr (WMODE == 0) {
            const bf16* wb = (const bf16*)w;
#pragma unroll 4
            for (int c = tid; c < BN * 8; c += T) {
                const int r = c >> 3, ch = c & 7, kk = kt * BK + ch * 8;
                const bool ok = w_row[r] >= 0 && kk < k;
                cp_async<16>(sw + wg_sw128<BN>(r, ch), ok ? wb + (u64)w_row[r] * k + kk : wb, ok);
            }
        } else {
#pragma unroll 4
            for (int c = tid; c < BN * 4; c += T) {
                const int r = c >> 2, ch = c & 3, kk = kt * BK + ch * 16;
                const bool ok = w_row[r] >= 0 && kk < k;
                cp_async<16>(sw + r * BK + ch * 16, ok ? w8 + (u64)w_row[r] * k + kk : w8, ok);
            }
            unsigned char* sc = sw + C::W_BYTES;
            for (int r = tid; r < BN; r += T) {
                const bool ok = w_row[r] >= 0;
                const float* src = ok ? w_scales + (u64)w_row[r] * groups + kt * BK / MMA_GROUP
                                      : w_scales;
                cp_async<4>(sc + 4 * r, src, ok);
            }
        }
    };
    // FP8: stage slot `slot`'s raw weight bytes times their rows' scales, as bf16 into B buffer
    // `buf`, swizzled.
    auto widen = [&](int slot, int buf) {
        const unsigned char* src = stage(slot) + C::A_BYTES;
        const float* sc = (const float*)(src + C::W_BYTES);
        unsigned char* dst = wide + buf * C::WIDE;
#pragma unroll
        for (int c = tid; c < BN * 4; c += T) {
            const int r = c >> 2, ch = c & 3;
            const u32x4 q = lds16(src + r * BK + ch * 16);
            const float s = sc[r];
            const u32x4 lo = mwg_scaled8(u32x2{q.x, q.y}, s), hi = mwg_scaled8(u32x2{q.z, q.w}, s);
            *(smem16*)(dst + wg_sw128<BN>(r, 2 * ch)) = smem16{lo.x, lo.y, lo.z, lo.w};
            *(smem16*)(dst + wg_sw128<BN>(r, 2 * ch + 1)) = smem16{hi.x, hi.y, hi.z, hi.w};
        }
    };

    // The warpgroup and whether it has pairs, read from lane 0 so the compiler knows both are
    // uniform in a warp (wgmma under a branch it cannot prove uniform is serialized).
    const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);
    const bool busy = __shfl_sync(0xffffffffu, out_row[64 * wg] >= 0 ? 1 : 0, 0);
    const int warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
    // Accumulator i of this thread: row 64 · wg + 16 · warp + g + 8 · (i / 2 % 2) of the tile,
    // column 8 · (i / 4) + 2t + i % 2 of weight rows 0-127 (acc0) or 128-255 (acc1).
    float acc0[64], acc1[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc0[i] = acc1[i] = 0.f;

    const int ktiles = (k + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < S - 2; ++s) {
        if (s < ktiles) load(s, s);
        cp_async_commit();
    }
    for (int kt = 0; kt < ktiles; ++kt) {
        const int slot = kt % S;
        cp_async_wait<S - 3>();
        fence_proxy_async();
        __syncthreads(); // slice kt is in; products of kt - 2 are done in both warpgroups
        if (kt + S - 2 < ktiles) load(kt + S - 2, (kt + S - 2) % S);
        cp_async_commit();
        u32 b_addr;
        if constexpr (WMODE == 1) {
            widen(slot, kt & 1);
            fence_proxy_async();
            __syncthreads();
            b_addr = wg_smem_addr(wide + (kt & 1) * C::WIDE);
        } else {
            b_addr = wg_smem_addr(stage(slot) + C::A_BYTES);
        }
        const u32 a_addr = wg_smem_addr(stage(slot)) + wg * 64 * 128;
        if (busy) {
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 16; ++kk) {
                const u64 da = wg_desc(a_addr + 32 * kk, 16, 1024);
                wg_ss(acc0, da, wg_desc(b_addr + 32 * kk, 16, 1024), 1);
                wg_ss(acc1, da, wg_desc(b_addr + 128 * 128 + 32 * kk, 16, 1024), 1);
            }
            wg_commit();
            wg_wait<1>();
        }
    }
    if (busy) {
        wg_wait<0>();
        wg_keep(acc0);
        wg_keep(acc1);
    }
    cp_async_wait<0>();
    if (!busy) return;

    // Epilogue: rows g and g + 8 of the warp's 16.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int p = out_row[64 * wg + 16 * warp + g + 8 * h];
        if (p < 0) continue;
        if constexpr (GATE) {
            bf16* act = (bf16*)out + (u64)p * n;
#pragma unroll
            for (int nb = 0; nb < 16; ++nb)
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    const int c = n0 + 8 * nb + 2 * t + j, i = 4 * nb + 2 * h + j;
                    if (c < n) act[c] = from_f32<bf16>(f(acc0[i], acc1[i], e, c, n));
                }
        } else {
            float* y = (float*)out + (u64)p * n;
#pragma unroll
            for (int half = 0; half < 2; ++half)
#pragma unroll
                for (int nb = 0; nb < 16; ++nb) {
                    const int c = n0 + 128 * half + 8 * nb + 2 * t, i = 4 * nb + 2 * h;
                    const float v0 = half ? acc1[i] : acc0[i], v1 = half ? acc1[i + 1] : acc0[i + 1];
                    if (c + 1 < n && (n & 1) == 0) {
                        *(float2*)(y + c) = make_float2(v0, v1);
                    } else {
                        if (c < n) y[c] = v0;
                        if (c + 1 < n) y[c + 1] = v1;
                    }
                }
        }
    }
}
#define MWG_BODY(CALL) CALL;
#else
#define MWG_BODY(CALL) asm volatile("trap;");
#endif

// The same parameters as moe_gate_up_mma_* / moe_down_mma_* (x_scales / act_scales unused);
// MwgCfg<WMODE>::THREADS threads and ::SMEM bytes of dynamic shared memory.
#define MOE_WG_GATE_UP(NAME, WMODE, TW, ACT, ...)                                                  \
    extern "C" __global__ void __launch_bounds__(256, 1)                                           \
        NAME(bf16* act, const bf16* x, const float* x_scales, const TW* w, const float* w_scales,  \
             const int* tiles, const int* offsets, const int* perm, int top_k, int inter,          \
             int hidden __VA_ARGS__) {                                                             \
        pdl_start();                                                                               \
        MWG_BODY((moe_wg_impl<WMODE, true>(act, x, w, w_scales, tiles, offsets, perm, 0, top_k,    \
                                           inter, hidden, ACT)))                                   \
    }
#define MOE_WG_KERNELS(SUFFIX, WMODE, TW)                                                          \
    MOE_WG_GATE_UP(moe_gate_up_wg_##SUFFIX, WMODE, TW, MoeSiluAct{}, )                             \
    extern "C" __global__ void __launch_bounds__(256, 1)                                           \
        moe_down_wg_##SUFFIX(float* ys, const bf16* act, const float* act_scales, const TW* w,     \
                             const float* w_scales, const int* tiles, const int* offsets,          \
                             const int* perm, int rows, int hidden, int inter) {                   \
        pdl_start();                                                                               \
        MWG_BODY((moe_wg_impl<WMODE, false>(ys, act, w, w_scales, tiles, offsets, perm, rows, 1,   \
                                            hidden, inter)))                                       \
    }

MOE_WG_KERNELS(bf16, 0, bf16)
MOE_WG_KERNELS(fp8, 1, unsigned char)
MOE_WG_GATE_UP(moe_gate_up_clamped_wg_bf16, 0, bf16, (MoeClampedAct<bf16>{bias, alpha, limit}), ,
               const bf16* bias, float alpha, float limit)
