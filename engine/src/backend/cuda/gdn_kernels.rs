//! The Gated DeltaNet kernels (`hybrid.cu`, `hybrid_chunk.cu`, `hybrid_decode.cu`) by typed
//! key: the key head size they are built for, the type of `mixed` (the layer's input, bf16 or
//! f32) and of the output. `hybrid.rs`, `gdn_chunk.rs` and `gdn_decode.rs` launch them.

use super::elementwise::{cfg, dim};
use super::shape_err;
use super::tensor::DType;
use crate::backend::kernels::{self as k, Kernel};
use crate::backend::{BackendError, Result};
use cudarc::driver::LaunchConfig;

/// `gdn_conv_*`: out, mixed, taps, conv_state, row_seq, the four state arrays, rows,
/// channels, taps, width.
#[rustfmt::skip]
pub(super) type ConvArgs = (u64, u64, u64, u64, u64, u64, u64, u64, u64, i32, i32, i32, i32);
/// `gdn_recurrent_*`: core, conv, mixed, neg_a, dt_bias, state, the four state arrays, nk, nv,
/// dv, width, chunk_min.
#[rustfmt::skip]
pub(super) type RecurrentArgs = (
    u64, u64, u64, u64, u64, u64, u64, u64, u64, u64,
    i32, i32, i32, i32, i32,
);
/// `gdn_norm_*`: out, core, mixed, norm, heads, nv, dv, width, z_at, eps.
pub(super) type NormArgs = (u64, u64, u64, u64, i32, i32, i32, i32, i32, f32);
/// `gdn_chunk_prep_*`: scratch, conv, mixed, neg_a, dt_bias, plan, sequences, nk, nv, dv,
/// width.
pub(super) type PrepArgs = (u64, u64, u64, u64, u64, u64, i32, i32, i32, i32, i32);
/// `gdn_chunk_state_*`: core, conv, scratch, state, plan, the four state arrays, sequences,
/// chunk_min, nk, nv, dv.
#[rustfmt::skip]
pub(super) type StateArgs = (u64, u64, u64, u64, u64, u64, u64, u64, u64, i32, i32, i32, i32, i32);
/// `gdn_decode_*`: out, core, tickets, mixed, taps, conv_state, neg_a, dt_bias, norm, state,
/// slots, save_starts, saves, nk, nv, taps, width, eps.
#[rustfmt::skip]
pub(super) type DecodeArgs = (
    u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64,
    i32, i32, i32, i32,
    f32,
);

const OP: &str = "gated_delta_net";

/// Rows a block of `gdn_conv` (and `mamba2_conv`) takes: hybrid.cu's `GDN_CONV_ROWS`.
pub(super) const CONV_ROWS: usize = 32;

/// The conv's launch: 256 channels a block; block rows of `CONV_ROWS` rows, then one a sequence
/// (hybrid.cu, step 1).
pub(super) fn conv_cfg(channels: usize, rows: usize, seqs: usize) -> Result<LaunchConfig> {
    let y = rows.div_ceil(CONV_ROWS) + seqs;
    Ok(cfg((dim(channels.div_ceil(256), OP)?, dim(y, OP)?), 256))
}

fn no_kernel(what: String) -> BackendError {
    shape_err(
        OP,
        format!("no {what} kernel (bf16 or f32 activations, dk in the built sizes)"),
    )
}

/// `gdn_conv_<mixed>`.
pub(super) fn conv(tm: DType) -> Result<Kernel<ConvArgs>> {
    Ok(match tm {
        DType::F32 => k::gdn_conv_f32,
        DType::BF16 => k::gdn_conv_bf16,
        _ => return Err(no_kernel(format!("gdn_conv for {tm:?}"))),
    })
}

/// `gdn_recurrent_d<dk>_<mixed>`.
pub(super) fn recurrent(dk: usize, tm: DType) -> Result<Kernel<RecurrentArgs>> {
    Ok(match (dk, tm) {
        (16, DType::F32) => k::gdn_recurrent_d16_f32,
        (16, DType::BF16) => k::gdn_recurrent_d16_bf16,
        (32, DType::F32) => k::gdn_recurrent_d32_f32,
        (32, DType::BF16) => k::gdn_recurrent_d32_bf16,
        (64, DType::F32) => k::gdn_recurrent_d64_f32,
        (64, DType::BF16) => k::gdn_recurrent_d64_bf16,
        (128, DType::F32) => k::gdn_recurrent_d128_f32,
        (128, DType::BF16) => k::gdn_recurrent_d128_bf16,
        (256, DType::F32) => k::gdn_recurrent_d256_f32,
        (256, DType::BF16) => k::gdn_recurrent_d256_bf16,
        _ => return Err(no_kernel(format!("gdn_recurrent for dk {dk}, {tm:?}"))),
    })
}

/// `gdn_norm_<mixed>_<out>`.
pub(super) fn norm(tm: DType, out: DType) -> Result<Kernel<NormArgs>> {
    Ok(match (tm, out) {
        (DType::F32, DType::F32) => k::gdn_norm_f32_f32,
        (DType::F32, DType::BF16) => k::gdn_norm_f32_bf16,
        (DType::BF16, DType::F32) => k::gdn_norm_bf16_f32,
        (DType::BF16, DType::BF16) => k::gdn_norm_bf16_bf16,
        _ => return Err(no_kernel(format!("gdn_norm for {tm:?} into {out:?}"))),
    })
}

