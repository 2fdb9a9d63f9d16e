//! Qwen3.5's hybrid text models (Gated DeltaNet and gated full attention; dense
//! `Qwen3_5ForCausalLM` and `Qwen3_5MoeForCausalLM` with its shared expert) on the CPU reference
//! against transformers 5.17 in float32, on the tiny random checkpoints
//! `tests/fixtures/make_hybrid_fixtures.py` writes, and on `models/demo-hybrid`, the hybrid we
//! trained (`tests/fixtures/make_demo_hybrid_reference.py`): a whole sequence in one call, in chunks with
//! the sequence's state carried between calls, and decoding token by token, all through the
//! engine's `Model::forward` (paged KV cache, one recurrent-state slot). The Hub's
//! `*ForConditionalGeneration` layout is checked on the same weights re-laid as the Hub has
//! them.

use metrale_engine::backend::cpu::CpuTensor;
use metrale_engine::backend::{Backend, BatchInputs, CpuBackend, SeqChunk};
use metrale_engine::kv_cache::{StatePlan, StateSave};
use metrale_engine::loader::{LoadFormat, ModelDir, Weights};
use metrale_engine::models::qwen3_5::{self, Qwen3_5, Qwen3_5Config};
use metrale_engine::models::{KvStorage, Model};
use metrale_engine::score::top_k_of;
use safetensors::{Dtype, SafeTensors, tensor::TensorView};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
mod reference_support;

use reference_support::{Reference, checkpoint_dir, model_dir, reference};

/// The bf16 fixtures, the MoE one's weights in Qwen's fine-grained FP8
/// (`tests/fixtures/make_hybrid_fp8_fixture.py`), and both in ModelOpt's NVFP4 (the dense one
/// with its last layer left in bf16, `tests/fixtures/make_nvfp4_fixtures.py`): transformers
/// scored the dequantized weights. Then the trained demo hybrid, on chat prompts.
const NAMES: [&str; 6] = [
    "qwen3_5-hybrid-dense",
    "qwen3_5-hybrid-moe",
    "qwen3_5-hybrid-moe-fp8",
    "qwen3_5-hybrid-dense-nvfp4",
    "qwen3_5-hybrid-moe-nvfp4",
    "demo-hybrid",
];
const TOLERANCE: f32 = 1e-3;

fn load_dir(dir: &Path) -> Qwen3_5 {
    let cfg = Qwen3_5Config::from_file(&dir.join("config.json")).expect("config");
    let weights = Weights::open(dir, LoadFormat::Auto).expect("weights");
    Qwen3_5::load(&cfg, &weights).expect("load")
}

fn load(name: &str) -> (Qwen3_5, Reference) {
    (load_dir(&checkpoint_dir(name)), reference(name))
}

/// Log-softmax of each row of `[T, V]` logits.
fn rows(model: &Qwen3_5, mut logits: CpuTensor) -> Vec<Vec<f32>> {
    CpuBackend::default()
        .log_softmax(&mut logits)
        .expect("log_softmax");
    let v = model.config.base.vocab_size;
    logits.data.chunks(v).map(<[f32]>::to_vec).collect()
}

/// Log-probs of every position: the whole sequence in one call, or (`chunk`) in pieces with
/// the state carried.
fn log_probs(model: &Qwen3_5, tokens: &[u32], chunk: Option<usize>) -> Vec<Vec<f32>> {
    let Some(chunk) = chunk else {
        return rows(model, model.forward_sequence(tokens).expect("forward"));
    };
    let mut state = model.new_state().expect("state");
    let mut out = Vec::new();
    for piece in tokens.chunks(chunk) {
        out.extend(rows(
            model,
            model
                .forward_sequence_chunk(&mut state, piece)
                .expect("forward"),
        ));
    }
    assert_eq!(state.position, tokens.len());
    out
}

/// Every position's log-prob and top-5 within [`TOLERANCE`] of transformers; the largest
/// difference.
fn check_positions(name: &str, model: &Qwen3_5, reference: &Reference) -> f32 {
    let mut max_diff = 0f32;
    // Whole, then in odd chunks (some shorter than the conv window) with the state carried.
    for (s, seq, chunk) in reference
        .sequences
        .iter()
        .enumerate()
        .flat_map(|(s, seq)| [None, Some(7), Some(2)].map(|c| (s, seq, c)))
    {
        let lp = log_probs(model, &seq.tokens, chunk);
        assert_eq!(lp.len(), seq.tokens.len());
        for (p, want) in seq.next_token_logprobs.iter().enumerate() {
            let got = lp[p][seq.tokens[p + 1] as usize];
            max_diff = max_diff.max((got - want).abs());
            assert!(
                (got - want).abs() <= TOLERANCE,
                "{name} seq {s} pos {p} (chunk {chunk:?}): got {got}, transformers {want}"
            );
        }
        for (p, want) in seq.top5.iter().enumerate() {
            let top = top_k_of(&lp[p], 5);
            assert_eq!(
                top[0].0, want[0].0,
                "{name} seq {s} pos {p} (chunk {chunk:?}): top-1"
            );
            for (i, (&(_, got), &(_, want))) in top.iter().zip(want).enumerate() {
                max_diff = max_diff.max((got - want).abs());
                assert!(
                    (got - want).abs() <= TOLERANCE,
                    "{name} seq {s} pos {p} top {i}: got {got}, transformers {want}"
                );
            }
        }
    }
    max_diff
}

