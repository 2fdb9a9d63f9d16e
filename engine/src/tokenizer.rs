//! Text to token ids and back, as Hugging Face transformers does it for a checkpoint directory.
//!
//! `tokenizer.json` carries the whole pipeline (normalizer, pre-tokenizer, BPE model, decoder,
//! added tokens) and the `tokenizers` crate runs it. `tokenizer_config.json` adds what transformers
//! keeps on its side: the named special tokens (`eos_token` and friends), which decide the eos id
//! and the special-token list, and the chat template (read by `chat_template.rs`).
//!
//! Two transformers behaviours worth knowing, both pinned by tests against recorded outputs:
//! decoding drops ids the vocabulary does not have (a model's embedding table is usually padded
//! past the tokenizer), and `clean_up_tokenization_spaces` is ignored for BPE models (transformers
//! 5 skips it there, and every Qwen checkpoint sets it false anyway).

use std::path::{Path, PathBuf};

use serde_json::Value;

/// File names inside a checkpoint directory.
pub const TOKENIZER_FILE: &str = "tokenizer.json";
pub const TOKENIZER_CONFIG_FILE: &str = "tokenizer_config.json";

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("failed to read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("failed to parse {path} as JSON: {source}")]
    ParseConfig {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{path}: field `{field}` {problem}")]
    ConfigField {
        path: PathBuf,
        field: String,
        problem: String,
    },
    #[error("failed to load tokenizer from {path}: {source}")]
    Load {
        path: PathBuf,
        source: tokenizers::Error,
    },
    #[error("{path}: special token `{field}` = {token:?} is not in the tokenizer's vocabulary")]
    UnknownSpecialToken {
        path: PathBuf,
        field: String,
        token: String,
    },
    #[error("failed to encode a text of {bytes} bytes: {source}")]
    Encode {
        bytes: usize,
        source: tokenizers::Error,
    },
    #[error("failed to decode {count} token ids: {source}")]
    Decode {
        count: usize,
        source: tokenizers::Error,
    },
}

/// The named special tokens of `tokenizer_config.json`, in transformers' order. Each may be
/// absent; chat templates see the present ones as variables (`eos_token`, `bos_token`, ...).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    pub unk_token: Option<String>,
    pub sep_token: Option<String>,
    pub pad_token: Option<String>,
    pub cls_token: Option<String>,
    pub mask_token: Option<String>,
    /// `additional_special_tokens` (transformers 5 calls them `extra_special_tokens`).
    pub additional: Vec<String>,
}

impl SpecialTokens {
    /// Reads the named tokens out of a parsed `tokenizer_config.json`. A token is written either
    /// as a string or as a serialized `AddedToken` object with a `content` field.
    pub fn from_config(config: &Value, path: &Path) -> Result<SpecialTokens, TokenizerError> {
        let named = |field: &str| token_content(config.get(field), field, path);
        let mut additional = Vec::new();
        for key in ["additional_special_tokens", "extra_special_tokens"] {
            match config.get(key) {
                None | Some(Value::Null) => {}
                Some(Value::Array(items)) => {
                    for item in items {
                        if let Some(token) = token_content(Some(item), key, path)?
                            && !additional.contains(&token)
                        {
                            additional.push(token);
                        }
                    }
                }
                // transformers 5 may write a mapping name -> token here.
                Some(Value::Object(map)) => {
                    for item in map.values() {
                        if let Some(token) = token_content(Some(item), key, path)?
                            && !additional.contains(&token)
                        {
                            additional.push(token);
                        }
                    }
                }
                Some(_) => return Err(field_error(path, key, "is neither a list nor a mapping")),
            }
        }
        Ok(SpecialTokens {
            bos_token: named("bos_token")?,
            eos_token: named("eos_token")?,
            unk_token: named("unk_token")?,
            sep_token: named("sep_token")?,
            pad_token: named("pad_token")?,
            cls_token: named("cls_token")?,
            mask_token: named("mask_token")?,
            additional,
        })
    }

    /// The present named tokens as `(variable name, token)`, the way transformers'
    /// `special_tokens_map` hands them to a chat template.
    pub fn named(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [
            ("bos_token", &self.bos_token),
            ("eos_token", &self.eos_token),
            ("unk_token", &self.unk_token),
            ("sep_token", &self.sep_token),
            ("pad_token", &self.pad_token),
            ("cls_token", &self.cls_token),
            ("mask_token", &self.mask_token),
        ]
        .into_iter()
        .filter_map(|(name, token)| token.as_deref().map(|t| (name, t)))
    }
}

