//! The CPU ops of Qwen3.5's linear-attention layers (`models/qwen3_5.rs`), plain f32 Rust
//! written from the math transformers 5.17 runs (`modeling_qwen3_5.py`), for one sequence's
//! piece of a batch:
//!
//! - [`causal_conv1d_silu`]: Gated DeltaNet's causal depthwise convolution over time, then SiLU.
//! - [`gated_delta_rule`]: the recurrence `S_t = S_{t-1}·exp(g_t)·(I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ`
//!   with L2-normalised q and k, read out as `o_t = S_tᵀ q_t / √d_k`.
//! - [`gated_rms_norm`]: RMSNorm of each head's output, times `w`, times `silu(z)`.
//!
//! The state between calls (the conv window and the recurrent state) is the caller's: the
//! sequence's slot in the engine's state pool. The gated attention layers run on the backend's
//! Qwen3 ops (partial rotary through `RopeTables::rotary_dim`, paged attention).

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

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: DeltaHeads = DeltaHeads {
        nk: 1,
        dk: 4,
        nv: 1,
        dv: 3,
    };

    /// Run the rule over `k`, `v` (one head), reading with each token's own key.
    fn read_back(k: &[f32], v: &[f32], g: &[f32], beta: &[f32]) -> Vec<f32> {
        let mut out = vec![0f32; v.len()];
        let mut state = vec![0f32; ONE.dk * ONE.dv];
        gated_delta_rule(&mut out, &mut state, k, k, v, g, beta, ONE);
        out
    }

    fn close(got: &[f32], want: &[f32]) {
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-5, "got {got:?}, want {want:?}");
        }
    }

    /// What makes it a delta rule: writing a second value under the same key replaces the
    /// first (plain linear attention would return their sum), and a decay of e^g scales
    /// what was stored.
    #[test]
    fn a_key_written_twice_reads_the_last_value_and_decay_scales_it() {
        let k = [1.0, 2.0, 0.0, 2.0, 1.0, 2.0, 0.0, 2.0, 1.0, 2.0, 0.0, 2.0]; // one key, 3 times
        let v = [1.0, -2.0, 3.0, 4.0, 5.0, -6.0, 0.0, 0.0, 0.0];
        let s = 1.0 / 2.0; // 1/√dk
        let half = 0.5f32.ln();
        // token 0 writes v0; token 1 overwrites with v1 (β = 1); token 2 only decays (β = 0)
        let out = read_back(&k, &v, &[0.0, 0.0, half], &[1.0, 1.0, 0.0]);
        close(&out[..3], &[s, -2.0 * s, 3.0 * s]);
        close(&out[3..6], &[4.0 * s, 5.0 * s, -6.0 * s]);
        close(&out[6..], &[2.0 * s, 2.5 * s, -3.0 * s]);
    }

    /// The state a call leaves is where the next call starts: two halves give the whole.
    #[test]
    fn carrying_the_state_across_calls_equals_one_call() {
        let s = DeltaHeads {
            nk: 2,
            dk: 4,
            nv: 4,
            dv: 3,
        };
        let t = 6;
        let mut seed = 7u32;
        let mut rand = |n: usize| -> Vec<f32> {
            (0..n)
                .map(|_| {
                    seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
                })
                .collect()
        };
        let (q, k, v) = (
            rand(t * s.nk * s.dk),
            rand(t * s.nk * s.dk),
            rand(t * s.nv * s.dv),
        );
        let g: Vec<f32> = rand(t * s.nv).iter().map(|x| -x.abs()).collect();
        let beta: Vec<f32> = rand(t * s.nv).iter().map(|x| x + 0.5).collect();
        let mut whole = vec![0f32; t * s.nv * s.dv];
        let mut state = vec![0f32; s.nv * s.dk * s.dv];
        gated_delta_rule(&mut whole, &mut state, &q, &k, &v, &g, &beta, s);
        let mut halves = vec![0f32; t * s.nv * s.dv];
        let mut carried = vec![0f32; s.nv * s.dk * s.dv];
        let h = t / 2;
        let (qk, vd, gb) = (s.nk * s.dk, s.nv * s.dv, s.nv);
        for (lo, hi) in [(0, h), (h, t)] {
            gated_delta_rule(
                &mut halves[lo * vd..hi * vd],
                &mut carried,
                &q[lo * qk..hi * qk],
                &k[lo * qk..hi * qk],
                &v[lo * vd..hi * vd],
                &g[lo * gb..hi * gb],
                &beta[lo * gb..hi * gb],
                s,
            );
        }
        close(&halves, &whole);
        close(&carried, &state);
    }

    #[test]
    fn the_conv_is_causal_and_looks_back_k_minus_one_steps() {
        // Two channels over 5 steps; channel 0's taps pick the newest input, channel 1's the
        // oldest in its window (3 steps back, zero before the sequence).
        let x: Vec<f32> = (1..=10).map(|i| i as f32).collect(); // [5, 2]
        let w = [0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0]; // [2, 4]
        let mut out = vec![0f32; 10];
        causal_conv1d_silu(&mut out, &x, &w, 2);
        for t in 0..5 {
            close(&[out[2 * t]], &[silu(x[2 * t])]);
            let back = if t >= 3 {
                silu(x[2 * (t - 3) + 1])
            } else {
                0.0
            };
            close(&[out[2 * t + 1]], &[back]);
        }
    }
}

