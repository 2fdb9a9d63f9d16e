// hybrid.cu's Gated DeltaNet kernels (conv, recurrent, gated norm; the fused decode step)
// against a C++ port of the CPU reference (engine/src/backend/cpu/hybrid.rs): several sequences
// of different lengths, slots from random state, saves at several `after`s (two at one, one at
// 0). Included by test.cpp.
#pragma once

static float gdn_ref_silu(float x) { return x / (1.f + std::exp(-x)); }

// The CPU op, sequence by sequence, piece by piece between saves.
static void gdn_reference(std::vector<float>& out, const std::vector<float>& mixed, const std::vector<float>& conv_w,
                          const std::vector<float>& neg_a, const std::vector<float>& dt_bias,
                          const std::vector<float>& norm, std::vector<float>& conv_state, std::vector<float>& rec,
                          const std::vector<u32>& starts, const std::vector<u32>& slots,
                          const std::vector<std::vector<std::pair<u32, u32>>>& saves, int nk, int dk, int nv, int dv,
                          int K, float eps) {
    const int kd = nk * dk, vd = nv * dv, C = 2 * kd + vd, width = C + vd + 2 * nv, T = starts.back();
    const size_t wl = (size_t)(K - 1) * C, rl = (size_t)nv * dk * dv;
    std::vector<float> core((size_t)T * vd);
    auto copy_row = [](std::vector<float>& d, size_t len, u32 from, u32 to) {
        if (from != to) std::copy(d.begin() + from * len, d.begin() + (from + 1) * len, d.begin() + to * len);
    };
    for (size_t s = 0; s + 1 < starts.size(); ++s) {
        const int r0 = starts[s], len = starts[s + 1] - r0;
        const u32 slot = slots[s];
        std::vector<std::pair<int, int>> ends;
        for (auto [after, to] : saves[s]) ends.push_back({(int)after, (int)to});
        ends.push_back({len, -1});
        int lo = 0;
        for (auto [hi, to] : ends) {
            for (int i = lo; i < hi; ++i) {
                float* win = &conv_state[slot * wl];
                const int row = r0 + i;
                std::vector<float> x(C);
                for (int c = 0; c < C; ++c) {
                    float acc = 0;
                    for (int j = 0; j < K; ++j) {
                        const float v = j < K - 1 ? win[(size_t)j * C + c] : mixed[(size_t)row * width + c];
                        acc += conv_w[(size_t)c * K + j] * v;
                    }
                    x[c] = gdn_ref_silu(acc);
                }
                for (int j = 0; j + 1 < K - 1; ++j)
                    for (int c = 0; c < C; ++c) win[(size_t)j * C + c] = win[(size_t)(j + 1) * C + c];
                if (K > 1)
                    for (int c = 0; c < C; ++c) win[(size_t)(K - 2) * C + c] = mixed[(size_t)row * width + c];
                const float scale = 1.f / std::sqrt((float)dk);
                for (int h = 0; h < nv; ++h) {
                    const int kh = h / (nv / nk);
                    std::vector<float> q(x.begin() + kh * dk, x.begin() + (kh + 1) * dk),
                        k(x.begin() + kd + kh * dk, x.begin() + kd + (kh + 1) * dk);
                    float sq = 0, sk = 0;
                    for (int d = 0; d < dk; ++d) sq += q[d] * q[d], sk += k[d] * k[d];
                    for (int d = 0; d < dk; ++d) q[d] *= 1.f / std::sqrt(sq + 1e-6f) * scale, k[d] *= 1.f / std::sqrt(sk + 1e-6f);
                    const float b = mixed[(size_t)row * width + C + vd + h];
                    const float a = mixed[(size_t)row * width + C + vd + nv + h] + dt_bias[h];
                    const float beta = 1.f / (1.f + std::exp(-b));
                    const float decay = std::exp(neg_a[h] * (a > 20.f ? a : std::log1p(std::exp(a))));
                    float* S = &rec[slot * rl + (size_t)h * dk * dv];
                    for (size_t e = 0; e < (size_t)dk * dv; ++e) S[e] *= decay;
                    for (int j = 0; j < dv; ++j) {
                        float u = 0;
                        for (int d = 0; d < dk; ++d) u += k[d] * S[d * dv + j];
                        const float delta = beta * (x[2 * kd + h * dv + j] - u);
                        float o = 0;
                        for (int d = 0; d < dk; ++d) S[d * dv + j] += k[d] * delta, o += q[d] * S[d * dv + j];
                        core[(size_t)row * vd + h * dv + j] = o;
                    }
                }
            }
            lo = std::max(lo, hi);
            if (to >= 0) copy_row(conv_state, wl, slot, to), copy_row(rec, rl, slot, to);
        }
    }
    for (int t = 0; t < T; ++t)
        for (int h = 0; h < nv; ++h) {
            const float* x = &core[(size_t)t * vd + h * dv];
            float ss = 0;
            for (int d = 0; d < dv; ++d) ss += x[d] * x[d];
            const float inv = 1.f / std::sqrt(ss / dv + eps);
            for (int d = 0; d < dv; ++d)
                out[(size_t)t * vd + h * dv + d] =
                    norm[d] * (x[d] * inv) * gdn_ref_silu(mixed[(size_t)t * width + C + h * dv + d]);
        }
}

