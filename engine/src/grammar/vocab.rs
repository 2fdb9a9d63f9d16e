//! The bytes each token id stands for, read from our `tokenizers` pipeline, as llguidance's
//! token trie wants them.
//!
//! This is what `toktrie_hf_tokenizers` does, redone here because that crate pins tokenizers
//! 0.21 and we are on 0.23 (two copies of the tokenizer in one binary). Two vocabularies are
//! understood: byte-level BPE (GPT-2's byte-to-character map: Qwen, Llama 3) and byte fallback
//! with a metaspace (`<0x41>` tokens, `▁` for a space: Llama 2, Mistral). Special added tokens
//! get llguidance's marker byte in front, so no grammar can write them as text.

use std::collections::HashMap;

use serde_json::Value;
use toktrie::TokTrie;

use super::GrammarError;

/// How the tokenizer's decoder turns token strings into bytes.
enum Decoding {
    /// GPT-2's byte-to-unicode map.
    ByteLevel(HashMap<char, u8>),
    /// `<0xHH>` byte tokens; `space` stands for ' ' in the others.
    ByteFallback { space: char },
}

/// The decoding of `tokenizer`'s decoder (read through its JSON form, which every decoder has).
fn decoding(tokenizer: &tokenizers::Tokenizer) -> Result<Decoding, GrammarError> {
    let decoder = serde_json::to_value(tokenizer.get_decoder()).unwrap_or(Value::Null);
    let kinds: Vec<&Value> = match decoder["type"].as_str() {
        Some("Sequence") => decoder["decoders"]
            .as_array()
            .map(|d| d.iter().collect())
            .unwrap_or_default(),
        _ => vec![&decoder],
    };
    let kind = |k: &str| kinds.iter().any(|d| d["type"].as_str() == Some(k));
    if kind("ByteLevel") {
        return Ok(Decoding::ByteLevel(byte_level_map()));
    }
    if kind("ByteFallback") {
        // A `Replace` of one character by " " names the metaspace character.
        let space = kinds
            .iter()
            .filter(|d| d["type"].as_str() == Some("Replace") && d["content"] == " ")
            .filter_map(|d| d["pattern"]["String"].as_str())
            .find_map(|p| {
                let mut c = p.chars();
                c.next().filter(|_| c.next().is_none())
            })
            .unwrap_or(' ');
        return Ok(Decoding::ByteFallback { space });
    }
    Err(GrammarError::Vocabulary(format!(
        "the tokenizer's decoder ({}) is neither byte-level nor byte-fallback, so token bytes \
         are unknown; constrained decoding needs one of the two",
        decoder["type"].as_str().unwrap_or("none")
    )))
}

/// GPT-2's map from the printable character standing for a byte back to the byte.
fn byte_level_map() -> HashMap<char, u8> {
    let mut map = HashMap::new();
    let mut next = 0x100u32;
    for b in 0..=255u8 {
        let c = b as char;
        let printable = matches!(c, '!'..='~' | '\u{A1}'..='\u{AC}' | '\u{AE}'..='\u{FF}');
        let shown = if printable {
            c
        } else {
            next += 1;
            char::from_u32(next - 1).unwrap_or(c)
        };
        map.insert(shown, b);
    }
    map
}

/// The bytes of every id below `vocab_size` (the model's logits width; ids the tokenizer does
/// not have stay empty, which the trie never allows).
pub fn token_bytes(
    tokenizer: &tokenizers::Tokenizer,
    vocab_size: usize,
) -> Result<Vec<Vec<u8>>, GrammarError> {
    let decoding = decoding(tokenizer)?;
    let mut bytes = vec![Vec::new(); vocab_size];
    let added = tokenizer.get_added_tokens_decoder();
    for (name, id) in tokenizer.get_vocab(true) {
        let Some(slot) = bytes.get_mut(id as usize) else {
            continue;
        };
        *slot = match added.get(&id) {
            Some(t) if t.special => {
                let mut b = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                b.extend_from_slice(name.as_bytes());
                b
            }
            Some(_) => name.into_bytes(),
            None => match &decoding {
                // A token with a character outside the map cannot be written exactly: it stays
                // empty (never allowed) rather than guessed.
                Decoding::ByteLevel(map) => name
                    .chars()
                    .map(|c| map.get(&c).copied())
                    .collect::<Option<Vec<u8>>>()
                    .unwrap_or_default(),
                Decoding::ByteFallback { space } => byte_fallback(&name, *space),
            },
        };
    }
    Ok(bytes)
}

/// A byte-fallback token's bytes: `<0xHH>` is the byte, anything else its text with the
/// metaspace made a space.
fn byte_fallback(name: &str, space: char) -> Vec<u8> {
    let hex = name
        .strip_prefix("<0x")
        .and_then(|h| h.strip_suffix('>'))
        .filter(|h| h.len() == 2)
        .and_then(|h| u8::from_str_radix(h, 16).ok());
    match hex {
        Some(b) => vec![b],
        None => name.replace(space, " ").into_bytes(),
    }
}
