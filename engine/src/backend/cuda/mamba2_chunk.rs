//! The chunked Mamba-2 scan for prefill (`kernels/src/mamba2_chunk.cu`, whose header has the
//! math): sequences of at least the tuning's `mamba2.chunk_min` rows run the state space
//! duality form, 64 rows a chunk on tensor cores, instead of `mamba2_scan`'s token-by-token
//! walk. Three launches: the step's chunk list (the Gated DeltaNet's `gdn_chunk_plan`: the same
//! chunks, cut at multiples of 64 rows and at save points), `C Bᵀ` of every (chunk, group) at
//! once (`mamba2_chunk_cb`), then the state through each sequence's chunks, 16 state rows of a
//! head a block (`mamba2_chunk_scan`).

use super::CudaBackend;
use super::elementwise::{dim, int};
use super::gdn_chunk::chunk_count;
use super::mamba2::STATE_SIZES;
use super::tensor::{CudaTensor, DType};
use super::typed_launch::Args;
use crate::backend::kernels::{self as k, Kernel};
use crate::backend::{BatchInputs, Result, SsmHeads};
use cudarc::driver::LaunchConfig;

const OP: &str = "mamba2";
/// Rows a chunk (`GDN_CHUNK`) and state rows a block of the walk (`MAMBA2_RB`).
const CHUNK: usize = 64;
const RB: usize = 16;
/// Threads of `mamba2_chunk_cb` (`GDN_CHUNK_THREADS`) and of `mamba2_chunk_scan`
/// (`MAMBA2_CHUNK_THREADS`).
const CB_THREADS: u32 = 256;
const SCAN_THREADS: u32 = 128;

/// Dynamic shared memory (f32s) of `mamba2_chunk_cb` at state width `n`: C and B [64, n + 8].
fn cb_floats(n: usize) -> usize {
    2 * CHUNK * (n + 8)
}

/// Dynamic shared memory (f32s) of `mamba2_chunk_scan` at `n`: B [64, n + 4], C [64, n + 8],
/// the state rows [16, n + 8], M [64, 72], X and diag(w) X [64, 20], dt, a, γ [64].
fn scan_floats(n: usize) -> usize {
    CHUNK * (n + 4)
        + CHUNK * (n + 8)
        + RB * (n + 8)
        + CHUNK * (CHUNK + 8)
        + 2 * CHUNK * (RB + 4)
        + 3 * CHUNK
}

/// `mamba2_chunk_cb_n<N>`: scratch, conv, plan, seqs, inner, groups.
type CbArgs = (u64, u64, u64, i32, i32, i32);
/// `mamba2_chunk_scan_n<N>_<mixed>`: y, conv, mixed, cb, neg_a, dt_bias, d, state, plan, the
/// four state arrays, chunk_min, nh, p, groups, width, dt_lo, dt_hi.
#[rustfmt::skip]
type WalkArgs = (
    u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64,
    i32, i32, i32, i32, i32, f32, f32,
);

/// `mamba2_chunk_cb_n<N>`.
fn cb_kernel(n: usize) -> Result<Kernel<CbArgs>> {
    Ok(match n {
        16 => k::mamba2_chunk_cb_n16,
        32 => k::mamba2_chunk_cb_n32,
        64 => k::mamba2_chunk_cb_n64,
        128 => k::mamba2_chunk_cb_n128,
        256 => k::mamba2_chunk_cb_n256,
        _ => {
            return Err(super::shape_err(
                OP,
                format!("no mamba2_chunk_cb for N {n}"),
            ));
        }
    })
}

