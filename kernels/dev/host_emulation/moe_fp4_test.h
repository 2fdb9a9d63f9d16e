// moe_fp4.cu's FP4 expert kernels (NVFP4: E4M3 scale per 16 values times a per-row f32
// multiplier; MXFP4: E8M0 scale per 32 values) against a dequantize-then-double reference:
// each weight's format value (e2m1 · scale, the scale an f32 as the kernels form it), the
// expert's products in double, act rounded to bf16 as the device stores it, the weighted sum
// (and gpt-oss's biases and clamped SwiGLU). The routing is moe.cu's (tested in moe_test.h);
// its ids and weights feed the reference. Also moe_down_combine_* against moe_down_* +
// moe_combine bit for bit, and dequant_mxfp4_bf16 exactly. Included by test.cpp
// (EMU_ONLY=moe_fp4).
#pragma once

// FP4 experts as the device holds them: packed [rows, cols / 2], scale bytes [rows, cols /
// BLOCK], globals [rows] (the expert's one value repeated; NVFP4 only), and the values.
struct Fp4Experts {
    std::vector<unsigned char> w, sc;
    std::vector<float> g, wf;
};
static Fp4Experts make_fp4(bool mx, int E, size_t rows_per_expert, int cols) {
    const int block = mx ? 32 : 16;
    const size_t rows = (size_t)E * rows_per_expert;
    Fp4Experts t{std::vector<unsigned char>(rows * cols / 2), std::vector<unsigned char>(rows * cols / block),
                 std::vector<float>(mx ? 0 : rows), std::vector<float>(rows * cols)};
    for (auto& v : t.w) v = (unsigned char)(rng() & 0xff);
    for (size_t i = 0; i < t.w.size(); i += 11) t.w[i] = 0x88;  // negative zeros
    // NVFP4: E4M3 scales 2^-3 .. 2^1 and a global per expert (ModelOpt's amax / (448 · 6)
    // order); MXFP4: E8M0 scales 2^-8 .. 2^-2, with the smallest and largest bytes once.
    for (auto& v : t.sc) v = mx ? (unsigned char)(119 + rng() % 7) : (unsigned char)(0x20 + rng() % 0x28);
    if (mx && t.sc.size() > 2) { t.sc[0] = 0; t.sc[1] = 0xfe; }
    if (!mx)
        for (int e = 0; e < E; ++e) {
            const float ge = std::fabs(U(0.02f)) + 2e-3f;
            for (size_t r = 0; r < rows_per_expert; ++r) t.g[e * rows_per_expert + r] = ge;
        }
    for (size_t i = 0; i < t.wf.size(); ++i) {
        const size_t r = i / cols;
        const int k = (int)(i % cols);
        const unsigned byte = t.w[i / 2];
        const unsigned sb = t.sc[r * (cols / block) + k / block];
        const float s = mx ? std::ldexp(1.0f, (int)sb - 127) : host_e4m3(sb) * t.g[r];
        t.wf[i] = host_e2m1(k % 2 ? byte >> 4 : byte & 15) * s;
    }
    // The extreme MXFP4 scales would swamp the sums: their blocks are zeroed after the values.
    if (mx && t.sc.size() > 2)
        for (int k = 0; k < 64 && k < (int)t.wf.size(); ++k) { t.wf[k] = 0; if (k < 32) t.w[k] = 0; }
    return t;
}

