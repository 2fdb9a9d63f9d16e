//! Launchers for Nemotron-H's routed experts (`HybridOps::fused_moe_relu2`, its `E` layers):
//! MiniMax-M2's sigmoid routing (`minimax.rs`) in front of experts that are not gated, each
//! `down[e] · relu(up[e] · x)²` with `up` `[E, I, H]` and `down` `[E, H, I]`. They are
//! `fused_moe`'s launches (`moe.rs`, `MoePlan::choose_cuda_cores`) with the one gate|up kernel
//! swapped:
//!
//! 1-2. each token's top-k by `sigmoid(logit) + bias[e]` among its kept expert groups, weighted
//!      by the sigmoid scores (renormalised when asked) times the scaling, grouped by expert:
//!      `moe_plan_one_sigmoid_*`, `moe_plan_sigmoid_*`, or `moe_route_sigmoid_*` + `moe_group*`
//!      (+ `moe_active`), by the step's size, as `fused_moe_sigmoid`'s;
//! 3.   `moe_up_relu2_*`: `moe_gate_up_*`'s body (moe_decode.cu's `moe_gate_up_impl`) with one
//!      weight row an output (`MoeRelu2Act`'s fan 1) and relu(u)² in place of SiLU, rounded to
//!      the activation type into act `[T·k, I]` (pair rows);
//! 4-5. down and the weighted sum exactly as `fused_moe`'s on the CUDA cores: one launch
//!      (`moe_down_combine_*`, decode steps of up to 8 tokens) or `moe_down_*` + `moe_combine`.
//!
//! Expert types: bf16 and FP8 (e4m3 with the loader's 128-column block scales), 16-byte loads
//! where rows allow (`_vec`) and the scalar loop otherwise; f32 on the float32 path; NVFP4 and
//! MXFP4 stacks kept packed (`moe_fp4.cu`'s `moe_up_relu2_{nvfp4,mxfp4}`, rows of a multiple
//! of 32 values; a stray FP4 stack is widened to bf16 for the step, as `fused_moe` does).
//! Nothing waits on the host, so a decode step is captured into a CUDA graph as `fused_moe`'s.
//!
//! Not done: the tensor-core routes. Every step runs on the CUDA cores, prefill chunks too,
//! where `fused_moe`'s SiLU experts move to `moe_mma.cu` (a 2048-token 30B-A3B chunk: 15.4 ms a
//! layer on the CUDA cores against 1.2 on tensor cores, moe.cu's header); a relu² build of the
//! small-step `_small_any` and 64-row mma kernels needs their bodies to take a fan-1 functor,
//! and the one-token `moe_gate_up_dec_*` a fan parameter. Speed on a GPU: not yet measured.

use super::CudaBackend;
use super::moe::{ExpertAct, MAX_TOP_K};
use super::tensor::CudaTensor;
use crate::backend::{Result, SigmoidRouting, moe_relu2_dims};

const OP: &str = "fused_moe_relu2";

impl CudaBackend {
    /// [`crate::backend::HybridOps::fused_moe_relu2`] (see the module's comment). `out`
    /// becomes `[T, H]` f32 as `fused_moe`'s; `bias` `[E]` bf16 or f32; `up` and `down` of one
    /// type (bf16, FP8, NVFP4, MXFP4, or f32 with f32 activations).
    pub(super) fn fused_moe_relu2_op(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        router_logits: &CudaTensor,
        bias: &CudaTensor,
        (up, down): (&CudaTensor, &CudaTensor),
        routing: SigmoidRouting,
    ) -> Result<()> {
        let dims = moe_relu2_dims(
            &out.shape,
            &x.shape,
            &router_logits.shape,
            (&up.shape, &down.shape),
            routing.top_k,
            MAX_TOP_K,
        )?;
        let mut widened = None;
        let scoring = self.sigmoid_scoring(OP, bias, routing, dims.2, &mut widened)?;
        let how = (routing.top_k, scoring, ExpertAct::Relu2);
        self.moe_run(out, x, router_logits, (up, down), dims, how, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ungated_stacks_are_checked_with_the_routing_kernels_top_k() {
        // Nemotron 3 Nano's layer: hidden 2688, 128 experts of 1856, top-6, 5 tokens.
        let (x, logits) = ([5, 2688], [5, 128]);
        let (up, down) = ([128, 1856, 2688], [128, 2688, 1856]);
        let dims = moe_relu2_dims(&x, &x, &logits, (&up, &down), 6, MAX_TOP_K).expect("fits");
        assert_eq!(dims, (5, 2688, 128, 1856));
        // A gate|up stack (SwiGLU's [E, 2I, H]) is not an up stack.
        let gated = [128, 2 * 1856, 2688];
        let err =
            moe_relu2_dims(&x, &x, &logits, (&gated, &down), 6, MAX_TOP_K).expect_err("gated");
        assert!(err.to_string().contains("up [E, I, H]"), "{err}");
        // top-k past the routing kernels' registers, or zero.
        assert!(moe_relu2_dims(&x, &x, &logits, (&up, &down), MAX_TOP_K + 1, MAX_TOP_K).is_err());
        assert!(moe_relu2_dims(&x, &x, &logits, (&up, &down), 0, MAX_TOP_K).is_err());
        // Logits of another step, out unlike x.
        assert!(moe_relu2_dims(&x, &x, &[4, 128], (&up, &down), 6, MAX_TOP_K).is_err());
        assert!(moe_relu2_dims(&[5, 2687], &x, &logits, (&up, &down), 6, MAX_TOP_K).is_err());
        // No tokens: fine (nothing is launched).
        let none = [0, 2688];
        assert_eq!(
            moe_relu2_dims(&none, &none, &[0, 128], (&up, &down), 6, MAX_TOP_K).expect("empty"),
            (0, 2688, 128, 1856)
        );
    }
}
