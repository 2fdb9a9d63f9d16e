// moe_mma.cu's tensor-core GEMMs and fp8.cu's FP8 GEMVs against double references, and the
// moe_mma case list. Included by test.cpp after moe_test.h.
#pragma once

// The tensor-core expert GEMMs (moe_mma.cu) on the grouping moe_route + moe_group give:
// moe_tiles' list, then gate_up and down in one of the three builds (0 bf16, 1 fp8 weights,
// 2 fp8 weights and e4m3 activations), then moe_combine, against a double reference. `skew`
// routes most tokens to expert 0 (uneven counts, tiles of several rows, empty experts). Build 2
// is compared with a reference that quantizes the activations as moe_quant_fp8 does (so a wrong
// fragment layout or scale shows), and also reported against the exact one.
static float host_quant_e4m3(float v, float s) {
    // The device's f32_to_e4m3 of v / s, read back as e4m3 · s.
    return emu_e4m3(f32_to_e4m3(v / s)) * s;
}
static // The _any gate_up kernels' dynamic shared memory over rows of k elements (moe_mma.rs's any_smem).
inline size_t any_smem(int k) { return 16 * (size_t)(std::min(k, MOE_XS_COLS) + MOE_XS_PAD) * 2; }

void host_quant_rows(std::vector<float>& v, int rows, int k) {
    for (int r = 0; r < rows; ++r)
        for (int g0 = 0; g0 < k; g0 += 128) {
            float amax = 0;
            for (int c = g0; c < std::min(k, g0 + 128); ++c) amax = std::max(amax, std::fabs(v[(size_t)r * k + c]));
            const float s = kv_fp8_scale(amax);
            for (int c = g0; c < std::min(k, g0 + 128); ++c) v[(size_t)r * k + c] = host_quant_e4m3(v[(size_t)r * k + c], s);
        }
}