/// The hybrid ops on the CPU: the reference the other backends are checked against.
mod ops {
    use super::super::slots::{Slots, check_plans, copy_row, for_each_piece};
    use super::super::{CpuBackend, CpuTensor, check};
    use super::{causal_conv1d_silu, gated_delta_rule, gated_rms_norm};
    use crate::backend::{BatchInputs, GdnLayer, HybridOps, Mamba2Layer, Result, SigmoidRouting};

    fn sigmoid(x: f32) -> f32 {
        1.0 / (1.0 + (-x).exp())
    }

    /// `log(1 + eˣ)`, linear above 20 as torch's `softplus` is.
    fn softplus(x: f32) -> f32 {
        if x > 20.0 { x } else { x.exp().ln_1p() }
    }

    fn same_shape(op: &'static str, a: &CpuTensor, b: &CpuTensor) -> Result<()> {
        check(op, a.shape == b.shape, || {
            format!("{:?} and {:?} differ", a.shape, b.shape)
        })
    }

    impl HybridOps for CpuBackend {
        fn upload_f32(&self, shape: &[usize], data: &[f32]) -> Result<CpuTensor> {
            check(
                "upload_f32",
                shape.iter().product::<usize>() == data.len(),
                || format!("{} values for {shape:?}", data.len()),
            )?;
            Ok(CpuTensor::new(shape.to_vec(), data.to_vec()))
        }

        fn zeros_f32(&self, shape: &[usize]) -> Result<CpuTensor> {
            let n = shape.iter().product();
            Ok(CpuTensor::new(shape.to_vec(), vec![0.0; n]))
        }

        fn sigmoid_mul(&self, x: &mut CpuTensor, gate: &CpuTensor) -> Result<()> {
            same_shape("sigmoid_mul", x, gate)?;
            x.data
                .iter_mut()
                .zip(&gate.data)
                .for_each(|(x, g)| *x *= sigmoid(*g));
            Ok(())
        }

        fn add_assign(&self, x: &mut CpuTensor, y: &CpuTensor) -> Result<()> {
            same_shape("add_assign", x, y)?;
            x.data.iter_mut().zip(&y.data).for_each(|(x, y)| *x += y);
            Ok(())
        }

        fn add_gated(
            &self,
            out: &mut CpuTensor,
            routed: &CpuTensor,
            gate: &CpuTensor,
        ) -> Result<()> {
            same_shape("add_gated", out, routed)?;
            check("add_gated", gate.shape == [out.rows(), 1], || {
                format!("gate {:?} for out {:?}", gate.shape, out.shape)
            })?;
            let h = out.cols();
            for ((o, r), g) in out
                .data
                .chunks_mut(h)
                .zip(routed.data.chunks(h))
                .zip(&gate.data)
            {
                let g = sigmoid(*g);
                o.iter_mut().zip(r).for_each(|(o, r)| *o = r + g * *o);
            }
            Ok(())
        }

        fn state_row(&self, t: &mut CpuTensor, from: Option<usize>, to: usize) -> Result<()> {
            let (rows, len) = (t.rows(), t.cols());
            check(
                "state_row",
                to < rows && from.is_none_or(|f| f < rows),
                || format!("rows {from:?} -> {to} of {rows}"),
            )?;
            match from {
                Some(f) => copy_row(&mut t.data, len, f, to),
                None => t.data[to * len..(to + 1) * len].fill(0.0),
            }
            Ok(())
        }