#[test]
fn every_position_matches_transformers() {
    for name in NAMES {
        let (model, reference) = load(name);
        let max_diff = check_positions(name, &model, &reference);
        eprintln!("{name}: max |log-prob - transformers| = {max_diff:.2e}");
    }
}

/// Prefill the prompt, then decode one token a call as serving does, the state carried.
#[test]
fn greedy_continuation_is_identical() {
    for name in NAMES {
        let (model, reference) = load(name);
        let g = &reference.greedy;
        let mut state = model.new_state().expect("state");
        let mut input = g.prompt.clone();
        let mut generated = Vec::new();
        for _ in 0..g.continuation.len() {
            let lp = rows(
                &model,
                model
                    .forward_sequence_chunk(&mut state, &input)
                    .expect("forward"),
            );
            let next = top_k_of(&lp[lp.len() - 1], 1)[0].0;
            generated.push(next);
            input = vec![next];
        }
        assert_eq!(generated, g.continuation, "{name}");
    }
}

/// A padding row (a CUDA graph's batch filled to its bucket, `StatePlan::padding`) moves no
/// state and changes no other row: a decode step of two sequences plus padding gives the two
/// sequences' logits and states of the step without it; a padding row that would save a
/// checkpoint is refused.
#[test]
fn a_padding_row_moves_no_state_and_changes_no_row() {
    let model = load_dir(&model_dir("qwen3_5-hybrid-moe"));
    let b = CpuBackend::default();
    let bs = 4;
    let prompts: [&[u32]; 2] = [&[5, 9, 13, 2, 7], &[11, 3]];
    let tables: [Vec<u32>; 2] = [vec![1, 2], vec![3]];
    let fresh = || {
        let mut kv = model.new_kv_storage(&b, 5, bs).expect("kv");
        // slots 0 and 1 for the sequences, 2 stays zero (a padding row must not touch it)
        kv.state = Some(model.new_state_storage(&b, 3).expect("state"));
        let chunks: Vec<SeqChunk<'_>> = prompts
            .iter()
            .zip(&tables)
            .map(|(p, t)| SeqChunk {
                tokens: p,
                start_pos: 0,
                block_table: t,
                logits_rows: vec![],
            })
            .collect();
        let mut host = BatchInputs::build(bs, &chunks);
        host.states = (0..2)
            .map(|s| StatePlan {
                slot: s,
                ..StatePlan::lone(0)
            })
            .collect();
        let batch = b.prepare_batch(&host).expect("batch");
        model.forward(&b, &host, &batch, &mut kv).expect("prefill");
        kv
    };
    let step = |kv: &mut KvStorage<CpuBackend>, padded: bool, pad_saves: bool| {
        let mut chunks: Vec<SeqChunk<'_>> = prompts
            .iter()
            .zip(&tables)
            .map(|(p, t)| SeqChunk {
                tokens: &[17],
                start_pos: p.len(),
                block_table: t,
                logits_rows: vec![0],
            })
            .collect();
        if padded {
            chunks.push(SeqChunk {
                tokens: &[0],
                start_pos: 0,
                block_table: &[0],
                logits_rows: vec![0],
            });
        }
        let mut host = BatchInputs::build(bs, &chunks);
        host.states = (0..2)
            .map(|s| StatePlan {
                slot: s,
                ..StatePlan::lone(1)
            })
            .collect();
        if padded {
            let mut pad = StatePlan::padding();
            if pad_saves {
                pad.saves.push(StateSave { after: 1, slot: 2 });
            }
            host.states.push(pad);
        }
        let batch = b.prepare_batch(&host)?;
        let logits = model.forward(&b, &host, &batch, kv)?;
        let state = kv.state.as_ref().expect("state");
        let states: Vec<f32> = state
            .conv
            .iter()
            .chain(&state.recurrent)
            .flat_map(|t| t.data.clone())
            .collect();
        Ok::<_, metrale_engine::backend::BackendError>((logits.data, states))
    };
    let (want_logits, want_states) = step(&mut fresh(), false, false).expect("plain step");
    let (got_logits, got_states) = step(&mut fresh(), true, false).expect("padded step");
    let v = model.config.base.vocab_size;
    assert_eq!(
        got_logits.len(),
        3 * v,
        "a padding row has a logits row too"
    );
    let worst = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max)
    };
    assert!(worst(&got_logits[..2 * v], &want_logits) < 1e-5);
    assert_eq!(got_states.len(), want_states.len());
    assert!(
        worst(&got_states, &want_states) < 1e-6,
        "the padding row moved a state"
    );
    assert!(want_states.iter().any(|&x| x != 0.0), "the states moved on");
    let refused = step(&mut fresh(), true, true).expect_err("a padding row saving a state");
    assert!(refused.to_string().contains("padding row"), "{refused}");
}

