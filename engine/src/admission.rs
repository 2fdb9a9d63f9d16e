//! Admission: the one place that decides whether a request may run (issue 31).
//!
//! Every refusal is an [`AddRequestError`], decided here and nowhere else:
//!
//! - what the request itself gets wrong (an empty prompt, a token outside the vocabulary,
//!   `max_tokens` of 0, prompt + `max_tokens` beyond the model's context or the KV cache) by
//!   [`AdmissionLimits::validate`], on the caller's thread, before anything reaches the
//!   engine thread. What passes is a [`ValidRequest`], the only thing the engine accepts; the
//!   scheduler runs it without deciding again.
//! - the queue limit by [`QueueGate::try_reserve`], also on the caller's thread: one atomic
//!   step reserves a place, so concurrent callers can never all pass a check that only one
//!   of them should (the race that turned a refusal into an aborted stream). The engine
//!   thread only tells the gate how its waiting queue changed; it never refuses.
//! - draining and shutdown by the handle (`EngineHandle::add_request`), from a flag.
//!
//! The server maps each variant to its HTTP status in `server/error.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crate::sampling_params::SamplingParams;

/// Why a request was refused. The server maps each to a status: the request's own faults
/// to 400, `QueueFull` to 429 with Retry-After, `ShuttingDown` to 503.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddRequestError {
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("token id {token} is outside the vocabulary (0..{vocab_size})")]
    TokenOutOfVocabulary { token: u32, vocab_size: usize },
    #[error("max_tokens must be at least 1")]
    ZeroMaxTokens,
    /// Prompt + max_tokens exceed what the model or the KV cache can ever hold (HTTP 400,
    /// `context_length_exceeded`).
    #[error(
        "this request needs {needed} tokens of context ({prompt_tokens} in the prompt) but the \
         limit is {limit}"
    )]
    TooLong {
        prompt_tokens: usize,
        needed: usize,
        limit: usize,
    },
    /// The waiting queue is at `--max-queued-requests` (HTTP 429 with Retry-After).
    #[error("the server is at capacity ({queued} requests queued); retry shortly")]
    QueueFull { queued: usize },
    /// The engine is draining for shutdown or has stopped (HTTP 503).
    #[error("the engine is shutting down and accepts no new requests")]
    ShuttingDown,
}

/// The limits a request is checked against, fixed once the KV cache is sized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionLimits {
    /// Longest sequence, prompt + output (`--max-seq-len` capped by the model).
    pub max_model_len: usize,
    /// Longest sequence the whole KV cache can hold: its usable blocks' tokens, plus one (the
    /// last token is sampled, never fed back, so its keys are never stored).
    pub kv_capacity_tokens: usize,
    pub vocab_size: usize,
}

impl AdmissionLimits {
    /// The limits for a cache of `usable_blocks` blocks of `block_size` tokens.
    pub fn new(
        max_model_len: usize,
        usable_blocks: usize,
        block_size: usize,
        vocab_size: usize,
    ) -> Self {
        Self {
            max_model_len,
            kv_capacity_tokens: usable_blocks.saturating_mul(block_size).saturating_add(1),
            vocab_size,
        }
    }

    /// Most tokens (prompt + max_tokens) one request may need.
    pub fn context_limit(&self) -> usize {
        self.max_model_len.min(self.kv_capacity_tokens)
    }

    /// Check a request against every limit that does not depend on the engine's state.
    pub fn validate(
        &self,
        prompt: Vec<u32>,
        sampling: SamplingParams,
        arrival: Instant,
    ) -> Result<ValidRequest, AddRequestError> {
        if prompt.is_empty() {
            return Err(AddRequestError::EmptyPrompt);
        }
        if let Some(&token) = prompt.iter().find(|&&t| t as usize >= self.vocab_size) {
            return Err(AddRequestError::TokenOutOfVocabulary {
                token,
                vocab_size: self.vocab_size,
            });
        }
        if sampling.max_tokens == 0 {
            return Err(AddRequestError::ZeroMaxTokens);
        }
        let needed = prompt.len().saturating_add(sampling.max_tokens);
        let limit = self.context_limit();
        if needed > limit {
            return Err(AddRequestError::TooLong {
                prompt_tokens: prompt.len(),
                needed,
                limit,
            });
        }
        Ok(ValidRequest {
            prompt,
            sampling,
            arrival,
        })
    }
}

/// A request that passed [`AdmissionLimits::validate`]: a non-empty prompt of in-vocabulary
/// ids, `max_tokens` ≥ 1, prompt + `max_tokens` within the context and the KV cache. Only
/// `validate` makes one, so whoever holds one may trust it.
#[derive(Debug, Clone)]
pub struct ValidRequest {
    prompt: Vec<u32>,
    sampling: SamplingParams,
    arrival: Instant,
}

impl ValidRequest {
    pub fn prompt(&self) -> &[u32] {
        &self.prompt
    }

    pub fn sampling(&self) -> &SamplingParams {
        &self.sampling
    }

    /// When the server received it (for TTFT and e2e latency).
    pub fn arrival(&self) -> Instant {
        self.arrival
    }

