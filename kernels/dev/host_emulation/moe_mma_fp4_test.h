// moe_mma_fp4.cu's tensor-core expert GEMMs (and moe_fp4_small.cu's split kernels) on packed FP4 stacks against a double reference of
// the dequantized weights (moe_fp4_test.h's make_fp4: e2m1 · the block's f32 scale), and their
// widening of every nibble under every scale byte against the exact value. Included by
// test.cpp after moe_fp4_test.h (EMU_ONLY=moe_mma_fp4).
#pragma once

// MmaNv::widen and MmaMx::widen of the 16 nibbles under each scale byte: NVFP4 e2m1 · e4m3 ·
// 2^-8 (the epilogue's 2^8 aside), MXFP4 e2m1 · 2^(b − 127), bit for bit (NaN scale bytes, which
// the loaders refuse, left out). The nibbles come two words at once: values 0..7, then 8..15.
void t_mma_fp4_widen() {
    int bad_nv = 0, bad_mx = 0;
    const u32 words[2] = {0x76543210u, 0xfedcba98u};
    for (u32 b = 0; b < 256; ++b)
        for (int wi = 0; wi < 2; ++wi) {
            const u32x4 nv = MmaNv::widen(words[wi], b), mx = MmaMx::widen(words[wi], b);
            const u32 nvw[4] = {nv.x, nv.y, nv.z, nv.w}, mxw[4] = {mx.x, mx.y, mx.z, mx.w};
            for (int v = 0; v < 8; ++v) {
                const float e = host_e2m1((u32)(8 * wi + v));
                const u32 nbits = (nvw[v / 2] >> (16 * (v % 2))) & 0xffffu;
                const u32 mbits = (mxw[v / 2] >> (16 * (v % 2))) & 0xffffu;
                const float nval = __uint_as_float(nbits << 16), mval = __uint_as_float(mbits << 16);
                if ((b & 0x7f) != 0x7f) {
                    const float want = (float)((double)e * host_e4m3(b) / 256.0);
                    bad_nv += nval != want || std::signbit(nval) != std::signbit(want);
                }
                if (b != 0xff) {
                    const float want = (float)std::ldexp((double)e, (int)b - 127);
                    bad_mx += mval != want || std::signbit(mval) != std::signbit(want);
                }
            }
        }
    report("moe_mma_fp4 nvfp4 widen exact (all bytes)", bad_nv, 0);
    report("moe_mma_fp4 mxfp4 widen exact (all bytes)", bad_mx, 0);
}

