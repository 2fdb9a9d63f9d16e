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
    let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let inv = 1.0 / (ms + eps).sqrt();
    for ((o, &x), &w) in o.iter_mut().zip(x).zip(w) {
        *o = w * (x * inv);
    }
}
