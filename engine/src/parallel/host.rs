//! The host-side arithmetic of the collectives that run over host copies ([`super::local`]'s
//! threads, [`super::tcp`]'s processes): every rank's tensor, summed or placed side by side in
//! rank order, so every group gives every rank the same bits.

use crate::backend::{Backend, BackendError, Result};
use crate::loader::{DType, HostData, HostTensor};

/// A tensor on the host: its values and shape.
pub type HostValues = (Vec<f32>, Vec<usize>);

pub fn collective_err(message: String) -> BackendError {
    BackendError::Shape {
        op: "collective",
        message,
    }
}

/// `t`'s values and shape, on the host.
pub fn download<B: Backend>(b: &B, t: &B::Tensor) -> Result<HostValues> {
    Ok((b.to_host(t)?, b.shape(t).to_vec()))
}

pub fn upload<B: Backend>(b: &B, (values, shape): &HostValues) -> Result<B::Tensor> {
    let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    b.upload(&HostTensor {
        shape: shape.clone(),
        data: HostData::Raw {
            dtype: DType::F32,
            bytes: std::borrow::Cow::Owned(bytes),
        },
    })
}

/// The ranks' tensors summed, rank 0's first.
pub fn sum(all: &[HostValues]) -> Result<HostValues> {
    let shape = all[0].1.clone();
    let mut sum = vec![0f32; all[0].0.len()];
    for (values, s) in all {
        if *s != shape {
            return Err(collective_err(format!(
                "all_reduce over shapes {s:?} and {shape:?}"
            )));
        }
        for (a, v) in sum.iter_mut().zip(values) {
            *a += v;
        }
    }
    Ok((sum, shape))
}

/// The ranks' `[R, C]` tensors side by side: `[R, world·C]`, rank `r`'s columns at `r·C`.
pub fn cols(all: &[HostValues]) -> Result<HostValues> {
    let (rows, cols) = match all[0].1.as_slice() {
        [r, c] => (*r, *c),
        other => return Err(collective_err(format!("all_gather of {other:?}"))),
    };
    if all.iter().any(|(_, s)| *s != [rows, cols]) {
        return Err(collective_err("all_gather over different shapes".into()));
    }
    let world = all.len();
    let mut out = vec![0f32; rows * cols * world];
    for (r, (values, _)) in all.iter().enumerate() {
        for row in 0..rows {
            let to = row * cols * world + r * cols;
            out[to..to + cols].copy_from_slice(&values[row * cols..(row + 1) * cols]);
        }
    }
    Ok((out, vec![rows, cols * world]))
}
