//! The recurrent-state slots of the models that have them (Qwen3.5's Gated DeltaNet layers,
//! Nemotron-H's Mamba-2 layers): what every forward does with the batch's
//! [`StatePlan`](crate::kv_cache::StatePlan)s before its first layer. The memory is
//! [`StateStorage`]; which slot holds what is the cache manager's (`kv_cache/state.rs`).

use crate::backend::{BackendError, BatchInputs, HybridOps, Result};
use crate::kv_cache::StateInit;

use super::StateStorage;

fn shape_err(message: String) -> BackendError {
    BackendError::Shape {
        op: "recurrent state",
        message,
    }
}

/// Checks the batch's state plans against the slots, then starts each sequence's state:
/// zeros at position 0, a copy of a checkpoint, or as the last step left it.
pub(crate) fn start_states<B: HybridOps>(
    b: &B,
    host: &BatchInputs,
    state: &mut StateStorage<B>,
) -> Result<()> {
    if host.states.len() != host.num_seqs() {
        return Err(shape_err(format!(
            "{} state plans for {} sequences: every sequence of a hybrid model needs a \
             state slot",
            host.states.len(),
            host.num_seqs()
        )));
    }
    let n = state.num_slots as u32;
    for (seq, plan) in host.states.iter().enumerate() {
        let len = host.seq_starts[seq + 1] - host.seq_starts[seq];
        // A padding row (a graph's bucket) has no slot: it only must not ask for one.
        if plan.is_padding() {
            if !plan.is_plain_continue() {
                return Err(shape_err(format!(
                    "a padding row's state plan {plan:?} starts or saves a state"
                )));
            }
            continue;
        }
        let copy = match plan.init {
            StateInit::Copy(from) => Some(from),
            _ => None,
        };
        let bad_slot = [plan.slot]
            .into_iter()
            .chain(copy)
            .chain(plan.saves.iter().map(|s| s.slot))
            .find(|&s| s >= n);
        if let Some(s) = bad_slot {
            return Err(shape_err(format!(
                "state slot {s} is outside the {n} slots"
            )));
        }
        if !plan.saves.is_sorted_by_key(|s| s.after)
            || plan.saves.iter().any(|s| s.after == 0 || s.after > len)
        {
            return Err(shape_err(format!(
                "checkpoint saves {:?} do not fall inside a chunk of {len} tokens",
                plan.saves
            )));
        }
    }
    for plan in host.states.iter().filter(|p| !p.is_padding()) {
        let slot = plan.slot as usize;
        let from = match plan.init {
            StateInit::Continue => continue,
            StateInit::Zero => None,
            StateInit::Copy(from) => Some(from as usize),
        };
        for t in state.conv.iter_mut().chain(state.recurrent.iter_mut()) {
            b.state_row(t, from, slot)?;
        }
    }
    Ok(())
}
