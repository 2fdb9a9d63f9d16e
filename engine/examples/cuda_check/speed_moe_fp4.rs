//! FP4 experts' routes by step size (not pass/fail), section `moe-fp4-speed`: one layer's
//! experts alone at three checkpoints' shapes, dummy stacks drawn packed on the device —
//! gpt-oss-20b (`fused_moe_clamped`, MXFP4, hidden 2880, 32 experts of 2880, top 4),
//! gpt-oss-120b (the same with 128 experts) and Qwen3.6-35B-A3B NVFP4 (`fused_moe`, hidden
//! 2048, 256 experts of 512, top 8) — at 1 to 4096 tokens, on each route `moe.gemm` can force:
//! the CUDA-core kernels reading the packed stacks, the small-step tensor-core kernels
//! (`Experts::SmallMma` from 2 tokens: `moe_fp4_small.cu`'s split build up to 8 tokens on
//! experts at least 1024 wide, `_small_any` up to 256) and the 64-row tensor-core tiles reading them too
//! (`Experts::Mma` with the `mxfp4` / `nvfp4` build, `moe_mma_fp4.cu`), beside `auto` (what the
//! plan picks). Where they cross is where `MoePlan::choose` should switch.
//!
//! Each line: mean ms a call over back-to-back calls (routing and the weighted sum included),
//! pairs an expert, and the floor of reading the experts the step touches once, packed, at
//! 4.0 TB/s (tokens spread over the experts by random logits).

use anyhow::Result;
use metrale_engine::backend::cuda::{CudaBackend, CudaTensor, MoeGemm};
use metrale_engine::backend::{Backend, ClampedExperts};
use serde_json::json;

use crate::report::Report;
use crate::speed::FLOOR_BYTES_PER_S;
use crate::speed_moe::mean_op_ms_n;

