// MiniMax-M2's kernels (EMU_ONLY=minimax runs just these): rms_norm_cols_* (the norm over a
// column range of each row, in place) and the sigmoid routing (moe_route_sigmoid_*,
// moe_plan_sigmoid_*, moe_plan_one_sigmoid_*) against plain loops of the CPU reference's
// arithmetic. Under the emulation expf is the host's, so the routing's ids and weights must
// match the reference bit for bit. Included by test.cpp after moe_test.h.
#pragma once

// Columns start .. start + n of each row of x [rows, cols] normalised in place; the columns
// outside the range untouched. f32 x with a bf16 weight, bf16 x, and the float32 path's.
void t_rms_norm_cols(int rows, int cols, int start, int n, unsigned threads) {
    std::vector<float> x(rows * cols), xf;
    std::vector<bf16> w(n), xb(rows * cols);
    std::vector<float> wf(n);
    for (auto& v : x) v = U(2);
    for (int j = 0; j < n; ++j) { w[j] = B(1 + U(0.2)); wf[j] = F(w[j]); }
    for (int i = 0; i < rows * cols; ++i) xb[i] = B(x[i]);
    // The reference on the given row values (f32 sums in order, as the CPU).
    auto want = [&](const std::vector<float>& src, int r, int j) {
        float ss = 0;
        for (int c = 0; c < n; ++c) ss += src[r * cols + start + c] * src[r * cols + start + c];
        const float inv = 1.0f / std::sqrt(ss / n + 1e-6f);
        return wf[j] * (src[r * cols + start + j] * inv);
    };
    xf = x;
    std::vector<float> xp = x;  // the float32 path: the same weight values in f32
    launch({(unsigned)rows}, {threads}, [&] { rms_norm_cols_f32(xf.data(), w.data(), start, n, cols, 1e-6f); });
    launch({(unsigned)rows}, {threads}, [&] { rms_norm_cols_fp32(xp.data(), wf.data(), start, n, cols, 1e-6f); });
    std::vector<float> xb0(rows * cols);
    for (int i = 0; i < rows * cols; ++i) xb0[i] = F(xb[i]);
    launch({(unsigned)rows}, {threads}, [&] { rms_norm_cols_bf16(xb.data(), w.data(), start, n, cols, 1e-6f); });
    double worst = 0, worst_b = 0;
    int outside = 0;
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) {
            const int i = r * cols + c;
            if (c < start || c >= start + n) {
                outside += xf[i] != x[i] || xp[i] != x[i] || F(xb[i]) != xb0[i];
                continue;
            }
            const float f = want(x, r, c - start);
            worst = std::max({worst, relerr(xf[i], f), relerr(xp[i], f)});
            worst_b = std::max(worst_b, relerr(F(xb[i]), want(xb0, r, c - start)));
        }
    char name[96];
    snprintf(name, 96, "rms_norm_cols f32/fp32 [%d,%d] cols %d..%d thr %u", rows, cols, start, start + n, threads);
    report(name, worst, 1e-5);
    snprintf(name, 96, "rms_norm_cols bf16 [%d,%d] cols %d..%d", rows, cols, start, start + n);
    report(name, worst_b, 5e-3);
    snprintf(name, 96, "rms_norm_cols leaves other columns [%d,%d]", rows, cols);
    report(name, outside, 0);
}

static float host_sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

