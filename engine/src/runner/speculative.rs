//! Speculative decoding with the model's MTP head (`--speculative --num-drafts N`): the
//! runner's half. The scheduler hands a decode step its request's last token followed by the
//! drafts proposed the step before (`ScheduledSeq::num_drafts`); the runner
//!
//! 1. runs the target over the chunk, saving each drafting sequence's recurrent state after
//!    each of its rows into scratch slots (models with linear-attention layers);
//! 2. samples every row from the last own token on, row `j` seeing the drafts before it, and
//!    accepts the drafts while each equals what the row before it sampled. The drafts are the
//!    head's argmax (a point mass), so sampling each row from the target and comparing is
//!    exact rejection sampling: the output distribution is the target's, and since a draw is a
//!    pure function of (seed, output index, logits), greedy and seeded outputs are token for
//!    token those without speculation. The row after the last accepted draft gives one more
//!    token;
//! 3. rolls back what the rejected drafts left: keys and values need nothing (the scheduler
//!    counts only accepted tokens as computed, and the next step overwrites the rest), the
//!    recurrent state is the scratch slot of the last accepted row, which the sequence's slot
//!    now names (`runner/slot_map.rs`: a swap of two ids, no copy);
//! 4. runs the MTP head over every row of every chunk (row `i` with the token after it and the
//!    target's hidden state), which keeps the head's own KV cache layer complete, and from the
//!    last accepted row drafts the next token; then chains the head on its own output for the
//!    rest of the drafts (`ScheduledSeq::propose`), as far as the sequence's blocks reach.
//!
//! Forced acceptance (the tuning's `debug.spec_force_accept`, `METRALE_SPEC_FORCE_ACCEPT`) is
//! a test-only switch for benchmarks on random weights, whose drafts
//! are never right: it accepts each draft with a given probability whatever the target says
//! (the output is then not the model's).

use crate::backend::sampling::{SampleRow, Sampled};
use crate::backend::{Backend, BackendError, BatchInputs, Result, SeqChunk};
use crate::kv_cache::StatePlan;
use crate::models::{KvStorage, Model};
use crate::sampling_params::SamplingParams;
use crate::scheduler::io::{RunnerOutput, ScheduledSeq, SchedulerOutput, StateSave};

use super::Runner;
use super::slot_map::SlotMap;

/// The runner's speculative-decoding settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Speculation {
    /// Drafts a sequence verifies in a step at most.
    pub num_drafts: usize,
    /// Drafts verified in one step at most, all sequences together (a scratch state slot
    /// each: `SpeculativeConfig::ladder`'s `max_drafts_in_step`).
    pub max_step_drafts: usize,
    /// The first scratch state slot, after the pool's slots. The drafting sequences of a step
    /// take one slot a draft, in order.
    scratch_base: usize,
    /// Accept each draft with this probability regardless of the target, for measuring
    /// throughput at a chosen acceptance rate on random weights (test only: the output is not
    /// the model's; the tuning's `debug.spec_force_accept`).
    pub force_accept: Option<f64>,
    /// Which row of the state tensors each slot (pool, checkpoints, scratch) lives in.
    slots: SlotMap,
}

/// What the target pass leaves for the MTP pass.
pub(super) struct TargetPass<T> {
    /// The final-normed hidden state of every row `[T, H]`.
    hidden: T,
}

impl Speculation {
    /// The scratch slot holding a drafting sequence's state after its own tokens and
    /// `accepted` drafts, `offset` being the drafts of the step's drafting sequences before it.
    fn scratch(&self, offset: usize, accepted: usize) -> u32 {
        (self.scratch_base + offset + accepted) as u32
    }

    /// How many of `drafts` are accepted, given what the rows sampled (`rows[j]` from the row
    /// before draft `j`).
    pub(super) fn accepted(&self, s: &ScheduledSeq, drafts: &[u32], rows: &[Sampled]) -> usize {
        match self.force_accept {
            Some(rate) => (0..drafts.len())
                .take_while(|&j| unit_noise(s.req_id, s.start_pos + j) < rate)
                .count(),
            None => drafts
                .iter()
                .zip(rows)
                .take_while(|(d, r)| **d == r.token_id)
                .count(),
        }
    }
}

