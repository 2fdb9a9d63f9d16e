//! Scheduler configuration and the errors of its public calls.

use crate::kv_cache::{KvCacheError, StateCacheConfig};

use super::draft_ladder::DraftLadder;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SchedulerConfig {
    /// `--max-batch-size`: sequences in one step.
    pub max_num_seqs: usize,
    /// Token budget of one step (prefill chunks plus decodes).
    pub max_num_batched_tokens: usize,
    /// `--prefill-chunk-with-decodes`: the most prompt tokens a step takes while a running
    /// sequence decodes (`None`: the whole budget). A step with no decode rows still takes the
    /// whole budget, so a prompt alone keeps its time to first token.
    pub max_prefill_with_decodes: Option<usize>,
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

/// `--speculative` with `--speculative-ladder` (or `--num-drafts N --speculative-max-batch M`,
/// the ladder `1:N,M+1:0`) and `--speculative-draft-cost`: see `draft_policy.rs`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpeculativeConfig {
    /// The most drafts a step by running sequences (a verify step costs more than a decode
    /// step, the more so the larger the batch, until drafts stop paying).
    pub ladder: DraftLadder,
    /// What one draft adds to a step's time, as a fraction of a plain decode step; with the
    /// acceptance measured so far it decides how many of the ladder's drafts pay (0: all).
    pub draft_cost: f64,
}

impl SpeculativeConfig {
    /// Up to `num_drafts` drafts a step while at most `max_batch` sequences run, none above;
    /// drafts free (no acceptance policy): the engine before adaptive drafting, for tests.
    pub fn flat(num_drafts: usize, max_batch: usize) -> Self {
        Self {
            ladder: DraftLadder::flat(num_drafts, max_batch),
            draft_cost: 0.0,
        }
    }

    /// Drafts a step at most, at any batch size.
    pub fn num_drafts(&self) -> usize {
        self.ladder.max_drafts()
    }
}

/// Most drafts a step (`--num-drafts`).
pub const MAX_DRAFTS: usize = 16;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SchedulerConfigError {
    #[error("invalid scheduler config: {0} must be at least 1")]
    Zero(&'static str),
    #[error("invalid scheduler config: num_drafts {0} is more than {MAX_DRAFTS}")]
    TooManyDrafts(usize),
    #[error("invalid scheduler config: draft_cost {0} is not a number at least 0")]
    DraftCost(f64),
    #[error(
        "invalid scheduler config: a model with recurrent state cannot keep sliding-window KV groups"
    )]
    GroupsWithState,
    #[error(transparent)]
    KvCache(#[from] KvCacheError),
}

impl SchedulerConfig {
    pub(crate) fn validate(&self) -> Result<(), SchedulerConfigError> {
        if let Some(spec) = self.speculative {
            if spec.num_drafts() > MAX_DRAFTS {
                return Err(SchedulerConfigError::TooManyDrafts(spec.num_drafts()));
            }
            if !(spec.draft_cost >= 0.0 && spec.draft_cost.is_finite()) {
                return Err(SchedulerConfigError::DraftCost(spec.draft_cost));
            }
        }
        for (name, v) in [
            ("num_drafts", self.speculative.map_or(1, |s| s.num_drafts())),
            ("max_num_seqs", self.max_num_seqs),
            ("max_num_batched_tokens", self.max_num_batched_tokens),
            ("max_model_len", self.max_model_len),
            (
                "max_prefill_with_decodes",
                self.max_prefill_with_decodes.unwrap_or(1),
            ),
        ] {
            if v == 0 {
                return Err(SchedulerConfigError::Zero(name));
            }
        }
        Ok(())
    }
}
