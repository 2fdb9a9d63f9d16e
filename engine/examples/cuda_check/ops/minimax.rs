//! MiniMax-M2's ops against the CPU: `rms_norm_cols` (q's and k's norms over all their heads
//! of the fused qkv, f32 and bf16 qkv, one token to a prefill chunk, an odd range, no rows) and
//! `fused_moe_sigmoid` (sigmoid scores + correction bias for the choice; one token to many,
//! the tiny fixture's top-2 of 8 and MiniMax-M2's top-8 of 256, k = E, ties on the choice's bits
//! that the expert index must break, skewed routing with experts that get no token, odd widths
//! on the scalar kernels, bf16 and f32 router logits and biases, norm off and a scaling, bf16
//! and FP8 experts on every expert route fused_moe has, an empty batch). Bad routing
//! parameters are errors that name the op.

use metrale_engine::backend::SigmoidRouting;

use super::moe::{
    CUDA_CORES, Experts, PIPELINED, Route, TENSOR_CORES, TENSOR_CORES_FP8_ACT, logits as moe_logits,
};
use super::*;

/// A case's router logits and correction bias: random (`ties` false), or logits on whole
/// numbers and biases on quarters, so that many experts share a choice value (s + bias, the
/// same bits on both sides) and the lower index must win, with experts 0-3 lifted for two
/// tokens in three and every eighth expert never chosen (`skew`).
pub(super) fn logits_bias(
    rng: &mut Rng,
    t: usize,
    e: usize,
    skew: bool,
    ties: bool,
) -> (Vec<f32>, Vec<f32>) {
    let mut l = moe_logits(rng, t, e, skew);
    let mut b = rng.vec(e, 0.5);
    if ties {
        l.iter_mut().for_each(|v| *v = v.trunc());
        b.iter_mut()
            .enumerate()
            .for_each(|(x, v)| *v = 0.25 * (x % 3) as f32);
    }
    (l, b)
}

