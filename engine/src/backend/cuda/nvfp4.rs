//! NVFP4 weights kept packed on the device (`nvfp4.cu`, issue 35; docs/nvfp4.md), weight-only:
//! the activations stay bf16.
//!
//! A [`DType::F4`] tensor is one buffer: the packed E2M1 pairs `[rows, cols / 2]`, then
//! (256-byte aligned) one E4M3 scale byte per 16 columns of each row, then (256-byte aligned)
//! one f32 multiplier a row: the checkpoint's global scale (ModelOpt's `weight_scale_2`) or its
//! inverse (compressed-tensors' `weight_global_scale`), per row so that fused projections keep
//! each part's own. 0.5625 bytes a weight plus 4 a row, against bf16's 2 a weight.
//!
//! `matmul` with an F4 weight: up to the tuning's `gemm.nvfp4_mma_rows` rows of x on tensor
//! cores: below `gemm.nvfp4_tile_rows_min` rows (128) `gemv_nvfp4_mma_r2_b<NB>`
//! (`nvfp4_gemv.cu`: two tiles of 16 weight rows a block, chunks of 8·NB x rows), from there the
//! tile GEMM (`nvfp4_gemm.rs`); more rows dequantize the weight to a bf16 scratch copy
//! (`dequant_nvfp4_bf16`) and run the bf16 path (cuBLAS) on it (every product with
//! `nvfp4_mma_rows` 0). On Blackwell GeForce / DGX Spark `gemm.nvfp4_w4a4` quantizes x to NVFP4
//! and runs both operands on the block-scaled FP4 tensor cores (`nvfp4_w4a4.rs`). Deleted as slower at every row count: a CUDA-core GEMV widening each
//! weight to f32 for each row (performance log part 14) and the first tensor-core GEMV (part 17).

use super::elementwise::{cfg, dim, int, stride_cfg};
use super::tensor::{self, CudaTensor, DType};
use super::{CudaBackend, check, dev_err};
use crate::backend::Result;
use crate::backend::kernels::{self, Kernel};
use crate::loader::nvfp4::GlobalRule;
use crate::loader::{NVFP4_SCALE_BITS, NVFP4_SCALE_SHIFT, NVFP4_SCALE_STREAM, random_nvfp4_global};

/// Threads of a tensor-core block (FP8_MMA_WARPS warps).
const NVFP4_MMA_THREADS: u32 = 256;

/// The parameters of `gemv_nvfp4_mma_*`: out, x, w, scales, globals, m, n, k.
pub(super) type Nvfp4MmaArgs = (u64, u64, u64, u64, u64, i32, i32, i32);

/// Weight rows a block of the tensor-core kernels owns (`RT` = 2 tiles of 16: the GEMV and
/// the W4A4 GEMM).
pub(super) const TILE_ROWS: usize = 32;

/// Of three builds taking one, two or four tiles of 8 x rows a block, the one for `m` rows of
/// x and the x rows a block takes (8, 16 or 32; more rows of x are chunks of 32).
pub(super) fn by_x_tiles<A>(m: usize, [one, two, four]: [Kernel<A>; 3]) -> (Kernel<A>, usize) {
    match m {
        0..=8 => (one, 8),
        9..=16 => (two, 16),
        _ => (four, 32),
    }
}

/// The grid of a product kernel whose blocks take `x_rows` rows of x and `w_rows` weight rows.
pub(super) fn tile_grid(m: usize, x_rows: usize, n: usize, w_rows: usize) -> Result<(u32, u32)> {
    Ok((
        dim(m.div_ceil(x_rows), "matmul")?,
        dim(n.div_ceil(w_rows), "matmul")?,
    ))
}

/// A row's f32 multiplier of the block scales: `e4m3 · multiplier` is the block's scale (for
/// compressed-tensors one rounding more than the CPU's quotient `e4m3 / global`).
fn row_multiplier(global: f32, rule: GlobalRule) -> f32 {
    match rule {
        GlobalRule::Multiply => global,
        GlobalRule::Divide => 1.0 / global,
    }
}

