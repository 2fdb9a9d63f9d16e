//! Fine-grained FP8 weights kept as FP8 on the device (`fp8.cu`): uploads (checkpoint bytes
//! and scales, or dummy weights drawn on the device) and `matmul` with an FP8 weight.
//!
//! A [`DType::F8`] tensor is one buffer: the e4m3 bytes `[rows, cols]`, then (256-byte aligned)
//! one f32 scale per 128 columns of each row. Decode-sized GEMMs stream the bytes through
//! `gemv_fp8_*`, dequantizing in registers, 8 rows a pass (up to 4 passes: 32 rows read the
//! weight 4 times, a byte each). Larger ones run on Hopper's FP8 tensor cores
//! (`fp8_gemm.rs`: the activations quantized per 1 × 128, cuBLASLt's block-scaled GEMM) where
//! the device, the shape and the weight's scales allow; otherwise they dequantize the weight
//! to a bf16 scratch copy (1 byte read, 2 written) and run cuBLAS's bf16 GEMM on it (2 read).

use metrale_kernels::Module;

use super::elementwise::{cfg, dim, int, stride_cfg};
use super::tensor::{self, CudaTensor, DType, FP8_BLOCK};
use super::{CudaBackend, check, dev_err, fp8_gemm};
use crate::backend::Result;
use crate::loader::random_fp8_scale;
use std::sync::atomic::Ordering;

