//! Launchers for gpt-oss's ops: the bias of a linear layer (`add_bias_*`, `activation.cu`) and
//! the experts with biases and the clamped SwiGLU (`fused_moe_clamped`), which reuse
//! `fused_moe`'s machinery (`moe.rs`, `moe_mma.rs`, `moe.cu`, `moe_mma.cu`) and its choice of
//! kernels (`MoePlan::choose`, the same thresholds):
//!
//! 1-2. routing, grouping and the active experts exactly as `fused_moe` with
//!      `norm_topk_prob`: the top-k of the softmax, renormalised, is the softmax over the k
//!      chosen logits (gpt-oss's router), so the same launches (the plan's route);
//! 3-4. the experts, where the plan puts them, each gate|up kernel adding the gate|up bias and
//!      applying the clamped SwiGLU in place of SiLU (prelude/moe_act.cuh's `MoeClampedAct`),
//!      down unchanged (its output in pair rows, f32):
//!      - decode batches of bf16 experts (`Experts::SmallMma`, 9 to 256 tokens, widths of a
//!        multiple of 64): `moe_gate_up_clamped_bf16_small_any`, `moe_down_bf16_small_any`;
//!      - steps with many pairs an expert (`Experts::Mma`, at least `MMA_MIN_PAIRS_PER_EXPERT`
//!        on average, `FP4_MMA_MIN_HALF_PAIRS_PER_EXPERT`, half a pair, for FP4 stacks): `moe_tiles`,
//!        `moe_gate_up_clamped_mma_{bf16,mxfp4,nvfp4}`, `moe_down_mma_{bf16,mxfp4,nvfp4}` (FP4
//!        stacks, MXFP4 as gpt-oss's checkpoints hold them or NVFP4, read packed and widened
//!        in the kernels: `moe_mma_fp4.cu`);
//!      - the rest (one token to a few, f32 experts, GPUs before 8.0): the CUDA-core
//!        `moe_gate_up_clamped_*` and `moe_down_*` (packed FP4 ones: `moe_fp4.rs`);
//! 5.   `moe_combine_bias_*`: `moe_combine` with each slot's down bias added before the weight.
//!
//! Nothing waits on the host, so a decode step is captured into a CUDA graph as `fused_moe`'s
//! is. Speed of the tensor-core routes for these experts: not yet measured on a GPU (the
//! CUDA-core route alone measured 0.13 of the byte floor at 126 sequences on the H100, issue
//! 39). Not done: the one-token decode kernels (`moe_gate_up_dec_*`, `moe_down_combine_dec*`)
//! with the biases, and small-step tensor-core kernels for FP4 stacks.

use super::elementwise::{dim, int, stride_cfg};
use super::moe::{MAX_TOP_K, Scoring, down_kernel_of, expert_rows_cfg, expert_type};
use super::moe_fp4::fp4_pair;
use super::moe_mma::ClampedAct;
use super::tensor::{CudaTensor, DType};
use super::{CudaBackend, check};
use crate::backend::kernels;
use crate::backend::moe_plan::{self, CoreBuild, Down, Experts, MoePlan, MoeShape};
use crate::backend::{ClampedExperts, Result};

impl CudaBackend {
    /// [`crate::backend::Backend::add_bias`]: `x[r, :] += bias` in place, x bf16 or f32 (its
    /// type kept), bias `[n]` bf16 or f32; the sum in f32.
    pub(super) fn add_bias_op(&self, x: &mut CudaTensor, bias: &CudaTensor) -> Result<()> {
        let n = x.cols();
        check("add_bias", bias.numel() == n, || {
            format!("x {:?}, bias {:?}", x.shape, bias.shape)
        })?;
        let rows = (x.numel() / n.max(1)) as u64;
        if rows * n as u64 == 0 {
            return Ok(());
        }
        let f = match (x.dtype, bias.dtype) {
            (DType::F32, DType::BF16) => kernels::add_bias_f32_bf16,
            (DType::BF16, DType::BF16) => kernels::add_bias_bf16_bf16,
            (DType::F32, DType::F32) => kernels::add_bias_f32_f32,
            (DType::BF16, DType::F32) => kernels::add_bias_bf16_f32,
            _ => return Err(super::not_activation("add_bias")),
        };
        let s = &self.stream;
        let args = (x.ptr(s), bias.ptr(s), rows, n as u64);
        // SAFETY: x holds rows·n elements of its type and bias n of its (matched above); the
        // grid-stride loop stays below rows·n.
        unsafe { f.launch(self, stride_cfg(rows * n as u64), args) }
    }

