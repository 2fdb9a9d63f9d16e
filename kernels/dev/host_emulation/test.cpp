// Each kernel, run under emu.h, against a plain C++ reference of the CPU backend's arithmetic.
// Inputs are small so that thousands of host threads stay cheap (a few seconds in all).
#include "kernels_all.h"
#include <random>
#include <cassert>
#include <string>
#include <utility>

static std::mt19937 rng(42);
static float U(float s = 1) { return std::uniform_real_distribution<float>(-s, s)(rng); }
static bf16 B(float v) { return from_f32<bf16>(v); }
static float F(bf16 v) { return to_f32(v); }
static int fails = 0;
static void report(const char* name, double worst, double tol) {
    bool ok = worst <= tol;
    if (!ok) ++fails;
    printf("%-40s worst %.3e (tol %.1e) %s\n", name, worst, tol, ok ? "ok" : "FAIL");
}
static double relerr(float g, float w) { return std::fabs(g - w) / std::max(1e-3f, std::fabs(w)); }

static u64 sm(u64 z) { z += 0x9e3779b97f4a7c15ull; z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull; z = (z ^ (z >> 27)) * 0x94d049bb133111ebull; return z ^ (z >> 31); }

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

// Worst error of out [T, nh·hd] (bf16), relative to 1e-2 + |ref|, against causal attention in
// double precision of each row's q heads over keys K(cache row, dim) and values V(cache row, dim).
template <class KF, class VF>
double attention_worst(const PagedBatch& b, const std::vector<float>& qkv, int nh, int nkv, int hd,
                       float scale, const std::vector<bf16>& out, KF K, VF V) {
    int W = (nh+2*nkv)*hd, group = nh/nkv;
    double worst = 0;
    for (int r = 0; r < b.T; ++r) for (int h = 0; h < nh; ++h) {
        int kh = h/group, len = b.positions[r]+1;
        std::vector<double> sc(len); double mx = -1e30;
        for (int p = 0; p < len; ++p) { double d = 0; for (int k = 0; k < hd; ++k) d += qkv[r*W+h*hd+k]*K(b.row(r,p,nkv,kh), k); sc[p] = d*scale; mx = std::max(mx, sc[p]); }
        double sum = 0; for (auto& s : sc) { s = std::exp(s-mx); sum += s; }
        for (int k = 0; k < hd; ++k) { double o = 0; for (int p = 0; p < len; ++p) o += sc[p]*V(b.row(r,p,nkv,kh), k); o /= sum;
            worst = std::max(worst, std::fabs(F(out[r*nh*hd+h*hd+k]) - o) / (1e-2 + std::fabs(o))); }
    }
    return worst;
}

