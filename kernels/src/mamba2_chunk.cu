// mamba2.cu's chunked scan for prefill, the state space duality (SSD) form (compiled after
// mamba2.cu and hybrid_chunk.cu in Module::Hybrid, whose 3xTF32 tensor-core helpers it uses).
// Sequences of at least `chunk_min` rows in a step take it instead of mamba2_scan; their chunks
// are gdn_chunk_plan's (GDN_CHUNK = 64 rows, ending at every multiple of 64 and at every save
// point, so each save falls on a chunk's end).
//
// With a chunk's rows t, s < n, a_t = exp(dt_t·A), γ_t = a_0 ⋯ a_t, L(t, s) = a_{s+1} ⋯ a_t
// (1 at s = t) and S₀ the head's state [p, N] at the chunk's start, the recurrence
// S_t = a_t S_{t−1} + dt_t x_t B_tᵀ, y_t = S_t C_t + D x_t unrolls to
//     y_t  = γ_t · (S₀ C_t) + Σ_{s≤t} M[t, s] x_s + D x_t,   M[t, s] = L(t, s)·dt_s·(C_t·B_s)
//     S_n  = γ_{n−1} S₀ + Σ_s w_s x_s B_sᵀ,                  w_s = L(n − 1, s)·dt_s
// The decay products are multiplied out, not exp of differences of cumulative sums (which lose
// the small differences of large sums), as the CPU multiplies the state by each a_t.
//
// 1. mamba2_chunk_cb_n<N>: G = C Bᵀ [64, 64] per (chunk, group) (every head of the group and
//    every row block of a head uses it), grid (chunks, G), 8 warps, into scratch.
// 2. mamba2_chunk_scan_n<N>_<mixed>: grid (⌈p / 16⌉, nh, S), 4 warps; a block keeps 16 rows
//    of its head's state (f32, shared memory) and walks its sequence's chunks in order:
//        Y = diag(γ) (C S₀ᵀ) + M X + D X      [n, 16]: a 16-row tile of t a warp
//        S₀ = γ_{n−1} S₀ + (diag(w) X)ᵀ B     [16, N]: N / 32 column tiles a warp
//    with B, C [64, N], X [64, 16] staged a chunk at a time (zeros past n), saves written at
//    their chunk's end, the slot's state at the sequence's end. Rows of the state (channels of
//    a head) are independent, so splitting p over blocks costs only B's and C's loads (L2).
// Products on tensor cores as three tf32 mma of two-term splits (hybrid_chunk.cu's
// gdn_tile_mma: about 2^-21 of a product lost, f32 accumulation).

#define MAMBA2_RB 16            // state rows a block of the scan
#define MAMBA2_CHUNK_THREADS 128  // the scan's 4 warps (the cb kernel takes GDN_CHUNK_THREADS)

// Shared memory of mamba2_chunk_cb: C and B [64, N + 8] (8-byte fragment loads, rows 8 mod 32
// floats apart: distinct banks).
template <int N>
__device__ constexpr int mamba2_cb_smem_floats() {
    return 2 * GDN_CHUNK * (N + 8);
}

// Loads rows r0 ..< r0 + n of the group's B (which 0) or C (1) from conv `[T, channels]` into
// `dst` [64][ld], zeros past n, 16 bytes a copy.
template <int N>
__device__ __forceinline__ void mamba2_load_bc(float* dst, int ld, const float* conv, u32 r0,
                                               int n, int channels, int bc_at, int tid,
                                               int threads) {
    for (int e = tid; e < GDN_CHUNK * (N / 4); e += threads) {
        const int t = e / (N / 4), j4 = e % (N / 4);
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (t < n) v = *(const float4*)(conv + (u64)(r0 + t) * channels + bc_at + 4 * j4);
        *(float4*)(dst + t * ld + 4 * j4) = v;
    }
}