// One step of the FP4 tensor-core experts: expert e takes counts[e] pairs (top-2, the pairs'
// experts shuffled; a token may take one expert twice, which the kernels do not mind), then
// moe_tiles, gate|up (plain, or gpt-oss's bias and clamped SwiGLU), down and moe_combine (with
// the down bias when clamped), against double sums of the dequantized weights (act rounded to
// bf16 as the device stores it, so down is checked alone). H and I: multiples of 32, not of the
// tiles (64 act columns, 128 output columns), so blocks hold weight rows past the matrix.
// small: the decode-batch _any kernels (H and I multiples of 64) on the plan's active list
// instead of the tiles; split: moe_fp4_small.cu's split kernels (at most 8 pairs an expert).
void t_moe_mma_fp4(const std::vector<int>& counts, int H, int I, bool mx, bool clamped, bool small = false,
                   bool split = false) {
    const int E = (int)counts.size(), K = 2;
    const float alpha = 1.702f, limit = 2.0f;
    std::vector<int> ids;
    for (int e = 0; e < E; ++e) ids.insert(ids.end(), counts[e], e);
    if (ids.size() % 2) ids.push_back(E - 1);  // whole tokens: one pair more for the last expert
    std::shuffle(ids.begin(), ids.end(), rng);
    const int P = (int)ids.size(), T = P / K;
    // The grouping moe_group makes: offsets, and perm listing each expert's pairs in order.
    std::vector<int> offsets(E + 1, 0), perm(P), fill(E, 0);
    for (int p = 0; p < P; ++p) ++offsets[ids[p] + 1];
    for (int e = 0; e < E; ++e) offsets[e + 1] += offsets[e];
    for (int p = 0; p < P; ++p) perm[offsets[ids[p]] + fill[ids[p]]++] = p;
    std::vector<float> wts(P);
    for (auto& w : wts) w = std::fabs(U(1)) + 0.05f;
    const std::vector<bf16> xb = random_bf16((size_t)T * H);
    std::vector<bf16> b13b, b2b;
    for (size_t i = 0; clamped && i < (size_t)E * 2 * I; ++i) b13b.push_back(B(U(1)));
    for (size_t i = 0; clamped && i < (size_t)E * H; ++i) b2b.push_back(B(U(1)));
    const Fp4Experts w13 = make_fp4(mx, E, 2 * (size_t)I, H), w2 = make_fp4(mx, E, H, I);
    const float* g13 = mx ? nullptr : w13.g.data();
    const float* g2 = mx ? nullptr : w2.g.data();

    const int bm = MMA_BM, max_tiles = std::min(P, (P + E * (bm - 1)) / bm);
    std::vector<int> tiles(2 * max_tiles, 7);
    launch({1}, {64}, [&] { moe_tiles(tiles.data(), offsets.data(), E, max_tiles); });
    std::vector<bf16> act((size_t)P * I);
    std::vector<float> ys((size_t)P * H, NAN), out((size_t)T * H, NAN);
    const unsigned gx = (unsigned)max_tiles;
    std::vector<int> active(E + 1, 0);
    for (int e = 0; e < E; ++e)
        if (offsets[e + 1] > offsets[e]) active[active[E]++] = e;
    const unsigned ge = (unsigned)std::min(E, P);
    if (split) {
        launch({(unsigned)((I + 15) / 16), ge}, {256}, [&] {
            if (clamped)
                (mx ? moe_gate_up_clamped_mxfp4_small : moe_gate_up_clamped_nvfp4_small)(act.data(), xb.data(), w13.w.data(), w13.sc.data(), g13, offsets.data(), active.data(), perm.data(), E, K, I, H, b13b.data(), alpha, limit);
            else
                (mx ? moe_gate_up_mxfp4_small : moe_gate_up_nvfp4_small)(act.data(), xb.data(), w13.w.data(), w13.sc.data(), g13, offsets.data(), active.data(), perm.data(), E, K, I, H);
        });
        launch({(unsigned)((H + 15) / 16), ge}, {256}, [&] {
            (mx ? moe_down_mxfp4_small : moe_down_nvfp4_small)(ys.data(), act.data(), w2.w.data(), w2.sc.data(), g2, offsets.data(), active.data(), perm.data(), E, I, H);
        });
    } else if (small) {
        launch_smem({(unsigned)((I + 63) / 64), ge}, {256}, any_smem(H), [&] {
            if (clamped)
                (mx ? moe_gate_up_clamped_mxfp4_small_any : moe_gate_up_clamped_nvfp4_small_any)(act.data(), xb.data(), w13.w.data(), w13.sc.data(), g13, offsets.data(), active.data(), perm.data(), E, K, I, H, b13b.data(), alpha, limit);
            else
                (mx ? moe_gate_up_mxfp4_small_any : moe_gate_up_nvfp4_small_any)(act.data(), xb.data(), w13.w.data(), w13.sc.data(), g13, offsets.data(), active.data(), perm.data(), E, K, I, H);
        });
        launch({(unsigned)((H + 127) / 128), ge}, {256}, [&] {
            (mx ? moe_down_mxfp4_small_any : moe_down_nvfp4_small_any)(ys.data(), act.data(), w2.w.data(), w2.sc.data(), g2, offsets.data(), active.data(), perm.data(), E, I, H);
        });
    } else {
    launch({gx, (unsigned)((I + MMA_BN / 2 - 1) / (MMA_BN / 2))}, {128}, [&] {
        if (clamped)
            (mx ? moe_gate_up_clamped_mma_mxfp4 : moe_gate_up_clamped_mma_nvfp4)(act.data(), xb.data(), w13.w.data(), w13.sc.data(), g13, tiles.data(), offsets.data(), perm.data(), K, I, H, b13b.data(), alpha, limit);
        else
            (mx ? moe_gate_up_mma_mxfp4 : moe_gate_up_mma_nvfp4)(act.data(), xb.data(), w13.w.data(), w13.sc.data(), g13, tiles.data(), offsets.data(), perm.data(), K, I, H);
    });
    launch({gx, (unsigned)((H + MMA_BN - 1) / MMA_BN)}, {128}, [&] {
        (mx ? moe_down_mma_mxfp4 : moe_down_mma_nvfp4)(ys.data(), act.data(), w2.w.data(), w2.sc.data(), g2, tiles.data(), offsets.data(), perm.data(), 0, H, I);
    });
    }
    launch({4}, {64}, [&] {
        if (clamped) moe_combine_bias_bf16(out.data(), ys.data(), wts.data(), ids.data(), b2b.data(), T, K, H);
        else moe_combine(out.data(), ys.data(), wts.data(), T, K, H);
    });

    std::vector<double> ref((size_t)T * H, 0.0);
    double worst_act = 0;
    for (int p = 0; p < P; ++p) {
        const int t = p / K, e = ids[p];
        std::vector<double> a(I);
        for (int i = 0; i < I; ++i) {
            double g = 0, u = 0;
            for (int h = 0; h < H; ++h) {
                const double xv = F(xb[(size_t)t * H + h]);
                g += (double)w13.wf[((size_t)e * 2 * I + i) * H + h] * xv;
                u += (double)w13.wf[((size_t)e * 2 * I + I + i) * H + h] * xv;
            }
            const double v = clamped ? clamped_swiglu_ref(g + F(b13b[(size_t)e * 2 * I + i]), u + F(b13b[(size_t)e * 2 * I + I + i]), alpha, limit)
                                     : g / (1 + std::exp(-g)) * u;
            worst_act = std::max(worst_act, std::fabs(F(act[(size_t)p * I + i]) - v) / (std::fabs(v) + 1e-2));
            a[i] = F(act[(size_t)p * I + i]);
        }
        for (int c = 0; c < H; ++c) {
            double y = clamped ? F(b2b[(size_t)e * H + c]) : 0;
            for (int i = 0; i < I; ++i) y += (double)w2.wf[((size_t)e * H + c) * I + i] * a[i];
            ref[(size_t)t * H + c] += (double)wts[p] * y;
        }
    }
    double rms = 0, worst = 0;
    for (double v : ref) rms += v * v;
    rms = std::sqrt(rms / std::max(1, T * H));
    for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(out[i] - ref[i]) / (rms + std::fabs(ref[i])));
    std::string cs;
    for (int c : counts) cs += (cs.empty() ? "" : ",") + std::to_string(c);
    char name[160];
    const char* kind = mx ? (clamped ? "mxfp4 clamped" : "mxfp4") : (clamped ? "nvfp4 clamped" : "nvfp4");
    const char* route = split ? " small split" : small ? " small_any" : "";
    snprintf(name, 160, "moe_mma_fp4%s %s act H%d I%d pairs {%s}", route, kind, H, I, cs.c_str());
    report(name, worst_act, 1.6e-2);
    snprintf(name, 160, "moe_mma_fp4%s %s out T%d", route, kind, T);
    report(name, worst, 1e-2);
}

