//! `ln` and `exp` in f64 from IEEE additions, multiplications and divisions only, so the host
//! sampler and the CUDA sampler (`kernels/src/sample.cu`, `det_ln`/`det_exp`, the same
//! operations in the same order with round-to-nearest intrinsics that forbid fused
//! multiply-adds) get the same bits. The platform's `ln`/`exp` (glibc's here, CUDA's libdevice
//! there) differ in the last ulp now and then, which could flip a draw whose two best noisy
//! scores are that close. Accuracy: within 2 ulp of the true value (tests below compare with
//! std); the sampler needs determinism, not the last bit.

/// ln 2 split so that `k · LN2_HI` is exact for |k| < 2^20 (fdlibm's constants), as bits: the
/// device writes the same ones.
const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);
const SQRT2: f64 = std::f64::consts::SQRT_2;

/// `ln(x)`: NaN for x < 0 or NaN, -inf for 0, +inf for +inf.
pub fn det_ln(x: f64) -> f64 {
    if x.is_nan() || x < 0.0 {
        return f64::NAN;
    }
    if x == 0.0 {
        return f64::NEG_INFINITY;
    }
    if x.is_infinite() {
        return x;
    }
    // x = m · 2^e, m in [sqrt(1/2), sqrt(2)).
    let (mut bits, mut e) = (x.to_bits(), 0i64);
    if bits >> 52 == 0 {
        // Subnormal: scale into the normal range first (exact).
        bits = (x * 18_014_398_509_481_984.0).to_bits(); // 2^54
        e = -54;
    }
    e += ((bits >> 52) & 0x7ff) as i64 - 1023;
    let mut m = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | 0x3ff0_0000_0000_0000);
    if m > SQRT2 {
        m *= 0.5;
        e += 1;
    }
    // ln m = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...), s = (m - 1) / (m + 1), |s| < 0.172.
    let f = m - 1.0; // exact
    let s = f / (m + 1.0);
    let z = s * s;
    let mut p = 1.0 / 23.0;
    for k in (1..=10).rev() {
        p = p * z + 1.0 / f64::from(2 * k + 1);
    }
    // 2s = f - s·f, so ln m = 2s + 2s·z·p = f - s·f + 2s·z·p, the exact f added last.
    let r = s * (z * p) * 2.0 - s * f + f;
    let e = e as f64;
    e * LN2_HI + (r + e * LN2_LO)
}

/// `exp(x)`: 0 below -745.2, +inf above 709.8, NaN for NaN.
pub fn det_exp(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x < -745.2 {
        return 0.0;
    }
    if x > 709.8 {
        return f64::INFINITY;
    }
    // x = k ln 2 + r, |r| <= ln 2 / 2 (plus rounding).
    let k = (x * std::f64::consts::LOG2_E + 0.5).floor();
    let r = (x - k * LN2_HI) - k * LN2_LO;
    // Taylor to r^14 (0.35^15 / 15! < 1e-19), Horner: 1 + r (1 + r/2 (1 + r/3 (...))).
    let mut p = 1.0;
    for n in (1..=14).rev() {
        p = p * r * (1.0 / f64::from(n)) + 1.0;
    }
    // 2^k in two steps, so a subnormal result is rounded once per step the same way on both.
    let k = k as i64;
    let half = k / 2;
    p * pow2(half) * pow2(k - half)
}

/// 2^k for -1022 <= k <= 1023.
fn pow2(k: i64) -> f64 {
    f64::from_bits(((k + 1023) as u64) << 52)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ulps(a: f64, b: f64) -> u64 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs()
    }

    #[test]
    fn ln_is_within_two_ulps_of_std() {
        let mut worst = 0;
        let mut z = 1u64;
        for i in 0..200_000u64 {
            z = z
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            // Uniforms in (0, 1) as the sampler draws them, and values across the range.
            let x = if i % 2 == 0 {
                ((z >> 11) as f64 / (1u64 << 53) as f64).max(f64::MIN_POSITIVE)
            } else {
                f64::from_bits((z >> 2) | 1)
                    .abs()
                    .max(f64::MIN_POSITIVE * 1e-10)
            };
            if !x.is_finite() {
                continue;
            }
            worst = worst.max(ulps(det_ln(x), x.ln()));
        }
        assert!(worst <= 2, "worst {worst} ulps");
        for x in [
            1.0,
            0.5,
            2.0,
            1.0 - f64::EPSILON / 2.0,
            f64::MIN_POSITIVE,
            1.1e-16,
            708.4,
            5e-324,
        ] {
            assert!(ulps(det_ln(x), x.ln()) <= 2, "{x}");
        }
        assert_eq!(det_ln(1.0), 0.0);
        assert!(det_ln(-1.0).is_nan() && det_ln(f64::NAN).is_nan());
        assert_eq!(det_ln(0.0), f64::NEG_INFINITY);
    }

    #[test]
    fn exp_is_within_two_ulps_of_std() {
        let mut worst = 0;
        let mut z = 7u64;
        for _ in 0..200_000 {
            z = z
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let x = -((z >> 11) as f64 / (1u64 << 53) as f64) * 700.0;
            worst = worst.max(ulps(det_exp(x), x.exp()));
        }
        assert!(worst <= 2, "worst {worst} ulps");
        assert_eq!(
            det_exp(0.0),
            1.0,
            "the top candidate's probability is exactly 1"
        );
        assert_eq!(det_exp(f64::NEG_INFINITY), 0.0);
        assert!(det_exp(f64::NAN).is_nan());
        for x in [-1e-300, -0.3465, 0.3466, -708.0, -740.0, -745.0, 1.0, 700.0] {
            let (a, b) = (det_exp(x), x.exp());
            assert!(
                ulps(a, b) <= 2 || (a - b).abs() <= 5e-324 * 2.0,
                "{x}: {a} vs {b}"
            );
        }
    }
}
