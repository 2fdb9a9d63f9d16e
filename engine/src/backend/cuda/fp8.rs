//! Fine-grained FP8 weights kept as FP8 on the device (`fp8.cu`): uploads (checkpoint bytes
//! and scales, or dummy weights drawn on the device) and `matmul` with an FP8 weight.
//!
//! A [`DType::F8`] tensor is one buffer: the e4m3 bytes `[rows, cols]`, then (256-byte aligned)
//! one f32 scale per 128 columns of each row. Decode-sized GEMMs stream the bytes through
//! `gemv_fp8_*`: on tensor cores (sm_80+, k % 64 == 0) `gemv_fp8_mma` up to 8 rows and
//! `gemv_fp8_mma_many` up to [`FP8_MMA_MAX_ROWS`] (32 rows a chunk inside the kernel), else on
//! the CUDA cores 8 rows a pass (up to 4 passes: 32 rows read the weight 4 times, a byte each,
//! still less than the 5 bytes a weight of the other route). On tensor cores, from the tuning's
//! `gemm.fp8_tile_rows_min` rows (97) up to [`FP8_MMA_MAX_ROWS`], the tile GEMM takes them instead
//! (`fp8_tiles.rs`: a block owns 128 output columns and every x row, so x is read n / 128 times,
//! not n / 16). Larger GEMMs dequantize the weight to a bf16 scratch copy (1 byte read, 2
//! written) and run cuBLAS's bf16 GEMM on it (2 read) (cuBLASLt's block-scaled FP8 GEMM would
//! need the activations quantized too and is not wired here: prefill is compute-bound at bf16
//! rates either way, and the copy costs one read of the weight).

use super::blas::Fp8GemvArgs;
use super::elementwise::{cfg, dim, int, stride_cfg};
use super::tensor::{self, CudaTensor, DType, FP8_BLOCK};
use super::{CudaBackend, check, dev_err};
use crate::backend::Result;
use crate::backend::kernels::{self, Kernel};
use crate::loader::random_fp8_scale;

/// Most rows of x one FP8 GEMV launch takes (gemv_fp8_m1..m8).
const FP8_GEMV_MAX_ROWS: usize = 8;
/// Up to this many GEMV passes of 8 rows (each reads the weight's byte once more); more rows
/// go through a bf16 copy of the weight and cuBLAS (5 bytes a weight, see the header).
const FP8_GEMV_MAX_PASSES: usize = 4;
/// Warps of a GEMV block (FP8_WARPS in fp8.cu): one output column each.
const FP8_WARPS: usize = 8;
/// Warps of a `gemv_fp8_mma` block (FP8_MMA_WARPS in prelude/fp8_mma.cuh), which owns 16 output
/// columns.
const FP8_MMA_WARPS: usize = 8;
/// Fewest x rows a `gemv_fp8_mma` pass takes.
const FP8_MMA_MIN_ROWS: usize = 2;
/// Most x rows `gemv_fp8_mma_many` takes (decode batches); more (prefill chunks) go through a
/// bf16 copy of the weight and cuBLAS.
const FP8_MMA_MAX_ROWS: usize = 128;

/// The parameters of the tensor-core and `_rows` FP8 GEMVs: out, x, w, scales, m, n, k.
type Fp8MmaArgs = (u64, u64, u64, u64, i32, i32, i32);
/// `gemv_fp8_m<m>`, for m rows of x (1 to FP8_GEMV_MAX_ROWS).
static FP8_GEMV: [Kernel<Fp8GemvArgs>; FP8_GEMV_MAX_ROWS] = [
    kernels::gemv_fp8_m1,
    kernels::gemv_fp8_m2,
    kernels::gemv_fp8_m3,
    kernels::gemv_fp8_m4,
    kernels::gemv_fp8_m5,
    kernels::gemv_fp8_m6,
    kernels::gemv_fp8_m7,
    kernels::gemv_fp8_m8,
];

