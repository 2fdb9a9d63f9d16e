// Qwen3.5's hybrid layers beyond Qwen3's ops: the Gated DeltaNet mixer (engine
// backend/cpu/hybrid.rs is the reference, op for op) and the small elementwise ops around it.
//
// gated_delta_net runs as three steps over the step's rows (sequences back to back, each with
// its state slot and its saves, uploaded once a step with the batch, see batch.rs), or a
// decode step as the one launch of 4:
//
// 1. gdn_conv_<mixed>: causal depthwise conv over time + SiLU of the qkv columns of `mixed`,
//    written as f32 `[T, C]`. Grid (C / 256, T + S). A block row y < T serves row y: a thread
//    per channel sums the K taps over rows y − K + 1 ..= y, all inside its sequence (rows
//    whose window reaches before the chunk return at once). A block row T + s serves sequence
//    s: a thread per channel loads the slot's window (the last K − 1 inputs, `[K − 1, C]`),
//    computes the first K − 1 rows, writes the window each save asks for and then the slot's
//    new window. Only that thread reads or writes its (slot, channel), so the window is
//    replaced in the same launch that reads it without a race.
// 2. gdn_recurrent_d<DK>_<mixed>: the gated delta rule, token by token. The state's columns
//    are independent (column j of S_t depends only on column j of S_{t-1}, v_t[j] and the
//    shared k_t, q_t), so a block takes `cols` columns of one (sequence, value head): grid
//    (dv / cols, nv, S), four threads a column, each holding DK / 4 rows of it (rows part,
//    part + 4, ...) in registers, f32. Per token, with decay e = exp(g) and the normalised
//    k, q (q scaled by 1/√dk):
//        u = Sᵀk, w = Sᵀq                 (partial sums, then two xor shuffles)
//        δ = β (v − e·u)                  (the delta against the decayed state)
//        o = e·w + δ (k·q)                (= S_newᵀ q without a second pass)
//        S = e·S + k δᵀ
//    Tiles of 16 tokens are staged in shared memory first (16-byte loads, eight in flight a
//    thread, so C and nv·dv must be multiples of 4): q and k of the value head's key
//    head (h / (nv / nk)), L2-normalised there a warp per vector (eps 1e-6 inside the root,
//    as the CPU), k·q a warp per token, e and β from `mixed`'s a and b columns (softplus
//    linear above 20, as torch), v of the block's columns. After row `after` of the sequence
//    a thread writes its rows to every save slot of that `after`; at the end to the slot.
//    The output is f32 `[T, nv·dv]` (pre-norm).
// 3. gdn_norm_<mixed>_<out>: the gated RMSNorm, a warp per (row, value head):
//    out = x / rms(x) · w · silu(z), z from `mixed`, out in the compute type.
//
//    Sequences with at least `chunk_min` rows in the step return at once: 2b takes them.
// 2b. The chunked form for prefill (flash-linear-attention's chunk_gated_delta_rule, f32 on
//    CUDA cores), dk ≤ 128. A sequence is cut into chunks of GDN_CHUNK = 64 rows, and also at
//    every save point (so a checkpoint is a chunk's end state). Within a chunk of n rows, with
//    D(t, s) = e_{s+1} ⋯ e_t and γ_t = e_0 ⋯ e_t, the token loop unrolls into
//        δ = (I + A)⁻¹ (diag(β) V − diag(βγ) K S₀),  A[t, s] = β_t D(t, s) k_t·k_s (s < t)
//        o = diag(γ) Q S₀ + (D ⊙ QKᵀ, s ≤ t) δ
//        S = γ_{n−1} S₀ + (D(n−1, ·) K)ᵀ δ
//    (the WY/UT representation: a unit lower-triangular solve and dense products; only S₀
//    passes from chunk to chunk). Three launches: gdn_chunk_plan lists the chunks (one warp);
//    gdn_chunk_prep_d<DK>_<mixed>, a block per (chunk, value head), computes everything
//    without S₀ into a scratch (W = (I + A)⁻¹ diag(βγ) K, Tb = (I + A)⁻¹ diag(β), P, the
//    γ-scaled q and k, γ); gdn_chunk_state_d<DK>, a block per (32 state columns, value head,
//    sequence), walks the chunks in order with its columns of S in shared memory. The decay
//    products are multiplied out (exp of cumulative log-decays would lose the small
//    differences of large sums), as the CPU multiplies the state by each e.
// 4. A decode step (every sequence exactly one row, CUDA-graph padding rows included) runs all
//    of the above in one launch, gdn_decode_d<DK>_<mixed>_<out> (dv = dk, dk in 16 .. 256),
//    with the same bits: every value is the 3-launch path's f32 expression in the same order
//    (the conv's taps in order, the warp-strided sums and their shuffle trees, a column's
//    partial sums over rows part, part + 4, ... and its two shuffles).
//    The catch is the conv windows: a key head's q and k channels are read by all nv / nk of
//    its value heads, and a block that replaced that window while another still read it would
//    race. So the blocks of one key head (grid (splits, nk, S)) split the state's columns, not
//    the heads: block (j, kh, s) takes columns j · dv / splits ..< + dv / splits of every value
//    head of kh, 4 threads a column (nv / nk · 4 · dv / splits ≤ 1024 threads). A block
//    (a) starts cp.async copies of its columns of the states into shared memory (zeros for a
//    padding row; rows 8 mod 32 words apart, so a column's 4 threads hit different banks): the
//    state lives there, not in registers, because dk / 4 = 32 rows a thread plus the rest spill
//    at 1024 threads' 64 registers; (b) computes the conv of q, k (reading, not writing, their
//    windows) and of its own v columns (writing those windows and saves, as 1 does), into
//    shared memory, with e and β; (c) L2-normalises q and k, takes k·q; (d) runs the delta
//    rule on the shared state; (e) copies its columns out to the saves after 0 and 1 rows and
//    back to the slot (16-byte stores). The key head's output columns meet in the last block
//    to finish: each block writes its outputs to an f32 scratch (`core`), fences and takes a
//    ticket (an atomic counter a (sequence, key head), zeroed once by the host and reset by
//    the last block); the last one, after every block has read the old q and k windows and
//    none has written them, writes those windows and their saves, and (f) applies the gated
//    RMSNorm a warp per value head over the heads' outputs read back from L2. With one block a
//    key head there is no ticket and the outputs stay in shared memory.
//    Measured on the H200 at 35B-A3B's heads (docs/performance.md): no faster than 1-3 on the
//    GPU (11.0 against 10.9 µs at batch 1, 120.4 against 120.8 at 64): a chain of dependent
//    loads (slots, then windows and taps, the states, the ticket, the scratch) costs what the
//    three launches' gaps did. The host (gdn_decode.rs) sends a step here when dv = dk, the
//    threads and shared memory (nv / nk · dk · (dv / splits + 8) floats) fit, and no sequence
//    takes the chunked kernels; any other step takes 1-3.
// A sequence whose slot is GDN_NO_STATE (u32::MAX) is a padding row of a CUDA graph's bucket:
// it starts from a zero window and state and writes neither (it has no saves).
// Every kernel waits (pdl_start) before touching anything: all read an earlier kernel's output.
//
// Elementwise ops take either activation type for each operand (a flag says bf16), so the f32
// residual stream and bf16 GEMM operands mix freely: sigmoid_mul, add_assign, add_gated.
// state_row copies or zeroes one row of an f32 state tensor.

