//! The single-launch Gated DeltaNet decode step (`kernels/src/hybrid.cu`, section 4): when every
//! sequence of a step has exactly one row (decode, CUDA-graph padding rows included), blocks of
//! one key head do the conv, the delta rule and the gated RMSNorm of that key head's value
//! heads, instead of `gdn_conv`, `gdn_recurrent` and `gdn_norm`. It gives the same bits as those
//! three; other steps, and head shapes it is not built for, take them.

use super::elementwise::{dim, int};
use super::gdn_chunk::Split;
use super::gdn_kernels;
use super::hybrid::HEAD_DIMS;
use super::tensor::{CudaTensor, DType};
use super::{CudaBackend, TICKETS, shape_err};
use crate::backend::{BatchInputs, DeltaHeads, GdnLayer, Result};
use cudarc::driver::LaunchConfig;

/// Threads a block may have (4 a state column of each value head of its key head).
const MAX_THREADS: usize = 1024;
/// Floats between two rows of a state in the kernel's shared memory past its columns
/// (`GDN_DECODE_PAD`).
const PAD: usize = 8;

/// What the fused kernel reads besides the layer: `mixed`, the states and the batch's state
/// arrays (seq_starts, slots, save_starts, saves).
pub(super) struct DecodeArgs<'a> {
    pub mixed: &'a CudaTensor,
    /// The type of mixed (bf16 or f32).
    pub tm: DType,
    pub conv_state: u64,
    pub state: u64,
    pub plans: [u64; 4],
    pub width: i32,
}

/// How the fused kernel runs a step: blocks a key head's state columns are split over, and
/// its dynamic shared memory in bytes.
#[derive(Debug, Clone, Copy)]
pub(super) struct DecodePlan {
    splits: usize,
    smem: usize,
}

impl CudaBackend {
    /// Whether `gated_delta_net` runs `host`'s step at these heads on the fused kernel.
    pub fn gdn_fused_decode_covers(&self, host: &BatchInputs, heads: &DeltaHeads) -> bool {
        HEAD_DIMS.contains(&heads.dk)
            && heads.nk > 0
            && heads.nv.is_multiple_of(heads.nk)
            && self
                .gdn_decode_plan(host, heads, &self.gdn_split(host, heads))
                .is_some()
    }

    /// How the fused kernel runs this step, or `None` when it does not take it: off, a
    /// sequence with other than one row, one the chunked kernels take, dv ≠ dk, more than 1024
    /// threads a block, more shared memory than the device gives a block, or more
    /// (sequence, key head) pairs than counters.
    pub(super) fn gdn_decode_plan(
        &self,
        host: &BatchInputs,
        heads: &DeltaHeads,
        split: &Split,
    ) -> Option<DecodePlan> {
        let group = heads.nv / heads.nk;
        let seqs = host.num_seqs();
        // The tuning: the fused kernel on (`gdn.fused_decode`) and its splits (1, 2 or 4: each
        // takes dv / splits columns of every value head of the key head; `None`: by shape and
        // batch, `default_splits`).
        let tuning = self.tuning().gdn;
        let splits = match tuning.decode_splits {
            None => default_splits(heads, seqs, self.info.multiprocessors),
            Some(n) => n,
        };
        let cols = heads.dv / splits;
        let smem = 4 * group * heads.dk * (cols + PAD);
        let one_row = host.seq_starts.windows(2).all(|w| w[1] - w[0] == 1);
        (tuning.fused_decode
            && one_row
            && split.chunks == 0
            && heads.dv == heads.dk
            && [1, 2, 4].contains(&splits)
            && cols.is_multiple_of(4)
            && 4 * group * cols <= MAX_THREADS
            && smem <= self.info.smem_optin
            && seqs * heads.nk <= TICKETS)
            .then_some(DecodePlan { splits, smem })
    }

    /// The whole decode step of `layer` into `out` (`[S, nv·dv]`, its dtype set): grid
    /// (splits, nk, S), nv / nk · 4 · dv / splits threads rounded to warps.
    pub(super) fn gdn_decode(
        &self,
        out: &mut CudaTensor,
        layer: &GdnLayer<'_, CudaTensor>,
        a: &DecodeArgs<'_>,
        seqs: usize,
        plan: DecodePlan,
    ) -> Result<()> {
        const OP: &str = "gated_delta_net";
        let h = layer.heads;
        let st = &self.stream;
        let kernel = gdn_kernels::decode(h.dk, a.tm, out.dtype)?;
        let bytes = u32::try_from(plan.smem).map_err(|_| shape_err(OP, "shared memory".into()))?;
        kernel.allow_shared_memory(self, bytes)?;
        // Split blocks pass their outputs to the key head's last block through core
        // `[S, nv·dv]` f32.
        let core = if plan.splits > 1 {
            Some(self.alloc(&[seqs, h.nv * h.dv], DType::F32)?)
        } else {
            None
        };
        let cp = core.as_ref().map_or(0, |c| c.ptr(st));
        let tickets = self.tickets()?;
        let [_, slots, save_starts, saves] = a.plans;
        let (o, mx) = (out.ptr(st), a.mixed.ptr(st));
        let (taps, na, db, w) = (
            layer.conv.ptr(st),
            layer.neg_a.ptr(st),
            layer.dt_bias.ptr(st),
            layer.norm.ptr(st),
        );
        let (nki, nvi, ki) = (int(h.nk, OP)?, int(h.nv, OP)?, int(layer.kernel, OP)?);
        let eps = layer.eps;
        let args = (
            o,
            cp,
            tickets,
            mx,
            taps,
            a.conv_state,
            na,
            db,
            w,
            a.state,
            slots,
            save_starts,
            saves,
            nki,
            nvi,
            ki,
            a.width,
            eps,
        );
        let threads = (4 * h.nv / h.nk * h.dv / plan.splits).next_multiple_of(32);
        // SAFETY: out is [S, nv·dv] of the kernel's output type, core (read and written only
        // with more than one split) [S, nv·dv] f32, tickets TICKETS ≥ S · nk zeroed counters
        // the kernel leaves zeroed, mixed [S, width] of its input type (row s is sequence s's:
        // every sequence has one row, checked by gdn_decode_plan), taps [C, K], neg_a and
        // dt_bias [nv], norm [dv] f32, the conv windows [slots, (K−1)·C] and states
        // [slots, nv·dk·dv] f32 with every slot and save slot in range (checked by the
        // caller); the kernel is built for this dk = dv; at most 1024 threads and the dynamic
        // shared memory set above.
        let config = LaunchConfig {
            grid_dim: (dim(plan.splits, OP)?, dim(h.nk, OP)?, dim(seqs, OP)?),
            block_dim: (threads as u32, 1, 1),
            shared_mem_bytes: plan.smem as u32,
        };
        unsafe { kernel.launch(self, config, args) }
    }
}

/// Column splits by shape, from the H200 at 35B-A3B's heads (docs/performance.md, issue 12):
/// at batch 1 four blocks of 32 columns a key head (64 blocks of 256 threads) took 11.0 µs, two
/// 11.3 and one 13.9; at batch 64 two took 120.4 µs, four 123.9 and one 154.4. So four while a
/// step's blocks fit twice on the multiprocessors, then two; whole heads below 64 columns.
fn default_splits(heads: &DeltaHeads, seqs: usize, multiprocessors: usize) -> usize {
    match heads.dv {
        128.. if seqs * heads.nk * 4 <= 2 * multiprocessors => 4,
        64.. => 2,
        _ => 1,
    }
}
