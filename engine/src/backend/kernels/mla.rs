//! Kernel declarations (see `mod.rs`).

#[allow(unused_imports)]
use super::{CParam, Decl, Kernel, Module, bf16, c_void, kernels};
use std::marker::PhantomData;

kernels! {
    Mla [mla_rope_kv_bf16] (q: *mut bf16, latent: *mut bf16, cache: *mut bf16, positions: *const u32, slot_mapping: *const u32, inv_freq: *const f32, scale: f32, heads: i32, nope: i32, rope: i32, lat: i32, interleaved: i32);
    Mla [mla_rope_kv_f32] (q: *mut f32, latent: *mut f32, cache: *mut bf16, positions: *const u32, slot_mapping: *const u32, inv_freq: *const f32, scale: f32, heads: i32, nope: i32, rope: i32, lat: i32, interleaved: i32);
    Mla [mla_rope_kv_fp32] (q: *mut f32, latent: *mut f32, cache: *mut f32, positions: *const u32, slot_mapping: *const u32, inv_freq: *const f32, scale: f32, heads: i32, nope: i32, rope: i32, lat: i32, interleaved: i32);
    Mla [mla_rope_kv_bf16_kv8] (q: *mut bf16, latent: *mut bf16, cache: *mut u8, positions: *const u32, slot_mapping: *const u32, inv_freq: *const f32, scale: f32, heads: i32, nope: i32, rope: i32, lat: i32, interleaved: i32, scales: *mut f32);
    Mla [mla_rope_kv_f32_kv8] (q: *mut f32, latent: *mut f32, cache: *mut u8, positions: *const u32, slot_mapping: *const u32, inv_freq: *const f32, scale: f32, heads: i32, nope: i32, rope: i32, lat: i32, interleaved: i32, scales: *mut f32);
    Mla [mla_q_absorb_bf16] (qf: *mut f32, q: *const bf16, kv_b: *const bf16, tokens: i32, heads: i32, nope: i32, rope: i32, v: i32, lat: i32);
    Mla [mla_q_absorb_f32] (qf: *mut f32, q: *const f32, kv_b: *const bf16, tokens: i32, heads: i32, nope: i32, rope: i32, v: i32, lat: i32);
    Mla [mla_q_absorb_fp32] (qf: *mut f32, q: *const f32, kv_b: *const f32, tokens: i32, heads: i32, nope: i32, rope: i32, v: i32, lat: i32);
    Mla [mla_attend_bf16] (partial: *mut f32, qf: *const f32, cache: *const bf16, positions: *const u32, row_seq: *const u32, block_tables: *const u32, max_blocks: i32, block_size: i32, heads: i32, rope: i32, lat: i32, scale: f32);
    Mla [mla_attend_fp32] (partial: *mut f32, qf: *const f32, cache: *const f32, positions: *const u32, row_seq: *const u32, block_tables: *const u32, max_blocks: i32, block_size: i32, heads: i32, rope: i32, lat: i32, scale: f32);
    Mla [mla_attend_kv8] (partial: *mut f32, qf: *const f32, cache: *const u8, positions: *const u32, row_seq: *const u32, block_tables: *const u32, max_blocks: i32, block_size: i32, heads: i32, rope: i32, lat: i32, scale: f32, scales: *const f32);
    Mla [mla_out_bf16] (out: *mut bf16, partial: *const f32, kv_b: *const bf16, tokens: i32, heads: i32, nope: i32, v: i32, lat: i32, splits: i32);
    Mla [mla_out_fp32] (out: *mut f32, partial: *const f32, kv_b: *const f32, tokens: i32, heads: i32, nope: i32, v: i32, lat: i32, splits: i32);
}
