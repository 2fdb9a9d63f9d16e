// Nemotron-H's Mamba-2 mixer after its input projection (engine backend/cpu/mamba2.rs is the
// reference, op for op) and its relu² activation. `mixed` `[T, width]` is z | xBC | dt per row
// (z and x `nh·p` channels, B and C `G·N` each, dt `nh`). Over the step's rows (sequences back
// to back, each with its state slot and its saves, as the Gated DeltaNet's: hybrid.cu):
//
// 1. mamba2_conv_<mixed>: hybrid.cu's gdn_conv (the same kernel body, the same window and save
//    handling) over the xBC columns (from column x_at), with the conv bias added before the
//    SiLU, into f32 conv `[T, C]`.
// 2. The scan, from and into each slot's state `[nh, p, N]`: sequences of at least `chunk_min`
//    rows take the chunked SSD kernels (mamba2_chunk.cu), the others mamba2_scan_n<N>_<mixed>,
//    token by token. Channel rows are independent (row i of a head's state depends only on
//    x_t[i] and the head's shared dt_t, B_t, C_t), so a block takes MAMBA2_ROWS rows of one
//    (sequence, head): grid (p / MAMBA2_ROWS, nh, S), four threads a row, thread `part`
//    holding the row's entries 16q + 4·part ..< + 4 (q < N / 16) in registers, f32: a warp's
//    16-byte loads of one q cover each row's 64 contiguous bytes (whole sectors). Per token,
//        dt  = clamp(softplus(dt_raw + dt_bias), lo, hi)
//        S   = exp(dt · A) · S + (dt · x) Bᵀ
//        y   = S C + D · x                (partial sums, then two xor shuffles)
//    Tiles of MAMBA2_TILE tokens stage B and C of the head's group, x of the block's rows and
//    dt in shared memory first. After row `after` of the sequence a thread writes its entries
//    to every save slot of that `after` (0 included); at the end to the slot. The output is
//    f32 `[T, nh·p]` (pre-norm). It stays for the short sequences of a step (speculative
//    verification, a prompt's tail) and the shapes the chunked kernels do not fit.
// 3. mamba2_norm_<mixed>_<out>: the gated grouped RMSNorm, a block per (row, group):
//    g = y · silu(z), out = w · g / rms(g) over the group's nh·p / G channels.
// A decode step (one row a sequence) takes the same launches (a one-launch decode kernel measured
// slower at batch 1, 16 and 64: performance log part 15).
// A sequence whose slot is GDN_NO_STATE is a padding row of a CUDA graph's bucket: it starts
// from a zero window and state and writes neither.
//
// relu2: out = relu(x)² elementwise, either activation type for each operand (a flag says bf16).

#define MAMBA2_ROWS 32
#define MAMBA2_TILE 16

// --- 1. the causal conv, with its bias ---------------------------------------------------------

#define MAMBA2_CONV(tm, TM)                                                                      \
    extern "C" __global__ void mamba2_conv_##tm(                                                 \
        float* out, const TM* mixed, const float* taps, const float* bias, float* conv_state,    \
        const u32* row_seq, const u32* seq_starts, const u32* slots, const u32* save_starts,     \
        const u32* saves, int rows, int channels, int k, int width, int x_at) {                  \
        gdn_conv_impl(out, mixed + x_at, taps, bias, conv_state, row_seq, seq_starts, slots,     \
                      save_starts, saves, rows, channels, k, width);                            \
    }
MAMBA2_CONV(f32, float)
MAMBA2_CONV(bf16, bf16)

// --- 2. the selective scan ---------------------------------------------------------------------

// Thread `part`'s entries of row `i` (float4 q at 16q + 4·part) to `dst` (a head's state).
template <int N>
__device__ __forceinline__ void mamba2_store(float* dst, const float (&st)[N / 4], int i, int part) {
#pragma unroll
    for (int q = 0; q < N / 16; ++q)
        *(float4*)(dst + (u64)i * N + 16 * q + 4 * part) =
            make_float4(st[4 * q], st[4 * q + 1], st[4 * q + 2], st[4 * q + 3]);
}

