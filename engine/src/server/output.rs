//! One choice's engine outputs → text deltas: incremental detokenization, `stop` strings,
//! log-probabilities with each token's text and bytes, and the finish reason.
//!
//! Streaming and non-streaming responses both join the same deltas, so their text is
//! byte-identical for the same seed, and no delta ends inside a UTF-8 character.
//!
//! Choices made here (vLLM's where it has one):
//! - The token that ends a request by `stop_token_ids` or end-of-sequence is counted in
//!   `usage` but its text is not returned, and it gets no log-probability entry.
//! - A `stop` string is never returned; the request ends with the token that completes it,
//!   and `usage` counts the tokens up to and including that one.

use std::sync::Arc;

use metrale_protocol::openai::{FinishReason as ApiFinish, StopReason};

use super::deps::{IncrementalDetokenizer, StopMatcher, Tokenizer};
use crate::engine_core::{FinishReason, StepOutput};
use crate::scheduler::io::TokenLogprobs;

/// A token as the API shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenText {
    pub id: u32,
    /// The token's text (U+FFFD where it holds part of a character).
    pub text: String,
    /// Its exact bytes.
    pub bytes: Vec<u8>,
}

/// A sampled token with its log-probability and the top alternatives.
#[derive(Debug, Clone, PartialEq)]
pub struct Logprob {
    pub token: TokenText,
    pub logprob: f32,
    pub top: Vec<(TokenText, f32)>,
}

/// What one engine output added to a choice.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Delta {
    pub text: String,
    /// One per token whose text this output handled (when log-probabilities were asked for).
    pub logprobs: Vec<Logprob>,
    /// The prompt's log-probabilities, with the first output, when asked for.
    pub prompt_logprobs: Option<Vec<TokenLogprobs>>,
    /// Set on the choice's last delta.
    pub finish: Option<(ApiFinish, Option<StopReason>)>,
    /// Output tokens of the choice so far, this delta's included (as `usage` counts them).
    pub tokens: usize,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OutputError {
    /// The engine ended the request itself (it is shutting down).
    #[error("the engine aborted the request")]
    Aborted,
    /// The engine stopped without finishing the request.
    #[error("the engine stopped before the request finished")]
    EngineGone,
    #[error("failed to detokenize the output: {0}")]
    Detokenize(String),
}

/// Turns one engine request's outputs into deltas.
#[derive(Debug)]
pub struct ChoiceOutput {
    tokenizer: Arc<Tokenizer>,
    detok: IncrementalDetokenizer,
    stop: Option<StopMatcher>,
    stop_strings: Vec<String>,
    /// Detokenized text so far (before stop-string cutting), to tell which stop matched.
    raw: String,
    /// Bytes of `raw` released to the client.
    emitted: usize,
    want_logprobs: bool,
    /// End-of-sequence ids: ending on one gives no `stop_reason` (vLLM reports it only for
    /// `stop_token_ids`).
    eos_token_ids: Vec<u32>,
    /// Score the prompt only (`max_tokens: 0`): the engine generates one token, which is
    /// neither shown nor counted.
    prompt_only: bool,
    /// Output tokens that count in `usage`.
    pub num_tokens: usize,
    /// Prompt tokens served from the prefix cache, once the engine reports it.
    pub num_cached_tokens: usize,
    pub finished: bool,
}

impl ChoiceOutput {
    pub fn new(
        tokenizer: Arc<Tokenizer>,
        skip_special_tokens: bool,
        stop: Vec<String>,
        want_logprobs: bool,
        eos_token_ids: Vec<u32>,
        prompt_only: bool,
    ) -> Self {
        let stop_strings: Vec<String> = stop.into_iter().filter(|s| !s.is_empty()).collect();
        Self {
            detok: IncrementalDetokenizer::new(tokenizer.clone(), skip_special_tokens),
            tokenizer,
            stop: (!stop_strings.is_empty()).then(|| StopMatcher::new(stop_strings.clone())),
            stop_strings,
            raw: String::new(),
            emitted: 0,
            want_logprobs,
            eos_token_ids,
            prompt_only,
            num_tokens: 0,
            num_cached_tokens: 0,
            finished: false,
        }
    }

    /// Feed one engine output. After the finishing delta, further outputs are ignored.
    pub fn push(&mut self, out: &StepOutput) -> Result<Delta, OutputError> {
        let mut d = self.push_tokens(out)?;
        d.tokens = self.num_tokens;
        Ok(d)
    }

