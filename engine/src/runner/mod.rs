//! The model runner: turns a `SchedulerOutput` into one varlen batch, runs the model's
//! forward on the backend, and samples. It owns the model and the KV cache's device memory;
//! which blocks belong to whom is decided by the scheduler and arrives as block tables.

use crate::backend::sampling::{SampleRow, token_logprobs};
use crate::backend::{Backend, BackendError, BatchInputs, Result, SeqChunk};
use crate::kv_cache::{KvGroupSpec, StatePlan};
use crate::models::{KvStorage, Model};
use crate::scheduler::io::{RunnerOutput, SchedulerOutput, SeqOutput};

mod block_tables;
mod grammar;
#[cfg(test)]
mod grammar_tests;
mod slot_map;
mod speculative;

pub use block_tables::BlockTables;
pub use speculative::Speculation;

pub struct Runner<B: Backend, M: Model<B>> {
    pub backend: B,
    pub model: M,
    pub kv: KvStorage<B>,
    /// Speculative decoding with the model's MTP head, when enabled.
    spec: Option<Speculation>,
    /// Every running sequence's block tables, one set a KV group, kept from step to step and
    /// fed by the step's deltas.
    tables: Vec<BlockTables>,
    /// The null row of the block tables the backend keeps on the device, when it keeps them
    /// ([`Runner::keep_block_tables`]): steps then send only the deltas.
    null_row: Option<u32>,
    /// Grammar masks computed on workers while the step runs (`runner/grammar.rs`); off, the
    /// sampler computes each when it needs it (the same masks).
    grammar_overlap: bool,
}

impl<B: Backend, M: Model<B>> Runner<B, M> {
    /// A runner with a KV cache of `num_blocks` blocks and, for a model with recurrent state,
    /// `state_slots` state slots (sequences and checkpoints together).
    pub fn new(
        backend: B,
        model: M,
        num_blocks: usize,
        block_size: usize,
        state_slots: usize,
    ) -> Result<Self> {
        let mut kv = model.new_kv_storage(&backend, num_blocks, block_size)?;
        if model.state_spec().is_some() {
            kv.state = Some(model.new_state_storage(&backend, state_slots)?);
        }
        Ok(Self::with_kv(backend, model, kv))
    }

    /// A runner for a model with KV groups (sliding-window layers, [`Model::kv_windows`]):
    /// group `g`'s layers get `group_blocks[g]` blocks, as the scheduler's grouped manager
    /// hands them out.
    pub fn with_kv_groups(
        backend: B,
        model: M,
        groups: &[KvGroupSpec],
        group_blocks: &[usize],
        block_size: usize,
    ) -> Result<Self> {
        if !backend.kv_groups() {
            return Err(BackendError::Shape {
                op: "KV groups",
                message: format!("the {} backend runs no KV groups", backend.name()),
            });
        }
        let kv = model.new_grouped_kv_storage(&backend, groups, group_blocks, block_size)?;
        Ok(Self::with_kv(backend, model, kv))
    }

    fn with_kv(backend: B, model: M, kv: KvStorage<B>) -> Self {
        let groups = kv.group_blocks.len().max(1);
        Self {
            backend,
            model,
            kv,
            spec: None,
            tables: (0..groups).map(|_| BlockTables::default()).collect(),
            null_row: None,
            grammar_overlap: true,
        }
    }

    /// Compute grammar masks on worker threads while steps run (on by default), or when
    /// sampling (the tuning's `debug.grammar_overlap`): the tokens are the same either way.
    pub fn set_grammar_overlap(&mut self, on: bool) {
        self.grammar_overlap = on;
    }

    /// Let the backend keep `rows` block tables (one a running sequence: the scheduler's
    /// `max_num_seqs`) of `width` blocks from step to step, where it can (CUDA): a step then
    /// uploads the blocks its sequences gained, not every table.
    pub fn keep_block_tables(&mut self, rows: usize, width: usize) -> Result<()> {
        self.null_row = self
            .backend
            .keep_block_tables(self.tables.len(), rows, width)?;
        Ok(())
    }

    /// Requests that left (finished or aborted): the backend drops what it keeps for them
    /// (`Backend::end_sequences`). `execute` does this for its step's `finished`; a step
    /// with nothing to run calls it directly.
    pub fn end_sequences(&self, ids: &[crate::scheduler::io::RequestId]) {
        if !ids.is_empty() {
            self.backend.end_sequences(ids);
        }
    }

    /// Run one step.
    pub fn execute(&mut self, step: &SchedulerOutput) -> Result<RunnerOutput> {
        self.execute_with(step, &mut || {})
    }

