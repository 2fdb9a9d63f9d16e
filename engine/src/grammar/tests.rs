//! The grammar path on the shipped demo model's tokenizer, through the host sampler: random
//! logits, so the mask alone makes the text valid.

use serde_json::{Value, json};

use super::{Grammars, Spec, Think};
use crate::backend::sampling::{SampleRow, sample_row};
use crate::sampling_params::SamplingParams;
use crate::tokenizer::Tokenizer;

fn demo() -> Tokenizer {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/demo");
    Tokenizer::from_dir(&dir).expect("demo tokenizer")
}

/// Logits for step `i`: a hash of (seed, i, token), so every run is the same.
fn noise(vocab: usize, seed: u64, i: usize) -> Vec<f32> {
    (0..vocab)
        .map(|t| crate::backend::sampling::uniform(seed ^ t as u64, i as u64) as f32 * 8.0)
        .collect()
}

/// Sample under `spec` from noise until end-of-sequence or `max` tokens; the text and whether
/// it ended.
fn generate(tok: &Tokenizer, spec: &Spec, seed: u64, max: usize) -> (String, bool) {
    let vocab = tok.vocab_size();
    let eos = tok.token_to_id("<|im_end|>").expect("eos");
    let grammars = Grammars::new(tok.hf(), vocab, eos).expect("grammars");
    let params = SamplingParams {
        constraint: Some(
            grammars
                .compile(spec, "schema", Think::Off)
                .expect("compiles"),
        ),
        eos_token_ids: vec![eos],
        seed,
        ..SamplingParams::default()
    };
    let mut out = Vec::new();
    for i in 0..max {
        let row = SampleRow {
            logits_row: 0,
            params: &params,
            all_token_ids: &out,
            num_prompt_tokens: 0,
            seq: Some(1),
        };
        let t = sample_row(&noise(vocab, seed, i), &row).token_id;
        if t == eos {
            return (tok.decode(&out, true).expect("decode"), true);
        }
        out.push(t);
    }
    (tok.decode(&out, true).expect("decode"), false)
}

#[test]
fn noise_under_a_schema_is_valid_json_of_that_schema() {
    let tok = demo();
    let schema = json!({
        "type": "object",
        "properties": {
            "colour": {"enum": ["red", "green"]},
            "n": {"type": "integer", "minimum": 0, "maximum": 9},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2}
        },
        "required": ["colour", "n", "tags"]
    });
    let spec = Spec::JsonSchema {
        schema,
        strict: true,
    };
    for seed in 0..4 {
        let (text, ended) = generate(&tok, &spec, seed, 120);
        assert!(ended, "seed {seed}: no end within 120 tokens: {text:?}");
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        let obj = v.as_object().expect("an object");
        assert_eq!(obj.len(), 3, "strict: only the listed properties: {text}");
        assert!(["red", "green"].contains(&obj["colour"].as_str().expect("colour")));
        assert!(obj["n"].as_u64().is_some_and(|n| n <= 9), "{text}");
        assert!(
            obj["tags"].as_array().is_some_and(|a| a.len() <= 2),
            "{text}"
        );
    }
}

#[test]
fn a_value_cut_by_max_tokens_never_ends() {
    let tok = demo();
    let spec = Spec::JsonSchema {
        schema: json!({"type": "object", "properties": {"a": {"type": "string", "minLength": 40}},
            "required": ["a"]}),
        strict: true,
    };
    let (text, ended) = generate(&tok, &spec, 7, 12);
    assert!(!ended);
    assert!(text.starts_with("{\"a\": \"") && text.len() > 8, "{text}");
}

#[test]
fn a_rolled_back_sequence_gets_the_fresh_mask() {
    let tok = demo();
    let vocab = tok.vocab_size();
    let eos = tok.token_to_id("<|im_end|>").expect("eos");
    let grammars = Grammars::new(tok.hf(), vocab, eos).expect("grammars");
    let c = grammars
        .compile(&Spec::JsonObject, "response_format", Think::Off)
        .expect("compiles");
    let open = tok.encode("{\"k\": [1, ", false).expect("encode");
    let masked = |seq: Option<u64>, out: &[u32]| {
        let mut l = vec![0.0f32; vocab];
        c.mask(seq, out, &mut l, &[eos]);
        l.iter().map(|v| v.is_finite()).collect::<Vec<bool>>()
    };
    let deep = masked(Some(3), &open);
    let first = masked(None, &open[..1]);
    // The same sequence, shorter (a preemption): its matcher rolls back.
    assert_eq!(masked(Some(3), &open[..1]), first);
    assert_eq!(masked(Some(3), &open), deep);
    assert_ne!(deep, first);
}
