//! FP8 `matmul` at decode batches of 16 to 128 rows on its two tensor-core routes (not
//! pass/fail; section `fp8-rows-speed`): `many`, `gemv_fp8_mma_many` (16 weight rows a block, x
//! in chunks of 32 rows, `gemm.fp8_tile_rows_min` off), and `tiles`, the tile GEMM
//! `fp8_gemm_rows_m*` (128 weight rows and every x row a block, k split where the column tiles
//! are few; `gemm.fp8_tile_rows_min` 1, `gemm.fp8_tile_max_splits` 8), at Qwen3-30B-A3B's dense projections and the widest of
//! Qwen3.6-35B-A3B's and Qwen3.6-27B's FP8 ones (scripts/gpu/*-fp8-config.json).
//!
//! Each line: the mean µs of one matmul over back-to-back calls, the TB/s that makes of the
//! bytes it must move once (the weight's bytes and scales, x, out), and that floor at the GPU's
//! rated bandwidth (H100 3.35 TB/s, H200 4.8; else speed.rs's FLOOR_BYTES_PER_S). The calls
//! rotate over enough copies of each weight (over 200 MB in all) that none is still in the L2
//! when it is read again. Then the 30B-A3B step's 48 layers of q|k|v + o on each route.

use anyhow::Result;
use metrale_engine::backend::Backend;
use metrale_engine::backend::cuda::{CudaBackend, CudaTensor};
use serde_json::json;

use crate::report::Report;
use crate::speed::FLOOR_BYTES_PER_S;
use crate::speed_moe::mean_op_ms_n;

/// (name, out columns n, in columns k). The first two are Qwen3-30B-A3B's q|k|v and o, which
/// its 48 layers run once a step each.
const SHAPES: [(&str, usize, usize); 6] = [
    ("30B-A3B q|k|v", 5120, 2048),
    ("30B-A3B o", 2048, 4096),
    ("35B-A3B gdn in_proj", 12_352, 2048),
    ("27B gdn in_proj", 16_480, 5120),
    ("27B mlp gate|up", 2 * 17_408, 5120),
    ("27B mlp down", 5120, 17_408),
];
/// Layers of Qwen3-30B-A3B (each runs SHAPES[0] and SHAPES[1] once a step).
const LAYERS_30B: f64 = 48.0;

/// Rows of x timed.
const ROWS: [usize; 4] = [16, 32, 64, 128];

/// The routes: (label, `gemm.fp8_tile_rows_min`).
const ROUTES: [(&str, Option<usize>); 2] = [("many", None), ("tiles", Some(1))];

/// Calls averaged per time.
const ITERS: usize = 50;

/// Bytes an FP8 matmul of m rows must move once: the weight and its scales, x (bf16), out (f32).
fn bytes(m: usize, n: usize, k: usize) -> f64 {
    let (m, n, k) = (m as f64, n as f64, k as f64);
    n * k + n * (k / 128.0).ceil() * 4.0 + m * k * 2.0 + m * n * 4.0
}

/// The GPU's rated memory bandwidth, by name.
fn peak_bytes_per_s(device: &str) -> f64 {
    if device.contains("H200") {
        4.8e12
    } else if device.contains("H100") {
        3.35e12
    } else {
        FLOOR_BYTES_PER_S
    }
}

pub fn run(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    let peak = peak_bytes_per_s(&cuda.info().name);
    report.summary_line(format!(
        "FP8 matmul of 16-128 rows, gemv_fp8_mma_many (many) against the tile GEMM (tiles): µs \
         a call (TB/s of the bytes moved once; floor µs at {:.2} TB/s)",
        peak / 1e12
    ));
    // The 30B-A3B step's q|k|v + o time, per row count and route.
    let mut step = [[0f64; ROUTES.len()]; ROWS.len()];
    for (s, &(name, n, k)) in SHAPES.iter().enumerate() {
        let weight = (n * k + n * k.div_ceil(128) * 4) as f64;
        let count = ((200e6 / weight).ceil() as usize).clamp(1, 16);
        let w = (0..count as u64)
            .map(|c| cuda.random_fp8(&[n, k], 0x0066_7038_726f + 16 * (c + 64 * s as u64), 0.02))
            .collect::<std::result::Result<Vec<CudaTensor>, _>>()?;
        for (r, &m) in ROWS.iter().enumerate() {
            let x = cuda.random_bf16(&[m, k], 7, 1.0)?;
            let mut out = cuda.zeros(&[m, n])?;
            let (b, mut cells) = (bytes(m, n, k), Vec::new());
            let floor_us = b / peak * 1e6;
            let mut record = json!({"profile": "fp8_rows", "weight": name, "n": n, "k": k,
                "rows": m, "bytes": b, "floor_us": floor_us});
            for (f, &(label, tile_min)) in ROUTES.iter().enumerate() {
                let was = cuda.tuning().gemm;
                cuda.retune(|t| {
                    t.gemm.fp8_tile_rows_min = tile_min;
                    t.gemm.fp8_tile_max_splits = 8;
                });
                let plan = cuda.fp8_tile_plan(m, n, k);
                let mut i = 0;
                let ms = mean_op_ms_n(cuda, ITERS, || {
                    i = (i + 1) % w.len();
                    Ok(cuda.matmul(&mut out, &x, &w[i])?)
                });
                cuda.retune(|t| t.gemm = was);
                let us = ms? * 1e3;
                if s < 2 {
                    step[r][f] += LAYERS_30B * us;
                }
                let how = plan.map_or(String::new(), |(kernel, splits)| {
                    format!(" [{kernel}, {splits} splits]")
                });
                cells.push(format!(
                    "{label} {us:6.1} ({:4.2} TB/s){how}",
                    b / (us / 1e6) / 1e12
                ));
                record[label] = json!({"us": us, "kernel": plan.map(|p| p.0),
                    "splits": plan.map(|p| p.1)});
            }
            report.summary_line(format!(
                "  {name:<20} [{n:>5}, {k:>5}] rows {m:>3}: {} | floor {floor_us:5.1}",
                cells.join(" | ")
            ));
            report.record(record);
        }
    }
    for (r, &m) in ROWS.iter().enumerate() {
        let floor: f64 = SHAPES[..2]
            .iter()
            .map(|&(_, n, k)| LAYERS_30B * bytes(m, n, k) / peak * 1e3)
            .sum();
        report.summary_line(format!(
            "  30B-A3B step's q|k|v + o (48 layers) rows {m:>3}: many {:.2} ms, tiles {:.2} ms \
             (floor {floor:.2} ms)",
            step[r][0] / 1e3,
            step[r][1] / 1e3
        ));
    }
    Ok(())
}
