//! The synchronisation probes and the persistent decode step's skeleton, first in moe-speed
//! (not pass/fail; a failure is a line): what a kernel link, a grid barrier and a flag hand-off
//! cost on this GPU (`CudaBackend::sync_probe`), and what one launch that streams a
//! Qwen3-30B-A3B step's bytes with a flag hand-off between ops reaches in bf16 and FP8
//! (`CudaBackend::decode_skeleton`; docs/performance.md).

use anyhow::Result;
use metrale_engine::backend::cuda::{CudaBackend, SkeletonStage};
use metrale_engine::loader::ModelConfig;

use crate::report::Report;
use crate::speed::{CONTEXT, FLOOR_BYTES_PER_S};
use crate::speed_moe::{AttnDims, CONFIGS};

/// The probe's and the skeleton's lines.
pub fn run(cuda: &CudaBackend, report: &mut Report) {
    // What a kernel boundary, a grid barrier and a flag hand-off cost on this GPU (reported,
    // not fatal: the timings below still run).
    let us = |v: Option<f64>| v.map_or("not measured".to_string(), |v| format!("{v:.2} µs"));
    match cuda.sync_probe() {
        Ok(p) => report.summary_line(format!(
            "sync probe: a kernel link in a graph {:.2} µs, a grid barrier {}, a flag hand-off \
             between blocks {}",
            p.link_us,
            us(p.barrier_us),
            us(p.handoff_us)
        )),
        Err(e) => report.line(format!("sync probe: not measured ({e:#})")),
    }
    // What a persistent decode kernel's chain of hand-offs could reach.
    if let Err(e) = skeleton_lines(cuda, report) {
        report.line(format!("decode skeleton: not measured ({e:#})"));
    }
}

/// One decode token's step of a Qwen3-MoE config as the persistent-kernel skeleton streams
/// it (`CudaBackend::decode_skeleton`): each layer's qkv, its attention (the bf16 KV of `ctx`
/// tokens, a block a query head), o, the router (16 blocks), the chosen experts' gate|up
/// (their addresses known only once the router is done) and their down, then the LM head and
/// an argmax in one block. Empty for a dense config.
pub fn skeleton_stages(c: &ModelConfig, ctx: usize) -> Vec<SkeletonStage> {
    let Some(m) = &c.moe else {
        return Vec::new();
    };
    let AttnDims {
        h,
        hd,
        nh,
        nkv,
        proj_bytes: pb,
    } = AttnDims::of(c);
    let (e, k, inter) = (
        m.num_experts as f64,
        m.num_experts_per_tok as f64,
        m.moe_intermediate_size as f64,
    );
    let all = u32::MAX;
    let st = |bytes: f64, producers: u32, ahead: bool, routed: bool| SkeletonStage {
        bytes: bytes as u64,
        producers,
        ahead,
        routed,
    };
    let mut v = Vec::with_capacity(c.num_hidden_layers * 6 + 2);
    for _ in 0..c.num_hidden_layers {
        v.extend([
            st(h * (nh + 2.0 * nkv) * hd * pb, all, true, false),
            st(
                2.0 * nkv * hd * ctx as f64 * 2.0,
                c.num_attention_heads as u32,
                true,
                false,
            ),
            st(nh * hd * h * pb, all, true, false),
            st(e * h * 2.0, 16, true, false),
            st(k * 2.0 * inter * h * pb, all, false, true),
            st(k * inter * h * pb, all, true, true),
        ]);
    }
    v.extend([
        st(c.vocab_size as f64 * h * 2.0, all, true, false),
        st(16.0, 1, true, false),
    ]);
    v
}

/// The persistent-kernel skeleton's lines (see `skeleton_stages`) for both configs, and
/// bf16's step over FP8's with the loads ahead of the waits.
fn skeleton_lines(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    let mut chain = Vec::new();
    for (name, text) in CONFIGS {
        let c = ModelConfig::from_json(text).map_err(anyhow::Error::msg)?;
        let stages = skeleton_stages(&c, CONTEXT + 1);
        let bytes: f64 = stages.iter().map(|s| s.bytes as f64).sum();
        let Some(t) = cuda.decode_skeleton(&stages)? else {
            report.line(format!(
                "decode skeleton {name}: not measured (the grid might not all be resident)"
            ));
            continue;
        };
        report.summary_line(format!(
            "decode skeleton {name} ({} stages, {:.2} GB, floor {:.3} ms): registers: bytes \
             alone {:.3} ms ({:.2} TB/s), the hand-off chain {:.3} ms, with every load after its \
             wait {:.3} ms, with the flag in the data {:.3} ms (one warp spinning: {:.3} ms); \
             shared-memory ring: bytes alone \
             {:.3} ms, the chain {:.3} ms",
            stages.len(),
            bytes / 1e9,
            bytes / FLOOR_BYTES_PER_S * 1e3,
            t.stream_ms,
            bytes / t.stream_ms / 1e9,
            t.chain_ms,
            t.chain_behind_ms,
            t.chain_ll_ms,
            t.chain_ll_warp_ms,
            t.ring_stream_ms,
            t.ring_chain_ms
        ));
        for r in &t.tma {
            report.summary_line(format!(
                "decode skeleton {name}, bulk-copy rings of {} + {} slots of {} KB: bytes alone \
                 {:.3} ms ({:.2} TB/s), the chain {:.3} ms",
                r.dense_slots,
                r.routed_slots,
                r.slot_bytes / 1024,
                r.stream_ms,
                bytes / r.stream_ms / 1e9,
                r.chain_ms
            ));
        }
        let best_tma = t.tma.iter().map(|r| r.chain_ms).min_by(f64::total_cmp);
        let registers = t.chain_ms.min(t.chain_ll_ms).min(t.chain_ll_warp_ms);
        chain.push((registers, t.ring_chain_ms, best_tma));
    }
    if let [bf16, fp8] = chain[..] {
        let tma = match (bf16.2, fp8.2) {
            (Some(b), Some(f)) => format!("{:.2}", b / f),
            _ => "not measured".to_string(),
        };
        report.summary_line(format!(
            "decode skeleton: bf16 / FP8 step {:.2} with registers (the faster hand-off), {:.2} \
             with the ring, {tma} with the bulk-copy rings (each its best split; issue 11 asks \
             >= 1.6 of the engine)",
            bf16.0 / fp8.0,
            bf16.1 / fp8.1
        ));
    }
    Ok(())
}