    /// [`crate::backend::Backend::routed_moe_clamped`]: at one token with a bf16 router and
    /// bias (`moe_plan::fuses_router`) the router's product, its bias and the routing in one
    /// launch (`moe_router_plan_one`), then the experts; `matmul_bias` and
    /// [`Self::fused_moe_clamped_op`] otherwise (an empty hidden size too: the fused path
    /// returns before routing, so it would leave the logits unwritten).
    pub(super) fn routed_moe_clamped_op(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        (router, bias): (&CudaTensor, &CudaTensor),
        router_logits: &mut CudaTensor,
        ex: &ClampedExperts<'_, CudaTensor>,
        top_k: usize,
    ) -> Result<()> {
        let e = router.shape.first().copied().unwrap_or(0);
        let fused = router.shape.len() == 2
            && moe_plan::fuses_router(
                x.rows(),
                (e, x.cols()),
                router.dtype == DType::BF16,
                expert_type(ex.gate_up.dtype),
                &self.tuning().moe,
            )
            && x.dtype == DType::BF16
            && x.cols() > 0
            && router.shape[1] == x.cols()
            && bias.dtype == DType::BF16
            && bias.shape == [e]
            && router_logits.shape == [1, e];
        if !fused {
            crate::backend::Backend::matmul_bias(self, router_logits, x, router, bias)?;
            return self.fused_moe_clamped_op(out, x, router_logits, ex, top_k, None);
        }
        self.set_dtype(router_logits, DType::F32)?;
        self.fused_moe_clamped_op(out, x, router_logits, ex, top_k, Some((router, bias)))
    }

