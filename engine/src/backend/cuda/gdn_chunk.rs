//! The chunked Gated DeltaNet kernels (`kernels/src/hybrid.cu`, section 2b): prefill sequences
//! of at least the tuning's `gdn.chunk_min` rows run the delta rule chunk by chunk (the
//! WY form: a triangular solve and dense products a chunk, only the state hand-off between
//! chunks in order) instead of token by token. Three launches: the step's chunk list
//! (`gdn_chunk_plan`), everything a chunk needs that does not depend on the state, all chunks
//! at once (`gdn_chunk_prep`), then the state through the chunks (`gdn_chunk_state`).

use super::CudaBackend;
use super::elementwise::{dim, int};
use super::gdn_kernels;
use super::tensor::{CudaTensor, DType};
use super::typed_launch::Args;
use crate::backend::kernels::{self, Kernel};
use crate::backend::{BatchInputs, DeltaHeads, Result};
use crate::kv_cache::state::StateSave;
use cudarc::driver::LaunchConfig;

/// Rows a chunk (`GDN_CHUNK`), state columns a block of the state kernel (`GDN_BV`) and the
/// kernels' threads (`GDN_CHUNK_THREADS`).
const CHUNK: usize = 64;
const BV: usize = 32;
const THREADS: u32 = 256;
/// Key head sizes the chunked kernels are built for (their shared memory grows with dk; 256
/// stays on the recurrent kernel, as does any dk whose kernels' shared memory the device
/// cannot give a block).
const CHUNK_DIMS: [usize; 4] = [16, 32, 64, 128];

/// Dynamic shared memory (f32s) of `gdn_chunk_prep` at `dk`: q, k [C, dk + 8], A and the decay
/// products [C, C + 8] (X over q and the products), decay, β and γ [C].
fn prep_floats(dk: usize) -> usize {
    2 * CHUNK * (dk + 8) + 2 * CHUNK * (CHUNK + 8) + 3 * CHUNK
}

/// Dynamic shared memory (f32s) of `gdn_chunk_state` at `dk`: the state's columns [dk, BV + 4]
/// in f32 and as two tf32 terms, W, Qg [C, dk + 8], Kt [C, dk + 4], Tb, P [C, C + 8], v [C, BV +
/// 4] and δ's two terms [2][C, BV + 4].
fn state_floats(dk: usize) -> usize {
    3 * dk * (BV + 4)
        + 2 * CHUNK * (dk + 8)
        + CHUNK * (dk + 4)
        + 2 * CHUNK * (CHUNK + 8)
        + 3 * CHUNK * (BV + 4)
}
/// Sequences with at least this many rows in a step take the chunked kernels by default: on
/// the H200 at 35B-A3B's heads a lone 16-row sequence takes 36 µs on the recurrent kernel and
/// 47 µs chunked, a 64-row one 116 µs and 76 µs (docs/performance.md, issue 12).
pub const GDN_CHUNK_MIN: usize = 32;

/// Chunks of a `len`-row sequence: they end at every multiple of [`CHUNK`] rows and at every
/// save point (`gdn_chunk_end` in hybrid.cu, which the device's count must match; Mamba-2's
/// chunked scan takes the same chunks).
pub(super) fn chunk_count(len: usize, saves: &[StateSave]) -> usize {
    let (mut n, mut lo, mut sv) = (0, 0, 0);
    while lo < len {
        while sv < saves.len() && saves[sv].after as usize <= lo {
            sv += 1;
        }
        let next = saves.get(sv).map_or(len, |s| s.after as usize);
        lo = len.min((lo / CHUNK + 1) * CHUNK).min(next);
        n += 1;
    }
    n
}

/// The step's split between the kernels: `chunk_min` as the kernels take it, the chunks of the
/// sequences it sends to the chunked kernels, and whether any other sequence has rows.
pub(super) struct Split {
    pub chunk_min: i32,
    pub chunks: usize,
    pub recurrent: bool,
}

/// The device arrays the chunked kernels read: conv `[T, C]` f32, `mixed`, the layer's neg_a
/// and dt_bias, the recurrent states, and the batch's state arrays (seq_starts, slots,
/// save_starts, saves).
pub(super) struct ChunkArgs {
    pub core: u64,
    pub conv: u64,
    pub mixed: u64,
    /// The type of mixed (bf16 or f32).
    pub tm: DType,
    pub neg_a: u64,
    pub dt_bias: u64,
    pub state: u64,
    pub plans: [u64; 4],
    pub width: i32,
}

impl CudaBackend {
    /// Which sequences of `host` take which kernel at these heads.
    pub(super) fn gdn_split(&self, host: &BatchInputs, heads: &DeltaHeads) -> Split {
        let smem = 4 * prep_floats(heads.dk).max(state_floats(heads.dk));
        // The kernels' products are bf16 mma.sync: sm_80 and newer.
        let min = if CHUNK_DIMS.contains(&heads.dk)
            && smem <= self.info.smem_optin
            && self.info.compute_capability.0 >= 8
        {
            // The tuning's `gdn.chunk_min` ([`GDN_CHUNK_MIN`] by default; `None`: none).
            self.tuning().gdn.chunk_min.unwrap_or(usize::MAX).max(1)
        } else {
            usize::MAX
        };
        let mut split = Split {
            chunk_min: i32::try_from(min).unwrap_or(i32::MAX),
            chunks: 0,
            recurrent: false,
        };
        for (s, plan) in host.states.iter().enumerate() {
            let len = (host.seq_starts[s + 1] - host.seq_starts[s]) as usize;
            if len >= split.chunk_min as usize {
                split.chunks += chunk_count(len, &plan.saves);
            } else {
                split.recurrent |= len > 0;
            }
        }
        split
    }

