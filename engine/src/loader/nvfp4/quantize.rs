//! Quantizing f32 weights to NVFP4 at load (`met serve --requantize`), with the arithmetic of
//! ModelOpt's quantizer (`modelopt/torch/quantization/qtensor/nvfp4_tensor.py`,
//! `NVFP4QTensor.quantize`, the dynamic path), step for step in f32:
//!
//! 1. `scale_2 = amax(|w|) / (6 · 448)` over the whole matrix (`get_weights_scaling_factor_2`);
//! 2. a block's scale `amax(|block|) / (6 · scale_2)`, 1 where that is 0, clamped to
//!    `[2^-9, 448]` and rounded to E4M3, nearest-even (`_cast_per_block_scale_to_fp8`);
//! 3. each value divided by `e4m3(scale) · scale_2` and rounded to the nearest E2M1 value,
//!    ties to the even code (`_cast_fp4`: `searchsorted` on the midpoints, plus one at 0.75,
//!    1.75 and 3.5);
//! 4. packed two a byte, the even element in the low nibble.
//!
//! A 3-D tensor (stacked experts) is quantized one matrix at a time, each with its own
//! `scale_2`, as ModelOpt quantizes each expert's projection. The result is ModelOpt's
//! checkpoint layout, so it loads and computes exactly as a ModelOpt checkpoint would.

use rayon::prelude::*;

use super::GROUP;

/// Midpoints between consecutive E2M1 magnitudes (`e2m1_bounds`).
const BOUNDS: [f32; 7] = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0];
/// 6 (E2M1's largest value) and 448 (E4M3's).
const E2M1_MAX: f32 = 6.0;
const E4M3_MAX: f32 = 448.0;

/// One matrix quantized: `packed` `[rows, cols / 2]`, `scales` (E4M3) `[rows, cols / 16]`,
/// and its `scale_2` (ModelOpt's global scale, multiplied in).
#[derive(Debug, Clone, PartialEq)]
pub struct Quantized {
    pub packed: Vec<u8>,
    pub scales: Vec<u8>,
    pub scale_2: f32,
}

/// Quantize the row-major matrix `w` whose rows are a positive multiple of 16 long (so blocks
/// of 16 consecutive values never straddle rows; the caller checks). Returns `None` for
/// non-finite input, which no scale represents.
pub fn quantize_matrix(w: &[f32]) -> Option<Quantized> {
    if w.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let amax = w.iter().fold(0f32, |m, v| m.max(v.abs()));
    if amax == 0.0 {
        // ModelOpt divides 0 by 0 here and stores NaN scales (and 6.0 codes): the one input
        // where we differ, writing the zeros the matrix holds (unit scales, `scale_2` 0).
        return Some(Quantized {
            packed: vec![0; w.len() / 2],
            scales: vec![0x38; w.len() / GROUP],
            scale_2: 0.0,
        });
    }
    let scale_2 = amax / (E2M1_MAX * E4M3_MAX);
    let denominator = E2M1_MAX * scale_2;
    let blocks = w.len() / GROUP;
    let mut scales = vec![0u8; blocks];
    let mut packed = vec![0u8; w.len() / 2];
    scales
        .par_iter_mut()
        .zip(packed.par_chunks_mut(GROUP / 2))
        .zip(w.par_chunks(GROUP))
        .for_each(|((s, p), block)| {
            let block_amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
            let mut scale = block_amax / denominator;
            if scale == 0.0 {
                scale = 1.0;
            }
            *s = f32_to_e4m3(scale.clamp(2f32.powi(-9), E4M3_MAX));
            let divisor = super::super::fp8::e4m3_table()[*s as usize] * scale_2;
            for (byte, pair) in p.iter_mut().zip(block.chunks(2)) {
                *byte = e2m1_code(pair[0] / divisor) | (e2m1_code(pair[1] / divisor) << 4);
            }
        });
    Some(Quantized {
        packed,
        scales,
        scale_2,
    })
}

/// `_cast_fp4` of one value: the sign bit, then the code of the nearest magnitude (ties to
/// the even code).
pub fn e2m1_code(x: f32) -> u8 {
    let sign = u8::from(x < 0.0) << 3;
    let a = x.abs();
    let ord = BOUNDS.iter().filter(|&&b| b < a).count() as u8;
    let tie = u8::from(a == 0.75 || a == 1.75 || a == 3.5);
    sign + ord + tie
}

/// A positive finite f32 within E4M3's range as the nearest E4M3 byte, ties to even (what
/// `tensor.to(torch.float8_e4m3fn)` does).
pub fn f32_to_e4m3(v: f32) -> u8 {
    let table = super::super::fp8::e4m3_table();
    // Codes 0..=0x7e are the finite non-negative values, increasing.
    let hi = (0u8..=0x7e)
        .find(|&c| table[c as usize] >= v)
        .unwrap_or(0x7e);
    if hi == 0 || table[hi as usize] == v {
        return hi;
    }
    let lo = hi - 1;
    let (dl, dh) = (v - table[lo as usize], table[hi as usize] - v);
    if dl < dh || (dl == dh && lo & 1 == 0) {
        lo
    } else {
        hi
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e2m1_rounding_ties_go_to_the_even_code() {
        for (x, code) in [
            (0.0f32, 0u8),
            (0.25, 0),
            (0.26, 1),
            (0.75, 2),
            (1.25, 2),
            (1.75, 4),
            (2.5, 4),
            (3.5, 6),
            (5.0, 6),
            (5.01, 7),
            (9.0, 7),
            (-0.5, 9),
            (-6.0, 15),
        ] {
            assert_eq!(e2m1_code(x), code, "{x}");
        }
    }

    #[test]
    fn e4m3_rounding_is_nearest_even() {
        let t = super::super::super::fp8::e4m3_table();
        for c in 1u8..0x7e {
            let (a, b) = (t[c as usize], t[c as usize + 1]);
            assert_eq!(f32_to_e4m3(a), c);
            let mid = (a + b) / 2.0;
            assert_eq!(
                f32_to_e4m3(mid),
                if c & 1 == 0 { c } else { c + 1 },
                "{mid}"
            );
        }
        assert_eq!(f32_to_e4m3(448.0), 0x7e);
        assert_eq!(f32_to_e4m3(2f32.powi(-9)), 1);
    }

    #[test]
    fn a_zero_matrix_gets_unit_block_scales_and_nan_is_refused() {
        let q = quantize_matrix(&[0.0; 32]).expect("finite");
        assert_eq!(
            (q.scales, q.packed, q.scale_2),
            (vec![0x38, 0x38], vec![0; 16], 0.0)
        );
        assert!(quantize_matrix(&[f32::NAN; 16]).is_none());
    }
}
