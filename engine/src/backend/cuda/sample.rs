//! `sample` on the device, drawing exactly the host sampler's tokens (`sampling::sample_row`)
//! while bringing back a few bytes a row instead of the whole 600 KB logits row.
//!
//! Each row takes one route (`route`):
//! - **argmax**: plain greedy on f32 logits (no penalties, masks or logprobs): `argmax_part_f32`
//!   + `argmax_final_f32` on the logits themselves, 4 bytes back.
//! - **device**: greedy with penalties or masks, temperature without top-k/top-p/min-p, and
//!   temperature with them. `sample_prepare_*` (sample.cu) copies each row into an f32 scratch
//!   row and applies the row's penalties and min_tokens masks there (the logits are not
//!   written), from one uploaded plan: an 18-word record a row, the row's penalties and
//!   `SampleRow::masked_tokens`. A row of a running sequence (`SampleRow::seq`) reads its
//!   penalties from the sequence's count state kept on the device (`penalty_state.rs`, brought
//!   up to date by `sample_penalty_absorb` with the tokens appended since the last call); any
//!   other penalised row uploads its `sampling::penalty_entries`. Then greedy rows take
//!   the argmax on the scratch, temperature rows `sample_gumbel` (the Gumbel-max over the whole
//!   row, 4 bytes back), filtered rows `sample_candidates` (the row's best `want` candidates in
//!   the host's order, the count of finite logits and the fixed-point total, ~8 KB back), which
//!   the host finishes with the host sampler's own `sampling::kept` and `gumbel_pick`.
//!
//! A row with a grammar takes the device route too (never the plain argmax): its mask, a
//! bitmask computed on the host (by the grammar's workers while the forward ran, `grammar/`),
//! is uploaded in the plan, one bit a token, and `sample_token_mask` sets the forbidden columns
//! of its scratch row to -inf after `sample_prepare`. The masks are gathered before anything
//! waits on the stream, so the host finishes them while the forward still runs.
//! - **host**: rows asking for logprobs (reported before penalties), rows with a logit bias
//!   (`SamplingParams::needs_host`), parameters the device
//!   does not reproduce (a non-finite or negative temperature or penalty), and device rows the
//!   device could not decide (no finite logit, an overflowing `v / T`, or a top-k/top-p/min-p cut
//!   beyond the head): the logits row is copied back and goes through `sampling::sample_row`.
//!
//! Rows go to the device in chunks of `CHUNK_ROWS` so the scratch stays under 40 MB at
//! Qwen3's vocabulary. Why the device's values are the host's bit for bit (logs and exps
//! included) is written at the top of `kernels/src/sample.cu`.

use std::sync::PoisonError;
use std::sync::atomic::{AtomicU64, Ordering};

use cudarc::driver::{CudaSlice, DevicePtr};
use rayon::prelude::*;

use super::elementwise::{cfg, dim, int};
use super::tensor::{self, CudaTensor, DType};
use super::{CudaBackend, check, dev_err};
use crate::backend::Result;
use crate::backend::kernels;
use crate::backend::sampling::{self, SampleRow, Sampled};
use crate::grammar::TokenMask;
use penalty_state::{PenaltyStates, RowState};

mod penalty_state;

/// The CUDA backend's penalty states: one device buffer of `vocab` u32 a sequence.
pub(super) type DevicePenaltyStates = PenaltyStates<CudaSlice<u32>>;
/// Each row's penalty state, and the uploaded absorb work (kept until the stream has run it).
type SyncedStates = (Vec<Option<RowState>>, Option<CudaSlice<u32>>);