template <int N>
__device__ void mamba2_chunk_cb_impl(float* scratch, const float* conv, const u32* plan,
                                     int seqs, int inner, int groups) {
    constexpr int C = GDN_CHUNK, LD = N + 8;
    static_assert(GDN_CHUNK_THREADS == 256 && C == 64, "four 16-row tiles, two warps each");
    GDN_SMEM(mamba2_cb_smem_floats<N>());
    float* cs = smem;       // [C][LD]
    float* bs = cs + C * LD;  // [C][LD]
    pdl_start();
    const int c = blockIdx.x, grp = blockIdx.y, tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
    const u32* e = plan + seqs + 3 * c;
    const u32 r0 = e[1];
    const int n = (int)e[2], gn = groups * N, channels = inner + 2 * gn;
    mamba2_load_bc<N>(bs, LD, conv, r0, n, channels, inner + grp * N, tid, blockDim.x);
    mamba2_load_bc<N>(cs, LD, conv, r0, n, channels, inner + gn + grp * N, tid, blockDim.x);
    __syncthreads();
    // G[t, s] = C_t·B_s: warp w row tile w % 4, column tiles 4 (w / 4) .. + 3
    const int rt = warp % 4, ct = 4 * (warp / 4);
    float acc[4][4] = {};
    gdn_tile_mma<N, 4, true, false>(acc, cs + 16 * rt * LD, LD, bs + 8 * ct * LD, LD, lane);
    float* out = scratch + ((u64)c * groups + grp) * C * C;
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int t = 16 * rt + g + 8 * r, s = 8 * (ct + j) + 2 * t4;
            *(float2*)(out + t * C + s) = make_float2(acc[j][2 * r], acc[j][2 * r + 1]);
        }
}

#define MAMBA2_CHUNK_CB(n)                                                                       \
    extern "C" __global__ void __launch_bounds__(GDN_CHUNK_THREADS) mamba2_chunk_cb_n##n(        \
        float* scratch, const float* conv, const u32* plan, int seqs, int inner, int groups) {  \
        mamba2_chunk_cb_impl<n>(scratch, conv, plan, seqs, inner, groups);                       \
    }

// Shared memory of mamba2_chunk_scan: B [64, N + 4] (read a float a lane along k: rows 4 mod 32
// apart), C [64, N + 8] and the state rows [16, N + 8] (8-byte loads along k: 8 mod 32), M
// [64, 72], X and diag(w) X [64, 20] (a float a lane: 4 mod 32), dt, a, γ [64]. About 107 KB at
// N 128 (two blocks a multiprocessor), 180 KB at N 256.
template <int N>
__device__ constexpr int mamba2_scan_smem_floats() {
    return GDN_CHUNK * (N + 4) + GDN_CHUNK * (N + 8) + MAMBA2_RB * (N + 8) +
           GDN_CHUNK * (GDN_CHUNK + 8) + 2 * GDN_CHUNK * (MAMBA2_RB + 4) + 3 * GDN_CHUNK;
}

