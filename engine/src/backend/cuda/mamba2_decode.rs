//! The single-launch Mamba-2 decode step (`kernels/src/mamba2_decode.cu`, whose header has the
//! design and the byte floor): when every sequence of a step has exactly one row (decode,
//! CUDA-graph padding rows included), one launch does the conv, the state update and read-out
//! and the gated grouped RMSNorm, instead of `mamba2_conv`, `mamba2_scan` and `mamba2_norm`.
//! The blocks of a (sequence, group) meet at an arrival counter (the Gated DeltaNet decode's,
//! `gdn_decode.rs`: the layers run one after another on the stream, and the last block of each
//! pair leaves its counter at zero).

use super::elementwise::{dim, int};
use super::gdn_decode::TICKETS;
use super::mamba2::{STATE_SIZES, scan_block};
use super::tensor::{CudaTensor, DType};
use super::{CudaBackend, shape_err};
use crate::backend::kernels::{self as k, Kernel};
use crate::backend::{BatchInputs, Mamba2Layer, Result, SsmHeads};
use cudarc::driver::LaunchConfig;

const OP: &str = "mamba2";

/// `mamba2_decode_n<N>_<mixed>_<out>`: out, y, tickets, mixed, taps, conv_bias, conv_state,
/// neg_a, dt_bias, d, norm, state, slots, save_starts, saves, nh, p, groups, k, width, dt_lo,
/// dt_hi, eps.
#[rustfmt::skip]
type DecodeArgs = (
    u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64,
    i32, i32, i32, i32, i32, f32, f32, f32,
);

/// `mamba2_decode_n<N>_<mixed>_<out>`.
fn decode_kernel(n: usize, tm: DType, to: DType) -> Result<Kernel<DecodeArgs>> {
    use DType::{BF16, F32};
    Ok(match (n, tm, to) {
        (16, F32, F32) => k::mamba2_decode_n16_f32_f32,
        (16, F32, BF16) => k::mamba2_decode_n16_f32_bf16,
        (16, BF16, F32) => k::mamba2_decode_n16_bf16_f32,
        (16, BF16, BF16) => k::mamba2_decode_n16_bf16_bf16,
        (32, F32, F32) => k::mamba2_decode_n32_f32_f32,
        (32, F32, BF16) => k::mamba2_decode_n32_f32_bf16,
        (32, BF16, F32) => k::mamba2_decode_n32_bf16_f32,
        (32, BF16, BF16) => k::mamba2_decode_n32_bf16_bf16,
        (64, F32, F32) => k::mamba2_decode_n64_f32_f32,
        (64, F32, BF16) => k::mamba2_decode_n64_f32_bf16,
        (64, BF16, F32) => k::mamba2_decode_n64_bf16_f32,
        (64, BF16, BF16) => k::mamba2_decode_n64_bf16_bf16,
        (128, F32, F32) => k::mamba2_decode_n128_f32_f32,
        (128, F32, BF16) => k::mamba2_decode_n128_f32_bf16,
        (128, BF16, F32) => k::mamba2_decode_n128_bf16_f32,
        (128, BF16, BF16) => k::mamba2_decode_n128_bf16_bf16,
        (256, F32, F32) => k::mamba2_decode_n256_f32_f32,
        (256, F32, BF16) => k::mamba2_decode_n256_f32_bf16,
        (256, BF16, F32) => k::mamba2_decode_n256_bf16_f32,
        (256, BF16, BF16) => k::mamba2_decode_n256_bf16_bf16,
        _ => {
            let what = format!("no mamba2_decode for N {n}, {tm:?} into {to:?}");
            return Err(shape_err(OP, what));
        }
    })
}

impl CudaBackend {
    /// Whether the fused kernel takes `host`'s step at these heads: on in the tuning
    /// (`mamba2.fused_decode`), every sequence one row, N built, and no more (sequence, group)
    /// pairs than counters.
    pub(super) fn mamba2_fused_decode(&self, host: &BatchInputs, s: &SsmHeads) -> bool {
        let one_row = host.seq_starts.windows(2).all(|w| w[1] - w[0] == 1);
        self.tuning().mamba2.fused_decode
            && one_row
            && STATE_SIZES.contains(&s.state)
            && host.num_seqs() * s.groups <= TICKETS
    }

    /// The whole decode step of `layer` into `out` (`[S, nh·p]`, its dtype set): grid
    /// (p / rows, nh, S), four threads a state row as `mamba2_scan`'s blocks.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn mamba2_decode(
        &self,
        out: &mut CudaTensor,
        mixed: &CudaTensor,
        tm: DType,
        layer: &Mamba2Layer<'_, CudaTensor>,
        (conv_state, ssm_state): (u64, u64),
        plans: [u64; 4],
        seqs: usize,
    ) -> Result<()> {
        let s = layer.heads;
        let st = &self.stream;
        let inner = s.inner();
        let width = inner + s.conv_dim() + s.heads;
        // The blocks of a group pass their y to its last block through y `[S, nh·p]` f32.
        let y = self.alloc(&[seqs, inner], DType::F32)?;
        let tickets = self.gdn_tickets()?;
        let [_, slots, save_starts, saves] = plans;
        let (lo, hi) = layer.dt_limit;
        let args = (
            out.ptr(st),
            y.ptr(st),
            tickets,
            mixed.ptr(st),
            layer.conv.ptr(st),
            layer.conv_bias.ptr(st),
            conv_state,
            layer.neg_a.ptr(st),
            layer.dt_bias.ptr(st),
            layer.d.ptr(st),
            layer.norm.ptr(st),
            ssm_state,
            slots,
            save_starts,
            saves,
            int(s.heads, OP)?,
            int(s.head_dim, OP)?,
            int(s.groups, OP)?,
            int(layer.kernel, OP)?,
            int(width, OP)?,
            lo,
            hi,
            layer.eps,
        );
        let (threads, rows) = scan_block(s.head_dim);
        let config = LaunchConfig {
            grid_dim: (
                dim(s.head_dim.div_ceil(rows), OP)?,
                dim(s.heads, OP)?,
                dim(seqs, OP)?,
            ),
            block_dim: (threads as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: out is [S, nh·p] of the kernel's output type, y [S, nh·p] f32, tickets
        // TICKETS ≥ S · G zeroed counters the kernel leaves zeroed, mixed [S, width] of its
        // input type (row s is sequence s's: every sequence has one row, checked by
        // mamba2_fused_decode), taps [C, K], conv_bias [C], neg_a, dt_bias and d [nh], norm
        // [nh·p] f32, the conv windows [slots, (K−1)·C] and states [slots, nh·p·N] f32 with
        // every slot and save slot in range (checked by the caller); the kernel is built for
        // this N; four threads a row in whole warps, at most 32 rows a block.
        unsafe { decode_kernel(s.state, tm, out.dtype)?.launch(self, config, args) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each key names its kernel; shapes outside the builds have none.
    #[test]
    fn every_key_picks_its_kernel() {
        let types = [(DType::F32, "f32"), (DType::BF16, "bf16")];
        for n in STATE_SIZES {
            for (tm, t) in types {
                for (to, o) in types {
                    let name = decode_kernel(n, tm, to).expect("a kernel").name();
                    assert_eq!(name, format!("mamba2_decode_n{n}_{t}_{o}"));
                }
            }
        }
        assert!(decode_kernel(48, DType::F32, DType::F32).is_err());
        assert!(decode_kernel(128, DType::F8, DType::F32).is_err());
    }
}
