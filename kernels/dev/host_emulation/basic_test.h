// The small kernels (random weights, norm, rope, paged attention, GEMVs, KV writes, softmax,
// elementwise) against plain loops. Included by test.cpp.
#pragma once

void t_random() {
    u64 n = 65536 * 2 + 17, seed = 99; float hw = 1.0f * std::sqrt(3.0f);
    std::vector<bf16> out(n);
    u64 chunks = (n + 65535) / 65536;
    launch({(unsigned)((chunks + 63) / 64)}, {64}, [&] { fill_random_bf16(out.data(), n, seed, hw); });
    double worst = 0;
    for (u64 c = 0; c < chunks; ++c) {
        u64 st = sm(seed ^ (c * 0x9e3779b97f4a7c15ull));
        for (u64 i = c * 65536; i < std::min(n, (c + 1) * 65536); ++i) {
            st = sm(st);
            float u = (float)(st >> 40) / (float)(1ull << 24);
            float v = (2.0f * u - 1.0f) * hw;
            if (B(v).bits != out[i].bits) worst = 1;
        }
    }
    report("fill_random", worst, 0);
}

void t_norm(int rows, int h, int threads) {
    std::vector<float> x(rows * h), r(rows * h);
    std::vector<bf16> w(h), out(rows * h), out2(rows * h);
    for (auto& v : x) v = U(2);
    for (auto& v : r) v = U(4);
    for (auto& v : w) v = B(1 + U(0.2));
    launch({(unsigned)rows}, {(unsigned)threads}, [&] { rms_norm_f32(out.data(), x.data(), w.data(), h, 1e-6f); });
    double worst = 0;
    for (int i = 0; i < rows; ++i) {
        float ss = 0; for (int j = 0; j < h; ++j) ss += x[i*h+j]*x[i*h+j];
        float inv = 1.0f / std::sqrt(ss / h + 1e-6f);
        for (int j = 0; j < h; ++j) worst = std::max(worst, relerr(F(out[i*h+j]), F(w[j]) * (x[i*h+j]*inv)));
    }
    char name[64]; snprintf(name, 64, "rms_norm [%d,%d] thr %d", rows, h, threads);
    report(name, worst, 5e-3);
    auto r0 = r;
    launch({(unsigned)rows}, {(unsigned)threads}, [&] { add_rms_norm_f32_f32(out2.data(), r.data(), x.data(), w.data(), h, 1e-6f); });
    worst = 0; double wr = 0;
    for (int i = 0; i < rows; ++i) {
        float ss = 0; std::vector<float> s(h);
        for (int j = 0; j < h; ++j) { s[j] = r0[i*h+j] + x[i*h+j]; ss += s[j]*s[j]; wr = std::max(wr, (double)std::fabs(s[j]-r[i*h+j])); }
        float inv = 1.0f / std::sqrt(ss / h + 1e-6f);
        for (int j = 0; j < h; ++j) worst = std::max(worst, relerr(F(out2[i*h+j]), F(w[j]) * (s[j]*inv)));
    }
    snprintf(name, 64, "add_rms_norm [%d,%d]", rows, h);
    report(name, worst, 5e-3);
    report("add_rms_norm residual", wr, 0);
}

// Rows held in registers (up to NORM_REGS a thread: a 5,120-wide decode row on 1,024 threads,
// the edge at 4,096 on 512) and the strided loop past them (5,000 on 64 threads).
void norm_tests() {
    t_norm(3, 64, 32); t_norm(2, 4096, 512); t_norm(2, 96, 32);
    t_norm(1, 5120, 1024); t_norm(2, 5000, 64); t_norm(1, 4097, 512);
}

void t_rope(int T, int nh, int nkv, int hd, int rot, float theta, float scale, int maxpos) {
    int W = (nh + 2*nkv) * hd;
    std::vector<float> q(T*W), ref;
    std::vector<bf16> qw(hd), kw(hd);
    std::vector<u32> pos(T);
    for (auto& v : q) v = U(2);
    for (auto& v : qw) v = B(1+U(0.2));
    for (auto& v : kw) v = B(1+U(0.2));
    for (auto& p : pos) p = rng() % maxpos;
    std::vector<float> inv(rot/2);
    for (int i = 0; i < rot/2; ++i) inv[i] = 1.0f / std::pow(theta, 2.0f*i/rot);
    ref = q;
    int half = rot/2;
    for (int t = 0; t < T; ++t) for (int h = 0; h < nh+nkv; ++h) {
        float* x = &ref[t*W + h*hd]; const bf16* w = h < nh ? qw.data() : kw.data();
        float ss = 0; for (int d = 0; d < hd; ++d) ss += x[d]*x[d];
        float iv = 1.0f/std::sqrt(ss/hd + 1e-6f);
        std::vector<float> tmp(hd); for (int d = 0; d < hd; ++d) tmp[d] = F(w[d]) * (x[d]*iv);
        for (int i = 0; i < half; ++i) {
            float a = inv[i] * (float)pos[t]; float c = std::cos(a)*scale, s = std::sin(a)*scale;
            x[i] = tmp[i]*c - tmp[i+half]*s; x[i+half] = tmp[i+half]*c + tmp[i]*s;
        }
        for (int d = 2*half; d < hd; ++d) x[d] = tmp[d];
    }
    launch({(unsigned)T, (unsigned)((nh+nkv+3)/4)}, {128}, [&] {
        qk_norm_rope_f32(q.data(), pos.data(), qw.data(), kw.data(), inv.data(), nh, nkv, hd, half, scale, 1e-6f); });
    double worst = 0;
    for (int i = 0; i < T*W; ++i) worst = std::max(worst, (double)std::fabs(q[i]-ref[i]));
    char name[96]; snprintf(name, 96, "qk_norm_rope T%d h%d/%d hd%d rot%d", T, nh, nkv, hd, rot);
    report(name, worst, 1e-4);
}

