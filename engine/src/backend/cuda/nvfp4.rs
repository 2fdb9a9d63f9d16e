//! NVFP4 weights kept packed on the device (`nvfp4.cu`, issue 35; docs/nvfp4.md), weight-only:
//! the activations stay bf16.
//!
//! A [`DType::F4`] tensor is one buffer: the packed E2M1 pairs `[rows, cols / 2]`, then
//! (256-byte aligned) one E4M3 scale byte per 16 columns of each row, then (256-byte aligned)
//! one f32 multiplier a row: the checkpoint's global scale (ModelOpt's `weight_scale_2`) or its
//! inverse (compressed-tensors' `weight_global_scale`), per row so that fused projections keep
//! each part's own. 0.5625 bytes a weight plus 4 a row, against bf16's 2 a weight.
//!
//! `matmul` with an F4 weight: up to 32 rows of x in passes of 8 through `gemv_nvfp4_m<rows>`
//! (each pass streams the packed weight once more); more rows dequantize the weight to a bf16
//! scratch copy (`dequant_nvfp4_bf16`) and run the bf16 path (cuBLAS) on it.

use super::elementwise::{cfg, dim, int, stride_cfg};
use super::tensor::{self, CudaTensor, DType};
use super::{CudaBackend, check, dev_err};
use crate::backend::Result;
use crate::backend::kernels::{self, Kernel};
use crate::loader::nvfp4::GlobalRule;

/// Most rows of x one NVFP4 GEMV launch takes (gemv_nvfp4_m1..m8).
const NVFP4_GEMV_MAX_ROWS: usize = 8;
/// Up to this many GEMV passes; more rows go through a bf16 copy of the weight and cuBLAS.
const NVFP4_GEMV_MAX_PASSES: usize = 4;
/// Warps of a GEMV block (NVFP4_WARPS in nvfp4.cu): one output column each.
const NVFP4_WARPS: usize = 8;

/// The parameters of `gemv_nvfp4_m<M>`: out, x, w, scales, globals, n, k.
type Nvfp4GemvArgs = (u64, u64, u64, u64, u64, i32, i32);
static NVFP4_GEMV: [Kernel<Nvfp4GemvArgs>; NVFP4_GEMV_MAX_ROWS] = [
    kernels::gemv_nvfp4_m1,
    kernels::gemv_nvfp4_m2,
    kernels::gemv_nvfp4_m3,
    kernels::gemv_nvfp4_m4,
    kernels::gemv_nvfp4_m5,
    kernels::gemv_nvfp4_m6,
    kernels::gemv_nvfp4_m7,
    kernels::gemv_nvfp4_m8,
];

/// A row's f32 multiplier of the block scales: `e4m3 · multiplier` is the block's scale (for
/// compressed-tensors one rounding more than the CPU's quotient `e4m3 / global`).
fn row_multiplier(global: f32, rule: GlobalRule) -> f32 {
    match rule {
        GlobalRule::Multiply => global,
        GlobalRule::Divide => 1.0 / global,
    }
}

impl CudaBackend {
    /// An F4 weight from the host's NVFP4 parts (`shape` 2-D, cols % 32 == 0).
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
            shape.len() == 2
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

    /// The device address of an F4 tensor's per-row multipliers.
    fn f4_globals_ptr(&self, w: &CudaTensor) -> u64 {
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
        if m > NVFP4_GEMV_MAX_PASSES * NVFP4_GEMV_MAX_ROWS {
            let mut wb = self.alloc(&w.shape, DType::BF16)?;
            self.dequant_nvfp4(&mut wb, w)?;
            return self.matmul_op(out, x, &wb);
        }
        if self.empty_matmul(out, (m, n, k))? {
            return Ok(());
        }
        let mut narrowed = None;
        let x = self.as_bf16(x, &mut narrowed)?;
        let s = &self.stream;
        let (o, xp, wp, sp, gp) = (
            out.ptr(s),
            x.ptr(s),
            w.ptr(s),
            w.scales_ptr(s),
            self.f4_globals_ptr(w),
        );
        let (ni, ki) = (int(n, "matmul")?, int(k, "matmul")?);
        let blocks = dim(n.div_ceil(NVFP4_WARPS), "matmul")?;
        for r0 in (0..m).step_by(NVFP4_GEMV_MAX_ROWS) {
            let rows = (m - r0).min(NVFP4_GEMV_MAX_ROWS);
            let (o_r, x_r) = (o + (r0 * n * 4) as u64, xp + (r0 * k * 2) as u64);
            // SAFETY: out is [m, n] f32, x [m, k] bf16, w [n, k] F4 with its [n, k / 16] scale
            // bytes and [n] f32 multipliers (checked above); this pass covers rows
            // r0..r0 + rows <= m of out and x; k % 32 == 0, so every 16-byte load of a packed
            // row (k / 2 bytes) and of an x row (2k bytes) is inside it and aligned, and the
            // 2-byte scale loads (k / 16 bytes a row, even) too; one warp per output column,
            // columns past n return.
            unsafe {
                NVFP4_GEMV[rows - 1].launch(
                    self,
                    cfg((blocks, 1), (32 * NVFP4_WARPS) as u32),
                    (o_r, x_r, wp, sp, gp, ni, ki),
                )?;
            }
        }
        Ok(())
    }

    /// `out` (bf16, w's shape) = the F4 weight's values: e2m1 · f32(e4m3 · multiplier),
    /// rounded once to bf16.
    fn dequant_nvfp4(&self, out: &mut CudaTensor, w: &CudaTensor) -> Result<()> {
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
        // and by matmul_nvfp4): grid-stride over rows·k / 32 chunks of 16 packed bytes, each
        // inside one row and aligned, with its two scale bytes and its row's multiplier.
        unsafe {
            kernels::dequant_nvfp4_bf16.launch(
                self,
                stride_cfg(rows * k as u64 / 32),
                (o, wp, sp, gp, rows, ki),
            )
        }
    }
}
