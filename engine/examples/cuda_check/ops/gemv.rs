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
}
