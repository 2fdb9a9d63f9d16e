// The end of an attention block: STATES online-softmax states (max m, sum l, weighted sum acc)
// of each of its `heads` q heads, in shared memory, merged with the usual rescaling. m is in
// natural-log units, or log2 units when LOG2. A state with no key has m = -inf and weighs 0.
// PARTIAL (split-K): each head's merged, unnormalised state (m in natural units, l, acc) goes to
// its slot of `partial` for attention_merge; else the normalised output goes to `out` in its
// type TO (bf16, or f32 for the float32 path). `sinks` (gpt-oss; null: none): head h's learned
// logit sinks[h] (natural units) joins the softmax as one more state with l = 1 and no value, so
// it raises the denominator only. A split's state leaves it out (attention_merge adds it once).
template <int STATES, int ROWS, int DIM, bool PARTIAL, bool LOG2, typename TO>
__device__ void merge_attention_states(const float (&pm)[STATES][ROWS],
                                       const float (&pl)[STATES][ROWS],
                                       const float (&pa)[STATES][ROWS][DIM], int heads, int head0,
                                       u64 row, int num_heads, int head_dim, TO* out,
                                       float* partial, const float* sinks) {
    for (int h = 0; h < heads; ++h) {
        const int head = head0 + h;
        float m_all = NEG_INF;
#pragma unroll
        for (int w = 0; w < STATES; ++w) m_all = fmaxf(m_all, pm[w][h]);
        // The sink, in the states' units, and its share of the denominator (added below).
        const bool sink = !PARTIAL && sinks != nullptr;
        const float sink_m = sink ? (LOG2 ? sinks[head] * 1.4426950408889634f : sinks[head]) : 0.f;
        if (sink) m_all = fmaxf(m_all, sink_m);
        float weight[STATES];
        float l_all = 0.f;
#pragma unroll
        for (int w = 0; w < STATES; ++w) {
            const float dm = pm[w][h] - m_all;
            weight[w] = pm[w][h] == NEG_INF ? 0.f : LOG2 ? exp2_fast(dm) : expf(dm);
            l_all += pl[w][h] * weight[w];
        }
        if (sink) l_all += LOG2 ? exp2_fast(sink_m - m_all) : expf(sink_m - m_all);
        if (PARTIAL) {
            const int splits = gridDim.z;
            float* st =
                partial + ((row * num_heads + head) * splits + blockIdx.z) * (u64)(head_dim + 2);
            if (threadIdx.x == 0) {
                st[0] = LOG2 && m_all != NEG_INF ? m_all * 0.6931471805599453f : m_all;
                st[1] = l_all;
            }
            for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
                float sum = 0.f;
#pragma unroll
                for (int w = 0; w < STATES; ++w) sum += pa[w][h][d] * weight[w];
                st[2 + d] = sum;
            }
        } else {
            // The block's first state holds key 0, so l_all > 0.
            const float inv_l = 1.0f / l_all;
            TO* o = out + row * ((u64)num_heads * head_dim) + (u64)head * head_dim;
            for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
                float sum = 0.f;
#pragma unroll
                for (int w = 0; w < STATES; ++w) sum += pa[w][h][d] * weight[w];
                o[d] = from_f32<TO>(sum * inv_l);
            }
        }
    }
}