#define GDN_TILE 16
#define GDN_NO_STATE 0xFFFFFFFFu  // kv_cache::NO_STATE: a padding row's slot
#define GDN_MAX_COLS 32
#define GDN_MAX_K 8
#define GDN_INFLIGHT 8

__device__ __forceinline__ float gdn_silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float gdn_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// --- 1. the causal conv ------------------------------------------------------------------------

template <typename TM>
__device__ void gdn_conv_impl(float* out, const TM* mixed, const float* taps_all, float* conv_state,
                              const u32* row_seq, const u32* seq_starts, const u32* slots,
                              const u32* save_starts, const u32* saves, int rows, int channels,
                              int k, int width) {
    pdl_start();
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    float taps[GDN_MAX_K];
#pragma unroll
    for (int j = 0; j < GDN_MAX_K; ++j) taps[j] = j < k ? taps_all[(u64)c * k + j] : 0.f;
    const int y = blockIdx.y;
    if (y < rows) {
        const int i = y - (int)seq_starts[row_seq[y]];
        if (i < k - 1) return;  // the sequence's block row computes it
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < GDN_MAX_K; ++j)
            if (j < k) acc += taps[j] * to_f32(mixed[(u64)(y - (k - 1) + j) * width + c]);
        out[(u64)y * channels + c] = gdn_silu(acc);
        return;
    }
    const int s = y - rows;
    const int r0 = (int)seq_starts[s], len = (int)seq_starts[s + 1] - r0;
    const u64 window = (u64)(k - 1) * channels;
    // A padding row (slot GDN_NO_STATE) starts from a zero window and writes none.
    const bool real = slots[s] != GDN_NO_STATE;
    float* own = conv_state + (real ? slots[s] : 0u) * window;
    float win[GDN_MAX_K - 1];
#pragma unroll
    for (int m = 0; m < GDN_MAX_K - 1; ++m)
        win[m] = real && m < k - 1 ? own[(u64)m * channels + c] : 0.f;
    // Input r of the sequence (r < 0: the window's), in registers without dynamic indexing.
    auto x = [&](int r) -> float {
        if (r >= 0) return to_f32(mixed[(u64)(r0 + r) * width + c]);
        float v = 0.f;
#pragma unroll
        for (int m = 0; m < GDN_MAX_K - 1; ++m)
            if (m == k - 1 + r) v = win[m];
        return v;
    };
    for (int i = 0; i < min(len, k - 1); ++i) {
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < GDN_MAX_K; ++j)
            if (j < k) acc += taps[j] * x(i - (k - 1) + j);
        out[(u64)(r0 + i) * channels + c] = gdn_silu(acc);
    }
    for (u32 sv = save_starts[s]; sv < save_starts[s + 1]; ++sv) {
        const int after = (int)saves[2 * sv];
        float* to = conv_state + saves[2 * sv + 1] * window;
        for (int m = 0; m < k - 1; ++m) to[(u64)m * channels + c] = x(after - (k - 1) + m);
    }
    if (real)
        for (int m = 0; m < k - 1; ++m) own[(u64)m * channels + c] = x(len - (k - 1) + m);
}

#define GDN_CONV(tm, TM)                                                                         \
    extern "C" __global__ void gdn_conv_##tm(float* out, const TM* mixed, const float* taps,     \
                                             float* conv_state, const u32* row_seq,             \
                                             const u32* seq_starts, const u32* slots,           \
                                             const u32* save_starts, const u32* saves,          \
                                             int rows, int channels, int k, int width) {        \
        gdn_conv_impl(out, mixed, taps, conv_state, row_seq, seq_starts, slots, save_starts,    \
                      saves, rows, channels, k, width);                                         \
    }
GDN_CONV(f32, float)
GDN_CONV(bf16, bf16)

// --- 2. the gated delta rule -------------------------------------------------------------------

// Whether a sequence of `len` rows goes to the chunked kernels (2b) rather than the recurrent.
__device__ __forceinline__ bool gdn_chunked(int len, int chunk_min) {
    return len > 0 && len >= chunk_min;
}

// Thread `part`'s rows of its column go to the save slots of `after` rows, if any; `sv` walks
// the sequence's saves (sorted by `after`).
template <int R>
__device__ __forceinline__ void gdn_saves(const float (&st)[R], u32& sv, u32 sv_end,
                                          const u32* saves, u32 after, float* state, u64 head,
                                          int dv, int col, int part, bool live) {
    while (sv < sv_end && saves[2 * sv] == after) {
        if (live) {
            float* dst = state + (u64)saves[2 * sv + 1] * head;
#pragma unroll
            for (int r = 0; r < R; ++r) dst[(u64)(part + 4 * r) * dv + col] = st[r];
        }
        ++sv;
    }
}