/// Whether a speculative step is a plain verify step, whose launches a graph can fix: every
/// sequence feeds its last token and the same number of drafts and samples, wants no prompt
/// log-probabilities, and only moves its recurrent state on (the scratch saves the step adds
/// are the same for every such step of its shape).
fn uniform_verify(step: &SchedulerOutput) -> bool {
    let drafts = step.seqs.first().map_or(0, |s| s.num_drafts);
    step.seqs.iter().all(|s| {
        s.num_drafts == drafts
            && s.token_ids.len() == drafts + 1
            && s.sample
            && !s.want_prompt_logprobs
            && s.state.as_ref().is_none_or(StatePlan::is_plain_continue)
    })
}

/// A number in `[0, 1)`, a pure function of (request, position).
fn unit_noise(req: u64, pos: usize) -> f64 {
    let mut z = req
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(pos as u64)
        .wrapping_add(0x6A09_E667_F3BC_C909);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

fn spec_err(message: String) -> BackendError {
    BackendError::Shape {
        op: "speculative decoding",
        message,
    }
}

impl<B: Backend, M: Model<B>> Runner<B, M> {
    /// Turn speculative decoding on: up to `num_drafts` drafts a sequence and `max_step_drafts`
    /// drafts a step in all. Reallocates the recurrent-state storage (call before serving)
    /// with `max_step_drafts` scratch slots; `force_accept`: see [`Speculation::force_accept`].
    /// Refused for a model without an MTP head, or a `force_accept` outside `[0, 1]`.
    pub fn enable_speculation(
        &mut self,
        num_drafts: usize,
        max_step_drafts: usize,
        force_accept: Option<f64>,
    ) -> Result<()> {
        if !self.model.has_mtp() {
            return Err(spec_err(
                "the model was loaded without an MTP head: load it with its mtp.* weights".into(),
            ));
        }
        if self.kv.group_blocks.len() > 1 {
            return Err(spec_err(
                "speculative decoding runs on one KV group (a model without sliding layers)".into(),
            ));
        }
        if let Some(r) = force_accept.filter(|r| !(0.0..=1.0).contains(r)) {
            return Err(spec_err(format!(
                "a forced acceptance rate of {r} is not between 0 and 1"
            )));
        }
        let (scratch_base, total) = match &self.kv.state {
            Some(state) => {
                let base = state.num_slots;
                let slots = base + max_step_drafts;
                // The old slots go first: both at once may not fit on a GPU.
                self.kv.state = None;
                self.kv.state = Some(self.model.new_state_storage(&self.backend, slots)?);
                (base, slots)
            }
            None => (0, 0),
        };
        self.spec = Some(Speculation {
            num_drafts,
            max_step_drafts,
            scratch_base,
            force_accept,
            slots: SlotMap::new(total),
        });
        Ok(())
    }

    /// The runner's parts, split for a speculative step; refused when speculation is off.
    fn speculating(&mut self) -> Result<(&B, &M, &mut KvStorage<B>, &mut Speculation)> {
        let Self {
            backend,
            model,
            kv,
            spec,
            ..
        } = self;
        let spec = spec
            .as_mut()
            .ok_or_else(|| spec_err("not enabled".into()))?;
        Ok((backend, model, kv, spec))
    }

    /// The speculative-decoding settings, when on.
    pub fn speculation(&self) -> Option<&Speculation> {
        self.spec.as_ref()
    }

    /// The target's forward for a step with speculation on: the logits, and the hidden states
    /// the MTP pass reads. Drafting sequences save their state after every row into scratch
    /// slots. A verify step (every sequence its last token and the same number of drafts, its
    /// state only moved on) replays a graph captured for its shape where the backend has them.
    pub(super) fn forward_speculative(
        &mut self,
        step: &SchedulerOutput,
        chunks: &[SeqChunk<'_>],
    ) -> Result<(B::Tensor, TargetPass<B::Tensor>)> {
        let null_row = self.null_row;
        let (backend, model, kv, spec) = self.speculating()?;
        let graphed = backend.graph_buckets().is_some() && uniform_verify(step);
        let width = if graphed {
            super::graph_width(chunks)
        } else {
            1
        };
        let mut host =
            super::block_tables::step_batch(null_row, step, kv.block_size, chunks, (width, 1));
        host.states = step.seqs.iter().filter_map(|s| s.state.clone()).collect();
        if kv.state.is_some() && host.states.len() == step.seqs.len() {
            let drafting = step.seqs.iter().zip(host.states.iter_mut());
            let mut offset = 0;
            for (s, plan) in drafting.filter(|(s, _)| s.num_drafts > 0) {
                if offset + s.num_drafts > spec.max_step_drafts {
                    return Err(spec_err(format!(
                        "more than {} drafts verified in one step",
                        spec.max_step_drafts
                    )));
                }
                let own = s.token_ids.len() - s.num_drafts;
                plan.saves.extend((0..s.num_drafts).map(|a| StateSave {
                    after: (own + a) as u32,
                    slot: spec.scratch(offset, a),
                }));
                plan.saves.sort_by_key(|sv| sv.after);
                offset += s.num_drafts;
            }
        }
        // The kernels see rows, not slot ids (`runner/slot_map.rs`).
        for plan in &mut host.states {
            *plan = spec.slots.translate(plan);
        }
        if graphed {
            super::check_replay_inputs(&host, model.vocab_size(), kv)?;
            let outputs = backend.graph_forward_many(&host, 2, &mut |batch| {
                let (logits, hidden) = model.forward_with_hidden(backend, &host, batch, kv)?;
                Ok(vec![logits, hidden])
            })?;
            if let Some([logits, hidden]) = outputs.and_then(|v| <[_; 2]>::try_from(v).ok()) {
                return Ok((logits, TargetPass { hidden }));
            }
        }
        let batch = backend.prepare_batch(&host)?;
        let (logits, hidden) = model.forward_with_hidden(backend, &host, &batch, kv)?;
        Ok((logits, TargetPass { hidden }))
    }

    /// After acceptance (`out` holds each sequence's accepted drafts and next token): roll back
    /// the recurrent state of sequences that rejected drafts, then run the MTP head and put
    /// each proposing sequence's next drafts in `out`.
    pub(super) fn finish_speculative(
        &mut self,
        step: &SchedulerOutput,
        pass: TargetPass<B::Tensor>,
        out: &mut RunnerOutput,
    ) -> Result<()> {
        let null_row = self.null_row;
        let (backend, model, kv, spec) = self.speculating()?;
        let bs = kv.block_size;

        // 1. Rejected drafts: the state after the last accepted row is in a scratch slot, whose
        // row the sequence's slot takes (the scratch slot takes the old row, free next step).
        let drafting = step
            .seqs
            .iter()
            .zip(&out.seqs)
            .filter(|(s, _)| s.num_drafts > 0);
        let mut offset = 0;
        for (s, o) in drafting {
            let accepted = o.accepted.len();
            if let Some(plan) = &s.state
                && kv.state.is_some()
                && accepted < s.num_drafts
            {
                spec.slots.swap(spec.scratch(offset, accepted), plan.slot);
            }
            offset += s.num_drafts;
        }

        // 2. The head over every row: row i gets the token after it. From the last own row on
        // those are the tokens this step emitted (accepted drafts, then the sampled one); rows
        // past them belong to rejected drafts, and their keys are overwritten next step.
        let mut next: Vec<Vec<u32>> = Vec::with_capacity(step.seqs.len());
        let mut draft_from: Vec<Option<usize>> = Vec::with_capacity(step.seqs.len());
        for (s, o) in step.seqs.iter().zip(&out.seqs) {
            let n = s.token_ids.len();
            let own = n - s.num_drafts;
            let emitted: Vec<u32> = o.accepted.iter().copied().chain(o.sampled).collect();
            let after_chunk = s.all_token_ids.get(s.start_pos + n).copied();
            let fill = emitted.last().copied().or(after_chunk).unwrap_or(0);
            let tokens = (0..n)
                .map(|j| {
                    if j + 1 < own {
                        s.token_ids[j + 1]
                    } else if s.sample {
                        emitted.get(j + 1 - own).copied().unwrap_or(fill)
                    } else {
                        after_chunk.unwrap_or(fill)
                    }
                })
                .collect();
            next.push(tokens);
            let proposes = s.sample && s.propose > 0 && o.sampled.is_some();
            draft_from.push(proposes.then(|| own - 1 + o.accepted.len()));
        }
        let chunks: Vec<SeqChunk<'_>> = step
            .seqs
            .iter()
            .zip(&next)
            .zip(&draft_from)
            .map(|((s, tokens), from)| SeqChunk {
                tokens,
                start_pos: s.start_pos,
                block_table: &s.block_ids,
                logits_rows: from.iter().copied().collect(),
            })
            .collect();
        // 3. Chain the head on its own output: draft k + 1 at the position after draft k, for
        // the sequences whose blocks reach that far; the others ride along on the null block.
        let proposing: Vec<(usize, usize)> = draft_from
            .iter()
            .enumerate()
            .filter_map(|(i, f)| f.map(|r| (i, step.seqs[i].start_pos + r)))
            .collect();
        let wanted: Vec<usize> = proposing
            .iter()
            .map(|&(i, last)| {
                let s = &step.seqs[i];
                // Draft k (1-based) is computed at position last + k − 1.
                let reach = (s.block_ids.len() * bs).saturating_sub(last);
                s.propose.min(reach.max(1))
            })
            .collect();
        let longest = wanted.iter().copied().max().unwrap_or(0);
        // Every pass as one replayed graph where the backend chains on the device: a verify
        // step's shape, every sequence proposing, tables kept on the device.
        if let Some(null) = null_row.filter(|_| {
            backend.graph_buckets().is_some()
                && uniform_verify(step)
                && proposing.len() == step.seqs.len()
                && longest > 0
        }) {
            let plan = Chain {
                step,
                chunks: &chunks,
                proposing: &proposing,
                wanted: &wanted,
                null,
                bs,
            };
            if let Some(drafts) = plan.run(backend, model, kv, &pass.hidden)? {
                for (&(i, _), d) in proposing.iter().zip(drafts) {
                    out.seqs[i].drafts.extend(d);
                }
                return Ok(());
            }
        }
        if proposing.is_empty() {
            // Nobody drafts (paused, or acceptance does not pay): the head's keys only, as a
            // replayed one-pass chain where the step is a graph's shape (eager, its ten short
            // launches cost a step with no drafts about a third of a plain one at C=1).
            if let Some(null) =
                null_row.filter(|_| backend.graph_buckets().is_some() && uniform_verify(step))
            {
                let width = super::graph_width(&chunks);
                let host =
                    super::block_tables::step_batch(Some(null), step, bs, &chunks, (width, 1));
                super::check_replay_inputs(&host, model.vocab_size(), kv)?;
                let filled = backend.graph_chain(
                    std::slice::from_ref(&host),
                    &[&pass.hidden],
                    0,
                    &mut |batches, inputs| {
                        model.mtp_fill_cache(backend, &host, batches[0], &inputs[0], kv)?;
                        Ok(vec![])
                    },
                )?;
                if filled.is_some() {
                    return Ok(());
                }
            }
            let host = BatchInputs::build(bs, &chunks);
            let batch = backend.prepare_batch(&host)?;
            return model.mtp_fill_cache(backend, &host, &batch, &pass.hidden, kv);
        }
        let host = BatchInputs::build(bs, &chunks);
        let batch = backend.prepare_batch(&host)?;
        let (logits, mut hidden) = model.mtp_forward(backend, &host, &batch, &pass.hidden, kv)?;
        let mut tokens = argmax_rows(backend, &logits)?;
        if tokens.len() != proposing.len() {
            return Err(spec_err(format!(
                "the head gave {} drafts for {} sequences",
                tokens.len(),
                proposing.len()
            )));
        }
        for (&(i, _), &t) in proposing.iter().zip(&tokens) {
            out.seqs[i].drafts.push(t);
        }
        for k in 1..longest {
            let rows: Vec<[u32; 1]> = tokens.iter().map(|&t| [t]).collect();
            let chunks: Vec<SeqChunk<'_>> = proposing
                .iter()
                .zip(&wanted)
                .zip(&rows)
                .map(|((&(i, last), &w), row)| {
                    let s = &step.seqs[i];
                    let (start_pos, block_table) = if k < w {
                        (last + k, &s.block_ids[..])
                    } else {
                        (0, &[0u32][..]) // the null block: nobody reads it
                    };
                    SeqChunk {
                        tokens: row,
                        start_pos,
                        block_table,
                        logits_rows: vec![0],
                    }
                })
                .collect();
            let host = BatchInputs::build(bs, &chunks);
            let batch = backend.prepare_batch(&host)?;
            let (logits, h) = model.mtp_forward(backend, &host, &batch, &hidden, kv)?;
            hidden = h;
            tokens = argmax_rows(backend, &logits)?;
            for ((&(i, _), &t), &w) in proposing.iter().zip(&tokens).zip(&wanted) {
                if k < w {
                    out.seqs[i].drafts.push(t);
                }
            }
        }
        Ok(())
    }
}

/// A step's MTP passes as one chain on the device ([`Backend::graph_chain`]): the first over
/// every row of every chunk, then one row a proposing sequence per further draft, each fed
/// the argmax of the pass before without a host round trip.
struct Chain<'a> {
    step: &'a SchedulerOutput,
    /// The first pass's chunks (every row, logits at each sequence's last accepted row).
    chunks: &'a [SeqChunk<'a>],
    /// (sequence, position of its last accepted row), every sequence of the step.
    proposing: &'a [(usize, usize)],
    /// Drafts each proposing sequence wants (at least 1).
    wanted: &'a [usize],
    /// The backend's null table row (a rider's).
    null: u32,
    bs: usize,
}

