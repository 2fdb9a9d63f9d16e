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

use crate::backend::Result;

/// Element type of a [`CudaTensor`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    BF16,
    F32,
    /// Weights only: e4m3 bytes, then (at [`fp8_scales_offset`]) one f32 scale per 128 columns
    /// of each row (fine-grained FP8's 128 × 128 blocks expanded to every row, so fused and
    /// stacked weights need no block bookkeeping). The value is `e4m3 · scale`.
    F8,
    /// Weights only, NVFP4 (`nvfp4.rs`): packed E2M1 pairs `[rows, cols / 2]` (the even element
    /// in the low nibble), then (at [`f4_scales_offset`]) one E4M3 scale byte per 16 columns,
    /// then (at [`f4_globals_offset`]) one f32 multiplier a row (the global scale, inverted for
    /// compressed-tensors), so stacked parts keep their own. The value is
    /// `e2m1 · (e4m3 · multiplier)`. cols % 32 == 0.
    F4,
    /// Weights only, MXFP4 (gpt-oss's expert stacks, `moe_fp4.rs`): packed E2M1 pairs
    /// `[rows, cols / 2]` as F4's, then (at [`f4_scales_offset`]) one E8M0 scale byte per 32
    /// columns. The value is `e2m1 · 2^(e8m0 − 127)`. cols % 32 == 0.
    Mx4,
}

impl DType {
    pub fn size(self) -> usize {
        match self {
            DType::BF16 => 2,
            DType::F32 => 4,
            DType::F8 => 1,
            // Two a byte: callers size F4 buffers with f4_alloc_bytes, never with size().
            DType::F4 | DType::Mx4 => 1,
        }
    }

    /// The suffix of kernel names (`rms_norm_f32`, ...).
    pub fn suffix(self) -> &'static str {
        match self {
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F8 => "fp8",
            DType::F4 => "nvfp4",
            DType::Mx4 => "mxfp4",
        }
    }
}

/// Columns one FP8 scale covers.
pub const FP8_BLOCK: usize = 128;

/// Where an FP8 tensor's scales start in its buffer: after the `numel` weight bytes, 256-byte
/// aligned.
pub fn fp8_scales_offset(numel: usize) -> usize {
    numel.next_multiple_of(256)
}

/// Where an F4 tensor's scale bytes start: after the `numel / 2` packed bytes, 256-byte aligned.
pub fn f4_scales_offset(numel: usize) -> usize {
    (numel / 2).next_multiple_of(256)
}

/// Where an F4 tensor's per-row f32 multipliers start: after the `numel / 16` scale bytes.
pub fn f4_globals_offset(numel: usize) -> usize {
    (f4_scales_offset(numel) + numel / 16).next_multiple_of(256)
}

/// Bytes of an Mx4 tensor of `shape`: packed values, then a scale byte per 32 values.
pub(super) fn mx4_alloc_bytes(shape: &[usize]) -> usize {
    let numel: usize = shape.iter().product();
    (f4_scales_offset(numel) + numel / 32).max(4)
}

/// Bytes of an F4 tensor of `shape`: packed values, scales, one f32 a row.
pub(super) fn f4_alloc_bytes(shape: &[usize]) -> usize {
    let numel: usize = shape.iter().product();
    let rows = numel / shape.last().copied().unwrap_or(1).max(1);
    (f4_globals_offset(numel) + 4 * rows).max(4)
}

/// Scales of an FP8 tensor of `shape`: one per row (all but the last dimension) and 128 columns.
pub fn fp8_num_scales(shape: &[usize]) -> usize {
    let cols = shape.last().copied().unwrap_or(1);
    let rows = shape.iter().product::<usize>() / cols.max(1);
    rows * cols.div_ceil(FP8_BLOCK)
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

    /// Bytes of the elements (the buffer may hold a few more), FP8 scales included.
    pub fn num_bytes(&self) -> usize {
        match self.dtype {
            DType::F8 => fp8_scales_offset(self.numel()) + 4 * fp8_num_scales(&self.shape),
            DType::F4 => f4_alloc_bytes(&self.shape),
            DType::Mx4 => mx4_alloc_bytes(&self.shape),
            d => self.numel() * d.size(),
        }
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

    /// The device address of an FP8 tensor's scales; 0 (never read) for other types.
    pub(super) fn scales_ptr(&self, stream: &CudaStream) -> u64 {
        match self.dtype {
            DType::F8 => self.ptr(stream) + fp8_scales_offset(self.numel()) as u64,
            DType::F4 | DType::Mx4 => self.ptr(stream) + f4_scales_offset(self.numel()) as u64,
            _ => 0,
        }
    }
}

/// Bytes a buffer for `numel` elements of `dtype` takes (never 0); FP8 tensors are made by
/// [`fp8_alloc_bytes`].
pub(super) fn alloc_bytes(numel: usize, dtype: DType) -> usize {
    (numel * dtype.size()).max(4)
}

/// Bytes of an FP8 tensor of `shape`: the weights, then the scales.
pub(super) fn fp8_alloc_bytes(shape: &[usize]) -> usize {
    (fp8_scales_offset(shape.iter().product()) + 4 * fp8_num_scales(shape)).max(4)
}

/// The e4m3 value of byte `b` (float8_e4m3fn: bias 7, no infinities, 0x7f/0xff NaN), exactly.
pub fn e4m3_to_f32(b: u8) -> f32 {
    if b & 0x7f == 0x7f {
        return f32::NAN;
    }
    // The exponent and mantissa bits placed in an f32 are the value times 2^-120.
    let mag = f32::from_bits(u32::from(b & 0x7f) << 20) * f32::from_bits(0x7b80_0000);
    if b & 0x80 != 0 { -mag } else { mag }
}

/// The values of an FP8 tensor of `shape` from its buffer's bytes (weights, then scales).
pub(super) fn fp8_bytes_to_f32(bytes: &[u8], shape: &[usize]) -> Vec<f32> {
    let numel: usize = shape.iter().product();
    let cols = shape.last().copied().unwrap_or(1).max(1);
    let per_row = cols.div_ceil(FP8_BLOCK);
    let scales = &bytes[fp8_scales_offset(numel)..];
    (0..numel)
        .map(|j| {
            let (r, c) = (j / cols, j % cols);
            let at = 4 * (r * per_row + c / FP8_BLOCK);
            let s =
                f32::from_le_bytes([scales[at], scales[at + 1], scales[at + 2], scales[at + 3]]);
            e4m3_to_f32(bytes[j]) * s
        })
        .collect()
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
        DType::F8 => bytes.iter().map(|&b| e4m3_to_f32(b)).collect(),
        // The raw bytes (packed pairs, scales, multipliers): FP4 weights are never read back.
        DType::F4 | DType::Mx4 => bytes.iter().map(|&b| f32::from(b)).collect(),
    }
}

