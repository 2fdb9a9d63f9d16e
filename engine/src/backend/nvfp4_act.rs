//! NVFP4 activations, the host's copy of `quant_nvfp4_rows` (kernels/src/nvfp4_w4a4.cu; issue
//! 35, docs/nvfp4.md "Blackwell"): what Blackwell's W4A4 route turns each row of x into before
//! the block-scaled FP4 tensor cores, so that `cuda_check` can compare that route with the CPU
//! on the same quantized values. Per row, in f32 as the kernel computes it:
//!
//! 1. `g = amax(|row|) / (6 · 448)` (dynamic, per token);
//! 2. each 16 values a scale byte `e4m3(amax(|block|) / (6 · g))`, nearest-even, saturating at
//!    448 (a block far below its row's maximum may round to 0: its values are then 0);
//! 3. each value's code `e2m1(|x| / (e4m3 · g))` (nearest, ties to the even code, saturating at
//!    6) with x's sign bit.
//!
//! A value reads back as `e2m1 · e4m3 · g`.

use crate::loader::fp8::e4m3_table;
use crate::loader::nvfp4::quantize::e2m1_code;
use crate::loader::nvfp4::{GROUP, e2m1_to_f32};

use super::kv_fp8::f32_to_e4m3;

/// 6 (E2M1's largest value) times 448 (E4M3's).
const RANGE: f32 = 6.0 * 448.0;

/// Rows of x in NVFP4: `packed` `[rows, k / 2]` (element 2i the low nibble of byte i),
/// `scales` `[rows, k / 16]` E4M3, `globals` `[rows]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Nvfp4Rows {
    pub packed: Vec<u8>,
    pub scales: Vec<u8>,
    pub globals: Vec<f32>,
}

/// The rows of `x` (row-major, `k` columns, k % 16 == 0) as the kernel quantizes them.
pub fn quantize_rows(x: &[f32], k: usize) -> Nvfp4Rows {
    assert!(k > 0 && k.is_multiple_of(GROUP) && x.len().is_multiple_of(k));
    let mut q = Nvfp4Rows {
        packed: vec![0; x.len() / 2],
        scales: vec![0; x.len() / GROUP],
        globals: Vec::with_capacity(x.len() / k),
    };
    for (r, row) in x.chunks(k).enumerate() {
        let amax = row.iter().fold(0f32, |m, v| m.max(v.abs()));
        let g = amax / RANGE;
        q.globals.push(g);
        for (b, block) in row.chunks(GROUP).enumerate() {
            let bmax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
            let (byte, d) = if g > 0.0 {
                let byte = f32_to_e4m3(bmax / (6.0 * g));
                (byte, e4m3_table()[byte as usize] * g)
            } else {
                (0, 0.0)
            };
            let at = r * (k / GROUP) + b;
            q.scales[at] = byte;
            for (i, &v) in block.iter().enumerate() {
                let code = if d > 0.0 { e2m1_code(v.abs() / d) } else { 0 };
                let nibble = code | (u8::from(v.is_sign_negative()) << 3);
                q.packed[(at * GROUP + i) / 2] |= nibble << (4 * (i % 2));
            }
        }
    }
    q
}

/// The values `quantize_rows` stands for: `e2m1 · e4m3 · g`, row-major.
pub fn dequantize_rows(q: &Nvfp4Rows, k: usize) -> Vec<f32> {
    (0..q.packed.len() * 2)
        .map(|i| {
            let nibble = (q.packed[i / 2] >> (4 * (i % 2))) & 15;
            let scale = e4m3_table()[q.scales[i / GROUP] as usize] * q.globals[i / k];
            e2m1_to_f32(nibble) * scale
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row whose maximum is 2688 has g = 1; a block whose maximum is 6 has scale 1, so its
    /// values are coded as they are: every E2M1 midpoint goes to the even code.
    #[test]
    fn ties_and_the_global() {
        let mut row = vec![0f32; 32];
        row[..16].copy_from_slice(&[
            6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -0.75, -1.25, -1.75, -2.5, -3.5,
            -5.0, -0.0,
        ]);
        row[31] = 2688.0;
        let q = quantize_rows(&row, 32);
        assert_eq!(q.globals, vec![1.0]);
        assert_eq!(q.scales[0], 0x38); // 1.0
        let values = dequantize_rows(&q, 32);
        assert_eq!(
            &values[..16],
            &[
                6.0, 0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, -0.0, -1.0, -1.0, -2.0, -2.0, -4.0, -4.0,
                -0.0
            ]
        );
        // Block 1: its maximum 2688 is 448 · 6 · g: scale 448, the value 6 · 448.
        assert_eq!(q.scales[1], 0x7e);
        assert_eq!(values[31], 2688.0);
    }

    /// A zero row (g = 0) and a block far below its row's maximum (scale rounds to 0) read back
    /// as zeros, never NaN.
    #[test]
    fn zeros_and_vanishing_blocks() {
        let mut x = vec![0f32; 64];
        x[32] = 1e4;
        x[48] = 1e-6;
        let q = quantize_rows(&x, 32);
        assert_eq!(q.globals[0], 0.0);
        assert_eq!(q.scales[3], 0);
        let v = dequantize_rows(&q, 32);
        assert!(v.iter().all(|v| v.is_finite()));
        assert!(v[..32].iter().all(|&v| v == 0.0) && v[48] == 0.0);
        assert_eq!(v[32], 1e4);
    }

    /// Random rows come back within E2M1's half-step of each value's block scale.
    #[test]
    fn error_is_bounded_by_the_block_scale() {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let x: Vec<f32> = (0..4 * 256)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
            })
            .collect();
        let q = quantize_rows(&x, 256);
        let v = dequantize_rows(&q, 256);
        for (i, (a, b)) in x.iter().zip(&v).enumerate() {
            let scale = e4m3_table()[q.scales[i / GROUP] as usize] * q.globals[i / 256];
            // Half of E2M1's widest step (2, between 4 and 6) times the scale, and the
            // scale's own rounding (at most 1/16 of the block maximum).
            assert!((a - b).abs() <= scale * 1.0 + 1e-6, "{i}: {a} vs {b}");
        }
    }
}
