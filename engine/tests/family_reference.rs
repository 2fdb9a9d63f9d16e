//! The CPU reference backend against transformers for Llama 3, Mistral, Gemma 3 and gpt-oss
//! (issue 39) and MiniMax-M2 and DeepSeek-V3 (issue 40): tiny random checkpoints and what
//! transformers 5 computed for them in float32 (`tests/fixtures/make_family_fixtures.py`,
//! `make_gpt_oss_fixtures.py`, `make_minimax_fixtures.py`, `make_deepseek_v3_fixtures.py`),
//! loaded through the registry as `met` loads them. Sequences reach 130 tokens, past every fixture's sliding
//! window (16).

use metrale_engine::backend::{Backend, BatchInputs, CpuBackend, SeqChunk};
use metrale_engine::loader::{ModelDir, SafetensorsWeights};
use metrale_engine::models::Model;
use metrale_engine::models::registry::{self, LoadOptions, WithModel};
use metrale_engine::score::{score, top_k_of};
mod reference_support;

use reference_support::{Reference, model_dir, reference};

const FIXTURES: [&str; 11] = [
    "llama3-gqa-untied",
    "llama3-mha-tied",
    "mistral-sliding",
    "gemma3-sliding",
    "gemma3-wide-window",
    "gpt-oss-bf16",
    "gpt-oss-mxfp4",
    "minimax-m2-tiny",
    "deepseek-v3-tiny",
    "deepseek-v3-plain",
    "deepseek-v3-fp8",
];
const TOLERANCE: f32 = 1e-3;

/// What a test checks on a loaded fixture.
#[derive(Clone, Copy)]
enum Check {
    Score,
    Greedy,
    Batched,
}

/// Load fixture `name` through the registry, as `met` does, and run `check` on it.
fn with_fixture(name: &str, check: Check) {
    struct Run<'a>(&'a str, Check);
    impl WithModel<CpuBackend> for Run<'_> {
        type Output = ();
        fn run<M: Model<CpuBackend> + 'static>(self, _backend: CpuBackend, model: M) {
            let reference = reference(self.0);
            match self.1 {
                Check::Score => matches_transformers(self.0, &model, &reference),
                Check::Greedy => greedy_matches(self.0, &model, &reference),
                Check::Batched => batched_matches(self.0, &model, &reference),
            }
        }
    }
    let dir = ModelDir::open(&model_dir(name)).expect("fixture checkpoint");
    registry::load(
        CpuBackend::default(),
        &dir,
        LoadOptions::default(),
        &mut |_| {},
        Run(name, check),
    )
    .unwrap_or_else(|e| panic!("{name}: {e:#}"));
}

fn assert_close(what: &str, got: f32, want: f32) {
    assert!(
        (got - want).abs() <= TOLERANCE,
        "{what}: got {got}, transformers {want}"
    );
}

#[test]
fn every_position_matches_transformers() {
    for name in FIXTURES {
        with_fixture(name, Check::Score);
    }
}

/// Step one token at a time through the cache, as serving decodes.
#[test]
fn greedy_continuation_is_identical() {
    for name in FIXTURES {
        with_fixture(name, Check::Greedy);
    }
}

/// Several sequences of different lengths in one forward give the numbers each gives alone
/// (the window is per sequence).
#[test]
fn batched_equals_one_at_a_time() {
    for name in [
        "mistral-sliding",
        "gemma3-sliding",
        "gpt-oss-bf16",
        "minimax-m2-tiny",
        "deepseek-v3-tiny",
        "deepseek-v3-plain",
    ] {
        with_fixture(name, Check::Batched);
    }
}

