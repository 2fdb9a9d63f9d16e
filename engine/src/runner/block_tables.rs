//! The runner's persistent block tables: one row a sequence slot, written once when a
//! sequence arrives in its row and then only extended by the step's new block ids
//! (`BlockTableDelta`), so a step carries the change, not every sequence's whole table. A model
//! with KV groups (sliding-window layers) has one set of tables a group, the rows shared.

use crate::backend::{BackendError, BatchInputs, Result, SeqChunk, TableWrite};
use crate::scheduler::io::{BlockTableDelta, ScheduledSeq, SchedulerOutput};

#[derive(Debug, Default)]
pub struct BlockTables {
    rows: Vec<Vec<u32>>,
}

impl BlockTables {
    /// Applies one step's changes to KV group `group`'s tables, in batch order. A row a
    /// sequence left (finished, preempted) is simply overwritten by the next sequence that is
    /// sent in full into it.
    pub fn apply(&mut self, step: &SchedulerOutput, group: usize) -> Result<()> {
        for s in &step.seqs {
            let d = group_delta(s, group).ok_or_else(|| BackendError::Shape {
                op: "block table delta",
                message: format!("request {} has no table in KV group {group}", s.req_id),
            })?;
            self.apply_one(d)?;
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

/// The delta of `s`'s table in KV group `group` (group 0: `s.table`).
pub(super) fn group_delta(s: &ScheduledSeq, group: usize) -> Option<&BlockTableDelta> {
    match group {
        0 => Some(&s.table),
        g => s.group_tables.get(g - 1).map(|t| &t.table),
    }
}

/// The whole table of `s` in KV group `group` (group 0: `s.block_ids`).
pub(super) fn group_ids(s: &ScheduledSeq, group: usize) -> &[u32] {
    match group {
        0 => &s.block_ids,
        g => s.group_tables.get(g - 1).map_or(&[], |t| &t.block_ids),
    }
}

/// The step's table changes in KV group `group` as a backend that keeps the tables takes
/// them, each block id checked against the group's `num_blocks` (the kernels that read the
/// rows do not check).
pub(super) fn writes(
    step: &SchedulerOutput,
    group: usize,
    num_blocks: usize,
) -> Result<Vec<TableWrite<'_>>> {
    step.seqs
        .iter()
        .map(|s| {
            let d = group_delta(s, group).ok_or_else(|| BackendError::Shape {
                op: "block table delta",
                message: format!("request {} has no table in KV group {group}", s.req_id),
            })?;
            if let Some(b) = d.new_block_ids.iter().find(|&&b| b as usize >= num_blocks) {
                return Err(BackendError::Shape {
                    op: "block table delta",
                    message: format!("block {b} is outside the cache of {num_blocks}"),
                });
            }
            Ok(TableWrite {
                row: d.slot,
                start: d.start,
                ids: &d.new_block_ids,
                len: d.len,
            })
        })
        .collect()
}

/// The batch of `chunks` (the step's sequences in order, then any padding rows), with tables
/// at least `min_blocks` wide: naming each sequence's kept table row when the backend keeps
/// the tables (`null_row`; padding rows read the null row), else carrying whole tables. With
/// `groups` KV groups, the batch of each group after the first goes in `groups`: the same
/// chunks on the group's tables.
pub(super) fn step_batch(
    null_row: Option<u32>,
    step: &SchedulerOutput,
    block_size: usize,
    chunks: &[SeqChunk<'_>],
    (min_blocks, groups): (usize, usize),
) -> BatchInputs {
    let build = |chunks: &[SeqChunk<'_>]| match null_row {
        None => BatchInputs::build_with_width(block_size, chunks, min_blocks),
        Some(null) => {
            let rows: Vec<u32> = step
                .seqs
                .iter()
                .map(|s| s.table.slot)
                .chain(std::iter::repeat(null))
                .take(chunks.len())
                .collect();
            BatchInputs::build_on_rows(block_size, chunks, min_blocks, &rows)
        }
    };
    let mut batch = build(chunks);
    for g in 1..groups {
        // The step's sequences read the group's tables; padding rows keep theirs (the null
        // block).
        let mut on_group = chunks.to_vec();
        for (c, s) in on_group.iter_mut().zip(&step.seqs) {
            c.block_table = group_ids(s, g);
        }
        batch.groups.push(build(&on_group));
    }
    batch
}
