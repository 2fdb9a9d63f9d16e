//! `POST /v1/completions`: a prompt as text or token ids (or a batch of either), with `echo`
//! and the legacy log-probability layout. `echo` + `logprobs` returns the prompt's
//! log-probabilities too (the first prompt token has none), which is how evaluation tools
//! score a model through an OpenAI-compatible server; `max_tokens: 0` is allowed with `echo`.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use metrale_protocol::openai::{
    CompletionChoice, CompletionLogprobs, CompletionRequest, CompletionResponse, Prompt,
    SamplingFields,
};
use serde_json::{Map, Value};

use super::body::{JsonBody, from_value, parse_object};
use super::error::ApiError;
use super::generate::{self, PromptIds};
use super::output::{Delta, Logprob, TokenText, token_text};
use super::params::{Extras, Generation};
use super::{AppState, response_id, sse, unix_now};
use crate::scheduler::io::TokenLogprobs;

/// A prompt's ids and its text (for `echo`).
struct EchoPrompt {
    ids: Vec<u32>,
    text: String,
}

fn tokenize_prompts(state: &AppState, prompt: Prompt) -> Result<Vec<EchoPrompt>, ApiError> {
    let encode = |text: String| {
        let ids = state
            .tokenizer
            .encode(&text, true)
            .map_err(|e| ApiError::Internal(format!("failed to tokenize the prompt: {e}")))?;
        Ok::<_, ApiError>(EchoPrompt { ids, text })
    };
    let decode = |ids: Vec<u32>| {
        // Ids outside the vocabulary are refused later, naming the field.
        let text = state.tokenizer.decode(&ids, false).unwrap_or_default();
        Ok::<_, ApiError>(EchoPrompt { ids, text })
    };
    let prompts: Vec<EchoPrompt> = match prompt {
        Prompt::Text(t) => vec![encode(t)?],
        Prompt::Tokens(ids) => vec![decode(ids)?],
        Prompt::TextBatch(ts) => ts.into_iter().map(encode).collect::<Result<_, _>>()?,
        Prompt::TokensBatch(b) => b.into_iter().map(decode).collect::<Result<_, _>>()?,
    };
    if prompts.is_empty() {
        return Err(ApiError::invalid("prompt", "`prompt` must not be empty"));
    }
    Ok(prompts)
}

/// An f32 as JSON with its shortest digits (`-8.394626`, not `-8.394625663757324`), the way
/// the f32 fields beside it serialize.
fn short_float(v: f32) -> Value {
    v.to_string()
        .parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map_or(Value::Null, Value::Number)
}

/// Where the next token starts in the text, in characters, as the tokens' bytes arrive. A
/// byte-fallback token holding part of a character adds nothing until the character is
/// whole, then the character counts once (issue 37: each U+FFFD of a token's own rendering
/// counted, and a 13-character emoji text ended at offset 23); bytes that can never be valid
/// count as the one U+FFFD each run of them becomes in the text.
#[derive(Debug, Clone, Default)]
struct TextOffset {
    chars: usize,
    /// The start of a character whose other bytes have not come yet.
    partial: Vec<u8>,
}

impl TextOffset {
    fn advance(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        let mut rest: &[u8] = &self.partial;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    self.chars += s.chars().count();
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, tail) = rest.split_at(e.valid_up_to());
                    self.chars += String::from_utf8_lossy(valid).chars().count();
                    match e.error_len() {
                        // A character still arriving: keep its bytes.
                        None => {
                            rest = tail;
                            break;
                        }
                        Some(n) => {
                            self.chars += 1;
                            rest = &tail[n..];
                        }
                    }
                }
            }
        }
        self.partial = rest.to_vec();
    }
}

/// Builds the legacy log-probability arrays, tracking each token's character offset.
struct LogprobTable {
    lp: CompletionLogprobs,
    offset: TextOffset,
}

impl LogprobTable {
    fn new(start: TextOffset) -> Self {
        Self {
            lp: CompletionLogprobs::default(),
            offset: start,
        }
    }

    fn push(&mut self, token: &TokenText, logprob: Option<f32>, top: Option<Map<String, Value>>) {
        self.lp.tokens.push(token.text.clone());
        self.lp.token_logprobs.push(logprob);
        self.lp.top_logprobs.push(top);
        self.lp.text_offset.push(self.offset.chars);
        self.offset.advance(&token.bytes);
    }

