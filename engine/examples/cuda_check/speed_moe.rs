//! A speed probe of Qwen3-MoE decode (not pass/fail): Qwen3-30B-A3B's shape with dummy
//! weights, in bf16 and with FP8 projections (`scripts/gpu/qwen3-30b-a3b*-config.json`),
//! loaded through `Weights::Dummy` + `Qwen3::load` as `met serve --load-format dummy` does (the
//! experts are recipes the device draws), one decode step at batch 1, 8 and 64 over 128-token
//! contexts through the decode graph, against the floor of reading the active weights once at
//! 4.0 TB/s (each step again with programmatic dependent launch off, see `speed::pdl_off_line`),
//! and one 2048-token prefill. Prints FP8's speed-up over bf16 at batch 1 (issue 11 asks for at
//! least 1.6), and the time of a layer's MoE-specific ops at batch 1 on their own (`op_times`).

use std::time::Instant;

use anyhow::{Context, Result};
use cudarc::driver::sys::CUevent_flags;
use metrale_engine::backend::Backend;
use metrale_engine::backend::cuda::{CudaBackend, CudaTensor, DType, MoeGemm};
use metrale_engine::loader::{LoadFormat, ModelConfig, ModelDir, Weights};
use metrale_engine::models::Model;
use metrale_engine::models::qwen3::Qwen3;

use crate::report::Report;
use crate::speed::{
    BLOCK, CONTEXT, FLOOR_BYTES_PER_S, decode_batch, decode_batch_at, pdl_off_line, prefill_batch,
    time_step, time_steps, timing_header, timing_line,
};
use crate::speed_probe;

/// Prompt tokens of the prefill timing.
const PREFILL: usize = 2048;

pub(crate) const CONFIGS: [(&str, &str); 2] = [
    (
        "30B-A3B bf16",
        include_str!("../../../scripts/gpu/qwen3-30b-a3b-config.json"),
    ),
    (
        "30B-A3B fp8",
        include_str!("../../../scripts/gpu/qwen3-30b-a3b-fp8-config.json"),
    ),
];

/// A config's attention sizes as floats, and the bytes a projection weight takes (FP8: a byte
/// plus a 4-byte scale per 128; bf16: 2).
pub(crate) struct AttnDims {
    pub(crate) h: f64,
    pub(crate) hd: f64,
    pub(crate) nh: f64,
    pub(crate) nkv: f64,
    pub(crate) proj_bytes: f64,
}

impl AttnDims {
    pub(crate) fn of(c: &ModelConfig) -> Self {
        AttnDims {
            h: c.hidden_size as f64,
            hd: c.head_dim as f64,
            nh: c.num_attention_heads as f64,
            nkv: c.num_key_value_heads as f64,
            proj_bytes: if c.fp8.is_some() {
                1.0 + 4.0 / 128.0
            } else {
                2.0
            },
        }
    }
}

/// Bytes of weights one decode step of `b` tokens reads: attention, router and the LM head
/// always; of the experts, the expected number of distinct ones `b` tokens choose when each
/// picks `k` of `E` (`E · (1 − (1 − k/E)^b)`). FP8 projections are a byte a weight plus a
/// 4-byte scale per 128; the router and the head stay bf16.
pub fn active_weight_bytes(c: &ModelConfig, b: usize) -> f64 {
    let AttnDims {
        h,
        hd,
        nh,
        nkv,
        proj_bytes,
    } = AttnDims::of(c);
    let attn = h * (nh + 2.0 * nkv) * hd + nh * hd * h;
    let (experts, router) = match &c.moe {
        Some(m) => {
            let (e, k) = (m.num_experts as f64, m.num_experts_per_tok as f64);
            let distinct = e * (1.0 - (1.0 - k / e).powi(b as i32));
            (distinct * 3.0 * h * m.moe_intermediate_size as f64, e * h)
        }
        None => (3.0 * h * c.intermediate_size as f64, 0.0),
    };
    let layers = c.num_hidden_layers as f64;
    layers * ((attn + experts) * proj_bytes + router * 2.0) + c.vocab_size as f64 * h * 2.0
}

/// The largest decode batch `METRALE_MOE_SPEED_BATCHES` may ask (the KV storage's sequences).
const MAX_BATCH: usize = 128;

