//! `matmul` with NVFP4 weights against the CPU: the same `HostData::Nvfp4` uploaded to both
//! (the CUDA backend keeps it packed on the bf16 path, the CPU dequantizes it exactly); and
//! dummy NVFP4 weights (`HostData::RandomNvfp4`), which the device draws itself, byte for byte
//! the host's draw.

use super::*;
use metrale_engine::backend::nvfp4_act;
use metrale_engine::loader::nvfp4::GlobalRule;
use metrale_engine::loader::{random_nvfp4_global, random_nvfp4_parts};

impl Ops<'_> {
    /// A random NVFP4 weight as the loader hands it over: any nibbles (negative zeros
    /// included), E4M3 scales 2^-4..2^2 and a global a row around 2e-3 (two parts with
    /// different globals, as a fused projection).
    fn nvfp4_host(&mut self, shape: &[usize]) -> HostTensor<'static> {
        let n: usize = shape.iter().product();
        let rows = shape[0];
        let packed: Vec<u8> = (0..n / 2)
            .map(|_| (self.rng.next_u64() >> 56) as u8)
            .collect();
        let scales: Vec<u8> = (0..n / 16)
            .map(|_| 0x18 + (self.rng.next_u64() >> 59) as u8 * 3)
            .collect();
        let globals = (0..rows)
            .map(|r| if r < rows / 2 { 2e-3 } else { 3e-3 })
            .collect();
        HostTensor {
            shape: shape.to_vec(),
            data: HostData::Nvfp4 {
                packed: packed.into(),
                scales: scales.into(),
                globals,
                rule: GlobalRule::Multiply,
            },
        }
    }

    /// NVFP4 weights through each route of `matmul`: the tensor-core kernels
    /// (`gemv_nvfp4_mma_*`; exact products: the GEMM tolerance) at 1 to 256 rows with 16, 32
    /// and 64 weight rows a block, K not a multiple of its 128-wide slices included; and the
    /// bf16 copy + cuBLAS (one more rounding of each weight, fused_moe's tolerance) past 256
    /// rows and at any rows with `gemm.nvfp4_mma_rows` 0; and the tile GEMM (`nvfp4_gemm_*`,
    /// exact products: the GEMM tolerance) with `gemm.nvfp4_tile_rows_min` 1: x rows not a
    /// multiple of its 32 or 64 (16, 33, 100, 256 and others), weight rows not a multiple of
    /// its 32, 64 or 128 (each of its five kernels), K = 32 · odd.
    pub(super) fn matmuls_nvfp4(&mut self) -> Result<()> {
        // (x rows, k, n, mma rows setting, tile GEMM from, tolerance)
        let cases = [
            (1, 5120, 1024, 256, None, Tol::GEMM),
            (3, 2080, 520, 256, None, Tol::GEMM),
            (8, 1056, 64, 256, None, Tol::GEMM),
            (12, 4096, 300, 256, None, Tol::GEMM),
            (17, 2048, 96, 256, None, Tol::GEMM),
            (40, 1056, 200, 256, None, Tol::GEMM),
            (9, 2048, 72, 256, None, Tol::GEMM),
            (128, 2048, 256, 256, None, Tol::GEMM),
            (300, 1024, 128, 256, None, MOE),
            (2, 2048, 520, 0, None, MOE),
            (16, 2048, 96, 256, Some(1), Tol::GEMM),
            (17, 2048, 96, 256, Some(1), Tol::GEMM),
            (33, 1056, 200, 256, Some(1), Tol::GEMM),
            (40, 1056, 200, 256, Some(1), Tol::GEMM),
            (64, 5120, 520, 256, Some(1), Tol::GEMM),
            (100, 4096, 300, 256, Some(1), Tol::GEMM),
            (128, 2048, 256, 256, Some(1), Tol::GEMM),
            (256, 2080, 130, 256, Some(1), Tol::GEMM),
            (3, 2080, 520, 256, Some(1), Tol::GEMM),
            // Wide enough for the larger blocks (nvfp4_gemm.rs's tile_kernel on 114-132
            // multiprocessors): 64 weight rows × 32 x rows, 64 × 64, 128 × 64; N tails.
            (17, 1056, 8500, 256, Some(1), Tol::GEMM),
            (100, 1056, 5000, 256, Some(1), Tol::GEMM),
            (64, 1056, 16900, 256, Some(1), Tol::GEMM),
        ];
        for (m, k, n, mma_rows, tile_min, tol) in cases {
            let xd = self.act(DType::BF16);
            let route = match (mma_rows, tile_min) {
                (0, _) => "bf16 copy",
                (_, Some(_)) => "tile",
                _ => "mma",
            };
            let case = format!("x {} [{m}, {k}] · w nvfp4 [{n}, {k}]ᵀ [{route}]", dt(xd));
            self.run("matmul", &case, |s| {
                let (x_d, x_c) = s.random(&[m, k], 1.0, xd)?;
                let x_c = s.as_gemm_operand(x_c);
                let host = s.nvfp4_host(&[n, k]);
                let (w_d, w_c) = (s.cuda.upload(&host)?, s.cpu.upload(&host)?);
                let mut out_d = s.cuda.zeros(&[m, n])?;
                let mut out_c = s.cpu.zeros(&[m, n])?;
                // This route's settings for this call only: the run's own after.
                let saved = s.cuda.tuning().gemm;
                s.cuda.retune(|t| {
                    t.gemm.nvfp4_mma_rows = mma_rows;
                    t.gemm.nvfp4_tile_rows_min = tile_min;
                });
                let r = s.cuda.matmul(&mut out_d, &x_d, &w_d);
                s.cuda.retune(|t| t.gemm = saved);
                r?;
                s.cpu.matmul(&mut out_c, &x_c, &w_c)?;
                s.check("matmul", &case, tol, &out_d, &out_c)?;
                Ok(())
            })?;
        }
        // Dummy NVFP4 weights at the 27B's q|k|v width: drawn on the device, dequantized on
        // the host, through the GEMV.
        self.matmul_dummy_nvfp4()?;
        self.matmuls_nvfp4_w4a4()
    }

    /// Blackwell's W4A4 route (`gemm.nvfp4_w4a4`, sm_120a / sm_121a only: elsewhere it says so
    /// and checks nothing): x quantized to NVFP4 on the device, against the CPU's matmul of
    /// the host's quantization of the same x (`nvfp4_act`, the kernel's arithmetic: the same
    /// values, so exact products and the GEMM tolerance) at 1 to 128 rows (each x tile width),
    /// one 64-wide step, N tails.
    fn matmuls_nvfp4_w4a4(&mut self) -> Result<()> {
        if self.fp32() || !self.cuda.fp4_mma() {
            let arch = &self.cuda.info().arch;
            self.report.line(format!(
                "matmul nvfp4 w4a4: skipped (needs the bf16 path on sm_120a / sm_121a; this run: {arch})"
            ));
            return Ok(());
        }
        for (m, k, n) in [
            (1, 5120, 1024),
            (3, 64, 70),
            (16, 2048, 520),
            (33, 1088, 300),
            (128, 4096, 256),
        ] {
            let case = format!("x bf16 [{m}, {k}] · w nvfp4 [{n}, {k}]ᵀ [w4a4]");
            self.run("matmul", &case, |s| {
                let (x_d, x_c) = s.random(&[m, k], 1.0, DType::BF16)?;
                let q = nvfp4_act::quantize_rows(&x_c.data, k);
                let x_c = CpuTensor::new(vec![m, k], nvfp4_act::dequantize_rows(&q, k));
                let host = s.nvfp4_host(&[n, k]);
                let (w_d, w_c) = (s.cuda.upload(&host)?, s.cpu.upload(&host)?);
                let mut out_d = s.cuda.zeros(&[m, n])?;
                let mut out_c = s.cpu.zeros(&[m, n])?;
                let saved = s.cuda.tuning().gemm;
                s.cuda.retune(|t| t.gemm.nvfp4_w4a4 = true);
                let r = s.cuda.matmul(&mut out_d, &x_d, &w_d);
                s.cuda.retune(|t| t.gemm = saved);
                r?;
                s.cpu.matmul(&mut out_c, &x_c, &w_c)?;
                s.check("matmul", &case, Tol::GEMM, &out_d, &out_c)?;
                Ok(())
            })?;
        }
        Ok(())
    }

    /// [`Self::matmuls_nvfp4`]'s dummy-weight case.
    fn matmul_dummy_nvfp4(&mut self) -> Result<()> {
        let (m, k, n) = (4usize, 5120usize, 1024usize);
        let xd = self.act(DType::BF16);
        let case = format!("x {} [{m}, {k}] · w dummy nvfp4 [{n}, {k}]ᵀ", dt(xd));
        self.run("matmul", &case, |s| {
            let (x_d, x_c) = s.random(&[m, k], 1.0, xd)?;
            let x_c = s.as_gemm_operand(x_c);
            let host = HostTensor {
                shape: vec![n, k],
                data: HostData::RandomNvfp4 {
                    seed: 21,
                    std: 0.02,
                },
            };
            let (w_d, w_c) = (s.cuda.upload(&host)?, s.cpu.upload(&host)?);
            let mut out_d = s.cuda.zeros(&[m, n])?;
            let mut out_c = s.cpu.zeros(&[m, n])?;
            s.cuda.matmul(&mut out_d, &x_d, &w_d)?;
            s.cpu.matmul(&mut out_c, &x_c, &w_c)?;
            s.check("matmul", &case, Tol::GEMM, &out_d, &out_c)?;
            Ok(())
        })
    }

    /// Dummy NVFP4 weights drawn on the device against the host's draw: on the bf16 path a 2-D
    /// weight and a 3-D stack (the experts', moe_fp4.rs) stay packed and their packed pairs,
    /// scale bytes and per-row globals must be the host's byte for byte (the first of 300 x
    /// 1024 spans three 65536-byte chunks of the stream); rows of 48 (16-value blocks, not 32)
    /// and the float32 path take the host's values.
    pub(super) fn uploads_nvfp4(&mut self) -> Result<()> {
        let fp32 = self.fp32();
        for (shape, seed) in [
            (vec![300usize, 1024usize], 31u64),
            (vec![7, 5120], 32),
            (vec![4, 64, 96], 33),
            (vec![3, 48], 34),
        ] {
            let case = format!("random nvfp4 {shape:?} seed {seed}");
            self.run("upload", &case, |s| {
                let host = HostTensor {
                    shape: shape.clone(),
                    data: HostData::RandomNvfp4 { seed, std: 0.02 },
                };
                let got = s.cuda.upload(&host)?;
                if got.dtype() == DType::F4 {
                    let n: usize = shape.iter().product();
                    let (packed, scales) = random_nvfp4_parts(seed, n);
                    let globals = vec![random_nvfp4_global(0.02); n / host.cols()];
                    let (dp, ds, dg) = s.cuda.f4_parts(&got)?;
                    let differ = |a: &[u8], b: &[u8]| a.iter().zip(b).filter(|(x, y)| x != y).count();
                    let bad = differ(&dp, &packed)
                        + differ(&ds, &scales)
                        + dg.iter().zip(&globals).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
                    s.report.line(format!(
                        "upload {case}: device draw vs host draw: {bad} of {} bytes and globals differ",
                        packed.len() + scales.len() + globals.len()
                    ));
                    s.report.record(json!({"op": "upload", "case": case, "differ": bad}));
                    if bad > 0 || dp.len() != packed.len() || ds.len() != scales.len() {
                        s.report.fail(format!("upload {case}: {bad} bytes differ from the host's draw"));
                    }
                    return Ok(());
                }
                let v = host.to_f32();
                let want = CpuTensor::new(shape.clone(), if fp32 { v } else { round_bf16(&v) });
                s.check("upload", &case, Tol::EXACT, &got, &want)?;
                Ok(())
            })?;
        }
        Ok(())
    }
}