impl CudaBackend {
    /// An F4 weight from the host's NVFP4 parts (`shape` 2-D, or a 3-D expert stack whose
    /// rows are all but the last dimension; cols % 32 == 0).
    pub(super) fn upload_nvfp4(
        &self,
        shape: &[usize],
        packed: &[u8],
        scales: &[u8],
        globals: &[f32],
        rule: GlobalRule,
    ) -> Result<CudaTensor> {
        let numel: usize = shape.iter().product();
        let cols = shape.last().copied().unwrap_or(1);
        let rows = numel / cols.max(1);
        check(
            "upload",
            matches!(shape.len(), 2 | 3)
                && cols.is_multiple_of(32)
                && packed.len() == numel / 2
                && scales.len() == numel / 16
                && globals.len() == rows,
            || {
                format!(
                    "NVFP4 tensor {shape:?}: {} packed bytes, {} scales, {} globals",
                    packed.len(),
                    scales.len(),
                    globals.len()
                )
            },
        )?;
        let mut t = self.alloc(shape, DType::F4)?;
        if numel == 0 {
            return Ok(t);
        }
        let (so, go) = (
            tensor::f4_scales_offset(numel),
            tensor::f4_globals_offset(numel),
        );
        let mults: Vec<u8> = globals
            .iter()
            .flat_map(|&g| row_multiplier(g, rule).to_le_bytes())
            .collect();
        for (at, bytes, what) in [
            (0, packed, "upload NVFP4 weight"),
            (so, scales, "upload NVFP4 scales"),
            (go, &mults[..], "upload NVFP4 globals"),
        ] {
            let mut dst = t.buf.slice_mut(at..at + bytes.len());
            self.stream
                .memcpy_htod(bytes, &mut dst)
                .map_err(dev_err(what))?;
        }
        Ok(t)
    }

    /// `n` bytes at device address `at` drawn as the host's `random_bytes` draws them (the
    /// chunked splitmix stream of `seed`, each draw's bits from `shift` up or'ed with `bits`):
    /// `fill_random_nvfp4_bytes`, a thread a 65536-byte chunk.
    pub(super) fn fill_random_bytes(
        &self,
        at: u64,
        n: u64,
        seed: u64,
        (shift, bits): (i32, u8),
    ) -> Result<()> {
        const CHUNK: u64 = 65536; // bytes a thread walks (RANDOM_CHUNK in the prelude)
        const THREADS: u32 = 64;
        if n == 0 {
            return Ok(());
        }
        let blocks = n.div_ceil(CHUNK).div_ceil(u64::from(THREADS));
        // SAFETY: the caller's buffer holds n bytes at `at` (an FP4 tensor's packed pairs or
        // scale bytes, alloc sized it so); each thread writes its 65536-byte chunk below n.
        unsafe {
            kernels::fill_random_nvfp4_bytes.launch(
                self,
                cfg((dim(blocks as usize, "fill_random")?, 1), THREADS),
                (at, n, seed, shift, u32::from(bits)),
            )
        }
    }

    /// Dummy NVFP4 weights drawn on the device as an F4 tensor of `shape` (any rank: rows are
    /// all but the last dimension; cols % 16 == 0): `HostData::RandomNvfp4 { seed, std }` byte
    /// for byte (its packed pairs, its scale bytes, its global as every row's multiplier).
    pub fn random_nvfp4(&self, shape: &[usize], seed: u64, std: f32) -> Result<CudaTensor> {
        let numel: usize = shape.iter().product();
        let cols = shape.last().copied().unwrap_or(1);
        check("upload", cols.is_multiple_of(16), || {
            format!("dummy NVFP4 tensor {shape:?}: rows of whole 16-value blocks")
        })?;
        let mut t = self.alloc(shape, DType::F4)?;
        if numel == 0 {
            return Ok(t);
        }
        let base = t.ptr(&self.stream);
        for (at, n, seed, shift, bits) in [
            (0, numel / 2, seed, 56, 0u8),
            (
                tensor::f4_scales_offset(numel),
                numel / 16,
                seed ^ NVFP4_SCALE_STREAM,
                NVFP4_SCALE_SHIFT as i32,
                NVFP4_SCALE_BITS,
            ),
        ] {
            self.fill_random_bytes(base + at as u64, n as u64, seed, (shift, bits))?;
        }
        let rows = numel / cols;
        let mults: Vec<u8> = std::iter::repeat_n(random_nvfp4_global(std).to_le_bytes(), rows)
            .flatten()
            .collect();
        let go = tensor::f4_globals_offset(numel);
        let mut dst = t.buf.slice_mut(go..go + mults.len());
        self.stream
            .memcpy_htod(&mults, &mut dst)
            .map_err(dev_err("upload NVFP4 globals"))?;
        Ok(t)
    }

