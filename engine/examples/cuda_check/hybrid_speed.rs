//! The `hybrid` section's timings (not pass/fail): `gated_delta_net` alone at Qwen3.6-35B-A3B's
//! heads (decode at batch 1 and 64 on the fused kernel and on the 3-launch path; 16-, 64-,
//! 2048- and 8 × 256-token prefills through the recurrent and the chunked kernels) beside its
//! floor, then a whole 2048-token prefill of the 35B-A3B shape
//! (`scripts/gpu/qwen3.6-35b-a3b-config.json`, dummy weights) through each.

use std::time::Instant;

use anyhow::{Context, Result};
use cudarc::driver::sys::CUevent_flags;
use metrale_engine::backend::cuda::{CudaBackend, CudaTensor, DType, GDN_CHUNK_MIN};
use metrale_engine::backend::{Backend, DeltaHeads, GdnLayer, HybridOps};
use metrale_engine::kv_cache::state::StatePlan;
use metrale_engine::loader::{LoadFormat, Weights};
use metrale_engine::models::Model;
use metrale_engine::models::qwen3_5::{Qwen3_5, Qwen3_5Config};
use serde_json::json;

use crate::hybrid::batch as batch_of;
use crate::ops::Rng;
use crate::report::Report;
use crate::speed::{BLOCK, prefill_batch};
use crate::speed_moe::{OP_ITERS, mean_op_ms_n};

/// H200 ceilings (docs/cuda.md's floor): bytes at about 4 TB/s; FLOPs at cuBLAS's measured bf16
/// rate and at the f32 CUDA cores' peak (132 SMs · 128 lanes · 2 · 1.98 GHz).
const BYTES_PER_S: f64 = 4.0e12;
const TC_FLOPS: f64 = 780e12;
const F32_FLOPS: f64 = 66.9e12;

/// FLOPs of the chunked form for `t` rows in chunks of 64 (triangles counted as halves): per
/// chunk and value head KKᵀ, QKᵀ and the solve for W (C²/2 · dk each), Tb (C³/6), Tb·V and
/// P·δ (C²/2 · dv each), and the three state products W·S, Qg·S, Ktᵀ·δ (C · dk · dv each).
fn chunk_flops(t: usize, h: &DeltaHeads) -> f64 {
    let c = 64.0;
    let (dk, dv) = (h.dk as f64, h.dv as f64);
    let macs = c * c / 2.0 * (3.0 * dk + 2.0 * dv) + c * c * c / 6.0 + 3.0 * c * dk * dv;
    2.0 * macs * (t as f64 / c).ceil() * h.nv as f64
}

