//! A quick speed probe, not a pass/fail: Qwen3-8B's shape with random weights, one decode
//! step at batch 1, 8 and 64 over 128-token contexts and one 128-token prefill, timed with CUDA
//! events, against the floor of reading every weight (and the KV cache) once at 4.0 TB/s.
//!
//! The weights are drawn on the device straight into the fused layout (`random_bf16`), not
//! through `Weights::Dummy` + `Qwen3::load`: the loader's `concat_rows` turns the random q|k|v
//! and gate|up recipes into host f32 arrays (18 GB for 8B), which would take longer than the
//! whole check. The config still goes through `config.json` and `ModelConfig`.

use std::time::Instant;

use anyhow::{Context, Result};
use cudarc::driver::sys::CUevent_flags;
use metrale_engine::backend::cuda::CudaBackend;
use metrale_engine::backend::sampling::SampleRow;
use metrale_engine::backend::{Backend, BatchInputs, RopeTables, SeqChunk};
use metrale_engine::loader::{HostData, HostTensor, ModelConfig, ModelDir};
use metrale_engine::models::qwen3::{Layer, Qwen3};
use metrale_engine::models::{KvStorage, Model};
use metrale_engine::sampling_params::SamplingParams;
use serde_json::json;

use crate::report::Report;

/// Measured device-to-device copy bandwidth of an H200 (shared/GPU.md): the floor's rate.
const FLOOR_BYTES_PER_S: f64 = 4.0e12;
/// Measured cuBLAS bf16 GEMM rate of an H200 (shared/GPU.md).
const FLOOR_FLOPS: f64 = 780e12;
const CONTEXT: usize = 128;
const BLOCK: usize = 16;
const ITERS: usize = 10;

const QWEN3_8B: &str = r#"{
  "architectures": ["Qwen3ForCausalLM"],
  "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
  "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
  "vocab_size": 151936, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6,
  "rope_theta": 1000000, "tie_word_embeddings": false, "torch_dtype": "bfloat16"
}"#;

fn build(cuda: &CudaBackend, c: &ModelConfig) -> Result<Qwen3<CudaBackend>> {
    let (h, hd, nh, nkv, i, v) = (
        c.hidden_size,
        c.head_dim,
        c.num_attention_heads,
        c.num_key_value_heads,
        c.intermediate_size,
        c.vocab_size,
    );
    let mut seed = 0x5eed_u64;
    let mut rnd = |shape: &[usize]| {
        seed += 1;
        cuda.random_bf16(shape, seed, 0.02)
    };
    let ones = |n: usize| {
        cuda.upload(&HostTensor {
            shape: vec![n],
            data: HostData::Constant(1.0),
        })
    };
    let mut layers = Vec::with_capacity(c.num_hidden_layers);
    for _ in 0..c.num_hidden_layers {
        layers.push(Layer {
            input_norm: ones(h)?,
            qkv: rnd(&[(nh + 2 * nkv) * hd, h])?,
            q_norm: ones(hd)?,
            k_norm: ones(hd)?,
            o: rnd(&[h, nh * hd])?,
            post_norm: ones(h)?,
            gate_up: rnd(&[2 * i, h])?,
            down: rnd(&[h, i])?,
        });
    }
    let embed = rnd(&[v, h])?;
    let lm_head = if c.tie_word_embeddings {
        None
    } else {
        Some(rnd(&[v, h])?)
    };
    let (inv_freq, scale) = c.rope.inv_freq(hd);
    Ok(Qwen3 {
        config: c.clone(),
        embed,
        layers,
        norm: ones(h)?,
        lm_head,
        rope: RopeTables {
            rotary_dim: 2 * inv_freq.len(),
            inv_freq,
            scale,
        },
    })
}

/// Bytes of weights a decode step reads: every layer, the final norm and the LM head (the
/// embedding table contributes only the batch's rows).
fn weight_bytes_read(c: &ModelConfig) -> f64 {
    let embed = c.vocab_size * c.hidden_size;
    let params = c.num_parameters() - if c.tie_word_embeddings { 0 } else { embed };
    params as f64 * 2.0
}

struct Timing {
    median_ms: f64,
    min_ms: f64,
}

/// Time `ITERS` runs of a whole step (upload the batch, forward, greedy sample) between CUDA
/// events, after two warm-up runs.
fn time_step(
    cuda: &CudaBackend,
    model: &Qwen3<CudaBackend>,
    kv: &mut KvStorage<CudaBackend>,
    host: &BatchInputs,
) -> Result<Timing> {
    let params = SamplingParams {
        temperature: 0.0,
        ..SamplingParams::default()
    };
    let history = [0u32];
    let rows: Vec<SampleRow<'_>> = (0..host.logits_rows.len())
        .map(|r| SampleRow {
            logits_row: r,
            params: &params,
            all_token_ids: &history,
            num_prompt_tokens: 1,
        })
        .collect();
    let step = |kv: &mut KvStorage<CudaBackend>| -> Result<()> {
        let batch = cuda.prepare_batch(host)?;
        let logits = model.forward(cuda, host, &batch, kv)?;
        cuda.sample(&logits, &rows)?;
        Ok(())
    };
    for _ in 0..2 {
        step(kv)?;
    }
    let mut ms = Vec::with_capacity(ITERS);
    let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
    for _ in 0..ITERS {
        let start = cuda.stream().record_event(flags).context("event")?;
        step(kv)?;
        let end = cuda.stream().record_event(flags).context("event")?;
        ms.push(f64::from(start.elapsed_ms(&end).context("elapsed")?));
    }
    ms.sort_by(f64::total_cmp);
    Ok(Timing {
        median_ms: ms[ms.len() / 2],
        min_ms: ms[0],
    })
}

