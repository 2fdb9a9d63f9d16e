// fp8_one.cu (FP8 weights times one row on tensor cores, f16 operands) against double
// references: the dense GEMV at every split of k (KW), the experts' gate|up and down + weighted
// sum at one token. Their sums are exact products added in f32 in another order than the
// CUDA-core kernels', so they are held to a bound on the sum of the products' magnitudes (1e-6:
// one wrong product or scale moves an output by about 1/K of it) and, for the bf16 SiLU
// products, to one bf16 rounding.

// x rows that need the f16 staging's power of two: values far above f16's range and far below.
static std::vector<bf16> fp8_one_x(int k, float scale) {
    std::vector<bf16> x(k);
    for (auto& v : x) v = B(U(1) * scale);
    return x;
}

void t_gemv_fp8_one(int N, int K, int KW, float xscale) {
    const int gc = K / 128;
    const std::vector<bf16> x = fp8_one_x(K, xscale);
    std::vector<unsigned char> w(N * K);
    std::vector<float> sc(N * gc), out(N, NAN), wf(N * K);
    for (auto& v : sc) v = std::fabs(U(0.02f)) + 1e-3f;
    for (int i = 0; i < N * K; ++i) {
        unsigned b;
        do b = rng() & 0xff; while ((b & 0x7f) == 0x7f);
        w[i] = (unsigned char)b;
        wf[i] = host_e4m3(b) * sc[(i / K) * gc + (i % K) / 128];
    }
    const int tiles = (N + 7) / 8, per_block = 8 / KW;
    launch_smem({(unsigned)((tiles + per_block - 1) / per_block)}, {256}, (size_t)K * 4, [&] {
        if (KW == 1) gemv_fp8_one_kw1(out.data(), x.data(), w.data(), sc.data(), N, K);
        else if (KW == 2) gemv_fp8_one_kw2(out.data(), x.data(), w.data(), sc.data(), N, K);
        else if (KW == 4) gemv_fp8_one_kw4(out.data(), x.data(), w.data(), sc.data(), N, K);
        else gemv_fp8_one_kw8(out.data(), x.data(), w.data(), sc.data(), N, K);
    });
    double worst = 0;
    for (int n = 0; n < N; ++n) {
        double r = 0, a = 0;
        for (int k = 0; k < K; ++k) { r += (double)F(x[k]) * wf[n * K + k]; a += std::fabs((double)F(x[k]) * wf[n * K + k]); }
        worst = std::max(worst, std::isfinite(out[n]) ? std::fabs(out[n] - r) / (1e-30 + a) : 1e30);
    }
    char name[96];
    snprintf(name, 96, "gemv_fp8_one kw%d N%d K%d x*%g", KW, N, K, xscale);
    report(name, worst, 1e-6);
}