pub fn run(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    // First, so a run cut short still has it: the pipelined small-step experts against the
    // default (issue 34). Under a profiler (METRALE_MOE_SPEED_PREFILL=0, below) it and the
    // probes are skipped, so the decode steps' kernels come first.
    let prefill = std::env::var("METRALE_MOE_SPEED_PREFILL").map_or(true, |v| v != "0");
    if prefill {
        pipe_sweep(cuda, report)?;
        // The synchronisation probes and the persistent-kernel skeleton (reported, not fatal).
        speed_probe::run(cuda, report);
    }
    timing_header(report, "moe decode step");
    let mut batch1 = Vec::new();
    // METRALE_MOE_SPEED_ONLY=fp8 runs only the configs whose name contains it (e.g. under a
    // profiler).
    let only = std::env::var("METRALE_MOE_SPEED_ONLY").unwrap_or_default();
    // METRALE_MOE_SPEED_BATCHES=1 times only those decode batches; METRALE_MOE_SPEED_PREFILL=0
    // skips the pipelined sweep, the probes, the prefill and the single ops (both for runs
    // under a profiler).
    let batches: Vec<usize> = match std::env::var("METRALE_MOE_SPEED_BATCHES") {
        Ok(v) => v
            .split(',')
            .map(|b| {
                b.trim()
                    .parse()
                    .context("METRALE_MOE_SPEED_BATCHES: a list of batch sizes")
            })
            .collect::<Result<_>>()?,
        Err(_) => vec![1, 8, 64],
    };
    anyhow::ensure!(
        batches.iter().all(|b| (1..=MAX_BATCH).contains(b)),
        "METRALE_MOE_SPEED_BATCHES: batch sizes from 1 to {MAX_BATCH} (the KV storage holds \
         {MAX_BATCH} sequences)"
    );
    for (name, text) in CONFIGS
        .into_iter()
        .filter(|(n, _)| n.contains(only.as_str()))
    {
        let dir = std::env::temp_dir().join(format!("metrale-moe-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("config.json"), text)?;
        let c = ModelDir::open(&dir)?.config();
        let weights = Weights::open(&dir, LoadFormat::Dummy);
        let _ = std::fs::remove_dir_all(&dir);
        let (c, weights) = (c?, weights?);
        // Graphs are keyed by shape only: drop those the previous model captured.
        cuda.drop_graphs();
        let t0 = Instant::now();
        let model = Qwen3::load(cuda, &c, &weights)?;
        cuda.synchronize()?;
        report.line(format!(
            "{name}: dummy model loaded in {:.1} s",
            t0.elapsed().as_secs_f64()
        ));
        let blocks_per_seq = (CONTEXT + 1).div_ceil(BLOCK);
        let mut kv = model.new_kv_storage(cuda, MAX_BATCH * blocks_per_seq + 1, BLOCK)?;
        let kv_per_token = model.kv_bytes_per_token(cuda) as f64;
        // Batch 64 takes the experts' tensor-core kernels (4 pairs an expert) inside the graph.
        for &b in &batches {
            let host = decode_batch(b, blocks_per_seq.next_power_of_two());
            let t = time_step(cuda, &model, &mut kv, &host, true)?;
            let bytes = active_weight_bytes(&c, b) + (b * (CONTEXT + 1)) as f64 * kv_per_token;
            let floor_ms = bytes / FLOOR_BYTES_PER_S * 1e3;
            let what = format!("{name} B={b} ctx {CONTEXT} graph");
            timing_line(report, what.clone(), &t, bytes, floor_ms);
            pdl_off_line(
                cuda,
                &model,
                &mut kv,
                &host,
                report,
                (what, bytes, floor_ms),
            )?;
            if b == 1 {
                batch1.push(t.median_ms);
            }
            // The same step on moe_gate_up instead of the decode gate_up kernel (graphs are
            // keyed by shape: drop the one captured with the other kernel, before and after).
            let regraph = || {
                cuda.drop_graphs();
            };
            cuda.retune(|t| t.moe.decode_gate_up = false);
            regraph();
            let t = time_step(cuda, &model, &mut kv, &host, true);
            cuda.retune(|t| t.moe.decode_gate_up = true);
            regraph();
            let t = t?;
            timing_line(
                report,
                format!("{name} B={b} graph, moe_gate_up"),
                &t,
                bytes,
                floor_ms,
            );
            // The step again with a switch flipped: `set(true)` sets it, `set(false)` puts the
            // default back (graphs are keyed by shape: recaptured before and after).
            let mut variant = |what: String, set: &dyn Fn(bool)| -> Result<()> {
                set(true);
                regraph();
                let t = time_step(cuda, &model, &mut kv, &host, true);
                set(false);
                regraph();
                timing_line(
                    report,
                    format!("{name} B={b} graph, {what}"),
                    &t?,
                    bytes,
                    floor_ms,
                );
                Ok(())
            };
            let (cols, full) = (cuda.tuning().moe.down_cols, cuda.gemv_full());
            if b <= 8 {
                // The decode down + combine kernel (rows loaded before the wait) at 1, 2 and 4
                // output columns a block.
                for n in [0, 1, 2, 4] {
                    variant(format!("down + combine dec, {n} columns a block"), &|on| {
                        cuda.retune(|t| t.moe.down_cols = if on { Some(n) } else { cols })
                    })?;
                }
            }
            if b == 1 {
                // Attention's split-K at one sequence: the fewest keys a split takes (at ctx
                // 128 the default 64 gives 3 splits and the merge; 1 << 20: one, no merge).
                let was = cuda.attention_min_split_keys();
                for keys in [16, 32, 128, 1 << 20] {
                    variant(format!("attention splits of at least {keys} keys"), &|on| {
                        cuda.retune(|t| t.attention.min_split_keys = if on { keys } else { was })
                    })?;
                }
                // The one-row GEMVs on the whole-row kernels, or not (whichever is not the
                // default), alone and with the other candidates.
                let what = if full { "without" } else { "with" };
                variant(format!("{what} whole-row GEMVs"), &|on| {
                    cuda.retune(|t| t.gemm.gemv_full = full != on)
                })?;
                variant("whole-row GEMVs, no attention split".into(), &|on| {
                    cuda.retune(|t| t.gemm.gemv_full = on || full);
                    cuda.retune(|t| t.attention.min_split_keys = if on { 1 << 20 } else { was });
                })?;
            }
            if b > 16 {
                // A target of 5 blocks an SM: 128 sequences of 4 KV heads split in two again.
                let per_sm = cuda.tuning().attention.blocks_per_sm;
                variant("attention target 5 blocks an SM".into(), &|on| {
                    cuda.retune(|t| t.attention.blocks_per_sm = if on { 5 } else { per_sm })
                })?;
            }
            if c.fp8.is_none() && b > 1 {
                // The bf16 experts on the CUDA cores (or, from 4 pairs an expert, the 64-row
                // tiles) instead of the small-step tensor-core kernels.
                cuda.retune(|t| t.moe.small_mma = false);
                regraph();
                let t = time_step(cuda, &model, &mut kv, &host, true);
                cuda.retune(|t| t.moe.small_mma = true);
                regraph();
                timing_line(
                    report,
                    format!("{name} B={b} graph, experts without the small-step kernels"),
                    &t?,
                    bytes,
                    floor_ms,
                );
            }
            if c.fp8.is_some() && b > 1 {
                // The FP8 GEMVs and small-step experts on the CUDA cores (gemv_fp8_m*,
                // moe_gate_up_fp8_vec + moe_down_combine_fp8_vec) instead of tensor cores.
                for (what, gemv, experts) in [
                    ("gemv_fp8_m*", false, true),
                    ("experts on CUDA cores", true, false),
                    ("both on CUDA cores", false, false),
                ] {
                    cuda.retune(|t| t.gemm.fp8_gemv_mma = gemv);
                    cuda.retune(|t| t.moe.small_mma = experts);
                    regraph();
                    let t = time_step(cuda, &model, &mut kv, &host, true);
                    cuda.retune(|t| t.gemm.fp8_gemv_mma = true);
                    cuda.retune(|t| t.moe.small_mma = true);
                    regraph();
                    let t = t?;
                    timing_line(
                        report,
                        format!("{name} B={b} graph, {what}"),
                        &t,
                        bytes,
                        floor_ms,
                    );
                }
            }
        }
        // METRALE_MOE_SPEED_CONTEXTS=128,512,2048: one sequence at these contexts, attention
        // split as chosen (slices of at least 64 keys) and not split at all.
        let contexts: Vec<usize> = std::env::var("METRALE_MOE_SPEED_CONTEXTS")
            .ok()
            .map(|v| v.split(',').filter_map(|c| c.trim().parse().ok()).collect())
            .unwrap_or_default();
        for &ctx in &contexts {
            let blocks = (ctx + 1).div_ceil(BLOCK);
            let mut kv = model.new_kv_storage(cuda, blocks + 1, BLOCK)?;
            let host = decode_batch_at(1, blocks.next_power_of_two(), ctx);
            for keys in [64, usize::MAX / 2] {
                cuda.retune(|t| t.attention.min_split_keys = keys);
                cuda.drop_graphs();
                let t = time_step(cuda, &model, &mut kv, &host, true);
                cuda.retune(|t| t.attention.min_split_keys = 64);
                let t = t?;
                let bytes = active_weight_bytes(&c, 1) + (ctx + 1) as f64 * kv_per_token;
                let how = if keys == 64 { "split" } else { "no split" };
                timing_line(
                    report,
                    format!("{name} B=1 ctx {ctx} graph, attention {how}"),
                    &t,
                    bytes,
                    bytes / FLOOR_BYTES_PER_S * 1e3,
                );
            }
            cuda.drop_graphs();
        }
        if !prefill {
            continue;
        }
        // One long prompt, eagerly, through each way of running its GEMMs.
        let mut kv = model.new_kv_storage(cuda, PREFILL.div_ceil(BLOCK) + 1, BLOCK)?;
        let host = prefill_batch(PREFILL);
        let fp8 = c.fp8.is_some();
        for p in PREFILL_ROUTES.iter().filter(|p| fp8 || !p.fp8_only) {
            cuda.retune(|t| t.moe.gemm = p.gemm);
            cuda.retune(|t| t.gemm.fp8_matmul_mma = p.dense_mma);
            cuda.retune(|t| t.moe.fp8_activations = p.fp8_act);
            let t = time_steps(cuda, &model, &mut kv, &host, false, p.runs);
            cuda.retune(|t| t.moe.gemm = MoeGemm::Auto);
            cuda.retune(|t| t.gemm.fp8_matmul_mma = DENSE_FP8_MMA);
            cuda.retune(|t| t.moe.fp8_activations = false);
            let t = t?;
            report.summary_line(format!(
                "{name} prefill {PREFILL} tokens, {}: {:.2} ms ({:.0} tok/s)",
                p.what,
                t.median_ms,
                PREFILL as f64 / t.median_ms * 1e3
            ));
        }
    }
    if let [bf16, fp8] = batch1[..] {
        report.summary_line(format!(
            "30B-A3B decode B=1: fp8 {:.2}x the speed of bf16 (issue 11 asks >= 1.6)",
            bf16 / fp8
        ));
    }
    if !prefill {
        return Ok(());
    }
    op_times(cuda, report)
}

/// A way to run the prefill's GEMMs: the experts' kernels, FP8 dense GEMMs on tensor cores
/// (else a bf16 copy + cuBLAS), e4m3 activations in the FP8 tensor-core GEMMs; (warm-up,
/// timed) runs.
struct PrefillRoute {
    what: &'static str,
    gemm: MoeGemm,
    dense_mma: bool,
    fp8_act: bool,
    fp8_only: bool,
    runs: (usize, usize),
}

/// The tuning's `gemm.fp8_matmul_mma` default (what the other timings run with).
const DENSE_FP8_MMA: bool = false;

/// The defaults: experts on tensor cores (at this size).
const AFTER: PrefillRoute = PrefillRoute {
    what: "experts on tensor cores",
    gemm: MoeGemm::Auto,
    dense_mma: DENSE_FP8_MMA,
    fp8_act: false,
    fp8_only: false,
    runs: (2, 10),
};

const PREFILL_ROUTES: [PrefillRoute; 5] = [
    PrefillRoute {
        what: "before (experts on CUDA cores, FP8 GEMMs via a bf16 copy)",
        gemm: MoeGemm::CudaCores,
        dense_mma: false,
        runs: (1, 3),
        ..AFTER
    },
    AFTER,
    PrefillRoute {
        what: "experts on tensor cores, e4m3 activations",
        fp8_act: true,
        fp8_only: true,
        ..AFTER
    },
    PrefillRoute {
        what: "experts and FP8 GEMMs on tensor cores",
        dense_mma: true,
        fp8_only: true,
        ..AFTER
    },
    PrefillRoute {
        what: "experts and FP8 GEMMs on tensor cores, e4m3 activations",
        dense_mma: true,
        fp8_act: true,
        fp8_only: true,
        ..AFTER
    },
];

/// Back-to-back calls `op_times` averages over.
pub const OP_ITERS: usize = 200;

/// The mean time of one `f` over OP_ITERS back-to-back calls between two CUDA events (after a
/// warm-up call that also loads the kernels). The calls launch eagerly: where the host issues
/// them more slowly than the device runs them, this is the host's rate.
pub fn mean_op_ms(cuda: &CudaBackend, f: impl FnMut() -> Result<()>) -> Result<f64> {
    mean_op_ms_n(cuda, OP_ITERS, f)
}

/// [`mean_op_ms`] over `iters` calls.
pub fn mean_op_ms_n(
    cuda: &CudaBackend,
    iters: usize,
    mut f: impl FnMut() -> Result<()>,
) -> Result<f64> {
    f()?;
    let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
    let start = cuda.stream().record_event(flags).context("event")?;
    for _ in 0..iters {
        f()?;
    }
    let end = cuda.stream().record_event(flags).context("event")?;
    Ok(f64::from(start.elapsed_ms(&end).context("elapsed")?) / iters as f64)
}

/// Where a 30B-A3B layer's MoE time goes at batch 1: `fused_moe` with bf16 and FP8 experts
/// (the decode launches, and the six-launch path beside them), the router `matmul` and one FP8
/// `matmul` of the qkv shape, each alone, as summary lines (not pass/fail). Weights are drawn
/// on the device.
fn op_times(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    // Qwen3-30B-A3B (scripts/gpu/qwen3-30b-a3b-config.json).
    let (h, i, e, k, qkv_rows) = (2048usize, 768usize, 128usize, 8usize, (32 + 2 * 4) * 128);
    let x = cuda.random_bf16(&[1, h], 7, 1.0)?;
    let router = cuda.random_bf16(&[e, h], 8, 0.02)?;
    let mut logits = cuda.zeros(&[1, e])?;
    let router_ms = mean_op_ms(cuda, || Ok(cuda.matmul(&mut logits, &x, &router)?))?;
    // Router logits (f32, as the router matmul writes them) spread over [-3, 3): distinct
    // experts, as a trained router picks.
    let spread: Vec<f32> = (0..e)
        .map(|j| ((j * 37 + 11) % e) as f32 / e as f32 * 6.0 - 3.0)
        .collect();
    let spread = cuda.tensor_from_f32(&[1, e], &spread, DType::F32)?;
    let mut out = cuda.zeros(&[1, h])?;
    let mut moe_ms = Vec::new();
    let experts = [
        (
            cuda.random_bf16(&[e, 2 * i, h], 10, 0.02)?,
            cuda.random_bf16(&[e, h, i], 11, 0.02)?,
        ),
        (
            cuda.random_fp8(&[e, 2 * i, h], 10, 0.02)?,
            cuda.random_fp8(&[e, h, i], 11, 0.02)?,
        ),
    ];
    for (fp8, (w13, w2)) in [false, true].into_iter().zip(&experts) {
        let mut ms = [0f64; 2];
        for (slot, small) in [(0, true), (1, false)] {
            cuda.retune(|t| t.moe.small_paths = small);
            let r = mean_op_ms(cuda, || {
                Ok(cuda.fused_moe(&mut out, &x, &spread, w13, w2, k, true)?)
            });
            cuda.retune(|t| t.moe.small_paths = true);
            ms[slot] = r?;
        }
        // The bytes of the 8 experts' weights a token reads, as GB/s.
        let bytes = (k * 3 * i * h) as f64 * if fp8 { 1.0 + 4.0 / 128.0 } else { 2.0 };
        moe_ms.push((if fp8 { "fp8" } else { "bf16" }, ms, bytes));
    }
    let qkv_w = cuda.random_fp8(&[qkv_rows, h], 12, 0.02)?;
    let mut qkv = cuda.zeros(&[1, qkv_rows])?;
    let qkv_ms = mean_op_ms(cuda, || Ok(cuda.matmul(&mut qkv, &x, &qkv_w)?))?;
    report.summary_line(format!(
        "30B-A3B ops at B=1, mean of {OP_ITERS} back-to-back eager calls (CUDA events):"
    ));
    for (name, [small, six], bytes) in moe_ms {
        report.summary_line(format!(
            "  fused_moe {name} experts: {:.1} us ({:.0} GB/s of expert weights; 3 launches), \
             {:.1} us with the six-launch path",
            small * 1e3,
            bytes / (small / 1e3) / 1e9,
            six * 1e3
        ));
    }
    report.summary_line(format!(
        "  router matmul [1, {h}] x [{e}, {h}]: {:.1} us",
        router_ms * 1e3
    ));
    report.summary_line(format!(
        "  fp8 matmul qkv [1, {h}] x [{qkv_rows}, {h}]: {:.1} us ({:.0} GB/s)",
        qkv_ms * 1e3,
        (qkv_rows * h) as f64 * (1.0 + 4.0 / 128.0) / (qkv_ms / 1e3) / 1e9
    ));
    moe_sweep(cuda, report, &experts, (h, i, e, k))?;
    verify_sweep(cuda, report)?;
    dense_fp8(cuda, report)
}

/// `fused_moe` alone at 30B-A3B's shape from decode batches to a 2048-token chunk, on the CUDA
/// cores and on tensor cores (bf16 experts; FP8 experts with bf16 and e4m3 activations), with
/// router logits drawn at random: where the tensor cores start to win (`MoeGemm::Auto`'s
/// switch), and their rate on long prompts against the floor (not pass/fail).
fn moe_sweep(
    cuda: &CudaBackend,
    report: &mut Report,
    experts: &[(CudaTensor, CudaTensor); 2],
    (h, i, e, k): (usize, usize, usize, usize),
) -> Result<()> {
    report.summary_line(format!(
        "fused_moe alone (top-{k} of {e} experts, H {h}, I {i}), us a call: T, pairs an expert, \
         bf16 cuda cores / tensor cores, fp8 cuda cores / tensor cores / tensor cores with e4m3 \
         activations / 64-row tensor-core tiles (the small-step kernels off); bf16 64-row tiles \
         last"
    ));
    // (weights, kernels, e4m3 activations, small-step kernels)
    let routes = [
        (0, MoeGemm::CudaCores, false, true),
        (0, MoeGemm::TensorCores, false, true),
        (1, MoeGemm::CudaCores, false, true),
        (1, MoeGemm::TensorCores, false, true),
        (1, MoeGemm::TensorCores, true, true),
        (1, MoeGemm::TensorCores, false, false),
        (0, MoeGemm::TensorCores, false, false),
    ];
    for t in [16usize, 32, 64, 128, 256, 512, 1024, 2048] {
        let x = cuda.random_bf16(&[t, h], 20 + t as u64, 1.0)?;
        let logits = cuda.random_bf16(&[t, e], 30 + t as u64, 1.0)?;
        let mut out = cuda.zeros(&[t, h])?;
        let iters = (4096 / t).clamp(5, OP_ITERS);
        let mut us = Vec::new();
        for (w, gemm, fp8_act, small) in routes {
            let (w13, w2) = &experts[w];
            cuda.retune(|t| t.moe.gemm = gemm);
            cuda.retune(|t| t.moe.fp8_activations = fp8_act);
            cuda.retune(|t| t.moe.small_mma = small);
            let r = mean_op_ms_n(cuda, iters, || {
                Ok(cuda.fused_moe(&mut out, &x, &logits, w13, w2, k, true)?)
            });
            cuda.retune(|t| t.moe.gemm = MoeGemm::Auto);
            cuda.retune(|t| t.moe.fp8_activations = false);
            cuda.retune(|t| t.moe.small_mma = true);
            us.push(r? * 1e3);
        }
        // FLOPs of the experts' GEMMs (gate|up and down), as TFLOP/s of the tensor cores.
        let flops = 2.0 * (t * k) as f64 * 3.0 * (h * i) as f64;
        let cells: Vec<String> = us.iter().map(|u| format!("{u:>7.1}")).collect();
        report.summary_line(format!(
            "  T {t:>4} {:>5.1}: {} | {}   (tensor cores: bf16 {:.0}, fp8 {:.0}, e4m3 {:.0} TFLOP/s)",
            (t * k) as f64 / e as f64,
            cells[..2].join(" "),
            cells[2..].join(" "),
            flops / us[1] / 1e6,
            flops / us[3] / 1e6,
            flops / us[4] / 1e6
        ));
    }
    Ok(())
}

/// `fused_moe` alone at Qwen3.6-35B-A3B's expert shape (FP8, top-8 of 256, H 2048, I 512),
/// random router logits, at one token and an MTP verify step's few (one token: the CUDA-core
/// decode kernels; 2-6 tokens: `moe_*_fp8_small`, k split over a block; 7-8: `_any`), with the
/// bytes of the distinct experts the tokens are expected to choose as a rate (not pass/fail).
/// A warp over the whole k for 1-8 tokens (`moe_*_fp8_few`) measured 0.6-1.6x these
/// (docs/performance-log/2026-12-05-session-9.md) and was deleted.
fn verify_sweep(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    let (h, i, e, k) = (2048usize, 512usize, 256usize, 8usize);
    let w13 = cuda.random_fp8(&[e, 2 * i, h], 50, 0.02)?;
    let w2 = cuda.random_fp8(&[e, h, i], 51, 0.02)?;
    report.summary_line(format!(
        "fused_moe alone, FP8 top-{k} of {e}, H {h}, I {i}, us a call: T, expected experts, \
         (GB/s of the expected experts' weights)"
    ));
    for t in [1usize, 2, 3, 4, 6, 8] {
        let x = cuda.random_bf16(&[t, h], 60 + t as u64, 1.0)?;
        let logits = cuda.random_bf16(&[t, e], 70 + t as u64, 1.0)?;
        let mut out = cuda.zeros(&[t, h])?;
        let us = mean_op_ms(cuda, || {
            Ok(cuda.fused_moe(&mut out, &x, &logits, &w13, &w2, k, true)?)
        })? * 1e3;
        let experts = e as f64 * (1.0 - (1.0 - k as f64 / e as f64).powi(t as i32));
        let bytes = experts * (3 * i * h) as f64 * (1.0 + 4.0 / 128.0);
        let gbs = |u: f64| bytes / (u * 1e-6) / 1e9;
        report.summary_line(format!(
            "  T {t}: {experts:>5.1} experts: {us:>6.1} us ({:.0} GB/s)",
            gbs(us)
        ));
    }
    Ok(())
}

/// FP8 GEMMs of a 2048-token prefill at 30B-A3B's attention shapes and an 8B-sized MLP
/// matrix: a bf16 copy of the weight + cuBLAS (the default), the tensor-core kernel with bf16
/// and with e4m3 activations, and cuBLAS on a bf16 weight of the same shape for scale. First
/// the decode-sized ones (9 to 256 rows): the tensor-core GEMV against what runs without it.
fn dense_fp8(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    report.summary_line(
        "fp8 matmul at decode batches, us: tensor-core GEMV / without it (gemv_fp8_m8 passes to \
         32 rows, then a bf16 copy + cuBLAS) / cuBLAS on bf16 weights"
            .to_string(),
    );
    for (k, n, what) in [(2048usize, 5120usize, "qkv"), (4096, 2048, "o")] {
        let w8 = cuda.random_fp8(&[n, k], 41, 0.02)?;
        let wb = cuda.random_bf16(&[n, k], 42, 0.02)?;
        for m in [16usize, 32, 64, 128, 256] {
            let x = cuda.random_bf16(&[m, k], 40, 1.0)?;
            let mut out = cuda.zeros(&[m, n])?;
            let mut us = Vec::new();
            for mma in [true, false] {
                cuda.retune(|t| t.gemm.fp8_gemv_mma = mma);
                let r = mean_op_ms_n(cuda, 50, || Ok(cuda.matmul(&mut out, &x, &w8)?));
                cuda.retune(|t| t.gemm.fp8_gemv_mma = true);
                us.push(r? * 1e3);
            }
            us.push(mean_op_ms_n(cuda, 50, || Ok(cuda.matmul(&mut out, &x, &wb)?))? * 1e3);
            let gbs = (n * k) as f64 * (1.0 + 4.0 / 128.0) / (us[0] / 1e6) / 1e9;
            report.summary_line(format!(
                "  {what} [{m}, {k}] x [{n}, {k}]: {:.1} / {:.1} / {:.1}  ({gbs:.0} GB/s of FP8 \
                 weight on tensor cores)",
                us[0], us[1], us[2]
            ));
        }
    }
    report.summary_line(
        "fp8 matmul at 2048 rows, us: bf16 copy + cuBLAS / tensor cores / tensor cores e4m3 \
         activations / cuBLAS on bf16 weights"
            .to_string(),
    );
    let m = PREFILL;
    for (k, n, what) in [
        (2048usize, 5120usize, "qkv"),
        (4096, 2048, "o"),
        (4096, 12_288, "8B gate|up half"),
    ] {
        let x = cuda.random_bf16(&[m, k], 40, 1.0)?;
        let w8 = cuda.random_fp8(&[n, k], 41, 0.02)?;
        let wb = cuda.random_bf16(&[n, k], 42, 0.02)?;
        let mut out = cuda.zeros(&[m, n])?;
        let mut us = Vec::new();
        for (dense, act) in [(false, false), (true, false), (true, true)] {
            cuda.retune(|t| t.gemm.fp8_matmul_mma = dense);
            cuda.retune(|t| t.moe.fp8_activations = act);
            let r = mean_op_ms_n(cuda, 20, || Ok(cuda.matmul(&mut out, &x, &w8)?));
            cuda.retune(|t| t.gemm.fp8_matmul_mma = DENSE_FP8_MMA);
            cuda.retune(|t| t.moe.fp8_activations = false);
            us.push(r? * 1e3);
        }
        us.push(mean_op_ms_n(cuda, 20, || Ok(cuda.matmul(&mut out, &x, &wb)?))? * 1e3);
        let tflops = |u: &f64| 2.0 * (m * n * k) as f64 / u / 1e6;
        let cells: Vec<String> = us.iter().map(|u| format!("{u:.1}")).collect();
        let rates: Vec<String> = us.iter().map(|u| format!("{:.0}", tflops(u))).collect();
        report.summary_line(format!(
            "  {what} [{m}, {k}] x [{n}, {k}]: {}  ({} TFLOP/s)",
            cells.join(" / "),
            rates.join(" / ")
        ));
    }
    Ok(())
}

/// `fused_moe` alone with the small-step FP8 experts' `_any` kernels and with their cp.async
/// pipelined twins (`moe.small_mma = pipe`, the default, `moe_pipe.cu`), at 30B-A3B's (top-8 of
/// 128, H 2048, I 768) and 35B-A3B's (top-8 of 256, I 512) shapes, 16 to 256 tokens; the rate
/// counts the weights of the experts the tokens are expected to choose (not pass/fail;
/// docs/cuda-kernels.md has the floors).
fn pipe_sweep(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    report.summary_line(
        "fused_moe alone, small-step experts: shape, weights, T, expected experts, us a call \
         default (_any) / pipelined, (GB/s of the expected experts' weights each), pipelined / \
         default"
            .to_string(),
    );
    for (name, i, e) in [("30B-A3B", 768usize, 128usize), ("35B-A3B", 512, 256)] {
        let (h, k) = (2048usize, 8usize);
        {
            let w13 = cuda.random_fp8(&[e, 2 * i, h], 80, 0.02)?;
            let w2 = cuda.random_fp8(&[e, h, i], 81, 0.02)?;
            let per_weight = 1.0 + 4.0 / 128.0;
            for t in [16usize, 32, 64, 128, 256] {
                let x = cuda.random_bf16(&[t, h], 90 + t as u64, 1.0)?;
                let logits = cuda.random_bf16(&[t, e], 95 + t as u64, 1.0)?;
                let mut out = cuda.zeros(&[t, h])?;
                let mut us = [0.0; 2];
                let saved = cuda.tuning().moe.small_pipe;
                for (u, pipe) in us.iter_mut().zip([false, true]) {
                    cuda.retune(|t| t.moe.small_pipe = pipe);
                    let r = mean_op_ms_n(cuda, 50, || {
                        Ok(cuda.fused_moe(&mut out, &x, &logits, &w13, &w2, k, true)?)
                    });
                    cuda.retune(|t| t.moe.small_pipe = saved);
                    *u = r? * 1e3;
                }
                let experts = e as f64 * (1.0 - (1.0 - k as f64 / e as f64).powi(t as i32));
                let bytes = experts * (3 * i * h) as f64 * per_weight;
                let gbs = |u: f64| bytes / (u * 1e-6) / 1e9;
                report.summary_line(format!(
                    "  {name} fp8 T {t:>3}: {experts:>5.1} experts: {:>7.1} / {:>7.1} us ({:.0} / {:.0} GB/s) {:.2}x",
                    us[0],
                    us[1],
                    gbs(us[0]),
                    gbs(us[1]),
                    us[1] / us[0]
                ));
            }
        }
    }
    Ok(())
}
