//! Kernel declarations of the flash prefill attention (`attention_flash.cu`; see `mod.rs`).

#[allow(unused_imports)]
use super::{CParam, Decl, Kernel, Module, bf16, c_void, kernels};
use std::marker::PhantomData;

kernels! {
    AttentionFlash [attention_flash_f32_d64, attention_flash_f32_d128, attention_flash_f32_d256] (out: *mut bf16, qkv: *const f32, k_cache: *const bf16, v_cache: *const bf16, positions: *const u32, row_seq: *const u32, block_tables: *const u32, tiles: *const u32, max_blocks: i32, block_size: i32, num_heads: i32, num_kv_heads: i32, scale: f32, k_scales: *const f32, v_scales: *const f32, window: i32, sinks: *const f32);
    AttentionFlash [attention_flash_bf16_d64, attention_flash_bf16_d128, attention_flash_bf16_d256] (out: *mut bf16, qkv: *const bf16, k_cache: *const bf16, v_cache: *const bf16, positions: *const u32, row_seq: *const u32, block_tables: *const u32, tiles: *const u32, max_blocks: i32, block_size: i32, num_heads: i32, num_kv_heads: i32, scale: f32, k_scales: *const f32, v_scales: *const f32, window: i32, sinks: *const f32);
    AttentionFlash [attention_flash_f32_kv8_d64, attention_flash_f32_kv8_d128, attention_flash_f32_kv8_d256] (out: *mut bf16, qkv: *const f32, k_cache: *const u8, v_cache: *const u8, positions: *const u32, row_seq: *const u32, block_tables: *const u32, tiles: *const u32, max_blocks: i32, block_size: i32, num_heads: i32, num_kv_heads: i32, scale: f32, k_scales: *const f32, v_scales: *const f32, window: i32, sinks: *const f32);
    AttentionFlash [attention_flash_bf16_kv8_d64, attention_flash_bf16_kv8_d128, attention_flash_bf16_kv8_d256] (out: *mut bf16, qkv: *const bf16, k_cache: *const u8, v_cache: *const u8, positions: *const u32, row_seq: *const u32, block_tables: *const u32, tiles: *const u32, max_blocks: i32, block_size: i32, num_heads: i32, num_kv_heads: i32, scale: f32, k_scales: *const f32, v_scales: *const f32, window: i32, sinks: *const f32);
}