void t_moe_mma(int T, int E, int K, int H, int I, int mode, bool skew) {
    // 4: the bf16 small-step build; 6: the pipelined FP8 one; 7, 8: the wgmma builds (moe_wg.cu,
    // moe_tiles_wg's 128-pair tiles), bf16 and FP8; 9: the wgmma build with e4m3 activations
    // (moe_wg8.cu), checked as build 2 is.
    const int bm = mode >= 7 ? MWG_BM : MMA_BM;
    const bool fp8 = mode == 1 || mode == 2 || mode == 3 || mode == 6 || mode >= 8;
    const bool qa = mode == 2 || mode >= 9; // e4m3 activations
    std::vector<float> logits(T * E);
    for (int t = 0; t < T; ++t)
        for (int e = 0; e < E; ++e) logits[t * E + e] = U(3) + (skew && e == 0 && t % 5 != 0 ? 10.f : 0.f);
    const std::vector<bf16> x = random_bf16(T * H);
    const int gc_h = (H + 127) / 128, gc_i = (I + 127) / 128;
    Experts ex = make_experts(E, H, I, fp8);
    // The wgmma FP8 build multiplies e4m3 · scale rounded to bf16: its reference takes those.
    if (mode == 8)
        for (auto* w : {&ex.w13, &ex.w2})
            for (auto& v : *w) v = F(B(v));
    const auto& [w13b, w2b, w13q, w2q, s13, s2, w13, w2] = ex;
    const int P = T * K;
    const Routed routed = route_and_group(logits, T, E, K, true, 64);
    const auto& [ids, wts, perm, offsets] = routed;
    std::vector<float> ys(P * H, NAN), out(T * H, NAN);
    std::vector<bf16> act(P * I);
    const int max_tiles = std::min(P, (P + E * (bm - 1)) / bm);
    std::vector<int> tiles(2 * max_tiles, 7);
    launch({1}, {64}, [&] {
        if (mode >= 7) moe_tiles_wg(tiles.data(), offsets.data(), E, max_tiles);
        else moe_tiles(tiles.data(), offsets.data(), E, max_tiles);
    });
    // The list: every expert's rows once, in tiles of bm rows, then -1.
    int bad_tiles = 0, y = 0;
    for (int e = 0; e < E; ++e)
        for (int m0 = 0; m0 < offsets[e + 1] - offsets[e]; m0 += bm, ++y)
            bad_tiles += y >= max_tiles || tiles[2 * y] != e || tiles[2 * y + 1] != m0;
    for (; y < max_tiles; ++y) bad_tiles += tiles[2 * y] != -1;
    char name[96];
    snprintf(name, 96, "moe_tiles T%d E%d k%d%s", T, E, K, skew ? " skew" : "");
    report(name, bad_tiles, 0);
    // Activations as e4m3 for build 2.
    std::vector<unsigned char> xq(T * H), aq(P * I);
    std::vector<float> xs(T * gc_h), as(P * gc_i);
    if (qa) launch({(unsigned)((T + 3) / 4)}, {128}, [&] { moe_quant_fp8_bf16(xq.data(), xs.data(), x.data(), T, H); });
    const unsigned gx = (unsigned)max_tiles, threads = mode == 0 ? 128u : 256u;
    // Mode 3: the small-step kernels (FP8, H and I multiples of 64; T > 8 the _any build, a
    // warp over the whole k, chunks of 16 pairs) on the plan's active list.
    std::vector<int> active(E + 1, 0);
    for (int e = 0; e < E; ++e)
        if (offsets[e + 1] > offsets[e]) active[active[E]++] = e;
    if (mode == 9) {
        launch_smem({gx, (unsigned)((I + MWG8_BN / 2 - 1) / (MWG8_BN / 2))}, {256}, Mwg8Cfg::SMEM, [&] {
            moe_gate_up_wg_fp8act(act.data(), xq.data(), xs.data(), w13q.data(), s13.data(), tiles.data(), offsets.data(), perm.data(), K, I, H);
        });
        launch({(unsigned)((P + 3) / 4)}, {128}, [&] { moe_quant_fp8_bf16(aq.data(), as.data(), act.data(), P, I); });
        launch_smem({gx, (unsigned)((H + MWG8_BN - 1) / MWG8_BN)}, {256}, Mwg8Cfg::SMEM, [&] {
            moe_down_wg_fp8act(ys.data(), aq.data(), as.data(), w2q.data(), s2.data(), tiles.data(), offsets.data(), perm.data(), 0, H, I);
        });
    } else if (mode >= 7) {
        launch({gx, (unsigned)((I + MWG_BN / 2 - 1) / (MWG_BN / 2))}, {256}, [&] {
            if (mode == 7) moe_gate_up_wg_bf16(act.data(), x.data(), nullptr, w13b.data(), nullptr, tiles.data(), offsets.data(), perm.data(), K, I, H);
            else moe_gate_up_wg_fp8(act.data(), x.data(), nullptr, w13q.data(), s13.data(), tiles.data(), offsets.data(), perm.data(), K, I, H);
        });
        launch({gx, (unsigned)((H + MWG_BN - 1) / MWG_BN)}, {256}, [&] {
            if (mode == 7) moe_down_wg_bf16(ys.data(), act.data(), nullptr, w2b.data(), nullptr, tiles.data(), offsets.data(), perm.data(), 0, H, I);
            else moe_down_wg_fp8(ys.data(), act.data(), nullptr, w2q.data(), s2.data(), tiles.data(), offsets.data(), perm.data(), 0, H, I);
        });
    } else if (mode == 6) {
        moe_pipe_run(act, ys, x, ex, offsets, active, perm, T, E, K, H, I);
    } else if (mode == 4) {
        const unsigned ge = (unsigned)std::min(E, P);
        launch_smem({(unsigned)((I + 63) / 64), ge}, {256}, any_smem(H), [&] {
            moe_gate_up_bf16_small_any(act.data(), x.data(), w13b.data(), nullptr, offsets.data(), active.data(), perm.data(), E, K, I, H);
        });
        launch({(unsigned)((H + 127) / 128), ge}, {256}, [&] {
            moe_down_bf16_small_any(ys.data(), act.data(), w2b.data(), nullptr, offsets.data(), active.data(), perm.data(), E, I, H);
        });
    } else if (mode == 3) {
        const unsigned ge = (unsigned)std::min(E, P);
        launch_smem({(unsigned)(T <= 8 ? (I + 15) / 16 : (I + 63) / 64), ge}, {256}, T <= 8 ? 0 : any_smem(H), [&] {
            if (T <= 8) moe_gate_up_fp8_small(act.data(), x.data(), w13q.data(), s13.data(), offsets.data(), active.data(), perm.data(), E, K, I, H);
            else moe_gate_up_fp8_small_any(act.data(), x.data(), w13q.data(), s13.data(), offsets.data(), active.data(), perm.data(), E, K, I, H);
        });
        launch({(unsigned)(T <= 8 ? (H + 15) / 16 : (H + 127) / 128), ge}, {256}, [&] {
            if (T <= 8) moe_down_fp8_small(ys.data(), act.data(), w2q.data(), s2.data(), offsets.data(), active.data(), perm.data(), E, I, H);
            else moe_down_fp8_small_any(ys.data(), act.data(), w2q.data(), s2.data(), offsets.data(), active.data(), perm.data(), E, I, H);
        });
    } else {
    launch({gx, (unsigned)((I + MMA_BN / 2 - 1) / (MMA_BN / 2))}, {threads}, [&] {
        if (mode == 0) moe_gate_up_mma_bf16(act.data(), x.data(), nullptr, w13b.data(), nullptr, tiles.data(), offsets.data(), perm.data(), K, I, H);
        else if (mode == 1) moe_gate_up_mma_fp8(act.data(), x.data(), nullptr, w13q.data(), s13.data(), tiles.data(), offsets.data(), perm.data(), K, I, H);
        else moe_gate_up_mma_fp8act(act.data(), xq.data(), xs.data(), w13q.data(), s13.data(), tiles.data(), offsets.data(), perm.data(), K, I, H);
    });
    if (mode == 2) launch({(unsigned)((P + 3) / 4)}, {128}, [&] { moe_quant_fp8_bf16(aq.data(), as.data(), act.data(), P, I); });
    launch({gx, (unsigned)((H + MMA_BN - 1) / MMA_BN)}, {threads}, [&] {
        if (mode == 0) moe_down_mma_bf16(ys.data(), act.data(), nullptr, w2b.data(), nullptr, tiles.data(), offsets.data(), perm.data(), 0, H, I);
        else if (mode == 1) moe_down_mma_fp8(ys.data(), act.data(), nullptr, w2q.data(), s2.data(), tiles.data(), offsets.data(), perm.data(), 0, H, I);
        else moe_down_mma_fp8act(ys.data(), aq.data(), as.data(), w2q.data(), s2.data(), tiles.data(), offsets.data(), perm.data(), 0, H, I);
    });
    }
    launch({4}, {64}, [&] { moe_combine(out.data(), ys.data(), wts.data(), T, K, H); });
    // Reference: the device's routing (checked by t_moe), double sums, act rounded to bf16;
    // build 2 also quantizes x and act like the device (qref).
    std::vector<float> xf(T * H);
    for (int i = 0; i < T * H; ++i) xf[i] = F(x[i]);
    std::vector<float> xqf = xf;
    if (qa) host_quant_rows(xqf, T, H);
    std::vector<double> ref(T * H, 0.0), qref(T * H, 0.0);
    double act_worst = 0;
    for (int p = 0; p < P; ++p) {
        const int t = p / K, e = ids[p];
        for (int pass = 0; pass < (qa ? 2 : 1); ++pass) {
            const std::vector<float>& xr = pass ? xqf : xf;
            std::vector<float> a(I);
            for (int i = 0; i < I; ++i) {
                const auto [g, u] = gate_up_ref(w13, &xr[(size_t)t * H], e, i, H, I);
                a[i] = F(B((float)(g / (1 + std::exp(-g)) * u)));
                if (pass == (qa ? 1 : 0))
                    act_worst = std::max(act_worst, (double)std::fabs(F(act[(size_t)p * I + i]) - a[i]) / (1e-2 + std::fabs(a[i])));
            }
            if (pass) host_quant_rows(a, 1, I);
            std::vector<double>& dst = pass ? qref : ref;
            for (int c = 0; c < H; ++c) {
                double yv = 0;
                for (int i = 0; i < I; ++i) yv += (double)w2[((size_t)e * H + c) * I + i] * a[i];
                dst[t * H + c] += wts[p] * yv;
            }
        }
    }
    auto worst_of = [&](const std::vector<double>& r) {
        double rms = 0, worst = 0;
        for (double v : r) rms += v * v;
        rms = std::sqrt(rms / std::max(1, T * H));
        for (int i = 0; i < T * H; ++i) worst = std::max(worst, std::fabs(out[i] - r[i]) / (rms + std::fabs(r[i])));
        return worst;
    };
    const char* build = mode == 0 ? "bf16" : mode == 1 ? "fp8" : mode == 2 ? "fp8act" : mode == 3 ? "fp8 small" : mode == 4 ? "bf16 small" : mode == 6 ? "fp8 pipe" : mode == 7 ? "wg bf16" : mode == 8 ? "wg fp8" : "wg fp8act";
    snprintf(name, 96, "moe_mma %s act T%d E%d k%d H%d I%d", build, T, E, K, H, I);
    report(name, act_worst, 1.6e-2);
    snprintf(name, 96, "moe_mma %s out T%d E%d k%d H%d I%d%s", build, T, E, K, H, I, skew ? " skew" : "");
    report(name, worst_of(qa ? qref : ref), 1e-2);
    if (qa) {
        snprintf(name, 96, "  (fp8act against exact activations: %.3e)", worst_of(ref));
        printf("%s\n", name);
    }
}

