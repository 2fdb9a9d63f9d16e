// kernels/dev/nvfp4/gemv_nvfp4.cu against a double-precision sum of the format's values
// (e2m1 · e4m3 · global, docs/nvfp4.md), edge shapes included: K of one block, N not a multiple
// of the block's 8 warps, more rows than a warp's lanes have blocks.

static float host_e2m1(unsigned nib) {
    static const float mag[8] = {0.f, .5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
    return (nib & 8) ? -mag[nib & 7] : mag[nib & 7];
}

void t_e2m1_values() {
    int bad = 0;
    for (unsigned c = 0; c < 16; ++c) bad += e2m1_value(c) != host_e2m1(c);
    report("e2m1_value = the 16 E2M1 values", bad, 0);
}

void t_gemv_nvfp4(int M, int N, int K) {
    const int blocks = K / 16;
    std::vector<bf16> x(M * K);
    for (auto& v : x) v = B(U(1));
    std::vector<unsigned char> w(N * K / 2), sc(N * blocks);
    std::vector<float> g(N), out(M * N, NAN), wf(N * K);
    for (auto& v : w) v = (unsigned char)(rng() & 0xff);
    for (auto& v : sc) v = (unsigned char)(0x10 + rng() % 0x50);  // 2^-5 .. 2^4.8: finite, positive
    for (auto& v : g) v = std::fabs(U(0.01f)) + 1e-4f;
    for (int i = 0; i < N * K; ++i) {
        const int n = i / K, k = i % K;
        const unsigned byte = w[n * K / 2 + k / 2];
        wf[i] = host_e2m1(k % 2 ? byte >> 4 : byte & 15) * host_e4m3(sc[n * blocks + k / 16]) * g[n];
    }
    launch({(unsigned)((N + 7) / 8)}, {256}, [&] {
        gemv_nvfp4_rows(out.data(), x.data(), w.data(), sc.data(), g.data(), M, N, K);
    });
    double worst = 0;
    for (int m = 0; m < M; ++m) for (int n = 0; n < N; ++n) {
        double r = 0, a = 0;
        for (int k = 0; k < K; ++k) { r += (double)F(x[m*K+k]) * wf[n*K+k]; a += std::fabs((double)F(x[m*K+k]) * wf[n*K+k]); }
        worst = std::max(worst, std::fabs(out[m*N+n] - r) / (1e-6 + a));
    }
    char name[64]; snprintf(name, 64, "gemv_nvfp4_rows M%d N%d K%d", M, N, K);
    report(name, worst, 1e-6);
}

void nvfp4_tests() {
    t_e2m1_values();
    t_gemv_nvfp4(1, 37, 2048);
    t_gemv_nvfp4(1, 8, 16);
    t_gemv_nvfp4(3, 13, 528);
    t_gemv_nvfp4(8, 40, 1024);
    t_gemv_nvfp4(2, 9, 5120 + 16);
}
