//! `matmul` against the CPU: bf16 and FP8 weights at decode and prefill sizes.

use super::*;

impl Ops<'_> {
    /// `matmul` of a random x `[m, k]` (type `xd`) and a random weight `[n, k]` of the path's
    /// weight type against the CPU, at GEMM tolerance; `note` ends the case's name.
    pub(super) fn matmul_case(
        &mut self,
        (m, k, n): (usize, usize, usize),
        xd: DType,
        note: &str,
    ) -> Result<()> {
        let case = format!(
            "x {} [{m}, {k}] · w {} [{n}, {k}]ᵀ{note}",
            dt(xd),
            dt(self.wd())
        );
        self.run("matmul", &case, |s| {
            let (x_d, x_c) = s.random(&[m, k], 1.0, xd)?;
            let x_c = s.as_gemm_operand(x_c);
            let (w_d, w_c) = s.random(&[n, k], 0.05, s.wd())?;
            let mut out_d = s.cuda.zeros(&[m, n])?;
            let mut out_c = s.cpu.zeros(&[m, n])?;
            s.cuda.matmul(&mut out_d, &x_d, &w_d)?;
            s.cpu.matmul(&mut out_c, &x_c, &w_c)?;
            s.check("matmul", &case, Tol::GEMM, &out_d, &out_c)?;
            Ok(())
        })
    }

    pub(super) fn matmuls(&mut self) -> Result<()> {
        for (m, k, n, xd) in [
            (1, 4096, 12_288, DType::BF16),
            (1, 12_288, 4096, DType::BF16),
            (7, 4096, 6144, DType::BF16),
            (5, 64, 160, DType::BF16),
            (130, 96, 1536, DType::BF16),
            (1000, 4096, 4096, DType::BF16),
            (7, 96, 320, DType::F32),
            (0, 64, 1536, DType::BF16),
        ] {
            let xd = self.act(xd);
            self.matmul_case((m, k, n), xd, "")?;
        }
        // FP8 weights: up to 128 rows (k % 64 == 0) on tensor cores (gemv_fp8_mma to 8 rows,
        // beyond them the tile GEMM fp8_gemm_rows_* from gemm.fp8_tile_rows_min rows, else
        // gemv_fp8_mma_many in chunks of 32: matmul_fp8_rows below takes both), else up to 32
        // rows the CUDA-core GEMV, 8 rows a pass (exact products, f32 sums: GEMM tolerance);
        // more rows the bf16 copy of the weight through cuBLAS (one more rounding of each
        // weight: fused_moe's tolerance); k % 16 != 0 takes the scalar GEMV.
        // The float32 path dequantizes them to f32 at upload: f32 GEMMs on the CPU's values.
        for (m, k, n, xd, tol) in [
            (1, 2048, 5120, DType::BF16, Tol::GEMM),
            (1, 4096, 2048, DType::BF16, Tol::GEMM),
            (1, 8192, 9000, DType::BF16, Tol::GEMM),
            (1, 2064, 7, DType::BF16, Tol::GEMM),
            (1, 4096, 12_288, DType::BF16, Tol::GEMM),
            (3, 2048, 768, DType::F32, Tol::GEMM),
            (8, 272, 40, DType::BF16, Tol::GEMM),
            (20, 2048, 1536, DType::BF16, Tol::GEMM),
            (32, 1024, 96, DType::F32, Tol::GEMM),
            (2, 200, 11, DType::BF16, Tol::GEMM),
            (130, 2048, 1536, DType::BF16, MOE),
            (0, 64, 128, DType::BF16, Tol::GEMM),
            // Last, so the cases above keep their random draws: decode batches on the default
            // route (the tile GEMM; gemv_fp8_mma_many's chunks cut short at 45 and 100, four
            // full ones at 128), and a size past it (the bf16 copy + cuBLAS). (Sizes whose draws add up to an
            // earlier list's, so the checks after these keep theirs too.)
            (45, 2048, 5120, DType::BF16, Tol::GEMM),
            (100, 4096, 2048, DType::BF16, Tol::GEMM),
            (128, 1536, 1024, DType::BF16, Tol::GEMM),
            (257, 2048, 1536, DType::BF16, MOE),
        ] {
            let xd = self.act(xd);
            let case = format!("x {} [{m}, {k}] · w fp8 [{n}, {k}]ᵀ", dt(xd));
            self.run("matmul", &case, |s| {
                let (x_d, x_c) = s.random(&[m, k], 1.0, xd)?;
                let x_c = s.as_gemm_operand(x_c);
                let (w_d, w_c) = s.fp8_pair(&[n, k])?;
                let mut out_d = s.cuda.zeros(&[m, n])?;
                let mut out_c = s.cpu.zeros(&[m, n])?;
                s.cuda.matmul(&mut out_d, &x_d, &w_d)?;
                s.cpu.matmul(&mut out_c, &x_c, &w_c)?;
                s.check("matmul", &case, tol, &out_d, &out_c)?;
                Ok(())
            })?;
        }
        self.matmuls_nvfp4()?;
        if self.fp32() {
            return Ok(()); // the tensor-core FP8 GEMM is the bf16 path's
        }
        self.matmul_fp8_mma()?;
        self.gemv_full()
    }

    /// FP8 products of 9 to 128 rows (k % 64 == 0) on both tensor-core routes, each against the
    /// CPU at GEMM tolerance (exact products, f32 sums): the tile GEMM (`fp8_gemm_rows_*`,
    /// `gemm.fp8_tile_rows_min` 1, `gemm.fp8_tile_max_splits` 8) and `gemv_fp8_mma_many` (off). Every build (16, 32, 64, 128
    /// rows) with x rows short of it, column counts off the 128-row tile, short k (one split)
    /// and k = 192 (a half scale group), k split 3 and 8 ways (Qwen3-30B-A3B's q|k|v and o among
    /// them); the tile route twice gives the same bits (its splits' sums are added in a fixed
    /// order), and the route taken is named (a case the tile GEMM did not take fails: the check
    /// would be void). Last of the bf16 path's cases, so every earlier one keeps its draws.
    pub(super) fn matmul_fp8_rows(&mut self) -> Result<()> {
        for (m, k, n) in [
            (9, 2048, 5120),
            (16, 4096, 2048),
            (17, 256, 200),
            (33, 2048, 77),
            (45, 192, 300),
            (64, 4096, 2048),
            (100, 2048, 1000),
            (128, 2048, 5120),
            (128, 4096, 2048),
        ] {
            let case = format!("x bf16 [{m}, {k}] · w fp8 [{n}, {k}]ᵀ");
            self.run("matmul", &case, |s| {
                let (x_d, x_c) = s.random(&[m, k], 1.0, DType::BF16)?;
                let (w_d, w_c) = s.fp8_pair(&[n, k])?;
                let mut out_c = s.cpu.zeros(&[m, n])?;
                s.cpu.matmul(&mut out_c, &x_c, &w_c)?;
                let was = s.cuda.tuning().gemm.fp8_tile_rows_min;
                let max_splits = s.cuda.tuning().gemm.fp8_tile_max_splits;
                let mut outs = Vec::new();
                let mut plan = None;
                for tiles in [true, true, false] {
                    s.cuda.retune(|t| {
                        t.gemm.fp8_tile_rows_min = tiles.then_some(1);
                        t.gemm.fp8_tile_max_splits = 8;
                    });
                    plan = plan.or(s.cuda.fp8_tile_plan(m, n, k));
                    let mut out = s.cuda.zeros(&[m, n])?;
                    let r = s.cuda.matmul(&mut out, &x_d, &w_d);
                    s.cuda.retune(|t| {
                        t.gemm.fp8_tile_rows_min = was;
                        t.gemm.fp8_tile_max_splits = max_splits;
                    });
                    r?;
                    outs.push(out);
                }
                let Some((kernel, splits)) = plan else {
                    s.report.fail(format!(
                        "matmul {case}: the tile GEMM was not taken (the check is void)"
                    ));
                    return Ok(());
                };
                let tile_case = format!("{case} ({kernel}, {splits} splits of k)");
                s.check("matmul", &tile_case, Tol::GEMM, &outs[0], &out_c)?;
                s.same_bits(
                    "matmul",
                    &tile_case,
                    "a second run",
                    &[(&outs[1], &outs[0])],
                )?;
                s.check(
                    "matmul",
                    &format!("{case} (gemv_fp8_mma_many)"),
                    Tol::GEMM,
                    &outs[2],
                    &out_c,
                )?;
                Ok(())
            })?;
        }
        Ok(())
    }
}