    pub fn into_parts(self) -> (Vec<u32>, SamplingParams, Instant) {
        (self.prompt, self.sampling, self.arrival)
    }
}

/// The queue limit: requests admitted but not yet running (sent to the engine thread, or in
/// the scheduler's waiting queue), reserved one at a time in a single atomic step.
#[derive(Debug)]
pub struct QueueGate {
    queued: AtomicUsize,
    max: usize,
}

impl QueueGate {
    pub fn new(max: usize) -> Self {
        Self {
            queued: AtomicUsize::new(0),
            max,
        }
    }

    /// Take a place in the queue, or refuse when all `max` are taken.
    pub fn try_reserve(&self) -> Result<(), AddRequestError> {
        self.queued
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |q| {
                (q < self.max).then_some(q + 1)
            })
            .map(drop)
            .map_err(|queued| AddRequestError::QueueFull { queued })
    }

    /// Give back a place whose request never reached the engine.
    pub fn release(&self) {
        self.queued.fetch_sub(1, Ordering::SeqCst);
    }

    /// The engine thread's report: its waiting queue went from `before` to `after` requests
    /// (requests started running, were aborted, or were preempted back into the queue).
    /// Reserved places of requests it received count in `before` from then on.
    pub fn waiting_changed(&self, before: usize, after: usize) {
        if after > before {
            self.queued.fetch_add(after - before, Ordering::SeqCst);
        } else {
            self.queued.fetch_sub(before - after, Ordering::SeqCst);
        }
    }

    /// Requests on their way to the engine thread or waiting there.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> AdmissionLimits {
        // 4 usable blocks of 4 tokens: 16 cached tokens + the sampled one.
        AdmissionLimits::new(100, 4, 4, 50)
    }

    fn sampling(max_tokens: usize) -> SamplingParams {
        SamplingParams {
            max_tokens,
            ..SamplingParams::default()
        }
    }

    fn check(prompt: Vec<u32>, max_tokens: usize) -> Result<ValidRequest, AddRequestError> {
        limits().validate(prompt, sampling(max_tokens), Instant::now())
    }

    #[test]
    fn validate_refuses_each_fault_by_name() {
        assert_eq!(
            check(vec![], 1).map(drop),
            Err(AddRequestError::EmptyPrompt)
        );
        assert_eq!(
            check(vec![1, 50], 1).map(drop),
            Err(AddRequestError::TokenOutOfVocabulary {
                token: 50,
                vocab_size: 50
            })
        );
        assert_eq!(
            check(vec![1], 0).map(drop),
            Err(AddRequestError::ZeroMaxTokens)
        );
        // 10 + 7 = 17 tokens: the 17th is sampled, never cached, so 16 slots suffice.
        let ok = check(vec![1; 10], 7).expect("fits exactly");
        assert_eq!((ok.prompt().len(), ok.sampling().max_tokens), (10, 7));
        assert_eq!(
            check(vec![1; 10], 8).map(drop),
            Err(AddRequestError::TooLong {
                prompt_tokens: 10,
                needed: 18,
                limit: 17
            })
        );
        // The model's context binds when it is the smaller limit.
        let short = AdmissionLimits::new(12, 4, 4, 50);
        assert_eq!(short.context_limit(), 12);
        assert_eq!(
            short
                .validate(vec![1; 12], sampling(1), Instant::now())
                .map(drop),
            Err(AddRequestError::TooLong {
                prompt_tokens: 12,
                needed: 13,
                limit: 12
            })
        );
        assert_eq!(
            check(vec![1; 2], usize::MAX).map(drop),
            Err(AddRequestError::TooLong {
                prompt_tokens: 2,
                needed: usize::MAX,
                limit: 17
            }),
            "no overflow"
        );
    }

    #[test]
    fn the_gate_counts_reservations_and_the_engines_queue_as_one() {
        let gate = QueueGate::new(2);
        gate.try_reserve().expect("first");
        gate.try_reserve().expect("second");
        assert_eq!(
            gate.try_reserve(),
            Err(AddRequestError::QueueFull { queued: 2 })
        );
        // The engine received both (they count as its waiting queue now), then ran one.
        gate.waiting_changed(2, 1);
        assert_eq!(gate.queued(), 1);
        gate.try_reserve().expect("a place freed");
        // Preemption puts running requests back in the queue: the gate closes.
        gate.waiting_changed(1, 3);
        assert_eq!(
            gate.try_reserve(),
            Err(AddRequestError::QueueFull { queued: 4 })
        );
        gate.release();
        assert_eq!(gate.queued(), 3);
    }

    /// Many threads reserving at once never take more places than there are.
    #[test]
    fn concurrent_reservations_never_overshoot() {
        let gate = std::sync::Arc::new(QueueGate::new(3));
        let taken: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    let gate = gate.clone();
                    s.spawn(move || (0..1000).filter(|_| gate.try_reserve().is_ok()).count())
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("thread")).sum()
        });
        assert_eq!(taken, 3);
        assert_eq!(gate.queued(), 3);
    }
}
