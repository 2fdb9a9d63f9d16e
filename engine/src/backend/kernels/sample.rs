//! Kernel declarations (see `mod.rs`): the device sampler's (`sample.cu`).

#[allow(unused_imports)]
use super::{CParam, Decl, Kernel, Module, bf16, c_void, kernels};
use std::marker::PhantomData;

kernels! {
    Sample [sample_penalty_absorb] (work: *const u32, vocab: i32);
    Sample [sample_prepare_f32] (scratch: *mut f32, logits: *const f32, plan: *const u32, vocab: i32);
    Sample [sample_prepare_bf16] (scratch: *mut f32, logits: *const bf16, plan: *const u32, vocab: i32);
    Sample [sample_token_mask] (scratch: *mut f32, plan: *const u32, which: *const u32, vocab: i32);
    Sample [sample_gumbel, sample_candidates] (out: *mut u32, scratch: *const f32, plan: *const u32, which: *const u32, vocab: i32);
}