impl Chain<'_> {
    /// Each proposing sequence's drafts, or `None` where the backend replays no chain (the
    /// caller runs the passes itself).
    fn run<B: Backend, M: Model<B>>(
        &self,
        backend: &B,
        model: &M,
        kv: &mut KvStorage<B>,
        hidden: &B::Tensor,
    ) -> Result<Option<Vec<Vec<u32>>>> {
        let longest = self.wanted.iter().copied().max().unwrap_or(0);
        let width = super::graph_width(self.chunks);
        let first = super::block_tables::step_batch(
            Some(self.null),
            self.step,
            self.bs,
            self.chunks,
            (width, 1),
        );
        let mut hosts = vec![first];
        for k in 1..longest {
            let (fed, rows): (Vec<SeqChunk<'_>>, Vec<u32>) = self
                .proposing
                .iter()
                .zip(self.wanted)
                .map(|(&(i, last), &w)| {
                    let s = &self.step.seqs[i];
                    // Riders (no draft k) sit on the null block: nobody reads it.
                    let (start_pos, block_table, row) = match k < w {
                        true => (last + k, &s.block_ids[..], s.table.slot),
                        false => (0, &[0u32][..], self.null),
                    };
                    let chunk = SeqChunk {
                        tokens: &[0], // fed on the device
                        start_pos,
                        block_table,
                        logits_rows: vec![0],
                    };
                    (chunk, row)
                })
                .unzip();
            hosts.push(BatchInputs::build_on_rows(self.bs, &fed, width, &rows));
        }
        for host in &hosts {
            super::check_replay_inputs(host, model.vocab_size(), kv)?;
        }
        let n = self.proposing.len();
        let chained = backend.graph_chain(&hosts, &[hidden], 1, &mut |batches, inputs| {
            let (logits, mut h) =
                model.mtp_forward(backend, &hosts[0], batches[0], &inputs[0], kv)?;
            let mut ids = backend.zeros(&[longest, n])?;
            backend.argmax_ids(&mut ids, 0, &logits)?;
            for k in 1..longest {
                backend.feed_tokens(batches[k], &ids, k - 1)?;
                let (logits, next) = model.mtp_forward(backend, &hosts[k], batches[k], &h, kv)?;
                h = next;
                backend.argmax_ids(&mut ids, k, &logits)?;
            }
            Ok(vec![ids])
        })?;
        let Some(ids) = chained.and_then(|v| v.into_iter().next()) else {
            return Ok(None);
        };
        let ids = backend.to_host(&ids)?;
        let mut drafts = vec![Vec::new(); n];
        for (k, row) in ids.chunks(n).enumerate() {
            for ((d, &w), &t) in drafts.iter_mut().zip(self.wanted).zip(row) {
                if k < w {
                    d.push(t as u32);
                }
            }
        }
        Ok(Some(drafts))
    }
}

