//! `fused_moe` (`moe.cu`): route, group by expert (and list the experts used), the experts'
//! gate|up + SiLU and down, and the weighted sum, in launches that never wait on the host, so a
//! decode step with mixture-of-experts layers is captured into a CUDA graph like a dense one:
//! three at decode sizes (`moe_plan`, or `moe_plan_one` by one warp for one token; gate_up,
//! `moe_gate_up_dec_*` for one token; `moe_down_combine`: at most `PLAN_MAX_PAIRS` pairs and
//! `FUSED_DOWN_TOKENS` tokens), four up to `PLAN_MAX_PAIRS` pairs, six beyond. All
//! give the same output bit for bit. Steps with many tokens an expert run gate|up and down on
//! tensor cores instead (`moe_mma.rs`), between the same routing and weighted sum. Which of
//! these a step runs is one choice, `backend/moe_plan.rs`'s `MoePlan::choose`. Every scratch
//! buffer is sized by the step's tokens (`T · top_k` pairs), which a graph's batch bucket fixes.
//!
//! On the float32 path the experts are f32 (`_fp32` kernels: f32 x rows and SiLU products,
//! always on the CUDA cores); bf16, FP8 and FP4 experts read bf16 activations. NVFP4 and
//! MXFP4 expert stacks stay packed (`moe_fp4.rs`). Nemotron-H's un-gated relu² experts
//! (`nemotron_moe.rs`) are these launches with `moe_up_relu2_*` for gate|up ([`ExpertAct`]).

use cudarc::driver::DevicePtr;

use super::elementwise::{cfg, dim, int, stride_cfg};
use super::moe_fp4::fp4_pair;
use super::tensor::{CudaTensor, DType};
use super::{CudaBackend, check};
use crate::backend::Result;
use crate::backend::kernels::{self, Kernel};
use crate::backend::moe_plan::{
    self, CoreBuild, Down, ExpertType, Experts, GateUp, MoePlan, MoeShape, Route,
};

/// Most experts a token may take (`MOE_MAX_TOP_K` in moe.cu: the routing kernel keeps its
/// choices in registers).
pub(super) const MAX_TOP_K: usize = 16;
/// Warps (= output rows) of an expert block (`MOE_WARPS` in moe.cu).
const WARPS: usize = 8;

/// What the experts apply between their two products (prelude/moe_act.cuh): SwiGLU over
/// gate|up stacks `[E, 2I, H]` (`fused_moe`, `fused_moe_sigmoid`), or relu² over un-gated up
/// stacks `[E, I, H]` (Nemotron-H's `fused_moe_relu2`: the `moe_up_relu2_*` kernels, CUDA cores
/// only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ExpertAct {
    Silu,
    Relu2,
}

/// How stage 1 scores a token's experts (`MoeSoftmax` and `MoeSigmoid` in moe.cu); the launches
/// after it are the same for both.
#[derive(Debug, Clone, Copy)]
pub(super) enum Scoring {
    /// Top-k by logit, weighted by the softmax over all experts (renormalised over the chosen
    /// when `norm_topk_prob`): `fused_moe`, `fused_moe_clamped`.
    Softmax { norm_topk_prob: bool },
    /// Top-k by `sigmoid(logit) + bias[e]` among the experts of the token's `groups.1` best of
    /// `groups.0` expert groups ((1, 1): all experts), weighted by the sigmoid (renormalised
    /// when `norm_topk_prob`) times `scaling`: `fused_moe_sigmoid`. `bias` is the device
    /// address of E f32 values.
    Sigmoid {
        bias: u64,
        norm_topk_prob: bool,
        scaling: f32,
        groups: (i32, i32),
    },
}

impl Scoring {
    fn norm(self) -> i32 {
        match self {
            Scoring::Softmax { norm_topk_prob } | Scoring::Sigmoid { norm_topk_prob, .. } => {
                i32::from(norm_topk_prob)
            }
        }
    }
}

/// Stages 1-2's scratch, alive as long as this is: the pairs' experts (i32 [T·k]) and
/// weights ([T·k]), the experts' offsets (i32 [E + 1]), the permutation (i32 [T·k]) and the
/// used experts with their count last (i32 [E + 1]); `ptrs` in that order, `moe_route`'s.
pub(super) struct RouteScratch {
    _tensors: [CudaTensor; 5],
    pub(super) ptrs: (u64, u64, u64, u64, u64),
}