    /// A chunked kernel's launch with `floats` f32 of dynamic shared memory.
    ///
    /// # Safety
    /// See gdn_chunked: every pointer among `args` is a device array of the size the kernel
    /// indexes for this grid.
    unsafe fn chunk_launch<A: Args>(
        &self,
        kernel: Kernel<A>,
        grid: (u32, u32, u32),
        floats: usize,
        args: A,
    ) -> Result<()> {
        let smem = (4 * floats) as u32;
        kernel.allow_shared_memory(self, smem)?;
        let config = LaunchConfig {
            grid_dim: grid,
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: smem,
        };
        // SAFETY: the caller's contract; the dynamic shared memory is the kernel's layout for dk.
        unsafe { kernel.launch(self, config, args) }
    }

    /// The delta rule over the sequences `split` sends to the chunked kernels, into core's
    /// rows and their state slots (and saves).
    pub(super) fn gdn_chunked(
        &self,
        a: &ChunkArgs,
        heads: &DeltaHeads,
        seqs: usize,
        split: &Split,
    ) -> Result<()> {
        const OP: &str = "gated_delta_net";
        let (dk, c) = (heads.dk, CHUNK);
        let st = &self.stream;
        let [starts, slots, save_starts, saves] = a.plans;
        let (seqs_i, chunks_i, cmin) = (int(seqs, OP)?, int(split.chunks, OP)?, split.chunk_min);
        let (nki, nvi, dvi) = (int(heads.nk, OP)?, int(heads.nv, OP)?, int(heads.dv, OP)?);
        // plan: [S] first chunks, then (sequence, first row, rows) a chunk, as u32.
        let plan = self.alloc(&[seqs + 3 * split.chunks], DType::F32)?;
        let pp = plan.ptr(st);
        let args = (pp, starts, save_starts, saves, seqs_i, cmin, chunks_i);
        // SAFETY: plan holds S + 3 · chunks u32 and the kernel writes no chunk past `chunks`;
        // the state arrays describe S sequences (checked by the caller); one warp.
        unsafe {
            kernels::gdn_chunk_plan.launch(self, super::elementwise::cfg((1, 1), 32), args)?;
        }

        // W, Qg, Kt [C, dk], Tb, P [C, C], γ [C] for every (chunk, value head).
        let per = 3 * c * dk + 2 * c * c + c;
        let scratch: CudaTensor = self.alloc(&[split.chunks * heads.nv, per], DType::F32)?;
        let sp = scratch.ptr(st);
        let prep = gdn_kernels::chunk_prep(dk, a.tm)?;
        let args = (
            sp, a.conv, a.mixed, a.neg_a, a.dt_bias, pp, seqs_i, nki, nvi, dvi, a.width,
        );
        // SAFETY: scratch holds `per` floats a (chunk, value head) of the grid, the plan S + 3 ·
        // chunks entries (written above); the other arrays are the layer's (checked by the
        // caller).
        unsafe {
            self.chunk_launch(
                prep,
                (dim(split.chunks, OP)?, dim(heads.nv, OP)?, 1),
                prep_floats(dk),
                args,
            )?;
        }
        let state = gdn_kernels::chunk_state(dk)?;
        let args = (
            a.core,
            a.conv,
            sp,
            a.state,
            pp,
            starts,
            slots,
            save_starts,
            saves,
            seqs_i,
            cmin,
            nki,
            nvi,
            dvi,
        );
        // SAFETY: as above; core and the states are the layer's, every slot in range (checked
        // by the caller).
        unsafe {
            self.chunk_launch(
                state,
                (
                    dim(heads.dv.div_ceil(BV), OP)?,
                    dim(heads.nv, OP)?,
                    dim(seqs, OP)?,
                ),
                state_floats(dk),
                args,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn saves(afters: &[u32]) -> Vec<StateSave> {
        afters
            .iter()
            .map(|&after| StateSave { after, slot: 0 })
            .collect()
    }

    #[test]
    fn chunks_end_at_multiples_of_the_chunk_and_at_saves() {
        assert_eq!(chunk_count(0, &[]), 0);
        assert_eq!(chunk_count(1, &[]), 1);
        assert_eq!(chunk_count(64, &[]), 1);
        assert_eq!(chunk_count(65, &[]), 2);
        assert_eq!(chunk_count(2048, &[]), 32);
        // saves at 0 and at the end cut nothing; 16 and 100 cut a chunk each; 64 twice, once
        assert_eq!(chunk_count(130, &saves(&[0, 16, 64, 64, 100, 130])), 5);
    }
}
