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

/// The demo tokenizer, its grammar compiler and end-of-sequence id.
fn demo_grammars() -> (Tokenizer, Grammars, u32) {
    let tok = demo();
    let eos = tok.token_to_id("<|im_end|>").expect("eos");
    let grammars = Grammars::new(tok.hf(), tok.vocab_size(), eos).expect("grammars");
    (tok, grammars, eos)
}

/// Logits for step `i`: a hash of (seed, i, token), so every run is the same.
fn noise(vocab: usize, seed: u64, i: usize) -> Vec<f32> {
    (0..vocab)
        .map(|t| crate::backend::sampling::uniform(seed ^ t as u64, i as u64) as f32 * 8.0)
        .collect()
}

/// The next token of sequence 1 after `out` under `params`, drawn from `logits`.
fn next_token(params: &SamplingParams, out: &[u32], logits: &[f32]) -> u32 {
    let row = SampleRow {
        logits_row: 0,
        params,
        all_token_ids: out,
        num_prompt_tokens: 0,
        seq: Some(1),
    };
    sample_row(logits, &row).token_id
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
        let t = next_token(&params, &out, &noise(vocab, seed, i));
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
    let (tok, grammars, eos) = demo_grammars();
    let vocab = tok.vocab_size();
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

/// A benchmark's `ignore_eos` request: the value repeats, end-of-sequence is never allowed, and
/// every token stays under the grammar.
#[test]
fn a_repeated_value_never_ends_and_stays_under_the_grammar() {
    let (tok, grammars, eos) = demo_grammars();
    let vocab = tok.vocab_size();
    let spec = Spec::JsonSchema {
        schema: json!({"type": "object", "properties": {"n": {"enum": [1, 2]}}, "required": ["n"]}),
        strict: true,
    };
    let params = SamplingParams {
        constraint: Some(
            grammars
                .compile_repeated(&spec, "response_format")
                .expect("compiles"),
        ),
        eos_token_ids: vec![eos],
        seed: 3,
        ..SamplingParams::default()
    };
    let mut out = Vec::new();
    for i in 0..80 {
        let mut l = noise(vocab, 3, i);
        l[eos as usize] = 100.0; // the model wants to end: the grammar never lets it
        out.push(next_token(&params, &out, &l));
    }
    assert!(!out.contains(&eos));
    let text = tok.decode(&out, true).expect("decode");
    let mut values = serde_json::Deserializer::from_str(&text).into_iter::<Value>();
    let mut complete = 0;
    for v in values.by_ref() {
        match v {
            Ok(v) => {
                assert!(v == json!({"n": 1}) || v == json!({"n": 2}), "{text:?}");
                complete += 1;
            }
            Err(e) => {
                assert!(e.is_eof(), "{text:?}: {e}");
                break;
            }
        }
    }
    assert!(complete >= 3, "{complete} values in {text:?}");
}

/// The schema of the issue 36 benchmark (`scripts/gpu/issue36-schema.json`) compiles, repeated.
#[test]
fn the_benchmark_schema_compiles() {
    let (_, grammars, _) = demo_grammars();
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/gpu/issue36-schema.json");
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("schema file")).expect("json");
    let spec = Spec::JsonSchema {
        schema,
        strict: false,
    };
    grammars
        .compile_repeated(&spec, "response_format")
        .expect("compiles");
}
