//! The CPU ops of Qwen3.5's hybrid layers (`models/qwen3_5.rs`), plain f32 Rust written from
//! the math transformers 5.17 runs (`modeling_qwen3_5.py`), for one sequence from position 0:
//!
//! - [`causal_conv1d_silu`]: Gated DeltaNet's causal depthwise convolution over time, then SiLU.
//! - [`gated_delta_rule`]: the recurrence `S_t = S_{t-1}·exp(g_t)·(I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ`
//!   with L2-normalised q and k, read out as `o_t = S_tᵀ q_t / √d_k`.
//! - [`gated_rms_norm`]: RMSNorm of each head's output, times `w`, times `silu(z)`.
//! - [`partial_rope`]: rotary embedding on the first `rotary_dim` channels of each head only.
//! - [`causal_attention`]: softmax attention of a whole sequence over itself (GQA).
//!
//! No cache: the conv window and the recurrent state start at zero and live only within a
//! call. Keeping them per sequence between calls is the cache manager's work still to come.

use rayon::prelude::*;

fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// `out[t, c] = silu(Σ_j w[c, j] · x[t − (K−1) + j, c])` with `x` zero before the sequence:
/// `x`, `out` `[T, C]`, `w` `[C, K]` (the checkpoint's `conv1d.weight` `[C, 1, K]`).
pub fn causal_conv1d_silu(out: &mut [f32], x: &[f32], w: &[f32], channels: usize) {
    let k = w.len() / channels;
    out.par_chunks_mut(channels).enumerate().for_each(|(t, o)| {
        for (c, o) in o.iter_mut().enumerate() {
            let taps = &w[c * k..(c + 1) * k];
            let mut acc = 0f32;
            for (j, &wj) in taps.iter().enumerate() {
                // tap j looks back K−1−j steps
                if let Some(src) = (t + j).checked_sub(k - 1) {
                    acc += wj * x[src * channels + c];
                }
            }
            *o = silu(acc);
        }
    });
}

/// `x / sqrt(Σx² + eps)` in place (transformers' `l2norm`, eps 1e-6).
fn l2_normalize(x: &mut [f32]) {
    let inv = 1.0 / (x.iter().map(|v| v * v).sum::<f32>() + 1e-6).sqrt();
    x.iter_mut().for_each(|v| *v *= inv);
}

/// Shapes of one Gated DeltaNet layer's heads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeltaHeads {
    /// Key (and query) heads; value head `h` reads key head `h / (nv / nk)`.
    pub nk: usize,
    pub dk: usize,
    pub nv: usize,
    pub dv: usize,
}

/// The gated delta rule over a sequence, value head by value head (in parallel).
///
/// `q`, `k` `[T, nk, dk]` (normalised here), `v` `[T, nv, dv]`, `g` (log decay) and `beta`
/// `[T, nv]`; writes `out` `[T, nv, dv]` and leaves each head's final state in `state`
/// `[nv, dk, dv]` (which it starts from). Per token, with `S` a head's `[dk, dv]` state:
///
/// ```text
/// S     = exp(g_t) · S                 decay
/// δ     = β_t · (v_t − Sᵀ k_t)         the delta: what the state mispredicts for k_t
/// S     = S + k_t δᵀ                   write (together: S·(I − β k kᵀ)-style update)
/// o_t   = Sᵀ q_t / √dk                 read
/// ```
#[allow(clippy::too_many_arguments)]
pub fn gated_delta_rule(
    out: &mut [f32],
    state: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: &[f32],
    beta: &[f32],
    s: DeltaHeads,
) {
    let t_len = g.len() / s.nv;
    let group = s.nv / s.nk;
    let scale = 1.0 / (s.dk as f32).sqrt();
    // Normalised q (scaled) and k, per token and key head.
    let mut qn = q.to_vec();
    let mut kn = k.to_vec();
    qn.par_chunks_mut(s.dk).for_each(|h| {
        l2_normalize(h);
        h.iter_mut().for_each(|x| *x *= scale);
    });
    kn.par_chunks_mut(s.dk).for_each(l2_normalize);

    // Each value head is independent: run them in parallel, gathering `[T, dv]` per head.
    let per_head: Vec<Vec<f32>> = state
        .par_chunks_mut(s.dk * s.dv)
        .enumerate()
        .map(|(h, st)| {
            let kh = h / group;
            let mut o = vec![0f32; t_len * s.dv];
            let mut delta = vec![0f32; s.dv];
            for t in 0..t_len {
                let qt = &qn[(t * s.nk + kh) * s.dk..][..s.dk];
                let kt = &kn[(t * s.nk + kh) * s.dk..][..s.dk];
                let vt = &v[(t * s.nv + h) * s.dv..][..s.dv];
                let decay = g[t * s.nv + h].exp();
                let b = beta[t * s.nv + h];
                st.iter_mut().for_each(|x| *x *= decay);
                // δ = β (v − Sᵀ k)
                delta.copy_from_slice(vt);
                for (i, &ki) in kt.iter().enumerate() {
                    let row = &st[i * s.dv..][..s.dv];
                    delta.iter_mut().zip(row).for_each(|(d, &r)| *d -= ki * r);
                }
                delta.iter_mut().for_each(|d| *d *= b);
                // S += k δᵀ; o = Sᵀ q
                let ot = &mut o[t * s.dv..][..s.dv];
                for (i, (&ki, &qi)) in kt.iter().zip(qt).enumerate() {
                    let row = &mut st[i * s.dv..][..s.dv];
                    for ((r, &d), o) in row.iter_mut().zip(&delta).zip(ot.iter_mut()) {
                        *r += ki * d;
                        *o += qi * *r;
                    }
                }
            }
            o
        })
        .collect();
    for (h, o) in per_head.iter().enumerate() {
        for t in 0..t_len {
            out[(t * s.nv + h) * s.dv..][..s.dv].copy_from_slice(&o[t * s.dv..][..s.dv]);
        }
    }
}

