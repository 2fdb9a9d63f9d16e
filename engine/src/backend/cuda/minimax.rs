//! Launchers for MiniMax-M2's and DeepSeek-V3's experts (`fused_moe_sigmoid`): `fused_moe`'s launches
//! (`moe.rs`) with stage 1 scored by sigmoid and the correction bias (`moe.cu`'s `MoeSigmoid`:
//! `moe_route_sigmoid_*`, `moe_plan_sigmoid_*`, `moe_plan_one_sigmoid_*`):
//!
//! 1-2. each token's top-k by `sigmoid(logit) + bias[e]` (the f32 sum's bits, ties to the
//!      lower index, as the CPU reference), weighted by the sigmoid scores (renormalised over
//!      the chosen when asked) times the scaling; grouped and listed as `fused_moe`'s, by the
//!      route `MoePlan::choose` names for the step (never the fused router: the logits are
//!      given);
//! 3-5. the experts and the weighted sum exactly as `fused_moe`'s: bf16 and FP8 experts, the
//!      CUDA-core and tensor-core kernels, the float32 path's, whichever the plan names.
//!
//! So a decode step is captured into a CUDA graph as Qwen3-MoE's is. Group-limited routing
//! (DeepSeek-V3's `n_group` > 1) is the same launches: `MoeSigmoid` first keeps the token's
//! `topk_group` best groups (moe_score.cu), at most 32 groups. The QK norms over all heads
//! (`rms_norm_cols`) are `norm.rs`'s.

use super::moe::{MAX_TOP_K, Scoring};
use super::tensor::{CudaTensor, DType};
use super::{CudaBackend, check};
use crate::backend::{Result, SigmoidRouting};

impl CudaBackend {
    /// [`crate::backend::Backend::fused_moe_sigmoid`] (see the module's comment). `out`
    /// becomes `[T, H]` f32 as `fused_moe`'s; `bias` `[E]` is read as f32 (a bf16 one is
    /// widened first: the model uploads it with `upload_f32_weight`, so it never is there).
    pub(super) fn fused_moe_sigmoid_op(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        router_logits: &CudaTensor,
        bias: &CudaTensor,
        experts: (&CudaTensor, &CudaTensor),
        routing: SigmoidRouting,
    ) -> Result<()> {
        let e = router_logits.shape.get(1).copied().unwrap_or(0);
        let mut widened = None;
        let scoring = self.sigmoid_scoring("fused_moe_sigmoid", bias, routing, e, &mut widened)?;
        self.moe_op(
            out,
            x,
            router_logits,
            experts,
            (routing.top_k, scoring),
            None,
        )
    }

    /// Stage 1's [`Scoring::Sigmoid`] for `routing` over `e` experts with the correction
    /// `bias` (`[E]` bf16 or f32), checked as the CPU reference checks it (and the kernels'
    /// limits: at most [`MAX_GROUPS`] groups, top-k at most [`MAX_TOP_K`]); a bf16 bias is
    /// widened to f32 into `widened`, which must outlive the launches.
    /// `fused_moe_sigmoid` and Nemotron-H's `fused_moe_relu2` (`nemotron_moe.rs`).
    pub(super) fn sigmoid_scoring(
        &self,
        op: &'static str,
        bias: &CudaTensor,
        routing: SigmoidRouting,
        e: usize,
        widened: &mut Option<CudaTensor>,
    ) -> Result<Scoring> {
        check(
            op,
            bias.numel() == e
                && matches!(bias.dtype, DType::BF16 | DType::F32)
                && groups_fit(routing, e)
                && routing.top_k <= MAX_TOP_K,
            || {
                format!(
                    "bias {:?} {:?} (want [{e}] bf16 or f32), {} groups with {} kept, top-{} of \
                     {e} experts (want groups that divide the experts, at most {MAX_GROUPS}, at \
                     least 2 experts a group, 1 <= kept <= groups, top-k within the kept \
                     groups' experts and at most {MAX_TOP_K})",
                    bias.shape, bias.dtype, routing.n_group, routing.topk_group, routing.top_k
                )
            },
        )?;
        let groups = (
            i32::try_from(routing.n_group.max(1)).unwrap_or(1),
            i32::try_from(routing.topk_group.max(1)).unwrap_or(1),
        );
        let bias = self.as_dtype(bias, DType::F32, widened)?;
        Ok(Scoring::Sigmoid {
            bias: bias.ptr(&self.stream),
            norm_topk_prob: routing.norm_topk_prob,
            scaling: routing.scaling,
            groups,
        })
    }
}

/// Most expert groups the routing kernels take (`MoeSigmoid`'s mask of kept groups is one u32).
const MAX_GROUPS: usize = 32;

/// Whether `routing`'s groups fit `e` experts as the CPU reference asks (groups that divide the
/// experts, at least two experts a group, 1 <= kept <= groups, top-k within the kept groups'
/// experts) and the kernels' mask holds them. One group (MiniMax-M2) always fits.
fn groups_fit(routing: SigmoidRouting, e: usize) -> bool {
    let (g, kg) = (routing.n_group, routing.topk_group);
    g <= 1
        || (g <= MAX_GROUPS
            && e.is_multiple_of(g)
            && e / g >= 2
            && (1..=g).contains(&kg)
            && routing.top_k <= kg * (e / g))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_fit_as_the_cpu_checks_them() {
        let r = |n_group, topk_group, top_k| SigmoidRouting {
            n_group,
            topk_group,
            ..SigmoidRouting::ungrouped(top_k, true, 2.5)
        };
        // DeepSeek-V3: 256 experts in 8 groups, 4 kept, top-8; MiniMax-M2: one group.
        assert!(groups_fit(r(8, 4, 8), 256));
        assert!(groups_fit(r(1, 1, 8), 256));
        // The tiny fixture: 8 experts in 4 groups of 2, 2 kept, top-2.
        assert!(groups_fit(r(4, 2, 2), 8));
        assert!(!groups_fit(r(3, 2, 2), 8), "groups must divide the experts");
        assert!(
            !groups_fit(r(8, 2, 2), 8),
            "one expert a group has no top two"
        );
        assert!(
            !groups_fit(r(4, 1, 3), 8),
            "top-k beyond the kept groups' experts"
        );
        assert!(!groups_fit(r(4, 5, 2), 8), "more kept groups than groups");
        assert!(
            !groups_fit(r(64, 4, 8), 256),
            "more groups than the mask's 32 bits"
        );
    }
}
