//! The CPU ops of Nemotron-H's Mamba-2 layers (`models/nemotron_h.rs`), plain f32 Rust written
//! from the math transformers 5.25 runs (`modeling_nemotron_h.py`), for one sequence's piece of
//! a batch:
//!
//! - [`conv1d_bias_silu`]: the causal depthwise convolution over x|B|C, its bias, then SiLU.
//! - [`ssm_scan`]: the selective state space recurrence, token by token (the exact form of
//!   what transformers computes in chunks for a prompt and one step at a time when decoding):
//!   per head `S = exp(dt·A)·S + dt·x Bᵀ`, read out as `y = S C + D·x`.
//! - [`gated_group_rms_norm`]: `y · silu(z)`, RMS-normalised per group of channels, times `w`.
//!
//! The state between calls (the conv window and the SSM state) is the caller's: the sequence's
//! slot in the engine's state pool, as for Qwen3.5's Gated DeltaNet layers (`hybrid.rs`).

use rayon::prelude::*;

use super::slots::{Slots, check_plans, for_each_piece};
use super::{CpuTensor, check};
use crate::backend::{BatchInputs, Mamba2Layer, Result};

fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// `log(1 + eˣ)`, linear above 20 as torch's `softplus` is.
fn softplus(x: f32) -> f32 {
    if x > 20.0 { x } else { x.exp().ln_1p() }
}

/// Shapes of one Mamba-2 layer's heads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SsmHeads {
    /// Heads (`mamba_num_heads`) of `head_dim` channels (`mamba_head_dim`).
    pub heads: usize,
    pub head_dim: usize,
    /// Groups of B and C (`n_groups`); head `h` reads group `h / (heads / groups)`.
    pub groups: usize,
    /// The state's width per channel (`ssm_state_size`).
    pub state: usize,
}

impl SsmHeads {
    /// Channels of x (and of z and the output): `heads · head_dim`.
    pub fn inner(&self) -> usize {
        self.heads * self.head_dim
    }

    /// Channels through the conv: x, B and C.
    pub fn conv_dim(&self) -> usize {
        self.inner() + 2 * self.groups * self.state
    }

    /// Elements of one sequence's SSM state: `[heads, head_dim, state]`.
    pub fn state_len(&self) -> usize {
        self.inner() * self.state
    }
}

/// `out[t, c] = silu(bias[c] + Σ_j w[c, j] · x[t − (K−1) + j, c])` with `x` zero before the
/// sequence: `x`, `out` `[T, C]`, `w` `[C, K]` (the checkpoint's `conv1d.weight` `[C, 1, K]`),
/// `bias` `[C]`.
pub fn conv1d_bias_silu(out: &mut [f32], x: &[f32], w: &[f32], bias: &[f32]) {
    let channels = bias.len();
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
            *o = silu(acc + bias[c]);
        }
    });
}

/// The SSM over a piece of a sequence, head by head (in parallel).
///
/// `x` `[T, nh, p]`, `b`, `c` `[T, G, N]`, `dt` `[T, nh]` (after the softplus and the clamp),
/// `neg_a` and `d` `[nh]`; writes `y` `[T, nh, p]` and leaves each head's final state in
/// `state` `[nh, p, N]` (which it starts from). Per token, with `S` a head's `[p, N]` state:
///
/// ```text
/// S   = exp(dt_t · A) · S + dt_t · x_t B_tᵀ      decay, then write
/// y_t = S C_t + D · x_t                          read, plus the skip
/// ```
#[allow(clippy::too_many_arguments)]
pub fn ssm_scan(
    y: &mut [f32],
    state: &mut [f32],
    (x, b, c): (&[f32], &[f32], &[f32]),
    dt: &[f32],
    neg_a: &[f32],
    d: &[f32],
    s: SsmHeads,
) {
    let (nh, p, n) = (s.heads, s.head_dim, s.state);
    let t_len = dt.len() / nh;
    let per_group = nh / s.groups;
    let per_head: Vec<Vec<f32>> = state
        .par_chunks_mut(p * n)
        .enumerate()
        .map(|(h, st)| {
            let g = h / per_group;
            let mut o = vec![0f32; t_len * p];
            for t in 0..t_len {
                let dt_t = dt[t * nh + h];
                let decay = (dt_t * neg_a[h]).exp();
                let bt = &b[(t * s.groups + g) * n..][..n];
                let ct = &c[(t * s.groups + g) * n..][..n];
                let xt = &x[(t * nh + h) * p..][..p];
                for (i, (&xi, yo)) in xt.iter().zip(&mut o[t * p..(t + 1) * p]).enumerate() {
                    let row = &mut st[i * n..][..n];
                    let dx = dt_t * xi;
                    let mut acc = 0f32;
                    for ((r, &bj), &cj) in row.iter_mut().zip(bt).zip(ct) {
                        *r = *r * decay + dx * bj;
                        acc += *r * cj;
                    }
                    *yo = acc + d[h] * xi;
                }
            }
            o
        })
        .collect();
    for (h, o) in per_head.iter().enumerate() {
        for t in 0..t_len {
            y[(t * nh + h) * p..][..p].copy_from_slice(&o[t * p..][..p]);
        }
    }
}

