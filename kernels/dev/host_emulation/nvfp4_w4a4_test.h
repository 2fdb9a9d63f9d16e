// kernels/src/nvfp4_w4a4.cu: quant_nvfp4_rows against a reference that searches the E4M3 and
// E2M1 grids for the nearest value (ties to the even code) instead of the kernel's comparisons
// and bit arithmetic, byte for byte; gemm_nvfp4_w4a4_r2_b<NB> against a double-precision sum of
// the quantized activations times nvfp4_test.h's weights. Edge cases: ties on both grids, a row
// of zeros, negative zeros, a block far below its row's maximum (its scale rounds to a subnormal
// or to 0), K of one 64-wide step and K whose steps leave warps idle, M and N tails, several x
// chunks.

// The E4M3 byte nearest to a >= 0 (ties to the even mantissa), saturating at 448.
static unsigned ref_e4m3(float a) {
    unsigned best = 0;
    double bd = INFINITY;
    for (unsigned b = 0; b <= 0x7e; ++b) {
        const double d = std::fabs((double)host_e4m3(b) - (double)a);
        if (d < bd || (d == bd && (b & 1) == 0)) bd = d, best = b;
    }
    return best;
}

// The E2M1 code nearest to a >= 0 (ties to the even code), saturating at 6.
static unsigned ref_e2m1(float a) {
    unsigned best = 0;
    double bd = INFINITY;
    for (unsigned c = 0; c < 8; ++c) {
        const double d = std::fabs((double)host_e2m1(c) - (double)a);
        if (d < bd || (d == bd && (c & 1) == 0)) bd = d, best = c;
    }
    return best;
}

struct W4a4X {
    std::vector<unsigned char> q, sc;
    std::vector<float> g;
    std::vector<double> xf;  // the quantized values, [M, K]
};

static W4a4X ref_quant(const std::vector<bf16>& x, int M, int K) {
    W4a4X r{std::vector<unsigned char>(M * K / 2), std::vector<unsigned char>(M * K / 16),
            std::vector<float>(M), std::vector<double>((size_t)M * K)};
    for (int m = 0; m < M; ++m) {
        float amax = 0.f;
        for (int k = 0; k < K; ++k) amax = std::max(amax, std::fabs(F(x[m * K + k])));
        const float gx = amax / 2688.f;
        r.g[m] = gx;
        for (int b = 0; b < K / 16; ++b) {
            float bmax = 0.f;
            for (int i = 0; i < 16; ++i) bmax = std::max(bmax, std::fabs(F(x[m * K + 16 * b + i])));
            unsigned s = 0;
            float d = 0.f;
            if (gx > 0.f) {
                s = ref_e4m3(bmax / (6.f * gx));
                d = host_e4m3(s) * gx;
            }
            r.sc[m * (K / 16) + b] = (unsigned char)s;
            for (int i = 0; i < 16; ++i) {
                const int k = 16 * b + i;
                const float v = F(x[m * K + k]);
                const unsigned code = d > 0.f ? ref_e2m1(std::fabs(v) / d) : 0u;
                const unsigned nibble = code | (std::signbit(v) ? 8u : 0u);
                r.q[(m * K + k) / 2] |= (unsigned char)(nibble << (4 * (k & 1)));
                r.xf[(size_t)m * K + k] = (double)host_e2m1(nibble) * host_e4m3(s) * gx;
            }
        }
    }
    return r;
}

// Random bf16 rows with the edge cases above.
static std::vector<bf16> w4a4_x(int M, int K) {
    std::vector<bf16> x(M * K);
    for (auto& v : x) v = B(U(1));
    for (int i = 0; i < M * K; i += 13) x[i] = B(-0.f);
    if (M > 1)
        for (int k = 0; k < K; ++k) x[K + k] = B(0.f);  // row 1: all zeros
    if (K >= 64) {
        // Row 0: its maximum 2688 (the last value) makes g = 1; block 0's maximum 6 makes its
        // scale 1, so its other values are the E2M1 grid's midpoints (every tie, both signs);
        // block 1's values are so small that their scale rounds to 0.
        const float mids[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.f};
        x[0] = B(6.f);
        for (int i = 1; i < 16; ++i) x[i] = B(i < 8 ? mids[i - 1] : -mids[(i - 8) % 7]);
        for (int i = 16; i < 32; ++i) x[i] = B(1e-4f * (i - 20));
        x[K - 1] = B(2688.f);
    }
    return x;
}

