// hybrid.cu's chunked gated delta rule (prefill) and the gated RMSNorm (compiled with
// hybrid.cu as one module: Module::Hybrid's source is hybrid.cu, this file, hybrid_decode.cu).

// --- 2b. the chunked gated delta rule (prefill) ------------------------------------------------

#define GDN_CHUNK 64
#define GDN_BV 32
#define GDN_CHUNK_THREADS 256

// A chunk ends at the next multiple of GDN_CHUNK rows of its sequence or at the next save
// point, whichever comes first, so every save falls on a chunk's end. `sv` (the sequence's
// saves, sorted by `after`) moves past the saves at or before `lo`.
__device__ __forceinline__ int gdn_chunk_end(int lo, int len, const u32* saves, u32& sv,
                                             u32 sv_end) {
    int hi = min(len, (lo / GDN_CHUNK + 1) * GDN_CHUNK);
    while (sv < sv_end && (int)saves[2 * sv] <= lo) ++sv;
    if (sv < sv_end && (int)saves[2 * sv] < hi) hi = (int)saves[2 * sv];
    return hi;
}

// The block's dynamic shared memory as `float* smem` of `floats` f32s (a static array under the
// host emulation, whose blocks run one after another).
#ifdef METRALE_HOST_EMULATION
#define GDN_SMEM(floats)                        \
    alignas(16) static float gdn_smem[floats]; \
    float* const smem = gdn_smem
#else
#define GDN_SMEM(floats)                                              \
    extern __shared__ __attribute__((aligned(16))) float gdn_smem[]; \
    float* const smem = gdn_smem
#endif

// Floats of one (chunk, value head) in the scratch between the two chunked kernels:
// W [C, DK], Qg [C, DK], Kt [C, DK], Tb [C, C], P [C, C], gamma [C] (see gdn_chunk_prep).
template <int DK>
__device__ constexpr int gdn_chunk_floats() {
    return 3 * GDN_CHUNK * DK + 2 * GDN_CHUNK * GDN_CHUNK + GDN_CHUNK;
}

// The step's chunks: plan[s] = sequence s's first chunk, then (sequence, first row, rows) a
// chunk from plan + seqs, for the sequences gdn_chunked takes, in order. One warp.
extern "C" __global__ void gdn_chunk_plan(u32* plan, const u32* seq_starts,
                                          const u32* save_starts, const u32* saves, int seqs,
                                          int chunk_min, int max_chunks) {
    __shared__ u32 first[32], total;
    pdl_start();
    const int lane = threadIdx.x;
    if (lane == 0) total = 0;
    __syncwarp();
    for (int s0 = 0; s0 < seqs; s0 += 32) {
        const int s = s0 + lane;
        const int len = s < seqs ? (int)(seq_starts[s + 1] - seq_starts[s]) : 0;
        const bool chunked = gdn_chunked(len, chunk_min);
        u32 n = 0;
        if (chunked) {
            u32 sv = save_starts[s];
            for (int lo = 0; lo < len; ++n) lo = gdn_chunk_end(lo, len, saves, sv, save_starts[s + 1]);
        }
        first[lane] = n;
        __syncwarp();
        if (lane == 0) {
            u32 at = total;
            for (int i = 0; i < 32; ++i) {
                const u32 c = first[i];
                first[i] = at;
                at += c;
            }
            total = at;
        }
        __syncwarp();
        u32 c = first[lane];
        if (s < seqs) plan[s] = c;
        if (chunked) {
            u32 sv = save_starts[s];
            for (int lo = 0; lo < len; ++c) {
                const int hi = gdn_chunk_end(lo, len, saves, sv, save_starts[s + 1]);
                if (c < (u32)max_chunks) {
                    u32* e = plan + seqs + 3 * c;
                    e[0] = s;
                    e[1] = seq_starts[s] + lo;
                    e[2] = hi - lo;
                }
                lo = hi;
            }
        }
    }
}

// Shared memory of gdn_chunk_prep: q [C, DK + 8] and the decay products [C, C + 8] (X
// [C, DK + C + 4] over both once they are used), k [C, DK + 8], A [C, C + 8], decay, β, γ [C].
// About 107 KB at DK 128: two blocks a multiprocessor. The tensor-core fragments' loads hit
// distinct banks: q's, k's and A's rows (8-byte loads) are 8 mod 32 floats apart, X's (a float
// a lane) 4 mod 32.
template <int DK>
__device__ constexpr int gdn_prep_smem_floats() {
    return 2 * GDN_CHUNK * (DK + 8) + 2 * GDN_CHUNK * (GDN_CHUNK + 8) + 3 * GDN_CHUNK;
}

