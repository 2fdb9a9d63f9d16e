//! Launchers for RMSNorm, the fused residual add + RMSNorm and QK-norm + RoPE
//! (`norm.cu`, `rope.cu`).

use crate::backend::kernels;
use cudarc::driver::LaunchConfig;

use super::elementwise::{cfg, dim, int, row_threads};
use super::tensor::{CudaTensor, DType};
use super::{CudaBackend, CudaBatch, check};
use crate::backend::{Result, RopeTables};

/// Heads a `qk_norm_rope` block handles (ROPE_WARPS in rope.cu), one warp each.
const ROPE_WARPS: usize = 4;
/// Largest head_dim the rope and attention kernels hold (ROPE_MAX_DIM, 8 registers × 32 lanes).
pub(super) const MAX_HEAD_DIM: usize = 256;

fn weight_check(op: &'static str, w: &CudaTensor, n: usize) -> Result<()> {
    check(
        op,
        w.numel() == n && matches!(w.dtype, DType::BF16 | DType::F32),
        || {
            format!(
                "weight {:?} {:?}, expected {n} bf16 or f32 values (an uploaded weight)",
                w.shape, w.dtype
            )
        },
    )
}

/// The float32 path's kernels (`*_fp32`) take f32 everywhere: with an f32 weight, every
/// activation `op` reads must be f32 too.
fn fp32_inputs(op: &'static str, w: &CudaTensor, inputs: &[&CudaTensor]) -> Result<bool> {
    if w.dtype != DType::F32 {
        return Ok(false);
    }
    check(op, inputs.iter().all(|t| t.dtype == DType::F32), || {
        format!(
            "an f32 weight (the float32 path) with inputs of {:?}: all must be f32",
            inputs.iter().map(|t| t.dtype).collect::<Vec<_>>()
        )
    })?;
    Ok(true)
}

impl CudaBackend {
    /// Threads of a norm block (one block a row, a multiple of 32): 8 elements a thread, or
    /// for fewer rows than multiprocessors (a decode step) 2 a thread up to 1024, so a row's
    /// loads are in flight at once instead of a thread's 8 one after another. On the H200
    /// (2026-11-30, ncu at base clocks) a 2048-wide add_rms_norm of one row took 10 µs with
    /// 256 threads.
    fn norm_threads(&self, rows: usize, h: usize) -> u32 {
        if rows < self.info.multiprocessors {
            (h.div_ceil(2).next_multiple_of(32)).clamp(32, 1024) as u32
        } else {
            row_threads(h)
        }
    }

    pub(super) fn rms_norm_op(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        w: &CudaTensor,
        eps: f32,
    ) -> Result<()> {
        check("rms_norm", out.shape == x.shape, || {
            format!("out {:?}, x {:?}, w {:?}", out.shape, x.shape, w.shape)
        })?;
        let (rows, h) = (x.rows(), x.cols());
        weight_check("rms_norm", w, h)?;
        let fp32 = fp32_inputs("rms_norm", w, &[x])?;
        self.set_dtype(out, if fp32 { DType::F32 } else { DType::BF16 })?;
        if rows == 0 || h == 0 {
            return Ok(());
        }
        let name = match x.dtype {
            _ if fp32 => kernels::rms_norm_fp32,
            DType::F32 => kernels::rms_norm_f32,
            DType::BF16 => kernels::rms_norm_bf16,
            DType::F8 | DType::F4 | DType::Mx4 => return Err(super::not_activation("rms_norm")),
        };
        let s = &self.stream;
        let (o, xp, wp, hh) = (out.ptr(s), x.ptr(s), w.ptr(s), int(h, "rms_norm")?);
        let threads = self.norm_threads(rows, h);
        // SAFETY: out and x are [rows, h] and w holds h values, each of the kernel's type
        // (checked above); one block per row with a multiple of 32 threads, as block_sum needs.
        unsafe {
            name.launch(
                self,
                cfg((dim(rows, "rms_norm")?, 1), threads),
                (o, xp, wp, hh, eps),
            )
        }
    }