    /// The alternatives as `{token text: logprob}`, the chosen token included.
    fn top(chosen: &TokenText, logprob: f32, top: &[(TokenText, f32)]) -> Map<String, Value> {
        let mut m = Map::new();
        for (t, l) in top {
            m.entry(t.text.clone()).or_insert(short_float(*l));
        }
        m.entry(chosen.text.clone()).or_insert(short_float(logprob));
        m
    }

    fn push_sampled(&mut self, lps: &[Logprob]) {
        for lp in lps {
            let top = Self::top(&lp.token, lp.logprob, &lp.top);
            self.push(&lp.token, Some(lp.logprob), Some(top));
        }
    }

    /// The prompt's tokens: the first has no log-probability, each later one its own.
    fn push_prompt(&mut self, state: &AppState, ids: &[u32], lps: &[TokenLogprobs]) {
        for (i, &id) in ids.iter().enumerate() {
            let t = token_text(&state.tokenizer, id);
            match i.checked_sub(1).and_then(|j| lps.get(j)) {
                None => self.push(&t, None, None),
                Some(lp) => {
                    let top: Vec<(TokenText, f32)> = lp
                        .top
                        .iter()
                        .map(|&(id, l)| (token_text(&state.tokenizer, id), l))
                        .collect();
                    let m = Self::top(&t, lp.logprob, &top);
                    self.push(&t, Some(lp.logprob), Some(m));
                }
            }
        }
    }
}

/// A completion request as the tokenizer pool leaves it.
struct Prepared {
    req: CompletionRequest,
    generation: Generation,
    echo_prompts: Vec<EchoPrompt>,
}

/// Everything a completion request needs before generation, on a tokenizer worker.
fn prepare(state: &AppState, bytes: &[u8]) -> Result<Prepared, ApiError> {
    let body = parse_object(bytes)?;
    state.check_prompt_bytes(&body, "prompt")?;
    let fields: SamplingFields = from_value(&body)?;
    let mut req: CompletionRequest = from_value(&body)?;
    state.check_model(req.model.as_deref())?;
    let engine = state.engine()?;
    if req.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::Unsupported {
            message: "`suffix` is not supported".into(),
            param: "suffix".into(),
        });
    }
    if req.best_of.is_some_and(|b| b != req.n.unwrap_or(1)) {
        return Err(ApiError::Unsupported {
            message: "`best_of` other than `n` is not supported".into(),
            param: "best_of".into(),
        });
    }
    let echo = req.echo.unwrap_or(false);
    let k = req.logprobs;
    let mut generation = Generation::from_request(
        &fields,
        Extras {
            max_tokens: req.max_tokens,
            n: req.n,
            logprobs: k,
            prompt_logprobs: if echo { k } else { None },
            allow_zero_max_tokens: echo,
        },
        &state.defaults,
        engine.info(),
    )?;
    // vLLM takes `response_format` (and its own fields) on completions too.
    let asked = super::structured::Asked {
        body: Some(&body),
        tools: None,
        think: crate::grammar::Think::Off,
    };
    super::structured::attach(state, &mut generation, asked)?;
    let prompt = std::mem::replace(&mut req.prompt, Prompt::Tokens(Vec::new()));
    let echo_prompts = tokenize_prompts(state, prompt)?;
    Ok(Prepared {
        req,
        generation,
        echo_prompts,
    })
}