template <int DK, typename TM>
__device__ void gdn_recurrent_impl(float* core, const float* conv, const TM* mixed,
                                   const float* neg_a, const float* dt_bias, float* state,
                                   const u32* seq_starts, const u32* slots,
                                   const u32* save_starts, const u32* saves, int nk, int nv,
                                   int dv, int width, int chunk_min) {
    constexpr int R = DK / 4;
    __shared__ float qs[GDN_TILE][DK], ks[GDN_TILE][DK], vs[GDN_TILE][GDN_MAX_COLS];
    __shared__ float decay_s[GDN_TILE], beta_s[GDN_TILE], kq_s[GDN_TILE];
    pdl_start();
    const int s = blockIdx.z, h = blockIdx.y;
    const int cols = blockDim.x / 4, local = threadIdx.x / 4, part = threadIdx.x % 4;
    const int col0 = blockIdx.x * cols, col = col0 + local;
    const bool live = col < dv;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    const int kd = nk * DK, vd = nv * dv, channels = 2 * kd + vd;
    const int kh = h / (nv / nk);
    const u32 r0 = seq_starts[s], r1 = seq_starts[s + 1];
    if (gdn_chunked((int)(r1 - r0), chunk_min)) return;  // the chunked kernels take it
    const u64 head = (u64)nv * DK * dv;  // a slot's recurrent state
    // A padding row (slot GDN_NO_STATE) starts from zeros and writes no state.
    const bool real = slots[s] != GDN_NO_STATE;
    float* own = state + (real ? slots[s] : 0u) * head + (u64)h * DK * dv;
    float st[R];
#pragma unroll
    for (int r = 0; r < R; ++r) st[r] = live && real ? own[(u64)(part + 4 * r) * dv + col] : 0.f;
    state += (u64)h * DK * dv;  // saves: slot · head from here
    u32 sv = save_starts[s];
    const u32 sv_end = save_starts[s + 1];
    gdn_saves<R>(st, sv, sv_end, saves, 0, state, head, dv, col, part, live);
    const float scale = 1.0f / sqrtf((float)DK);
    const float na = neg_a[h], bias = dt_bias[h];
    for (u32 t0 = r0; t0 < r1; t0 += GDN_TILE) {
        const int n = min((u32)GDN_TILE, r1 - t0);
        __syncthreads();  // the previous tile is consumed
        // q and k: 2·n·DK/4 16-byte loads, eight in flight a thread before any is stored
        // (a one-warp block would otherwise wait for each in turn); v: a value a column.
        const int loads = 2 * n * (DK / 4), vloads = n * cols;
        for (int e0 = threadIdx.x; e0 < loads + vloads; e0 += GDN_INFLIGHT * blockDim.x) {
            u32x4 r[GDN_INFLIGHT];
#pragma unroll
            for (int u = 0; u < GDN_INFLIGHT; ++u) {
                const int e = e0 + u * blockDim.x;
                if (e < loads) {
                    const int tt = e / (DK / 2), which = (e / (DK / 4)) % 2;
                    const float* src = conv + (u64)(t0 + tt) * channels + which * kd + kh * DK;
                    r[u] = load_cached((const u32x4*)src + e % (DK / 4));
                } else if (e < loads + vloads) {
                    const int c = col0 + (e - loads) % cols, tt = (e - loads) / cols;
                    r[u].x = c < dv ? __float_as_uint(
                                          conv[(u64)(t0 + tt) * channels + 2 * kd + h * dv + c])
                                    : 0u;
                }
            }
#pragma unroll
            for (int u = 0; u < GDN_INFLIGHT; ++u) {
                const int e = e0 + u * blockDim.x;
                if (e < loads) {
                    const int tt = e / (DK / 2), which = (e / (DK / 4)) % 2;
                    float* dst = (which ? ks[tt] : qs[tt]) + 4 * (e % (DK / 4));
                    dst[0] = __uint_as_float(r[u].x);
                    dst[1] = __uint_as_float(r[u].y);
                    dst[2] = __uint_as_float(r[u].z);
                    dst[3] = __uint_as_float(r[u].w);
                } else if (e < loads + vloads) {
                    vs[(e - loads) / cols][(e - loads) % cols] = __uint_as_float(r[u].x);
                }
            }
        }
        if (threadIdx.x < n) {
            const TM* m = mixed + (u64)(t0 + threadIdx.x) * width + channels + vd;
            const float b = to_f32(m[h]), a = to_f32(m[nv + h]) + bias;
            const float softplus = a > 20.f ? a : log1pf(expf(a));
            beta_s[threadIdx.x] = gdn_sigmoid(b);
            decay_s[threadIdx.x] = expf(na * softplus);
        }
        __syncthreads();
        for (int v = warp; v < 2 * n; v += warps) {
            float* x = v < n ? qs[v] : ks[v - n];
            float ss = 0.f;
            for (int d = lane; d < DK; d += 32) ss += x[d] * x[d];
            const float inv = 1.0f / sqrtf(warp_sum(ss) + 1e-6f);
            const float mul = v < n ? inv * scale : inv;
            for (int d = lane; d < DK; d += 32) x[d] *= mul;
        }
        __syncthreads();
        for (int v = warp; v < n; v += warps) {
            float dot = 0.f;
            for (int d = lane; d < DK; d += 32) dot += qs[v][d] * ks[v][d];
            dot = warp_sum(dot);
            if (lane == 0) kq_s[v] = dot;
        }
        __syncthreads();
        for (int tt = 0; tt < n; ++tt) {
            const float decay = decay_s[tt], beta = beta_s[tt];
            float u = 0.f, w = 0.f;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                u += st[r] * ks[tt][part + 4 * r];
                w += st[r] * qs[tt][part + 4 * r];
            }
            u += __shfl_xor_sync(0xffffffffu, u, 1);
            w += __shfl_xor_sync(0xffffffffu, w, 1);
            u += __shfl_xor_sync(0xffffffffu, u, 2);
            w += __shfl_xor_sync(0xffffffffu, w, 2);
            const float delta = beta * (vs[tt][local] - decay * u);
#pragma unroll
            for (int r = 0; r < R; ++r) st[r] = st[r] * decay + ks[tt][part + 4 * r] * delta;
            const u64 row = t0 + tt;
            if (live && part == 0) core[row * vd + h * dv + col] = decay * w + delta * kq_s[tt];
            gdn_saves<R>(st, sv, sv_end, saves, (u32)(row + 1 - r0), state, head, dv, col, part,
                         live);
        }
    }
    if (live && real) {
#pragma unroll
        for (int r = 0; r < R; ++r) own[(u64)(part + 4 * r) * dv + col] = st[r];
    }
}

#define GDN_RECURRENT(dk, tm, TM)                                                                \
    extern "C" __global__ void gdn_recurrent_d##dk##_##tm(                                       \
        float* core, const float* conv, const TM* mixed, const float* neg_a,                     \
        const float* dt_bias, float* state, const u32* seq_starts, const u32* slots,             \
        const u32* save_starts, const u32* saves, int nk, int nv, int dv, int width,             \
        int chunk_min) {                                                                         \
        gdn_recurrent_impl<dk, TM>(core, conv, mixed, neg_a, dt_bias, state, seq_starts, slots, \
                                   save_starts, saves, nk, nv, dv, width, chunk_min);            \
    }