impl CudaBackend {
    /// An FP8 weight from the checkpoint's bytes and per-row scales (`col_block` columns a
    /// scale). Blocks other than 128 columns are dequantized on the host to bf16 instead.
    pub(super) fn upload_fp8(
        &self,
        shape: &[usize],
        bytes: &[u8],
        scales: &[f32],
        col_block: usize,
    ) -> Result<CudaTensor> {
        let numel: usize = shape.iter().product();
        let cols = shape.last().copied().unwrap_or(1);
        if col_block != FP8_BLOCK {
            let values = crate::loader::fp8::dequantize_rows(bytes, cols, scales, col_block);
            return self.tensor_from_f32(shape, &values, DType::BF16);
        }
        check(
            "upload",
            bytes.len() == numel && scales.len() == tensor::fp8_num_scales(shape),
            || {
                format!(
                    "FP8 tensor {shape:?}: {} bytes and {} scales (expected {numel} and {})",
                    bytes.len(),
                    scales.len(),
                    tensor::fp8_num_scales(shape)
                )
            },
        )?;
        let mut t = self.alloc(shape, DType::F8)?;
        let off = tensor::fp8_scales_offset(numel);
        let scale_bytes: Vec<u8> = scales.iter().flat_map(|s| s.to_le_bytes()).collect();
        if numel > 0 {
            let mut dst = t.buf.slice_mut(0..numel);
            self.stream
                .memcpy_htod(bytes, &mut dst)
                .map_err(dev_err("upload FP8 weight"))?;
            let mut dst = t.buf.slice_mut(off..off + scale_bytes.len());
            self.stream
                .memcpy_htod(&scale_bytes, &mut dst)
                .map_err(dev_err("upload FP8 scales"))?;
        }
        Ok(t)
    }

    /// Dummy FP8 weights drawn on the device: `HostData::RandomFp8 { seed, std }` byte for byte.
    pub fn random_fp8(&self, shape: &[usize], seed: u64, std: f32) -> Result<CudaTensor> {
        let t = self.alloc(shape, DType::F8)?;
        let n = t.numel() as u64;
        let n_scales = tensor::fp8_num_scales(shape) as u64;
        if n == 0 {
            return Ok(t);
        }
        const CHUNK: u64 = 65536; // elements a thread walks (RANDOM_CHUNK in the prelude)
        const THREADS: u32 = 64;
        let blocks = n.div_ceil(CHUNK).div_ceil(u64::from(THREADS));
        let s = &self.stream;
        let (p, sp, scale) = (t.ptr(s), t.scales_ptr(s), random_fp8_scale(std));
        // SAFETY: t is an FP8 tensor: n bytes, then n_scales f32 at scales_ptr (alloc sized it
        // so); each thread writes its chunk below n and its strided share of the scales.
        unsafe {
            kernels::fill_random_fp8.launch(
                self,
                cfg((dim(blocks as usize, "fill_random")?, 1), THREADS),
                (p, n, seed, sp, n_scales, scale),
            )?;
        }
        Ok(t)
    }

    /// Whether a decode-sized FP8 GEMM over `k` columns takes `gemv_fp8_mma` (tensor cores)
    /// instead of the CUDA-core `gemv_fp8_m*`: the tuning's `gemm.fp8_gemv_mma` (on by
    /// default) where the GPU has them.
    pub(super) fn fp8_gemv_mma(&self, k: usize) -> bool {
        self.tuning().gemm.fp8_gemv_mma
            && k.is_multiple_of(64)
            && self.info.compute_capability >= (8, 0)
    }