// A batch of sequences given as (start position, new tokens) over shuffled, out-of-order block
// tables (plus `spare` unused blocks): what paged attention reads.
struct PagedBatch {
    int bs, maxb = 0, total_blocks = 1, T = 0;
    std::vector<u32> tables, positions, row_seq;
    PagedBatch(const std::vector<std::pair<int,int>>& seqs, int block_size, int spare) : bs(block_size) {
        std::vector<int> need;
        for (auto [s,n] : seqs) { need.push_back((s+n+bs-1)/bs); total_blocks += need.back(); }
        total_blocks += spare;
        std::vector<u32> ids; for (int i = 1; i < total_blocks; ++i) ids.push_back(i);
        std::shuffle(ids.begin(), ids.end(), rng);
        maxb = *std::max_element(need.begin(), need.end());
        tables.assign(seqs.size()*maxb, 0);
        int next = 0;
        for (size_t s = 0; s < seqs.size(); ++s) {
            for (int j = 0; j < need[s]; ++j) tables[s*maxb+j] = ids[next++];
            for (int i = 0; i < seqs[s].second; ++i) { positions.push_back(seqs[s].first + i); row_seq.push_back(s); }
        }
        T = positions.size();
    }
    // The cache row (slot · nkv + kv head) of key p of row r's sequence.
    size_t row(int r, int p, int nkv, int kh) const {
        const u32* tab = &tables[row_seq[r]*maxb];
        return ((size_t)tab[p/bs]*bs + p%bs)*nkv + kh;
    }
};

// The sliding window (0: none) and the sinks (null: none, else [nh] logits) of the attention
// cases, as the CPU reference applies them (cpu/attention.rs).
struct AttnExtras {
    int window = 0;
    const std::vector<float>* sinks = nullptr;
    const float* sink_ptr() const { return sinks ? sinks->data() : nullptr; }
};

// Causal attention in double precision of each row's q heads over keys K(cache row, dim) and
// values V(cache row, dim): [T, nh·hd]; in the last `x.window` keys, with a sink a head.
template <class KF, class VF>
std::vector<double> attention_ref(const PagedBatch& b, const std::vector<float>& qkv, int nh,
                                  int nkv, int hd, float scale, KF K, VF V, AttnExtras x = {}) {
    int W = (nh+2*nkv)*hd, group = nh/nkv;
    std::vector<double> ref((size_t)b.T*nh*hd);
    for (int r = 0; r < b.T; ++r) for (int h = 0; h < nh; ++h) {
        int kh = h/group, len = b.positions[r]+1;
        int first = x.window > 0 ? std::max(0, len - x.window) : 0;
        std::vector<double> sc(len); double mx = -1e30;
        for (int p = first; p < len; ++p) { double d = 0; for (int k = 0; k < hd; ++k) d += qkv[r*W+h*hd+k]*K(b.row(r,p,nkv,kh), k); sc[p] = d*scale; mx = std::max(mx, sc[p]); }
        if (x.sinks) mx = std::max(mx, (double)(*x.sinks)[h]);
        double sum = x.sinks ? std::exp((*x.sinks)[h] - mx) : 0;
        for (int p = first; p < len; ++p) { sc[p] = std::exp(sc[p]-mx); sum += sc[p]; }
        for (int k = 0; k < hd; ++k) { double o = 0; for (int p = first; p < len; ++p) o += sc[p]*V(b.row(r,p,nkv,kh), k); ref[((size_t)r*nh+h)*hd+k] = o / sum; }
    }
    return ref;
}

// Worst error of out [T, nh·hd] (bf16) against attention_ref, relative to 1e-2 + |ref|.
template <class KF, class VF>
double attention_worst(const PagedBatch& b, const std::vector<float>& qkv, int nh, int nkv, int hd,
                       float scale, const std::vector<bf16>& out, KF K, VF V, AttnExtras x = {}) {
    const auto ref = attention_ref(b, qkv, nh, nkv, hd, scale, K, V, x);
    double worst = 0;
    for (size_t i = 0; i < ref.size(); ++i)
        worst = std::max(worst, std::fabs(F(out[i]) - ref[i]) / (1e-2 + std::fabs(ref[i])));
    return worst;
}

