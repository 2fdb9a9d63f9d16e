// moe.cu / moe_decode.cu and the float32 path's expert kernels against plain loops, and the
// case lists of the MoE groups. Included by test.cpp.
#pragma once

// Mixture of experts: the five kernels of moe.cu against a plain loop (route like the CPU
// reference: softmax in f32, top-k by logit bits descending then expert index; each chosen
// expert's gate|up, SiLU, act rounded to bf16 as the device stores it, down, weighted sum in
// double). `ties` makes logits repeat so the index rule decides; `fp8` stores the expert weights
// as e4m3 bytes with a scale per 128 columns of each row.
static float host_e4m3(unsigned b) { return emu_e4m3(b); }

// Expert weights as the device holds them (bf16, or e4m3 bytes with one scale per 128 columns of
// each row, no NaN bytes) and their f32 values: gate|up [E, 2I, H], down [E, H, I].
struct Experts {
    std::vector<bf16> w13b, w2b;
    std::vector<unsigned char> w13q, w2q;
    std::vector<float> s13, s2, w13, w2;
};
static void fill_weights(bool fp8, std::vector<float>& wf, std::vector<bf16>& wb,
                         std::vector<unsigned char>& wq, std::vector<float>& sc, size_t rows, int cols) {
    const int gc = (cols + 127) / 128;
    wf.resize(rows * cols);
    if (fp8) {
        wq.resize(wf.size());
        sc.resize(rows * gc);
        for (auto& s : sc) s = std::fabs(U(0.01f)) + 1e-3f;
        for (size_t i = 0; i < wf.size(); ++i) {
            unsigned b;
            do b = rng() & 0xff; while ((b & 0x7f) == 0x7f);
            wq[i] = (unsigned char)b;
            wf[i] = host_e4m3(b) * sc[(i / cols) * gc + (i % cols) / 128];
        }
    } else {
        wb.resize(wf.size());
        for (size_t i = 0; i < wf.size(); ++i) { wb[i] = B(U(0.2f)); wf[i] = F(wb[i]); }
    }
}
static std::vector<bf16> random_bf16(size_t n) {
    std::vector<bf16> v(n);
    for (auto& e : v) e = B(U(1));
    return v;
}
// A step's routing (moe_route_f32) and grouping (moe_group): ids and weights [T·k], perm, offsets.
struct Routed {
    std::vector<int> ids;
    std::vector<float> wts;
    std::vector<int> perm, offsets;
};
static Routed route_and_group(const std::vector<float>& logits, int T, int E, int K, bool norm,
                              unsigned group_threads) {
    const int P = T * K;
    Routed r{std::vector<int>(P, -1), std::vector<float>(P, NAN), std::vector<int>(P, -1), std::vector<int>(E + 1, -1)};
    launch({(unsigned)((T + 3) / 4)}, {128}, [&] { moe_route_f32(r.ids.data(), r.wts.data(), logits.data(), T, E, K, norm); });
    launch({(unsigned)E}, {group_threads}, [&] { moe_group(r.offsets.data(), r.perm.data(), r.ids.data(), P, E); });
    return r;
}
static Experts make_experts(int E, int H, int I, bool fp8) {
    Experts x;
    fill_weights(fp8, x.w13, x.w13b, x.w13q, x.s13, (size_t)E * 2 * I, H);
    fill_weights(fp8, x.w2, x.w2b, x.w2q, x.s2, (size_t)E * H, I);
    return x;
}
// Expert e's gate and up rows i (of gate|up [E, 2I, H] in f32) against one x row, in double.
static std::pair<double, double> gate_up_ref(const std::vector<float>& w13, const float* x, int e,
                                             int i, int H, int I) {
    double g = 0, u = 0;
    for (int h = 0; h < H; ++h) {
        g += (double)w13[((size_t)e * 2 * I + i) * H + h] * x[h];
        u += (double)w13[((size_t)e * 2 * I + I + i) * H + h] * x[h];
    }
    return {g, u};
}
static u32 host_key(float v) { u32 u; memcpy(&u, &v, 4); return (u & 0x80000000u) ? ~u : (u | 0x80000000u); }

