//! The mixture-of-experts checks: fused_moe (bf16 and FP8 experts, on the CUDA cores and on
//! tensor cores) against the CPU, and the FP8 GEMM on tensor cores.

use metrale_engine::backend::cuda::MoeGemm;
use metrale_engine::tuning::Fp8ActKernel;

use super::*;

/// FP8 GEMMs with e4m3 activations (`moe.fp8_activations`): every activation (x, and the SiLU
/// products) is rounded to 4 significant bits, a relative error up to 2^-4 that the CPU
/// reference, which keeps them exact, does not make: on the H200 the error's rms is 4.1e-2 to
/// 4.6e-2 of the output's (bf16 activations: 1.7e-3), its largest 0.33 of the rms. Measured,
/// not a bf16-level bound: a wrongly routed token would still be off by its whole expert.
const FP8_ACT: Tol = Tol {
    atol: 0.0,
    atol_rms: 0.5,
    rtol: 0.3,
};

/// A case's experts (gate_up, down) on the device and on the CPU.
pub(super) type Experts<'a> = (
    (&'a CudaTensor, &'a CudaTensor),
    (&'a CpuTensor, &'a CpuTensor),
);

/// A way to run a case's experts: the kernels, FP8 activations (and on sm_90 the kernels of
/// their tile GEMMs, `moe.fp8act_kernel`), the small-step kernels' pipelined build
/// (`moe.small_mma = pipe`), and the tolerance.
#[derive(Clone, Copy)]
pub(super) struct Route {
    gemm: MoeGemm,
    fp8_act: bool,
    fp8act_kernel: Fp8ActKernel,
    pipe: bool,
    name: &'static str,
    tol: Tol,
}

pub(super) const CUDA_CORES: Route = Route {
    gemm: MoeGemm::CudaCores,
    fp8_act: false,
    fp8act_kernel: Fp8ActKernel::Mma,
    pipe: false,
    name: "cuda cores",
    tol: MOE,
};
pub(super) const TENSOR_CORES: Route = Route {
    gemm: MoeGemm::TensorCores,
    fp8_act: false,
    fp8act_kernel: Fp8ActKernel::Mma,
    pipe: false,
    name: "tensor cores",
    tol: MOE,
};
/// The small-step FP8 `_any` kernels' cp.async-pipelined twins (`moe_pipe.cu`, the default),
/// where they apply (9 to 256 tokens, widths multiples of 128); elsewhere the same as
/// TENSOR_CORES, which runs the `_any` kernels themselves.
pub(super) const PIPELINED: Route = Route {
    gemm: MoeGemm::TensorCores,
    fp8_act: false,
    fp8act_kernel: Fp8ActKernel::Mma,
    pipe: true,
    name: "tensor cores, pipelined",
    tol: MOE,
};
pub(super) const TENSOR_CORES_FP8_ACT: Route = Route {
    gemm: MoeGemm::TensorCores,
    fp8_act: true,
    fp8act_kernel: Fp8ActKernel::Mma,
    pipe: false,
    name: "tensor cores, e4m3 activations",
    tol: FP8_ACT,
};
/// The same on moe_wg8.cu's e4m3 wgmma builds (sm_90; elsewhere TENSOR_CORES_FP8_ACT again).
pub(super) const FP8_ACT_WGMMA: Route = Route {
    fp8act_kernel: Fp8ActKernel::Wgmma,
    name: "tensor cores, e4m3 activations, wgmma",
    ..TENSOR_CORES_FP8_ACT
};
/// The router logits of a case: uniform in [-3, 3), or (skewed) experts 0-3 favoured by 4 for
/// two tokens in three (uneven counts: a few experts with several 64-row tiles) and every
/// eighth expert never chosen (empty experts between full ones).
pub(super) fn logits(rng: &mut Rng, t: usize, e: usize, skew: bool) -> Vec<f32> {
    let mut v = rng.vec(t * e, 3.0);
    if skew {
        for (n, l) in v.iter_mut().enumerate() {
            let (tok, ex) = (n / e, n % e);
            if ex < 4 && tok % 3 != 0 {
                *l += 4.0;
            }
            if ex % 8 == 7 {
                *l = -30.0;
            }
        }
    }
    v
}

