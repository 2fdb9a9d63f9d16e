// Nemotron-H's routed experts (EMU_ONLY=moe_relu2): fused_moe_relu2's launches on the CUDA cores
// (engine/src/backend/cuda/nemotron_moe.rs) against a plain loop of the CPU reference's
// arithmetic (engine/src/backend/cpu/moe.rs, fused_moe_relu2): the sigmoid routing with the
// correction bias (moe_plan_one_sigmoid_* at one token, moe_plan_sigmoid_* up to 32 tokens,
// moe_route_sigmoid_* + moe_group + moe_active beyond), moe_up_relu2_* (one up row an output,
// relu(u)², rounded to the activation type), moe_down_* + moe_combine, and moe_down_combine_*
// (at most 8 tokens) bit for bit against those two. The reference: route_sigmoid's choices and
// weights (f32, as the CPU), each chosen expert's up product in double, relu², then down on the
// device's act (so act and down are checked apart) and the weighted sum in double. Weights:
// bf16 (the 16-byte and the scalar loops), e4m3 with a scale per 128 columns of each row, f32
// (the float32 path), NVFP4 and MXFP4 kept packed. Included by test.cpp after moe_fp4_test.h.
#pragma once

enum class Relu2W { Bf16, Fp8, Fp32, Nvfp4, Mxfp4 };

// One stack (up [E, I, H] or down [E, H, I]) in every form a kind needs, and its values.
struct Relu2Stack {
    std::vector<bf16> b;
    std::vector<unsigned char> q;
    std::vector<float> s, f;  // FP8 scales; the values (f32 kind: the weights themselves)
    Fp4Experts fp4;
};
static Relu2Stack relu2_stack(Relu2W kind, int E, size_t rows_per_expert, int cols) {
    Relu2Stack st;
    if (kind == Relu2W::Nvfp4 || kind == Relu2W::Mxfp4) {
        st.fp4 = make_fp4(kind == Relu2W::Mxfp4, E, rows_per_expert, cols);
        st.f = st.fp4.wf;
    } else {
        fill_weights(kind == Relu2W::Fp8, st.f, st.b, st.q, st.s, (size_t)E * rows_per_expert, cols);
    }
    return st;
}