// The chunked kernels (plan, prep, state) for dk's build, sequences of at least chunk_min rows.
template <int DK>
static void gdn_chunked_run(std::vector<float>& core, const std::vector<float>& conv_out,
                            const std::vector<float>& mixed, const std::vector<float>& neg_a,
                            const std::vector<float>& dt_bias, std::vector<float>& rec,
                            const std::vector<u32>& starts, const std::vector<u32>& slots,
                            const std::vector<u32>& save_starts, const std::vector<u32>& saves_flat,
                            int chunk_min, int nk, int nv, int dv, int width) {
    const int S = slots.size(), max_chunks = 64;
    std::vector<u32> plan(S + 3 * max_chunks);
    launch({1, 1, 1}, {32, 1, 1}, [&] {
        gdn_chunk_plan(plan.data(), starts.data(), save_starts.data(), saves_flat.data(), S, chunk_min, max_chunks);
    });
    int chunks = 0;  // the engine counts them on the host
    for (int s = 0; s < S; ++s) {
        const int len = starts[s + 1] - starts[s];
        if (len == 0 || len < chunk_min) continue;
        u32 sv = save_starts[s];
        for (int lo = 0; lo < len; ++chunks) lo = gdn_chunk_end(lo, len, saves_flat.data(), sv, save_starts[s + 1]);
    }
    std::vector<float> scratch((size_t)chunks * nv * gdn_chunk_floats<DK>());
    launch({(unsigned)chunks, (unsigned)nv, 1}, {GDN_CHUNK_THREADS, 1, 1}, [&] {
        gdn_chunk_prep_impl<DK, float>(scratch.data(), conv_out.data(), mixed.data(), neg_a.data(), dt_bias.data(),
                                       plan.data(), S, nk, nv, dv, width);
    });
    launch({(unsigned)((dv + GDN_BV - 1) / GDN_BV), (unsigned)nv, (unsigned)S}, {GDN_CHUNK_THREADS, 1, 1}, [&] {
        gdn_chunk_state_impl<DK>(core.data(), conv_out.data(), scratch.data(), rec.data(), plan.data(), starts.data(),
                                 slots.data(), save_starts.data(), saves_flat.data(), S, chunk_min, nk, nv, dv);
    });
}