    /// `out[m, n] = Σ_k x[m, k] · w[n, k]` for an FP8 `w` (f32 out).
    pub(super) fn matmul_fp8(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        w: &CudaTensor,
    ) -> Result<()> {
        let (m, k, n) = (x.rows(), x.cols(), w.rows());
        check(
            "matmul",
            w.cols() == k && out.rows() == m && out.cols() == n,
            || {
                format!(
                    "out {:?} = x {:?} · w {:?}ᵀ (FP8)",
                    out.shape, x.shape, w.shape
                )
            },
        )?;
        let mma = self.fp8_gemv_mma(k);
        let many = mma && m > FP8_GEMV_MAX_ROWS && m <= FP8_MMA_MAX_ROWS;
        let tiles = self.fp8_tiles(m, n, k);
        if m > FP8_GEMV_MAX_PASSES * FP8_GEMV_MAX_ROWS && !many {
            // Prefill: the tensor-core kernel when asked (moe_mma.rs), else the weight as
            // bf16, then cuBLAS.
            if self.fp8_matmul_mma()
                && (self.empty_matmul(out, (m, n, k))? || self.matmul_fp8_mma(out, x, w)?)
            {
                return Ok(());
            }
            let mut wb = self.alloc(&w.shape, DType::BF16)?;
            self.dequant_fp8(&mut wb, w)?;
            return self.matmul_op(out, x, &wb);
        }
        if self.empty_matmul(out, (m, n, k))? {
            return Ok(());
        }
        let mut narrowed = None;
        let x = self.as_bf16(x, &mut narrowed)?;
        if let Some(plan) = tiles {
            return self.matmul_fp8_tiles((out, x, w), (m, n, k), plan);
        }
        let s = &self.stream;
        let (o, xp, wp, sp) = (out.ptr(s), x.ptr(s), w.ptr(s), w.scales_ptr(s));
        let (ni, ki) = (int(n, "matmul")?, int(k, "matmul")?);
        let blocks = dim(n.div_ceil(FP8_WARPS), "matmul")?;
        if !k.is_multiple_of(16) {
            let mi = int(m, "matmul")?;
            // SAFETY: out is [m, n] f32, x [m, k] bf16, w [n, k] FP8 with [n, ceil(k/128)]
            // scales (checked above); scalar loads inside each row; one warp per output column,
            // columns past n return.
            return unsafe {
                kernels::gemv_fp8_rows.launch(
                    self,
                    cfg((blocks, 1), (32 * FP8_WARPS) as u32),
                    (o, xp, wp, sp, mi, ni, ki),
                )
            };
        }
        // The tensor-core GEMVs: `f` over `rows` rows of x (from x_r) into out (from o_r).
        let mma_pass = |f: Kernel<Fp8MmaArgs>, o_r: u64, x_r: u64, rows: usize| -> Result<()> {
            let mi = int(rows, "matmul")?;
            let blocks = dim(n.div_ceil(16), "matmul")?;
            // SAFETY: out is [m, n] f32, x [m, k] bf16, w [n, k] FP8 with [n, ceil(k/128)]
            // scales (checked above); a call covers rows r0..r0 + rows <= m of out and x
            // (gemv_fp8_mma: rows <= 8; _many: any), the kernels' x rows past them read as
            // zeros and are not written; k % 64 == 0, so every 16-byte load of a weight row (k
            // bytes) and of an x row (2k bytes) is inside it and aligned; a block of
            // FP8_MMA_WARPS warps per 16 output columns, columns past n read row n - 1 and are
            // not written; sm_80+ (both checked by fp8_gemv_mma).
            unsafe {
                f.launch(
                    self,
                    cfg((blocks, 1), (32 * FP8_MMA_WARPS) as u32),
                    (o_r, x_r, wp, sp, mi, ni, ki),
                )
            }
        };
        if many {
            return mma_pass(kernels::gemv_fp8_mma_many, o, xp, m);
        }
        // Up to 8 rows a pass: each pass streams the weight once more (from L2 where it fits).
        for r0 in (0..m).step_by(FP8_GEMV_MAX_ROWS) {
            let rows = (m - r0).min(FP8_GEMV_MAX_ROWS);
            let (o_r, x_r) = (o + (r0 * n * 4) as u64, xp + (r0 * k * 2) as u64);
            // One row stays on gemv_fp8_m1 (faster there, see fp8.cu).
            if mma && rows >= FP8_MMA_MIN_ROWS {
                mma_pass(kernels::gemv_fp8_mma, o_r, x_r, rows)?;
                continue;
            }
            // One row of a grid that fits in one wave: a warp's whole rows before the wait.
            let (f, per_warp) = match self.gemv_full_fp8(n, k) {
                Some(full) if rows == 1 => full,
                _ => (&FP8_GEMV[rows - 1], 1),
            };
            let blocks = dim(n.div_ceil(FP8_WARPS * per_warp), "matmul")?;
            // SAFETY: out is [m, n] f32, x [m, k] bf16, w [n, k] FP8 with [n, ceil(k/128)]
            // scales (checked above); this pass covers rows r0..r0 + rows <= m, so its out and x
            // pointers and the kernel's `rows` rows stay inside both; k % 16 == 0, so every
            // 16-byte load of a weight row (k bytes) and of an x row (2k bytes, starting at a
            // multiple of 32 bytes) is inside it and aligned; one warp per `per_warp` output
            // columns, columns past n return or are not written (gemv_fp8_full_*: rows = 1,
            // k <= 512 · G by gemv_full_kernel, row n - 1 loaded for them).
            unsafe {
                f.launch(
                    self,
                    cfg((blocks, 1), (32 * FP8_WARPS) as u32),
                    (o_r, x_r, wp, sp, ni, ki),
                )?;
            }
        }
        Ok(())
    }

