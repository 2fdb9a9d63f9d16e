//! A tensor on the host, as the loader hands it to a backend: raw checkpoint bytes (borrowed
//! from the memory map), or a recipe for values (dummy weights) that a backend can produce
//! where it is cheapest.

use std::borrow::Cow;

use half::{bf16, f16};
use rayon::prelude::*;

use super::nvfp4::GlobalRule;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DType {
    F32,
    F16,
    BF16,
}

impl DType {
    pub fn size(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::BF16 => 2,
        }
    }
}

#[derive(Debug, Clone)]
pub enum HostData<'a> {
    /// Little-endian elements of `dtype`, row-major.
    Raw { dtype: DType, bytes: Cow<'a, [u8]> },
    /// Uniform random values with standard deviation `std`, a pure function of `seed`.
    Random { seed: u64, std: f32 },
    /// Every element the same.
    Constant(f32),
    /// Fine-grained FP8 as stored: e4m3 bytes (row-major) and one f32 scale per `col_block`
    /// columns of each row (`[rows, ceil(cols / col_block)]`: the checkpoint's block grid
    /// expanded to every row, so parts concatenate by rows). The value is `e4m3 · scale`.
    Fp8 {
        bytes: Cow<'a, [u8]>,
        scales: Vec<f32>,
        col_block: usize,
    },
    /// Dummy FP8 weights, a pure function of `seed`: `Random`'s stream, each draw's top byte
    /// with bit 6 cleared (an e4m3 value up to ±1.875, never NaN), times [`random_fp8_scale`]
    /// so the values have standard deviation `std`; scales per 128 columns.
    RandomFp8 { seed: u64, std: f32 },
    /// NVFP4 (`nvfp4.rs`): E2M1 values two a byte (row-major, the even element in the low
    /// nibble), one E4M3 scale byte per 16 values of a row, and the tensor's stored global
    /// scale repeated for every row (so parts with their own global concatenate by rows),
    /// entering each block's scale by `rule`. The value is `e2m1 · rule(e4m3, global)`.
    Nvfp4 {
        packed: Cow<'a, [u8]>,
        scales: Cow<'a, [u8]>,
        globals: Vec<f32>,
        rule: GlobalRule,
    },
    /// Dummy NVFP4 weights (`--load-format dummy` with an NVFP4 config), a pure function of
    /// `seed`, as [`random_nvfp4_parts`] draws them: any packed E2M1 pairs, E4M3 block scales in
    /// [1, 2), and one global [`random_nvfp4_global`] for every row (ModelOpt's rule: the value
    /// is `e2m1 · (e4m3 · global)`), so the values have standard deviation `std`. Columns are
    /// a multiple of 16 (the loader draws other shapes as [`HostData::Random`]).
    RandomNvfp4 { seed: u64, std: f32 },
    /// MXFP4 (`mxfp4.rs`, gpt-oss's experts as released): E2M1 values two a byte (row-major,
    /// the even element in the low nibble) and one E8M0 scale byte per 32 values of a row,
    /// never the NaN byte (the loader refuses it). The value is `e2m1 · 2^(e8m0 − 127)`, exact
    /// in f32. Columns are a multiple of 32.
    Mxfp4 {
        packed: Cow<'a, [u8]>,
        scales: Cow<'a, [u8]>,
    },
    /// Dummy MXFP4 weights (`--load-format dummy` for an MXFP4 checkpoint's experts), a pure
    /// function of `seed`, as [`random_mxfp4_parts`] draws them: any packed E2M1 pairs
    /// (`RandomNvfp4`'s stream) and E8M0 scales of two neighbouring powers of two, so the
    /// values have standard deviation `std` within a factor of 2. Columns a multiple of 32.
    RandomMxfp4 { seed: u64, std: f32 },
}

