//! gpt-oss's ops against the CPU: `add_bias` (every x/bias type pair the model makes),
//! `upload_f32_weight` (the sinks kept in f32 on the device, the CPU's values exactly) and
//! `matmul_bias` (the one-row `gemv_bias_m1` against the CPU and bit for bit against `matmul`
//! then `add_bias`, and the unfused path at more rows), `routed_moe_clamped` (the router,
//! its bias and the routing in one launch at one token, bit for bit the unfused launches),
//! `fused_moe_clamped` (one token to a
//! prefill chunk, gpt-oss-20b's top-4 of 32 experts and
//! 120b's of 128, experts that get no token, odd widths on the scalar kernels, the clamp biting
//! or not, bf16 and f32 router logits, an empty batch; on the CUDA-core kernels and on tensor
//! cores, the 64-row tiles and the decode-batch `_any` kernels). Sink attention itself is in
//! `attention_window.rs`.

use metrale_engine::backend::ClampedExperts;
use metrale_engine::backend::cuda::MoeGemm;

use super::*;

impl Ops<'_> {
    pub(super) fn gpt_oss(&mut self) -> Result<()> {
        self.add_bias()?;
        self.upload_f32_weight()?;
        self.moe_clamped()?;
        self.matmul_bias()?;
        self.routed_moe_clamped()
    }

    /// gpt-oss's sparse block with the router (`routed_moe_clamped`): at one token with bf16
    /// x, router and bias, the router's product, its bias and the routing in one launch
    /// (`moe_router_plan_one`), bit for bit `matmul_bias` then `fused_moe_clamped` on the
    /// device (logits and output) and against the CPU; at 3 tokens the unfused path. MXFP4
    /// experts (the split kernels at one token: widths multiples of 64) and bf16 ones.
    fn routed_moe_clamped(&mut self) -> Result<()> {
        for (t, h, i, e, k, mx) in [
            (1, 576, 320, 32, 4, true),
            (1, 576, 320, 128, 4, false),
            (3, 576, 320, 32, 4, true),
        ] {
            let case = format!(
                "T {t} H {h} I {i} E {e} top-{k} {} experts",
                if mx { "mxfp4" } else { "bf16" }
            );
            self.run("routed_moe_clamped", &case, |s| {
                let (x_d, x_c) = s.random(&[t, h], 1.0, DType::BF16)?;
                let (r_d, r_c) = s.random(&[e, h], 0.05, DType::BF16)?;
                let (rb_d, rb_c) = s.random(&[e], 1.0, DType::BF16)?;
                let ((w13_d, w13_c), (w2_d, w2_c)) = if mx {
                    let (w13, w2) = (
                        s.fp4_experts_host(true, (e, 2 * i, h)),
                        s.fp4_experts_host(true, (e, h, i)),
                    );
                    (
                        (s.cuda.upload(&w13)?, s.cpu.upload(&w13)?),
                        (s.cuda.upload(&w2)?, s.cpu.upload(&w2)?),
                    )
                } else {
                    (
                        s.random(&[e, 2 * i, h], 0.05, DType::BF16)?,
                        s.random(&[e, h, i], 0.05, DType::BF16)?,
                    )
                };
                let (b13_d, b13_c) = s.random(&[e, 2 * i], 1.0, DType::BF16)?;
                let (b2_d, b2_c) = s.random(&[e, h], 1.0, DType::BF16)?;
                fn experts<'a, T>(
                    w13: &'a T,
                    b13: &'a T,
                    w2: &'a T,
                    b2: &'a T,
                ) -> ClampedExperts<'a, T> {
                    ClampedExperts {
                        gate_up: w13,
                        gate_up_bias: b13,
                        down: w2,
                        down_bias: b2,
                        alpha: 1.702,
                        limit: 7.0,
                    }
                }
                let ex_d = experts(&w13_d, &b13_d, &w2_d, &b2_d);
                let ex_c = experts(&w13_c, &b13_c, &w2_c, &b2_c);
                let (mut out_d, mut out_c) = (s.cuda.zeros(&[t, h])?, s.cpu.zeros(&[t, h])?);
                let (mut l_d, mut l_c) = (s.cuda.zeros(&[t, e])?, s.cpu.zeros(&[t, e])?);
                s.cuda
                    .routed_moe_clamped(&mut out_d, &x_d, (&r_d, &rb_d), &mut l_d, &ex_d, k)?;
                s.cpu
                    .routed_moe_clamped(&mut out_c, &x_c, (&r_c, &rb_c), &mut l_c, &ex_c, k)?;
                s.check("routed_moe_clamped", &case, MOE, &out_d, &out_c)?;
                // The unfused launches on the device: the same logits and output, bit for bit.
                let (mut out_a, mut l_a) = (s.cuda.zeros(&[t, h])?, s.cuda.zeros(&[t, e])?);
                s.cuda.matmul_bias(&mut l_a, &x_d, &r_d, &rb_d)?;
                s.cuda.fused_moe_clamped(&mut out_a, &x_d, &l_a, &ex_d, k)?;
                let pairs = [(&l_d, &l_a), (&out_d, &out_a)];
                s.same_bits(
                    "routed_moe_clamped",
                    &case,
                    "matmul_bias, fused_moe_clamped",
                    &pairs,
                )?;
                Ok(())
            })?;
        }
        Ok(())
    }

    /// gpt-oss's biased projections: q|k|v (2880 → 5120) and the router (→ 32) at one row,
    /// an odd width, then 3 rows (matmul then add_bias).
    fn matmul_bias(&mut self) -> Result<()> {
        for (m, k, n) in [
            (1, 2880, 5120),
            (1, 2880, 32),
            (1, 2056, 37),
            (3, 1024, 520),
        ] {
            let case = format!("x bf16 [{m}, {k}] · w [{n}, {k}]ᵀ + bias [{n}]");
            self.run("matmul_bias", &case, |s| {
                let (x_d, x_c) = s.random(&[m, k], 1.0, s.act(DType::BF16))?;
                let x_c = s.as_gemm_operand(x_c);
                let (w_d, w_c) = s.random(&[n, k], 0.05, s.wd())?;
                let (b_d, b_c) = s.random(&[n], 2.0, s.wd())?;
                let mut out_d = s.cuda.zeros(&[m, n])?;
                let mut out_c = s.cpu.zeros(&[m, n])?;
                s.cuda.matmul_bias(&mut out_d, &x_d, &w_d, &b_d)?;
                s.cpu.matmul_bias(&mut out_c, &x_c, &w_c, &b_c)?;
                s.check("matmul_bias", &case, Tol::GEMM, &out_d, &out_c)?;
                let mut apart = s.cuda.zeros(&[m, n])?;
                s.cuda.matmul(&mut apart, &x_d, &w_d)?;
                s.cuda.add_bias(&mut apart, &b_d)?;
                s.same_bits(
                    "matmul_bias",
                    &case,
                    "matmul, add_bias",
                    &[(&out_d, &apart)],
                )?;
                Ok(())
            })?;
        }
        Ok(())
    }

    /// `x[r, :] += bias` with x f32 (router logits, matmul outputs) or bf16, the bias of the
    /// weights' type or f32; 1 token, a chunk, odd widths, no rows.
    fn add_bias(&mut self) -> Result<()> {
        for (t, n, xd, bd) in [
            (1, 2880, DType::F32, self.wd()),
            (130, 5120, DType::F32, self.wd()),
            (7, 36, DType::BF16, self.wd()),
            (3, 32, DType::F32, DType::F32),
            (5, 100, DType::BF16, DType::F32),
            (0, 64, DType::F32, self.wd()),
        ] {
            let (xd, bd) = (self.act(xd), self.act(bd));
            let case = format!("x {} [{t}, {n}] + bias {} [{n}]", dt(xd), dt(bd));
            self.run("add_bias", &case, |s| {
                let (mut x_d, mut x_c) = s.random(&[t, n], 4.0, xd)?;
                let (b_d, b_c) = s.random(&[n], 2.0, bd)?;
                s.cuda.add_bias(&mut x_d, &b_d)?;
                s.cpu.add_bias(&mut x_c, &b_c)?;
                // One f32 add on both sides; a bf16 x rounds the sum once more.
                let tol = if xd == DType::BF16 {
                    Tol::BF16
                } else {
                    Tol::EXACT
                };
                s.check("add_bias", &case, tol, &x_d, &x_c)?;
                Ok(())
            })?;
        }
        Ok(())
    }

    /// `upload_f32_weight` keeps f32 on the device whatever the compute type: a checkpoint's bf16
    /// and f32 values and dummy (random) weights, each the CPU's values exactly.
    fn upload_f32_weight(&mut self) -> Result<()> {
        let n = 64;
        let values = self.rng.vec(n, 3.0);
        let bf16_bytes: Vec<u8> = values
            .iter()
            .flat_map(|v| bf16::from_f32(*v).to_le_bytes())
            .collect();
        let f32_bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let raw = |dtype, bytes: Vec<u8>| HostData::Raw {
            dtype,
            bytes: bytes.into(),
        };
        for (name, data) in [
            ("bf16 checkpoint", raw(HostDType::BF16, bf16_bytes)),
            ("f32 values", raw(HostDType::F32, f32_bytes)),
            ("dummy weights", HostData::Random { seed: 39, std: 1.5 }),
        ] {
            let host = HostTensor {
                shape: vec![n],
                data,
            };
            self.run("upload_f32_weight", name, |s| {
                let (d, c) = (
                    s.cuda.upload_f32_weight(&host)?,
                    s.cpu.upload_f32_weight(&host)?,
                );
                if d.dtype() != DType::F32 {
                    bail!("upload_f32_weight {name}: {} on the device", dt(d.dtype()));
                }
                s.check("upload_f32_weight", name, Tol::EXACT, &d, &c)?;
                Ok(())
            })?;
        }
        Ok(())
    }

    /// `fused_moe_clamped` against the CPU on the same inputs (x, logits, weights and biases
    /// as the device holds them). Biases around 1 and, in some cases, `limit` 2 so that the
    /// clamp bites on many channels (gpt-oss's 7 on the others). Each case on the kernels of
    /// the listed `moe.gemm` settings: `Auto` (the plan's choice: at widths of a multiple of 64
    /// the small-step `_any` kernels from 9 tokens with bf16 experts, from one with FP4 ones;
    /// the 64-row tiles past them), and the CUDA cores or tensor cores forced where the other
    /// route is the one to check.
    fn moe_clamped(&mut self) -> Result<()> {
        let (bf, f32d) = (DType::BF16, DType::F32);
        let (auto, cores, tensor) = (MoeGemm::Auto, MoeGemm::CudaCores, MoeGemm::TensorCores);
        let plan: &[MoeGemm] = &[auto];
        let both: &[MoeGemm] = &[cores, auto];
        let forced: &[MoeGemm] = &[cores, tensor];
        for (t, h, i, e, k, limit, xd, rd, gemms) in [
            // gpt-oss-20b's decode step (hidden = experts' width = 2880, top-4 of 32), a batch
            // of 8, a prefill chunk (smaller widths, the CPU's time), 120b's 128 experts.
            (1, 2880, 2880, 32, 4, 7.0, bf, f32d, plan),
            (8, 2880, 2880, 32, 4, 2.0, bf, f32d, plan),
            (130, 576, 288, 32, 4, 2.0, bf, f32d, both),
            (1, 2880, 2880, 128, 4, 7.0, bf, bf, plan),
            // A decode batch at 20b's widths: the _any kernels (x staged in two passes, past
            // 48 KB of shared memory), 5 pairs an expert.
            (40, 2880, 2880, 32, 4, 7.0, bf, f32d, both),
            // Many tokens (route, group and active in their own launches), bf16 logits.
            (1000, 256, 96, 32, 4, 2.0, bf, bf, both),
            // Tensor cores forced at many tokens an expert: the 64-row tiles (300 tokens, 150
            // pairs an expert: 3 tiles each) and the _any kernels (64 tokens, 2 chunks each).
            (300, 256, 128, 8, 4, 2.0, bf, f32d, forced),
            (64, 256, 128, 8, 4, 2.0, bf, bf, forced),
            // Few tokens: most of the 32 experts get none.
            (3, 64, 32, 32, 4, 2.0, f32d, f32d, plan),
            // Odd widths (the scalar kernels), every expert taken (k = E), no tokens.
            (5, 36, 12, 8, 8, 2.0, bf, f32d, &[auto, tensor][..]),
            (0, 64, 32, 8, 2, 7.0, bf, f32d, plan),
        ] {
            let (xd, wd) = (self.act(xd), self.wd());
            let case = format!(
                "T {t} H {h} I {i} E {e} top-{k} limit {limit} x {} logits {} experts {}",
                dt(xd),
                dt(rd),
                dt(wd)
            );
            self.run("fused_moe_clamped", &case, |s| {
                let (x_d, x_c) = s.random(&[t, h], 1.0, xd)?;
                let (l_d, l_c) = s.random(&[t, e], 3.0, rd)?;
                let (w13_d, w13_c) = s.random(&[e, 2 * i, h], 0.05, wd)?;
                let (w2_d, w2_c) = s.random(&[e, h, i], 0.05, wd)?;
                let inputs = ((&x_d, &x_c), (&l_d, &l_c));
                s.clamped_compare(
                    &case,
                    inputs,
                    ((&w13_d, &w2_d), (&w13_c, &w2_c)),
                    (k, limit),
                    gemms,
                )
            })?;
        }
        Ok(())
    }

    /// `fused_moe_clamped` with these experts (device, CPU) and random biases of the compute
    /// type on both sides, compared; the device's once for each `moe.gemm` setting of `gemms`
    /// (the run's own setting restored after).
    pub(super) fn clamped_compare(
        &mut self,
        case: &str,
        ((x_d, x_c), (l_d, l_c)): ClampedInputs<'_>,
        ((w13_d, w2_d), (w13_c, w2_c)): ClampedStacks<'_>,
        (k, limit): (usize, f32),
        gemms: &[MoeGemm],
    ) -> Result<()> {
        let (e, t, h) = (w13_c.shape[0], x_c.shape[0], x_c.shape[1]);
        let bd = self.wd();
        let (b13_d, b13_c) = self.random(&[e, w13_c.shape[1]], 1.0, bd)?;
        let (b2_d, b2_c) = self.random(&[e, h], 1.0, bd)?;
        let alpha = 1.702;
        let ex_d = ClampedExperts {
            gate_up: w13_d,
            gate_up_bias: &b13_d,
            down: w2_d,
            down_bias: &b2_d,
            alpha,
            limit,
        };
        let ex_c = ClampedExperts {
            gate_up: w13_c,
            gate_up_bias: &b13_c,
            down: w2_c,
            down_bias: &b2_c,
            alpha,
            limit,
        };
        let mut out_c = self.cpu.zeros(&[t, h])?;
        self.cpu
            .fused_moe_clamped(&mut out_c, x_c, l_c, &ex_c, k)
            .context("cpu")?;
        for &gemm in gemms {
            let cuda = self.cuda;
            let saved = cuda.tuning().moe.gemm;
            cuda.retune(|t| t.moe.gemm = gemm);
            let mut out_d = cuda.zeros(&[t, h])?;
            let r = cuda.fused_moe_clamped(&mut out_d, x_d, l_d, &ex_d, k);
            cuda.retune(|t| t.moe.gemm = saved);
            r.context("cuda")?;
            let route = match gemm {
                MoeGemm::Auto => "auto",
                MoeGemm::CudaCores => "cuda cores",
                MoeGemm::TensorCores => "tensor cores",
            };
            // fused_moe's bound: the device rounds the activations to bf16 before down (the
            // float32 path rounds nothing: Tol::F32, see `check`).
            let case = format!("{case} [{route}]");
            self.check("fused_moe_clamped", &case, MOE, &out_d, &out_c)?;
        }
        Ok(())
    }
}

/// x and the router logits, each on the device and on the CPU.
pub(super) type ClampedInputs<'a> = (
    (&'a CudaTensor, &'a CpuTensor),
    (&'a CudaTensor, &'a CpuTensor),
);
/// gate|up and down stacks: the device's, then the CPU's.
pub(super) type ClampedStacks<'a> = (
    (&'a CudaTensor, &'a CudaTensor),
    (&'a CpuTensor, &'a CpuTensor),
);
