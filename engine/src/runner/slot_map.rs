//! Where each recurrent-state slot lives, for speculative decoding's roll back.
//!
//! A verifying sequence saves its state after each of its rows into scratch slots; when it
//! rejects drafts, its state is the one in the scratch slot of its last accepted row. Copying
//! that back costs a launch per state tensor (two per linear-attention layer: 60 on
//! Qwen3.6-35B-A3B, about 0.2 ms a sequence on an H200, performance log part 9). Instead the
//! runner keeps a table from the slot ids the scheduler and the runner use (logical) to the
//! rows of the state tensors (physical), and a roll back swaps two entries: the sequence's
//! slot now names the row that holds the accepted state, and the scratch slot names the old
//! row, which the next step's saves overwrite. Every plan goes through [`SlotMap::translate`]
//! before it reaches the backend, so the kernels only ever see physical rows.

use crate::kv_cache::{NO_STATE, StateInit, StatePlan};

/// A permutation of `0..n` state slots; the identity until [`SlotMap::swap`] moves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SlotMap {
    physical: Vec<u32>,
}

impl SlotMap {
    /// The identity over `n` slots.
    pub(super) fn new(n: usize) -> Self {
        Self {
            physical: (0..n as u32).collect(),
        }
    }

    /// The row slot `logical` lives in. Ids past the table (none are issued) and the padding
    /// row's [`NO_STATE`] pass through unchanged.
    pub(super) fn get(&self, logical: u32) -> u32 {
        self.physical
            .get(logical as usize)
            .copied()
            .unwrap_or(logical)
    }

    /// `plan` with every slot it names (its own, the checkpoint it starts from, the slots it
    /// saves into) moved to its row.
    pub(super) fn translate(&self, plan: &StatePlan) -> StatePlan {
        if plan.slot == NO_STATE {
            return plan.clone();
        }
        StatePlan {
            slot: self.get(plan.slot),
            init: match plan.init {
                StateInit::Copy(c) => StateInit::Copy(self.get(c)),
                other => other,
            },
            saves: plan
                .saves
                .iter()
                .map(|s| crate::kv_cache::StateSave {
                    after: s.after,
                    slot: self.get(s.slot),
                })
                .collect(),
        }
    }

    /// Exchange the rows of logical slots `a` and `b`.
    pub(super) fn swap(&mut self, a: u32, b: u32) {
        let (a, b) = (a as usize, b as usize);
        if a < self.physical.len() && b < self.physical.len() {
            self.physical.swap(a, b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv_cache::StateSave;

    #[test]
    fn identity_until_swapped_then_a_permutation() {
        let mut m = SlotMap::new(6);
        assert!((0..6).all(|i| m.get(i) == i));
        m.swap(1, 4);
        assert_eq!((m.get(1), m.get(4)), (4, 1));
        m.swap(4, 5);
        // Logical 4 took 5's row, 5 took the row 4 had (1).
        assert_eq!((m.get(1), m.get(4), m.get(5)), (4, 5, 1));
        let mut rows: Vec<u32> = (0..6).map(|i| m.get(i)).collect();
        rows.sort_unstable();
        assert_eq!(rows, (0..6).collect::<Vec<_>>());
        // Out of range: unchanged, and a swap with one is ignored.
        m.swap(2, 9);
        assert_eq!((m.get(2), m.get(9), m.get(NO_STATE)), (2, 9, NO_STATE));
    }

    #[test]
    fn translate_moves_every_slot_a_plan_names() {
        let mut m = SlotMap::new(8);
        m.swap(0, 6);
        m.swap(3, 7);
        let plan = StatePlan {
            slot: 0,
            init: StateInit::Copy(3),
            saves: vec![
                StateSave { after: 1, slot: 7 },
                StateSave { after: 2, slot: 5 },
            ],
        };
        let t = m.translate(&plan);
        assert_eq!(t.slot, 6);
        assert_eq!(t.init, StateInit::Copy(7));
        assert_eq!(
            t.saves,
            vec![
                StateSave { after: 1, slot: 3 },
                StateSave { after: 2, slot: 5 },
            ]
        );
        assert_eq!(m.translate(&StatePlan::padding()), StatePlan::padding());
    }
}
