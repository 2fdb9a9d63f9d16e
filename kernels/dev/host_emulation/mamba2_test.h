// mamba2.cu's kernels (the biased conv, the selective scan, the gated grouped norm),
// mamba2_chunk.cu's chunked scan and relu2 against a C++
// port of the CPU reference (engine/src/backend/cpu/mamba2.rs): several sequences of different
// lengths (decode's one row among them, lengths not a multiple of the 64-row chunk), slots from
// random state, saves at several `after`s (0 and two at one included), a padding row (slot
// GDN_NO_STATE), and a second step continuing from the slots and a save the first left. Each
// case runs three ways: token by token; every sequence chunked (chunk_min 1); a step split
// between the two scans (chunk_min 8); each then a decode step. Included by test.cpp.
#pragma once

// The CPU op, sequence by sequence, token by token; `slots[s]` for a padding row is a scratch
// slot (zeroed by the caller, not compared).
static void mamba2_reference(std::vector<float>& out, const std::vector<float>& mixed, const std::vector<float>& conv_w,
                             const std::vector<float>& conv_b, const std::vector<float>& neg_a,
                             const std::vector<float>& dt_bias, const std::vector<float>& d_skip,
                             const std::vector<float>& norm, std::vector<float>& cs, std::vector<float>& ss,
                             const std::vector<u32>& starts, const std::vector<u32>& slots,
                             const std::vector<std::vector<std::pair<u32, u32>>>& saves, int nh, int p, int G, int N,
                             int K, float lo, float hi, float eps) {
    const int inner = nh * p, C = inner + 2 * G * N, width = inner + C + nh, T = starts.back();
    const size_t wl = (size_t)(K - 1) * C, sl = (size_t)inner * N;
    std::vector<float> y((size_t)T * inner);
    auto copy_row = [](std::vector<float>& d, size_t len, u32 from, u32 to) {
        if (from != to) std::copy(d.begin() + from * len, d.begin() + (from + 1) * len, d.begin() + to * len);
    };
    for (size_t s = 0; s + 1 < starts.size(); ++s) {
        const int r0 = starts[s], len = starts[s + 1] - r0;
        const u32 slot = slots[s];
        size_t sv = 0;
        auto save = [&](int after) {
            for (; sv < saves[s].size() && (int)saves[s][sv].first == after; ++sv)
                copy_row(cs, wl, slot, saves[s][sv].second), copy_row(ss, sl, slot, saves[s][sv].second);
        };
        save(0);
        for (int i = 0; i < len; ++i) {
            const int row = r0 + i;
            float* win = &cs[slot * wl];
            std::vector<float> x(C);
            for (int c = 0; c < C; ++c) {
                float acc = 0;
                for (int j = 0; j < K; ++j) {
                    const float v = j < K - 1 ? win[(size_t)j * C + c] : mixed[(size_t)row * width + inner + c];
                    acc += conv_w[(size_t)c * K + j] * v;
                }
                x[c] = gdn_ref_silu(acc + conv_b[c]);
            }
            for (int j = 0; j + 1 < K - 1; ++j)
                for (int c = 0; c < C; ++c) win[(size_t)j * C + c] = win[(size_t)(j + 1) * C + c];
            if (K > 1)
                for (int c = 0; c < C; ++c) win[(size_t)(K - 2) * C + c] = mixed[(size_t)row * width + inner + c];
            for (int h = 0; h < nh; ++h) {
                const int g = h / (nh / G);
                const float a = mixed[(size_t)row * width + inner + C + h] + dt_bias[h];
                const float dt = std::min(std::max(a > 20.f ? a : std::log1p(std::exp(a)), lo), hi);
                const float decay = std::exp(dt * neg_a[h]);
                const float* B = &x[inner + g * N];
                const float* Cc = &x[inner + G * N + g * N];
                for (int e = 0; e < p; ++e) {
                    float* S = &ss[slot * sl + ((size_t)h * p + e) * N];
                    const float xe = x[h * p + e];
                    float acc = 0;
                    for (int j = 0; j < N; ++j) S[j] = S[j] * decay + dt * xe * B[j], acc += S[j] * Cc[j];
                    y[(size_t)row * inner + h * p + e] = acc + d_skip[h] * xe;
                }
            }
            save(i + 1);
        }
    }
    const int len = inner / G;
    for (int t = 0; t < T; ++t)
        for (int g = 0; g < G; ++g) {
            std::vector<float> v(len);
            float sq = 0;
            for (int c = 0; c < len; ++c) {
                const size_t at = (size_t)t * inner + g * len + c;
                v[c] = y[at] * gdn_ref_silu(mixed[(size_t)t * width + g * len + c]);
                sq += v[c] * v[c];
            }
            const float inv = 1.f / std::sqrt(sq / len + eps);
            for (int c = 0; c < len; ++c) out[(size_t)t * inner + g * len + c] = norm[g * len + c] * (v[c] * inv);
        }
}

