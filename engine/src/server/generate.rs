//! Running a request's choices on the engine: one engine request per choice (`n` × prompts),
//! their outputs as deltas, collected whole or streamed, under the request timeout.
//!
//! Every choice owns its [`RequestStream`]; dropping a choice (client gone, stop string,
//! timeout, a sibling's error) aborts its engine request, which frees its KV blocks.
//!
//! `--request-timeout` counts from arrival (queueing included). A non-streaming request that
//! runs past it gets a 400 `request_timeout` (not 504, which clients retry: `error.rs`) and
//! nothing else: partial text with a `finish_reason` would look like a normal answer. A stream that runs past it ends with an
//! error event (its 200 headers are already sent), then `[DONE]`.

use std::sync::Arc;
use std::time::Instant;

use futures_util::stream::{self, Stream, StreamExt};
use metrale_protocol::openai::{FinishReason as ApiFinish, StopReason, Usage};
use tokio::time::Instant as TokioInstant;

use super::AppState;
use super::error::ApiError;
use super::output::{ChoiceOutput, Delta, Logprob, OutputError};
use super::params::Generation;
use crate::engine_core::{EngineHandle, RequestStream};
use crate::metrics::{Outcome, RequestTimer};
use crate::scheduler::io::TokenLogprobs;

/// One prompt of a request, tokenized.
#[derive(Debug, Clone)]
pub struct PromptIds {
    pub ids: Vec<u32>,
}

/// One engine request and what has come of it.
#[derive(Debug)]
pub struct Choice {
    pub index: u32,
    /// Which prompt of the request this choice continues.
    pub prompt: usize,
    stream: RequestStream,
    /// Asked why, when the stream ends without a finish.
    engine: EngineHandle,
    output: ChoiceOutput,
    timer: RequestTimer,
    deadline: Option<TokioInstant>,
    timeout_secs: f64,
}

/// A choice's whole result (non-streaming).
#[derive(Debug, Clone, Default)]
pub struct Collected {
    pub text: String,
    pub logprobs: Vec<Logprob>,
    pub prompt_logprobs: Option<Vec<TokenLogprobs>>,
    pub finish: Option<(ApiFinish, Option<StopReason>)>,
    pub num_tokens: usize,
    pub num_cached_tokens: usize,
}

/// What a client is told when its request did not finish: the engine's own failure (a lost
/// rank) when it has one, so the 503 says why.
fn output_error(engine: &EngineHandle, e: OutputError) -> ApiError {
    match e {
        OutputError::Aborted | OutputError::EngineGone => match engine.failure() {
            Some(why) => ApiError::EngineFailed(why),
            None => ApiError::ShuttingDown,
        },
        OutputError::Detokenize(m) => ApiError::Internal(m),
    }
}

impl Choice {
    /// The next delta; `None` once the finishing delta was returned.
    pub async fn next(&mut self) -> Option<Result<Delta, ApiError>> {
        if self.output.finished {
            return None;
        }
        let next = match self.deadline {
            Some(d) => match tokio::time::timeout_at(d, self.stream.next()).await {
                Ok(o) => o,
                Err(_) => {
                    self.output.finished = true;
                    return Some(Err(ApiError::Timeout {
                        seconds: self.timeout_secs,
                    }));
                }
            },
            None => self.stream.next().await,
        };
        let Some(out) = next else {
            self.output.finished = true;
            return Some(Err(output_error(&self.engine, OutputError::EngineGone)));
        };
        self.timer.on_tokens(out.new_token_ids.len());
        let r = self
            .output
            .push(&out)
            .map_err(|e| output_error(&self.engine, e));
        match &r {
            Ok(d) => {
                if let Some((reason, _)) = &d.finish {
                    self.timer.finish(match reason {
                        ApiFinish::Stop | ApiFinish::ToolCalls => Outcome::Stop,
                        ApiFinish::Length => Outcome::Length,
                    });
                }
            }
            Err(_) => self.output.finished = true,
        }
        Some(r)
    }

    pub fn num_tokens(&self) -> usize {
        self.output.num_tokens
    }

    pub fn num_cached_tokens(&self) -> usize {
        self.output.num_cached_tokens
    }

    /// Run to the end, joining the deltas.
    pub async fn collect(mut self) -> Result<Collected, ApiError> {
        let mut c = Collected::default();
        while let Some(d) = self.next().await {
            let d = d?;
            c.text.push_str(&d.text);
            c.logprobs.extend(d.logprobs);
            if d.prompt_logprobs.is_some() {
                c.prompt_logprobs = d.prompt_logprobs;
            }
            if d.finish.is_some() {
                c.finish = d.finish;
            }
        }
        c.num_tokens = self.output.num_tokens;
        c.num_cached_tokens = self.output.num_cached_tokens;
        Ok(c)
    }
}