    /// [`Runner::execute`], calling `launched` once the forward is queued on the device and
    /// before waiting for its tokens (for the step profile).
    pub fn execute_with(
        &mut self,
        step: &SchedulerOutput,
        launched: &mut dyn FnMut(),
    ) -> Result<RunnerOutput> {
        self.end_sequences(&step.finished);
        if step.seqs.is_empty() {
            return Ok(RunnerOutput::default());
        }
        for (g, tables) in self.tables.iter_mut().enumerate() {
            tables.apply(step, g)?;
            // The persisted tables must be the scheduler's full view (checked while both
            // exist).
            debug_assert!(
                step.seqs
                    .iter()
                    .all(|s| tables.row(s.table.slot) == block_tables::group_ids(s, g)),
                "a persisted block table of KV group {g} differs from the scheduler's"
            );
            if self.null_row.is_some() {
                let writes = block_tables::writes(step, g, self.kv.blocks_of(g))?;
                self.backend.write_block_tables(g, &writes)?;
            }
        }
        // Which rows of each chunk need logits: every row for prompt logprobs, else, when the
        // chunk reaches the end of the known tokens, its last own row and its drafts' rows.
        let chunks: Vec<SeqChunk<'_>> = step
            .seqs
            .iter()
            .map(|s| {
                let n = s.token_ids.len();
                let logits_rows = if s.want_prompt_logprobs {
                    (0..n).collect()
                } else if s.sample {
                    (n - 1 - s.num_drafts..n).collect()
                } else {
                    vec![]
                };
                SeqChunk {
                    tokens: &s.token_ids,
                    start_pos: s.start_pos,
                    block_table: &s.block_ids,
                    logits_rows,
                }
            })
            .collect();
        let vocab = self.model.vocab_size();
        if self.grammar_overlap {
            grammar::prefetch_step(step, vocab);
        }
        let (logits, spec_pass) = match self.spec.is_some() {
            true => {
                let (logits, pass) = self.forward_speculative(step, &chunks)?;
                (logits, Some(pass))
            }
            false => (self.forward(step, &chunks)?, None),
        };
        launched();

        // Rows to sample: each sampling chunk's last own row, then its drafts' rows, each
        // seeing the tokens before it (the drafts it follows included).
        let contexts: Vec<Vec<u32>> = step
            .seqs
            .iter()
            .map(|s| match s.num_drafts {
                0 => Vec::new(),
                d => {
                    let mut ctx = Vec::with_capacity(s.all_token_ids.len() + d);
                    ctx.extend_from_slice(&s.all_token_ids);
                    ctx.extend_from_slice(&s.token_ids[s.token_ids.len() - d..]);
                    ctx
                }
            })
            .collect();
        let mut sample_rows = Vec::new();
        let mut row = 0;
        for ((s, c), ctx) in step.seqs.iter().zip(&chunks).zip(&contexts) {
            row += c.logits_rows.len();
            if s.sample {
                let known = s.all_token_ids.len();
                for j in 0..=s.num_drafts {
                    sample_rows.push(SampleRow {
                        logits_row: row - 1 - s.num_drafts + j,
                        params: &s.sampling,
                        all_token_ids: if j == 0 {
                            &s.all_token_ids
                        } else {
                            &ctx[..known + j]
                        },
                        num_prompt_tokens: s.num_prompt_tokens,
                        seq: Some(s.req_id),
                    });
                }
            }
        }
        let mut sampled = self.backend.sample(&logits, &sample_rows)?.into_iter();
        // Prompt logprobs are rare (scoring); only then do the logits come to the host.
        let host_logits = if step.seqs.iter().any(|s| s.want_prompt_logprobs) {
            self.backend.to_host(&logits)?
        } else {
            Vec::new()
        };

        let mut out = RunnerOutput {
            seqs: Vec::with_capacity(step.seqs.len()),
        };
        let mut row = 0;
        for (s, c) in step.seqs.iter().zip(&chunks) {
            let mut seq_out = SeqOutput {
                req_id: s.req_id,
                ..SeqOutput::default()
            };
            if s.want_prompt_logprobs {
                let k = s.sampling.prompt_logprobs.unwrap_or(0) as usize;
                for (j, _) in c.logits_rows.iter().enumerate() {
                    let p = s.start_pos + j;
                    if p + 1 < s.num_prompt_tokens {
                        let r = row + j;
                        let target = s.all_token_ids[p + 1];
                        seq_out.prompt_logprobs.push(token_logprobs(
                            &host_logits[r * vocab..(r + 1) * vocab],
                            target,
                            k,
                        ));
                    }
                }
            }
            if s.sample {
                // The drafts are accepted while each is what its row sampled; the row after
                // the last accepted one gives the next token.
                let rows: Vec<_> = sampled.by_ref().take(s.num_drafts + 1).collect();
                let drafts = &s.token_ids[s.token_ids.len() - s.num_drafts..];
                let accepted = match &self.spec {
                    Some(spec) => spec.accepted(s, drafts, &rows),
                    None => 0,
                };
                let mut rows = rows.into_iter();
                for (&d, r) in drafts[..accepted].iter().zip(rows.by_ref()) {
                    seq_out.accepted.push(d);
                    seq_out.accepted_logprobs.extend(r.logprobs);
                }
                if let Some(x) = rows.next() {
                    seq_out.sampled = Some(x.token_id);
                    seq_out.sampled_logprobs = x.logprobs;
                }
            }
            row += c.logits_rows.len();
            out.seqs.push(seq_out);
        }
        if let Some(pass) = spec_pass {
            self.finish_speculative(step, pass, &mut out)?;
        }
        grammar::after_step(step, &mut out, vocab, self.grammar_overlap);
        Ok(out)
    }

