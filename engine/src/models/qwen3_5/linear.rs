//! Qwen3.5's linear-attention (Gated DeltaNet) layers over a varlen batch, each sequence's
//! conv window and delta-rule state in its slot of [`StateStorage`], and the start of each
//! step's slots from the batch's [`StatePlan`](crate::kv_cache::StatePlan)s.

use crate::backend::cpu::CpuTensor;
use crate::backend::cpu::hybrid;
use crate::backend::{Backend, BatchInputs, CpuBackend, Result};
use crate::kv_cache::StateInit;
use crate::models::StateStorage;

use super::{LinearAttn, Qwen3_5, shape_err};

impl Qwen3_5 {
    /// Gated DeltaNet over the batch: `out = out_proj(gated_norm(delta_rule(conv(qkv)), z))`,
    /// the conv and the recurrence sequence by sequence from (and into) each one's slot.
    pub(super) fn linear_attention(
        &self,
        out: &mut CpuTensor,
        xn: &CpuTensor,
        a: &LinearAttn,
        host: &BatchInputs,
        state: &mut StateStorage<CpuBackend>,
    ) -> Result<()> {
        let b = CpuBackend::default();
        let s = self.config.linear;
        let t = xn.rows();
        let cd = self.config.conv_dim();
        let (kd, vd) = (s.nk * s.dk, s.nv * s.dv);
        let width = cd + vd + 2 * s.nv;
        // qkv | z | b | a = xn · in_projᵀ  [T, C + nv·dv + 2·nv]
        let mut mixed = b.zeros(&[t, width])?;
        b.matmul(&mut mixed, xn, &a.in_proj)?;
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
        let beta: Vec<f32> = col(cd + vd, s.nv)
            .iter()
            .map(|x| 1.0 / (1.0 + (-x).exp()))
            .collect();
        let g: Vec<f32> = col(cd + vd + s.nv, s.nv)
            .chunks(s.nv)
            .flat_map(|r| {
                r.iter()
                    .zip(&a.dt_bias)
                    .zip(&a.neg_a)
                    .map(|((x, d), na)| na * softplus(x + d))
            })
            .collect();
        let window_len = (self.config.conv_kernel - 1) * cd;
        let conv_state = &mut state.conv[a.state].data; // [slots, K−1, C]
        let recurrent = &mut state.recurrent[a.state].data; // [slots, nv, dk, dv]
        let rec_len = s.nv * s.dk * s.dv;
        let mut core = vec![0f32; t * vd]; // [T, nv, dv]
        for (seq, plan) in host.states.iter().enumerate() {
            let (r0, r1) = (
                host.seq_starts[seq] as usize,
                host.seq_starts[seq + 1] as usize,
            );
            let slot = plan.slot as usize;
            // The chunk in pieces that end where a checkpoint is saved.
            let mut lo = 0;
            let ends = plan
                .saves
                .iter()
                .map(|sv| (sv.after as usize, Some(sv.slot)));
            for (hi, save) in ends.chain([(r1 - r0, None)]) {
                if hi > lo {
                    // conv = silu(causal depthwise conv(window | qkv))  [K−1 + n, C], whose
                    // first K−1 rows (the window's own) are dropped; the window becomes the
                    // last K−1 inputs.
                    let window = &mut conv_state[slot * window_len..][..window_len];
                    let mut input = window.to_vec();
                    input.extend_from_slice(&qkv[(r0 + lo) * cd..(r0 + hi) * cd]);
                    let mut conv = vec![0f32; input.len()];
                    hybrid::causal_conv1d_silu(&mut conv, &input, &a.conv, cd);
                    window.copy_from_slice(&input[input.len() - window_len..]);
                    let conv = &conv[window_len..];
                    let split = |from: usize, n: usize| -> Vec<f32> {
                        conv.chunks(cd)
                            .flat_map(|r| r[from..from + n].iter().copied())
                            .collect()
                    };
                    let (q, k, v) = (split(0, kd), split(kd, kd), split(2 * kd, vd));
                    // core = gated delta rule over the piece, from the slot's state
                    hybrid::gated_delta_rule(
                        &mut core[(r0 + lo) * vd..(r0 + hi) * vd],
                        &mut recurrent[slot * rec_len..][..rec_len],
                        &q,
                        &k,
                        &v,
                        &g[(r0 + lo) * s.nv..(r0 + hi) * s.nv],
                        &beta[(r0 + lo) * s.nv..(r0 + hi) * s.nv],
                        s,
                    );
                    lo = hi;
                }
                // The state after `hi` tokens is a prefix checkpoint.
                if let Some(to) = save {
                    let to = to as usize;
                    copy_slot(conv_state, window_len, slot, to);
                    copy_slot(recurrent, rec_len, slot, to);
                }
            }
        }
        // normed = rmsnorm(core) · w · silu(z); out = normed · out_projᵀ
        let mut normed = b.zeros(&[t, vd])?;
        hybrid::gated_rms_norm(
            &mut normed.data,
            &core,
            &z,
            &a.norm,
            self.config.base.rms_norm_eps,
        );
        b.matmul(out, &normed, &a.out)
    }

    /// Checks the batch's state plans against the slots, then starts each sequence's state:
    /// zeros at position 0, a copy of a checkpoint, or as the last step left it.
    pub(super) fn start_states(
        &self,
        host: &BatchInputs,
        state: &mut StateStorage<CpuBackend>,
    ) -> Result<()> {
        if host.states.len() != host.num_seqs() {
            return Err(shape_err(format!(
                "{} state plans for {} sequences: every sequence of a hybrid model needs a \
                 state slot",
                host.states.len(),
                host.num_seqs()
            )));
        }
        let n = state.num_slots as u32;
        for (seq, plan) in host.states.iter().enumerate() {
            let len = host.seq_starts[seq + 1] - host.seq_starts[seq];
            let copy = match plan.init {
                StateInit::Copy(from) => Some(from),
                _ => None,
            };
            let bad_slot = [plan.slot]
                .into_iter()
                .chain(copy)
                .chain(plan.saves.iter().map(|s| s.slot))
                .find(|&s| s >= n);
            if let Some(s) = bad_slot {
                return Err(shape_err(format!(
                    "state slot {s} is outside the {n} slots"
                )));
            }
            if !plan.saves.is_sorted_by_key(|s| s.after)
                || plan.saves.iter().any(|s| s.after == 0 || s.after > len)
            {
                return Err(shape_err(format!(
                    "checkpoint saves {:?} do not fall inside a chunk of {len} tokens",
                    plan.saves
                )));
            }
        }
        for plan in &host.states {
            let slot = plan.slot as usize;
            for t in state.conv.iter_mut().chain(state.recurrent.iter_mut()) {
                let len = t.cols();
                match plan.init {
                    StateInit::Continue => {}
                    StateInit::Zero => t.data[slot * len..][..len].fill(0.0),
                    StateInit::Copy(from) => copy_slot(&mut t.data, len, from as usize, slot),
                }
            }
        }
        Ok(())
    }
}

/// Copy slot `from`'s `len` elements over slot `to`'s.
pub(super) fn copy_slot(data: &mut [f32], len: usize, from: usize, to: usize) {
    if from != to {
        data.copy_within(from * len..(from + 1) * len, to * len);
    }
}

/// `log(1 + eˣ)`, linear above 20 as torch's `softplus` is.
fn softplus(x: f32) -> f32 {
    if x > 20.0 { x } else { x.exp().ln_1p() }
}