__device__ __forceinline__ float4 lds4(const float* p) { return *(const float4*)p; }
__device__ __forceinline__ float f4(const float4& v, int u) {
    return u == 0 ? v.x : u == 1 ? v.y : u == 2 ? v.z : v.w;
}

// --- the chunk's products on tensor cores: f32 operands as two tf32 terms (3xTF32) -----------
//
// An f32 x is split into x ≈ h + l, two tf32 values (ten mantissa bits): h is x rounded to 11
// significant bits, l the rest (x − h, exact in f32) rounded so. A product is the three tf32
// mma (f32 accumulate) lh + hl + hh, the small terms first: what it misses (ll, and l's own
// rounding) is at most about 2^-21 of it: the host emulation's chunked states land within
// 4.2e-7 of the reference, the three-term bf16 split's within 3.0e-7. Two bf16 terms
// (three bf16 products, about 2^-17) land 40 times farther from the CPU than f32 does, too near
// the check's tolerance; three bf16 terms (six products) were f32's accuracy but their split
// took about ten instructions an element where this one takes five (two integer roundings, a
// subtraction): with as many mma a product (a tf32 m16n8k8 is half a bf16 m16n8k16's work at
// half its rate) the split's instructions are what this saves.
// The fragments are read from f32 shared memory and split on the way (g = lane / 4,
// t = lane % 4). A 16-wide k step is two m16n8k8: lane t's k slots t and t + 4 of the k8 at k0
// hold k0 + 2t and k0 + 2t + 1 (adjacent: 8-byte loads). Any order of k, the same in A and B,
// gives the same product.

// x rounded to tf32 (nearest, ties away: the magnitude's bits plus half of the 13 dropped).
__device__ __forceinline__ u32 gdn_tf32(float x) {
    return (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
}

// Two elements adjacent along k (x at k, y at k + 1) as their tf32 terms.
struct GdnSplit {
    u32 hx, hy, lx, ly;
};
// x's two terms: (h, l).
__device__ __forceinline__ u32x2 gdn_terms(float x) {
    const u32 h = gdn_tf32(x);
    return {h, gdn_tf32(__fsub_rn(x, __uint_as_float(h)))};
}
__device__ __forceinline__ GdnSplit gdn_split(float x, float y) {
    const u32x2 a = gdn_terms(x), b = gdn_terms(y);
    return {a.x, b.x, a.y, b.y};
}
__device__ __forceinline__ GdnSplit gdn_split2(const float* p) {
    const float2 v = *(const float2*)p;
    return gdn_split(v.x, v.y);
}

// The A fragment (16 × 16) at `a` as two k8 halves: pairs 2q (row g) and 2q + 1 (row g + 8)
// at k 2t + 8q, 2t + 8q + 1; element (m, k) at a[m · ld + k] (ROWS: 8-byte loads) or
// a[k · ld + m]. NEG negates it (the sign bits of both terms).
template <bool ROWS, bool NEG = false>
__device__ __forceinline__ void gdn_frag_a(GdnSplit (&f)[4], const float* a, int ld, int lane) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int m = g + 8 * (i & 1), k = 2 * t + 8 * (i >> 1);
        f[i] = ROWS ? gdn_split2(a + m * ld + k) : gdn_split(a[k * ld + m], a[(k + 1) * ld + m]);
        if (NEG) {
            constexpr u32 s = 0x80000000u;
            f[i] = {f[i].hx ^ s, f[i].hy ^ s, f[i].lx ^ s, f[i].ly ^ s};
        }
    }
}

// The B fragment (16 × 8) at `b`, pair q at k 2t + 8q, 2t + 8q + 1 of column g: element (k, n)
// at b[k · ld + n] (K_ROWS) or b[n · ld + k] (8-byte loads).
template <bool K_ROWS>
__device__ __forceinline__ void gdn_frag_b(GdnSplit (&f)[2], const float* b, int ld, int lane) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int k = 2 * t + 8 * i;
        f[i] = K_ROWS ? gdn_split(b[k * ld + g], b[(k + 1) * ld + g]) : gdn_split2(b + g * ld + k);
    }
}

// A B operand kept split in shared memory (k rows, element (k, n) at [k · ld + n]): the tf32
// terms gdn_split gives, hi and lo apart, written once by the warp that produces the values
// (gdn_put_split) instead of split again by every warp that reads them. Same bits.
struct GdnPreB {
    const u32* hi;
    const u32* lo;
};
__device__ __forceinline__ GdnPreB operator+(GdnPreB b, int o) { return {b.hi + o, b.lo + o}; }
template <bool K_ROWS>
__device__ __forceinline__ void gdn_frag_b(GdnSplit (&f)[2], GdnPreB b, int ld, int lane) {
    static_assert(K_ROWS, "pre-split B operands are stored in k rows");
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int at = (2 * t + 8 * i) * ld + g;
        f[i] = {b.hi[at], b.hi[at + ld], b.lo[at], b.lo[at + ld]};
    }
}
// x's two tf32 terms to hi[i], lo[i].
__device__ __forceinline__ void gdn_put_split(u32* hi, u32* lo, int i, float x) {
    const u32x2 t = gdn_terms(x);
    hi[i] = t.x;
    lo[i] = t.y;
}

