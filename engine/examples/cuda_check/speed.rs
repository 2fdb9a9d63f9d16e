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
use metrale_engine::backend::cuda::{CudaBackend, CudaTensor, DType};
use metrale_engine::backend::sampling::SampleRow;
use metrale_engine::backend::{Backend, BatchInputs, RopeTables, SeqChunk};
use metrale_engine::loader::{HostData, HostTensor, ModelConfig, ModelDir};
use metrale_engine::models::qwen3::{Layer, Mlp, Qwen3};
use metrale_engine::models::{KvStorage, Model};
use metrale_engine::sampling_params::SamplingParams;
use serde_json::json;

use crate::report::{Report, Tol, compare};

/// Measured device-to-device copy bandwidth of an H200 (shared/GPU.md): the floor's rate.
pub const FLOOR_BYTES_PER_S: f64 = 4.0e12;
/// Measured cuBLAS bf16 GEMM rate of an H200 (shared/GPU.md).
const FLOOR_FLOPS: f64 = 780e12;
pub const CONTEXT: usize = 128;
pub const BLOCK: usize = 16;
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
            mlp: Mlp::Dense {
                gate_up: rnd(&[2 * i, h])?,
                down: rnd(&[h, i])?,
            },
        });
    }
    let embed = rnd(&[v, h])?;
    let lm_head = if c.tie_word_embeddings {
        None
    } else {
        Some(rnd(&[v, h])?)
    };
    let (inv_freq, scale) = c.rope.inv_freq(hd);
    let rope = RopeTables {
        rotary_dim: 2 * inv_freq.len(),
        inv_freq,
        scale,
    };
    Ok(Qwen3::from_parts(
        c.clone(),
        (embed, layers, ones(h)?),
        lm_head,
        rope,
    ))
}

/// Bytes of weights a decode step reads: every layer, the final norm and the LM head (the
/// embedding table contributes only the batch's rows).
fn weight_bytes_read(c: &ModelConfig) -> f64 {
    let embed = c.vocab_size * c.hidden_size;
    let params = c.num_parameters() - if c.tie_word_embeddings { 0 } else { embed };
    params as f64 * 2.0
}

pub struct Timing {
    pub median_ms: f64,
    pub min_ms: f64,
}

/// A decode step of `b` sequences, each with CONTEXT tokens cached in its own blocks (from
/// block 1 on) and one more token to compute, tables at least `width` blocks wide.
pub fn decode_batch(b: usize, width: usize) -> BatchInputs {
    decode_batch_at(b, width, CONTEXT)
}

/// `b` sequences decoding at position `context`, each over its own run of blocks and each with
/// its own token, so a MoE model routes them as a real batch does (one shared token would send
/// every sequence to the same experts and read a batch-1 step's expert weights).
pub fn decode_batch_at(b: usize, width: usize, context: usize) -> BatchInputs {
    let blocks_per_seq = (context + 1).div_ceil(BLOCK);
    let tables: Vec<Vec<u32>> = (0..b)
        .map(|s| {
            let first = 1 + (s * blocks_per_seq) as u32;
            (first..first + blocks_per_seq as u32).collect()
        })
        .collect();
    // Token ids spread over the vocabulary of every model measured here (Qwen3: 151,936).
    let tokens: Vec<[u32; 1]> = (0..b as u32).map(|s| [1 + s * 7919 % 150_000]).collect();
    let chunks: Vec<SeqChunk<'_>> = tables
        .iter()
        .zip(&tokens)
        .map(|(t, token)| SeqChunk {
            tokens: token,
            start_pos: context,
            block_table: t,
            logits_rows: vec![0],
        })
        .collect();
    BatchInputs::build_with_width(BLOCK, &chunks, width)
}

/// One prompt of `len` tokens from position 0 in blocks 1.., its last row's logits asked.
pub fn prefill_batch(len: usize) -> BatchInputs {
    let table: Vec<u32> = (1..=len.div_ceil(BLOCK) as u32).collect();
    let prompt: Vec<u32> = (0..len as u32).map(|i| i * 7 % 151_936).collect();
    BatchInputs::build(
        BLOCK,
        &[SeqChunk {
            tokens: &prompt,
            start_pos: 0,
            block_table: &table,
            logits_rows: vec![len - 1],
        }],
    )
}