// seqs: (start, n)
void t_attn(int nh, int nkv, int hd, std::vector<std::pair<int,int>> seqs, int bs = 16, int kps = 0) {
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
#define ATTN_ARGS o, partial, qkv.data(), kc.data(), vc.data(), positions.data(), row_seq.data(), tables.data(), maxb, bs, nh, nkv, hd, scale, nullptr, nullptr
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
    auto merge = [&] { launch({(unsigned)T, (unsigned)nh}, {128}, [&] { attention_merge(out.data(), partial.data(), nh, hd, splits); }); };
    if (kps == 0) {
        launch({(unsigned)(T * (nh / g))}, {128}, run);
    } else {
        launch({(unsigned)(T * (nh / g)), 1, (unsigned)splits}, {128}, [&] { run_split(partial.data()); });
        merge();
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
            [&](size_t row, int k) { return (double)F(vc[row*hd+k]); });
        char name[96]; snprintf(name, 96, "paged_attention%s h%d/%d hd%d T%d split %d", kind, nh, nkv, hd, T, kps);
        report(name, worst, 6e-3);
    };
    check("");
    // The tensor-core kernel (attention_mma.cu) where the launcher would pick it: head_dim 64
    // or 128, a GQA group of at most 16. Its q and P are bf16, so its tolerance is the same.
    if ((hd == 64 || hd == 128) && group <= 16) {
        std::fill(out.begin(), out.end(), B(NAN));
        std::fill(partial.begin(), partial.end(), NAN);
        bool wide = group > 8;
#define MMA_ARGS o, pp, qkv.data(), kc.data(), vc.data(), positions.data(), row_seq.data(), tables.data(), maxb, bs, nh, nkv, hd, scale, nullptr, nullptr
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


// ---- sample.cu: the host sampler's arithmetic (engine/src/backend/sampling.rs) ----

static u32 fbits(float v) { u32 u; memcpy(&u, &v, 4); return u; }
static bool finite_host(float v) { return std::isfinite(v); }

// gumbel(seed, index, token) as the Rust host sampler computes it (with its own det_ln, printed by
// Rust; the test gumbel_matches_the_values_the_device_port_is_checked_against holds the same
// bits): the device port must give these bits.
void t_sample_noise() {
    struct { u64 seed, index; u32 token; u64 bits; } want[] = {
        {0ull, 0ull, 0u, 0x3feb3ab6afcf9b8eull},
        {42ull, 0ull, 1u, 0x3fbdd49f9cdb852dull},
        {42ull, 7ull, 151935u, 0xbfc39daef06dc734ull},
        {18446744073709551615ull, 123456789ull, 77u, 0xbfd3d63b3856f69eull},
        {1ull, 1ull, 1u, 0xbff039a16fbf513aull},
        {987654321ull, 3ull, 5000u, 0x3ff36829638a30f4ull},
        {5ull, 0ull, 0u, 0x400f26d348261cc3ull},
        {9223372036854775808ull, 1099511627776ull, 12345u, 0xbfe9ffbab1b2a3edull},
    };
    double bad = 0;
    for (auto& w : want) {
        double g = sample_gumbel_noise(w.seed, w.index, w.token);
        if ((u64)__double_as_longlong(g) != w.bits) { bad += 1; printf("  noise (%llu,%llu,%u): %.17g\n", w.seed, w.index, w.token, g); }
    }
    report("sample noise = host gumbel bits", bad, 0);
    // det_ln / det_exp against the Rust detmath's bits (printed by Rust).
    u64 ln_cases[][2] = {
        {0x3fe0000000000000ull, 0xbfe62e42fefa39efull}, {0x01a56e1fc2f8f359ull, 0xc085963447f87fb5ull},
        {0x3fefffffff768fa1ull, 0xbe112e0be024e4bcull}, {0x3ca0000000000000ull, 0xc0425e4f7b2737faull},
        {0x4086231eb851eb85ull, 0x401a4081b4c2b8c5ull}, {0x4008000000000000ull, 0x3ff193ea7aad030bull},
        {0x0000000000000001ull, 0xc0874385446d71c3ull}, {0x3fe6a09e667f3bcdull, 0xbfd62e42fefa39eeull},
    };
    u64 exp_cases[][2] = {
        {0x0000000000000000ull, 0x3ff0000000000000ull}, {0xbbc79ca10c924223ull, 0x3ff0000000000000ull},
        {0xbfd3333333333333ull, 0x3fe7b4c869c37c05ull}, {0xbfd62e42fefa39efull, 0x3fe6a09e667f3bccull},
        {0xbff8000000000000ull, 0x3fcc8f87724b5c1dull}, {0xc034000000000000ull, 0x3e21b48655f37267ull},
        {0xc050accccccccccdull, 0x39eb53a46280df9dull}, {0xc085e00000000000ull, 0x00d14f2b0fb9307full},
        {0xc087400000000000ull, 0x0000000000000002ull}, {0xc08748cccccccccdull, 0x0000000000000001ull},
    };
    bad = 0;
    for (auto& c : ln_cases) bad += (u64)__double_as_longlong(det_ln(__longlong_as_double(c[0]))) != c[1];
    for (auto& c : exp_cases) bad += (u64)__double_as_longlong(det_exp(__longlong_as_double(c[0]))) != c[1];
    report("det_ln / det_exp = host bits", bad, 0);
}

// A plan as engine/src/backend/cuda/sample.rs builds it.
struct PlanRow {
    u32 src; std::vector<std::pair<u32,u32>> entries; std::vector<u32> masks;
    float rep = 1, freq = 0, pres = 0, temp = 1; u64 seed = 0, index = 0; u32 want = KMAX; bool total = true;
};
static std::vector<u32> build_plan(const std::vector<PlanRow>& rows) {
    std::vector<u32> plan(rows.size() * PLAN_WORDS, 0);
    for (size_t r = 0; r < rows.size(); ++r) {
        const PlanRow& p = rows[r]; u32* rec = &plan[r * PLAN_WORDS];
        rec[PLAN_SRC_ROW] = p.src;
        rec[PLAN_REPETITION] = fbits(p.rep); rec[PLAN_FREQUENCY] = fbits(p.freq); rec[PLAN_PRESENCE] = fbits(p.pres);
        rec[PLAN_FLAGS] = (p.rep != 1.0f ? 1u : 0u) | ((p.freq != 0.0f || p.pres != 0.0f) ? 2u : 0u) | (p.total ? 4u : 0u);
        rec[PLAN_TEMPERATURE] = fbits(p.temp);
        rec[PLAN_SEED_LO] = (u32)p.seed; rec[PLAN_SEED_HI] = (u32)(p.seed >> 32);
        rec[PLAN_INDEX_LO] = (u32)p.index; rec[PLAN_INDEX_HI] = (u32)(p.index >> 32);
        rec[PLAN_WANT] = p.want;
    }
    for (size_t r = 0; r < rows.size(); ++r) {
        u32 at = plan.size();
        plan[r * PLAN_WORDS + PLAN_ENTRIES] = at; plan[r * PLAN_WORDS + PLAN_N_ENTRIES] = rows[r].entries.size();
        for (auto [id, c] : rows[r].entries) { plan.push_back(id); plan.push_back(c); }
        at = plan.size();
        plan[r * PLAN_WORDS + PLAN_MASKS] = at; plan[r * PLAN_WORDS + PLAN_N_MASKS] = rows[r].masks.size();
        for (u32 m : rows[r].masks) plan.push_back(m);
    }
    return plan;
}

// The host's `penalise` and mask, on one row.
static std::vector<float> host_prepare(const float* in, int V, const PlanRow& p) {
    std::vector<float> l(in, in + V);
    for (auto [id, c] : p.entries) {
        float v = l[id];
        if (p.rep != 1.0f) v = v > 0.0f ? v / p.rep : v * p.rep;
        if ((p.freq != 0.0f || p.pres != 0.0f) && c > 0) v -= p.freq * (float)c + p.pres;
        l[id] = v;
    }
    for (u32 m : p.masks) l[m] = -INFINITY;
    return l;
}

static std::vector<float> logits_row(int V, float scale) {
    std::vector<float> x(V); for (auto& v : x) v = U(scale); return x;
}

void t_sample_prepare(int V, bool bf) {
    int R = 3;
    std::vector<float> x; for (int r = 0; r < R + 1; ++r) { auto row = logits_row(V, 6); x.insert(x.end(), row.begin(), row.end()); }
    if (bf) for (auto& v : x) v = F(B(v));
    x[5] = NAN; x[V + 7] = INFINITY; x[V + 8] = -INFINITY; x[2 * V + 3] = -0.0f; x[2 * V + 4] = 0.0f;
    std::vector<PlanRow> rows(R);
    rows[0].src = 3; rows[0].rep = 1.3f;
    rows[1].src = 1; rows[1].freq = 0.7f; rows[1].pres = 0.3f;
    rows[2].src = 2; rows[2].rep = 0.8f; rows[2].freq = -0.25f; rows[2].pres = 1.5f;
    for (int r = 0; r < R; ++r) {
        std::vector<u32> ids; for (int i = 0; i < V; ++i) ids.push_back(i);
        std::shuffle(ids.begin(), ids.end(), rng);
        int n = std::min(V, 1500 + 37 * r);  // more entries than threads
        for (int i = 0; i < n; ++i) rows[r].entries.push_back({ids[i], (u32)(rng() % 4) * (u32)(r != 0)});
        rows[r].entries.push_back({5, 2}); rows[r].entries.push_back({(u32)V - 1, 1});
        rows[r].entries.push_back({3, 1}); rows[r].entries.push_back({4, 3}); rows[r].entries.push_back({7, 1}); rows[r].entries.push_back({8, 1});
        // distinct ids: drop duplicates, keep the first
        std::vector<bool> seen(V); std::vector<std::pair<u32,u32>> e;
        for (auto pr : rows[r].entries) if (!seen[pr.first]) { seen[pr.first] = true; e.push_back(pr); }
        rows[r].entries = e;
        rows[r].masks = {(u32)V - 1, 0, ids[0], 0};  // a penalised token, a duplicate
    }
    rows[0].masks.clear();
    auto plan = build_plan(rows);
    std::vector<float> scratch(R * V, 12345.f);
    std::vector<bf16> xb(x.size()); for (size_t i = 0; i < x.size(); ++i) xb[i] = B(x[i]);
    // Slices of about 1000 columns (the launcher uses 4096): entries and masks land in many.
    unsigned P = (V + 999) / 1000;
    if (bf) launch({(unsigned)R, P}, {PREPARE_THREADS}, [&] { sample_prepare_bf16(scratch.data(), xb.data(), plan.data(), V); });
    else launch({(unsigned)R, P}, {PREPARE_THREADS}, [&] { sample_prepare_f32(scratch.data(), x.data(), plan.data(), V); });
    double bad = 0;
    for (int r = 0; r < R; ++r) {
        auto want = host_prepare(&x[rows[r].src * V], V, rows[r]);
        for (int i = 0; i < V; ++i) bad += fbits(want[i]) != fbits(scratch[r * V + i]);
    }
    char name[64]; snprintf(name, 64, "sample_prepare %s V%d (bits differ)", bf ? "bf16" : "f32", V);
    report(name, bad, 0);
}

// The host's draw without filtering: first of the best scores in id order; NONE when no finite.
static u32 host_gumbel(const float* l, int V, float t, u64 seed, u64 index) {
    u32 best = NONE; double bs = -INFINITY;
    for (int i = 0; i < V; ++i) {
        if (!finite_host(l[i])) continue;
        double s = (double)(l[i] / t) + sample_gumbel_noise(seed, index, i);
        if (best == NONE) best = i;
        if (s > bs) { bs = s; best = i; }
    }
    return best;
}

void t_sample_gumbel(int V) {
    std::vector<std::vector<float>> rows;
    std::vector<PlanRow> plan_rows;
    auto add = [&](std::vector<float> row, float t, u64 seed, u64 index) {
        PlanRow p; p.src = rows.size(); p.temp = t; p.seed = seed; p.index = index;
        rows.push_back(row); plan_rows.push_back(p);
    };
    for (int k = 0; k < 4; ++k) add(logits_row(V, 8), 0.3f + 0.5f * k, rng(), rng() % 1000);
    auto r = logits_row(V, 3); for (int i = 0; i < V; i += 3) r[i] = -INFINITY; r[1] = NAN; r[V - 1] = INFINITY;
    add(r, 1.0f, 7, 3);                                            // masked, NaN and +inf skipped
    add(std::vector<float>(V, -INFINITY), 1.0f, 1, 1);               // all masked: NONE
    auto big = logits_row(V, 1); big[V / 2] = 3e38f; big[V / 3] = 3e38f; big[7] = -3e38f;
    add(big, 0.01f, 9, 9);                                         // v / T = +inf twice: lower id
    add(std::vector<float>(V, -3e38f), 0.01f, 2, 2);                 // every score -inf: lowest id
    std::vector<float> flat(V, 1.25f); add(flat, 0.7f, 11, 0);     // all equal logits
    // Peaked rows, as a language model's: the skipping in pass 2 decides most tokens.
    for (int k = 0; k < 3; ++k) {
        auto peaked = logits_row(V, 3); for (int j = 0; j < 30; ++j) peaked[rng() % V] = 12 + U(3);
        add(peaked, 0.5f + 0.5f * k, rng(), k);
    }
    auto near = logits_row(V, 1); for (auto& v : near) v = 20 + v * 1e-3f; add(near, 1.0f, 5, 5);  // close scores
    auto huge = logits_row(V, 1); for (auto& v : huge) v = 1e30f + v * 1e24f; add(huge, 1e-3f, 6, 6);  // no skipping
    int R = rows.size();
    std::vector<float> scratch; for (auto& row : rows) scratch.insert(scratch.end(), row.begin(), row.end());
    auto plan = build_plan(plan_rows);
    std::vector<u32> which(R); for (int i = 0; i < R; ++i) which[i] = R - 1 - i;  // reversed order
    std::vector<u32> out(R, 0);
    launch({(unsigned)R}, {SAMPLE_THREADS}, [&] { sample_gumbel(out.data(), scratch.data(), plan.data(), which.data(), V); });
    double bad = 0;
    for (int b = 0; b < R; ++b) {
        const PlanRow& p = plan_rows[which[b]];
        u32 want = host_gumbel(rows[which[b]].data(), V, p.temp, p.seed, p.index);
        if (want != out[b]) { bad += 1; printf("  row %u: device %u host %u\n", which[b], out[b], want); }
    }
    char name[64]; snprintf(name, 64, "sample_gumbel V%d, %d rows", V, R);
    report(name, bad, 0);
}

// The host's sorted candidate list (finite v / T, total order descending, then id), its head.
struct HostCands { std::vector<std::pair<u32,float>> head; u32 finite; double total; bool overflow; };
static HostCands host_candidates(const float* l, int V, float t, u32 want) {
    HostCands h{}; std::vector<std::pair<u32,float>> c;
    for (int i = 0; i < V; ++i) if (finite_host(l[i])) { float vt = l[i] / t; h.overflow |= !finite_host(vt); c.push_back({(u32)i, vt}); }
    auto key = [](float v) { u32 b = fbits(v); return (b & 0x80000000u) ? ~b : (b | 0x80000000u); };
    std::sort(c.begin(), c.end(), [&](auto a, auto b) { return key(a.second) != key(b.second) ? key(a.second) > key(b.second) : a.first < b.first; });
    h.finite = c.size();
    // sampling::fixed_sum: each term floor(q * 2^96) as a 128-bit integer.
    unsigned __int128 acc = 0;
    if (!c.empty()) for (auto& [i, v] : c) {
        double x = det_exp((double)(v - c[0].second)) * 4294967296.0, hi = std::floor(x);  // checked above
        acc += ((unsigned __int128)(u64)hi << 64) | (u64)((x - hi) * 18446744073709551616.0);
    }
    h.total = ((double)(u64)(acc >> 64) + (double)(u64)acc * 5.421010862427522e-20) * 2.3283064365386963e-10;
    c.resize(std::min<size_t>(c.size(), want)); h.head = c;
    return h;
}

void t_sample_candidates(int V, std::vector<u32> wants) {
    std::vector<std::vector<float>> rows; std::vector<PlanRow> plan_rows;
    auto add = [&](std::vector<float> row, float t, u32 want) {
        PlanRow p; p.src = rows.size(); p.temp = t; p.want = want; rows.push_back(row); plan_rows.push_back(p);
    };
    for (u32 w : wants) add(logits_row(V, 10), 0.8f, w);
    add(logits_row(V, 10), 0.8f, 20); plan_rows.back().total = false;  // under a top-k: no total
    // Ties across the cut: values on a coarse grid, so hundreds share each value.
    auto grid = logits_row(V, 4); for (auto& v : grid) v = std::round(v * 4) / 4; add(grid, 1.0f, 20); add(grid, 0.5f, 1000);
    // -inf / NaN / +inf are not candidates; -0.0 sorts below +0.0.
    auto odd = logits_row(V, 1); for (int i = 0; i < V; i += 2) odd[i] = -INFINITY; odd[3] = NAN; odd[9] = INFINITY;
    odd[1] = 0.0f; odd[5] = -0.0f; odd[7] = 0.0f; odd[11] = -0.0f; for (int i = 13; i < V; i += 2) odd[i] = -0.5f; add(odd, 1.0f, 4);
    std::vector<float> few(V, -INFINITY); for (int i = 0; i < 10; ++i) few[(i * 7919) % V] = U(2); add(few, 1.0f, 256);  // fewer than want
    add(std::vector<float>(V, -INFINITY), 1.0f, 64);                                         // none finite
    std::vector<float> flat(V, 0.5f); add(flat, 1.0f, 1024);                                  // all equal
    auto big = logits_row(V, 1); big[17] = 3e38f; add(big, 0.01f, 50);                        // overflow
    auto wide = logits_row(V, 60); add(wide, 0.9f, 1024);                                     // terms below 2^-96
    std::vector<float> edge(V); for (int i = 0; i < V; ++i) edge[i] = -66.0f - (float)(i % 200) * 0.005f;
    edge[V / 2] = 0.0f; add(edge, 1.0f, 300);                                                 // around exp(x) = 2^-96
    int R = rows.size();
    std::vector<float> scratch; for (auto& row : rows) scratch.insert(scratch.end(), row.begin(), row.end());
    auto plan = build_plan(plan_rows);
    std::vector<u32> which(R); for (int i = 0; i < R; ++i) which[i] = i;
    std::vector<u32> out((size_t)R * CAND_WORDS, 0xdeadbeef);
    launch({(unsigned)R}, {SAMPLE_THREADS}, [&] { sample_candidates(out.data(), scratch.data(), plan.data(), which.data(), V); });
    double bad = 0, worst_total = 0;
    for (int b = 0; b < R; ++b) {
        const PlanRow& p = plan_rows[which[b]];
        HostCands h = host_candidates(rows[which[b]].data(), V, p.temp, p.want);
        const u32* o = &out[(size_t)b * CAND_WORDS];
        u32 flags = o[1];
        if (o[0] != h.finite || (flags & 1u) != (u32)h.overflow || (flags & 2u)) { bad += 1; printf("  row %d: finite %u/%u flags %u\n", b, o[0], h.finite, flags); continue; }
        if (h.overflow) continue;
        u64 lo = (u64)o[2] | ((u64)o[3] << 32), hi = (u64)o[4] | ((u64)o[5] << 32);
        if (!p.total) { bad += (lo | hi) != 0; continue; }
        double total = ((double)hi + (double)lo * 5.421010862427522e-20) * 2.3283064365386963e-10;
        if (h.finite) worst_total = std::max(worst_total, (double)(fbits((float)total) != fbits((float)h.total) || total != h.total));
        for (size_t j = 0; j < h.head.size(); ++j)
            if (o[META_WORDS + j] != h.head[j].first || o[META_WORDS + KMAX + j] != fbits(h.head[j].second)) {
                bad += 1; printf("  row %d pos %zu: device (%u, %g) host (%u, %g)\n", b, j, o[META_WORDS + j], __uint_as_float(o[META_WORDS + KMAX + j]), h.head[j].first, h.head[j].second); break;
            }
        if (h.head.size() < KMAX && o[META_WORDS + h.head.size()] != NONE) bad += 1;
    }
    char name[64]; snprintf(name, 64, "sample_candidates V%d, %d rows", V, R);
    report(name, bad, 0);
    snprintf(name, 64, "sample_candidates V%d total (bits differ)", V);
    report(name, worst_total, 0);
}

void t_argmax_nan_first() {
    int V = 2000; std::vector<float> x(2 * V); for (auto& v : x) v = U(1);
    x[0] = NAN; x[V + 0] = -INFINITY; x[V + 1] = NAN;
    std::vector<u32> rows = {0, 1}, out(2);
    u32 want1 = 2; for (int i = 2; i < V; ++i) if (x[V + i] > x[V + want1]) want1 = i;
    for (unsigned splits : {1u, 7u, 64u}) {
        argmax_rows(out, x, rows, V, splits);
        report("argmax NaN in column 0 -> 0", (out[0] == 0 && out[1] == want1) ? 0 : 1, 0);
    }
    // A row of NaN but for two -inf and a -5 in the last column: the -5, wherever the blocks
    // split (no NaN taken, none beating a number).
    std::vector<float> y(V, NAN); y[0] = -INFINITY; y[V - 300] = -INFINITY; y[V - 1] = -5;
    std::vector<u32> one = {0}, got(1);
    for (unsigned splits : {1u, 7u, 64u}) {
        argmax_rows(got, y, one, V, splits);
        report("argmax, NaN row with a few numbers", got[0] == (u32)V - 1 ? 0 : 1, 0);
    }
    // More blocks than columns: the empty blocks have no best and lose to every real one.
    std::vector<float> z = {3, 1, 4, 1, 5, 9, 2, 6, 5, 9};
    argmax_rows(got, z, one, 10, 16);
    report("argmax, empty blocks", got[0] == 5 ? 0 : 1, 0);
}

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
                launch({(unsigned)((E + 7) / 8)}, {256}, [&] { moe_router_plan_one(lg1.data(), x.data(), router.data(), E, H, &ticket, ids4.data(), wts4.data(), off4.data(), perm4.data(), act4.data(), K, norm); });
                int bad4 = ticket != 0 || memcmp(lg.data(), lg1.data(), E * sizeof(float)) != 0;
                bad4 += ids4 != ids2 || perm4 != perm2 || off4 != off2 || act4 != act2;
                bad4 += memcmp(wts4.data(), wts2.data(), P * sizeof(float)) != 0;
                snprintf(name, 96, "moe router+plan = gemv_m1+plan_one E%d k%d H%d rep %d", E, K, H, rep);
                report(name, bad4, 0);
            }
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
static void host_quant_rows(std::vector<float>& v, int rows, int k) {
    for (int r = 0; r < rows; ++r)
        for (int g0 = 0; g0 < k; g0 += 128) {
            float amax = 0;
            for (int c = g0; c < std::min(k, g0 + 128); ++c) amax = std::max(amax, std::fabs(v[(size_t)r * k + c]));
            const float s = kv_fp8_scale(amax);
            for (int c = g0; c < std::min(k, g0 + 128); ++c) v[(size_t)r * k + c] = host_quant_e4m3(v[(size_t)r * k + c], s);
        }
}