/// Tensors made from host values or drawn on the device (tests, the check program, dummy
/// weights).
impl super::CudaBackend {
    /// A tensor of `dtype` holding `data` (rounded to bf16 when `dtype` is bf16): how tests and
    /// the check program make inputs of either type.
    pub fn tensor_from_f32(
        &self,
        shape: &[usize],
        data: &[f32],
        dtype: DType,
    ) -> Result<CudaTensor> {
        let n: usize = shape.iter().product();
        super::check("tensor_from_f32", data.len() == n, || {
            format!("{} values for shape {shape:?}", data.len())
        })?;
        let bytes = match dtype {
            DType::BF16 => f32_to_bf16_bytes(data),
            DType::F32 => data.iter().flat_map(|v| v.to_le_bytes()).collect(),
            DType::F8 | DType::F4 | DType::Mx4 => {
                return Err(super::not_activation("tensor_from_f32"));
            }
        };
        self.tensor_from_bytes(shape, dtype, &bytes)
    }

    /// A bf16 tensor of uniform values with standard deviation `std`, drawn on the device: the
    /// same values as `HostData::Random { seed, std }` gives on the host, rounded to bf16.
    pub fn random_bf16(&self, shape: &[usize], seed: u64, std: f32) -> Result<CudaTensor> {
        self.random(shape, DType::BF16, seed, std)
    }

    /// `HostData::Random { seed, std }`'s values drawn on the device, in `dtype`.
    pub(super) fn random(
        &self,
        shape: &[usize],
        dtype: DType,
        seed: u64,
        std: f32,
    ) -> Result<CudaTensor> {
        let mut t = self.alloc(shape, dtype)?;
        self.fill_random(&mut t, seed, std * 3f32.sqrt())?;
        Ok(t)
    }

    pub(super) fn tensor_from_bytes(
        &self,
        shape: &[usize],
        dtype: DType,
        bytes: &[u8],
    ) -> Result<CudaTensor> {
        let mut t = self.alloc(shape, dtype)?;
        if !bytes.is_empty() {
            let mut dst = t.buf.slice_mut(0..bytes.len());
            self.stream
                .memcpy_htod(bytes, &mut dst)
                .map_err(super::dev_err("upload"))?;
        }
        Ok(t)
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

    /// The bit trick the kernels use, against the loader's decode of every byte.
    #[test]
    fn e4m3_bit_trick_equals_the_loaders_decode() {
        let lut = crate::loader::fp8::e4m3_table();
        for b in 0..=255u8 {
            let (got, want) = (e4m3_to_f32(b), lut[b as usize]);
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "byte {b:#04x}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn fp8_tensors_keep_a_scale_per_row_and_128_columns() {
        // 2 rows of 130 columns: two scales a row; 1.0 (0x38) and -2.0 (0xc0) bytes.
        let shape = [2, 130];
        assert_eq!(fp8_num_scales(&shape), 4);
        let mut bytes = vec![0x38u8; 260];
        bytes[129] = 0xc0;
        bytes.resize(fp8_scales_offset(260), 0);
        for s in [1.0f32, 3.0, 0.5, 0.25] {
            bytes.extend_from_slice(&s.to_le_bytes());
        }
        assert_eq!(bytes.len(), fp8_alloc_bytes(&shape));
        let v = fp8_bytes_to_f32(&bytes, &shape);
        assert_eq!((v[0], v[127], v[128], v[129]), (1.0, 1.0, 3.0, -6.0));
        assert_eq!((v[130], v[258], v[259]), (0.5, 0.25, 0.25));
    }
}