    /// [`crate::backend::Backend::rms_norm_cols`]: columns `start .. start + n` of each row of
    /// `x` (`n` = the weight's length) normalised in place, `x` keeping its type (f32, the
    /// matmul's output, or bf16); the norm kernel over a row's part (`rms_norm_cols_*`).
    pub(super) fn rms_norm_cols_op(
        &self,
        x: &mut CudaTensor,
        start: usize,
        w: &CudaTensor,
        eps: f32,
    ) -> Result<()> {
        let (rows, cols, n) = (x.rows(), x.cols(), w.numel());
        check("rms_norm_cols", n > 0 && start + n <= cols, || {
            format!("x {:?}, columns {start}..{}", x.shape, start + n)
        })?;
        weight_check("rms_norm_cols", w, n)?;
        let fp32 = fp32_inputs("rms_norm_cols", w, &[x])?;
        if rows == 0 {
            return Ok(());
        }
        let kernel = match x.dtype {
            _ if fp32 => kernels::rms_norm_cols_fp32,
            DType::F32 => kernels::rms_norm_cols_f32,
            DType::BF16 => kernels::rms_norm_cols_bf16,
            DType::F8 | DType::F4 | DType::Mx4 => {
                return Err(super::not_activation("rms_norm_cols"));
            }
        };
        let s = &self.stream;
        let (xp, wp) = (x.ptr(s), w.ptr(s));
        let args = (
            xp,
            wp,
            int(start, "rms_norm_cols")?,
            int(n, "rms_norm_cols")?,
            int(cols, "rms_norm_cols")?,
            eps,
        );
        let threads = self.norm_threads(rows, n);
        // SAFETY: x is [rows, cols] of the kernel's type and w holds n values of its weight
        // type (checked above), start + n <= cols, so each block's row part stays inside its
        // row; one block per row with a multiple of 32 threads, as block_sum needs. In place:
        // each thread reads an element before it writes it, and no other thread touches it.
        unsafe { kernel.launch(self, cfg((dim(rows, "rms_norm_cols")?, 1), threads), args) }
    }