template <int N, typename TM>
__device__ void mamba2_chunk_scan_impl(float* y, const float* conv, const TM* mixed,
                                       const float* cb, const float* neg_a,
                                       const float* dt_bias, const float* d_skip, float* state,
                                       const u32* plan, const u32* seq_starts, const u32* slots,
                                       const u32* save_starts, const u32* saves, int chunk_min,
                                       int nh, int p, int groups, int width, float dt_lo,
                                       float dt_hi) {
    constexpr int C = GDN_CHUNK, RB = MAMBA2_RB, BLD = N + 4, CLD = N + 8, MLD = C + 8,
                  XLD = RB + 4;
    // The state update's column tiles a warp (N = 16: two warps take one each).
    constexpr int NT = N >= 32 ? N / 32 : 1;
    static_assert(MAMBA2_CHUNK_THREADS == 128 && C == 64 && RB == 16, "the tiles below");
    GDN_SMEM(mamba2_scan_smem_floats<N>());
    float* bs = smem;              // [C][BLD]
    float* cs = bs + C * BLD;      // [C][CLD]
    float* hs = cs + C * CLD;      // [RB][CLD]: the state's rows i0 ..< i0 + 16
    float* ms = hs + RB * CLD;     // [C][MLD]
    float* xs = ms + C * MLD;      // [C][XLD]
    float* xw = xs + C * XLD;      // [C][XLD]
    float* dts = xw + C * XLD;     // [C]
    float* as = dts + C;           // [C]
    float* gam = as + C;           // [C]
    pdl_start();
    const int s = blockIdx.z, h = blockIdx.y, tid = threadIdx.x, i0 = blockIdx.x * RB;
    const u32 r0 = seq_starts[s];
    const int len = (int)(seq_starts[s + 1] - r0);
    if (!gdn_chunked(len, chunk_min)) return;  // mamba2_scan takes it
    const int warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
    const int inner = nh * p, gn = groups * N, channels = inner + 2 * gn;
    const int grp = h / (nh / groups);
    const u64 slot_len = (u64)inner * N;
    // A padding row (slot GDN_NO_STATE) starts from zeros and writes no state.
    const bool real = slots[s] != GDN_NO_STATE;
    float* head = state + (u64)h * p * N;  // a slot's head h at + slot · slot_len
    // The state's rows (zeros past p) in and out, a float4 a thread at a time.
    auto rows_io = [&](float* base, bool load) {
        for (int e = tid; e < RB * (N / 4); e += blockDim.x) {
            const int r = e / (N / 4), j4 = e % (N / 4);
            float* sh = hs + r * CLD + 4 * j4;
            float* gl = base + (u64)(i0 + r) * N + 4 * j4;
            if (load)
                *(float4*)sh = base && i0 + r < p ? *(const float4*)gl
                                                  : make_float4(0.f, 0.f, 0.f, 0.f);
            else if (i0 + r < p)
                *(float4*)gl = *(const float4*)sh;
        }
    };
    rows_io(real ? head + slots[s] * slot_len : nullptr, true);
    u32 sv = save_starts[s], cut = sv;
    const u32 sv_end = save_starts[s + 1];
    auto saves_at = [&](u32 after) {
        if (sv < sv_end && saves[2 * sv] == after) __syncthreads();  // the rows are written
        for (; sv < sv_end && saves[2 * sv] == after; ++sv)
            rows_io(head + saves[2 * sv + 1] * slot_len, false);
    };
    saves_at(0);
    const float na = neg_a[h], bias = dt_bias[h], dh = d_skip[h];
    u32 chunk = plan[s];
    for (int lo = 0; lo < len; ++chunk) {
        const int hi = gdn_chunk_end(lo, len, saves, cut, sv_end), n = hi - lo;
        const u32 rc = r0 + lo;
        __syncthreads();  // the previous chunk is consumed
        // B, C, x of the block's rows, dt and a (rows past n: zeros, dt 0 and a 1)
        mamba2_load_bc<N>(bs, BLD, conv, rc, n, channels, inner + grp * N, tid, blockDim.x);
        mamba2_load_bc<N>(cs, CLD, conv, rc, n, channels, inner + gn + grp * N, tid, blockDim.x);
        for (int e = tid; e < C * RB; e += blockDim.x) {
            const int t = e / RB, r = e % RB;
            xs[t * XLD + r] =
                t < n && i0 + r < p ? conv[(u64)(rc + t) * channels + h * p + i0 + r] : 0.f;
        }
        if (tid < C) {
            float dt = 0.f;
            if (tid < n) {
                const float a = to_f32(mixed[(u64)(rc + tid) * width + inner + channels + h]) + bias;
                const float softplus = a > 20.f ? a : log1pf(expf(a));
                dt = fminf(fmaxf(softplus, dt_lo), dt_hi);
            }
            dts[tid] = dt;
            as[tid] = tid < n ? expf(dt * na) : 1.f;
        }
        __syncthreads();
        // M's column s = tid (the decay products down the column), w_s (as x's scale: xw),
        // and γ by thread C.
        const float* gc = cb + ((u64)chunk * groups + grp) * C * C;
        if (tid < C) {
            const int s_ = tid;
            const float dt = dts[s_];
            float l = 1.f, w = 0.f;
            for (int t = 0; t < C; ++t) {
                if (t > s_) l *= as[t];
                ms[t * MLD + s_] = t >= s_ ? l * dt * gc[t * C + s_] : 0.f;
                if (t == n - 1) w = t >= s_ ? l * dt : 0.f;
            }
            for (int r = 0; r < RB; ++r) xw[s_ * XLD + r] = w * xs[s_ * XLD + r];
        } else if (tid == C) {
            float p_ = 1.f;
            for (int t = 0; t < C; ++t) gam[t] = p_ *= as[t];
        }
        __syncthreads();
        // Y = diag(γ) (C S₀ᵀ) + M X (+ D X): warp w rows 16w ..< + 16, the two 8-row tiles
        // of the state as columns.
        {
            float acc[2][4] = {};
            gdn_tile_mma<N, 2, true, false>(acc, cs + 16 * warp * CLD, CLD, hs, CLD, lane);
#pragma unroll
            for (int j = 0; j < 2; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r) acc[j][r] *= gam[16 * warp + g + 8 * (r / 2)];
            gdn_tile_mma<C, 2, true, true>(acc, ms + 16 * warp * MLD, MLD, xs, XLD, lane);
#pragma unroll
            for (int j = 0; j < 2; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const int t = 16 * warp + g + 8 * (r / 2), col = 8 * j + 2 * t4 + r % 2;
                    if (t < n && i0 + col < p)
                        y[(u64)(rc + t) * inner + h * p + i0 + col] =
                            acc[j][r] + dh * xs[t * XLD + col];
                }
        }
        __syncthreads();  // every warp has read the state
        // S₀ = γ_{n−1} S₀ + (diag(w) X)ᵀ B: column tiles NT·warp ..< + NT of the 16 rows
        {
            const int ct0 = NT * warp;
            const float gl = gam[n - 1];
            if (ct0 < N / 8) {
                float acc[NT][4];
#pragma unroll
                for (int j = 0; j < NT; ++j)
#pragma unroll
                    for (int r = 0; r < 2; ++r) {
                        const float2 v =
                            *(const float2*)(hs + (g + 8 * r) * CLD + 8 * (ct0 + j) + 2 * t4);
                        acc[j][2 * r] = gl * v.x;
                        acc[j][2 * r + 1] = gl * v.y;
                    }
                gdn_tile_mma<C, NT, false, true>(acc, xw, XLD, bs + 8 * ct0, BLD, lane);
#pragma unroll
                for (int j = 0; j < NT; ++j)
#pragma unroll
                    for (int r = 0; r < 2; ++r)
                        *(float2*)(hs + (g + 8 * r) * CLD + 8 * (ct0 + j) + 2 * t4) =
                            make_float2(acc[j][2 * r], acc[j][2 * r + 1]);
            }
        }
        saves_at((u32)hi);
        lo = hi;
    }
    __syncthreads();
    if (real) rows_io(head + slots[s] * slot_len, false);
}

