//! The FP8 tile GEMM (`fp8_gemm_rows.cu`): an FP8 weight times a decode batch of up to 128 bf16
//! rows on tensor cores, a block owning 128 weight rows (output columns) and every x row, x and
//! the weight staged in shared memory by cp.async, so x is read n / 128 times and each weight
//! byte once (`gemv_fp8_mma_many` reads x n / 16 times). Where the column tiles are fewer than
//! the multiprocessors, k is split over blocks whose sums the tile's last block adds in split
//! order (the backend's arrival counters elect it: no float atomics, the same bits every run).
//! `matmul_fp8` takes it from `gemm.fp8_tile_rows_min` rows up to 128.

use cudarc::driver::LaunchConfig;

use super::elementwise::{dim, int};
use super::tensor::{CudaTensor, DType};
use super::{CudaBackend, TICKETS, check};
use crate::backend::Result;
use crate::backend::kernels::{self, Kernel};

/// The parameters of `fp8_gemm_rows_m*`: out, part, tickets, x, w, scales, m, n, k.
type RowsArgs = (u64, u64, u64, u64, u64, u64, i32, i32, i32);

/// Weight rows (output columns) a block (F8R_ROWS in fp8_gemm_rows.cu).
const TILE_ROWS: usize = 128;
/// k columns a pipeline stage (F8R_BK): k must be a multiple, a split is a run of them.
const SLICE: usize = 64;
/// Stages of the pipeline (F8R_STAGES).
const STAGES: usize = 4;
/// Threads a block (F8R_WARPS warps).
const THREADS: u32 = 256;
/// The most splits of k: each adds a write and a read of the m · n f32 sums.
const MAX_SPLITS: usize = 8;
/// The fewest slices a split takes (the pipeline's depth).
const MIN_SLICES: usize = STAGES;

/// The build for `m` x rows (1 to 128) and the x rows it takes.
fn rows_kernel(m: usize) -> (Kernel<RowsArgs>, usize) {
    match m {
        ..=16 => (kernels::fp8_gemm_rows_m16, 16),
        17..=32 => (kernels::fp8_gemm_rows_m32, 32),
        33..=64 => (kernels::fp8_gemm_rows_m64, 64),
        _ => (kernels::fp8_gemm_rows_m128, 128),
    }
}

/// The most x rows the tile GEMM takes (its largest build).
const MAX_ROWS: usize = 128;

/// The dynamic shared memory of the build for `rows` x rows (F8rCfg::SMEM): STAGES stages of
/// the block's weight rows, its x rows (144 bytes each) and the weight rows' scales.
fn rows_smem(rows: usize) -> usize {
    STAGES * (TILE_ROWS * SLICE + rows * (2 * SLICE + 16) + 4 * TILE_ROWS)
}

/// Splits of k for `tiles` column tiles of `slices` slices each on `multiprocessors`: the
/// fewest that give the multiprocessors 7/8 of a block each, at least MIN_SLICES slices a split
/// and at most MAX_SPLITS (and one where the tiles outnumber the arrival counters).
fn splits(tiles: usize, slices: usize, multiprocessors: usize) -> usize {
    if tiles > TICKETS {
        return 1;
    }
    let most = (slices / MIN_SLICES).clamp(1, MAX_SPLITS);
    (7 * multiprocessors)
        .div_ceil(8 * tiles.max(1))
        .clamp(1, most)
}

/// A product the tile GEMM takes: the x rows of its build (`rows_kernel`), the column tiles
/// and the splits of k.
#[derive(Debug, Clone, Copy)]
pub(super) struct TilePlan {
    rows: usize,
    tiles: usize,
    splits: usize,
}

impl CudaBackend {
    /// The tile GEMM's plan where `matmul_fp8` takes it for `m` rows, `n` output columns over
    /// `k` columns: on tensor cores (`fp8_gemv_mma`: sm_80+, k % 64 == 0), from the tuning's
    /// `gemm.fp8_tile_rows_min` rows up to 128, with at most `gemm.fp8_tile_max_splits` splits
    /// of k (on an H100, performance log part 23: Qwen3-30B-A3B's o projection, [2048, 4096] in
    /// 16 column tiles of 8 splits, was slower than `gemv_fp8_mma_many` at every row count;
    /// every shape of 1 to 3 splits faster at 128 rows, 1.2-1.8x), where the build's shared
    /// memory fits the GPU (the 128-row build's 106 KB does not fit Ada's 99 KB:
    /// `gemv_fp8_mma_many` there).
    pub(super) fn fp8_tiles(&self, m: usize, n: usize, k: usize) -> Option<TilePlan> {
        let gemm = self.tuning().gemm;
        if !self.fp8_gemv_mma(k)
            || !(1..=MAX_ROWS).contains(&m)
            || gemm.fp8_tile_rows_min.is_none_or(|min| m < min)
        {
            return None;
        }
        let rows = rows_kernel(m).1;
        let tiles = n.div_ceil(TILE_ROWS);
        let splits = splits(tiles, k / SLICE, self.info.multiprocessors);
        (splits <= gemm.fp8_tile_max_splits && rows_smem(rows) <= self.info.smem_optin).then_some(
            TilePlan {
                rows,
                tiles,
                splits,
            },
        )
    }