template <int N, typename TM>
__device__ void mamba2_scan_impl(float* y, const float* conv, const TM* mixed, const float* neg_a,
                                 const float* dt_bias, const float* d_skip, float* state,
                                 const u32* seq_starts, const u32* slots, const u32* save_starts,
                                 const u32* saves, int nh, int p, int groups, int width, int dt_at,
                                 float dt_lo, float dt_hi, int chunk_min) {
    __shared__ float4 bs[MAMBA2_TILE][N / 4], cs[MAMBA2_TILE][N / 4];  // B, C of the head's group
    __shared__ float xs[MAMBA2_TILE][MAMBA2_ROWS], dts[MAMBA2_TILE];
    pdl_start();
    const int s = blockIdx.z, h = blockIdx.y;
    const int rows = blockDim.x / 4, local = threadIdx.x / 4, part = threadIdx.x % 4;
    const int i0 = blockIdx.x * rows, i = i0 + local;
    const bool live = i < p;
    const int inner = nh * p, gn = groups * N, channels = inner + 2 * gn;
    const int g = h / (nh / groups);
    const u32 r0 = seq_starts[s], r1 = seq_starts[s + 1];
    if (gdn_chunked((int)(r1 - r0), chunk_min)) return;  // the chunked kernels take it
    const u64 slot_len = (u64)inner * N;
    // A padding row (slot GDN_NO_STATE) starts from zeros and writes no state.
    const bool real = slots[s] != GDN_NO_STATE;
    float* head = state + (u64)h * p * N;  // a slot's head h at + slot · slot_len
    float st[N / 4];
#pragma unroll
    for (int q = 0; q < N / 16; ++q) {
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (live && real) v = *(const float4*)(head + slots[s] * slot_len + (u64)i * N + 16 * q + 4 * part);
        st[4 * q] = v.x, st[4 * q + 1] = v.y, st[4 * q + 2] = v.z, st[4 * q + 3] = v.w;
    }
    u32 sv = save_starts[s];
    const u32 sv_end = save_starts[s + 1];
    // Every save of `after` rows gets this thread's entries.
    auto saves_at = [&](u32 after) {
        while (sv < sv_end && saves[2 * sv] == after) {
            if (live) mamba2_store<N>(head + saves[2 * sv + 1] * slot_len, st, i, part);
            ++sv;
        }
    };
    saves_at(0);
    const float na = neg_a[h], bias = dt_bias[h], dh = d_skip[h];
    for (u32 t0 = r0; t0 < r1; t0 += MAMBA2_TILE) {
        const int n = min((u32)MAMBA2_TILE, r1 - t0);
        __syncthreads();  // the previous tile is consumed
        for (int e = threadIdx.x; e < 2 * n * N; e += blockDim.x) {
            const int tt = e / (2 * N), which = (e / N) % 2, j = e % N;
            const float v = conv[(u64)(t0 + tt) * channels + inner + which * gn + g * N + j];
            ((float*)(which ? cs : bs)[tt])[j] = v;
        }
        for (int e = threadIdx.x; e < n * rows; e += blockDim.x) {
            const int tt = e / rows, r = e % rows;
            xs[tt][r] = i0 + r < p ? conv[(u64)(t0 + tt) * channels + h * p + i0 + r] : 0.f;
        }
        if (threadIdx.x < n) {
            const float a = to_f32(mixed[(u64)(t0 + threadIdx.x) * width + dt_at + h]) + bias;
            const float softplus = a > 20.f ? a : log1pf(expf(a));
            dts[threadIdx.x] = fminf(fmaxf(softplus, dt_lo), dt_hi);
        }
        __syncthreads();
        for (int tt = 0; tt < n; ++tt) {
            const float dt = dts[tt], decay = expf(dt * na), x = xs[tt][local], dx = dt * x;
            float acc = 0.f;
#pragma unroll
            for (int q = 0; q < N / 16; ++q) {
                const float4 b = bs[tt][4 * q + part], c = cs[tt][4 * q + part];
                float* r = &st[4 * q];
                r[0] = r[0] * decay + dx * b.x;
                r[1] = r[1] * decay + dx * b.y;
                r[2] = r[2] * decay + dx * b.z;
                r[3] = r[3] * decay + dx * b.w;
                acc += r[0] * c.x + r[1] * c.y + r[2] * c.z + r[3] * c.w;
            }
            acc += __shfl_xor_sync(0xffffffffu, acc, 1);
            acc += __shfl_xor_sync(0xffffffffu, acc, 2);
            const u64 row = t0 + tt;
            if (live && part == 0) y[row * inner + h * p + i] = acc + dh * x;
            saves_at((u32)(row + 1 - r0));
        }
    }
    if (live && real) mamba2_store<N>(head + slots[s] * slot_len, st, i, part);
}