    /// [`crate::backend::Backend::fused_moe_clamped`] (see the module's comment). `out` becomes
    /// `[T, H]` f32 as `fused_moe`'s; the experts are bf16, MXFP4 or NVFP4 (bf16 activations)
    /// or f32 (the float32 path). `router`: the router and its bias for the fused one-token
    /// launch (checked by [`Self::routed_moe_clamped_op`]), whose logits it writes.
    pub(super) fn fused_moe_clamped_op(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        router_logits: &CudaTensor,
        ex: &ClampedExperts<'_, CudaTensor>,
        top_k: usize,
        router: Option<(&CudaTensor, &CudaTensor)>,
    ) -> Result<()> {
        let (t, h, e, i) = crate::backend::moe_dims(
            &out.shape,
            &x.shape,
            &router_logits.shape,
            (&ex.gate_up.shape, &ex.down.shape),
            top_k,
            MAX_TOP_K,
        )?;
        let wide = |d: DType| matches!(d, DType::BF16 | DType::F32);
        // FP4 stacks (NVFP4, MXFP4) stay packed when both are of one format and their rows fit
        // the FP4 kernels; else a stray FP4 one is widened for the step.
        let fp4 = fp4_pair((ex.gate_up, ex.down), (h, i));
        let (mut gate_up_held, mut down_held) = (None, None);
        let gate_up = self.fp4_or_widened(ex.gate_up, fp4, &mut gate_up_held)?;
        let down = self.fp4_or_widened(ex.down, fp4, &mut down_held)?;
        check(
            "fused_moe_clamped",
            gate_up.dtype == down.dtype
                && (fp4 || wide(gate_up.dtype))
                && wide(router_logits.dtype)
                && wide(ex.gate_up_bias.dtype)
                && wide(ex.down_bias.dtype)
                && ex.gate_up_bias.shape == [e, 2 * i]
                && ex.down_bias.shape == [e, h],
            || {
                format!(
                    "gate_up {:?}, down {:?} (both bf16, nvfp4, mxfp4 or f32), gate_up_bias {:?} {:?} \
                     (want [{e}, {}]), down_bias {:?} {:?} (want [{e}, {h}]), router logits \
                     {:?}",
                    gate_up.dtype,
                    down.dtype,
                    ex.gate_up_bias.shape,
                    ex.gate_up_bias.dtype,
                    2 * i,
                    ex.down_bias.shape,
                    ex.down_bias.dtype,
                    router_logits.dtype
                )
            },
        )?;
        self.set_dtype(out, DType::F32)?;
        let pairs = t * top_k;
        if pairs == 0 || h == 0 {
            return Ok(());
        }
        let (ei, ki, hi, ii) = (
            int(e, "fused_moe_clamped")?,
            int(top_k, "fused_moe_clamped")?,
            int(h, "fused_moe_clamped")?,
            int(i, "fused_moe_clamped")?,
        );
        // The kernels read activations (x, the gate|up bias, the products) of the experts'
        // type: bf16 (NVFP4 experts too), or f32 on the float32 path. The model's tensors have
        // it already.
        let act_dtype = if fp4 { DType::BF16 } else { gate_up.dtype };
        let (mut x_conv, mut bias_conv) = (None, None);
        let x = self.as_dtype(x, act_dtype, &mut x_conv)?;
        let b13 = self.as_dtype(ex.gate_up_bias, act_dtype, &mut bias_conv)?;
        let s = &self.stream;
        // Scratch: the routing's (route_scratch) and the activations (pair rows); the experts'
        // outputs come from stage 4.
        let scratch = self.route_scratch(pairs, e)?;
        let (idp, wtp, ofp, pmp, acp) = scratch.ptrs;
        let act = self.alloc(&[pairs, i], act_dtype)?; // [T·k, I]

        // 1-2. The plan fused_moe would take for these shapes (the fused router + bias +
        // routing launch when `router` is given): its route here, its experts' kernels below.
        let w = expert_type(gate_up.dtype);
        let shape = MoeShape {
            t,
            h,
            e,
            i,
            top_k,
            logits_bf16: router_logits.dtype == DType::BF16,
            router: router.is_some(),
        };
        let tuning = self.tuning().moe;
        let plan = MoePlan::choose(shape, w, self.info.compute_capability, &tuning);
        let routing = (idp, wtp, ofp, pmp, acp);
        let scoring = Scoring::Softmax {
            norm_topk_prob: true,
        };
        self.moe_route(
            plan.route,
            router.map(|(r, b)| (r, x, b.ptr(s))),
            router_logits,
            routing,
            (t, e, top_k, h),
            scoring,
        )?;

        // 3-4. gate|up + bias + clamped SwiGLU into act, then down into ys [T·k, H] f32 (pair
        // rows), on the kernels the plan names.
        let (xp, actp, b13p) = (x.ptr(s), act.ptr(s), b13.ptr(s));
        let (alpha, limit) = (ex.alpha, ex.limit);
        let dims = (t, h, e, i, top_k);
        // The tensor-core routes' bias: [e, 2i] bf16 (act_dtype, checked above).
        let clamp = Some(ClampedAct {
            bias: b13p,
            alpha,
            limit,
        });
        let ys = match plan.experts {
            Experts::SmallMma { build } => {
                let stacks = (gate_up, down);
                let arrays = (ofp, acp, pmp);
                self.moe_experts_small_mma(&act, x, stacks, arrays, dims, (build, clamp))?
            }
            Experts::Mma { build } => {
                let arrays = (ofp, pmp);
                self.moe_experts_mma(&act, x, gate_up, down, arrays, dims, (build, clamp))?
            }
            // The CUDA-core kernels of the plan's build: bf16 and f32 experts take the plain
            // gate|up and down apart; FP4 ones the plan's gate|up and, at one token, down +
            // bias + the weighted sum in one launch.
            Experts::CudaCores {
                build,
                gate_up: gate_up_kind,
                down: down_kind,
            } => {
                // FP4 at one token: down + bias + the weighted sum write out in one launch,
                // with no pair rows.
                let one_token = match down_kind {
                    Down::Combined { cols }
                        if fp4 && cols > 0 && ex.down_bias.dtype == DType::BF16 =>
                    {
                        Some((cols, out.ptr(s), ex.down_bias.ptr(s)))
                    }
                    _ => None,
                };
                let ys = match one_token {
                    Some(_) => None,
                    None => Some(self.alloc(&[pairs, h], DType::F32)?), // [T·k, H]
                };
                let ptrs = (ys.as_ref().map_or(0, |y| y.ptr(s)), actp, xp, b13p);
                let stacks = (gate_up, down);
                if fp4 {
                    // The FP4 kernels (moe_fp4.rs): the same stages on the packed stacks.
                    let dims = (e, top_k, h, i, pairs);
                    let plan = (build, gate_up_kind, one_token);
                    self.clamped_experts_fp4(ptrs, stacks, routing, dims, plan, (alpha, limit))?;
                } else {
                    // A block row per expert that can have pairs (at most one a pair).
                    let experts = dim(e.min(pairs), "fused_moe_clamped")?;
                    let dims = (ei, ki, hi, ii, experts);
                    let arrays = (ofp, acp, pmp);
                    self.clamped_experts_wide(ptrs, stacks, arrays, dims, build, (alpha, limit))?;
                }
                match ys {
                    Some(ys) => ys,
                    None => return Ok(()), // out written by the fused down
                }
            }
        };
        let ysp = ys.ptr(s);
        // 5. out = Σ_slot weight · (ys + down_bias[expert]).
        let combine = match ex.down_bias.dtype {
            DType::F32 => kernels::moe_combine_bias_f32,
            _ => kernels::moe_combine_bias_bf16,
        };
        let (op, b2p, tu) = (out.ptr(s), ex.down_bias.ptr(s), t as u64);
        // SAFETY: out is [t, h] f32, ys [t·k, h] f32 (every row written by down), weights and
        // ids t·k (ids below e), down_bias [e, h] of the kernel's type (checked above);
        // grid-stride over t·h.
        unsafe {
            combine.launch(
                self,
                stride_cfg(tu * h as u64),
                (op, ysp, wtp, idp, b2p, tu, ki, hi),
            )
        }
    }