// Random sink logits for nh heads, around the scores' range (some above every score).
static std::vector<float> random_sinks(int nh) {
    std::vector<float> s(nh);
    for (auto& v : s) v = U(3);
    return s;
}

// seqs: (start, n); window > 0: a sliding window; sinks: a random sink a head.
void t_attn(int nh, int nkv, int hd, std::vector<std::pair<int,int>> seqs, int bs = 16, int kps = 0,
            int window = 0, bool sinks = false) {
    const std::vector<float> sink_v = random_sinks(nh);
    const AttnExtras x{window, sinks ? &sink_v : nullptr};
    const float* sk = x.sink_ptr();
    int W = (nh+2*nkv)*hd;
    PagedBatch batch(seqs, bs, 2);
    int T = batch.T, maxb = batch.maxb, total_blocks = batch.total_blocks;
    const auto &tables = batch.tables, &positions = batch.positions, &row_seq = batch.row_seq;
    size_t csz = (size_t)total_blocks*bs*nkv*hd;
    std::vector<bf16> kc(csz), vc(csz), out(T*nh*hd);
    for (auto& v : kc) v = B(U(1)); for (auto& v : vc) v = B(U(1));
    std::vector<float> qkv(T*W); for (auto& v : qkv) v = U(3);
    float scale = 1.0f/std::sqrt((float)hd);
    int nper = (hd + 31)/32;
    int d = nper == 1 ? 32 : nper == 2 ? 64 : nper <= 4 ? 128 : 256;
    int group_ = nh/nkv, g = group_ % 4 == 0 ? 4 : group_ % 2 == 0 ? 2 : 1;
    bool vec = hd == d && d >= 64;
    // The kernel the host launcher picks (attention.rs): by head_dim, head group and vec.
    auto call = [&](bool split, bf16* o, float* partial) {
#define ATTN_ARGS o, partial, qkv.data(), kc.data(), vc.data(), positions.data(), row_seq.data(), tables.data(), maxb, bs, nh, nkv, hd, scale, nullptr, nullptr, window, sk
        if (split == false && vec == false && d == 32 && g == 1) return paged_attention_f32_d32_g1(ATTN_ARGS);
        if (split == false && vec == false && d == 32 && g == 2) return paged_attention_f32_d32_g2(ATTN_ARGS);
        if (split == false && vec == false && d == 32 && g == 4) return paged_attention_f32_d32_g4(ATTN_ARGS);
        if (split == false && vec == false && d == 64 && g == 1) return paged_attention_f32_d64_g1(ATTN_ARGS);
        if (split == false && vec == false && d == 64 && g == 2) return paged_attention_f32_d64_g2(ATTN_ARGS);
        if (split == false && vec == false && d == 64 && g == 4) return paged_attention_f32_d64_g4(ATTN_ARGS);
        if (split == false && vec == false && d == 128 && g == 1) return paged_attention_f32_d128_g1(ATTN_ARGS);
        if (split == false && vec == false && d == 128 && g == 2) return paged_attention_f32_d128_g2(ATTN_ARGS);
        if (split == false && vec == false && d == 128 && g == 4) return paged_attention_f32_d128_g4(ATTN_ARGS);
        if (split == false && vec == false && d == 256 && g == 1) return paged_attention_f32_d256_g1(ATTN_ARGS);
        if (split == false && vec == false && d == 256 && g == 2) return paged_attention_f32_d256_g2(ATTN_ARGS);
        if (split == false && vec == false && d == 256 && g == 4) return paged_attention_f32_d256_g4(ATTN_ARGS);
        if (split == false && vec == true && d == 64 && g == 1) return paged_attention_vec_f32_d64_g1(ATTN_ARGS);
        if (split == false && vec == true && d == 64 && g == 2) return paged_attention_vec_f32_d64_g2(ATTN_ARGS);
        if (split == false && vec == true && d == 64 && g == 4) return paged_attention_vec_f32_d64_g4(ATTN_ARGS);
        if (split == false && vec == true && d == 128 && g == 1) return paged_attention_vec_f32_d128_g1(ATTN_ARGS);
        if (split == false && vec == true && d == 128 && g == 2) return paged_attention_vec_f32_d128_g2(ATTN_ARGS);
        if (split == false && vec == true && d == 128 && g == 4) return paged_attention_vec_f32_d128_g4(ATTN_ARGS);
        if (split == false && vec == true && d == 256 && g == 1) return paged_attention_vec_f32_d256_g1(ATTN_ARGS);
        if (split == false && vec == true && d == 256 && g == 2) return paged_attention_vec_f32_d256_g2(ATTN_ARGS);
        if (split == false && vec == true && d == 256 && g == 4) return paged_attention_vec_f32_d256_g4(ATTN_ARGS);
        if (split == true && vec == false && d == 32 && g == 1) return paged_attention_split_f32_d32_g1(ATTN_ARGS);
        if (split == true && vec == false && d == 32 && g == 2) return paged_attention_split_f32_d32_g2(ATTN_ARGS);
        if (split == true && vec == false && d == 32 && g == 4) return paged_attention_split_f32_d32_g4(ATTN_ARGS);
        if (split == true && vec == false && d == 64 && g == 1) return paged_attention_split_f32_d64_g1(ATTN_ARGS);
        if (split == true && vec == false && d == 64 && g == 2) return paged_attention_split_f32_d64_g2(ATTN_ARGS);
        if (split == true && vec == false && d == 64 && g == 4) return paged_attention_split_f32_d64_g4(ATTN_ARGS);
        if (split == true && vec == false && d == 128 && g == 1) return paged_attention_split_f32_d128_g1(ATTN_ARGS);
        if (split == true && vec == false && d == 128 && g == 2) return paged_attention_split_f32_d128_g2(ATTN_ARGS);
        if (split == true && vec == false && d == 128 && g == 4) return paged_attention_split_f32_d128_g4(ATTN_ARGS);
        if (split == true && vec == false && d == 256 && g == 1) return paged_attention_split_f32_d256_g1(ATTN_ARGS);
        if (split == true && vec == false && d == 256 && g == 2) return paged_attention_split_f32_d256_g2(ATTN_ARGS);
        if (split == true && vec == false && d == 256 && g == 4) return paged_attention_split_f32_d256_g4(ATTN_ARGS);
        if (split == true && vec == true && d == 64 && g == 1) return paged_attention_vec_split_f32_d64_g1(ATTN_ARGS);
        if (split == true && vec == true && d == 64 && g == 2) return paged_attention_vec_split_f32_d64_g2(ATTN_ARGS);
        if (split == true && vec == true && d == 64 && g == 4) return paged_attention_vec_split_f32_d64_g4(ATTN_ARGS);
        if (split == true && vec == true && d == 128 && g == 1) return paged_attention_vec_split_f32_d128_g1(ATTN_ARGS);
        if (split == true && vec == true && d == 128 && g == 2) return paged_attention_vec_split_f32_d128_g2(ATTN_ARGS);
        if (split == true && vec == true && d == 128 && g == 4) return paged_attention_vec_split_f32_d128_g4(ATTN_ARGS);
        if (split == true && vec == true && d == 256 && g == 1) return paged_attention_vec_split_f32_d256_g1(ATTN_ARGS);
        if (split == true && vec == true && d == 256 && g == 2) return paged_attention_vec_split_f32_d256_g2(ATTN_ARGS);
        if (split == true && vec == true && d == 256 && g == 4) return paged_attention_vec_split_f32_d256_g4(ATTN_ARGS);
#undef ATTN_ARGS
        fprintf(stderr, "no kernel: split %d vec %d d %d g %d\n", split, vec, d, g);
    };
    auto run = [&] { call(false, out.data(), nullptr); };
    auto run_split = [&](float* partial) { call(true, nullptr, partial); };
    int max_len = 0; for (auto p : positions) max_len = std::max(max_len, (int)p + 1);
    int splits = kps == 0 ? 1 : (max_len + kps - 1) / kps;
    std::vector<float> partial((size_t)T * nh * splits * (hd + 2), NAN);
    auto merge = [&] { launch({(unsigned)T, (unsigned)nh}, {128}, [&] { attention_merge(out.data(), partial.data(), nh, hd, splits, sk); }); };
    if (kps == 0) {
        launch({(unsigned)(T * (nh / g))}, {128}, run);
    } else {
        launch({(unsigned)(T * (nh / g)), 1, (unsigned)splits}, {128}, [&] { run_split(partial.data()); });
        merge();
    }
    if (kps != 0 && !sinks) {
        // The merge's first version (three loops over the splits, a load at a time): the
        // same bits.
        int differ = 0;
        for (int t = 0; t < T; ++t) for (int h = 0; h < nh; ++h) {
            const float* st = &partial[((size_t)t * nh + h) * splits * (hd + 2)];
            float m_all = -INFINITY, l_all = 0.f;
            for (int sp = 0; sp < splits; ++sp) m_all = fmaxf(m_all, st[sp * (hd + 2)]);
            for (int sp = 0; sp < splits; ++sp) {
                const float* q = st + sp * (hd + 2);
                l_all += q[0] == -INFINITY ? 0.f : q[1] * expf(q[0] - m_all);
            }
            const float inv_l = 1.0f / l_all;
            for (int d = 0; d < hd; ++d) {
                float sum = 0.f;
                for (int sp = 0; sp < splits; ++sp) {
                    const float* q = st + sp * (hd + 2);
                    if (q[0] != -INFINITY) sum += q[2 + d] * expf(q[0] - m_all);
                }
                differ += B(sum * inv_l).bits != out[((size_t)t * nh + h) * hd + d].bits;
            }
        }
        char mname[96]; snprintf(mname, 96, "attention_merge = first version h%d hd%d T%d splits %d", nh, hd, T, splits);
        report(mname, differ, 0);
    }
    int group = nh/nkv;
    auto check = [&](const char* kind) {
        double worst = attention_worst(batch, qkv, nh, nkv, hd, scale, out,
            [&](size_t row, int k) { return (double)F(kc[row*hd+k]); },
            [&](size_t row, int k) { return (double)F(vc[row*hd+k]); }, x);
        char name[120]; snprintf(name, 120, "paged_attention%s h%d/%d hd%d T%d split %d window %d%s", kind, nh, nkv, hd, T, kps, window, sinks ? " sinks" : "");
        report(name, worst, 6e-3);
    };
    check("");
    // The tensor-core kernel (attention_mma.cu) where the launcher would pick it: head_dim 64
    // or 128, a GQA group of at most 16. Its q and P are bf16, so its tolerance is the same.
    if ((hd == 64 || hd == 128) && group <= 16) {
        std::fill(out.begin(), out.end(), B(NAN));
        std::fill(partial.begin(), partial.end(), NAN);
        bool wide = group > 8;
#define MMA_ARGS o, pp, qkv.data(), kc.data(), vc.data(), positions.data(), row_seq.data(), tables.data(), maxb, bs, nh, nkv, hd, scale, nullptr, nullptr, window, sk
        auto mma = [&](bool split, bf16* o, float* pp) {
            if (!split && !wide && hd == 64) return paged_attention_mma_f32_d64(MMA_ARGS);
            if (!split && !wide && hd == 128) return paged_attention_mma_f32_d128(MMA_ARGS);
            if (!split && wide && hd == 64) return paged_attention_mma_f32_d64_wide(MMA_ARGS);
            if (!split && wide && hd == 128) return paged_attention_mma_f32_d128_wide(MMA_ARGS);
            if (split && !wide && hd == 64) return paged_attention_mma_split_f32_d64(MMA_ARGS);
            if (split && !wide && hd == 128) return paged_attention_mma_split_f32_d128(MMA_ARGS);
            if (split && wide && hd == 64) return paged_attention_mma_split_f32_d64_wide(MMA_ARGS);
            if (split && wide && hd == 128) return paged_attention_mma_split_f32_d128_wide(MMA_ARGS);
        };
#undef MMA_ARGS
        if (kps == 0) {
            launch({(unsigned)(T * nkv)}, {128}, [&] { mma(false, out.data(), nullptr); });
        } else {
            launch({(unsigned)(T * nkv), 1, (unsigned)splits}, {128}, [&] { mma(true, nullptr, partial.data()); });
            merge();
        }
        check("_mma");
    }
}

