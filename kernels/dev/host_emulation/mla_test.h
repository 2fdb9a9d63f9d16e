// DeepSeek-V3's kernels (EMU_ONLY=mla runs just these): the latent attention (mla.cu:
// mla_rope_kv_*, mla_q_absorb_*, mla_attend_*, mla_out_*) against a plain C++ port of the CPU
// reference (engine/src/backend/cpu/mla.rs, in double), and the group-limited sigmoid routing
// (moe_score.cu's MoeSigmoid with n_group > 1) against the CPU's route_sigmoid, bit for bit
// (t_moe_sigmoid, minimax_test.h). Included by test.cpp after minimax_test.h.
#pragma once

// The rotation of x[0 .. 2·half) as the CPU's `rotate`: interleaved pairs (x[2i], x[2i + 1])
// de-interleaved first (evens, then odds), then neox halves.
static void mla_host_rotate(float* x, int half, float pos, const std::vector<float>& inv_freq,
                            float scale, bool inter) {
    std::vector<float> t(2 * half);
    for (int i = 0; i < half; ++i) {
        t[i] = inter ? x[2 * i] : x[i];
        t[i + half] = inter ? x[2 * i + 1] : x[i + half];
    }
    for (int i = 0; i < half; ++i) {
        const float a = inv_freq[i] * pos;
        const float c = std::cos(a) * scale, s = std::sin(a) * scale;
        x[i] = t[i] * c - t[i + half] * s;
        x[i + half] = t[i + half] * c + t[i] * s;
    }
}

// The type sets: the float32 path (f32 everything), f32 activations over a bf16 cache and bf16
// kv_b (_f32), bf16 everything (_bf16), bf16 activations and kv_b over the FP8 cache (_kv8:
// only where the latent is a multiple of 128).
enum MlaTypes { MLA_FP32, MLA_F32, MLA_BF16, MLA_KV8 };

// A latent row into the FP8 cache as the CPU rounds it (kv_fp8.rs's round_trip_head on c_kv
// and on k_pe apart): bytes at b, the row's lat / 128 + 1 scales at sc.
static void mla_fp8_row(const float* x, int lat, int rope, unsigned char* b, float* sc) {
    auto vec = [](const float* v, int n, unsigned char* o, float* s) {
        for (int g0 = 0; g0 < n; g0 += KV_FP8_GROUP) {
            const int end = std::min(n, g0 + KV_FP8_GROUP);
            float amax = 0;
            for (int d = g0; d < end; ++d) amax = std::max(amax, std::fabs(v[d]));
            const float sv = kv_fp8_scale(amax);
            for (int d = g0; d < end; ++d) o[d] = (unsigned char)f32_to_e4m3(v[d] / sv);
            s[g0 / KV_FP8_GROUP] = sv;
        }
    };
    vec(x, lat, b, sc);
    vec(x + lat, rope, b + lat, sc + lat / KV_FP8_GROUP);
}