// c += a·b over the 16-wide k step from the split terms: six tf32 mma, the small terms first.
__device__ __forceinline__ void gdn_mma6(float (&c)[4], const GdnSplit (&a)[4],
                                         const GdnSplit (&b)[2]) {
#define GDN_MMA(q, TA, TB)                                                                       \
    mma_tf32(c, a[2 * q].TA##x, a[2 * q + 1].TA##x, a[2 * q].TA##y, a[2 * q + 1].TA##y,         \
             b[q].TB##x, b[q].TB##y)
    GDN_MMA(0, l, h);
    GDN_MMA(0, h, l);
    GDN_MMA(1, l, h);
    GDN_MMA(1, h, l);
    GDN_MMA(0, h, h);
    GDN_MMA(1, h, h);
#undef GDN_MMA
}

// c[j] += A · B_j over k < K for one 16-row tile of A and N 8-column tiles of B (B_j at
// b + 8j for K_ROWS, b + 8j · ldb otherwise): A's fragment is split once for all N.
template <int K, int N, bool A_ROWS, bool B_K_ROWS, bool NEG = false, typename BP = const float*>
__device__ __forceinline__ void gdn_tile_mma(float (&c)[N][4], const float* a, int lda, BP b,
                                             int ldb, int lane) {
#pragma unroll 2
    for (int k = 0; k < K; k += 16) {
        GdnSplit fa[4];
        gdn_frag_a<A_ROWS, NEG>(fa, A_ROWS ? a + k : a + k * lda, lda, lane);
#pragma unroll
        for (int j = 0; j < N; ++j) {
            GdnSplit fb[2];
            gdn_frag_b<B_K_ROWS>(fb, B_K_ROWS ? b + k * ldb + 8 * j : b + 8 * j * ldb + k, ldb,
                                 lane);
            gdn_mma6(c[j], fa, fb);
        }
    }
}

// c[j] += A · B_j and d[j] += A2 · B_j (A and A2 row-major with the same stride, NEG negating
// A): two products against the same B, its fragments split once for both.
template <int K, int N, bool B_K_ROWS, bool NEG = false, typename BP = const float*>
__device__ __forceinline__ void gdn_tile_mma_two(float (&c)[N][4], const float* a,
                                                 float (&d)[N][4], const float* a2, int lda, BP b,
                                                 int ldb, int lane) {
#pragma unroll 2
    for (int k = 0; k < K; k += 16) {
        GdnSplit fa[4], fa2[4];
        gdn_frag_a<true, NEG>(fa, a + k, lda, lane);
        gdn_frag_a<true>(fa2, a2 + k, lda, lane);
#pragma unroll
        for (int j = 0; j < N; ++j) {
            GdnSplit fb[2];
            gdn_frag_b<B_K_ROWS>(fb, B_K_ROWS ? b + k * ldb + 8 * j : b + 8 * j * ldb + k, ldb,
                                 lane);
            gdn_mma6(c[j], fa, fb);
            gdn_mma6(d[j], fa2, fb);
        }
    }
}

// Everything about a chunk that does not depend on the state, a block per (chunk, value head).
// With t, s rows of the chunk, D(t, s) = e_{s+1} ⋯ e_t the decay from row s to row t (1 at
// s = t), γ_t = e_0 ⋯ e_t, and the normalised k, q:
//     A[t, s] = β_t D(t, s) k_t·k_s (s < t)     (I + A) is unit lower triangular
//     X = (I + A)⁻¹ [diag(βγ) K | diag(β)]      forward substitution, a thread a column
//     W = X's first DK columns, Tb = the rest    so δ = Tb V − W S₀
//     P[t, s] = D(t, s) q_t·k_s (s ≤ t)         Qg = diag(γ) Q, Kt[s] = D(n − 1, s) k_s
// The decay products are multiplied out (not exp of cumulative sums: those lose the small
// differences of large sums), as the CPU multiplies the state by each e.
template <int DK, typename TM>
__device__ void gdn_chunk_prep_impl(float* scratch, const float* conv, const TM* mixed,
                                    const float* neg_a, const float* dt_bias, const u32* plan,
                                    int seqs, int nk, int nv, int dv, int width) {
    constexpr int C = GDN_CHUNK, KP = DK + 8, CP = C + 8, XW = DK + C, XP = XW + 4;
    GDN_SMEM(gdn_prep_smem_floats<DK>());
    float* qs = smem;           // [C][KP]
    float* dm = qs + C * KP;    // [C][CP]: dm[t][j] = e_j ⋯ e_t (j ≤ t), else 0
    float* xs = smem;           // [C][XP] over q and dm, once those are used
    float* ks = dm + C * CP;    // [C][KP]
    float* as = ks + C * KP;    // [C][CP]
    float* decay = as + C * CP; // [C]
    float* beta = decay + C;    // [C]
    float* gam = beta + C;      // [C]: γ_t = e_0 ⋯ e_t
    static_assert(C * KP + C * CP >= C * XP, "X fits over q and the decay products");
    pdl_start();
    const int c = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32, warps = blockDim.x / 32;
    const u32* e = plan + seqs + 3 * c;
    const int r0 = (int)e[1], n = (int)e[2];
    const int kd = nk * DK, vd = nv * dv, channels = 2 * kd + vd, kh = h / (nv / nk);
    // q and k rows of the key head, zeros past n
    for (int i = tid; i < 2 * C * (DK / 4); i += blockDim.x) {
        const int which = i / (C * (DK / 4)), t = i / (DK / 4) % C, d4 = i % (DK / 4);
        const float* src =
            conv + (u64)(r0 + min(t, n - 1)) * channels + which * kd + kh * DK + 4 * d4;
        cp_async<16>((which ? ks : qs) + t * KP + 4 * d4, src, t < n);
    }
    cp_async_commit();
    if (tid < C) {
        float e_t = 1.f, b_t = 0.f;  // rows past n change nothing
        if (tid < n) {
            const TM* m = mixed + (u64)(r0 + tid) * width + channels + vd;
            const float b = to_f32(m[h]), a = to_f32(m[nv + h]) + dt_bias[h];
            const float softplus = a > 20.f ? a : log1pf(expf(a));
            b_t = gdn_sigmoid(b);
            e_t = expf(neg_a[h] * softplus);
        }
        decay[tid] = e_t;
        beta[tid] = b_t;
    }
    cp_async_wait<0>();
    __syncthreads();
    const float scale = 1.0f / sqrtf((float)DK);
    for (int v = warp; v < 2 * n; v += warps) {
        float* x = v < n ? qs + v * KP : ks + (v - n) * KP;
        float ss = 0.f;
        for (int d = lane; d < DK; d += 32) ss += x[d] * x[d];
        const float inv = 1.0f / sqrtf(warp_sum(ss) + 1e-6f);
        const float mul = v < n ? inv * scale : inv;
        for (int d = lane; d < DK; d += 32) x[d] *= mul;
    }
    if (tid < C) {  // column tid of the decay products
        float p = 0.f;
        for (int t = 0; t < C; ++t) {
            p = t == tid ? decay[t] : p * decay[t];
            dm[t * CP + tid] = t >= tid ? p : 0.f;
            if (tid == 0) gam[t] = p;
        }
    }
    __syncthreads();
    auto between = [&](int t, int s) { return s == t ? 1.f : dm[t * CP + s + 1]; };  // s ≤ t
    float* out = scratch + ((u64)c * nv + h) * gdn_chunk_floats<DK>();
    float* w_out = out;
    float* q_out = w_out + C * DK;
    float* k_out = q_out + C * DK;
    float* tb_out = k_out + C * DK;
    float* p_out = tb_out + C * C;
    float* g_out = p_out + C * C;
    // k_t·k_s and q_t·k_s on tensor cores: 4 × 8 tiles of 16 × 8 each, warp w row tile w % 4
    // and column tiles 4 (w / 4) .. + 3 of both (k_s's fragments shared).
    {
        static_assert(GDN_CHUNK_THREADS == 256 && C == 64, "four tiles of each a warp");
        const int rt = warp % 4, ct = 4 * (warp / 4), g = lane / 4, t4 = lane % 4;
        float kk[4][4] = {}, qk[4][4] = {};
        gdn_tile_mma_two<DK, 4, false>(kk, ks + 16 * rt * KP, qk, qs + 16 * rt * KP, KP,
                                       ks + 8 * ct * KP, KP, lane);
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int t = 16 * rt + g + 8 * (r / 2), s = 8 * (ct + j) + 2 * t4 + r % 2;
                as[t * CP + s] = s < t ? beta[t] * between(t, s) * kk[j][r] : 0.f;
                p_out[t * C + s] = s <= t && t < n ? between(t, s) * qk[j][r] : 0.f;
            }
    }
    for (int i = tid; i < n * DK; i += blockDim.x) {
        const int t = i / DK, d = i % DK;
        q_out[i] = gam[t] * qs[t * KP + d];
        k_out[i] = between(n - 1, t) * ks[t * KP + d];
    }
    if (tid < C) g_out[tid] = gam[tid];
    __syncthreads();  // q and the decay products are used: X goes over them
    // X = (I + A)⁻¹ B by blocks of 16 rows: a block's rows first take off what the rows above
    // give them, −A[rows, :rb] X[:rb, :] (tensor cores, X's 8-column tiles a warp each, the
    // tile itself the accumulators), then its 16 × 16 diagonal block is solved in f32 a thread
    // a column, x_t = b_t − Σ_{s<t} A[t, s] x_s (chains of at most 15 terms instead of 63).
    // Rows past n stay zero (their B and A rows are).
    for (int i = tid; i < C * XW; i += blockDim.x) {
        const int t = i / XW, col = i % XW;
        xs[t * XP + col] = t >= n     ? 0.f
                           : col < DK ? beta[t] * gam[t] * ks[t * KP + col]
                                      : (col - DK == t ? beta[t] : 0.f);
    }
    __syncthreads();
    constexpr int RB = 16;
    for (int rb = 0; rb < n; rb += RB) {
        if (rb > 0) {
            const int g = lane / 4, t4 = lane % 4;
            for (int nt = warp; nt < XW / 8; nt += warps) {
                float* x = xs + rb * XP + 8 * nt + 2 * t4;
                float acc[1][4];
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const float2 v = *(const float2*)(x + (g + 8 * r) * XP);
                    acc[0][2 * r] = v.x;
                    acc[0][2 * r + 1] = v.y;
                }
                for (int k = 0; k < rb; k += 16)
                    gdn_tile_mma<16, 1, true, true, true>(acc, as + rb * CP + k, CP,
                                                          xs + k * XP + 8 * nt, XP, lane);
#pragma unroll
                for (int r = 0; r < 2; ++r)
                    *(float2*)(x + (g + 8 * r) * XP) =
                        make_float2(acc[0][2 * r], acc[0][2 * r + 1]);
            }
            __syncthreads();
        }
        for (int col = tid; col < XW; col += blockDim.x)
#pragma unroll
            for (int t = rb; t < rb + RB; ++t) {
                float x = xs[t * XP + col];
                for (int s = rb; s < t; ++s) x -= as[t * CP + s] * xs[s * XP + col];
                xs[t * XP + col] = x;
            }
        __syncthreads();
    }
    for (int i = tid; i < n * DK; i += blockDim.x) w_out[i] = xs[(i / DK) * XP + i % DK];
    for (int i = tid; i < C * C; i += blockDim.x) tb_out[i] = xs[(i / C) * XP + DK + i % C];
}

