//! The `hybrid` section's Mamba-2 timings (not pass/fail): `mamba2` alone at Nemotron Nano 9B
//! v2's heads (nh 128, p 80, G 8, N 128, K 4; bf16 mixed), a decode step at batch 1, 16 and 64,
//! and a 2048-token prefill on the chunked scan and on the token-by-token scan, each beside its
//! floor (docs/cuda-kernels-families.md).

use anyhow::Result;
use metrale_engine::backend::cuda::{CudaBackend, DType};
use metrale_engine::backend::{Backend, HybridOps, Mamba2Layer, SsmHeads};
use serde_json::json;

use crate::hybrid::batch as batch_of;
use crate::ops::Rng;
use crate::report::Report;
use crate::speed_moe::{OP_ITERS, mean_op_ms_n};

/// An H100's measured copy bandwidth (the floor's bytes over it); tensor cores' dense tf32
/// rate over three products a 3xTF32 product (H100 SXM: 495 TFLOPS / 3).
const BYTES_PER_S: f64 = 3.0e12;
const TF32X3_FLOPS: f64 = 165e12;

/// FLOPs of the chunked form for `t` rows in chunks of 64: per chunk C·Bᵀ a group (64² · N),
/// and per head C·S₀ᵀ and the state update (64 · p · N each) and M·X (64² · p, half of it
/// the mask's zeros, counted whole as the kernel computes it).
fn chunk_flops(t: usize, h: &SsmHeads) -> f64 {
    let (c, p, n) = (64.0, h.head_dim as f64, h.state as f64);
    let chunks = (t as f64 / c).ceil();
    let macs = c * c * n * h.groups as f64 + h.heads as f64 * (2.0 * c * p * n + c * c * p);
    2.0 * macs * chunks
}

pub fn run(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    let h = SsmHeads {
        heads: 128,
        head_dim: 80,
        groups: 8,
        state: 128,
    };
    let kernel = 4usize;
    let (inner, cd) = (h.inner(), h.conv_dim());
    let width = inner + cd + h.heads;
    let mut rng = Rng::new(40);
    let up = |shape: &[usize], v: Vec<f32>| cuda.upload_f32(shape, &v);
    let params = [
        up(&[cd, kernel], rng.vec(cd * kernel, 0.5))?,
        up(&[cd], rng.vec(cd, 0.5))?,
        up(&[h.heads], vec![-1.0; h.heads])?,
        up(&[h.heads], rng.vec(h.heads, 1.0))?,
        up(&[h.heads], vec![1.0; h.heads])?,
        up(&[inner], vec![1.0; inner])?,
    ];
    let layer = Mamba2Layer {
        heads: h,
        kernel,
        conv: &params[0],
        conv_bias: &params[1],
        neg_a: &params[2],
        dt_bias: &params[3],
        d: &params[4],
        norm: &params[5],
        dt_limit: (0.0, f32::INFINITY),
        eps: 1e-5,
    };
    report.line(format!(
        "mamba2 at Nemotron Nano 9B v2 heads (nh 128, p 80, G 8, N 128, K 4, C {cd}), bf16 \
         mixed, mean of eager calls ({OP_ITERS} for decode, 20 for prefill):"
    ));
    let defaults = cuda.tuning().mamba2;
    let state_bytes = 4.0 * h.state_len() as f64;
    let window_bytes = 4.0 * ((kernel - 1) * cd) as f64;
    let decodes = [1usize, 16, 64].map(|b| (b, 1usize, "3 launches", defaults.chunk_min));
    let prefills = [
        ("chunked", defaults.chunk_min.or(Some(32))),
        ("token scan", None),
    ]
    .map(|(w, cmin)| (1usize, 2048usize, w, cmin));
    for (seqs, rows, what, chunk_min) in decodes.into_iter().chain(prefills) {
        let (b, slots) = batch_of(&vec![(rows, vec![]); seqs]);
        let t = b.num_tokens();
        let mixed = cuda.tensor_from_f32(&[t, width], &rng.vec(t * width, 1.0), DType::BF16)?;
        let mut conv_state = cuda.zeros_f32(&[slots, (kernel - 1) * cd])?;
        let mut ssm = cuda.zeros_f32(&[slots, h.state_len()])?;
        let mut out = cuda.zeros(&[t, inner])?;
        let batch_d = cuda.prepare_batch(&b)?;
        cuda.retune(|t| t.mamba2.chunk_min = chunk_min);
        let iters = if t > 64 { 20 } else { OP_ITERS };
        let ms = mean_op_ms_n(cuda, iters, || {
            cuda.mamba2(
                &mut out,
                &mixed,
                &layer,
                &mut conv_state,
                &mut ssm,
                &b,
                &batch_d,
            )
            .map_err(Into::into)
        });
        cuda.retune(|t| t.mamba2 = defaults);
        let ms = ms?;
        // The floor: each sequence's state and window read and written once, mixed (bf16)
        // read and the output (bf16) written.
        let bytes = seqs as f64 * 2.0 * (state_bytes + window_bytes)
            + t as f64 * 2.0 * (width + inner) as f64;
        let floor_ms = bytes / BYTES_PER_S * 1e3;
        let case = if rows == 1 {
            format!("decode B={seqs}, {what}")
        } else {
            format!("prefill {rows}, {what}")
        };
        let flops = chunk_flops(t, &h);
        report.summary_line(format!(
            "mamba2 {case}: {:.1} us; floor {:.1} us ({:.2} MB at 3.0 TB/s), achieved/floor \
             {:.3}{}",
            ms * 1e3,
            floor_ms * 1e3,
            bytes / 1e6,
            floor_ms / ms,
            if rows > 1 {
                format!(
                    "; chunked form {:.1} GFLOP ({:.1} us at 3xTF32's tensor-core rate)",
                    flops / 1e9,
                    flops / TF32X3_FLOPS * 1e6
                )
            } else {
                String::new()
            }
        ));
        report.record(
            json!({"op": "mamba2", "case": case, "ms": ms, "floor_ms": floor_ms,
            "bytes": bytes, "chunk_flops": flops}),
        );
    }
    Ok(())
}
