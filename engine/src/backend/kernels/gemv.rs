//! Kernel declarations (see `mod.rs`).

#[allow(unused_imports)]
use super::{CParam, Decl, Kernel, Module, bf16, c_void, kernels};
use std::marker::PhantomData;

kernels! {
    Fp8 [gemv_fp8_m1, gemv_fp8_m2, gemv_fp8_m3, gemv_fp8_m4, gemv_fp8_m5, gemv_fp8_m6, gemv_fp8_m7, gemv_fp8_m8, gemv_fp8_full_r2g4, gemv_fp8_full_r1g8] (out: *mut f32, x: *const bf16, w: *const u8, scales: *const f32, n: i32, k: i32);
    Fp8 [gemv_fp8_mma, gemv_fp8_mma_many, gemv_fp8_rows] (out: *mut f32, x: *const bf16, w: *const u8, scales: *const f32, m_total: i32, n_total: i32, k: i32);
    Fp8 [fp8_gemm_rows_m16, fp8_gemm_rows_m32, fp8_gemm_rows_m64, fp8_gemm_rows_m128] (out: *mut f32, part: *mut f32, tickets: *mut u32, x: *const bf16, w: *const u8, scales: *const f32, m_total: i32, n_total: i32, k: i32);
    Fp8 [gemv_bf16_mma] (out: *mut f32, x: *const bf16, w: *const bf16, m_total: i32, n_total: i32, k: i32);
    Fp8 [dequant_fp8_bf16, dequant_fp8_bf16_vec] (out: *mut bf16, w: *const u8, scales: *const f32, rows: u64, k: i32);
    Fp8 [dequant_fp8_fp32] (out: *mut f32, w: *const u8, scales: *const f32, rows: u64, k: i32);
    Fp8 [gemv_nvfp4_mma_r2_b1, gemv_nvfp4_mma_r2_b2, gemv_nvfp4_mma_r2_b4] (out: *mut f32, x: *const bf16, w: *const u8, scales: *const u8, globals: *const f32, m_total: i32, n_total: i32, k: i32);
    Fp8 [nvfp4_gemm_r1_x4_w4, nvfp4_gemm_r1_x4_w2, nvfp4_gemm_r1_x8_w4, nvfp4_gemm_r1_x8_w2, nvfp4_gemm_r2_x8_w4] (out: *mut f32, x: *const bf16, w: *const u8, scales: *const u8, globals: *const f32, m_total: i32, n_total: i32, k: i32);
    Fp8 [quant_nvfp4_rows] (q: *mut u8, sc: *mut u8, g: *mut f32, x: *const bf16, k: i32);
    Fp8 [gemm_nvfp4_w4a4_r2_b1, gemm_nvfp4_w4a4_r2_b2, gemm_nvfp4_w4a4_r2_b4] (out: *mut f32, xq: *const u8, xs: *const u8, xg: *const f32, w: *const u8, ws: *const u8, wm: *const f32, m_total: i32, n_total: i32, k: i32);
    Fp8 [gemv_nvfp4_rows] (out: *mut f32, x: *const bf16, w: *const u8, scales: *const u8, globals: *const f32, m_total: i32, n_total: i32, k: i32);
    Fp8 [dequant_nvfp4_bf16] (out: *mut bf16, w: *const u8, scales: *const u8, globals: *const f32, rows: u64, k: i32);
    Fp8 [fill_random_fp8] (out: *mut u8, n: u64, seed: u64, scales: *mut f32, n_scales: u64, scale: f32);
    Fp8 [fill_random_nvfp4_bytes] (out: *mut u8, n: u64, seed: u64, shift: i32, bits: u32);
    Gemv [gemv_m1, gemv_m2, gemv_m3, gemv_m4, gemv_m5, gemv_m6, gemv_m7, gemv_m8, gemv_full_r1g8, gemv_full_r2g8, gemv_full_r1g16] (out: *mut f32, x: *const bf16, w: *const bf16, n: i32, k: i32);
    Gemv [gemv_bias_m1] (out: *mut f32, x: *const bf16, w: *const bf16, n: i32, k: i32, bias: *const bf16);
    Gemv [gemv_silu_m1, gemv_silu_m2, gemv_silu_m3, gemv_silu_m4, gemv_silu_m5, gemv_silu_m6, gemv_silu_m7, gemv_silu_m8] (out: *mut bf16, x: *const bf16, w: *const bf16, inter: i32, k: i32);
}
