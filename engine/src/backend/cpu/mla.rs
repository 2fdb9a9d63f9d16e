//! Multi-head latent attention (DeepSeek-V2/V3) on the CPU: the rotation and write of the
//! compressed cache rows, and causal attention over them in the absorbed form.
//!
//! Cache layer layout: `[num_blocks, block_size, latent + rope]`, one row a token: the
//! normalised `c_kv` (`kv_lora_rank` values) then the rotated `k_pe` that every head shares. A
//! token at position `p` of a sequence lives in block `block_table[p / block_size]` at offset
//! `p % block_size`, as in the per-head cache (`attention.rs`).

use rayon::prelude::*;

use super::attention::row_sequences;
use super::matmul::dot;
use super::rope::cos_sin;
use super::{CpuTensor, shape_err};
use crate::backend::kv_fp8::round_trip_head;
use crate::backend::{BatchInputs, MlaDims, Result, RopeTables};

/// Rotate `x` (`2·half` values) by `cos`/`sin`: neox halves, or interleaved pairs written back
/// evens then odds (transformers' `apply_rotary_pos_emb_interleave`).
fn rotate(x: &mut [f32], (cos, sin): (&[f32], &[f32]), interleaved: bool, tmp: &mut Vec<f32>) {
    let half = cos.len();
    tmp.clear();
    if interleaved {
        tmp.extend(x.iter().step_by(2));
        tmp.extend(x.iter().skip(1).step_by(2));
    } else {
        tmp.extend_from_slice(x);
    }
    for i in 0..half {
        let (x1, x2) = (tmp[i], tmp[i + half]);
        x[i] = x1 * cos[i] - x2 * sin[i];
        x[i + half] = x2 * cos[i] + x1 * sin[i];
    }
}

/// `Backend::mla_rope_write_kv`.
#[allow(clippy::too_many_arguments)]
pub(super) fn mla_rope_write_kv(
    q: &mut CpuTensor,
    latent: &mut CpuTensor,
    batch: &BatchInputs,
    rope: &RopeTables,
    dims: MlaDims,
    (interleaved, fp8): (bool, bool),
    cache: &mut CpuTensor,
) -> Result<()> {
    const OP: &str = "mla_rope_write_kv";
    let (blocks, bs) = dims.cache_blocks(OP, &cache.shape)?;
    let (t, row, head) = (batch.num_tokens(), dims.row(), dims.nope + dims.rope);
    if q.cols() != dims.q_width()
        || q.rows() != t
        || latent.cols() != row
        || latent.rows() != t
        || rope.rotary_dim != dims.rope
        || bs != batch.block_size
    {
        return Err(shape_err(
            OP,
            format!(
                "q {:?}, latent {:?}, rotary dims {}, block_size {} for {dims:?} and {t} tokens",
                q.shape, latent.shape, rope.rotary_dim, batch.block_size
            ),
        ));
    }
    if let Some(slot) = batch
        .slot_mapping
        .iter()
        .find(|&&s| s as usize >= blocks * bs)
    {
        return Err(shape_err(
            OP,
            format!("slot {slot} is outside the cache of {blocks} blocks"),
        ));
    }
    q.data
        .par_chunks_mut(dims.q_width())
        .zip(latent.data.par_chunks_mut(row))
        .zip(&batch.positions)
        .for_each(|((q, kv), &pos)| {
            let (cos, sin) = cos_sin(rope, pos);
            let mut tmp = Vec::with_capacity(dims.rope);
            for h in q.chunks_mut(head) {
                rotate(&mut h[dims.nope..], (&cos, &sin), interleaved, &mut tmp);
            }
            rotate(&mut kv[dims.latent..], (&cos, &sin), interleaved, &mut tmp);
        });
    for (kv, &slot) in latent.data.chunks(row).zip(&batch.slot_mapping) {
        let slot = slot as usize;
        let cached = &mut cache.data[slot * row..(slot + 1) * row];
        cached.copy_from_slice(kv);
        if fp8 {
            // The FP8 cache's rounding (`backend/kv_fp8.rs`), the latent and its rotated key
            // part each a vector of their own: their ranges differ (a normed latent, a key).
            let (c_kv, k_pe) = cached.split_at_mut(dims.latent);
            round_trip_head(c_kv);
            round_trip_head(k_pe);
        }
    }
    Ok(())
}

