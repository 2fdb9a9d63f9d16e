//! Streaming text out of a stream of token ids.
//!
//! A byte-level BPE token is a run of bytes, not of characters: one Chinese character or emoji
//! can take two or three tokens, and a lone token may be bytes that are never valid UTF-8. The
//! `IncrementalDetokenizer` therefore decodes a small window of recent ids with the tokenizer's
//! own `decode` and only hands out text once it ends on a finished character; the window then
//! slides forward. The guarantee, tested over random id sequences: the deltas joined equal
//! `decode(all ids)`, byte for byte, U+FFFD replacements included.
//!
//! Why a window and not bytes: it leaves every decoding rule to the tokenizer (added tokens,
//! skipped specials, decoders other than byte-level), so the stream can never disagree with a
//! one-shot decode of the same ids.
//!
//! `StopMatcher` (in `stop`) sits after it and cuts the text at OpenAI `stop` strings.

mod stop;

use std::sync::Arc;

pub use stop::{StopMatcher, StopStep};

use crate::tokenizer::{Tokenizer, TokenizerError};

#[derive(Debug, thiserror::Error)]
pub enum DetokenizerError {
    #[error("failed to decode token {id} at position {position}: {source}")]
    Decode {
        id: u32,
        position: usize,
        source: TokenizerError,
    },
}

pub struct IncrementalDetokenizer {
    tokenizer: Arc<Tokenizer>,
    skip_special_tokens: bool,
    ids: Vec<u32>,
    /// Start of the window: `ids[prefix_offset..read_offset]` was handed out already and is
    /// decoded again only as left context for the ids after it (some decoders look back).
    prefix_offset: usize,
    /// End of what was handed out; the text up to here ends on a whole character.
    read_offset: usize,
    /// Text of `ids[read_offset..]`, decoded but not handed out yet.
    held: String,
}

impl std::fmt::Debug for IncrementalDetokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IncrementalDetokenizer")
            .field("skip_special_tokens", &self.skip_special_tokens)
            .field("tokens", &self.ids.len())
            .field("held", &self.held)
            .finish_non_exhaustive()
    }
}

impl IncrementalDetokenizer {
    pub fn new(tokenizer: Arc<Tokenizer>, skip_special_tokens: bool) -> IncrementalDetokenizer {
        IncrementalDetokenizer {
            tokenizer,
            skip_special_tokens,
            ids: Vec::new(),
            prefix_offset: 0,
            read_offset: 0,
            held: String::new(),
        }
    }

    /// Adds one token and returns the text it completes: empty while it only carries part of a
    /// character (or is a skipped special token), more than its own text when it finishes
    /// characters that earlier tokens began.
    ///
    /// Costs two decodes of a window of a few tokens. The window only grows while the text keeps
    /// ending in an unfinished character, which valid UTF-8 allows for three tokens at most.
    pub fn push(&mut self, id: u32) -> Result<String, DetokenizerError> {
        self.ids.push(id);
        let context = self.decode(self.prefix_offset..self.read_offset)?;
        let text = self.decode(self.prefix_offset..self.ids.len())?;

        // `text` extends `context` because the window starts and splits on whole characters.
        let new = text.get(context.len()..).unwrap_or("");
        // A trailing U+FFFD may be the first bytes of a character the next token completes:
        // hold it. (Real U+FFFD text comes out with the next token, or at `finish`.)
        if new.is_empty() || text.ends_with('\u{FFFD}') {
            self.held = new.to_string();
            return Ok(String::new());
        }
        self.prefix_offset = self.read_offset;
        self.read_offset = self.ids.len();
        self.held.clear();
        Ok(new.to_string())
    }

    fn decode(&self, range: std::ops::Range<usize>) -> Result<String, DetokenizerError> {
        if range.is_empty() {
            return Ok(String::new());
        }
        let position = self.ids.len() - 1;
        self.tokenizer
            .decode(&self.ids[range], self.skip_special_tokens)
            .map_err(|source| DetokenizerError::Decode {
                id: self.ids[position],
                position,
                source,
            })
    }

    /// Ends the stream: returns the text still held back (an unfinished character comes out
    /// as U+FFFD, as a one-shot decode writes it). Later pushes start a fresh window.
    pub fn finish(&mut self) -> String {
        self.prefix_offset = self.ids.len();
        self.read_offset = self.ids.len();
        std::mem::take(&mut self.held)
    }

    /// Text decoded but not handed out yet.
    pub fn held_back(&self) -> &str {
        &self.held
    }

    /// All ids pushed so far.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }
}