/// The MXFP4 experts as the loader decodes them, value for value, against what transformers'
/// own `convert_moe_packed_tensors` made of the same bytes (a few rows of expert 0 of layer 0,
/// in the checkpoint's out × in orientation).
#[test]
fn mxfp4_decode_is_transformers() {
    let path = model_dir("gpt-oss-mxfp4").join("../../gpt-oss-mxfp4.decode.json");
    let text = std::fs::read_to_string(&path).expect("decode fixture");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("json");
    let weights = SafetensorsWeights::open(&model_dir("gpt-oss-mxfp4")).expect("checkpoint");
    let sample = doc["tensors"].as_object().expect("tensors");
    assert_eq!(sample.len(), 2, "gate_up_proj and down_proj");
    for (name, want) in sample {
        let rows = want["rows"].as_array().expect("rows");
        let cols = rows[0].as_array().expect("a row").len();
        // gate_up_proj [E, 2·I, H], down_proj [E, H, I] (I = H = 64 in the fixture).
        let out = if name.ends_with("gate_up_proj") {
            128
        } else {
            64
        };
        let t = weights.get_mxfp4(name, &[4, out, cols]).expect("mxfp4");
        let got = t.to_f32();
        for (r, row) in rows.iter().enumerate() {
            for (c, v) in row.as_array().expect("row").iter().enumerate() {
                let want = v.as_f64().expect("number") as f32;
                assert_eq!(got[r * cols + c], want, "{name} expert 0 [{r}, {c}]");
            }
        }
    }
}

fn matches_transformers<M: Model<CpuBackend>>(name: &str, model: &M, reference: &Reference) {
    {
        {
            let mut max_diff = 0f32;
            for (s, seq) in reference.sequences.iter().enumerate() {
                // Odd chunk size: prefill in several pieces through the paged cache, so the
                // window reaches back into earlier chunks.
                let got = score(&CpuBackend::default(), model, &seq.tokens, 5, 7).expect("score");
                assert_eq!(got.len(), seq.tokens.len());
                for (p, want) in seq.next_token_logprobs.iter().enumerate() {
                    let lp = got[p].logprob.expect("has next");
                    max_diff = max_diff.max((lp - want).abs());
                    assert_close(&format!("{name} seq {s} pos {p}"), lp, *want);
                }
                for (p, want) in seq.top5.iter().enumerate() {
                    assert_eq!(got[p].top[0].0, want[0].0, "{name} seq {s} pos {p}: top-1");
                    for (i, (&(_, lp), &(_, w))) in got[p].top.iter().zip(want).enumerate() {
                        assert_close(&format!("{name} seq {s} pos {p} top {i}"), lp, w);
                    }
                }
            }
            eprintln!("{name}: max |log-prob - transformers| = {max_diff:.2e}");
        }
    }
}

fn greedy_matches<M: Model<CpuBackend>>(name: &str, model: &M, reference: &Reference) {
    {
        {
            let g = &reference.greedy;
            let bs = 4; // small blocks: the continuation crosses several
            let total = g.prompt.len() + g.continuation.len();
            let table: Vec<u32> = (1..=total.div_ceil(bs) as u32).rev().collect();
            let cpu = CpuBackend::default();
            let mut kv = model.new_kv_storage(&cpu, table.len() + 1, bs).expect("kv");
            let mut tokens = g.prompt.clone();
            let mut start = 0;
            for _ in 0..g.continuation.len() {
                let chunk = &tokens[start..];
                let host = BatchInputs::build(
                    bs,
                    &[SeqChunk {
                        tokens: chunk,
                        start_pos: start,
                        block_table: &table,
                        logits_rows: vec![chunk.len() - 1],
                    }],
                );
                let logits = model
                    .forward(&cpu, &host, &host.clone(), &mut kv)
                    .expect("forward");
                let row = cpu.to_host(&logits).expect("host");
                start = tokens.len();
                tokens.push(top_k_of(&row, 1)[0].0);
            }
            assert_eq!(
                &tokens[g.prompt.len()..],
                &g.continuation[..],
                "{name}: greedy continuation"
            );
        }
    }
}

