//! Qwen3.5's linear-attention (Gated DeltaNet) layers over a varlen batch, each sequence's
//! conv window and delta-rule state in its slot of [`StateStorage`] (started each step by
//! [`super::super::recurrent::start_states`]). The mixer itself is the backend's
//! [`HybridOps::gated_delta_net`].

use crate::backend::{BatchInputs, GdnLayer, HybridOps, Result};
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
}
