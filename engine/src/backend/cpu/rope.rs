//! QK-norm and rotary embedding on the fused qkv rows, in place.

use rayon::prelude::*;

use super::CpuTensor;
use super::norm::norm_row;
use crate::backend::RopeTables;

#[allow(clippy::too_many_arguments)]
pub(super) fn qk_norm_rope(
    qkv: &mut CpuTensor,
    positions: &[u32],
    q_w: &[f32],
    k_w: &[f32],
    rope: &RopeTables,
    num_heads: usize,
    num_kv_heads: usize,
    eps: f32,
) {
    let hd = q_w.len();
    let width = qkv.cols();
    let half = rope.rotary_dim / 2;
    qkv.data
        .par_chunks_mut(width)
        .zip(positions)
        .for_each(|(row, &pos)| {
            // cos/sin of this position, computed as transformers does: f32 angle, f32 cos/sin.
            let (cos, sin): (Vec<f32>, Vec<f32>) = rope
                .inv_freq
                .iter()
                .map(|f| {
                    let a = f * pos as f32;
                    (a.cos() * rope.scale, a.sin() * rope.scale)
                })
                .unzip();
            let mut tmp = vec![0f32; hd];
            for h in 0..num_heads + num_kv_heads {
                let w = if h < num_heads { q_w } else { k_w };
                let head = &mut row[h * hd..(h + 1) * hd];
                norm_row(&mut tmp, head, w, eps);
                for i in 0..half {
                    let (x1, x2) = (tmp[i], tmp[i + half]);
                    head[i] = x1 * cos[i] - x2 * sin[i];
                    head[i + half] = x2 * cos[i] + x1 * sin[i];
                }
                head[2 * half..].copy_from_slice(&tmp[2 * half..]);
            }
        });
}