#define GDN_CHUNK_PREP(dk, tm, TM)                                                               \
    extern "C" __global__ void __launch_bounds__(GDN_CHUNK_THREADS)                              \
        gdn_chunk_prep_d##dk##_##tm(float* scratch, const float* conv, const TM* mixed,          \
                                    const float* neg_a, const float* dt_bias, const u32* plan,   \
                                    int seqs, int nk, int nv, int dv, int width) {               \
        gdn_chunk_prep_impl<dk, TM>(scratch, conv, mixed, neg_a, dt_bias, plan, seqs, nk, nv,   \
                                    dv, width);                                                  \
    }

// Shared memory of gdn_chunk_state: the state's columns [DK, BV + 4] in f32 and split (hi, lo:
// the products' B operand), W, Qg [C, DK + 8], Kt [C, DK + 4], Tb, P [C, C + 8], v [C, BV + 4]
// and δ split [2][C, BV + 4]: about 218 KB at DK 128. The paddings put a fragment's loads on
// distinct banks: rows read in pairs along k (W, Qg, Tb, P) 8 mod 32 floats apart, rows read a
// float a lane (the state, Kt, v, δ) 4 mod 32.
#define GDN_SP (GDN_BV + 4)
template <int DK>
__device__ constexpr int gdn_state_smem_floats() {
    return 3 * DK * GDN_SP + 2 * GDN_CHUNK * (DK + 8) + GDN_CHUNK * (DK + 4) +
           2 * GDN_CHUNK * (GDN_CHUNK + 8) + 3 * GDN_CHUNK * GDN_SP;
}