fn batched_matches<M: Model<CpuBackend>>(name: &str, model: &M, reference: &Reference) {
    {
        {
            let bs = 8;
            let mut tables = Vec::new();
            let mut next_block = 1u32;
            for s in &reference.sequences {
                let n = s.tokens.len().div_ceil(bs) as u32;
                tables.push((next_block..next_block + n).collect::<Vec<u32>>());
                next_block += n;
            }
            let chunks: Vec<SeqChunk<'_>> = reference
                .sequences
                .iter()
                .zip(&tables)
                .map(|(s, t)| SeqChunk {
                    tokens: &s.tokens,
                    start_pos: 0,
                    block_table: t,
                    logits_rows: (0..s.tokens.len()).collect(),
                })
                .collect();
            let cpu = CpuBackend::default();
            let host = BatchInputs::build(bs, &chunks);
            let mut kv = model
                .new_kv_storage(&cpu, next_block as usize, bs)
                .expect("kv");
            let mut logits = model
                .forward(&cpu, &host, &host.clone(), &mut kv)
                .expect("forward");
            cpu.log_softmax(&mut logits).expect("log_softmax");
            let all = cpu.to_host(&logits).expect("host");
            let vocab = model.vocab_size();
            let mut row = 0;
            for (i, s) in reference.sequences.iter().enumerate() {
                let alone = score(&cpu, model, &s.tokens, 1, 1024).expect("alone");
                for (p, a) in alone.iter().enumerate() {
                    if let Some(t) = a.next_token {
                        let batched = all[(row + p) * vocab + t as usize];
                        let diff = (batched - a.logprob.expect("has next")).abs();
                        assert!(diff < 1e-5, "{name} seq {i} pos {p}: batched {batched}");
                    }
                }
                row += s.tokens.len();
            }
        }
    }
}

/// The error of loading the checkpoint in `dir` through the registry on the CPU, as `met`
/// prints it; `dir` is removed.
fn registry_error(dir: &std::path::Path) -> String {
    struct Loaded;
    impl WithModel<CpuBackend> for Loaded {
        type Output = ();
        fn run<M: Model<CpuBackend> + 'static>(self, _backend: CpuBackend, _model: M) {}
    }
    let result = ModelDir::open(dir)
        .map_err(anyhow::Error::from)
        .and_then(|md| {
            registry::load(
                CpuBackend::default(),
                &md,
                LoadOptions::default(),
                &mut |_| {},
                Loaded,
            )
        });
    std::fs::remove_dir_all(dir).ok();
    format!("{:#}", result.expect_err("loading must fail"))
}