        fn gated_delta_net(
            &self,
            out: &mut CpuTensor,
            mixed: &CpuTensor,
            layer: &GdnLayer<'_, CpuTensor>,
            conv_state: &mut CpuTensor,
            recurrent: &mut CpuTensor,
            host: &BatchInputs,
            _batch: &BatchInputs,
        ) -> Result<()> {
            let s = layer.heads;
            let t = mixed.rows();
            let (kd, vd) = (s.nk * s.dk, s.nv * s.dv);
            let cd = 2 * kd + vd;
            let width = cd + vd + 2 * s.nv;
            let window_len = (layer.kernel - 1) * cd;
            let rec_len = s.nv * s.dk * s.dv;
            check(
                "gated_delta_net",
                mixed.cols() == width
                    && out.shape == [t, vd]
                    && layer.conv.data.len() == cd * layer.kernel
                    && conv_state.cols() == window_len
                    && recurrent.cols() == rec_len
                    && conv_state.rows() == recurrent.rows()
                    && host.states.len() == host.num_seqs()
                    && host.num_tokens() == t,
                || {
                    format!(
                        "mixed {:?}, out {:?}, conv state {:?}, recurrent {:?}, {} plans for \
                         {} sequences",
                        mixed.shape,
                        out.shape,
                        conv_state.shape,
                        recurrent.shape,
                        host.states.len(),
                        host.num_seqs()
                    )
                },
            )?;
            check_plans("gated_delta_net", host, conv_state.rows())?;
            let col = |lo: usize, n: usize| -> Vec<f32> {
                mixed
                    .data
                    .chunks(width)
                    .flat_map(|r| r[lo..lo + n].iter().copied())
                    .collect()
            };
            let qkv = col(0, cd); // [T, C]
            let z = col(cd, vd); // [T, nv·dv]
            // beta = sigmoid(b); g = −exp(A_log) · softplus(a + dt_bias)  [T, nv]
            let beta: Vec<f32> = col(cd + vd, s.nv).iter().map(|&x| sigmoid(x)).collect();
            let g: Vec<f32> = col(cd + vd + s.nv, s.nv)
                .chunks(s.nv)
                .flat_map(|r| {
                    r.iter()
                        .zip(&layer.dt_bias.data)
                        .zip(&layer.neg_a.data)
                        .map(|((x, d), na)| na * softplus(x + d))
                })
                .collect();
            let conv_w = &layer.conv.data;
            let mut core = vec![0f32; t * vd]; // [T, nv, dv]
            let slots = Slots {
                conv: &mut conv_state.data, // [slots, K−1, C]
                window: window_len,
                state: &mut recurrent.data, // [slots, nv, dk, dv]
                state_len: rec_len,
            };
            for_each_piece(host, slots, |window, state, rows| {
                // conv = silu(causal depthwise conv(window | qkv))  [K−1 + n, C], whose first
                // K−1 rows (the window's own) are dropped; the window becomes the last K−1
                // inputs.
                let mut input = window.to_vec();
                input.extend_from_slice(&qkv[rows.start * cd..rows.end * cd]);
                let mut conv = vec![0f32; input.len()];
                causal_conv1d_silu(&mut conv, &input, conv_w, cd);
                window.copy_from_slice(&input[input.len() - window_len..]);
                let conv = &conv[window_len..];
                let split = |from: usize, n: usize| -> Vec<f32> {
                    conv.chunks(cd)
                        .flat_map(|r| r[from..from + n].iter().copied())
                        .collect()
                };
                let (q, k, v) = (split(0, kd), split(kd, kd), split(2 * kd, vd));
                // core = gated delta rule over the piece, from the slot's state
                gated_delta_rule(
                    &mut core[rows.start * vd..rows.end * vd],
                    state,
                    &q,
                    &k,
                    &v,
                    &g[rows.start * s.nv..rows.end * s.nv],
                    &beta[rows.start * s.nv..rows.end * s.nv],
                    s,
                );
            });
            // out = rmsnorm(core) · w · silu(z)
            gated_rms_norm(&mut out.data, &core, &z, &layer.norm.data, layer.eps);
            Ok(())
        }

        fn mamba2(
            &self,
            out: &mut CpuTensor,
            mixed: &CpuTensor,
            layer: &Mamba2Layer<'_, CpuTensor>,
            conv_state: &mut CpuTensor,
            ssm_state: &mut CpuTensor,
            host: &BatchInputs,
            _batch: &BatchInputs,
        ) -> Result<()> {
            super::super::mamba2::mamba2(out, mixed, layer, conv_state, ssm_state, host)
        }

        fn relu2(&self, out: &mut CpuTensor, x: &CpuTensor) -> Result<()> {
            super::super::mamba2::relu2(out, x)
        }

        fn fused_moe_relu2(
            &self,
            out: &mut CpuTensor,
            x: &CpuTensor,
            router_logits: &CpuTensor,
            bias: &CpuTensor,
            experts: (&CpuTensor, &CpuTensor),
            routing: SigmoidRouting,
        ) -> Result<()> {
            super::super::moe::fused_moe_relu2(out, x, router_logits, bias, experts, routing)
        }
    }
}
