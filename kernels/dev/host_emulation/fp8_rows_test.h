// kernels/src/fp8_gemm_rows.cu (fp8_gemm_rows_m<M>) against a double-precision sum of the
// dequantized products (e4m3 · scale, x as bf16). Edge cases: every build (M 16, 32, 64, 128)
// with x rows short of it (tiles of zero rows, rows past m not written), weight rows past a
// multiple of the 128-row block (rows past n read the last one, not written), k of two slices
// (one scale group) to 32, k = 192 (a last scale group of one slice), splits of k that leave a
// split fewer slices than the pipeline's stages, uneven splits, and the split sums' order: the
// same launch with its blocks run in reverse gives the same bits, and every ticket is back at 0.

// Grid (ceil(N / 128) column tiles, splits), 256 threads, the build's shared memory.
void t_fp8_gemm_rows(int M, int N, int K, int splits) {
    const int tiles = (N + F8R_ROWS - 1) / F8R_ROWS;
    const int rows = M <= 16 ? 16 : M <= 32 ? 32 : M <= 64 ? 64 : 128, xt = rows / 8;
    std::vector<bf16> x(M * K);
    for (auto& v : x) v = B(U(1));
    for (int i = 0; i < M * K; i += 13) x[i] = B(-0.f);
    const Fp8Weight fw = make_fp8_weight(N, K, 0.02f);
    const std::vector<float>& wf = fw.wf;
    const size_t smem = rows == 16 ? F8rCfg<2>::SMEM : rows == 32 ? F8rCfg<4>::SMEM
                        : rows == 64 ? F8rCfg<8>::SMEM : F8rCfg<16>::SMEM;
    // Past the M · N outputs, a guard that must stay NaN.
    const int guard = 64;
    std::vector<float> part((size_t)splits * tiles * F8R_WARPS * xt * 128, NAN);
    std::vector<unsigned> tickets(tiles + 4, 0u);
    auto run = [&](bool reversed) {
        std::vector<float> out(M * N + guard, NAN);
        launch_smem({(unsigned)tiles, (unsigned)splits}, {256}, smem, [&] {
            auto args = std::make_tuple(out.data(), part.data(), tickets.data(), x.data(), fw.w.data(), fw.sc.data(), M, N, K);
            if (rows == 16) std::apply(fp8_gemm_rows_m16, args);
            if (rows == 32) std::apply(fp8_gemm_rows_m32, args);
            if (rows == 64) std::apply(fp8_gemm_rows_m64, args);
            if (rows == 128) std::apply(fp8_gemm_rows_m128, args);
        }, reversed);
        return out;
    };
    const std::vector<float> out = run(false);
    double worst = 0;
    for (int m = 0; m < M; ++m) for (int n = 0; n < N; ++n) {
        double r = 0, a = 0;
        for (int k = 0; k < K; ++k) {
            const double p = (double)F(x[m * K + k]) * wf[n * K + k];
            r += p;
            a += std::fabs(p);
        }
        const float o = out[m * N + n];
        worst = std::max(worst, std::isnan(o) ? 1e9 : std::fabs(o - r) / (1e-6 + a));
    }
    for (int i = 0; i < guard; ++i) if (!std::isnan(out[M * N + i])) worst = 1e9;
    for (unsigned tk : tickets) if (tk != 0) worst = 1e9;
    char name[80];
    snprintf(name, 80, "fp8_gemm_rows_m%d M%d N%d K%d splits %d", rows, M, N, K, splits);
    report(name, worst, 1e-6);
    if (splits > 1) {
        const std::vector<float> again = run(true);
        int differ = 0;
        for (int i = 0; i < M * N; ++i) differ += memcmp(&again[i], &out[i], 4) != 0;
        for (unsigned tk : tickets) differ += tk != 0;
        snprintf(name, 80, "  blocks in reverse: the same bits (M%d N%d splits %d)", M, N, splits);
        report(name, differ, 0);
    }
}

void fp8_rows_tests() {
    t_fp8_gemm_rows(9, 200, 128, 1);     // M16 build, 7 zero rows; N tail of 72, one stage pair
    t_fp8_gemm_rows(16, 40, 2048, 8);    // a whole M16 tile, one short column tile, 8 splits of 4
    t_fp8_gemm_rows(17, 130, 256, 2);    // M32 build, N tail of 2, splits of 2 slices (< stages)
    t_fp8_gemm_rows(33, 77, 2048, 3);    // M64 build, N < 128, uneven splits (10, 11, 11 slices)
    t_fp8_gemm_rows(45, 300, 256, 1);    // three column tiles, the last of 44 rows
    t_fp8_gemm_rows(64, 200, 2048, 1);   // a whole M64 tile, 32 slices through the ring of 4
    t_fp8_gemm_rows(9, 50, 192, 3);      // k = 192: a last scale group of one slice, a split each
    t_fp8_gemm_rows(100, 130, 256, 4);   // M128 build, a slice a split
    t_fp8_gemm_rows(128, 200, 2048, 2);  // a whole M128 tile, two splits of 16 slices
    t_fp8_gemm_rows(128, 77, 128, 1);    // one column tile of 77 rows, two slices
}
