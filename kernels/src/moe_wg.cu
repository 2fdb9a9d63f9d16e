// The grouped expert GEMMs of moe_mma.cu on Hopper's warpgroup MMA (wgmma, sm_90a): the same
// parameters, tile list (moe_tiles' 64-pair tiles), row gathering and epilogues as
// moe_gate_up_mma_* / moe_down_mma_* (read moe_mma.cu's header first), with the products issued
// by two warpgroups straight from shared memory instead of mma.sync fed by shared loads.
//
// Why: the mma.sync kernels reach about 128 TFLOP/s with bf16 experts and 90 with FP8 ones on a
// 2,048-token prefill chunk (Nsight: latency-bound, a quarter of the warp slots occupied): the
// experts are most of a MoE model's prefill (issue 32's 35B-A3B TTFT) and of its large decode
// batches (issue 34). wgmma runs 64 × N × 16 a warpgroup an instruction, asynchronously, so the
// next stage's loads and (FP8) the widening of its weights overlap the products.
//
// A block: one 64-pair tile (moe_tiles') × BN = 256 weight rows, k in stages of BK = 64
// columns (128 bytes of bf16: one row of the 128-byte swizzle, prelude/wgmma.cuh), STAGES
// stages in flight through cp.async. Two warpgroups share the tile's A rows (x's rows of the
// pairs' tokens, or act's pair rows) and take 128 weight rows each: wgmma m64n128k16, A and B
// both K-major descriptors. gate_up: a warpgroup's 128 rows are 64 gate rows and the 64 up rows
// of the same columns, so accumulator i (gate) and i + 32 (up) of a thread are one act element
// (gate_up blocks cover 128 act columns, down blocks 256 output columns).
//
// Weights:
//   _bf16: B rows copied by cp.async into their swizzled place.
//   _fp8 (e4m3 bytes, one f32 scale per row and 128 columns): the raw bytes of a stage land
//     unswizzled; before its products every thread widens its share to bf16 exactly (prelude's
//     e4m3x8_to_bf16x8, no scale) into one of two swizzled B buffers, while the previous stage's
//     products run. A 128-column group's products accumulate apart (`part`) and are added as
//     acc += scale · part once the group's two stages are done: the CUDA-core and mma.sync
//     kernels' arithmetic (exact products, f32 sums, the scale applied to a group's sum) in
//     another order.
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

