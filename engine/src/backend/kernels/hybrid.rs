//! Kernel declarations (see `mod.rs`).

#[allow(unused_imports)]
use super::{CParam, Decl, Kernel, Module, bf16, c_void, kernels};
use std::marker::PhantomData;

kernels! {
    Hybrid [gdn_conv_f32] (out: *mut f32, mixed: *const f32, taps: *const f32, conv_state: *mut f32, row_seq: *const u32, seq_starts: *const u32, slots: *const u32, save_starts: *const u32, saves: *const u32, rows: i32, channels: i32, k: i32, width: i32);
    Hybrid [gdn_conv_bf16] (out: *mut f32, mixed: *const bf16, taps: *const f32, conv_state: *mut f32, row_seq: *const u32, seq_starts: *const u32, slots: *const u32, save_starts: *const u32, saves: *const u32, rows: i32, channels: i32, k: i32, width: i32);
    Hybrid [gdn_recurrent_d16_f32, gdn_recurrent_d32_f32, gdn_recurrent_d64_f32, gdn_recurrent_d128_f32, gdn_recurrent_d256_f32] (core: *mut f32, conv: *const f32, mixed: *const f32, neg_a: *const f32, dt_bias: *const f32, state: *mut f32, seq_starts: *const u32, slots: *const u32, save_starts: *const u32, saves: *const u32, nk: i32, nv: i32, dv: i32, width: i32, chunk_min: i32);
    Hybrid [gdn_recurrent_d16_bf16, gdn_recurrent_d32_bf16, gdn_recurrent_d64_bf16, gdn_recurrent_d128_bf16, gdn_recurrent_d256_bf16] (core: *mut f32, conv: *const f32, mixed: *const bf16, neg_a: *const f32, dt_bias: *const f32, state: *mut f32, seq_starts: *const u32, slots: *const u32, save_starts: *const u32, saves: *const u32, nk: i32, nv: i32, dv: i32, width: i32, chunk_min: i32);
    Hybrid [gdn_chunk_plan] (plan: *mut u32, seq_starts: *const u32, save_starts: *const u32, saves: *const u32, seqs: i32, chunk_min: i32, max_chunks: i32);
    Hybrid [gdn_chunk_prep_d16_f32, gdn_chunk_prep_d32_f32, gdn_chunk_prep_d64_f32, gdn_chunk_prep_d128_f32] (scratch: *mut f32, conv: *const f32, mixed: *const f32, neg_a: *const f32, dt_bias: *const f32, plan: *const u32, seqs: i32, nk: i32, nv: i32, dv: i32, width: i32);
    Hybrid [gdn_chunk_prep_d16_bf16, gdn_chunk_prep_d32_bf16, gdn_chunk_prep_d64_bf16, gdn_chunk_prep_d128_bf16] (scratch: *mut f32, conv: *const f32, mixed: *const bf16, neg_a: *const f32, dt_bias: *const f32, plan: *const u32, seqs: i32, nk: i32, nv: i32, dv: i32, width: i32);
    Hybrid [gdn_chunk_state_d16, gdn_chunk_state_d32, gdn_chunk_state_d64, gdn_chunk_state_d128] (core: *mut f32, conv: *const f32, scratch: *const f32, state: *mut f32, plan: *const u32, seq_starts: *const u32, slots: *const u32, save_starts: *const u32, saves: *const u32, seqs: i32, chunk_min: i32, nk: i32, nv: i32, dv: i32);
    Hybrid [gdn_norm_f32_bf16] (out: *mut bf16, core: *const f32, mixed: *const f32, w: *const f32, heads: i32, nv: i32, dv: i32, width: i32, z_at: i32, eps: f32);
    Hybrid [gdn_norm_bf16_bf16] (out: *mut bf16, core: *const f32, mixed: *const bf16, w: *const f32, heads: i32, nv: i32, dv: i32, width: i32, z_at: i32, eps: f32);
    Hybrid [gdn_norm_f32_f32] (out: *mut f32, core: *const f32, mixed: *const f32, w: *const f32, heads: i32, nv: i32, dv: i32, width: i32, z_at: i32, eps: f32);
    Hybrid [gdn_norm_bf16_f32] (out: *mut f32, core: *const f32, mixed: *const bf16, w: *const f32, heads: i32, nv: i32, dv: i32, width: i32, z_at: i32, eps: f32);
    Hybrid [gdn_decode_d16_f32_bf16, gdn_decode_d32_f32_bf16, gdn_decode_d64_f32_bf16, gdn_decode_d128_f32_bf16, gdn_decode_d256_f32_bf16] (out: *mut bf16, core: *mut f32, tickets: *mut u32, mixed: *const f32, taps: *const f32, conv_state: *mut f32, neg_a: *const f32, dt_bias: *const f32, norm_w: *const f32, state: *mut f32, slots: *const u32, save_starts: *const u32, saves: *const u32, nk: i32, nv: i32, k: i32, width: i32, eps: f32);
    Hybrid [gdn_decode_d16_bf16_bf16, gdn_decode_d32_bf16_bf16, gdn_decode_d64_bf16_bf16, gdn_decode_d128_bf16_bf16, gdn_decode_d256_bf16_bf16] (out: *mut bf16, core: *mut f32, tickets: *mut u32, mixed: *const bf16, taps: *const f32, conv_state: *mut f32, neg_a: *const f32, dt_bias: *const f32, norm_w: *const f32, state: *mut f32, slots: *const u32, save_starts: *const u32, saves: *const u32, nk: i32, nv: i32, k: i32, width: i32, eps: f32);
    Hybrid [gdn_decode_d16_f32_f32, gdn_decode_d32_f32_f32, gdn_decode_d64_f32_f32, gdn_decode_d128_f32_f32, gdn_decode_d256_f32_f32] (out: *mut f32, core: *mut f32, tickets: *mut u32, mixed: *const f32, taps: *const f32, conv_state: *mut f32, neg_a: *const f32, dt_bias: *const f32, norm_w: *const f32, state: *mut f32, slots: *const u32, save_starts: *const u32, saves: *const u32, nk: i32, nv: i32, k: i32, width: i32, eps: f32);
    Hybrid [gdn_decode_d16_bf16_f32, gdn_decode_d32_bf16_f32, gdn_decode_d64_bf16_f32, gdn_decode_d128_bf16_f32, gdn_decode_d256_bf16_f32] (out: *mut f32, core: *mut f32, tickets: *mut u32, mixed: *const bf16, taps: *const f32, conv_state: *mut f32, neg_a: *const f32, dt_bias: *const f32, norm_w: *const f32, state: *mut f32, slots: *const u32, save_starts: *const u32, saves: *const u32, nk: i32, nv: i32, k: i32, width: i32, eps: f32);
    Hybrid [sigmoid_mul] (x: *mut c_void, x_bf16: i32, gate: *const c_void, gate_bf16: i32, n: u64);
    Hybrid [add_assign] (x: *mut c_void, x_bf16: i32, y: *const c_void, y_bf16: i32, n: u64);
    Hybrid [add_gated] (out: *mut c_void, out_bf16: i32, routed: *const c_void, routed_bf16: i32, gate: *const c_void, gate_bf16: i32, rows: u64, cols: u64);
    Hybrid [state_row] (t: *mut f32, n: u64, from: u64, to: u64, zero: i32);
}
