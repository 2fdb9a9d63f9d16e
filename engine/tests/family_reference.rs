//! The CPU reference backend against transformers for Llama 3, Mistral, Gemma 3 and gpt-oss
//! (issue 39) and MiniMax-M2, Nemotron-H and DeepSeek-V3 (issue 40): tiny random checkpoints
//! and what transformers 5 computed for them in float32 (`tests/fixtures/make_family_fixtures.py`,
//! `make_gpt_oss_fixtures.py`, `make_minimax_fixtures.py`, `make_nemotron_h_fixtures.py`,
//! `make_deepseek_v3_fixtures.py`), loaded through the registry as `met` loads them. Sequences
//! reach 130 tokens, past every fixture's sliding window (16) and Nemotron-H's conv window (3).
//! A model with recurrent state (Nemotron-H's Mamba-2 layers) runs each sequence in a slot of
//! the state pool, as the engine does.

use metrale_engine::backend::{Backend, BatchInputs, CpuBackend, SeqChunk};
use metrale_engine::kv_cache::{StateInit, StatePlan};
use metrale_engine::loader::{ModelDir, SafetensorsWeights};
use metrale_engine::models::registry::{self, LoadOptions, WithModel};
use metrale_engine::models::{KvStorage, Model};
use metrale_engine::score::{score, top_k_of};
mod reference_support;

use reference_support::{Reference, model_dir, reference};

const FIXTURES: [&str; 13] = [
    "llama3-gqa-untied",
    "llama3-mha-tied",
    "mistral-sliding",
    "gemma3-sliding",
    "gemma3-wide-window",
    "gpt-oss-bf16",
    "gpt-oss-mxfp4",
    "minimax-m2-tiny",
    "nemotron-h-tiny",
    "nemotron-h-moe-tiny",
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
    Chunked,
    Checkpoint,
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
                Check::Chunked => chunked_matches(self.0, &model, &reference),
                Check::Checkpoint => checkpoint_resumes(self.0, &model, &reference),
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
        "nemotron-h-tiny",
        "nemotron-h-moe-tiny",
        "deepseek-v3-tiny",
        "deepseek-v3-plain",
    ] {
        with_fixture(name, Check::Batched);
    }
}

/// Prefill in chunks of every size from one token (shorter than the conv window) up, the
/// recurrent state carried from chunk to chunk in its slot.
#[test]
fn chunked_prefill_carries_the_state() {
    with_fixture("nemotron-h-tiny", Check::Chunked);
}

/// A prefix checkpoint (the state copied into another slot after some tokens, as prefix
/// caching saves it) resumes a new sequence exactly where the first one was.
#[test]
fn a_state_checkpoint_resumes_the_sequence() {
    with_fixture("nemotron-h-tiny", Check::Checkpoint);
}

/// `slots` recurrent-state slots in `kv` when `model` has recurrent layers.
fn add_state<M: Model<CpuBackend>>(model: &M, kv: &mut KvStorage<CpuBackend>, slots: usize) {
    if model.state_spec().is_some() {
        kv.state = Some(
            model
                .new_state_storage(&CpuBackend::default(), slots)
                .expect("state"),
        );
    }
}