// A random FP8 weight [N, K]: bytes other than the NaNs, one scale in [1e-3, 1e-3 + s) per
// row and 128 columns, and the values e4m3 · scale the references multiply.
struct Fp8Weight {
    std::vector<unsigned char> w;
    std::vector<float> sc, wf;
};
static Fp8Weight make_fp8_weight(int N, int K, float s) {
    const int per_row = (K + 127) / 128;
    Fp8Weight t{std::vector<unsigned char>(N * K), std::vector<float>(N * per_row), std::vector<float>(N * K)};
    for (auto& v : t.sc) v = std::fabs(U(s)) + 1e-3f;
    for (int i = 0; i < N * K; ++i) {
        unsigned b;
        do b = rng() & 0xff; while ((b & 0x7f) == 0x7f);
        t.w[i] = (unsigned char)b;
        t.wf[i] = host_e4m3(b) * t.sc[(i / K) * per_row + (i % K) / 128];
    }
    return t;
}

// The dense use of moe_down_mma (no tiles, no permutation): out[m] = a[m] · w, FP8 weights.
void t_dense_mma(int M, int N, int Kd, int mode) {
    const int gc = (Kd + 127) / 128;
    std::vector<bf16> a(M * Kd);
    for (auto& v : a) v = B(U(1));
    const Fp8Weight fw = make_fp8_weight(N, Kd, 0.01f);
    const std::vector<unsigned char>& wq = fw.w;
    const std::vector<float>& sc = fw.sc;
    std::vector<float> wf = fw.wf;
    // The wgmma build multiplies e4m3 · scale rounded to bf16: its reference takes those.
    if (mode == 3)
        for (auto& v : wf) v = F(B(v));
    std::vector<float> out(M * N, NAN);
    std::vector<unsigned char> aq(M * Kd);
    std::vector<float> as(M * gc), af(M * Kd);
    for (int i = 0; i < M * Kd; ++i) af[i] = F(a[i]);
    if (mode == 2 || mode >= 4) {
        launch({(unsigned)((M + 3) / 4)}, {128}, [&] { moe_quant_fp8_bf16(aq.data(), as.data(), a.data(), M, Kd); });
        host_quant_rows(af, M, Kd);
    }
    // mode 3: the wgmma build (moe_wg.cu); 4: its e4m3-activation twin (moe_wg8.cu)
    const int bm = mode >= 3 ? MWG_BM : MMA_BM, bn = mode == 3 ? MWG_BN : mode >= 4 ? MWG8_BN : MMA_BN;
    launch({(unsigned)((M + bm - 1) / bm), (unsigned)((N + bn - 1) / bn)}, {256u}, [&] {
        if (mode == 4) moe_down_wg_fp8act(out.data(), aq.data(), as.data(), wq.data(), sc.data(), nullptr, nullptr, nullptr, M, N, Kd);
        else if (mode == 3) moe_down_wg_fp8(out.data(), a.data(), nullptr, wq.data(), sc.data(), nullptr, nullptr, nullptr, M, N, Kd);
        else if (mode == 1) moe_down_mma_fp8(out.data(), a.data(), nullptr, wq.data(), sc.data(), nullptr, nullptr, nullptr, M, N, Kd);
        else moe_down_mma_fp8act(out.data(), aq.data(), as.data(), wq.data(), sc.data(), nullptr, nullptr, nullptr, M, N, Kd);
    });
    double worst = 0;
    for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) {
            double r = 0, s = 0;
            for (int k = 0; k < Kd; ++k) { r += (double)af[m * Kd + k] * wf[n * Kd + k]; s += std::fabs((double)af[m * Kd + k] * wf[n * Kd + k]); }
            worst = std::max(worst, std::fabs(out[m * N + n] - r) / (1e-6 + s));
        }
    char name[96];
    snprintf(name, 96, "dense mma %s M%d N%d K%d", mode == 1 ? "fp8" : mode == 3 ? "wg fp8" : mode == 4 ? "wg fp8act" : "fp8act", M, N, Kd);
    report(name, worst, 1e-5);
}

