//! RMSNorm and the fused residual add + RMSNorm against the CPU.

use super::*;

impl Ops<'_> {
    /// Decode rows (fewer than the multiprocessors) take up to 1,024 threads a row, each
    /// holding its values in registers (norm.cu's NORM_REGS): the 27B's 5,120-wide row.
    pub(super) fn norms(&mut self) -> Result<()> {
        for (t, h, xd) in [
            (1, 64, DType::F32),
            (1, 5120, DType::F32),
            (7, 96, DType::F32),
            (130, 4096, DType::F32),
            (1000, 4096, DType::F32),
            (7, 4096, DType::BF16),
            (130, 96, DType::BF16),
        ] {
            if self.fp32() && xd == DType::BF16 {
                continue; // the float32 path's activations are f32
            }
            let case = format!("x {} [{t}, {h}]", dt(xd));
            self.run("rms_norm", &case, |s| {
                let (x_d, x_c) = s.random(&[t, h], 2.0, xd)?;
                let (w_d, w_c) = s.gains(h)?;
                let mut out_d = s.cuda.zeros(&[t, h])?;
                let mut out_c = s.cpu.zeros(&[t, h])?;
                s.cuda.rms_norm(&mut out_d, &x_d, &w_d, 1e-6)?;
                s.cpu.rms_norm(&mut out_c, &x_c, &w_c, 1e-6)?;
                s.check("rms_norm", &case, Tol::BF16, &out_d, &out_c)?;
                Ok(())
            })?;
        }
        for (t, h, rd, xd) in [
            (1, 64, DType::F32, DType::F32),
            (1, 5120, DType::F32, DType::F32),
            (7, 4096, DType::F32, DType::F32),
            (130, 96, DType::F32, DType::F32),
            (1000, 4096, DType::F32, DType::F32),
            (7, 96, DType::F32, DType::BF16),
            (7, 4096, DType::BF16, DType::BF16),
            (130, 64, DType::BF16, DType::F32),
        ] {
            if self.fp32() && (rd, xd) != (DType::F32, DType::F32) {
                continue;
            }
            let case = format!("residual {} x {} [{t}, {h}]", dt(rd), dt(xd));
            self.run("add_rms_norm", &case, |s| {
                let (mut r_d, mut r_c) = s.random(&[t, h], 4.0, rd)?;
                let (x_d, x_c) = s.random(&[t, h], 1.0, xd)?;
                let (w_d, w_c) = s.gains(h)?;
                let mut out_d = s.cuda.zeros(&[t, h])?;
                let mut out_c = s.cpu.zeros(&[t, h])?;
                s.cuda
                    .add_rms_norm(&mut out_d, &mut r_d, &x_d, &w_d, 1e-6)?;
                s.cpu.add_rms_norm(&mut out_c, &mut r_c, &x_c, &w_c, 1e-6)?;
                let (out_tol, res_tol) = match rd {
                    DType::F32 => (Tol::BF16, Tol::EXACT),
                    DType::BF16 | DType::F8 | DType::F4 | DType::Mx4 => (BF16_TWICE, Tol::BF16),
                };
                s.check(
                    "add_rms_norm",
                    &format!("{case} out"),
                    out_tol,
                    &out_d,
                    &out_c,
                )?;
                s.check(
                    "add_rms_norm",
                    &format!("{case} residual"),
                    res_tol,
                    &r_d,
                    &r_c,
                )?;
                Ok(())
            })?;
        }
        Ok(())
    }
}