/// Each sequence's state plan for `host` (sequence `s` in slot `s`, from zeros at position 0,
/// else as it was left) when `model` has recurrent layers.
fn plan_states<M: Model<CpuBackend>>(model: &M, host: &mut BatchInputs, starts: &[usize]) {
    if model.state_spec().is_some() {
        host.states = starts
            .iter()
            .enumerate()
            .map(|(s, &start)| StatePlan {
                slot: s as u32,
                ..StatePlan::lone(start)
            })
            .collect();
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
            add_state(model, &mut kv, 1);
            let mut tokens = g.prompt.clone();
            let mut start = 0;
            for _ in 0..g.continuation.len() {
                let chunk = &tokens[start..];
                let mut host = BatchInputs::build(
                    bs,
                    &[SeqChunk {
                        tokens: chunk,
                        start_pos: start,
                        block_table: &table,
                        logits_rows: vec![chunk.len() - 1],
                    }],
                );
                plan_states(model, &mut host, &[start]);
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
            let mut host = BatchInputs::build(bs, &chunks);
            plan_states(model, &mut host, &vec![0; chunks.len()]);
            let mut kv = model
                .new_kv_storage(&cpu, next_block as usize, bs)
                .expect("kv");
            add_state(model, &mut kv, chunks.len());
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

fn chunked_matches<M: Model<CpuBackend>>(name: &str, model: &M, reference: &Reference) {
    let cpu = CpuBackend::default();
    let mut max_diff = 0f32;
    for (s, seq) in reference.sequences.iter().enumerate() {
        for chunk in [1, 2, 3, 4, 16, 1024] {
            let got = score(&cpu, model, &seq.tokens, 1, chunk).expect("score");
            for (p, want) in seq.next_token_logprobs.iter().enumerate() {
                let lp = got[p].logprob.expect("has next");
                max_diff = max_diff.max((lp - want).abs());
                assert_close(&format!("{name} seq {s} pos {p} chunk {chunk}"), lp, *want);
            }
        }
    }
    eprintln!("{name}: chunks of 1 to 1024 tokens, max |log-prob - transformers| = {max_diff:.2e}");
}

/// Run `tokens` from `start` (the state started as `init` in `slot`, saving `saves` as
/// `(after, slot)`) through the paged cache of `kv` with `table`; the log-probs of every row.
#[allow(clippy::too_many_arguments)]
fn run_from<M: Model<CpuBackend>>(
    model: &M,
    kv: &mut KvStorage<CpuBackend>,
    (bs, table): (usize, &[u32]),
    tokens: &[u32],
    start: usize,
    slot: u32,
    init: StateInit,
    saves: &[(u32, u32)],
) -> Vec<f32> {
    let cpu = CpuBackend::default();
    let mut host = BatchInputs::build(
        bs,
        &[SeqChunk {
            tokens: &tokens[start..],
            start_pos: start,
            block_table: table,
            logits_rows: (0..tokens.len() - start).collect(),
        }],
    );
    host.states = vec![StatePlan {
        slot,
        init,
        saves: saves
            .iter()
            .map(|&(after, slot)| metrale_engine::kv_cache::StateSave { after, slot })
            .collect(),
    }];
    let mut logits = model
        .forward(&cpu, &host, &host.clone(), kv)
        .expect("forward");
    cpu.log_softmax(&mut logits).expect("log_softmax");
    cpu.to_host(&logits).expect("host")
}

fn checkpoint_resumes<M: Model<CpuBackend>>(name: &str, model: &M, reference: &Reference) {
    let seq = reference
        .sequences
        .iter()
        .max_by_key(|s| s.tokens.len())
        .expect("a sequence");
    let tokens = &seq.tokens;
    let bs = 16;
    let table: Vec<u32> = (1..=tokens.len().div_ceil(bs) as u32).collect();
    let cpu = CpuBackend::default();
    let mut kv = model.new_kv_storage(&cpu, table.len() + 1, bs).expect("kv");
    add_state(model, &mut kv, 4);
    // The whole sequence in slot 0, its state after 17 and 48 tokens saved in slots 1 and 3.
    let whole = run_from(
        model,
        &mut kv,
        (bs, &table),
        tokens,
        0,
        0,
        StateInit::Zero,
        &[(17, 1), (48, 3)],
    );
    let vocab = model.vocab_size();
    // A new sequence in slot 2 resumes from each checkpoint; the prefix's keys and values are
    // the ones cached (a prefix-cache hit).
    for (after, from) in [(17usize, 1u32), (48, 3)] {
        let resumed = run_from(
            model,
            &mut kv,
            (bs, &table),
            tokens,
            after,
            2,
            StateInit::Copy(from),
            &[],
        );
        let worst = resumed
            .iter()
            .zip(&whole[after * vocab..])
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(worst < 1e-5, "{name}: resumed after {after}: {worst}");
    }
    // A state that starts from zeros again at a later position would not match: the check can
    // fail.
    let cold = run_from(
        model,
        &mut kv,
        (bs, &table),
        tokens,
        48,
        2,
        StateInit::Zero,
        &[],
    );
    let worst = cold
        .iter()
        .zip(&whole[48 * vocab..])
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(
        worst > 1e-2,
        "{name}: the state made no difference ({worst})"
    );
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
    // Python's json (Nemotron-H's `Infinity`), read as the engine reads it.
    let mut config = metrale_engine::loader::config::parse_json(&text).expect("json");
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

/// Bad Nemotron-H checkpoints fail at load with a sentence that names the problem.
#[test]
fn broken_nemotron_h_checkpoints_are_refused_by_name() {
    // A letter that is no layer type, and an MoE layer where the checkpoint has none.
    let dir = edited_copy("nemotron-h-tiny", "nh-letter", |c| {
        c["hybrid_override_pattern"] = serde_json::json!("M-M*-X");
    });
    let e = registry_error(&dir);
    assert!(
        e.contains("'X' at layer 5") && e.contains("hybrid_override_pattern"),
        "{e}"
    );
    let dir = edited_copy("nemotron-h-tiny", "nh-moe", |c| {
        c["hybrid_override_pattern"] = serde_json::json!("M-M*-E");
    });
    let e = registry_error(&dir);
    assert!(
        e.contains("tensor backbone.layers.5.mixer.experts.0.up_proj.weight is missing"),
        "{e}"
    );
    // A Mamba layer where the checkpoint has an MLP: its tensors are missing, by name.
    let dir = edited_copy("nemotron-h-tiny", "nh-missing", |c| {
        c["hybrid_override_pattern"] = serde_json::json!("MMM*-M");
    });
    let e = registry_error(&dir);
    assert!(
        e.contains("tensor backbone.layers.1.mixer.A_log is missing"),
        "{e}"
    );
    // More groups of B and C than the checkpoint's conv holds: the tensor and the shape the
    // config implies are named.
    let dir = edited_copy("nemotron-h-tiny", "nh-groups", |c| {
        c["n_groups"] = serde_json::json!(4);
    });
    let e = registry_error(&dir);
    assert!(
        e.contains("tensor backbone.layers.0.mixer.") && e.contains("expected [192]"),
        "{e}"
    );
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

/// The same weights under transformers 5's spelling of the config (`layers_block_type`, no
/// `num_hidden_layers` or `rms_norm_eps`, `{"__float__": "Infinity"}`) score the same.
#[test]
fn nemotron_h_reads_transformers_5s_config() {
    let dir = edited_copy("nemotron-h-tiny", "nh-t5", |c| {
        let o = c.as_object_mut().expect("object");
        for key in [
            "hybrid_override_pattern",
            "num_hidden_layers",
            "rms_norm_eps",
        ] {
            o.remove(key);
        }
        o.insert(
            "layers_block_type".into(),
            serde_json::json!([
                "linear_attention",
                "mlp",
                "linear_attention",
                "full_attention",
                "mlp",
                "linear_attention"
            ]),
        );
        o.insert(
            "time_step_limit".into(),
            serde_json::json!([0.0, {"__float__": "Infinity"}]),
        );
    });
    struct Run;
    impl WithModel<CpuBackend> for Run {
        type Output = ();
        fn run<M: Model<CpuBackend> + 'static>(self, _backend: CpuBackend, model: M) {
            matches_transformers(
                "nemotron-h-tiny (transformers 5 config)",
                &model,
                &reference("nemotron-h-tiny"),
            );
        }
    }
    let md = ModelDir::open(&dir).expect("dir");
    let result = registry::load(
        CpuBackend::default(),
        &md,
        LoadOptions::default(),
        &mut |_| {},
        Run,
    );
    std::fs::remove_dir_all(&dir).ok();
    result.expect("loads");
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