/// `Backend::mla_attention`: one task a (row, head), each over its sequence's rows
/// `0..=position`.
#[allow(clippy::too_many_arguments)]
pub(super) fn mla_attention(
    out: &mut CpuTensor,
    q: &CpuTensor,
    kv_b: &CpuTensor,
    cache: &CpuTensor,
    batch: &BatchInputs,
    dims: MlaDims,
    scale: f32,
) -> Result<()> {
    const OP: &str = "mla_attention";
    let (blocks, bs) = dims.cache_blocks(OP, &cache.shape)?;
    let MlaDims {
        heads,
        nope,
        rope,
        v,
        latent,
    } = dims;
    let t = batch.num_tokens();
    let per_head = nope + v;
    if q.cols() != dims.q_width()
        || q.rows() != t
        || out.cols() != heads * v
        || out.rows() != t
        || kv_b.shape != [heads * per_head, latent]
    {
        return Err(shape_err(
            OP,
            format!(
                "out {:?}, q {:?}, kv_b {:?} for {dims:?} and {t} tokens (want out [T, {}], \
                 kv_b [{}, {latent}])",
                out.shape,
                q.shape,
                kv_b.shape,
                heads * v,
                heads * per_head
            ),
        ));
    }
    let row_seq = row_sequences(OP, batch, blocks, bs)?;
    let row = dims.row();
    out.data
        .par_chunks_mut(v)
        .enumerate()
        .for_each(|(task, o)| {
            let (r, h) = (task / heads, task % heads);
            let s = row_seq[r];
            let table = &batch.block_tables
                [s * batch.max_blocks_per_seq..(s + 1) * batch.max_blocks_per_seq];
            let qh = &q.data[r * dims.q_width() + h * (nope + rope)..][..nope + rope];
            let (q_nope, q_pe) = qh.split_at(nope);
            let w = &kv_b.data[h * per_head * latent..(h + 1) * per_head * latent];
            let (w_uk, w_uv) = w.split_at(nope * latent); // [nope, latent], [v, latent]
            // q_lat = W_UKᵀ · q_nope: the query in the latent space.
            let mut q_lat = vec![0f32; latent];
            for (&qd, wk) in q_nope.iter().zip(w_uk.chunks_exact(latent)) {
                for (l, &w) in q_lat.iter_mut().zip(wk) {
                    *l += qd * w;
                }
            }
            let len = batch.positions[r] as usize + 1; // causal: rows 0..=position
            let at = |p: usize| (table[p / bs] as usize * bs + p % bs) * row;
            let mut scores: Vec<f32> = (0..len)
                .map(|p| {
                    let c = &cache.data[at(p)..at(p) + row];
                    (dot(&q_lat, &c[..latent]) + dot(q_pe, &c[latent..])) * scale
                })
                .collect();
            let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0;
            for s in scores.iter_mut() {
                *s = (*s - max).exp();
                sum += *s;
            }
            // o_lat = Σ_p softmax_p · c_kv[p]; out = W_UV · o_lat.
            let mut o_lat = vec![0f32; latent];
            for (p, &w) in scores.iter().enumerate() {
                let c = &cache.data[at(p)..at(p) + latent];
                for (o, &c) in o_lat.iter_mut().zip(c) {
                    *o += w * c;
                }
            }
            let inv = 1.0 / sum;
            o_lat.iter_mut().for_each(|x| *x *= inv);
            for (o, wv) in o.iter_mut().zip(w_uv.chunks_exact(latent)) {
                *o = dot(wv, &o_lat);
            }
        });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rnd(seed: &mut u32, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                *seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (*seed >> 8) as f32 / (1 << 24) as f32 - 0.5
            })
            .collect()
    }

    /// The absorbed form against transformers' way: decompress every cached row into per-head
    /// keys `[k_nope | k_pe]` and values through `kv_b`, then plain causal attention.
    #[test]
    fn absorbed_attention_equals_decompressed_heads() {
        let dims = MlaDims {
            heads: 3,
            nope: 4,
            rope: 2,
            v: 5,
            latent: 6,
        };
        let (t, bs) = (5, 2);
        let mut seed = 11;
        let q = CpuTensor::new(vec![t, dims.q_width()], rnd(&mut seed, t * dims.q_width()));
        let rows = rnd(&mut seed, t * dims.row());
        let kv_b = CpuTensor::new(
            vec![dims.heads * (dims.nope + dims.v), dims.latent],
            rnd(&mut seed, dims.heads * (dims.nope + dims.v) * dims.latent),
        );
        // One sequence of 5 tokens in blocks 3, 1, 2 of a 4-block cache.
        let table = [3u32, 1, 2];
        let tokens = [0u32; 5];
        let batch = BatchInputs::build(
            bs,
            &[crate::backend::SeqChunk {
                tokens: &tokens,
                start_pos: 0,
                block_table: &table,
                logits_rows: vec![],
            }],
        );
        let mut cache = CpuTensor::new(vec![4, bs, dims.row()], vec![0.0; 4 * bs * dims.row()]);
        for (p, &slot) in batch.slot_mapping.iter().enumerate() {
            let slot = slot as usize;
            cache.data[slot * dims.row()..(slot + 1) * dims.row()]
                .copy_from_slice(&rows[p * dims.row()..(p + 1) * dims.row()]);
        }
        let scale = 0.37;
        let mut out = CpuTensor::new(vec![t, dims.heads * dims.v], vec![f32::NAN; t * 15]);
        mla_attention(&mut out, &q, &kv_b, &cache, &batch, dims, scale).expect("mla");
        let per_head = dims.nope + dims.v;
        for r in 0..t {
            for h in 0..dims.heads {
                let w = |i: usize| &kv_b.data[(h * per_head + i) * dims.latent..][..dims.latent];
                let up = |p: usize, i: usize| dot(w(i), &rows[p * dims.row()..][..dims.latent]);
                let qh = &q.data[r * dims.q_width() + h * 6..][..6];
                let score = |p: usize| {
                    let k_nope: f32 = (0..dims.nope).map(|i| qh[i] * up(p, i)).sum();
                    let pe = &rows[p * dims.row() + dims.latent..][..dims.rope];
                    (k_nope + dot(&qh[dims.nope..], pe)) * scale
                };
                let s: Vec<f32> = (0..=r).map(score).collect();
                let max = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let e: Vec<f32> = s.iter().map(|x| (x - max).exp()).collect();
                let sum: f32 = e.iter().sum();
                for j in 0..dims.v {
                    let want: f32 = (0..=r).map(|p| e[p] / sum * up(p, dims.nope + j)).sum();
                    let got = out.data[r * 15 + h * dims.v + j];
                    assert!(
                        (got - want).abs() < 1e-5,
                        "row {r} head {h} v {j}: {got} vs {want}"
                    );
                }
            }
        }
    }

    /// With the FP8 cache each written row is the full-precision row with its latent and its
    /// rotated key part rounded as `kv_fp8` rounds a cached vector, each on its own scale.
    #[test]
    fn fp8_rows_round_the_latent_and_the_key_part_apart() {
        let dims = MlaDims {
            heads: 1,
            nope: 2,
            rope: 2,
            v: 2,
            latent: 6,
        };
        let (t, bs, mut seed) = (3, 2, 5);
        let rope = RopeTables {
            inv_freq: vec![0.5],
            scale: 1.0,
            rotary_dim: 2,
        };
        let table = [1u32, 2];
        let batch = BatchInputs::build(
            bs,
            &[crate::backend::SeqChunk {
                tokens: &[0u32; 3],
                start_pos: 0,
                block_table: &table,
                logits_rows: vec![],
            }],
        );
        let q = rnd(&mut seed, t * dims.q_width());
        // The key part 100× the latent's range: one shared scale would flatten the latent.
        let mut latent = rnd(&mut seed, t * dims.row());
        for row in latent.chunks_mut(dims.row()) {
            row[dims.latent..].iter_mut().for_each(|v| *v *= 100.0);
        }
        let write = |fp8: bool| {
            let mut q = CpuTensor::new(vec![t, dims.q_width()], q.clone());
            let mut l = CpuTensor::new(vec![t, dims.row()], latent.clone());
            let mut cache = CpuTensor::new(vec![3, bs, dims.row()], vec![0.0; 3 * bs * 8]);
            mla_rope_write_kv(
                &mut q,
                &mut l,
                &batch,
                &rope,
                dims,
                (false, fp8),
                &mut cache,
            )
            .expect("write");
            cache.data
        };
        let (full, fp8) = (write(false), write(true));
        assert_ne!(full, fp8, "nothing was rounded");
        for (f, g) in full.chunks(dims.row()).zip(fp8.chunks(dims.row())) {
            let (mut c_kv, mut k_pe) = (f[..dims.latent].to_vec(), f[dims.latent..].to_vec());
            round_trip_head(&mut c_kv);
            round_trip_head(&mut k_pe);
            assert_eq!(g[..dims.latent], c_kv[..]);
            assert_eq!(g[dims.latent..], k_pe[..]);
        }
    }

    /// Interleaved pairs rotate as transformers' `apply_rotary_pos_emb_interleave` lays them
    /// out: the de-interleaved vector (evens, then odds) rotated by neox halves.
    #[test]
    fn interleaved_rotation_is_deinterleave_then_halves() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let (cos, sin) = ([0.5, 0.6, 0.7], [0.1, 0.2, 0.3]);
        let mut tmp = Vec::new();
        let mut got = x;
        rotate(&mut got, (&cos, &sin), true, &mut tmp);
        let mut want = [1.0, 3.0, 5.0, 2.0, 4.0, 6.0];
        rotate(&mut want, (&cos, &sin), false, &mut tmp);
        assert_eq!(got, want);
        assert_eq!(got[0], 1.0 * 0.5 - 2.0 * 0.1);
        assert_eq!(got[3], 2.0 * 0.5 + 1.0 * 0.1);
    }
}