// chunk_min: sequences of at least that many rows take the chunked kernels (0: none does).
// A layer's random inputs (the last column of mixed, a, scaled past 20) and its conv windows and
// states for every slot, drawn in one order: the tests below share the recipe.
static void gdn_draw(std::vector<float>& mixed, std::vector<float>& conv_w, std::vector<float>& neg_a,
                     std::vector<float>& dt_bias, std::vector<float>& norm, std::vector<float>& cs,
                     std::vector<float>& rec, int T, int width, int C, int K, int nv, int dv, size_t cs_n,
                     size_t rec_n) {
    mixed.assign((size_t)T * width, 0.f);
    conv_w.assign((size_t)C * K, 0.f);
    neg_a.assign(nv, 0.f);
    dt_bias.assign(nv, 0.f);
    norm.assign(dv, 0.f);
    for (auto& v : mixed) v = U(2);
    for (int t = 0; t < T; ++t) mixed[(size_t)t * width + width - 1] *= 12;  // a past 20
    for (auto& v : conv_w) v = U(0.6f);
    for (auto& v : neg_a) v = -1.25f - U(0.75f);
    for (auto& v : dt_bias) v = U(1);
    for (auto& v : norm) v = 1 + U(0.2f);
    cs.assign(cs_n, 0.f);
    rec.assign(rec_n, 0.f);
    for (auto& v : cs) v = U(1);
    for (auto& v : rec) v = U(0.5f);
}

static void t_gdn(int nk, int dk, int nv, int dv, int K, std::vector<int> lens, int cols, int chunk_min = 0) {
    const int kd = nk * dk, vd = nv * dv, C = 2 * kd + vd, width = C + vd + 2 * nv;
    const int S = lens.size();
    std::vector<u32> starts{0}, slots, save_starts{0}, saves_flat, row_seq;
    std::vector<std::vector<std::pair<u32, u32>>> saves(S);
    u32 next = 2 * S + 1;
    for (int s = 0; s < S; ++s) {
        starts.push_back(starts.back() + lens[s]);
        for (int i = 0; i < lens[s]; ++i) row_seq.push_back(s);
        slots.push_back(2 * s + 1);
        std::vector<u32> afters;
        if (lens[s] >= 1) afters.push_back(lens[s] == 1 ? 1 : 0);
        if (lens[s] > 5) afters.insert(afters.end(), {3, 5, 5, (u32)lens[s]});
        if (lens[s] > 20) afters.push_back(17);
        if (lens[s] > 64) afters.insert(afters.end(), {64, 100 < lens[s] ? 100u : (u32)lens[s] - 1});
        std::sort(afters.begin(), afters.end());
        for (u32 a : afters) saves[s].push_back({a, next}), saves_flat.push_back(a), saves_flat.push_back(next++);
        save_starts.push_back(saves_flat.size() / 2);
    }
    saves_flat.push_back(0);
    const int T = starts.back(), slots_n = next;
    const size_t wl = (size_t)(K - 1) * C, rl = (size_t)nv * dk * dv;
    std::vector<float> mixed, conv_w, neg_a, dt_bias, norm, cs, rec;
    gdn_draw(mixed, conv_w, neg_a, dt_bias, norm, cs, rec, T, width, C, K, nv, dv, slots_n * wl + 1, slots_n * rl);
    std::vector<float> cs_ref = cs, rec_ref = rec, want((size_t)T * vd), got((size_t)T * vd);
    gdn_reference(want, mixed, conv_w, neg_a, dt_bias, norm, cs_ref, rec_ref, starts, slots, saves, nk, dk, nv, dv, K, 1e-6f);
    std::vector<float> conv_out((size_t)T * C), core((size_t)T * vd);
    launch({(unsigned)((C + 255) / 256), (unsigned)((T + GDN_CONV_ROWS - 1) / GDN_CONV_ROWS + S), 1}, {256, 1, 1}, [&] {
        gdn_conv_f32(conv_out.data(), mixed.data(), conv_w.data(), cs.data(), row_seq.data(), starts.data(), slots.data(),
                     save_starts.data(), saves_flat.data(), T, C, K, width);
    });
    const int cmin = chunk_min > 0 ? chunk_min : 1 << 30;
    launch({(unsigned)((dv + cols - 1) / cols), (unsigned)nv, (unsigned)S}, {(unsigned)(4 * cols), 1, 1}, [&] {
        if (dk == 16)
            gdn_recurrent_d16_f32(core.data(), conv_out.data(), mixed.data(), neg_a.data(), dt_bias.data(), rec.data(),
                                  starts.data(), slots.data(), save_starts.data(), saves_flat.data(), nk, nv, dv, width,
                                  cmin);
        else
            gdn_recurrent_d32_f32(core.data(), conv_out.data(), mixed.data(), neg_a.data(), dt_bias.data(), rec.data(),
                                  starts.data(), slots.data(), save_starts.data(), saves_flat.data(), nk, nv, dv, width,
                                  cmin);
    });
    if (chunk_min > 0) {
        auto run = dk == 16 ? gdn_chunked_run<16> : dk == 32 ? gdn_chunked_run<32> : dk == 64 ? gdn_chunked_run<64> : gdn_chunked_run<128>;
        run(core, conv_out, mixed, neg_a, dt_bias, rec, starts, slots, save_starts, saves_flat, cmin, nk, nv, dv, width);
    }
    std::vector<bf16> out((size_t)T * vd);
    launch({(unsigned)((T * nv + 3) / 4), 1, 1}, {128, 1, 1}, [&] {
        gdn_norm_f32_bf16(out.data(), core.data(), mixed.data(), norm.data(), T * nv, nv, dv, width, C, 1e-6f);
    });
    double wo = 0, wr = 0, wc = 0;
    for (size_t i = 0; i < out.size(); ++i) wo = std::max(wo, (double)std::fabs(F(out[i]) - want[i]) / (1e-2 + std::fabs(want[i])));
    for (size_t i = 0; i < rec.size(); ++i) wr = std::max(wr, (double)std::fabs(rec[i] - rec_ref[i]));
    for (size_t i = 0; i < cs.size(); ++i) wc = std::max(wc, (double)std::fabs(cs[i] - cs_ref[i]));
    char name[160];
    snprintf(name, sizeof name, "gdn nk%d dk%d nv%d dv%d K%d S%d T%d cols%d chunked>=%d out", nk, dk, nv, dv, K, S, T,
             cols, chunk_min);
    report(name, wo, 1e-2);
    snprintf(name, sizeof name, "gdn nk%d dk%d nv%d dv%d K%d cols%d chunked>=%d states", nk, dk, nv, dv, K, cols, chunk_min);
    report(name, wr, 1e-4);
    snprintf(name, sizeof name, "gdn nk%d dk%d nv%d dv%d K%d cols%d chunked>=%d windows", nk, dk, nv, dv, K, cols,
             chunk_min);
    report(name, wc, 0);
}

