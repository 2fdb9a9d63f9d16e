//! The FP8 KV cache's number format (`--kv-cache-dtype fp8`), shared by every backend so they
//! store the same values.
//!
//! Each cached head vector (one token's k or v for one kv head) is cut into groups of
//! [`KV_FP8_GROUP`] dims (one group for head_dim ≤ 128, two for 256). A group keeps one f32
//! scale `s = amax / 448` (amax: the group's largest magnitude; 448 is e4m3's largest finite
//! value; `s = 1` for an all-zero group) and its values as e4m3 bytes `q = e4m3(x / s)`, rounded
//! to nearest even and saturated at ±448. The value read back is `e4m3(q) · s` (one rounding).
//! The scales are dynamic, per token and head: no calibration, and a group's largest value is
//! always represented to e4m3's 4 significant bits, whatever the layer's range.
//!
//! Memory: `head_dim` bytes plus 4 a group, 132 bytes for a head of 128 dims against bf16's
//! 256 (0.52×).

/// Dims of a head vector sharing one scale.
pub const KV_FP8_GROUP: usize = 128;

/// e4m3's largest finite magnitude.
const E4M3_MAX: f32 = 448.0;

/// Bytes one cached head vector of `head_dim` takes in the FP8 cache (values and scales).
pub fn fp8_head_bytes(head_dim: usize) -> usize {
    head_dim + 4 * head_dim.div_ceil(KV_FP8_GROUP)
}

/// `x` as an e4m3 (`float8_e4m3fn`) byte: rounded to nearest, ties to even, finite values
/// beyond ±448 saturated to ±448; NaN gives 0x7f.
pub fn f32_to_e4m3(x: f32) -> u8 {
    let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
    if x.is_nan() {
        return 0x7f;
    }
    let a = x.abs();
    if a >= E4M3_MAX {
        return sign | 0x7e;
    }
    if a < 2f32.powi(-6) {
        // Subnormal range: multiples of 2^-9 (the product is exact; rounding to even integers).
        // 8 · 2^-9 = 2^-6 encodes as 0x08, the smallest normal, so no special case.
        return sign | (a * 512.0).round_ties_even() as u8;
    }
    let bits = a.to_bits();
    let mut exp = ((bits >> 23) as i32) - 127; // -6 ..= 8
    let mant = bits & 0x7f_ffff;
    let (mut m, rest) = (mant >> 20, mant & 0xf_ffff);
    const HALF: u32 = 0x8_0000;
    if rest > HALF || (rest == HALF && m & 1 == 1) {
        m += 1;
        if m == 8 {
            m = 0;
            exp += 1;
        }
    }
    // a < 448 rounds to at most 448 (exponent 8, mantissa 6): never the NaN pattern.
    sign | (((exp + 7) as u8) << 3) | m as u8
}

/// The scale of a group whose largest magnitude is `amax`.
fn group_scale(amax: f32) -> f32 {
    let s = amax / E4M3_MAX;
    if s > 0.0 { s } else { 1.0 }
}

