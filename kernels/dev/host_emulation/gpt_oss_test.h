// gpt-oss's kernels: add_bias_* (activation.cu) and the clamped experts (moe_gate_up_clamped_*,
// moe_down_* and moe_combine_bias_*: moe_clamped's stages 3-5 after fused_moe's routing; on the
// CUDA cores and on tensor cores) against plain loops in double (the CPU reference's formulas).
// Included by test.cpp after moe_mma_test.h.
#pragma once

// add_bias over every (x, bias) type pair: x + bias in f32, rounded to x's type, the exact
// expected value (one f32 add, one rounding), so no tolerance.
void t_add_bias(int rows, int cols) {
    std::vector<float> xf(rows * cols), bf(cols);
    for (auto& v : xf) v = U(4);
    for (auto& v : bf) v = U(2);
    std::vector<bf16> xb(rows * cols), bb(cols);
    for (int i = 0; i < rows * cols; ++i) { xb[i] = B(xf[i]); xf[i] = F(xb[i]); }
    for (int c = 0; c < cols; ++c) { bb[c] = B(bf[c]); bf[c] = F(bb[c]); }
    int bad = 0;
    for (int kind = 0; kind < 4; ++kind) {
        std::vector<float> x32 = xf;
        std::vector<bf16> x16 = xb;
        launch({3}, {64}, [&] {
            switch (kind) {
            case 0: add_bias_f32_bf16(x32.data(), bb.data(), rows, cols); break;
            case 1: add_bias_bf16_bf16(x16.data(), bb.data(), rows, cols); break;
            case 2: add_bias_f32_f32(x32.data(), bf.data(), rows, cols); break;
            default: add_bias_bf16_f32(x16.data(), bf.data(), rows, cols); break;
            }
        });
        for (int i = 0; i < rows * cols; ++i) {
            const float want = xf[i] + bf[i % cols];
            const bool wide = kind == 0 || kind == 2;
            const float got = wide ? x32[i] : F(x16[i]);
            bad += wide ? got != want : got != F(B(want));
        }
    }
    char name[96];
    snprintf(name, 96, "add_bias %dx%d, 4 type pairs", rows, cols);
    report(name, bad, 0);
}

// transformers' GptOssExperts._apply_gate, in double.
static double clamped_swiglu_ref(double g, double u, double alpha, double limit) {
    g = std::min(g, limit);
    u = std::max(std::min(u, limit), -limit);
    return (u + 1) * (g / (1 + std::exp(-g * alpha)));
}