// T tokens, E experts, top-K, hidden H, intermediate I (both multiples of 32). `hot`: expert 0
// takes every token (hundreds of pairs on one expert at T = 300); experts e % 5 == 4 never get
// a token. `clamped`: gpt-oss's experts (gate|up and down biases, clamped SwiGLU).
void t_moe_fp4(int T, int E, int K, int H, int I, bool mx, bool clamped, bool hot) {
    const float alpha = 1.702f, limit = 2.0f;
    std::vector<float> logits(T * E);
    for (int i = 0; i < T * E; ++i) {
        const int e = i % E;
        logits[i] = U(3) + (e % 5 == 4 ? -40.f : 0.f) + (hot && e == 0 ? 40.f : 0.f);
    }
    const int P = T * K;
    std::vector<bf16> xb = random_bf16((size_t)T * H), b13b, b2b;
    std::vector<float> b13, b2;
    if (clamped) {
        for (size_t i = 0; i < (size_t)E * 2 * I; ++i) { b13b.push_back(B(U(1))); b13.push_back(F(b13b.back())); }
        for (size_t i = 0; i < (size_t)E * H; ++i) { b2b.push_back(B(U(1))); b2.push_back(F(b2b.back())); }
    }
    const Fp4Experts w13 = make_fp4(mx, E, 2 * (size_t)I, H), w2 = make_fp4(mx, E, H, I);
    const float* g13 = mx ? nullptr : w13.g.data();
    const float* g2 = mx ? nullptr : w2.g.data();
    Routed routed = route_and_group(logits, T, E, K, true, E > 40 ? 64 : 256);
    auto& [ids, wts, perm, offsets] = routed;
    std::vector<int> active(E + 1, -1);
    launch({1}, {E > 40 ? 64u : 32u}, [&] { moe_active(active.data(), offsets.data(), E); });
    const unsigned rows = (unsigned)std::min(E, P);
    std::vector<bf16> act(P * I);
    std::vector<float> ys(P * H, NAN), out(T * H, NAN);
    launch({(unsigned)((I + 7) / 8), rows}, {256}, [&] {
        if (clamped)
            (mx ? moe_gate_up_clamped_mxfp4 : moe_gate_up_clamped_nvfp4)(act.data(), xb.data(), w13.w.data(), w13.sc.data(), g13, offsets.data(), active.data(), perm.data(), E, K, I, H, b13b.data(), alpha, limit);
        else
            (mx ? moe_gate_up_mxfp4 : moe_gate_up_nvfp4)(act.data(), xb.data(), w13.w.data(), w13.sc.data(), g13, offsets.data(), active.data(), perm.data(), E, K, I, H);
    });
    launch({(unsigned)((H + 7) / 8), rows}, {256}, [&] {
        (mx ? moe_down_mxfp4 : moe_down_nvfp4)(ys.data(), act.data(), w2.w.data(), w2.sc.data(), g2, offsets.data(), active.data(), perm.data(), E, I, H);
    });
    launch({4}, {64}, [&] {
        if (clamped) moe_combine_bias_bf16(out.data(), ys.data(), wts.data(), ids.data(), b2b.data(), T, K, H);
        else moe_combine(out.data(), ys.data(), wts.data(), T, K, H);
    });
    // Reference, from the same routing.
    int most = 0, empty = 0;
    for (int e = 0; e < E; ++e) {
        most = std::max(most, offsets[e + 1] - offsets[e]);
        empty += offsets[e + 1] == offsets[e];
    }
    std::vector<double> ref(T * H, 0.0);
    double rms = 0, worst = 0, worst_act = 0;
    for (int t = 0; t < T; ++t)
        for (int j = 0; j < K; ++j) {
            const int p = t * K + j, e = ids[p];
            std::vector<double> a(I);
            for (int i = 0; i < I; ++i) {
                double g = 0, u = 0;
                for (int h = 0; h < H; ++h) {
                    const double xv = F(xb[t * H + h]);
                    g += (double)w13.wf[((size_t)e * 2 * I + i) * H + h] * xv;
                    u += (double)w13.wf[((size_t)e * 2 * I + I + i) * H + h] * xv;
                }
                double v;
                if (clamped) v = clamped_swiglu_ref(g + b13[e * 2 * I + i], u + b13[e * 2 * I + I + i], alpha, limit);
                else v = g / (1 + std::exp(-g)) * u;
                worst_act = std::max(worst_act, std::fabs(F(act[(size_t)p * I + i]) - v) / (std::fabs(v) + 1e-2));
                a[i] = F(act[(size_t)p * I + i]);  // the device's rounding, so down is checked alone
            }
            for (int c = 0; c < H; ++c) {
                double y = clamped ? b2[e * H + c] : 0;
                for (int i = 0; i < I; ++i) y += (double)w2.wf[((size_t)e * H + c) * I + i] * a[i];
                ref[t * H + c] += (double)wts[p] * y;
            }
        }
    for (double v : ref) rms += v * v;
    rms = std::sqrt(rms / std::max(1, T * H));
    for (int i = 0; i < T * H; ++i) worst = std::max(worst, std::fabs(out[i] - ref[i]) / (rms + std::fabs(ref[i])));
    char name[128];
    const char* kind = mx ? (clamped ? "mxfp4 clamped" : "mxfp4") : (clamped ? "nvfp4 clamped" : "nvfp4");
    snprintf(name, 128, "moe_fp4 %s act T%d E%d k%d H%d I%d", kind, T, E, K, H, I);
    report(name, worst_act, 2e-2);
    snprintf(name, 128, "moe_fp4 %s out (%d empty, most %d pairs)", kind, empty, most);
    report(name, worst, 1e-4);
    // Down + weighted sum in one launch (the decode path, T <= 8): the same bits.
    if (!clamped && T <= MOE_FUSED_DOWN_TOKENS) {
        std::vector<float> out1(T * H, NAN);
        launch({(unsigned)(T * H)}, {(unsigned)(32 * K)}, [&] {
            (mx ? moe_down_combine_mxfp4 : moe_down_combine_nvfp4)(out1.data(), act.data(), w2.w.data(), w2.sc.data(), g2, ids.data(), wts.data(), T, K, I, H);
        });
        snprintf(name, 128, "moe_fp4 %s down_combine = down + combine T%d", kind, T);
        report(name, memcmp(out1.data(), out.data(), out.size() * 4) != 0, 0);
    }
    // The one-token kernels (any few tokens: their loops take each pair): gate|up _dec writes
    // the same act, down_combine_dec{1,2,4} (gpt-oss's down bias inside) the same out.
    if (T <= MOE_FUSED_DOWN_TOKENS) {
        std::vector<bf16> act1(P * I);
        launch({(unsigned)((I + 7) / 8), rows}, {256}, [&] {
            if (clamped)
                (mx ? moe_gate_up_clamped_dec_mxfp4 : moe_gate_up_clamped_dec_nvfp4)(act1.data(), xb.data(), w13.w.data(), w13.sc.data(), g13, offsets.data(), active.data(), perm.data(), E, K, I, H, b13b.data(), alpha, limit);
            else
                (mx ? moe_gate_up_dec_mxfp4 : moe_gate_up_dec_nvfp4)(act1.data(), xb.data(), w13.w.data(), w13.sc.data(), g13, offsets.data(), active.data(), perm.data(), E, K, I, H);
        });
        snprintf(name, 128, "moe_fp4 %s gate_up_dec = gate_up T%d", kind, T);
        report(name, memcmp(act1.data(), act.data(), act.size() * 2) != 0, 0);
        const bf16* bias = clamped ? b2b.data() : nullptr;
        for (int cols : {1, 2, 4}) {
            if (H % cols) continue;
            std::vector<float> out1(T * H, NAN);
            launch({(unsigned)(T * H / cols)}, {(unsigned)(32 * K)}, [&] {
                auto f = cols == 1 ? (mx ? moe_down_combine_dec1_mxfp4 : moe_down_combine_dec1_nvfp4)
                       : cols == 2 ? (mx ? moe_down_combine_dec2_mxfp4 : moe_down_combine_dec2_nvfp4)
                                   : (mx ? moe_down_combine_dec4_mxfp4 : moe_down_combine_dec4_nvfp4);
                f(out1.data(), act.data(), w2.w.data(), w2.sc.data(), g2, ids.data(), wts.data(), T, K, I, H, bias);
            });
            snprintf(name, 128, "moe_fp4 %s down_combine_dec%d = down + combine T%d", kind, cols, T);
            report(name, memcmp(out1.data(), out.data(), out.size() * 4) != 0, 0);
        }
    }
}