/// `gdn_chunk_prep_d<dk>_<mixed>`.
pub(super) fn chunk_prep(dk: usize, tm: DType) -> Result<Kernel<PrepArgs>> {
    Ok(match (dk, tm) {
        (16, DType::F32) => k::gdn_chunk_prep_d16_f32,
        (16, DType::BF16) => k::gdn_chunk_prep_d16_bf16,
        (32, DType::F32) => k::gdn_chunk_prep_d32_f32,
        (32, DType::BF16) => k::gdn_chunk_prep_d32_bf16,
        (64, DType::F32) => k::gdn_chunk_prep_d64_f32,
        (64, DType::BF16) => k::gdn_chunk_prep_d64_bf16,
        (128, DType::F32) => k::gdn_chunk_prep_d128_f32,
        (128, DType::BF16) => k::gdn_chunk_prep_d128_bf16,
        _ => return Err(no_kernel(format!("gdn_chunk_prep for dk {dk}, {tm:?}"))),
    })
}

/// `gdn_chunk_state_d<dk>`.
pub(super) fn chunk_state(dk: usize) -> Result<Kernel<StateArgs>> {
    Ok(match dk {
        16 => k::gdn_chunk_state_d16,
        32 => k::gdn_chunk_state_d32,
        64 => k::gdn_chunk_state_d64,
        128 => k::gdn_chunk_state_d128,
        _ => return Err(no_kernel(format!("gdn_chunk_state for dk {dk}"))),
    })
}

/// `gdn_decode_d<dk>_<mixed>_<out>`.
pub(super) fn decode(dk: usize, tm: DType, out: DType) -> Result<Kernel<DecodeArgs>> {
    Ok(match (dk, tm, out) {
        (16, DType::F32, DType::F32) => k::gdn_decode_d16_f32_f32,
        (16, DType::F32, DType::BF16) => k::gdn_decode_d16_f32_bf16,
        (16, DType::BF16, DType::F32) => k::gdn_decode_d16_bf16_f32,
        (16, DType::BF16, DType::BF16) => k::gdn_decode_d16_bf16_bf16,
        (32, DType::F32, DType::F32) => k::gdn_decode_d32_f32_f32,
        (32, DType::F32, DType::BF16) => k::gdn_decode_d32_f32_bf16,
        (32, DType::BF16, DType::F32) => k::gdn_decode_d32_bf16_f32,
        (32, DType::BF16, DType::BF16) => k::gdn_decode_d32_bf16_bf16,
        (64, DType::F32, DType::F32) => k::gdn_decode_d64_f32_f32,
        (64, DType::F32, DType::BF16) => k::gdn_decode_d64_f32_bf16,
        (64, DType::BF16, DType::F32) => k::gdn_decode_d64_bf16_f32,
        (64, DType::BF16, DType::BF16) => k::gdn_decode_d64_bf16_bf16,
        (128, DType::F32, DType::F32) => k::gdn_decode_d128_f32_f32,
        (128, DType::F32, DType::BF16) => k::gdn_decode_d128_f32_bf16,
        (128, DType::BF16, DType::F32) => k::gdn_decode_d128_bf16_f32,
        (128, DType::BF16, DType::BF16) => k::gdn_decode_d128_bf16_bf16,
        (256, DType::F32, DType::F32) => k::gdn_decode_d256_f32_f32,
        (256, DType::F32, DType::BF16) => k::gdn_decode_d256_f32_bf16,
        (256, DType::BF16, DType::F32) => k::gdn_decode_d256_bf16_f32,
        (256, DType::BF16, DType::BF16) => k::gdn_decode_d256_bf16_bf16,
        _ => {
            return Err(no_kernel(format!(
                "gdn_decode for dk {dk}, {tm:?} into {out:?}"
            )));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The launch's row tiles are the kernel's: a mismatch would skip rows or read past T.
    #[test]
    fn conv_rows_match_the_kernel() {
        let define = format!("#define GDN_CONV_ROWS {CONV_ROWS} ");
        assert!(metrale_kernels::Module::Hybrid.source().contains(&define));
        let c = conv_cfg(300, 65, 3).expect("a launch");
        assert_eq!((c.grid_dim, c.block_dim), ((2, 3 + 3, 1), (256, 1, 1)));
    }

    /// Each key names the kernel the launches named before the typed keys (by format!).
    #[test]
    fn every_key_picks_its_kernel() {
        let types = [(DType::F32, "f32"), (DType::BF16, "bf16")];
        for (tm, t) in types {
            assert_eq!(conv(tm).expect("a kernel").name(), format!("gdn_conv_{t}"));
            for (out, o) in types {
                assert_eq!(
                    norm(tm, out).expect("a kernel").name(),
                    format!("gdn_norm_{t}_{o}")
                );
            }
            for dk in [16, 32, 64, 128, 256] {
                let name = recurrent(dk, tm).expect("a kernel").name();
                assert_eq!(name, format!("gdn_recurrent_d{dk}_{t}"));
                for (out, o) in types {
                    let name = decode(dk, tm, out).expect("a kernel").name();
                    assert_eq!(name, format!("gdn_decode_d{dk}_{t}_{o}"));
                }
                if dk < 256 {
                    let name = chunk_prep(dk, tm).expect("a kernel").name();
                    assert_eq!(name, format!("gdn_chunk_prep_d{dk}_{t}"));
                    let name = chunk_state(dk).expect("a kernel").name();
                    assert_eq!(name, format!("gdn_chunk_state_d{dk}"));
                } else {
                    assert!(chunk_prep(dk, tm).is_err() && chunk_state(dk).is_err());
                }
            }
            assert!(recurrent(48, tm).is_err() && decode(48, tm, tm).is_err());
            assert!(norm(DType::F8, tm).is_err() && conv(DType::F8).is_err());
        }
    }
}