/// Threads of an argmax_part_f32 block (ARGMAX_THREADS in softmax.cu).
pub(super) const ARGMAX_THREADS: u32 = 512;
/// Logits an argmax_part_f32 block scans at least, and the most blocks a row.
const ARGMAX_BLOCK_COLS: usize = 2048;
const ARGMAX_MAX_SPLITS: usize = 64;
/// Threads of the sample.cu blocks (SAMPLE_THREADS), and of sample_prepare's (PREPARE_THREADS),
/// whose blocks each own `PREPARE_SLICE` columns of a row.
const SAMPLE_THREADS: u32 = 1024;
const PREPARE_THREADS: u32 = 256;
const PREPARE_SLICE: usize = 4096;
/// The most candidates `sample_candidates` returns a row (KMAX in sample.cu).
const KMAX: usize = 1024;
/// Words of a row's plan record (PLAN_WORDS), and of a row's candidates output (CAND_WORDS).
const PLAN_WORDS: usize = 18;
/// PLAN_FLAGS' bit for a row whose penalties come from a state (its entries are its extras).
const PLAN_FROM_STATE: u32 = 8;
const META_WORDS: usize = 6;
const CAND_WORDS: usize = META_WORDS + 2 * KMAX;
/// Device rows handled at once (bounds the f32 scratch: 64 × 151936 × 4 B = 39 MB).
const CHUNK_ROWS: usize = 64;

/// Blocks argmax_part_f32 splits a row of `vocab` logits over: about ARGMAX_BLOCK_COLS a
/// block, at least 1 and at most ARGMAX_MAX_SPLITS.
pub(super) fn argmax_splits(vocab: usize) -> usize {
    (vocab / ARGMAX_BLOCK_COLS).clamp(1, ARGMAX_MAX_SPLITS)
}

/// Rows sampled per route since the process started, for the check's report: argmax, greedy,
/// gumbel, candidates, host, and device rows handed back to the host.
static ROUTED: [AtomicU64; 6] = [const { AtomicU64::new(0) }; 6];

/// How one row is sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Argmax,
    Greedy,
    Gumbel,
    Candidates,
    Host,
}

/// Which route reproduces the host sampler for this row.
fn route(r: &SampleRow<'_>) -> Route {
    let p = r.params;
    let finite = [
        p.repetition_penalty,
        p.frequency_penalty,
        p.presence_penalty,
    ]
    .iter()
    .all(|v| v.is_finite());
    if p.logprobs.is_some()
        || p.needs_host()
        || !finite
        || !(p.temperature >= 0.0 && p.temperature.is_finite())
    {
        return Route::Host;
    }
    if p.is_greedy() {
        let penalised =
            p.repetition_penalty != 1.0 || p.frequency_penalty != 0.0 || p.presence_penalty != 0.0;
        let masks = r.output().len() < p.min_tokens
            && !(p.eos_token_ids.is_empty() && p.stop_token_ids.is_empty());
        return if penalised || masks {
            Route::Greedy
        } else {
            Route::Argmax
        };
    }
    if sampling::filters(p) {
        Route::Candidates
    } else {
        Route::Gumbel
    }
}

/// Candidates to ask the device for: top-k's own count when it fits, else the most it returns.
fn want(r: &SampleRow<'_>) -> usize {
    match r.params.top_k as usize {
        0 => KMAX,
        k => k.min(KMAX),
    }
}

/// The plan for rows `idx` of `rows` (see sample.cu's PLAN_* words), where its three
/// `which` lists (greedy, gumbel, candidates: positions in `idx`) start, and where the
/// `sample_token_mask` pairs (position in `idx`, word offset of the row's mask) start and how
/// many there are.
struct Plan {
    words: Vec<u32>,
    lists: [(usize, Vec<usize>); 3],
    mask_pairs: (usize, usize),
}

