//! FP4 experts kept packed (`moe_fp4.rs`) against the CPU: the same `HostData::Nvfp4` and
//! `HostData::Mxfp4` stacks uploaded to both (the CUDA backend keeps a 3-D stack packed on
//! the bf16 path, the CPU dequantizes it exactly), through `fused_moe` on the CUDA-core FP4
//! kernels and on the tensor-core tiles that read the packed stacks (`moe_mma_fp4.cu`), and
//! through gpt-oss's `fused_moe_clamped` on both;
//! dummy FP4 experts (`HostData::RandomNvfp4`, `HostData::RandomMxfp4`, drawn packed on the
//! device) too, their bytes against the host's draw.

use metrale_engine::backend::cuda::MoeGemm;
use metrale_engine::loader::nvfp4::GlobalRule;
use metrale_engine::loader::random_mxfp4_parts;

use super::moe::{CUDA_CORES, TENSOR_CORES, logits};
use super::*;

impl Ops<'_> {
    /// An NVFP4 expert stack `[e, rows, cols]` as the loader hands it over: any nibbles, E4M3
    /// scales 2^-4..2^2, one global an expert (its rows all carry it), around 2e-3.
    fn nvfp4_experts_host(
        &mut self,
        (e, rows, cols): (usize, usize, usize),
    ) -> HostTensor<'static> {
        let n = e * rows * cols;
        let packed: Vec<u8> = (0..n / 2)
            .map(|_| (self.rng.next_u64() >> 56) as u8)
            .collect();
        let scales: Vec<u8> = (0..n / 16)
            .map(|_| 0x18 + (self.rng.next_u64() >> 59) as u8 * 3)
            .collect();
        let globals = (0..e * rows)
            .map(|r| 1.5e-3 + 1e-4 * ((r / rows) % 13) as f32)
            .collect();
        HostTensor {
            shape: vec![e, rows, cols],
            data: HostData::Nvfp4 {
                packed: packed.into(),
                scales: scales.into(),
                globals,
                rule: GlobalRule::Multiply,
            },
        }
    }

    /// An MXFP4 expert stack `[e, rows, cols]` as the loader hands it over: any nibbles, E8M0
    /// scales 2^-9..2^-5.
    fn mxfp4_experts_host(
        &mut self,
        (e, rows, cols): (usize, usize, usize),
    ) -> HostTensor<'static> {
        let n = e * rows * cols;
        let packed: Vec<u8> = (0..n / 2)
            .map(|_| (self.rng.next_u64() >> 56) as u8)
            .collect();
        let scales: Vec<u8> = (0..n / 32)
            .map(|_| 118 + (self.rng.next_u64() % 5) as u8)
            .collect();
        HostTensor {
            shape: vec![e, rows, cols],
            data: HostData::Mxfp4 {
                packed: packed.into(),
                scales: scales.into(),
            },
        }
    }

    /// An expert stack of `format` ("nvfp4" or "mxfp4") as the loader hands it over.
    pub(super) fn fp4_experts_host(
        &mut self,
        mx: bool,
        dims: (usize, usize, usize),
    ) -> HostTensor<'static> {
        if mx {
            self.mxfp4_experts_host(dims)
        } else {
            self.nvfp4_experts_host(dims)
        }
    }

    /// `fused_moe` with NVFP4 experts: Qwen3.6-35B-A3B's shape (hidden 2048, 256 experts of
    /// 512, top 8) at one token, an MTP verify step's 4, a decode batch of 8 (down + sum in one
    /// launch), 9 and 100 (down and sum apart), a prefill chunk of 300; skewed routing
    /// (experts with hundreds of pairs, several 64-row tiles, beside empty ones); odd expert
    /// counts and widths of odd numbers of 32-value chunks, not multiples of the tiles (H 160,
    /// I 96), skewed at 300 tokens too; I 48, whose down stack (rows of 48) is widened at upload
    /// while gate|up stays packed (the step widens it too, and takes the bf16 build); and dummy
    /// experts drawn on the device. Each on the CUDA-core route (the packed kernels at every
    /// size) and the tensor-core route (the `nvfp4` / `mxfp4` tiles at every size). Then
    /// gpt-oss's clamped experts on FP4 stacks.
    pub(super) fn moe_nvfp4(&mut self) -> Result<()> {
        for (t, h, i, e, k, skew, dummy, mx) in [
            (1, 2048, 512, 256, 8, false, false, false),
            (4, 2048, 512, 256, 8, false, false, false),
            (8, 2048, 512, 256, 8, false, false, false),
            (9, 160, 96, 7, 3, false, false, false),
            (100, 256, 96, 64, 6, true, false, false),
            (300, 2048, 512, 256, 8, true, false, false),
            (300, 160, 96, 7, 3, true, false, false),
            (5, 64, 48, 8, 2, false, false, false),
            (2, 2048, 512, 128, 8, false, true, false),
            (200, 2048, 512, 128, 8, false, true, false),
            // MXFP4 stacks through fused_moe (gpt-oss's format, plain SwiGLU): both routes,
            // the tensor-core one on moe_*_mma_mxfp4.
            (1, 2880, 2880, 32, 4, false, false, true),
            (9, 160, 96, 7, 3, false, false, true),
            (300, 256, 96, 64, 6, true, false, true),
            (3, 256, 96, 16, 4, false, true, true),
        ] {
            let format = if mx { "mxfp4" } else { "nvfp4" };
            let case = format!(
                "T {t} H {h} I {i} E {e} top-{k} {}{format} experts{}",
                if dummy { "dummy " } else { "" },
                if skew { " skewed" } else { "" }
            );
            self.run("fused_moe", &case, |s| {
                let (x_d, x_c) = s.random(&[t, h], 1.0, DType::BF16)?;
                let l = logits(&mut s.rng, t, e, skew);
                let (l_d, l_c) = s.pair(&[t, e], l, DType::F32)?;
                let (w13, w2) = if dummy {
                    let random = |shape: Vec<usize>, seed| HostTensor {
                        shape,
                        data: if mx {
                            HostData::RandomMxfp4 { seed, std: 0.02 }
                        } else {
                            HostData::RandomNvfp4 { seed, std: 0.02 }
                        },
                    };
                    (random(vec![e, 2 * i, h], 41), random(vec![e, h, i], 42))
                } else {
                    (
                        s.fp4_experts_host(mx, (e, 2 * i, h)),
                        s.fp4_experts_host(mx, (e, h, i)),
                    )
                };
                let (w13_d, w13_c) = (s.cuda.upload(&w13)?, s.cpu.upload(&w13)?);
                let (w2_d, w2_c) = (s.cuda.upload(&w2)?, s.cpu.upload(&w2)?);
                s.report.line(format!(
                    "  device stacks: gate_up {}, down {}",
                    dt(w13_d.dtype()),
                    dt(w2_d.dtype())
                ));
                let packed = if mx { DType::Mx4 } else { DType::F4 };
                if i % 32 == 0 && (w13_d.dtype() != packed || w2_d.dtype() != packed) {
                    s.report
                        .fail(format!("fused_moe {case}: a stack was not kept packed"));
                }
                let mut out_c = s.cpu.zeros(&x_c.shape)?;
                s.cpu
                    .fused_moe(&mut out_c, &x_c, &l_c, &w13_c, &w2_c, k, true)?;
                for route in [CUDA_CORES, TENSOR_CORES] {
                    s.moe_route(&case, route, &out_c, |cuda, out| {
                        cuda.fused_moe(out, &x_d, &l_d, &w13_d, &w2_d, k, true)
                    })?;
                }
                Ok(())
            })?;
        }
        self.moe_clamped_fp4()?;
        self.uploads_mxfp4()
    }

    /// gpt-oss's `fused_moe_clamped` on MXFP4 stacks (its release's format:
    /// moe_gate_up_clamped_mxfp4, moe_down_mxfp4) and NVFP4 ones, the clamp biting (limit 2):
    /// one token of 120b's top-4 of 128 at its widths (2880; the CUDA cores' one-token `_dec`
    /// kernels beside the plan's choice), a batch of 8, 64 tokens of 20b's
    /// shape (8 pairs an expert: the plan's tiles, `moe_gate_up_clamped_mma_*`, beside the
    /// CUDA cores and the tiles forced), a chunk of 130 at smaller widths (on the packed
    /// CUDA-core kernels and, the plan's choice at 16 pairs an expert, on the tensor-core
    /// tiles); and one token of a dummy 120b layer (drawn on the device).
    fn moe_clamped_fp4(&mut self) -> Result<()> {
        let auto: &[MoeGemm] = &[MoeGemm::Auto];
        let both: &[MoeGemm] = &[MoeGemm::CudaCores, MoeGemm::Auto];
        let all: &[MoeGemm] = &[MoeGemm::CudaCores, MoeGemm::TensorCores, MoeGemm::Auto];
        for (t, h, i, e, k, mx, dummy, gemms) in [
            (1, 2880, 2880, 128, 4, true, false, both),
            (8, 2880, 2880, 32, 4, true, false, auto),
            (64, 2880, 2880, 32, 4, true, false, all),
            (64, 2880, 2880, 32, 4, false, false, all),
            (130, 576, 288, 32, 4, true, false, both),
            (1, 2880, 2880, 128, 4, true, true, both),
            (1, 2880, 2880, 128, 4, false, false, both),
            (130, 576, 288, 32, 4, false, false, both),
        ] {
            let format = if mx { "mxfp4" } else { "nvfp4" };
            let case = format!(
                "T {t} H {h} I {i} E {e} top-{k} limit 2 {}{format} experts",
                if dummy { "dummy " } else { "" }
            );
            self.run("fused_moe_clamped", &case, |s| {
                let (x_d, x_c) = s.random(&[t, h], 1.0, DType::BF16)?;
                let (l_d, l_c) = s.random(&[t, e], 3.0, DType::F32)?;
                let (w13, w2) = if dummy {
                    let random = |shape: Vec<usize>, seed| HostTensor {
                        shape,
                        data: HostData::RandomMxfp4 { seed, std: 0.02 },
                    };
                    (random(vec![e, 2 * i, h], 43), random(vec![e, h, i], 44))
                } else {
                    (
                        s.fp4_experts_host(mx, (e, 2 * i, h)),
                        s.fp4_experts_host(mx, (e, h, i)),
                    )
                };
                let (w13_d, w13_c) = (s.cuda.upload(&w13)?, s.cpu.upload(&w13)?);
                let (w2_d, w2_c) = (s.cuda.upload(&w2)?, s.cpu.upload(&w2)?);
                let inputs = ((&x_d, &x_c), (&l_d, &l_c));
                let stacks = ((&w13_d, &w2_d), (&w13_c, &w2_c));
                s.clamped_compare(&case, inputs, stacks, (k, 2.0), gemms)
            })?;
        }
        Ok(())
    }

    /// Dummy MXFP4 stacks drawn on the device against the host's draw, byte for byte: the
    /// packed pairs and the scale bytes (the first spans three 65536-byte chunks of the
    /// stream; the second is a dummy 120b down stack, 128 · 2880 · 2880 values).
    fn uploads_mxfp4(&mut self) -> Result<()> {
        for (shape, seed) in [
            (vec![4usize, 300usize, 1024usize], 51u64),
            (vec![128, 2880, 2880], 52),
        ] {
            let case = format!("random mxfp4 {shape:?} seed {seed}");
            self.run("upload", &case, |s| {
                let host = HostTensor {
                    shape: shape.clone(),
                    data: HostData::RandomMxfp4 { seed, std: 0.02 },
                };
                let got = s.cuda.upload(&host)?;
                if got.dtype() != DType::Mx4 {
                    s.report.fail(format!(
                        "upload {case}: not kept packed ({})",
                        dt(got.dtype())
                    ));
                    return Ok(());
                }
                let n: usize = shape.iter().product();
                let (packed, scales) = random_mxfp4_parts(seed, 0.02, n);
                let (dp, ds) = s.cuda.mx4_parts(&got)?;
                let differ = |a: &[u8], b: &[u8]| a.iter().zip(b).filter(|(x, y)| x != y).count();
                let bad = differ(&dp, &packed) + differ(&ds, &scales);
                s.report.line(format!(
                    "upload {case}: device draw vs host draw: {bad} of {} bytes differ",
                    packed.len() + scales.len()
                ));
                s.report
                    .record(json!({"op": "upload", "case": case, "differ": bad}));
                if bad > 0 || dp.len() != packed.len() || ds.len() != scales.len() {
                    s.report.fail(format!(
                        "upload {case}: {bad} bytes differ from the host's draw"
                    ));
                }
                Ok(())
            })?;
        }
        Ok(())
    }
}
