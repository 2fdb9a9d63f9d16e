//! Qwen3.5's linear-attention (Gated DeltaNet) layers over a varlen batch, each sequence's
//! conv window and delta-rule state in its slot of [`StateStorage`], and the start of each
//! step's slots from the batch's [`StatePlan`](crate::kv_cache::StatePlan)s. The mixer itself
//! is the backend's [`HybridOps::gated_delta_net`].

use crate::backend::{BatchInputs, GdnLayer, HybridOps, Result};
use crate::kv_cache::StateInit;
use crate::models::StateStorage;

use super::{LinearAttn, Qwen3_5, rows, shape_err};

impl<B: HybridOps> Qwen3_5<B> {
    /// Gated DeltaNet over the batch: `out = out_proj(gated_norm(delta_rule(conv(qkv)), z))`,
    /// the conv and the recurrence sequence by sequence from (and into) each one's slot.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn linear_attention(
        &self,
        b: &B,
        out: &mut B::Tensor,
        xn: &B::Tensor,
        a: &LinearAttn<B>,
        host: &BatchInputs,
        batch: &B::Batch,
        state: &mut StateStorage<B>,
    ) -> Result<()> {
        let s = self.config.linear;
        let t = rows::<B>(b, xn);
        let vd = s.nv * s.dv;
        let width = self.config.conv_dim() + vd + 2 * s.nv;
        // qkv | z | b | a = xn · in_projᵀ  [T, C + nv·dv + 2·nv]
        let mut mixed = b.zeros(&[t, width])?;
        b.matmul(&mut mixed, xn, &a.in_proj)?;
        // normed = gated_norm(delta_rule(silu(conv(qkv))), z)  [T, nv·dv]
        let mut normed = b.zeros(&[t, vd])?;
        let layer = GdnLayer {
            heads: s,
            kernel: self.config.conv_kernel,
            conv: &a.conv,
            neg_a: &a.neg_a,
            dt_bias: &a.dt_bias,
            norm: &a.norm,
            eps: self.config.base.rms_norm_eps,
        };
        let (conv, recurrent) = match (
            state.conv.get_mut(a.state),
            state.recurrent.get_mut(a.state),
        ) {
            (Some(c), Some(r)) => (c, r),
            _ => {
                return Err(shape_err(format!(
                    "state storage has no linear-attention layer {}",
                    a.state
                )));
            }
        };
        b.gated_delta_net(&mut normed, &mixed, &layer, conv, recurrent, host, batch)?;
        // out = normed · out_projᵀ
        b.matmul(out, &normed, &a.out)
    }

    /// Checks the batch's state plans against the slots, then starts each sequence's state:
    /// zeros at position 0, a copy of a checkpoint, or as the last step left it.
    pub(super) fn start_states(
        &self,
        b: &B,
        host: &BatchInputs,
        state: &mut StateStorage<B>,
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
            // A padding row (a graph's bucket) has no slot: it only must not ask for one.
            if plan.is_padding() {
                if !plan.is_plain_continue() {
                    return Err(shape_err(format!(
                        "a padding row's state plan {plan:?} starts or saves a state"
                    )));
                }
                continue;
            }
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
        for plan in host.states.iter().filter(|p| !p.is_padding()) {
            let slot = plan.slot as usize;
            let from = match plan.init {
                StateInit::Continue => continue,
                StateInit::Zero => None,
                StateInit::Copy(from) => Some(from as usize),
            };
            for t in state.conv.iter_mut().chain(state.recurrent.iter_mut()) {
                b.state_row(t, from, slot)?;
            }
        }
        Ok(())
    }
}