// The clamped experts on bf16 weights (vec: rows of a multiple of 8, the 16-byte loads) or on
// the float32 path (fp32: f32 weights, x, biases and products). The logits are skewed so that
// some experts get no token; the gate|up biases (up to ±3) against the limit (2) make the clamp
// bite on about a third of the values whatever state the shared generator is in (with biases
// of ±1 a run of five tokens once drew no clamped value at all).
void t_moe_clamped(int T, int E, int K, int H, int I, bool fp32) {
    const float alpha = 1.702f, limit = 2.0f;
    std::vector<float> logits(T * E);
    for (int i = 0; i < T * E; ++i) logits[i] = U(3) + ((i % E) % 5 == 4 ? -40.f : 0.f);
    const int P = T * K;
    // Values as the device holds them (bf16-rounded unless fp32) and their f32 copies.
    auto values = [&](size_t n, float s, std::vector<bf16>& b) {
        std::vector<float> f(n);
        b.resize(n);
        for (size_t i = 0; i < n; ++i) {
            f[i] = U(s);
            b[i] = B(f[i]);
            if (!fp32) f[i] = F(b[i]);
        }
        return f;
    };
    std::vector<bf16> xb, w13b, w2b, b13b, b2b;
    const std::vector<float> x = values((size_t)T * H, 1, xb);
    const std::vector<float> w13 = values((size_t)E * 2 * I * H, 0.3f, w13b);
    const std::vector<float> w2 = values((size_t)E * H * I, 0.2f, w2b);
    const std::vector<float> b13 = values((size_t)E * 2 * I, 3, b13b);
    const std::vector<float> b2 = values((size_t)E * H, 1, b2b);
    const unsigned group_threads = E > 40 ? 64 : 256;
    Routed routed = route_and_group(logits, T, E, K, true, group_threads);
    auto& [ids, wts, perm, offsets] = routed;
    std::vector<int> active(E + 1, -1);
    launch({1}, {E > 40 ? 64u : 32u}, [&] { moe_active(active.data(), offsets.data(), E); });
    const bool vec = !fp32 && H % 8 == 0 && I % 8 == 0;
    const unsigned rows = (unsigned)std::min(E, P);
    std::vector<float> actf(fp32 ? P * I : 0, NAN), ys(P * H, NAN), out(T * H, NAN);
    std::vector<bf16> actb(fp32 ? 0 : P * I);
    launch({(unsigned)((I + 7) / 8), rows}, {256}, [&] {
        if (fp32) moe_gate_up_clamped_fp32(actf.data(), x.data(), w13.data(), nullptr, offsets.data(), active.data(), perm.data(), E, K, I, H, b13.data(), alpha, limit);
        else (vec ? moe_gate_up_clamped_bf16_vec : moe_gate_up_clamped_bf16)(actb.data(), xb.data(), w13b.data(), nullptr, offsets.data(), active.data(), perm.data(), E, K, I, H, b13b.data(), alpha, limit);
    });
    launch({(unsigned)((H + 7) / 8), rows}, {256}, [&] {
        if (fp32) moe_down_fp32(ys.data(), actf.data(), w2.data(), nullptr, offsets.data(), active.data(), perm.data(), E, I, H);
        else (vec ? moe_down_bf16_vec : moe_down_bf16)(ys.data(), actb.data(), w2b.data(), nullptr, offsets.data(), active.data(), perm.data(), E, I, H);
    });
    launch({4}, {64}, [&] {
        if (fp32) moe_combine_bias_f32(out.data(), ys.data(), wts.data(), ids.data(), b2.data(), T, K, H);
        else moe_combine_bias_bf16(out.data(), ys.data(), wts.data(), ids.data(), b2b.data(), T, K, H);
    });
    // Reference: the softmax over the k best logits (ties to the lower expert), each expert's
    // products in double, its act rounded to bf16 as the device stores it (not on the float32
    // path), the biases, the weighted sum.
    int bad_ids = 0, clamped = 0;
    double worst_w = 0, worst = 0, rms = 0;
    std::vector<double> ref(T * H, 0.0);
    for (int t = 0; t < T; ++t) {
        const float* row = &logits[t * E];
        std::vector<int> order(E);
        for (int e = 0; e < E; ++e) order[e] = e;
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return host_key(row[a]) > host_key(row[b]); });
        std::vector<int> chosen(order.begin(), order.begin() + K);
        double total = 0;
        for (int e : chosen) total += std::exp((double)row[e] - row[chosen[0]]);
        std::sort(chosen.begin(), chosen.end());
        for (int j = 0; j < K; ++j) {
            const int e = chosen[j];
            const double w = std::exp((double)row[e] - row[order[0]]) / total;
            if (ids[t * K + j] != e) ++bad_ids;
            worst_w = std::max(worst_w, std::fabs(wts[t * K + j] - w) / w);
            std::vector<double> a(I);
            for (int i = 0; i < I; ++i) {
                const auto [g, u] = gate_up_ref(w13, &x[t * H], e, i, H, I);
                const double gb = g + b13[e * 2 * I + i], ub = u + b13[e * 2 * I + I + i];
                clamped += gb > limit || std::fabs(ub) > limit;
                const double v = clamped_swiglu_ref(gb, ub, alpha, limit);
                a[i] = fp32 ? v : F(B((float)v));
            }
            for (int c = 0; c < H; ++c) {
                double y = b2[e * H + c];
                for (int i = 0; i < I; ++i) y += (double)w2[((size_t)e * H + c) * I + i] * a[i];
                ref[t * H + c] += w * y;
            }
        }
    }
    for (double v : ref) rms += v * v;
    rms = std::sqrt(rms / std::max(1, T * H));
    // Against the output's rms, as t_moe: an act that rounds to the neighbouring bf16 moves an
    // output by about 1e-3 of the rms; a wrong expert, bias or clamp by O(1).
    for (int i = 0; i < T * H; ++i) worst = std::max(worst, std::fabs(out[i] - ref[i]) / (rms + std::fabs(ref[i])));
    char name[96];
    const char* kind = fp32 ? "fp32" : vec ? "bf16_vec" : "bf16";
    snprintf(name, 96, "moe_clamped %s ids T%d E%d k%d", kind, T, E, K);
    report(name, bad_ids, 0);
    snprintf(name, 96, "moe_clamped %s weights T%d E%d k%d", kind, T, E, K);
    report(name, worst_w, 1e-5);
    snprintf(name, 96, "moe_clamped %s out T%d H%d I%d (%d clamped)", kind, T, H, I, clamped);
    report(name, worst, fp32 ? 1e-4 : 1e-2);
    snprintf(name, 96, "moe_clamped %s: the clamp bites T%d", kind, T);
    report(name, clamped == 0, 0);
}