pub fn run(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("metrale-qwen3-8b-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("config.json"), QWEN3_8B)?;
    let c = ModelDir::open(&dir)?.config();
    let _ = std::fs::remove_dir_all(&dir);
    let c = c?;

    let t0 = Instant::now();
    let model = build(cuda, &c)?;
    cuda.synchronize()?;
    let load_s = t0.elapsed().as_secs_f64();
    let weights = c.num_parameters() as f64 * 2.0;
    report.summary_line(format!(
        "speed: Qwen3-8B shape, {:.2} GB of bf16 weights drawn on the device in {load_s:.2} s",
        weights / 1e9
    ));
    let blocks_per_seq = (CONTEXT + 1).div_ceil(BLOCK);
    let mut kv = model.new_kv_storage(cuda, 64 * blocks_per_seq + 1, BLOCK)?;
    let (free, total) = cuda.memory()?;
    report.line(format!(
        "device memory in use: {:.1} of {:.1} GB",
        (total - free) as f64 / 1e9,
        total as f64 / 1e9
    ));
    let kv_bytes_per_token = model.kv_bytes_per_token(2) as f64;
    let read = weight_bytes_read(&c);
    report.summary_line(format!(
        "{:<24} {:>9} {:>9} {:>9} {:>10} {:>11}",
        "step", "median ms", "min ms", "floor ms", "GB/s", "floor/median"
    ));
    let line = |report: &mut Report, what: String, t: &Timing, bytes: f64, floor_ms: f64| {
        report.summary_line(format!(
            "{what:<24} {:>9.3} {:>9.3} {:>9.3} {:>10.0} {:>11.2}",
            t.median_ms,
            t.min_ms,
            floor_ms,
            bytes / (t.median_ms / 1e3) / 1e9,
            floor_ms / t.median_ms
        ));
        report.record(json!({
            "step": what, "median_ms": t.median_ms, "min_ms": t.min_ms,
            "floor_ms": floor_ms, "bytes": bytes,
        }));
    };

    for b in [1usize, 8, 64] {
        // Each sequence has CONTEXT tokens cached and decodes one more (the cache holds zeros:
        // the values do not change the time).
        let tables: Vec<Vec<u32>> = (0..b)
            .map(|s| {
                let first = 1 + (s * blocks_per_seq) as u32;
                (first..first + blocks_per_seq as u32).collect()
            })
            .collect();
        let tokens = vec![[1u32]; b];
        let chunks: Vec<SeqChunk<'_>> = tables
            .iter()
            .zip(&tokens)
            .map(|(t, tok)| SeqChunk {
                tokens: tok,
                start_pos: CONTEXT,
                block_table: t,
                logits_rows: vec![0],
            })
            .collect();
        let host = BatchInputs::build(BLOCK, &chunks);
        let t = time_step(cuda, &model, &mut kv, &host)?;
        let bytes = read + (b * (CONTEXT + 1)) as f64 * kv_bytes_per_token;
        line(
            report,
            format!("decode B={b} ctx {CONTEXT}"),
            &t,
            bytes,
            bytes / FLOOR_BYTES_PER_S * 1e3,
        );
    }

    let table: Vec<u32> = (1..=CONTEXT.div_ceil(BLOCK) as u32).collect();
    let prompt: Vec<u32> = (0..CONTEXT as u32).map(|i| i * 7 % 151_936).collect();
    let host = BatchInputs::build(
        BLOCK,
        &[SeqChunk {
            tokens: &prompt,
            start_pos: 0,
            block_table: &table,
            logits_rows: vec![CONTEXT - 1],
        }],
    );
    let t = time_step(cuda, &model, &mut kv, &host)?;
    let flops = 2.0 * (read / 2.0) * CONTEXT as f64;
    let floor_ms = (read / FLOOR_BYTES_PER_S).max(flops / FLOOR_FLOPS) * 1e3;
    line(
        report,
        format!("prefill {CONTEXT} tokens"),
        &t,
        read,
        floor_ms,
    );
    report.line(format!(
        "floors: weights read once at {:.1} TB/s ({:.2} GB a decode step = {:.2} ms), prefill also bounded by {:.0} TFLOP/s",
        FLOOR_BYTES_PER_S / 1e12,
        read / 1e9,
        read / FLOOR_BYTES_PER_S * 1e3,
        FLOOR_FLOPS / 1e12
    ));
    Ok(())
}