// The CPU reference's route_sigmoid for one token's logits `row`: the top-K by sigmoid + bias
// (ties to the lower index) among the KG best of G groups (a group's score its two highest, the
// CPU's scan), weighted by the sigmoid, renormalised when asked, times the scaling; returned
// sorted by expert, as the device writes them. `moved` (if given) counts a token whose top-K the
// groups changed from the plain top-K of the unmasked scores.
static std::vector<std::pair<int, float>> sigmoid_route_ref(const float* row, const std::vector<float>& bias, int K,
                                                            bool norm, float scaling, int G, int KG,
                                                            int* moved = nullptr) {
    const int E = (int)bias.size();
    std::vector<float> s(E), choice(E);
    for (int e = 0; e < E; ++e) { s[e] = host_sigmoid(row[e]); choice[e] = s[e] + bias[e]; }
    const std::vector<float> plain = choice;
    auto ranked = [&](const std::vector<float>& v) {
        std::vector<int> order(E);
        for (int e = 0; e < E; ++e) order[e] = e;
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return host_key(v[a]) > host_key(v[b]); });
        return order;
    };
    if (G > 1) {
        const int size = E / G;
        std::vector<float> gs(G);
        for (int g = 0; g < G; ++g) {
            float a = -INFINITY, b = -INFINITY;
            for (int e = g * size; e < (g + 1) * size; ++e) {
                if (choice[e] > a) { b = a; a = choice[e]; }
                else if (choice[e] > b) b = choice[e];
            }
            gs[g] = a + b;
        }
        std::vector<int> gorder(G);
        for (int g = 0; g < G; ++g) gorder[g] = g;
        std::stable_sort(gorder.begin(), gorder.end(), [&](int a, int b) { return host_key(gs[a]) > host_key(gs[b]); });
        for (int j = KG; j < G; ++j)
            for (int e = gorder[j] * size; e < (gorder[j] + 1) * size; ++e) choice[e] = -INFINITY;
    }
    const std::vector<int> order = ranked(choice);
    if (moved) {
        const std::vector<int> po = ranked(plain);
        *moved += !std::equal(po.begin(), po.begin() + K, order.begin());
    }
    float total = 0;
    for (int j = 0; j < K; ++j) total += s[order[j]];
    std::vector<std::pair<int, float>> chosen;
    for (int j = 0; j < K; ++j) chosen.push_back({order[j], (norm ? s[order[j]] / total : s[order[j]]) * scaling});
    std::sort(chosen.begin(), chosen.end());
    return chosen;
}