void t_gemv(int M, int N, int K) {
    std::vector<bf16> x(M*K), w(N*K);
    for (auto& v : x) v = B(U(1)); for (auto& v : w) v = B(U(1));
    std::vector<float> out(M*N, NAN);
    auto run = [&] {
        switch (M) {
            case 1: gemv_m1(out.data(), x.data(), w.data(), N, K); break;
            case 3: gemv_m3(out.data(), x.data(), w.data(), N, K); break;
            default: gemv_m8(out.data(), x.data(), w.data(), N, K); break;
        }
    };
    launch({(unsigned)((N + 7) / 8)}, {256}, run);
    // The error against the sum of the products' magnitudes: f32 sums of K terms stay within
    // about sqrt(K) · 2^-24 of it, while one wrong or missing product moves an output by about
    // 1/K of it. (Against |r| itself, an output that cancels to near zero failed on rounding
    // alone: M3 N37 K1048, 1.2e-4.)
    double worst = 0;
    for (int m = 0; m < M; ++m) for (int n = 0; n < N; ++n) {
        double r = 0, mag = 0;
        for (int k = 0; k < K; ++k) {
            const double p = (double)F(x[m*K+k]) * F(w[n*K+k]);
            r += p;
            mag += std::fabs(p);
        }
        worst = std::max(worst, std::fabs(out[m*N+n] - r) / mag);
    }
    char name[64]; snprintf(name, 64, "gemv M%d N%d K%d", M, N, K);
    report(name, worst, 1e-5);
    if (M == 1) {
        // gemv_bias_m1: gemv_m1's sums plus the bias, as add_bias adds it (f32), bit for bit.
        std::vector<bf16> bias(N);
        for (auto& v : bias) v = B(U(1));
        std::vector<float> ob(N, NAN);
        launch({(unsigned)((N + 7) / 8)}, {256}, [&] { gemv_bias_m1(ob.data(), x.data(), w.data(), N, K, bias.data()); });
        int off = 0;
        for (int n = 0; n < N; ++n) off += ob[n] != out[n] + F(bias[n]);
        snprintf(name, 64, "gemv_bias_m1 N%d K%d", N, K);
        report(name, off, 0);
        // The whole-row kernels whose rows fit (K <= 256 · G): gemv_m1's output bit for bit.
        int bad = 0, ran = 0;
        for (int variant = 0; variant < 3; ++variant) {
            const int rows = variant == 1 ? 2 : 1, g = variant == 2 ? 16 : 8;
            if (K / 8 > 32 * g) continue;
            std::vector<float> o2(N, NAN);
            launch({(unsigned)((N + 8 * rows - 1) / (8 * rows))}, {256}, [&] {
                if (variant == 0) gemv_full_r1g8(o2.data(), x.data(), w.data(), N, K);
                else if (variant == 1) gemv_full_r2g8(o2.data(), x.data(), w.data(), N, K);
                else gemv_full_r1g16(o2.data(), x.data(), w.data(), N, K);
            });
            bad += memcmp(o2.data(), out.data(), N * sizeof(float)) != 0;
            ++ran;
        }
        snprintf(name, 64, "gemv_full (%d kernels) = gemv_m1 N%d K%d", ran, N, K);
        report(name, bad + (ran == 0), 0);
    }
}

