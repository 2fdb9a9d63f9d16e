//! The grouped expert GEMMs on wgmma (`moe.expert_kernel = wgmma`, moe_wg.cu) against
//! mma.sync (moe_mma.cu) at prefill sizes, section `moe-wg-speed` (sm_90 only; not pass/fail
//! beyond the two builds agreeing):
//! - `fused_moe` alone at the Qwen3-30B-A3B and Qwen3.6-35B-A3B expert shapes, bf16 and FP8
//!   experts, 2,048 and 8,192 tokens, routed by random logits (every route on the tile kernels:
//!   `moe.gemm = tensor-cores`);
//! - the dense FP8 GEMM (`matmul` with `gemm.fp8_matmul_mma`) at prefill shapes, beside the
//!   default route (a bf16 copy of the weight, then cuBLAS).
//!
//! Each line: mean ms a call over back-to-back calls (routing and the weighted sum included
//! for the experts), the TFLOP/s of its products (experts: 2 · tokens · top_k · 3 · h · i), and
//! for wgmma the largest difference from the mma.sync build's output, relative to that
//! output's largest magnitude. bf16 weights: the two sum the same exact products in another
//! order (about 1e-4 with the act rounding, far below the bf16 tolerance). FP8 weights: the
//! wgmma build multiplies e4m3 · scale rounded to bf16 where mma.sync scales exact sums (H100,
//! 2026-12-07: 1.6e-3 to 5.6e-3). FP8 weights also run with e4m3 activations
//! (`moe.fp8_activations`: the mma.sync `fp8act` build and moe_wg8.cu's wgmma one), whose
//! quantized activations differ from the bf16 ones by a few 1e-2 of the largest output. A wrong
//! tile shows as O(1).

use anyhow::Result;
use metrale_engine::backend::Backend;
use metrale_engine::backend::cuda::{CudaBackend, CudaTensor, MoeGemm};
use metrale_engine::tuning::Fp8ActKernel;
use serde_json::json;

use crate::report::Report;
use crate::speed_moe::mean_op_ms_n;

/// (name, hidden, expert width, experts, top-k): scripts/gpu's 30B-A3B and 35B-A3B configs.
const SHAPES: [(&str, usize, usize, usize, usize); 2] = [
    ("30B-A3B", 2048, 768, 128, 8),
    ("35B-A3B", 2048, 512, 256, 8),
];
/// (rows, k, n) of the dense FP8 GEMMs: a 2,048- and an 8,192-token prefill of 35B-A3B's
/// attention q|k|v-sized and o-sized products, and an 8B-sized MLP up.
const DENSE: [(usize, usize, usize); 3] =
    [(2048, 2048, 4608), (8192, 4096, 2048), (2048, 4096, 24576)];
/// Back-to-back calls a timing averages.
const ITERS: usize = 20;
/// Largest relative difference between the builds before the line says FAIL: bf16 weights,
/// FP8 weights (their bf16 rounding in the wgmma build).
const AGREE: f64 = 1e-3;
const AGREE_FP8: f64 = 1.5e-2;
/// The same with e4m3 activations (quantized per 128 columns of a row: about 2^-5 of each).
const AGREE_FP8ACT: f64 = 8e-2;