// The sigmoid routing of T tokens over E experts, top-K, against the CPU reference's loop
// (route_sigmoid in engine/src/backend/cpu/moe.rs): ids (ascending by expert) and weights bit for
// bit; then the one-block plan and (T = 1) the one-warp plan against route + group + active,
// entry for entry, with f32 and bf16 logits. `ties`: logits and biases repeat, so that whole
// groups of experts have equal s + bias and the index decides; a skew favours experts 0-3.
// G groups of which KG are kept (DeepSeek-V3's group-limited routing; 1 and 1: all experts):
// the reference masks the other groups' experts to -inf as the CPU's route_sigmoid does.
// Returns how many tokens the groups moved off their plain top-k (0 with one group).
int t_moe_sigmoid(int T, int E, int K, bool norm, float scaling, bool ties, int G = 1, int KG = 1) {
    std::vector<float> logits(T * E), bias(E);
    for (auto& v : logits) v = ties ? (float)(int)U(3) : U(3);
    for (int e = 0; e < E; ++e) bias[e] = ties ? 0.25f * (e % 3) : U(0.5);
    if (ties)
        for (int t = 0; t < T; ++t)
            for (int e = 0; e < 4 && e < E; ++e)
                if (t % 3) logits[t * E + e] += 4;
    // The bf16 logits' run routes the rounded values: the reference takes those too.
    std::vector<bf16> logits_b(T * E);
    std::vector<float> logits_r(T * E);
    for (int i = 0; i < T * E; ++i) { logits_b[i] = B(logits[i]); logits_r[i] = F(logits_b[i]); }
    const int P = T * K;
    char name[96];
    int moved = 0;
    for (bool bf : {false, true}) {
        const std::vector<float>& lg = bf ? logits_r : logits;
        // The reference.
        std::vector<int> ids_ref(P);
        std::vector<float> wts_ref(P);
        for (int t = 0; t < T; ++t) {
            const auto chosen = sigmoid_route_ref(&lg[t * E], bias, K, norm, scaling, G, KG, G > 1 && !bf ? &moved : nullptr);
            for (int j = 0; j < K; ++j) { ids_ref[t * K + j] = chosen[j].first; wts_ref[t * K + j] = chosen[j].second; }
        }
        // Route + group + active (the six-launch path's first three).
        std::vector<int> ids(P, -1), perm(P, -1), off(E + 1, -1), act(E + 1, -1);
        std::vector<float> wts(P, NAN);
        launch({(unsigned)((T + 3) / 4)}, {128}, [&] {
            if (bf) moe_route_sigmoid_bf16(ids.data(), wts.data(), logits_b.data(), T, E, K, norm, bias.data(), scaling, G, KG);
            else moe_route_sigmoid_f32(ids.data(), wts.data(), logits.data(), T, E, K, norm, bias.data(), scaling, G, KG);
        });
        const unsigned group_threads = E > 40 ? 64 : 256;
        launch({(unsigned)E}, {group_threads}, [&] { moe_group(off.data(), perm.data(), ids.data(), P, E); });
        launch({1}, {64}, [&] { moe_active(act.data(), off.data(), E); });
        snprintf(name, 96, "moe sigmoid ids T%d E%d k%d g%d/%d%s%s", T, E, K, KG, G, bf ? " bf16" : "", ties ? " ties" : "");
        report(name, ids != ids_ref, 0);
        snprintf(name, 96, "moe sigmoid weights T%d E%d k%d norm%d x%g%s", T, E, K, norm, scaling, bf ? " bf16" : "");
        report(name, memcmp(wts.data(), wts_ref.data(), P * sizeof(float)) != 0, 0);
        if (P > MOE_PLAN_MAX_PAIRS) continue;
        int bad = 0;
        std::vector<int> ids1(P, -1), perm1(P, -1), off1(E + 1, -1), act1(E + 1, -1);
        std::vector<float> wts1(P, NAN);
        launch({1}, {P == MOE_PLAN_MAX_PAIRS ? MOE_PLAN_THREADS : 64u}, [&] {
            if (bf) moe_plan_sigmoid_bf16(ids1.data(), wts1.data(), off1.data(), perm1.data(), act1.data(), logits_b.data(), T, E, K, norm, bias.data(), scaling, G, KG);
            else moe_plan_sigmoid_f32(ids1.data(), wts1.data(), off1.data(), perm1.data(), act1.data(), logits.data(), T, E, K, norm, bias.data(), scaling, G, KG);
        });
        bad += ids1 != ids || perm1 != perm || off1 != off || act1 != act;
        bad += memcmp(wts1.data(), wts.data(), P * sizeof(float)) != 0;
        if (T == 1) {
            std::vector<int> ids2(P, -1), perm2(P, -1), off2(E + 1, -1), act2(E + 1, -1);
            std::vector<float> wts2(P, NAN);
            launch({1}, {32}, [&] {
                if (bf) moe_plan_one_sigmoid_bf16(ids2.data(), wts2.data(), off2.data(), perm2.data(), act2.data(), logits_b.data(), E, K, norm, bias.data(), scaling, G, KG);
                else moe_plan_one_sigmoid_f32(ids2.data(), wts2.data(), off2.data(), perm2.data(), act2.data(), logits.data(), E, K, norm, bias.data(), scaling, G, KG);
            });
            // The one-warp plan writes offsets 0..E, perm and active 0..k and E.
            bad += ids2 != ids || off2 != off || memcmp(wts2.data(), wts.data(), P * sizeof(float)) != 0;
            for (int j = 0; j < K; ++j) bad += perm2[j] != perm[j] || act2[j] != act[j];
            bad += act2[E] != act[E];
        }
        snprintf(name, 96, "moe sigmoid plan = route+group+active T%d E%d k%d%s", T, E, K, bf ? " bf16" : "");
        report(name, bad, 0);
    }
    return moved;
}

static void minimax_tests() {
    // The tiny fixture's q (4 heads of 32) and k (2 of 32) norms over qkv [T, 256]; MiniMax-M2's
    // (48 of 128 and 8 of 128 over [T, 8192]); an odd range; fewer threads than columns.
    t_rms_norm_cols(3, 256, 0, 128, 64);
    t_rms_norm_cols(3, 256, 128, 64, 32);
    t_rms_norm_cols(2, 8192, 6144, 1024, 512);
    t_rms_norm_cols(5, 100, 7, 37, 32);
    // The tiny fixture (top-2 of 8), MiniMax-M2's top-8 of 256 (the registers' limit), more
    // experts than the registers hold (the any-width loop), k = E, ties, norm off, a scaling,
    // a step past the one-block plan (1024 pairs).
    t_moe_sigmoid(1, 8, 2, true, 1.0f, false);
    t_moe_sigmoid(7, 8, 2, true, 1.0f, true);
    t_moe_sigmoid(1, 256, 8, true, 1.0f, false);
    t_moe_sigmoid(5, 256, 8, true, 1.0f, true);
    t_moe_sigmoid(3, 300, 8, true, 1.0f, true);
    t_moe_sigmoid(4, 8, 8, true, 1.0f, false);
    t_moe_sigmoid(9, 16, 4, false, 2.5f, false);
    t_moe_sigmoid(129, 16, 8, true, 1.0f, true);
}