/// The step's logits, eagerly or through the backend's decode graph for its shape.
fn logits(
    cuda: &CudaBackend,
    model: &Qwen3<CudaBackend>,
    kv: &mut KvStorage<CudaBackend>,
    host: &BatchInputs,
    graph: bool,
) -> Result<CudaTensor> {
    if graph {
        cuda.graph_forward(host, &mut |batch| model.forward(cuda, host, batch, kv))?
            .context("the backend ran no graph for this step")
    } else {
        let batch = cuda.prepare_batch(host)?;
        Ok(model.forward(cuda, host, &batch, kv)?)
    }
}

/// The header of the timing table.
pub fn timing_header(report: &mut Report, first: &str) {
    report.summary_line(format!(
        "{first:<28} {:>9} {:>9} {:>9} {:>10} {:>11}",
        "median ms", "min ms", "floor ms", "GB/s", "floor/median"
    ));
}

/// One step's row of the timing table (and its record).
pub fn timing_line(report: &mut Report, what: String, t: &Timing, bytes: f64, floor_ms: f64) {
    report.summary_line(format!(
        "{what:<28} {:>9.3} {:>9.3} {:>9.3} {:>10.0} {:>11.2}",
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
}

/// Time `ITERS` runs of a whole step (upload the batch, forward, greedy sample) between CUDA
/// events, after two warm-up runs; `graph`: replayed as a CUDA graph.
pub fn time_step(
    cuda: &CudaBackend,
    model: &Qwen3<CudaBackend>,
    kv: &mut KvStorage<CudaBackend>,
    host: &BatchInputs,
    graph: bool,
) -> Result<Timing> {
    time_steps(cuda, model, kv, host, graph, (2, ITERS))
}

/// [`time_step`] with `warm` warm-up runs and `iters` timed ones (slow steps take fewer).
pub fn time_steps(
    cuda: &CudaBackend,
    model: &Qwen3<CudaBackend>,
    kv: &mut KvStorage<CudaBackend>,
    host: &BatchInputs,
    graph: bool,
    (warm, iters): (usize, usize),
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
            seq: None,
        })
        .collect();
    let step = |kv: &mut KvStorage<CudaBackend>| -> Result<()> {
        let logits = logits(cuda, model, kv, host, graph)?;
        cuda.sample(&logits, &rows)?;
        Ok(())
    };
    for _ in 0..warm {
        step(kv)?;
    }
    let mut ms = Vec::with_capacity(iters);
    let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
    for _ in 0..iters.max(1) {
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

/// The graph-replayed step again with programmatic dependent launch off (when the device has
/// it): its time as a table row `what`, and a failure unless its logits equal the PDL run's bit
/// for bit (a kernel that read an earlier kernel's output before its `pdl_wait` would differ).
pub fn pdl_off_line(
    cuda: &CudaBackend,
    model: &Qwen3<CudaBackend>,
    kv: &mut KvStorage<CudaBackend>,
    host: &BatchInputs,
    report: &mut Report,
    (what, bytes, floor_ms): (String, f64, f64),
) -> Result<()> {
    if !cuda.pdl() {
        return Ok(());
    }
    let with = cuda.to_host(&logits(cuda, model, kv, host, true)?)?;
    cuda.retune(|t| t.launch.pdl = false);
    let off = (|| -> Result<_> {
        let t = time_step(cuda, model, kv, host, true)?;
        Ok((t, cuda.to_host(&logits(cuda, model, kv, host, true)?)?))
    })();
    cuda.retune(|t| t.launch.pdl = true);
    let (t, without) = off?;
    timing_line(report, format!("{what}, PDL off"), &t, bytes, floor_ms);
    let c = compare(&with, &without, Tol::F32);
    if c.max_abs != 0.0 || c.len == 0 {
        report.fail(format!(
            "{what}: logits with PDL differ from those without: max |diff| {:.3e} at {}",
            c.max_abs, c.worst_index
        ));
    }
    Ok(())
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
    let mut kv = model.new_kv_storage(cuda, 128 * blocks_per_seq + 1, BLOCK)?;
    let (free, total) = cuda.memory()?;
    report.line(format!(
        "device memory in use: {:.1} of {:.1} GB",
        (total - free) as f64 / 1e9,
        total as f64 / 1e9
    ));
    let kv_bytes_per_token = model.kv_bytes_per_token(cuda) as f64;
    let read = weight_bytes_read(&c);
    timing_header(report, "step");
    let line = timing_line;

    for b in [1usize, 8, 64, 128] {
        // Each sequence has CONTEXT tokens cached and decodes one more (the cache holds zeros:
        // the values do not change the time). Tables 16 wide, as the runner pads them.
        let host = decode_batch(b, blocks_per_seq.next_power_of_two());
        let bytes = read + (b * (CONTEXT + 1)) as f64 * kv_bytes_per_token;
        let floor_ms = bytes / FLOOR_BYTES_PER_S * 1e3;
        for graph in [false, true] {
            let t = time_step(cuda, &model, &mut kv, &host, graph)?;
            let how = if graph { "graph" } else { "eager" };
            let what = format!("decode B={b} ctx {CONTEXT} {how}");
            line(report, what, &t, bytes, floor_ms);
        }
        let what = format!("decode B={b} ctx {CONTEXT} graph");
        pdl_off_line(
            cuda,
            &model,
            &mut kv,
            &host,
            report,
            (what, bytes, floor_ms),
        )?;
        // The replayed graph computes what the eager forward computes.
        let eager = cuda.to_host(&logits(cuda, &model, &mut kv, &host, false)?)?;
        let graphed = cuda.to_host(&logits(cuda, &model, &mut kv, &host, true)?)?;
        let c = compare(&graphed, &eager, Tol::F32);
        report.summary_line(format!(
            "decode graph B={b} vs eager: max |diff| {:.3e} ({} logits)",
            c.max_abs, c.len
        ));
        if c.worst > 1.0 {
            report.fail(format!(
                "decode graph B={b} differs from the eager forward: {} vs {} at {}",
                c.got_at_worst, c.want_at_worst, c.worst_index
            ));
        }
    }

    let host = prefill_batch(CONTEXT);
    let t = time_step(cuda, &model, &mut kv, &host, false)?;
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

/// Median ms of `ITERS` runs of `f` between CUDA events, after one warm-up run.
pub fn time_op(cuda: &CudaBackend, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
    let mut ms = Vec::with_capacity(ITERS);
    for _ in 0..ITERS {
        let start = cuda.stream().record_event(flags).context("event")?;
        f()?;
        let end = cuda.stream().record_event(flags).context("event")?;
        ms.push(f64::from(start.elapsed_ms(&end).context("elapsed")?));
    }
    ms.sort_by(f64::total_cmp);
    Ok(ms[ms.len() / 2])
}

/// Where a decode step's time goes: every GEMM of a layer and the LM head at several batch
/// sizes through cuBLAS and (up to 8 rows) the GEMV kernel, as achieved GB/s of weight
/// streaming; then the other ops of a layer at batch 1 and 128 over 128-token contexts.
pub fn profile(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("metrale-qwen3-8b-p{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("config.json"), QWEN3_8B)?;
    let c = ModelDir::open(&dir)?.config();
    let _ = std::fs::remove_dir_all(&dir);
    let c = c?;
    let (h, hd, nh, nkv, i, v) = (
        c.hidden_size,
        c.head_dim,
        c.num_attention_heads,
        c.num_key_value_heads,
        c.intermediate_size,
        c.vocab_size,
    );
    let weights = [
        ("qkv", (nh + 2 * nkv) * hd, h),
        ("o", h, nh * hd),
        ("gate_up", 2 * i, h),
        ("down", h, i),
        ("lm_head", v, h),
    ];
    let w: Vec<CudaTensor> = weights
        .iter()
        .enumerate()
        .map(|(s, &(_, n, k))| cuda.random_bf16(&[n, k], 100 + s as u64, 0.02))
        .collect::<std::result::Result<_, _>>()?;
    report.summary_line(format!(
        "{:<8} {:>4} {:>10} {:>10} {:>10} {:>10}",
        "weight", "rows", "cuBLAS ms", "GB/s", "GEMV ms", "GB/s"
    ));
    for m in [1usize, 2, 4, 8, 16, 64, 128] {
        let mut layer = [0f64; 2];
        for ((name, n, k), wt) in weights.iter().zip(&w) {
            let x = cuda.random_bf16(&[m, *k], 7, 1.0)?;
            let mut out = cuda.zeros(&[m, *n])?;
            let bytes = (n * k * 2) as f64;
            let mut ms = [f64::NAN; 2];
            let mut results: Vec<Vec<f32>> = Vec::new();
            for (p, rows) in [0usize, 8].into_iter().enumerate() {
                if p == 1 && m > 8 {
                    continue;
                }
                cuda.retune(|t| t.gemm.gemv_max_rows = rows);
                ms[p] = time_op(cuda, || Ok(cuda.matmul(&mut out, &x, wt)?))?;
                results.push(cuda.to_host(&out)?);
            }
            cuda.retune(|t| t.gemm.gemv_max_rows = 8);
            if results.len() == 2 {
                let cmp = compare(&results[1], &results[0], Tol::GEMM);
                if cmp.worst > 1.0 {
                    report.fail(format!(
                        "GEMV {name} rows {m} differs from cuBLAS: {} vs {} at {}",
                        cmp.got_at_worst, cmp.want_at_worst, cmp.worst_index
                    ));
                }
            }
            if *name != "lm_head" {
                layer[0] += ms[0];
                layer[1] += if ms[1].is_nan() { ms[0] } else { ms[1] };
            }
            let gbs = |t: f64| bytes / (t / 1e3) / 1e9;
            report.summary_line(format!(
                "{name:<8} {m:>4} {:>10.4} {:>10.0} {:>10.4} {:>10.0}",
                ms[0],
                gbs(ms[0]),
                ms[1],
                gbs(ms[1])
            ));
            report.record(json!({"profile": "matmul", "weight": name, "rows": m,
                "cublas_ms": ms[0], "gemv_ms": if ms[1].is_nan() { None } else { Some(ms[1]) }}));
        }
        report.summary_line(format!(
            "GEMMs of 36 layers, rows {m}: cuBLAS {:.3} ms, best {:.3} ms",
            36.0 * layer[0],
            36.0 * layer[1]
        ));
    }
    // What the per-shape GEMM timing chose (gemm_tune.rs) against cublasGemmEx's default.
    for ((m, n, k), lt, us, default_us) in cuda.gemm_tuning() {
        report.summary_line(format!(
            "tuned GEMM m={m:<4} n={n:<6} k={k:<6} {:<12} {us:>8.1} us (cublasGemmEx {default_us:.1} us, {:.2}×)",
            if lt { "cuBLASLt" } else { "cublasGemmEx" },
            default_us / us.max(1e-3)
        ));
        report.record(json!({"profile": "gemm_tuning", "m": m, "n": n, "k": k,
            "cublaslt": lt, "us": us, "gemm_ex_us": default_us}));
    }
    // The fused gate_up GEMV + SiLU against its two parts, at one row (the decode path).
    {
        let x = cuda.random_bf16(&[1, h], 7, 1.0)?;
        let mut gate_up = cuda.zeros(&[1, 2 * i])?;
        let mut act = cuda.zeros(&[1, i])?;
        let fused = time_op(cuda, || {
            Ok(cuda.matmul_silu_mul(&mut act, &mut gate_up, &x, &w[2])?)
        })?;
        let parts = time_op(cuda, || {
            cuda.matmul(&mut gate_up, &x, &w[2])?;
            Ok(cuda.silu_mul(&mut act, &gate_up)?)
        })?;
        let gbs = |t: f64| (2 * i * h * 2) as f64 / (t / 1e3) / 1e9;
        report.summary_line(format!(
            "gate_up+silu, 1 row: fused {fused:.4} ms ({:.0} GB/s), gemv + silu_mul {parts:.4} ms",
            gbs(fused)
        ));
        report.record(
            json!({"profile": "gate_up_silu", "rows": 1, "fused_ms": fused, "parts_ms": parts}),
        );
    }

    // The other ops of one layer.
    let rope = {
        let (inv_freq, scale) = c.rope.inv_freq(hd);
        RopeTables {
            rotary_dim: 2 * inv_freq.len(),
            inv_freq,
            scale,
        }
    };
    let blocks_per_seq = (CONTEXT + 1).div_ceil(BLOCK);
    let mut k_cache = cuda.zeros(&[128 * blocks_per_seq + 1, BLOCK, nkv, hd])?;
    let mut v_cache = cuda.zeros(&[128 * blocks_per_seq + 1, BLOCK, nkv, hd])?;
    let norm_w = cuda.random_bf16(&[h], 3, 0.5)?;
    let hd_w = cuda.random_bf16(&[hd], 4, 0.5)?;
    for b in [1usize, 128] {
        let host = decode_batch(b, 1);
        let batch = cuda.prepare_batch(&host)?;
        let mut x = cuda.tensor_from_f32(&[b, h], &vec![0.5; b * h], DType::F32)?;
        let proj = cuda.tensor_from_f32(&[b, h], &vec![0.25; b * h], DType::F32)?;
        let mut xn = cuda.zeros(&[b, h])?;
        let qkv_w = (nh + 2 * nkv) * hd;
        let mut qkv = cuda.tensor_from_f32(&[b, qkv_w], &vec![0.1; b * qkv_w], DType::F32)?;
        let mut attn = cuda.zeros(&[b, nh * hd])?;
        let gate_up = cuda.tensor_from_f32(&[b, 2 * i], &vec![0.3; b * 2 * i], DType::F32)?;
        let mut act = cuda.zeros(&[b, i])?;
        let eps = c.rms_norm_eps;
        let scale = 1.0 / (hd as f32).sqrt();
        let ops = [
            (
                "add_rms_norm",
                time_op(cuda, || {
                    Ok(cuda.add_rms_norm(&mut xn, &mut x, &proj, &norm_w, eps)?)
                })?,
            ),
            (
                "qk_norm_rope",
                time_op(cuda, || {
                    Ok(cuda.qk_norm_rope(&mut qkv, &batch, &hd_w, &hd_w, &rope, nh, nkv, eps)?)
                })?,
            ),
            (
                "write_kv",
                time_op(cuda, || {
                    Ok(cuda.write_kv(&mut k_cache, &mut v_cache, &qkv, &batch, nh)?)
                })?,
            ),
            (
                "paged_attention",
                time_op(cuda, || {
                    Ok(cuda
                        .paged_attention(&mut attn, &qkv, &k_cache, &v_cache, &batch, nh, scale)?)
                })?,
            ),
            (
                "silu_mul",
                time_op(cuda, || Ok(cuda.silu_mul(&mut act, &gate_up)?))?,
            ),
        ];
        // A layer has two add_rms_norm and one of each other op.
        let per_layer: f64 = ops.iter().map(|(_, t)| t).sum::<f64>() + ops[0].1;
        report.summary_line(format!(
            "B={b:<4} {} | other ops of 36 layers {:.3} ms",
            ops.iter()
                .map(|(n, t)| format!("{n} {:.1} us", t * 1e3))
                .collect::<Vec<_>>()
                .join(", "),
            36.0 * per_layer
        ));
    }
    // Decode attention over long contexts, where it reads as many bytes as the weights: the
    // KV bytes a layer reads over the time, against the copy bandwidth.
    for (c, simt) in [
        (1usize, 1024usize, 16usize),
        (32, 1024, 16),
        (128, 128, 4),
        (128, 128, 16),
        (128, 512, 4),
        (128, 512, 16),
        (128, 1024, 4),
        (128, 1024, 16),
        (128, 1024, 32),
    ]
    .into_iter()
    .flat_map(|c| [(c, false), (c, true)])
    {
        let (b, ctx, per_sm) = c;
        cuda.retune(|t| {
            t.attention.kernel = if simt {
                metrale_engine::tuning::AttnKernelChoice::Simt
            } else {
                metrale_engine::tuning::AttnKernelChoice::Auto
            }
        });
        let kernel = if simt { "simt" } else { "mma" };
        cuda.retune(|t| t.attention.blocks_per_sm = per_sm);
        let splits = cuda.attention_splits(b, nh, nkv, hd, ctx + 1);
        let blocks = (ctx + 1).div_ceil(BLOCK);
        let host = decode_batch_at(b, blocks, ctx);
        let batch = cuda.prepare_batch(&host)?;
        let k_cache = cuda.zeros(&[b * blocks + 1, BLOCK, nkv, hd])?;
        let v_cache = cuda.zeros(&[b * blocks + 1, BLOCK, nkv, hd])?;
        let qkv_w = (nh + 2 * nkv) * hd;
        let qkv = cuda.tensor_from_f32(&[b, qkv_w], &vec![0.1; b * qkv_w], DType::F32)?;
        let mut attn = cuda.zeros(&[b, nh * hd])?;
        let scale = 1.0 / (hd as f32).sqrt();
        let ms = time_op(cuda, || {
            Ok(cuda.paged_attention(&mut attn, &qkv, &k_cache, &v_cache, &batch, nh, scale)?)
        })?;
        let bytes = (b * (ctx + 1) * nkv * hd * 2 * 2) as f64;
        let gbs = bytes / (ms / 1e3) / 1e9;
        report.summary_line(format!(
            "attention {kernel:<4} B={b:<4} ctx {ctx:<5} {per_sm:>2} blocks/SM ({splits:>2} splits) {:.1} us a layer, {gbs:.0} GB/s of KV ({:.2} ms for 36 layers)",
            ms * 1e3,
            36.0 * ms
        ));
        report.record(
            json!({"profile": "attention", "kernel": kernel, "rows": b, "context": ctx,
            "blocks_per_sm": per_sm, "splits": splits, "ms": ms, "gb_s": gbs}),
        );
    }
    cuda.retune(|t| t.attention.blocks_per_sm = 4);
    cuda.retune(|t| t.attention.kernel = metrale_engine::tuning::AttnKernelChoice::Auto);
    Ok(())
}
