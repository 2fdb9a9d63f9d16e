// ---- What an expert's gate|up kernel applies between its two products (moe_decode.cu's
// CUDA-core moe_gate_up_*, moe_mma.cu's tensor-core moe_gate_up_mma_* and _small_any) ---------
//
// A functor f(g, u, e, j, inter) of a pair's gate g and up u sums (f32) for output j of expert
// e, its result rounded to the activation type by the caller; f.at(e, j, inter) is the same for
// one (e, j), f'(g, u), with what it reads loaded once (for kernels whose lane keeps one j over
// many pairs). A template parameter of each kernel body, so the SiLU, clamped and relu² builds
// share one body. FAN: weight rows an output reads, 2 for gate|up ([E, 2·I, H], gate rows
// first), 1 for an un-gated up ([E, I, H], whose one product is passed as u, g being 0). Only
// the CUDA-core moe_gate_up_impl reads FAN; the tensor-core kernels take FAN 2 functors.

// SwiGLU, silu(g) · u (Qwen3-MoE's, MiniMax-M2's experts) ...
struct MoeSiluAct {
    static constexpr int FAN = 2;
    __device__ __forceinline__ float operator()(float g, float u, int, int, int) const {
        return g / (1.0f + expf(-g)) * u;
    }
    __device__ __forceinline__ float operator()(float g, float u) const {
        return (*this)(g, u, 0, 0, 0);
    }
    __device__ __forceinline__ MoeSiluAct at(int, int, int) const { return *this; }
};

// ... or gpt-oss's (moe_gate_up_clamped_*): the gate|up bias [E, 2·I] (gate first: row e·2I + j
// is gate j's bias, e·2I + I + j up j's) added to both products, then
// (clamp(u, −limit, limit) + 1) · g' · sigmoid(alpha · g'), g' = min(g, limit): the CPU
// reference's clamped_swiglu, the same f32 operations in its order. B: the bias type (the
// activation type: bf16, or float on the float32 path). MoeClampedAt: at(e, j)'s, one output's
// gate and up biases in f32.
struct MoeClampedAt {
    float bg, bu, alpha, limit;
    __device__ __forceinline__ float operator()(float g, float u) const {
        g = fminf(g + bg, limit);
        u = fminf(fmaxf(u + bu, -limit), limit);
        return (u + 1.0f) * (g / (1.0f + expf(-g * alpha)));
    }
};

template <typename B>
struct MoeClampedAct {
    static constexpr int FAN = 2;
    const B* bias;
    float alpha, limit;
    __device__ __forceinline__ MoeClampedAt at(int e, int j, int inter) const {
        const u64 row = (u64)e * 2 * inter;
        return MoeClampedAt{to_f32(bias[row + j]), to_f32(bias[row + inter + j]), alpha, limit};
    }
    __device__ __forceinline__ float operator()(float g, float u, int e, int j, int inter) const {
        return at(e, j, inter)(g, u);
    }
};

// ... or Nemotron-H's un-gated experts (moe_up_relu2_*, FAN 1): relu(u)², the CPU reference's
// fused_moe_relu2 activation (u.max(0), then its square, in f32).
struct MoeRelu2Act {
    static constexpr int FAN = 1;
    __device__ __forceinline__ float operator()(float, float u, int, int, int) const {
        const float r = fmaxf(u, 0.0f);
        return r * r;
    }
    __device__ __forceinline__ float operator()(float g, float u) const {
        return (*this)(g, u, 0, 0, 0);
    }
    __device__ __forceinline__ MoeRelu2Act at(int, int, int) const { return *this; }
};