// The fused gate_up GEMV + SiLU: must equal the unfused gemv + silu formula exactly (same
// accumulation order), and the double-precision reference within bf16 rounding.
void t_gemv_silu(int M, int I, int K) {
    std::vector<bf16> x(M*K), w(2*I*K);
    for (auto& v : x) v = B(U(1)); for (auto& v : w) v = B(U(1));
    std::vector<bf16> out(M*I);
    std::vector<float> gu(M*2*I, NAN);
    auto run = [&] {
        switch (M) {
            case 1: gemv_silu_m1(out.data(), x.data(), w.data(), I, K); break;
            case 3: gemv_silu_m3(out.data(), x.data(), w.data(), I, K); break;
            default: gemv_silu_m8(out.data(), x.data(), w.data(), I, K); break;
        }
    };
    launch({(unsigned)((I + 7) / 8)}, {256}, run);
    auto unfused = [&] {
        switch (M) {
            case 1: gemv_m1(gu.data(), x.data(), w.data(), 2*I, K); break;
            case 3: gemv_m3(gu.data(), x.data(), w.data(), 2*I, K); break;
            default: gemv_m8(gu.data(), x.data(), w.data(), 2*I, K); break;
        }
    };
    launch({(unsigned)((2*I + 7) / 8)}, {256}, unfused);
    double worst = 0;
    int mismatched = 0;
    for (int m = 0; m < M; ++m) for (int j = 0; j < I; ++j) {
        const float g = gu[m*2*I+j], u = gu[m*2*I+I+j];
        if (F(out[m*I+j]) != F(B(g / (1.0f + std::exp(-g)) * u))) ++mismatched;
        double rg = 0, ru = 0;
        for (int k = 0; k < K; ++k) { rg += (double)F(x[m*K+k]) * F(w[j*K+k]); ru += (double)F(x[m*K+k]) * F(w[(I+j)*K+k]); }
        const double r = rg / (1 + std::exp(-rg)) * ru;
        worst = std::max(worst, std::fabs(F(out[m*I+j]) - r) / (1e-2 + std::fabs(r)));
    }
    char name[64]; snprintf(name, 64, "gemv_silu M%d I%d K%d", M, I, K);
    report(name, worst, 5e-3);
    snprintf(name, 64, "gemv_silu = gemv+silu M%d I%d", M, I);
    report(name, mismatched, 0);
}

