// Qwen3.5's hybrid layers beyond Qwen3's ops: the Gated DeltaNet mixer (engine
// backend/cpu/hybrid.rs is the reference, op for op) and the small elementwise ops around it.
//
// gated_delta_net runs as three steps over the step's rows (sequences back to back, each with
// its state slot and its saves, uploaded once a step with the batch, see batch.rs), or a
// decode step as the one launch of 4:
//
// 1. gdn_conv_<mixed>: causal depthwise conv over time + SiLU of the qkv columns of `mixed`,
//    written as f32 `[T, C]`. Grid (C / 256, ⌈T / GDN_CONV_ROWS⌉ + S). A block row y below
//    ⌈T / GDN_CONV_ROWS⌉ serves the GDN_CONV_ROWS rows from y · GDN_CONV_ROWS: a thread per
//    channel loads all of them and the K − 1 before at once (every load in flight together),
//    then slides the window down them, summing the K taps over rows r − K + 1 ..= r for each
//    row r whose window lies inside its sequence (the others are the sequence block row's; a
//    block with none, as in a decode step, leaves before loading): each input is read once,
//    not K times. A block row ⌈T / GDN_CONV_ROWS⌉ + s serves sequence
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
// 2b. The chunked form for prefill (flash-linear-attention's chunk_gated_delta_rule; its
//    products on tensor cores at f32's accuracy, hybrid_chunk.cu), dk ≤ 128. A sequence is cut into chunks of GDN_CHUNK = 64 rows, and also at
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
#define GDN_CONV_ROWS 32  // gdn_kernels.rs CONV_ROWS
#define GDN_NO_STATE 0xFFFFFFFFu  // kv_cache::NO_STATE: a padding row's slot
#define GDN_MAX_COLS 32
#define GDN_MAX_K 8
#define GDN_INFLIGHT 8

__device__ __forceinline__ float gdn_silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float gdn_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// --- 1. the causal conv ------------------------------------------------------------------------

// Rows y0 ..< y0 + GDN_CONV_ROWS of gdn_conv (see 1.): the thread's channel c, its taps aligned
// to the window's end (tap j at GDN_MAX_K − k + j, the others unused).
template <typename TM>
__device__ __forceinline__ void gdn_conv_rows(float* out, const TM* mixed,
                                              const float (&taps)[GDN_MAX_K], float b, bool bias,
                                              unsigned work, int y0, int rows, int channels,
                                              int k, int width, int c) {
    constexpr int R = GDN_CONV_ROWS, W = GDN_MAX_K - 1;
    // xs[W + i] = input y0 + i; xs[W − 1 − m] = input y0 − 1 − m for m < k − 1 (rows before 0
    // and taps past k are never summed)
    float xs[W + R];
#pragma unroll
    for (int m = 0; m < W; ++m) {
        const int r = y0 - W + m;
        xs[m] = m >= GDN_MAX_K - k && r >= 0 ? to_f32(mixed[(u64)r * width + c]) : 0.f;
    }
#pragma unroll
    for (int i = 0; i < R; ++i)
        xs[W + i] = y0 + i < rows ? to_f32(mixed[(u64)(y0 + i) * width + c]) : 0.f;
#pragma unroll
    for (int i = 0; i < R; ++i) {
        const int r = y0 + i;
        if (!(work >> i & 1u)) continue;  // past T, or the sequence's block row's
        float acc = 0.f;  // the taps in order, as the sequence's rows and the CPU
#pragma unroll
        for (int m = 0; m < GDN_MAX_K; ++m)
            if (m >= GDN_MAX_K - k) acc += taps[m] * xs[i + m];
        out[(u64)r * channels + c] = gdn_silu(bias ? acc + b : acc);
    }
}

// `bias` (Mamba-2's conv bias, mamba2.cu) is added after the taps, before the SiLU; the Gated
// DeltaNet passes none.
template <typename TM>
__device__ void gdn_conv_impl(float* out, const TM* mixed, const float* taps_all, const float* bias,
                              float* conv_state, const u32* row_seq, const u32* seq_starts,
                              const u32* slots, const u32* save_starts, const u32* saves, int rows,
                              int channels, int k, int width) {
    pdl_start();
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int tiles = (rows + GDN_CONV_ROWS - 1) / GDN_CONV_ROWS, y = blockIdx.y;
    if (y < tiles) {
        // The rows this block computes, a bit each (a warp, a lane a row): those whose window
        // lies inside their sequence. None (a decode step's rows): the block leaves at once.
        static_assert(GDN_CONV_ROWS == 32, "a lane a row");
        __shared__ unsigned work;
        const int y0 = y * GDN_CONV_ROWS;
        if (threadIdx.x < 32) {
            const int r = y0 + (int)threadIdx.x;
            const bool row = r < rows && r - (int)seq_starts[row_seq[r < rows ? r : 0]] >= k - 1;
            const unsigned w = __ballot_sync(0xffffffffu, row);
            if (threadIdx.x == 0) work = w;
        }
        __syncthreads();
        if (c >= channels || work == 0) return;
        float taps[GDN_MAX_K];
#pragma unroll
        for (int m = 0; m < GDN_MAX_K; ++m)
            taps[m] = m >= GDN_MAX_K - k ? taps_all[(u64)c * k + m - (GDN_MAX_K - k)] : 0.f;
        gdn_conv_rows(out, mixed, taps, bias ? bias[c] : 0.f, bias != nullptr, work, y0, rows,
                      channels, k, width, c);
        return;
    }
    if (c >= channels) return;
    const float b = bias ? bias[c] : 0.f;
    float taps[GDN_MAX_K];
#pragma unroll
    for (int j = 0; j < GDN_MAX_K; ++j) taps[j] = j < k ? taps_all[(u64)c * k + j] : 0.f;
    const int s = y - tiles;
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
        out[(u64)(r0 + i) * channels + c] = gdn_silu(bias ? acc + b : acc);
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
        gdn_conv_impl(out, mixed, taps, nullptr, conv_state, row_seq, seq_starts, slots,        \
                      save_starts, saves, rows, channels, k, width);                            \
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