// The state's entries a thread of gdn_chunk_state reads at the start, saves and writes back:
// rows dg + 32i of columns 4cg .. 4cg + 3 of the block's BV, with cg = tid % 8, dg = tid / 8.
// f(d, local column, column) for each that exists.
template <int DK, typename F>
__device__ __forceinline__ void gdn_owned(int tid, int col0, int dv, F f) {
    const int cg = tid % 8, dg = tid / 8;
#pragma unroll
    for (int i = 0; i < (DK + 31) / 32; ++i)
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int d = dg + 32 * i, j = 4 * cg + u;
            if (d < DK && col0 + j < dv) f(d, j, col0 + j);
        }
}

// A thread's entries of the state go to the save slots of `after` rows, if any; returns the
// next save.
template <int DK>
__device__ __forceinline__ u32 gdn_chunk_saves(const float* hs, u32 sv, u32 sv_end,
                                               const u32* saves, u32 after, float* state,
                                               u64 head, int tid, int col0, int dv) {
    for (; sv < sv_end && saves[2 * sv] == after; ++sv) {
        float* dst = state + (u64)saves[2 * sv + 1] * head;
        gdn_owned<DK>(tid, col0, dv,
                      [&](int d, int j, int col) { dst[(u64)d * dv + col] = hs[d * GDN_SP + j]; });
    }
    return sv;
}