    fn push_tokens(&mut self, out: &StepOutput) -> Result<Delta, OutputError> {
        let mut d = Delta {
            prompt_logprobs: out.prompt_logprobs.clone(),
            ..Delta::default()
        };
        if self.finished {
            return Ok(d);
        }
        if self.prompt_only {
            if let Some(f) = &out.finished {
                if f.reason == FinishReason::Abort {
                    return Err(OutputError::Aborted);
                }
                self.finished = true;
                d.finish = Some((ApiFinish::Length, None));
            }
            return Ok(d);
        }
        let n = out.new_token_ids.len();
        let stop_token = match &out.finished {
            Some(f) => {
                self.num_cached_tokens = f.num_cached_prompt_tokens;
                match f.reason {
                    FinishReason::Abort => return Err(OutputError::Aborted),
                    FinishReason::Stop { token } => Some(token),
                    FinishReason::Length | FinishReason::StopString(_) => None,
                }
            }
            None => None,
        };
        for (i, &id) in out.new_token_ids.iter().enumerate() {
            self.num_tokens += 1;
            if i + 1 == n && stop_token == Some(id) {
                break;
            }
            let text = self
                .detok
                .push(id)
                .map_err(|e| OutputError::Detokenize(e.to_string()))?;
            if self.want_logprobs
                && let Some(lp) = out.logprobs.get(i)
            {
                d.logprobs.push(self.logprob(lp));
            }
            if self.release(&text, &mut d) {
                return Ok(d);
            }
        }
        if let Some(f) = &out.finished {
            let tail = self.detok.finish();
            if self.release(&tail, &mut d) {
                return Ok(d);
            }
            if let Some(stop) = &mut self.stop {
                let rest = stop.flush();
                self.emitted += rest.len();
                d.text.push_str(&rest);
            }
            self.finished = true;
            d.finish = Some(match &f.reason {
                FinishReason::Stop { token } if !self.eos_token_ids.contains(token) => {
                    (ApiFinish::Stop, Some(StopReason::Token(*token)))
                }
                FinishReason::Stop { .. } => (ApiFinish::Stop, None),
                FinishReason::StopString(s) => (ApiFinish::Stop, Some(StopReason::Text(s.clone()))),
                FinishReason::Length | FinishReason::Abort => (ApiFinish::Length, None),
            });
        }
        Ok(d)
    }

    /// Pass `text` through the stop matcher into `d`; true when a stop string ended the choice.
    fn release(&mut self, text: &str, d: &mut Delta) -> bool {
        self.raw.push_str(text);
        let Some(stop) = &mut self.stop else {
            self.emitted += text.len();
            d.text.push_str(text);
            return false;
        };
        let step = stop.push(text);
        self.emitted += step.emit.len();
        d.text.push_str(&step.emit);
        if !step.stopped {
            return false;
        }
        self.finished = true;
        let rest = self.raw.get(self.emitted..).unwrap_or_default();
        let matched = self
            .stop_strings
            .iter()
            .find(|s| rest.starts_with(s.as_str()))
            .cloned();
        d.finish = Some((ApiFinish::Stop, matched.map(StopReason::Text)));
        true
    }

    fn logprob(&self, lp: &TokenLogprobs) -> Logprob {
        Logprob {
            token: token_text(&self.tokenizer, lp.token_id),
            logprob: lp.logprob,
            top: lp
                .top
                .iter()
                .map(|&(id, l)| (token_text(&self.tokenizer, id), l))
                .collect(),
        }
    }
}

/// A token's text and exact bytes. Byte-level BPE vocabularies (Qwen's) spell each byte as
/// one printable character (GPT-2's table); anything else falls back to decoding the id.
pub fn token_text(tokenizer: &Tokenizer, id: u32) -> TokenText {
    let bytes = tokenizer
        .id_to_token(id)
        .and_then(|piece| byte_level_bytes(&piece))
        .or_else(|| tokenizer.decode(&[id], false).ok().map(String::into_bytes))
        .unwrap_or_default();
    TokenText {
        id,
        text: String::from_utf8_lossy(&bytes).into_owned(),
        bytes,
    }
}

/// Undo GPT-2's byte → character table; `None` if a character is outside it.
fn byte_level_bytes(piece: &str) -> Option<Vec<u8>> {
    piece
        .chars()
        .map(|c| {
            let c = c as u32;
            let printable =
                |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
            if c < 256 && printable(c) {
                return Some(c as u8);
            }
            // The other 68 bytes, in order, map to 256, 257, ...
            let k = c.checked_sub(256)?;
            (0u32..256)
                .filter(|b| !printable(*b))
                .nth(k as usize)
                .map(|b| b as u8)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_pieces_become_their_bytes() {
        assert_eq!(byte_level_bytes("Ġhi").as_deref(), Some(&b" hi"[..]));
        assert_eq!(byte_level_bytes("Ċ").as_deref(), Some(&b"\n"[..]));
        // "ä½" is the first two bytes of 你 (e4 bd a0).
        assert_eq!(byte_level_bytes("ä½").as_deref(), Some(&[0xe4, 0xbd][..]));
        assert_eq!(
            byte_level_bytes("<|im_end|>").as_deref(),
            Some(&b"<|im_end|>"[..])
        );
        assert_eq!(byte_level_bytes("你"), None);
    }
}
