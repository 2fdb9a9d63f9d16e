//! NVFP4 weight GEMVs at Qwen3.6-27B's decode shapes (issue 35; not pass/fail), first in the
//! `speed` section: each projection a decode step runs, through `matmul` with a dummy NVFP4
//! weight drawn on the device on each of its routes (`nvfp4`: the default settings; `nvfp4
//! mma`: the tensor-core `gemv_nvfp4_mma_*` at every row count; `nvfp4 tile`: the tile GEMM
//! `nvfp4_gemm_*` at every row count, `gemm.nvfp4_tile_rows_min` 1; `nvfp4 copy`: a bf16 copy
//! and cuBLAS at every row count), against an FP8 weight (`fp8`: the default, `gemv_fp8_m1`, the
//! tensor-core `gemv_fp8_mma` from 2 rows and `_many` above 8, the bf16 copy above 32; `fp8
//! mma`: `_many` up to 128 rows) and a bf16 one (the bf16 GEMV to 8 rows, then cuBLAS) of the
//! same shape, at 1 to 256 rows of x. The copy routes are where the mma kernels' reach ends.
//!
//! The dims are Qwen3.6-27B's text config (scripts/gpu/qwen3.6-27b-nvfp4-config.json): hidden
//! 5120, 24 query heads of 256 with an output gate as wide, 4 KV heads of 256, MLP 17408,
//! Gated DeltaNet with 16 key heads and 48 value heads of 128 (conv dim 2·16·128 + 48·128 =
//! 10240). The engine fuses q|k|v, gate|up and the DeltaNet's qkv|z|b|a, so those are the
//! shapes timed.
//!
//! Each line: the mean µs of one matmul over back-to-back calls, the TB/s that makes of the
//! weight's bytes (one read: NVFP4 0.5625 B a weight + a 4-byte multiplier a row, i.e. 4.5
//! bits; FP8 1 B + a 4-byte scale per 128; bf16 2 B), and each format's floor: those bytes once
//! at 4.0 TB/s. The calls rotate over enough copies of each weight (over 200 MB in all) that
//! none is still in the 50 MB L2 when it is read again.
//!
//! Section `nvfp4-speed` of its own (`--skip` the others to run only this table).

use anyhow::Result;
use metrale_engine::backend::Backend;
use metrale_engine::backend::cuda::{CudaBackend, CudaTensor};
use metrale_engine::tuning::GemmTuning;
use serde_json::json;

use crate::report::Report;
use crate::speed::FLOOR_BYTES_PER_S;
use crate::speed_moe::mean_op_ms_n;

/// Qwen3.6-27B's decode GEMMs: (name, layers that run it, out rows n, in cols k).
const SHAPES: [(&str, usize, usize, usize); 7] = [
    ("gdn in_proj qkv|z|b|a", 48, 10240 + 6144 + 48 + 48, 5120),
    ("gdn out_proj", 48, 5120, 6144),
    ("attn q|k|v", 16, 6144 + 1024 + 1024, 5120),
    ("attn gate", 16, 6144, 5120),
    ("attn o", 16, 5120, 6144),
    ("mlp gate|up", 64, 2 * 17408, 5120),
    ("mlp down", 64, 5120, 17408),
];

/// Rows of x timed.
const ROWS: [usize; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];

/// The routes timed: (label, weight format, the settings it runs with).
type Route = (&'static str, &'static str, fn(&mut GemmTuning));
const ROUTES: [Route; 7] = [
    ("nvfp4", "nvfp4", |_| {}),
    ("nvfp4 mma", "nvfp4", |g| {
        g.nvfp4_mma_rows = usize::MAX;
        g.nvfp4_tile_rows_min = None;
    }),
    ("nvfp4 tile", "nvfp4", |g| {
        g.nvfp4_mma_rows = usize::MAX;
        g.nvfp4_tile_rows_min = Some(1);
    }),
    ("nvfp4 copy", "nvfp4", |g| g.nvfp4_mma_rows = 0),
    ("fp8", "fp8", |_| {}),
    ("fp8 mma", "fp8", |g| g.fp8_matmul_mma = true),
    ("bf16", "bf16", |_| {}),
];
/// ROUTES' indices of the summary's ratios: nvfp4, fp8, bf16 (their defaults).
const NVFP4: usize = 0;
const FP8: usize = 4;
const BF16: usize = 6;

/// Calls averaged per time.
const ITERS: usize = 100;

/// Bytes a format reads of an `[n, k]` weight.
fn weight_bytes(format: &str, n: usize, k: usize) -> f64 {
    let (n, k) = (n as f64, k as f64);
    match format {
        "nvfp4" => n * k * 0.5625 + 4.0 * n,
        "fp8" => n * k * (1.0 + 4.0 / 128.0),
        _ => n * k * 2.0,
    }
}

/// Copies of a weight of `bytes` that together outgrow the L2 several times over.
fn copies(bytes: f64) -> usize {
    ((200e6 / bytes).ceil() as usize).clamp(1, 16)
}