/// `out = w · g / rms(g)` with `g = y · silu(z)`, the RMS over each group of
/// `w.len() / groups` channels of a row (transformers' `NemotronHRMSNormGated`, the gate
/// before the norm).
pub fn gated_group_rms_norm(
    out: &mut [f32],
    y: &[f32],
    z: &[f32],
    w: &[f32],
    groups: usize,
    eps: f32,
) {
    let width = w.len() / groups;
    out.par_chunks_mut(width)
        .zip(y.par_chunks(width).zip(z.par_chunks(width)))
        .enumerate()
        .for_each(|(i, (o, (y, z)))| {
            let w = &w[(i % groups) * width..][..width];
            for ((o, &y), &z) in o.iter_mut().zip(y).zip(z) {
                *o = y * silu(z);
            }
            let ms = o.iter().map(|v| v * v).sum::<f32>() / width as f32;
            let inv = 1.0 / (ms + eps).sqrt();
            o.iter_mut().zip(w).for_each(|(o, &w)| *o = w * (*o * inv));
        });
}

/// Columns `lo .. lo + n` of each row of a `[rows, width]` buffer, as `[rows, n]`.
fn columns(data: &[f32], width: usize, lo: usize, n: usize) -> Vec<f32> {
    data.chunks(width)
        .flat_map(|r| r[lo..lo + n].iter().copied())
        .collect()
}

/// [`HybridOps::mamba2`](crate::backend::HybridOps::mamba2) on the CPU: each sequence's
/// pieces (split where a state is saved) through the conv and the scan from its slot, then the
/// gated norm over the batch.
pub(super) fn mamba2(
    out: &mut CpuTensor,
    mixed: &CpuTensor,
    layer: &Mamba2Layer<'_, CpuTensor>,
    conv_state: &mut CpuTensor,
    ssm_state: &mut CpuTensor,
    host: &BatchInputs,
) -> Result<()> {
    let s = layer.heads;
    let t = mixed.rows();
    let (inner, cd, nh) = (s.inner(), s.conv_dim(), s.heads);
    let gn = s.groups * s.state;
    let width = inner + cd + nh;
    let window_len = (layer.kernel - 1) * cd;
    let state_len = s.state_len();
    check(
        "mamba2",
        mixed.cols() == width
            && out.shape == [t, inner]
            && s.groups > 0
            && nh.is_multiple_of(s.groups)
            && layer.conv.data.len() == cd * layer.kernel
            && layer.conv_bias.data.len() == cd
            && [&layer.neg_a, &layer.dt_bias, &layer.d]
                .iter()
                .all(|v| v.data.len() == nh)
            && layer.norm.data.len() == inner
            && conv_state.cols() == window_len
            && ssm_state.cols() == state_len
            && conv_state.rows() == ssm_state.rows()
            && host.states.len() == host.num_seqs()
            && host.num_tokens() == t,
        || {
            format!(
                "mixed {:?}, out {:?}, conv state {:?}, ssm state {:?}, {s:?} with {} conv \
                 taps, {} plans for {} sequences",
                mixed.shape,
                out.shape,
                conv_state.shape,
                ssm_state.shape,
                layer.kernel,
                host.states.len(),
                host.num_seqs()
            )
        },
    )?;
    check_plans("mamba2", host, conv_state.rows())?;
    let z = columns(&mixed.data, width, 0, inner); // [T, nh·p]
    let xbc = columns(&mixed.data, width, inner, cd); // [T, C]
    // dt = clamp(softplus(dt + dt_bias), limits)  [T, nh]
    let (lo_dt, hi_dt) = layer.dt_limit;
    let dt: Vec<f32> = columns(&mixed.data, width, inner + cd, nh)
        .chunks(nh)
        .flat_map(|r| {
            r.iter()
                .zip(&layer.dt_bias.data)
                .map(|(x, b)| softplus(x + b).clamp(lo_dt, hi_dt))
        })
        .collect();
    let mut y = vec![0f32; t * inner]; // [T, nh, p]
    let slots = Slots {
        conv: &mut conv_state.data, // [slots, K−1, C]
        window: window_len,
        state: &mut ssm_state.data, // [slots, nh, p, N]
        state_len,
    };
    for_each_piece(host, slots, |window, state, rows| {
        // conv = silu(conv(window | xBC) + bias)  [K−1 + n, C], whose first K−1 rows (the
        // window's own) are dropped; the window becomes the last K−1 inputs.
        let mut input = window.to_vec();
        input.extend_from_slice(&xbc[rows.start * cd..rows.end * cd]);
        let mut conv = vec![0f32; input.len()];
        conv1d_bias_silu(&mut conv, &input, &layer.conv.data, &layer.conv_bias.data);
        window.copy_from_slice(&input[input.len() - window_len..]);
        let conv = &conv[window_len..];
        let x = columns(conv, cd, 0, inner);
        let b = columns(conv, cd, inner, gn);
        let c = columns(conv, cd, inner + gn, gn);
        // y = the scan over the piece, from the slot's state
        ssm_scan(
            &mut y[rows.start * inner..rows.end * inner],
            state,
            (&x, &b, &c),
            &dt[rows.start * nh..rows.end * nh],
            &layer.neg_a.data,
            &layer.d.data,
            s,
        );
    });
    // out = rms_norm_grouped(y · silu(z)) · w
    gated_group_rms_norm(&mut out.data, &y, &z, &layer.norm.data, s.groups, layer.eps);
    Ok(())
}

