//! Launchers for the ops Llama, Mistral and Gemma 3 add to Qwen3's: the rotation and cache write
//! without QK-norm (`rope.cu`'s `rope_kv_*`), Gemma's GELU-tanh gate and the in-place scale
//! (`activation.cu`).

use crate::backend::kernels;
use cudarc::driver::LaunchConfig;

use super::elementwise::{dim, int, stride_cfg};
use super::norm::MAX_HEAD_DIM;
use super::tensor::{CudaTensor, DType};
use super::{CudaBackend, CudaBatch, check};
use crate::backend::{Result, RopeTables};

/// Heads a `rope_kv` block handles (ROPE_WARPS in rope.cu), one warp each.
const ROPE_WARPS: usize = 4;

impl CudaBackend {
    /// [`crate::backend::Backend::rope_write_kv`]: one warp a (token, head) of q, k and v, as
    /// `qk_norm_rope_kv` with the norm off.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn rope_write_kv_op(
        &self,
        qkv: &mut CudaTensor,
        batch: &CudaBatch,
        rope: &RopeTables,
        num_heads: usize,
        num_kv_heads: usize,
        k_cache: &mut CudaTensor,
        v_cache: &mut CudaTensor,
    ) -> Result<()> {
        let heads = num_heads + 2 * num_kv_heads;
        let hd = qkv.cols() / heads.max(1);
        check(
            "rope_write_kv",
            heads > 0
                && qkv.cols() == heads * hd
                && qkv.rows() == batch.num_tokens
                && rope.rotary_dim <= hd
                && rope.rotary_dim == 2 * rope.inv_freq.len()
                && hd <= MAX_HEAD_DIM,
            || {
                format!(
                    "qkv {:?}, head_dim {hd} (at most {MAX_HEAD_DIM}), heads {num_heads}/{num_kv_heads}, rotary_dim {} with {} frequencies",
                    qkv.shape,
                    rope.rotary_dim,
                    rope.inv_freq.len()
                )
            },
        )?;
        self.write_kv_check("rope_write_kv", k_cache, v_cache, qkv, batch, num_heads)?;
        check(
            "rope_write_kv",
            k_cache.shape[2] == num_kv_heads && k_cache.shape[3] == hd,
            || {
                format!(
                    "cache {:?} for {num_kv_heads} kv heads of {hd}",
                    k_cache.shape
                )
            },
        )?;
        if batch.num_tokens == 0 || hd == 0 {
            return Ok(());
        }
        let inv_freq = self.inv_freq(rope)?;
        let s = &self.stream;
        let (p, pos, slots) = (qkv.ptr(s), batch.positions(s), batch.slot_mapping(s));
        let (k, v, ks, vs) = (
            k_cache.ptr(s),
            v_cache.ptr(s),
            k_cache.scales_ptr(s),
            v_cache.scales_ptr(s),
        );
        let (nh, nkv, d, half) = (
            int(num_heads, "rope_write_kv")?,
            int(num_kv_heads, "rope_write_kv")?,
            int(hd, "rope_write_kv")?,
            int(rope.rotary_dim / 2, "rope_write_kv")?,
        );
        let sc = rope.scale;
        let config = LaunchConfig {
            grid_dim: (
                dim(batch.num_tokens, "rope_write_kv")?,
                dim(heads.div_ceil(ROPE_WARPS), "rope_write_kv")?,
                1,
            ),
            block_dim: (32 * ROPE_WARPS as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY (every launch below): qkv is [T, (nh + 2·nkv)·hd] of the kernel's type with
        // hd ≤ 256 (the shared scratch per warp); inv_freq holds rotary_dim/2 floats and
        // rotary_dim ≤ hd; positions and slot_mapping have T entries; both caches are [blocks,
        // bs, nkv, hd] of the kernel's cache type (e4m3 bytes with their scale regions for
        // _kv8) and every slot is below blocks·bs (write_kv_check); warps past the last head
        // return before touching memory.
        match (qkv.dtype, k_cache.dtype) {
            (DType::F32, DType::F32) => {
                let args = (p, pos, inv_freq, nh, nkv, d, half, sc, k, v, slots);
                unsafe { kernels::rope_kv_fp32.launch(self, config, args) }
            }
            (DType::F32, DType::BF16) => {
                let args = (p, pos, inv_freq, nh, nkv, d, half, sc, k, v, slots);
                unsafe { kernels::rope_kv_f32.launch(self, config, args) }
            }
            (DType::BF16, DType::BF16) => {
                let args = (p, pos, inv_freq, nh, nkv, d, half, sc, k, v, slots);
                unsafe { kernels::rope_kv_bf16.launch(self, config, args) }
            }
            (DType::F32, DType::F8) => {
                let args = (p, pos, inv_freq, nh, nkv, d, half, sc, k, v, slots, ks, vs);
                unsafe { kernels::rope_kv_f32_kv8.launch(self, config, args) }
            }
            (DType::BF16, DType::F8) => {
                let args = (p, pos, inv_freq, nh, nkv, d, half, sc, k, v, slots, ks, vs);
                unsafe { kernels::rope_kv_bf16_kv8.launch(self, config, args) }
            }
            (q, c) => Err(super::shape_err(
                "rope_write_kv",
                format!("qkv of {q:?} with a cache of {c:?}"),
            )),
        }
    }

    /// `out = gelu_tanh(gate) * up` ([`crate::backend::Backend::gelu_tanh_mul`]).
    pub(super) fn gelu_tanh_mul_op(
        &self,
        out: &mut CudaTensor,
        gate_up: &CudaTensor,
    ) -> Result<()> {
        let gelu = [
            kernels::gelu_tanh_mul_fp32,
            kernels::gelu_tanh_mul_bf16,
            kernels::gelu_tanh_mul_f32,
        ];
        self.gated_mul_op("gelu_tanh_mul", out, gate_up, gelu)
    }

    /// `x *= factor` on an f32 tensor (the residual stream the embedding writes).
    pub(super) fn scale_op(&self, x: &mut CudaTensor, factor: f32) -> Result<()> {
        check("scale", x.dtype == DType::F32, || {
            format!("x is {:?}; scale takes the f32 residual stream", x.dtype)
        })?;
        let n = x.numel() as u64;
        if n == 0 {
            return Ok(());
        }
        let p = x.ptr(&self.stream);
        // SAFETY: x holds n f32 values; the grid-stride loop stays below n.
        unsafe { kernels::scale_f32.launch(self, stride_cfg(n), (p, n, factor)) }
    }
}
