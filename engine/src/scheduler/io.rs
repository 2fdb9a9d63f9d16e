//! The plain data that crosses between the scheduler and the runner each step.
//!
//! `EngineCore::step()` is `schedule()` → `runner.execute(&SchedulerOutput)` →
//! `scheduler.update_from_output(&SchedulerOutput, &RunnerOutput)`. Both structs are plain
//! Vecs of ids and ints, so scheduler tests fabricate runner outputs and need no model.

use std::sync::Arc;

pub use crate::kv_cache::{StateInit, StatePlan, StateSave};
use crate::sampling_params::SamplingParams;

/// Engine-wide request id, unique for the life of the process.
pub type RequestId = u64;

/// One sequence's share of a step: the tokens it computes now and where they go.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduledSeq {
    pub req_id: RequestId,
    /// Tokens fed through the model this step: `all_tokens[num_computed..num_computed + n]`.
    pub token_ids: Vec<u32>,
    /// Position of `token_ids[0]` in the sequence (= tokens already in the KV cache).
    pub start_pos: usize,
    /// The sequence's whole block table after this step's allocation, in order: the
    /// scheduler's full view, kept while the runner's persistent tables (fed by `table`) are
    /// checked against it.
    pub block_ids: Vec<u32>,
    /// What changed in the block table since the runner last saw this sequence.
    pub table: BlockTableDelta,
    /// The tables of KV groups 1.. (`block_ids` and `table` are group 0's), for a model with
    /// sliding-window layers (`kv_cache/grouped.rs`); empty with one group. A sliding group's
    /// entries behind the window are the null block.
    pub group_tables: Vec<GroupTable>,
    /// True when this chunk reaches the end of the known tokens, so the runner samples one
    /// new token from the logits of the last row.
    pub sample: bool,
    /// Rows of this chunk whose next-token log-probabilities the request asked for (prompt
    /// logprobs, `echo` + `logprobs`): positions `start_pos..start_pos + n` that lie inside the
    /// prompt. Empty for most requests.
    pub want_prompt_logprobs: bool,
    /// Every token the request has so far (prompt + generated), for penalties and sampling.
    /// Shared, not copied, step to step.
    pub all_token_ids: Arc<Vec<u32>>,
    /// Number of prompt tokens at the front of `all_token_ids`.
    pub num_prompt_tokens: usize,
    pub sampling: Arc<SamplingParams>,
    /// The sequence's recurrent-state slot this step (models with linear-attention layers).
    pub state: Option<StatePlan>,
    /// Draft tokens at the end of `token_ids` (speculative decoding): not yet the request's
    /// tokens. The runner samples every row from the one before the drafts on and accepts the
    /// drafts while they match; `state` covers the tokens before them only.
    pub num_drafts: usize,
    /// Drafts the MTP head proposes after this step, for the next (0: none; a model with an
    /// MTP head still runs it over the chunk so that its cache stays complete).
    pub propose: usize,
}

/// One KV group's block table of a scheduled sequence: the whole table and its change.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupTable {
    pub block_ids: Vec<u32>,
    pub table: BlockTableDelta,
}

/// A block table's change for one step (vLLM's `NewRequestData` / `CachedRequestData` split,
/// for the table): a sequence new to its row sends its whole table once, a running one only
/// the block ids allocated since its last step. A sliding group's table also changes at its
/// front, where blocks behind the window become the null block: the change then starts at the
/// first entry released since the last step and runs to the end.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BlockTableDelta {
    /// The sequence's row in the runner's persistent tables, stable from admission until it
    /// finishes or is preempted, then reused; below `max_num_seqs`.
    pub slot: u32,
    /// True when the sequence is new to the row (admitted, or readmitted after a preemption):
    /// `new_block_ids` is then its whole table.
    pub new: bool,
    /// Index in the row of `new_block_ids[0]`.
    pub start: usize,
    /// Block ids to write at `start..`.
    pub new_block_ids: Vec<u32>,
    /// The row's length after the change.
    pub len: usize,
}

/// What the scheduler decided for one step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SchedulerOutput {
    /// Sequences to run, in batch order (running first, then newly admitted, FIFO).
    pub seqs: Vec<ScheduledSeq>,
    /// Requests preempted this step (their blocks were freed; they recompute later).
    pub preempted: Vec<RequestId>,
    /// Requests that left since the last step (finished or aborted): the runner drops any
    /// state it keeps for them.
    pub finished: Vec<RequestId>,
    /// Sum of `token_ids.len()` over `seqs`.
    pub num_batched_tokens: usize,
}

/// A token and its log-probability with the top alternatives, as the API reports them.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprobs {
    pub token_id: u32,
    pub logprob: f32,
    /// Top alternatives, best first, `(token_id, logprob)`.
    pub top: Vec<(u32, f32)>,
}

/// The runner's result for one scheduled sequence, same order as `SchedulerOutput::seqs`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SeqOutput {
    pub req_id: RequestId,
    /// The token sampled this step (only when `ScheduledSeq::sample`).
    pub sampled: Option<u32>,
    /// Log-probability data for the sampled token when the request asked for logprobs.
    pub sampled_logprobs: Option<TokenLogprobs>,
    /// For `want_prompt_logprobs`: one entry per row of the chunk that predicts a prompt token,
    /// i.e. the log-probability of `all_token_ids[p + 1]` given the tokens up to `p`.
    pub prompt_logprobs: Vec<TokenLogprobs>,
    /// The drafts accepted this step, in order (a prefix of the scheduled ones): the request's
    /// next tokens, before `sampled`.
    pub accepted: Vec<u32>,
    /// Log-probability data for `accepted`, when the request asked for logprobs.
    pub accepted_logprobs: Vec<TokenLogprobs>,
    /// The drafts the MTP head proposes for the next step (`ScheduledSeq::propose` at most).
    pub drafts: Vec<u32>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunnerOutput {
    pub seqs: Vec<SeqOutput>,
}
