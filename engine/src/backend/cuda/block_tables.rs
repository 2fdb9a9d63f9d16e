//! The block tables kept on the device from step to step: a row of `width` block ids for each
//! running sequence (the scheduler's `TableRows` hands rows out), and after them a null row of
//! zeros that padding rows read. The buffer sits at one address for the backend's life, so
//! CUDA graphs bake it in. A step uploads only its changes ([`TableWrite`]s: a new sequence's
//! whole table once, then the blocks it gains), which `block_table_write` scatters into the
//! rows; a batch then names each sequence's row (`BatchInputs::table_rows`) instead of carrying
//! every table.
//!
//! The kernels that read the rows check nothing, so the host keeps what they rely on: each
//! row's length (a batch may not reach past it) and the largest block id ever written (every
//! entry a row can hold is at most that, and the attention op checks it against the cache).

use cudarc::driver::{CudaSlice, DevicePtr};

use super::elementwise::{cfg, dim, int};
use super::{CudaBackend, dev_err, shape_err};
use crate::backend::kernels;
use crate::backend::{Result, TableWrite};

#[derive(Debug)]
pub(super) struct DeviceTables {
    /// `[rows + 1, width]`: the sequences' rows, then the null row.
    buf: CudaSlice<u32>,
    width: usize,
    /// Each sequence row's length in blocks, as the writes left it.
    lens: Vec<usize>,
    /// The largest block id any write put in a row.
    max_id: Option<u32>,
}

/// What a batch built on table rows is checked against (`batch.rs`).
#[derive(Debug, Clone, Copy)]
pub(super) struct TablesView<'a> {
    pub(super) ptr: u64,
    pub(super) width: usize,
    pub(super) lens: &'a [usize],
    pub(super) max_id: Option<u32>,
}

impl TablesView<'_> {
    /// The null row: the one after the sequences' rows.
    pub(super) fn null_row(&self) -> u32 {
        self.lens.len() as u32
    }

    /// How many blocks `row` holds (the null row: any reach, all of them block 0).
    pub(super) fn len(&self, row: u32) -> Option<usize> {
        match row as usize {
            r if r < self.lens.len() => Some(self.lens[r]),
            r if r == self.lens.len() => Some(self.width),
            _ => None,
        }
    }
}

/// The changes of one step packed as `block_table_write` reads them: a (row, start, count,
/// first id) quad a change with ids, then the ids. Checks every change against the rows'
/// lengths first and returns the lengths after them; nothing is applied when one is wrong.
fn pack(
    lens: &[usize],
    width: usize,
    writes: &[TableWrite<'_>],
) -> Result<(Vec<u32>, Vec<usize>, usize)> {
    let mut after = lens.to_vec();
    // One segment (row, start, ids) a row: the blocks of one launch run in any order, so two
    // changes to a row are merged here, the later writing over the earlier from its start on.
    let mut segments: Vec<(u32, usize, Vec<u32>)> = Vec::new();
    let mut segment_of: std::collections::HashMap<u32, usize> = Default::default();
    for w in writes {
        let row = w.row as usize;
        let held = *after.get(row).ok_or_else(|| {
            shape_err(
                "write_block_tables",
                format!(
                    "row {row} is outside the {} rows kept (one a running sequence)",
                    lens.len()
                ),
            )
        })?;
        if w.start > held || w.start + w.ids.len() != w.len || w.len > width {
            return Err(shape_err(
                "write_block_tables",
                format!(
                    "row {row} holds {held} blocks; a change writes {} at {} for a length of {} \
                     (at most {width})",
                    w.ids.len(),
                    w.start,
                    w.len
                ),
            ));
        }
        after[row] = w.len;
        match segment_of.get(&w.row) {
            None => {
                segment_of.insert(w.row, segments.len());
                segments.push((w.row, w.start, w.ids.to_vec()));
            }
            // `w.start` is at most the row's length, the end of the earlier segment.
            Some(&i) => {
                let (_, start, ids) = &mut segments[i];
                if w.start >= *start {
                    ids.truncate(w.start - *start);
                    ids.extend_from_slice(w.ids);
                } else {
                    *start = w.start;
                    *ids = w.ids.to_vec();
                }
            }
        }
    }
    segments.retain(|(_, _, ids)| !ids.is_empty());
    let n = segments.len();
    let total: usize = segments.iter().map(|(_, _, ids)| ids.len()).sum();
    let mut data = Vec::with_capacity(4 * n + total);
    let mut at = 4 * n;
    for (row, start, ids) in &segments {
        data.extend_from_slice(&[*row, *start as u32, ids.len() as u32, at as u32]);
        at += ids.len();
    }
    for (_, _, ids) in &segments {
        data.extend_from_slice(ids);
    }
    Ok((data, after, n))
}

/// The views of every KV group's tables, group order.
pub(super) fn views<'a>(tables: &'a [DeviceTables], be: &CudaBackend) -> Vec<TablesView<'a>> {
    tables.iter().map(|t| t.view(be)).collect()
}

impl DeviceTables {
    pub(super) fn view(&self, be: &CudaBackend) -> TablesView<'_> {
        TablesView {
            ptr: self.buf.device_ptr(&be.stream).0,
            width: self.width,
            lens: &self.lens,
            max_id: self.max_id,
        }
    }
}

