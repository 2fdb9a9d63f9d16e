//! Nemotron-H's Mamba-2 mixer and relu² on CUDA (`kernels/src/mamba2.cu`, whose header has the
//! design): the biased conv (the Gated DeltaNet's conv kernel body, its windows and saves), the
//! scan (chunked for sequences of at least `mamba2.chunk_min` rows: `mamba2_chunk.rs`; token by
//! token for the others) and the gated grouped RMSNorm; a decode step takes the same three
//! launches (a one-launch decode kernel measured slower at batch 1, 16 and 64 on an H100 and was
//! deleted: performance log part 15). The CPU's `backend/cpu/mamba2.rs` is the reference;
//! `cuda_check`'s `mamba2` section compares the two.

use super::elementwise::{cfg, dim, int, stride_cfg};
use super::hybrid::{MAX_TAPS, operand};
use super::mamba2_chunk::ChunkArgs;
use super::tensor::{CudaTensor, DType};
use super::{CudaBackend, CudaBatch, check, shape_err};
use crate::backend::kernels::{self as k, Kernel};
use crate::backend::{BatchInputs, Mamba2Layer, Result};

const OP: &str = "mamba2";
/// State widths (`ssm_state_size`) the scan kernel is built for (a row's entries live in
/// registers, four threads a row).
pub(super) const STATE_SIZES: [usize; 5] = [16, 32, 64, 128, 256];
/// Channel rows a scan block takes at most (`MAMBA2_ROWS`).
const MAX_ROWS: usize = 32;
/// Threads of a norm block (one a (row, group), striding over the group's channels).
const NORM_THREADS: u32 = 128;

/// `mamba2_conv_*`: out, mixed, taps, bias, conv_state, row_seq, the four state arrays, rows,
/// channels, taps, width, x_at.
#[rustfmt::skip]
type ConvArgs = (u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, i32, i32, i32, i32, i32);
/// `mamba2_scan_*`: y, conv, mixed, neg_a, dt_bias, d, state, the four state arrays, nh, p,
/// groups, width, dt_at, dt_lo, dt_hi, chunk_min.
#[rustfmt::skip]
type ScanArgs = (
    u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64,
    i32, i32, i32, i32, i32, f32, f32, i32,
);
/// `mamba2_norm_*`: out, y, mixed, norm, groups, inner, width, eps.
type NormArgs = (u64, u64, u64, u64, i32, i32, i32, f32);

fn no_kernel(what: String) -> crate::backend::BackendError {
    shape_err(
        OP,
        format!("no {what} kernel (bf16 or f32 activations, N in {STATE_SIZES:?})"),
    )
}

/// `mamba2_conv_<mixed>`.
fn conv_kernel(tm: DType) -> Result<Kernel<ConvArgs>> {
    Ok(match tm {
        DType::F32 => k::mamba2_conv_f32,
        DType::BF16 => k::mamba2_conv_bf16,
        _ => return Err(no_kernel(format!("mamba2_conv for {tm:?}"))),
    })
}

/// `mamba2_scan_n<N>_<mixed>`.
fn scan_kernel(n: usize, tm: DType) -> Result<Kernel<ScanArgs>> {
    Ok(match (n, tm) {
        (16, DType::F32) => k::mamba2_scan_n16_f32,
        (16, DType::BF16) => k::mamba2_scan_n16_bf16,
        (32, DType::F32) => k::mamba2_scan_n32_f32,
        (32, DType::BF16) => k::mamba2_scan_n32_bf16,
        (64, DType::F32) => k::mamba2_scan_n64_f32,
        (64, DType::BF16) => k::mamba2_scan_n64_bf16,
        (128, DType::F32) => k::mamba2_scan_n128_f32,
        (128, DType::BF16) => k::mamba2_scan_n128_bf16,
        (256, DType::F32) => k::mamba2_scan_n256_f32,
        (256, DType::BF16) => k::mamba2_scan_n256_bf16,
        _ => return Err(no_kernel(format!("mamba2_scan for N {n}, {tm:?}"))),
    })
}

/// `mamba2_norm_<mixed>_<out>`.
fn norm_kernel(tm: DType, out: DType) -> Result<Kernel<NormArgs>> {
    Ok(match (tm, out) {
        (DType::F32, DType::F32) => k::mamba2_norm_f32_f32,
        (DType::F32, DType::BF16) => k::mamba2_norm_f32_bf16,
        (DType::BF16, DType::F32) => k::mamba2_norm_bf16_f32,
        (DType::BF16, DType::BF16) => k::mamba2_norm_bf16_bf16,
        _ => return Err(no_kernel(format!("mamba2_norm for {tm:?} into {out:?}"))),
    })
}