/// [`HybridOps::relu2`](crate::backend::HybridOps::relu2) on the CPU.
pub(super) fn relu2(out: &mut CpuTensor, x: &CpuTensor) -> Result<()> {
    check("relu2", out.shape == x.shape, || {
        format!("out {:?}, x {:?}", out.shape, x.shape)
    })?;
    out.data.par_iter_mut().zip(&x.data).for_each(|(o, &x)| {
        let r = x.max(0.0);
        *o = r * r;
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(got: &[f32], want: &[f32]) {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-5, "got {got:?}, want {want:?}");
        }
    }

    /// One head of one channel and a state of one: `S = e^{dt·A} S + dt·x·B`, `y = S·C + D·x`,
    /// worked by hand.
    #[test]
    fn one_channel_follows_the_recurrence() {
        let s = SsmHeads {
            heads: 1,
            head_dim: 1,
            groups: 1,
            state: 1,
        };
        let (x, b, c) = ([1.0, 2.0, 0.0], [1.0, 0.5, 1.0], [1.0, 1.0, 2.0]);
        let dt = [0.5, 1.0, 0.25];
        let (neg_a, d) = ([-2.0], [0.5]);
        let mut y = [0f32; 3];
        let mut state = [0f32; 1];
        ssm_scan(&mut y, &mut state, (&x, &b, &c), &dt, &neg_a, &d, s);
        let s0 = 0.5; // 0 + 0.5·1·1
        let s1 = (-2f32).exp() * s0 + 1.0; // + 1·2·0.5
        let s2 = (-0.5f32).exp() * s1; // x = 0 writes nothing
        close(&y, &[s0 + 0.5, s1 + 1.0, 2.0 * s2]);
        close(&state, &[s2]);
    }

    /// Heads read their own group's B and C: two heads in two groups give what each head
    /// gives alone.
    #[test]
    fn heads_read_their_groups_b_and_c() {
        let two = SsmHeads {
            heads: 2,
            head_dim: 2,
            groups: 2,
            state: 3,
        };
        let one = SsmHeads {
            heads: 1,
            groups: 1,
            ..two
        };
        let t = 4;
        let v = |n: usize, k: f32| -> Vec<f32> { (0..n).map(|i| ((i as f32) * k).sin()).collect() };
        let (x, b, c) = (v(t * 4, 0.7), v(t * 6, 1.3), v(t * 6, 0.4));
        let dt: Vec<f32> = v(t * 2, 2.1).iter().map(|d| d.abs() + 0.1).collect();
        let (neg_a, d) = ([-0.5, -1.5], [0.3, -0.2]);
        let mut y = vec![0f32; t * 4];
        let mut state = vec![0f32; 2 * 2 * 3];
        ssm_scan(&mut y, &mut state, (&x, &b, &c), &dt, &neg_a, &d, two);
        for h in 0..2 {
            let pick = |src: &[f32], w: usize| -> Vec<f32> {
                src.chunks(2 * w)
                    .flat_map(|r| r[h * w..(h + 1) * w].to_vec())
                    .collect()
            };
            let (xh, bh, ch, dth) = (pick(&x, 2), pick(&b, 3), pick(&c, 3), pick(&dt, 1));
            let mut yh = vec![0f32; t * 2];
            let mut sh = vec![0f32; 6];
            ssm_scan(
                &mut yh,
                &mut sh,
                (&xh, &bh, &ch),
                &dth,
                &neg_a[h..=h],
                &d[h..=h],
                one,
            );
            close(&pick(&y, 2), &yh);
            close(&state[h * 6..(h + 1) * 6], &sh);
        }
    }

    #[test]
    fn the_gated_norm_gates_first_and_normalises_each_group() {
        // Two groups of two channels; z large, so silu(z) ≈ z.
        let y = [1.0, 1.0, 3.0, 4.0];
        let z = [30.0, 30.0, 20.0, 20.0];
        let w = [1.0, 2.0, 1.0, 1.0];
        let mut out = [0f32; 4];
        gated_group_rms_norm(&mut out, &y, &z, &w, 2, 0.0);
        // group 0: g = [30, 30], rms 30 → [1, 2]; group 1: g = [60, 80], rms √5000
        let r = (5000f32).sqrt();
        close(&out, &[1.0, 2.0, 60.0 / r, 80.0 / r]);
    }

    /// `dt` is clamped to `time_step_limit` after the softplus: with a limit of 0.25 a large
    /// raw `dt` writes as `dt = 0.25` does.
    #[test]
    fn dt_is_clamped_after_the_softplus() {
        use crate::kv_cache::StatePlan;
        let s = SsmHeads {
            heads: 1,
            head_dim: 1,
            groups: 1,
            state: 1,
        };
        let t = |shape: &[usize], v: &[f32]| CpuTensor::new(shape.to_vec(), v.to_vec());
        let (conv, bias) = (
            t(&[3, 2], &[0.0, 1.0, 0.0, 1.0, 0.0, 1.0]),
            t(&[3], &[0.0; 3]),
        );
        let (neg_a, dt_bias, d, norm) = (
            t(&[1], &[-1.0]),
            t(&[1], &[0.0]),
            t(&[1], &[0.0]),
            t(&[1], &[1.0]),
        );
        let layer = Mamba2Layer {
            heads: s,
            kernel: 2,
            conv: &conv,
            conv_bias: &bias,
            neg_a: &neg_a,
            dt_bias: &dt_bias,
            d: &d,
            norm: &norm,
            dt_limit: (0.0, 0.25),
            eps: 0.0,
        };
        // z | x B C | dt for two tokens: z large (silu(z) ≈ z), x = B = C = 1, raw dt 30.
        let mixed = t(
            &[2, 5],
            &[40.0, 1.0, 1.0, 1.0, 30.0, 40.0, 1.0, 1.0, 1.0, 30.0],
        );
        let host = {
            let mut h = BatchInputs::build(
                16,
                &[crate::backend::SeqChunk {
                    tokens: &[0, 0],
                    start_pos: 0,
                    block_table: &[1],
                    logits_rows: vec![],
                }],
            );
            h.states = vec![StatePlan::lone(0)];
            h
        };
        let (mut conv_state, mut ssm_state) = (t(&[1, 3], &[0.0; 3]), t(&[1, 1], &[0.0]));
        let mut out = t(&[2, 1], &[0.0; 2]);
        mamba2(
            &mut out,
            &mixed,
            &layer,
            &mut conv_state,
            &mut ssm_state,
            &host,
        )
        .expect("op");
        // S = 0.25·silu(1)·silu(1), then e^{−0.25}·S + the same again.
        let w = 0.25 * silu(1.0) * silu(1.0);
        let want = (-0.25f32).exp() * w + w;
        close(&ssm_state.data, &[want]);
        close(&conv_state.data, &[1.0, 1.0, 1.0]);
    }

    #[test]
    fn the_conv_adds_its_bias_before_the_silu() {
        let x = [1.0, 2.0, 3.0]; // one channel, 3 steps
        let w = [0.5, 1.0]; // K = 2: half the previous input plus the current one
        let mut out = [0f32; 3];
        conv1d_bias_silu(&mut out, &x, &w, &[-1.0]);
        close(&out, &[silu(0.0), silu(1.5), silu(3.0)]);
    }
}