/// What the FP8 cache gives back for the head vector `x`, in place: every value replaced by
/// `e4m3(x / s) · s` (the CPU backend's FP8 cache, which keeps f32 storage).
pub fn round_trip_head(x: &mut [f32]) {
    let table = crate::loader::fp8::e4m3_table();
    for g in x.chunks_mut(KV_FP8_GROUP) {
        let amax = g.iter().fold(0f32, |m, v| m.max(v.abs()));
        let s = group_scale(amax);
        for v in g.iter_mut() {
            *v = table[f32_to_e4m3(*v / s) as usize] * s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(b: u8) -> f32 {
        crate::loader::fp8::e4m3_table()[b as usize]
    }

    #[test]
    fn every_finite_byte_encodes_back_to_itself() {
        for b in 0..=255u8 {
            if b & 0x7f == 0x7f {
                continue; // NaN
            }
            let v = decode(b);
            assert_eq!(f32_to_e4m3(v), b, "byte {b:#04x} ({v})");
        }
    }

    #[test]
    fn values_round_to_the_nearest_byte_ties_to_even() {
        // Between every pair of neighbouring positive values: just below the midpoint goes
        // down, just above goes up, the midpoint to the even mantissa.
        for b in 0..0x7eu8 {
            let (lo, hi) = (decode(b), decode(b + 1));
            let mid = (lo + hi) / 2.0; // exact: both have at most 4 significant bits
            assert_eq!(
                f32_to_e4m3(f32::from_bits(mid.to_bits() - 1)),
                b,
                "below {mid}"
            );
            assert_eq!(
                f32_to_e4m3(f32::from_bits(mid.to_bits() + 1)),
                b + 1,
                "above {mid}"
            );
            let even = if b & 1 == 0 { b } else { b + 1 };
            assert_eq!(f32_to_e4m3(mid), even, "at {mid}");
            assert_eq!(f32_to_e4m3(-mid), even | 0x80, "at -{mid}");
        }
    }

    #[test]
    fn out_of_range_saturates_and_nan_stays_nan() {
        assert_eq!(f32_to_e4m3(448.0), 0x7e);
        assert_eq!(f32_to_e4m3(470.0), 0x7e);
        assert_eq!(f32_to_e4m3(1e30), 0x7e);
        assert_eq!(f32_to_e4m3(f32::INFINITY), 0x7e);
        assert_eq!(f32_to_e4m3(-1e30), 0xfe);
        assert!(decode(f32_to_e4m3(f32::NAN)).is_nan());
        assert_eq!(f32_to_e4m3(1e-30), 0x00);
    }

    #[test]
    fn a_group_keeps_its_largest_value_exactly_and_the_rest_to_four_bits() {
        let mut x: Vec<f32> = (0..200).map(|i| ((i as f32) * 0.37).sin() * 3.0).collect();
        x[5] = -7.25;
        x[150] = 0.5;
        let orig = x.clone();
        round_trip_head(&mut x);
        // Group 0 (dims 0..128): amax 7.25 maps to ±448 exactly.
        assert_eq!(x[5], -7.25);
        for (i, (&got, &want)) in x.iter().zip(&orig).enumerate() {
            let amax = if i < 128 {
                7.25f32
            } else {
                orig[128..].iter().fold(0f32, |m, v| m.max(v.abs()))
            };
            // e4m3 keeps 3 mantissa bits: half an ulp is 2^-4 relative, or the subnormal step.
            let tol = (want.abs() / 16.0).max(amax / 448.0 * 2f32.powi(-10));
            assert!((got - want).abs() <= tol, "dim {i}: {got} vs {want}");
        }
        assert_ne!(x, orig, "rounding changed nothing");
        let mut zeros = vec![0f32; 64];
        round_trip_head(&mut zeros);
        assert!(zeros.iter().all(|&v| v == 0.0));
    }

    #[test]
    fn every_value_read_back_is_an_e4m3_value_times_its_group_scale() {
        let x: Vec<f32> = (0..256)
            .map(|i| ((i * 7919) % 113) as f32 * 0.013 - 0.7)
            .collect();
        let mut r = x.clone();
        round_trip_head(&mut r);
        for (g, (xg, rg)) in x
            .chunks(KV_FP8_GROUP)
            .zip(r.chunks(KV_FP8_GROUP))
            .enumerate()
        {
            let s = xg.iter().fold(0f32, |m, v| m.max(v.abs())) / 448.0;
            for (&want, &got) in xg.iter().zip(rg) {
                let byte = f32_to_e4m3(want / s);
                assert_eq!(got, decode(byte) * s, "group {g}: {want}");
            }
        }
        assert_eq!(fp8_head_bytes(128), 132);
        assert_eq!(fp8_head_bytes(256), 264);
    }
}
