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
        // FP8 weights: up to 128 rows (k % 64 == 0) the tensor-core GEMVs (gemv_fp8_mma to 8
        // rows, gemv_fp8_mma_many in chunks of 32 beyond), else up to 32 rows the CUDA-core
        // GEMV, 8 rows a pass (exact products, f32 sums: GEMM tolerance); more rows the bf16
        // copy of the weight through cuBLAS (one more rounding of each weight: fused_moe's
        // tolerance); k % 16 != 0 takes the scalar GEMV.
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
            // Last, so the cases above keep their random draws: decode batches on
            // gemv_fp8_mma_many (a last chunk cut short at 45 and 100, four full ones at 128),
            // and a size past it (the bf16 copy + cuBLAS). (Sizes whose draws add up to an
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
}