// FP8 weights: the decode trick against the loader's formula for every non-NaN byte (bit for
// bit, one rounding), the GEMVs and the bf16 dequantization against a double reference, and the
// dummy generator against the host's stream.
void t_fp8_decode() {
    int bad = 0;
    for (float s : {1.0f, 0.0123f, 3.7e-5f, 17.5f, 1e-30f})
        for (unsigned b = 0; b < 256; ++b) {
            if ((b & 0x7f) == 0x7f) continue;
            const float want = host_e4m3(b) * s, got = e4m3_scaled(b, fp8_scale120(s));
            if (memcmp(&want, &got, 4) != 0) ++bad;
        }
    report("e4m3_scaled = e4m3 * scale (bits)", bad, 0);
}

// gemv_bf16_mma (2-8 rows, K % 64 == 0) against a double reference of the same bf16 values.
void t_gemv_bf16_mma(int M, int N, int K) {
    std::vector<bf16> x(M * K), w(N * K);
    for (auto& v : x) v = B(U(1));
    for (auto& v : w) v = B(U(0.05f));
    std::vector<float> out(M * N, NAN);
    launch({(unsigned)((N + 15) / 16)}, {256}, [&] { gemv_bf16_mma(out.data(), x.data(), w.data(), M, N, K); });
    double worst = 0;
    for (int m = 0; m < M; ++m) for (int n = 0; n < N; ++n) {
        double r = 0, a = 0;
        for (int k = 0; k < K; ++k) { const double p = (double)F(x[m*K+k]) * F(w[n*K+k]); r += p; a += std::fabs(p); }
        worst = std::max(worst, std::isnan(out[m*N+n]) ? 1e9 : std::fabs(out[m*N+n] - r) / (1e-6 + a));
    }
    char name[64]; snprintf(name, 64, "gemv_bf16_mma M%d N%d K%d", M, N, K);
    report(name, worst, 1e-6);
}

