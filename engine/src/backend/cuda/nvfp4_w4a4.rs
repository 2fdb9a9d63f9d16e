//! NVFP4 weights times NVFP4 activations on Blackwell GeForce and DGX Spark (`nvfp4_w4a4.cu`,
//! issue 35; docs/nvfp4.md, "Blackwell"): `quant_nvfp4_rows` turns x into an F4 tensor (its
//! packed pairs, E4M3 scales and per-row globals: the weights' own layout, so one allocation
//! holds it), then `gemm_nvfp4_w4a4_r2_b<NB>` multiplies the two on the block-scaled FP4 tensor
//! cores. Taken by `matmul_nvfp4` only with `gemm.nvfp4_w4a4` on a device whose kernels were
//! compiled for `sm_120a` / `sm_121a` (an older NVRTC gives portable PTX there, where the mma
//! would trap), k % 64 == 0 and up to `gemm.nvfp4_mma_rows` rows.

use super::elementwise::{cfg, dim, int};
use super::nvfp4::{TILE_ROWS, by_x_tiles, tile_grid};
use super::tensor::{CudaTensor, DType};
use super::{CudaBackend, check};
use crate::backend::Result;
use crate::backend::kernels;

/// Threads of a block (FP8_MMA_WARPS warps).
const THREADS: u32 = 256;

/// Whether NVRTC's target for this device has the block-scaled FP4 mma.
pub(super) fn has_fp4_mma(arch: &str) -> bool {
    matches!(arch, "sm_120a" | "sm_121a")
}

impl CudaBackend {
    /// Whether this device's kernels have the block-scaled FP4 mma (sm_120a / sm_121a).
    pub fn fp4_mma(&self) -> bool {
        has_fp4_mma(&self.info.arch)
    }

    /// Whether `matmul_nvfp4` of `m` rows over `k` columns takes the W4A4 route.
    pub(super) fn nvfp4_w4a4(&self, m: usize, k: usize) -> bool {
        let gemm = self.tuning().gemm;
        gemm.nvfp4_w4a4 && m <= gemm.nvfp4_mma_rows && k.is_multiple_of(64) && self.fp4_mma()
    }

    /// x (bf16 or f32, [m, k], k % 64 == 0) as NVFP4 rows: an F4 tensor whose per-row
    /// multipliers are the rows' globals (`quant_nvfp4_rows`).
    pub(super) fn quant_nvfp4_rows(&self, x: &CudaTensor) -> Result<CudaTensor> {
        let (m, k) = (x.rows(), x.cols());
        check("matmul", k.is_multiple_of(64), || {
            format!(
                "NVFP4 activations of x {:?}: k must be a multiple of 64",
                x.shape
            )
        })?;
        let q = self.alloc(&[m, k], DType::F4)?;
        if m == 0 || k == 0 {
            return Ok(q);
        }
        let mut narrowed = None;
        let x = self.as_bf16(x, &mut narrowed)?;
        let s = &self.stream;
        let args = (
            q.ptr(s),
            q.scales_ptr(s),
            self.f4_globals_ptr(&q),
            x.ptr(s),
            int(k, "matmul")?,
        );
        // SAFETY: q is an F4 [m, k] tensor (m · k / 2 packed bytes, then m · k / 16 scale
        // bytes, then m f32), x [m, k] bf16; a block per row writes that row's k / 2 bytes (8
        // at a time, 8-byte aligned as k % 64 == 0), k / 16 scale bytes and its global, reading
        // the row's 2k bytes 32 at a time (16-byte aligned).
        unsafe {
            kernels::quant_nvfp4_rows.launch(self, cfg((dim(m, "matmul")?, 1), THREADS), args)?;
        }
        Ok(q)
    }

    /// out [m, n] f32 = x [m, k] · wᵀ for an F4 weight w [n, k], x quantized to NVFP4 first;
    /// for a non-empty product that `matmul_nvfp4` checked, with [`Self::nvfp4_w4a4`] true.
    pub(super) fn matmul_nvfp4_w4a4(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        w: &CudaTensor,
    ) -> Result<()> {
        let (m, k, n) = (x.rows(), x.cols(), w.rows());
        let xq = self.quant_nvfp4_rows(x)?;
        let (kernel, x_rows) = by_x_tiles(
            m,
            [
                kernels::gemm_nvfp4_w4a4_r2_b1,
                kernels::gemm_nvfp4_w4a4_r2_b2,
                kernels::gemm_nvfp4_w4a4_r2_b4,
            ],
        );
        let s = &self.stream;
        let args = (
            out.ptr(s),
            xq.ptr(s),
            xq.scales_ptr(s),
            self.f4_globals_ptr(&xq),
            w.ptr(s),
            w.scales_ptr(s),
            self.f4_globals_ptr(w),
            int(m, "matmul")?,
            int(n, "matmul")?,
            int(k, "matmul")?,
        );
        let grid = tile_grid(m, x_rows, n, TILE_ROWS)?;
        // SAFETY: out is [m, n] f32; xq and w are F4 [m, k] and [n, k] (packed rows of k / 2
        // bytes, k / 16 scale bytes a row, one f32 a row), k % 64 == 0 (nvfp4_w4a4), so every
        // 4-byte load of a row's packed bytes (32 a 64-wide step) and of its scale bytes (4 a
        // step) is inside the row and aligned. Block (cx, cy) reads x rows [x_rows·cx, +x_rows)
        // and weight rows [TILE_ROWS·cy, +TILE_ROWS), clamping rows past either matrix to its
        // last (read, not written), and writes out[r][c] only for r < m, c < n.
        unsafe { kernel.launch(self, cfg(grid, THREADS), args) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_blackwell_targets_have_the_fp4_mma() {
        assert!(has_fp4_mma("sm_120a") && has_fp4_mma("sm_121a"));
        for arch in [
            "sm_90a",
            "compute_120",
            "compute_121",
            "compute_100",
            "compute_89",
        ] {
            assert!(!has_fp4_mma(arch), "{arch}");
        }
    }
}