impl CudaBackend {
    pub(super) fn route_scratch(&self, pairs: usize, e: usize) -> Result<RouteScratch> {
        let s = &self.stream;
        let t = [
            self.alloc(&[pairs], DType::F32)?,
            self.alloc(&[pairs], DType::F32)?,
            self.alloc(&[e + 1], DType::F32)?,
            self.alloc(&[pairs], DType::F32)?,
            self.alloc(&[e + 1], DType::F32)?,
        ];
        let ptrs = (
            t[0].ptr(s),
            t[1].ptr(s),
            t[2].ptr(s),
            t[3].ptr(s),
            t[4].ptr(s),
        );
        Ok(RouteScratch { _tensors: t, ptrs })
    }
}

/// A launch of the CUDA-core expert kernels (`moe_gate_up_*`, `moe_down_*`): a warp an output
/// row of `rows` (WARPS a block), a block row an active expert.
pub(super) fn expert_rows_cfg(
    rows: usize,
    experts: u32,
    op: &'static str,
) -> Result<cudarc::driver::LaunchConfig> {
    Ok(cfg(
        (dim(rows.div_ceil(WARPS), op)?, experts),
        (32 * WARPS) as u32,
    ))
}
/// Tokens a routing block serves (one warp each).
const ROUTE_TOKENS: usize = 4;
/// Threads of a grouping block.
const GROUP_THREADS: u32 = 256;
/// Threads of the `moe_plan_*` block (`MOE_PLAN_THREADS`).
const PLAN_THREADS: u32 = 1024;
impl CudaBackend {
    /// `routed_moe`: at one token with a bf16 router the router's product and the routing in one
    /// launch (`moe_router_plan_one`) and the experts; the router's `matmul` and `fused_moe`
    /// otherwise.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn routed_moe_op(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        router: &CudaTensor,
        router_logits: &mut CudaTensor,
        (gate_up, down): (&CudaTensor, &CudaTensor),
        top_k: usize,
        norm_topk_prob: bool,
    ) -> Result<()> {
        let fused = router.shape.len() == 2
            && moe_plan::fuses_router(
                x.rows(),
                (router.shape[0], x.cols()),
                router.dtype == DType::BF16,
                expert_type(gate_up.dtype),
                &self.tuning().moe,
            )
            && router.shape[1] == x.cols()
            && router_logits.shape == [1, router.shape[0]];
        if !fused {
            self.matmul_op(router_logits, x, router)?;
            return self.fused_moe_op(out, x, router_logits, gate_up, down, top_k, norm_topk_prob);
        }
        self.set_dtype(router_logits, DType::F32)?;
        self.moe_op(
            out,
            x,
            router_logits,
            (gate_up, down),
            (top_k, Scoring::Softmax { norm_topk_prob }),
            Some(router),
        )
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn fused_moe_op(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        router_logits: &CudaTensor,
        gate_up: &CudaTensor,
        down: &CudaTensor,
        top_k: usize,
        norm_topk_prob: bool,
    ) -> Result<()> {
        self.moe_op(
            out,
            x,
            router_logits,
            (gate_up, down),
            (top_k, Scoring::Softmax { norm_topk_prob }),
            None,
        )
    }

    /// `fused_moe` (and `fused_moe_sigmoid`: `scoring` says how stage 1 routes); with `router`
    /// (one token, bf16 router `[E, H]`, softmax scoring, checked by the caller) the logits
    /// are computed here into `router_logits` (f32) by the fused routing launch.
    pub(super) fn moe_op(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        router_logits: &CudaTensor,
        (gate_up, down): (&CudaTensor, &CudaTensor),
        (top_k, scoring): (usize, Scoring),
        router: Option<&CudaTensor>,
    ) -> Result<()> {
        let dims = crate::backend::moe_dims(
            &out.shape,
            &x.shape,
            &router_logits.shape,
            (&gate_up.shape, &down.shape),
            top_k,
            MAX_TOP_K,
        )?;
        let how = (top_k, scoring, ExpertAct::Silu);
        self.moe_run(out, x, router_logits, (gate_up, down), dims, how, router)
    }

    /// [`Self::moe_op`]'s launches for shapes the caller checked: `dims` (T, H, E, I), x
    /// `[T, H]`, the logits `[T, E]`, the stacks `[E, fan·I, H]` (fan 2 for SiLU, 1 for relu²)
    /// and `[E, H, I]`, 1 <= top_k <= min(E, [`MAX_TOP_K`]); `out` set to `[T, H]` f32. Relu²
    /// experts (`nemotron_moe.rs`) run on the CUDA cores only ([`MoePlan::choose_cuda_cores`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn moe_run(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        router_logits: &CudaTensor,
        (gate_up, down): (&CudaTensor, &CudaTensor),
        (t, h, e, i): (usize, usize, usize, usize),
        (top_k, scoring, act_kind): (usize, Scoring, ExpertAct),
        router: Option<&CudaTensor>,
    ) -> Result<()> {
        // FP4 stacks (NVFP4, MXFP4) stay packed when both are of one format and their rows fit
        // the FP4 kernels; else a stray FP4 one is widened for the step.
        let fp4 = fp4_pair((gate_up, down), (h, i));
        let (mut gate_up_held, mut down_held) = (None, None);
        let gate_up = self.fp4_or_widened(gate_up, fp4, &mut gate_up_held)?;
        let down = self.fp4_or_widened(down, fp4, &mut down_held)?;
        check(
            "fused_moe",
            gate_up.dtype == down.dtype && router_logits.dtype != DType::F8,
            || {
                format!(
                    "gate_up {:?} and down {:?} must both be bf16, fp8, nvfp4, mxfp4 or f32, \
                     router logits ({:?}) bf16 or f32",
                    gate_up.dtype, down.dtype, router_logits.dtype
                )
            },
        )?;
        self.set_dtype(out, DType::F32)?;
        let pairs = t * top_k;
        if pairs == 0 || h == 0 {
            return Ok(());
        }
        let (ti, ei, ki, hi, ii) = (
            int(t, "fused_moe")?,
            int(e, "fused_moe")?,
            int(top_k, "fused_moe")?,
            int(h, "fused_moe")?,
            int(i, "fused_moe")?,
        );
        // The expert kernels read bf16 activations, or f32 ones with f32 experts (the float32
        // path); the SiLU products (act) are of the same type.
        let act_dtype = if gate_up.dtype == DType::F32 {
            DType::F32
        } else {
            DType::BF16
        };
        let mut converted = None;
        let x = self.as_dtype(x, act_dtype, &mut converted)?;
        let s = &self.stream;
        // Scratch: the routing's (route_scratch), the SiLU products (pair rows), and below the
        // experts' outputs (pair rows) when down and the weighted sum are separate launches.
        let scratch = self.route_scratch(pairs, e)?;
        let (idp, wtp, ofp, pmp, acp) = scratch.ptrs;
        let act = self.alloc(&[pairs, i], act_dtype)?; // [T·k, I]: pair rows

        let logits_bf16 = router_logits.dtype == DType::BF16;
        let (w13, w13s) = (gate_up.ptr(s), gate_up.scales_ptr(s));
        let (w2, w2s) = (down.ptr(s), down.scales_ptr(s));
        let tuning = self.tuning().moe;
        let shape = MoeShape {
            t,
            h,
            e,
            i,
            top_k,
            logits_bf16,
            router: router.is_some(),
        };
        let w = expert_type(gate_up.dtype);
        let cc = self.info.compute_capability;
        let plan = match act_kind {
            ExpertAct::Silu => MoePlan::choose(shape, w, cc, &tuning),
            ExpertAct::Relu2 => MoePlan::choose_cuda_cores(shape, w, cc, &tuning),
        };
        check(
            "fused_moe",
            act_kind == ExpertAct::Silu || matches!(plan.experts, Experts::CudaCores { .. }),
            || format!("{act_kind:?} experts have no {:?} kernels", plan.experts),
        )?;
        let routing = (idp, wtp, ofp, pmp, acp);
        self.moe_route(
            plan.route,
            router.map(|r| (r, x, 0)),
            router_logits,
            routing,
            (t, e, top_k, h),
            scoring,
        )?;

        let op = out.ptr(s);
        let (build, gate_up_kernel, down_kernel) = match plan.experts {
            // Decode-sized steps: the small-step tensor-core kernels (16 pairs an expert a
            // chunk), where the 64-row tiles would be mostly empty.
            Experts::SmallMma { build } => {
                let ys = self.moe_experts_small_mma(
                    &act,
                    x,
                    (gate_up, down),
                    (ofp, acp, pmp),
                    (t, h, e, i, top_k),
                    (build, None),
                )?;
                return self.moe_combine(op, ys.ptr(s), wtp, t, (ki, hi));
            }
            // 3-4. The experts: gate|up + SiLU, then down, on tensor cores for steps with many
            // tokens an expert (moe_mma.rs; FP4 stacks read packed), then the weighted sum.
            Experts::Mma { build } => {
                let ys = self.moe_experts_mma(
                    &act,
                    x,
                    gate_up,
                    down,
                    (ofp, pmp),
                    (t, h, e, i, top_k),
                    (build, None),
                )?;
                return self.moe_combine(op, ys.ptr(s), wtp, t, (ki, hi));
            }
            Experts::CudaCores {
                build,
                gate_up: gate_up_kind,
                down: down_kind,
            } if fp4 => {
                return self.moe_experts_fp4(
                    op,
                    &act,
                    x,
                    (gate_up, down),
                    routing,
                    (t, h, e, i, top_k),
                    (build, gate_up_kind, down_kind, act_kind),
                );
            }
            Experts::CudaCores {
                build,
                gate_up,
                down,
            } => (build, gate_up, down),
        };
        let (xp, actp) = (x.ptr(s), act.ptr(s));
        // A block row per expert that can have pairs (at most one per pair).
        let experts = dim(e.min(pairs), "fused_moe")?;
        // One-token steps: the kernel that holds a lane's weight loads in flight at once (SiLU
        // only). Relu² experts: the up kernel of the build.
        let f = match act_kind {
            ExpertAct::Silu => gate_up_kernel_of(gate_up_kernel, build)?,
            ExpertAct::Relu2 => up_relu2_kernel_of(build)?,
        };
        let args = (actp, xp, w13, w13s, ofp, acp, pmp, ei, ki, ii, hi);
        // SAFETY: x is [t, h] and act [t·k, i] of the activation type (f32 with f32 experts,
        // else bf16), gate_up [e, fan·i, h] (fan 2 for SiLU, 1 for relu², the kernel's; bf16,
        // f32, or fp8 with [e·fan·i, ceil(h/128)] f32 scales); offsets/perm were written by
        // moe_group or moe_plan
        // (ranges inside 0..t·k, perm entries below t·k, so token = perm / k < t, and act row
        // perm < t·k); the vector variants only when rows are 16-byte aligned (checked above);
        // active (from moe_active or moe_plan) names at most min(e, t·k) experts, block rows
        // past its count and rows past i return.
        unsafe {
            f.launch(self, expert_rows_cfg(i, experts, "fused_moe")?, args)?;
        }
        if let Down::Combined { cols } = down_kernel {
            // 4-5. Down and the weighted sum in one launch: a block per output element, a warp
            // per slot.
            let f = down_combine_kernel(cols, build)?;
            let args = (op, actp, w2, w2s, idp, wtp, ti, ki, ii, hi);
            // SAFETY: out is [t, h] f32, act [t·k, i] (every row written by gate_up: each
            // pair is in exactly one expert's range), down [e, h, i] (fp8: [e·h, ceil(i/128)]
            // scales), ids (expert indices below e) and weights t·k; t·h blocks (t <= 8), block b
            // writing out[b % t, b / t]; 32·k threads, k <= MOE_MAX_TOP_K (its shared slots).
            // The dec kernels: block b writes out[b % t, (b / t)·cols ..+cols] (h % cols == 0).
            let blocks = t * h / cols.max(1);
            return unsafe {
                f.launch(
                    self,
                    cfg((dim(blocks, "fused_moe")?, 1), (32 * top_k) as u32),
                    args,
                )
            };
        }
        let ys = self.alloc(&[pairs, h], DType::F32)?; // [T·k, H]
        let ysp = ys.ptr(s);
        let f = down_kernel_of(build)?;
        let args = (ysp, actp, w2, w2s, ofp, acp, pmp, ei, ii, hi);
        // SAFETY: act is [t·k, i] (every row written by the previous kernel: each pair is
        // in exactly one expert's range), down [e, h, i] (fp8: [e·h, ceil(i/128)] scales), ys
        // [t·k, h] f32; block rows past the active count and columns past h return.
        unsafe {
            f.launch(self, expert_rows_cfg(h, experts, "fused_moe")?, args)?;
        }
        self.moe_combine(op, ysp, wtp, t, (ki, hi))
    }

    /// Stages 1-2 as `route` says (`MoePlan::choose`'s): each pair's expert and weight (`ids`,
    /// `weights`, `[T·k]`), the permutation grouping the pairs by expert (`perm`), the experts'
    /// offsets and the list of those with pairs (`offsets`, `active`, `[E + 1]`), given as
    /// device pointers in that order (ids, weights, offsets, perm, active), the experts scored
    /// as `scoring` says. With `router_x` (`Route::RouterPlanOne`: a bf16 router `[E, H]`, x
    /// `[1, H]` bf16 and the router's bias, bf16 `[E]` or 0 for none, checked by the caller;
    /// softmax scoring only) the logits are computed here into `router_logits` (f32) first.
    pub(super) fn moe_route(
        &self,
        route: Route,
        router_x: Option<(&CudaTensor, &CudaTensor, u64)>,
        router_logits: &CudaTensor,
        (idp, wtp, ofp, pmp, acp): (u64, u64, u64, u64, u64),
        (t, e, top_k, h): (usize, usize, usize, usize),
        scoring: Scoring,
    ) -> Result<()> {
        let pairs = t * top_k;
        let (ti, ei, ki, hi, pi) = (
            int(t, "fused_moe")?,
            int(e, "fused_moe")?,
            int(top_k, "fused_moe")?,
            int(h, "fused_moe")?,
            int(pairs, "fused_moe")?,
        );
        let s = &self.stream;
        let logits_bf16 = router_logits.dtype == DType::BF16;
        let (lp, norm) = (router_logits.ptr(s), scoring.norm());
        // The sigmoid kernels take the softmax ones' parameters and (bias, scaling, n_group,
        // topk_group).
        let sigmoid = match scoring {
            Scoring::Sigmoid {
                bias,
                scaling,
                groups,
                ..
            } => Some((bias, scaling, groups)),
            Scoring::Softmax { .. } => None,
        };
        if let (Route::RouterPlanOne, Some((router, x, bias))) = (route, router_x) {
            check("fused_moe", sigmoid.is_none(), || {
                "the router's product is fused with softmax routing only".to_string()
            })?;
            // 0-2. The router's logits and the one-token plan in one launch.
            let (rp, tp) = (router.ptr(s), self.router_ticket.device_ptr(s).0);
            let xp = x.ptr(s);
            let args = (
                lp, xp, rp, ei, hi, tp, idp, wtp, ofp, pmp, acp, ki, norm, bias,
            );
            // SAFETY: logits are [1, e] f32 (set by the caller), x [1, h] bf16 (converted
            // above), router [e, h] bf16 with h % 8 == 0 and
            // e <= moe_plan::ROUTER_PLAN_MAX_EXPERTS (its shared row; checked by the caller);
            // ids, weights and perm hold k values, offsets and active e + 1; 1 <= k <= min(e,
            // MOE_MAX_TOP_K); the bias is 0 or e bf16 (the caller's); the ticket is one u32 at
            // 0 (every launch sets it back), the launches on this stream one after another; a
            // warp per expert.
            unsafe {
                kernels::moe_router_plan_one.launch(
                    self,
                    cfg(
                        (dim(e.div_ceil(WARPS), "fused_moe")?, 1),
                        (32 * WARPS) as u32,
                    ),
                    args,
                )?;
            }
        } else if let Route::PlanOne | Route::Plan = route {
            // 1-2. Route, group and list the active experts in one launch: one token's plan by
            // one warp (its pairs are grouped as routed), more tokens' by one block.
            let one = route == Route::PlanOne;
            let config = cfg((1, 1), if one { 32 } else { PLAN_THREADS });
            // SAFETY (every launch below): logits are [t, e] of the kernel's type; ids, weights
            // and perm hold t·k values, t·k <= MOE_PLAN_MAX_PAIRS (moe_plan's shared copy of
            // the ids; t = 1 gives k <= MOE_MAX_TOP_K); offsets and active e + 1; 1 <= k <=
            // min(e, MOE_MAX_TOP_K) (checked above); the sigmoid kernels' bias holds e f32 and
            // their groups divide e, at most 32, k within the kept groups' experts (checked by
            // the caller); one warp at one token, else one block of
            // MOE_PLAN_THREADS (its launch bounds). The one-token kernels have no token count.
            unsafe {
                match (one, sigmoid) {
                    (true, None) => {
                        let f = if logits_bf16 {
                            kernels::moe_plan_one_bf16
                        } else {
                            kernels::moe_plan_one_f32
                        };
                        let args = (idp, wtp, ofp, pmp, acp, lp, ei, ki, norm);
                        f.launch(self, config, args)?;
                    }
                    (false, None) => {
                        let f = if logits_bf16 {
                            kernels::moe_plan_bf16
                        } else {
                            kernels::moe_plan_f32
                        };
                        let args = (idp, wtp, ofp, pmp, acp, lp, ti, ei, ki, norm);
                        f.launch(self, config, args)?;
                    }
                    (true, Some((bias, scaling, (ng, kg)))) => {
                        let f = if logits_bf16 {
                            kernels::moe_plan_one_sigmoid_bf16
                        } else {
                            kernels::moe_plan_one_sigmoid_f32
                        };
                        let args = (
                            idp, wtp, ofp, pmp, acp, lp, ei, ki, norm, bias, scaling, ng, kg,
                        );
                        f.launch(self, config, args)?;
                    }
                    (false, Some((bias, scaling, (ng, kg)))) => {
                        let f = if logits_bf16 {
                            kernels::moe_plan_sigmoid_bf16
                        } else {
                            kernels::moe_plan_sigmoid_f32
                        };
                        let args = (
                            idp, wtp, ofp, pmp, acp, lp, ti, ei, ki, norm, bias, scaling, ng, kg,
                        );
                        f.launch(self, config, args)?;
                    }
                }
            }
        } else {
            // 1. Route: a warp a token, over many blocks.
            let config = cfg(
                (dim(t.div_ceil(ROUTE_TOKENS), "fused_moe")?, 1),
                (32 * ROUTE_TOKENS) as u32,
            );
            // SAFETY (both launches): logits are [t, e] of the kernel's type; ids and weights
            // hold t·k values; 1 <= k <= min(e, MOE_MAX_TOP_K) (checked above); the sigmoid
            // kernels' bias holds e f32 and their groups fit e and k (checked by the caller);
            // one warp per token, warps
            // past t return.
            unsafe {
                if let Some((bias, scaling, (ng, kg))) = sigmoid {
                    let f = if logits_bf16 {
                        kernels::moe_route_sigmoid_bf16
                    } else {
                        kernels::moe_route_sigmoid_f32
                    };
                    let args = (idp, wtp, lp, ti, ei, ki, norm, bias, scaling, ng, kg);
                    f.launch(self, config, args)?;
                } else {
                    let f = if logits_bf16 {
                        kernels::moe_route_bf16
                    } else {
                        kernels::moe_route_f32
                    };
                    f.launch(self, config, (idp, wtp, lp, ti, ei, ki, norm))?;
                }
            }

            if route == Route::RouteGroupPlan {
                // 2. Group the pairs and list the active experts in one block.
                // SAFETY: ids holds t·k <= MOE_PLAN_MAX_PAIRS expert indices below e (written
                // by the routing kernel; the plan checks the count: the kernel's shared
                // histogram); offsets and active have e + 1 entries, perm t·k; one block of at
                // most MOE_PLAN_THREADS (its launch bounds).
                unsafe {
                    kernels::moe_group_plan.launch(
                        self,
                        cfg((1, 1), PLAN_THREADS),
                        (ofp, pmp, acp, idp, pi, ei),
                    )?;
                }
            } else {
                // 2. Group the pairs by expert.
                // SAFETY: ids holds t·k expert indices below e (written by the routing
                // kernel); offsets has e + 1 entries, perm t·k; one block per expert.
                unsafe {
                    kernels::moe_group.launch(
                        self,
                        cfg((dim(e, "fused_moe")?, 1), GROUP_THREADS),
                        (ofp, pmp, idp, pi, ei),
                    )?;
                }
                // SAFETY: offsets has e + 1 entries (written by moe_group), active e + 1; one
                // block looping over the experts.
                unsafe {
                    kernels::moe_active.launch(self, cfg((1, 1), GROUP_THREADS), (acp, ofp, ei))?;
                }
            }
        }
        Ok(())
    }

    /// Stage 5, the weighted sum per token: out [t, h] f32 from ys [t·k, h] f32 (every row
    /// written by the down projection) and the routing weights (t·k).
    pub(super) fn moe_combine(
        &self,
        op: u64,
        ysp: u64,
        wtp: u64,
        t: usize,
        (ki, hi): (i32, i32),
    ) -> Result<()> {
        let tu = t as u64;
        // SAFETY: out is [t, h] f32, ys [t·k, h] f32 (every row written by the down kernel:
        // each pair is in exactly one expert's range), weights t·k; grid-stride over t·h.
        unsafe {
            kernels::moe_combine.launch(
                self,
                stride_cfg(t as u64 * hi as u64),
                (op, ysp, wtp, tu, ki, hi),
            )
        }
    }
}

