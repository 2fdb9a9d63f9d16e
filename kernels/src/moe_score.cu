// The routings' scorings (moe.cu's stage 1), compiled just before moe.cu in the Moe module: the
// total order of f32 keys, the warp's best (key, index), and how each family scores a token's
// experts (MoeSoftmax: Qwen3-MoE, gpt-oss; MoeSigmoid: MiniMax-M2, and DeepSeek-V3 with its
// group-limited selection). Split from moe.cu to keep each file readable in one sitting.

// f32 bits mapped so that unsigned order is f32::total_cmp's order.
__device__ __forceinline__ u32 total_order_key(float v) {
    const u32 u = __float_as_uint(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The warp's best (key, index): highest key, then lowest index; every lane gets it.
__device__ __forceinline__ void warp_best(u32& key, int& idx) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const u32 k2 = shfl_xor_u32(key, o);
        const int i2 = (int)shfl_xor_u32((u32)idx, o);
        if (k2 > key || (k2 == key && i2 < idx)) {
            key = k2;
            idx = i2;
        }
    }
}

// How the routing scores a token's experts, the one thing the families' routings differ in (the
// selection rounds, the order of the sums and the writes are shared):
//   - MoeSoftmax (Qwen3-MoE, gpt-oss): experts ranked by the logit itself (exp is monotonic, so
//     the logits' bits decide, ties included, whatever rounding exp has), weighted by the
//     softmax over all E logits, divided by the chosen ones' sum when norm_topk_prob;
//   - MoeSigmoid (MiniMax-M2): s = 1 / (1 + exp(-logit)) in f32, the CPU reference's
//     arithmetic; experts ranked by the f32 sum s + bias[e] (the checkpoint's
//     e_score_correction_bias, f32), ties to the lower index as the CPU's total_cmp on that
//     sum's bits; weighted by s (divided by the chosen ones' sum when norm_topk_prob) times
//     `scaling`. The sum's bits depend on exp's rounding, so the CPU and the device agree on
//     exact ties (equal logits and biases) and may part on choices within an ulp of each other.
//     Group-limited (DeepSeek-V3's n_group > 1, topk_group): the E experts are n_group
//     consecutive groups (n_group <= 32), a group scored by the f32 sum of its two highest
//     s + bias (the top two as a multiset: a repeated maximum counts twice, as the CPU's
//     scan), the topk_group best groups kept (score's bits descending, ties to the lower
//     group), and every expert of another group ranked -inf, as the CPU masks them (a bit
//     mask of the kept groups, set by setup_groups before any rank is taken). n_group = 1
//     (MiniMax-M2) keeps every expert.
// setup_* (the softmax's max and sum over the row; the sigmoid's kept groups) is warp-wide:
// every lane calls it.
struct MoeSoftmax {
    int norm_topk_prob;
    float mx, sum;
    template <typename T>
    __device__ void setup_groups(const T*, int) {}
    __device__ float rank(float v, int) const { return v; }
    __device__ float prob(float v) const { return expf(v - mx) / sum; }
    __device__ float weight(float p, float total) const {
        return norm_topk_prob ? p / total : p;
    }
    // From a lane's registers: v[i] is expert lane + 32 i's logit.
    template <int R>
    __device__ void setup_regs(const float (&v)[R], int experts) {
        const int lane = threadIdx.x & 31;
        mx = NEG_INF;
#pragma unroll
        for (int i = 0; i < R; ++i)
            if (lane + 32 * i < experts) mx = fmaxf(mx, v[i]);
        mx = warp_max(mx);
        sum = 0.f;
#pragma unroll
        for (int i = 0; i < R; ++i)
            if (lane + 32 * i < experts) sum += expf(v[i] - mx);
        sum = warp_sum(sum);
    }
    template <typename T>
    __device__ void setup_row(const T* row, int experts) {
        const int lane = threadIdx.x & 31;
        mx = NEG_INF;
        for (int e = lane; e < experts; e += 32) mx = fmaxf(mx, to_f32(row[e]));
        mx = warp_max(mx);
        sum = 0.f;
        for (int e = lane; e < experts; e += 32) sum += expf(to_f32(row[e]) - mx);
        sum = warp_sum(sum);
    }
};

__device__ __forceinline__ float moe_sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

// The warp's two highest values of (a, b) pairs (a >= b each), as a multiset; every lane gets them.
__device__ __forceinline__ void warp_top2(float& a, float& b) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float a2 = __shfl_xor_sync(0xffffffffu, a, o);
        const float b2 = __shfl_xor_sync(0xffffffffu, b, o);
        const float hi = fmaxf(a, a2);
        b = a >= a2 ? fmaxf(b, a2) : fmaxf(a, b2);
        a = hi;
    }
}

struct MoeSigmoid {
    int norm_topk_prob;
    const float* bias;  // [E]
    float scaling;
    int n_group = 1, topk_group = 1;
    int group_size = 1;
    u32 keep = 0xffffffffu;  // bit g: group g's experts may be chosen
    // The token's kept groups (warp-wide; a no-op with one group).
    template <typename T>
    __device__ void setup_groups(const T* row, int experts) {
        keep = 0xffffffffu;
        if (n_group <= 1) return;
        const int lane = threadIdx.x & 31;
        group_size = experts / n_group;
        float score = NEG_INF;  // lane g < n_group: group g's score
        for (int g = 0; g < n_group; ++g) {
            float a = NEG_INF, b = NEG_INF;
            for (int e = g * group_size + lane; e < (g + 1) * group_size; e += 32) {
                const float c = moe_sigmoid(to_f32(row[e])) + bias[e];
                if (c > a) {
                    b = a;
                    a = c;
                } else if (c > b) {
                    b = c;
                }
            }
            warp_top2(a, b);
            if (lane == g) score = a + b;
        }
        // The topk_group best groups: rounds as the experts' selection, over the lanes.
        keep = 0u;
        const u32 key = total_order_key(score);
        u32 last_key = 0xffffffffu;
        int last_idx = -1;
        for (int j = 0; j < topk_group; ++j) {
            const bool after = key < last_key || (key == last_key && lane > last_idx);
            u32 best_key = lane < n_group && after ? key : 0u;
            int best_idx = lane < n_group && after ? lane : 0x7fffffff;
            warp_best(best_key, best_idx);
            keep |= 1u << best_idx;
            last_key = best_key;
            last_idx = best_idx;
        }
    }
    __device__ float rank(float v, int e) const {
        // Only with groups: ungrouped, e / group_size is e itself, and a u32 shifted by 32 or
        // more is 0 on the device (shr clamps) where the host's x86 shift wraps, so experts
        // from 32 on were never chosen on the GPU while the host emulation agreed with the CPU.
        if (n_group > 1 && !((keep >> (e / group_size)) & 1u)) return NEG_INF;
        return moe_sigmoid(v) + bias[e];
    }
    __device__ float prob(float v) const { return moe_sigmoid(v); }
    __device__ float weight(float p, float total) const {
        return (norm_topk_prob ? p / total : p) * scaling;
    }
    template <int R>
    __device__ void setup_regs(const float (&)[R], int) {}
    template <typename T>
    __device__ void setup_row(const T*, int) {}
};