pub fn run(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    report.summary_line(format!(
        "nvfp4 GEMVs at Qwen3.6-27B's shapes: µs a matmul (TB/s of the weight's bytes, floor µs \
         at {:.1} TB/s)",
        FLOOR_BYTES_PER_S / 1e12
    ));
    // A decode step's weight time at each row count, per route (the layers' sum).
    let mut step = [[0f64; ROUTES.len()]; ROWS.len()];
    for (s, &(name, layers, n, k)) in SHAPES.iter().enumerate() {
        let seed = 0x006e_7666_7034 + s as u64;
        let mut weights: Vec<(&str, Vec<CudaTensor>)> = Vec::new();
        for format in ["nvfp4", "fp8", "bf16"] {
            let count = copies(weight_bytes(format, n, k));
            let w = (0..count as u64)
                .map(|c| match format {
                    "nvfp4" => cuda.random_nvfp4(&[n, k], seed + 16 * c, 0.02),
                    "fp8" => cuda.random_fp8(&[n, k], seed + 16 * c, 0.02),
                    _ => cuda.random_bf16(&[n, k], seed + 16 * c, 0.02),
                })
                .collect::<std::result::Result<Vec<_>, _>>()?;
            weights.push((format, w));
        }
        for (r, &m) in ROWS.iter().enumerate() {
            let x = cuda.random_bf16(&[m, k], 7, 1.0)?;
            let mut out = cuda.zeros(&[m, n])?;
            let mut cells = Vec::new();
            let mut record = json!({"profile": "nvfp4_gemv", "weight": name, "n": n, "k": k,
                "rows": m});
            for (f, &(label, format, settings)) in ROUTES.iter().enumerate() {
                let w = &weights
                    .iter()
                    .find(|(wf, _)| *wf == format)
                    .expect("drawn")
                    .1;
                let saved = cuda.tuning().gemm;
                cuda.retune(|t| settings(&mut t.gemm));
                let mut i = 0;
                let ms = mean_op_ms_n(cuda, ITERS, || {
                    i = (i + 1) % w.len();
                    Ok(cuda.matmul(&mut out, &x, &w[i])?)
                });
                cuda.retune(|t| t.gemm = saved);
                let ms = ms?;
                let bytes = weight_bytes(format, n, k);
                let (us, floor_us) = (ms * 1e3, bytes / FLOOR_BYTES_PER_S * 1e6);
                step[r][f] += layers as f64 * us;
                cells.push(format!(
                    "{label} {us:7.1} ({:4.2} TB/s, floor {floor_us:5.1})",
                    bytes / (us / 1e6) / 1e12
                ));
                record[label] = json!({"us": us, "floor_us": floor_us, "bytes": bytes});
            }
            report.summary_line(format!(
                "  {name:<22} [{n:>5}, {k:>5}] rows {m:>2}: {}",
                cells.join(" | ")
            ));
            report.record(record);
        }
    }
    for (r, &m) in ROWS.iter().enumerate() {
        let ms: Vec<String> = ROUTES
            .iter()
            .zip(step[r])
            .map(|((label, ..), us)| format!("{label} {:.2}", us / 1e3))
            .collect();
        let (nvfp4, fp8, bf16) = (step[r][NVFP4], step[r][FP8], step[r][BF16]);
        report.summary_line(format!(
            "  27B decode step's GEMVs (64 layers, no LM head) rows {m:>3}, ms: {} (nvfp4 \
             {:.2}x fp8's speed, {:.2}x bf16's)",
            ms.join(", "),
            fp8 / nvfp4,
            bf16 / nvfp4
        ));
    }
    copy_probe(cuda, report)
}

/// The bf16-copy route's parts, each alone (`CudaBackend::nvfp4_copy_probe`), at two of the
/// shapes and at a decode and a prefill row count: which part makes the route slow.
fn copy_probe(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    for &(name, _, n, k) in [SHAPES[0], SHAPES[5]].iter() {
        let w = cuda.random_nvfp4(&[n, k], 0x636f_7079, 0.02)?;
        for m in [1usize, 512] {
            let x = cuda.random_bf16(&[m, k], 7, 1.0)?;
            let mut out = cuda.zeros(&[m, n])?;
            let p = cuda.nvfp4_copy_probe(&mut out, &x, &w, 20)?;
            report.summary_line(format!(
                "  nvfp4 copy route {name:<22} rows {m:>3}: alloc {:.1} µs, dequant {:.1}, \
                 bf16 GEMM {:.1}, whole route {:.1} (host {:.1} a call)",
                p.alloc_us, p.dequant_us, p.gemm_us, p.route_us, p.route_host_us
            ));
            report.record(
                json!({"profile": "nvfp4_copy_probe", "weight": name, "n": n,
                "k": k, "rows": m, "alloc_us": p.alloc_us, "dequant_us": p.dequant_us,
                "gemm_us": p.gemm_us, "route_us": p.route_us,
                "route_host_us": p.route_host_us}),
            );
        }
    }
    Ok(())
}
