// hybrid.cu's fused gated-delta-rule decode step and the hybrid layers' elementwise kernels
// (compiled with hybrid.cu and hybrid_chunk.cu as one module, Module::Hybrid, after them).

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
    // Unrolled by 8, not R: at DK 128 a full unroll kept k's 32 values live across both loops
    // and spilled 168 bytes under the 64 registers 1024 threads allow (NVRTC 13.0, sm_90a).
#pragma unroll 8
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
#pragma unroll 8
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
