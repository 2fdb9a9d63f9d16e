//! `CudaBatch`: one step's index arrays on the device, uploaded in a single copy, and what the
//! ops must check against their tensors (the largest token id, slot and block id).

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};

use super::block_tables::TablesView;
use super::{dev_err, shape_err};
use crate::backend::{BatchInputs, Result};
use crate::kv_cache::NO_STATE;

/// The device copy of a [`BatchInputs`]: token ids, positions, slot mapping, the sequence of
/// each row, block tables (or, when the backend keeps them, each row's table row) and the rows
/// that want logits, back to back in one `u32` buffer.
#[derive(Debug)]
pub struct CudaBatch {
    pub(super) num_tokens: usize,
    pub(super) max_blocks_per_seq: usize,
    /// Entries from one table row to the next where attention reads them: the batch's own
    /// width, or the kept tables' (`block_tables.rs`).
    pub(super) table_stride: usize,
    /// The kept tables, when the batch names their rows (a fixed address).
    tables_ptr: Option<u64>,
    pub(super) block_size: usize,
    pub(super) num_logits_rows: usize,
    buf: CudaSlice<u32>,
    offsets: Offsets,
    /// Largest value of each array, for range checks against the tensors an op gets.
    pub(super) max_token_id: Option<u32>,
    pub(super) max_slot: Option<u32>,
    pub(super) max_block_id: Option<u32>,
    pub(super) max_logits_row: Option<u32>,
    /// The longest causal range of any row (its position + 1): how far attention reads.
    pub(super) max_len: usize,
    /// Why attention cannot run on this batch (a row whose position the block table does not
    /// reach), found once here rather than in every layer.
    pub(super) table_error: Option<String>,
    /// Host rows of the logits, for the sampler.
    pub(super) logits_rows: Vec<u32>,
    /// The rows the flash prefill kernel takes, if any (see [`FlashPlan`]).
    pub(super) flash: Option<FlashPlan>,
    /// The recurrent-state plans (hybrid models): how many sequences have one, the largest
    /// slot they name (own or saved to), and why the plans cannot run, if they cannot.
    pub(super) states: StatesInfo,
    /// The batch of KV groups 1.. (`BatchInputs::groups`): the same rows on each group's
    /// slots and tables; empty with one group.
    pub(super) groups: Vec<CudaBatch>,
}

/// What `gated_delta_net` checks about the step's state plans before its kernels follow them.
#[derive(Debug, Clone, Default)]
pub(super) struct StatesInfo {
    pub(super) num_seqs: usize,
    pub(super) max_slot: Option<u32>,
    pub(super) error: Option<String>,
}

/// Rows of a flash prefill tile (FLASH_BQ in attention_flash.cu).
pub(super) const FLASH_TILE_ROWS: usize = 128;

/// Which rows `paged_attention` gives the flash prefill kernel: every row from the first
/// sequence with at least `flash_min_rows` rows on (prefill chunks come after the decode rows
/// in a step), cut into tiles of at most [`FLASH_TILE_ROWS`] rows of one sequence, heaviest (most
/// keys) first; the rows before go to the decode kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FlashPlan {
    /// The first row the flash kernel takes; rows `0..first_row` take the decode kernels.
    pub(super) first_row: usize,
    /// The (first row, end row) pairs.
    pub(super) tiles: usize,
    /// The longest causal range of the decode rows (`0..first_row`).
    pub(super) decode_max_len: usize,
}

