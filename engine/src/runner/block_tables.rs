//! The runner's persistent block tables: one row a sequence slot, written once when a
//! sequence arrives in its row and then only extended by the step's new block ids
//! (`BlockTableDelta`), so a step carries the change, not every sequence's whole table.

use crate::backend::{BackendError, Result};
use crate::scheduler::io::{BlockTableDelta, SchedulerOutput};

#[derive(Debug, Default)]
pub struct BlockTables {
    rows: Vec<Vec<u32>>,
}

impl BlockTables {
    /// Applies one step's changes, in batch order. A row a sequence left (finished,
    /// preempted) is simply overwritten by the next sequence that is sent in full into it.
    pub fn apply(&mut self, step: &SchedulerOutput) -> Result<()> {
        for s in &step.seqs {
            self.apply_one(&s.table)?;
        }
        Ok(())
    }

    fn apply_one(&mut self, d: &BlockTableDelta) -> Result<()> {
        let slot = d.slot as usize;
        if slot >= self.rows.len() {
            self.rows.resize_with(slot + 1, Vec::new);
        }
        let row = &mut self.rows[slot];
        if d.new {
            row.clear();
        }
        let end = d.start + d.new_block_ids.len();
        if d.start > row.len() || end != d.len {
            return Err(BackendError::Shape {
                op: "block table delta",
                message: format!(
                    "row {slot} holds {} ids; the delta writes {}..{end} for a length of {}",
                    row.len(),
                    d.start,
                    d.len
                ),
            });
        }
        row.truncate(d.start);
        row.extend_from_slice(&d.new_block_ids);
        Ok(())
    }

    /// The table persisted in `slot`.
    pub fn row(&self, slot: u32) -> &[u32] {
        self.rows.get(slot as usize).map_or(&[], Vec::as_slice)
    }
}
