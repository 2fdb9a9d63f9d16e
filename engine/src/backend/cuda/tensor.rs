//! `CudaTensor`: a device buffer, its element type and its shape.
//!
//! One tensor type holds everything the model touches: weights, KV-cache layers and the
//! activations between ops, in bf16 or f32. Which type an activation has is decided by the op
//! that writes it (see `docs/cuda.md`): GEMM operands (norm outputs, attention output, the SwiGLU
//! product) and the KV cache are bf16; GEMM results, the residual stream and log-probabilities
//! are f32. Every kernel reads either type, so any tensor can feed any op.

use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use half::bf16;
use rayon::prelude::*;

/// Element type of a [`CudaTensor`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DType {
    BF16,
    F32,
}

impl DType {
    pub fn size(self) -> usize {
        match self {
            DType::BF16 => 2,
            DType::F32 => 4,
        }
    }

    /// The suffix of kernel names (`rms_norm_f32`, ...).
    pub fn suffix(self) -> &'static str {
        match self {
            DType::BF16 => "bf16",
            DType::F32 => "f32",
        }
    }
}

/// A row-major tensor on the device.
#[derive(Debug)]
pub struct CudaTensor {
    pub(super) shape: Vec<usize>,
    pub(super) dtype: DType,
    /// At least `numel · dtype.size()` bytes (never empty: a 0-element tensor holds a few bytes,
    /// so its pointer stays valid).
    pub(super) buf: Storage,
}

/// Where a tensor's bytes live: its own allocation (freed, stream-ordered, on drop), or a
/// slice of the backend's graph arena (see `graph.rs`), which outlives every tensor cut from it
/// and is never freed through one.
#[derive(Debug)]
pub(super) enum Storage {
    Owned(CudaSlice<u8>),
    Arena(ManuallyDrop<CudaSlice<u8>>),
}

impl Deref for Storage {
    type Target = CudaSlice<u8>;
    fn deref(&self) -> &CudaSlice<u8> {
        match self {
            Storage::Owned(s) => s,
            Storage::Arena(s) => s,
        }
    }
}

impl DerefMut for Storage {
    fn deref_mut(&mut self) -> &mut CudaSlice<u8> {
        match self {
            Storage::Owned(s) => s,
            Storage::Arena(s) => s,
        }
    }
}

impl CudaTensor {
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Bytes of the elements (the buffer may hold a few more).
    pub fn num_bytes(&self) -> usize {
        self.numel() * self.dtype.size()
    }

    /// Length of the last dimension.
    pub fn cols(&self) -> usize {
        self.shape.last().copied().unwrap_or(1)
    }

    /// Product of all but the last dimension.
    pub fn rows(&self) -> usize {
        self.numel() / self.cols().max(1)
    }

    /// The device address, for kernel arguments. Event tracking is off (one stream), so no
    /// synchronisation hangs on the returned guard.
    pub(super) fn ptr(&self, stream: &CudaStream) -> u64 {
        let (p, _guard) = self.buf.device_ptr(stream);
        p
    }
}

/// Bytes a buffer for `numel` elements of `dtype` takes (never 0).
pub(super) fn alloc_bytes(numel: usize, dtype: DType) -> usize {
    (numel * dtype.size()).max(4)
}

/// bf16 bit patterns (little-endian bytes) of f32 values, rounded to nearest even.
pub(super) fn f32_to_bf16_bytes(values: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; values.len() * 2];
    out.par_chunks_mut(2 << 14)
        .zip(values.par_chunks(1 << 14))
        .for_each(|(o, v)| {
            for (o, &v) in o.chunks_exact_mut(2).zip(v) {
                o.copy_from_slice(&bf16::from_f32(v).to_le_bytes());
            }
        });
    out
}

/// f32 values of a tensor's bytes.
pub(super) fn bytes_to_f32(bytes: &[u8], dtype: DType) -> Vec<f32> {
    match dtype {
        DType::F32 => bytes
            .par_chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        DType::BF16 => bytes
            .par_chunks_exact(2)
            .map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_bytes_round_trip_and_round_to_nearest_even() {
        let v = [1.0f32, -2.5, 1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0, 0.0];
        let back = bytes_to_f32(&f32_to_bf16_bytes(&v), DType::BF16);
        // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: even (1) wins; 1 + 3·2^-8 rounds up.
        assert_eq!(back, vec![1.0, -2.5, 1.0, 1.0 + 4.0 / 256.0, 0.0]);
        let f = bytes_to_f32(&1.5f32.to_le_bytes(), DType::F32);
        assert_eq!(f, vec![1.5]);
    }
}