    /// The bytes of `t`'s buffer at each (offset, length), copied to the host.
    pub(super) fn download_ranges(
        &self,
        t: &CudaTensor,
        ranges: &[(usize, usize)],
    ) -> Result<Vec<Vec<u8>>> {
        let mut parts = Vec::new();
        for &(at, len) in ranges {
            let mut bytes = vec![0u8; len];
            if len > 0 {
                self.stream
                    .memcpy_dtoh(&t.buf.slice(at..at + len), &mut bytes)
                    .map_err(dev_err("download"))?;
            }
            parts.push(bytes);
        }
        self.synchronize()?;
        Ok(parts)
    }

    /// The parts of an F4 tensor as the host holds them: the packed pairs, the E4M3 scale
    /// bytes and the per-row f32 multipliers (for checks that the device holds what the
    /// host drew).
    pub fn f4_parts(&self, t: &CudaTensor) -> Result<(Vec<u8>, Vec<u8>, Vec<f32>)> {
        check("download", t.dtype == DType::F4, || {
            format!("f4_parts of a {:?} tensor", t.dtype)
        })?;
        let numel = t.numel();
        let mut parts = self.download_ranges(
            t,
            &[
                (0, numel / 2),
                (tensor::f4_scales_offset(numel), numel / 16),
                (tensor::f4_globals_offset(numel), 4 * t.rows()),
            ],
        )?;
        let globals = parts[2]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let scales = parts.swap_remove(1);
        Ok((parts.swap_remove(0), scales, globals))
    }

    /// The device address of an F4 tensor's per-row multipliers.
    pub(super) fn f4_globals_ptr(&self, w: &CudaTensor) -> u64 {
        w.ptr(&self.stream) + tensor::f4_globals_offset(w.numel()) as u64
    }

    /// out [m, n] f32 = x [m, k] · wᵀ for an F4 weight w [n, k].
    pub(super) fn matmul_nvfp4(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        w: &CudaTensor,
    ) -> Result<()> {
        let (m, k, n) = (x.rows(), x.cols(), w.rows());
        check(
            "matmul",
            w.cols() == k && out.rows() == m && out.cols() == n && k.is_multiple_of(32),
            || {
                format!(
                    "out {:?} = x {:?} · w {:?}ᵀ (NVFP4)",
                    out.shape, x.shape, w.shape
                )
            },
        )?;
        // The tensor-core kernel needs sm_80+ (mma.sync on bf16); older GPUs take the copy.
        if m > self.tuning().gemm.nvfp4_mma_rows || self.info.compute_capability < (8, 0) {
            let mut wb = self.alloc(&w.shape, DType::BF16)?;
            self.dequant_nvfp4(&mut wb, w)?;
            return self.matmul_op(out, x, &wb);
        }
        if self.empty_matmul(out, (m, n, k))? {
            return Ok(());
        }
        // Blackwell GeForce / DGX Spark with gemm.nvfp4_w4a4: both operands NVFP4.
        if self.nvfp4_w4a4(m, k) {
            return self.matmul_nvfp4_w4a4(out, x, w);
        }
        // From gemm.nvfp4_tile_rows_min rows: the tile GEMM (nvfp4_gemm.rs; off by default).
        if self
            .tuning()
            .gemm
            .nvfp4_tile_rows_min
            .is_some_and(|r| m >= r)
        {
            return self.matmul_nvfp4_tile(out, x, w);
        }
        self.matmul_nvfp4_mma(out, x, w)
    }

