//! Which persistent block-table row each running sequence owns, and how much of each of its
//! tables (one a KV group) the runner already has: the scheduler's side of `BlockTableDelta`.

use crate::kv_cache::hash::FastMap;
use crate::scheduler::io::{BlockTableDelta, RequestId};

#[derive(Debug, Clone)]
struct Row {
    slot: u32,
    /// A group: block ids of the table the runner holds in the row.
    sent: Vec<usize>,
    /// A group: leading entries the runner holds as the null block (released behind a
    /// sliding window).
    nulls: Vec<usize>,
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

    /// The changes to send for `id`, whose tables are now `tables` (a group: the table and
    /// its leading entries released to the null block). A sequence without a row gets one
    /// and its whole tables; a running one the ids past what it was sent, from the first
    /// entry released since then when a sliding group released some (the nulls travel with
    /// the ids after them, so a change always runs to the table's end). Tables otherwise only
    /// grow while a sequence runs (blocks are freed on preemption and finish only), which the
    /// sim tests check against the scheduler's full view every step.
    pub(super) fn delta(
        &mut self,
        id: RequestId,
        tables: &[(&[u32], usize)],
    ) -> Vec<BlockTableDelta> {
        let (mut row, new) = match self.rows.remove(&id) {
            Some(r) => (r, false),
            None => {
                let slot = self.free.pop().unwrap_or_else(|| {
                    debug_assert!(false, "more running sequences than table rows");
                    self.rows.len() as u32
                });
                let row = Row {
                    slot,
                    sent: Vec::new(),
                    nulls: Vec::new(),
                };
                (row, true)
            }
        };
        row.sent.resize(tables.len(), 0);
        row.nulls.resize(tables.len(), 0);
        let deltas = tables
            .iter()
            .enumerate()
            .map(|(g, &(table, released))| {
                let mut start = row.sent[g].min(table.len());
                if released > row.nulls[g] {
                    start = start.min(row.nulls[g]);
                }
                row.sent[g] = table.len();
                row.nulls[g] = released;
                BlockTableDelta {
                    slot: row.slot,
                    new,
                    start,
                    new_block_ids: table[start..].to_vec(),
                    len: table.len(),
                }
            })
            .collect();
        self.rows.insert(id, row);
        deltas
    }

    /// `id` left the running set (finished, aborted or preempted): its row is free.
    pub(super) fn release(&mut self, id: RequestId) {
        if let Some(r) = self.rows.remove(&id) {
            self.free.push(r.slot);
        }
    }
}