void t_gemv_fp8(int M, int N, int K) {
    std::vector<bf16> x(M * K);
    for (auto& v : x) v = B(U(1));
    const Fp8Weight fw = make_fp8_weight(N, K, 0.02f);
    const std::vector<unsigned char>& w = fw.w;
    const std::vector<float>& sc = fw.sc;
    const std::vector<float>& wf = fw.wf;
    std::vector<float> out(M * N, NAN);
    const bool vec = K % 16 == 0 && M <= 8;  // (the launcher's passes of 8 rows at most)
    launch({(unsigned)((N + 7) / 8)}, {256}, [&] {
        if (!vec) gemv_fp8_rows(out.data(), x.data(), w.data(), sc.data(), M, N, K);
        else if (M == 1) gemv_fp8_m1(out.data(), x.data(), w.data(), sc.data(), N, K);
        else if (M == 3) gemv_fp8_m3(out.data(), x.data(), w.data(), sc.data(), N, K);
        else gemv_fp8_m8(out.data(), x.data(), w.data(), sc.data(), N, K);
    });
    double worst = 0;
    for (int m = 0; m < M; ++m) for (int n = 0; n < N; ++n) {
        double r = 0, a = 0;
        for (int k = 0; k < K; ++k) { r += (double)F(x[m*K+k]) * wf[n*K+k]; a += std::fabs((double)F(x[m*K+k]) * wf[n*K+k]); }
        worst = std::max(worst, std::fabs(out[m*N+n] - r) / (1e-6 + a));
    }
    char name[64]; snprintf(name, 64, "gemv_fp8%s M%d N%d K%d", vec ? "" : "_rows", M, N, K);
    report(name, worst, 1e-6);
    if (vec && M == 1) {
        // The whole-row kernels whose rows fit (K <= 512 · G): gemv_fp8_m1's output bit for bit.
        int bad = 0, ran = 0;
        for (int variant = 0; variant < 2; ++variant) {
            const int rows = variant == 1 ? 2 : 1, g = variant == 1 ? 4 : 8;
            if (K / 16 > 32 * g) continue;
            std::vector<float> o2(N, NAN);
            launch({(unsigned)((N + 8 * rows - 1) / (8 * rows))}, {256}, [&] {
                if (variant == 0) gemv_fp8_full_r1g8(o2.data(), x.data(), w.data(), sc.data(), N, K);
                else gemv_fp8_full_r2g4(o2.data(), x.data(), w.data(), sc.data(), N, K);
            });
            bad += memcmp(o2.data(), out.data(), N * sizeof(float)) != 0;
            ++ran;
        }
        snprintf(name, 64, "gemv_fp8_full (%d kernels) = gemv_fp8_m1 N%d K%d", ran, N, K);
        report(name, bad + (ran == 0), 0);
    }
    if (K % 64 == 0) {  // the tensor-core GEMVs: the same sums in another order
        std::vector<float> mo(M * N, NAN);
        launch({(unsigned)((N + 15) / 16)}, {256}, [&] {
            if (M <= 8) gemv_fp8_mma(mo.data(), x.data(), w.data(), sc.data(), M, N, K);
            else gemv_fp8_mma_many(mo.data(), x.data(), w.data(), sc.data(), M, N, K);
        });
        double worst_mma = 0;
        for (int m = 0; m < M; ++m) for (int n = 0; n < N; ++n) {
            double r = 0, a = 0;
            for (int k = 0; k < K; ++k) { r += (double)F(x[m*K+k]) * wf[n*K+k]; a += std::fabs((double)F(x[m*K+k]) * wf[n*K+k]); }
            worst_mma = std::max(worst_mma, std::isnan(mo[m*N+n]) ? 1e9 : std::fabs(mo[m*N+n] - r) / (1e-6 + a));
        }
        snprintf(name, 64, "gemv_fp8_mma%s M%d N%d K%d", M <= 8 ? "" : "_many", M, N, K);
        report(name, worst_mma, 1e-6);
    }
    std::vector<bf16> deq(N * K);
    launch({3}, {128}, [&] { dequant_fp8_bf16(deq.data(), w.data(), sc.data(), N, K); });
    int bad = 0;
    for (int i = 0; i < N * K; ++i) if (deq[i].bits != B(wf[i]).bits) ++bad;
    snprintf(name, 64, "dequant_fp8_bf16 N%d K%d", N, K);
    report(name, bad, 0);
    if (K % 16 == 0) {  // 8 weights a thread: the same bits
        std::vector<bf16> dv(N * K);
        launch({2}, {64}, [&] { dequant_fp8_bf16_vec(dv.data(), w.data(), sc.data(), N, K); });
        bad = 0;
        for (int i = 0; i < N * K; ++i) if (dv[i].bits != B(wf[i]).bits) ++bad;
        snprintf(name, 64, "dequant_fp8_bf16_vec N%d K%d", N, K);
        report(name, bad, 0);
    }
}

