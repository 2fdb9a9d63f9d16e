//! Qwen3.5's dense hybrid text model (`Qwen3_5ForCausalLM`: Gated DeltaNet and gated full
//! attention) on the CPU reference against transformers 5.17 in float32, on the tiny random
//! checkpoint `tests/fixtures/make_hybrid_fixtures.py` writes: a whole sequence in one call,
//! in chunks with the sequence's state carried between calls, and decoding token by token, all
//! through the engine's `Model::forward` (paged KV cache, one recurrent-state slot).

use metrale_engine::backend::cpu::CpuTensor;
use metrale_engine::backend::{Backend, CpuBackend};
use metrale_engine::loader::{LoadFormat, ModelDir, Weights};
use metrale_engine::models::qwen3_5::{Qwen3_5, Qwen3_5Config};
use metrale_engine::score::top_k_of;
mod reference_support;

use reference_support::{Reference, model_dir, reference};

const NAME: &str = "qwen3_5-hybrid-dense";
const TOLERANCE: f32 = 1e-3;

fn load() -> (Qwen3_5, Reference) {
    let dir = model_dir(NAME);
    let cfg = Qwen3_5Config::from_file(&dir.join("config.json")).expect("config");
    let weights = Weights::open(&dir, LoadFormat::Auto).expect("weights");
    let model = Qwen3_5::load(&cfg, &weights).expect("load");
    (model, reference(NAME))
}

/// Log-softmax of each row of `[T, V]` logits.
fn rows(model: &Qwen3_5, mut logits: CpuTensor) -> Vec<Vec<f32>> {
    CpuBackend.log_softmax(&mut logits).expect("log_softmax");
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

#[test]
fn every_position_matches_transformers() {
    let (model, reference) = load();
    let mut max_diff = 0f32;
    // Whole, then in odd chunks (some shorter than the conv window) with the state carried.
    for (s, seq, chunk) in reference
        .sequences
        .iter()
        .enumerate()
        .flat_map(|(s, seq)| [None, Some(7), Some(2)].map(|c| (s, seq, c)))
    {
        let lp = log_probs(&model, &seq.tokens, chunk);
        assert_eq!(lp.len(), seq.tokens.len());
        for (p, want) in seq.next_token_logprobs.iter().enumerate() {
            let got = lp[p][seq.tokens[p + 1] as usize];
            max_diff = max_diff.max((got - want).abs());
            assert!(
                (got - want).abs() <= TOLERANCE,
                "seq {s} pos {p} (chunk {chunk:?}): got {got}, transformers {want}"
            );
        }
        for (p, want) in seq.top5.iter().enumerate() {
            let top = top_k_of(&lp[p], 5);
            assert_eq!(
                top[0].0, want[0].0,
                "seq {s} pos {p} (chunk {chunk:?}): top-1"
            );
            for (i, (&(_, got), &(_, want))) in top.iter().zip(want).enumerate() {
                max_diff = max_diff.max((got - want).abs());
                assert!(
                    (got - want).abs() <= TOLERANCE,
                    "seq {s} pos {p} top {i}: got {got}, transformers {want}"
                );
            }
        }
    }
    eprintln!("{NAME}: max |log-prob - transformers| = {max_diff:.2e}");
}

/// Prefill the prompt, then decode one token a call as serving does, the state carried.
#[test]
fn greedy_continuation_is_identical() {
    let (model, reference) = load();
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
    assert_eq!(generated, g.continuation);
}

/// The engine reads the dense hybrid's config (the Qwen3 keys) and knows it by name; the
/// serving tests are `server_hybrid.rs`.
#[test]
fn the_engine_accepts_the_dense_hybrid() {
    let dir = ModelDir::open(&model_dir(NAME)).expect("fixture");
    let cfg = dir.config().expect("served");
    assert_eq!(
        cfg.architecture,
        metrale_engine::models::qwen3_5::ARCHITECTURE
    );
}

/// The Hub's checkpoints (`*ForConditionalGeneration`, text config nested) and the MoE text
/// model are refused by name too, not with a parse error about a missing key.
#[test]
fn hub_layouts_and_moe_are_refused_by_name() {
    for arch in [
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen3_5MoeForCausalLM",
    ] {
        let dir = std::env::temp_dir().join(format!("met-hybrid-{arch}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let config = format!(r#"{{"architectures": ["{arch}"], "text_config": {{}}}}"#);
        std::fs::write(dir.join("config.json"), config).expect("write");
        let e = ModelDir::open(&dir).expect("dir").config().expect_err(arch);
        std::fs::remove_dir_all(&dir).ok();
        let e = e.to_string();
        assert!(
            e.starts_with("this Qwen3.5 hybrid model is not supported yet:")
                && e.contains(arch)
                && e.contains("not implemented yet"),
            "{e}"
        );
    }
}