/// The plan's name for the experts' type.
pub(super) fn expert_type(d: DType) -> ExpertType {
    match d {
        DType::BF16 => ExpertType::Bf16,
        DType::F8 => ExpertType::Fp8,
        DType::F32 => ExpertType::F32,
        // FP4 expert stacks stay packed (moe_fp4.rs).
        DType::F4 => ExpertType::Nvfp4,
        DType::Mx4 => ExpertType::Mxfp4,
    }
}

/// The CUDA-core gate|up kernels' parameters: act, x, w, scales, offsets, active, perm,
/// experts, top_k, inter, hidden.
type GateUpArgs = (u64, u64, u64, u64, u64, u64, u64, i32, i32, i32, i32);
/// The down kernels' parameters: ys, act, w, scales, offsets, active, perm, experts, inter,
/// hidden.
type DownArgs = (u64, u64, u64, u64, u64, u64, u64, i32, i32, i32);
/// The fused down + weighted sum's: out, act, w, scales, ids, weights, tokens, top_k, inter,
/// hidden.
type DownCombineArgs = (u64, u64, u64, u64, u64, u64, i32, i32, i32, i32);

/// `moe_gate_up_{build}`, or `moe_gate_up_dec_{build}` (built for the `_vec` builds only).
fn gate_up_kernel_of(kind: GateUp, build: CoreBuild) -> Result<Kernel<GateUpArgs>> {
    Ok(match (kind, build) {
        (GateUp::Plain, CoreBuild::Bf16Vec) => kernels::moe_gate_up_bf16_vec,
        (GateUp::Plain, CoreBuild::Bf16) => kernels::moe_gate_up_bf16,
        (GateUp::Plain, CoreBuild::Fp8Vec) => kernels::moe_gate_up_fp8_vec,
        (GateUp::Plain, CoreBuild::Fp8) => kernels::moe_gate_up_fp8,
        (GateUp::Plain, CoreBuild::Fp32) => kernels::moe_gate_up_fp32,
        (_, CoreBuild::Nvfp4 | CoreBuild::Mxfp4) => {
            return Err(super::shape_err(
                "fused_moe",
                format!("{build:?} experts take moe_fp4.rs's kernels"),
            ));
        }
        (GateUp::Decode, CoreBuild::Bf16Vec) => kernels::moe_gate_up_dec_bf16_vec,
        (GateUp::Decode, CoreBuild::Fp8Vec) => kernels::moe_gate_up_dec_fp8_vec,
        (GateUp::Decode | GateUp::Split, _) => {
            return Err(super::shape_err(
                "fused_moe",
                format!("no {kind:?} gate_up kernel for {build:?} experts"),
            ));
        }
    })
}