    /// Stages 3-4 of [`Self::fused_moe_clamped_op`] for bf16 or f32 experts: gate|up + bias +
    /// clamped SwiGLU into act, down into ys (pair rows).
    #[allow(clippy::too_many_arguments)]
    fn clamped_experts_wide(
        &self,
        (ysp, actp, xp, b13p): (u64, u64, u64, u64),
        (gate_up, down): (&CudaTensor, &CudaTensor),
        (ofp, acp, pmp): (u64, u64, u64),
        (ei, ki, hi, ii, experts): (i32, i32, i32, i32, u32),
        build: CoreBuild,
        (alpha, limit): (f32, f32),
    ) -> Result<()> {
        let s = &self.stream;
        let (i, h) = (ii as usize, hi as usize);
        let (w13, w13s) = (gate_up.ptr(s), gate_up.scales_ptr(s));
        let gate_up_kernel = match build {
            CoreBuild::Fp32 => kernels::moe_gate_up_clamped_fp32,
            CoreBuild::Bf16Vec => kernels::moe_gate_up_clamped_bf16_vec,
            _ => kernels::moe_gate_up_clamped_bf16,
        };
        let args = (
            actp, xp, w13, w13s, ofp, acp, pmp, ei, ki, ii, hi, b13p, alpha, limit,
        );
        // SAFETY: x is [t, h] and act [t·k, i] of the activation type, gate_up [e, 2i, h] and
        // its bias [e, 2i] of the same type (checked and converted above); offsets/perm/active
        // were written by the routing launches (ranges inside 0..t·k, perm entries below t·k,
        // so token = perm / k < t, act row perm < t·k; active names at most min(e, t·k)
        // experts); the vector build only with h and i multiples of 8 (16-byte rows); block
        // rows past the active count and rows past i return.
        unsafe {
            gate_up_kernel.launch(
                self,
                expert_rows_cfg(i, experts, "fused_moe_clamped")?,
                args,
            )?;
        }
        // 4. down into ys, pair rows.
        let (w2, w2s) = (down.ptr(s), down.scales_ptr(s));
        let args = (ysp, actp, w2, w2s, ofp, acp, pmp, ei, ii, hi);
        // SAFETY: act is [t·k, i] (every row written by gate|up: each pair is in exactly one
        // expert's range), down [e, h, i] of act's type, ys [t·k, h] f32; block rows past the
        // active count and columns past h return.
        unsafe {
            down_kernel_of(build)?.launch(
                self,
                expert_rows_cfg(h, experts, "fused_moe_clamped")?,
                args,
            )
        }
    }
}
