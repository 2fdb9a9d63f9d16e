//! The tokenizer and the incremental detokenizer against what transformers' AutoTokenizer did
//! with the fixture tokenizer (tests/fixtures/make_tokenizer.py wrote reference.json).

use std::path::PathBuf;
use std::sync::Arc;

use metrale_engine::detokenizer::IncrementalDetokenizer;
use metrale_engine::tokenizer::Tokenizer;
use serde_json::Value;

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tokenizer")
}

fn load() -> (Arc<Tokenizer>, Value) {
    let tokenizer = Tokenizer::from_dir(&fixture_dir()).expect("fixture tokenizer loads");
    let text =
        std::fs::read_to_string(fixture_dir().join("reference.json")).expect("reference.json");
    let reference: Value = serde_json::from_str(&text).expect("reference.json is JSON");
    (Arc::new(tokenizer), reference)
}

fn ids(value: &Value) -> Vec<u32> {
    value
        .as_array()
        .expect("an id list")
        .iter()
        .map(|v| u32::try_from(v.as_u64().expect("an id")).expect("id fits u32"))
        .collect()
}

fn text(value: &Value) -> &str {
    value.as_str().expect("a string")
}

#[test]
fn vocabulary_and_special_tokens_match_transformers() {
    let (tokenizer, reference) = load();
    assert_eq!(
        tokenizer.vocab_size() as u64,
        reference["vocab_size"].as_u64().expect("vocab_size")
    );
    assert_eq!(
        tokenizer.eos_token_id().map(u64::from),
        reference["eos_token_id"].as_u64(),
        "eos_token_id"
    );
    assert_eq!(
        tokenizer.pad_token_id().map(u64::from),
        reference["pad_token_id"].as_u64(),
        "pad_token_id"
    );
    assert_eq!(tokenizer.bos_token_id(), None);
    assert!(reference["bos_token_id"].is_null());
    assert_eq!(
        tokenizer.special_token_ids(),
        ids(&reference["all_special_ids"]).as_slice()
    );

    let added = reference["added_tokens"].as_object().expect("added_tokens");
    assert_eq!(added.len(), 26);
    for (token, id) in added {
        let id = u32::try_from(id.as_u64().expect("id")).expect("u32");
        assert_eq!(tokenizer.token_to_id(token), Some(id), "{token}");
        assert_eq!(tokenizer.id_to_token(id).as_deref(), Some(token.as_str()));
    }
    // Qwen3 marks think and tool tokens as added but not special: they survive skip_special_tokens.
    for token in [
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
        "<tool_response>",
        "</tool_response>",
    ] {
        let id = tokenizer.token_to_id(token).expect("added token");
        assert!(!tokenizer.is_special(id), "{token} must not be special");
    }
    for token in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] {
        let id = tokenizer.token_to_id(token).expect("added token");
        assert!(tokenizer.is_special(id), "{token} must be special");
    }
}

#[test]
fn encode_matches_transformers() {
    let (tokenizer, reference) = load();
    let cases = reference["encode"].as_array().expect("encode cases");
    assert!(cases.len() >= 30);
    for case in cases {
        let input = text(&case["text"]);
        let got = tokenizer.encode(input, false).expect("encode");
        assert_eq!(got, ids(&case["ids"]), "encode {input:?}");
        let got = tokenizer
            .encode(input, true)
            .expect("encode with special tokens");
        assert_eq!(
            got,
            ids(&case["ids_add_special"]),
            "encode(add_special_tokens) {input:?}"
        );
        let tokens: Vec<Option<String>> = got.iter().map(|&id| tokenizer.id_to_token(id)).collect();
        let expected: Vec<Option<String>> = case["tokens"]
            .as_array()
            .expect("tokens")
            .iter()
            .map(|t| t.as_str().map(str::to_string))
            .collect();
        assert_eq!(tokens, expected, "tokens of {input:?}");
    }
}

#[test]
fn decode_of_encodings_matches_transformers() {
    let (tokenizer, reference) = load();
    for case in reference["encode"].as_array().expect("encode cases") {
        let ids = ids(&case["ids"]);
        assert_eq!(
            tokenizer.decode(&ids, false).expect("decode"),
            text(&case["decode"])
        );
        assert_eq!(
            tokenizer.decode(&ids, true).expect("decode"),
            text(&case["decode_skip_special"]),
            "decode(skip_special_tokens) of {:?}",
            text(&case["text"])
        );
    }
}

