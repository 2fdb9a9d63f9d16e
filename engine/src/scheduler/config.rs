//! Scheduler configuration and the errors of its public calls.

use crate::kv_cache::{KvCacheError, StateCacheConfig};

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
        ] {
            if v == 0 {
                return Err(SchedulerConfigError::Zero(name));
            }
        }
        Ok(())
    }
}
