//! A request as the scheduler tracks it: its tokens, how far its KV has caught up, and the
//! bookkeeping its output events need.

use std::sync::Arc;
use std::time::Instant;

use crate::sampling_params::SamplingParams;
use crate::scheduler::io::RequestId;

#[derive(Debug)]
pub struct Request {
    pub id: RequestId,
    /// Prompt then generated tokens, shared with each step's `ScheduledSeq`.
    all_token_ids: Arc<Vec<u32>>,
    /// Sampled tokens not yet in `all_token_ids`. They are appended at the next `schedule()`,
    /// after the engine has dropped the previous step's `SchedulerOutput`: appending while it
    /// still shares the `Arc` would copy the whole sequence every step.
    pending: Vec<u32>,
    pub num_prompt_tokens: usize,
    pub sampling: Arc<SamplingParams>,
    pub arrival: Instant,
    /// Tokens whose KV is in the cache; catches up to `num_tokens()`.
    pub num_computed_tokens: usize,
    /// Prompt tokens served by the prefix cache on first admission (`None` until admitted).
    pub num_cached_prompt_tokens: Option<usize>,
    /// Prompt-logprob rows already reported (kept across preemptions so none repeats).
    pub num_prompt_logprobs_sent: usize,
    pub num_preemptions: u32,
    /// Draft tokens the MTP head proposed last step (speculative decoding), to verify next.
    pub drafts: Vec<u32>,
}

impl Request {
    pub fn new(
        id: RequestId,
        prompt: Vec<u32>,
        sampling: Arc<SamplingParams>,
        arrival: Instant,
    ) -> Self {
        Self {
            id,
            num_prompt_tokens: prompt.len(),
            all_token_ids: Arc::new(prompt),
            pending: Vec::new(),
            sampling,
            arrival,
            num_computed_tokens: 0,
            num_cached_prompt_tokens: None,
            num_prompt_logprobs_sent: 0,
            num_preemptions: 0,
            drafts: Vec::new(),
        }
    }

    /// Prompt plus generated tokens.
    pub fn num_tokens(&self) -> usize {
        self.all_token_ids.len() + self.pending.len()
    }

    pub fn num_output_tokens(&self) -> usize {
        self.num_tokens() - self.num_prompt_tokens
    }

    /// Output tokens it may still generate: up to `max_tokens`, and to `max_model_len` tokens
    /// in all.
    pub fn num_remaining(&self, max_model_len: usize) -> usize {
        let by_tokens = self
            .sampling
            .max_tokens
            .saturating_sub(self.num_output_tokens());
        by_tokens.min(max_model_len.saturating_sub(self.num_tokens()))
    }

    /// Tokens not yet in the KV cache.
    pub fn num_uncomputed_tokens(&self) -> usize {
        self.num_tokens() - self.num_computed_tokens
    }

    /// Every token the request has, pending ones appended first.
    pub fn all_token_ids(&mut self) -> &Arc<Vec<u32>> {
        if !self.pending.is_empty() {
            Arc::make_mut(&mut self.all_token_ids).extend_from_slice(&self.pending);
            self.pending.clear();
        }
        &self.all_token_ids
    }

    /// The tokens whose KV may be computed already: all but the pending ones.
    pub fn computable_token_ids(&self) -> &[u32] {
        &self.all_token_ids
    }

    pub fn push_output_token(&mut self, token: u32) {
        self.pending.push(token);
    }

    /// Whether `ScheduledSeq::want_prompt_logprobs` holds for the chunk
    /// `start..start + n`: it covers a prompt row (one predicting a prompt token) that has not
    /// been reported yet.
    pub fn wants_prompt_logprobs(&self, start: usize, n: usize) -> bool {
        self.sampling.prompt_logprobs.is_some()
            && start.max(self.num_prompt_logprobs_sent)
                < (start + n).min(self.num_prompt_tokens.saturating_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_without_copying_when_unshared() {
        let mut r = Request::new(1, vec![1, 2, 3], Arc::default(), Instant::now());
        let before = Arc::as_ptr(r.all_token_ids());
        r.push_output_token(9);
        assert_eq!(r.num_tokens(), 4);
        assert_eq!(r.computable_token_ids(), &[1, 2, 3]);
        assert_eq!(
            Arc::as_ptr(r.all_token_ids()),
            before,
            "same allocation when unshared"
        );
        assert_eq!(**r.all_token_ids(), vec![1, 2, 3, 9]);

        // A clone still held elsewhere keeps its old contents.
        let old = Arc::clone(r.all_token_ids());
        r.push_output_token(10);
        assert_eq!(r.all_token_ids().len(), 5);
        assert_eq!(old.len(), 4);
    }

    #[test]
    fn prompt_logprob_rows() {
        let params = SamplingParams {
            prompt_logprobs: Some(1),
            ..SamplingParams::default()
        };
        let mut r = Request::new(1, vec![0; 10], Arc::new(params), Instant::now());
        // Rows 0..9 predict prompt tokens 1..10; row 9 predicts the first output token.
        assert!(r.wants_prompt_logprobs(0, 4));
        assert!(r.wants_prompt_logprobs(8, 2));
        assert!(!r.wants_prompt_logprobs(9, 1));
        r.num_prompt_logprobs_sent = 6;
        assert!(!r.wants_prompt_logprobs(0, 6), "already reported");
        assert!(r.wants_prompt_logprobs(0, 7));
        let plain = Request::new(2, vec![0; 10], Arc::default(), Instant::now());
        assert!(!plain.wants_prompt_logprobs(0, 10));
    }
}
