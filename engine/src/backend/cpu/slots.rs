//! A batch's sequences through their recurrent-state slots, for the CPU's recurrent ops
//! (Gated DeltaNet in `hybrid.rs`, Mamba-2 in `mamba2.rs`): each sequence's rows in order,
//! from and into its slot's conv window and state, in pieces that end where its
//! [`StatePlan`](crate::kv_cache::StatePlan) saves a checkpoint.

use std::ops::Range;

use super::shape_err;
use crate::backend::{BatchInputs, Result};

/// One layer's per-slot memory: conv windows `[slots, window]` and states `[slots, state]`.
pub(super) struct Slots<'a> {
    pub conv: &'a mut [f32],
    pub window: usize,
    pub state: &'a mut [f32],
    pub state_len: usize,
}

/// Refuse plans that name a slot outside the `slots` there are, or a padding row that saves.
pub(super) fn check_plans(op: &'static str, host: &BatchInputs, slots: usize) -> Result<()> {
    let slots = slots as u32;
    match host.states.iter().find(|p| {
        (p.slot >= slots && !p.is_padding())
            || p.saves.iter().any(|sv| sv.slot >= slots)
            || (p.is_padding() && !p.saves.is_empty())
    }) {
        Some(p) => Err(shape_err(
            op,
            format!("state slots of {p:?} outside the {slots} slots"),
        )),
        None => Ok(()),
    }
}

/// `piece(window, state, rows)` over every sequence of `host` (plans checked by
/// [`check_plans`]): its rows in order, in pieces that end where its plan saves, each from
/// and into its slot's window and state; after a piece that ends at a save, both are copied
/// into the save's slot. A padding row runs from zeros in a scratch it then drops.
pub(super) fn for_each_piece(
    host: &BatchInputs,
    slots: Slots<'_>,
    mut piece: impl FnMut(&mut [f32], &mut [f32], Range<usize>),
) {
    let Slots {
        conv,
        window,
        state,
        state_len,
    } = slots;
    for (seq, plan) in host.states.iter().enumerate() {
        let (r0, r1) = (
            host.seq_starts[seq] as usize,
            host.seq_starts[seq + 1] as usize,
        );
        let (mut pad_window, mut pad_state) = (Vec::new(), Vec::new());
        let slot = if plan.is_padding() {
            pad_window = vec![0f32; window];
            pad_state = vec![0f32; state_len];
            None
        } else {
            Some(plan.slot as usize)
        };
        let mut lo = 0;
        let ends = plan
            .saves
            .iter()
            .map(|sv| (sv.after as usize, Some(sv.slot)));
        for (hi, save) in ends.chain([(r1 - r0, None)]) {
            if hi > lo {
                let (w, s) = match slot {
                    Some(slot) => (
                        &mut conv[slot * window..][..window],
                        &mut state[slot * state_len..][..state_len],
                    ),
                    None => (&mut pad_window[..], &mut pad_state[..]),
                };
                piece(w, s, r0 + lo..r0 + hi);
                lo = hi;
            }
            // The state after `hi` rows is saved (a prefix checkpoint, a draft's scratch).
            if let (Some(to), Some(slot)) = (save, slot) {
                copy_row(conv, window, slot, to as usize);
                copy_row(state, state_len, slot, to as usize);
            }
        }
    }
}

/// Copy row `from`'s `len` elements over row `to`'s.
pub(super) fn copy_row(data: &mut [f32], len: usize, from: usize, to: usize) {
    if from != to {
        data.copy_within(from * len..(from + 1) * len, to * len);
    }
}