/// `gated_delta_net` at Qwen3.6-35B-A3B's heads: mean ms of back-to-back eager calls between
/// CUDA events, against the bytes it must move at about 4 TB/s.
fn layer(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    let h = DeltaHeads {
        nk: 16,
        dk: 128,
        nv: 32,
        dv: 128,
    };
    let (kernel, cd) = (4usize, 2 * 16 * 128 + 32 * 128);
    let width = cd + h.nv * h.dv + 2 * h.nv;
    let rec = h.nv * h.dk * h.dv;
    let mut rng = Rng::new(11);
    let p = |shape: &[usize], v: Vec<f32>| cuda.upload_f32(shape, &v);
    let conv = p(&[cd, kernel], rng.vec(cd * kernel, 0.5))?;
    let neg_a = p(&[h.nv], vec![-1.0; h.nv])?;
    let dt_bias = p(&[h.nv], rng.vec(h.nv, 1.0))?;
    let norm = p(&[h.dv], vec![1.0; h.dv])?;
    let layer = GdnLayer {
        heads: h,
        kernel,
        conv: &conv,
        neg_a: &neg_a,
        dt_bias: &dt_bias,
        norm: &norm,
        eps: 1e-6,
    };
    report.line(format!(
        "gated_delta_net at 35B-A3B heads (nk 16, nv 32, dk = dv = 128, K 4, C 8192), f32 \
         mixed, mean of eager calls ({OP_ITERS} for decode, 20 for prefill):"
    ));
    let chunked = Some(GDN_CHUNK_MIN);
    decode(cuda, report, &layer, &mut rng)?;
    for (what, seqs, route) in [
        ("prefill 16, recurrent", vec![(16usize, vec![])], None),
        ("prefill 16, chunked", vec![(16, vec![])], Some(1)),
        ("prefill 64, recurrent", vec![(64, vec![])], None),
        ("prefill 64, chunked", vec![(64, vec![])], Some(1)),
        ("prefill 2048, recurrent", vec![(2048, vec![])], None),
        ("prefill 2048, chunked", vec![(2048, vec![])], chunked),
        ("prefill 8x256, recurrent", vec![(256, vec![]); 8], None),
        ("prefill 8x256, chunked", vec![(256, vec![]); 8], chunked),
    ] {
        let (b, slots) = batch_of(&seqs);
        let t = b.num_tokens();
        let mixed = cuda.tensor_from_f32(&[t, width], &rng.vec(t * width, 1.0), DType::F32)?;
        let mut conv_state = cuda.zeros_f32(&[slots, (kernel - 1) * cd])?;
        let mut recurrent = cuda.zeros_f32(&[slots, rec])?;
        let mut out = cuda.zeros(&[t, h.nv * h.dv])?;
        let batch_d = cuda.prepare_batch(&b)?;
        cuda.retune(|t| t.gdn.chunk_min = route);
        let iters = if t > 64 { 20 } else { OP_ITERS };
        let ms = mean_op_ms_n(cuda, iters, || {
            cuda.gated_delta_net(
                &mut out,
                &mixed,
                &layer,
                &mut conv_state,
                &mut recurrent,
                &b,
                &batch_d,
            )
            .map_err(Into::into)
        });
        cuda.retune(|t| t.gdn.chunk_min = chunked);
        let ms = ms?;
        // Bytes a fused kernel must move: the states (read + written) of each sequence, mixed
        // read once, the bf16 output written.
        let s = seqs.len() as f64;
        let bytes = s * 2.0 * 4.0 * (rec + (kernel - 1) * cd) as f64
            + t as f64 * (4.0 * width as f64 + 2.0 * (h.nv * h.dv) as f64);
        let floor_ms = bytes / BYTES_PER_S * 1e3;
        // FLOPs of the recurrent form: three dk × dv passes a token and head (2 each).
        let flops = t as f64 * h.nv as f64 * 6.0 * (h.dk * h.dv) as f64;
        let cflops = chunk_flops(t, &h);
        report.summary_line(format!(
            "gated_delta_net {what}: {:.1} us; floor {:.1} us ({:.1} MB at 4 TB/s), \
             achieved/floor {:.3}; {:.2} GFLOP recurrent form, {:.2} GFLOP chunked form \
             ({:.1} us on tensor cores, {:.1} us at the f32 CUDA cores' peak)",
            ms * 1e3,
            floor_ms * 1e3,
            bytes / 1e6,
            floor_ms / ms,
            flops / 1e9,
            cflops / 1e9,
            cflops / TC_FLOPS * 1e6,
            cflops / F32_FLOPS * 1e6,
        ));
        report.record(json!({"op": "gated_delta_net", "case": what, "ms": ms,
            "floor_ms": floor_ms, "bytes": bytes, "flops": flops, "chunk_flops": cflops}));
    }
    Ok(())
}

/// Decode steps of `layer` at batch 1 and 64: the fused kernel (default column splits, then 1,
/// 2 and 4) against the 3-launch path. Two times each: the mean of back-to-back eager calls
/// (what an eager step pays, host launch cost included) and the mean of calls queued behind
/// 4 ms of GEMMs so that the host is ahead and the events time the GPU alone (what a CUDA
/// graph's replay pays).
fn decode(
    cuda: &CudaBackend,
    report: &mut Report,
    layer: &GdnLayer<'_, CudaTensor>,
    rng: &mut Rng,
) -> Result<()> {
    let h = layer.heads;
    let cd = 2 * h.nk * h.dk + h.nv * h.dv;
    let width = cd + h.nv * h.dv + 2 * h.nv;
    let rec = h.nv * h.dk * h.dv;
    // The queue's head start: three 8192³ bf16 GEMMs (about 1.4 ms each).
    let n = 8192;
    let (a, b) = (
        cuda.random_bf16(&[n, n], 1, 0.02)?,
        cuda.random_bf16(&[n, n], 2, 0.02)?,
    );
    let mut c = cuda.zeros(&[n, n])?;
    for batch in [1usize, 64] {
        let seqs = vec![(1usize, vec![]); batch];
        let (b_in, slots) = batch_of(&seqs);
        let mixed =
            cuda.tensor_from_f32(&[batch, width], &rng.vec(batch * width, 1.0), DType::F32)?;
        let mut conv_state = cuda.zeros_f32(&[slots, (layer.kernel - 1) * cd])?;
        let mut recurrent = cuda.zeros_f32(&[slots, rec])?;
        let mut out = cuda.zeros(&[batch, h.nv * h.dv])?;
        let batch_d = cuda.prepare_batch(&b_in)?;
        let bytes = batch as f64 * 2.0 * 4.0 * (rec + (layer.kernel - 1) * cd) as f64
            + batch as f64 * (4.0 * width as f64 + 2.0 * (h.nv * h.dv) as f64);
        let floor_us = bytes / BYTES_PER_S * 1e6;
        for (what, fused, splits) in [
            ("fused", true, None),
            ("fused, 1 block a key head", true, Some(1)),
            ("fused, 2 blocks a key head", true, Some(2)),
            ("fused, 4 blocks a key head", true, Some(4)),
            ("3 launches", false, None),
        ] {
            cuda.retune(|t| t.gdn.fused_decode = fused);
            cuda.retune(|t| t.gdn.decode_splits = splits);
            let covers = cuda.gdn_fused_decode_covers(&b_in, &h);
            let mut call = || -> Result<()> {
                cuda.gated_delta_net(
                    &mut out,
                    &mixed,
                    layer,
                    &mut conv_state,
                    &mut recurrent,
                    &b_in,
                    &batch_d,
                )?;
                Ok(())
            };
            let eager = mean_op_ms_n(cuda, OP_ITERS, &mut call);
            let queued = (|| -> Result<f64> {
                call()?;
                cuda.synchronize()?;
                for _ in 0..3 {
                    cuda.matmul(&mut c, &a, &b)?;
                }
                let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
                let start = cuda.stream().record_event(flags).context("event")?;
                let iters = 100;
                for _ in 0..iters {
                    call()?;
                }
                let end = cuda.stream().record_event(flags).context("event")?;
                Ok(f64::from(start.elapsed_ms(&end).context("elapsed")?) / f64::from(iters))
            })();
            cuda.retune(|t| t.gdn.fused_decode = true);
            cuda.retune(|t| t.gdn.decode_splits = None);
            let (eager, queued) = (eager? * 1e3, queued? * 1e3);
            report.summary_line(format!(
                "gated_delta_net decode B={batch}, {what}{}: {eager:.1} us eager, {queued:.1} us \
                 queued (GPU); floor {floor_us:.1} us, queued achieved/floor {:.3}",
                if covers == fused {
                    ""
                } else {
                    " (NOT on the path asked for)"
                },
                floor_us / queued
            ));
            report.record(
                json!({"op": "gated_delta_net", "case": format!("decode B={batch}, {what}"),
                "eager_us": eager, "queued_us": queued, "floor_us": floor_us,
                "fused": covers}),
            );
        }
    }
    Ok(())
}

