// mamba2.cu's fused decode step (compiled after it and hybrid_decode.cu in Module::Hybrid): a
// step whose every sequence has one row (decode, CUDA-graph padding rows included) in one
// launch, instead of mamba2_conv, mamba2_scan and mamba2_norm.
//
// mamba2_decode_n<N>_<mixed>_<out>: grid (p / rows, nh, S), four threads a state row as
// mamba2_scan (block rows i0 ..< i0 + rows of head h of sequence s, thread `part` holding the
// row's entries 16q + 4·part ..< + 4 in registers). A block
//   (a) issues its rows' state loads (16-byte, a row's four lanes 64 contiguous bytes);
//   (b) computes the conv + bias + SiLU of the group's B and C (2N channels) and of its rows'
//       x (hybrid_decode.cu's gdn_decode_conv: the slot's window, then the row), writing x's
//       windows (and their saves): each x channel belongs to this block alone;
//   (c) dt = clamp(softplus(dt_raw + dt_bias)), then per state entry
//           S = exp(dt·A)·S + (dt·x)·B,  y = S·C + D·x
//       (saves of 0 rows before, of 1 row after; the slot's state last), y into f32 `[S, nh·p]`;
//   (d) takes a ticket of its (sequence, group): the group's last block to arrive writes B's
//       and C's windows (every block of the group has read the old ones by then) and the gated
//       grouped RMSNorm of the group's nh·p / G channels (their y are in L2 by then), as
//       hybrid_decode.cu's key head's last block does for q, k and the norm.
//
// The byte floor (docs/cuda-kernels.md): the state read and written once, nh·p·N·4 bytes each
// way a sequence, plus the conv window ((K − 1)·C·4 each way) and the row of `mixed`. At
// Nemotron Nano 9B v2's heads (nh 128, p 80, N 128, G 8, K 4: C = 12288, mixed 22656 bf16) that
// is 5,242,880 + 5,242,880 + 147,456 + 147,456 + 45,312 (+ 20,480 out) = 10,846,464 bytes a
// sequence a layer: 3.6 µs at 3.0 TB/s (an H100's copy bandwidth), 58 µs at batch 16, 231 µs
// at batch 64. The kernel moves the state once each way (no f32 conv buffer, y's 40 KB round
// trip through L2 besides); a block's loads are all in flight before the conv, which hides
// their latency.

#define MAMBA2_DEC_ROWS 32