void t_moe(int T, int E, int K, int H, int I, bool norm, bool fp8, bool ties) {
    std::vector<float> logits(T * E);
    for (auto& v : logits) v = ties ? (float)(int)U(3) : U(3);
    const std::vector<bf16> x = random_bf16(T * H);
    const Experts ex = make_experts(E, H, I, fp8);
    const auto& [w13b, w2b, w13q, w2q, s13, s2, w13, w2] = ex;
    const int P = T * K;
    const unsigned group_threads = E > 40 ? 64 : 256;
    Routed routed = route_and_group(logits, T, E, K, norm, group_threads);
    auto& [ids, wts, perm, offsets] = routed;
    std::vector<float> ys(P * H, NAN), out(T * H, NAN);
    std::vector<bf16> act(P * I);
    std::vector<int> active(E + 1, -1);
    launch({1}, {E > 40 ? 64u : 32u}, [&] { moe_active(active.data(), offsets.data(), E); });
    const bool vec = fp8 ? (H % 16 == 0 && I % 16 == 0) : (H % 8 == 0 && I % 8 == 0);
    const unsigned rows = (unsigned)std::min(E, P);
    launch({(unsigned)((I + 7) / 8), rows}, {256}, [&] {
        if (fp8) (vec ? moe_gate_up_fp8_vec : moe_gate_up_fp8)(act.data(), x.data(), w13q.data(), s13.data(), offsets.data(), active.data(), perm.data(), E, K, I, H);
        else (vec ? moe_gate_up_bf16_vec : moe_gate_up_bf16)(act.data(), x.data(), w13b.data(), nullptr, offsets.data(), active.data(), perm.data(), E, K, I, H);
    });
    launch({(unsigned)((H + 7) / 8), rows}, {256}, [&] {
        if (fp8) (vec ? moe_down_fp8_vec : moe_down_fp8)(ys.data(), act.data(), w2q.data(), s2.data(), offsets.data(), active.data(), perm.data(), E, I, H);
        else (vec ? moe_down_bf16_vec : moe_down_bf16)(ys.data(), act.data(), w2b.data(), nullptr, offsets.data(), active.data(), perm.data(), E, I, H);
    });
    int bad_active = 0, n_active = 0;
    for (int e = 0; e < E; ++e)
        if (offsets[e + 1] > offsets[e]) { if (n_active >= E || active[n_active] != e) ++bad_active; ++n_active; }
    if (active[E] != n_active) ++bad_active;
    launch({4}, {64}, [&] { moe_combine(out.data(), ys.data(), wts.data(), T, K, H); });
    char name[96];
    // The launcher's small-step paths against the six launches above, bit for bit: moe_plan
    // (routing in one block, both logit types) when T·k <= MOE_PLAN_MAX_PAIRS, and
    // moe_down_combine (down + combine in one launch) when T <= MOE_FUSED_DOWN_TOKENS.
    if (P <= MOE_PLAN_MAX_PAIRS) {
        int bad = 0;
        std::vector<bf16> logits_b(T * E);
        for (int i = 0; i < T * E; ++i) logits_b[i] = B(logits[i]);
        for (bool bf : {false, true}) {
            // The three launches' results (the f32 ones are those above).
            std::vector<int> ids3 = ids, perm3 = perm, off3 = offsets, act3 = active;
            std::vector<float> wts3 = wts;
            if (bf) {
                std::fill(ids3.begin(), ids3.end(), -1); std::fill(perm3.begin(), perm3.end(), -1);
                std::fill(off3.begin(), off3.end(), -1); std::fill(act3.begin(), act3.end(), -1);
                std::fill(wts3.begin(), wts3.end(), NAN);
                launch({(unsigned)((T + 3) / 4)}, {128}, [&] { moe_route_bf16(ids3.data(), wts3.data(), logits_b.data(), T, E, K, norm); });
                launch({(unsigned)E}, {group_threads}, [&] { moe_group(off3.data(), perm3.data(), ids3.data(), P, E); });
                launch({1}, {64}, [&] { moe_active(act3.data(), off3.data(), E); });
            }
            std::vector<int> ids1(P, -1), perm1(P, -1), off1(E + 1, -1), act1(E + 1, -1);
            std::vector<float> wts1(P, NAN);
            // Fewer threads than the launcher's MOE_PLAN_THREADS (the kernel takes any multiple
            // of 32) except at its largest step: host threads are slow to start.
            launch({1}, {P == MOE_PLAN_MAX_PAIRS ? MOE_PLAN_THREADS : 64u}, [&] {
                if (bf) moe_plan_bf16(ids1.data(), wts1.data(), off1.data(), perm1.data(), act1.data(), logits_b.data(), T, E, K, norm);
                else moe_plan_f32(ids1.data(), wts1.data(), off1.data(), perm1.data(), act1.data(), logits.data(), T, E, K, norm);
            });
            bad += ids1 != ids3 || perm1 != perm3 || off1 != off3 || act1 != act3;
            bad += memcmp(wts1.data(), wts3.data(), P * sizeof(float)) != 0;
            // The one-block grouping alone (moe_group_plan, after moe_route_* in its own
            // launch) on the routed ids: the same offsets, perm and active list.
            std::vector<int> perm5(P, -1), off5(E + 1, -1), act5(E + 1, -1);
            launch({1}, {P == MOE_PLAN_MAX_PAIRS ? MOE_PLAN_THREADS : 96u}, [&] {
                moe_group_plan(off5.data(), perm5.data(), act5.data(), ids3.data(), P, E);
            });
            bad += perm5 != perm3 || off5 != off3 || act5 != act3;
            if (T == 1) {
                // The one-token plan (one warp) writes the same entries.
                std::vector<int> ids2(P, -1), perm2(P, -1), off2(E + 1, -1), act2(E + 1, -1);
                std::vector<float> wts2(P, NAN);
                launch({1}, {32}, [&] {
                    if (bf) moe_plan_one_bf16(ids2.data(), wts2.data(), off2.data(), perm2.data(), act2.data(), logits_b.data(), E, K, norm);
                    else moe_plan_one_f32(ids2.data(), wts2.data(), off2.data(), perm2.data(), act2.data(), logits.data(), E, K, norm);
                });
                bad += ids2 != ids3 || perm2 != perm3 || off2 != off3 || act2 != act3;
                bad += memcmp(wts2.data(), wts3.data(), P * sizeof(float)) != 0;
            }
        }
        if (T == 1 && H % 8 == 0 && E <= 256) {
            // The router's GEMV fused with the one-token plan: logits bit for bit gemv_m1's,
            // the plan moe_plan_one's on them; the ticket back at 0; twice (a graph replays it).
            std::vector<bf16> router = random_bf16(E * H);
            std::vector<float> lg(E, NAN), lg1(E, NAN);
            launch({(unsigned)((E + 7) / 8)}, {256}, [&] { gemv_m1(lg.data(), x.data(), router.data(), E, H); });
            std::vector<int> ids2(P, -1), perm2(P, -1), off2(E + 1, -1), act2(E + 1, -1);
            std::vector<float> wts2(P, NAN);
            launch({1}, {32}, [&] { moe_plan_one_f32(ids2.data(), wts2.data(), off2.data(), perm2.data(), act2.data(), lg.data(), E, K, norm); });
            unsigned ticket = 0;
            for (int rep = 0; rep < 2; ++rep) {
                std::vector<int> ids4(P, -1), perm4(P, -1), off4(E + 1, -1), act4(E + 1, -1);
                std::vector<float> wts4(P, NAN);
                launch({(unsigned)((E + 7) / 8)}, {256}, [&] { moe_router_plan_one(lg1.data(), x.data(), router.data(), E, H, &ticket, ids4.data(), wts4.data(), off4.data(), perm4.data(), act4.data(), K, norm, nullptr); });
                int bad4 = ticket != 0 || memcmp(lg.data(), lg1.data(), E * sizeof(float)) != 0;
                bad4 += ids4 != ids2 || perm4 != perm2 || off4 != off2 || act4 != act2;
                bad4 += memcmp(wts4.data(), wts2.data(), P * sizeof(float)) != 0;
                snprintf(name, 96, "moe router+plan = gemv_m1+plan_one E%d k%d H%d rep %d", E, K, H, rep);
                report(name, bad4, 0);
            }
            // With gpt-oss's router bias: gemv_bias_m1's logits, moe_plan_one's plan on them.
            std::vector<bf16> rbias = random_bf16(E);
            std::vector<float> lgb(E, NAN), lgb1(E, NAN);
            launch({(unsigned)((E + 7) / 8)}, {256}, [&] { gemv_bias_m1(lgb.data(), x.data(), router.data(), E, H, rbias.data()); });
            std::vector<int> ids5(P, -1), perm5(P, -1), off5(E + 1, -1), act5(E + 1, -1), ids6(P, -1), perm6(P, -1), off6(E + 1, -1), act6(E + 1, -1);
            std::vector<float> wts5(P, NAN), wts6(P, NAN);
            launch({1}, {32}, [&] { moe_plan_one_f32(ids5.data(), wts5.data(), off5.data(), perm5.data(), act5.data(), lgb.data(), E, K, norm); });
            launch({(unsigned)((E + 7) / 8)}, {256}, [&] { moe_router_plan_one(lgb1.data(), x.data(), router.data(), E, H, &ticket, ids6.data(), wts6.data(), off6.data(), perm6.data(), act6.data(), K, norm, rbias.data()); });
            int bad6 = ticket != 0 || memcmp(lgb.data(), lgb1.data(), E * sizeof(float)) != 0;
            bad6 += ids6 != ids5 || perm6 != perm5 || off6 != off5 || act6 != act5;
            bad6 += memcmp(wts6.data(), wts5.data(), P * sizeof(float)) != 0;
            snprintf(name, 96, "moe router+bias+plan = gemv_bias_m1+plan_one E%d k%d H%d", E, K, H);
            report(name, bad6, 0);
        }
        snprintf(name, 96, "moe plan = route+group+active T%d E%d k%d", T, E, K);
        report(name, bad, 0);
    }
    if (T <= MOE_FUSED_DOWN_TOKENS && vec) {
        // The decode gate_up (a lane's loads in flight, pairs one at a time): the same act.
        std::vector<bf16> act1(P * I);
        launch({(unsigned)((I + 7) / 8), rows}, {256}, [&] {
            if (fp8) moe_gate_up_dec_fp8_vec(act1.data(), x.data(), w13q.data(), s13.data(), offsets.data(), active.data(), perm.data(), E, K, I, H);
            else moe_gate_up_dec_bf16_vec(act1.data(), x.data(), w13b.data(), nullptr, offsets.data(), active.data(), perm.data(), E, K, I, H);
        });
        snprintf(name, 96, "moe%s gate_up_dec = gate_up T%d H%d I%d", fp8 ? " fp8" : "", T, H, I);
        report(name, memcmp(act1.data(), act.data(), P * I * sizeof(bf16)) != 0, 0);
    }
    if (T <= MOE_FUSED_DOWN_TOKENS) {
        std::vector<float> out1(T * H, NAN);
        launch({(unsigned)(T * H)}, {(unsigned)(32 * K)}, [&] {
            if (fp8) (vec ? moe_down_combine_fp8_vec : moe_down_combine_fp8)(out1.data(), act.data(), w2q.data(), s2.data(), ids.data(), wts.data(), T, K, I, H);
            else (vec ? moe_down_combine_bf16_vec : moe_down_combine_bf16)(out1.data(), act.data(), w2b.data(), nullptr, ids.data(), wts.data(), T, K, I, H);
        });
        snprintf(name, 96, "moe%s down_combine = down+combine T%d H%d I%d", fp8 ? " fp8" : "", T, H, I);
        report(name, memcmp(out1.data(), out.data(), T * H * sizeof(float)) != 0, 0);
    }
    if (T <= MOE_FUSED_DOWN_TOKENS && vec) {
        // The decode down + combine (rows loaded before the wait), 1, 2 and 4 columns a block.
        int bad = 0;
        for (int cols : {1, 2, 4}) {
            if (H % cols) continue;
            std::vector<float> out1(T * H, NAN);
            launch({(unsigned)(T * H / cols)}, {(unsigned)(32 * K)}, [&] {
#define DEC(C) (fp8 ? moe_down_combine_dec##C##_fp8_vec(out1.data(), act.data(), w2q.data(), s2.data(), ids.data(), wts.data(), T, K, I, H) \
                    : moe_down_combine_dec##C##_bf16_vec(out1.data(), act.data(), w2b.data(), nullptr, ids.data(), wts.data(), T, K, I, H))
                if (cols == 1) DEC(1); else if (cols == 2) DEC(2); else DEC(4);
#undef DEC
            });
            bad += memcmp(out1.data(), out.data(), T * H * sizeof(float)) != 0;
        }
        snprintf(name, 96, "moe%s down_combine_dec = down+combine T%d H%d I%d", fp8 ? " fp8" : "", T, H, I);
        report(name, bad, 0);
    }
    // Reference routing.
    int bad_ids = 0;
    double worst_w = 0, worst = 0, rms = 0;
    std::vector<double> ref(T * H, 0.0);
    for (int t = 0; t < T; ++t) {
        const float* row = &logits[t * E];
        float mx = -INFINITY;
        for (int e = 0; e < E; ++e) mx = std::max(mx, row[e]);
        std::vector<float> ex(E);
        float sum = 0;
        for (int e = 0; e < E; ++e) { ex[e] = std::exp(row[e] - mx); sum += ex[e]; }
        std::vector<int> order(E);
        for (int e = 0; e < E; ++e) order[e] = e;
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return host_key(row[a]) > host_key(row[b]); });
        std::vector<std::pair<int, float>> chosen;
        float total = 0;
        for (int j = 0; j < K; ++j) { chosen.push_back({order[j], ex[order[j]] / sum}); total += ex[order[j]] / sum; }
        std::sort(chosen.begin(), chosen.end());
        for (int j = 0; j < K; ++j) {
            const int e = chosen[j].first;
            const float w = norm ? chosen[j].second / total : chosen[j].second;
            if (ids[t * K + j] != e) ++bad_ids;
            worst_w = std::max(worst_w, (double)std::fabs(wts[t * K + j] - w) / w);
            std::vector<float> a(I);
            for (int i = 0; i < I; ++i) {
                double g = 0, u = 0;
                for (int h = 0; h < H; ++h) {
                    g += (double)w13[((size_t)e * 2 * I + i) * H + h] * F(x[t * H + h]);
                    u += (double)w13[((size_t)e * 2 * I + I + i) * H + h] * F(x[t * H + h]);
                }
                a[i] = F(B((float)(g / (1 + std::exp(-g)) * u)));
            }
            for (int c = 0; c < H; ++c) {
                double y = 0;
                for (int i = 0; i < I; ++i) y += (double)w2[((size_t)e * H + c) * I + i] * a[i];
                ref[t * H + c] += w * y;
            }
        }
    }
    for (double v : ref) rms += v * v;
    rms = std::sqrt(rms / std::max(1, T * H));
    // Against the output's rms: the reference computes gate and up in double, the device in
    // f32, so an act value may round to the neighbouring bf16 (2^-8 of it) on either side; that
    // moves an output by about 4e-4 of the rms, far below this tolerance yet up to 5e-2 of a
    // near-zero output (seen: T19 H40 I24), while a wrong expert, row or weight moves it by O(1).
    for (int i = 0; i < T * H; ++i) worst = std::max(worst, std::fabs(out[i] - ref[i]) / (rms + std::fabs(ref[i])));
    snprintf(name, 96, "moe%s ids T%d E%d k%d%s", fp8 ? " fp8" : "", T, E, K, ties ? " ties" : "");
    report(name, bad_ids, 0);
    snprintf(name, 96, "moe%s weights T%d E%d k%d norm%d", fp8 ? " fp8" : "", T, E, K, norm);
    report(name, worst_w, 1e-5);
    snprintf(name, 96, "moe%s out T%d H%d I%d", fp8 ? " fp8" : "", T, H, I);
    report(name, worst, 1e-2);
    // Every expert's range holds its pairs, in pair order.
    int bad_group = offsets[0] != 0 || offsets[E] != P;
    for (int e = 0; e < E; ++e)
        for (int p = offsets[e]; p < offsets[e + 1]; ++p)
            if (ids[perm[p]] != e || (p > offsets[e] && perm[p] <= perm[p - 1])) ++bad_group;
    snprintf(name, 96, "moe group T%d E%d k%d", T, E, K);
    report(name, bad_group, 0);
    snprintf(name, 96, "moe active T%d E%d k%d (%d active)", T, E, K, n_active);
    report(name, bad_active, 0);
}