    /// The arguments every NVFP4 product kernel takes (`Nvfp4MmaArgs`): out, x (bf16 already),
    /// w's packed bytes, scales and multipliers, m, n, k.
    pub(super) fn nvfp4_args(
        &self,
        out: &CudaTensor,
        x: &CudaTensor,
        w: &CudaTensor,
    ) -> Result<Nvfp4MmaArgs> {
        let s = &self.stream;
        let (m, k, n) = (x.rows(), x.cols(), w.rows());
        Ok((
            out.ptr(s),
            x.ptr(s),
            w.ptr(s),
            w.scales_ptr(s),
            self.f4_globals_ptr(w),
            int(m, "matmul")?,
            int(n, "matmul")?,
            int(k, "matmul")?,
        ))
    }

    /// [`Self::matmul_nvfp4`] on tensor cores (`gemv_nvfp4_mma_*`), for a non-empty product.
    fn matmul_nvfp4_mma(&self, out: &mut CudaTensor, x: &CudaTensor, w: &CudaTensor) -> Result<()> {
        let (m, k, n) = (x.rows(), x.cols(), w.rows());
        // The GEMV addresses a row's scale bytes by a 32-bit offset (n · k / 16 of them); a
        // weight with more (over 2^36 weights) takes the tile GEMM, which has no such limit.
        if n * (k / 16) > u32::MAX as usize {
            return self.matmul_nvfp4_tile(out, x, w);
        }
        let (kernel, x_rows) = by_x_tiles(
            m,
            [
                kernels::gemv_nvfp4_mma_r2_b1,
                kernels::gemv_nvfp4_mma_r2_b2,
                kernels::gemv_nvfp4_mma_r2_b4,
            ],
        );
        let mut narrowed = None;
        let x = self.as_bf16(x, &mut narrowed)?;
        let args = self.nvfp4_args(out, x, w)?;
        let grid = tile_grid(m, x_rows, n, TILE_ROWS)?;
        // SAFETY: out is [m, n] f32, x [m, k] bf16, w [n, k] F4 with its [n, k / 16] scale bytes
        // and [n] f32 multipliers (checked by matmul_nvfp4, which also returned on an empty
        // product); k % 32 == 0, so every 16-byte load of a packed row (k / 2 bytes) and of an
        // x row (2k bytes) is inside it and aligned, and the 2-byte scale loads (k / 16 bytes a
        // row, even) too; lanes past k read none. Block (cx, cy) reads x rows
        // [x_rows·cx, +x_rows) and weight rows [TILE_ROWS·cy, +TILE_ROWS), clamping rows past
        // the matrix to its last (read, not written; v2 also x rows past m), and writes
        // out[m][n] only for m < m, n < n. v2's 32-bit scale offsets are below n · k / 16,
        // checked above to fit.
        unsafe { kernel.launch(self, cfg(grid, NVFP4_MMA_THREADS), args) }
    }

    /// `out` (bf16, w's shape) = the F4 weight's values: e2m1 · f32(e4m3 · multiplier),
    /// rounded once to bf16.
    pub(super) fn dequant_nvfp4(&self, out: &mut CudaTensor, w: &CudaTensor) -> Result<()> {
        let (rows, k) = (w.rows() as u64, w.cols());
        if rows == 0 || k == 0 {
            return Ok(());
        }
        let s = &self.stream;
        let (o, wp, sp, gp) = (
            out.ptr(s),
            w.ptr(s),
            w.scales_ptr(s),
            self.f4_globals_ptr(w),
        );
        let ki = int(k, "matmul")?;
        // SAFETY: out is rows·k bf16 (w's shape), w rows·k F4 (k % 32 == 0, checked at upload
        // and by matmul_nvfp4; k > 0 above): grid-stride over rows·k / 8 packed words (a thread
        // a word, 8 values: one 16-byte store, aligned as the allocations are), each inside one
        // row, with its scale byte and its row's multiplier.
        unsafe {
            kernels::dequant_nvfp4_bf16.launch(
                self,
                stride_cfg(rows * k as u64 / 8),
                (o, wp, sp, gp, rows, ki),
            )
        }
    }
}
