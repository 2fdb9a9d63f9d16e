//! The NVFP4 tile GEMM (`nvfp4_gemm.cu`, issue 35; docs/nvfp4.md, "CUDA, the tile GEMM"): NVFP4
//! weights times 16-256 bf16 rows of x on tensor cores, each weight converted to its exact bf16
//! operand once a block (a block: 32, 64 or 128 weight rows × 32 or 64 x rows; x staged in
//! shared memory with cp.async), where `gemv_nvfp4_mma_*` converts it once for every 32 x rows.
//! `matmul_nvfp4` takes it from `gemm.nvfp4_tile_rows_min` rows (off by default until a GPU
//! has timed it against the GEMV: `cuda_check nvfp4-speed`, route `nvfp4 tile`).

use super::elementwise::cfg;
use super::nvfp4::tile_grid;
use super::tensor::CudaTensor;
use super::{CudaBackend, check};
use crate::backend::Result;
use crate::backend::kernels::{self, Kernel};

/// The parameters of `nvfp4_gemm_*`: out, x, w, scales, globals, m, n, k.
type Nvfp4GemmArgs = (u64, u64, u64, u64, u64, i32, i32, i32);

/// A tile kernel: the kernel, its weight rows and x rows a block, its threads a block.
type Tile = (Kernel<Nvfp4GemmArgs>, usize, usize, u32);

/// The tile kernel for `m` rows of x and `n` weight rows on a GPU of `multiprocessors`: blocks
/// of 32 x rows up to 32 rows (`_x4`: 64 would waste half the mma work at 16-32), else 64;
/// of the most weight rows (128, 64, 32: the more, the fewer shared loads and permutes of x
/// a weight) that still make a block for every multiprocessor, else 32 (e.g. n = 5120 at 32
/// rows: 160 blocks of 32 weight rows where 64 would make 80).
fn tile_kernel(m: usize, n: usize, multiprocessors: usize) -> Tile {
    // (weight rows, x rows) a block, the preferred first.
    let shapes: &[(usize, usize)] = if m <= 32 {
        &[(64, 32), (32, 32)]
    } else {
        &[(128, 64), (64, 64), (32, 64)]
    };
    let &(w_rows, x_rows) = shapes
        .iter()
        .find(|&&(w, x)| n.div_ceil(w) * m.div_ceil(x) >= multiprocessors)
        .unwrap_or(&shapes[shapes.len() - 1]);
    let (kernel, threads) = match (w_rows, x_rows) {
        (64, 32) => (kernels::nvfp4_gemm_r1_x4_w4, 128),
        (32, 32) => (kernels::nvfp4_gemm_r1_x4_w2, 64),
        (128, _) => (kernels::nvfp4_gemm_r2_x8_w4, 128),
        (64, _) => (kernels::nvfp4_gemm_r1_x8_w4, 128),
        _ => (kernels::nvfp4_gemm_r1_x8_w2, 64),
    };
    (kernel, w_rows, x_rows, threads)
}

impl CudaBackend {
    /// out [m, n] f32 = x [m, k] · wᵀ for an F4 weight w [n, k] on the tile GEMM, for a
    /// non-empty product that `matmul_nvfp4` checked (k % 32 == 0, sm_80+).
    pub(super) fn matmul_nvfp4_tile(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        w: &CudaTensor,
    ) -> Result<()> {
        let (m, k, n) = (x.rows(), x.cols(), w.rows());
        check("matmul", k.is_multiple_of(32) && m > 0 && n > 0, || {
            format!("NVFP4 tile GEMM of x {:?} · w {:?}ᵀ", x.shape, w.shape)
        })?;
        let (kernel, w_rows, x_rows, threads) = tile_kernel(m, n, self.info.multiprocessors);
        let mut narrowed = None;
        let x = self.as_bf16(x, &mut narrowed)?;
        let args = self.nvfp4_args(out, x, w)?;
        let grid = tile_grid(m, x_rows, n, w_rows)?;
        // SAFETY: out is [m, n] f32, x [m, k] bf16, w [n, k] F4 with its [n, k / 16] scale
        // bytes and [n] f32 multipliers (checked by matmul_nvfp4; m, n > 0 and k % 32 == 0
        // above). Every 16-byte load of a packed row (k / 2 bytes, a multiple of 16) and every
        // 16-byte cp.async of an x row (2k bytes) is inside its row and 16-byte aligned, the
        // 2-byte scale loads (k / 16 bytes a row, even) too; chunks past k or past m copy
        // zeros from x's base without reading it. Block (cx, cy) reads x rows
        // [x_rows·cx, +x_rows) and weight rows [w_rows·cy, +w_rows) (rows past n read row
        // n - 1) and writes out[r][c] only for r < m, c < n. `threads` is the block size the
        // kernel was compiled for (its warps · 32, tile_kernel's table). Its shared memory is
        // static (at most 34,816 bytes), under the 48 KiB a launch may take without opting in.
        unsafe { kernel.launch(self, cfg(grid, threads), args) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tile_choice_keeps_the_gpu_busy() {
        let pick = |m, n| {
            let (_, w, x, threads) = tile_kernel(m, n, 132);
            (w, x, threads)
        };
        assert_eq!(pick(16, 34816), (64, 32, 128));
        assert_eq!(pick(32, 16480), (64, 32, 128));
        // 5120 rows: 80 blocks of 64 at up to 64 x rows, 40 of 128.
        assert_eq!(pick(32, 5120), (32, 32, 64));
        assert_eq!(pick(64, 5120), (32, 64, 64));
        assert_eq!(pick(128, 5120), (64, 64, 128));
        assert_eq!(pick(64, 34816), (128, 64, 128));
        assert_eq!(pick(256, 5120), (128, 64, 128));
    }
}