#define MAMBA2_SCAN(n, tm, TM)                                                                   \
    extern "C" __global__ void mamba2_scan_n##n##_##tm(                                          \
        float* y, const float* conv, const TM* mixed, const float* neg_a, const float* dt_bias,  \
        const float* d_skip, float* state, const u32* seq_starts, const u32* slots,              \
        const u32* save_starts, const u32* saves, int nh, int p, int groups, int width,          \
        int dt_at, float dt_lo, float dt_hi, int chunk_min) {                                    \
        mamba2_scan_impl<n, TM>(y, conv, mixed, neg_a, dt_bias, d_skip, state, seq_starts,       \
                                slots, save_starts, saves, nh, p, groups, width, dt_at, dt_lo,   \
                                dt_hi, chunk_min);                                               \
    }
MAMBA2_SCAN(16, f32, float)
MAMBA2_SCAN(16, bf16, bf16)
MAMBA2_SCAN(32, f32, float)
MAMBA2_SCAN(32, bf16, bf16)
MAMBA2_SCAN(64, f32, float)
MAMBA2_SCAN(64, bf16, bf16)
MAMBA2_SCAN(128, f32, float)
MAMBA2_SCAN(128, bf16, bf16)
MAMBA2_SCAN(256, f32, float)
MAMBA2_SCAN(256, bf16, bf16)

// --- 3. the gated grouped RMSNorm --------------------------------------------------------------

template <typename TM, typename TO>
__device__ void mamba2_norm_impl(TO* out, const float* y, const TM* mixed, const float* w,
                                 int groups, int inner, int width, float eps) {
    pdl_start();
    const int row = blockIdx.x, grp = blockIdx.y, len = inner / groups;
    const u64 at = (u64)row * inner + grp * len;
    const TM* z = mixed + (u64)row * width + grp * len;  // z is the first nh·p columns
    float ss = 0.f;
    for (int c = threadIdx.x; c < len; c += blockDim.x) {
        const float v = y[at + c] * gdn_silu(to_f32(z[c]));
        ss += v * v;
    }
    const float inv = 1.0f / sqrtf(block_sum(ss) / len + eps);
    for (int c = threadIdx.x; c < len; c += blockDim.x) {
        const float v = y[at + c] * gdn_silu(to_f32(z[c]));
        out[at + c] = from_f32<TO>(w[grp * len + c] * (v * inv));
    }
}

#define MAMBA2_NORM(tm, TM, to, TO)                                                              \
    extern "C" __global__ void mamba2_norm_##tm##_##to(TO* out, const float* y, const TM* mixed, \
                                                       const float* w, int groups, int inner,    \
                                                       int width, float eps) {                   \
        mamba2_norm_impl<TM, TO>(out, y, mixed, w, groups, inner, width, eps);                   \
    }
MAMBA2_NORM(f32, float, f32, float)
MAMBA2_NORM(f32, float, bf16, bf16)
MAMBA2_NORM(bf16, bf16, f32, float)
MAMBA2_NORM(bf16, bf16, bf16, bf16)

// --- relu² -------------------------------------------------------------------------------------

extern "C" __global__ void relu2(void* out, int out_bf16, const void* x, int x_bf16, u64 n) {
    pdl_start();
    for (u64 e = (u64)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (u64)gridDim.x * blockDim.x) {
        const float v = x_bf16 ? to_f32(((const bf16*)x)[e]) : ((const float*)x)[e];
        const float r = fmaxf(v, 0.f), o = r * r;
        if (out_bf16) ((bf16*)out)[e] = from_f32<bf16>(o);
        else ((float*)out)[e] = o;
    }
}