fn token_content(
    value: Option<&Value>,
    field: &str,
    path: &Path,
) -> Result<Option<String>, TokenizerError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Object(map)) => match map.get("content") {
            Some(Value::String(s)) => Ok(Some(s.clone())),
            _ => Err(field_error(
                path,
                field,
                "is an object without a string `content`",
            )),
        },
        Some(_) => Err(field_error(
            path,
            field,
            "is neither a string nor a token object",
        )),
    }
}

fn field_error(path: &Path, field: &str, problem: &str) -> TokenizerError {
    TokenizerError::ConfigField {
        path: path.to_path_buf(),
        field: field.to_string(),
        problem: problem.to_string(),
    }
}

/// Reads and parses `tokenizer_config.json` of `dir`; `Ok(None)` when the file does not exist.
pub fn read_tokenizer_config(dir: &Path) -> Result<Option<(PathBuf, Value)>, TokenizerError> {
    let path = dir.join(TOKENIZER_CONFIG_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(TokenizerError::Read { path, source }),
    };
    let value: Value =
        serde_json::from_str(&text).map_err(|source| TokenizerError::ParseConfig {
            path: path.clone(),
            source,
        })?;
    if !value.is_object() {
        return Err(field_error(&path, "(root)", "is not a JSON object"));
    }
    Ok(Some((path, value)))
}

/// `text`'s ids through one of a [`Tokenizer`]'s pipelines.
fn encode_with(
    pipeline: &tokenizers::Tokenizer,
    text: &str,
    add_special_tokens: bool,
) -> Result<Vec<u32>, TokenizerError> {
    let encoding = pipeline
        .encode_fast(text, add_special_tokens)
        .map_err(|source| TokenizerError::Encode {
            bytes: text.len(),
            source,
        })?;
    Ok(encoding.get_ids().to_vec())
}

/// A checkpoint's tokenizer. Cheap to share behind an `Arc`; every method takes `&self`.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// The same pipeline with special-token parsing off: `<|im_end|>` in the text is the
    /// characters `<`, `|`, ..., not the control token (transformers' `split_special_tokens`).
    as_text: tokenizers::Tokenizer,
    /// The special added tokens' strings and ids, longest first.
    special_strings: Vec<(String, u32)>,
    /// Bytes of the longest vocabulary entry as written (a bound on the bytes any one token
    /// stands for: a byte-level or metaspace form is never shorter than its text).
    max_token_bytes: usize,
    special_tokens: SpecialTokens,
    /// Sorted, no repeats.
    special_ids: Vec<u32>,
    eos_token_id: Option<u32>,
    bos_token_id: Option<u32>,
    pad_token_id: Option<u32>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("special_tokens", &self.special_tokens)
            .field("eos_token_id", &self.eos_token_id)
            .finish_non_exhaustive()
    }
}

impl Tokenizer {
    /// Loads `tokenizer.json` and, when present, `tokenizer_config.json` from a checkpoint dir.
    pub fn from_dir(dir: &Path) -> Result<Tokenizer, TokenizerError> {
        let path = dir.join(TOKENIZER_FILE);
        let bytes = std::fs::read(&path).map_err(|source| TokenizerError::Read {
            path: path.clone(),
            source,
        })?;
        let inner =
            tokenizers::Tokenizer::from_bytes(&bytes).map_err(|source| TokenizerError::Load {
                path: path.clone(),
                source,
            })?;
        let (config_path, special_tokens) = match read_tokenizer_config(dir)? {
            Some((config_path, config)) => {
                let special = SpecialTokens::from_config(&config, &config_path)?;
                (config_path, special)
            }
            None => (dir.join(TOKENIZER_CONFIG_FILE), SpecialTokens::default()),
        };
        Self::assemble(inner, special_tokens, &config_path)
    }

