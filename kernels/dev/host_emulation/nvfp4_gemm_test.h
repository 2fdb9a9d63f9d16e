// kernels/src/nvfp4_gemm.cu (nvfp4_gemm_r<RT>_x<NX>) against nvfp4_test.h's double-precision
// sum of the format's values. Edge cases: x rows not a multiple of the block's (M tails, and
// x chunks whose last n8 tiles are skipped), weight rows not a multiple of the block's (N
// tails: rows past N read the last row, not written), K = 32 · odd (lanes past K and a last
// slice of 32, 96), K of many slices (the weight ring wrapping, the x stages alternating),
// negative zero nibbles and the extreme scales 0x7e and 0x01 (make_nvfp4).

// Grid (x chunks of 8·NX rows, weight blocks of WARPS · 16·RT rows), WARPS · 32 threads.
void t_nvfp4_gemm(int RT, int NX, int WARPS, int M, int N, int K) {
    const Nvfp4W t = make_nvfp4(N, K);
    std::vector<bf16> x(M * K);
    for (auto& v : x) v = B(U(1));
    for (int i = 0; i < M * K; i += 11) x[i] = B(-0.f);
    std::vector<float> out(M * N, NAN);
    const int wrows = WARPS * 16 * RT;
    launch({(unsigned)((M + 8 * NX - 1) / (8 * NX)), (unsigned)((N + wrows - 1) / wrows)}, {32u * WARPS}, [&] {
        auto args = std::make_tuple(out.data(), x.data(), t.w.data(), t.sc.data(), t.g.data(), M, N, K);
        if (RT == 1 && NX == 4 && WARPS == 4) std::apply(nvfp4_gemm_r1_x4_w4, args);
        if (RT == 1 && NX == 4 && WARPS == 2) std::apply(nvfp4_gemm_r1_x4_w2, args);
        if (RT == 1 && NX == 8 && WARPS == 4) std::apply(nvfp4_gemm_r1_x8_w4, args);
        if (RT == 1 && NX == 8 && WARPS == 2) std::apply(nvfp4_gemm_r1_x8_w2, args);
        if (RT == 2 && NX == 8 && WARPS == 4) std::apply(nvfp4_gemm_r2_x8_w4, args);
    });
    char name[80];
    snprintf(name, 80, "nvfp4_gemm_r%d_x%d_w%d M%d N%d K%d", RT, NX, WARPS, M, N, K);
    // An unwritten output (NaN) fails.
    double worst = worst_rel(t, x, out, M);
    for (float v : out) if (std::isnan(v)) worst = INFINITY;
    report(name, worst, 1e-6);
}

void nvfp4_gemm_tests() {
    t_nvfp4_gemm(1, 4, 4, 16, 64, 128);       // one block exactly, one slice
    t_nvfp4_gemm(1, 4, 4, 33, 70, 96);        // M and N tails, K = 32·3 (one partial slice)
    t_nvfp4_gemm(1, 4, 4, 5, 40, 5120 + 32);  // 41 slices: the ring of 3 wraps, a last one of 32
    t_nvfp4_gemm(1, 4, 2, 32, 45, 416);       // two warps, N tail (45 = 32 + 13), K = 32·13
    t_nvfp4_gemm(1, 8, 4, 16, 100, 416);      // x tiles past M (zeros), K = 32·13
    t_nvfp4_gemm(1, 8, 4, 100, 129, 288);     // two x chunks (the second of 36 rows), N tail
    t_nvfp4_gemm(1, 8, 4, 256, 64, 160);      // four full x chunks, K = 32·5
    t_nvfp4_gemm(1, 8, 2, 65, 40, 1184);      // two warps, M and N tails, K = 32·37
    t_nvfp4_gemm(2, 8, 4, 64, 128, 256);      // one block exactly, two slices
    t_nvfp4_gemm(2, 8, 4, 33, 200, 1184);     // M tail, N tail (200 = 128 + 72), K = 32·37
    t_nvfp4_gemm(2, 8, 4, 130, 16, 32);       // three x chunks, one m16 tile of rows, K = 32
}