void t_moe_mma(int T, int E, int K, int H, int I, int mode, bool skew) {
    const int bm = MMA_BM;
    const bool fp8 = mode > 0 && mode != 4;  // mode 4: the bf16 small-step build
    std::vector<float> logits(T * E);
    for (int t = 0; t < T; ++t)
        for (int e = 0; e < E; ++e) logits[t * E + e] = U(3) + (skew && e == 0 && t % 5 != 0 ? 10.f : 0.f);
    const std::vector<bf16> x = random_bf16(T * H);
    const int gc_h = (H + 127) / 128, gc_i = (I + 127) / 128;
    const Experts ex = make_experts(E, H, I, fp8);
    const auto& [w13b, w2b, w13q, w2q, s13, s2, w13, w2] = ex;
    const int P = T * K;
    const Routed routed = route_and_group(logits, T, E, K, true, 64);
    const auto& [ids, wts, perm, offsets] = routed;
    std::vector<float> ys(P * H, NAN), out(T * H, NAN);
    std::vector<bf16> act(P * I);
    const int max_tiles = std::min(P, (P + E * (bm - 1)) / bm);
    std::vector<int> tiles(2 * max_tiles, 7);
    launch({1}, {64}, [&] { moe_tiles(tiles.data(), offsets.data(), E, max_tiles); });
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
    if (mode == 2) launch({(unsigned)((T + 3) / 4)}, {128}, [&] { moe_quant_fp8_bf16(xq.data(), xs.data(), x.data(), T, H); });
    const unsigned gx = (unsigned)max_tiles, threads = mode == 0 ? 128u : 256u;
    // Mode 3: the small-step kernels (FP8, H and I multiples of 64; T > 8 the _any build, a
    // warp over the whole k, chunks of 16 pairs) on the plan's active list.
    std::vector<int> active(E + 1, 0);
    for (int e = 0; e < E; ++e)
        if (offsets[e + 1] > offsets[e]) active[active[E]++] = e;
    if (mode == 4) {
        const unsigned ge = (unsigned)std::min(E, P);
        launch({(unsigned)((I + 63) / 64), ge}, {256}, [&] {
            moe_gate_up_bf16_small_any(act.data(), x.data(), w13b.data(), nullptr, offsets.data(), active.data(), perm.data(), E, K, I, H);
        });
        launch({(unsigned)((H + 127) / 128), ge}, {256}, [&] {
            moe_down_bf16_small_any(ys.data(), act.data(), w2b.data(), nullptr, offsets.data(), active.data(), perm.data(), E, I, H);
        });
    } else if (mode == 3) {
        const unsigned ge = (unsigned)std::min(E, P);
        launch({(unsigned)(T <= 8 ? (I + 15) / 16 : (I + 63) / 64), ge}, {256}, [&] {
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
    if (mode == 2) host_quant_rows(xqf, T, H);
    std::vector<double> ref(T * H, 0.0), qref(T * H, 0.0);
    double act_worst = 0;
    for (int p = 0; p < P; ++p) {
        const int t = p / K, e = ids[p];
        for (int pass = 0; pass < (mode == 2 ? 2 : 1); ++pass) {
            const std::vector<float>& xr = pass ? xqf : xf;
            std::vector<float> a(I);
            for (int i = 0; i < I; ++i) {
                const auto [g, u] = gate_up_ref(w13, &xr[(size_t)t * H], e, i, H, I);
                a[i] = F(B((float)(g / (1 + std::exp(-g)) * u)));
                if (pass == (mode == 2 ? 1 : 0))
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
    const char* build = mode == 0 ? "bf16" : mode == 1 ? "fp8" : mode == 2 ? "fp8act" : mode == 3 ? "fp8 small" : "bf16 small";
    snprintf(name, 96, "moe_mma %s act T%d E%d k%d H%d I%d", build, T, E, K, H, I);
    report(name, act_worst, 1.6e-2);
    snprintf(name, 96, "moe_mma %s out T%d E%d k%d H%d I%d%s", build, T, E, K, H, I, skew ? " skew" : "");
    report(name, worst_of(mode == 2 ? qref : ref), 1e-2);
    if (mode == 2) {
        snprintf(name, 96, "  (fp8act against exact activations: %.3e)", worst_of(ref));
        printf("%s\n", name);
    }
}

// The dense use of moe_down_mma (no tiles, no permutation): out[m] = a[m] · w, FP8 weights.
void t_dense_mma(int M, int N, int Kd, int mode) {
    const int gc = (Kd + 127) / 128;
    std::vector<bf16> a(M * Kd);
    for (auto& v : a) v = B(U(1));
    std::vector<unsigned char> wq(N * Kd);
    std::vector<float> sc(N * gc), wf(N * Kd), out(M * N, NAN);
    for (auto& s : sc) s = std::fabs(U(0.01f)) + 1e-3f;
    for (int i = 0; i < N * Kd; ++i) {
        unsigned b;
        do b = rng() & 0xff; while ((b & 0x7f) == 0x7f);
        wq[i] = (unsigned char)b;
        wf[i] = host_e4m3(b) * sc[(i / Kd) * gc + (i % Kd) / 128];
    }
    std::vector<unsigned char> aq(M * Kd);
    std::vector<float> as(M * gc), af(M * Kd);
    for (int i = 0; i < M * Kd; ++i) af[i] = F(a[i]);
    if (mode == 2) {
        launch({(unsigned)((M + 3) / 4)}, {128}, [&] { moe_quant_fp8_bf16(aq.data(), as.data(), a.data(), M, Kd); });
        host_quant_rows(af, M, Kd);
    }
    launch({(unsigned)((M + MMA_BM - 1) / MMA_BM), (unsigned)((N + MMA_BN - 1) / MMA_BN)}, {256}, [&] {
        if (mode == 1) moe_down_mma_fp8(out.data(), a.data(), nullptr, wq.data(), sc.data(), nullptr, nullptr, nullptr, M, N, Kd);
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
    snprintf(name, 96, "dense mma %s M%d N%d K%d", mode == 1 ? "fp8" : "fp8act", M, N, Kd);
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

void t_gemv_fp8(int M, int N, int K) {
    const int per_row = (K + 127) / 128;
    std::vector<bf16> x(M * K);
    for (auto& v : x) v = B(U(1));
    std::vector<unsigned char> w(N * K);
    std::vector<float> sc(N * per_row), out(M * N, NAN), wf(N * K);
    for (auto& v : sc) v = std::fabs(U(0.02f)) + 1e-3f;
    for (int i = 0; i < N * K; ++i) {
        unsigned b;
        do b = rng() & 0xff; while ((b & 0x7f) == 0x7f);
        w[i] = (unsigned char)b;
        wf[i] = host_e4m3(b) * sc[(i / K) * per_row + (i % K) / 128];
    }
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
    if (K % 16 == 0) {  // 16 weights a thread: the same bits
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

// Every attention case (EMU_ONLY=attention runs just these).
#include "kv_fp8_test.h"

static void attn_tests() {
    t_attn(4, 2, 32, {{0, 20}});
    t_attn(8, 2, 24, {{10, 6}, {40, 1}, {0, 3}});
    t_attn(4, 1, 64, {{0, 9}, {33, 2}});
    t_attn(2, 2, 96, {{5, 3}});
    t_attn(4, 2, 128, {{70, 1}, {3, 1}});
    t_attn(2, 2, 256, {{4, 2}});
    t_attn(6, 6, 16, {{0, 5}, {18, 4}}, 4);
    t_attn(4, 2, 128, {{300, 1}, {3, 1}, {150, 1}}, 16, 64);
    t_attn(8, 2, 24, {{10, 6}, {40, 1}, {0, 3}}, 16, 7);
    t_attn(2, 1, 64, {{129, 1}}, 16, 128);
    // Head groups (g4, g2) and the 16-byte-load variants (head_dim 64/128/256 exactly).
    t_attn(32, 8, 128, {{200, 1}, {5, 1}}, 16, 64);
    t_attn(8, 2, 128, {{0, 40}, {17, 1}});
    t_attn(16, 4, 64, {{30, 3}}, 16, 8);
    t_attn(12, 2, 256, {{3, 2}});
    t_attn(8, 8, 128, {{90, 1}}, 16, 32);
    // The most splits the launcher makes (64), head_dim 256: two dimensions a merge thread.
    t_attn(2, 1, 256, {{127, 1}}, 16, 2);
    // The tensor-core kernel: wide groups (9-16 heads), odd groups, unaligned block sizes,
    // partial last tiles, and splits whose 16-key rounding leaves some empty.
    t_attn(16, 1, 128, {{37, 1}, {0, 1}}, 16, 16);
    t_attn(12, 1, 64, {{50, 2}});
    t_attn(6, 2, 128, {{45, 1}, {16, 2}}, 8);
    t_attn(8, 2, 64, {{70, 1}}, 12, 16);
    t_attn(32, 8, 128, {{100, 1}, {2, 1}}, 32, 40);
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

// The float32 path's kernels (EMU_ONLY=moe_f32 runs just these; EMU_ONLY=moe includes them):
// decode (down + combine fused) and longer steps, odd widths.
static void moe_f32_tests() {
    t_moe_f32(1, 8, 2, 64, 32, true);
    t_moe_f32(8, 128, 8, 40, 24, true);
    t_moe_f32(19, 16, 4, 36, 12, false);
}

// moe_one_* (the whole one-token MoE block in one launch with grid-wide barriers, every block
// running at once here) against the three launches it replaces, moe_router_plan_one,
// moe_gate_up_dec_* and moe_down_combine_*: the same logits, act and out, bit for bit, in two
// launches in a row on two grids (the barrier words must come back to zero arrivals).
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

void t_moe_one(int E, int K, int H, int I, bool norm, bool fp8, unsigned blocks, unsigned threads) {
    const std::vector<bf16> x = random_bf16(H), router = random_bf16((size_t)E * H);
    const Experts ex = make_experts(E, H, I, fp8);
    const int P = K;
    std::vector<float> lg(E, NAN), wts(P, NAN), out(H, NAN);
    std::vector<int> ids(P, -1), perm(P, -1), off(E + 1, -1), active(E + 1, -1);
    std::vector<bf16> act(P * I);
    // moe_router_plan_one's logits and plan (checked equal above; it takes at most 256 experts).
    launch({(unsigned)((E + 7) / 8)}, {256}, [&] { gemv_m1(lg.data(), x.data(), router.data(), E, H); });
    launch({1}, {32}, [&] { moe_plan_one_f32(ids.data(), wts.data(), off.data(), perm.data(), active.data(), lg.data(), E, K, norm); });
    launch({(unsigned)((I + 7) / 8), (unsigned)std::min(E, P)}, {256}, [&] {
        if (fp8) moe_gate_up_dec_fp8_vec(act.data(), x.data(), ex.w13q.data(), ex.s13.data(), off.data(), active.data(), perm.data(), E, K, I, H);
        else moe_gate_up_dec_bf16_vec(act.data(), x.data(), ex.w13b.data(), nullptr, off.data(), active.data(), perm.data(), E, K, I, H);
    });
    launch({(unsigned)H}, {(unsigned)(32 * K)}, [&] {
        if (fp8) moe_down_combine_fp8_vec(out.data(), act.data(), ex.w2q.data(), ex.s2.data(), ids.data(), wts.data(), 1, K, I, H);
        else moe_down_combine_bf16_vec(out.data(), act.data(), ex.w2b.data(), nullptr, ids.data(), wts.data(), 1, K, I, H);
    });
    unsigned sync[2] = {0, 0};
    for (int rep = 0; rep < 2; ++rep) {
        // The second launch on another grid: the barrier words must serve any grid.
        const unsigned grid = blocks + 2 * rep;
        const int cols = (H + (int)grid - 1) / (int)grid;
        const size_t smem = (size_t)cols * K * I * (fp8 ? 1 : 2) + (size_t)K * I * 2 + (size_t)cols * K * (fp8 ? (I + 127) / 128 : 0) * 4 + E * 4 + 2 * 16 * 4 + (size_t)cols * K * 4;
        std::vector<float> lg1(E, NAN), out1(H, NAN);
        std::vector<bf16> act1(P * I);
        launch_all({grid}, {threads}, smem, [&] {
            if (fp8) moe_one_fp8(out1.data(), lg1.data(), act1.data(), x.data(), router.data(), ex.w13q.data(), ex.s13.data(), ex.w2q.data(), ex.s2.data(), sync, E, H, I, K, norm, cols);
            else moe_one_bf16(out1.data(), lg1.data(), act1.data(), x.data(), router.data(), ex.w13b.data(), nullptr, ex.w2b.data(), nullptr, sync, E, H, I, K, norm, cols);
        });
        int bad = sync[0] != 0 || sync[1] != 2u * (rep + 1);
        bad += memcmp(lg1.data(), lg.data(), E * sizeof(float)) != 0;
        bad += memcmp(act1.data(), act.data(), P * I * sizeof(bf16)) != 0;
        bad += memcmp(out1.data(), out.data(), H * sizeof(float)) != 0;
        char name[96];
        snprintf(name, 96, "moe_one%s = 3 launches E%d k%d H%d I%d grid %u", fp8 ? " fp8" : "", E, K, H, I, grid);
        report(name, bad, 0);
    }
    if (!fp8 || H % 128 || I % 128 || threads % 128) return;
    // moe_one_fp8_mma: the same logits bit for bit; act within a bf16 rounding of the three
    // launches' (the same exact products in another order), out within the MoE bound.
    double rms_a = 0, rms_o = 0;
    for (int p = 0; p < P * I; ++p) rms_a += (double)F(act[p]) * F(act[p]);
    for (int c = 0; c < H; ++c) rms_o += (double)out[c] * out[c];
    rms_a = std::sqrt(rms_a / (P * I));
    rms_o = std::sqrt(rms_o / H);
    for (int rep = 0; rep < 2; ++rep) {
        const unsigned grid = blocks + rep;
        const int cols = (H + (int)grid - 1) / (int)grid, rows = cols * K;
        const size_t smem = (size_t)rows * (I + 64) + (size_t)((rows * (I / 128) + 3) & ~3) * 4 + (size_t)K * I * 4 + (size_t)H * 4 + E * 4 + 3 * 16 * 4 + (size_t)rows * 4 + (16 * 8 + 32) * 4;
        std::vector<float> lg1(E, NAN), out1(H, NAN);
        std::vector<bf16> act1(P * I, B(NAN));
        launch_all({grid}, {threads}, smem, [&] {
            moe_one_fp8_mma(out1.data(), lg1.data(), act1.data(), x.data(), router.data(), ex.w13q.data(), ex.s13.data(), ex.w2q.data(), ex.s2.data(), sync, E, H, I, K, norm, cols);
        });
        int bad = sync[0] != 0 || memcmp(lg1.data(), lg.data(), E * sizeof(float)) != 0;
        double worst_a = 0, worst_o = 0;
        for (int p = 0; p < P * I; ++p) {
            const double a1 = F(act1[p]), a0 = F(act[p]);
            worst_a = std::max(worst_a, std::isfinite(a1) ? std::fabs(a1 - a0) / (std::fabs(a0) + 1e-3 * rms_a) : 1e30);
        }
        for (int c = 0; c < H; ++c)
            worst_o = std::max(worst_o, std::isfinite(out1[c]) ? std::fabs(out1[c] - out[c]) / (rms_o + std::fabs(out[c])) : 1e30);
        char name[96];
        snprintf(name, 96, "moe_one_fp8_mma logits E%d k%d H%d I%d grid %u", E, K, H, I, grid);
        report(name, bad, 0);
        snprintf(name, 96, "moe_one_fp8_mma act ~ 3 launches grid %u", grid);
        report(name, worst_a, 8e-3);
        snprintf(name, 96, "moe_one_fp8_mma out ~ 3 launches grid %u", grid);
        report(name, worst_o, 1e-2);
    }
}

static void moe_one_tests() {
    t_moe_one(128, 8, 64, 48, true, true, 5, 128);
    t_moe_one(128, 8, 64, 48, true, false, 3, 256);
    t_moe_one(40, 4, 2080, 1040, false, true, 3, 128);   // rows past a decode group
    t_moe_one(300, 8, 48, 32, true, true, 7, 64);        // more experts than routing registers
    t_moe_one(16, 2, 40, 16, true, false, 4, 64);        // blocks past the output columns
    // moe_one_fp8_mma (H, I whole 128-column groups): a tile round cut short, blocks past the
    // output columns, several tile rounds a block, two slices a warp.
    t_moe_one(16, 4, 256, 256, true, true, 3, 256);
    t_moe_one(32, 8, 512, 384, true, true, 5, 128);
    t_moe_one(16, 2, 1024, 128, false, true, 2, 256);
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
    moe_f32_tests();
    moe_mma_tests();
    moe_one_tests();
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

#include "gdn_test.h"
#include "fp8_one_test.h"
#include "skeleton_test.h"

int main() {
    // EMU_ONLY=NAME runs one group of cases (see each group's comment), then stops.
    const std::pair<const char*, void (*)()> groups[] = {
        {"gdn_decode", [] { gdn_decode_tests(); }},
        {"hybrid", [] { gdn_tests(); gdn_decode_tests(); }},
        {"attention", [] { attn_tests(); kv_fp8_tests(); }},
        {"router", [] { router_tests(); }},
        {"skeleton", [] { skeleton_tests(); }},
        {"argmax", [] { t_softmax(2, 3000); t_argmax_nan_first(); }},
        {"moe_one", [] { moe_one_tests(); }},
        {"moe_mma", [] { moe_mma_tests(); }},
        {"moe_f32", [] { moe_f32_tests(); }},
        {"fp8_one", [] { fp8_one_tests(); }},
        {"gemv", [] { t_gemv(1, 40, 64); t_gemv(1, 37, 2048); t_gemv(1, 21, 4096); t_gemv(1, 9, 2056); }},
        {"gemv_fp8", [] { t_gemv_fp8(1, 37, 2048); t_gemv_fp8(1, 40, 1024); t_gemv_fp8(8, 37, 2048); t_gemv_fp8(3, 20, 768); t_gemv_fp8(3, 13, 192); t_gemv_fp8(1, 16, 4096); t_gemv_fp8(9, 21, 128); t_gemv_fp8(45, 40, 256); t_gemv_fp8(64, 16, 192); }},
        {"moe", [] { moe_tests(); }},
    };
    if (const char* only = getenv("EMU_ONLY")) {
        for (const auto& [name, run] : groups)
            if (std::string(only) == name) {
                run();
                printf("%d failures\n", fails);
                return fails ? 1 : 0;
            }
        fprintf(stderr, "EMU_ONLY=%s: no such group; one of:", only);
        for (const auto& g : groups) fprintf(stderr, " %s", g.first);
        fprintf(stderr, " (or unset, for every case)\n");
        return 2;
    }
    t_random();
    t_norm(3, 64, 32); t_norm(2, 4096, 512); t_norm(2, 96, 32);
    t_rope(5, 4, 2, 32, 32, 1e4, 1.0, 512);
    t_rope(3, 8, 2, 24, 24, 1e4, 1.2, 2048);
    t_rope(2, 8, 1, 64, 32, 1e4, 1.0, 2048);
    t_rope(2, 6, 6, 16, 16, 1e4, 1.0, 40000);
    t_rope(2, 5, 1, 128, 128, 1e6, 1.0, 40000);
    attn_tests();
    t_gemv(1, 40, 64);
    t_gemv(1, 37, 2048);
    t_gemv(1, 21, 4096);
    t_gemv(3, 37, 1048);
    t_gemv(8, 9, 24);
    t_gemv_silu(1, 40, 1048);
    t_gemv_silu(3, 13, 64);
    t_gemv_silu(8, 9, 24);
    moe_tests();
    skeleton_tests();
    t_fp8_decode();
    t_gemv_fp8(1, 40, 1024);
    t_gemv_fp8(1, 37, 2064);
    t_gemv_fp8(3, 13, 272);
    t_gemv_fp8(8, 9, 2064);
    t_gemv_fp8(2, 11, 200);
    t_gemv_fp8(8, 37, 2048);
    t_gemv_fp8(3, 20, 768);
    t_gemv_fp8(3, 13, 192);
    t_gemv_fp8(9, 21, 128);
    t_gemv_fp8(45, 40, 256);
    t_fill_random_fp8();
    t_write_kv();
    t_rope_kv(5, 4, 2, 32, 32);
    t_rope_kv(3, 8, 1, 64, 32);
    t_rope_kv(2, 32, 8, 128, 128);
    kv_fp8_tests();
    t_softmax(2, 3000);
    t_misc();
    t_sample_noise();
    t_argmax_nan_first();
    gdn_tests();
    fp8_one_tests();
    gdn_decode_tests();
    t_sample_prepare(3000, false);
    t_sample_prepare(1537, true);
    t_sample_gumbel(1000);
    t_sample_gumbel(1537);
    t_sample_candidates(3001, {1, 20, 256, 1024});
    t_sample_candidates(1024, {1, 1000, 1024});
    if (!getenv("EMU_QUICK")) {
        t_sample_prepare(151936, false);
        t_sample_gumbel(151936);
        t_sample_candidates(151936, {1, 20, 1024});
    }
    printf("%d failures\n", fails);
    return fails != 0;
}