#[test]
fn decode_of_arbitrary_ids_matches_transformers() {
    let (tokenizer, reference) = load();
    let cases = reference["decode"].as_array().expect("decode cases");
    let mut invalid_utf8 = 0;
    for case in cases {
        let ids = ids(&case["ids"]);
        let expected = text(&case["decode"]);
        invalid_utf8 += usize::from(expected.contains('\u{FFFD}'));
        assert_eq!(
            tokenizer.decode(&ids, false).expect("decode"),
            expected,
            "ids {ids:?}"
        );
        assert_eq!(
            tokenizer.decode(&ids, true).expect("decode"),
            text(&case["decode_skip_special"]),
            "ids {ids:?} skipping special tokens"
        );
    }
    // The reference must actually exercise broken UTF-8, or the streaming test below proves little.
    assert!(
        invalid_utf8 > 20,
        "only {invalid_utf8} sequences with invalid UTF-8"
    );
}

fn stream(
    tokenizer: &Arc<Tokenizer>,
    ids: &[u32],
    skip_special_tokens: bool,
) -> (String, Vec<String>) {
    let mut detok = IncrementalDetokenizer::new(Arc::clone(tokenizer), skip_special_tokens);
    let mut deltas = Vec::new();
    for &id in ids {
        deltas.push(detok.push(id).expect("push"));
    }
    deltas.push(detok.finish());
    (deltas.concat(), deltas)
}

#[test]
fn streamed_text_equals_transformers_decode() {
    let (tokenizer, reference) = load();
    for case in reference["decode"].as_array().expect("decode cases") {
        let ids = ids(&case["ids"]);
        for (skip, key) in [(false, "decode"), (true, "decode_skip_special")] {
            let (joined, deltas) = stream(&tokenizer, &ids, skip);
            assert_eq!(
                joined,
                text(&case[key]),
                "ids {ids:?} skip={skip} deltas {deltas:?}"
            );
        }
    }
}

#[test]
fn stream_never_splits_a_character() {
    let (tokenizer, _) = load();
    // "🎉" is four bytes; find ids that carry it a byte or two at a time.
    let ids = tokenizer.encode("ab🎉東京🙂", false).expect("encode");
    assert!(
        ids.len() > 4,
        "the fixture vocabulary should split these characters: {ids:?}"
    );
    let (joined, deltas) = stream(&tokenizer, &ids, false);
    assert_eq!(joined, "ab🎉東京🙂");
    for delta in &deltas {
        assert!(
            !delta.contains('\u{FFFD}'),
            "delta {delta:?} has a broken character"
        );
    }
    // Byte tokens alone: E6 9D B1 is 東; the first two tokens must give nothing.
    let byte_ids: Vec<u32> = "東"
        .bytes()
        .map(|b| {
            tokenizer
                .token_to_id(&byte_level_char(b).to_string())
                .expect("a token for every byte")
        })
        .collect();
    let mut detok = IncrementalDetokenizer::new(Arc::clone(&tokenizer), false);
    assert_eq!(detok.push(byte_ids[0]).expect("push"), "");
    assert_eq!(detok.push(byte_ids[1]).expect("push"), "");
    assert_eq!(detok.held_back(), "\u{FFFD}");
    assert_eq!(detok.push(byte_ids[2]).expect("push"), "東");
    assert_eq!(detok.finish(), "");

    // An unfinished character at the end comes out as U+FFFD, like a one-shot decode.
    let mut detok = IncrementalDetokenizer::new(Arc::clone(&tokenizer), false);
    assert_eq!(detok.push(byte_ids[0]).expect("push"), "");
    assert_eq!(
        detok.finish(),
        tokenizer.decode(&byte_ids[..1], false).expect("decode")
    );
}

