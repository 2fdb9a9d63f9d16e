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

#include "basic_test.h"
#include "sample_test.h"
#include "moe_test.h"
#include "moe_pipe_test.h"
#include "moe_mma_test.h"
#include "fp8_rows_test.h"
#include "gpt_oss_test.h"
#include "minimax_test.h"
#include "mla_test.h"

// Every attention case (EMU_ONLY=attention runs just these).
#include "kv_fp8_test.h"
#include "flash_test.h"

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
    // Sliding windows (the key loops start at each row's window): window 1; a window inside
    // one 16-key tile; not a multiple of the block size; larger than the context; chunks
    // continuing a cached context; split-K (slices of the window); the CUDA-core, 16-byte-load
    // and tensor-core kernels (wide and odd GQA groups, unaligned block sizes).
    t_attn(4, 2, 32, {{0, 20}}, 16, 0, 1);
    t_attn(8, 2, 128, {{0, 40}, {17, 1}}, 16, 0, 5);
    t_attn(8, 2, 24, {{10, 6}, {40, 1}, {0, 3}}, 16, 7, 9);
    t_attn(4, 1, 64, {{0, 9}, {33, 2}}, 16, 0, 1000);
    t_attn(32, 8, 128, {{200, 1}, {5, 1}}, 16, 64, 37);
    t_attn(16, 1, 128, {{300, 1}, {0, 1}}, 16, 16, 100);
    t_attn(12, 2, 256, {{60, 8}}, 16, 0, 21);
    t_attn(6, 2, 128, {{45, 1}, {16, 2}}, 8, 0, 11);
    t_attn(8, 2, 64, {{170, 1}}, 12, 16, 33);
    t_attn(12, 1, 64, {{50, 20}}, 16, 0, 17);
    // Sinks (one more logit in each head's denominator), plain and split-K, with and without
    // a window.
    t_attn(8, 2, 128, {{0, 40}, {17, 1}}, 16, 0, 0, true);
    t_attn(32, 8, 128, {{200, 1}, {5, 1}}, 16, 64, 0, true);
    t_attn(8, 2, 24, {{10, 6}, {40, 1}, {0, 3}}, 16, 7, 9, true);
    t_attn(16, 1, 128, {{300, 1}, {0, 1}}, 16, 16, 100, true);
    t_attn(2, 2, 96, {{5, 3}}, 16, 0, 3, true);
}

#include "gdn_test.h"
#include "mamba2_test.h"
#include "skeleton_test.h"
#include "nvfp4_test.h"
#include "nvfp4_gemm_test.h"
#include "nvfp4_w4a4_test.h"
#include "moe_fp4_test.h"
#include "moe_relu2_test.h"
#include "moe_mma_fp4_test.h"