    /// Dummy FP8 weights for the float32 path: [`CudaBackend::random_fp8`]'s values (those of
    /// `HostData::RandomFp8`, which the CPU reference dequantizes on the host), as f32.
    pub(super) fn random_fp8_as_f32(
        &self,
        shape: &[usize],
        seed: u64,
        std: f32,
    ) -> Result<CudaTensor> {
        let w = self.random_fp8(shape, seed, std)?;
        let mut out = self.alloc(shape, DType::F32)?;
        self.dequant_fp8(&mut out, &w)?;
        Ok(out)
    }

    /// `out` (bf16 or f32, w's shape) = the FP8 weight's values (e4m3 · scale in f32, then
    /// rounded to bf16 for a bf16 `out`).
    pub(super) fn dequant_fp8(&self, out: &mut CudaTensor, w: &CudaTensor) -> Result<()> {
        let (rows, k) = (w.rows() as u64, w.cols());
        if rows == 0 || k == 0 {
            return Ok(());
        }
        // Rows of a multiple of 16 bytes: the _vec kernel, 8 weights a thread.
        let vec = k.is_multiple_of(16);
        let f = match out.dtype {
            DType::BF16 if vec => kernels::dequant_fp8_bf16_vec,
            DType::BF16 => kernels::dequant_fp8_bf16,
            DType::F32 => kernels::dequant_fp8_fp32,
            DType::F8 | DType::F4 | DType::Mx4 => return Err(super::not_activation("dequant_fp8")),
        };
        let s = &self.stream;
        let (o, wp, sp, ki) = (out.ptr(s), w.ptr(s), w.scales_ptr(s), int(k, "matmul")?);
        let per_thread = if out.dtype == DType::BF16 && vec {
            8
        } else {
            1
        };
        // SAFETY: out is rows·k of the kernel's type (same shape as w), w rows·k FP8 bytes with
        // rows · ceil(k/128) scales; grid-stride over rows·k elements, one a thread or (the
        // _vec kernel, k % 16 == 0, k > 0 above: every 8-byte chunk inside one row and its
        // 16-byte store aligned, as the allocations are) 8.
        unsafe {
            f.launch(
                self,
                stride_cfg(rows * k as u64 / per_thread),
                (o, wp, sp, rows, ki),
            )
        }
    }
}