GDN_RECURRENT(16, f32, float)
GDN_RECURRENT(16, bf16, bf16)
GDN_RECURRENT(32, f32, float)
GDN_RECURRENT(32, bf16, bf16)
GDN_RECURRENT(64, f32, float)
GDN_RECURRENT(64, bf16, bf16)
GDN_RECURRENT(128, f32, float)
GDN_RECURRENT(128, bf16, bf16)
GDN_RECURRENT(256, f32, float)
GDN_RECURRENT(256, bf16, bf16)

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

// Shared memory of gdn_chunk_prep: q [C, DK + 4] and the decay products [C, C + 1] (X
// [C, DK + C] over both once they are used), k [C, DK + 4], A [C, C + 1], decay, β, γ [C].
// About 100 KB at DK 128: two blocks a multiprocessor.
template <int DK>
__device__ constexpr int gdn_prep_smem_floats() {
    return 2 * GDN_CHUNK * (DK + 4) + 2 * GDN_CHUNK * (GDN_CHUNK + 1) + 3 * GDN_CHUNK;
}

__device__ __forceinline__ float4 lds4(const float* p) { return *(const float4*)p; }
__device__ __forceinline__ float f4(const float4& v, int u) {
    return u == 0 ? v.x : u == 1 ? v.y : u == 2 ? v.z : v.w;
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
    constexpr int C = GDN_CHUNK, KP = DK + 4, CP = C + 1, XW = DK + C;
    GDN_SMEM(gdn_prep_smem_floats<DK>());
    float* qs = smem;           // [C][KP]
    float* dm = qs + C * KP;    // [C][CP]: dm[t][j] = e_j ⋯ e_t (j ≤ t), else 0
    float* xs = smem;           // [C][XW] over q and dm, once those are used
    float* ks = dm + C * CP;    // [C][KP]
    float* as = ks + C * KP;    // [C][CP]
    float* decay = as + C * CP; // [C]
    float* beta = decay + C;    // [C]
    float* gam = beta + C;      // [C]: γ_t = e_0 ⋯ e_t
    static_assert(C * KP + C * CP >= C * XW, "X fits over q and the decay products");
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
    // k_t·k_s and q_t·k_s: a thread a 4 × 4 tile, rows t = tg + 16a, columns s = g + 16b
    // (16-byte loads along d; the row padding keeps eight consecutive g on distinct banks).
    {
        static_assert(GDN_CHUNK_THREADS == 256 && C == 64, "a 4 x 4 tile a thread");
        const int tg = tid / 16, g = tid % 16;
        float kk[4][4], qk[4][4];
#pragma unroll
        for (int a = 0; a < 4; ++a)
#pragma unroll
            for (int b = 0; b < 4; ++b) kk[a][b] = qk[a][b] = 0.f;
        for (int d = 0; d < DK; d += 4) {
            float4 kt[4], qt[4], kv[4];
#pragma unroll
            for (int a = 0; a < 4; ++a) {
                kt[a] = lds4(ks + (tg + 16 * a) * KP + d);
                qt[a] = lds4(qs + (tg + 16 * a) * KP + d);
                kv[a] = lds4(ks + (g + 16 * a) * KP + d);
            }
#pragma unroll
            for (int a = 0; a < 4; ++a)
#pragma unroll
                for (int b = 0; b < 4; ++b)
#pragma unroll
                    for (int u = 0; u < 4; ++u) {
                        kk[a][b] += f4(kt[a], u) * f4(kv[b], u);
                        qk[a][b] += f4(qt[a], u) * f4(kv[b], u);
                    }
        }
#pragma unroll
        for (int a = 0; a < 4; ++a)
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                const int t = tg + 16 * a, s = g + 16 * b;
                as[t * CP + s] = s < t ? beta[t] * between(t, s) * kk[a][b] : 0.f;
                p_out[t * C + s] = s <= t && t < n ? between(t, s) * qk[a][b] : 0.f;
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
    // give them (a product over all threads, four partial sums), then its 16 × 16 diagonal
    // block is solved a thread a column, x_t = b_t − Σ_{s<t} A[t, s] x_s (chains of at most 15
    // terms instead of 63). Rows past n stay zero (their B and A rows are).
    for (int i = tid; i < C * XW; i += blockDim.x) {
        const int t = i / XW, col = i % XW;
        xs[i] = t >= n     ? 0.f
                : col < DK ? beta[t] * gam[t] * ks[t * KP + col]
                           : (col - DK == t ? beta[t] : 0.f);
    }
    __syncthreads();
    constexpr int RB = 16;
    for (int rb = 0; rb < n; rb += RB) {
        if (rb > 0) {
            for (int i = tid; i < RB * XW; i += blockDim.x) {
                const int t = rb + i / XW, col = i % XW;
                float a[4] = {0.f, 0.f, 0.f, 0.f};
                for (int s = 0; s < rb; s += 4)
#pragma unroll
                    for (int u = 0; u < 4; ++u) a[u] += as[t * CP + s + u] * xs[(s + u) * XW + col];
                xs[t * XW + col] -= (a[0] + a[1]) + (a[2] + a[3]);
            }
            __syncthreads();
        }
        for (int col = tid; col < XW; col += blockDim.x)
#pragma unroll
            for (int t = rb; t < rb + RB; ++t) {
                float x = xs[t * XW + col];
                for (int s = rb; s < t; ++s) x -= as[t * CP + s] * xs[s * XW + col];
                xs[t * XW + col] = x;
            }
        __syncthreads();
    }
    for (int i = tid; i < n * DK; i += blockDim.x) w_out[i] = xs[(i / DK) * XW + i % DK];
    for (int i = tid; i < C * C; i += blockDim.x) tb_out[i] = xs[(i / C) * XW + DK + i % C];
}

#define GDN_CHUNK_PREP(dk, tm, TM)                                                               \
    extern "C" __global__ void __launch_bounds__(GDN_CHUNK_THREADS)                              \
        gdn_chunk_prep_d##dk##_##tm(float* scratch, const float* conv, const TM* mixed,          \
                                    const float* neg_a, const float* dt_bias, const u32* plan,   \
                                    int seqs, int nk, int nv, int dv, int width) {               \
        gdn_chunk_prep_impl<dk, TM>(scratch, conv, mixed, neg_a, dt_bias, plan, seqs, nk, nv,   \
                                    dv, width);                                                  \
    }

