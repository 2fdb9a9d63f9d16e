//! Nemotron-H's routed relu² experts (`HybridOps::fused_moe_relu2`, `cuda/nemotron_moe.rs`)
//! against the CPU on the same inputs: sigmoid routing with the correction bias, experts not
//! gated (`down · relu(up · x)²`). Nemotron 3 Nano's layer (hidden 2688, 128 experts of 1856,
//! top-6, one group, scaling 2.5) at one token, a decode batch of 8, a batch of 40 and a
//! prefill chunk of 300, with bf16 and FP8 experts; small shapes: the tiny fixture's top-2 of
//! 8 at one token and a prompt, group-limited routing, odd widths on the scalar kernels, k = E,
//! many tokens (route, group and active in their own launches) with skewed routing and ties,
//! bf16 router logits and bias, no tokens; NVFP4 and MXFP4 stacks kept packed (bf16 path).
//! Each case runs three ways that must give the same bits: the default plan, the six-launch
//! path (`moe.small_paths` off), and `moe.gemm = tensor-cores` (the relu² experts have no
//! tensor-core kernels, so the plan keeps them on the CUDA cores). Bad shapes and routing are
//! errors naming the op. The small shapes and the refusals run in sections `ops` and `ops-f32`;
//! the section `ops-nemotron-moe` runs Nano's layer (1.3 G weights drawn and uploaded: too long
//! for `ops`' time limit in the GPU scripts), then those.

use metrale_engine::backend::cuda::MoeGemm;
use metrale_engine::backend::{HybridOps, SigmoidRouting};

use super::minimax::logits_bias;
use super::*;

/// The `ops-nemotron-moe` section: Nemotron 3 Nano's layer, then `ops`' cases.
pub fn run(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    let mut ops = Ops::start(cuda, CpuBackend::default(), 0x6d65_7472_616c_650b, report);
    ops.relu2_nano()?;
    ops.nemotron_moe()
}

/// How a case's experts are stored on both sides.
#[derive(Clone, Copy, PartialEq)]
enum Stacks {
    /// The backend's weight type (bf16; f32 on the float32 path).
    Wide,
    Fp8,
    Nvfp4,
    Mxfp4,
}

impl Stacks {
    fn name(self) -> &'static str {
        match self {
            Stacks::Wide => "",
            Stacks::Fp8 => " fp8",
            Stacks::Nvfp4 => " nvfp4",
            Stacks::Mxfp4 => " mxfp4",
        }
    }
}

/// A case's inputs besides the experts: tokens, experts, the routing, the logits' and the
/// bias' types, skewed routing, ties.
type Case = (usize, usize, SigmoidRouting, DType, DType, bool, bool);