// The clamped experts on tensor cores (moe_mma.cu, bf16): moe_tiles + moe_gate_up_clamped_mma_bf16
// + moe_down_mma_bf16 (the 64-row tiles) or, with `small`, moe_gate_up_clamped_bf16_small_any +
// moe_down_bf16_small_any (decode batches: H and I multiples of 64), then moe_combine_bias_bf16,
// against double sums with the gate|up bias, the clamped SwiGLU (act rounded to bf16 as the
// device stores it) and the down bias. Top-2 routing made so that expert 0 takes every token
// (T pairs: more than 64, two or more tiles, several _any chunks), expert 1 only token 0 (one
// pair), the last two experts none, and the others the rest in turn.
void t_moe_clamped_mma(int T, int E, int H, int I, bool small) {
    const int K = 2, P = T * K;
    const float alpha = 1.702f, limit = 1.5f;
    std::vector<float> logits(T * E);
    for (int t = 0; t < T; ++t)
        for (int e = 0; e < E; ++e) {
            const bool second = t == 0 ? e == 1 : e == 2 + t % (E - 4);
            logits[t * E + e] = e == 0 ? 10.f : second ? 5.f : U(1) - 20.f;
        }
    const std::vector<bf16> x = random_bf16((size_t)T * H);
    const Experts ex = make_experts(E, H, I, false);
    const auto& [w13b, w2b, w13q, w2q, s13, s2, w13, w2] = ex;
    std::vector<bf16> b13b(E * 2 * I), b2b(E * H);
    for (auto& v : b13b) v = B(U(1.5f));
    for (auto& v : b2b) v = B(U(1));
    const Routed routed = route_and_group(logits, T, E, K, true, 64);
    const auto& [ids, wts, perm, offsets] = routed;
    std::vector<int> active(E + 1, -1);
    launch({1}, {32}, [&] { moe_active(active.data(), offsets.data(), E); });
    std::vector<float> ys(P * H, NAN), out(T * H, NAN);
    std::vector<bf16> act(P * I);
    if (small) {
        const unsigned ge = (unsigned)std::min(E, P);
        launch_smem({(unsigned)((I + 63) / 64), ge}, {256}, any_smem(H), [&] {
            moe_gate_up_clamped_bf16_small_any(act.data(), x.data(), w13b.data(), nullptr, offsets.data(), active.data(), perm.data(), E, K, I, H, b13b.data(), alpha, limit);
        });
        launch({(unsigned)((H + 127) / 128), ge}, {256}, [&] {
            moe_down_bf16_small_any(ys.data(), act.data(), w2b.data(), nullptr, offsets.data(), active.data(), perm.data(), E, I, H);
        });
    } else {
        const int max_tiles = std::min(P, (P + E * (MMA_BM - 1)) / MMA_BM);
        std::vector<int> tiles(2 * max_tiles, 7);
        launch({1}, {64}, [&] { moe_tiles(tiles.data(), offsets.data(), E, max_tiles); });
        launch({(unsigned)max_tiles, (unsigned)((I + MMA_BN / 2 - 1) / (MMA_BN / 2))}, {128}, [&] {
            moe_gate_up_clamped_mma_bf16(act.data(), x.data(), nullptr, w13b.data(), nullptr, tiles.data(), offsets.data(), perm.data(), K, I, H, b13b.data(), alpha, limit);
        });
        launch({(unsigned)max_tiles, (unsigned)((H + MMA_BN - 1) / MMA_BN)}, {128}, [&] {
            moe_down_mma_bf16(ys.data(), act.data(), nullptr, w2b.data(), nullptr, tiles.data(), offsets.data(), perm.data(), 0, H, I);
        });
    }
    launch({4}, {64}, [&] { moe_combine_bias_bf16(out.data(), ys.data(), wts.data(), ids.data(), b2b.data(), T, K, H); });
    // The counts the routing was made for.
    const auto count = [&](int e) { return offsets[e + 1] - offsets[e]; };
    const bool counts_ok = count(0) == T && count(0) > 64 && count(1) == 1 && count(E - 1) == 0 && count(E - 2) == 0;
    // Reference: the device's routing (t_moe_clamped checks it against the logits), double
    // sums, the biases and the clamp in double, act rounded to bf16.
    std::vector<float> xf(T * H);
    for (int i = 0; i < T * H; ++i) xf[i] = F(x[i]);
    std::vector<double> ref(T * H, 0.0);
    double act_worst = 0;
    int clamped = 0;
    for (int p = 0; p < P; ++p) {
        const int t = p / K, e = ids[p];
        std::vector<float> a(I);
        for (int i = 0; i < I; ++i) {
            const auto [g, u] = gate_up_ref(w13, &xf[(size_t)t * H], e, i, H, I);
            const double gb = g + F(b13b[e * 2 * I + i]), ub = u + F(b13b[e * 2 * I + I + i]);
            clamped += gb > limit || std::fabs(ub) > limit;
            const double v = clamped_swiglu_ref(gb, ub, alpha, limit);
            a[i] = F(B((float)v));
            act_worst = std::max(act_worst, std::fabs(F(act[(size_t)p * I + i]) - v) / (1e-2 + std::fabs(v)));
        }
        for (int c = 0; c < H; ++c) {
            double yv = F(b2b[e * H + c]);
            for (int i = 0; i < I; ++i) yv += (double)w2[((size_t)e * H + c) * I + i] * a[i];
            ref[t * H + c] += wts[p] * yv;
        }
    }
    double rms = 0, worst = 0;
    for (double v : ref) rms += v * v;
    rms = std::sqrt(rms / std::max(1, T * H));
    for (int i = 0; i < T * H; ++i) worst = std::max(worst, std::fabs(out[i] - ref[i]) / (rms + std::fabs(ref[i])));
    const char* kind = small ? "small_any" : "mma";
    char name[112];
    snprintf(name, 112, "moe_clamped %s T%d E%d: experts of %d, 1 and 0 pairs", kind, T, E, count(0));
    report(name, !counts_ok, 0);
    snprintf(name, 112, "moe_clamped %s act T%d H%d I%d (%d clamped)", kind, T, H, I, clamped);
    report(name, act_worst, 1.6e-2);
    snprintf(name, 112, "moe_clamped %s out T%d H%d I%d", kind, T, H, I);
    report(name, worst, 1e-2);
    snprintf(name, 112, "moe_clamped %s: the clamp bites T%d", kind, T);
    report(name, clamped == 0, 0);
}

static void gpt_oss_tests() {
    t_add_bias(1, 40);
    t_add_bias(7, 36);
    // One token, several, top-4 of 32 experts (gpt-oss-20b's routing) with empty experts, rows
    // aligned (vec) and not, and the float32 path.
    t_moe_clamped(1, 32, 4, 64, 32, false);
    t_moe_clamped(9, 32, 4, 64, 48, false);
    t_moe_clamped(5, 8, 2, 36, 12, false);
    t_moe_clamped(1, 32, 4, 40, 24, true);
    t_moe_clamped(13, 16, 4, 36, 20, true);
    // On tensor cores: the 64-row tiles (expert 0's 70 and 130 pairs in 2 and 3 tiles, a partial
    // column tile at I 80 and a partial down tile at H 96) and the decode-batch _any kernels
    // (expert 0's pairs in 5 chunks of 16).
    t_moe_clamped_mma(70, 8, 96, 80, false);
    t_moe_clamped_mma(130, 12, 64, 48, false);
    t_moe_clamped_mma(70, 8, 128, 64, true);
}