// Shared memory of gdn_chunk_state: the state's columns [DK, BV], W, Qg, Kt [C, DK + 4], Tb, P
// [C, C + 4], v and δ [C, BV].
template <int DK>
__device__ constexpr int gdn_state_smem_floats() {
    return DK * GDN_BV + 3 * GDN_CHUNK * (DK + 4) + 2 * GDN_CHUNK * (GDN_CHUNK + 4) +
           2 * GDN_CHUNK * GDN_BV;
}

// The state's entries a thread of gdn_chunk_state owns (reads at the start, updates a chunk,
// saves and writes back): rows dg + 32i of columns 4cg .. 4cg + 3 of the block's BV, with
// cg = tid % 8, dg = tid / 8. f(d, local column, column) for each that exists.
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
                      [&](int d, int j, int col) { dst[(u64)d * dv + col] = hs[d * GDN_BV + j]; });
    }
    return sv;
}

// acc[a][e] += sign · Σ_k A[row_a][k] · B[k][4cg + e] over k < K, for rows row_0 = `a` and
// row_1 = a + 32 · lda (`a` points at row_0's first element), B's rows BV floats apart: a
// thread's 2 × 4 tile of a product, 16-byte shared loads.
template <int K>
__device__ __forceinline__ void gdn_tile_mac(float (&acc)[2][4], const float* a, int lda,
                                             const float* b, int cg, float sign) {
#pragma unroll 4
    for (int k = 0; k < K; k += 4) {
        const float4 a0 = lds4(a + k), a1 = lds4(a + 32 * lda + k);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const float4 x = lds4(b + (k + u) * GDN_BV + 4 * cg);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                acc[0][e] += sign * f4(a0, u) * f4(x, e);
                acc[1][e] += sign * f4(a1, u) * f4(x, e);
            }
        }
    }
}

