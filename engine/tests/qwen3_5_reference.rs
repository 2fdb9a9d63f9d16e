//! Qwen3.5's dense hybrid text model (`Qwen3_5ForCausalLM`: Gated DeltaNet and gated full
//! attention) on the CPU reference against transformers 5.17 in float32, on the tiny random
//! checkpoint `tests/fixtures/make_hybrid_fixtures.py` writes: a whole sequence in one call,
//! in chunks with the sequence's state carried between calls, and decoding token by token.

use metrale_engine::backend::cpu::CpuTensor;
use metrale_engine::backend::{Backend, CpuBackend};
use metrale_engine::loader::{LoadError, LoadFormat, ModelDir, Weights};
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
    let mut state = model.new_state();
    let mut out = Vec::new();
    for piece in tokens.chunks(chunk) {
        out.extend(rows(
            model,
            model.forward(&mut state, piece).expect("forward"),
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
    let mut state = model.new_state();
    let mut input = g.prompt.clone();
    let mut generated = Vec::new();
    for _ in 0..g.continuation.len() {
        let lp = rows(&model, model.forward(&mut state, &input).expect("forward"));
        let next = top_k_of(&lp[lp.len() - 1], 1)[0].0;
        generated.push(next);
        input = vec![next];
    }
    assert_eq!(generated, g.continuation);
}

/// The engine (`met serve`) refuses the checkpoint at load with a sentence that says why,
/// rather than failing later: the recurrent state has no home in the cache yet.
#[test]
fn the_engine_refuses_hybrid_checkpoints_by_name() {
    let dir = ModelDir::open(&model_dir(NAME)).expect("fixture");
    let e = dir.config().expect_err("not served yet");
    assert!(matches!(e, LoadError::HybridNotServed { .. }), "{e:?}");
    let e = e.to_string();
    assert!(
        e.starts_with("Qwen3.5 hybrid models are not yet served:") && e.contains("CPU"),
        "{e}"
    );
}

/// `met serve` as a user runs it: exit status non-zero, the sentence on stderr, no panic.
#[test]
fn met_serve_refuses_a_hybrid_checkpoint_by_name() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_met"))
        .args([
            "serve",
            model_dir(NAME).to_str().expect("utf8"),
            "--port",
            "0",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run met");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("Qwen3.5 hybrid models are not yet served: Qwen3_5ForCausalLM")
            && !stderr.contains("panicked"),
        "{stderr}"
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
            e.starts_with("Qwen3.5 hybrid models are not yet served:")
                && e.contains(arch)
                && e.contains("not implemented yet"),
            "{e}"
        );
    }
}