/// The engine reads the hybrids' configs (the Qwen3 keys; the MoE one has no dense
/// `intermediate_size`) and knows them by name; the serving tests are `server_hybrid.rs`.
#[test]
fn the_engine_accepts_the_hybrids() {
    for name in NAMES {
        let cfg = ModelDir::open(&checkpoint_dir(name))
            .expect("fixture")
            .config()
            .expect("served");
        assert!(qwen3_5::is_hybrid(&cfg.architecture), "{name}");
        assert_eq!(cfg.moe.is_some(), name.contains("moe"), "{name}");
        assert_eq!(cfg.fp8.is_some(), name.ends_with("fp8"), "{name}");
        assert_eq!(cfg.nvfp4.is_some(), name.ends_with("nvfp4"), "{name}");
    }
}

/// The Hub's layout of a fixture: `Qwen3_5*ForConditionalGeneration`, the text config under
/// `text_config` (the wrapper's `tie_word_embeddings` at the top), the text weights under
/// `model.language_model.`, plus vision and MTP tensors that the engine must ignore.
fn hub_layout(name: &str) -> PathBuf {
    let src = model_dir(name);
    let dir = std::env::temp_dir().join(format!("met-hub-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let text = std::fs::read_to_string(src.join("config.json")).expect("config");
    let mut text: Value = serde_json::from_str(&text).expect("json");
    let arch = text["architectures"][0]
        .as_str()
        .expect("arch")
        .replace("ForCausalLM", "ForConditionalGeneration");
    let tie = text["tie_word_embeddings"].clone();
    text.as_object_mut()
        .expect("object")
        .remove("architectures");
    let config = json!({"architectures": [arch], "text_config": text, "tie_word_embeddings": tie,
                        "vision_config": {"depth": 1, "hidden_size": 32}});
    std::fs::write(dir.join("config.json"), config.to_string()).expect("write");
    let bytes = std::fs::read(src.join("model.safetensors")).expect("weights");
    let st = SafeTensors::deserialize(&bytes).expect("safetensors");
    let mut tensors: Vec<(String, TensorView<'_>)> = st
        .tensors()
        .into_iter()
        .map(|(n, t)| (n.replacen("model.", "model.language_model.", 1), t))
        .collect();
    let extra = [0u8; 8];
    for n in ["model.visual.patch_embed.proj.weight", "mtp.fc.weight"] {
        let t = TensorView::new(Dtype::BF16, vec![2, 2], &extra).expect("view");
        tensors.push((n.to_string(), t));
    }
    safetensors::serialize_to_file(tensors, None, &dir.join("model.safetensors")).expect("save");
    dir
}

#[test]
fn the_hubs_conditional_generation_layout_reads_the_text_model() {
    for name in &NAMES[..2] {
        let dir = hub_layout(name);
        let cfg = ModelDir::open(&dir).expect("dir").config();
        let model = load_dir(&dir);
        std::fs::remove_dir_all(&dir).ok();
        assert!(
            cfg.expect("config")
                .architecture
                .ends_with("ForConditionalGeneration"),
            "{name}"
        );
        let max_diff = check_positions(name, &model, &reference(name));
        eprintln!("{name} (Hub layout): max |log-prob - transformers| = {max_diff:.2e}");
    }
}

/// `--load-format dummy` on an FP8 hybrid draws every projection in FP8, the Gated DeltaNet's
/// four input projections included (a few rows of `in_proj_b`/`in_proj_a`, partial 128-blocks),
/// fuses them and computes finite log-probs.
#[test]
fn a_dummy_fp8_hybrid_loads_and_scores() {
    let dir = model_dir("qwen3_5-hybrid-moe-fp8");
    let cfg = Qwen3_5Config::from_file(&dir.join("config.json")).expect("config");
    let weights = Weights::open(&dir, LoadFormat::Dummy).expect("weights");
    let model = Qwen3_5::load(&cfg, &weights).expect("load");
    let rows = log_probs(&model, &[1, 2, 3, 4, 5], None);
    assert_eq!(rows.len(), 5);
    assert!(rows.iter().flatten().all(|lp| lp.is_finite() && *lp <= 0.0));
}