// The scan kernel for state width N (the builds: 16 .. 256).
static void mamba2_scan_run(int N, dim3 grid, dim3 block, std::vector<float>& y, const std::vector<float>& conv,
                            const std::vector<float>& mixed, const std::vector<float>& neg_a,
                            const std::vector<float>& dt_bias, const std::vector<float>& d_skip, std::vector<float>& ss,
                            const std::vector<u32>& starts, const std::vector<u32>& slots,
                            const std::vector<u32>& save_starts, const std::vector<u32>& saves_flat, int nh, int p,
                            int G, int width, int dt_at, float lo, float hi, int chunk_min) {
    auto k = N == 16 ? mamba2_scan_n16_f32 : N == 32 ? mamba2_scan_n32_f32 : N == 64 ? mamba2_scan_n64_f32
           : N == 128 ? mamba2_scan_n128_f32 : mamba2_scan_n256_f32;
    launch(grid, block, [&] {
        k(y.data(), conv.data(), mixed.data(), neg_a.data(), dt_bias.data(), d_skip.data(), ss.data(), starts.data(),
          slots.data(), save_starts.data(), saves_flat.data(), nh, p, G, width, dt_at, lo, hi, chunk_min);
    });
}

// Chunks of a sequence as gdn_chunk_plan cuts them (at multiples of 64 rows and at saves).
static u32 mamba2_chunk_count(int len, const std::vector<std::pair<u32, u32>>& saves) {
    u32 n = 0, sv = 0;
    for (int lo = 0; lo < len; ++n) {
        while (sv < saves.size() && (int)saves[sv].first <= lo) ++sv;
        const int next = sv < saves.size() ? (int)saves[sv].first : len;
        lo = std::min({len, (lo / 64 + 1) * 64, next});
    }
    return n;
}

// The chunked kernels for state width N: the plan, C Bᵀ a (chunk, group), the walk.
static void mamba2_chunked_run(int N, std::vector<float>& y, const std::vector<float>& conv,
                               const std::vector<float>& mixed, const std::vector<float>& neg_a,
                               const std::vector<float>& dt_bias, const std::vector<float>& d_skip,
                               std::vector<float>& ss, const std::vector<u32>& starts, const std::vector<u32>& slots,
                               const std::vector<u32>& save_starts, const std::vector<u32>& saves_flat,
                               const std::vector<std::vector<std::pair<u32, u32>>>& saves, int nh, int p, int G,
                               int width, float lo, float hi, int chunk_min) {
    const int S = starts.size() - 1, inner = nh * p;
    u32 chunks = 0;
    for (int s = 0; s < S; ++s) {
        const int len = starts[s + 1] - starts[s];
        if (len > 0 && len >= chunk_min) chunks += mamba2_chunk_count(len, saves[s]);
    }
    if (chunks == 0) return;
    std::vector<u32> plan(S + 3 * chunks);
    launch({1, 1, 1}, {32, 1, 1}, [&] {
        gdn_chunk_plan(plan.data(), starts.data(), save_starts.data(), saves_flat.data(), S, chunk_min, chunks);
    });
    std::vector<float> cb((size_t)chunks * G * 64 * 64);
    auto cbk = N == 16 ? mamba2_chunk_cb_n16 : N == 32 ? mamba2_chunk_cb_n32 : N == 64 ? mamba2_chunk_cb_n64
             : N == 128 ? mamba2_chunk_cb_n128 : mamba2_chunk_cb_n256;
    launch({chunks, (unsigned)G, 1}, {256, 1, 1}, [&] { cbk(cb.data(), conv.data(), plan.data(), S, inner, G); });
    auto k = N == 16 ? mamba2_chunk_scan_n16_f32 : N == 32 ? mamba2_chunk_scan_n32_f32
           : N == 64 ? mamba2_chunk_scan_n64_f32 : N == 128 ? mamba2_chunk_scan_n128_f32 : mamba2_chunk_scan_n256_f32;
    launch({(unsigned)((p + 15) / 16), (unsigned)nh, (unsigned)S}, {128, 1, 1}, [&] {
        k(y.data(), conv.data(), mixed.data(), cb.data(), neg_a.data(), dt_bias.data(), d_skip.data(), ss.data(),
          plan.data(), starts.data(), slots.data(), save_starts.data(), saves_flat.data(), chunk_min, nh, p, G, width,
          lo, hi);
    });
}