// One token through moe_gate_up_one_fp8 and moe_down_combine_one_fp8, routed by moe_route_f32 +
// moe_group + moe_active as the engine's plan would.
void t_moe_one_fp8(int E, int K, int H, int I, int KW, float xscale) {
    std::vector<float> logits(E);
    for (auto& v : logits) v = U(3);
    const std::vector<bf16> x = fp8_one_x(H, xscale);
    const Experts ex = make_experts(E, H, I, true);
    const auto& [w13b, w2b, w13q, w2q, s13, s2, w13, w2] = ex;
    Routed routed = route_and_group(logits, 1, E, K, true, E > 40 ? 64 : 256);
    auto& [ids, wts, perm, offsets] = routed;
    std::vector<int> active(E + 1, -1);
    launch({1}, {E > 40 ? 64u : 32u}, [&] { moe_active(active.data(), offsets.data(), E); });
    std::vector<bf16> act(K * I, B(NAN));
    const int per_block = 8 / KW, tiles = (I + 3) / 4;
    launch_smem({(unsigned)((tiles + per_block - 1) / per_block), (unsigned)std::min(E, K)}, {256}, (size_t)H * 4, [&] {
        if (KW == 2) moe_gate_up_one_fp8_kw2(act.data(), x.data(), w13q.data(), s13.data(), offsets.data(), active.data(), perm.data(), E, I, H);
        else if (KW == 4) moe_gate_up_one_fp8_kw4(act.data(), x.data(), w13q.data(), s13.data(), offsets.data(), active.data(), perm.data(), E, I, H);
        else moe_gate_up_one_fp8_kw8(act.data(), x.data(), w13q.data(), s13.data(), offsets.data(), active.data(), perm.data(), E, I, H);
    });
    // gate|up: silu(g) · u in double, then one bf16 rounding on the device's side.
    std::vector<float> xf(H);
    for (int h = 0; h < H; ++h) xf[h] = F(x[h]);
    double worst_act = 0, rms = 0;
    std::vector<double> ref_act(K * I);
    for (int s = 0; s < K; ++s)
        for (int i = 0; i < I; ++i) {
            const auto [g, u] = gate_up_ref(w13, xf.data(), ids[s], i, H, I);
            ref_act[s * I + i] = g / (1 + std::exp(-g)) * u;
            rms += ref_act[s * I + i] * ref_act[s * I + i];
        }
    rms = std::sqrt(rms / (K * I));
    for (int p = 0; p < K * I; ++p) {
        const double got = F(act[p]);
        worst_act = std::max(worst_act, std::isfinite(got) ? std::fabs(got - ref_act[p]) / (std::fabs(ref_act[p]) + 1e-3 * rms) : 1e30);
    }
    char name[96];
    snprintf(name, 96, "fp8_one gate_up kw%d E%d k%d H%d I%d x*%g", KW, E, K, H, I, xscale);
    report(name, worst_act, 8e-3);
    if (I % 128) return;  // down's k is I: the launcher takes whole 128-column groups only
    // down + weighted sum on the device's act rows (so its own bound is checked alone).
    std::vector<float> out(H, NAN);
    launch_smem({(unsigned)((H + 7) / 8)}, {(unsigned)(32 * K)}, (size_t)K * I * 4, [&] {
        moe_down_combine_one_fp8(out.data(), act.data(), w2q.data(), s2.data(), ids.data(), wts.data(), K, I, H);
    });
    double worst = 0;
    for (int c = 0; c < H; ++c) {
        double r = 0, a = 0;
        for (int s = 0; s < K; ++s)
            for (int i = 0; i < I; ++i) {
                const double p = (double)wts[s] * w2[((size_t)ids[s] * H + c) * I + i] * F(act[s * I + i]);
                r += p;
                a += std::fabs(p);
            }
        worst = std::max(worst, std::isfinite(out[c]) ? std::fabs(out[c] - r) / (1e-30 + a) : 1e30);
    }
    snprintf(name, 96, "fp8_one down_combine E%d k%d H%d I%d", E, K, H, I);
    report(name, worst, 1e-6);
}

void fp8_one_tests() {
    // Every split of k; tiles cut short (N % 8); several batches a warp (K 4096 at kw1: 64
    // slices, 8 a batch); k shorter than the warps (K 128: two slices for up to 8 warps).
    t_gemv_fp8_one(40, 1024, 1, 1.f);
    t_gemv_fp8_one(37, 2048, 4, 1.f);
    t_gemv_fp8_one(21, 4096, 8, 1.f);
    t_gemv_fp8_one(16, 4096, 1, 1.f);
    t_gemv_fp8_one(19, 128, 8, 1.f);
    t_gemv_fp8_one(24, 640, 2, 1.f);
    // x beyond f16's range either way: the staging's power of two.
    t_gemv_fp8_one(24, 1024, 4, 1e6f);
    t_gemv_fp8_one(24, 1024, 4, 1e-9f);
    // 30B-A3B's expert shape at a reduced expert count; I = 52 (gate|up only: tiles past I);
    // 16 slots.
    t_moe_one_fp8(16, 8, 2048, 768, 4, 1.f);
    t_moe_one_fp8(12, 4, 256, 52, 2, 1.f);
    t_moe_one_fp8(20, 16, 512, 128, 8, 3e5f);
    t_moe_one_fp8(10, 2, 1024, 1024, 4, 1e-7f);
}