// dequant_mxfp4_bf16 (a stray stack's bf16 copy for the step): every value exactly.
void t_dequant_mxfp4(int rows, int k) {
    Fp4Experts t = make_fp4(true, 1, rows, k);
    std::vector<bf16> out((size_t)rows * k);
    launch({3}, {32}, [&] { dequant_mxfp4_bf16(out.data(), t.w.data(), t.sc.data(), rows, k); });
    int bad = 0;
    for (size_t i = 0; i < out.size(); ++i) {
        const unsigned byte = t.w[i / 2], sb = t.sc[i / 32];
        const float v = host_e2m1(i % 2 ? byte >> 4 : byte & 15) * std::ldexp(1.0f, (int)sb - 127);
        bad += F(out[i]) != v;
    }
    char name[96];
    snprintf(name, 96, "dequant_mxfp4_bf16 %dx%d exact", rows, k);
    report(name, bad, 0);
}

static void moe_fp4_tests() {
    t_e2m1_values();
    t_dequant_mxfp4(5, 96);
    t_dequant_mxfp4(7, 32);
    t_dequant_mxfp4(3, 416);
    for (bool mx : {false, true}) {
        // Decode sizes (one token, a few), Qwen3.6-35B-A3B's routing shape (top-8 of 128 at a
        // reduced width), odd expert counts and widths of an odd number of 32-value chunks.
        t_moe_fp4(1, 8, 2, 64, 32, mx, false, false);
        t_moe_fp4(3, 40, 8, 96, 160, mx, false, false);
        t_moe_fp4(8, 128, 8, 32, 64, mx, false, false);
        t_moe_fp4(9, 7, 3, 160, 96, mx, false, false);
        // Hundreds of pairs on one expert (expert 0 takes all 300 tokens) beside empty ones.
        t_moe_fp4(300, 5, 2, 64, 32, mx, false, true);
        // gpt-oss's clamped experts (top-4 of 32) on the same kernels.
        t_moe_fp4(1, 32, 4, 64, 96, mx, true, false);
        t_moe_fp4(13, 16, 4, 96, 64, mx, true, false);
        // Rows past one _dec group (3,072 columns): a second group of loads, for every pair
        // (gate|up's rows, then down's).
        t_moe_fp4(2, 6, 2, 3136, 64, mx, true, false);
        t_moe_fp4(1, 4, 2, 64, 3104, mx, false, false);
    }
}
