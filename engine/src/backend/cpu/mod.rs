//! The CPU reference backend: f32 storage and f32 accumulation, threaded with rayon where it
//! pays, GEMMs through the `gemm` crate. Every CUDA op is checked against these.

mod attention;
pub mod hybrid;
pub mod mamba2;
mod matmul;
mod mla;
mod moe;
mod norm;
mod rope;
mod slots;

use rayon::prelude::*;

use super::sampling::{self, SampleRow, Sampled};
use super::{
    Backend, BackendError, BatchInputs, ClampedExperts, Feature, MlaDims, Result, RopeTables,
    SigmoidRouting,
};
use crate::loader::HostTensor;

/// A row-major f32 tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuTensor {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

impl CpuTensor {
    pub fn new(shape: Vec<usize>, data: Vec<f32>) -> Self {
        debug_assert_eq!(shape.iter().product::<usize>(), data.len());
        Self { shape, data }
    }

    /// Length of the last dimension.
    pub fn cols(&self) -> usize {
        self.shape.last().copied().unwrap_or(1)
    }

    /// Product of all but the last dimension.
    pub fn rows(&self) -> usize {
        self.data.len() / self.cols().max(1)
    }
}

/// The CPU backend. `CpuBackend::default()` keeps an f32 KV cache;
/// [`CpuBackend::with_fp8_kv_cache`] rounds every cached head vector as the FP8 cache does
/// (`--kv-cache-dtype fp8`, see `kv_fp8.rs`) while keeping f32 storage: the reference for the
/// GPU's FP8 cache and for its accuracy, not a memory saving.
#[derive(Debug, Default, Clone, Copy)]
pub struct CpuBackend {
    kv_fp8: bool,
}

impl CpuBackend {
    pub fn with_fp8_kv_cache(fp8: bool) -> Self {
        Self { kv_fp8: fp8 }
    }
}

pub(crate) fn shape_err(op: &'static str, message: String) -> BackendError {
    BackendError::Shape { op, message }
}

fn check(op: &'static str, ok: bool, message: impl FnOnce() -> String) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(shape_err(op, message()))
    }
}

/// `out[r] = act(gate[r]) * up[r]` for rows `gate|up` of width `2·i`, after checking the
/// shapes (`op` names the error).
fn gated_rows(
    op: &'static str,
    out: &mut CpuTensor,
    gate_up: &CpuTensor,
    act: fn(f32) -> f32,
) -> Result<()> {
    let i = out.cols();
    check(
        op,
        gate_up.cols() == 2 * i && gate_up.rows() == out.rows(),
        || format!("out {:?}, gate_up {:?}", out.shape, gate_up.shape),
    )?;
    gated_slices(&mut out.data, &gate_up.data, i, act);
    Ok(())
}

/// [`gated_rows`] on raw rows.
fn gated_slices(out: &mut [f32], gate_up: &[f32], i: usize, act: fn(f32) -> f32) {
    out.par_chunks_mut(i)
        .zip(gate_up.par_chunks(2 * i))
        .for_each(|(o, gu)| {
            let (g, u) = gu.split_at(i);
            for ((o, &g), &u) in o.iter_mut().zip(g).zip(u) {
                *o = act(g) * u;
            }
        });
}

/// `out[r] = silu(gate[r]) * up[r]` for rows `gate|up` of width `2·i` (the MoE experts').
fn silu_mul_rows(out: &mut [f32], gate_up: &[f32], i: usize) {
    gated_slices(out, gate_up, i, silu);
}

/// SwiGLU's gate.
fn silu(g: f32) -> f32 {
    g / (1.0 + (-g).exp())
}

/// torch's `gelu(approximate="tanh")`: `0.5·g·(1 + tanh(√(2/π)·(g + 0.044715·g³)))`, in f32.
fn gelu_tanh(g: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * g * (1.0 + (SQRT_2_OVER_PI * (g + 0.044_715 * g * g * g)).tanh())
}

impl Backend for CpuBackend {
    type Tensor = CpuTensor;
    type Batch = BatchInputs;