impl CudaBackend {
    /// `Backend::keep_block_tables`: for each of `groups` KV groups, `rows` rows of `width`
    /// blocks and the null row, zeroed. Asking again for the same shape keeps the tables;
    /// another shape replaces them (and the graphs that read the old ones).
    pub(super) fn keep_block_tables_op(
        &self,
        groups: usize,
        rows: usize,
        width: usize,
    ) -> Result<Option<u32>> {
        let mut t = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        if t.len() == groups
            && t.iter()
                .all(|have| have.lens.len() == rows && have.width == width)
        {
            return Ok(Some(rows as u32));
        }
        if groups == 0 {
            return Err(shape_err(
                "keep_block_tables",
                "tables for no KV group".to_string(),
            ));
        }
        let (Some(cells), true) = ((rows + 1).checked_mul(width), width > 0) else {
            return Err(shape_err(
                "keep_block_tables",
                format!("{rows} rows of {width} blocks"),
            ));
        };
        let mut fresh = Vec::with_capacity(groups);
        for _ in 0..groups {
            let buf = self
                .stream
                .alloc_zeros::<u32>(cells)
                .map_err(dev_err("block tables"))?;
            fresh.push(DeviceTables {
                buf,
                width,
                lens: vec![0; rows],
                max_id: None,
            });
        }
        let replaced = !std::mem::replace(&mut *t, fresh).is_empty();
        drop(t);
        // Graphs read the old tables' address (the graphs' lock is taken before the tables').
        if replaced {
            self.drop_graphs();
        }
        Ok(Some(rows as u32))
    }

    /// `Backend::write_block_tables`: KV group `group`'s changes checked, uploaded in one
    /// copy and scattered by one launch.
    pub(super) fn write_block_tables_op(
        &self,
        group: usize,
        writes: &[TableWrite<'_>],
    ) -> Result<()> {
        let mut guard = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        let Some(t) = guard.get_mut(group) else {
            return match writes.is_empty() {
                true => Ok(()),
                false => Err(shape_err(
                    "write_block_tables",
                    format!(
                        "no block tables of KV group {group} are kept (keep_block_tables first)"
                    ),
                )),
            };
        };
        let (data, lens, n) = pack(&t.lens, t.width, writes)?;
        let written = writes.iter().flat_map(|w| w.ids.iter().copied()).max();
        if n > 0 {
            let upload = self
                .stream
                .clone_htod(&data)
                .map_err(dev_err("write_block_tables: upload"))?;
            let width = int(t.width, "write_block_tables")?;
            let grid = dim(n, "write_block_tables")?;
            let (tables, changes) = (
                t.buf.device_ptr(&self.stream).0,
                upload.device_ptr(&self.stream).0,
            );
            // SAFETY: every change's row is below rows and start + count ≤ width (checked by
            // `pack`), so each write lands in the [rows + 1, width] buffer; `changes` holds the
            // n quads and the ids they index, and lives until the stream has run the kernel
            // (its free is ordered on the same stream).
            unsafe {
                kernels::block_table_write.launch(
                    self,
                    cfg((grid, 1), 128),
                    (tables, changes, width),
                )?;
            }
        }
        t.lens = lens;
        t.max_id = t.max_id.max(written);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(row: u32, start: usize, ids: &[u32], len: usize) -> TableWrite<'_> {
        TableWrite {
            row,
            start,
            ids,
            len,
        }
    }

    #[test]
    fn changes_pack_as_quads_then_ids() {
        let (data, lens, n) = pack(
            &[0, 3, 0],
            8,
            &[w(0, 0, &[7, 8], 2), w(1, 3, &[], 3), w(1, 3, &[9], 4)],
        )
        .expect("packs");
        assert_eq!(n, 2);
        assert_eq!(lens, vec![2, 4, 0]);
        assert_eq!(data, vec![0, 0, 2, 8, 1, 3, 1, 10, 7, 8, 9]);
    }

    #[test]
    fn changes_to_one_row_merge_into_one_segment() {
        // A row filled, then rewritten from block 1 and extended: one segment, the last word.
        let (data, lens, n) =
            pack(&[2], 8, &[w(0, 0, &[1, 2, 3], 3), w(0, 1, &[7, 8], 3)]).expect("packs");
        assert_eq!((n, lens), (1, vec![3]));
        assert_eq!(data, vec![0, 0, 3, 4, 1, 7, 8]);
        // Extended past an earlier segment that started later.
        let (data, _, _) = pack(&[4], 8, &[w(0, 3, &[5], 4), w(0, 1, &[6], 2)]).expect("packs");
        assert_eq!(data, vec![0, 1, 1, 4, 6]);
    }

    #[test]
    fn a_change_that_skips_blocks_or_overflows_is_refused_whole() {
        // A gap: row 1 holds 3 blocks, a change starting at 4 would leave one unwritten.
        let e = pack(&[0, 3], 8, &[w(0, 0, &[1], 1), w(1, 4, &[2], 5)]).expect_err("a gap");
        assert!(e.to_string().contains("row 1 holds 3 blocks"), "{e}");
        // Past the width, a wrong length, a row that is not kept.
        assert!(pack(&[0], 2, &[w(0, 0, &[1, 2, 3], 3)]).is_err());
        assert!(pack(&[0], 8, &[w(0, 0, &[1, 2], 3)]).is_err());
        let e = pack(&[0], 8, &[w(1, 0, &[1], 1)]).expect_err("no such row");
        assert!(e.to_string().contains("outside the 1 rows"), "{e}");
        // Starting afresh always fits.
        assert!(pack(&[5], 8, &[w(0, 0, &[4], 1)]).is_ok());
    }

    #[test]
    fn the_null_row_reaches_every_block() {
        let view = TablesView {
            ptr: 0,
            width: 16,
            lens: &[3, 0],
            max_id: Some(9),
        };
        assert_eq!(view.null_row(), 2);
        assert_eq!(
            (view.len(0), view.len(1), view.len(2), view.len(3)),
            (Some(3), Some(0), Some(16), None)
        );
    }
}
