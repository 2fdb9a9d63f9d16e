//! Paged KV cache write and causal attention over block tables.
//!
//! Cache layer layout: `[num_blocks, block_size, num_kv_heads, head_dim]`, for k and v alike.
//! A token at position `p` of a sequence lives in block `block_table[p / block_size]` at
//! offset `p % block_size`.

use rayon::prelude::*;

use super::matmul::dot;
use super::{CpuTensor, shape_err};
use crate::backend::kv_fp8::round_trip_head;
use crate::backend::{BatchInputs, Result};

fn kv_dims(cache: &CpuTensor) -> Result<(usize, usize, usize, usize)> {
    match cache.shape[..] {
        [blocks, bs, nkv, hd] => Ok((blocks, bs, nkv, hd)),
        _ => Err(shape_err(
            "kv cache",
            format!(
                "expected [blocks, block_size, kv_heads, head_dim], got {:?}",
                cache.shape
            ),
        )),
    }
}

/// Copies each token's k and v heads into its cache slot; with `fp8`, every head vector as the
/// FP8 cache would give it back (`kv_fp8.rs`: rounded to e4m3 under its group scales).
pub(super) fn write_kv(
    k_cache: &mut CpuTensor,
    v_cache: &mut CpuTensor,
    qkv: &CpuTensor,
    batch: &BatchInputs,
    num_heads: usize,
    fp8: bool,
) -> Result<()> {
    let (blocks, bs, nkv, hd) = kv_dims(k_cache)?;
    let width = (num_heads + 2 * nkv) * hd;
    if v_cache.shape != k_cache.shape
        || qkv.cols() != width
        || qkv.rows() != batch.num_tokens()
        || bs != batch.block_size
    {
        return Err(shape_err(
            "write_kv",
            format!(
                "k {:?}, v {:?}, qkv {:?}, block_size {}",
                k_cache.shape, v_cache.shape, qkv.shape, batch.block_size
            ),
        ));
    }
    let slot_len = nkv * hd;
    for (row, &slot) in qkv.data.chunks(width).zip(&batch.slot_mapping) {
        let slot = slot as usize;
        if slot >= blocks * bs {
            return Err(shape_err(
                "write_kv",
                format!("slot {slot} is outside the cache of {blocks} blocks"),
            ));
        }
        let k = &row[num_heads * hd..num_heads * hd + slot_len];
        let v = &row[num_heads * hd + slot_len..];
        for (cache, src) in [(&mut *k_cache, k), (&mut *v_cache, v)] {
            let dst = &mut cache.data[slot * slot_len..(slot + 1) * slot_len];
            dst.copy_from_slice(src);
            if fp8 {
                dst.chunks_mut(hd).for_each(round_trip_head);
            }
        }
    }
    Ok(())
}

/// Each row's sequence in `batch`, after checking that every block table names blocks of a
/// cache of `blocks` blocks of `bs` tokens and is wide enough for its sequence (`op` names the
/// error).
pub(super) fn row_sequences(
    op: &'static str,
    batch: &BatchInputs,
    blocks: usize,
    bs: usize,
) -> Result<Vec<usize>> {
    if batch.block_tables.iter().any(|&b| b as usize >= blocks) {
        return Err(shape_err(
            op,
            format!("a block table names a block beyond {blocks}"),
        ));
    }
    let mut row_seq = vec![0usize; batch.num_tokens()];
    for s in 0..batch.num_seqs() {
        let (a, b) = (
            batch.seq_starts[s] as usize,
            batch.seq_starts[s + 1] as usize,
        );
        row_seq[a..b].fill(s);
        let need = (batch.context_lens[s] as usize).div_ceil(bs);
        if need > batch.max_blocks_per_seq {
            return Err(shape_err(
                op,
                format!(
                    "sequence {s} needs {need} blocks, table has {}",
                    batch.max_blocks_per_seq
                ),
            ));
        }
    }
    Ok(row_seq)
}

/// Causal attention of every q head over its sequence's cache, in the last `window` positions
/// when it is `Some`; with `sinks` (`[nh]`), head `h`'s softmax has the extra logit
/// `sinks[h]` in its denominator (gpt-oss).
#[allow(clippy::too_many_arguments)]
pub(super) fn paged_attention(
    out: &mut CpuTensor,
    qkv: &CpuTensor,
    k_cache: &CpuTensor,
    v_cache: &CpuTensor,
    batch: &BatchInputs,
    (num_heads, scale): (usize, f32),
    window: Option<usize>,
    sinks: Option<&[f32]>,
) -> Result<()> {
    let (blocks, bs, nkv, hd) = kv_dims(k_cache)?;
    let width = (num_heads + 2 * nkv) * hd;
    let t = batch.num_tokens();
    if qkv.cols() != width || qkv.rows() != t || out.rows() != t || out.cols() != num_heads * hd {
        return Err(shape_err(
            "paged_attention",
            format!(
                "out {:?}, qkv {:?}, cache {:?}",
                out.shape, qkv.shape, k_cache.shape
            ),
        ));
    }
    let row_seq = row_sequences("paged_attention", batch, blocks, bs)?;
    let group = num_heads / nkv;
    out.data
        .par_chunks_mut(hd)
        .enumerate()
        .for_each(|(task, o)| {
            let (row, h) = (task / num_heads, task % num_heads);
            let s = row_seq[row];
            let table = &batch.block_tables
                [s * batch.max_blocks_per_seq..(s + 1) * batch.max_blocks_per_seq];
            let q = &qkv.data[row * width + h * hd..row * width + (h + 1) * hd];
            let g = h / group;
            let len = batch.positions[row] as usize + 1; // causal: keys 0..=position
            // A sliding window sees only the last `window` of them.
            let first = window.map_or(0, |w| len.saturating_sub(w));
            let at = |p: usize| ((table[p / bs] as usize * bs + p % bs) * nkv + g) * hd;
            let mut scores: Vec<f32> = (first..len)
                .map(|p| dot(q, &k_cache.data[at(p)..at(p) + hd]) * scale)
                .collect();
            // A sink is one more logit in the max and the sum, with no value.
            let sink = sinks.map(|s| s[h]);
            let max = scores
                .iter()
                .copied()
                .chain(sink)
                .fold(f32::NEG_INFINITY, f32::max);
            let mut sum = sink.map_or(0.0, |s| (s - max).exp());
            for s in scores.iter_mut() {
                *s = (*s - max).exp();
                sum += *s;
            }
            o.fill(0.0);
            for (i, &w) in scores.iter().enumerate() {
                let v = &v_cache.data[at(first + i)..at(first + i) + hd];
                for (o, &v) in o.iter_mut().zip(v) {
                    *o += w * v;
                }
            }
            let inv = 1.0 / sum;
            o.iter_mut().for_each(|x| *x *= inv);
        });
    Ok(())
}