impl Ops<'_> {
    /// `ops`' cases (and `ops-f32`'s): the small shapes and the refusals.
    pub(super) fn nemotron_moe(&mut self) -> Result<()> {
        self.relu2_small()?;
        self.relu2_bad()
    }

    /// Nemotron 3 Nano's layer: each expert type's stacks drawn once (2 × 5 M weights an
    /// expert, 1.3 G in all: the section's own, so `ops` keeps its time), then the steps.
    fn relu2_nano(&mut self) -> Result<()> {
        let (h, i, e) = (2688, 1856, 128);
        let routing = SigmoidRouting::ungrouped(6, true, 2.5);
        for stacks in [Stacks::Wide, Stacks::Fp8] {
            let (up, down) = self.relu2_stacks(stacks, (e, h, i))?;
            for t in [1, 8, 40, 300] {
                let case: Case = (t, e, routing, DType::F32, DType::F32, t == 300, false);
                self.relu2_case(case, h, stacks, (&up, &down))?;
            }
        }
        Ok(())
    }

    /// Small shapes, each with stacks of its own.
    fn relu2_small(&mut self) -> Result<()> {
        let (bf, f32d) = (DType::BF16, DType::F32);
        let (w, f8, n4, m4) = (Stacks::Wide, Stacks::Fp8, Stacks::Nvfp4, Stacks::Mxfp4);
        let p = |k| SigmoidRouting::ungrouped(k, true, 1.0);
        // Norm off and a scaling; 2 of 4 groups kept, top-2.
        let odd = SigmoidRouting::ungrouped(4, false, 2.5);
        let g = SigmoidRouting {
            n_group: 4,
            topk_group: 2,
            ..p(2)
        };
        // (T, H, I, E, routing, logits, bias, skew, ties, stacks): the tiny fixture's shape at
        // one token and a prompt (ties), its groups; odd widths (the scalar loops) with bf16
        // logits and bias; 33 tokens with k = E; 1000 tokens (route, group and active in their
        // own launches), skewed with ties; no tokens; FP8 on the scalar loop and with a partial
        // last scale block; FP4 stacks at one token, skewed batches and a chunk of 300.
        let cases = [
            (1, 64, 32, 8, p(2), f32d, f32d, false, false, w),
            (7, 64, 32, 8, p(2), f32d, f32d, false, true, w),
            (7, 64, 32, 8, g, f32d, f32d, false, false, w),
            (5, 100, 36, 16, odd, bf, bf, false, false, w),
            (33, 192, 144, 8, p(8), f32d, f32d, false, false, w),
            (1000, 256, 96, 64, p(6), f32d, f32d, true, true, w),
            (0, 64, 32, 8, p(2), f32d, f32d, false, false, w),
            (9, 200, 72, 8, p(2), f32d, f32d, false, false, f8),
            (3, 272, 48, 16, p(4), bf, f32d, false, false, f8),
            (1, 256, 128, 16, p(4), f32d, f32d, false, false, n4),
            (40, 256, 160, 16, p(4), f32d, f32d, true, false, n4),
            (300, 256, 96, 32, p(6), f32d, f32d, true, false, m4),
            (8, 160, 96, 8, p(2), f32d, f32d, false, false, m4),
        ];
        let fp4 = !self.fp32();
        for (t, h, i, e, routing, rd, bd, skew, ties, stacks) in cases {
            if matches!(stacks, Stacks::Nvfp4 | Stacks::Mxfp4) && !fp4 {
                continue; // the float32 path widens FP4 stacks at upload
            }
            let (up, down) = self.relu2_stacks(stacks, (e, h, i))?;
            self.relu2_case((t, e, routing, rd, bd, skew, ties), h, stacks, (&up, &down))?;
        }
        Ok(())
    }

    /// Up `[e, i, h]` and down `[e, h, i]` as `stacks` says, each on the device and the CPU.
    fn relu2_stacks(
        &mut self,
        stacks: Stacks,
        (e, h, i): (usize, usize, usize),
    ) -> Result<((CudaTensor, CpuTensor), (CudaTensor, CpuTensor))> {
        let (up, down) = ([e, i, h], [e, h, i]);
        Ok(match stacks {
            Stacks::Wide => {
                let wd = self.wd();
                (self.random(&up, 0.05, wd)?, self.random(&down, 0.05, wd)?)
            }
            Stacks::Fp8 => (self.fp8_pair(&up)?, self.fp8_pair(&down)?),
            Stacks::Nvfp4 | Stacks::Mxfp4 => {
                let mx = stacks == Stacks::Mxfp4;
                let (u, d) = (
                    self.fp4_experts_host(mx, (e, i, h)),
                    self.fp4_experts_host(mx, (e, h, i)),
                );
                (
                    (self.cuda.upload(&u)?, self.cpu.upload(&u)?),
                    (self.cuda.upload(&d)?, self.cpu.upload(&d)?),
                )
            }
        })
    }

    /// One case: the CPU's output, the device's by the default plan within `MOE`, and the
    /// device's by the six launches and with tensor cores asked, the same bits.
    fn relu2_case(
        &mut self,
        (t, e, routing, rd, bd, skew, ties): Case,
        h: usize,
        stacks: Stacks,
        ((up_d, up_c), (down_d, down_c)): (&(CudaTensor, CpuTensor), &(CudaTensor, CpuTensor)),
    ) -> Result<()> {
        let i = down_c.shape[2];
        let (k, groups) = (routing.top_k, (routing.topk_group, routing.n_group));
        let case = format!(
            "T {t} H {h} I {i} E {e} top-{k} groups {}/{}{} x{} logits {} bias {}{}{}{}",
            groups.0,
            groups.1,
            if routing.norm_topk_prob { " norm" } else { "" },
            routing.scaling,
            dt(self.act(rd)),
            dt(bd),
            stacks.name(),
            if skew { " skewed" } else { "" },
            if ties { " ties" } else { "" }
        );
        self.run("fused_moe_relu2", &case, |s| {
            let (x_d, x_c) = s.random(&[t, h], 1.0, s.act(DType::BF16))?;
            let (l, b) = logits_bias(&mut s.rng, t, e, skew, ties);
            let (l_d, l_c) = s.pair(&[t, e], l, s.act(rd))?;
            let (b_d, b_c) = s.pair(&[e], b, bd)?;
            let mut out_c = s.cpu.zeros(&[t, h])?;
            s.cpu
                .fused_moe_relu2(&mut out_c, &x_c, &l_c, &b_c, (up_c, down_c), routing)
                .context("cpu")?;
            let cuda = s.cuda;
            let saved = cuda.tuning().moe;
            let mut runs = Vec::new();
            for (small, gemm) in [
                (saved.small_paths, saved.gemm),
                (false, saved.gemm),
                (saved.small_paths, MoeGemm::TensorCores),
            ] {
                cuda.retune(|tn| {
                    tn.moe.small_paths = small;
                    tn.moe.gemm = gemm;
                });
                let mut out_d = cuda.zeros(&[t, h])?;
                let r = cuda.fused_moe_relu2(&mut out_d, &x_d, &l_d, &b_d, (up_d, down_d), routing);
                cuda.retune(|tn| tn.moe = saved);
                r.context("cuda")?;
                runs.push(out_d);
            }
            // The device rounds relu² to bf16 before down, as fused_moe rounds SiLU's products
            // (the float32 path rounds nothing: Tol::F32, see `check`).
            s.check("fused_moe_relu2", &case, MOE, &runs[0], &out_c)?;
            let first = cuda.to_host(&runs[0])?;
            let mut same = true;
            for other in &runs[1..] {
                let o = cuda.to_host(other)?;
                same &= o.len() == first.len()
                    && o.iter()
                        .zip(&first)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
            }
            s.report.line(format!(
                "  six launches and tensor cores asked = the plan, bit for bit: {}",
                if same { "ok" } else { "FAIL" }
            ));
            if !same {
                s.report.fail(format!(
                    "fused_moe_relu2 {case}: the CUDA-core routes differ"
                ));
            }
            Ok(())
        })
    }

    /// A gate|up stack (SwiGLU's `[E, 2I, H]`), top-17, a bias of the wrong length and
    /// expert groups that do not divide the experts are errors that name the op, not faults.
    fn relu2_bad(&mut self) -> Result<()> {
        let x = self.cuda.zeros(&[2, 64])?;
        let l = self.cuda.zeros(&[2, 8])?;
        let up = self.cuda.zeros(&[8, 32, 64])?;
        let gated = self.cuda.zeros(&[8, 64, 64])?;
        let down = self.cuda.zeros(&[8, 64, 32])?;
        let (bias, short) = (self.cuda.zeros(&[8])?, self.cuda.zeros(&[7])?);
        let mut out = self.cuda.zeros(&[2, 64])?;
        let plain = SigmoidRouting::ungrouped(2, true, 1.0);
        let grouped = SigmoidRouting {
            n_group: 3,
            topk_group: 1,
            ..plain
        };
        for (what, u, b, routing) in [
            ("a gate|up stack [8, 64, 64]", &gated, &bias, plain),
            (
                "top-17",
                &up,
                &bias,
                SigmoidRouting::ungrouped(17, true, 1.0),
            ),
            ("a bias of 7 for 8 experts", &up, &short, plain),
            ("3 expert groups of 8 experts", &up, &bias, grouped),
        ] {
            let r = self
                .cuda
                .fused_moe_relu2(&mut out, &x, &l, b, (u, &down), routing);
            self.expect_refusal("fused_moe_relu2", what, "fused_moe_relu2", r);
        }
        Ok(())
    }
}