#define MAMBA2_CHUNK_SCAN(n, tm, TM)                                                             \
    extern "C" __global__ void __launch_bounds__(MAMBA2_CHUNK_THREADS)                           \
        mamba2_chunk_scan_n##n##_##tm(                                                           \
            float* y, const float* conv, const TM* mixed, const float* cb, const float* neg_a,   \
            const float* dt_bias, const float* d_skip, float* state, const u32* plan,            \
            const u32* seq_starts, const u32* slots, const u32* save_starts, const u32* saves,   \
            int chunk_min, int nh, int p, int groups, int width, float dt_lo, float dt_hi) {     \
        mamba2_chunk_scan_impl<n, TM>(y, conv, mixed, cb, neg_a, dt_bias, d_skip, state, plan,   \
                                      seq_starts, slots, save_starts, saves, chunk_min, nh, p,   \
                                      groups, width, dt_lo, dt_hi);                              \
    }
#define MAMBA2_CHUNKED(n)             \
    MAMBA2_CHUNK_CB(n)                \
    MAMBA2_CHUNK_SCAN(n, f32, float)  \
    MAMBA2_CHUNK_SCAN(n, bf16, bf16)
MAMBA2_CHUNKED(16)
MAMBA2_CHUNKED(32)
MAMBA2_CHUNKED(64)
MAMBA2_CHUNKED(128)
MAMBA2_CHUNKED(256)