/// `mamba2_chunk_scan_n<N>_<mixed>`.
fn walk_kernel(n: usize, tm: DType) -> Result<Kernel<WalkArgs>> {
    Ok(match (n, tm) {
        (16, DType::F32) => k::mamba2_chunk_scan_n16_f32,
        (16, DType::BF16) => k::mamba2_chunk_scan_n16_bf16,
        (32, DType::F32) => k::mamba2_chunk_scan_n32_f32,
        (32, DType::BF16) => k::mamba2_chunk_scan_n32_bf16,
        (64, DType::F32) => k::mamba2_chunk_scan_n64_f32,
        (64, DType::BF16) => k::mamba2_chunk_scan_n64_bf16,
        (128, DType::F32) => k::mamba2_chunk_scan_n128_f32,
        (128, DType::BF16) => k::mamba2_chunk_scan_n128_bf16,
        (256, DType::F32) => k::mamba2_chunk_scan_n256_f32,
        (256, DType::BF16) => k::mamba2_chunk_scan_n256_bf16,
        _ => {
            let what = format!("no mamba2_chunk_scan for N {n}, {tm:?}");
            return Err(super::shape_err(OP, what));
        }
    })
}

/// The step's split between the scans: `chunk_min` as the kernels take it, the chunks of the
/// sequences it sends to the chunked scan, and whether any other sequence needs the
/// token-by-token scan (rows, or a save to write).
pub(super) struct Split {
    pub chunk_min: i32,
    pub chunks: usize,
    pub tokens: bool,
}

/// What the chunked kernels read: y `[T, nh·p]` f32 (written), conv `[T, C]` f32, `mixed` and
/// its type, the layer's neg_a, dt_bias, d, the SSM states and the batch's state arrays
/// (seq_starts, slots, save_starts, saves), mixed's width and the dt limits.
pub(super) struct ChunkArgs {
    pub y: u64,
    pub conv: u64,
    pub mixed: u64,
    pub tm: DType,
    pub neg_a: u64,
    pub dt_bias: u64,
    pub d: u64,
    pub state: u64,
    pub plans: [u64; 4],
    pub width: i32,
    pub dt_limit: (f32, f32),
}

impl CudaBackend {
    /// Which sequences of `host` take which scan at these heads: the chunked one needs its
    /// shared memory on the device, tensor cores (sm_80+) and 16-byte aligned rows of B and C.
    pub(super) fn mamba2_split(&self, host: &BatchInputs, s: &SsmHeads) -> Split {
        let smem = 4 * cb_floats(s.state).max(scan_floats(s.state));
        let min = if STATE_SIZES.contains(&s.state)
            && s.inner().is_multiple_of(4)
            && smem <= self.info.smem_optin
            && self.info.compute_capability.0 >= 8
        {
            self.tuning().mamba2.chunk_min.unwrap_or(usize::MAX).max(1)
        } else {
            usize::MAX
        };
        let mut split = Split {
            chunk_min: i32::try_from(min).unwrap_or(i32::MAX),
            chunks: 0,
            tokens: false,
        };
        for (i, plan) in host.states.iter().enumerate() {
            let len = (host.seq_starts[i + 1] - host.seq_starts[i]) as usize;
            if len > 0 && len >= split.chunk_min as usize {
                split.chunks += chunk_count(len, &plan.saves);
            } else {
                split.tokens |= len > 0 || !plan.saves.is_empty();
            }
        }
        split
    }

    /// A chunked kernel's launch: `threads` a block, `floats` f32 of dynamic shared memory.
    ///
    /// # Safety
    /// See mamba2_chunked: every pointer among `args` is a device array of the size the kernel
    /// indexes for this grid.
    unsafe fn mamba2_chunk_launch<A: Args>(
        &self,
        kernel: Kernel<A>,
        grid: (u32, u32, u32),
        (threads, floats): (u32, usize),
        args: A,
    ) -> Result<()> {
        let smem = (4 * floats) as u32;
        kernel.allow_shared_memory(self, smem)?;
        let config = LaunchConfig {
            grid_dim: grid,
            block_dim: (threads, 1, 1),
            shared_mem_bytes: smem,
        };
        // SAFETY: the caller's contract; the dynamic shared memory is the kernel's layout for N.
        unsafe { kernel.launch(self, config, args) }
    }

