//! STAND-IN for `crate::detokenizer` (tokenizer branch): re-decodes all ids each push
//! (quadratic, fine for tests) and holds back text ending in U+FFFD.

use std::sync::Arc;

use super::tokenizer::{Tokenizer, TokenizerError};

#[derive(Debug, thiserror::Error)]
#[error("failed to decode: {0}")]
pub struct DetokenizerError(#[from] TokenizerError);

#[derive(Debug)]
pub struct IncrementalDetokenizer {
    tokenizer: Arc<Tokenizer>,
    skip_special_tokens: bool,
    ids: Vec<u32>,
    emitted: usize,
}

impl IncrementalDetokenizer {
    pub fn new(tokenizer: Arc<Tokenizer>, skip_special_tokens: bool) -> IncrementalDetokenizer {
        IncrementalDetokenizer {
            tokenizer,
            skip_special_tokens,
            ids: Vec::new(),
            emitted: 0,
        }
    }

    pub fn push(&mut self, id: u32) -> Result<String, DetokenizerError> {
        self.ids.push(id);
        let text = self.tokenizer.decode(&self.ids, self.skip_special_tokens)?;
        if text.ends_with('\u{fffd}') || text.len() < self.emitted {
            return Ok(String::new());
        }
        let out = text[self.emitted..].to_owned();
        self.emitted = text.len();
        Ok(out)
    }

    pub fn finish(&mut self) -> String {
        let text = self
            .tokenizer
            .decode(&self.ids, self.skip_special_tokens)
            .unwrap_or_default();
        let out = text.get(self.emitted..).unwrap_or_default().to_owned();
        self.emitted = text.len();
        out
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StopStep {
    pub emit: String,
    pub stopped: bool,
}

#[derive(Debug, Clone)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
    done: bool,
}

impl StopMatcher {
    pub fn new(stops: Vec<String>) -> StopMatcher {
        let stops = stops.into_iter().filter(|s| !s.is_empty()).collect();
        StopMatcher {
            stops,
            held: String::new(),
            done: false,
        }
    }

    pub fn push(&mut self, delta: &str) -> StopStep {
        if self.done {
            return StopStep {
                emit: String::new(),
                stopped: true,
            };
        }
        self.held.push_str(delta);
        let first = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min();
        if let Some(at) = first {
            self.done = true;
            let emit = self.held[..at].to_owned();
            self.held.clear();
            return StopStep {
                emit,
                stopped: true,
            };
        }
        // Keep the longest tail that starts some stop string.
        let mut keep = 0;
        for s in &self.stops {
            for (i, _) in self.held.char_indices() {
                let tail = &self.held[i..];
                if s.starts_with(tail) {
                    keep = keep.max(tail.len());
                    break;
                }
            }
        }
        let cut = self.held.len() - keep;
        let emit = self.held[..cut].to_owned();
        self.held.drain(..cut);
        StopStep {
            emit,
            stopped: false,
        }
    }

    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}
