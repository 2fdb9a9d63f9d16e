//! RMSNorm over the last dimension, f32 throughout (as transformers computes it).

use rayon::prelude::*;

pub(super) fn rms_norm(out: &mut [f32], x: &[f32], w: &[f32], eps: f32) {
    let h = w.len();
    out.par_chunks_mut(h)
        .zip(x.par_chunks(h))
        .for_each(|(o, x)| norm_row(o, x, w, eps));
}

/// One row: `o = x * rsqrt(mean(x²) + eps) * w`.
pub(super) fn norm_row(o: &mut [f32], x: &[f32], w: &[f32], eps: f32) {
    norm_row_by(o, x, w, mean_sq(x), eps);
}

/// `mean(x²)`, summed in order.
pub(super) fn mean_sq(x: &[f32]) -> f32 {
    x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32
}

/// One row by a given mean square `ms`: `o = x * rsqrt(ms + eps) * w` (with `ms` the row's
/// own, [`norm_row`]; a tensor-parallel rank passes every rank's).
pub(super) fn norm_row_by(o: &mut [f32], x: &[f32], w: &[f32], ms: f32, eps: f32) {
    let inv = 1.0 / (ms + eps).sqrt();
    for ((o, &x), &w) in o.iter_mut().zip(x).zip(w) {
        *o = w * (x * inv);
    }
}

#[cfg(test)]
mod tests {
    use crate::backend::Backend;
    use crate::backend::cpu::{CpuBackend, CpuTensor};

    /// MiniMax-M2's q and k norms under tensor parallelism: each rank's mean squares of its
    /// columns, averaged over the ranks, then the norm by them, give the norm of the whole row.
    #[test]
    fn a_norm_by_the_ranks_averaged_mean_squares_is_the_whole_rows() {
        let b = CpuBackend::default();
        let mut s = 7u32;
        let mut rnd = || {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (s >> 8) as f32 / (1 << 24) as f32 - 0.5
        };
        // Rows of q (8 columns) then k (4), normed over each; two ranks of 4 + 2.
        let (t, q, k, eps) = (3, 8, 4, 1e-6);
        let x: Vec<f32> = (0..t * (q + k)).map(|_| 3.0 * rnd()).collect();
        let (wq, wk): (Vec<f32>, Vec<f32>) = (
            (0..q).map(|_| rnd()).collect(),
            (0..k).map(|_| rnd()).collect(),
        );
        let tensor = |shape: Vec<usize>, v: Vec<f32>| CpuTensor::new(shape, v);
        let mut whole = tensor(vec![t, q + k], x.clone());
        b.rms_norm_cols(&mut whole, 0, &tensor(vec![q], wq.clone()), eps)
            .expect("q");
        b.rms_norm_cols(&mut whole, q, &tensor(vec![k], wk.clone()), eps)
            .expect("k");

        // One rank holding everything: the same bits as rms_norm_cols.
        let mut one = tensor(vec![t, q + k], x.clone());
        let mut ms = tensor(vec![t, 2], vec![0.0; 2 * t]);
        b.mean_sq_cols(&mut ms, &one, &[0..q, q..q + k])
            .expect("mean squares");
        b.rms_norm_cols_by(&mut one, 0, &tensor(vec![q], wq.clone()), (&ms, 0), eps)
            .expect("q");
        b.rms_norm_cols_by(&mut one, q, &tensor(vec![k], wk.clone()), (&ms, 1), eps)
            .expect("k");
        assert_eq!(one.data, whole.data);

        // Two ranks: rank r holds q columns r·4.. and k columns r·2.. of each row.
        let part = |r: usize| {
            let cols: Vec<usize> = (r * 4..r * 4 + 4).chain(q + r * 2..q + r * 2 + 2).collect();
            let v = (0..t)
                .flat_map(|row| cols.iter().map(move |&c| (row, c)))
                .map(|(row, c)| x[row * (q + k) + c])
                .collect();
            (cols, tensor(vec![t, 6], v))
        };
        let mut sum = tensor(vec![t, 2], vec![0.0; 2 * t]);
        let parts: Vec<_> = (0..2).map(part).collect();
        for (_, p) in &parts {
            b.mean_sq_cols(&mut ms, p, &[0..4, 4..6]).expect("a rank's");
            sum.data.iter_mut().zip(&ms.data).for_each(|(s, m)| *s += m);
        }
        b.scale(&mut sum, 0.5).expect("average");
        let mut max_diff = 0f32;
        for (r, (cols, mut p)) in parts.into_iter().enumerate() {
            let wq_r = tensor(vec![4], wq[r * 4..r * 4 + 4].to_vec());
            let wk_r = tensor(vec![2], wk[r * 2..r * 2 + 2].to_vec());
            b.rms_norm_cols_by(&mut p, 0, &wq_r, (&sum, 0), eps)
                .expect("q");
            b.rms_norm_cols_by(&mut p, 4, &wk_r, (&sum, 1), eps)
                .expect("k");
            for row in 0..t {
                for (i, &c) in cols.iter().enumerate() {
                    let d = (p.data[row * 6 + i] - whole.data[row * (q + k) + c]).abs();
                    max_diff = max_diff.max(d);
                }
            }
        }
        eprintln!("max |two ranks - whole| = {max_diff:.1e}");
        assert!(max_diff <= 1e-6, "{max_diff}");

        let e = b
            .mean_sq_cols(&mut ms, &one, &[0..q, q..q + k + 1])
            .expect_err("past the row");
        assert!(e.to_string().contains("mean_sq_cols"), "{e}");
    }
}