void t_quant_nvfp4_rows(int M, int K) {
    const std::vector<bf16> x = w4a4_x(M, K);
    const W4a4X r = ref_quant(x, M, K);
    std::vector<unsigned char> q(M * K / 2, 0xaa), sc(M * K / 16, 0xaa);
    std::vector<float> g(M, NAN);
    launch({(unsigned)M}, {256}, [&] { quant_nvfp4_rows(q.data(), sc.data(), g.data(), x.data(), K); });
    int bad = 0;
    for (size_t i = 0; i < q.size(); ++i) bad += q[i] != r.q[i];
    for (size_t i = 0; i < sc.size(); ++i) bad += sc[i] != r.sc[i];
    for (int m = 0; m < M; ++m) bad += std::memcmp(&g[m], &r.g[m], 4) != 0;
    char name[80];
    snprintf(name, 80, "quant_nvfp4_rows M%d K%d (bytes differing)", M, K);
    report(name, bad, 0);
}

void t_gemm_nvfp4_w4a4(int NB, int M, int N, int K) {
    const Nvfp4W t = make_nvfp4(N, K);
    const std::vector<bf16> x = w4a4_x(M, K);
    std::vector<unsigned char> q(M * K / 2), sc(M * K / 16);
    std::vector<float> g(M), out(M * N, NAN);
    launch({(unsigned)M}, {256}, [&] { quant_nvfp4_rows(q.data(), sc.data(), g.data(), x.data(), K); });
    launch({(unsigned)((M + 8 * NB - 1) / (8 * NB)), (unsigned)((N + 31) / 32)}, {256}, [&] {
        auto args = std::make_tuple(out.data(), q.data(), sc.data(), g.data(), t.w.data(), t.sc.data(), t.g.data(), M, N, K);
        if (NB == 1) std::apply(gemm_nvfp4_w4a4_r2_b1, args);
        if (NB == 2) std::apply(gemm_nvfp4_w4a4_r2_b2, args);
        if (NB == 4) std::apply(gemm_nvfp4_w4a4_r2_b4, args);
    });
    const W4a4X r = ref_quant(x, M, K);
    double worst = 0;
    for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) {
            double s = 0, a = 0;
            for (int k = 0; k < K; ++k) {
                const double p = r.xf[(size_t)m * K + k] * t.wf[(size_t)n * K + k];
                s += p;
                a += std::fabs(p);
            }
            const float o = out[m * N + n];
            worst = std::isnan(o) ? INFINITY : std::max(worst, std::fabs(o - s) / (1e-30 + a));
        }
    char name[80];
    snprintf(name, 80, "gemm_nvfp4_w4a4_r2_b%d M%d N%d K%d", NB, M, N, K);
    report(name, worst, 1e-6);
}

void nvfp4_w4a4_tests() {
    t_quant_nvfp4_rows(3, 64);     // one step: ties, zeros row, tiny block
    t_quant_nvfp4_rows(5, 1088);   // 68 blocks a row: threads past them idle
    t_quant_nvfp4_rows(2, 8192);   // 512 blocks: each thread two
    t_gemm_nvfp4_w4a4(1, 1, 32, 64);      // one step: seven warps idle
    t_gemm_nvfp4_w4a4(1, 3, 70, 640);     // 10 steps (warps 0-1 two), N tail
    t_gemm_nvfp4_w4a4(2, 16, 64, 1024);   // 16 steps: every warp two, two x tiles
    t_gemm_nvfp4_w4a4(2, 11, 45, 192);    // x tile 2 half past M, N tail
    t_gemm_nvfp4_w4a4(4, 70, 40, 576);    // three x chunks of 32 (the last of 6 rows)
}