/// `states[i]` is row i's penalty state, if it has one (then its entries are its extras);
/// `masks[i]` its grammar mask, if it has one.
fn build_plan(
    rows: &[SampleRow<'_>],
    idx: &[usize],
    routes: &[Route],
    states: &[Option<RowState>],
    masks: &[Option<&TokenMask>],
    vocab: usize,
) -> Plan {
    let mut words = vec![0u32; idx.len() * PLAN_WORDS];
    for (b, &i) in idx.iter().enumerate() {
        let r = &rows[i];
        let p = r.params;
        let state = states.get(i).and_then(Option::as_ref);
        let entries = match state {
            Some(s) => s.extras.clone(),
            None => sampling::penalty_entries(r.all_token_ids, r.output(), p, vocab),
        };
        let addr = state.map_or(0, |s| s.addr);
        let masks = r.masked_tokens(vocab);
        let at = words.len();
        words.extend(entries.iter().flat_map(|&(t, c)| [t, c]));
        let masks_at = words.len();
        words.extend(&masks);
        // The candidates kernel sums the row's total only where `kept` may use it: with no
        // top-k, or one wider than the head (under a top-k the head holds every candidate).
        let wants_total = p.top_k == 0 || p.top_k as usize > KMAX;
        let flags = u32::from(p.repetition_penalty != 1.0)
            | (u32::from(p.frequency_penalty != 0.0 || p.presence_penalty != 0.0) << 1)
            | (u32::from(wants_total) << 2)
            | if state.is_some() { PLAN_FROM_STATE } else { 0 };
        let rec = [
            r.logits_row as u32,
            at as u32,
            entries.len() as u32,
            masks_at as u32,
            masks.len() as u32,
            p.repetition_penalty.to_bits(),
            p.frequency_penalty.to_bits(),
            p.presence_penalty.to_bits(),
            flags,
            p.temperature.to_bits(),
            p.seed as u32,
            (p.seed >> 32) as u32,
            r.output().len() as u32,
            (r.output().len() as u64 >> 32) as u32,
            want(r) as u32,
            addr as u32,
            (addr >> 32) as u32,
            0,
        ];
        words[b * PLAN_WORDS..(b + 1) * PLAN_WORDS].copy_from_slice(&rec);
    }
    let lists = [Route::Greedy, Route::Gumbel, Route::Candidates].map(|kind| {
        let members: Vec<usize> = (0..idx.len()).filter(|&b| routes[idx[b]] == kind).collect();
        let at = words.len();
        words.extend(members.iter().map(|&b| b as u32));
        (at, members)
    });
    // Each masked row's bits (ids past the mask forbidden), then the pairs naming them.
    let mut pairs = Vec::new();
    for (b, &i) in idx.iter().enumerate() {
        if let Some(m) = masks.get(i).copied().flatten() {
            pairs.push([b as u32, words.len() as u32]);
            words.extend(m.words_for(vocab));
        }
    }
    let mask_pairs = (words.len(), pairs.len());
    words.extend(pairs.iter().flatten());
    Plan {
        words,
        lists,
        mask_pairs,
    }
}

/// Finish a filtered row from the device's head: `None` when the host must sample the row.
fn finish_candidates(r: &SampleRow<'_>, out: &[u32]) -> Option<u32> {
    let (finite, flags) = (out[0] as usize, out[1]);
    if finite == 0 || flags != 0 {
        return None;
    }
    let total = sampling::fixed_to_f64(
        u128::from(out[2])
            | (u128::from(out[3]) << 32)
            | (u128::from(out[4]) << 64)
            | (u128::from(out[5]) << 96),
    );
    let n = finite.min(want(r));
    let ids = &out[META_WORDS..META_WORDS + n];
    let values = &out[META_WORDS + KMAX..META_WORDS + KMAX + n];
    let head: Vec<(u32, f32)> = ids
        .iter()
        .zip(values)
        .map(|(&id, &v)| (id, f32::from_bits(v)))
        .collect();
    let keep = sampling::kept(&head, finite, Some(total), r.params)?;
    sampling::gumbel_pick(&head[..keep], r.params.seed, r.output().len() as u64)
}

impl CudaBackend {
    /// How many rows `sample` has sent down each route so far (all backends of the process):
    /// `[argmax, greedy, gumbel, candidates, host, handed back]`, where "handed back" counts
    /// device rows the host had to sample after all (no finite logit, overflow, a cut past the
    /// candidates).
    pub fn sample_route_counts() -> [u64; 6] {
        ROUTED.each_ref().map(|c| c.load(Ordering::Relaxed))
    }

    /// Sequences with a penalty state on the device, and how many states were built from a
    /// whole history so far (new sequences, rollbacks), for the check's report.
    pub fn penalty_state_counts(&self) -> (usize, u64) {
        let states = self
            .penalties
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (states.len(), states.rebuilds)
    }

    /// Frees the penalty states of sequences that ended (`Backend::end_sequences`).
    pub(super) fn end_sequences_op(&self, seqs: &[u64]) {
        self.penalties
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .end(seqs);
    }

    /// Brings the penalty states of the penalised `device_rows` with a sequence up to date
    /// (`PenaltyStates::sync`, then `sample_penalty_absorb` with the new tokens): each row's
    /// state, and the uploaded work, to be kept until the stream has run the sampling kernels.
    fn sync_penalty_states(
        &self,
        rows: &[SampleRow<'_>],
        device_rows: &[usize],
        vocab: usize,
    ) -> Result<SyncedStates> {
        let s = &self.stream;
        let synced = self
            .penalties
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .sync(rows, device_rows, vocab, |n| {
                // No memory for a state: the row takes the entry list, as without one.
                let buf = s.alloc_zeros::<u32>(n).ok()?;
                let addr = buf.device_ptr(s).0;
                Some((buf, addr))
            });
        if synced.segments == 0 {
            return Ok((synced.rows, None));
        }
        let absorb = || -> Result<CudaSlice<u32>> {
            let work = s
                .clone_htod(&synced.work)
                .map_err(dev_err("sample: upload penalty tokens"))?;
            let (w, v) = (work.device_ptr(s).0, int(vocab, "sample")?);
            // SAFETY: `work` holds `segments` segments of ABSORB_WORDS words, each with the
            // address of a live state of `vocab` u32 (held by the penalty states, whose buffers
            // are freed in stream order) and the offset and count of its tokens inside `work`;
            // one block a segment, ids at or past vocab skipped.
            unsafe {
                kernels::sample_penalty_absorb.launch(
                    self,
                    cfg((dim(synced.segments, "sample")?, 1), PREPARE_THREADS),
                    (w, v),
                )
            }?;
            Ok(work)
        };
        match absorb() {
            Ok(work) => Ok((synced.rows, Some(work))),
            Err(e) => {
                // The states now count tokens they never received: forget them all.
                self.penalties
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clear();
                Err(e)
            }
        }
    }

    pub(super) fn sample_op(
        &self,
        logits: &CudaTensor,
        rows: &[SampleRow<'_>],
    ) -> Result<Vec<Sampled>> {
        // The grammar masks first: nothing has waited for the forward yet, so whatever the
        // workers have not finished is finished while the device still runs.
        let masks: Vec<_> = rows
            .iter()
            .map(|r| sampling::row_mask(r, logits.cols()))
            .collect();
        let masks: Vec<Option<&TokenMask>> =
            masks.iter().map(|m| m.tokens().map(|m| &**m)).collect();
        self.sample_with_masks(logits, rows, &masks)
    }

    /// `sample` with each row's grammar mask given (`masks[i]` for `rows[i]`, `None`: no
    /// mask), applied on the device (host rows apply it on the host). `sample` computes them
    /// from the rows' grammars; the GPU check passes random ones.
    pub fn sample_with_masks(
        &self,
        logits: &CudaTensor,
        rows: &[SampleRow<'_>],
        masks: &[Option<&TokenMask>],
    ) -> Result<Vec<Sampled>> {
        check("sample", masks.len() == rows.len(), || {
            format!("{} masks for {} rows", masks.len(), rows.len())
        })?;
        check(
            "sample",
            rows.iter().all(|r| r.logits_row < logits.rows()),
            || {
                format!(
                    "logits {:?} for rows {:?}",
                    logits.shape,
                    rows.iter().map(|r| r.logits_row).collect::<Vec<_>>()
                )
            },
        )?;
        let vocab = logits.cols();
        let mut routes: Vec<Route> = rows.iter().map(route).collect();
        // A masked greedy row takes its argmax on the masked scratch.
        for (r, m) in routes.iter_mut().zip(masks) {
            if *r == Route::Argmax && m.is_some() {
                *r = Route::Greedy;
            }
        }
        if logits.dtype != DType::F32 || vocab == 0 {
            for r in &mut routes {
                if *r == Route::Argmax {
                    *r = if vocab == 0 {
                        Route::Host
                    } else {
                        Route::Greedy
                    };
                }
            }
        }
        if vocab == 0 {
            routes.fill(Route::Host);
        }
        let mut out: Vec<Option<u32>> = vec![None; rows.len()];
        let argmax_rows: Vec<usize> = (0..rows.len())
            .filter(|&i| routes[i] == Route::Argmax)
            .collect();
        if !argmax_rows.is_empty() {
            let which: Vec<u32> = argmax_rows
                .iter()
                .map(|&i| rows[i].logits_row as u32)
                .collect();
            for (&i, id) in argmax_rows.iter().zip(self.argmax(logits, &which)?) {
                out[i] = Some(id);
            }
        }
        let device_rows: Vec<usize> = (0..rows.len())
            .filter(|&i| matches!(routes[i], Route::Greedy | Route::Gumbel | Route::Candidates))
            .collect();
        let (states, absorb_work) = self.sync_penalty_states(rows, &device_rows, vocab)?;
        for chunk in device_rows.chunks(CHUNK_ROWS) {
            for (&i, id) in chunk
                .iter()
                .zip(self.sample_chunk(logits, rows, chunk, &routes, &states, masks)?)
            {
                out[i] = id;
            }
        }
        // The chunks synchronised the stream: the absorb kernel has read its work.
        drop(absorb_work);
        // Everything still undecided goes through the host sampler on its logits row.
        let on_host: Vec<usize> = (0..rows.len()).filter(|&i| out[i].is_none()).collect();
        for (i, r) in routes.iter().enumerate() {
            ROUTED[*r as usize].fetch_add(1, Ordering::Relaxed);
            if *r != Route::Host && out[i].is_none() {
                ROUTED[5].fetch_add(1, Ordering::Relaxed);
            }
        }
        let host_rows: Vec<Vec<f32>> = on_host
            .iter()
            .map(|&i| self.download_row(logits, rows[i].logits_row))
            .collect::<Result<_>>()?;
        let drawn: Vec<Sampled> = on_host
            .par_iter()
            .zip(&host_rows)
            .map(|(&i, row)| sampling::sample_row_with(row, &rows[i], masks[i]))
            .collect();
        let mut host = on_host.iter().zip(drawn);
        let mut sampled = Vec::with_capacity(rows.len());
        for id in out {
            match id {
                Some(token_id) => sampled.push(Sampled {
                    token_id,
                    logprobs: None,
                }),
                None => match host.next() {
                    Some((_, s)) => sampled.push(s),
                    None => return Err(super::shape_err("sample", "a row went unsampled".into())),
                },
            }
        }
        Ok(sampled)
    }

    /// Penalties and masks, then the greedy / Gumbel / candidates kernels, for rows `idx`
    /// (at most CHUNK_ROWS); a token per row, `None` where the host must sample the row.
    fn sample_chunk(
        &self,
        logits: &CudaTensor,
        rows: &[SampleRow<'_>],
        idx: &[usize],
        routes: &[Route],
        states: &[Option<RowState>],
        masks: &[Option<&TokenMask>],
    ) -> Result<Vec<Option<u32>>> {
        let vocab = logits.cols();
        let v = int(vocab, "sample")?;
        check(
            "sample",
            u32::try_from(vocab).is_ok() && rows.iter().all(|r| r.logits_row <= u32::MAX as usize),
            || format!("logits {:?} too large for the sampler", logits.shape),
        )?;
        let plan = build_plan(rows, idx, routes, states, masks, vocab);
        let s = &self.stream;
        let dev_plan = s
            .clone_htod(&plan.words)
            .map_err(dev_err("sample: upload plan"))?;
        let plan_ptr = dev_plan.device_ptr(s).0;
        let list_ptr = |at: usize| plan_ptr + (at * 4) as u64;
        // SAFETY: every scratch row is fully written by sample_prepare before any kernel reads it.
        let scratch = unsafe { s.alloc::<f32>(idx.len() * vocab) }
            .map_err(dev_err("sample: scratch allocation"))?;
        let scratch_ptr = scratch.device_ptr(s).0;
        let [(greedy_at, greedy), (gumbel_at, gumbel), (cand_at, cands)] = &plan.lists;
        let out_words = greedy.len() + gumbel.len() + cands.len() * CAND_WORDS;
        // SAFETY: each kernel below writes every word of its part of `out` before the download.
        let out =
            unsafe { s.alloc::<u32>(out_words.max(1)) }.map_err(dev_err("sample: allocation"))?;
        let out_ptr = out.device_ptr(s).0;
        let gumbel_out = out_ptr + (greedy.len() * 4) as u64;
        let cand_out = gumbel_out + (gumbel.len() * 4) as u64;

        let prepare = match logits.dtype {
            DType::F32 => kernels::sample_prepare_f32,
            DType::BF16 => kernels::sample_prepare_bf16,
            DType::F8 | DType::F4 | DType::Mx4 => return Err(super::not_activation("sample")),
        };
        let x = logits.ptr(s);
        let slices = dim(vocab.div_ceil(PREPARE_SLICE), "sample")?;
        let grid = cfg((dim(idx.len(), "sample")?, slices), PREPARE_THREADS);
        // SAFETY: scratch is [idx.len(), vocab] f32; logits is [R, vocab] of its type and every
        // record's source row is below R (checked in sample_op); entries, extras and masks are
        // ids below vocab (penalty_entries, the states' extras and masked_tokens filter them) at
        // offsets inside the plan, at most MAX_EXTRAS extras a row; a state address is a live
        // state of `vocab` u32 (the penalty states hold it; frees are stream-ordered); grid
        // (records, slices), each block within its row's columns.
        unsafe { prepare.launch(self, grid, (scratch_ptr, x, plan_ptr, v)) }?;

        // The grammar masks, on the rows that have one.
        let (pairs_at, n_pairs) = plan.mask_pairs;
        if n_pairs > 0 {
            let grid = cfg((dim(n_pairs, "sample")?, slices), PREPARE_THREADS);
            // SAFETY: the plan holds n_pairs (scratch row below idx.len(), word offset) pairs
            // at pairs_at, each offset the start of vocab.div_ceil(32) mask words inside the
            // plan (build_plan); block (b, y) writes only columns below vocab of pair b's row
            // of the [idx.len(), vocab] scratch, after sample_prepare (same stream).
            unsafe {
                kernels::sample_token_mask.launch(
                    self,
                    grid,
                    (scratch_ptr, plan_ptr, list_ptr(pairs_at), v),
                )
            }?;
        }

        // The greedy rows' argmax (its partials kept alive until the download below).
        let _argmax_parts = if greedy.is_empty() {
            None
        } else {
            // SAFETY: `greedy` lists greedy.len() scratch-row indices below idx.len() at
            // greedy_at; the scratch is [idx.len(), vocab] f32; `out` has a word each; all
            // live until after the synchronisation below.
            Some(unsafe {
                self.launch_argmax(out_ptr, scratch_ptr, list_ptr(*greedy_at), greedy.len(), v)
            }?)
        };
        for (kernel, list_at, list, o) in [
            (kernels::sample_gumbel, gumbel_at, gumbel, gumbel_out),
            (kernels::sample_candidates, cand_at, cands, cand_out),
        ] {
            if list.is_empty() {
                continue;
            }
            let which = list_ptr(*list_at);
            let grid = cfg((dim(list.len(), "sample")?, 1), SAMPLE_THREADS);
            // SAFETY: `which` holds list.len() scratch-row indices below idx.len(), each with
            // its plan record; `o` has room for one u32 (gumbel) or CAND_WORDS (candidates) per
            // listed row; the block size matches the kernels' shared arrays.
            unsafe { kernel.launch(self, grid, (o, scratch_ptr, plan_ptr, which, v)) }?;
        }
        let words = s.clone_dtoh(&out).map_err(dev_err("sample: download"))?;
        self.synchronize()?;
        drop(dev_plan);

        let mut got = vec![None; idx.len()];
        for (k, &b) in greedy.iter().enumerate() {
            got[b] = Some(words[k]);
        }
        for (k, &b) in gumbel.iter().enumerate() {
            got[b] = Some(words[greedy.len() + k]).filter(|&id| id != u32::MAX);
        }
        let base = greedy.len() + gumbel.len();
        for (k, &b) in cands.iter().enumerate() {
            let o = &words[base + k * CAND_WORDS..base + (k + 1) * CAND_WORDS];
            got[b] = finish_candidates(&rows[idx[b]], o);
        }
        Ok(got)
    }

    /// The index of the largest logit of each of `which` rows (lowest index on ties).
    fn argmax(&self, logits: &CudaTensor, which: &[u32]) -> Result<Vec<u32>> {
        let vocab = int(logits.cols(), "sample")?;
        let s = &self.stream;
        let rows = s
            .clone_htod(which)
            .map_err(dev_err("sample: upload rows"))?;
        // SAFETY: fully written by the kernels below (one u32 per row) before it is read.
        let ids = unsafe { s.alloc::<u32>(which.len()) }.map_err(dev_err("sample: allocation"))?;
        let (o, x) = (ids.device_ptr(s).0, logits.ptr(s));
        let r = rows.device_ptr(s).0;
        // SAFETY: logits is [R, vocab] f32 and every row index is below R (checked by the
        // caller); rows and ids hold which.len() u32.
        let parts = unsafe { self.launch_argmax(o, x, r, which.len(), vocab) }?;
        let ids = s.clone_dtoh(&ids).map_err(dev_err("sample: download"))?;
        self.synchronize()?;
        drop(parts);
        Ok(ids)
    }

    /// `argmax_part_f32` + `argmax_final_f32`: the greedy token of each of `n` rows, whose
    /// indices (u32) are at `rows`, of the f32 `[R, vocab]` logits at `x`, one u32 each to
    /// `out`. Returns the partial bests' buffers, to be kept until the stream has run.
    ///
    /// # Safety
    /// `rows` holds `n` indices below R, `x` is `[R, vocab]` f32 and `out` has room for `n` u32,
    /// all alive until the stream has run the two kernels.
    unsafe fn launch_argmax(
        &self,
        out: u64,
        x: u64,
        rows: u64,
        n: usize,
        vocab: i32,
    ) -> Result<(
        cudarc::driver::CudaSlice<f32>,
        cudarc::driver::CudaSlice<u32>,
    )> {
        let s = &self.stream;
        let splits = argmax_splits(vocab as usize);
        // SAFETY: argmax_part_f32 writes every partial value (a block each) before
        // argmax_final_f32, later on the same stream, reads them.
        let part_v =
            unsafe { s.alloc::<f32>(n * splits) }.map_err(dev_err("argmax: allocation"))?;
        // SAFETY: the same for the partial indices.
        let part_i =
            unsafe { s.alloc::<u32>(n * splits) }.map_err(dev_err("argmax: allocation"))?;
        let (pv, pi) = (part_v.device_ptr(s).0, part_i.device_ptr(s).0);
        let rows_dim = dim(n, "sample")?;
        let grid = cfg((splits as u32, rows_dim), ARGMAX_THREADS);
        // SAFETY: grid (splits, n): block (s, r) writes partial r · splits + s, of n · splits;
        // reads row rows[r] of x within [0, vocab) (the caller's contract); the block size
        // matches the kernel's shared arrays.
        unsafe { kernels::argmax_part_f32.launch(self, grid, (pv, pi, x, rows, vocab)) }?;
        let splits = splits as i32;
        // SAFETY: one warp a row reads that row's `splits` partials and writes out[r] (room for
        // n, the caller's contract), and reads x's first column of rows[r].
        unsafe {
            kernels::argmax_final_f32.launch(
                self,
                cfg((rows_dim, 1), 32),
                (out, pv, pi, x, rows, vocab, splits),
            )
        }?;
        Ok((part_v, part_i))
    }

    fn download_row(&self, logits: &CudaTensor, row: usize) -> Result<Vec<f32>> {
        let width = logits.cols() * logits.dtype.size();
        let mut bytes = vec![0u8; width];
        if width > 0 {
            self.stream
                .memcpy_dtoh(
                    &logits.buf.slice(row * width..(row + 1) * width),
                    &mut bytes,
                )
                .map_err(dev_err("sample: download"))?;
            self.synchronize()?;
        }
        Ok(tensor::bytes_to_f32(&bytes, logits.dtype))
    }
}

#[cfg(test)]
mod penalty_tests;
#[cfg(test)]
mod tests;