// The state hand-off, chunk after chunk: a block per (BV state columns, value head, sequence)
// keeps S₀'s columns in shared memory and per chunk of n rows computes
//     δ = Tb V − W S₀                      [n, BV]
//     o = Qg S₀ + P δ                      into core
//     S₀ = γ_{n−1} S₀ + Ktᵀ δ
// each thread a 2 × 4 tile of δ and o (rows rg, rg + 32, columns 4cg ..) and its own 4 × 4
// of S₀ (gdn_owned), 16-byte shared loads; saves are written after their chunk's end.
template <int DK>
__device__ void gdn_chunk_state_impl(float* core, const float* conv, const float* scratch,
                                     float* state, const u32* plan, const u32* seq_starts,
                                     const u32* slots, const u32* save_starts, const u32* saves,
                                     int seqs, int chunk_min, int nk, int nv, int dv) {
    constexpr int C = GDN_CHUNK, BV = GDN_BV, DKP = DK + 4, CP = C + 4, DT = (DK + 31) / 32;
    static_assert(GDN_CHUNK_THREADS == 256 && C == 64 && BV == 32, "the tiles below");
    GDN_SMEM(gdn_state_smem_floats<DK>());
    float* hs = smem;          // [DK][BV]
    float* ws = hs + DK * BV;  // [C][DKP]
    float* qs = ws + C * DKP;  // [C][DKP]
    float* ks = qs + C * DKP;  // [C][DKP]
    float* tb = ks + C * DKP;  // [C][CP]
    float* ps = tb + C * CP;   // [C][CP]
    float* vs = ps + C * CP;   // [C][BV]
    float* ds = vs + C * BV;   // [C][BV]
    pdl_start();
    const int s = blockIdx.z, h = blockIdx.y, tid = threadIdx.x, col0 = blockIdx.x * BV;
    const u32 r0 = seq_starts[s];
    const int len = (int)(seq_starts[s + 1] - r0);
    if (!gdn_chunked(len, chunk_min)) return;
    const int cg = tid % 8, rg = tid / 8, dg = tid / 8;
    const int kd = nk * DK, vd = nv * dv, channels = 2 * kd + vd;
    const u64 head = (u64)nv * DK * dv;  // a slot's recurrent state
    // Slot 0xFFFFFFFF is a padding row's: no state, read zeros, write nothing.
    const bool pad = slots[s] == GDN_NO_STATE;
    float* own = state + (pad ? 0 : slots[s]) * head + (u64)h * DK * dv;
    state += (u64)h * DK * dv;  // saves: slot · head from here
    gdn_owned<DK>(tid, col0, dv, [&](int d, int j, int col) {
        hs[d * BV + j] = pad ? 0.f : own[(u64)d * dv + col];
    });
    if (col0 + BV > dv)  // columns past dv stay zero
        for (int i = tid; i < DK * BV; i += blockDim.x)
            if (col0 + i % BV >= dv) hs[i] = 0.f;
    u32 sv = save_starts[s], cut = sv;
    const u32 sv_end = save_starts[s + 1], write_end = pad ? sv : sv_end;  // chunks still cut
    sv = gdn_chunk_saves<DK>(hs, sv, write_end, saves, 0, state, head, tid, col0, dv);
    // Copies in flight while the block computes: a chunk's W, Qg, Tb, P and v (`main`) go out
    // once the previous chunk's δ and o are done, its Kt at its start (phase C reads the
    // previous Kt until then).
    auto issue_main = [&](const float* sc, int lo, int n) {
        for (int i = tid; i < 2 * C * (DK / 4); i += blockDim.x)
            cp_async<16>(ws + i / (DK / 4) * DKP + 4 * (i % (DK / 4)), sc + 4 * i,
                         i / (DK / 4) % C < n);
        for (int i = tid; i < 2 * C * (C / 4); i += blockDim.x)
            cp_async<16>(tb + i / (C / 4) * CP + 4 * (i % (C / 4)), sc + 3 * C * DK + 4 * i, true);
        for (int i = tid; i < C * BV; i += blockDim.x) {
            const int t = i / BV, c = col0 + i % BV;
            const bool in = t < n && c < dv;
            const float* src = conv + (u64)(r0 + lo + t) * channels + 2 * kd + h * dv + c;
            cp_async<4>(vs + i, in ? src : conv, in);
        }
        cp_async_commit();
    };
    auto chunk_at = [&](u32 chunk) {
        return scratch + ((u64)chunk * nv + h) * gdn_chunk_floats<DK>();
    };
    u32 chunk = plan[s];
    int hi = gdn_chunk_end(0, len, saves, cut, sv_end);
    issue_main(chunk_at(chunk), 0, hi);
    for (int lo = 0; lo < len; ++chunk) {
        const int n = hi - lo;
        const float* sc = chunk_at(chunk);
        __syncthreads();  // the previous chunk's phase C is done: Kt and S₀ are free
        for (int i = tid; i < C * (DK / 4); i += blockDim.x)
            cp_async<16>(ks + i / (DK / 4) * DKP + 4 * (i % (DK / 4)), sc + 2 * C * DK + 4 * i,
                         i / (DK / 4) < n);
        cp_async_commit();
        const float gamma = sc[3 * C * DK + 2 * C * C + n - 1];
        cp_async_wait<1>();  // main is in, Kt may still be coming
        __syncthreads();
        // δ = Tb V − W S₀ (Tb and v are zero past n: fixed counts pipeline)
        float acc[2][4] = {};
        gdn_tile_mac<C>(acc, tb + rg * CP, CP, vs, cg, 1.f);
        gdn_tile_mac<DK>(acc, ws + rg * DKP, DKP, hs, cg, -1.f);
#pragma unroll
        for (int a = 0; a < 2; ++a) {
            const int t = rg + 32 * a;
            const bool in = t < n;  // rows past n: zero (Tb's and W's are already)
            *(float4*)(ds + t * BV + 4 * cg) =
                make_float4(in ? acc[a][0] : 0.f, in ? acc[a][1] : 0.f, in ? acc[a][2] : 0.f,
                            in ? acc[a][3] : 0.f);
        }
        __syncthreads();
        // o = Qg S₀ + P δ (P and δ are zero past n)
#pragma unroll
        for (int a = 0; a < 2; ++a)
#pragma unroll
            for (int u = 0; u < 4; ++u) acc[a][u] = 0.f;
        gdn_tile_mac<DK>(acc, qs + rg * DKP, DKP, hs, cg, 1.f);
        gdn_tile_mac<C>(acc, ps + rg * CP, CP, ds, cg, 1.f);
#pragma unroll
        for (int a = 0; a < 2; ++a) {
            const int t = rg + 32 * a;
            if (t >= n) continue;
            float* o = core + (u64)(r0 + lo + t) * vd + h * dv;
#pragma unroll
            for (int e = 0; e < 4; ++e)
                if (col0 + 4 * cg + e < dv) o[col0 + 4 * cg + e] = acc[a][e];
        }
        const int next = hi < len ? gdn_chunk_end(hi, len, saves, cut, sv_end) : hi;
        __syncthreads();  // every thread has read S₀, W, Qg, Tb, P and v
        if (next > hi) {
            issue_main(chunk_at(chunk + 1), hi, next - hi);
            cp_async_wait<1>();  // Kt is in
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        // S₀ = γ S₀ + Ktᵀ δ, each thread its own entries
        float hn[DT][4];
#pragma unroll
        for (int i = 0; i < DT; ++i) {
            const int d = min(dg + 32 * i, DK - 1);  // rows past DK (DK 16) are computed, not kept
            const float4 x = lds4(hs + d * BV + 4 * cg);
#pragma unroll
            for (int e = 0; e < 4; ++e) hn[i][e] = gamma * f4(x, e);
        }
#pragma unroll 8
        for (int t = 0; t < C; ++t) {  // Kt and δ are zero past n
            const float4 x = lds4(ds + t * BV + 4 * cg);
#pragma unroll
            for (int i = 0; i < DT; ++i) {
                const float k = ks[t * DKP + min(dg + 32 * i, DK - 1)];
#pragma unroll
                for (int e = 0; e < 4; ++e) hn[i][e] += k * f4(x, e);
            }
        }
#pragma unroll
        for (int i = 0; i < DT; ++i)
            if (dg + 32 * i < DK)
                *(float4*)(hs + (dg + 32 * i) * BV + 4 * cg) =
                    make_float4(hn[i][0], hn[i][1], hn[i][2], hn[i][3]);
        sv = gdn_chunk_saves<DK>(hs, sv, write_end, saves, (u32)hi, state, head, tid, col0, dv);
        lo = hi;
        hi = next;
    }
    if (!pad)
        gdn_owned<DK>(tid, col0, dv,
                      [&](int d, int j, int col) { own[(u64)d * dv + col] = hs[d * BV + j]; });
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

// --- 4. the fused decode step ------------------------------------------------------------------

// A block of gdn_decode: at most 1024 threads (4 a state column of each of its value heads'
// `cols` columns), so its v and outputs stage at most 256 floats; its states' rows sit
// GDN_DECODE_PAD floats past `cols` apart in shared memory (a row stride of 8 mod 32 words: the
// 4 threads of a column, rows part + 4r, hit 4 different banks).
#define GDN_DECODE_COLS 256
#define GDN_DECODE_PAD 8

// A load from L2 (not L1, which is not coherent with other multiprocessors' writes).
__device__ __forceinline__ float gdn_ldcg(const float* p) {
#ifdef METRALE_HOST_EMULATION
    return *(const volatile float*)p;
#else
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
    return v;
#endif
}

// Conv + SiLU of channel c of a decode row (its window the slot's last K − 1 inputs, then the
// row's), as gdn_conv computes a sequence's first row. With `write`, also writes the window
// each save asks for and then the slot's new window (the caller is the one thread that writes
// (slot, c) in the step, after every reader of the old window is done).
template <typename TM>
__device__ __forceinline__ float gdn_decode_conv(const TM* row, const float* taps_all,
                                                 float* conv_state, bool real, u32 slot,
                                                 const u32* saves, u32 sv0, u32 sv1, int c,
                                                 int channels, int k, bool write) {
    const u64 window = (u64)(k - 1) * channels;
    float* own = conv_state + (real ? slot : 0u) * window;
    float taps[GDN_MAX_K], win[GDN_MAX_K - 1];
#pragma unroll
    for (int j = 0; j < GDN_MAX_K; ++j) taps[j] = j < k ? taps_all[(u64)c * k + j] : 0.f;
#pragma unroll
    for (int m = 0; m < GDN_MAX_K - 1; ++m)
        win[m] = real && m < k - 1 ? own[(u64)m * channels + c] : 0.f;
    const float now = to_f32(row[c]);
    // Input r of the sequence (0: this row, r < 0: the window's), without dynamic indexing.
    auto x = [&](int r) -> float {
        if (r >= 0) return now;
        float v = 0.f;
#pragma unroll
        for (int m = 0; m < GDN_MAX_K - 1; ++m)
            if (m == k - 1 + r) v = win[m];
        return v;
    };
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < GDN_MAX_K; ++j)
        if (j < k) acc += taps[j] * x(j - (k - 1));
    if (write) {
        for (u32 sv = sv0; sv < sv1; ++sv) {
            const int after = (int)saves[2 * sv];
            float* to = conv_state + saves[2 * sv + 1] * window;
            for (int m = 0; m < k - 1; ++m) to[(u64)m * channels + c] = x(after - (k - 1) + m);
        }
        if (real)
            for (int m = 0; m < k - 1; ++m) own[(u64)m * channels + c] = x(1 - (k - 1) + m);
    }
    return gdn_silu(acc);
}

// A decode step (one row a sequence) in one launch; the header (4) has the design. Block
// (split, key head kh, sequence s) takes columns split · cols ..< + cols of the state of each
// of kh's value heads (dv = DK = splits · cols), 4 threads a column.
template <int DK, typename TM, typename TO>
__device__ void gdn_decode_impl(TO* out, float* core, u32* tickets, const TM* mixed,
                                const float* taps, float* conv_state, const float* neg_a,
                                const float* dt_bias, const float* norm_w, float* state,
                                const u32* slots, const u32* save_starts, const u32* saves,
                                int nk, int nv, int k, int width, float eps) {
    constexpr int R = DK / 4, dv = DK;
    __shared__ __attribute__((aligned(16))) float qs[DK], ks[DK];
    __shared__ float vs[GDN_DECODE_COLS], os[GDN_DECODE_COLS];
    __shared__ float decay_s[GDN_DECODE_COLS / 4], beta_s[GDN_DECODE_COLS / 4], kq_s;
    __shared__ int last_s;
    GDN_SMEM(4 * GDN_DECODE_COLS * (DK + GDN_DECODE_PAD));  // hs: [group][DK][SP]
    float* const hs = smem;
    pdl_start();
    const int splits = gridDim.x, cols = dv / splits, c0 = blockIdx.x * cols;
    const int kh = blockIdx.y, s = blockIdx.z, tid = threadIdx.x, SP = cols + GDN_DECODE_PAD;
    const int warp = tid / 32, lane = tid % 32, warps = blockDim.x / 32;
    const int group = nv / nk, kd = nk * DK, vd = nv * dv, channels = 2 * kd + vd;
    const int h0 = kh * group;  // the block's first value head
    const u32 slot = slots[s], sv0 = save_starts[s], sv1 = save_starts[s + 1];
    // A padding row (slot GDN_NO_STATE) starts from zeros and writes no state.
    const bool real = slot != GDN_NO_STATE;
    const TM* row = mixed + (u64)s * width;  // row s is sequence s's
    const u64 head = (u64)nv * DK * dv;      // a slot's recurrent state
    // (a) The block's columns of its states (value heads h0 .. h0 + group, contiguous in the
    // slot) into hs, 16 bytes a copy.
    const int quads = group * DK * (cols / 4);
    float* const first = state + (u64)h0 * DK * dv + c0;  // + slot · head: the slot's
    auto at = [&](int i, float*& g, float*& sh) {  // copy i in global (from first) and shared
        const int hr = i / (cols / 4), c4 = i % (cols / 4);  // (head, row), column / 4
        g = first + (u64)hr * dv + 4 * c4;
        sh = hs + hr * SP + 4 * c4;
    };
    for (int i = tid; i < quads; i += blockDim.x) {
        float *g, *sh;
        at(i, g, sh);
        cp_async<16>(sh, real ? g + slot * head : state, real);
    }
    cp_async_commit();
    // (b) Conv + SiLU: q and k (their windows are written at the end, by the key head's last
    // block), then the v of the block's columns (its own: windows written now).
    for (int i = tid; i < 2 * DK + group * cols; i += blockDim.x) {
        const int j = i - 2 * DK;
        const int c = i < DK       ? kh * DK + i
                      : i < 2 * DK ? kd + kh * DK + i - DK
                                   : 2 * kd + (h0 + j / cols) * dv + c0 + j % cols;
        const float x = gdn_decode_conv(row, taps, conv_state, real, slot, saves, sv0, sv1, c,
                                        channels, k, i >= 2 * DK);
        (i < DK ? qs[i] : i < 2 * DK ? ks[i - DK] : vs[j]) = x;
    }
    if (tid < group) {
        const TM* m = row + channels + vd;
        const float b = to_f32(m[h0 + tid]), a = to_f32(m[nv + h0 + tid]) + dt_bias[h0 + tid];
        const float softplus = a > 20.f ? a : log1pf(expf(a));
        beta_s[tid] = gdn_sigmoid(b);
        decay_s[tid] = expf(neg_a[h0 + tid] * softplus);
    }
    __syncthreads();
    // (c) q, k L2-normalised (q scaled by 1/√dk), k·q.
    const float scale = 1.0f / sqrtf((float)DK);
    for (int v = warp; v < 2; v += warps) {
        float* x = v == 0 ? qs : ks;
        float ss = 0.f;
        for (int d = lane; d < DK; d += 32) ss += x[d] * x[d];
        const float inv = 1.0f / sqrtf(warp_sum(ss) + 1e-6f);
        const float mul = v == 0 ? inv * scale : inv;
        for (int d = lane; d < DK; d += 32) x[d] *= mul;
    }
    __syncthreads();
    if (warp == 0) {
        float dot = 0.f;
        for (int d = lane; d < DK; d += 32) dot += qs[d] * ks[d];
        dot = warp_sum(dot);
        if (lane == 0) kq_s = dot;
    }
    cp_async_wait<0>();
    __syncthreads();
    // (e) The block's columns out of hs to every save slot of `after` rows.
    auto save = [&](u32 after) {
        for (u32 sv = sv0; sv < sv1; ++sv) {
            if (saves[2 * sv] != after) continue;
            float* to = first + saves[2 * sv + 1] * head;
            for (int i = tid; i < quads; i += blockDim.x) {
                float *g, *sh;
                at(i, g, sh);
                *(float4*)(to + (g - first)) = lds4(sh);
            }
        }
    };
    save(0);
    __syncthreads();  // saves of 0 rows have read hs
    // (d) The delta rule for the thread's column, rows part + 4r of it in hs.
    const int hl = tid / (4 * cols), col = tid % (4 * cols) / 4, part = tid % 4;
    const bool live = hl < group;  // threads past the heads (rounding to warps) join shuffles
    float* const hc = hs + (live ? hl : 0) * DK * SP + col;
    const float decay = live ? decay_s[hl] : 0.f, beta = live ? beta_s[hl] : 0.f;
    float u = 0.f, w = 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const float x = live ? hc[(part + 4 * r) * SP] : 0.f;
        u += x * ks[part + 4 * r];
        w += x * qs[part + 4 * r];
    }
    u += __shfl_xor_sync(0xffffffffu, u, 1);
    w += __shfl_xor_sync(0xffffffffu, w, 1);
    u += __shfl_xor_sync(0xffffffffu, u, 2);
    w += __shfl_xor_sync(0xffffffffu, w, 2);
    const float delta = beta * ((live ? vs[hl * cols + col] : 0.f) - decay * u);
    if (live) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            float* x = hc + (part + 4 * r) * SP;
            *x = *x * decay + ks[part + 4 * r] * delta;
        }
        if (part == 0) {
            const float o = decay * w + delta * kq_s;
            if (splits == 1)
                os[hl * dv + col] = o;
            else
                core[(u64)s * vd + (u64)(h0 + hl) * dv + c0 + col] = o;
        }
    }
    __syncthreads();
    save(1);
    if (real)
        for (int i = tid; i < quads; i += blockDim.x) {
            float *g, *sh;
            at(i, g, sh);
            *(float4*)(g + slot * head) = lds4(sh);
        }
    // The key head's last block to get here (all of them, when one takes every column) writes
    // q and k's windows (every block has read the old ones by now, none has written them) and
    // the gated RMSNorm of whole value heads (the others' columns are in core by now).
    if (splits > 1) {
        __threadfence();
        __syncthreads();
        if (tid == 0) {
            u32* ticket = tickets + (u64)s * nk + kh;
            last_s = atomicAdd(ticket, 1u) == (u32)splits - 1;
            if (last_s) *ticket = 0u;  // for the next launch
        }
        __syncthreads();
        if (!last_s) return;
        __threadfence();
    }
    for (int i = tid; i < 2 * DK; i += blockDim.x)
        gdn_decode_conv(row, taps, conv_state, real, slot, saves, sv0, sv1,
                        (i < DK ? 0 : kd - DK) + kh * DK + i, channels, k, true);
    // (f) The gated RMSNorm, a warp per value head.
    for (int v = warp; v < group; v += warps) {
        const u64 o = (u64)s * vd + (u64)(h0 + v) * dv;
        auto x = [&](int d) { return splits == 1 ? os[v * dv + d] : gdn_ldcg(core + o + d); };
        float ss = 0.f;
        for (int d = lane; d < dv; d += 32) ss += x(d) * x(d);
        const float inv = 1.0f / sqrtf(warp_sum(ss) / dv + eps);
        const TM* z = row + channels + (u64)(h0 + v) * dv;
        for (int d = lane; d < dv; d += 32)
            out[o + d] = from_f32<TO>(norm_w[d] * (x(d) * inv) * gdn_silu(to_f32(z[d])));
    }
}

