//! Admission: the one place that decides whether a request may run (issue 31).
//!
//! Every refusal is an [`AddRequestError`], decided here and nowhere else:
//!
//! - what the request itself gets wrong (an empty prompt, a token outside the vocabulary,
//!   `max_tokens` of 0, prompt + `max_tokens` beyond the model's context or the KV cache) by
//!   [`AdmissionLimits::validate`], on the caller's thread, before anything reaches the
//!   engine thread. What passes is a [`ValidRequest`], the only thing the engine accepts; the
//!   scheduler runs it without deciding again.
//! - the queue limit by [`QueueGate::try_reserve`], also on the caller's thread: one locked
//!   step admits a whole request, so concurrent callers can never all pass a check that only
//!   one of them should (the race that turned a refusal into an aborted stream). Only a
//!   request that finds no free batch slot takes a queue place (issue 37: a burst on an idle
//!   server was refused while slots were free). The engine thread only drops what admission
//!   handed out; it never refuses.
//! - draining and shutdown by the handle (`EngineHandle::add_request`), from a flag.
//!
//! The server maps each variant to its HTTP status in `server/error.rs`.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
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

/// `--max-queued-requests` against `--max-batch-size`: a request is admitted at once when its
/// sequences fit in the batch slots left free by every sequence already admitted (waiting,
/// running, or on its way to the engine thread); only one that must wait for a slot takes a
/// place in the queue, and only a full queue refuses (429). A request of `n` choices (or
/// several prompts) takes one queue place however many sequences it has, and all `n` of its
/// batch slots, as it does KV blocks.
///
/// Counts are given back by dropping what [`QueueGate::try_reserve`] hands out: each
/// sequence's [`Admission`] travels with it to the engine thread, which drops its queue place
/// when the sequence first runs and its slot when it finishes. A request that never reaches
/// the engine gives both back when its command is dropped, so nothing can leak.
#[derive(Debug)]
pub struct QueueGate {
    counts: Mutex<GateCounts>,
    batch_slots: usize,
    max_queued: usize,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct GateCounts {
    /// Sequences admitted and not finished.
    seqs: usize,
    /// Requests with a sequence that has not run yet and that found no free slot on arrival.
    queued: usize,
}

impl QueueGate {
    pub fn new(batch_slots: usize, max_queued: usize) -> Arc<Self> {
        Arc::new(Self {
            counts: Mutex::new(GateCounts::default()),
            batch_slots,
            max_queued,
        })
    }

    fn counts(&self) -> MutexGuard<'_, GateCounts> {
        // The counts stay consistent whatever panicked while holding the lock: every update
        // is one statement.
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admit one request of `seqs` sequences, or refuse it when it would have to wait and
    /// the queue is full. The result holds one [`Admission`] a sequence.
    pub fn try_reserve(self: &Arc<Self>, seqs: usize) -> Result<Vec<Admission>, AddRequestError> {
        let mut c = self.counts();
        let waits = c.seqs.saturating_add(seqs) > self.batch_slots;
        if waits {
            if c.queued >= self.max_queued {
                return Err(AddRequestError::QueueFull { queued: c.queued });
            }
            c.queued += 1;
        }
        c.seqs += seqs;
        drop(c);
        let place = waits.then(|| {
            Arc::new(Held {
                gate: self.clone(),
                slot: false,
            })
        });
        Ok((0..seqs)
            .map(|_| Admission {
                _slot: Held {
                    gate: self.clone(),
                    slot: true,
                },
                place: place.clone(),
            })
            .collect())
    }

    /// Requests waiting for a batch slot (each counted once, whatever its `n`).
    pub fn queued(&self) -> usize {
        self.counts().queued
    }

    /// Sequences admitted and not finished: waiting, running, or on their way.
    pub fn admitted_seqs(&self) -> usize {
        self.counts().seqs
    }
}

/// One sequence's share of an admitted request: its batch slot until dropped, and its
/// request's queue place until it first runs ([`Admission::started`]).
#[derive(Debug)]
pub struct Admission {
    _slot: Held,
    place: Option<Arc<Held>>,
}

impl Admission {
    /// The sequence was scheduled: it waits no more. Its request leaves the queue once all
    /// its sequences have started (the last reference to the place is dropped).
    pub fn started(&mut self) {
        self.place = None;
    }
}

/// A count the gate gives back when this is dropped.
#[derive(Debug)]
struct Held {
    gate: Arc<QueueGate>,
    /// Which count: a batch slot (`seqs`) or a queue place (`queued`).
    slot: bool,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut c = self.gate.counts();
        let n = if self.slot {
            &mut c.seqs
        } else {
            &mut c.queued
        };
        *n = n.saturating_sub(1);
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
    fn only_requests_that_find_no_free_slot_take_a_queue_place() {
        // Batch 16, queue 4: a burst of 16 single requests on an idle server all get slots.
        let gate = QueueGate::new(16, 4);
        let mut held: Vec<Vec<Admission>> = (0..16)
            .map(|i| {
                gate.try_reserve(1)
                    .unwrap_or_else(|e| panic!("request {i}: {e}"))
            })
            .collect();
        assert_eq!((gate.admitted_seqs(), gate.queued()), (16, 0));
        // Four more wait, the fifth is refused.
        for _ in 0..4 {
            held.push(gate.try_reserve(1).expect("a queue place"));
        }
        assert_eq!(
            gate.try_reserve(1).map(drop),
            Err(AddRequestError::QueueFull { queued: 4 })
        );
        // A waiting sequence starts running: its place goes, its slot stays.
        held[16][0].started();
        assert_eq!((gate.admitted_seqs(), gate.queued()), (20, 3));
        // A finished sequence gives its slot back.
        held.remove(0);
        assert_eq!(gate.admitted_seqs(), 19);
        drop(held);
        assert_eq!((gate.admitted_seqs(), gate.queued()), (0, 0));
    }

    #[test]
    fn a_request_of_n_choices_takes_one_queue_place_and_n_slots() {
        let gate = QueueGate::new(16, 2);
        let mut big = gate.try_reserve(128).expect("n = 128 waits in one place");
        assert_eq!((gate.admitted_seqs(), gate.queued()), (128, 1));
        let other = gate.try_reserve(128).expect("a second place");
        assert_eq!(
            gate.try_reserve(1).map(drop),
            Err(AddRequestError::QueueFull { queued: 2 })
        );
        // The place is held until every one of its sequences has started.
        for a in &mut big[..127] {
            a.started();
        }
        assert_eq!(gate.queued(), 2);
        big[127].started();
        assert_eq!(gate.queued(), 1);
        drop((big, other));
        assert_eq!((gate.admitted_seqs(), gate.queued()), (0, 0));
    }

    /// Many threads reserving at once never take more places than there are.
    #[test]
    fn concurrent_reservations_never_overshoot() {
        // Two batch slots and a queue of three: five requests in all.
        let gate = QueueGate::new(2, 3);
        let taken: Vec<Admission> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    let gate = gate.clone();
                    s.spawn(move || {
                        (0..1000)
                            .filter_map(|_| gate.try_reserve(1).ok())
                            .flatten()
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().expect("thread"))
                .collect()
        });
        assert_eq!(taken.len(), 5);
        assert_eq!((gate.admitted_seqs(), gate.queued()), (5, 3));
    }
}