    fn assemble(
        inner: tokenizers::Tokenizer,
        special_tokens: SpecialTokens,
        config_path: &Path,
    ) -> Result<Tokenizer, TokenizerError> {
        let lookup = |field: &str, token: &Option<String>| -> Result<Option<u32>, TokenizerError> {
            match token {
                None => Ok(None),
                Some(t) => inner.token_to_id(t).map(Some).ok_or_else(|| {
                    TokenizerError::UnknownSpecialToken {
                        path: config_path.to_path_buf(),
                        field: field.to_string(),
                        token: t.clone(),
                    }
                }),
            }
        };
        let eos_token_id = lookup("eos_token", &special_tokens.eos_token)?;
        let bos_token_id = lookup("bos_token", &special_tokens.bos_token)?;
        let pad_token_id = lookup("pad_token", &special_tokens.pad_token)?;

        // Special = marked special in tokenizer.json's added tokens, or named in the config.
        let mut special_ids: Vec<u32> = inner
            .get_added_tokens_decoder()
            .iter()
            .filter(|(_, token)| token.special)
            .map(|(id, _)| *id)
            .collect();
        let named = special_tokens.named().map(|(_, t)| t);
        for token in named.chain(special_tokens.additional.iter().map(String::as_str)) {
            if let Some(id) = inner.token_to_id(token) {
                special_ids.push(id);
            }
        }
        special_ids.sort_unstable();
        special_ids.dedup();
        let mut special_strings: Vec<(String, u32)> = special_ids
            .iter()
            .filter_map(|&id| inner.id_to_token(id).map(|t| (t, id)))
            .filter(|(t, _)| !t.is_empty())
            .collect();
        special_strings.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        let max_token_bytes = inner
            .get_vocab(true)
            .keys()
            .map(String::len)
            .max()
            .unwrap_or(1)
            .max(1);
        let mut as_text = inner.clone();
        as_text.set_encode_special_tokens(true);

        Ok(Tokenizer {
            inner,
            as_text,
            special_strings,
            max_token_bytes,
            special_tokens,
            special_ids,
            eos_token_id,
            bos_token_id,
            pad_token_id,
        })
    }

    /// Token ids of `text`. With `add_special_tokens`, the post-processor's tokens (a BOS for
    /// some families; nothing for Qwen) are added, as transformers' `encode` does by default.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, TokenizerError> {
        encode_with(&self.inner, text, add_special_tokens)
    }

    /// Token ids of `text` with every special token in it read as plain text (what a client
    /// wrote in a message's content must never become a control token).
    pub fn encode_as_text(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        encode_with(&self.as_text, text, false)
    }

    /// The special tokens' strings (`<|im_start|>`, ...) and ids, longest first.
    pub fn special_strings(&self) -> &[(String, u32)] {
        &self.special_strings
    }

    /// Bytes of the longest vocabulary entry: no token stands for more bytes of text.
    pub fn max_token_bytes(&self) -> usize {
        self.max_token_bytes
    }

    /// The text of `ids`. Bytes that do not form valid UTF-8 come out as U+FFFD; ids outside the
    /// vocabulary are dropped; with `skip_special_tokens`, special tokens are dropped too.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, TokenizerError> {
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(|source| TokenizerError::Decode {
                count: ids.len(),
                source,
            })
    }

    /// The `tokenizers` pipeline itself, for what reads the vocabulary wholesale (the grammar
    /// engine's token bytes, `grammar/vocab.rs`).
    pub fn hf(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The vocabulary entry of `id` (byte-level form for BPE tokens, e.g. `Ġthe`).
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Number of tokens including added ones (transformers' `len(tokenizer)`). A model's
    /// `vocab_size` is often larger (padded embedding table).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Ids of all special tokens, sorted (transformers' `all_special_ids`).
    pub fn special_token_ids(&self) -> &[u32] {
        &self.special_ids
    }

    pub fn is_special(&self, id: u32) -> bool {
        self.special_ids.binary_search(&id).is_ok()
    }

    pub fn special_tokens(&self) -> &SpecialTokens {
        &self.special_tokens
    }

    /// The id of `eos_token` from `tokenizer_config.json` (`<|im_end|>` for Qwen3 chat models).
    /// `generation_config.json` may name more stop ids; reading it is the loader's job.
    pub fn eos_token_id(&self) -> Option<u32> {
        self.eos_token_id
    }

    pub fn bos_token_id(&self) -> Option<u32> {
        self.bos_token_id
    }

    pub fn pad_token_id(&self) -> Option<u32> {
        self.pad_token_id
    }
}
