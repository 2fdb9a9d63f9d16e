//! The whole-row one-row GEMVs (`gemv_full_*`, `gemv_fp8_full_*`) against the kernels they
//! replace, bit for bit.

use super::*;

impl Ops<'_> {
    /// `matmul` at one row with the whole-row kernels on and off, bf16 and FP8 weights: the
    /// same output bit for bit, and the whole-row kernel taken where the launcher says it fits
    /// (a Qwen3-30B-A3B layer's qkv and o, a column count that leaves a warp's second row
    /// empty, one that leaves most of the last block empty).
    pub(super) fn gemv_full(&mut self) -> Result<()> {
        let was = self.cuda.gemv_full();
        self.gemv_full_cases(was)
    }

    fn gemv_full_cases(&mut self, was: bool) -> Result<()> {
        for fp8 in [false, true] {
            for (n, k) in [
                (5120, 2048),
                (2048, 4096),
                (1001, 2048),
                (37, 4096),
                (4097, 1024),
            ] {
                let case = format!(
                    "x bf16 [1, {k}] · w {} [{n}, {k}]ᵀ whole-row kernel = gemv{}_m1",
                    if fp8 { "fp8" } else { "bf16" },
                    if fp8 { "_fp8" } else { "" }
                );
                self.run("matmul", &case, |s| {
                    let (x_d, _) = s.random(&[1, k], 1.0, DType::BF16)?;
                    let w_d = if fp8 {
                        s.fp8_pair(&[n, k])?.0
                    } else {
                        s.random(&[n, k], 0.05, DType::BF16)?.0
                    };
                    let mut outs = Vec::new();
                    for on in [false, true] {
                        s.cuda.retune(|t| t.gemm.gemv_full = on);
                        let mut out = s.cuda.zeros(&[1, n])?;
                        let r = s.cuda.matmul(&mut out, &x_d, &w_d);
                        s.cuda.retune(|t| t.gemm.gemv_full = was);
                        r?;
                        outs.push(s.cuda.to_host(&out)?);
                    }
                    s.cuda.retune(|t| t.gemm.gemv_full = true);
                    let kernel = s.cuda.gemv_full_kernel(fp8, n, k);
                    s.cuda.retune(|t| t.gemm.gemv_full = was);
                    let differ = outs[0]
                        .iter()
                        .zip(&outs[1])
                        .filter(|(a, b)| a.to_bits() != b.to_bits())
                        .count();
                    let ok = differ == 0 && kernel.is_some();
                    s.report.line(format!(
                        "matmul {case}: {} ({})",
                        if ok { "ok" } else { "FAIL" },
                        kernel.map_or("no whole-row kernel fits", |(name, _)| name)
                    ));
                    if differ != 0 {
                        s.report
                            .fail(format!("matmul {case}: {differ} of {n} outputs differ"));
                    }
                    if kernel.is_none() {
                        s.report.fail(format!(
                            "matmul {case}: no whole-row kernel taken (the check is void)"
                        ));
                    }
                    Ok(())
                })?;
            }
        }
        Ok(())
    }

    /// bf16 products of 2-8 rows on `gemv_bf16_mma` (the tuning's `gemm.bf16_gemv_mma`; k %
    /// 64 == 0, weights up to 4096 × 2048) against the CPU: a Qwen3.6-35B-A3B verify step's
    /// largest such weight and its router, the one-column shared-expert gate, a column count
    /// that leaves most of the last 16-column block empty, and k of one slice. Last, so every
    /// earlier case keeps its random draws.
    pub(super) fn gemv_bf16_mma(&mut self) -> Result<()> {
        for (m, k, n) in [
            (4, 2048, 4096),
            (4, 2048, 256),
            (4, 2048, 1),
            (8, 4096, 1001),
            (2, 64, 37),
            (3, 1024, 2048),
        ] {
            self.matmul_case((m, k, n), DType::BF16, " (gemv_bf16_mma)")?;
        }
        Ok(())
    }

    /// The MTP drafts' FP8 copy of a bf16 LM head (`Backend::draft_head`) times one row
    /// against the CPU's product with the bf16 head: e4m3 rounds each weight by up to 2^-4 of
    /// itself, about 4% of the output's rms over random signs, so 20% of the rms bounds it
    /// and a wrong scale rule (every output off by its whole size) fails. Last, after
    /// `gemv_bf16_mma`.
    pub(super) fn draft_head(&mut self) -> Result<()> {
        const FP8_HEAD: Tol = Tol {
            atol: 0.0,
            atol_rms: 0.2,
            rtol: 0.0,
        };
        for (m, k, n) in [(1, 2048, 4099), (3, 1024, 640)] {
            let case = format!("x bf16 [{m}, {k}] · fp8 draft copy of w bf16 [{n}, {k}]ᵀ");
            self.run("draft_head", &case, |s| {
                let (x_d, x_c) = s.random(&[m, k], 1.0, DType::BF16)?;
                let x_c = s.as_gemm_operand(x_c);
                let (w_d, w_c) = s.random(&[n, k], 0.05, DType::BF16)?;
                let Some(q) = s.cuda.draft_head(&w_d)? else {
                    s.report.fail(format!(
                        "draft_head {case}: no FP8 copy made (the check is void)"
                    ));
                    return Ok(());
                };
                let mut out_d = s.cuda.zeros(&[m, n])?;
                let mut out_c = s.cpu.zeros(&[m, n])?;
                s.cuda.matmul(&mut out_d, &x_d, &q)?;
                s.cpu.matmul(&mut out_c, &x_c, &w_c)?;
                s.check("draft_head", &case, FP8_HEAD, &out_d, &out_c)?;
                Ok(())
            })?;
        }
        Ok(())
    }
}