#define GDN_DECODE(dk, tm, TM, to, TO)                                                           \
    extern "C" __global__ void __launch_bounds__(1024) gdn_decode_d##dk##_##tm##_##to(           \
        TO* out, float* core, u32* tickets, const TM* mixed, const float* taps,                  \
        float* conv_state, const float* neg_a, const float* dt_bias, const float* norm_w,        \
        float* state, const u32* slots, const u32* save_starts, const u32* saves, int nk,        \
        int nv, int k, int width, float eps) {                                                   \
        gdn_decode_impl<dk, TM, TO>(out, core, tickets, mixed, taps, conv_state, neg_a,          \
                                    dt_bias, norm_w, state, slots, save_starts, saves, nk, nv,   \
                                    k, width, eps);                                              \
    }
#define GDN_DECODES(dk)                          \
    GDN_DECODE(dk, f32, float, bf16, bf16)       \
    GDN_DECODE(dk, bf16, bf16, bf16, bf16)       \
    GDN_DECODE(dk, f32, float, f32, float)       \
    GDN_DECODE(dk, bf16, bf16, f32, float)
GDN_DECODES(16)
GDN_DECODES(32)
GDN_DECODES(64)
GDN_DECODES(128)
GDN_DECODES(256)

// --- elementwise -------------------------------------------------------------------------------