void t_fill_random_fp8() {
    u64 n = 65536 * 2 + 300, seed = 1234, ns = 77;
    std::vector<unsigned char> out(n);
    std::vector<float> sc(ns, NAN);
    u64 chunks = (n + 65535) / 65536;
    launch({1}, {64}, [&] { fill_random_fp8(out.data(), n, seed, sc.data(), ns, 0.25f); });
    int bad = 0;
    for (u64 c = 0; c < chunks; ++c) {
        u64 st = sm(seed ^ (c * 0x9e3779b97f4a7c15ull));
        for (u64 i = c * 65536; i < std::min(n, (c + 1) * 65536); ++i) {
            st = sm(st);
            if (out[i] != ((st >> 56) & 0xbf)) ++bad;
        }
    }
    for (float v : sc) if (v != 0.25f) ++bad;
    report("fill_random_fp8", bad, 0);
}

// The tensor-core expert GEMMs (EMU_ONLY=moe_mma runs just these; EMU_ONLY=moe includes them).
static void moe_mma_tests() {
    // The tensor-core GEMMs: every build; uneven and empty experts; rows, columns and k not
    // multiples of the tiles (H 96: k 3 slices, down's last column tile partial; I 48 and 80:
    // gate_up's column tile partial, k 1.5 and 2.5 slices); FP8 groups of 128 split (H 272).
    // (FP8 rows must be multiples of 16 bytes, bf16 rows of 8 elements: the launcher's rule.)
    for (int mode : {0, 1, 2}) {
        t_moe_mma(37, 8, 2, 96, 48, mode, false);
        t_moe_mma(70, 4, 2, 64, 80, mode, true);
    }
    // The small-step FP8 kernels: top-8 of 128 at 8 tokens, skewed experts, k of one slice
    // (H 64: warps with no slice) and of three (down's I 192).
    t_moe_mma(8, 128, 8, 128, 64, 3, false);
    t_moe_mma(6, 8, 2, 192, 128, 3, true);
    t_moe_mma(2, 16, 4, 64, 192, 3, false);
    // The _any build: chunks of 16 pairs (two B tiles), experts with 1 to 4 chunks (skew: most
    // tokens' first choice is expert 0), k of 1 to 3 slices.
    t_moe_mma(16, 128, 8, 128, 64, 3, false);
    t_moe_mma(12, 8, 2, 64, 128, 3, true);     // up to 12 pairs an expert
    t_moe_mma(40, 8, 2, 128, 192, 3, true);
    t_moe_mma(24, 128, 8, 64, 128, 3, false);
    t_moe_mma(33, 4, 2, 192, 64, 3, false);
    // Rows past MOE_XS_COLS: x staged in two passes (gate_up's H, then down's I).
    t_moe_mma(12, 4, 2, 2112, 64, 3, true);
    t_moe_mma(12, 4, 2, 64, 2112, 4, false);
    // The bf16 small-step build: one chunk, several (skewed), a partial down block (H 64).
    t_moe_mma(8, 128, 8, 128, 64, 4, false);
    t_moe_mma(40, 8, 2, 128, 192, 4, true);
    t_moe_mma(24, 128, 8, 64, 128, 4, false);
    t_moe_mma(5, 16, 4, 64, 32, 0, false);
    t_moe_mma(9, 4, 2, 272, 48, 1, true);
    t_moe_mma(9, 4, 2, 272, 48, 2, false);
    t_dense_mma(70, 136, 272, 1);
    t_dense_mma(3, 40, 128, 2);
}