/// Threads of a scan block for head size `p`: four a row, whole warps, at most
/// [`MAX_ROWS`] rows; and the rows that makes.
pub(super) fn scan_block(p: usize) -> (usize, usize) {
    let threads = (4 * p.min(MAX_ROWS)).next_multiple_of(32);
    (threads, threads / 4)
}

impl CudaBackend {
    /// [`crate::backend::HybridOps::mamba2`] on CUDA.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn mamba2_op(
        &self,
        out: &mut CudaTensor,
        mixed: &CudaTensor,
        layer: &Mamba2Layer<'_, CudaTensor>,
        conv_state: &mut CudaTensor,
        ssm_state: &mut CudaTensor,
        host: &BatchInputs,
        batch: &CudaBatch,
    ) -> Result<()> {
        let s = layer.heads;
        let t = mixed.rows();
        let (inner, cd, nh) = (s.inner(), s.conv_dim(), s.heads);
        let width = inner + cd + nh;
        let k = layer.kernel;
        check(
            OP,
            STATE_SIZES.contains(&s.state)
                && s.groups > 0
                && nh.is_multiple_of(s.groups)
                && s.head_dim > 0
                && (1..=MAX_TAPS).contains(&k),
            || {
                format!(
                    "heads {s:?}, kernel {k}: the CUDA kernels take N in {STATE_SIZES:?}, heads \
                     a multiple of the groups and 1..={MAX_TAPS} taps"
                )
            },
        )?;
        check(
            OP,
            mixed.cols() == width
                && out.shape == [t, inner]
                && layer.conv.numel() == cd * k
                && layer.conv_bias.numel() == cd
                && [layer.neg_a, layer.dt_bias, layer.d]
                    .iter()
                    .all(|v| v.numel() == nh)
                && layer.norm.numel() == inner
                && conv_state.cols() == (k - 1) * cd
                && ssm_state.cols() == s.state_len(),
            || {
                format!(
                    "mixed {:?}, out {:?}, conv state {:?}, ssm state {:?}, {s:?} with {k} \
                     conv taps",
                    mixed.shape, out.shape, conv_state.shape, ssm_state.shape,
                )
            },
        )?;
        let params = [
            ("conv", layer.conv),
            ("conv_bias", layer.conv_bias),
            ("neg_a", layer.neg_a),
            ("dt_bias", layer.dt_bias),
            ("d", layer.d),
            ("norm", layer.norm),
        ];
        let Some(tm) = self.recurrent_step_checks(
            OP,
            out,
            mixed,
            (conv_state, ("ssm_state", ssm_state)),
            &params,
            host,
            batch,
        )?
        else {
            return Ok(());
        };
        let st = &self.stream;
        let plans = batch.state_arrays(st);
        let [starts, seq_slots, save_starts, saves] = plans;
        let seqs = host.num_seqs();
        let (row_seq, mx) = (batch.row_seq(st), mixed.ptr(st));
        let (ti, ci, ki, wi) = (int(t, OP)?, int(cd, OP)?, int(k, OP)?, int(width, OP)?);
        let inner_i = int(inner, OP)?;

        // 1. conv = silu(conv(window | xBC) + bias) into `[T, C]` f32; the windows move on.
        let conv = self.alloc(&[t, cd], DType::F32)?;
        let cp = conv.ptr(st);
        let (taps, bias, cs) = (
            layer.conv.ptr(st),
            layer.conv_bias.ptr(st),
            conv_state.ptr(st),
        );
        let args = (
            cp,
            mx,
            taps,
            bias,
            cs,
            row_seq,
            starts,
            seq_slots,
            save_starts,
            saves,
            ti,
            ci,
            ki,
            wi,
            inner_i,
        );
        // SAFETY: conv is [T, C] f32, mixed [T, width] of the kernel's type with xBC at
        // columns inner ..< inner + C, taps [C, K] and bias [C] f32, conv_state
        // [slots, (K−1)·C] f32; the batch's arrays describe T rows in S sequences whose slots
        // and save slots are below `slots` (checked above); grid.y covers T rows in tiles then S
        // sequences.
        unsafe {
            conv_kernel(tm)?.launch(self, super::gdn_kernels::conv_cfg(cd, t, seqs)?, args)?;
        }

        // 2. the scan into y `[T, nh·p]` f32, chunked for the long sequences, token by token
        // for the others; the states move on.
        let y = self.alloc(&[t, inner], DType::F32)?;
        let yp = y.ptr(st);
        let split = self.mamba2_split(host, &s);
        if split.chunks > 0 {
            let a = ChunkArgs {
                y: yp,
                conv: cp,
                mixed: mx,
                tm,
                neg_a: layer.neg_a.ptr(st),
                dt_bias: layer.dt_bias.ptr(st),
                d: layer.d.ptr(st),
                state: ssm_state.ptr(st),
                plans,
                width: wi,
                dt_limit: layer.dt_limit,
            };
            self.mamba2_chunked(&a, &s, seqs, &split)?;
        }
        if split.tokens {
            let (threads, rows) = scan_block(s.head_dim);
            let (lo, hi) = layer.dt_limit;
            let args = (
                yp,
                cp,
                mx,
                layer.neg_a.ptr(st),
                layer.dt_bias.ptr(st),
                layer.d.ptr(st),
                ssm_state.ptr(st),
                starts,
                seq_slots,
                save_starts,
                saves,
                int(nh, OP)?,
                int(s.head_dim, OP)?,
                int(s.groups, OP)?,
                wi,
                int(inner + cd, OP)?,
                lo,
                hi,
                split.chunk_min,
            );
            let config = cudarc::driver::LaunchConfig {
                grid_dim: (
                    dim(s.head_dim.div_ceil(rows), OP)?,
                    dim(nh, OP)?,
                    dim(seqs, OP)?,
                ),
                block_dim: (threads as u32, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: y is [T, nh·p] f32, conv [T, C] f32 (written above), mixed as above with
            // dt at column inner + C, neg_a, dt_bias and d [nh] f32, the states
            // [slots, nh·p·N] f32 with every slot and save slot in range (checked above); the
            // kernel is built for this N and leaves the chunked sequences (chunk_min) alone;
            // grid (p / rows, nh, S), four threads a row in whole warps.
            unsafe { scan_kernel(s.state, tm)?.launch(self, config, args)? };
        }

        // 3. out = rms_norm_grouped(y · silu(z)) · norm, a block per (row, group).
        let args = (
            out.ptr(st),
            yp,
            mx,
            layer.norm.ptr(st),
            int(s.groups, OP)?,
            inner_i,
            wi,
            layer.eps,
        );
        // SAFETY: out is [T, nh·p] of the kernel's output type (set above), y [T, nh·p] f32,
        // mixed as above with z at column 0, norm [nh·p] f32; grid (T, G), a block sums a
        // group's nh·p / G channels (a multiple of 32 threads).
        unsafe {
            norm_kernel(tm, out.dtype)?.launch(
                self,
                cfg((dim(t, OP)?, dim(s.groups, OP)?), NORM_THREADS),
                args,
            )
        }
    }

    /// [`crate::backend::HybridOps::relu2`] on CUDA: `out` takes the compute type.
    pub(super) fn relu2_op(&self, out: &mut CudaTensor, x: &CudaTensor) -> Result<()> {
        const OP: &str = "relu2";
        check(OP, out.shape == x.shape, || {
            format!("out {:?}, x {:?}", out.shape, x.shape)
        })?;
        self.set_dtype(out, self.compute_dtype())?;
        let n = x.numel() as u64;
        let ((o, ob), (xp, xb)) = (operand(self, OP, out)?, operand(self, OP, x)?);
        if n == 0 {
            return Ok(());
        }
        // SAFETY: out and x hold n elements each, of the types their flags name; the
        // grid-stride loop stays below n.
        unsafe { k::relu2.launch(self, stride_cfg(n), (o, ob, xp, xb, n)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each key names its kernel; shapes outside the builds have none.
    #[test]
    fn every_key_picks_its_kernel() {
        let types = [(DType::F32, "f32"), (DType::BF16, "bf16")];
        for (tm, t) in types {
            assert_eq!(
                conv_kernel(tm).expect("a kernel").name(),
                format!("mamba2_conv_{t}")
            );
            for n in STATE_SIZES {
                let name = scan_kernel(n, tm).expect("a kernel").name();
                assert_eq!(name, format!("mamba2_scan_n{n}_{t}"));
            }
            for (out, o) in types {
                let name = norm_kernel(tm, out).expect("a kernel").name();
                assert_eq!(name, format!("mamba2_norm_{t}_{o}"));
            }
            assert!(scan_kernel(48, tm).is_err() && conv_kernel(DType::F8).is_err());
        }
    }

    /// Whole warps, four threads a row, at most 32 rows a block.
    #[test]
    fn scan_blocks_are_whole_warps() {
        assert_eq!(scan_block(8), (32, 8));
        assert_eq!(scan_block(12), (64, 16));
        assert_eq!(scan_block(64), (128, 32));
        assert_eq!(scan_block(40), (128, 32));
    }
}