    pub(super) fn add_rms_norm_op(
        &self,
        out: &mut CudaTensor,
        residual: &mut CudaTensor,
        x: &CudaTensor,
        w: &CudaTensor,
        eps: f32,
    ) -> Result<()> {
        check(
            "add_rms_norm",
            out.shape == x.shape && residual.shape == x.shape,
            || {
                format!(
                    "out {:?}, residual {:?}, x {:?}, w {:?}",
                    out.shape, residual.shape, x.shape, w.shape
                )
            },
        )?;
        let (rows, h) = (x.rows(), x.cols());
        weight_check("add_rms_norm", w, h)?;
        let fp32 = fp32_inputs("add_rms_norm", w, &[residual, x])?;
        self.set_dtype(out, if fp32 { DType::F32 } else { DType::BF16 })?;
        if rows == 0 || h == 0 {
            return Ok(());
        }
        let name = match (residual.dtype, x.dtype) {
            _ if fp32 => kernels::add_rms_norm_fp32,
            (DType::F32, DType::F32) => kernels::add_rms_norm_f32_f32,
            (DType::F32, DType::BF16) => kernels::add_rms_norm_f32_bf16,
            (DType::BF16, DType::F32) => kernels::add_rms_norm_bf16_f32,
            (DType::BF16, DType::BF16) => kernels::add_rms_norm_bf16_bf16,
            (DType::F8 | DType::F4 | DType::Mx4, _) | (_, DType::F8 | DType::F4 | DType::Mx4) => {
                return Err(super::not_activation("add_rms_norm"));
            }
        };
        let s = &self.stream;
        let (o, rp, xp, wp, hh) = (
            out.ptr(s),
            residual.ptr(s),
            x.ptr(s),
            w.ptr(s),
            int(h, "add_rms_norm")?,
        );
        let threads = self.norm_threads(rows, h);
        // SAFETY: out, residual and x are [rows, h] of the kernel's types, w holds h values of
        // its type (checked above); out and residual are distinct &mut borrows, so the
        // kernel's in-place residual update aliases nothing it reads from another buffer.
        unsafe {
            name.launch(
                self,
                cfg((dim(rows, "add_rms_norm")?, 1), threads),
                (o, rp, xp, wp, hh, eps),
            )
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn qk_norm_rope_op(
        &self,
        qkv: &mut CudaTensor,
        batch: &CudaBatch,
        q_w: &CudaTensor,
        k_w: &CudaTensor,
        rope: &RopeTables,
        num_heads: usize,
        num_kv_heads: usize,
        eps: f32,
        cache: Option<(&mut CudaTensor, &mut CudaTensor)>,
    ) -> Result<()> {
        let hd = q_w.numel();
        check(
            "qk_norm_rope",
            qkv.cols() == (num_heads + 2 * num_kv_heads) * hd
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
        weight_check("qk_norm_rope", q_w, hd)?;
        weight_check("qk_norm_rope", k_w, hd)?;
        let mut inputs = vec![&*qkv, k_w];
        if let Some((k, v)) = &cache {
            inputs.extend([&**k, &**v]);
        }
        let fp32 = fp32_inputs("qk_norm_rope", q_w, &inputs)?;
        if let Some((k, v)) = &cache {
            check(
                "qk_norm_rope_write_kv",
                fp32 || matches!(k.dtype, DType::BF16 | DType::F8),
                || {
                    format!(
                        "an f32 cache needs f32 weights (the float32 path), got {:?}",
                        q_w.dtype
                    )
                },
            )?;
            self.write_kv_check("qk_norm_rope_write_kv", k, v, qkv, batch, num_heads)?;
            check(
                "qk_norm_rope_write_kv",
                k.shape[2] == num_kv_heads && k.shape[3] == hd,
                || format!("cache {:?} for {num_kv_heads} kv heads of {hd}", k.shape),
            )?;
        }
        // With the cache, the v heads get a warp each too (they are only copied).
        let heads = num_heads + num_kv_heads * if cache.is_some() { 2 } else { 1 };
        if batch.num_tokens == 0 || heads == 0 || hd == 0 {
            return Ok(());
        }
        let inv_freq = self.inv_freq(rope)?;
        let kv8 = cache.as_ref().is_some_and(|(k, _)| k.dtype == DType::F8);
        if qkv.dtype == DType::F8 {
            return Err(super::not_activation("qk_norm_rope"));
        }
        let bf16 = qkv.dtype == DType::BF16;
        let s = &self.stream;
        let (p, pos, qw, kw) = (qkv.ptr(s), batch.positions(s), q_w.ptr(s), k_w.ptr(s));
        let (nh, nkv, d, half) = (
            int(num_heads, "qk_norm_rope")?,
            int(num_kv_heads, "qk_norm_rope")?,
            int(hd, "qk_norm_rope")?,
            int(rope.rotary_dim / 2, "qk_norm_rope")?,
        );
        let sc = rope.scale;
        let kv_args = cache.map(|(k, v)| {
            (
                k.ptr(s),
                v.ptr(s),
                batch.slot_mapping(s),
                k.scales_ptr(s),
                v.scales_ptr(s),
            )
        });
        let config = LaunchConfig {
            grid_dim: (
                dim(batch.num_tokens, "qk_norm_rope")?,
                dim(heads.div_ceil(ROPE_WARPS), "qk_norm_rope")?,
                1,
            ),
            block_dim: (32 * ROPE_WARPS as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY (every launch below): qkv is [T, (nh + 2·nkv)·hd] of the kernel's type with
        // hd ≤ 256 (the shared scratch per warp); q_w, k_w hold hd values of the kernel's weight
        // type (bf16, or f32 for _fp32); inv_freq holds rotary_dim/2 floats and rotary_dim ≤ hd;
        // positions has T entries (checked above); warps past the last head return before
        // touching memory. With the cache (the _kv kernels), both caches are [blocks, bs, nkv,
        // hd] of the kernel's cache type (bf16, or f32 for _fp32; e4m3 bytes for _kv8, whose
        // scale regions hold ceil(hd / 128) floats a (slot, kv head), fp8_alloc_bytes) and every
        // slot is below blocks·bs (write_kv_check).
        match kv_args {
            None => {
                let kernel = if fp32 {
                    kernels::qk_norm_rope_fp32
                } else if bf16 {
                    kernels::qk_norm_rope_bf16
                } else {
                    kernels::qk_norm_rope_f32
                };
                let args = (p, pos, qw, kw, inv_freq, nh, nkv, d, half, sc, eps);
                unsafe { kernel.launch(self, config, args) }
            }
            // An FP8 cache (`--kv-cache-dtype fp8`): the _kv8 kernels, which also take the
            // scales (fp32 has f32 caches only).
            Some((k, v, slots, ks, vs)) if kv8 && !fp32 => {
                let kernel = if bf16 {
                    kernels::qk_norm_rope_kv_bf16_kv8
                } else {
                    kernels::qk_norm_rope_kv_f32_kv8
                };
                let args = (
                    p, pos, qw, kw, inv_freq, nh, nkv, d, half, sc, eps, k, v, slots, ks, vs,
                );
                unsafe { kernel.launch(self, config, args) }
            }
            Some((k, v, slots, _, _)) => {
                let kernel = if fp32 {
                    kernels::qk_norm_rope_kv_fp32
                } else if bf16 {
                    kernels::qk_norm_rope_kv_bf16
                } else {
                    kernels::qk_norm_rope_kv_f32
                };
                let args = (
                    p, pos, qw, kw, inv_freq, nh, nkv, d, half, sc, eps, k, v, slots,
                );
                unsafe { kernel.launch(self, config, args) }
            }
        }
    }
}