// T tokens, E experts (those with e % 5 == 4 never chosen: their bias is far below), top-K of G
// groups with KG kept, hidden H, intermediate I, the experts of `kind`.
void t_moe_relu2(int T, int E, int K, int H, int I, Relu2W kind, int G = 1, int KG = 1) {
    const bool norm = true;
    const float scaling = 2.5f;
    const bool fp4 = kind == Relu2W::Nvfp4 || kind == Relu2W::Mxfp4, mx = kind == Relu2W::Mxfp4;
    const bool f32 = kind == Relu2W::Fp32, fp8 = kind == Relu2W::Fp8;
    std::vector<float> logits(T * E), bias(E);
    for (auto& v : logits) v = U(3);
    for (int e = 0; e < E; ++e) bias[e] = U(0.1f) - (e % 5 == 4 ? 4.f : 0.f);
    const int P = T * K;
    // 1-2. Routing and grouping, by the launches the plan takes for this step.
    std::vector<int> ids(P, -1), perm(P, -1), offsets(E + 1, -1), active(E + 1, -1);
    std::vector<float> wts(P, NAN);
    if (T == 1) {
        launch({1}, {32}, [&] { moe_plan_one_sigmoid_f32(ids.data(), wts.data(), offsets.data(), perm.data(), active.data(), logits.data(), E, K, norm, bias.data(), scaling, G, KG); });
    } else if (P <= MOE_PLAN_MAX_PAIRS && T <= 32) {
        launch({1}, {64}, [&] { moe_plan_sigmoid_f32(ids.data(), wts.data(), offsets.data(), perm.data(), active.data(), logits.data(), T, E, K, norm, bias.data(), scaling, G, KG); });
    } else {
        launch({(unsigned)((T + 3) / 4)}, {128}, [&] { moe_route_sigmoid_f32(ids.data(), wts.data(), logits.data(), T, E, K, norm, bias.data(), scaling, G, KG); });
        launch({(unsigned)E}, {E > 40 ? 64u : 256u}, [&] { moe_group(offsets.data(), perm.data(), ids.data(), P, E); });
        launch({1}, {64}, [&] { moe_active(active.data(), offsets.data(), E); });
    }
    // 3-5. The experts.
    const Relu2Stack up = relu2_stack(kind, E, I, H), down = relu2_stack(kind, E, H, I);
    std::vector<bf16> xb = random_bf16((size_t)T * H);
    std::vector<float> xf(xb.size());
    for (size_t i = 0; i < xb.size(); ++i) xf[i] = F(xb[i]);
    const bool vec = fp8 ? H % 16 == 0 && I % 16 == 0 : kind == Relu2W::Bf16 && H % 8 == 0 && I % 8 == 0;
    const unsigned rows = (unsigned)std::min(E, P);
    std::vector<bf16> actb(f32 ? 0 : (size_t)P * I, B(NAN));
    std::vector<float> actf(f32 ? (size_t)P * I : 0, NAN), ys((size_t)P * H, NAN), out((size_t)T * H, NAN);
    const float* ug = fp4 && !mx ? up.fp4.g.data() : nullptr;
    const float* dg = fp4 && !mx ? down.fp4.g.data() : nullptr;
    launch({(unsigned)((I + 7) / 8), rows}, {256}, [&] {
        const int* o = offsets.data(); const int* a = active.data(); const int* p = perm.data();
        switch (kind) {
        case Relu2W::Bf16: (vec ? moe_up_relu2_bf16_vec : moe_up_relu2_bf16)(actb.data(), xb.data(), up.b.data(), nullptr, o, a, p, E, K, I, H); break;
        case Relu2W::Fp8: (vec ? moe_up_relu2_fp8_vec : moe_up_relu2_fp8)(actb.data(), xb.data(), up.q.data(), up.s.data(), o, a, p, E, K, I, H); break;
        case Relu2W::Fp32: moe_up_relu2_fp32(actf.data(), xf.data(), up.f.data(), nullptr, o, a, p, E, K, I, H); break;
        default: (mx ? moe_up_relu2_mxfp4 : moe_up_relu2_nvfp4)(actb.data(), xb.data(), up.fp4.w.data(), up.fp4.sc.data(), ug, o, a, p, E, K, I, H); break;
        }
    });
    launch({(unsigned)((H + 7) / 8), rows}, {256}, [&] {
        const int* o = offsets.data(); const int* a = active.data(); const int* p = perm.data();
        switch (kind) {
        case Relu2W::Bf16: (vec ? moe_down_bf16_vec : moe_down_bf16)(ys.data(), actb.data(), down.b.data(), nullptr, o, a, p, E, I, H); break;
        case Relu2W::Fp8: (vec ? moe_down_fp8_vec : moe_down_fp8)(ys.data(), actb.data(), down.q.data(), down.s.data(), o, a, p, E, I, H); break;
        case Relu2W::Fp32: moe_down_fp32(ys.data(), actf.data(), down.f.data(), nullptr, o, a, p, E, I, H); break;
        default: (mx ? moe_down_mxfp4 : moe_down_nvfp4)(ys.data(), actb.data(), down.fp4.w.data(), down.fp4.sc.data(), dg, o, a, p, E, I, H); break;
        }
    });
    launch({4}, {64}, [&] { moe_combine(out.data(), ys.data(), wts.data(), T, K, H); });
    // Down and the weighted sum in one launch (decode steps of up to 8 tokens): the same output
    // bit for bit.
    int fused_bad = -1;
    if (T <= MOE_FUSED_DOWN_TOKENS) {
        std::vector<float> out1((size_t)T * H, NAN);
        launch({(unsigned)(T * H)}, {32u * K}, [&] {
            switch (kind) {
            case Relu2W::Bf16: (vec ? moe_down_combine_bf16_vec : moe_down_combine_bf16)(out1.data(), actb.data(), down.b.data(), nullptr, ids.data(), wts.data(), T, K, I, H); break;
            case Relu2W::Fp8: (vec ? moe_down_combine_fp8_vec : moe_down_combine_fp8)(out1.data(), actb.data(), down.q.data(), down.s.data(), ids.data(), wts.data(), T, K, I, H); break;
            case Relu2W::Fp32: moe_down_combine_fp32(out1.data(), actf.data(), down.f.data(), nullptr, ids.data(), wts.data(), T, K, I, H); break;
            default: (mx ? moe_down_combine_mxfp4 : moe_down_combine_nvfp4)(out1.data(), actb.data(), down.fp4.w.data(), down.fp4.sc.data(), dg, ids.data(), wts.data(), T, K, I, H); break;
            }
        });
        fused_bad = memcmp(out1.data(), out.data(), out.size() * sizeof(float)) != 0;
    }
    // The reference.
    int bad_ids = 0, zeroed = 0, empty = 0;
    double worst_w = 0, worst_act = 0, worst = 0, rms = 0;
    std::vector<double> ref((size_t)T * H, 0.0);
    for (int e = 0; e < E; ++e) empty += offsets[e + 1] == offsets[e];
    for (int t = 0; t < T; ++t) {
        const auto chosen = sigmoid_route_ref(&logits[t * E], bias, K, norm, scaling, G, KG);
        for (int j = 0; j < K; ++j) {
            const int p = t * K + j, e = chosen[j].first;
            bad_ids += ids[p] != e;
            worst_w = std::max(worst_w, (double)std::fabs(wts[p] - chosen[j].second) / chosen[j].second);
            std::vector<double> a(I);
            for (int i = 0; i < I; ++i) {
                double u = 0;
                for (int h = 0; h < H; ++h) u += (double)up.f[((size_t)e * I + i) * H + h] * xf[t * H + h];
                const double r = std::max(u, 0.0), v = r * r;
                zeroed += u <= 0;
                const double got = f32 ? actf[(size_t)p * I + i] : F(actb[(size_t)p * I + i]);
                worst_act = std::max(worst_act, std::fabs(got - v) / (v + 1e-2));
                a[i] = got;  // the device's rounding, so down is checked alone
            }
            for (int c = 0; c < H; ++c) {
                double y = 0;
                for (int i = 0; i < I; ++i) y += (double)down.f[((size_t)e * H + c) * I + i] * a[i];
                ref[t * H + c] += (double)wts[p] * y;
            }
        }
    }
    for (double v : ref) rms += v * v;
    rms = std::sqrt(rms / std::max(1, T * H));
    for (int i = 0; i < T * H; ++i) worst = std::max(worst, std::fabs(out[i] - ref[i]) / (rms + std::fabs(ref[i])));
    static const char* names[] = {"bf16", "fp8", "fp32", "nvfp4", "mxfp4"};
    char kname[16];
    snprintf(kname, 16, "%s%s", names[(int)kind], vec ? "_vec" : "");
    char name[112];
    snprintf(name, 112, "moe_relu2 %s ids T%d E%d k%d g%d/%d", kname, T, E, K, KG, G);
    report(name, bad_ids, 0);
    snprintf(name, 112, "moe_relu2 %s weights T%d E%d k%d", kname, T, E, K);
    report(name, worst_w, 1e-6);
    // act: relu² of a double sum, rounded to bf16 (2^-9 relative) unless f32; a quarter to
    // three quarters of the products are negative (relu's zeros).
    snprintf(name, 112, "moe_relu2 %s act T%d H%d I%d (%d of %d zeroed)", kname, T, H, I, zeroed, P * I);
    report(name, worst_act, f32 ? 1e-5 : 5e-3);
    snprintf(name, 112, "moe_relu2 %s out T%d H%d I%d (%d experts idle)", kname, T, H, I, empty);
    report(name, worst, 1e-4);
    if (fused_bad >= 0) {
        snprintf(name, 112, "moe_relu2 %s down_combine = down+combine T%d", kname, T);
        report(name, fused_bad, 0);
    }
}

