//! The figures of a rung from its reps' raw numbers.

use metrale_protocol::bench::{Percentiles, Rep, Summary};

/// Mean, median, min, max and sample standard deviation. `None` for no values.
pub fn summary(values: &[f64]) -> Option<Summary> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let mean = sorted.iter().sum::<f64>() / n as f64;
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    let stddev = if n > 1 {
        (sorted.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
    } else {
        0.0
    };
    Some(Summary {
        mean,
        median,
        min: sorted[0],
        max: sorted[n - 1],
        stddev,
    })
}

/// Percentile by linear interpolation between closest ranks (numpy's default).
fn percentile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// p50, p90, p99. `None` for no values.
pub fn percentiles(values: &[f64]) -> Option<Percentiles> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    Some(Percentiles {
        p50: percentile(&sorted, 0.50),
        p90: percentile(&sorted, 0.90),
        p99: percentile(&sorted, 0.99),
    })
}

/// ITL of each successful request of `reps`: `(latency − TTFT) / (OSL − 1)`; none for OSL 1.
pub fn itls(reps: &[Rep], osl: u32) -> Vec<f64> {
    if osl < 2 {
        return Vec::new();
    }
    reps.iter()
        .flat_map(|r| r.ttft_ms.iter().zip(&r.latency_ms))
        .map(|(t, l)| (l - t) / f64::from(osl - 1))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_known_values() {
        let s = summary(&[4.0, 1.0, 3.0, 2.0]).expect("values");
        assert_eq!((s.mean, s.median, s.min, s.max), (2.5, 2.5, 1.0, 4.0));
        assert!((s.stddev - 1.290_994_448_7).abs() < 1e-9);
        assert!(summary(&[]).is_none());
    }

    #[test]
    fn percentiles_interpolate_like_numpy() {
        let v: Vec<f64> = (1..=11).map(f64::from).collect();
        let p = percentiles(&v).expect("values");
        assert_eq!((p.p50, p.p90), (6.0, 10.0));
        assert!((p.p99 - 10.9).abs() < 1e-9);
    }

    #[test]
    fn itl_divides_the_decode_time_by_the_gaps() {
        let rep = Rep {
            wall_s: 1.0,
            output_tokens: 5,
            errors: 0,
            output_tok_s: 5.0,
            ttft_ms: vec![100.0],
            latency_ms: vec![500.0],
        };
        assert_eq!(itls(std::slice::from_ref(&rep), 5), vec![100.0]);
        assert!(itls(&[rep], 1).is_empty());
    }
}