template <int N, typename TM, typename TO>
__device__ void mamba2_decode_impl(TO* out, float* y, u32* tickets, const TM* mixed,
                                   const float* taps, const float* conv_bias, float* conv_state,
                                   const float* neg_a, const float* dt_bias, const float* d_skip,
                                   const float* norm_w, float* state, const u32* slots,
                                   const u32* save_starts, const u32* saves, int nh, int p,
                                   int groups, int k, int width, float dt_lo, float dt_hi,
                                   float eps) {
    __shared__ float4 bs[N / 4], cs[N / 4];  // B, C of the head's group
    __shared__ float xs[MAMBA2_DEC_ROWS], dt_s;
    __shared__ int last_s;
    pdl_start();
    const int s = blockIdx.z, h = blockIdx.y, tid = threadIdx.x;
    const int rows = blockDim.x / 4, local = tid / 4, part = tid % 4;
    const int i0 = blockIdx.x * rows, i = i0 + local;
    const bool live = i < p;
    const int inner = nh * p, gn = groups * N, channels = inner + 2 * gn;
    const int g = h / (nh / groups);
    const u32 slot = slots[s], sv0 = save_starts[s], sv1 = save_starts[s + 1];
    // A padding row (slot GDN_NO_STATE) starts from a zero window and state and writes neither.
    const bool real = slot != GDN_NO_STATE;
    const TM* row = mixed + (u64)s * width;  // row s is sequence s's
    const TM* xbc = row + inner;              // the conv's inputs
    const u64 slot_len = (u64)inner * N;
    float* head = state + (u64)h * p * N;  // a slot's head h at + slot · slot_len
    // (a) The rows' state, every load issued before any use.
    float st[N / 4];
#pragma unroll
    for (int q = 0; q < N / 16; ++q) {
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (live && real) v = *(const float4*)(head + slot * slot_len + (u64)i * N + 16 * q + 4 * part);
        st[4 * q] = v.x, st[4 * q + 1] = v.y, st[4 * q + 2] = v.z, st[4 * q + 3] = v.w;
    }
    // (b) Conv + bias + SiLU: B and C of the group (windows written in (d)), the rows' x (own).
    for (int c = tid; c < 2 * N + rows; c += blockDim.x) {
        const bool is_x = c >= 2 * N;
        const int r = c - 2 * N;
        if (is_x && i0 + r >= p) {
            xs[r] = 0.f;
            continue;
        }
        const int ch = is_x ? h * p + i0 + r : inner + (c / N) * gn + g * N + c % N;
        const float v = gdn_decode_conv(xbc, taps, conv_state, real, slot, saves, sv0, sv1, ch,
                                        channels, k, is_x, conv_bias);
        if (is_x) xs[r] = v;
        else ((float*)(c < N ? bs : cs))[c % N] = v;
    }
    if (tid == 0) {
        const float a = to_f32(row[inner + channels + h]) + dt_bias[h];
        const float softplus = a > 20.f ? a : log1pf(expf(a));
        dt_s = fminf(fmaxf(softplus, dt_lo), dt_hi);
    }
    __syncthreads();
    // (c) The update and the read-out; saves of 0 rows before it, of 1 after.
    auto saves_at = [&](u32 after) {
        for (u32 sv = sv0; sv < sv1; ++sv)
            if (saves[2 * sv] == after && live)
                mamba2_store<N>(head + saves[2 * sv + 1] * slot_len, st, i, part);
    };
    saves_at(0);
    const float dt = dt_s, decay = expf(dt * neg_a[h]), x = xs[local], dx = dt * x;
    float acc = 0.f;
#pragma unroll
    for (int q = 0; q < N / 16; ++q) {
        const float4 b = bs[4 * q + part], c = cs[4 * q + part];
        float* r = &st[4 * q];
        r[0] = r[0] * decay + dx * b.x;
        r[1] = r[1] * decay + dx * b.y;
        r[2] = r[2] * decay + dx * b.z;
        r[3] = r[3] * decay + dx * b.w;
        acc += r[0] * c.x + r[1] * c.y + r[2] * c.z + r[3] * c.w;
    }
    acc += __shfl_xor_sync(0xffffffffu, acc, 1);
    acc += __shfl_xor_sync(0xffffffffu, acc, 2);
    if (live && part == 0) y[(u64)s * inner + h * p + i] = acc + d_skip[h] * x;
    saves_at(1);
    if (live && real) mamba2_store<N>(head + slot * slot_len, st, i, part);
    // (d) The group's last block: B's and C's windows, then the norm.
    const int blocks = gridDim.x * (nh / groups);
    __threadfence();
    __syncthreads();
    if (blocks > 1) {
        if (tid == 0) {
            u32* ticket = tickets + (u64)s * groups + g;
            last_s = atomicAdd(ticket, 1u) == (u32)blocks - 1;
            if (last_s) *ticket = 0u;  // for the next launch
        }
        __syncthreads();
        if (!last_s) return;
        __threadfence();
    }
    for (int c = tid; c < 2 * N; c += blockDim.x)
        gdn_decode_conv(xbc, taps, conv_state, real, slot, saves, sv0, sv1,
                        inner + (c / N) * gn + g * N + c % N, channels, k, true, conv_bias);
    // g = y · silu(z), out = w · g / rms(g) over the group's channels
    const int len = inner / groups;
    const u64 at = (u64)s * inner + (u64)g * len;
    const TM* z = row + (u64)g * len;  // z is the first nh·p columns
    float ss = 0.f;
    for (int c = tid; c < len; c += blockDim.x) {
        const float v = gdn_ldcg(y + at + c) * gdn_silu(to_f32(z[c]));
        ss += v * v;
    }
    const float inv = 1.0f / sqrtf(block_sum(ss) / len + eps);
    for (int c = tid; c < len; c += blockDim.x) {
        const float v = gdn_ldcg(y + at + c) * gdn_silu(to_f32(z[c]));
        out[at + c] = from_f32<TO>(norm_w[(u64)g * len + c] * (v * inv));
    }
}

#define MAMBA2_DECODE(n, tm, TM, to, TO)                                                         \
    extern "C" __global__ void mamba2_decode_n##n##_##tm##_##to(                                 \
        TO* out, float* y, u32* tickets, const TM* mixed, const float* taps,                     \
        const float* conv_bias, float* conv_state, const float* neg_a, const float* dt_bias,     \
        const float* d_skip, const float* norm_w, float* state, const u32* slots,                \
        const u32* save_starts, const u32* saves, int nh, int p, int groups, int k, int width,   \
        float dt_lo, float dt_hi, float eps) {                                                   \
        mamba2_decode_impl<n, TM, TO>(out, y, tickets, mixed, taps, conv_bias, conv_state,       \
                                      neg_a, dt_bias, d_skip, norm_w, state, slots, save_starts, \
                                      saves, nh, p, groups, k, width, dt_lo, dt_hi, eps);        \
    }
#define MAMBA2_DECODES(n)                        \
    MAMBA2_DECODE(n, f32, float, f32, float)     \
    MAMBA2_DECODE(n, f32, float, bf16, bf16)     \
    MAMBA2_DECODE(n, bf16, bf16, f32, float)     \
    MAMBA2_DECODE(n, bf16, bf16, bf16, bf16)
MAMBA2_DECODES(16)
MAMBA2_DECODES(32)
MAMBA2_DECODES(64)
MAMBA2_DECODES(128)
MAMBA2_DECODES(256)
