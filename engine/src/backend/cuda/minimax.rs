//! Launchers for MiniMax-M2's experts (`fused_moe_sigmoid`): `fused_moe`'s launches
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
//! (DeepSeek-V3's `n_group` > 1) has no kernel: it is refused by name. The QK norms over all
//! heads (`rms_norm_cols`) are `norm.rs`'s.

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
        check(
            "fused_moe_sigmoid",
            bias.numel() == e
                && matches!(bias.dtype, DType::BF16 | DType::F32)
                && routing.n_group <= 1
                && routing.top_k <= MAX_TOP_K,
            || {
                format!(
                    "bias {:?} {:?} (want [{e}] bf16 or f32), {} expert groups (want 1: \
                     group-limited routing has no CUDA kernel), top-{} (at most {MAX_TOP_K})",
                    bias.shape, bias.dtype, routing.n_group, routing.top_k
                )
            },
        )?;
        let mut widened = None;
        let bias = self.as_dtype(bias, DType::F32, &mut widened)?;
        let scoring = Scoring::Sigmoid {
            bias: bias.ptr(&self.stream),
            norm_topk_prob: routing.norm_topk_prob,
            scaling: routing.scaling,
        };
        self.moe_op(
            out,
            x,
            router_logits,
            experts,
            (routing.top_k, scoring),
            None,
        )
    }
}
