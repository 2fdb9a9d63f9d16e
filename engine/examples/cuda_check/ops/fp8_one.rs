//! The one-token FP8 GEMV on tensor cores (`gemv_fp8_one_*`, fp8_one.cu) against the CPU, and
//! beside it the CUDA-core kernel it replaces on the same inputs. (The experts' one-token
//! kernels are fused_moe's "one-token tensor cores" route, ops/moe.rs.)

use super::*;

impl Ops<'_> {
    /// `matmul` of one row by an FP8 weight with the one-token kernels on and off: 30B-A3B's
    /// qkv (k split four ways) and o (eight), a tile cut short (n 37, k 640: five slices a
    /// warp pair), several batches a warp (k 11264), a single group (k 128), and x far past
    /// f16's range (its staging's power of two). Fails if the kernel would not take the shape.
    pub(super) fn gemv_fp8_one(&mut self) -> Result<()> {
        let was = self.cuda.fp8_one();
        for (k, n, scale) in [
            (2048, 5120, 1.0),
            (4096, 2048, 1.0),
            (640, 37, 1.0),
            (11_264, 64, 1.0),
            (128, 9, 1.0),
            (2048, 512, 3e5),
            (2048, 512, 1e-6),
        ] {
            for on in [true, false] {
                let case = format!(
                    "x bf16 [1, {k}] (· {scale:e}) · w fp8 [{n}, {k}]ᵀ {}",
                    if on {
                        "one-token tensor cores"
                    } else {
                        "cuda cores"
                    }
                );
                self.run("matmul", &case, |s| {
                    let (x_d, x_c) = s.random(&[1, k], scale, DType::BF16)?;
                    let (w_d, w_c) = s.fp8_pair(&[n, k])?;
                    let mut out_d = s.cuda.zeros(&[1, n])?;
                    let mut out_c = s.cpu.zeros(&[1, n])?;
                    s.cuda.set_fp8_one(on);
                    let r = s.cuda.matmul(&mut out_d, &x_d, &w_d);
                    s.cuda.set_fp8_one(was);
                    r?;
                    s.cpu.matmul(&mut out_c, &x_c, &w_c)?;
                    s.check("matmul", &case, Tol::GEMM, &out_d, &out_c)?;
                    if on && !s.cuda.fp8_one_gemv_fits(k) {
                        s.report.fail(format!(
                            "matmul {case}: the one-token kernel declined (the check is void)"
                        ));
                    }
                    Ok(())
                })?;
            }
        }
        Ok(())
    }
}