// One case: `seqs` (start position, new tokens) each, their rows in that order; a cache of
// blocks of `bs` rows handed out shuffled, so tables jump between blocks. Every type set, with
// `splits` slices of each causal range. The cache before each chunk holds random rows (the
// context written by earlier steps).
static void t_mla(int heads, int nope, int rope, int v, int lat, int bs,
                  std::vector<std::pair<int, int>> seqs, bool inter, int splits) {
    const int row = lat + rope, qw = heads * (nope + rope), half = rope / 2;
    const int S = (int)seqs.size();
    int T = 0, max_blocks = 0, nblocks = 0;
    for (auto [st, n] : seqs) {
        T += n;
        max_blocks = std::max(max_blocks, (st + n + bs - 1) / bs);
        nblocks += (st + n + bs - 1) / bs;
    }
    nblocks += 1;  // one block no table names
    std::vector<u32> pool(nblocks);
    for (int i = 0; i < nblocks; ++i) pool[i] = (u32)i;
    std::shuffle(pool.begin(), pool.end(), rng);
    std::vector<u32> tables(S * max_blocks, 0), positions, row_seq, slots;
    int next = 0;
    for (int s = 0; s < S; ++s) {
        auto [st, n] = seqs[s];
        for (int b = 0; b < (st + n + bs - 1) / bs; ++b) tables[s * max_blocks + b] = pool[next++];
        for (int p = st; p < st + n; ++p) {
            positions.push_back((u32)p);
            row_seq.push_back((u32)s);
            slots.push_back(tables[s * max_blocks + p / bs] * bs + p % bs);
        }
    }
    std::vector<float> inv_freq(half);
    for (int i = 0; i < half; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / rope);
    const float rscale = 1.1f, scale = 1.0f / std::sqrt((float)(nope + rope));
    std::vector<float> q0(T * qw), lat0(T * row), kvb0(heads * (nope + v) * lat),
        cache0((size_t)nblocks * bs * row);
    for (auto& x : q0) x = U(1);
    for (auto& x : lat0) x = U(1);
    for (auto& x : kvb0) x = U(0.2f);
    for (auto& x : cache0) x = U(1);
    const char* tname[] = {"fp32", "f32", "bf16", "kv8"};
    const int groups = (row + KV_FP8_GROUP - 1) / KV_FP8_GROUP;
    const size_t nslots = (size_t)nblocks * bs;
    // A row as the FP8 cache gives it back.
    auto fp8_round = [&](float* x) {
        std::vector<unsigned char> b(row);
        std::vector<float> sc(groups);
        mla_fp8_row(x, lat, rope, b.data(), sc.data());
        for (int d = 0; d < row; ++d) x[d] = e4m3_value(b[d]) * sc[d / KV_FP8_GROUP];
    };
    for (MlaTypes ty : {MLA_FP32, MLA_F32, MLA_BF16, MLA_KV8}) {
        if (ty == MLA_KV8 && (lat % KV_FP8_GROUP != 0 || rope > KV_FP8_GROUP)) continue;
        // The inputs as this type set holds them (bf16 values where its tensors are bf16).
        auto rb = [](float x) { return F(B(x)); };
        std::vector<float> q = q0, lt = lat0, kvb = kvb0, cache = cache0;
        if (ty == MLA_BF16 || ty == MLA_KV8) {
            for (auto& x : q) x = rb(x);
            for (auto& x : lt) x = rb(x);
        }
        if (ty != MLA_FP32) {
            for (auto& x : kvb) x = rb(x);
            for (auto& x : cache) x = rb(x);
        }
        if (ty == MLA_KV8)
            for (size_t r = 0; r < nslots; ++r) fp8_round(&cache[r * row]);
        // The reference: rotate (rounded as the kernel stores: bf16 activations, bf16 cache),
        // write the rows, attend in double.
        std::vector<float> qr = q, lr = lt, cr = cache;
        for (int t = 0; t < T; ++t) {
            for (int h = 0; h < heads; ++h)
                mla_host_rotate(&qr[t * qw + h * (nope + rope) + nope], half, (float)positions[t], inv_freq, rscale, inter);
            mla_host_rotate(&lr[t * row + lat], half, (float)positions[t], inv_freq, rscale, inter);
            if (ty == MLA_BF16 || ty == MLA_KV8) {
                for (int i = 0; i < qw; ++i) qr[t * qw + i] = rb(qr[t * qw + i]);
                for (int i = 0; i < row; ++i) lr[t * row + i] = rb(lr[t * row + i]);
            }
            for (int i = 0; i < row; ++i)
                cr[(size_t)slots[t] * row + i] = ty == MLA_FP32 ? lr[t * row + i] : rb(lr[t * row + i]);
            if (ty == MLA_KV8) fp8_round(&cr[(size_t)slots[t] * row]);
        }
        std::vector<double> want(T * heads * v);
        for (int t = 0; t < T; ++t)
            for (int h = 0; h < heads; ++h) {
                const float* qh = &qr[t * qw + h * (nope + rope)];
                const float* w = &kvb[(size_t)h * (nope + v) * lat];
                std::vector<double> ql(lat, 0.0), ol(lat, 0.0);
                for (int d = 0; d < nope; ++d)
                    for (int l = 0; l < lat; ++l) ql[l] += (double)qh[d] * w[d * lat + l];
                const int len = positions[t] + 1;
                const u32* tab = &tables[row_seq[t] * max_blocks];
                std::vector<double> sc(len);
                double mx = -1e300, sum = 0;
                for (int p = 0; p < len; ++p) {
                    const float* c = &cr[((size_t)tab[p / bs] * bs + p % bs) * row];
                    double dot = 0;
                    for (int l = 0; l < lat; ++l) dot += ql[l] * c[l];
                    for (int d = 0; d < rope; ++d) dot += (double)qh[nope + d] * c[lat + d];
                    sc[p] = dot * scale;
                    mx = std::max(mx, sc[p]);
                }
                for (int p = 0; p < len; ++p) {
                    sc[p] = std::exp(sc[p] - mx);
                    sum += sc[p];
                    const float* c = &cr[((size_t)tab[p / bs] * bs + p % bs) * row];
                    for (int l = 0; l < lat; ++l) ol[l] += sc[p] * c[l];
                }
                for (int j = 0; j < v; ++j) {
                    double o = 0;
                    for (int l = 0; l < lat; ++l) o += (double)w[(nope + j) * lat + l] * ol[l] / sum;
                    want[(t * heads + h) * v + j] = o;
                }
            }
        // The kernels.
        std::vector<float> qf(T * heads * row, NAN), part((size_t)T * heads * splits * (lat + 2), NAN);
        std::vector<float> got(T * heads * v), got_cache(cache.size()), got_q(T * qw);
        const dim3 rope_grid{(unsigned)T, (unsigned)((heads + 1 + MLA_ROPE_WARPS - 1) / MLA_ROPE_WARPS)};
        const dim3 by_tokens{(unsigned)heads, (unsigned)((T + MLA_QT - 1) / MLA_QT)};
        const dim3 attend_grid{(unsigned)T, (unsigned)((heads + MLA_HG - 1) / MLA_HG), (unsigned)splits};
        const int ti = T;
        if (ty == MLA_FP32) {
            std::vector<float> qd = q, ld = lt, cd = cache;
            launch(rope_grid, {32 * MLA_ROPE_WARPS}, [&] { mla_rope_kv_fp32(qd.data(), ld.data(), cd.data(), positions.data(), slots.data(), inv_freq.data(), rscale, heads, nope, rope, lat, inter); });
            launch(by_tokens, {MLA_THREADS}, [&] { mla_q_absorb_fp32(qf.data(), qd.data(), kvb.data(), ti, heads, nope, rope, v, lat); });
            launch(attend_grid, {MLA_THREADS}, [&] { mla_attend_fp32(part.data(), qf.data(), cd.data(), positions.data(), row_seq.data(), tables.data(), max_blocks, bs, heads, rope, lat, scale); });
            launch(by_tokens, {MLA_THREADS}, [&] { mla_out_fp32(got.data(), part.data(), kvb.data(), ti, heads, nope, v, lat, splits); });
            got_cache = cd;
            got_q = qd;
        } else if (ty == MLA_KV8) {
            std::vector<bf16> kb(kvb.size()), qd(q.size()), ld(lt.size()), ob(T * heads * v);
            for (size_t i = 0; i < kvb.size(); ++i) kb[i] = B(kvb[i]);
            for (size_t i = 0; i < q.size(); ++i) qd[i] = B(q[i]);
            for (size_t i = 0; i < lt.size(); ++i) ld[i] = B(lt[i]);
            // The cache's rows (already FP8 values) encoded again: the same bytes and scales.
            std::vector<unsigned char> cb(cache.size());
            std::vector<float> cs(nslots * groups);
            for (size_t r = 0; r < nslots; ++r) mla_fp8_row(&cache[r * row], lat, rope, &cb[r * row], &cs[r * groups]);
            launch(rope_grid, {32 * MLA_ROPE_WARPS}, [&] { mla_rope_kv_bf16_kv8(qd.data(), ld.data(), cb.data(), positions.data(), slots.data(), inv_freq.data(), rscale, heads, nope, rope, lat, inter, cs.data()); });
            launch(by_tokens, {MLA_THREADS}, [&] { mla_q_absorb_bf16(qf.data(), qd.data(), kb.data(), ti, heads, nope, rope, v, lat); });
            launch(attend_grid, {MLA_THREADS}, [&] { mla_attend_kv8(part.data(), qf.data(), cb.data(), positions.data(), row_seq.data(), tables.data(), max_blocks, bs, heads, rope, lat, scale, cs.data()); });
            launch(by_tokens, {MLA_THREADS}, [&] { mla_out_bf16(ob.data(), part.data(), kb.data(), ti, heads, nope, v, lat, splits); });
            for (size_t i = 0; i < ob.size(); ++i) got[i] = F(ob[i]);
            for (size_t i = 0; i < q.size(); ++i) got_q[i] = F(qd[i]);
            for (size_t i = 0; i < cb.size(); ++i) got_cache[i] = e4m3_value(cb[i]) * cs[(i / row) * groups + (i % row) / KV_FP8_GROUP];
        } else {
            std::vector<bf16> kb(kvb.size()), cd(cache.size()), ob(T * heads * v);
            for (size_t i = 0; i < kvb.size(); ++i) kb[i] = B(kvb[i]);
            for (size_t i = 0; i < cache.size(); ++i) cd[i] = B(cache[i]);
            if (ty == MLA_F32) {
                std::vector<float> qd = q, ld = lt;
                launch(rope_grid, {32 * MLA_ROPE_WARPS}, [&] { mla_rope_kv_f32(qd.data(), ld.data(), cd.data(), positions.data(), slots.data(), inv_freq.data(), rscale, heads, nope, rope, lat, inter); });
                launch(by_tokens, {MLA_THREADS}, [&] { mla_q_absorb_f32(qf.data(), qd.data(), kb.data(), ti, heads, nope, rope, v, lat); });
                got_q = qd;
            } else {
                std::vector<bf16> qd(q.size()), ld(lt.size());
                for (size_t i = 0; i < q.size(); ++i) qd[i] = B(q[i]);
                for (size_t i = 0; i < lt.size(); ++i) ld[i] = B(lt[i]);
                launch(rope_grid, {32 * MLA_ROPE_WARPS}, [&] { mla_rope_kv_bf16(qd.data(), ld.data(), cd.data(), positions.data(), slots.data(), inv_freq.data(), rscale, heads, nope, rope, lat, inter); });
                launch(by_tokens, {MLA_THREADS}, [&] { mla_q_absorb_bf16(qf.data(), qd.data(), kb.data(), ti, heads, nope, rope, v, lat); });
                for (size_t i = 0; i < q.size(); ++i) got_q[i] = F(qd[i]);
            }
            launch(attend_grid, {MLA_THREADS}, [&] { mla_attend_bf16(part.data(), qf.data(), cd.data(), positions.data(), row_seq.data(), tables.data(), max_blocks, bs, heads, rope, lat, scale); });
            launch(by_tokens, {MLA_THREADS}, [&] { mla_out_bf16(ob.data(), part.data(), kb.data(), ti, heads, nope, v, lat, splits); });
            for (size_t i = 0; i < ob.size(); ++i) got[i] = F(ob[i]);
            for (size_t i = 0; i < cd.size(); ++i) got_cache[i] = F(cd[i]);
        }
        // Rotation and write: the cache (every row, the untouched ones included) and q, by the
        // largest difference over the largest value; the output likewise.
        double dc = 0, dq = 0, dout = 0, mout = 0;
        for (size_t i = 0; i < cr.size(); ++i) dc = std::max(dc, (double)std::fabs(got_cache[i] - cr[i]));
        for (int i = 0; i < T * qw; ++i) dq = std::max(dq, (double)std::fabs(got_q[i] - qr[i]));
        for (int i = 0; i < T * heads * v; ++i) {
            dout = std::max(dout, std::fabs(got[i] - want[i]));
            mout = std::max(mout, std::fabs(want[i]));
        }
        char name[120];
        snprintf(name, 120, "mla rope+write %s h%d lat%d rope%d%s", tname[ty], heads, lat, rope, inter ? " inter" : "");
        // One bf16 step of a value near 1 where a rounding may land on the other side (an
        // e4m3 step, 2^-3 of a value, with the FP8 cache).
        report(name, std::max(dc, dq), ty == MLA_FP32 ? 1e-5 : ty == MLA_KV8 ? 0.13 : 8e-3);
        snprintf(name, 120, "mla attention %s h%d n%d r%d v%d lat%d T%d split%d", tname[ty], heads, nope, rope, v, lat, T, splits);
        report(name, dout / std::max(mout, 1e-6), ty == MLA_FP32 ? 2e-5 : 8e-3);
    }
}