// A block's shared memory by weight type (WMODE 0 bf16, 1 FP8): per stage the A tile (64 rows ×
// 128 bytes, swizzled), the weights as they arrive (bf16 swizzled, or raw FP8 rows of 64 bytes)
// and (FP8) the stage's 256 row scales; FP8 adds two swizzled bf16 B buffers. + 1024: the base
// aligned for the swizzle. moe_mma.rs mirrors SMEM.
template <int WMODE> struct MwgCfg {
    static constexpr int THREADS = 256, BM = MMA_BM, BN = MWG_BN, BK = MWG_BK, STAGES = 4;
    static constexpr int A_BYTES = BM * BK * 2;
    static constexpr int W_BYTES = BN * BK * (WMODE ? 1 : 2);
    static constexpr int SC_BYTES = WMODE ? BN * 4 : 0;
    static constexpr int STAGE = A_BYTES + W_BYTES + SC_BYTES;
    static constexpr int WIDE = WMODE ? BN * BK * 2 : 0;
    static constexpr int SMEM = 1024 + STAGES * STAGE + 2 * WIDE;
    static_assert(STAGE % 1024 == 0, "every swizzled tile starts on a 1024-byte boundary");
};

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
    const int n0 = (int)blockIdx.y * (GATE ? BN / 2 : BN);
    const int tid = threadIdx.x;
    for (int r = tid; r < BN; r += T) {
        // gate_up: warpgroup r / 128's rows are gate rows j .. j + 63, then up rows j ..
        const int q = r % 128, j = GATE ? n0 + 64 * (r / 128) + q % 64 : n0 + r;
        const int row = GATE ? e * 2 * n + (q < 64 ? 0 : n) + j : e * n + j;
        w_row[r] = j < n ? row : -1;
    }
    __syncthreads();

    const int groups = (k + MMA_GROUP - 1) / MMA_GROUP;
    const unsigned char* w8 = (const unsigned char*)w;
    auto stage = [&](int slot) { return smem + slot * C::STAGE; };
    // k slice kt into stage slot `slot`: A rows, the weight rows, (FP8) the rows' scales of the
    // slice's group; zeros past the tile's pairs, the matrix's rows and k.
    auto load = [&](int kt, int slot) {
        unsigned char* sa = stage(slot);
        unsigned char* sw = sa + C::A_BYTES;
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
    // FP8: stage slot `slot`'s raw weight bytes widened to bf16 into B buffer `buf`, swizzled.
    auto widen = [&](int slot, int buf) {
        const unsigned char* src = stage(slot) + C::A_BYTES;
        unsigned char* dst = wide + buf * C::WIDE;
#pragma unroll
        for (int c = tid; c < BN * 4; c += T) {
            const int r = c >> 2, ch = c & 3;
            const u32x4 q = lds16(src + r * BK + ch * 16);
            const u32x4 lo = e4m3x8_to_bf16x8(u32x2{q.x, q.y}), hi = e4m3x8_to_bf16x8(u32x2{q.z, q.w});
            *(smem16*)(dst + wg_sw128<BN>(r, 2 * ch)) = smem16{lo.x, lo.y, lo.z, lo.w};
            *(smem16*)(dst + wg_sw128<BN>(r, 2 * ch + 1)) = smem16{hi.x, hi.y, hi.z, hi.w};
        }
    };

    const int wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
    // Accumulator i of this thread: row 16 · warp + g + 8 · (i / 2 % 2) of the tile, column
    // 8 · (i / 4) + 2t + i % 2 of the warpgroup's 128 weight rows.
    float acc[64], part[64]; // part: FP8 only (the compiler drops it for bf16)
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.f;
    auto& sums = pick<WMODE == 0>(acc, part);
    // A group's sums into acc, each column by its weight row's scale (the slot's copy).
    auto fold = [&](int slot) {
        const float* sc = (const float*)(stage(slot) + C::A_BYTES + C::W_BYTES) + 128 * wg;
#pragma unroll
        for (int i = 0; i < 64; ++i) acc[i] = fmaf(sc[8 * (i >> 2) + 2 * t + (i & 1)], part[i], acc[i]);
    };

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
        b_addr += wg * 128 * 128;
        const u32 a_addr = wg_smem_addr(stage(slot));
        // A group's first product overwrites the FP8 sums (scale-d 0); bf16 accumulates.
        const bool first = WMODE == 1 && kt % (MMA_GROUP / BK) == 0;
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk)
            wg_ss(sums, wg_desc(a_addr + 32 * kk, 16, 1024), wg_desc(b_addr + 32 * kk, 16, 1024),
                  !(first && kk == 0));
        wg_commit();
        if (WMODE == 1 && (kt % (MMA_GROUP / BK) == MMA_GROUP / BK - 1 || kt == ktiles - 1)) {
            wg_wait<0>();
            wg_keep(sums);
            fold(slot);
        } else {
            wg_wait<1>();
        }
    }
    wg_wait<0>();
    wg_keep(acc);
    cp_async_wait<0>();

    // Epilogue: rows g and g + 8 of the warp's 16.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int p = out_row[16 * warp + g + 8 * h];
        if (p < 0) continue;
        if constexpr (GATE) {
            bf16* act = (bf16*)out + (u64)p * n;
#pragma unroll
            for (int nb = 0; nb < 8; ++nb)
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    const int c = n0 + 64 * wg + 8 * nb + 2 * t + j;
                    const int i = 4 * nb + 2 * h + j;
                    if (c < n) act[c] = from_f32<bf16>(f(acc[i], acc[i + 32], e, c, n));
                }
        } else {
            float* y = (float*)out + (u64)p * n;
#pragma unroll
            for (int nb = 0; nb < 16; ++nb) {
                const int c = n0 + 128 * wg + 8 * nb + 2 * t, i = 4 * nb + 2 * h;
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