    /// The tile GEMM `matmul` runs for an FP8 product of `m` rows, `n` output columns and `k`
    /// inner columns under the current tuning: its kernel and splits of k, or `None` where
    /// another kernel takes it.
    pub fn fp8_tile_plan(&self, m: usize, n: usize, k: usize) -> Option<(&'static str, usize)> {
        self.fp8_tiles(m, n, k)
            .map(|p| (rows_kernel(p.rows).0.name(), p.splits))
    }

    /// out [m, n] f32 = x [m, k] bf16 · wᵀ for an FP8 weight w [n, k] with [n, ceil(k / 128)]
    /// scales on the tile GEMM `plan` (`fp8_tiles`), for a product `matmul_fp8` checked (the
    /// shapes, which `dims` gives) and found non-empty.
    pub(super) fn matmul_fp8_tiles(
        &self,
        (out, x, w): (&mut CudaTensor, &CudaTensor, &CudaTensor),
        (m, n, k): (usize, usize, usize),
        plan: TilePlan,
    ) -> Result<()> {
        check(
            "matmul",
            x.dtype == DType::BF16
                && w.dtype == DType::F8
                && out.dtype == DType::F32
                && (1..=plan.rows).contains(&m)
                && n > 0
                && k > 0
                && k.is_multiple_of(SLICE)
                && plan.tiles == n.div_ceil(TILE_ROWS),
            || format!("FP8 tile GEMM of {m} rows, {n} columns over {k}"),
        )?;
        let TilePlan {
            rows,
            tiles,
            splits,
        } = plan;
        let kernel = rows_kernel(rows).0;
        // The splits' sums: [splits, tiles, 8 warps, rows / 8, 32 lanes, 4] f32, the kernel's
        // registers' layout.
        let part = if splits > 1 {
            Some(self.alloc(&[splits * tiles * TILE_ROWS, rows], DType::F32)?)
        } else {
            None
        };
        let tickets = if splits > 1 { self.tickets()? } else { 0 };
        let smem = rows_smem(rows) as u32;
        kernel.allow_shared_memory(self, smem)?;
        let s = &self.stream;
        let args = (
            out.ptr(s),
            part.as_ref().map_or(0, |p| p.ptr(s)),
            tickets,
            x.ptr(s),
            w.ptr(s),
            w.scales_ptr(s),
            int(m, "matmul")?,
            int(n, "matmul")?,
            int(k, "matmul")?,
        );
        let config = LaunchConfig {
            grid_dim: (dim(tiles, "matmul")?, dim(splits, "matmul")?, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: smem,
        };
        // SAFETY: out is [m, n] f32, x [m, k] bf16, w [n, k] FP8 bytes followed by its
        // [n, ceil(k/128)] f32 scales (checked above and by matmul_fp8). k % 64 == 0, so every
        // 16-byte cp.async of a weight row (k bytes) and of an x row (2k bytes) lies inside
        // the row and is 16-byte aligned, as the allocations are; x rows past m copy zeros from
        // x's base without reading it; weight rows past n read row n - 1. Block (tile, split)
        // reads k slices [split · slices / splits, (split + 1) · slices / splits) (at least one:
        // splits ≤ slices / 4) and writes out[r][c] only for r < m, c < n. With more than one
        // split, part holds splits · tiles · 128 · rows f32 (each block writes its own
        // 128 · rows) and tickets TICKETS ≥ tiles zeroed counters, which the kernel leaves at
        // zero. The build takes m ≤ rows x rows; 256 threads; the shared memory set above
        // (at most the GPU's opt-in size: fp8_tiles).
        unsafe { kernel.launch(self, config, args) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_fill_the_gpu_within_bounds() {
        // Qwen3-30B-A3B's q|k|v [5120, 2048] and o [2048, 4096] on an H100's 132.
        assert_eq!(splits(40, 32, 132), 3);
        assert_eq!(splits(16, 64, 132), 8);
        // A column tile for every multiprocessor already; a few more need no split either.
        assert_eq!(splits(132, 32, 132), 1);
        assert_eq!(splits(129, 80, 132), 1);
        assert_eq!(splits(97, 32, 132), 2);
        // Short k: at least 4 slices a split, never fewer than one split.
        assert_eq!(splits(1, 8, 132), 2);
        assert_eq!(splits(1, 2, 132), 1);
    }

    #[test]
    fn the_builds_cover_every_row_count() {
        for m in 1..=128 {
            let (kernel, rows) = rows_kernel(m);
            assert!(
                m <= rows && (rows == 16 || m > rows / 2),
                "{m}: {}",
                kernel.name()
            );
        }
        // F8rCfg::SMEM of the kernels: 4 stages of 8192 + rows · 144 + 512 bytes.
        assert_eq!(rows_smem(128), 108_544);
        assert_eq!(rows_smem(16), 44_032);
    }
}
