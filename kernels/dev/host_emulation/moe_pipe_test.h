// moe_pipe.cu's pipelined small-step expert kernels (FP8): t_moe_mma's mode 6 runs them against the double reference (moe_mma_test.h), and moe_pipe_run also runs the _any
// kernels they stand in for on the same inputs: the two must agree bit for bit (the same
// products summed in the same order). Included by test.cpp before moe_mma_test.h.
#pragma once

void t_moe_mma(int T, int E, int K, int H, int I, int mode, bool skew);

static size_t bits_differ(const void* a, const void* b, size_t n, size_t size) {
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) bad += memcmp((const char*)a + i * size, (const char*)b + i * size, size) != 0;
    return bad;
}

// gate_up then down on the pipelined kernels into act and ys (the launcher's grids and shared
// memory), then the _any kernels: act against gate_up's, ys against down's on the same act.
static void moe_pipe_run(std::vector<bf16>& act, std::vector<float>& ys, const std::vector<bf16>& x,
                         const Experts& ex, const std::vector<int>& offsets, const std::vector<int>& active,
                         const std::vector<int>& perm, int T, int E, int K, int H, int I) {
    const unsigned ge = (unsigned)std::min(E, T * K), gu = (unsigned)((I + 63) / 64), gd = (unsigned)((H + 127) / 128);
    const size_t smem = PipeCfg::SMEM;
    const int *of = offsets.data(), *ac = active.data(), *pm = perm.data();
    auto gate_up = [&](bool pipe, bf16* out) {
        if (pipe) moe_gate_up_fp8_pipe(out, x.data(), ex.w13q.data(), ex.s13.data(), of, ac, pm, E, K, I, H);
        else moe_gate_up_fp8_small_any(out, x.data(), ex.w13q.data(), ex.s13.data(), of, ac, pm, E, K, I, H);
    };
    auto down = [&](bool pipe, float* out) {
        if (pipe) moe_down_fp8_pipe(out, act.data(), ex.w2q.data(), ex.s2.data(), of, ac, pm, E, I, H);
        else moe_down_fp8_small_any(out, act.data(), ex.w2q.data(), ex.s2.data(), of, ac, pm, E, I, H);
    };
    launch_smem({gu, ge}, {256}, smem, [&] { gate_up(true, act.data()); });
    launch_smem({gd, ge}, {256}, smem, [&] { down(true, ys.data()); });
    std::vector<bf16> act_any(act.size());
    std::vector<float> ys_any(ys.size(), NAN);
    const size_t any_bytes = 16 * (size_t)(std::min(H, MOE_XS_COLS) + MOE_XS_PAD) * 2;
    launch_smem({gu, ge}, {256}, any_bytes, [&] { gate_up(false, act_any.data()); });
    launch({gd, ge}, {256}, [&] { down(false, ys_any.data()); });
    char name[96];
    snprintf(name, 96, "moe fp8 pipe = _any, act and ys bits T%d E%d k%d H%d I%d", T, E, K, H, I);
    report(name, (double)(bits_differ(act.data(), act_any.data(), act.size(), sizeof(bf16)) +
                          bits_differ(ys.data(), ys_any.data(), ys.size(), sizeof(float))), 0);
}

static void moe_pipe_tests() {
    for (int mode : {6}) {
        // One token (8 experts of 128, one pair each), 16 tokens (experts of 0-3 pairs), k of
        // one slice (I 128, FP8) and of three (H 384).
        t_moe_mma(1, 128, 8, 128, 128, mode, false);
        t_moe_mma(16, 128, 8, 384, 128, mode, false);
        // Skewed (most tokens' first choice expert 0): experts of several chunks, chunks cut
        // short, empty experts; 300 tokens put hundreds of pairs on expert 0 (many chunks, the
        // pipeline running across them).
        t_moe_mma(40, 8, 2, 256, 256, mode, true);
        t_moe_mma(300, 4, 2, 128, 128, mode, true);
        // Qwen3.6-35B-A3B's widths (H 2048, I 512) on a few experts.
        t_moe_mma(33, 16, 4, 2048, 512, mode, false);
    }
}