// The float32 path's expert kernels (moe_*_fp32): f32 weights, x and SiLU products, against the
// same plain loop in double with nothing rounded to bf16; moe_down_combine_fp32 against
// moe_down_fp32 + moe_combine bit for bit.
void t_moe_f32(int T, int E, int K, int H, int I, bool norm) {
    std::vector<float> logits(T * E);
    for (auto& v : logits) v = U(3);
    std::vector<float> x(T * H), w13((size_t)E * 2 * I * H), w2((size_t)E * H * I);
    for (auto& v : x) v = U(1);
    for (auto& v : w13) v = U(0.2f);
    for (auto& v : w2) v = U(0.2f);
    const int P = T * K;
    const unsigned group_threads = E > 40 ? 64 : 256;
    Routed routed = route_and_group(logits, T, E, K, norm, group_threads);
    auto& [ids, wts, perm, offsets] = routed;
    std::vector<float> act(P * I, NAN), ys(P * H, NAN), out(T * H, NAN);
    std::vector<int> active(E + 1, -1);
    launch({1}, {E > 40 ? 64u : 32u}, [&] { moe_active(active.data(), offsets.data(), E); });
    const unsigned rows = (unsigned)std::min(E, P);
    launch({(unsigned)((I + 7) / 8), rows}, {256}, [&] {
        moe_gate_up_fp32(act.data(), x.data(), w13.data(), nullptr, offsets.data(), active.data(), perm.data(), E, K, I, H);
    });
    launch({(unsigned)((H + 7) / 8), rows}, {256}, [&] {
        moe_down_fp32(ys.data(), act.data(), w2.data(), nullptr, offsets.data(), active.data(), perm.data(), E, I, H);
    });
    launch({4}, {64}, [&] { moe_combine(out.data(), ys.data(), wts.data(), T, K, H); });
    char name[96];
    if (T <= MOE_FUSED_DOWN_TOKENS) {
        std::vector<float> out1(T * H, NAN);
        launch({(unsigned)(T * H)}, {(unsigned)(32 * K)}, [&] {
            moe_down_combine_fp32(out1.data(), act.data(), w2.data(), nullptr, ids.data(), wts.data(), T, K, I, H);
        });
        snprintf(name, 96, "moe f32 down_combine = down+combine T%d H%d I%d", T, H, I);
        report(name, memcmp(out1.data(), out.data(), T * H * sizeof(float)) != 0, 0);
    }
    // The reference with the device's routing (checked by t_moe): everything in double.
    std::vector<double> ref(T * H, 0.0);
    for (int p = 0; p < P; ++p) {
        const int t = p / K, e = ids[p];
        std::vector<double> a(I);
        for (int i = 0; i < I; ++i) {
            const auto [g, u] = gate_up_ref(w13, &x[(size_t)t * H], e, i, H, I);
            a[i] = g / (1 + std::exp(-g)) * u;
        }
        for (int c = 0; c < H; ++c) {
            double y = 0;
            for (int i = 0; i < I; ++i) y += (double)w2[((size_t)e * H + c) * I + i] * a[i];
            ref[t * H + c] += wts[p] * y;
        }
    }
    double rms = 0, worst = 0;
    for (double v : ref) rms += v * v;
    rms = std::sqrt(rms / std::max(1, T * H));
    for (int i = 0; i < T * H; ++i) worst = std::max(worst, std::fabs(out[i] - ref[i]) / (rms + std::fabs(ref[i])));
    snprintf(name, 96, "moe f32 out T%d E%d k%d H%d I%d", T, E, K, H, I);
    report(name, worst, 1e-5);
}