void t_write_kv() {
    int nh=4,nkv=2,hd=24,T=9,blocks=5,bs=4; int W=(nh+2*nkv)*hd;
    std::vector<float> qkv(T*W); for (auto& v : qkv) v = U(2);
    std::vector<u32> slots; for (int i = 0; i < blocks*bs; ++i) slots.push_back(i); std::shuffle(slots.begin(), slots.end(), rng); slots.resize(T);
    std::vector<bf16> k(blocks*bs*nkv*hd, B(0)), v(k);
    launch({(unsigned)T}, {64}, [&]{ write_kv_f32(k.data(), v.data(), qkv.data(), slots.data(), nh, nkv, hd); });
    double worst = 0;
    for (int t = 0; t < T; ++t) for (int e = 0; e < nkv*hd; ++e) {
        worst = std::max(worst, (double)(B(qkv[t*W+nh*hd+e]).bits != k[slots[t]*nkv*hd+e].bits));
        worst = std::max(worst, (double)(B(qkv[t*W+nh*hd+nkv*hd+e]).bits != v[slots[t]*nkv*hd+e].bits));
    }
    report("write_kv", worst, 0);
}

// block_table_write: three changes (a row started afresh, a row extended, a row's tail
// rewritten) land where they should and nothing else moves.
void t_block_table_write() {
    const int rows = 4, width = 9;
    std::vector<u32> tables(rows * width);
    for (int i = 0; i < rows * width; ++i) tables[i] = 1000 + i;
    std::vector<u32> expect = tables;
    struct W { u32 row, start; std::vector<u32> ids; };
    std::vector<W> ws = {{2, 0, {5, 6, 7, 8, 9, 10, 11, 12, 13}}, {0, 3, {21}}, {3, 7, {30, 31}}};
    std::vector<u32> writes;
    u32 at = 4 * ws.size();
    for (auto& w : ws) { writes.insert(writes.end(), {w.row, w.start, (u32)w.ids.size(), at}); at += w.ids.size(); }
    for (auto& w : ws) {
        writes.insert(writes.end(), w.ids.begin(), w.ids.end());
        for (size_t i = 0; i < w.ids.size(); ++i) expect[w.row * width + w.start + i] = w.ids[i];
    }
    launch({(unsigned)ws.size()}, {4}, [&]{ block_table_write(tables.data(), writes.data(), width); });
    report("block_table_write", (double)(tables != expect), 0);
}