// One step of `lens` rows a sequence (`pad[s]`: a padding row) from the given states, through
// the kernels as the engine launches them (sequences of at least chunk_min rows chunked),
// against the reference;
// returns the new states through cs, ss (the kernels') for a following step.
static void t_mamba2_step(const char* what, int chunk_min, int nh, int p, int G, int N, int K, const std::vector<int>& lens,
                          const std::vector<u32>& seq_slots, const std::vector<bool>& pad,
                          const std::vector<std::vector<u32>>& afters, std::vector<float>& cs, std::vector<float>& ss,
                          const std::vector<float>& conv_w, const std::vector<float>& conv_b,
                          const std::vector<float>& neg_a, const std::vector<float>& dt_bias,
                          const std::vector<float>& d_skip, const std::vector<float>& norm, u32& next_save,
                          u32 scratch) {
    const int inner = nh * p, C = inner + 2 * G * N, width = inner + C + nh, S = lens.size();
    const size_t wl = (size_t)(K - 1) * C, sl = (size_t)inner * N;
    const float lo = 0.01f, hi = 2.5f, eps = 1e-5f;
    std::vector<u32> starts{0}, slots, ref_slots, save_starts{0}, saves_flat, row_seq;
    std::vector<std::vector<std::pair<u32, u32>>> saves(S);
    for (int s = 0; s < S; ++s) {
        starts.push_back(starts.back() + lens[s]);
        for (int i = 0; i < lens[s]; ++i) row_seq.push_back(s);
        slots.push_back(pad[s] ? GDN_NO_STATE : seq_slots[s]);
        ref_slots.push_back(pad[s] ? scratch + s : seq_slots[s]);
        for (u32 a : afters[s])
            saves[s].push_back({a, next_save}), saves_flat.push_back(a), saves_flat.push_back(next_save++);
        save_starts.push_back(saves_flat.size() / 2);
    }
    saves_flat.push_back(0);
    const int T = starts.back();
    std::vector<float> mixed((size_t)T * width);
    for (auto& v : mixed) v = U(2);
    for (int t = 0; t < T; ++t) mixed[(size_t)t * width + width - 1] *= 12;  // dt past 20 and the limits
    for (int s = 0; s < S; ++s)
        if (pad[s]) {
            std::fill(cs.begin() + (scratch + s) * wl, cs.begin() + (scratch + s + 1) * wl, 0.f);
            std::fill(ss.begin() + (scratch + s) * sl, ss.begin() + (scratch + s + 1) * sl, 0.f);
        }
    std::vector<float> cs_ref = cs, ss_ref = ss, want((size_t)T * inner);
    mamba2_reference(want, mixed, conv_w, conv_b, neg_a, dt_bias, d_skip, norm, cs_ref, ss_ref, starts, ref_slots,
                     saves, nh, p, G, N, K, lo, hi, eps);
    std::vector<float> conv_out((size_t)T * C), y((size_t)T * inner);
    std::vector<bf16> out((size_t)T * inner);
    std::vector<float> out32((size_t)T * inner);  // the f32 output (bf16's: out32 rounded once)
    // As the engine: 4 threads a row, whole warps, MAMBA2_ROWS rows at most a block.
    const int threads = (4 * std::min(p, MAMBA2_ROWS) + 31) / 32 * 32, rows = threads / 4;
    const dim3 grid{(unsigned)((p + rows - 1) / rows), (unsigned)nh, (unsigned)S}, block{(unsigned)threads, 1, 1};
    {
        launch({(unsigned)((C + 255) / 256), (unsigned)((T + GDN_CONV_ROWS - 1) / GDN_CONV_ROWS + S), 1}, {256, 1, 1}, [&] {
            mamba2_conv_f32(conv_out.data(), mixed.data(), conv_w.data(), conv_b.data(), cs.data(), row_seq.data(),
                            starts.data(), slots.data(), save_starts.data(), saves_flat.data(), T, C, K, width, inner);
        });
        mamba2_chunked_run(N, y, conv_out, mixed, neg_a, dt_bias, d_skip, ss, starts, slots, save_starts, saves_flat,
                           saves, nh, p, G, width, lo, hi, chunk_min);
        mamba2_scan_run(N, grid, block, y, conv_out, mixed, neg_a, dt_bias, d_skip, ss, starts, slots, save_starts,
                        saves_flat, nh, p, G, width, inner + C, lo, hi, chunk_min);
        launch({(unsigned)T, (unsigned)G, 1}, {128, 1, 1}, [&] {
            mamba2_norm_f32_bf16(out.data(), y.data(), mixed.data(), norm.data(), G, inner, width, eps);
        });
        launch({(unsigned)T, (unsigned)G, 1}, {128, 1, 1}, [&] {
            mamba2_norm_f32_f32(out32.data(), y.data(), mixed.data(), norm.data(), G, inner, width, eps);
        });
    }
    // The reference's scratch slots are not compared (the kernels never write them).
    for (int s = 0; s < S; ++s)
        if (pad[s]) {
            std::copy(cs.begin() + (scratch + s) * wl, cs.begin() + (scratch + s + 1) * wl, cs_ref.begin() + (scratch + s) * wl);
            std::copy(ss.begin() + (scratch + s) * sl, ss.begin() + (scratch + s + 1) * sl, ss_ref.begin() + (scratch + s) * sl);
        }
    double wo = 0, wo32 = 0, ws = 0, wc = 0;
    for (size_t i = 0; i < out32.size(); ++i)
        wo32 = std::max(wo32, (double)std::fabs(out32[i] - want[i]) / (1e-2 + std::fabs(want[i])));
    for (size_t i = 0; i < out.size(); ++i)
        wo = std::max(wo, (double)std::fabs(F(out[i]) - want[i]) / (1e-2 + std::fabs(want[i])));
    for (size_t i = 0; i < ss.size(); ++i) ws = std::max(ws, (double)std::fabs(ss[i] - ss_ref[i]) / (1 + std::fabs(ss_ref[i])));
    for (size_t i = 0; i < cs.size(); ++i) wc = std::max(wc, (double)std::fabs(cs[i] - cs_ref[i]));
    char name[160];
    snprintf(name, sizeof name, "mamba2 %s nh%d p%d G%d N%d K%d S%d T%d out", what, nh, p, G, N, K, S, T);
    report(name, wo, 1e-2);
    snprintf(name, sizeof name, "mamba2 %s nh%d p%d G%d N%d K%d out f32", what, nh, p, G, N, K);
    // f32 outputs: the read-out's sums in another order, through the norm's 1/rms; the exact
    // token scan's worst is 1.04e-4, the chunked scan's no worse.
    report(name, wo32, 2e-4);
    snprintf(name, sizeof name, "mamba2 %s nh%d p%d G%d N%d K%d states", what, nh, p, G, N, K);
    report(name, ws, 1e-4);
    snprintf(name, sizeof name, "mamba2 %s nh%d p%d G%d N%d K%d windows", what, nh, p, G, N, K);
    report(name, wc, 0);
}