/// `out = x / rms(x) · w · silu(z)` over rows of `w.len()` (one head's output each).
pub fn gated_rms_norm(out: &mut [f32], x: &[f32], z: &[f32], w: &[f32], eps: f32) {
    let d = w.len();
    out.par_chunks_mut(d)
        .zip(x.par_chunks(d).zip(z.par_chunks(d)))
        .for_each(|(o, (x, z))| {
            let ms = x.iter().map(|v| v * v).sum::<f32>() / d as f32;
            let inv = 1.0 / (ms + eps).sqrt();
            for (((o, &x), &z), &w) in o.iter_mut().zip(x).zip(z).zip(w) {
                *o = w * (x * inv) * silu(z);
            }
        });
}

/// Rotate, for each token `t` (at position `t`) and each head of `x` `[T, heads · head_dim]`,
/// the first `rotary_dim = 2 · inv_freq.len()` channels by neox halves (channel `i` pairs with
/// `i + rotary_dim / 2`); the other channels pass through unchanged.
pub fn partial_rope(x: &mut [f32], heads: usize, head_dim: usize, inv_freq: &[f32]) {
    let half = inv_freq.len();
    x.par_chunks_mut(heads * head_dim)
        .enumerate()
        .for_each(|(t, row)| {
            for head in row.chunks_mut(head_dim) {
                for (i, &f) in inv_freq.iter().enumerate() {
                    let (sin, cos) = (t as f32 * f).sin_cos();
                    let (a, b) = (head[i], head[i + half]);
                    head[i] = a * cos - b * sin;
                    head[i + half] = b * cos + a * sin;
                }
            }
        });
}

/// Causal softmax attention of one sequence: `q` `[T, nh, hd]`, `k`, `v` `[T, nkv, hd]`,
/// `out` `[T, nh, hd]`; head `h` reads kv head `h / (nh / nkv)`.
pub fn causal_attention(
    out: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    heads: (usize, usize, usize),
    scale: f32,
) {
    let (nh, nkv, hd) = heads;
    let group = nh / nkv;
    out.par_chunks_mut(nh * hd)
        .enumerate()
        .for_each(|(t, o_row)| {
            let mut p = vec![0f32; t + 1];
            for h in 0..nh {
                let kvh = h / group;
                let qh = &q[(t * nh + h) * hd..][..hd];
                for (s, p) in p.iter_mut().enumerate() {
                    let ks = &k[(s * nkv + kvh) * hd..][..hd];
                    *p = qh.iter().zip(ks).map(|(a, b)| a * b).sum::<f32>() * scale;
                }
                let max = p.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut sum = 0f32;
                p.iter_mut().for_each(|x| {
                    *x = (*x - max).exp();
                    sum += *x;
                });
                let oh = &mut o_row[h * hd..][..hd];
                oh.fill(0.0);
                for (s, &w) in p.iter().enumerate() {
                    let vs = &v[(s * nkv + kvh) * hd..][..hd];
                    oh.iter_mut().zip(vs).for_each(|(o, &x)| *o += w / sum * x);
                }
            }
        });
}