/// The e4m3 bytes of [`HostData::RandomFp8`] `{ seed, .. }` for `n` elements: `Random`'s
/// stream, each draw's top byte with bit 6 cleared (never NaN).
pub fn random_fp8_bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    out.par_chunks_mut(CHUNK).enumerate().for_each(|(c, o)| {
        let mut state = splitmix(seed ^ (c as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        for v in o.iter_mut() {
            state = splitmix(state);
            *v = ((state >> 56) & 0xbf) as u8;
        }
    });
    out
}

/// Columns an FP8 scale covers in [`HostData::RandomFp8`] (and on the CUDA backend).
pub const FP8_COL_BLOCK: usize = 128;

/// The scale of [`HostData::RandomFp8`] for standard deviation `std`: `std` over the root mean
/// square of the 128 e4m3 values its bytes take (each equally likely).
pub fn random_fp8_scale(std: f32) -> f32 {
    let lut = super::fp8::e4m3_table();
    let mean_sq = (0..256usize)
        .filter(|b| b & 0x40 == 0)
        .map(|b| f64::from(lut[b]).powi(2))
        .sum::<f64>()
        / 128.0;
    (f64::from(std) / mean_sq.sqrt()) as f32
}

/// What [`HostData::RandomNvfp4`]'s block scales are drawn from: its seed with these bits
/// flipped (the packed values take the seed itself), so the two streams differ.
pub const NVFP4_SCALE_STREAM: u64 = 0x6e76_6670_345f_7363;

/// The E4M3 scale byte of a [`HostData::RandomNvfp4`] draw: the top three bits as the
/// mantissa of an exponent-0 value (`0x38`: 1.0), so 1.0, 1.125, ..., 1.875, all equally likely.
pub const NVFP4_SCALE_SHIFT: u32 = 61;
pub const NVFP4_SCALE_BITS: u8 = 0x38;

/// The global scale of [`HostData::RandomNvfp4`] for standard deviation `std`: `std` over the
/// root mean square of a packed value (the 16 nibbles equally likely) times that of a scale
/// (the eight scale bytes equally likely); value and scale are drawn independently.
pub fn random_nvfp4_global(std: f32) -> f32 {
    let e4m3 = super::fp8::e4m3_table();
    let e2m1_sq = (0..16u8)
        .map(|n| f64::from(super::nvfp4::e2m1_to_f32(n)).powi(2))
        .sum::<f64>()
        / 16.0;
    let scale_sq = (0..8u8)
        .map(|m| f64::from(e4m3[usize::from(NVFP4_SCALE_BITS | m)]).powi(2))
        .sum::<f64>()
        / 8.0;
    (f64::from(std) / (e2m1_sq * scale_sq).sqrt()) as f32
}

/// The packed values (`numel / 2` bytes) and E4M3 block scales (`numel / 16` bytes) of
/// [`HostData::RandomNvfp4`] with `seed`: `Random`'s chunked splitmix stream over the bytes,
/// each draw's top byte a packed pair; over the scales (from `seed ^ NVFP4_SCALE_STREAM`) each
/// draw's top three bits a mantissa. The CUDA backend's `fill_random_bytes` draws the same.
pub fn random_nvfp4_parts(seed: u64, numel: usize) -> (Vec<u8>, Vec<u8>) {
    let packed = random_bytes(seed, numel / 2, |s| (s >> 56) as u8);
    let scales = random_bytes(seed ^ NVFP4_SCALE_STREAM, numel / 16, |s| {
        (s >> NVFP4_SCALE_SHIFT) as u8 | NVFP4_SCALE_BITS
    });
    (packed, scales)
}

/// What [`HostData::RandomMxfp4`]'s scales are drawn from: its seed with these bits flipped.
pub const MXFP4_SCALE_STREAM: u64 = 0x6d78_6670_345f_7363;

/// The E8M0 scale bytes of [`HostData::RandomMxfp4`] with `std`: each draw's top bit or'ed
/// with the even byte `b` this returns, so a block's scale is `2^(b − 127)` or twice that,
/// equally likely. The values' standard deviation is then `rms(e2m1) · √2.5 · 2^(b − 127)`
/// (rms(e2m1) = √8.5625 over the 16 nibbles), `b` the even byte nearest to giving `std`.
pub fn random_mxfp4_scale_base(std: f32) -> u8 {
    let unit = (8.5625f64 * 2.5).sqrt();
    let exp = (f64::from(std.max(f32::MIN_POSITIVE)) / unit).log2() + 127.0;
    let even = (exp / 2.0).round() * 2.0;
    even.clamp(2.0, 252.0) as u8
}

/// The packed values (`numel / 2` bytes) and E8M0 scales (`numel / 32` bytes) of
/// [`HostData::RandomMxfp4`] with `seed` and `std`: the packed bytes as
/// [`random_nvfp4_parts`]'s, the scales from `seed ^ MXFP4_SCALE_STREAM`, each draw's top bit
/// or'ed with [`random_mxfp4_scale_base`]. The CUDA backend's `fill_random_nvfp4_bytes` draws
/// the same.
pub fn random_mxfp4_parts(seed: u64, std: f32, numel: usize) -> (Vec<u8>, Vec<u8>) {
    let packed = random_bytes(seed, numel / 2, |s| (s >> 56) as u8);
    let base = random_mxfp4_scale_base(std);
    let scales = random_bytes(seed ^ MXFP4_SCALE_STREAM, numel / 32, |s| {
        (s >> 63) as u8 | base
    });
    (packed, scales)
}

/// `n` bytes of the chunked splitmix stream of `seed` (as `HostData::Random` draws its
/// values: chunk `c` starts from `splitmix(seed ^ c · golden)`), each draw made a byte by `f`.
fn random_bytes(seed: u64, n: usize, f: impl Fn(u64) -> u8 + Sync) -> Vec<u8> {
    let mut out = vec![0u8; n];
    out.par_chunks_mut(CHUNK).enumerate().for_each(|(c, o)| {
        let mut state = splitmix(seed ^ (c as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        for b in o.iter_mut() {
            state = splitmix(state);
            *b = f(state);
        }
    });
    out
}

#[derive(Debug, Clone)]
pub struct HostTensor<'a> {
    pub shape: Vec<usize>,
    pub data: HostData<'a>,
}

const CHUNK: usize = 1 << 16;

impl<'a> HostTensor<'a> {
    /// A dummy FP8 or NVFP4 weight as the stored format holding the same values (its draw
    /// made real once, so that cutting it into many row ranges draws it once); anything else
    /// as it is.
    pub fn drawn(self) -> HostTensor<'a> {
        let (n, cols) = (self.numel(), self.cols());
        let rows = n / cols.max(1);
        let data = match self.data {
            HostData::RandomNvfp4 { seed, std } if cols.is_multiple_of(16) => {
                let (packed, scales) = random_nvfp4_parts(seed, n);
                HostData::Nvfp4 {
                    packed: Cow::Owned(packed),
                    scales: Cow::Owned(scales),
                    globals: vec![random_nvfp4_global(std); rows],
                    rule: GlobalRule::Multiply,
                }
            }
            HostData::RandomFp8 { seed, std } => HostData::Fp8 {
                bytes: Cow::Owned(random_fp8_bytes(seed, n)),
                scales: vec![random_fp8_scale(std); rows * cols.div_ceil(FP8_COL_BLOCK)],
                col_block: FP8_COL_BLOCK,
            },
            data => data,
        };
        HostTensor {
            shape: self.shape,
            data,
        }
    }
}

impl HostTensor<'_> {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The values as f32 (the CPU backend's storage). Random data is generated in parallel
    /// chunks, each seeded from (seed, chunk index), so the result does not depend on threads.
    pub fn to_f32(&self) -> Vec<f32> {
        let n = self.numel();
        match &self.data {
            HostData::Raw { dtype, bytes } => {
                let mut out = vec![0f32; n];
                match dtype {
                    DType::F32 => out.par_chunks_mut(CHUNK).enumerate().for_each(|(c, o)| {
                        for (i, v) in o.iter_mut().enumerate() {
                            let j = (c * CHUNK + i) * 4;
                            *v = f32::from_le_bytes([
                                bytes[j],
                                bytes[j + 1],
                                bytes[j + 2],
                                bytes[j + 3],
                            ]);
                        }
                    }),
                    DType::BF16 => out.par_chunks_mut(CHUNK).enumerate().for_each(|(c, o)| {
                        for (i, v) in o.iter_mut().enumerate() {
                            let j = (c * CHUNK + i) * 2;
                            *v = bf16::from_le_bytes([bytes[j], bytes[j + 1]]).to_f32();
                        }
                    }),
                    DType::F16 => out.par_chunks_mut(CHUNK).enumerate().for_each(|(c, o)| {
                        for (i, v) in o.iter_mut().enumerate() {
                            let j = (c * CHUNK + i) * 2;
                            *v = f16::from_le_bytes([bytes[j], bytes[j + 1]]).to_f32();
                        }
                    }),
                }
                out
            }
            HostData::Random { seed, std } => {
                let mut out = vec![0f32; n];
                let half_width = std * 3f32.sqrt();
                out.par_chunks_mut(CHUNK).enumerate().for_each(|(c, o)| {
                    let mut state = splitmix(seed ^ (c as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                    for v in o.iter_mut() {
                        state = splitmix(state);
                        let u = (state >> 40) as f32 / (1u64 << 24) as f32; // [0, 1)
                        *v = (2.0 * u - 1.0) * half_width;
                    }
                });
                out
            }
            HostData::Constant(c) => vec![*c; n],
            HostData::Fp8 {
                bytes,
                scales,
                col_block,
            } => super::fp8::dequantize_rows(bytes, self.cols(), scales, *col_block),
            HostData::RandomFp8 { seed, std } => {
                let lut = super::fp8::e4m3_table();
                let scale = random_fp8_scale(*std);
                random_fp8_bytes(*seed, n)
                    .into_iter()
                    .map(|b| lut[usize::from(b)] * scale)
                    .collect()
            }
            HostData::Nvfp4 {
                packed,
                scales,
                globals,
                rule,
            } => super::nvfp4::dequantize_rows(packed, scales, globals, *rule, self.cols()),
            HostData::Mxfp4 { packed, scales } => {
                super::mxfp4::dequantize(packed, scales, self.cols())
                    .unwrap_or_else(|_| vec![f32::NAN; n])
            }
            HostData::RandomMxfp4 { seed, std } => {
                let (packed, scales) = random_mxfp4_parts(*seed, *std, n);
                super::mxfp4::dequantize(&packed, &scales, self.cols())
                    .unwrap_or_else(|_| vec![f32::NAN; n])
            }
            HostData::RandomNvfp4 { seed, std } => {
                let (packed, scales) = random_nvfp4_parts(*seed, n);
                let globals = vec![random_nvfp4_global(*std); n / self.cols().max(1)];
                super::nvfp4::dequantize_rows(
                    &packed,
                    &scales,
                    &globals,
                    GlobalRule::Multiply,
                    self.cols(),
                )
            }
        }
    }

    /// Length of the last dimension (1 for a scalar).
    pub fn cols(&self) -> usize {
        self.shape.last().copied().unwrap_or(1)
    }

    /// Whether the data is FP8 (stored or dummy).
    pub fn is_fp8(&self) -> bool {
        matches!(self.data, HostData::Fp8 { .. } | HostData::RandomFp8 { .. })
    }

    /// Whether the data is NVFP4 (stored, re-quantized at load, or dummy).
    pub fn is_nvfp4(&self) -> bool {
        matches!(
            self.data,
            HostData::Nvfp4 { .. } | HostData::RandomNvfp4 { .. }
        )
    }

    /// Whether the data is MXFP4 (stored or dummy).
    pub fn is_mxfp4(&self) -> bool {
        matches!(
            self.data,
            HostData::Mxfp4 { .. } | HostData::RandomMxfp4 { .. }
        )
    }

    /// The same elements viewed as `shape` (row-major, so the data is untouched).
    pub fn reshaped(self, shape: Vec<usize>) -> Self {
        debug_assert_eq!(shape.iter().product::<usize>(), self.numel());
        Self { shape, ..self }
    }

    /// Stack 2-D tensors along rows (`[a, k] ++ [b, k] -> [a + b, k]`), as fused projections
    /// (q|k|v, gate|up) are stored. Raw data of one dtype stays raw, FP8 of one scale block
    /// stays FP8, NVFP4 of one global-scale rule stays NVFP4; random parts (plain, FP8 or
    /// NVFP4) of one std stay a recipe (a dummy 8B model must not turn into 18 GB of host floats); anything else
    /// becomes f32. Dummy FP8 or NVFP4 parts beside stored ones (Qwen3.5's drawn `q_proj` cut into
    /// query rows, then its dummy `k_proj` and `v_proj`) are [`Self::drawn`] first, so the whole
    /// stays in the stored format rather than becoming f32 (then bf16 on the device).
    pub fn concat_rows(parts: &[HostTensor<'_>]) -> HostTensor<'static> {
        let dummy = |p: &HostTensor<'_>| {
            matches!(
                p.data,
                HostData::RandomFp8 { .. } | HostData::RandomNvfp4 { .. }
            )
        };
        if parts.iter().any(dummy) && !parts.iter().all(dummy) {
            let drawn: Vec<HostTensor<'_>> = parts.iter().map(|p| p.clone().drawn()).collect();
            if !drawn.iter().any(dummy) {
                return Self::concat_rows(&drawn);
            }
        }
        let cols = parts
            .first()
            .map(|p| p.shape[1..].to_vec())
            .unwrap_or_default();
        let rows: usize = parts.iter().map(|p| p.shape[0]).sum();
        let mut shape = vec![rows];
        shape.extend(&cols);
        let same_raw = parts.iter().all(|p| matches!(&p.data, HostData::Raw { dtype, .. } if Some(*dtype) == first_dtype(parts)));
        let random_std = match parts.first().map(|p| &p.data) {
            Some(HostData::Random { std, .. }) => Some(*std),
            _ => None,
        };
        let same_random = random_std.is_some()
            && parts
                .iter()
                .all(|p| matches!(p.data, HostData::Random { std, .. } if Some(std) == random_std));
        let random_fp8_std = match parts.first().map(|p| &p.data) {
            Some(HostData::RandomFp8 { std, .. }) => Some(*std),
            _ => None,
        };
        let same_random_fp8 = random_fp8_std.is_some()
            && parts.iter().all(
                |p| matches!(p.data, HostData::RandomFp8 { std, .. } if Some(std) == random_fp8_std),
            );
        let random_nvfp4_std = match parts.first().map(|p| &p.data) {
            Some(HostData::RandomNvfp4 { std, .. }) => Some(*std),
            _ => None,
        };
        let same_random_nvfp4 = random_nvfp4_std.is_some()
            && parts.iter().all(
                |p| matches!(p.data, HostData::RandomNvfp4 { std, .. } if Some(std) == random_nvfp4_std),
            );
        let fp8_block = match parts.first().map(|p| &p.data) {
            Some(HostData::Fp8 { col_block, .. }) => Some(*col_block),
            _ => None,
        };
        let same_fp8 = fp8_block.is_some()
            && parts.iter().all(|p| {
                matches!(p.data, HostData::Fp8 { col_block, .. } if Some(col_block) == fp8_block)
            });
        let nvfp4_rule = match parts.first().map(|p| &p.data) {
            Some(HostData::Nvfp4 { rule, .. }) => Some(*rule),
            _ => None,
        };
        let same_nvfp4 = nvfp4_rule.is_some()
            && parts.iter().all(
                |p| matches!(p.data, HostData::Nvfp4 { rule, .. } if Some(rule) == nvfp4_rule),
            );
        let combined_seed = || {
            parts.iter().fold(0x5eed_u64, |h, p| match p.data {
                HostData::Random { seed, .. }
                | HostData::RandomFp8 { seed, .. }
                | HostData::RandomNvfp4 { seed, .. } => {
                    (h ^ seed).wrapping_mul(0x0000_0100_0000_01b3)
                }
                _ => h,
            })
        };
        let data = if same_random {
            HostData::Random {
                seed: combined_seed(),
                std: random_std.unwrap_or(0.0),
            }
        } else if same_random_fp8 {
            HostData::RandomFp8 {
                seed: combined_seed(),
                std: random_fp8_std.unwrap_or(0.0),
            }
        } else if same_random_nvfp4 {
            HostData::RandomNvfp4 {
                seed: combined_seed(),
                std: random_nvfp4_std.unwrap_or(0.0),
            }
        } else if same_fp8 {
            let (mut bytes, mut scales) = (Vec::new(), Vec::new());
            for p in parts {
                if let HostData::Fp8 {
                    bytes: b,
                    scales: s,
                    ..
                } = &p.data
                {
                    bytes.extend_from_slice(b);
                    scales.extend_from_slice(s);
                }
            }
            HostData::Fp8 {
                bytes: Cow::Owned(bytes),
                scales,
                col_block: fp8_block.unwrap_or(FP8_COL_BLOCK),
            }
        } else if let (true, Some(rule)) = (same_nvfp4, nvfp4_rule) {
            let (mut packed, mut scales, mut globals) = (Vec::new(), Vec::new(), Vec::new());
            for p in parts {
                if let HostData::Nvfp4 {
                    packed: b,
                    scales: s,
                    globals: g,
                    ..
                } = &p.data
                {
                    packed.extend_from_slice(b);
                    scales.extend_from_slice(s);
                    globals.extend_from_slice(g);
                }
            }
            HostData::Nvfp4 {
                packed: Cow::Owned(packed),
                scales: Cow::Owned(scales),
                globals,
                rule,
            }
        } else if same_raw {
            let dtype = first_dtype(parts).unwrap_or(DType::F32);
            let mut bytes = Vec::new();
            for p in parts {
                if let HostData::Raw { bytes: b, .. } = &p.data {
                    bytes.extend_from_slice(b);
                }
            }
            HostData::Raw {
                dtype,
                bytes: Cow::Owned(bytes),
            }
        } else {
            let mut bytes = Vec::new();
            for p in parts {
                for v in p.to_f32() {
                    bytes.extend_from_slice(&v.to_le_bytes());
                }
            }
            HostData::Raw {
                dtype: DType::F32,
                bytes: Cow::Owned(bytes),
            }
        };
        HostTensor { shape, data }
    }
}

fn first_dtype(parts: &[HostTensor<'_>]) -> Option<DType> {
    match parts.first().map(|p| &p.data) {
        Some(HostData::Raw { dtype, .. }) => Some(*dtype),
        _ => None,
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw_bf16(shape: &[usize], vals: &[f32]) -> HostTensor<'static> {
        let bytes = vals
            .iter()
            .flat_map(|v| bf16::from_f32(*v).to_le_bytes())
            .collect();
        HostTensor {
            shape: shape.to_vec(),
            data: HostData::Raw {
                dtype: DType::BF16,
                bytes: Cow::Owned(bytes),
            },
        }
    }

    #[test]
    fn converts_and_concatenates_rows() {
        let a = raw_bf16(&[1, 2], &[1.0, -2.5]);
        let b = raw_bf16(&[2, 2], &[0.5, 3.0, 4.0, -0.125]);
        let c = HostTensor::concat_rows(&[a, b]);
        assert_eq!(c.shape, vec![3, 2]);
        assert_eq!(c.to_f32(), vec![1.0, -2.5, 0.5, 3.0, 4.0, -0.125]);
        assert!(matches!(
            c.data,
            HostData::Raw {
                dtype: DType::BF16,
                ..
            }
        ));
    }

    #[test]
    fn random_parts_concatenate_without_materialising() {
        let part = |seed| HostTensor {
            shape: vec![2, 3],
            data: HostData::Random { seed, std: 0.02 },
        };
        let c = HostTensor::concat_rows(&[part(1), part(2)]);
        assert_eq!(c.shape, vec![4, 3]);
        assert!(matches!(c.data, HostData::Random { std, .. } if std == 0.02));
        let d = HostTensor::concat_rows(&[part(2), part(1)]);
        assert_ne!(
            c.to_f32(),
            d.to_f32(),
            "the parts' seeds and order make the seed"
        );
    }

    #[test]
    fn fp8_parts_concatenate_as_fp8_with_their_values() {
        let part = |bytes: Vec<u8>, scales: Vec<f32>| HostTensor {
            shape: vec![bytes.len() / 3, 3],
            data: HostData::Fp8 {
                bytes: Cow::Owned(bytes),
                scales,
                col_block: 2,
            },
        };
        // 0x38 = 1.0, 0x40 = 2.0, 0xb8 = -1.0; two scales a row (columns 0-1, 2).
        let a = part(vec![0x38, 0x40, 0x38], vec![1.0, 0.5]);
        let b = part(
            vec![0xb8, 0x38, 0x40, 0x38, 0x38, 0x38],
            vec![2.0, 3.0, 0.25, 4.0],
        );
        let want: Vec<f32> = [a.to_f32(), b.to_f32()].concat();
        assert_eq!(want, vec![1.0, 2.0, 0.5, -2.0, 2.0, 6.0, 0.25, 0.25, 4.0]);
        let c = HostTensor::concat_rows(&[a, b]);
        assert!(c.is_fp8() && c.shape == vec![3, 3]);
        assert_eq!(c.to_f32(), want);
    }

    #[test]
    fn random_fp8_is_seeded_scaled_and_stays_a_recipe() {
        let t = |seed| HostTensor {
            shape: vec![300, 1000],
            data: HostData::RandomFp8 { seed, std: 0.02 },
        };
        let x = t(7).to_f32();
        assert_eq!(x, t(7).to_f32());
        assert_ne!(x[..16], t(8).to_f32()[..16]);
        let var = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
        assert!((var.sqrt() - 0.02).abs() < 1e-3, "{}", var.sqrt());
        assert!(x.iter().all(|v| v.is_finite()));
        let c = HostTensor::concat_rows(&[t(1), t(2)]);
        assert!(matches!(c.data, HostData::RandomFp8 { std, .. } if std == 0.02));
    }

    #[test]
    fn random_nvfp4_is_seeded_scaled_exact_and_stays_a_recipe() {
        // 300 rows of 1024: the packed bytes span three 65536-byte chunks.
        let t = |seed| HostTensor {
            shape: vec![300, 1024],
            data: HostData::RandomNvfp4 { seed, std: 0.02 },
        };
        let x = t(7).to_f32();
        assert_eq!(x, t(7).to_f32(), "a pure function of the seed");
        assert_ne!(x[..16], t(8).to_f32()[..16]);
        let mean = x.iter().map(|v| f64::from(*v)).sum::<f64>() / x.len() as f64;
        let var = x.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>() / x.len() as f64;
        assert!(mean.abs() < 2e-4, "{mean}");
        assert!((var.sqrt() - 0.02).abs() < 5e-4, "{}", var.sqrt());
        // Every value is e2m1 · (e4m3 · global) of the drawn parts, the scales all [1, 2).
        let (packed, scales) = random_nvfp4_parts(7, 300 * 1024);
        assert_eq!((packed.len(), scales.len()), (300 * 512, 300 * 64));
        assert!(scales.iter().all(|s| s & !7 == NVFP4_SCALE_BITS));
        assert_eq!(
            (0..8)
                .filter(|m| scales.contains(&(NVFP4_SCALE_BITS | m)))
                .count(),
            8
        );
        let nibbles: std::collections::HashSet<u8> =
            packed.iter().flat_map(|b| [b & 15, b >> 4]).collect();
        assert_eq!(nibbles.len(), 16, "every E2M1 code and sign");
        let g = random_nvfp4_global(0.02);
        let e4m3 = super::super::fp8::e4m3_table();
        for i in [0usize, 1, 17, 300 * 1024 - 1] {
            let nibble = (packed[i / 2] >> (4 * (i % 2))) & 15;
            let scale = e4m3[usize::from(scales[i / 16])] * g;
            assert_eq!(
                x[i],
                super::super::nvfp4::e2m1_to_f32(nibble) * scale,
                "element {i}"
            );
        }
        let c = HostTensor::concat_rows(&[t(1), t(2)]);
        assert!(c.is_nvfp4() && c.shape == vec![600, 1024]);
        assert!(matches!(c.data, HostData::RandomNvfp4 { std, .. } if std == 0.02));
    }

    #[test]
    fn dummy_parts_beside_stored_ones_are_drawn_not_widened() {
        // Qwen3.5's attention: query rows cut from a drawn q_proj, then dummy k and v.
        for dummy in [
            HostData::RandomNvfp4 { seed: 3, std: 0.02 },
            HostData::RandomFp8 { seed: 3, std: 0.02 },
        ] {
            let t = |rows: usize| HostTensor {
                shape: vec![rows, 256],
                data: dummy.clone(),
            };
            let q = t(32).drawn();
            assert!(!matches!(
                q.data,
                HostData::RandomNvfp4 { .. } | HostData::RandomFp8 { .. }
            ));
            let want: Vec<f32> = [q.to_f32(), t(16).to_f32(), t(8).to_f32()].concat();
            let c = HostTensor::concat_rows(&[q.clone(), t(16), t(8)]);
            assert_eq!(c.shape, vec![56, 256]);
            assert!(
                matches!(c.data, HostData::Nvfp4 { .. } | HostData::Fp8 { .. }),
                "stored format kept"
            );
            assert_eq!(c.to_f32(), want, "the same values");
        }
    }

    #[test]
    fn random_data_is_seeded_and_scaled() {
        let t = HostTensor {
            shape: vec![300, 1000],
            data: HostData::Random { seed: 7, std: 0.02 },
        };
        let x = t.to_f32();
        assert_eq!(x, t.to_f32(), "same seed, same values");
        let mean = x.iter().sum::<f32>() / x.len() as f32;
        let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / x.len() as f32;
        assert!(mean.abs() < 1e-3, "{mean}");
        assert!((var.sqrt() - 0.02).abs() < 1e-3, "{}", var.sqrt());
        let other = HostTensor {
            shape: vec![300, 1000],
            data: HostData::Random { seed: 8, std: 0.02 },
        };
        assert_ne!(x[..16], other.to_f32()[..16]);
    }
    /// Dummy MXFP4: the host's values are its parts' exact dequantization, a pure function of
    /// the seed; the scales two neighbouring powers of two, the spread within 2x of `std`;
    /// and a checkpoint's packed parts read back as `mxfp4::dequantize` gives them.
    #[test]
    fn random_mxfp4_is_seeded_exact_and_near_its_std() {
        let (rows, cols) = (300usize, 1024usize);
        let t = |seed| HostTensor {
            shape: vec![rows, cols],
            data: HostData::RandomMxfp4 { seed, std: 0.02 },
        };
        let x = t(7).to_f32();
        assert_eq!(x, t(7).to_f32(), "a pure function of the seed");
        assert_ne!(x[..32], t(8).to_f32()[..32]);
        assert!(t(7).is_mxfp4());
        let (packed, scales) = random_mxfp4_parts(7, 0.02, rows * cols);
        assert_eq!(
            (packed.len(), scales.len()),
            (rows * cols / 2, rows * cols / 32)
        );
        let base = random_mxfp4_scale_base(0.02);
        assert!(base.is_multiple_of(2) && scales.iter().all(|&b| b == base || b == base + 1));
        assert!(scales.contains(&base) && scales.contains(&(base + 1)));
        let want = super::super::mxfp4::dequantize(&packed, &scales, cols).expect("no NaN");
        assert_eq!(x, want);
        let var = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
        let ratio = var.sqrt() / 0.02;
        assert!((0.5..2.0).contains(&ratio), "{ratio}");
        let stored = HostTensor {
            shape: vec![rows, cols],
            data: HostData::Mxfp4 {
                packed: Cow::Owned(packed),
                scales: Cow::Owned(scales),
            },
        };
        assert!(stored.is_mxfp4());
        assert_eq!(stored.to_f32(), want);
    }
}
