//! What the scheduler hands the output side after each step, and its stats for metrics.

use crate::kv_cache::PrefixCacheStats;
use crate::scheduler::io::{RequestId, TokenLogprobs};

/// Why a request stopped generating.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    /// An EOS id (unless `ignore_eos`) or one of `stop_token_ids` was sampled, after at least
    /// `min_tokens` other tokens. `token` is the last of the request's output tokens; the
    /// output side decides whether to show it.
    Stop { token: u32 },
    /// A stop string matched; the output side detected it and called `finish_request`.
    StopString(String),
    /// `max_tokens` generated, or the sequence reached `max_model_len`.
    Length,
    /// Aborted (client gone, or the engine gave up on it).
    Abort,
}

impl FinishReason {
    /// The OpenAI `finish_reason` string.
    pub fn as_openai_str(&self) -> &'static str {
        match self {
            Self::Stop { .. } | Self::StopString(_) => "stop",
            Self::Length => "length",
            Self::Abort => "abort",
        }
    }
}

/// Final counts of a finished request, for `usage` and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedRequest {
    pub reason: FinishReason,
    pub num_prompt_tokens: usize,
    /// Output tokens, the stopping token included.
    pub num_generated_tokens: usize,
    /// Prompt tokens served from the prefix cache when the request was first admitted.
    pub num_cached_prompt_tokens: usize,
    /// Times the request was preempted and recomputed.
    pub num_preemptions: u32,
}

/// What one step produced for one request. Only requests with something to report get one.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineEvent {
    pub req_id: RequestId,
    /// Tokens this step added to the output: zero or one, or with speculative decoding the
    /// accepted drafts and one more.
    pub new_token_ids: Vec<u32>,
    /// Log-probabilities of `new_token_ids`, when the request asked for logprobs.
    pub new_logprobs: Vec<TokenLogprobs>,
    /// Prompt log-probabilities computed this step. Across a request's events they come in
    /// order with no gap or repeat: entry `k` overall predicts prompt token `k + 1`.
    pub prompt_logprobs: Vec<TokenLogprobs>,
    /// Set on the request's last event.
    pub finished: Option<FinishedRequest>,
}

impl EngineEvent {
    pub(crate) fn new(req_id: RequestId) -> Self {
        Self {
            req_id,
            new_token_ids: Vec::new(),
            new_logprobs: Vec::new(),
            prompt_logprobs: Vec::new(),
            finished: None,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.new_token_ids.is_empty() && self.prompt_logprobs.is_empty() && self.finished.is_none()
    }
}

/// Scheduler gauges and counters for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SchedulerStats {
    pub num_running: usize,
    pub num_waiting: usize,
    /// Fraction of KV blocks held by requests (cached-but-free blocks count as free).
    pub kv_cache_usage: f32,
    /// Prefix-cache queries and hits in tokens since start.
    pub prefix_cache: PrefixCacheStats,
    /// Preemptions since start.
    pub num_preemptions: u64,
    /// Tokens scheduled in the last step.
    pub num_batched_tokens: usize,
    /// Speculative decoding's counters since start (all zero when it is off).
    pub spec: SpecDecodeStats,
}

/// Speculative decoding's counters, as vLLM names them in `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SpecDecodeStats {
    /// Verify steps of a sequence with at least one draft.
    pub num_drafts: u64,
    /// Draft tokens verified, and those accepted.
    pub num_draft_tokens: u64,
    pub num_accepted_tokens: u64,
    /// By draft position (0: the first draft of a step): drafts verified there, and accepted.
    pub proposed_per_pos: [u64; super::MAX_DRAFTS],
    pub accepted_per_pos: [u64; super::MAX_DRAFTS],
    /// Steps in which the ladder allowed no drafts (`SpeculativeConfig::ladder`: too many
    /// sequences running).
    pub num_paused_steps: u64,
    /// Drafts the MTP head proposes a sequence in the last step (the policy's choice: 0 while
    /// paused or while acceptance does not pay for drafts).
    pub drafts_per_step: usize,
    /// The policy's estimate, by position, of a draft's acceptance when the drafts before it
    /// were accepted (an exponentially weighted average).
    pub acceptance: [f64; super::MAX_DRAFTS],
    /// What a draft adds to a step at the last step's batch size, in plain steps: as the
    /// engine timed its decode steps, or `--speculative-draft-cost` before it has.
    pub draft_cost: f64,
}

impl SpecDecodeStats {
    /// One sequence's verify step: `proposed` drafts, the first `accepted` of them accepted.
    pub fn record(&mut self, proposed: usize, accepted: usize) {
        if proposed == 0 {
            return;
        }
        self.num_drafts += 1;
        self.num_draft_tokens += proposed as u64;
        self.num_accepted_tokens += accepted as u64;
        for p in 0..proposed.min(super::MAX_DRAFTS) {
            self.proposed_per_pos[p] += 1;
            if p < accepted {
                self.accepted_per_pos[p] += 1;
            }
        }
    }

    /// Accepted drafts per verify step (the mean accepted length less the bonus token).
    pub fn mean_accepted(&self) -> f64 {
        if self.num_drafts == 0 {
            0.0
        } else {
            self.num_accepted_tokens as f64 / self.num_drafts as f64
        }
    }
}