__device__ __forceinline__ float load_any(const void* p, u64 i, int is_bf16) {
    return is_bf16 ? to_f32(((const bf16*)p)[i]) : ((const float*)p)[i];
}
__device__ __forceinline__ void store_any(void* p, u64 i, int is_bf16, float v) {
    if (is_bf16)
        ((bf16*)p)[i] = from_f32<bf16>(v);
    else
        ((float*)p)[i] = v;
}

#define GRID_STRIDE(i, n) \
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (u64)gridDim.x * blockDim.x)

// x *= sigmoid(gate)
extern "C" __global__ void sigmoid_mul(void* x, int x_bf16, const void* gate, int gate_bf16, u64 n) {
    pdl_start();
    GRID_STRIDE(i, n) {
        store_any(x, i, x_bf16, load_any(x, i, x_bf16) * gdn_sigmoid(load_any(gate, i, gate_bf16)));
    }
}

// x += y
extern "C" __global__ void add_assign(void* x, int x_bf16, const void* y, int y_bf16, u64 n) {
    pdl_start();
    GRID_STRIDE(i, n) { store_any(x, i, x_bf16, load_any(x, i, x_bf16) + load_any(y, i, y_bf16)); }
}

// out[t, c] = routed[t, c] + sigmoid(gate[t]) · out[t, c]
extern "C" __global__ void add_gated(void* out, int out_bf16, const void* routed, int routed_bf16,
                                     const void* gate, int gate_bf16, u64 rows, u64 cols) {
    pdl_start();
    GRID_STRIDE(i, rows * cols) {
        const float g = gdn_sigmoid(load_any(gate, i / cols, gate_bf16));
        store_any(out, i, out_bf16, load_any(routed, i, routed_bf16) + g * load_any(out, i, out_bf16));
    }
}

// Row `to` of an f32 [rows, n] tensor = row `from` (copy), or zeros when zero != 0.
extern "C" __global__ void state_row(float* t, u64 n, u64 from, u64 to, int zero) {
    pdl_start();
    GRID_STRIDE(i, n) { t[to * n + i] = zero ? 0.f : t[from * n + i]; }
}