static void moe_mma_fp4_tests() {
    t_mma_fp4_widen();
    for (bool mx : {false, true})
        for (bool clamped : {false, true}) {
            // Experts of 0, 1, 63, 64, 65 and over 128 pairs (one to three tiles, the last
            // partial), widths of an odd number of 32-wide k slices, neither a multiple of the
            // tiles' 64 act or 128 output columns.
            t_moe_mma_fp4({0, 1, 63, 64, 65, 131, 5}, 160, 96, mx, clamped);
            // One k slice (fewer than the pipeline's stages), one expert of 200 pairs.
            t_moe_mma_fp4({3, 0, 200}, 32, 32, mx, clamped);
        }
    // Wider rows: several tiles of columns and 9 k slices.
    t_moe_mma_fp4({70, 2, 0, 129}, 288, 224, false, false);
    t_moe_mma_fp4({70, 2, 0, 129}, 288, 224, true, true);
    // The decode-batch _any kernels: experts of 0 to 17 pairs (17: two chunks of 16), one
    // pair alone, rows of several 64-wide slices; and hidden past MOE_XS_COLS (x staged in two
    // pieces, the rows and scales taken from column 2048 on).
    for (bool mx : {false, true})
        for (bool clamped : {false, true}) {
            t_moe_mma_fp4({1, 0, 3, 17, 2}, 192, 128, mx, clamped, true);
            t_moe_mma_fp4({1}, 64, 64, mx, clamped, true);
        }
    t_moe_mma_fp4({2, 5, 0, 1}, 2112, 64, false, false, true);
    t_moe_mma_fp4({2, 5, 0, 1}, 2112, 64, true, true, true);
    // The split kernels: experts of 0 to 8 pairs (one B tile, columns past an expert's pairs
    // not written), widths of a partial last 128-wide slice (160: lanes past k) and of more
    // slices than warps (1056: 9, warp 0 two), weight rows past the matrix (96 = 6 tiles of
    // 16, 160 = 10; 1056 = 66).
    for (bool mx : {false, true})
        for (bool clamped : {false, true}) t_moe_mma_fp4({1, 0, 3, 8, 2}, 160, 96, mx, clamped, false, true);
    t_moe_mma_fp4({2, 8, 0, 1, 5}, 1056, 1056, false, false, false, true);
    t_moe_mma_fp4({2, 8, 0, 1, 5}, 1056, 1056, true, true, false, true);
}