static void mla_tests() {
    // The tiny fixture (4 heads, nope 16, rope 8, v 16, latent 32): one token at position 0;
    // a 5-token prompt then two decode rows over block boundaries, interleaved pairs.
    t_mla(4, 16, 8, 16, 32, 4, {{0, 1}}, true, 1);
    t_mla(4, 16, 8, 16, 32, 4, {{0, 5}, {7, 1}, {12, 1}}, true, 1);
    // Several sequences of different lengths, a chunk after a cached prefix, neox halves, in
    // 1 and 3 slices (a slice past a short row's end is empty).
    t_mla(4, 16, 8, 16, 32, 4, {{9, 3}, {0, 2}, {16, 1}, {3, 1}}, false, 3);
    // The FP8 fixture's sizes (2 heads, nope 64, rope 16, v 64, latent 144); a row of 38
    // values (the scalar tile loads); 12 heads (two head groups, the second of 4).
    t_mla(2, 64, 16, 64, 144, 16, {{0, 3}, {20, 1}}, true, 2);
    t_mla(3, 8, 4, 8, 34, 4, {{0, 2}, {5, 1}}, false, 1);
    t_mla(12, 16, 8, 16, 32, 8, {{0, 2}, {17, 1}}, true, 4);
    // DeepSeek-V3's head sizes (latent 512, rope 64, nope and v 128), 9 heads, decode rows;
    // these and a latent of 128 over more than one 32-row tile also take the FP8 cache.
    t_mla(9, 128, 64, 128, 512, 16, {{30, 1}, {3, 1}}, true, 2);
    t_mla(4, 16, 16, 16, 128, 8, {{0, 5}, {40, 1}, {70, 2}}, true, 2);
    // Group-limited routing: the tiny fixture (8 experts, 4 groups of 2, 2 kept, top-2), the
    // FP8 fixture (4 in 2 groups, 1 kept), DeepSeek-V3 (256 in 8 groups, 4 kept, top-8, scaled
    // by 2.5), ties among groups (equal scores: the lower group), the any-width loop (E 320),
    // and steps past the one-block plan.
    // The cases must route some token off its plain top-k, or they test nothing of the groups.
    int moved = 0;
    moved += t_moe_sigmoid(1, 8, 2, true, 2.5f, false, 4, 2);
    moved += t_moe_sigmoid(7, 8, 2, true, 1.0f, true, 4, 2);
    moved += t_moe_sigmoid(3, 4, 2, true, 1.0f, false, 2, 1);
    moved += t_moe_sigmoid(1, 256, 8, true, 2.5f, false, 8, 4);
    moved += t_moe_sigmoid(5, 256, 8, true, 2.5f, true, 8, 4);
    moved += t_moe_sigmoid(3, 320, 8, false, 1.0f, true, 8, 3);
    moved += t_moe_sigmoid(129, 16, 4, true, 1.0f, true, 4, 2);
    printf("group-limited routing moved %d tokens off their plain top-k\n", moved);
    report("group-limited routing moved some token", moved == 0, 0);
}