/// `moe_up_relu2_{build}`: Nemotron-H's un-gated up + relu² (no one-token `_dec` build; FP4
/// builds: `moe_fp4.rs`'s).
fn up_relu2_kernel_of(build: CoreBuild) -> Result<Kernel<GateUpArgs>> {
    Ok(match build {
        CoreBuild::Bf16Vec => kernels::moe_up_relu2_bf16_vec,
        CoreBuild::Bf16 => kernels::moe_up_relu2_bf16,
        CoreBuild::Fp8Vec => kernels::moe_up_relu2_fp8_vec,
        CoreBuild::Fp8 => kernels::moe_up_relu2_fp8,
        CoreBuild::Fp32 => kernels::moe_up_relu2_fp32,
        CoreBuild::Nvfp4 | CoreBuild::Mxfp4 => {
            return Err(super::shape_err(
                "fused_moe_relu2",
                format!("{build:?} experts take moe_fp4.rs's kernels"),
            ));
        }
    })
}

/// `moe_down_{build}` (FP4 builds: `moe_fp4.rs`'s kernels, with their multipliers).
pub(super) fn down_kernel_of(build: CoreBuild) -> Result<Kernel<DownArgs>> {
    Ok(match build {
        CoreBuild::Bf16Vec => kernels::moe_down_bf16_vec,
        CoreBuild::Bf16 => kernels::moe_down_bf16,
        CoreBuild::Fp8Vec => kernels::moe_down_fp8_vec,
        CoreBuild::Fp8 => kernels::moe_down_fp8,
        CoreBuild::Fp32 => kernels::moe_down_fp32,
        CoreBuild::Nvfp4 | CoreBuild::Mxfp4 => {
            return Err(super::shape_err(
                "fused_moe",
                format!("{build:?} experts take moe_fp4.rs's kernels"),
            ));
        }
    })
}