/// Most rows of x one FP8 GEMV launch takes (gemv_fp8_m1..m8).
const FP8_GEMV_MAX_ROWS: usize = 8;
/// Up to this many GEMV passes of 8 rows (each reads the weight's byte once more); more rows
/// go through a bf16 copy of the weight and cuBLAS (5 bytes a weight, see the header).
const FP8_GEMV_MAX_PASSES: usize = 4;
/// Warps of a GEMV block (FP8_WARPS in fp8.cu): one output column each.
const FP8_WARPS: usize = 8;

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
        t.fp8_row_blocks = rows_share_block_scales(scales, cols.div_ceil(FP8_BLOCK));
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
        let mut t = self.alloc(shape, DType::F8)?;
        // One scale everywhere.
        t.fp8_row_blocks = true;
        let n = t.numel() as u64;
        let n_scales = tensor::fp8_num_scales(shape) as u64;
        if n == 0 {
            return Ok(t);
        }
        const CHUNK: u64 = 65536; // elements a thread walks (RANDOM_CHUNK in the prelude)
        const THREADS: u32 = 64;
        let blocks = n.div_ceil(CHUNK).div_ceil(u64::from(THREADS));
        let name = "fill_random_fp8";
        let f = self.func(Module::Fp8, name)?;
        let s = &self.stream;
        let (p, sp, scale) = (t.ptr(s), t.scales_ptr(s), random_fp8_scale(std));
        let mut a = self.launcher(&f);
        a.arg(&p)
            .arg(&n)
            .arg(&seed)
            .arg(&sp)
            .arg(&n_scales)
            .arg(&scale);
        // SAFETY: t is an FP8 tensor: n bytes, then n_scales f32 at scales_ptr (alloc sized it
        // so); each thread writes its chunk below n and its strided share of the scales.
        let r = unsafe { a.launch(cfg((dim(blocks as usize, "fill_random")?, 1), THREADS)) };
        self.launched(name, r)?;
        Ok(t)
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
        if m > FP8_GEMV_MAX_PASSES * FP8_GEMV_MAX_ROWS {
            if self.matmul_fp8_tensor_cores(out, x, w)? {
                return Ok(());
            }
            // Prefill: the weight as bf16, then cuBLAS.
            let mut wb = self.alloc(&w.shape, DType::BF16)?;
            self.dequant_fp8(&mut wb, w)?;
            return self.matmul_op(out, x, &wb);
        }
        if self.empty_matmul(out, (m, n, k))? {
            return Ok(());
        }
        let mut narrowed = None;
        let x = self.as_bf16(x, &mut narrowed)?;
        const NAMES: [&str; FP8_GEMV_MAX_ROWS] = [
            "gemv_fp8_m1",
            "gemv_fp8_m2",
            "gemv_fp8_m3",
            "gemv_fp8_m4",
            "gemv_fp8_m5",
            "gemv_fp8_m6",
            "gemv_fp8_m7",
            "gemv_fp8_m8",
        ];
        let s = &self.stream;
        let (o, xp, wp, sp) = (out.ptr(s), x.ptr(s), w.ptr(s), w.scales_ptr(s));
        let (ni, ki) = (int(n, "matmul")?, int(k, "matmul")?);
        let blocks = dim(n.div_ceil(FP8_WARPS), "matmul")?;
        if !k.is_multiple_of(16) {
            let name = "gemv_fp8_rows";
            let f = self.func(Module::Fp8, name)?;
            let mi = int(m, "matmul")?;
            let mut a = self.launcher(&f);
            a.arg(&o)
                .arg(&xp)
                .arg(&wp)
                .arg(&sp)
                .arg(&mi)
                .arg(&ni)
                .arg(&ki);
            // SAFETY: out is [m, n] f32, x [m, k] bf16, w [n, k] FP8 with [n, ceil(k/128)]
            // scales (checked above); scalar loads inside each row; one warp per output column,
            // columns past n return.
            let r = unsafe { a.launch(cfg((blocks, 1), (32 * FP8_WARPS) as u32)) };
            return self.launched(name, r);
        }
        // Up to 8 rows a pass: each pass streams the weight once more (from L2 where it fits).
        for r0 in (0..m).step_by(FP8_GEMV_MAX_ROWS) {
            let rows = (m - r0).min(FP8_GEMV_MAX_ROWS);
            let name = NAMES[rows - 1];
            let f = self.func(Module::Fp8, name)?;
            let (o_r, x_r) = (o + (r0 * n * 4) as u64, xp + (r0 * k * 2) as u64);
            let mut a = self.launcher(&f);
            a.arg(&o_r).arg(&x_r).arg(&wp).arg(&sp).arg(&ni).arg(&ki);
            // SAFETY: out is [m, n] f32, x [m, k] bf16, w [n, k] FP8 with [n, ceil(k/128)]
            // scales (checked above); this pass covers rows r0..r0 + rows <= m, so its out and x
            // pointers and the kernel's `rows` rows stay inside both; k % 16 == 0, so every
            // 16-byte load of a weight row (k bytes) and of an x row (2k bytes, starting at a
            // multiple of 32 bytes) is inside it and aligned; one warp per output column,
            // columns past n return.
            let r = unsafe { a.launch(cfg((blocks, 1), (32 * FP8_WARPS) as u32)) };
            self.launched(name, r)?;
        }
        Ok(())
    }

    /// Prefill-sized GEMMs on the FP8 tensor cores on (the default on compute capability 9.0)
    /// or off (the bf16 route), for comparisons; `METRALE_FP8_GEMM=0` turns it off at start.
    pub fn set_fp8_tensor_cores(&self, on: bool) {
        let on = on && self.info.compute_capability == (9, 0);
        self.fp8_tensor_cores.store(on, Ordering::Relaxed);
    }

    /// Whether prefill-sized FP8 GEMMs may take the FP8 tensor cores.
    pub fn fp8_tensor_cores(&self) -> bool {
        self.fp8_tensor_cores.load(Ordering::Relaxed)
    }

    /// `matmul_fp8` through cuBLASLt's block-scaled FP8 GEMM (`fp8_gemm.rs`); false (nothing
    /// done) where it does not apply: off, a weight whose rows do not share their block
    /// scales, n or k not a multiple of 128, or a shape cuBLASLt refuses.
    fn matmul_fp8_tensor_cores(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        w: &CudaTensor,
    ) -> Result<bool> {
        let (m, k, n) = (x.rows(), x.cols(), w.rows());
        let applies = self.fp8_tensor_cores.load(Ordering::Relaxed)
            && w.fp8_row_blocks
            && m > 0
            && n.is_multiple_of(FP8_BLOCK)
            && k.is_multiple_of(FP8_BLOCK)
            && k > 0;
        let shape = (m as u64, n as u64, k as u64);
        if !applies || !self.fp8_gemm_supported(shape)? {
            return Ok(false);
        }
        self.set_dtype(out, DType::F32)?;
        let mut narrowed = None;
        let x = self.as_bf16(x, &mut narrowed)?;
        let (m_pad, kb, nb) = (m.next_multiple_of(4), k / FP8_BLOCK, n / FP8_BLOCK);
        let kb_pad = kb.next_multiple_of(4);
        let xq = self.alloc(&[m, k], DType::F8)?;
        let xs = self.alloc(&[kb * m_pad], DType::F32)?;
        let ws = self.alloc(&[nb * kb_pad], DType::F32)?;
        let s = &self.stream;
        let (xqp, xsp, wsp, xp) = (xq.ptr(s), xs.ptr(s), ws.ptr(s), x.ptr(s));
        let (mi, ki, mpi) = (int(m, "matmul")?, int(k, "matmul")?, int(m_pad, "matmul")?);
        let name = "quant_act_fp8";
        let f = self.func(Module::Fp8, name)?;
        let mut a = self.launcher(&f);
        a.arg(&xqp).arg(&xsp).arg(&xp).arg(&mi).arg(&ki).arg(&mpi);
        // SAFETY: x is [m, k] bf16 with k % 128 == 0, xq holds m·k bytes, xs kb·m_pad f32;
        // one warp per (row < m_pad, group < kb), rows past m only write their scale.
        let r = unsafe {
            a.launch(cfg(
                (
                    dim(m_pad.div_ceil(FP8_WARPS), "matmul")?,
                    dim(kb, "matmul")?,
                ),
                (32 * FP8_WARPS) as u32,
            ))
        };
        self.launched(name, r)?;
        let name = "fp8_block_scales";
        let f = self.func(Module::Fp8, name)?;
        let (nbi, kbi, kbpi) = (
            int(nb, "matmul")?,
            int(kb, "matmul")?,
            int(kb_pad, "matmul")?,
        );
        let wrows = w.scales_ptr(s);
        let mut a = self.launcher(&f);
        a.arg(&wsp).arg(&wrows).arg(&nbi).arg(&kbi).arg(&kbpi);
        // SAFETY: w's scales are [n, kb] f32 (n = 128·nb rows), ws holds nb·kb_pad; one thread
        // an output, those past nb·kb_pad return.
        let r = unsafe { a.launch(cfg((dim((nb * kb_pad).div_ceil(256), "matmul")?, 1), 256)) };
        self.launched(name, r)?;
        let ops = fp8_gemm::Operands {
            out: out.ptr(s),
            xq: xqp,
            x_scales: xsp,
            w: w.ptr(s),
            w_scales: wsp,
        };
        self.fp8_gemm_run(shape, ops)?;
        Ok(true)
    }

    /// `out` (bf16, w's shape) = the FP8 weight's values rounded to bf16.
    fn dequant_fp8(&self, out: &mut CudaTensor, w: &CudaTensor) -> Result<()> {
        let (rows, k) = (w.rows() as u64, w.cols());
        if rows == 0 || k == 0 {
            return Ok(());
        }
        let name = "dequant_fp8_bf16";
        let f = self.func(Module::Fp8, name)?;
        let s = &self.stream;
        let (o, wp, sp, ki) = (out.ptr(s), w.ptr(s), w.scales_ptr(s), int(k, "matmul")?);
        let mut a = self.launcher(&f);
        a.arg(&o).arg(&wp).arg(&sp).arg(&rows).arg(&ki);
        // SAFETY: out is rows·k bf16 (same shape as w), w rows·k FP8 bytes with rows ·
        // ceil(k/128) scales; grid-stride over rows·k.
        let r = unsafe { a.launch(stride_cfg(rows * k as u64)) };
        self.launched(name, r)
    }
}

/// Whether every block of 128 rows of a weight has the same scales in each of its rows
/// (`per_row` scales a row, row-major), so one scale per 128 × 128 block describes it.
fn rows_share_block_scales(scales: &[f32], per_row: usize) -> bool {
    if per_row == 0 {
        return true;
    }
    scales
        .chunks(per_row * FP8_BLOCK)
        .all(|block| block.chunks(per_row).all(|row| row == &block[..per_row]))
}

#[cfg(test)]
mod tests {
    use super::rows_share_block_scales;

    #[test]
    fn block_scales_are_shared_only_when_every_row_of_a_block_agrees() {
        // Two column blocks a row; 130 rows: one full block of 128, then a block of 2.
        let per_row = 2;
        let mut scales: Vec<f32> = (0..130)
            .flat_map(|r| if r < 128 { [1.0, 2.0] } else { [3.0, 4.0] })
            .collect();
        assert!(rows_share_block_scales(&scales, per_row));
        // A fused part starting mid-block (row 64) has other scales: not shareable.
        scales[64 * per_row] = 5.0;
        assert!(!rows_share_block_scales(&scales, per_row));
        assert!(rows_share_block_scales(&[], 0));
    }
}
