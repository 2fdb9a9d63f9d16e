//! Which persistent block-table row each running sequence owns, and how much of its table
//! the runner already has: the scheduler's side of `BlockTableDelta`.

use crate::kv_cache::hash::FastMap;
use crate::scheduler::io::{BlockTableDelta, RequestId};

#[derive(Debug, Clone, Copy)]
struct Row {
    slot: u32,
    /// Block ids of the table the runner holds in the row.
    sent: usize,
}

#[derive(Debug)]
pub(super) struct TableRows {
    rows: FastMap<RequestId, Row>,
    /// Free rows, the lowest last (popped first).
    free: Vec<u32>,
}

impl TableRows {
    pub(super) fn new(num_rows: usize) -> Self {
        Self {
            rows: FastMap::default(),
            free: (0..num_rows as u32).rev().collect(),
        }
    }

    /// The change to send for `id`, whose table is now `table`. A sequence without a row gets
    /// one and its whole table; a running one the ids past what it was sent. Tables only grow
    /// while a sequence runs (blocks are freed on preemption and finish only), which the sim
    /// test checks against the scheduler's full view every step.
    pub(super) fn delta(&mut self, id: RequestId, table: &[u32]) -> BlockTableDelta {
        let (row, new) = match self.rows.get(&id) {
            Some(&r) => (r, false),
            None => {
                let slot = self.free.pop().unwrap_or_else(|| {
                    debug_assert!(false, "more running sequences than table rows");
                    self.rows.len() as u32
                });
                (Row { slot, sent: 0 }, true)
            }
        };
        let start = row.sent.min(table.len());
        self.rows.insert(
            id,
            Row {
                slot: row.slot,
                sent: table.len(),
            },
        );
        BlockTableDelta {
            slot: row.slot,
            new,
            start,
            new_block_ids: table[start..].to_vec(),
            len: table.len(),
        }
    }

    /// `id` left the running set (finished, aborted or preempted): its row is free.
    pub(super) fn release(&mut self, id: RequestId) {
        if let Some(r) = self.rows.remove(&id) {
            self.free.push(r.slot);
        }
    }
}