impl Ops<'_> {
    pub(super) fn minimax(&mut self) -> Result<()> {
        self.rms_norm_cols()?;
        self.moe_sigmoid()?;
        self.moe_sigmoid_fp8()?;
        self.moe_sigmoid_bad()
    }

    /// q's columns then k's of a qkv `[T, (nh + 2·nkv)·hd]` normed in place, each over all its
    /// heads, as MiniMax-M2's forward does; an odd range; no rows.
    fn rms_norm_cols(&mut self) -> Result<()> {
        for (t, nh, nkv, hd, xd) in [
            (7, 4, 2, 32, DType::F32),
            (1, 48, 8, 128, DType::F32),
            (130, 48, 8, 128, DType::F32),
            (1000, 4, 2, 32, DType::F32),
            (7, 48, 8, 128, DType::BF16),
            (5, 3, 1, 37, DType::F32),
            (0, 4, 2, 32, DType::F32),
        ] {
            let xd = self.act(xd);
            let case = format!("qkv {} T={t} h={nh}/{nkv} hd={hd}", dt(xd));
            self.run("rms_norm_cols", &case, |s| {
                let width = (nh + 2 * nkv) * hd;
                let (mut x_d, mut x_c) = s.random(&[t, width], 2.0, xd)?;
                let (qw_d, qw_c) = s.gains(nh * hd)?;
                let (kw_d, kw_c) = s.gains(nkv * hd)?;
                s.cuda.rms_norm_cols(&mut x_d, 0, &qw_d, 1e-6)?;
                s.cuda.rms_norm_cols(&mut x_d, nh * hd, &kw_d, 1e-6)?;
                s.cpu.rms_norm_cols(&mut x_c, 0, &qw_c, 1e-6)?;
                s.cpu.rms_norm_cols(&mut x_c, nh * hd, &kw_c, 1e-6)?;
                // f32 in place: the sums' order only; bf16 in place: one rounding more.
                let tol = if xd == DType::F32 {
                    Tol::F32
                } else {
                    Tol::BF16
                };
                s.check("rms_norm_cols", &case, tol, &x_d, &x_c)?;
                Ok(())
            })?;
        }
        Ok(())
    }

    /// fused_moe_sigmoid with bf16 experts (f32 ones on the float32 path) against the CPU on
    /// the same inputs, on the CUDA cores and (rows of a multiple of 8) on tensor cores.
    fn moe_sigmoid(&mut self) -> Result<()> {
        let (bf, f32d) = (DType::BF16, DType::F32);
        // (T, H, I, E, top-k, norm, scaling, logits type, bias type, skew, ties)
        for (t, h, i, e, k, norm, scaling, rd, bd, skew, ties) in [
            // The tiny fixture's shapes at one token and a prompt.
            (1, 64, 32, 8, 2, true, 1.0, f32d, f32d, false, false),
            (7, 64, 32, 8, 2, true, 1.0, f32d, f32d, false, true),
            // MiniMax-M2's routing (top-8 of 256) at one token, a decode batch, a prefill chunk.
            (1, 512, 256, 256, 8, true, 1.0, f32d, f32d, false, false),
            (8, 512, 256, 256, 8, true, 1.0, f32d, f32d, true, true),
            (130, 512, 256, 256, 8, true, 1.0, f32d, f32d, true, false),
            // Many tokens (route, group and active in their own launches), skewed with ties.
            (1000, 256, 96, 64, 6, true, 1.0, f32d, f32d, true, true),
            // Odd widths (the scalar kernels), bf16 logits and bias, norm off, a scaling.
            (5, 100, 36, 16, 4, false, 2.5, bf, bf, false, false),
            // 33 tokens (routed in their own launch, grouped in one block), k = E.
            (33, 192, 144, 8, 8, true, 1.0, f32d, f32d, false, false),
            (0, 64, 32, 8, 2, true, 1.0, f32d, f32d, false, false),
        ] {
            let (xd, rd) = (self.act(bf), self.act(rd));
            let case = format!(
                "T {t} H {h} I {i} E {e} top-{k}{} x{scaling} logits {} bias {}{}{}",
                if norm { " norm" } else { "" },
                dt(rd),
                dt(bd),
                if skew { " skewed" } else { "" },
                if ties { " ties" } else { "" }
            );
            let routes: &[Route] = if self.fp32() {
                &[CUDA_CORES]
            } else if h % 8 == 0 && i % 8 == 0 {
                &[CUDA_CORES, TENSOR_CORES]
            } else {
                &[CUDA_CORES]
            };
            let routing = SigmoidRouting::ungrouped(k, norm, scaling);
            self.run("fused_moe_sigmoid", &case, |s| {
                let (x_d, x_c) = s.random(&[t, h], 1.0, xd)?;
                let (l, b) = logits_bias(&mut s.rng, t, e, skew, ties);
                let (l_d, l_c) = s.pair(&[t, e], l, rd)?;
                let (b_d, b_c) = s.pair(&[e], b, bd)?;
                let (w13_d, w13_c) = s.random(&[e, 2 * i, h], 0.05, s.wd())?;
                let (w2_d, w2_c) = s.random(&[e, h, i], 0.05, s.wd())?;
                let inputs = ((&x_d, &x_c), (&l_d, &l_c), (&b_d, &b_c));
                s.sigmoid_routes(
                    &case,
                    routes,
                    inputs,
                    ((&w13_d, &w2_d), (&w13_c, &w2_c)),
                    routing,
                )
            })?;
        }
        Ok(())
    }

    /// FP8 experts (MiniMax-M2's checkpoint is FP8 with 128-column scale blocks): one token,
    /// decode batches on the small-step kernels, a skewed prefill chunk, an odd width on the
    /// scalar loop; every route fused_moe takes for these widths.
    fn moe_sigmoid_fp8(&mut self) -> Result<()> {
        for (t, h, i, e, k, skew, ties) in [
            (1, 512, 256, 256, 8, false, false),
            (4, 512, 256, 256, 8, false, true),
            (16, 1024, 512, 64, 8, false, false),
            (300, 256, 128, 64, 6, true, true),
            (9, 200, 72, 8, 2, false, false),
        ] {
            let case = format!(
                "T {t} H {h} I {i} E {e} top-{k} fp8 experts{}{}",
                if skew { " skewed" } else { "" },
                if ties { " ties" } else { "" }
            );
            let routes: &[Route] = if self.fp32() {
                &[CUDA_CORES]
            } else if h % 128 == 0 && i % 128 == 0 {
                &[CUDA_CORES, TENSOR_CORES, TENSOR_CORES_FP8_ACT, PIPELINED]
            } else if h % 16 == 0 && i % 16 == 0 {
                &[CUDA_CORES, TENSOR_CORES]
            } else {
                &[CUDA_CORES]
            };
            let routing = SigmoidRouting::ungrouped(k, true, 1.0);
            self.run("fused_moe_sigmoid", &case, |s| {
                let (x_d, x_c) = s.random(&[t, h], 1.0, s.act(DType::BF16))?;
                let (l, b) = logits_bias(&mut s.rng, t, e, skew, ties);
                let (l_d, l_c) = s.pair(&[t, e], l, DType::F32)?;
                let (b_d, b_c) = s.pair(&[e], b, DType::F32)?;
                let (w13_d, w13_c) = s.fp8_pair(&[e, 2 * i, h])?;
                let (w2_d, w2_c) = s.fp8_pair(&[e, h, i])?;
                let inputs = ((&x_d, &x_c), (&l_d, &l_c), (&b_d, &b_c));
                s.sigmoid_routes(
                    &case,
                    routes,
                    inputs,
                    ((&w13_d, &w2_d), (&w13_c, &w2_c)),
                    routing,
                )
            })?;
        }
        Ok(())
    }

    /// Expert groups that do not divide the experts, a bias of the wrong length and top-17 are
    /// errors that name the op, not faults (group-limited routing itself: ops/mla.rs).
    fn moe_sigmoid_bad(&mut self) -> Result<()> {
        let x = self.cuda.zeros(&[2, 64])?;
        let l = self.cuda.zeros(&[2, 8])?;
        let w13 = self.cuda.zeros(&[8, 64, 64])?;
        let w2 = self.cuda.zeros(&[8, 64, 32])?;
        let (bias, short) = (self.cuda.zeros(&[8])?, self.cuda.zeros(&[7])?);
        let mut out = self.cuda.zeros(&[2, 64])?;
        let grouped = SigmoidRouting {
            n_group: 3,
            topk_group: 1,
            ..SigmoidRouting::ungrouped(2, true, 1.0)
        };
        for (what, b, routing) in [
            ("3 expert groups of 8 experts", &bias, grouped),
            (
                "a bias of 7 for 8 experts",
                &short,
                SigmoidRouting::ungrouped(2, true, 1.0),
            ),
            ("top-17", &bias, SigmoidRouting::ungrouped(17, true, 1.0)),
        ] {
            let r = self
                .cuda
                .fused_moe_sigmoid(&mut out, &x, &l, b, (&w13, &w2), routing);
            self.expect_refusal("fused_moe_sigmoid", what, "fused_moe", r);
        }
        Ok(())
    }

    /// `fused_moe_sigmoid` on the CPU, then on the device by each of `routes`, compared.
    pub(super) fn sigmoid_routes(
        &mut self,
        case: &str,
        routes: &[Route],
        ((x_d, x_c), (l_d, l_c), (b_d, b_c)): Pairs<'_>,
        ((w13_d, w2_d), (w13_c, w2_c)): Experts<'_>,
        routing: SigmoidRouting,
    ) -> Result<()> {
        let mut out_c = self.cpu.zeros(&[x_c.shape[0], x_c.shape[1]])?;
        self.cpu
            .fused_moe_sigmoid(&mut out_c, x_c, l_c, b_c, (w13_c, w2_c), routing)
            .context("cpu")?;
        for route in routes {
            self.moe_route(case, *route, &out_c, |cuda, out| {
                cuda.fused_moe_sigmoid(out, x_d, l_d, b_d, (w13_d, w2_d), routing)
            })?;
        }
        Ok(())
    }
}

/// x, the router logits and the correction bias, each on the device and on the CPU.
type Pairs<'a> = (
    (&'a CudaTensor, &'a CpuTensor),
    (&'a CudaTensor, &'a CpuTensor),
    (&'a CudaTensor, &'a CpuTensor),
);