pub fn run(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    if cuda.info().compute_capability != (9, 0) {
        report.summary_line("moe-wg-speed: not run (the wgmma build needs sm_90)".to_string());
        return Ok(());
    }
    for (name, h, i, e, k) in SHAPES {
        for fp8 in [false, true] {
            let (w13, w2) = if fp8 {
                (
                    cuda.random_fp8(&[e, 2 * i, h], 10, 0.02)?,
                    cuda.random_fp8(&[e, h, i], 11, 0.02)?,
                )
            } else {
                let w13 = cuda.random_bf16(&[e, 2 * i, h], 10, 0.02)?;
                (w13, cuda.random_bf16(&[e, h, i], 11, 0.02)?)
            };
            for t in [2048usize, 8192] {
                let x = cuda.random_bf16(&[t, h], 7, 1.0)?;
                let logits = cuda.random_bf16(&[t, e], 9, 2.0)?;
                let flops = 2.0 * (t * k * 3 * h * i) as f64;
                let what = format!("{name} {} experts T {t}", if fp8 { "fp8" } else { "bf16" });
                let run = |out: &mut CudaTensor| {
                    Ok(cuda.fused_moe(out, &x, &logits, &w13, &w2, k, true)?)
                };
                let agree = if fp8 { AGREE_FP8 } else { AGREE };
                compare(cuda, report, &what, &[t, h], flops, (agree, fp8), run)?;
            }
        }
    }
    for (m, k, n) in DENSE {
        let x = cuda.random_bf16(&[m, k], 7, 1.0)?;
        let w = cuda.random_fp8(&[n, k], 12, 0.02)?;
        let what = format!("dense fp8 [{m}, {k}] x [{n}, {k}]T");
        // The default route first: the weight widened to a bf16 copy, then cuBLAS.
        let flops = 2.0 * (m * n * k) as f64;
        let mut out = cuda.zeros(&[m, n])?;
        let ms = mean_op_ms_n(cuda, ITERS, || Ok(cuda.matmul(&mut out, &x, &w)?))?;
        report.summary_line(format!(
            "moe-wg {what}: bf16 copy + cuBLAS {ms:.3} ms, {:.0} TFLOP/s",
            flops / ms / 1e9
        ));
        cuda.retune(|t| t.gemm.fp8_matmul_mma = true);
        let r = compare(
            cuda,
            report,
            &what,
            &[m, n],
            2.0 * (m * n * k) as f64,
            (AGREE_FP8, true),
            |out| Ok(cuda.matmul(out, &x, &w)?),
        );
        cuda.retune(|t| t.gemm.fp8_matmul_mma = false);
        r?;
    }
    Ok(())
}

/// Times `f` (writing an f32 tensor of `shape`) with the mma.sync and the wgmma builds (`fp8`:
/// also both with e4m3 activations) and reports each, with its output's largest difference from
/// the first (mma.sync, bf16 activations): a failure past `agree` (`AGREE_FP8ACT` with e4m3
/// activations).
fn compare(
    cuda: &CudaBackend,
    report: &mut Report,
    what: &str,
    shape: &[usize],
    flops: f64,
    (agree, fp8): (f64, bool),
    mut f: impl FnMut(&mut CudaTensor) -> Result<()>,
) -> Result<()> {
    let mut outs: Vec<Vec<f32>> = Vec::new();
    let before = cuda.tuning().moe;
    // (wgmma, e4m3 activations); with e4m3 activations, wgmma is moe_wg8.cu's build and
    // mma.sync moe_mma.cu's `fp8act` one
    let builds: &[(bool, bool)] = if fp8 {
        &[(false, false), (true, false), (false, true), (true, true)]
    } else {
        &[(false, false), (true, false)]
    };
    for &(wg, act8) in builds {
        cuda.retune(|t| {
            t.moe.wgmma = wg;
            t.moe.gemm = MoeGemm::TensorCores;
            t.moe.fp8_activations = act8;
            t.moe.fp8act_kernel = Fp8ActKernel::Wgmma;
        });
        let mut out = cuda.zeros(shape)?;
        let ms = mean_op_ms_n(cuda, ITERS, || f(&mut out));
        cuda.retune(|t| t.moe = before);
        let ms = ms?;
        let host = cuda.to_host(&out)?;
        let build = match (wg, act8) {
            (false, false) => "mma",
            (true, false) => "wgmma",
            (false, true) => "mma fp8act",
            (true, true) => "wgmma fp8act",
        };
        let agree = if act8 { AGREE_FP8ACT } else { agree };
        let tflops = flops / ms / 1e9;
        let mut line = format!("moe-wg {what}: {build} {ms:.3} ms, {tflops:.0} TFLOP/s");
        let mut diff = None;
        if let Some(base) = outs.first() {
            let d = rel_diff(&host, base);
            line += &format!(", largest difference from mma {d:.2e}");
            if d > agree {
                line += " FAIL";
                report.fail(format!(
                    "moe-wg-speed {what}: the {build} output differs ({d:.2e})"
                ));
            }
            diff = Some(d);
        }
        report.summary_line(line);
        report.record(
            json!({"section": "moe-wg-speed", "case": what, "build": build,
            "ms": ms, "tflops": tflops, "diff": diff}),
        );
        outs.push(host);
    }
    Ok(())
}

/// max |a - b| / max |b| (NaN anywhere: infinity).
fn rel_diff(a: &[f32], b: &[f32]) -> f64 {
    let scale = b.iter().fold(0f64, |m, v| m.max(f64::from(v.abs())));
    let mut worst = 0f64;
    for (x, y) in a.iter().zip(b) {
        let d = f64::from((x - y).abs());
        if d.is_nan() {
            return f64::INFINITY;
        }
        worst = worst.max(d);
    }
    worst / scale.max(f64::MIN_POSITIVE)
}