    fn name(&self) -> &'static str {
        "cpu"
    }

    fn kv_cache_fp8(&self) -> bool {
        self.kv_fp8
    }

    fn upload(&self, t: &HostTensor<'_>) -> Result<CpuTensor> {
        Ok(CpuTensor::new(t.shape.clone(), t.to_f32()))
    }

    fn zeros(&self, shape: &[usize]) -> Result<CpuTensor> {
        Ok(CpuTensor::new(
            shape.to_vec(),
            vec![0.0; shape.iter().product()],
        ))
    }

    fn to_host(&self, t: &CpuTensor) -> Result<Vec<f32>> {
        Ok(t.data.clone())
    }

    fn shape<'t>(&self, t: &'t CpuTensor) -> &'t [usize] {
        &t.shape
    }

    fn kv_groups(&self) -> bool {
        true
    }

    fn group_batch<'a>(&self, batch: &'a BatchInputs, group: usize) -> Result<&'a BatchInputs> {
        batch
            .group(group)
            .ok_or_else(|| shape_err("group_batch", format!("the batch has no KV group {group}")))
    }

    fn prepare_batch(&self, b: &BatchInputs) -> Result<BatchInputs> {
        if !b.table_rows.is_empty() || b.groups.iter().any(|g| !g.table_rows.is_empty()) {
            return Err(shape_err(
                "prepare_batch",
                "the CPU keeps no block tables: build the batch with whole tables".to_string(),
            ));
        }
        Ok(b.clone())
    }

    fn embedding(&self, out: &mut CpuTensor, batch: &BatchInputs, table: &CpuTensor) -> Result<()> {
        let h = table.cols();
        let vocab = table.rows();
        check(
            "embedding",
            out.cols() == h && out.rows() == batch.num_tokens(),
            || {
                format!(
                    "out {:?} for {} tokens of width {h}",
                    out.shape,
                    batch.num_tokens()
                )
            },
        )?;
        if let Some(bad) = batch.token_ids.iter().find(|&&t| t as usize >= vocab) {
            return Err(shape_err(
                "embedding",
                format!("token id {bad} is outside the vocabulary of {vocab}"),
            ));
        }
        out.data
            .par_chunks_mut(h)
            .zip(&batch.token_ids)
            .for_each(|(row, &t)| {
                row.copy_from_slice(&table.data[t as usize * h..(t as usize + 1) * h]);
            });
        Ok(())
    }

    fn rms_norm(&self, out: &mut CpuTensor, x: &CpuTensor, w: &CpuTensor, eps: f32) -> Result<()> {
        check(
            "rms_norm",
            out.shape == x.shape && w.data.len() == x.cols(),
            || format!("out {:?}, x {:?}, w {:?}", out.shape, x.shape, w.shape),
        )?;
        norm::rms_norm(&mut out.data, &x.data, &w.data, eps);
        Ok(())
    }

    fn add_rms_norm(
        &self,
        out: &mut CpuTensor,
        residual: &mut CpuTensor,
        x: &CpuTensor,
        w: &CpuTensor,
        eps: f32,
    ) -> Result<()> {
        check(
            "add_rms_norm",
            out.shape == x.shape && residual.shape == x.shape && w.data.len() == x.cols(),
            || {
                format!(
                    "out {:?}, residual {:?}, x {:?}, w {:?}",
                    out.shape, residual.shape, x.shape, w.shape
                )
            },
        )?;
        residual
            .data
            .par_iter_mut()
            .zip(&x.data)
            .for_each(|(r, v)| *r += v);
        norm::rms_norm(&mut out.data, &residual.data, &w.data, eps);
        Ok(())
    }

    fn matmul(&self, out: &mut CpuTensor, x: &CpuTensor, w: &CpuTensor) -> Result<()> {
        let (m, k, n) = (x.rows(), x.cols(), w.rows());
        check(
            "matmul",
            w.cols() == k && out.rows() == m && out.cols() == n,
            || format!("out {:?} = x {:?} · w {:?}ᵀ", out.shape, x.shape, w.shape),
        )?;
        matmul::matmul_nt(&mut out.data, &x.data, &w.data, m, n, k);
        Ok(())
    }

    fn qk_norm_rope(
        &self,
        qkv: &mut CpuTensor,
        batch: &BatchInputs,
        q_w: &CpuTensor,
        k_w: &CpuTensor,
        rope: &RopeTables,
        num_heads: usize,
        num_kv_heads: usize,
        eps: f32,
    ) -> Result<()> {
        let hd = q_w.data.len();
        check(
            "qk_norm_rope",
            k_w.data.len() == hd
                && qkv.cols() == (num_heads + 2 * num_kv_heads) * hd
                && qkv.rows() == batch.num_tokens()
                && rope.rotary_dim <= hd,
            || {
                format!(
                    "qkv {:?}, head_dim {hd}, heads {num_heads}/{num_kv_heads}",
                    qkv.shape
                )
            },
        )?;
        rope::qk_norm_rope(
            qkv,
            &batch.positions,
            &q_w.data,
            &k_w.data,
            rope,
            num_heads,
            num_kv_heads,
            eps,
        );
        Ok(())
    }

    fn write_kv(
        &self,
        k_cache: &mut CpuTensor,
        v_cache: &mut CpuTensor,
        qkv: &CpuTensor,
        batch: &BatchInputs,
        num_heads: usize,
    ) -> Result<()> {
        attention::write_kv(k_cache, v_cache, qkv, batch, num_heads, self.kv_fp8)
    }

    fn paged_attention(
        &self,
        out: &mut CpuTensor,
        qkv: &CpuTensor,
        k_cache: &CpuTensor,
        v_cache: &CpuTensor,
        batch: &BatchInputs,
        num_heads: usize,
        scale: f32,
    ) -> Result<()> {
        let heads = (num_heads, scale);
        attention::paged_attention(out, qkv, k_cache, v_cache, batch, heads, None, None)
    }

    fn paged_attention_window(
        &self,
        out: &mut CpuTensor,
        qkv: &CpuTensor,
        k_cache: &CpuTensor,
        v_cache: &CpuTensor,
        batch: &BatchInputs,
        num_heads: usize,
        scale: f32,
        window: usize,
    ) -> Result<()> {
        check("paged_attention_window", window > 0, || {
            "a window of 0 tokens".into()
        })?;
        let heads = (num_heads, scale);
        attention::paged_attention(out, qkv, k_cache, v_cache, batch, heads, Some(window), None)
    }

    fn paged_attention_sinks(
        &self,
        out: &mut CpuTensor,
        qkv: &CpuTensor,
        k_cache: &CpuTensor,
        v_cache: &CpuTensor,
        batch: &BatchInputs,
        (num_heads, scale): (usize, f32),
        window: Option<usize>,
        sinks: &CpuTensor,
    ) -> Result<()> {
        check(
            "paged_attention_sinks",
            window != Some(0) && sinks.data.len() == num_heads,
            || {
                format!(
                    "window {window:?}, sinks {:?} for {num_heads} heads",
                    sinks.shape
                )
            },
        )?;
        let heads = (num_heads, scale);
        attention::paged_attention(
            out,
            qkv,
            k_cache,
            v_cache,
            batch,
            heads,
            window,
            Some(&sinks.data),
        )
    }

    fn add_bias(&self, x: &mut CpuTensor, bias: &CpuTensor) -> Result<()> {
        let n = x.cols();
        check("add_bias", bias.data.len() == n, || {
            format!("x {:?}, bias {:?}", x.shape, bias.shape)
        })?;
        x.data.par_chunks_mut(n.max(1)).for_each(|row| {
            row.iter_mut().zip(&bias.data).for_each(|(v, b)| *v += b);
        });
        Ok(())
    }

    fn rms_norm_cols(
        &self,
        x: &mut CpuTensor,
        start: usize,
        w: &CpuTensor,
        eps: f32,
    ) -> Result<()> {
        let (cols, n) = (x.cols(), w.data.len());
        check("rms_norm_cols", n > 0 && start + n <= cols, || {
            format!("x {:?}, columns {start}..{}", x.shape, start + n)
        })?;
        x.data.par_chunks_mut(cols).for_each(|row| {
            let part = &mut row[start..start + n];
            let src = part.to_vec();
            norm::norm_row(part, &src, &w.data, eps);
        });
        Ok(())
    }

    fn mean_sq_cols(
        &self,
        out: &mut CpuTensor,
        x: &CpuTensor,
        ranges: &[std::ops::Range<usize>],
    ) -> Result<()> {
        let (cols, k) = (x.cols(), ranges.len());
        check(
            "mean_sq_cols",
            k > 0
                && out.shape == [x.rows(), k]
                && ranges.iter().all(|r| !r.is_empty() && r.end <= cols),
            || format!("out {:?}, x {:?}, columns {ranges:?}", out.shape, x.shape),
        )?;
        out.data
            .par_chunks_mut(k)
            .zip(x.data.par_chunks(cols))
            .for_each(|(o, row)| {
                for (o, r) in o.iter_mut().zip(ranges) {
                    *o = norm::mean_sq(&row[r.clone()]);
                }
            });
        Ok(())
    }

    fn rms_norm_cols_by(
        &self,
        x: &mut CpuTensor,
        start: usize,
        w: &CpuTensor,
        (ms, col): (&CpuTensor, usize),
        eps: f32,
    ) -> Result<()> {
        let (cols, n, k) = (x.cols(), w.data.len(), ms.cols());
        check(
            "rms_norm_cols_by",
            n > 0 && start + n <= cols && col < k && ms.rows() == x.rows(),
            || {
                format!(
                    "x {:?}, columns {start}..{}, ms {:?} column {col}",
                    x.shape,
                    start + n,
                    ms.shape
                )
            },
        )?;
        x.data
            .par_chunks_mut(cols)
            .zip(ms.data.par_chunks(k))
            .for_each(|(row, ms)| {
                let part = &mut row[start..start + n];
                let src = part.to_vec();
                norm::norm_row_by(part, &src, &w.data, ms[col], eps);
            });
        Ok(())
    }

    fn fused_moe_sigmoid(
        &self,
        out: &mut CpuTensor,
        x: &CpuTensor,
        router_logits: &CpuTensor,
        bias: &CpuTensor,
        experts: (&CpuTensor, &CpuTensor),
        routing: SigmoidRouting,
    ) -> Result<()> {
        moe::fused_moe_sigmoid(out, x, router_logits, bias, experts, routing)
    }

    fn mla_rope_write_kv(
        &self,
        q: &mut CpuTensor,
        latent: &mut CpuTensor,
        batch: &BatchInputs,
        rope: &RopeTables,
        dims: MlaDims,
        interleaved: bool,
        cache: &mut CpuTensor,
    ) -> Result<()> {
        mla::mla_rope_write_kv(
            q,
            latent,
            batch,
            rope,
            dims,
            (interleaved, self.kv_fp8),
            cache,
        )
    }

    fn mla_attention(
        &self,
        out: &mut CpuTensor,
        q: &CpuTensor,
        kv_b: &CpuTensor,
        cache: &CpuTensor,
        batch: &BatchInputs,
        dims: MlaDims,
        scale: f32,
    ) -> Result<()> {
        mla::mla_attention(out, q, kv_b, cache, batch, dims, scale)
    }

    fn fused_moe_clamped(
        &self,
        out: &mut CpuTensor,
        x: &CpuTensor,
        router_logits: &CpuTensor,
        experts: &ClampedExperts<'_, CpuTensor>,
        top_k: usize,
    ) -> Result<()> {
        moe::fused_moe_clamped(out, x, router_logits, experts, top_k)
    }

    fn rope_write_kv(
        &self,
        qkv: &mut CpuTensor,
        batch: &BatchInputs,
        rope: &RopeTables,
        num_heads: usize,
        num_kv_heads: usize,
        k_cache: &mut CpuTensor,
        v_cache: &mut CpuTensor,
    ) -> Result<()> {
        let heads = num_heads + 2 * num_kv_heads;
        let hd = qkv.cols() / heads.max(1);
        check(
            "rope_write_kv",
            heads > 0
                && qkv.cols() == heads * hd
                && qkv.rows() == batch.num_tokens()
                && rope.rotary_dim <= hd,
            || format!("qkv {:?}, heads {num_heads}/{num_kv_heads}", qkv.shape),
        )?;
        rope::rope(qkv, &batch.positions, hd, rope, num_heads + num_kv_heads);
        self.write_kv(k_cache, v_cache, qkv, batch, num_heads)
    }

    fn gelu_tanh_mul(&self, out: &mut CpuTensor, gate_up: &CpuTensor) -> Result<()> {
        gated_rows("gelu_tanh_mul", out, gate_up, gelu_tanh)
    }

    fn scale(&self, x: &mut CpuTensor, factor: f32) -> Result<()> {
        x.data.par_iter_mut().for_each(|v| *v *= factor);
        Ok(())
    }

    fn silu_mul(&self, out: &mut CpuTensor, gate_up: &CpuTensor) -> Result<()> {
        gated_rows("silu_mul", out, gate_up, silu)
    }

    fn supports(&self, feature: Feature) -> bool {
        metrale_protocol::support::supports(metrale_protocol::support::Device::Cpu, feature)
    }

    fn fused_moe(
        &self,
        out: &mut CpuTensor,
        x: &CpuTensor,
        router_logits: &CpuTensor,
        gate_up: &CpuTensor,
        down: &CpuTensor,
        top_k: usize,
        norm_topk_prob: bool,
    ) -> Result<()> {
        moe::fused_moe(out, x, router_logits, gate_up, down, top_k, norm_topk_prob)
    }

    fn fused_moe_slice(
        &self,
        out: &mut CpuTensor,
        x: &CpuTensor,
        router_logits: &CpuTensor,
        experts: (&CpuTensor, &CpuTensor),
        routing: (usize, bool),
        first: usize,
    ) -> Result<()> {
        moe::fused_moe_slice(out, x, router_logits, experts, routing, first)
    }

    fn gather_rows(&self, out: &mut CpuTensor, x: &CpuTensor, batch: &BatchInputs) -> Result<()> {
        let h = x.cols();
        check(
            "gather_rows",
            out.cols() == h
                && out.rows() == batch.logits_rows.len()
                && batch.logits_rows.iter().all(|&r| (r as usize) < x.rows()),
            || {
                format!(
                    "out {:?}, x {:?}, rows {:?}",
                    out.shape, x.shape, batch.logits_rows
                )
            },
        )?;
        for (o, &r) in out.data.chunks_mut(h).zip(&batch.logits_rows) {
            o.copy_from_slice(&x.data[r as usize * h..(r as usize + 1) * h]);
        }
        Ok(())
    }

    fn log_softmax(&self, x: &mut CpuTensor) -> Result<()> {
        let v = x.cols();
        x.data.par_chunks_mut(v).for_each(|row| {
            let lp = sampling::log_softmax(row);
            row.copy_from_slice(&lp);
        });
        Ok(())
    }

    fn sample(&self, logits: &CpuTensor, rows: &[SampleRow<'_>]) -> Result<Vec<Sampled>> {
        let v = logits.cols();
        check(
            "sample",
            rows.iter().all(|r| r.logits_row < logits.rows()),
            || {
                format!(
                    "logits {:?} for rows {:?}",
                    logits.shape,
                    rows.iter().map(|r| r.logits_row).collect::<Vec<_>>()
                )
            },
        )?;
        Ok(rows
            .par_iter()
            .map(|r| {
                sampling::sample_row(&logits.data[r.logits_row * v..(r.logits_row + 1) * v], r)
            })
            .collect())
    }
}
