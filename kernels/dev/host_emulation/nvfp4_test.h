// kernels/src/nvfp4.cu against a double-precision sum of the format's values
// (e2m1 · e4m3 · global, docs/nvfp4.md): gemv_nvfp4_mma_r<RT>_b<NB> (nvfp4_gemv.cu),
// gemv_nvfp4_rows and dequant_nvfp4_bf16. Edge cases: K not a multiple of a 128-wide slice (lanes past K), several
// batches of slices, N not a multiple of a block's rows, x rows in several chunks, negative zero
// nibbles (0x8), the largest E4M3 scale (0x7e = 448) and the smallest subnormal one (0x01).

#include <tuple>

static float host_e2m1(unsigned nib) {
    static const float mag[8] = {0.f, .5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
    return (nib & 8) ? -mag[nib & 7] : mag[nib & 7];
}

void t_e2m1_values() {
    int bad = 0;
    for (unsigned c = 0; c < 16; ++c) {
        const float v = e2m1_exact(c);
        bad += v != host_e2m1(c) || std::signbit(v) != ((c & 8) != 0);
    }
    report("e2m1_exact = the 16 E2M1 values (signed zeros included)", bad, 0);
}

struct Nvfp4W {
    int N, K;
    std::vector<unsigned char> w, sc;
    std::vector<float> g;
    std::vector<double> wf;  // the format's value of each weight, [N, K]
};

static Nvfp4W make_nvfp4(int N, int K) {
    Nvfp4W t{N, K, std::vector<unsigned char>(N * K / 2), std::vector<unsigned char>(N * K / 16),
             std::vector<float>(N), std::vector<double>((size_t)N * K)};
    for (auto& v : t.w) v = (unsigned char)(rng() & 0xff);
    for (size_t i = 0; i < t.w.size(); i += 7) t.w[i] = 0x88;  // negative zeros
    for (auto& v : t.sc) v = (unsigned char)(0x10 + rng() % 0x50);
    if (t.sc.size() > 2) { t.sc[0] = 0x7e; t.sc[1] = 0x01; t.sc[t.sc.size() - 1] = 0x7e; }
    for (auto& v : t.g) v = std::fabs(U(0.01f)) + 1e-4f;
    for (int i = 0; i < N * K; ++i) {
        const int n = i / K, k = i % K;
        const unsigned byte = t.w[n * K / 2 + k / 2];
        const float s = host_e4m3(t.sc[n * (K / 16) + k / 16]) * t.g[n];  // f32, as the kernels
        t.wf[i] = (double)host_e2m1(k % 2 ? byte >> 4 : byte & 15) * s;
    }
    return t;
}

static double worst_rel(const Nvfp4W& t, const std::vector<bf16>& x, const std::vector<float>& out, int M) {
    double worst = 0;
    for (int m = 0; m < M; ++m)
        for (int n = 0; n < t.N; ++n) {
            double r = 0, a = 0;
            for (int k = 0; k < t.K; ++k) {
                const double p = (double)F(x[m * t.K + k]) * t.wf[(size_t)n * t.K + k];
                r += p;
                a += std::fabs(p);
            }
            worst = std::max(worst, std::fabs(out[m * t.N + n] - r) / (1e-30 + a));
        }
    return worst;
}

void t_gemv_nvfp4_rows(int M, int N, int K) {
    const Nvfp4W t = make_nvfp4(N, K);
    std::vector<bf16> x(M * K);
    for (auto& v : x) v = B(U(1));
    std::vector<float> out(M * N, NAN);
    launch({(unsigned)((N + 7) / 8)}, {256}, [&] {
        gemv_nvfp4_rows(out.data(), x.data(), t.w.data(), t.sc.data(), t.g.data(), M, N, K);
    });
    char name[80];
    snprintf(name, 80, "gemv_nvfp4_rows M%d N%d K%d", M, N, K);
    report(name, worst_rel(t, x, out, M), 1e-6);
}

// gemv_nvfp4_mma_r<RT>_b<NB> (nvfp4_gemv.cu): grid (x chunks of 8·NB rows, weight blocks of 16·RT
// rows).
void t_gemv_nvfp4_mma(int RT, int NB, int M, int N, int K) {
    const Nvfp4W t = make_nvfp4(N, K);
    std::vector<bf16> x(M * K);
    for (auto& v : x) v = B(U(1));
    std::vector<float> out(M * N, NAN);
    launch({(unsigned)((M + 8 * NB - 1) / (8 * NB)), (unsigned)((N + 16 * RT - 1) / (16 * RT))}, {256}, [&] {
        auto args = std::make_tuple(out.data(), x.data(), t.w.data(), t.sc.data(), t.g.data(), M, N, K);
        if (RT == 2 && NB == 1) std::apply(gemv_nvfp4_mma_r2_b1, args);
        if (RT == 2 && NB == 2) std::apply(gemv_nvfp4_mma_r2_b2, args);
        if (RT == 2 && NB == 4) std::apply(gemv_nvfp4_mma_r2_b4, args);
    });
    char name[80];
    snprintf(name, 80, "gemv_nvfp4_mma_r%d_b%d M%d N%d K%d", RT, NB, M, N, K);
    report(name, worst_rel(t, x, out, M), 1e-6);
}

void t_nvfp4_pair_bits() {
    // Every nibble in every position of a word, through the pair placement and a scale of 1
    // (2^118 · 2^-118 folded: the A operand times 2^8 must be the E2M1 value).
    int bad = 0;
    const u32 one = mul_bf16x2(0x3f803f80u, 0x3f803f80u);  // (1, 1)
    for (unsigned c = 0; c < 16; ++c)
        for (int i = 0; i < 8; ++i) {
            const u32 w = (c << (4 * i)) | (((c + 5) & 15) << (4 * ((i + 4) % 8)));
            u32 pair;
            switch (i % 4) {
                case 0: pair = nvfp4_pair_bits<0>(w); break;
                case 1: pair = nvfp4_pair_bits<1>(w); break;
                case 2: pair = nvfp4_pair_bits<2>(w); break;
                default: pair = nvfp4_pair_bits<3>(w); break;
            }
            const u32 s = mul_bf16x2(pair, one);
            const float v = ldexpf(i < 4 ? lo(s) : hi(s), 126);
            bad += v != host_e2m1(c) || std::signbit(v) != ((c & 8) != 0);
        }
    u32 sp[2];
    nvfp4_scale_pairs(0x7e01u, sp);  // 448 and 2^-9, times 2^118
    bad += ldexpf(lo(sp[0]), -118) != 0.001953125f || ldexpf(hi(sp[0]), -118) != 0.001953125f;
    bad += ldexpf(lo(sp[1]), -118) != 448.f || ldexpf(hi(sp[1]), -118) != 448.f;
    report("nvfp4_pair_bits and nvfp4_scale_pairs: every nibble, the extreme scales", bad, 0);
}

// nvfp4_pair_bits_mul<J> (of a word and of the word >> 8) against nvfp4_pair_bits<I>: every
// nibble in every position, bit for bit.
void t_nvfp4_pair_bits_mul() {
    int bad = 0;
    for (unsigned c = 0; c < 16; ++c)
        for (int i = 0; i < 8; ++i)
            for (unsigned fill = 0; fill < 16; fill += 5) {
                u32 w = 0;
                for (int e = 0; e < 8; ++e) w |= (e == i ? c : (fill + 3 * e) & 15u) << (4 * e);
                const u32 v = w >> 8;
                bad += nvfp4_pair_bits_mul<0>(w) != nvfp4_pair_bits<0>(w);
                bad += nvfp4_pair_bits_mul<1>(w) != nvfp4_pair_bits<1>(w);
                bad += nvfp4_pair_bits_mul<0>(v) != nvfp4_pair_bits<2>(w);
                bad += nvfp4_pair_bits_mul<1>(v) != nvfp4_pair_bits<3>(w);
            }
    report("nvfp4_pair_bits_mul = nvfp4_pair_bits: every nibble in every position", bad, 0);
}

void t_dequant_nvfp4(int N, int K) {
    const Nvfp4W t = make_nvfp4(N, K);
    std::vector<bf16> out(N * K);
    launch({3}, {64}, [&] {
        dequant_nvfp4_bf16(out.data(), t.w.data(), t.sc.data(), t.g.data(), (u64)N, K);
    });
    int bad = 0;
    for (int i = 0; i < N * K; ++i) {
        const float want = F(B((float)t.wf[i]));  // the f32 product rounded once to bf16
        const float got = F(out[i]);
        bad += got != want || std::signbit(got) != std::signbit((float)t.wf[i]);
    }
    char name[64];
    snprintf(name, 64, "dequant_nvfp4_bf16 N%d K%d", N, K);
    report(name, bad, 0);
}

// fill_random_nvfp4_bytes against the host's stream (host_tensor.rs random_nvfp4_parts): the
// packed pairs (top byte) and the scales (top three bits | 0x38), across a chunk boundary.
void t_fill_random_nvfp4_bytes(int shift, unsigned bits) {
    u64 n = 65536 * 2 + 300, seed = 0x5eedull;
    std::vector<unsigned char> out(n, 0);
    u64 chunks = (n + 65535) / 65536;
    launch({1}, {64}, [&] { fill_random_nvfp4_bytes(out.data(), n, seed, shift, bits); });
    int bad = 0;
    for (u64 c = 0; c < chunks; ++c) {
        u64 st = sm(seed ^ (c * 0x9e3779b97f4a7c15ull));
        for (u64 i = c * 65536; i < std::min(n, (c + 1) * 65536); ++i) {
            st = sm(st);
            if (out[i] != (unsigned char)((unsigned)(st >> shift) | bits)) ++bad;
        }
    }
    char name[64];
    snprintf(name, 64, "fill_random_nvfp4_bytes shift %d bits %#x", shift, bits);
    report(name, bad, 0);
}

void nvfp4_tests() {
    t_fill_random_nvfp4_bytes(56, 0);
    t_fill_random_nvfp4_bytes(61, 0x38);
    t_e2m1_values();
    t_gemv_nvfp4_rows(1, 37, 2048);
    t_gemv_nvfp4_rows(1, 8, 16);
    t_gemv_nvfp4_rows(3, 13, 528);
    t_gemv_nvfp4_rows(8, 40, 1024);
    t_nvfp4_pair_bits();
    // The cases of every shape, then batches of whole slices with the next one in flight, a
    // partial batch and a tail slice, every M from 1 to 40.
    t_nvfp4_pair_bits_mul();
    t_gemv_nvfp4_mma(2, 1, 1, 16, 128);
    t_gemv_nvfp4_mma(2, 1, 3, 40, 160);
    t_gemv_nvfp4_mma(2, 1, 8, 21, 5120 + 32);
    t_gemv_nvfp4_mma(2, 1, 5, 70, 4096);
    t_gemv_nvfp4_mma(2, 1, 2, 33, 8192 + 64);  // 64 whole slices: four pipelined batches a warp
    t_gemv_nvfp4_mma(2, 1, 7, 17, 6144 + 96);  // 48 whole: an odd batch count, then a tail
    t_gemv_nvfp4_mma(2, 2, 9, 20, 256);
    t_gemv_nvfp4_mma(2, 2, 16, 33, 384);
    t_gemv_nvfp4_mma(2, 2, 12, 35, 3072 + 32);
    t_gemv_nvfp4_mma(2, 4, 17, 16, 512);
    t_gemv_nvfp4_mma(2, 4, 70, 24, 288);
    t_gemv_nvfp4_mma(2, 4, 33, 40, 512);
    t_gemv_nvfp4_mma(2, 4, 40, 100, 1184);
    t_gemv_nvfp4_mma(2, 4, 32, 9, 2048 + 32);
    for (int m = 1; m <= 40; ++m) t_gemv_nvfp4_mma(2, m <= 8 ? 1 : m <= 16 ? 2 : 4, m, 37, 1024 + 32);
    t_dequant_nvfp4(5, 96);
    t_dequant_nvfp4(3, 5120 + 32);
    t_dequant_nvfp4(7, 32);    // rows of 4 words: a stride spans many rows
    t_dequant_nvfp4(3, 416);   // rows of 52 words: the column wraps mid-stride
}