/// A copy of fixture `name` in a fresh directory, with `config.json` edited by `edit`.
fn edited_copy(name: &str, tag: &str, edit: impl Fn(&mut serde_json::Value)) -> std::path::PathBuf {
    let from = model_dir(name);
    let dir = std::env::temp_dir().join(format!("met-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    for entry in std::fs::read_dir(&from).expect("fixture") {
        let path = entry.expect("entry").path();
        std::fs::copy(&path, dir.join(path.file_name().expect("name"))).expect("copy");
    }
    let text = std::fs::read_to_string(dir.join("config.json")).expect("config");
    let mut config: serde_json::Value = serde_json::from_str(&text).expect("json");
    edit(&mut config);
    std::fs::write(dir.join("config.json"), config.to_string()).expect("write");
    dir
}

/// Bad gpt-oss checkpoints fail at load with a sentence that names the problem.
#[test]
fn broken_gpt_oss_checkpoints_are_refused_by_name() {
    // An MXFP4 config over bf16 experts: the packed tensors are missing.
    let dir = edited_copy("gpt-oss-bf16", "mxfp4-config", |c| {
        c["quantization_config"] = serde_json::json!({"quant_method": "mxfp4"});
    });
    let e = registry_error(&dir);
    assert!(
        e.contains("MXFP4 tensor model.layers.0.mlp.experts.gate_up_proj")
            && e.contains("gate_up_proj_blocks")
            && e.contains("missing"),
        "{e}"
    );
    // Experts wider than the checkpoint's: the shapes are named.
    let dir = edited_copy("gpt-oss-mxfp4", "mxfp4-shape", |c| {
        c["intermediate_size"] = serde_json::json!(96);
    });
    let e = registry_error(&dir);
    assert!(
        e.contains("gate_up_proj_blocks") && e.contains("[4, 192, 2, 16]"),
        "{e}"
    );
    // A layer type this engine does not run.
    let dir = edited_copy("gpt-oss-bf16", "layer-type", |c| {
        c["layer_types"][1] = serde_json::json!("chunked_attention");
    });
    let e = registry_error(&dir);
    assert!(
        e.contains("chunked_attention") && e.contains("layer_types"),
        "{e}"
    );
}

/// Bad MiniMax-M2 checkpoints fail at load with a sentence that names the problem.
#[test]
fn broken_minimax_checkpoints_are_refused_by_name() {
    // Softmax routing is another model.
    let dir = edited_copy("minimax-m2-tiny", "mm-scoring", |c| {
        c["scoring_func"] = serde_json::json!("softmax");
    });
    let e = registry_error(&dir);
    assert!(e.contains("scoring_func") && e.contains("sigmoid"), "{e}");
    // More experts than the checkpoint holds: the missing tensor is named.
    let dir = edited_copy("minimax-m2-tiny", "mm-experts", |c| {
        c["num_local_experts"] = serde_json::json!(9);
    });
    let e = registry_error(&dir);
    assert!(e.contains("model.layers.0.block_sparse_moe"), "{e}");
}

/// A copy of fixture `name` in a fresh directory without the tensor `gone`.
fn without_tensor(name: &str, gone: &str) -> std::path::PathBuf {
    let dir = edited_copy(name, "no-tensor", |_| {});
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).expect("read");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
    let kept: Vec<_> = st
        .tensors()
        .into_iter()
        .filter(|(n, _)| n != gone)
        .collect();
    assert!(kept.len() < st.len(), "{name} has {gone}");
    std::fs::write(
        &path,
        safetensors::serialize(kept, None).expect("serialize"),
    )
    .expect("write");
    dir
}

/// Bad DeepSeek-V3 checkpoints fail at load with a sentence that names the problem.
#[test]
fn broken_deepseek_checkpoints_are_refused_by_name() {
    // Groups that do not divide the experts.
    let dir = edited_copy("deepseek-v3-tiny", "ds-groups", |c| {
        c["n_group"] = serde_json::json!(3);
    });
    let e = registry_error(&dir);
    assert!(
        e.contains("n_group (3) must divide n_routed_experts (8)"),
        "{e}"
    );
    // Softmax routing is DeepSeek-V2's.
    let dir = edited_copy("deepseek-v3-tiny", "ds-topk", |c| {
        c["topk_method"] = serde_json::json!("group_limited_greedy");
    });
    let e = registry_error(&dir);
    assert!(e.contains("topk_method") && e.contains("noaux_tc"), "{e}");
    // A checkpoint without one of its latent attention's tensors, or an FP8 one without a
    // scale: it is named.
    for (name, gone) in [
        (
            "deepseek-v3-tiny",
            "model.layers.1.self_attn.kv_b_proj.weight",
        ),
        (
            "deepseek-v3-fp8",
            "model.layers.1.self_attn.kv_a_proj_with_mqa.weight_scale_inv",
        ),
    ] {
        let e = registry_error(&without_tensor(name, gone));
        assert!(e.contains(gone) && e.contains("missing"), "{e}");
    }
    // A config that asks for an uncompressed q of a checkpoint that has none: q_proj is named.
    let dir = edited_copy("deepseek-v3-tiny", "ds-q-lora", |c| {
        c["q_lora_rank"] = serde_json::Value::Null;
    });
    let e = registry_error(&dir);
    assert!(
        e.contains("model.layers.0.self_attn.q_proj.weight") && e.contains("missing"),
        "{e}"
    );
    // A latent wider than the checkpoint's: the shape is named.
    let dir = edited_copy("deepseek-v3-tiny", "ds-kv-rank", |c| {
        c["kv_lora_rank"] = serde_json::json!(48);
    });
    let e = registry_error(&dir);
    assert!(
        e.contains("kv_a_proj_with_mqa") && e.contains("[56, 64]"),
        "{e}"
    );
}