pub async fn completions(
    State(state): State<Arc<AppState>>,
    JsonBody(bytes): JsonBody,
) -> Result<Response, ApiError> {
    let in_flight = state.in_flight();
    let arrival = Instant::now();
    let Prepared {
        req,
        generation,
        echo_prompts,
    } = state.on_workers(bytes, prepare).await?;
    let echo = req.echo.unwrap_or(false);
    let k = req.logprobs;
    let prompts: Vec<PromptIds> = echo_prompts
        .iter()
        .map(|p| PromptIds { ids: p.ids.clone() })
        .collect();
    let choices = generate::launch(&state, &prompts, &generation, "prompt", arrival)?;
    let id = response_id("cmpl");
    let created = unix_now();
    let model = state.served_name.clone();

    if req.stream != Some(true) {
        let owners: Vec<usize> = choices.iter().map(|c| c.prompt).collect();
        let collected = generate::collect_all(choices).await?;
        let completion_tokens = collected.iter().map(|c| c.num_tokens).sum();
        let cached = collected
            .iter()
            .map(|c| c.num_cached_tokens)
            .max()
            .unwrap_or(0);
        let choices = collected
            .into_iter()
            .zip(owners)
            .enumerate()
            .map(|(i, (c, p))| {
                let prompt = &echo_prompts[p];
                let mut text = String::new();
                let mut table = LogprobTable::new(TextOffset::default());
                if echo {
                    text.push_str(&prompt.text);
                    let plp = c.prompt_logprobs.as_deref().unwrap_or_default();
                    table.push_prompt(&state, &prompt.ids, plp);
                }
                text.push_str(&c.text);
                table.push_sampled(&c.logprobs);
                let (finish, stop_reason) = c.finish.unzip();
                CompletionChoice {
                    index: i as u32,
                    text,
                    logprobs: k.map(|_| table.lp),
                    finish_reason: finish,
                    stop_reason: stop_reason.flatten(),
                }
            })
            .collect();
        drop(in_flight);
        return Ok(axum::Json(CompletionResponse {
            id,
            object: "text_completion".into(),
            created,
            model,
            choices,
            usage: Some(Some(generate::usage(&prompts, completion_tokens, cached))),
        })
        .into_response());
    }

    let include_usage = sse::include_usage(req.stream_options.as_ref());
    let no_usage = include_usage.then_some(None);
    let continuous = sse::continuous_usage(req.stream_options.as_ref());
    let usage_prompts = prompts.clone();
    let chunk = {
        let (id, model) = (id.clone(), model.clone());
        move |choices: Vec<CompletionChoice>, usage| {
            sse::json(&CompletionResponse {
                id: id.clone(),
                object: "text_completion".into(),
                created,
                model: model.clone(),
                choices,
                usage,
            })
        }
    };
    // Per choice: whether the prompt was echoed yet, and the character offset so far.
    let mut progress: Vec<(bool, TextOffset)> = vec![(false, TextOffset::default()); choices.len()];
    let on_delta = {
        let chunk = chunk.clone();
        let state = state.clone();
        move |index: u32, p: usize, d: Delta| {
            let (echoed, offset) = progress.get_mut(index as usize)?;
            let mut text = String::new();
            let mut table = LogprobTable::new(std::mem::take(offset));
            if echo && !*echoed {
                *echoed = true;
                text.push_str(&echo_prompts[p].text);
                let plp = d.prompt_logprobs.as_deref().unwrap_or_default();
                table.push_prompt(&state, &echo_prompts[p].ids, plp);
            }
            text.push_str(&d.text);
            table.push_sampled(&d.logprobs);
            *offset = table.offset.clone();
            if text.is_empty() && table.lp.tokens.is_empty() && d.finish.is_none() && !continuous {
                return None;
            }
            let usage = if continuous {
                Some(Some(generate::usage(&usage_prompts, d.tokens, 0)))
            } else {
                no_usage
            };
            let (finish, stop_reason) = d.finish.unzip();
            Some(chunk(
                vec![CompletionChoice {
                    index,
                    text,
                    logprobs: k.map(|_| table.lp),
                    finish_reason: finish,
                    stop_reason: stop_reason.flatten(),
                }],
                usage,
            ))
        }
    };
    let on_done = sse::usage_chunk(include_usage, prompts, move |u| {
        chunk(vec![], Some(Some(u)))
    });
    Ok(sse::respond(
        vec![],
        generate::merged(choices),
        on_delta,
        on_done,
        in_flight,
    ))
}

#[cfg(test)]
mod tests {
    use super::TextOffset;

    /// Offsets count the characters of the text, whole characters split over byte tokens
    /// once, invalid bytes as the U+FFFD they become.
    #[test]
    fn text_offsets_count_characters_not_replacement_marks() {
        let mut o = TextOffset::default();
        let mut starts = Vec::new();
        // "a😀b" as tokens: "a", the emoji's four bytes one a token, "b".
        let emoji = "😀".as_bytes();
        for t in [
            &b"a"[..],
            &emoji[..1],
            &emoji[1..2],
            &emoji[2..3],
            &emoji[3..],
            b"b",
        ] {
            starts.push(o.chars);
            o.advance(t);
        }
        assert_eq!(starts, [0, 1, 1, 1, 1, 2]);
        assert_eq!(o.chars, 3);
        // 13 emoji in byte tokens end at 13.
        let mut o = TextOffset::default();
        for b in "😀".repeat(13).bytes() {
            o.advance(&[b]);
        }
        assert_eq!(o.chars, 13);
        // An impossible byte is one U+FFFD; a lone lead byte waits for its character.
        let mut o = TextOffset::default();
        o.advance(&[0xff, b'x', 0xe2]);
        assert_eq!((o.chars, o.partial.len()), (2, 1));
    }
}