/// The flash plan of a batch whose rows map to sequences by `seq_starts`, and its tiles.
fn flash_plan(b: &BatchInputs, min_rows: Option<usize>) -> Option<(FlashPlan, Vec<u32>)> {
    let min_rows = min_rows?;
    let s = b.num_seqs();
    let first = (0..s).find(|&q| (b.seq_starts[q + 1] - b.seq_starts[q]) as usize >= min_rows)?;
    let first_row = b.seq_starts[first] as usize;
    // (keys, first row, end row) of each tile; keys: the tile's largest position + 1.
    let mut tiles: Vec<(u32, u32, u32)> = Vec::new();
    for q in first..s {
        let (a, z) = (b.seq_starts[q] as usize, b.seq_starts[q + 1] as usize);
        for r0 in (a..z).step_by(FLASH_TILE_ROWS) {
            let r1 = (r0 + FLASH_TILE_ROWS).min(z);
            let keys = b.positions[r0..r1].iter().max().map_or(0, |&p| p + 1);
            tiles.push((keys, r0 as u32, r1 as u32));
        }
    }
    tiles.sort_by_key(|&(keys, r0, _)| (std::cmp::Reverse(keys), r0));
    let plan = FlashPlan {
        first_row,
        tiles: tiles.len(),
        decode_max_len: b.positions[..first_row]
            .iter()
            .map(|&p| p as usize + 1)
            .max()
            .unwrap_or(0),
    };
    Some((plan, tiles.iter().flat_map(|&(_, a, z)| [a, z]).collect()))
}

#[derive(Debug, Clone, Copy)]
struct Offsets {
    token_ids: usize,
    positions: usize,
    slot_mapping: usize,
    row_seq: usize,
    /// Each row's table row: its sequence's (`row_seq`) when the batch carries the tables.
    row_table: usize,
    block_tables: usize,
    logits_rows: usize,
    seq_starts: usize,
    state_slots: usize,
    save_starts: usize,
    saves: usize,
    flash_tiles: usize,
}

/// A batch's arrays packed for the device, with what the ops check against.
struct Packed {
    data: Vec<u32>,
    offsets: Offsets,
    table_stride: usize,
    tables_ptr: Option<u64>,
    max_token_id: Option<u32>,
    max_slot: Option<u32>,
    max_block_id: Option<u32>,
    max_logits_row: Option<u32>,
    max_len: usize,
    table_error: Option<String>,
    states: StatesInfo,
    flash: Option<FlashPlan>,
}

/// The state plans as the kernels read them: each sequence's slot, where its saves start in
/// `saves` (`[S + 1]`) and the saves as (after, slot) pairs; and what the op must check.
fn pack_states(b: &BatchInputs) -> (Vec<u32>, Vec<u32>, Vec<u32>, StatesInfo) {
    let mut info = StatesInfo {
        num_seqs: b.states.len(),
        ..StatesInfo::default()
    };
    let slots: Vec<u32> = b.states.iter().map(|p| p.slot).collect();
    // Padding rows (NO_STATE) share no slot: they read zeros and write nothing.
    let mut distinct: Vec<u32> = slots.iter().copied().filter(|&s| s != NO_STATE).collect();
    distinct.sort_unstable();
    distinct.dedup();
    if slots.len() != b.num_seqs() {
        info.error = Some(format!(
            "{} state plans for {} sequences",
            slots.len(),
            b.num_seqs()
        ));
    } else if distinct.len() != slots.iter().filter(|&&s| s != NO_STATE).count() {
        info.error = Some(format!("two sequences share a state slot: {slots:?}"));
    }
    let mut starts = Vec::with_capacity(b.states.len() + 1);
    let mut saves = Vec::new();
    starts.push(0);
    for (seq, p) in b.states.iter().enumerate() {
        let len = b
            .seq_starts
            .get(seq + 1)
            .map_or(0, |e| e - b.seq_starts[seq]);
        let sorted = p.saves.windows(2).all(|w| w[0].after <= w[1].after);
        // A save may target its own slot (a no-op) but not another sequence's.
        let foreign = p
            .saves
            .iter()
            .any(|sv| sv.slot != p.slot && distinct.binary_search(&sv.slot).is_ok());
        let padding_saves = p.is_padding() && !p.saves.is_empty();
        if info.error.is_none()
            && (!sorted || foreign || padding_saves || p.saves.iter().any(|sv| sv.after > len))
        {
            info.error = Some(format!(
                "sequence {seq} of {len} rows: saves {:?} must be sorted by `after`, within the \
                 chunk and not into another sequence's slot",
                p.saves
            ));
        }
        saves.extend(p.saves.iter().flat_map(|sv| [sv.after, sv.slot]));
        starts.push((saves.len() / 2) as u32);
    }
    // Two sequences saving into one slot would race on the device.
    let mut targets: Vec<(u32, usize)> = b
        .states
        .iter()
        .enumerate()
        .flat_map(|(seq, p)| p.saves.iter().map(move |sv| (sv.slot, seq)))
        .collect();
    targets.sort_unstable();
    targets.dedup();
    if info.error.is_none() && targets.windows(2).any(|w| w[0].0 == w[1].0) {
        info.error = Some("two sequences save into the same slot".to_string());
    }
    info.max_slot = distinct
        .iter()
        .copied()
        .chain(targets.iter().map(|t| t.0))
        .max();
    (slots, starts, saves, info)
}

