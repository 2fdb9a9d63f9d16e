//! QK-norm and rotary embedding on the fused qkv rows, in place (or the rotation alone, for
//! models without QK-norm).

use rayon::prelude::*;

use super::CpuTensor;
use super::norm::norm_row;
use crate::backend::RopeTables;

/// cos/sin of each rotated pair at `pos`, computed as transformers does: f32 angle, f32
/// cos/sin, times the table's scale.
pub(super) fn cos_sin(rope: &RopeTables, pos: u32) -> (Vec<f32>, Vec<f32>) {
    rope.inv_freq
        .iter()
        .map(|f| {
            let a = f * pos as f32;
            (a.cos() * rope.scale, a.sin() * rope.scale)
        })
        .unzip()
}

/// `out`'s first `2·half` dims = `x`'s rotated (neox halves); the rest copied.
fn rotate(out: &mut [f32], x: &[f32], (cos, sin): (&[f32], &[f32]), half: usize) {
    for i in 0..half {
        let (x1, x2) = (x[i], x[i + half]);
        out[i] = x1 * cos[i] - x2 * sin[i];
        out[i + half] = x2 * cos[i] + x1 * sin[i];
    }
    out[2 * half..].copy_from_slice(&x[2 * half..]);
}

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
            let (cos, sin) = cos_sin(rope, pos);
            let mut tmp = vec![0f32; hd];
            for h in 0..num_heads + num_kv_heads {
                let w = if h < num_heads { q_w } else { k_w };
                let head = &mut row[h * hd..(h + 1) * hd];
                norm_row(&mut tmp, head, w, eps);
                rotate(head, &tmp, (&cos, &sin), half);
            }
        });
}

/// Rotate the first `heads` heads (q, then k) of every fused qkv row by its token's position,
/// as [`qk_norm_rope`] does after its norm.
pub(super) fn rope(
    qkv: &mut CpuTensor,
    positions: &[u32],
    hd: usize,
    rope: &RopeTables,
    heads: usize,
) {
    let width = qkv.cols();
    let half = rope.rotary_dim / 2;
    qkv.data
        .par_chunks_mut(width)
        .zip(positions)
        .for_each(|(row, &pos)| {
            let (cos, sin) = cos_sin(rope, pos);
            let mut tmp = vec![0f32; hd];
            for h in 0..heads {
                let head = &mut row[h * hd..(h + 1) * hd];
                tmp.copy_from_slice(head);
                rotate(head, &tmp, (&cos, &sin), half);
            }
        });
}