    /// The scan over the sequences `split` sends to the chunked kernels, into y's rows and
    /// their state slots (and saves).
    pub(super) fn mamba2_chunked(
        &self,
        a: &ChunkArgs,
        s: &SsmHeads,
        seqs: usize,
        split: &Split,
    ) -> Result<()> {
        let n = s.state;
        let st = &self.stream;
        let [starts, slots, save_starts, saves] = a.plans;
        let (seqs_i, chunks_i, cmin) = (int(seqs, OP)?, int(split.chunks, OP)?, split.chunk_min);
        let (inner_i, groups_i) = (int(s.inner(), OP)?, int(s.groups, OP)?);
        // plan: [S] first chunks, then (sequence, first row, rows) a chunk, as u32.
        let plan = self.alloc(&[seqs + 3 * split.chunks], DType::F32)?;
        let pp = plan.ptr(st);
        let args = (pp, starts, save_starts, saves, seqs_i, cmin, chunks_i);
        // SAFETY: plan holds S + 3 · chunks u32 and the kernel writes no chunk past `chunks`;
        // the state arrays describe S sequences (checked by the caller); one warp.
        unsafe { k::gdn_chunk_plan.launch(self, super::elementwise::cfg((1, 1), 32), args)? };

        // G = C Bᵀ [64, 64] for every (chunk, group).
        let cb: CudaTensor = self.alloc(&[split.chunks * s.groups, CHUNK * CHUNK], DType::F32)?;
        let cbp = cb.ptr(st);
        let args = (cbp, a.conv, pp, seqs_i, inner_i, groups_i);
        // SAFETY: cb holds 64 · 64 floats a (chunk, group) of the grid, the plan S + 3 · chunks
        // entries (written above), conv [T, C] f32 with C = inner + 2·G·N.
        unsafe {
            self.mamba2_chunk_launch(
                cb_kernel(n)?,
                (dim(split.chunks, OP)?, dim(s.groups, OP)?, 1),
                (CB_THREADS, cb_floats(n)),
                args,
            )?;
        }
        let (lo, hi) = a.dt_limit;
        let args = (
            a.y,
            a.conv,
            a.mixed,
            cbp,
            a.neg_a,
            a.dt_bias,
            a.d,
            a.state,
            pp,
            starts,
            slots,
            save_starts,
            saves,
            cmin,
            int(s.heads, OP)?,
            int(s.head_dim, OP)?,
            groups_i,
            a.width,
            lo,
            hi,
        );
        // SAFETY: as above; y [T, nh·p] f32, mixed [T, width] of the kernel's type, neg_a,
        // dt_bias and d [nh] f32, the states [slots, nh·p·N] f32 with every slot and save
        // slot in range (checked by the caller); grid (⌈p / 16⌉, nh, S).
        unsafe {
            self.mamba2_chunk_launch(
                walk_kernel(n, a.tm)?,
                (
                    dim(s.head_dim.div_ceil(RB), OP)?,
                    dim(s.heads, OP)?,
                    dim(seqs, OP)?,
                ),
                (SCAN_THREADS, scan_floats(n)),
                args,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each key names its kernel; shapes outside the builds have none.
    #[test]
    fn every_key_picks_its_kernel() {
        for n in STATE_SIZES {
            assert_eq!(
                cb_kernel(n).expect("a kernel").name(),
                format!("mamba2_chunk_cb_n{n}")
            );
            for (tm, t) in [(DType::F32, "f32"), (DType::BF16, "bf16")] {
                let name = walk_kernel(n, tm).expect("a kernel").name();
                assert_eq!(name, format!("mamba2_chunk_scan_n{n}_{t}"));
            }
        }
        assert!(cb_kernel(48).is_err() && walk_kernel(128, DType::F8).is_err());
    }

    /// The kernels' shared memory at Nemotron-H's N 128 (two walk blocks an H100 SM) and at the
    /// largest build (within an H100's 227 KB).
    #[test]
    fn shared_memory_fits() {
        assert_eq!(4 * scan_floats(128), 106_752);
        assert!(4 * scan_floats(256) <= 227 * 1024 && 4 * cb_floats(256) <= 227 * 1024);
    }
}
