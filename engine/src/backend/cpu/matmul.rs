//! `out[m, n] = Σ_k x[m, k] · w[n, k]` with f32 accumulation.
//!
//! Few rows (decode) are a matrix-vector product that is bound by reading `w`: threads split
//! the output columns and each reads its slice of `w` once for all rows. More rows go to the
//! `gemm` crate, which packs and tiles for the cache.

use rayon::prelude::*;

/// Up to this many rows, the weight-streaming path beats packing for a GEMM.
const GEMV_MAX_ROWS: usize = 4;
/// Output columns a thread takes at a time on the GEMV path.
const GEMV_COLS_PER_TASK: usize = 64;

pub(super) fn matmul_nt(out: &mut [f32], x: &[f32], w: &[f32], m: usize, n: usize, k: usize) {
    assert!(
        out.len() == m * n && x.len() == m * k && w.len() == n * k,
        "matmul_nt: sizes checked by the caller"
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        out.fill(0.0);
        return;
    }
    if m <= GEMV_MAX_ROWS {
        gemv(out, x, w, m, n, k);
    } else {
        gemm_f32(out, x, w, m, n, k);
    }
}

fn gemv(out: &mut [f32], x: &[f32], w: &[f32], m: usize, n: usize, k: usize) {
    // Work on a transposed view [n, m] so each task owns a contiguous block of outputs.
    let mut out_t = vec![0f32; n * m];
    out_t
        .par_chunks_mut(GEMV_COLS_PER_TASK * m)
        .enumerate()
        .for_each(|(task, block)| {
            for (j, o) in block.chunks_mut(m).enumerate() {
                let col = task * GEMV_COLS_PER_TASK + j;
                let w_row = &w[col * k..(col + 1) * k];
                for (r, o) in o.iter_mut().enumerate() {
                    *o = dot(&x[r * k..(r + 1) * k], w_row);
                }
            }
        });
    for r in 0..m {
        for c in 0..n {
            out[r * n + c] = out_t[c * m + r];
        }
    }
}

/// Dot product with eight independent accumulators, which the compiler vectorizes.
pub(super) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

#[allow(unsafe_code)]
fn gemm_f32(out: &mut [f32], x: &[f32], w: &[f32], m: usize, n: usize, k: usize) {
    // SAFETY: `matmul_nt` asserted out = m×n, x = m×k and w = n×k elements. With the strides
    // below every index gemm forms is in bounds: dst (i, j) at i·n + j, lhs (i, l) at i·k + l,
    // rhs (l, j) = w[j, l] at j·k + l. `out` is borrowed mutably, so nothing aliases it.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out.as_mut_ptr(),
            1,
            n as isize,
            false,
            x.as_ptr(),
            1,
            k as isize,
            w.as_ptr(),
            k as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::Rayon(0),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(x: &[f32], w: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
        let mut o = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                o[i * n + j] = (0..k)
                    .map(|l| f64::from(x[i * k + l]) * f64::from(w[j * k + l]))
                    .sum::<f64>() as f32;
            }
        }
        o
    }

    #[test]
    fn both_paths_match_a_naive_product() {
        let mut s = 1u32;
        let mut rnd = || {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (s >> 8) as f32 / (1 << 24) as f32 - 0.5
        };
        for &(m, n, k) in &[
            (1, 37, 19),
            (3, 130, 67),
            (4, 1, 8),
            (5, 33, 129),
            (17, 65, 31),
            (64, 96, 200),
        ] {
            let x: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
            let w: Vec<f32> = (0..n * k).map(|_| rnd()).collect();
            let mut out = vec![f32::NAN; m * n];
            matmul_nt(&mut out, &x, &w, m, n, k);
            let want = naive(&x, &w, m, n, k);
            for (a, b) in out.iter().zip(&want) {
                assert!((a - b).abs() < 1e-4, "m={m} n={n} k={k}: {a} vs {b}");
            }
        }
    }
}
