//! `matmul` with NVFP4 weights against the CPU: the same `HostData::Nvfp4` uploaded to both
//! (the CUDA backend keeps it packed on the bf16 path, the CPU dequantizes it exactly).

use super::*;
use metrale_engine::loader::nvfp4::GlobalRule;

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

    /// NVFP4 weights at 1, 2, 4, 8 rows (gemv_nvfp4_m<M>), 17 (three passes), 128 (the bf16
    /// copy + cuBLAS: one more rounding of each weight, fused_moe's tolerance).
    pub(super) fn matmuls_nvfp4(&mut self) -> Result<()> {
        for (m, k, n, tol) in [
            (1, 5120, 1024, Tol::GEMM),
            (2, 2048, 520, Tol::GEMM),
            (4, 4096, 300, Tol::GEMM),
            (8, 1056, 64, Tol::GEMM),
            (17, 2048, 96, Tol::GEMM),
            (128, 2048, 256, MOE),
        ] {
            let xd = self.act(DType::BF16);
            let case = format!("x {} [{m}, {k}] · w nvfp4 [{n}, {k}]ᵀ", dt(xd));
            self.run("matmul", &case, |s| {
                let (x_d, x_c) = s.random(&[m, k], 1.0, xd)?;
                let x_c = s.as_gemm_operand(x_c);
                let host = s.nvfp4_host(&[n, k]);
                let (w_d, w_c) = (s.cuda.upload(&host)?, s.cpu.upload(&host)?);
                let mut out_d = s.cuda.zeros(&[m, n])?;
                let mut out_c = s.cpu.zeros(&[m, n])?;
                s.cuda.matmul(&mut out_d, &x_d, &w_d)?;
                s.cpu.matmul(&mut out_c, &x_c, &w_c)?;
                s.check("matmul", &case, tol, &out_d, &out_c)?;
                Ok(())
            })?;
        }
        Ok(())
    }
}
