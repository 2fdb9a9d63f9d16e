//! Fixed text in a grammar (a call format's markers, `<think>`) as the model writes it: a
//! string that is one of the tokenizer's special tokens (DeepSeek's `<｜tool▁sep｜>`, gpt-oss's
//! `<|message|>`, Mistral's `[ARGS]`, Nemotron's `<TOOLCALL>` and `</think>` where its tokenizer
//! marks them special) is that token, named by id (`<[id]>`, llguidance's Lark); the rest is a
//! string literal.
//!
//! Why: the token trie gives a special token's bytes llguidance's marker byte first
//! (`vocab.rs`), so no string literal can ever match it. A literal `"<｜tool▁sep｜>"` would force
//! the model to spell the marker out in text tokens it never wrote in training, and a free-text
//! lexeme that waits for a special opening tag would wait forever.

use std::collections::HashMap;

/// The tokenizer's special tokens (added tokens marked special, as `vocab.rs` reads them),
/// by their text.
#[derive(Debug, Default, Clone)]
pub struct Specials {
    ids: HashMap<String, u32>,
    /// Their texts, longest first (the longest match wins, as the tokenizer's own split).
    texts: Vec<String>,
}

impl Specials {
    /// The special tokens of `tokenizer` with an id below `vocab_size` (the trie's tokens).
    pub fn new(tokenizer: &tokenizers::Tokenizer, vocab_size: usize) -> Self {
        let ids: HashMap<String, u32> = tokenizer
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(id, t)| t.special && (*id as usize) < vocab_size && !t.content.is_empty())
            .map(|(id, t)| (t.content, id))
            .collect();
        let mut texts: Vec<String> = ids.keys().cloned().collect();
        texts.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        Self { ids, texts }
    }

    /// The id of `text` if it is one special token.
    pub fn id(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }

    /// `text` as a Lark expression: its special tokens by id, the text between them as string
    /// literals (`"}\n" <[6015]>`); empty for empty text.
    pub fn lark(&self, text: &str) -> String {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        'outer: while let Some(c) = rest.chars().next() {
            for t in &self.texts {
                if rest.starts_with(t.as_str()) {
                    if !literal.is_empty() {
                        parts.push(super::tools::lark_str(&std::mem::take(&mut literal)));
                    }
                    parts.push(format!("<[{}]>", self.ids[t]));
                    rest = &rest[t.len()..];
                    continue 'outer;
                }
            }
            literal.push(c);
            rest = &rest[c.len_utf8()..];
        }
        if !literal.is_empty() {
            parts.push(super::tools::lark_str(&literal));
        }
        parts.join(" ")
    }
}

#[cfg(test)]
impl Specials {
    /// Specials from a list, for grammar text tests that need no tokenizer.
    pub fn from_pairs(pairs: &[(&str, u32)]) -> Self {
        let ids: HashMap<String, u32> = pairs.iter().map(|(t, i)| ((*t).into(), *i)).collect();
        let mut texts: Vec<String> = ids.keys().cloned().collect();
        texts.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        Self { ids, texts }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_tokens_become_ids_and_the_rest_literals() {
        let s = Specials::from_pairs(&[("<a>", 7), ("<ab>", 8), ("</a>", 9)]);
        assert_eq!(s.lark(""), "");
        assert_eq!(s.lark("x\n"), r#""x\n""#);
        assert_eq!(s.lark("<a>"), "<[7]>");
        // The longest special wins; text between and around stays literal.
        assert_eq!(s.lark("}\n<ab>f</a>"), r#""}\n" <[8]> "f" <[9]>"#);
        assert_eq!(s.lark("<a</a>"), r#""<a" <[9]>"#);
        assert_eq!(s.id("<ab>"), Some(8));
        assert_eq!(s.id("<b>"), None);
    }
}