    /// The step's logits: a decode step (one sampled token a sequence) padded to a graph
    /// bucket and replayed as a graph where the backend has them, else the plain forward.
    fn forward(&mut self, step: &SchedulerOutput, chunks: &[SeqChunk<'_>]) -> Result<B::Tensor> {
        let Self {
            backend,
            model,
            kv,
            null_row,
            tables,
            ..
        } = self;
        let bs = kv.block_size;
        let groups = tables.len();
        // Recurrent-state models replay graphs for steps that only move their states on (no
        // slot started from zeros or a checkpoint, no checkpoint saved): a graph's launches
        // are fixed. Padding rows get no state (`StatePlan::padding`).
        let decode = step.seqs.iter().all(|s| {
            s.token_ids.len() == 1
                && s.sample
                && !s.want_prompt_logprobs
                && s.state.as_ref().is_none_or(StatePlan::is_plain_continue)
        });
        let bucket = backend
            .graph_buckets()
            .filter(|_| decode)
            .and_then(|b| b.iter().copied().find(|&n| n >= chunks.len()));
        let Some(bucket) = bucket else {
            let mut host = block_tables::step_batch(*null_row, step, bs, chunks, (1, groups));
            // Each sequence's recurrent-state slot (models with linear-attention layers).
            host.states = step.seqs.iter().filter_map(|s| s.state.clone()).collect();
            let batch = backend.prepare_batch(&host)?;
            return model.forward(backend, &host, &batch, kv);
        };
        // Padding rows: token 0 at position 0 in the reserved null block 0, whose contents
        // nobody reads; their logits are computed and ignored.
        let mut padded = chunks.to_vec();
        padded.resize(
            bucket,
            SeqChunk {
                tokens: &[0],
                start_pos: 0,
                block_table: &[0],
                logits_rows: vec![0],
            },
        );
        let width = graph_width(chunks);
        let mut host = block_tables::step_batch(*null_row, step, bs, &padded, (width, groups));
        if step.seqs.iter().any(|s| s.state.is_some()) {
            let plans: Option<Vec<StatePlan>> = step.seqs.iter().map(|s| s.state.clone()).collect();
            host.states = plans.ok_or_else(|| BackendError::Shape {
                op: "decode graph",
                message: "a sequence of a recurrent-state model has no state slot".to_string(),
            })?;
            host.states.resize(bucket, StatePlan::padding());
        }
        check_replay_inputs(&host, model.vocab_size(), kv)?;
        let graphed =
            backend.graph_forward(&host, &mut |batch| model.forward(backend, &host, batch, kv))?;
        match graphed {
            Some(logits) => Ok(logits),
            None => {
                let batch = backend.prepare_batch(&host)?;
                model.forward(backend, &host, &batch, kv)
            }
        }
    }
}

/// A graph's block-table width: the step's widest table rounded up to a power of two (at least
/// 4), so a few graphs cover every context length.
fn graph_width(chunks: &[SeqChunk<'_>]) -> usize {
    chunks
        .iter()
        .map(|c| c.block_table.len())
        .max()
        .unwrap_or(1)
        .next_power_of_two()
        .max(4)
}

/// A replayed graph does not re-run the ops' range checks: token ids against the vocabulary,
/// block ids against the cache (the kept tables' writes are checked as they are made), and the
/// state slots its kernels write, own and saved to, against the state storage (their sharing
/// is the backend's graph batch's to check, `CudaBatch::refill`).
fn check_replay_inputs<B: Backend>(
    host: &BatchInputs,
    vocab: usize,
    kv: &KvStorage<B>,
) -> Result<()> {
    let err = |message: String| BackendError::Shape {
        op: "decode graph",
        message,
    };
    if let Some(t) = host.token_ids.iter().find(|&&t| t as usize >= vocab) {
        return Err(err(format!(
            "token id {t} is outside the vocabulary of {vocab}"
        )));
    }
    for (g, group) in std::iter::once(host).chain(&host.groups).enumerate() {
        let blocks = kv.blocks_of(g);
        if let Some(b) = group.block_tables.iter().find(|&&b| b as usize >= blocks) {
            return Err(err(format!(
                "block {b} is outside the cache of {blocks} (KV group {g})"
            )));
        }
    }
    let slots = kv.state.as_ref().map_or(0, |st| st.num_slots);
    let named = host
        .states
        .iter()
        .filter(|p| !p.is_padding())
        .flat_map(|p| std::iter::once(p.slot).chain(p.saves.iter().map(|sv| sv.slot)));
    for slot in named {
        if slot as usize >= slots {
            return Err(err(format!(
                "state slot {slot} is outside the {slots} slots"
            )));
        }
    }
    Ok(())
}