/// Submit `n` engine requests for each prompt; choice `p * n + i` is prompt `p`'s `i`-th.
/// If any is refused, the ones already submitted are dropped (aborted) and the error returned.
pub fn launch(
    state: &Arc<AppState>,
    prompts: &[PromptIds],
    generation: &Generation,
    prompt_param: &str,
    arrival: Instant,
) -> Result<Vec<Choice>, ApiError> {
    let engine = state.engine()?;
    let info = engine.info();
    if prompts.len() * generation.n > super::params::MAX_CHOICES {
        return Err(ApiError::invalid(
            "n",
            format!(
                "{} prompts × n = {} is more than {} completions in one request",
                prompts.len(),
                prompts.len() * generation.n,
                super::params::MAX_CHOICES
            ),
        ));
    }
    // Validate every choice before submitting any (admission.rs decides; error.rs words it).
    let mut admitted = Vec::with_capacity(prompts.len() * generation.n);
    for (p, prompt) in prompts.iter().enumerate() {
        for i in 0..generation.n {
            let sampling = generation.for_prompt(prompt.ids.len(), info, i);
            let logprobs = sampling.logprobs.is_some();
            let valid = engine
                .limits()
                .validate(prompt.ids.clone(), sampling, arrival)
                .map_err(|e| ApiError::refused(e, prompt_param))?;
            admitted.push((p, valid, logprobs));
        }
    }
    let deadline = state
        .request_timeout
        .map(|t| TokioInstant::from_std(arrival + t));
    // All choices of the request are admitted together: one queue place if they must wait.
    let (meta, valid): (Vec<_>, Vec<_>) = admitted
        .into_iter()
        .map(|(p, valid, want_logprobs)| ((p, want_logprobs), valid))
        .unzip();
    let streams = engine
        .add_requests(valid)
        .map_err(|e| ApiError::refused(e, prompt_param))?;
    let mut choices = Vec::with_capacity(streams.len());
    for (index, ((p, want_logprobs), stream)) in meta.into_iter().zip(streams).enumerate() {
        let prompt_len = prompts[p].ids.len();
        choices.push(Choice {
            index: index as u32,
            prompt: p,
            stream,
            engine: engine.clone(),
            output: ChoiceOutput::new(
                state.tokenizer.clone(),
                generation.skip_special_tokens,
                generation.stop.clone(),
                want_logprobs,
                info.eos_token_ids.clone(),
                generation.prompt_only(),
            ),
            timer: RequestTimer::new(state.metrics.clone(), arrival, prompt_len),
            deadline,
            timeout_secs: state.request_timeout.map_or(0.0, |t| t.as_secs_f64()),
        });
    }
    Ok(choices)
}

/// Usage over all choices: each prompt counted once, every choice's output tokens.
pub fn usage(prompts: &[PromptIds], completion_tokens: usize, cached: usize) -> Usage {
    let prompt_tokens: usize = prompts.iter().map(|p| p.ids.len()).sum();
    Usage {
        prompt_tokens,
        completion_tokens,
        total_tokens: prompt_tokens + completion_tokens,
        prompt_tokens_details: Some(metrale_protocol::openai::PromptTokensDetails {
            cached_tokens: cached,
        }),
    }
}

/// Run all choices concurrently to the end. The first error drops (aborts) the rest.
pub async fn collect_all(choices: Vec<Choice>) -> Result<Vec<Collected>, ApiError> {
    futures_util::future::try_join_all(choices.into_iter().map(Choice::collect)).await
}

/// A choice's event in a merged stream.
#[derive(Debug)]
pub enum Event {
    Delta {
        index: u32,
        prompt: usize,
        delta: Delta,
    },
    /// All choices finished: the totals for `usage`.
    Done {
        completion_tokens: usize,
        cached: usize,
    },
    Error(ApiError),
}

/// The deltas of all choices as they come, then `Done`; after an error, nothing more.
pub fn merged(choices: Vec<Choice>) -> impl Stream<Item = Event> + Send {
    let totals = Arc::new(std::sync::Mutex::new((0usize, 0usize)));
    let per_choice = choices.into_iter().map({
        let totals = totals.clone();
        move |c| {
            let totals = totals.clone();
            stream::unfold(Some(c), move |c| {
                let totals = totals.clone();
                async move {
                    let mut c = c?;
                    match c.next().await {
                        None => {
                            if let Ok(mut t) = totals.lock() {
                                t.0 += c.num_tokens();
                                t.1 = t.1.max(c.num_cached_tokens());
                            }
                            None
                        }
                        Some(Ok(delta)) => {
                            let ev = Event::Delta {
                                index: c.index,
                                prompt: c.prompt,
                                delta,
                            };
                            Some((ev, Some(c)))
                        }
                        Some(Err(e)) => Some((Event::Error(e), None)),
                    }
                }
            })
            .boxed()
        }
    });
    let all = stream::select_all(per_choice);
    let done = stream::once(async move {
        let (completion_tokens, cached) = totals.lock().map(|t| *t).unwrap_or_default();
        Event::Done {
            completion_tokens,
            cached,
        }
    });
    // Stop at the first error: the remaining choices are dropped, which aborts them.
    all.chain(done).scan(false, |failed, ev| {
        if *failed {
            return futures_util::future::ready(None);
        }
        *failed = matches!(ev, Event::Error(_));
        futures_util::future::ready(Some(ev))
    })
}