static void moe_mma_tests();
static void moe_wg_tests();
static void moe_pipe_tests();

// The float32 path's kernels (EMU_ONLY=moe_f32 runs just these; EMU_ONLY=moe includes them):
// decode (down + combine fused) and longer steps, odd widths.
static void moe_f32_tests() {
    t_moe_f32(1, 8, 2, 64, 32, true);
    t_moe_f32(8, 128, 8, 40, 24, true);
    t_moe_f32(19, 16, 4, 36, 12, false);
}

// One-token routing where moe_router_plan_one's block ranks the choices (E < 256 threads: ties
// decided by the index, top-1, norm off) and where its one warp does (E = 256)
// (EMU_ONLY=router runs just these; EMU_ONLY=moe includes them).
void router_tests() {
    t_moe(1, 128, 8, 32, 16, true, false, true);
    t_moe(1, 40, 8, 64, 48, false, false, true);
    t_moe(1, 255, 8, 16, 8, true, false, true);
    t_moe(1, 256, 8, 16, 8, true, false, false);
    t_moe(1, 17, 1, 16, 8, false, false, false);
}

// Every fused_moe case (EMU_ONLY=moe runs just these).
static void moe_tests() {
    t_moe(1, 8, 2, 64, 32, true, false, false);
    t_moe(7, 8, 2, 64, 32, false, false, true);
    t_moe(19, 16, 4, 40, 24, true, false, false);
    t_moe(5, 6, 3, 36, 12, true, false, true);
    t_moe(300, 4, 2, 16, 8, true, false, false);
    t_moe(3, 40, 8, 64, 48, true, false, false);
    t_moe(4, 8, 2, 256, 144, true, true, false);
    t_moe(3, 8, 2, 192, 40, true, true, false);
    t_moe(2, 4, 1, 24, 20, false, true, false);
    // Qwen3-30B-A3B's routing (top-8 of 128) at decode sizes, rows aligned and not, bf16 and
    // fp8 experts; fp8 rows of 272 have three scale blocks.
    // Rows longer than a decode group (gate_up's 2048 columns, down's 1024): the decode kernels
    // stream a second group.
    t_moe(2, 8, 2, 2080, 1040, true, false, false);
    t_moe(1, 8, 2, 2080, 1040, true, true, false);
    for (int T : {1, 2, 4, 8}) {
        t_moe(T, 128, 8, 32, 16, true, false, false);
        t_moe(T, 128, 8, 20, 12, true, false, T == 2);
        t_moe(T, 128, 8, 32, 16, true, true, false);
        t_moe(T, 128, 8, 24, 8, false, true, false);
    }
    t_moe(2, 128, 8, 32, 272, true, true, false);
    router_tests();
    // Where the launcher switches: 9 tokens (down + combine as two launches), and 1024 pairs,
    // the most moe_plan takes.
    t_moe(9, 128, 8, 16, 8, true, false, false);
    t_moe(128, 128, 8, 16, 8, true, false, true);
    // More experts than one pass of moe_group_block's histogram (MOE_PLAN_HIST).
    t_moe(16, 300, 8, 16, 8, true, false, false);
    moe_f32_tests();
    moe_mma_tests();
    moe_wg_tests();
    moe_pipe_tests();
}