static void gdn_tests() {
    t_gdn(2, 16, 4, 16, 4, {1, 40, 2, 7, 0, 1}, 8);
    t_gdn(2, 16, 4, 16, 4, {1, 40, 2, 7, 0, 1}, 16);
    t_gdn(1, 32, 2, 40, 3, {25, 1, 6}, 32);
    t_gdn(1, 16, 1, 16, 1, {5, 1}, 16);
    // The chunked kernels: every sequence (lengths around a chunk, saves mid-chunk and at its
    // boundary), then only the long ones beside recurrent short ones.
    t_gdn(2, 16, 4, 16, 4, {1, 63, 64, 65, 0, 200, 7}, 16, 1);
    t_gdn(2, 16, 4, 40, 3, {130, 1, 2, 70}, 16, 16);
    t_gdn(1, 32, 2, 16, 4, {129, 5}, 8, 1);
    t_gdn(1, 128, 1, 36, 4, {70, 3}, 8, 1);  // 35B-A3B's dk, dv past a block's 32 columns
    t_gdn(1, 64, 1, 32, 2, {66}, 8, 1);
    // The tensor-core tiles at 35B-A3B's dk with two blocks of state columns: chunks of 1, 63,
    // 64 and 65 rows, saves mid-chunk (3, 5, 17, 100) and at its ends, several sequences.
    t_gdn(1, 128, 2, 64, 4, {1, 63, 64, 65, 130}, 16, 1);
}