/// A whole 2048-token prefill (one sequence, eager, forward only) of the 35B-A3B shape with
/// dummy weights, its Gated DeltaNet layers on each kernel: median of 3 after a warm-up.
fn prefill(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    const PREFILL: usize = 2048;
    let dir = std::env::temp_dir().join(format!("metrale-hybrid-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(
        dir.join("config.json"),
        include_str!("../../../scripts/gpu/qwen3.6-35b-a3b-config.json"),
    )?;
    let config = Qwen3_5Config::from_file(&dir.join("config.json"));
    let weights = Weights::open(&dir, LoadFormat::Dummy);
    let _ = std::fs::remove_dir_all(&dir);
    let (config, weights) = (config?, weights?);
    let t0 = Instant::now();
    let model = Qwen3_5::load_on(cuda, &config, &weights, false, &mut |_| {})?;
    cuda.synchronize()?;
    report.line(format!(
        "35B-A3B shape: dummy model loaded in {:.1} s",
        t0.elapsed().as_secs_f64()
    ));
    let mut kv = model.new_kv_storage(cuda, PREFILL.div_ceil(BLOCK) + 1, BLOCK)?;
    kv.state = Some(model.new_state_storage(cuda, 1)?);
    let mut host = prefill_batch(PREFILL);
    host.states = vec![StatePlan::lone(0)];
    let batch_d = cuda.prepare_batch(&host)?;
    let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
    let mut medians = Vec::new();
    for (what, route) in [("recurrent", None), ("chunked", Some(GDN_CHUNK_MIN))] {
        cuda.retune(|t| t.gdn.chunk_min = route);
        let mut ms = Vec::new();
        for i in 0..4 {
            let start = cuda.stream().record_event(flags).context("event")?;
            model.forward(cuda, &host, &batch_d, &mut kv)?;
            let end = cuda.stream().record_event(flags).context("event")?;
            if i > 0 {
                ms.push(f64::from(start.elapsed_ms(&end).context("elapsed")?));
            }
        }
        ms.sort_by(f64::total_cmp);
        let median = ms[ms.len() / 2];
        medians.push(median);
        report.summary_line(format!(
            "35B-A3B shape prefill {PREFILL} tokens, Gated DeltaNet {what}: {median:.1} ms \
             ({:.0} tok/s)",
            PREFILL as f64 / median * 1e3
        ));
        report.record(json!({"step": format!("35B-A3B prefill {PREFILL} {what}"),
            "median_ms": median}));
    }
    cuda.retune(|t| t.gdn.chunk_min = Some(GDN_CHUNK_MIN));
    if let [before, after] = medians[..] {
        report.summary_line(format!(
            "35B-A3B shape prefill: chunked {:.2}x the speed of recurrent",
            before / after
        ));
    }
    Ok(())
}

pub fn run(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    layer(cuda, report)?;
    if std::env::var_os("METRALE_HYBRID_PREFILL").is_none_or(|v| v != "0") {
        prefill(cuda, report)?;
    }
    Ok(())
}