/// Where each sequence's table is read: its own in the batch, or a row of the kept tables.
#[derive(Clone, Copy)]
enum TableSource<'a> {
    Batch,
    Kept(TablesView<'a>),
}

impl TableSource<'_> {
    /// The source of a batch's tables: the kept ones when it names rows of them.
    fn of<'a>(b: &BatchInputs, kept: Option<TablesView<'a>>) -> Result<TableSource<'a>> {
        if b.table_rows.is_empty() {
            return Ok(TableSource::Batch);
        }
        let Some(view) = kept else {
            return Err(shape_err(
                "prepare_batch",
                "the batch names table rows but no block tables are kept".to_string(),
            ));
        };
        if b.table_rows.len() != b.num_seqs() || !b.block_tables.is_empty() {
            return Err(shape_err(
                "prepare_batch",
                format!(
                    "{} table rows and {} table entries for {} sequences",
                    b.table_rows.len(),
                    b.block_tables.len(),
                    b.num_seqs()
                ),
            ));
        }
        if let Some(r) = b.table_rows.iter().find(|&&r| view.len(r).is_none()) {
            return Err(shape_err(
                "prepare_batch",
                format!("table row {r} is outside the {} kept", view.null_row() + 1),
            ));
        }
        Ok(TableSource::Kept(view))
    }
}