/// The latent cache holds one row of `kv_lora_rank + qk_rope_head_dim` values a token a layer:
/// at most a quarter of what the same model's decompressed keys and values would take
/// (issue 40), measured from what the engine sizes its cache by.
#[test]
fn the_latent_cache_is_a_quarter_of_the_heads_or_less() {
    struct Bytes;
    impl WithModel<CpuBackend> for Bytes {
        type Output = usize;
        fn run<M: Model<CpuBackend> + 'static>(self, backend: CpuBackend, model: M) -> usize {
            model.kv_bytes_per_token(&backend)
        }
    }
    let dir = ModelDir::open(&model_dir("deepseek-v3-tiny")).expect("fixture");
    let bytes = registry::load(
        CpuBackend::default(),
        &dir,
        LoadOptions::default(),
        &mut |_| {},
        Bytes,
    )
    .expect("loads");
    // 3 layers × (32 + 8) f32; the heads would be 3 × 4 × ((16 + 8) + 16) f32.
    assert_eq!(bytes, 3 * 40 * 4);
    let heads = 3 * 4 * (24 + 16) * 4;
    assert!(4 * bytes <= heads, "{bytes} of {heads}");
}

/// Prefix caching at the model's level: a sequence whose first blocks are another's, already
/// in the latent cache, computes only its own tokens and gets the numbers it gets alone.
#[test]
fn a_cached_prefix_is_reused() {
    struct Prefix;
    impl WithModel<CpuBackend> for Prefix {
        type Output = ();
        fn run<M: Model<CpuBackend> + 'static>(self, cpu: CpuBackend, model: M) {
            let reference = reference("deepseek-v3-tiny");
            let long = &reference
                .sequences
                .iter()
                .max_by_key(|s| s.tokens.len())
                .expect("sequences")
                .tokens;
            let bs = 8;
            let shared = &long[..2 * bs];
            let own: Vec<u32> = long[2 * bs..2 * bs + 21].iter().rev().copied().collect();
            let mut kv = model.new_kv_storage(&cpu, 8, bs).expect("kv");
            // The first sequence fills blocks 5 and 2 with the shared prefix.
            let first = BatchInputs::build(
                bs,
                &[SeqChunk {
                    tokens: shared,
                    start_pos: 0,
                    block_table: &[5, 2],
                    logits_rows: vec![],
                }],
            );
            model
                .forward(&cpu, &first, &first.clone(), &mut kv)
                .expect("prefix");
            // The second reuses them and computes its own 21 tokens into blocks 7, 1, 3.
            let table = [5, 2, 7, 1, 3];
            let second = BatchInputs::build(
                bs,
                &[SeqChunk {
                    tokens: &own,
                    start_pos: 2 * bs,
                    block_table: &table,
                    logits_rows: (0..own.len()).collect(),
                }],
            );
            let mut logits = model
                .forward(&cpu, &second, &second.clone(), &mut kv)
                .expect("rest");
            cpu.log_softmax(&mut logits).expect("log_softmax");
            let got = cpu.to_host(&logits).expect("host");
            let whole: Vec<u32> = shared.iter().chain(&own).copied().collect();
            let alone = score(&cpu, &model, &whole, 1, 1024).expect("alone");
            let vocab = model.vocab_size();
            for (i, a) in alone[2 * bs..].iter().enumerate() {
                if let Some(t) = a.next_token {
                    let reused = got[i * vocab + t as usize];
                    let diff = (reused - a.logprob.expect("has next")).abs();
                    assert!(diff < 1e-5, "row {i}: reused {reused}, alone {a:?}");
                }
            }
        }
    }
    let dir = ModelDir::open(&model_dir("deepseek-v3-tiny")).expect("fixture");
    registry::load(
        CpuBackend::default(),
        &dir,
        LoadOptions::default(),
        &mut |_| {},
        Prefix,
    )
    .expect("loads");
}