// The state hand-off, chunk after chunk: a block per (BV state columns, value head, sequence)
// keeps S₀'s columns in shared memory (f32) and per chunk of n rows computes
//     δ = Tb V − W S₀                      [n, BV]
//     o = Qg S₀ + P δ                      into core
//     S₀ = γ_{n−1} S₀ + Ktᵀ δ
// on tensor cores (gdn_tile_mma; Qg S₀ beside W S₀, on the same fragments of S₀; S₀ and δ, the
// B operands every warp reads, stored split by the warps that write them). δ and o are
// 4 × 4 tiles of 16 × 8: warp w takes row tile w % 4 and column tiles 2 (w / 4), + 1; the
// state's (DK / 16) × 4 tiles go a row tile a warp, the warp's accumulators starting from γ S₀.
// Saves are written after their chunk's end.
template <int DK>
__device__ void gdn_chunk_state_impl(float* core, const float* conv, const float* scratch,
                                     float* state, const u32* plan, const u32* seq_starts,
                                     const u32* slots, const u32* save_starts, const u32* saves,
                                     int seqs, int chunk_min, int nk, int nv, int dv) {
    constexpr int C = GDN_CHUNK, BV = GDN_BV, SP = GDN_SP, DKP = DK + 8, KTP = DK + 4,
                  CP = C + 8;
    static_assert(GDN_CHUNK_THREADS == 256 && C == 64 && BV == 32, "the tiles below");
    GDN_SMEM(gdn_state_smem_floats<DK>());
    float* hs = smem;                         // [DK][SP]
    u32* const hsh = (u32*)(hs + DK * SP);    // [DK][SP]: S₀'s tf32 terms
    u32* const hsl = hsh + DK * SP;           // [DK][SP]
    float* ws = (float*)(hsl + DK * SP);      // [C][DKP]
    float* qs = ws + C * DKP;  // [C][DKP]
    float* ks = qs + C * DKP;  // [C][KTP]
    float* tb = ks + C * KTP;  // [C][CP]
    float* ps = tb + C * CP;   // [C][CP]
    float* vs = ps + C * CP;                  // [C][SP]
    u32* const dsh = (u32*)(vs + C * SP);     // [C][SP]: δ's tf32 terms
    u32* const dsl = dsh + C * SP;            // [C][SP]
    const GdnPreB hsb{hsh, hsl}, dsb{dsh, dsl};
    pdl_start();
    const int s = blockIdx.z, h = blockIdx.y, tid = threadIdx.x, col0 = blockIdx.x * BV;
    const u32 r0 = seq_starts[s];
    const int len = (int)(seq_starts[s + 1] - r0);
    if (!gdn_chunked(len, chunk_min)) return;
    const int warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
    const int rt = warp % 4, ct = 2 * (warp / 4);  // δ's and o's tiles
    const int kd = nk * DK, vd = nv * dv, channels = 2 * kd + vd;
    const u64 head = (u64)nv * DK * dv;  // a slot's recurrent state
    // Slot 0xFFFFFFFF is a padding row's: no state, read zeros, write nothing.
    const bool pad = slots[s] == GDN_NO_STATE;
    float* own = state + (pad ? 0 : slots[s]) * head + (u64)h * DK * dv;
    state += (u64)h * DK * dv;  // saves: slot · head from here
    gdn_owned<DK>(tid, col0, dv, [&](int d, int j, int col) {
        const float x = pad ? 0.f : own[(u64)d * dv + col];
        hs[d * SP + j] = x;
        gdn_put_split(hsh, hsl, d * SP + j, x);
    });
    if (col0 + BV > dv)  // columns past dv stay zero
        for (int i = tid; i < DK * BV; i += blockDim.x)
            if (col0 + i % BV >= dv) {
                hs[i / BV * SP + i % BV] = 0.f;
                gdn_put_split(hsh, hsl, i / BV * SP + i % BV, 0.f);
            }
    u32 sv = save_starts[s], cut = sv;
    const u32 sv_end = save_starts[s + 1], write_end = pad ? sv : sv_end;  // chunks still cut
    sv = gdn_chunk_saves<DK>(hs, sv, write_end, saves, 0, state, head, tid, col0, dv);
    // Copies in flight while the block computes, three groups a chunk: its W, Qg, Tb and v go
    // out once the previous chunk's δ is done (the last to read them), its P once the
    // previous o is, its Kt at its start (the state's update reads the previous Kt until then).
    auto issue_wqtv = [&](const float* sc, int lo, int n) {
        for (int i = tid; i < 2 * C * (DK / 4); i += blockDim.x)
            cp_async<16>(ws + i / (DK / 4) * DKP + 4 * (i % (DK / 4)), sc + 4 * i,
                         i / (DK / 4) % C < n);
        for (int i = tid; i < C * (C / 4); i += blockDim.x)
            cp_async<16>(tb + i / (C / 4) * CP + 4 * (i % (C / 4)), sc + 3 * C * DK + 4 * i, true);
        for (int i = tid; i < C * BV; i += blockDim.x) {
            const int t = i / BV, c = col0 + i % BV;
            const bool in = t < n && c < dv;
            const float* src = conv + (u64)(r0 + lo + t) * channels + 2 * kd + h * dv + c;
            cp_async<4>(vs + t * SP + i % BV, in ? src : conv, in);
        }
        cp_async_commit();
    };
    auto issue_p = [&](const float* sc) {
        for (int i = tid; i < C * (C / 4); i += blockDim.x)
            cp_async<16>(ps + i / (C / 4) * CP + 4 * (i % (C / 4)), sc + 3 * C * DK + C * C + 4 * i,
                         true);
        cp_async_commit();
    };
    auto chunk_at = [&](u32 chunk) {
        return scratch + ((u64)chunk * nv + h) * gdn_chunk_floats<DK>();
    };
    u32 chunk = plan[s];
    int hi = gdn_chunk_end(0, len, saves, cut, sv_end);
    issue_wqtv(chunk_at(chunk), 0, hi);
    issue_p(chunk_at(chunk));
    for (int lo = 0; lo < len; ++chunk) {
        const int n = hi - lo;
        const float* sc = chunk_at(chunk);
        const int next = hi < len ? gdn_chunk_end(hi, len, saves, cut, sv_end) : hi;
        __syncthreads();  // the previous chunk's update and saves are done: Kt is free
        for (int i = tid; i < C * (DK / 4); i += blockDim.x)
            cp_async<16>(ks + i / (DK / 4) * KTP + 4 * (i % (DK / 4)), sc + 2 * C * DK + 4 * i,
                         i / (DK / 4) < n);
        cp_async_commit();
        const float gamma = sc[3 * C * DK + 2 * C * C + n - 1];
        cp_async_wait<1>();  // W, Qg, Tb, v and P are in, Kt may still be coming
        __syncthreads();
        // δ = Tb V − W S₀ (Tb and v are zero past n, and W: fixed counts pipeline), and o's
        // Qg S₀ with the same fragments of S₀
        float acc[2][4] = {}, oq[2][4] = {};
        gdn_tile_mma<C, 2, true, true>(acc, tb + 16 * rt * CP, CP, vs + 8 * ct, SP, lane);
        gdn_tile_mma_two<DK, 2, true, true>(acc, ws + 16 * rt * DKP, oq, qs + 16 * rt * DKP, DKP,
                                            hsb + 8 * ct, SP, lane);
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int t = 16 * rt + g + 8 * r, at = t * SP + 8 * (ct + j) + 2 * t4;
                const bool in = t < n;  // rows past n: zero (Tb's and W's are already)
                gdn_put_split(dsh, dsl, at, in ? acc[j][2 * r] : 0.f);
                gdn_put_split(dsh, dsl, at + 1, in ? acc[j][2 * r + 1] : 0.f);
            }
        __syncthreads();  // δ is written; W, Qg, Tb and v are read: the next chunk's go out
        if (next > hi) issue_wqtv(chunk_at(chunk + 1), hi, next - hi);
        // o = Qg S₀ + P δ (P and δ are zero past n)
        gdn_tile_mma<C, 2, true, true>(oq, ps + 16 * rt * CP, CP, dsb + 8 * ct, SP, lane);
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int t = 16 * rt + g + 8 * r, col = col0 + 8 * (ct + j) + 2 * t4;
                if (t >= n) continue;
                float* o = core + (u64)(r0 + lo + t) * vd + h * dv;
                if (col < dv) o[col] = oq[j][2 * r];
                if (col + 1 < dv) o[col + 1] = oq[j][2 * r + 1];
            }
        __syncthreads();  // every thread has read P
        if (next > hi) {
            issue_p(chunk_at(chunk + 1));
            cp_async_wait<2>();  // Kt is in (the next chunk's two groups may still be coming)
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        // S₀ = γ S₀ + Ktᵀ δ (Kt and δ are zero past n), a 16-row tile of S₀ a warp
        for (int d0 = 16 * warp; d0 < DK; d0 += 16 * (GDN_CHUNK_THREADS / 32)) {
            float hn[4][4];
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const float2 x = *(const float2*)(hs + (d0 + g + 8 * r) * SP + 8 * j + 2 * t4);
                    hn[j][2 * r] = gamma * x.x;
                    hn[j][2 * r + 1] = gamma * x.y;
                }
            gdn_tile_mma<C, 4, false, true>(hn, ks + d0, KTP, dsb, SP, lane);
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const int at = (d0 + g + 8 * r) * SP + 8 * j + 2 * t4;
                    *(float2*)(hs + at) = make_float2(hn[j][2 * r], hn[j][2 * r + 1]);
                    gdn_put_split(hsh, hsl, at, hn[j][2 * r]);
                    gdn_put_split(hsh, hsl, at + 1, hn[j][2 * r + 1]);
                }
        }
        if (sv < write_end && saves[2 * sv] == (u32)hi) __syncthreads();  // the saves read it all
        sv = gdn_chunk_saves<DK>(hs, sv, write_end, saves, (u32)hi, state, head, tid, col0, dv);
        lo = hi;
        hi = next;
    }
    __syncthreads();
    if (!pad)
        gdn_owned<DK>(tid, col0, dv,
                      [&](int d, int j, int col) { own[(u64)d * dv + col] = hs[d * SP + j]; });
}