/// (name, gpt-oss's clamped experts (else plain SwiGLU), MXFP4 (else NVFP4), hidden,
/// expert width, experts, top-k).
type Shape = (&'static str, bool, bool, usize, usize, usize, usize);
const SHAPES: [Shape; 3] = [
    ("gpt-oss-20b", true, true, 2880, 2880, 32, 4),
    ("gpt-oss-120b", true, true, 2880, 2880, 128, 4),
    ("qwen3.6-35b-a3b", false, false, 2048, 512, 256, 8),
];

/// Tokens a step.
const TOKENS: [usize; 15] = [
    1, 2, 4, 8, 16, 24, 32, 48, 64, 128, 256, 512, 1024, 2048, 4096,
];

/// The routes: (label, `moe.gemm`, `moe.small_mma`): what the plan picks, the packed CUDA-core
/// kernels (the one-token `_dec` kernels at one token), the small-step kernels from 2 tokens
/// (split or `_small_any` as the plan builds them; the tiles past 256 tokens) and the 64-row
/// tiles.
const ROUTES: [(&str, MoeGemm, bool); 4] = [
    ("auto", MoeGemm::Auto, true),
    ("cuda cores", MoeGemm::CudaCores, true),
    ("small mma", MoeGemm::TensorCores, true),
    ("fp4 tiles", MoeGemm::TensorCores, false),
];

/// The CUDA-core kernels' variants, at the token counts each names: (label, fewest and most
/// tokens, `moe.decode_gate_up`, `moe.down_cols`, `moe.decode_tokens`, `moe.fp4_gate_up` split):
/// at one token without the `_dec` kernels and with 2 and 4 down columns a block; at 2 to 8
/// tokens the `_dec` gate|up (rows held for each pair) and the one-column `_dec` down; at 1 to
/// 8 the split tensor-core gate|up beside that down (experts 1024+ wide; narrower ones `_dec`).
type CoreRoute = (
    &'static str,
    (usize, usize),
    bool,
    Option<usize>,
    Option<usize>,
    bool,
);
const CORE_ROUTES: [CoreRoute; 6] = [
    ("cores plain", (1, 1), false, Some(0), None, false),
    ("dec cols 2", (1, 1), true, Some(2), None, false),
    ("dec cols 4", (1, 1), true, Some(4), None, false),
    ("dec to 8", (2, 8), true, Some(1), Some(8), false),
    ("split gu", (1, 1), true, Some(1), None, true),
    ("split gu to 8", (2, 8), true, Some(1), Some(8), true),
];

/// Bytes a packed weight takes: MXFP4 half a byte plus a scale byte per 32; NVFP4 half a byte
/// plus a scale byte per 16 (the per-row multiplier left out).
fn fp4_bytes(mx: bool) -> f64 {
    if mx {
        0.5 + 1.0 / 32.0
    } else {
        0.5 + 1.0 / 16.0
    }
}

pub fn run(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    report.summary_line(format!(
        "FP4 experts by step size: ms a call per route (floor: the touched experts once at \
         {:.1} TB/s)",
        FLOOR_BYTES_PER_S / 1e12
    ));
    for (s, &(name, clamped, mx, h, i, e, k)) in SHAPES.iter().enumerate() {
        let seed = 0x6d6f_6534 + 16 * s as u64;
        let draw = |shape: &[usize], seed| -> Result<CudaTensor> {
            Ok(if mx {
                cuda.random_mxfp4(shape, seed, 0.02)?
            } else {
                cuda.random_nvfp4(shape, seed, 0.02)?
            })
        };
        let w13 = draw(&[e, 2 * i, h], seed)?;
        let w2 = draw(&[e, h, i], seed + 1)?;
        let b13 = cuda.random_bf16(&[e, 2 * i], seed + 2, 0.1)?;
        let b2 = cuda.random_bf16(&[e, h], seed + 3, 0.1)?;
        let ex = ClampedExperts {
            gate_up: &w13,
            gate_up_bias: &b13,
            down: &w2,
            down_bias: &b2,
            alpha: 1.702,
            limit: 7.0,
        };
        let expert_bytes = 3.0 * (h * i) as f64 * fp4_bytes(mx);
        for &t in &TOKENS {
            let x = cuda.random_bf16(&[t, h], seed + 4, 1.0)?;
            let logits = cuda.random_bf16(&[t, e], seed + 5, 2.0)?;
            let mut out = cuda.zeros(&[t, h])?;
            // Distinct experts expected when each token picks k of e at random.
            let touched = e as f64 * (1.0 - (1.0 - k as f64 / e as f64).powi(t as i32));
            let floor_ms = touched * expert_bytes / FLOOR_BYTES_PER_S * 1e3;
            let iters = (256 / t).clamp(3, 30);
            let mut cells = Vec::new();
            let mut record = json!({"profile": "moe_fp4_routes", "model": name, "tokens": t,
                "experts": e, "top_k": k, "hidden": h, "width": i, "floor_ms": floor_ms});
            let cores = CORE_ROUTES
                .iter()
                .filter(|r| (r.1.0..=r.1.1).contains(&t))
                .map(|&(label, _, dec, cols, n, split)| {
                    (label, MoeGemm::CudaCores, true, Some((dec, cols, n, split)))
                });
            let routes = ROUTES
                .iter()
                .map(|&(label, gemm, small)| (label, gemm, small, None));
            let routes = routes.chain(cores);
            for (label, gemm, small, cores) in routes {
                let saved = cuda.tuning().moe;
                cuda.retune(|tu| {
                    tu.moe.gemm = gemm;
                    tu.moe.small_mma = small;
                    if let Some((dec, cols, n, split)) = cores {
                        tu.moe.decode_gate_up = dec;
                        tu.moe.down_cols = cols;
                        tu.moe.decode_tokens = n;
                        tu.moe.fp4_gate_up_split = split;
                    }
                });
                let ms = mean_op_ms_n(cuda, iters, || {
                    if clamped {
                        cuda.fused_moe_clamped(&mut out, &x, &logits, &ex, k)?;
                    } else {
                        cuda.fused_moe(&mut out, &x, &logits, &w13, &w2, k, true)?;
                    }
                    Ok(())
                });
                cuda.retune(|tu| tu.moe = saved);
                let ms = ms?;
                cells.push(format!("{label} {ms:8.3}"));
                record[label] = json!(ms);
            }
            report.summary_line(format!(
                "  {name:<16} T {t:>4} ({:>6.1} pairs an expert): {} ms | floor {floor_ms:.3}",
                (t * k) as f64 / e as f64,
                cells.join(" | ")
            ));
            report.record(record);
        }
    }
    Ok(())
}