/// `fused_moe`'s cases, gpt-oss's clamped experts and the dense FP8 GEMM with the tuning's
/// tensor-core expert GEMMs (on sm_90 moe_wg.cu's wgmma builds by default,
/// `METRALE_MOE_EXPERT_KERNEL=mma` for moe_mma.cu's), against the CPU: the `ops-experts`
/// section, a part of `ops` that runs in a minute and a half.
pub fn run_experts(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    let mut ops = Ops::start(cuda, CpuBackend::default(), 0x6d65_7472_616c_650d, report);
    ops.moe()
        .and_then(|()| ops.gpt_oss())
        .and_then(|()| ops.matmul_fp8_mma())
}

impl Ops<'_> {
    /// fused_moe against the CPU's: the same router logits on both sides, so the same experts
    /// (ties included: the rule is on the logits' bits); shapes from a decode step at
    /// Qwen3-30B-A3B's width (hidden 2048, experts of 768, top-8) to odd sizes that take the
    /// kernels' scalar loops (hidden 100, experts of 36), every expert taken (k = E), bf16 and
    /// f32 activations and router logits, and an empty batch; each on the CUDA-core kernels
    /// and (rows of a multiple of 8 bf16 or 16 FP8 elements) on tensor cores: uneven and empty
    /// experts (skewed), experts with one token, tiles cut short in every dimension (I 144 and
    /// 96: gate_up's 64-column tiles; H 192: down's 128-column tiles; T·k not multiples of 64;
    /// k slices of 32 cut at 144 and 96), 30B-A3B prefill chunks (T 130, 1000, 2048); FP8
    /// experts also with e4m3 activations; FP8 steps of 2 to 256 tokens take the small-step
    /// tensor-core kernels on the tensor-core route (T 3, 5, 8, 9, 13 and 16 one chunk of pairs
    /// an expert; T 33, 32, 100 and 256 the chunked build, skewed ones with experts of several
    /// chunks). Then the small-step launches against the six-launch path, bit for bit.
    pub(super) fn moe(&mut self) -> Result<()> {
        for (t, h, i, e, k, norm, xd, rd, skew) in [
            (1, 2048, 768, 32, 8, true, DType::BF16, DType::F32, false),
            (8, 2048, 768, 32, 8, true, DType::BF16, DType::F32, false),
            (7, 64, 32, 8, 2, false, DType::F32, DType::BF16, false),
            (130, 100, 36, 16, 4, true, DType::BF16, DType::F32, false),
            (33, 192, 144, 8, 8, false, DType::BF16, DType::F32, false),
            (300, 256, 96, 64, 6, true, DType::BF16, DType::F32, true),
            (130, 2048, 768, 128, 8, true, DType::BF16, DType::F32, false),
            (1000, 2048, 768, 128, 8, true, DType::BF16, DType::F32, true),
            (0, 64, 32, 8, 2, true, DType::BF16, DType::F32, false),
        ] {
            let case = format!(
                "T {t} H {h} I {i} E {e} top-{k}{} x {} logits {}{}",
                if norm { " norm" } else { "" },
                dt(xd),
                dt(rd),
                if skew { " skewed" } else { "" }
            );
            let routes: &[Route] = if h % 8 == 0 && i % 8 == 0 {
                &[CUDA_CORES, TENSOR_CORES]
            } else {
                &[CUDA_CORES]
            };
            self.run("fused_moe", &case, |s| {
                let (x_d, x_c) = s.random(&[t, h], 1.0, xd)?;
                let l = logits(&mut s.rng, t, e, skew);
                let (l_d, l_c) = s.pair(&[t, e], l, rd)?;
                let (w13_d, w13_c) = s.random(&[e, 2 * i, h], 0.05, DType::BF16)?;
                let (w2_d, w2_c) = s.random(&[e, h, i], 0.05, DType::BF16)?;
                let experts = ((&w13_d, &w2_d), (&w13_c, &w2_c));
                s.moe_routes(
                    &case,
                    routes,
                    (&x_d, &x_c),
                    (&l_d, &l_c),
                    experts,
                    (k, norm),
                )
            })?;
        }
        // FP8 experts (the 30B-A3B-FP8 layout: 128-column scale blocks, rows of 16 bytes, and
        // an odd width taking the scalar loop).
        for (t, h, i, e, k, skew) in [
            (1, 2048, 768, 32, 8, false),
            (5, 2048, 768, 16, 8, false),
            (9, 200, 72, 8, 2, false),
            (33, 192, 144, 8, 8, false),
            (300, 256, 96, 64, 6, true),
            (1000, 2048, 768, 128, 8, true),
            (2048, 2048, 768, 128, 8, false),
            // Last, so the cases above keep their random draws.
            (8, 2048, 768, 128, 8, false),
            (3, 256, 128, 8, 2, true),
            (16, 2048, 768, 128, 8, false),
            (13, 256, 128, 8, 2, true),
            (32, 2048, 768, 128, 8, false),
            (100, 256, 128, 8, 2, true),
            (256, 2048, 768, 128, 8, true),
            // Qwen3.6-35B-A3B's experts: one token and an MTP verify step's four.
            (1, 2048, 512, 256, 8, false),
            (4, 2048, 512, 256, 8, false),
        ] {
            let case = format!(
                "T {t} H {h} I {i} E {e} top-{k} fp8 experts{}",
                if skew { " skewed" } else { "" }
            );
            let routes: &[Route] = if h % 128 == 0 && i % 128 == 0 {
                &[
                    CUDA_CORES,
                    TENSOR_CORES,
                    TENSOR_CORES_FP8_ACT,
                    FP8_ACT_WGMMA,
                    PIPELINED,
                ]
            } else if h % 16 == 0 && i % 16 == 0 {
                &[
                    CUDA_CORES,
                    TENSOR_CORES,
                    TENSOR_CORES_FP8_ACT,
                    FP8_ACT_WGMMA,
                ]
            } else {
                &[CUDA_CORES]
            };
            self.run("fused_moe", &case, |s| {
                let (x_d, x_c) = s.random(&[t, h], 1.0, DType::BF16)?;
                let l = logits(&mut s.rng, t, e, skew);
                let (l_d, l_c) = s.pair(&[t, e], l, DType::F32)?;
                let (w13_d, w13_c) = s.fp8_pair(&[e, 2 * i, h])?;
                let (w2_d, w2_c) = s.fp8_pair(&[e, h, i])?;
                let experts = ((&w13_d, &w2_d), (&w13_c, &w2_c));
                s.moe_routes(
                    &case,
                    routes,
                    (&x_d, &x_c),
                    (&l_d, &l_c),
                    experts,
                    (k, true),
                )
            })?;
        }
        self.moe_small_bf16()?;
        self.moe_small_steps()?;
        self.moe_router_fused()?;
        self.moe_bad_shapes()
    }

    /// bf16 experts on the small-step tensor-core kernels (`moe_*_bf16_small_any`, the
    /// tensor-core route at 9 to 256 tokens): one chunk of pairs an expert (T 9, 16), several
    /// (T 100 skewed: experts 0-3 take most pairs), random routing at a decode batch of 128.
    /// Drawn from a generator of their own, so the checks after them keep their draws.
    fn moe_small_bf16(&mut self) -> Result<()> {
        let saved = std::mem::replace(&mut self.rng, Rng::new(0xb16_5a11));
        let r = (|| {
            for (t, h, i, e, k, skew) in [
                (9, 2048, 768, 128, 8, false),
                (16, 2048, 768, 128, 8, false),
                (100, 256, 128, 8, 2, true),
                (128, 2048, 768, 128, 8, false),
            ] {
                let case = format!(
                    "T {t} H {h} I {i} E {e} top-{k} bf16 experts, small-step kernels{}",
                    if skew { " skewed" } else { "" }
                );
                self.run("fused_moe", &case, |s| {
                    let (x_d, x_c) = s.random(&[t, h], 1.0, DType::BF16)?;
                    let l = logits(&mut s.rng, t, e, skew);
                    let (l_d, l_c) = s.pair(&[t, e], l, DType::F32)?;
                    let (w13_d, w13_c) = s.random(&[e, 2 * i, h], 0.05, DType::BF16)?;
                    let (w2_d, w2_c) = s.random(&[e, h, i], 0.05, DType::BF16)?;
                    let experts = ((&w13_d, &w2_d), (&w13_c, &w2_c));
                    s.moe_routes(
                        &case,
                        &[TENSOR_CORES],
                        (&x_d, &x_c),
                        (&l_d, &l_c),
                        experts,
                        (k, true),
                    )
                })?;
            }
            Ok(())
        })();
        self.rng = saved;
        r
    }

    /// routed_moe at one token, where the router's product and the routing are one launch
    /// (`moe_router_plan_one`, then the experts: three launches), against the router's matmul +
    /// the six-launch fused_moe: the logits and the output bit for bit, 30B-A3B's and 35B-A3B's
    /// experts, bf16 and FP8.
    fn moe_router_fused(&mut self) -> Result<()> {
        for (e, i, fp8) in [
            (128, 768, false),
            (128, 768, true),
            (256, 512, false),
            (256, 512, true),
        ] {
            let (h, k) = (2048, 8);
            let case = format!(
                "T 1 E {e} top-{k}{} three launches = matmul + six launches",
                if fp8 { " fp8 experts" } else { "" }
            );
            self.run("routed_moe", &case, |s| {
                let (x_d, _) = s.random(&[1, h], 1.0, DType::BF16)?;
                let router = s.cuda.random_bf16(&[e, h], 13, 0.05)?;
                let (w13, w2) = s.device_experts((e, i, h), fp8)?;
                let mut runs = Vec::new();
                let down_cols = s.cuda.tuning().moe.down_cols;
                // The six launches, the three, then the three with the decode down + combine
                // kernel at 1, 2 and 4 columns a block.
                for (small, cols) in [(false, 0), (true, 0), (true, 1), (true, 2), (true, 4)] {
                    s.cuda.retune(|t| t.moe.small_paths = small);
                    s.cuda.retune(|t| t.moe.down_cols = Some(cols));
                    let mut out = s.cuda.zeros(&[1, h])?;
                    let mut logits = s.cuda.zeros(&[1, e])?;
                    let r = s.cuda.routed_moe(
                        &mut out,
                        &x_d,
                        &router,
                        &mut logits,
                        (&w13, &w2),
                        k,
                        true,
                    );
                    s.cuda.retune(|t| t.moe.small_paths = true);
                    s.cuda.retune(|t| t.moe.down_cols = down_cols);
                    r?;
                    runs.push((s.cuda.to_host(&logits)?, s.cuda.to_host(&out)?));
                }
                let same = |a: &[f32], b: &[f32]| {
                    a.len() == b.len() && a.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits())
                };
                let bad: Vec<usize> = (1..runs.len())
                    .filter(|&r| !same(&runs[r].0, &runs[0].0) || !same(&runs[r].1, &runs[0].1))
                    .collect();
                s.report.line(format!(
                    "routed_moe {case}: {}",
                    if bad.is_empty() { "ok" } else { "FAIL" }
                ));
                if !bad.is_empty() {
                    s.report.fail(format!(
                        "routed_moe {case}: fused runs {bad:?} differ from the unfused one"
                    ));
                }
                Ok(())
            })?;
        }
        Ok(())
    }

    /// fused_moe on the float32 path against the CPU's at f32 tolerance: f32 experts and
    /// activations on the CUDA-core `_fp32` kernels (also when tensor cores are asked for: they
    /// are bf16 and FP8 only), nothing rounded below f32 (the SiLU products included), so the
    /// two differ only in the order of f32 sums. Shapes from a 30B-A3B decode step to odd
    /// widths, T = 0 (empty), 1 and 8 (down + combine in one launch), 9, 130 and 512 (the
    /// six-launch routing), k = E, skewed routing (empty experts, experts with many tokens),
    /// f32 and bf16 router logits; experts drawn in f32, from an FP8 checkpoint's bytes
    /// (dequantized on the host, as the CPU loader does) and as dummy FP8 weights (dequantized
    /// on the device). Then the small-step launches against the six launches, bit for bit.
    pub(super) fn moe_f32(&mut self) -> Result<()> {
        #[derive(Clone, Copy, PartialEq)]
        enum W {
            F32,
            Fp8,
            DummyFp8,
        }
        let forced = Route {
            gemm: MoeGemm::TensorCores,
            fp8_act: false,
            fp8act_kernel: Fp8ActKernel::Mma,
            pipe: false,
            name: "tensor cores asked, f32 stays on the cuda cores",
            tol: Tol::F32,
        };
        let cuda_cores = Route {
            tol: Tol::F32,
            ..CUDA_CORES
        };
        for (t, h, i, e, k, norm, rd, skew, w) in [
            (0, 64, 32, 8, 2, true, DType::F32, false, W::F32),
            (1, 2048, 768, 32, 8, true, DType::F32, false, W::F32),
            (8, 2048, 768, 128, 8, true, DType::F32, false, W::Fp8),
            (7, 64, 32, 8, 2, false, DType::BF16, false, W::F32),
            (9, 200, 72, 8, 8, true, DType::F32, false, W::F32),
            (130, 100, 36, 16, 4, true, DType::F32, false, W::Fp8),
            (300, 256, 96, 64, 6, true, DType::F32, true, W::F32),
            (33, 192, 144, 8, 8, false, DType::F32, true, W::DummyFp8),
            (512, 2048, 768, 128, 8, true, DType::F32, true, W::Fp8),
        ] {
            let case = format!(
                "T {t} H {h} I {i} E {e} top-{k}{} x f32 logits {}{} {} experts",
                if norm { " norm" } else { "" },
                dt(rd),
                if skew { " skewed" } else { "" },
                match w {
                    W::F32 => "f32",
                    W::Fp8 => "fp8 → f32",
                    W::DummyFp8 => "dummy fp8 → f32",
                }
            );
            let routes: &[Route] = if t == 300 || t == 512 {
                &[cuda_cores, forced]
            } else {
                &[cuda_cores]
            };
            self.run("fused_moe", &case, |s| {
                let (x_d, x_c) = s.random(&[t, h], 1.0, DType::F32)?;
                let l = logits(&mut s.rng, t, e, skew);
                let (l_d, l_c) = s.pair(&[t, e], l, rd)?;
                let (w13, w2) = ([e, 2 * i, h], [e, h, i]);
                let ((w13_d, w13_c), (w2_d, w2_c)) = match w {
                    W::F32 => (
                        s.random(&w13, 0.05, DType::F32)?,
                        s.random(&w2, 0.05, DType::F32)?,
                    ),
                    W::Fp8 => (s.fp8_pair(&w13)?, s.fp8_pair(&w2)?),
                    W::DummyFp8 => {
                        let dummy = |shape: &[usize], seed| HostTensor {
                            shape: shape.to_vec(),
                            data: HostData::RandomFp8 { seed, std: 0.05 },
                        };
                        let (a, b) = (dummy(&w13, 21), dummy(&w2, 22));
                        (
                            (s.cuda.upload(&a)?, s.cpu.upload(&a)?),
                            (s.cuda.upload(&b)?, s.cpu.upload(&b)?),
                        )
                    }
                };
                let experts = ((&w13_d, &w2_d), (&w13_c, &w2_c));
                s.moe_routes(
                    &case,
                    routes,
                    (&x_d, &x_c),
                    (&l_d, &l_c),
                    experts,
                    (k, norm),
                )
            })?;
        }
        self.moe_small_steps()?;
        self.moe_bad_shapes()
    }

    /// A case's CPU reference (fused_moe on the CPU's copies of the inputs), then each route
    /// of the device's against it.
    fn moe_routes(
        &mut self,
        case: &str,
        routes: &[Route],
        (x_d, x_c): (&CudaTensor, &CpuTensor),
        (l_d, l_c): (&CudaTensor, &CpuTensor),
        ((w13_d, w2_d), (w13_c, w2_c)): Experts<'_>,
        (k, norm): (usize, bool),
    ) -> Result<()> {
        let mut out_c = self.cpu.zeros(&x_c.shape)?;
        self.cpu
            .fused_moe(&mut out_c, x_c, l_c, w13_c, w2_c, k, norm)?;
        for route in routes {
            self.moe_route(case, *route, &out_c, |cuda, out| {
                cuda.fused_moe(out, x_d, l_d, w13_d, w2_d, k, norm)
            })?;
        }
        Ok(())
    }

    /// One route of a case: set it, run `f` into a fresh output, check it against the CPU's
    /// `want`, and print the error's rms against the output's (how far the route's rounding
    /// moves the result as a whole); then the defaults again.
    pub(super) fn moe_route(
        &mut self,
        case: &str,
        route: Route,
        want: &CpuTensor,
        f: impl FnOnce(&CudaBackend, &mut CudaTensor) -> metrale_engine::backend::Result<()>,
    ) -> Result<()> {
        let cuda = self.cuda;
        // The route's settings for this call only: the run's own (its environment's) after.
        let saved = cuda.tuning().moe;
        cuda.retune(|t| {
            t.moe.gemm = route.gemm;
            t.moe.fp8_activations = route.fp8_act;
            t.moe.fp8act_kernel = route.fp8act_kernel;
            t.moe.small_pipe = route.pipe;
        });
        let mut out = cuda.zeros(&want.shape)?;
        let r = f(cuda, &mut out);
        cuda.retune(|t| t.moe = saved);
        r?;
        let case = format!("{case} [{}]", route.name);
        self.check("fused_moe", &case, route.tol, &out, want)?;
        let got = cuda.to_host(&out)?;
        let (err, sq) = got
            .iter()
            .zip(&want.data)
            .fold((0f64, 0f64), |(e, s), (&g, &w)| {
                (e + f64::from(g - w).powi(2), s + f64::from(w).powi(2))
            });
        self.report.line(format!(
            "  error rms / output rms = {:.2e}",
            (err / sq.max(f64::MIN_POSITIVE)).sqrt()
        ));
        Ok(())
    }

    /// The small-step launches (moe_plan: routing in one block up to 1024 pairs;
    /// moe_down_combine: down + weighted sum in one launch up to 8 tokens) against the six
    /// launches, bit for bit, on both sides of each switch and with both expert types, on the
    /// CUDA cores; and on tensor cores (where routing is the only difference) at 1024 pairs.
    fn moe_small_steps(&mut self) -> Result<()> {
        for (t, e, k, fp8, gemm) in [
            (1, 128, 8, false, MoeGemm::CudaCores),
            (1, 128, 8, true, MoeGemm::CudaCores),
            (8, 128, 8, false, MoeGemm::CudaCores),
            (8, 128, 8, true, MoeGemm::CudaCores),
            (9, 128, 8, false, MoeGemm::CudaCores),
            (128, 128, 8, true, MoeGemm::CudaCores),
            (129, 128, 8, false, MoeGemm::CudaCores),
            (128, 128, 8, false, MoeGemm::TensorCores),
            (128, 128, 8, true, MoeGemm::TensorCores),
        ] {
            let (h, i) = (2048, 768);
            let case = format!(
                "T {t} E {e} top-{k}{}{} small-step launches = six launches",
                if fp8 { " fp8 experts" } else { "" },
                if gemm == MoeGemm::TensorCores {
                    " tensor cores"
                } else {
                    ""
                }
            );
            self.run("fused_moe", &case, |s| {
                let (x_d, _) = s.random(&[t, h], 1.0, s.act(DType::BF16))?;
                let (l_d, _) = s.random(&[t, e], 3.0, DType::F32)?;
                // Drawn on the device: the CPU side is not needed here. The float32 path
                // keeps f32 experts (FP8 ones dequantized).
                let dummy = |shape: &[usize], seed, fp8| {
                    let data = if fp8 {
                        HostData::RandomFp8 { seed, std: 0.05 }
                    } else {
                        HostData::Random { seed, std: 0.05 }
                    };
                    s.cuda.upload(&HostTensor {
                        shape: shape.to_vec(),
                        data,
                    })
                };
                let (w13_d, w2_d) = if s.fp32() {
                    (dummy(&[e, 2 * i, h], 11, fp8)?, dummy(&[e, h, i], 12, fp8)?)
                } else {
                    s.device_experts((e, i, h), fp8)?
                };
                let mut outs = Vec::new();
                let down_cols = s.cuda.tuning().moe.down_cols;
                // The small paths, the six launches, then the small paths with the decode
                // down + combine kernel at 1, 2 and 4 columns a block.
                for (small, cols) in [(true, 0), (false, 0), (true, 1), (true, 2), (true, 4)] {
                    s.cuda.retune(|t| t.moe.small_paths = small);
                    s.cuda.retune(|t| t.moe.down_cols = Some(cols));
                    s.cuda.retune(|t| t.moe.gemm = gemm);
                    // The routing launches are compared: the experts' kernels stay the same
                    // (the small-step FP8 tensor-core kernels come with the small paths; they
                    // are checked against the CPU above).
                    s.cuda.retune(|t| t.moe.small_mma = false);
                    let mut out = s.cuda.zeros(&[t, h])?;
                    let r = s
                        .cuda
                        .fused_moe(&mut out, &x_d, &l_d, &w13_d, &w2_d, k, true);
                    s.cuda.retune(|t| t.moe.small_paths = true);
                    s.cuda.retune(|t| t.moe.down_cols = down_cols);
                    s.cuda.retune(|t| t.moe.gemm = MoeGemm::Auto);
                    s.cuda.retune(|t| t.moe.small_mma = true);
                    r?;
                    outs.push(s.cuda.to_host(&out)?);
                }
                let differ = outs[1..]
                    .iter()
                    .flat_map(|o| o.iter().zip(&outs[0]))
                    .filter(|(a, b)| a.to_bits() != b.to_bits())
                    .count();
                s.report.line(format!(
                    "fused_moe {case}: {}",
                    if differ == 0 { "ok" } else { "FAIL" }
                ));
                if differ != 0 {
                    s.report.fail(format!(
                        "fused_moe {case}: {differ} of {} outputs differ",
                        (outs.len() - 1) * t * h
                    ));
                }
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Random experts (gate_up `[e, 2i, h]`, down `[e, h, i]`) drawn on the device, bf16 or
    /// FP8, for the checks that compare device paths with each other.
    fn device_experts(
        &self,
        (e, i, h): (usize, usize, usize),
        fp8: bool,
    ) -> Result<(CudaTensor, CudaTensor)> {
        Ok(if fp8 {
            (
                self.cuda.random_fp8(&[e, 2 * i, h], 11, 0.05)?,
                self.cuda.random_fp8(&[e, h, i], 12, 0.05)?,
            )
        } else {
            (
                self.cuda.random_bf16(&[e, 2 * i, h], 11, 0.05)?,
                self.cuda.random_bf16(&[e, h, i], 12, 0.05)?,
            )
        })
    }

    /// Bad shapes are errors that name the op, not faults.
    fn moe_bad_shapes(&mut self) -> Result<()> {
        let x = self.cuda.zeros(&[2, 64])?;
        let l = self.cuda.zeros(&[2, 8])?;
        let w13 = self.cuda.zeros(&[8, 64, 64])?;
        let w2 = self.cuda.zeros(&[8, 64, 32])?;
        let mut out = self.cuda.zeros(&[2, 64])?;
        for (k, what) in [(0, "top-0"), (9, "top-9 of 8"), (17, "top-17")] {
            let r = self.cuda.fused_moe(&mut out, &x, &l, &w13, &w2, k, true);
            self.expect_refusal("fused_moe", what, "fused_moe", r);
        }
        Ok(())
    }

    /// matmul with an FP8 weight and more than 32 rows on the tensor-core kernel
    /// (`gemm.fp8_matmul_mma`), bf16 and e4m3 activations, against the CPU: one 30B-A3B qkv
    /// shape, a 2048-row prefill of its o projection, and ragged tiles (m, n not multiples of
    /// 64 and 128, k of 32); e4m3 activations on each `moe.fp8act_kernel` (the wgmma ones on
    /// sm_90).
    pub(super) fn matmul_fp8_mma(&mut self) -> Result<()> {
        let builds = [
            (false, Fp8ActKernel::Mma, ""),
            (true, Fp8ActKernel::Mma, ", e4m3 activations"),
            (true, Fp8ActKernel::Wgmma, ", e4m3 activations, wgmma"),
        ];
        for (m, k, n) in [(130, 2048, 1536), (2048, 4096, 2048), (33, 272, 200)] {
            for (fp8_act, kernel, what) in builds {
                let case = format!("x bf16 [{m}, {k}] · w fp8 [{n}, {k}]ᵀ tensor cores{what}");
                let tol = if fp8_act { FP8_ACT } else { MOE };
                self.run("matmul", &case, |s| {
                    let (x_d, x_c) = s.random(&[m, k], 1.0, DType::BF16)?;
                    let (w_d, w_c) = s.fp8_pair(&[n, k])?;
                    let mut out_d = s.cuda.zeros(&[m, n])?;
                    let mut out_c = s.cpu.zeros(&[m, n])?;
                    s.cuda.retune(|t| t.gemm.fp8_matmul_mma = true);
                    s.cuda.retune(|t| {
                        t.moe.fp8_activations = fp8_act;
                        t.moe.fp8act_kernel = kernel;
                    });
                    let r = s.cuda.matmul(&mut out_d, &x_d, &w_d);
                    s.cuda.retune(|t| t.gemm.fp8_matmul_mma = false);
                    s.cuda.retune(|t| {
                        t.moe.fp8_activations = false;
                        t.moe.fp8act_kernel = Fp8ActKernel::Mma;
                    });
                    r?;
                    s.cpu.matmul(&mut out_c, &x_c, &w_c)?;
                    s.check("matmul", &case, tol, &out_d, &out_c)?;
                    Ok(())
                })?;
            }
        }
        Ok(())
    }
}