fn pack(
    b: &BatchInputs,
    flash_min_rows: Option<usize>,
    kept: Option<TablesView<'_>>,
) -> Result<Packed> {
    let source = TableSource::of(b, kept)?;
    let t = b.num_tokens();
    let s = b.num_seqs();
    if b.positions.len() != t || b.slot_mapping.len() != t {
        return Err(shape_err(
            "prepare_batch",
            format!(
                "{t} tokens but {} positions and {} slots",
                b.positions.len(),
                b.slot_mapping.len()
            ),
        ));
    }
    let starts_ok = b.seq_starts.len() == s + 1
        && b.seq_starts.first() == Some(&0)
        && b.seq_starts.last() == Some(&(t as u32))
        && b.seq_starts.windows(2).all(|w| w[0] <= w[1]);
    let tables_ok = match source {
        TableSource::Batch => b.block_tables.len() == s * b.max_blocks_per_seq,
        TableSource::Kept(_) => true,
    };
    if !starts_ok || !tables_ok {
        return Err(shape_err(
            "prepare_batch",
            format!(
                "seq_starts {:?} for {t} tokens in {s} sequences, block tables of {} for {} a sequence",
                b.seq_starts,
                b.block_tables.len(),
                b.max_blocks_per_seq
            ),
        ));
    }
    // Row → sequence, and the causal reach of each row checked against its table.
    let mut row_seq = vec![0u32; t];
    let mut table_error = None;
    let bs = b.block_size.max(1);
    for seq in 0..s {
        let (a, z) = (b.seq_starts[seq] as usize, b.seq_starts[seq + 1] as usize);
        row_seq[a..z].fill(seq as u32);
        let need = (b.context_lens[seq] as usize).div_ceil(bs);
        let reach = b.positions[a..z]
            .iter()
            .map(|&p| p as usize / bs + 1)
            .max()
            .unwrap_or(0);
        let need = need.max(reach);
        if table_error.is_none() && need > b.max_blocks_per_seq {
            table_error = Some(format!(
                "sequence {seq} needs {need} blocks, table has {}",
                b.max_blocks_per_seq
            ));
        }
        if let TableSource::Kept(view) = source {
            let row = b.table_rows[seq];
            let held = view.len(row).unwrap_or(0);
            if table_error.is_none() && need > held {
                table_error = Some(format!(
                    "sequence {seq} needs {need} blocks, its table row {row} holds {held}"
                ));
            }
        }
    }
    let row_table: Vec<u32> = match source {
        TableSource::Batch => Vec::new(),
        TableSource::Kept(_) => row_seq.iter().map(|&q| b.table_rows[q as usize]).collect(),
    };
    let mut data =
        Vec::with_capacity(4 * t + b.block_tables.len() + b.logits_rows.len() + 4 * b.states.len());
    let mut push = |v: &[u32]| {
        let at = data.len();
        data.extend_from_slice(v);
        at
    };
    let (flash, flash_tiles) = flash_plan(b, flash_min_rows).unzip();
    let (state_slots, save_starts, saves, states) = if b.states.is_empty() {
        Default::default()
    } else {
        pack_states(b)
    };
    let offsets = Offsets {
        token_ids: push(&b.token_ids),
        positions: push(&b.positions),
        slot_mapping: push(&b.slot_mapping),
        row_seq: push(&row_seq),
        row_table: 0,
        block_tables: push(&b.block_tables),
        logits_rows: push(&b.logits_rows),
        seq_starts: push(if b.states.is_empty() {
            &[]
        } else {
            &b.seq_starts
        }),
        state_slots: push(&state_slots),
        save_starts: push(&save_starts),
        saves: push(&saves),
        flash_tiles: push(flash_tiles.as_deref().unwrap_or_default()),
    };
    let offsets = Offsets {
        row_table: match source {
            TableSource::Batch => offsets.row_seq,
            TableSource::Kept(_) => push(&row_table),
        },
        ..offsets
    };
    let (table_stride, tables_ptr, max_block_id) = match source {
        TableSource::Batch => (
            b.max_blocks_per_seq,
            None,
            b.block_tables.iter().copied().max(),
        ),
        TableSource::Kept(view) => (view.width, Some(view.ptr), view.max_id),
    };
    if data.is_empty() {
        data.push(0); // keep the buffer (and its pointer) non-empty
    }
    Ok(Packed {
        data,
        offsets,
        table_stride,
        tables_ptr,
        max_token_id: b.token_ids.iter().copied().max(),
        max_slot: b.slot_mapping.iter().copied().max(),
        max_block_id,
        max_logits_row: b.logits_rows.iter().copied().max(),
        max_len: b
            .positions
            .iter()
            .map(|&p| p as usize + 1)
            .max()
            .unwrap_or(0),
        table_error,
        states,
        flash,
    })
}