// A prefill step of `lens` (saves mid-sequence, at 0 and twice at one point), then a decode
// step (one row a sequence, a padding row among them) from the slots it left and from one of
// its saves.
static void t_mamba2_way(const char* prefill, const char* decode, int chunk_min, int nh, int p, int G,
                         int N, int K, std::vector<int> lens) {
    const int inner = nh * p, C = inner + 2 * G * N, S = lens.size();
    const size_t wl = (size_t)(K - 1) * C, sl = (size_t)inner * N;
    // The sequences' slots (odd), the saves' (from 2S + 1, at most 6 a sequence and 2 more
    // when decoding), then the reference's scratch slots of the decode step's S + 2 rows.
    const u32 scratch = 2 * S + 1 + 6 * S + 2, slots_n = scratch + S + 2;
    std::vector<float> conv_w((size_t)C * K), conv_b(C), neg_a(nh), dt_bias(nh), d_skip(nh), norm(inner);
    for (auto& v : conv_w) v = U(0.6f);
    for (auto& v : conv_b) v = U(0.5f);
    for (auto& v : neg_a) v = -0.25f - U(0.2f) - 0.2f;
    for (auto& v : dt_bias) v = U(1);
    for (auto& v : d_skip) v = U(1);
    for (auto& v : norm) v = 1 + U(0.2f);
    std::vector<float> cs(slots_n * wl), ss(slots_n * sl);
    for (auto& v : cs) v = U(1);
    for (auto& v : ss) v = U(0.5f);
    std::vector<u32> seq_slots;
    std::vector<bool> no_pad(S, false);
    std::vector<std::vector<u32>> afters(S);
    for (int s = 0; s < S; ++s) {
        seq_slots.push_back(2 * s + 1);
        if (lens[s] >= 1) afters[s].push_back(lens[s] == 1 ? 1 : 0);
        if (lens[s] > 5) afters[s].insert(afters[s].end(), {3, 5, 5, (u32)lens[s]});
        if (lens[s] > 20) afters[s].push_back(17);
        std::sort(afters[s].begin(), afters[s].end());
    }
    u32 next = 2 * S + 1;
    const u32 first_save = next;
    t_mamba2_step(prefill, chunk_min, nh, p, G, N, K, lens, seq_slots, no_pad, afters, cs, ss, conv_w, conv_b, neg_a, dt_bias,
                  d_skip, norm, next, scratch);
    // Decode: every sequence one row from its slot, one more from the first save (a prefix
    // checkpoint continued), a padding row last; saves after 0 and 1 rows.
    std::vector<int> ones(S + 2, 1);
    std::vector<u32> dslots = seq_slots;
    dslots.push_back(first_save);
    dslots.push_back(0);
    std::vector<bool> pads(S + 2, false);
    pads[S + 1] = true;
    std::vector<std::vector<u32>> dafters(S + 2);
    dafters[0] = {0};
    dafters[S] = {1};
    t_mamba2_step(decode, chunk_min, nh, p, G, N, K, ones, dslots, pads, dafters, cs, ss, conv_w, conv_b, neg_a, dt_bias, d_skip,
                  norm, next, scratch);
}