int main() {
    // EMU_ONLY=NAME runs one group of cases (see each group's comment), then stops.
    const std::pair<const char*, void (*)()> groups[] = {
        {"gdn_decode", [] { gdn_decode_tests(); }},
        {"norm", [] { norm_tests(); }},
        {"hybrid", [] { gdn_tests(); gdn_decode_tests(); mamba2_tests(); }},
        {"mamba2", [] { mamba2_tests(); }},
        {"attention", [] { attn_tests(); kv_fp8_tests(); flash_tests(); flash_wg_tests(); }},
        {"flash", [] { flash_tests(); }},
        {"flash_wg", [] { flash_wg_tests(); }},
        {"tables", [] { t_write_kv(); t_block_table_write(); }},
        {"router", [] { router_tests(); }},
        {"skeleton", [] { skeleton_tests(); }},
        {"argmax", [] { t_softmax(2, 3000); t_argmax_nan_first(); t_argmax_ids(5, 3000); }},
        {"sample", [] { t_sample_token_mask(); t_sample_noise(); t_sample_prepare(3000, false); t_sample_prepare(1537, true); t_sample_state(3000, false); t_sample_state(1537, true); t_sample_gumbel(1000); t_sample_candidates(1024, {1, 1000, 1024}); }},
        {"moe_mma", [] { moe_mma_tests(); }},
        {"moe_wg", [] { moe_wg_tests(); }},
        {"moe_pipe", [] { moe_pipe_tests(); }},
        {"moe_f32", [] { moe_f32_tests(); }},
        {"gemv", [] { t_gemv(1, 40, 64); t_gemv(1, 37, 2048); t_gemv(1, 21, 4096); t_gemv(1, 9, 2056); }},
        {"gemv_bf16_mma", [] { t_gemv_bf16_mma(4, 40, 256); t_gemv_bf16_mma(2, 1, 64); t_gemv_bf16_mma(8, 37, 1024); t_gemv_bf16_mma(3, 16, 2048); }},
        {"gemv_fp8", [] { t_gemv_fp8(1, 37, 2048); t_gemv_fp8(1, 40, 1024); t_gemv_fp8(8, 37, 2048); t_gemv_fp8(3, 20, 768); t_gemv_fp8(3, 13, 192); t_gemv_fp8(1, 16, 4096); t_gemv_fp8(9, 21, 128); t_gemv_fp8(45, 40, 256); t_gemv_fp8(64, 16, 192); }},
        {"fp8_rows", [] { fp8_rows_tests(); }},
        {"moe", [] { moe_tests(); }},
        {"gpt_oss", [] { gpt_oss_tests(); }},
        {"minimax", [] { minimax_tests(); }},
        {"mla", [] { mla_tests(); }},
        {"nvfp4", [] { nvfp4_tests(); }},
        {"nvfp4_gemm", [] { nvfp4_gemm_tests(); }},
        {"nvfp4_w4a4", [] { nvfp4_w4a4_tests(); }},
        {"moe_fp4", [] { moe_fp4_tests(); }},
        {"moe_relu2", [] { moe_relu2_tests(); }},
        {"moe_mma_fp4", [] { moe_mma_fp4_tests(); }},
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
    norm_tests();
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
    gpt_oss_tests();
    minimax_tests();
    mla_tests();
    skeleton_tests();
    t_fp8_decode();
    nvfp4_tests();
    nvfp4_gemm_tests();
    nvfp4_w4a4_tests();
    moe_fp4_tests();
    moe_relu2_tests();
    moe_mma_fp4_tests();
    t_gemv_fp8(1, 40, 1024);
    t_gemv_fp8(1, 37, 2064);
    t_gemv_bf16_mma(4, 40, 256); t_gemv_bf16_mma(2, 1, 64); t_gemv_bf16_mma(8, 37, 1024);
    t_gemv_fp8(3, 13, 272);
    t_gemv_fp8(8, 9, 2064);
    t_gemv_fp8(2, 11, 200);
    t_gemv_fp8(8, 37, 2048);
    t_gemv_fp8(3, 20, 768);
    t_gemv_fp8(3, 13, 192);
    t_gemv_fp8(9, 21, 128);
    t_gemv_fp8(45, 40, 256);
    fp8_rows_tests();
    t_fill_random_fp8();
    t_write_kv();
    t_block_table_write();
    t_rope_kv(5, 4, 2, 32, 32);
    t_rope_kv(3, 8, 1, 64, 32);
    t_rope_kv(2, 32, 8, 128, 128);
    kv_fp8_tests();
    flash_tests();
    flash_wg_tests();
    t_softmax(2, 3000);
    t_misc();
    t_sample_token_mask();
    t_sample_noise();
    t_argmax_nan_first();
    t_argmax_ids(5, 3000);
    gdn_tests();
    gdn_decode_tests();
    mamba2_tests();
    t_sample_prepare(3000, false);
    t_sample_prepare(1537, true);
    t_sample_state(3000, false);
    t_sample_state(1537, true);
    t_sample_gumbel(1000);
    t_sample_gumbel(1537);
    t_sample_candidates(3001, {1, 20, 256, 1024});
    t_sample_candidates(1024, {1, 1000, 1024});
    if (!getenv("EMU_QUICK")) {
        t_sample_prepare(151936, false);
        t_sample_state(151936, false);
        t_sample_gumbel(151936);
        t_sample_candidates(151936, {1, 20, 1024});
    }
    printf("%d failures\n", fails);
    return fails != 0;
}