/// The argmax of each row of `logits` `[R, vocab]` (lowest id on ties), through the backend's
/// greedy sampler: on a GPU it runs there, and only the ids come back (not `R · vocab` floats).
fn argmax_rows<B: Backend>(backend: &B, logits: &B::Tensor) -> Result<Vec<u32>> {
    let greedy = SamplingParams {
        temperature: 0.0,
        ..SamplingParams::default()
    };
    let rows: Vec<SampleRow<'_>> = (0..backend.shape(logits).first().copied().unwrap_or(0))
        .map(|logits_row| SampleRow {
            logits_row,
            params: &greedy,
            all_token_ids: &[],
            num_prompt_tokens: 0,
            seq: None,
        })
        .collect();
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    Ok(backend
        .sample(logits, &rows)?
        .into_iter()
        .map(|s| s.token_id)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forced_acceptance_noise_is_uniform_and_deterministic() {
        let n = 20_000;
        let below: usize = (0..n).filter(|&p| unit_noise(7, p) < 0.5).count();
        assert!((9_000..11_000).contains(&below), "{below} of {n} below 0.5");
        assert_eq!(unit_noise(3, 11), unit_noise(3, 11));
        assert_ne!(unit_noise(3, 11), unit_noise(4, 11));
        assert!((0..n).all(|p| (0.0..1.0).contains(&unit_noise(9, p))));
    }
}