// moe_wg.cu's wgmma builds (bf16 and FP8 experts, and the dense FP8 GEMM): uneven and empty
// experts, 128-pair tiles with one warpgroup's pairs or both's, an expert of several tiles
// (skew, T 150), k of 1 to 5 stages of 64 with partial stages (H 96,
// I 80, H 272: FP8 groups of 128 split across stages and a last group of one stage), gate_up's
// 128-column blocks partial (I 48, 80, 200) and whole (I 256), down's 256-column blocks partial
// (H 96, 272) and whole (H 512), and a dense GEMM with rows past its last tile and an odd width;
// moe_wg8.cu's e4m3-activation build (mode 9) on the same cases, its 128-column stages.
static void moe_wg_tests() {
    for (int mode : {7, 8, 9}) {
        t_moe_mma(37, 8, 2, 96, 48, mode, false);
        t_moe_mma(70, 4, 2, 64, 80, mode, true);
        t_moe_mma(9, 4, 2, 272, mode >= 9 ? 208 : 200, mode, true);
        t_moe_mma(20, 8, 4, 512, 256, mode, false);
        t_moe_mma(150, 4, 2, 96, 48, mode, true);
    }
    // e4m3 activations (k a multiple of 16): more stages than the pipeline's slots, the last
    // partial (H 784: 7 stages of 128).
    t_moe_mma(24, 4, 2, 784, 96, 9, true);
    t_dense_mma(70, 136, 272, 3);
    t_dense_mma(5, 263, 320, 3);
    t_dense_mma(70, 136, 272, 4);
    t_dense_mma(133, 263, 800, 4);
}