// qk_norm_rope_kv = qk_norm_rope then write_kv, bit for bit (qkv rows and both caches).
void t_rope_kv(int T, int nh, int nkv, int hd, int rot) {
    int W = (nh + 2*nkv) * hd, blocks = T + 3, bs = 2;
    std::vector<float> q(T*W);
    std::vector<bf16> qw(hd), kw(hd);
    std::vector<u32> pos(T);
    for (auto& v : q) v = U(2);
    for (auto& v : qw) v = B(1+U(0.2));
    for (auto& v : kw) v = B(1+U(0.2));
    for (auto& p : pos) p = rng() % 4096;
    std::vector<float> inv(rot/2);
    for (int i = 0; i < rot/2; ++i) inv[i] = 1.0f / std::pow(1e4f, 2.0f*i/rot);
    std::vector<u32> slots; for (int i = 0; i < blocks*bs; ++i) slots.push_back(i);
    std::shuffle(slots.begin(), slots.end(), rng); slots.resize(T);
    auto q2 = q;
    std::vector<bf16> k1(blocks*bs*nkv*hd, B(0)), v1(k1), k2(k1), v2(k1);
    int half = rot/2;
    launch({(unsigned)T, (unsigned)((nh+nkv+3)/4)}, {128}, [&] {
        qk_norm_rope_f32(q.data(), pos.data(), qw.data(), kw.data(), inv.data(), nh, nkv, hd, half, 1.0f, 1e-6f); });
    launch({(unsigned)T}, {64}, [&]{ write_kv_f32(k1.data(), v1.data(), q.data(), slots.data(), nh, nkv, hd); });
    launch({(unsigned)T, (unsigned)((nh+2*nkv+3)/4)}, {128}, [&] {
        qk_norm_rope_kv_f32(q2.data(), pos.data(), qw.data(), kw.data(), inv.data(), nh, nkv, hd, half, 1.0f, 1e-6f,
                            k2.data(), v2.data(), slots.data()); });
    int diff = 0;
    for (int i = 0; i < T*W; ++i) diff += q[i] != q2[i];
    for (size_t i = 0; i < k1.size(); ++i) diff += (k1[i].bits != k2[i].bits) + (v1[i].bits != v2[i].bits);
    char name[96]; snprintf(name, 96, "qk_norm_rope_kv = rope+write_kv h%d/%d hd%d", nh, nkv, hd);
    report(name, diff, 0);
}

// argmax_part_f32 over `splits` blocks a row, then argmax_final_f32.
static void argmax_rows(std::vector<u32>& out, const std::vector<float>& x,
                        const std::vector<u32>& rows, int V, unsigned splits) {
    std::vector<float> pv(rows.size() * splits);
    std::vector<u32> pi(rows.size() * splits);
    launch({splits, (unsigned)rows.size()}, {512}, [&] { argmax_part_f32(pv.data(), pi.data(), x.data(), rows.data(), V); });
    launch({(unsigned)rows.size()}, {32}, [&] { argmax_final_f32(out.data(), pv.data(), pi.data(), x.data(), rows.data(), V, (int)splits); });
}

