//! Scheduler configuration and the errors of its public calls.

use crate::kv_cache::{KvCacheError, StateCacheConfig};
use crate::scheduler::io::RequestId;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// `--max-batch-size`: sequences in one step.
    pub max_num_seqs: usize,
    /// Token budget of one step (prefill chunks plus decodes).
    pub max_num_batched_tokens: usize,
    /// Tokens per KV block.
    pub block_size: usize,
    /// KV blocks, the null block included.
    pub num_blocks: usize,
    /// Longest sequence (prompt + output) the model accepts.
    pub max_model_len: usize,
    /// `--enable-prefix-caching`.
    pub enable_prefix_caching: bool,
    /// Waiting requests beyond which `add_request` refuses new ones.
    pub max_queued_requests: usize,
    /// Recurrent-state slots and checkpoints, for models with linear-attention layers.
    pub state: Option<StateCacheConfig>,
    /// `--speculative`: drafts from the model's MTP head (`None`: off).
    pub speculative: Option<SpeculativeConfig>,
}

/// `--speculative --num-drafts N --speculative-max-batch M`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpeculativeConfig {
    /// Tokens the MTP head drafts a step (1 to [`MAX_DRAFTS`]).
    pub num_drafts: usize,
    /// Drafting pauses while more sequences than this are running (a verify step costs more
    /// than a decode step, and at large batches the GPU has no idle bandwidth to spend).
    pub max_batch: usize,
}

/// Most drafts a step (`--num-drafts`).
pub const MAX_DRAFTS: usize = 16;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SchedulerConfigError {
    #[error("invalid scheduler config: {0} must be at least 1")]
    Zero(&'static str),
    #[error("invalid scheduler config: num_drafts {0} is more than {MAX_DRAFTS}")]
    TooManyDrafts(usize),
    #[error(transparent)]
    KvCache(#[from] KvCacheError),
}

impl SchedulerConfig {
    pub(crate) fn validate(&self) -> Result<(), SchedulerConfigError> {
        if let Some(spec) = self.speculative
            && spec.num_drafts > MAX_DRAFTS
        {
            return Err(SchedulerConfigError::TooManyDrafts(spec.num_drafts));
        }
        for (name, v) in [
            ("num_drafts", self.speculative.map_or(1, |s| s.num_drafts)),
            ("max_num_seqs", self.max_num_seqs),
            ("max_num_batched_tokens", self.max_num_batched_tokens),
            ("max_model_len", self.max_model_len),
            ("max_queued_requests", self.max_queued_requests),
        ] {
            if v == 0 {
                return Err(SchedulerConfigError::Zero(name));
            }
        }
        Ok(())
    }
}

/// Why `add_request` refused a request. `QueueFull` is retryable (HTTP 429); the others are
/// the client's fault (HTTP 400) and the server normally catches them first.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AddRequestError {
    #[error("cannot queue request {id}: {max} requests are already waiting; retry later")]
    QueueFull { id: RequestId, max: usize },
    #[error("cannot add request {0}: a request with this id is already scheduled")]
    DuplicateId(RequestId),
    #[error("cannot add request {0}: the prompt is empty")]
    EmptyPrompt(RequestId),
    #[error("cannot add request {0}: max_tokens must be at least 1")]
    ZeroMaxTokens(RequestId),
    #[error(
        "cannot add request {id}: its prompt of {prompt_tokens} tokens leaves no room to \
         generate under the model's maximum context length of {max_model_len} tokens"
    )]
    PromptTooLong {
        id: RequestId,
        prompt_tokens: usize,
        max_model_len: usize,
    },
    #[error(
        "cannot add request {id}: {tokens} tokens (prompt + max_tokens) need {blocks_needed} KV \
         cache blocks but the whole cache has {blocks_total}; lower max_tokens or shorten the prompt"
    )]
    ExceedsKvCache {
        id: RequestId,
        tokens: usize,
        blocks_needed: usize,
        blocks_total: usize,
    },
}
