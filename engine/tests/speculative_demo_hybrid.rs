//! Speculative decoding on a real model: `models/demo-hybrid`, the tiny Qwen3.5-family hybrid
//! we train with its MTP block (`scripts/demo_model/train_hybrid.py`), on chat prompts
//! rendered as its chat template renders them, through the engine's own scheduler and runner
//! on the CPU:
//!
//! - greedy output with speculation (3 drafts a step, several sequences a step) is token for
//!   token the output without it, stopping at `<|im_end|>` as a chat reply does;
//! - the trained head's drafts are accepted: the first draft of a step at least
//!   [`MIN_FIRST_ACCEPTANCE`] of the time (a random head, as the fixtures carry, is accepted
//!   about never), and a step emits more than one token on average.
//!
//! The numbers it prints are the per-position acceptance docs/speculative.md reports.

use std::collections::HashMap;
use std::path::PathBuf;

use metrale_engine::sampling_params::SamplingParams;
use metrale_engine::scheduler::{SpecDecodeStats, SpeculativeConfig};
use tokenizers::Tokenizer;

mod spec_support;
use spec_support::{Engine, SEQS};

const BLOCKS: usize = 256;
const DRAFTS: usize = 3;
const MAX_TOKENS: usize = 64;
/// The first draft's acceptance must reach this on [`PROMPTS`] (measured: see the test's
/// output and docs/speculative.md).
const MIN_FIRST_ACCEPTANCE: f64 = 0.5;

/// What users of the demo ask: facts, arithmetic, stories, who it is.
const PROMPTS: [&str; 8] = [
    "What is Metrale?",
    "What is the capital of France?",
    "Tell me a short story about a cat.",
    "What sound does a cow make?",
    "Count to 10.",
    "What is 7 + 5?",
    "Who are you?",
    "Tell me a story about a fox at the beach.",
];

fn model_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/demo-hybrid")
}

fn engine(speculative: Option<SpeculativeConfig>) -> Engine {
    spec_support::engine(&model_dir(), speculative, (BLOCKS, 64, 1024))
}

/// [`PROMPTS`] as Qwen3's chat template renders a user turn with thinking off, tokenized by the
/// model's tokenizer; greedy, stopping at `<|im_end|>` or `<|endoftext|>`.
fn requests() -> Vec<(Vec<u32>, SamplingParams)> {
    let tok = Tokenizer::from_file(model_dir().join("tokenizer.json")).expect("tokenizer");
    let id = |t: &str| tok.token_to_id(t).expect("special token");
    let eos = vec![id("<|im_end|>"), id("<|endoftext|>")];
    PROMPTS
        .iter()
        .map(|p| {
            let text = format!(
                "<|im_start|>user\n{p}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
            );
            let ids = tok.encode(text, false).expect("encode").get_ids().to_vec();
            let params = SamplingParams {
                temperature: 0.0,
                max_tokens: MAX_TOKENS,
                eos_token_ids: eos.clone(),
                ..SamplingParams::default()
            };
            (ids, params)
        })
        .collect()
}

/// Runs `reqs` to the end, added two at a time so they overlap; each request's output tokens,
/// and the speculation counters.
fn run(
    e: &mut Engine,
    reqs: &[(Vec<u32>, SamplingParams)],
) -> (HashMap<u64, Vec<u32>>, SpecDecodeStats) {
    spec_support::run(e, reqs, (4, 5000), &mut |_, _| {})
}

#[test]
fn the_trained_head_is_accepted_and_changes_no_token() {
    let reqs = requests();
    let (want, _) = run(&mut engine(None), &reqs);
    assert_eq!(want.len(), reqs.len());
    let generated: usize = want.values().map(Vec::len).sum();
    assert!(
        generated > 150,
        "only {generated} tokens: the replies are too short to measure"
    );

    let (got, spec) = run(
        &mut engine(Some(SpeculativeConfig::flat(DRAFTS, SEQS))),
        &reqs,
    );
    for id in 1..=reqs.len() as u64 {
        assert_eq!(got[&id], want[&id], "prompt {:?}", PROMPTS[id as usize - 1]);
    }

    let rate = |p: usize| spec.accepted_per_pos[p] as f64 / spec.proposed_per_pos[p].max(1) as f64;
    for p in 0..DRAFTS {
        eprintln!(
            "demo-hybrid: draft position {p}: {} of {} accepted ({:.3})",
            spec.accepted_per_pos[p],
            spec.proposed_per_pos[p],
            rate(p)
        );
    }
    eprintln!(
        "demo-hybrid: {generated} tokens, {} verify steps, {:.3} drafts accepted a step",
        spec.num_drafts,
        spec.mean_accepted()
    );
    assert!(spec.proposed_per_pos[0] > 40, "{spec:?}");
    assert!(
        rate(0) >= MIN_FIRST_ACCEPTANCE,
        "the first draft accepted {:.3} of the time, under {MIN_FIRST_ACCEPTANCE}: {spec:?}",
        rate(0)
    );
    assert!(spec.mean_accepted() > 0.5, "{spec:?}");
}