impl CudaBatch {
    /// [`CudaBatch::new`] with a batch a KV group: group `g`'s (`b.groups[g - 1]`) reads the
    /// kept tables `kept[g]`.
    pub(super) fn grouped(
        stream: &std::sync::Arc<CudaStream>,
        b: &BatchInputs,
        flash_min_rows: Option<usize>,
        kept: &[TablesView<'_>],
    ) -> Result<Self> {
        let mut batch = Self::new(stream, b, flash_min_rows, kept.first().copied())?;
        for (g, host) in b.groups.iter().enumerate() {
            let view = kept.get(g + 1).copied();
            batch
                .groups
                .push(Self::new(stream, host, flash_min_rows, view)?);
        }
        Ok(batch)
    }

    /// The batch KV group `group` reads: this one for group 0.
    pub(super) fn group(&self, group: usize) -> Result<&CudaBatch> {
        match group {
            0 => Ok(self),
            g => self
                .groups
                .get(g - 1)
                .ok_or_else(|| shape_err("group_batch", format!("the batch has no KV group {g}"))),
        }
    }

    /// [`CudaBatch::refill`] for every KV group's batch.
    pub(super) fn refill_grouped(
        &mut self,
        stream: &std::sync::Arc<CudaStream>,
        b: &BatchInputs,
        kept: &[TablesView<'_>],
    ) -> Result<()> {
        if b.groups.len() != self.groups.len() {
            return Err(shape_err(
                "graph batch",
                format!(
                    "{} KV groups do not fit a graph captured for {}",
                    b.groups.len() + 1,
                    self.groups.len() + 1
                ),
            ));
        }
        self.refill(stream, b, kept.first().copied())?;
        for (g, (batch, host)) in self.groups.iter_mut().zip(&b.groups).enumerate() {
            batch.refill(stream, host, kept.get(g + 1).copied())?;
        }
        Ok(())
    }

    /// The batch on the device; sequences with at least `flash_min_rows` rows (and every one
    /// after the first of them) take the flash prefill kernel. A batch that names table rows
    /// reads them from `kept`.
    pub(super) fn new(
        stream: &std::sync::Arc<CudaStream>,
        b: &BatchInputs,
        flash_min_rows: Option<usize>,
        kept: Option<TablesView<'_>>,
    ) -> Result<Self> {
        let p = pack(b, flash_min_rows, kept)?;
        let buf = stream
            .clone_htod(&p.data)
            .map_err(dev_err("prepare_batch: upload"))?;
        Ok(Self {
            num_tokens: b.num_tokens(),
            max_blocks_per_seq: b.max_blocks_per_seq,
            table_stride: p.table_stride,
            tables_ptr: p.tables_ptr,
            block_size: b.block_size,
            num_logits_rows: b.logits_rows.len(),
            buf,
            offsets: p.offsets,
            max_token_id: p.max_token_id,
            max_slot: p.max_slot,
            max_block_id: p.max_block_id,
            max_logits_row: p.max_logits_row,
            max_len: p.max_len,
            table_error: p.table_error,
            logits_rows: b.logits_rows.clone(),
            states: p.states,
            flash: p.flash,
            groups: Vec::new(),
        })
    }

    /// A batch a CUDA graph captures: attention is launched for the whole reach of the block
    /// tables (`max_blocks_per_seq · block_size` keys), since later replays may go further
    /// than the steps it was captured on; slices past a row's end are empty and cheap. A
    /// graph's batch is made without a flash plan (`new(.., None)`): its rows all take the
    /// decode kernels, as every replay's refill does.
    pub(super) fn for_graph(mut self) -> Self {
        debug_assert!(self.flash.is_none(), "a graph batch has no flash plan");
        self.max_len = self.max_blocks_per_seq * self.block_size;
        self.groups = self.groups.into_iter().map(Self::for_graph).collect();
        self
    }

    /// Overwrite the device arrays in place (their address is baked into a graph) with a
    /// batch of the same shape. The replayed ops do not check their inputs again, so this
    /// refuses a batch whose rows reach past their tables or whose state plans conflict, and
    /// the caller has checked token ids, block ids and state slots against the model, the
    /// cache and the state storage.
    pub(super) fn refill(
        &mut self,
        stream: &std::sync::Arc<CudaStream>,
        b: &BatchInputs,
        kept: Option<TablesView<'_>>,
    ) -> Result<()> {
        let p = pack(b, None, kept)?;
        let same_shape = p.data.len() == self.buf.len()
            && p.tables_ptr == self.tables_ptr
            && p.table_stride == self.table_stride
            && b.num_tokens() == self.num_tokens
            && b.max_blocks_per_seq == self.max_blocks_per_seq
            && b.block_size == self.block_size
            && b.logits_rows.len() == self.num_logits_rows;
        if !same_shape {
            return Err(shape_err(
                "graph batch",
                format!(
                    "{} tokens × {} blocks does not fit a graph captured for {} × {}",
                    b.num_tokens(),
                    b.max_blocks_per_seq,
                    self.num_tokens,
                    self.max_blocks_per_seq
                ),
            ));
        }
        if let Some(e) = p.table_error {
            return Err(shape_err("graph batch", e));
        }
        // Sequences sharing a slot, or saves out of place (the replayed state kernels would
        // race); the slots' range against the state storage is the caller's to check.
        if let Some(e) = p.states.error {
            return Err(shape_err("graph batch", e));
        }
        stream
            .memcpy_htod(&p.data, &mut self.buf)
            .map_err(dev_err("graph batch: upload"))?;
        self.offsets = p.offsets;
        self.max_token_id = p.max_token_id;
        self.max_slot = p.max_slot;
        self.max_block_id = p.max_block_id;
        self.max_logits_row = p.max_logits_row;
        self.logits_rows.clone_from(&b.logits_rows);
        self.states = p.states;
        Ok(())
    }

    fn at(&self, stream: &CudaStream, offset: usize) -> u64 {
        let (p, _guard) = self.buf.device_ptr(stream);
        p + (offset * 4) as u64
    }

    pub(super) fn token_ids(&self, s: &CudaStream) -> u64 {
        self.at(s, self.offsets.token_ids)
    }
    pub(super) fn positions(&self, s: &CudaStream) -> u64 {
        self.at(s, self.offsets.positions)
    }
    pub(super) fn slot_mapping(&self, s: &CudaStream) -> u64 {
        self.at(s, self.offsets.slot_mapping)
    }
    pub(super) fn row_seq(&self, s: &CudaStream) -> u64 {
        self.at(s, self.offsets.row_seq)
    }
    /// The tables attention reads: the batch's, or the kept ones (rows `table_stride` apart).
    pub(super) fn block_tables(&self, s: &CudaStream) -> u64 {
        self.tables_ptr
            .unwrap_or_else(|| self.at(s, self.offsets.block_tables))
    }
    /// `[T]` the table row each row reads (with [`CudaBatch::block_tables`]).
    pub(super) fn row_table(&self, s: &CudaStream) -> u64 {
        self.at(s, self.offsets.row_table)
    }
    pub(super) fn flash_tiles(&self, s: &CudaStream) -> u64 {
        self.at(s, self.offsets.flash_tiles)
    }
    pub(super) fn logits_rows_ptr(&self, s: &CudaStream) -> u64 {
        self.at(s, self.offsets.logits_rows)
    }
    /// `[S + 1]` row offsets, `[S]` state slots, `[S + 1]` save offsets and the (after, slot)
    /// saves; present when the batch has state plans.
    pub(super) fn state_arrays(&self, s: &CudaStream) -> [u64; 4] {
        let o = &self.offsets;
        [o.seq_starts, o.state_slots, o.save_starts, o.saves].map(|at| self.at(s, at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::SeqChunk;

    /// A batch of (start position, rows) sequences with blocks of 16 and tables long enough.
    fn batch(seqs: &[(usize, usize)]) -> BatchInputs {
        let tokens: Vec<Vec<u32>> = seqs.iter().map(|&(_, n)| vec![1; n]).collect();
        let tables: Vec<Vec<u32>> = seqs
            .iter()
            .enumerate()
            .map(|(i, &(p, n))| {
                (0..(p + n).div_ceil(16) as u32)
                    .map(|b| 100 * i as u32 + b)
                    .collect()
            })
            .collect();
        let chunks: Vec<SeqChunk<'_>> = seqs
            .iter()
            .zip(&tokens)
            .zip(&tables)
            .map(|((&(start, _), t), table)| SeqChunk {
                tokens: t,
                start_pos: start,
                block_table: table,
                logits_rows: vec![],
            })
            .collect();
        BatchInputs::build(16, &chunks)
    }

    #[test]
    fn decode_rows_before_the_first_prefill_keep_the_decode_kernels() {
        // Two decode rows, a 300-row chunk after 1,000 cached keys, then one more decode row.
        let b = batch(&[(500, 1), (40, 1), (1000, 300), (70, 1)]);
        let (plan, tiles) = flash_plan(&b, Some(16)).expect("a plan");
        assert_eq!(plan.first_row, 2);
        assert_eq!(plan.decode_max_len, 501);
        // 300 rows in tiles of 128, 128, 44, and the trailing decode row's tile of one.
        assert_eq!(plan.tiles, 4);
        let pairs: Vec<(u32, u32)> = tiles.chunks(2).map(|p| (p[0], p[1])).collect();
        let mut sorted = pairs.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, vec![(2, 130), (130, 258), (258, 302), (302, 303)]);
        // Heaviest first: the chunk's last tile reaches the most keys.
        assert_eq!(pairs[0], (258, 302));
        assert_eq!(*pairs.last().expect("tiles"), (302, 303));
    }

    #[test]
    fn no_plan_without_a_long_enough_sequence_or_when_off() {
        let b = batch(&[(500, 1), (0, 15)]);
        assert!(flash_plan(&b, Some(16)).is_none());
        assert!(flash_plan(&b, None).is_none());
        let all = flash_plan(&batch(&[(0, 16)]), Some(16)).expect("a plan").0;
        assert_eq!((all.first_row, all.tiles, all.decode_max_len), (0, 1, 0));
    }

    #[test]
    fn a_batch_on_kept_rows_reads_each_rows_table_row() {
        use crate::backend::SeqChunk;
        // Two sequences in rows 3 and 1 of kept tables 8 wide (row 4 is the null row).
        let table = [7u32, 8, 9];
        let chunks = [
            SeqChunk {
                tokens: &[1, 1],
                start_pos: 30,
                block_table: &table,
                logits_rows: vec![],
            },
            SeqChunk {
                tokens: &[1],
                start_pos: 5,
                block_table: &table[..1],
                logits_rows: vec![],
            },
        ];
        let b = BatchInputs::build_on_rows(16, &chunks, 1, &[3, 1]);
        assert!(b.block_tables.is_empty());
        let lens = [0, 1, 0, 2];
        let view = TablesView {
            ptr: 0xabc0,
            width: 8,
            lens: &lens,
            max_id: Some(9),
        };
        let p = pack(&b, None, Some(view)).expect("packs");
        let at = p.offsets.row_table;
        assert_eq!(&p.data[at..at + 3], &[3, 3, 1]);
        assert_eq!(
            (p.table_stride, p.tables_ptr, p.max_block_id),
            (8, Some(0xabc0), Some(9))
        );
        // Row 3 holds 2 blocks; the first sequence reaches position 31, its second block.
        assert!(p.table_error.is_none());
        let short = [0, 1, 0, 1];
        let p = pack(
            &b,
            None,
            Some(TablesView {
                lens: &short,
                ..view
            }),
        )
        .expect("packs");
        let e = p.table_error.expect("a row too short");
        assert!(e.contains("its table row 3 holds 1"), "{e}");
        // Rows past the null row, or no kept tables at all, are refused.
        let far = BatchInputs::build_on_rows(16, &chunks, 1, &[5, 1]);
        assert!(pack(&far, None, Some(view)).is_err());
        assert!(pack(&b, None, None).is_err());
    }

    #[test]
    fn the_tiles_are_packed_after_the_other_arrays() {
        let b = batch(&[(3, 1), (0, 200)]);
        let p = pack(&b, Some(16), None).expect("packs");
        let plan = p.flash.expect("a plan");
        let at = p.offsets.flash_tiles;
        assert_eq!(plan.tiles, 2);
        assert_eq!(&p.data[at..at + 4], &[129, 201, 1, 129]);
        // A graph's batch (no plan) packs no tiles.
        assert!(pack(&b, None, None).expect("packs").flash.is_none());
    }
}
