//! The runner's side of constrained decoding: each constrained sequence's next masks are
//! handed to the grammar's workers as soon as the tokens they follow are known, so they are
//! computed while the engine thread schedules and the backend runs the forward
//! (`grammar/workers.rs`); and the drafts the grammar refuses are cut before they are
//! verified.

use crate::scheduler::io::{RunnerOutput, ScheduledSeq, SchedulerOutput};

/// The sequence's output so far (`all_token_ids` past the prompt).
fn output(s: &ScheduledSeq) -> &[u32] {
    &s.all_token_ids[s.num_prompt_tokens.min(s.all_token_ids.len())..]
}

/// Before the forward: the masks of every constrained sampling row of the step (a sequence's
/// next row and one after each of its drafts), for those not asked for after the last step
/// (a new sequence, the drafts) and to catch up after a preemption. A job whose masks are all
/// ready costs a lookup.
pub(super) fn prefetch_step(step: &SchedulerOutput, vocab: usize) {
    for s in step.seqs.iter().filter(|s| s.sample) {
        let Some(c) = &s.sampling.constraint else {
            continue;
        };
        let out = output(s);
        let mut tokens = Vec::with_capacity(out.len() + s.num_drafts);
        tokens.extend_from_slice(out);
        tokens.extend_from_slice(&s.token_ids[s.token_ids.len() - s.num_drafts..]);
        c.prefetch(
            s.req_id,
            tokens,
            out.len(),
            &s.sampling.eos_token_ids,
            vocab,
        );
    }
}

/// After sampling (and, with speculation, after the head's drafts): for each constrained
/// sequence, its drafts cut to what the grammar accepts after this step's tokens, then (when
/// `overlap`) the masks of its next row and of a row after each draft handed to the workers,
/// unless the sequence has just ended.
pub(super) fn after_step(
    step: &SchedulerOutput,
    out: &mut RunnerOutput,
    vocab: usize,
    overlap: bool,
) {
    for (s, o) in step.seqs.iter().zip(&mut out.seqs) {
        let Some(c) = &s.sampling.constraint else {
            continue;
        };
        let Some(sampled) = o.sampled.filter(|_| s.sample) else {
            continue;
        };
        let p = &s.sampling;
        let mut next = Vec::with_capacity(output(s).len() + o.accepted.len() + 1 + o.drafts.len());
        next.extend_from_slice(output(s));
        next.extend_from_slice(&o.accepted);
        next.push(sampled);
        let ends = next.len() >= p.max_tokens
            || !p.ignore_eos && p.eos_token_ids.contains(&sampled)
            || p.stop_token_ids.contains(&sampled);
        if !o.drafts.is_empty() {
            let valid = if ends {
                0
            } else {
                c.valid_drafts(s.req_id, &next, &o.drafts)
            };
            o.drafts.truncate(valid);
        }
        if overlap && !ends {
            let from = next.len();
            next.extend_from_slice(&o.drafts);
            c.prefetch(s.req_id, next, from, &p.eos_token_ids, vocab);
        }
    }
}