void t_softmax(int R, int V) {
    std::vector<float> x(R*V); for (auto& v : x) v = U(8);
    auto x0 = x;
    launch({(unsigned)R}, {1024}, [&]{ log_softmax_f32(x.data(), V); });
    double worst = 0;
    for (int r = 0; r < R; ++r) { float mx = -1e30; for (int i = 0; i < V; ++i) mx = std::max(mx, x0[r*V+i]);
        double s = 0; for (int i = 0; i < V; ++i) s += std::exp((double)(x0[r*V+i]-mx)); float lz = mx + (float)std::log(s);
        for (int i = 0; i < V; ++i) worst = std::max(worst, (double)std::fabs(x[r*V+i] - (x0[r*V+i]-lz))); }
    report("log_softmax", worst, 1e-4);
    // argmax with ties and NaN
    x = x0; x[0*V+10] = 50; x[0*V+20] = 50; x[1*V+1] = NAN; x[1*V+5] = 60;
    std::vector<u32> rows = {1, 0}, out(2);
    // One block a row, blocks of 8 columns (the tie at 10 and 20 across two of them), more
    // blocks than columns (empty ones).
    for (unsigned splits : {1u, 3u, (unsigned)(V + 7) / 8}) {
        out.assign(2, 12345u);
        argmax_rows(out, x, rows, V, splits);
        char name[64];
        snprintf(name, 64, "argmax tie/NaN, %u blocks a row", splits);
        report(name, (out[0] == 5 && out[1] == 10) ? 0 : 1, 0);
        if (out[0] != 5 || out[1] != 10) printf("  argmax got %u %u\n", out[0], out[1]);
    }
}

// The chained MTP passes' argmax: no row list (row j is x's row j), the ids as f32, then fed
// into a batch's u32 token ids: the same ids as argmax_final_f32 with the identity list.
void t_argmax_ids(int R, int V) {
    std::vector<float> x(R * V);
    for (auto& v : x) v = U(8);
    x[1 * V + 3] = 100; x[1 * V + 7] = 100;  // a tie: the lower index
    std::vector<u32> rows(R), want(R);
    for (int r = 0; r < R; ++r) rows[r] = r;
    const unsigned splits = 3;
    argmax_rows(want, x, rows, V, splits);
    std::vector<float> pv(R * splits), ids(2 * R, -1.f);
    std::vector<u32> pi(R * splits), fed(R, 12345u);
    launch({splits, (unsigned)R}, {512}, [&] { argmax_part_f32(pv.data(), pi.data(), x.data(), nullptr, V); });
    launch({(unsigned)R}, {32}, [&] { argmax_final_ids_f32(ids.data() + R, pv.data(), pi.data(), x.data(), nullptr, V, (int)splits); });
    launch({1}, {256}, [&] { feed_token_ids(fed.data(), ids.data() + R, R); });
    int bad = 0;
    for (int r = 0; r < R; ++r) bad += (fed[r] != want[r]) + (ids[R + r] != (float)want[r]) + (ids[r] != -1.f);
    report("argmax_final_ids_f32 + feed_token_ids = argmax_final_f32", bad + (want[1] != 3), 0);
}

void t_misc() {
    int T = 7, I = 50; std::vector<float> gu(T*2*I); for (auto& v : gu) v = U(4);
    std::vector<bf16> o(T*I);
    launch({2}, {64}, [&]{ silu_mul_f32(o.data(), gu.data(), T, I); });
    double worst = 0;
    for (int r = 0; r < T; ++r) for (int j = 0; j < I; ++j) { float g = gu[r*2*I+j], u = gu[r*2*I+I+j]; worst = std::max(worst, relerr(F(o[r*I+j]), g/(1+std::exp(-g))*u)); }
    report("silu_mul", worst, 5e-3);
    int V = 30, H = 40; std::vector<bf16> tab(V*H); for (auto& v : tab) v = B(U(1));
    std::vector<u32> tok = {29, 0, 5}; std::vector<float> emb(3*H);
    launch({3}, {32}, [&]{ embedding_bf16(emb.data(), tab.data(), tok.data(), H); });
    worst = 0; for (int t = 0; t < 3; ++t) for (int j = 0; j < H; ++j) worst = std::max(worst, (double)std::fabs(emb[t*H+j]-F(tab[tok[t]*H+j])));
    report("embedding", worst, 0);
    std::vector<bf16> g(3*H); launch({3}, {32}, [&]{ gather_rows_bf16(g.data(), tab.data(), tok.data(), H); });
    worst = 0; for (int t = 0; t < 3; ++t) for (int j = 0; j < H; ++j) worst = std::max(worst, (double)(g[t*H+j].bits != tab[tok[t]*H+j].bits));
    report("gather_rows", worst, 0);
    std::vector<float> f(100); for (auto& v : f) v = U(3); std::vector<bf16> b(100); std::vector<float> f2(100);
    launch({1}, {32}, [&]{ cast_f32_bf16(b.data(), f.data(), 100); });
    launch({1}, {32}, [&]{ cast_bf16_f32(f2.data(), b.data(), 100); });
    worst = 0; for (int i = 0; i < 100; ++i) worst = std::max(worst, (double)std::fabs(f2[i] - F(B(f[i]))));
    report("casts", worst, 0);
    std::vector<bf16> c(77); launch({1}, {32}, [&]{ fill_const_bf16(c.data(), 77, 1.0f); });
    worst = 0; for (auto v : c) worst = std::max(worst, (double)std::fabs(F(v) - 1.0f)); report("fill_const", worst, 0);
}