// The fused decode kernel (gdn_decode, one row a sequence, a key head's columns over `splits`
// blocks) against the reference and, bit for bit, against the 3-launch path (conv, recurrent,
// norm) on the same inputs. `pads`: sequences that are a CUDA graph's padding rows (slot
// GDN_NO_STATE; the reference runs each in a zeroed scratch slot it then ignores); `afters`:
// each sequence's saves (0: before its row, 1: after). The blocks run one after another here,
// so the last of a key head's is the last in x.
template <int DK>
static void t_gdn_decode(int nk, int nv, int K, std::vector<bool> pads, std::vector<std::vector<u32>> afters,
                         int splits = 1) {
    const int dk = DK, dv = DK, kd = nk * dk, vd = nv * dv, C = 2 * kd + vd, width = C + vd + 2 * nv;
    const int S = pads.size(), T = S;
    std::vector<u32> starts{0}, slots, ref_slots, save_starts{0}, saves_flat, row_seq;
    std::vector<std::vector<std::pair<u32, u32>>> saves(S);
    u32 next = 2 * S + 1;
    for (int s = 0; s < S; ++s) {
        starts.push_back(s + 1);
        row_seq.push_back(s);
        for (u32 a : afters[s]) saves[s].push_back({a, next}), saves_flat.push_back(a), saves_flat.push_back(next++);
        save_starts.push_back(saves_flat.size() / 2);
    }
    const u32 scratch = next;  // the reference's slots for padding rows, one each
    for (int s = 0; s < S; ++s) {
        slots.push_back(pads[s] ? GDN_NO_STATE : 2 * s + 1);
        ref_slots.push_back(pads[s] ? next++ : 2 * s + 1);
    }
    saves_flat.push_back(0);
    const int slots_n = next;
    const size_t wl = (size_t)(K - 1) * C, rl = (size_t)nv * dk * dv;
    std::vector<float> mixed, conv_w, neg_a, dt_bias, norm, cs, rec;
    gdn_draw(mixed, conv_w, neg_a, dt_bias, norm, cs, rec, T, width, C, K, nv, dv, slots_n * wl + 1, slots_n * rl);
    std::fill(cs.begin() + scratch * wl, cs.end(), 0.f);
    std::fill(rec.begin() + scratch * rl, rec.end(), 0.f);
    std::vector<float> cs_ref = cs, rec_ref = rec, want((size_t)T * vd);
    gdn_reference(want, mixed, conv_w, neg_a, dt_bias, norm, cs_ref, rec_ref, starts, ref_slots, saves, nk, dk, nv,
                  dv, K, 1e-6f);
    // The reference's scratch slot is not compared (the kernels never write it).
    std::copy(cs.begin() + scratch * wl, cs.end(), cs_ref.begin() + scratch * wl);
    std::copy(rec.begin() + scratch * rl, rec.end(), rec_ref.begin() + scratch * rl);
    // The 3-launch path.
    std::vector<float> cs3 = cs, rec3 = rec, conv_out((size_t)T * C), core((size_t)T * vd);
    std::vector<bf16> out3((size_t)T * vd), out((size_t)T * vd);
    launch({(unsigned)((C + 255) / 256), (unsigned)((T + GDN_CONV_ROWS - 1) / GDN_CONV_ROWS + S), 1}, {256, 1, 1}, [&] {
        gdn_conv_f32(conv_out.data(), mixed.data(), conv_w.data(), cs3.data(), row_seq.data(), starts.data(),
                     slots.data(), save_starts.data(), saves_flat.data(), T, C, K, width);
    });
    const int cols = dv >= 32 ? 32 : 16;
    launch({(unsigned)((dv + cols - 1) / cols), (unsigned)nv, (unsigned)S}, {(unsigned)(4 * cols), 1, 1}, [&] {
        gdn_recurrent_impl<DK, float>(core.data(), conv_out.data(), mixed.data(), neg_a.data(), dt_bias.data(),
                                      rec3.data(), starts.data(), slots.data(), save_starts.data(),
                                      saves_flat.data(), nk, nv, dv, width, 1 << 30);
    });
    launch({(unsigned)((T * nv + 3) / 4), 1, 1}, {128, 1, 1}, [&] {
        gdn_norm_f32_bf16(out3.data(), core.data(), mixed.data(), norm.data(), T * nv, nv, dv, width, C, 1e-6f);
    });
    // The fused kernel.
    const unsigned threads = (nv / nk * 4 * dv / splits + 31) / 32 * 32;
    std::vector<float> core_scratch((size_t)T * vd);
    std::vector<u32> tickets((size_t)S * nk);
    launch({(unsigned)splits, (unsigned)nk, (unsigned)S}, {threads, 1, 1}, [&] {
        gdn_decode_impl<DK, float, bf16>(out.data(), core_scratch.data(), tickets.data(), mixed.data(), conv_w.data(),
                                         cs.data(), neg_a.data(), dt_bias.data(), norm.data(), rec.data(),
                                         slots.data(), save_starts.data(), saves_flat.data(), nk, nv, K, width,
                                         1e-6f);
    });
    const bool reset = std::all_of(tickets.begin(), tickets.end(), [](u32 t) { return t == 0; });
    double wo = 0, wr = 0, wc = 0;
    for (size_t i = 0; i < out.size(); ++i) wo = std::max(wo, (double)std::fabs(F(out[i]) - want[i]) / (1e-2 + std::fabs(want[i])));
    for (size_t i = 0; i < rec.size(); ++i) wr = std::max(wr, (double)std::fabs(rec[i] - rec_ref[i]));
    for (size_t i = 0; i < cs.size(); ++i) wc = std::max(wc, (double)std::fabs(cs[i] - cs_ref[i]));
    const bool same = std::memcmp(out.data(), out3.data(), out.size() * sizeof(bf16)) == 0 && rec == rec3 &&
                      cs == cs3 && reset;
    char name[160];
    snprintf(name, sizeof name, "gdn_decode nk%d dk%d nv%d K%d S%d /%d out", nk, dk, nv, K, S, splits);
    report(name, wo, 1e-2);
    snprintf(name, sizeof name, "gdn_decode nk%d dk%d nv%d K%d /%d states", nk, dk, nv, K, splits);
    report(name, wr, 1e-4);
    snprintf(name, sizeof name, "gdn_decode nk%d dk%d nv%d K%d /%d windows", nk, dk, nv, K, splits);
    report(name, wc, 0);
    snprintf(name, sizeof name, "gdn_decode nk%d dk%d nv%d K%d /%d = 3 launches", nk, dk, nv, K, splits);
    report(name, same ? 0 : 1, 0);
}