/// GPT-2's byte-level alphabet: printable bytes stand for themselves, the rest are shifted
/// past U+00FF in byte order.
fn byte_level_char(byte: u8) -> char {
    let printable = |b: u32| {
        (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b)
    };
    let mut shifted = 0u32;
    for b in 0u32..256 {
        let c = if printable(b) {
            b
        } else {
            shifted += 1;
            255 + shifted
        };
        if b == u32::from(byte) {
            return char::from_u32(c).unwrap_or('\0');
        }
    }
    '\0'
}

/// Property: over many random sequences, the deltas joined equal a one-shot decode.
#[test]
fn streamed_text_equals_decode_on_random_ids() {
    let (tokenizer, _) = load();
    let vocab = u32::try_from(tokenizer.vocab_size()).expect("u32");
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        // xorshift64*: deterministic, no dependency.
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    for _ in 0..2000 {
        let len = (next() % 48) as usize + 1;
        let ids: Vec<u32> = (0..len)
            .map(|_| match next() % 10 {
                0..=4 => (next() % 256) as u32, // byte tokens: broken UTF-8 galore
                5 => vocab - 26 + (next() % 26) as u32, // added tokens
                6 => vocab + (next() % 8) as u32, // past the vocabulary: dropped
                _ => (next() % u64::from(vocab)) as u32,
            })
            .collect();
        for skip in [false, true] {
            let (joined, deltas) = stream(&tokenizer, &ids, skip);
            let expected = tokenizer.decode(&ids, skip).expect("decode");
            assert_eq!(
                joined, expected,
                "ids {ids:?} skip={skip} deltas {deltas:?}"
            );
        }
    }
}

#[test]
fn load_errors_name_the_file_and_the_field() {
    use metrale_engine::tokenizer::TokenizerError;

    let missing = fixture_dir().join("no-such-dir");
    match Tokenizer::from_dir(&missing) {
        Err(e @ TokenizerError::Read { .. }) => {
            assert!(e.to_string().contains("tokenizer.json"), "{e}")
        }
        other => panic!("expected a read error, got {other:?}"),
    }

    let dir = std::env::temp_dir().join(format!("metrale-tokenizer-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::copy(
        fixture_dir().join("tokenizer.json"),
        dir.join("tokenizer.json"),
    )
    .expect("copy");

    std::fs::write(dir.join("tokenizer_config.json"), "{ not json").expect("write");
    let bad_json = Tokenizer::from_dir(&dir);
    std::fs::write(
        dir.join("tokenizer_config.json"),
        r#"{"eos_token": "<|nope|>"}"#,
    )
    .expect("write");
    let unknown = Tokenizer::from_dir(&dir);
    std::fs::write(dir.join("tokenizer_config.json"), r#"{"eos_token": 7}"#).expect("write");
    let wrong_type = Tokenizer::from_dir(&dir);
    std::fs::write(
        dir.join("tokenizer_config.json"),
        r#"{"eos_token": {"__type": "AddedToken", "content": "<|im_end|>"}}"#,
    )
    .expect("write");
    let object_form = Tokenizer::from_dir(&dir);
    std::fs::remove_file(dir.join("tokenizer_config.json")).expect("remove");
    let no_config = Tokenizer::from_dir(&dir);
    std::fs::remove_dir_all(&dir).ok();

    assert!(
        matches!(bad_json, Err(TokenizerError::ParseConfig { .. })),
        "{bad_json:?}"
    );
    match unknown {
        Err(e @ TokenizerError::UnknownSpecialToken { .. }) => {
            assert!(
                e.to_string().contains("eos_token") && e.to_string().contains("<|nope|>"),
                "{e}"
            )
        }
        other => panic!("expected an unknown-token error, got {other:?}"),
    }
    assert!(
        matches!(wrong_type, Err(TokenizerError::ConfigField { ref field, .. }) if field == "eos_token")
    );
    let object_form = object_form.expect("token objects are accepted");
    assert_eq!(
        object_form.eos_token_id(),
        object_form.token_to_id("<|im_end|>")
    );
    // Without a config the tokenizer still works; only the named tokens are unknown.
    let no_config = no_config.expect("tokenizer.json alone loads");
    assert_eq!(no_config.eos_token_id(), None);
    assert!(no_config.is_special(no_config.token_to_id("<|im_end|>").expect("id")));
}