#define GDN_CHUNK_STATE(dk)                                                                      \
    extern "C" __global__ void __launch_bounds__(GDN_CHUNK_THREADS) gdn_chunk_state_d##dk(       \
        float* core, const float* conv, const float* scratch, float* state, const u32* plan,     \
        const u32* seq_starts, const u32* slots, const u32* save_starts, const u32* saves,       \
        int seqs, int chunk_min, int nk, int nv, int dv) {                                       \
        gdn_chunk_state_impl<dk>(core, conv, scratch, state, plan, seq_starts, slots,            \
                                 save_starts, saves, seqs, chunk_min, nk, nv, dv);               \
    }
#define GDN_CHUNKED(dk)            \
    GDN_CHUNK_PREP(dk, f32, float) \
    GDN_CHUNK_PREP(dk, bf16, bf16) \
    GDN_CHUNK_STATE(dk)
GDN_CHUNKED(16)
GDN_CHUNKED(32)
GDN_CHUNKED(64)
GDN_CHUNKED(128)

// --- 3. the gated RMSNorm ----------------------------------------------------------------------

template <typename TM, typename TO>
__device__ void gdn_norm_impl(TO* out, const float* core, const TM* mixed, const float* w,
                              int heads, int nv, int dv, int width, int z_at, float eps) {
    pdl_start();
    const int idx = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (idx >= heads) return;
    const u64 t = idx / nv, at = t * nv * dv + (u64)(idx % nv) * dv;
    const float* x = core + at;
    float ss = 0.f;
    for (int d = lane; d < dv; d += 32) ss += x[d] * x[d];
    const float inv = 1.0f / sqrtf(warp_sum(ss) / dv + eps);
    const TM* z = mixed + t * width + z_at + (u64)(idx % nv) * dv;
    for (int d = lane; d < dv; d += 32)
        out[at + d] = from_f32<TO>(w[d] * (x[d] * inv) * gdn_silu(to_f32(z[d])));
}

#define GDN_NORM(tm, TM, to, TO)                                                                 \
    extern "C" __global__ void gdn_norm_##tm##_##to(TO* out, const float* core, const TM* mixed, \
                                                    const float* w, int heads, int nv, int dv,   \
                                                    int width, int z_at, float eps) {            \
        gdn_norm_impl(out, core, mixed, w, heads, nv, dv, width, z_at, eps);                     \
    }
GDN_NORM(f32, float, bf16, bf16)
GDN_NORM(bf16, bf16, bf16, bf16)
GDN_NORM(f32, float, f32, float)
GDN_NORM(bf16, bf16, f32, float)