static void gdn_decode_tests() {
    // The fixtures' heads (nk 2, nv 4, dk = dv = 16): decode rows, padding rows, saves before and
    // after the row (two at one `after`), several slots; a key head's columns in 1, 2 and 4
    // blocks.
    const std::vector<bool> pads{false, true, false, false, true, false};
    const std::vector<std::vector<u32>> afters{{}, {}, {1}, {0, 1, 1}, {}, {0}};
    for (int splits : {1, 2, 4}) t_gdn_decode<16>(2, 4, 4, pads, afters, splits);
    t_gdn_decode<32>(1, 3, 3, {false, true, false}, {{1}, {}, {0}});     // 3 value heads a key head
    t_gdn_decode<32>(1, 3, 3, {false, true, false}, {{1}, {}, {0}}, 2);
    t_gdn_decode<16>(1, 1, 1, {false, false}, {{0, 1}, {}});             // one tap: no window
    t_gdn_decode<16>(1, 1, 1, {false, false}, {{0, 1}, {}}, 2);
    t_gdn_decode<64>(2, 2, 2, {true}, {{}}, 2);                          // a lone padding row
    // 35B-A3B's heads (nk 16, nv 32, dk = dv = 128, 4 taps): 1024 threads a block, or 256.
    t_gdn_decode<128>(16, 32, 4, {false, true, false}, {{1}, {}, {0, 1}});
    t_gdn_decode<128>(16, 32, 4, {false, true, false}, {{1}, {}, {0, 1}}, 4);
}
