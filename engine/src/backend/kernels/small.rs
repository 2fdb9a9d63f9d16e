//! Kernel declarations (see `mod.rs`).

#[allow(unused_imports)]
use super::{CParam, Decl, Kernel, Module, bf16, c_void, kernels};
use std::marker::PhantomData;

kernels! {
    Activation [silu_mul_f32] (out: *mut bf16, gate_up: *const f32, rows: u64, inter: u64);
    Activation [silu_mul_bf16] (out: *mut bf16, gate_up: *const bf16, rows: u64, inter: u64);
    Activation [silu_mul_fp32] (out: *mut f32, gate_up: *const f32, rows: u64, inter: u64);
    Activation [gelu_tanh_mul_f32] (out: *mut bf16, gate_up: *const f32, rows: u64, inter: u64);
    Activation [gelu_tanh_mul_bf16] (out: *mut bf16, gate_up: *const bf16, rows: u64, inter: u64);
    Activation [gelu_tanh_mul_fp32] (out: *mut f32, gate_up: *const f32, rows: u64, inter: u64);
    Activation [scale_f32] (x: *mut f32, n: u64, factor: f32);
    Activation [add_bias_f32_bf16] (x: *mut f32, bias: *const bf16, rows: u64, cols: u64);
    Activation [add_bias_bf16_bf16] (x: *mut bf16, bias: *const bf16, rows: u64, cols: u64);
    Activation [add_bias_f32_f32] (x: *mut f32, bias: *const f32, rows: u64, cols: u64);
    Activation [add_bias_bf16_f32] (x: *mut bf16, bias: *const f32, rows: u64, cols: u64);
    Convert [fill_random_bf16] (out: *mut bf16, n: u64, seed: u64, half_width: f32);
    Convert [fill_random_f32] (out: *mut f32, n: u64, seed: u64, half_width: f32);
    Convert [fill_const_bf16] (out: *mut bf16, n: u64, value: f32);
    Convert [fill_const_f32] (out: *mut f32, n: u64, value: f32);
    Convert [cast_f32_bf16] (out: *mut bf16, in: *const f32, n: u64);
    Convert [cast_bf16_f32] (out: *mut f32, in: *const bf16, n: u64);
    Embedding [embedding_bf16] (out: *mut f32, table: *const bf16, token_ids: *const u32, hidden: i32);
    Embedding [embedding_f32] (out: *mut f32, table: *const f32, token_ids: *const u32, hidden: i32);
    Embedding [gather_rows_bf16] (out: *mut bf16, x: *const bf16, rows: *const u32, width: i32);
    Embedding [gather_rows_f32] (out: *mut f32, x: *const f32, rows: *const u32, width: i32);
    Norm [rms_norm_f32] (out: *mut bf16, x: *const f32, w: *const bf16, hidden: i32, eps: f32);
    Norm [rms_norm_bf16] (out: *mut bf16, x: *const bf16, w: *const bf16, hidden: i32, eps: f32);
    Norm [add_rms_norm_f32_f32] (out: *mut bf16, residual: *mut f32, x: *const f32, w: *const bf16, hidden: i32, eps: f32);
    Norm [add_rms_norm_f32_bf16] (out: *mut bf16, residual: *mut f32, x: *const bf16, w: *const bf16, hidden: i32, eps: f32);
    Norm [add_rms_norm_bf16_f32] (out: *mut bf16, residual: *mut bf16, x: *const f32, w: *const bf16, hidden: i32, eps: f32);
    Norm [add_rms_norm_bf16_bf16] (out: *mut bf16, residual: *mut bf16, x: *const bf16, w: *const bf16, hidden: i32, eps: f32);
    Norm [rms_norm_fp32] (out: *mut f32, x: *const f32, w: *const f32, hidden: i32, eps: f32);
    Norm [add_rms_norm_fp32] (out: *mut f32, residual: *mut f32, x: *const f32, w: *const f32, hidden: i32, eps: f32);
    Norm [rms_norm_cols_f32] (x: *mut f32, w: *const bf16, start: i32, n: i32, cols: i32, eps: f32);
    Norm [rms_norm_cols_bf16] (x: *mut bf16, w: *const bf16, start: i32, n: i32, cols: i32, eps: f32);
    Norm [rms_norm_cols_fp32] (x: *mut f32, w: *const f32, start: i32, n: i32, cols: i32, eps: f32);
    Rope [qk_norm_rope_f32] (qkv: *mut f32, positions: *const u32, q_w: *const bf16, k_w: *const bf16, inv_freq: *const f32, num_heads: i32, num_kv_heads: i32, head_dim: i32, half_rot: i32, scale: f32, eps: f32);
    Rope [qk_norm_rope_kv_f32] (qkv: *mut f32, positions: *const u32, q_w: *const bf16, k_w: *const bf16, inv_freq: *const f32, num_heads: i32, num_kv_heads: i32, head_dim: i32, half_rot: i32, scale: f32, eps: f32, k_cache: *mut bf16, v_cache: *mut bf16, slot_mapping: *const u32);
    Rope [qk_norm_rope_bf16] (qkv: *mut bf16, positions: *const u32, q_w: *const bf16, k_w: *const bf16, inv_freq: *const f32, num_heads: i32, num_kv_heads: i32, head_dim: i32, half_rot: i32, scale: f32, eps: f32);
    Rope [qk_norm_rope_kv_bf16] (qkv: *mut bf16, positions: *const u32, q_w: *const bf16, k_w: *const bf16, inv_freq: *const f32, num_heads: i32, num_kv_heads: i32, head_dim: i32, half_rot: i32, scale: f32, eps: f32, k_cache: *mut bf16, v_cache: *mut bf16, slot_mapping: *const u32);
    Rope [qk_norm_rope_fp32] (qkv: *mut f32, positions: *const u32, q_w: *const f32, k_w: *const f32, inv_freq: *const f32, num_heads: i32, num_kv_heads: i32, head_dim: i32, half_rot: i32, scale: f32, eps: f32);
    Rope [qk_norm_rope_kv_fp32] (qkv: *mut f32, positions: *const u32, q_w: *const f32, k_w: *const f32, inv_freq: *const f32, num_heads: i32, num_kv_heads: i32, head_dim: i32, half_rot: i32, scale: f32, eps: f32, k_cache: *mut f32, v_cache: *mut f32, slot_mapping: *const u32);
    Rope [qk_norm_rope_kv_f32_kv8] (qkv: *mut f32, positions: *const u32, q_w: *const bf16, k_w: *const bf16, inv_freq: *const f32, num_heads: i32, num_kv_heads: i32, head_dim: i32, half_rot: i32, scale: f32, eps: f32, k_cache: *mut u8, v_cache: *mut u8, slot_mapping: *const u32, k_scales: *mut f32, v_scales: *mut f32);
    Rope [qk_norm_rope_kv_bf16_kv8] (qkv: *mut bf16, positions: *const u32, q_w: *const bf16, k_w: *const bf16, inv_freq: *const f32, num_heads: i32, num_kv_heads: i32, head_dim: i32, half_rot: i32, scale: f32, eps: f32, k_cache: *mut u8, v_cache: *mut u8, slot_mapping: *const u32, k_scales: *mut f32, v_scales: *mut f32);
    Rope [rope_kv_f32] (qkv: *mut f32, positions: *const u32, inv_freq: *const f32, num_heads: i32, num_kv_heads: i32, head_dim: i32, half_rot: i32, scale: f32, k_cache: *mut bf16, v_cache: *mut bf16, slot_mapping: *const u32);
    Rope [rope_kv_bf16] (qkv: *mut bf16, positions: *const u32, inv_freq: *const f32, num_heads: i32, num_kv_heads: i32, head_dim: i32, half_rot: i32, scale: f32, k_cache: *mut bf16, v_cache: *mut bf16, slot_mapping: *const u32);
    Rope [rope_kv_fp32] (qkv: *mut f32, positions: *const u32, inv_freq: *const f32, num_heads: i32, num_kv_heads: i32, head_dim: i32, half_rot: i32, scale: f32, k_cache: *mut f32, v_cache: *mut f32, slot_mapping: *const u32);
    Rope [rope_kv_f32_kv8] (qkv: *mut f32, positions: *const u32, inv_freq: *const f32, num_heads: i32, num_kv_heads: i32, head_dim: i32, half_rot: i32, scale: f32, k_cache: *mut u8, v_cache: *mut u8, slot_mapping: *const u32, k_scales: *mut f32, v_scales: *mut f32);
    Rope [rope_kv_bf16_kv8] (qkv: *mut bf16, positions: *const u32, inv_freq: *const f32, num_heads: i32, num_kv_heads: i32, head_dim: i32, half_rot: i32, scale: f32, k_cache: *mut u8, v_cache: *mut u8, slot_mapping: *const u32, k_scales: *mut f32, v_scales: *mut f32);
    Softmax [log_softmax_f32] (x: *mut f32, vocab: i32);
    Softmax [argmax_part_f32] (part_v: *mut f32, part_i: *mut u32, x: *const f32, rows: *const u32, vocab: i32);
    Softmax [argmax_final_f32] (out: *mut u32, part_v: *const f32, part_i: *const u32, x: *const f32, rows: *const u32, vocab: i32, splits: i32);
    Softmax [argmax_final_ids_f32] (out: *mut f32, part_v: *const f32, part_i: *const u32, x: *const f32, rows: *const u32, vocab: i32, splits: i32);
    Softmax [feed_token_ids] (token_ids: *mut u32, ids: *const f32, n: i32);
}