/// `moe_down_combine_{build}` (`cols` 0) or `moe_down_combine_dec{cols}_{build}` (cols 1, 2
/// or 4 of the `_vec` builds).
fn down_combine_kernel(cols: usize, build: CoreBuild) -> Result<Kernel<DownCombineArgs>> {
    Ok(match (cols, build) {
        (0, CoreBuild::Bf16Vec) => kernels::moe_down_combine_bf16_vec,
        (0, CoreBuild::Bf16) => kernels::moe_down_combine_bf16,
        (0, CoreBuild::Fp8Vec) => kernels::moe_down_combine_fp8_vec,
        (0, CoreBuild::Fp8) => kernels::moe_down_combine_fp8,
        (0, CoreBuild::Fp32) => kernels::moe_down_combine_fp32,
        (1, CoreBuild::Bf16Vec) => kernels::moe_down_combine_dec1_bf16_vec,
        (2, CoreBuild::Bf16Vec) => kernels::moe_down_combine_dec2_bf16_vec,
        (4, CoreBuild::Bf16Vec) => kernels::moe_down_combine_dec4_bf16_vec,
        (1, CoreBuild::Fp8Vec) => kernels::moe_down_combine_dec1_fp8_vec,
        (2, CoreBuild::Fp8Vec) => kernels::moe_down_combine_dec2_fp8_vec,
        (4, CoreBuild::Fp8Vec) => kernels::moe_down_combine_dec4_fp8_vec,
        (_, CoreBuild::Nvfp4 | CoreBuild::Mxfp4) => {
            return Err(super::shape_err(
                "fused_moe",
                format!("{build:?} experts take moe_fp4.rs's kernels"),
            ));
        }
        _ => {
            return Err(super::shape_err(
                "fused_moe",
                format!("no down + sum kernel of {cols} columns a block for {build:?} experts"),
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each build names the kernels the launches named before the typed keys (by format!).
    #[test]
    fn every_build_picks_its_kernels() {
        let builds = [
            (CoreBuild::Bf16Vec, "bf16_vec"),
            (CoreBuild::Bf16, "bf16"),
            (CoreBuild::Fp8Vec, "fp8_vec"),
            (CoreBuild::Fp8, "fp8"),
            (CoreBuild::Fp32, "fp32"),
        ];
        for (build, suffix) in builds {
            let plain = gate_up_kernel_of(GateUp::Plain, build).expect("a kernel");
            assert_eq!(plain.name(), format!("moe_gate_up_{suffix}"));
            let dec = gate_up_kernel_of(GateUp::Decode, build);
            assert_eq!(dec.is_ok(), build.is_vec());
            if let Ok(dec) = dec {
                assert_eq!(dec.name(), format!("moe_gate_up_dec_{suffix}"));
            }
            let down = down_kernel_of(build).expect("a kernel");
            assert_eq!(down.name(), format!("moe_down_{suffix}"));
            let relu2 = up_relu2_kernel_of(build).expect("a kernel");
            assert_eq!(relu2.name(), format!("moe_up_relu2_{suffix}"));
            let combined = down_combine_kernel(0, build).expect("a kernel");
            assert_eq!(combined.name(), format!("moe_down_combine_{suffix}"));
            for cols in [1, 2, 3, 4, 8] {
                let k = down_combine_kernel(cols, build);
                assert_eq!(k.is_ok(), build.is_vec() && cols != 3 && cols != 8);
                if let Ok(k) = k {
                    assert_eq!(k.name(), format!("moe_down_combine_dec{cols}_{suffix}"));
                }
            }
        }
    }
}