// The case three ways: token by token; every sequence chunked; sequences of 8 rows or more
// chunked, the others token by token (each decode step on the three launches).
static void t_mamba2(int nh, int p, int G, int N, int K, std::vector<int> lens) {
    t_mamba2_way("prefill scan", "decode", 1 << 30, nh, p, G, N, K, lens);
    t_mamba2_way("prefill chunked", "decode", 1, nh, p, G, N, K, lens);
    t_mamba2_way("prefill split at 8", "decode", 8, nh, p, G, N, K, lens);
}

static void t_relu2() {
    const u64 n = 1000;
    std::vector<float> x(n), out(n);
    std::vector<bf16> xb(n), outb(n);
    for (u64 i = 0; i < n; ++i) x[i] = U(3), xb[i] = B(x[i]);
    launch({2, 1, 1}, {128, 1, 1}, [&] { relu2(out.data(), 0, x.data(), 0, n); });
    launch({3, 1, 1}, {64, 1, 1}, [&] { relu2(outb.data(), 1, xb.data(), 1, n); });
    double w = 0, wb = 0;
    for (u64 i = 0; i < n; ++i) {
        const float r = std::max(x[i], 0.f), rb = std::max(F(xb[i]), 0.f);
        w = std::max(w, (double)std::fabs(out[i] - r * r));
        wb = std::max(wb, relerr(F(outb[i]), rb * rb));
    }
    report("relu2 f32", w, 0);
    report("relu2 bf16", wb, 4e-3);
}

static void mamba2_tests() {
    t_mamba2(8, 8, 2, 16, 4, {27, 1, 40, 3});  // the tiny fixture's heads
    t_mamba2(4, 12, 1, 32, 4, {6, 1, 19});       // rows not a multiple of a warp's 8
    t_mamba2(2, 40, 2, 64, 3, {18, 2});          // two blocks of rows, the second partial
    t_mamba2(4, 64, 2, 128, 4, {21, 1});         // Nemotron-H's p and N
    t_mamba2(2, 8, 1, 256, 2, {5, 1});
    t_mamba2(1, 8, 1, 16, 1, {4});               // K = 1: no window
    t_mamba2(4, 80, 2, 128, 4, {150, 1, 64});    // the 9B's p and N: chunks past 64, a partial block
    t_mamba2(4, 24, 4, 32, 4, {130, 9, 65});     // a group a head, p not a multiple of 16
    t_relu2();
}