static void moe_relu2_tests() {
    // The tiny fixture's shape (8 experts, top-2, hidden 64, width 32); decode steps of 1, 3 and
    // 8 tokens; 40 (past the one-block plan's 32 tokens); odd widths on the scalar loops; groups.
    for (Relu2W k : {Relu2W::Bf16, Relu2W::Fp8, Relu2W::Fp32}) {
        t_moe_relu2(1, 8, 2, 64, 32, k);
        t_moe_relu2(3, 16, 6, 128, 48, k);
        t_moe_relu2(8, 10, 3, 256, 64, k);
        t_moe_relu2(40, 16, 4, 64, 32, k);
        t_moe_relu2(5, 10, 3, 100, 37, k);
        t_moe_relu2(2, 16, 4, 72, 24, k, 4, 2);
    }
    // FP8 rows of 272 columns: three scale blocks, the last partial (scalar loop at 272/24).
    t_moe_relu2(4, 8, 2, 272, 24, Relu2W::Fp8);
    // FP4 stacks: rows of whole 32-value chunks.
    for (Relu2W k : {Relu2W::Nvfp4, Relu2W::Mxfp4}) {
        t_moe_relu2(1, 8, 2, 64, 32, k);
        t_moe_relu2(6, 16, 6, 128, 64, k);
        t_moe_relu2(40, 10, 3, 64, 32, k);
    }
}
