//! Kernel declarations (see `mod.rs`).

#[allow(unused_imports)]
use super::{CParam, Decl, Kernel, Module, bf16, c_void, kernels};
use std::marker::PhantomData;

kernels! {
    Moe [moe_route_f32] (ids: *mut i32, weights: *mut f32, logits: *const f32, tokens: i32, experts: i32, top_k: i32, norm_topk_prob: i32);
    Moe [moe_route_bf16] (ids: *mut i32, weights: *mut f32, logits: *const bf16, tokens: i32, experts: i32, top_k: i32, norm_topk_prob: i32);
    Moe [moe_group] (offsets: *mut i32, perm: *mut i32, ids: *const i32, pairs: i32, experts: i32);
    Moe [moe_active] (active: *mut i32, offsets: *const i32, experts: i32);
    Moe [moe_group_plan] (offsets: *mut i32, perm: *mut i32, active: *mut i32, ids: *const i32, pairs: i32, experts: i32);
    Moe [moe_plan_one_f32] (ids: *mut i32, weights: *mut f32, offsets: *mut i32, perm: *mut i32, active: *mut i32, logits: *const f32, experts: i32, top_k: i32, norm_topk_prob: i32);
    Moe [moe_plan_one_bf16] (ids: *mut i32, weights: *mut f32, offsets: *mut i32, perm: *mut i32, active: *mut i32, logits: *const bf16, experts: i32, top_k: i32, norm_topk_prob: i32);
    Moe [moe_plan_f32] (ids: *mut i32, weights: *mut f32, offsets: *mut i32, perm: *mut i32, active: *mut i32, logits: *const f32, tokens: i32, experts: i32, top_k: i32, norm_topk_prob: i32);
    Moe [moe_plan_bf16] (ids: *mut i32, weights: *mut f32, offsets: *mut i32, perm: *mut i32, active: *mut i32, logits: *const bf16, tokens: i32, experts: i32, top_k: i32, norm_topk_prob: i32);
    Moe [moe_gate_up_bf16_vec, moe_gate_up_bf16, moe_gate_up_dec_bf16_vec] (act: *mut bf16, x: *const bf16, w: *const bf16, scales: *const f32, offsets: *const i32, active: *const i32, perm: *const i32, experts: i32, top_k: i32, inter: i32, hidden: i32);
    Moe [moe_down_bf16_vec, moe_down_bf16] (ys: *mut f32, act: *const bf16, w: *const bf16, scales: *const f32, offsets: *const i32, active: *const i32, perm: *const i32, experts: i32, inter: i32, hidden: i32);
    Moe [moe_down_combine_bf16_vec, moe_down_combine_bf16, moe_down_combine_dec1_bf16_vec, moe_down_combine_dec2_bf16_vec, moe_down_combine_dec4_bf16_vec] (out: *mut f32, act: *const bf16, w: *const bf16, scales: *const f32, ids: *const i32, weights: *const f32, tokens: i32, top_k: i32, inter: i32, hidden: i32);
    Moe [moe_gate_up_fp8_vec, moe_gate_up_fp8, moe_gate_up_dec_fp8_vec] (act: *mut bf16, x: *const bf16, w: *const u8, scales: *const f32, offsets: *const i32, active: *const i32, perm: *const i32, experts: i32, top_k: i32, inter: i32, hidden: i32);
    Moe [moe_down_fp8_vec, moe_down_fp8] (ys: *mut f32, act: *const bf16, w: *const u8, scales: *const f32, offsets: *const i32, active: *const i32, perm: *const i32, experts: i32, inter: i32, hidden: i32);
    Moe [moe_down_combine_fp8_vec, moe_down_combine_fp8, moe_down_combine_dec1_fp8_vec, moe_down_combine_dec2_fp8_vec, moe_down_combine_dec4_fp8_vec] (out: *mut f32, act: *const bf16, w: *const u8, scales: *const f32, ids: *const i32, weights: *const f32, tokens: i32, top_k: i32, inter: i32, hidden: i32);
    Moe [moe_gate_up_fp32] (act: *mut f32, x: *const f32, w: *const f32, scales: *const f32, offsets: *const i32, active: *const i32, perm: *const i32, experts: i32, top_k: i32, inter: i32, hidden: i32);
    Moe [moe_down_fp32] (ys: *mut f32, act: *const f32, w: *const f32, scales: *const f32, offsets: *const i32, active: *const i32, perm: *const i32, experts: i32, inter: i32, hidden: i32);
    Moe [moe_down_combine_fp32] (out: *mut f32, act: *const f32, w: *const f32, scales: *const f32, ids: *const i32, weights: *const f32, tokens: i32, top_k: i32, inter: i32, hidden: i32);
    Moe [moe_route_sigmoid_f32] (ids: *mut i32, weights: *mut f32, logits: *const f32, tokens: i32, experts: i32, top_k: i32, norm_topk_prob: i32, bias: *const f32, scaling: f32, n_group: i32, topk_group: i32);
    Moe [moe_route_sigmoid_bf16] (ids: *mut i32, weights: *mut f32, logits: *const bf16, tokens: i32, experts: i32, top_k: i32, norm_topk_prob: i32, bias: *const f32, scaling: f32, n_group: i32, topk_group: i32);
    Moe [moe_plan_one_sigmoid_f32] (ids: *mut i32, weights: *mut f32, offsets: *mut i32, perm: *mut i32, active: *mut i32, logits: *const f32, experts: i32, top_k: i32, norm_topk_prob: i32, bias: *const f32, scaling: f32, n_group: i32, topk_group: i32);
    Moe [moe_plan_one_sigmoid_bf16] (ids: *mut i32, weights: *mut f32, offsets: *mut i32, perm: *mut i32, active: *mut i32, logits: *const bf16, experts: i32, top_k: i32, norm_topk_prob: i32, bias: *const f32, scaling: f32, n_group: i32, topk_group: i32);
    Moe [moe_plan_sigmoid_f32] (ids: *mut i32, weights: *mut f32, offsets: *mut i32, perm: *mut i32, active: *mut i32, logits: *const f32, tokens: i32, experts: i32, top_k: i32, norm_topk_prob: i32, bias: *const f32, scaling: f32, n_group: i32, topk_group: i32);
    Moe [moe_plan_sigmoid_bf16] (ids: *mut i32, weights: *mut f32, offsets: *mut i32, perm: *mut i32, active: *mut i32, logits: *const bf16, tokens: i32, experts: i32, top_k: i32, norm_topk_prob: i32, bias: *const f32, scaling: f32, n_group: i32, topk_group: i32);
    Moe [moe_router_plan_one] (logits: *mut f32, x: *const bf16, router: *const bf16, experts: i32, hidden: i32, ticket: *mut u32, ids: *mut i32, weights: *mut f32, offsets: *mut i32, perm: *mut i32, active: *mut i32, top_k: i32, norm_topk_prob: i32);
    Moe [moe_combine] (out: *mut f32, ys: *const f32, weights: *const f32, tokens: u64, top_k: i32, hidden: i32);
    Moe [moe_gate_up_clamped_bf16_vec, moe_gate_up_clamped_bf16] (act: *mut bf16, x: *const bf16, w: *const bf16, scales: *const f32, offsets: *const i32, active: *const i32, perm: *const i32, experts: i32, top_k: i32, inter: i32, hidden: i32, bias: *const bf16, alpha: f32, limit: f32);
    Moe [moe_gate_up_clamped_fp32] (act: *mut f32, x: *const f32, w: *const f32, scales: *const f32, offsets: *const i32, active: *const i32, perm: *const i32, experts: i32, top_k: i32, inter: i32, hidden: i32, bias: *const f32, alpha: f32, limit: f32);
    Moe [moe_combine_bias_bf16] (out: *mut f32, ys: *const f32, weights: *const f32, ids: *const i32, bias: *const bf16, tokens: u64, top_k: i32, hidden: i32);
    Moe [moe_combine_bias_f32] (out: *mut f32, ys: *const f32, weights: *const f32, ids: *const i32, bias: *const f32, tokens: u64, top_k: i32, hidden: i32);
    Moe [moe_gate_up_nvfp4, moe_gate_up_mxfp4, moe_gate_up_dec_nvfp4, moe_gate_up_dec_mxfp4] (act: *mut bf16, x: *const bf16, w: *const u8, scales: *const u8, globals: *const f32, offsets: *const i32, active: *const i32, perm: *const i32, experts: i32, top_k: i32, inter: i32, hidden: i32);
    Moe [moe_down_nvfp4, moe_down_mxfp4] (ys: *mut f32, act: *const bf16, w: *const u8, scales: *const u8, globals: *const f32, offsets: *const i32, active: *const i32, perm: *const i32, experts: i32, inter: i32, hidden: i32);
    Moe [moe_down_combine_nvfp4, moe_down_combine_mxfp4] (out: *mut f32, act: *const bf16, w: *const u8, scales: *const u8, globals: *const f32, ids: *const i32, weights: *const f32, tokens: i32, top_k: i32, inter: i32, hidden: i32);
    Moe [moe_down_combine_dec1_nvfp4, moe_down_combine_dec2_nvfp4, moe_down_combine_dec4_nvfp4, moe_down_combine_dec1_mxfp4, moe_down_combine_dec2_mxfp4, moe_down_combine_dec4_mxfp4] (out: *mut f32, act: *const bf16, w: *const u8, scales: *const u8, globals: *const f32, ids: *const i32, weights: *const f32, tokens: i32, top_k: i32, inter: i32, hidden: i32, bias: *const bf16);
    Moe [moe_gate_up_clamped_nvfp4, moe_gate_up_clamped_mxfp4, moe_gate_up_clamped_dec_nvfp4, moe_gate_up_clamped_dec_mxfp4] (act: *mut bf16, x: *const bf16, w: *const u8, scales: *const u8, globals: *const f32, offsets: *const i32, active: *const i32, perm: *const i32, experts: i32, top_k: i32, inter: i32, hidden: i32, bias: *const bf16, alpha: f32, limit: f32);
    Moe [moe_up_relu2_bf16_vec, moe_up_relu2_bf16] (act: *mut bf16, x: *const bf16, w: *const bf16, scales: *const f32, offsets: *const i32, active: *const i32, perm: *const i32, experts: i32, top_k: i32, inter: i32, hidden: i32);
    Moe [moe_up_relu2_fp8_vec, moe_up_relu2_fp8] (act: *mut bf16, x: *const bf16, w: *const u8, scales: *const f32, offsets: *const i32, active: *const i32, perm: *const i32, experts: i32, top_k: i32, inter: i32, hidden: i32);
    Moe [moe_up_relu2_fp32] (act: *mut f32, x: *const f32, w: *const f32, scales: *const f32, offsets: *const i32, active: *const i32, perm: *const i32, experts: i32, top_k: i32, inter: i32, hidden: i32);
    Moe [moe_up_relu2_nvfp4, moe_up_relu2_mxfp4] (act: *mut bf16, x: *const bf16, w: *const u8, scales: *const u8, globals: *const f32, offsets: *const i32, active: *const i32, perm: *const i32, experts: i32, top_k: i32, inter: i32, hidden: i32);
    Moe [dequant_mxfp4_bf16] (out: *mut bf16, w: *const u8, scales: *const u8, rows: u64, k: i32);
    MoeMma [moe_tiles] (tiles: *mut i32, offsets: *const i32, experts: i32, max_tiles: i32);
    MoeMma [moe_gate_up_mma_bf16] (act: *mut bf16, x: *const bf16, x_scales: *const f32, w: *const bf16, w_scales: *const f32, tiles: *const i32, offsets: *const i32, perm: *const i32, top_k: i32, inter: i32, hidden: i32);
    MoeMma [moe_down_mma_bf16] (ys: *mut f32, act: *const bf16, act_scales: *const f32, w: *const bf16, w_scales: *const f32, tiles: *const i32, offsets: *const i32, perm: *const i32, rows: i32, hidden: i32, inter: i32);
    MoeMma [moe_gate_up_mma_fp8] (act: *mut bf16, x: *const bf16, x_scales: *const f32, w: *const u8, w_scales: *const f32, tiles: *const i32, offsets: *const i32, perm: *const i32, top_k: i32, inter: i32, hidden: i32);
    MoeMma [moe_down_mma_fp8] (ys: *mut f32, act: *const bf16, act_scales: *const f32, w: *const u8, w_scales: *const f32, tiles: *const i32, offsets: *const i32, perm: *const i32, rows: i32, hidden: i32, inter: i32);
    MoeMma [moe_gate_up_mma_fp8act] (act: *mut bf16, x: *const u8, x_scales: *const f32, w: *const u8, w_scales: *const f32, tiles: *const i32, offsets: *const i32, perm: *const i32, top_k: i32, inter: i32, hidden: i32);
    MoeMma [moe_down_mma_fp8act] (ys: *mut f32, act: *const u8, act_scales: *const f32, w: *const u8, w_scales: *const f32, tiles: *const i32, offsets: *const i32, perm: *const i32, rows: i32, hidden: i32, inter: i32);
    MoeMma [moe_gate_up_fp8_small, moe_gate_up_fp8_small_any, moe_gate_up_fp8_pipe] (act: *mut bf16, x: *const bf16, w: *const u8, scales: *const f32, offsets: *const i32, active: *const i32, perm: *const i32, experts: i32, top_k: i32, inter: i32, hidden: i32);
    MoeMma [moe_down_fp8_small, moe_down_fp8_small_any, moe_down_fp8_pipe] (ys: *mut f32, act: *const bf16, w: *const u8, scales: *const f32, offsets: *const i32, active: *const i32, perm: *const i32, experts: i32, inter: i32, hidden: i32);
    MoeMma [moe_gate_up_bf16_small_any] (act: *mut bf16, x: *const bf16, w: *const bf16, scales: *const f32, offsets: *const i32, active: *const i32, perm: *const i32, experts: i32, top_k: i32, inter: i32, hidden: i32);
    MoeMma [moe_down_bf16_small_any] (ys: *mut f32, act: *const bf16, w: *const bf16, scales: *const f32, offsets: *const i32, active: *const i32, perm: *const i32, experts: i32, inter: i32, hidden: i32);
    MoeMma [moe_gate_up_clamped_mma_bf16] (act: *mut bf16, x: *const bf16, x_scales: *const f32, w: *const bf16, w_scales: *const f32, tiles: *const i32, offsets: *const i32, perm: *const i32, top_k: i32, inter: i32, hidden: i32, bias: *const bf16, alpha: f32, limit: f32);
    MoeMma [moe_gate_up_mma_nvfp4, moe_gate_up_mma_mxfp4] (act: *mut bf16, x: *const bf16, w: *const u8, scales: *const u8, globals: *const f32, tiles: *const i32, offsets: *const i32, perm: *const i32, top_k: i32, inter: i32, hidden: i32);
    MoeMma [moe_down_mma_nvfp4, moe_down_mma_mxfp4] (ys: *mut f32, act: *const bf16, w: *const u8, scales: *const u8, globals: *const f32, tiles: *const i32, offsets: *const i32, perm: *const i32, rows: i32, hidden: i32, inter: i32);
    MoeMma [moe_gate_up_clamped_mma_nvfp4, moe_gate_up_clamped_mma_mxfp4] (act: *mut bf16, x: *const bf16, w: *const u8, scales: *const u8, globals: *const f32, tiles: *const i32, offsets: *const i32, perm: *const i32, top_k: i32, inter: i32, hidden: i32, bias: *const bf16, alpha: f32, limit: f32);
    MoeMma [moe_gate_up_nvfp4_small_any, moe_gate_up_mxfp4_small_any] (act: *mut bf16, x: *const bf16, w: *const u8, scales: *const u8, globals: *const f32, offsets: *const i32, active: *const i32, perm: *const i32, experts: i32, top_k: i32, inter: i32, hidden: i32);
    MoeMma [moe_down_nvfp4_small_any, moe_down_mxfp4_small_any] (ys: *mut f32, act: *const bf16, w: *const u8, scales: *const u8, globals: *const f32, offsets: *const i32, active: *const i32, perm: *const i32, experts: i32, inter: i32, hidden: i32);
    MoeMma [moe_gate_up_clamped_nvfp4_small_any, moe_gate_up_clamped_mxfp4_small_any] (act: *mut bf16, x: *const bf16, w: *const u8, scales: *const u8, globals: *const f32, offsets: *const i32, active: *const i32, perm: *const i32, experts: i32, top_k: i32, inter: i32, hidden: i32, bias: *const bf16, alpha: f32, limit: f32);
    MoeMma [moe_gate_up_clamped_bf16_small_any] (act: *mut bf16, x: *const bf16, w: *const bf16, scales: *const f32, offsets: *const i32, active: *const i32, perm: *const i32, experts: i32, top_k: i32, inter: i32, hidden: i32, bias: *const bf16, alpha: f32, limit: f32);
    MoeMma [moe_quant_fp8_f32] (q: *mut u8, scales: *mut f32, x: *const f32, rows: u64, k: i32);
    MoeMma [moe_quant_fp8_bf16] (q: *mut u8, scales: *mut f32, x: *const bf16, rows: u64, k: i32);
}
