//! `matmul` through cuBLAS: bf16 operands, f32 accumulation, f32 result.
//!
//! `out[m, n] = Σ_k x[m, k] · w[n, k]` in row-major terms is, read column-major (as cuBLAS
//! does), `outᵀ (n × m) = wᵀ-as-stored (k × n)ᵀ · xᵀ-as-stored (k × m)`: one `cublasGemmEx` with
//! `transa = T`, `transb = N`, `M = n`, `N = m`, `K = k`, `lda = ldb = k`, `ldc = n`, and no
//! copy or transpose of anything. The result is f32 so the residual stream and the logits keep
//! full precision; the operands must be bf16 (an f32 `x` is narrowed into a temporary first).
//! The float32 path's f32 weights take f32 operands instead (a bf16 `x` is widened), with
//! cuBLAS's pedantic f32 compute: no TF32 or other reduced-precision shortcut.

use std::ffi::c_void;
use std::sync::{Arc, PoisonError};

use cudarc::cublas::{result as cublas, sys};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};

use super::gemm_tune::{GemmTuner, Operands, Shape};
use super::tensor::{CudaTensor, DType};
use super::{CudaBackend, check, dev_err};
use crate::backend::kernels::{self, Kernel};
use crate::backend::{BackendError, Result};

/// cuBLAS's workspace: set once, so a GEMM never allocates (which a CUDA graph capture would
/// refuse); 32 MiB is what NVIDIA recommends on Hopper.
const WORKSPACE_BYTES: usize = 32 << 20;

/// A cuBLAS handle bound to the backend's stream, with its own workspace.
pub(super) struct Blas {
    handle: sys::cublasHandle_t,
    _workspace: CudaSlice<u8>,
    /// The workspace's device address, shared with cuBLASLt (both run on the one stream).
    workspace_ptr: u64,
    /// Decode-sized GEMMs' algorithms timed per shape (gemm_tune.rs); None without cuBLASLt.
    tuner: Option<GemmTuner>,
}

// SAFETY: the handle is only used under the backend's `Mutex<Blas>`, one call at a time, and
// cuBLAS handles may move between threads.
unsafe impl Send for Blas {}

impl Blas {
    /// `gemm_tune`: time decode-sized GEMM shapes against cuBLASLt (the tuning's
    /// `gemm.gemm_tune`).
    pub(super) fn new(
        ctx: &Arc<CudaContext>,
        stream: &Arc<CudaStream>,
        gemm_tune: bool,
    ) -> Result<Self> {
        ctx.bind_to_thread()
            .map_err(dev_err("binding the context"))?;
        let handle = cublas::create_handle().map_err(dev_err("creating the cuBLAS handle"))?;
        let workspace = stream
            .alloc_zeros::<u8>(WORKSPACE_BYTES)
            .map_err(dev_err("cuBLAS workspace"))?;
        let ws = workspace.device_ptr(stream).0;
        let blas = Self {
            handle,
            _workspace: workspace,
            workspace_ptr: ws,
            tuner: GemmTuner::new(gemm_tune),
        };
        // SAFETY: the handle was just created and the stream is alive (the backend owns both
        // and drops the handle first); the workspace is WORKSPACE_BYTES of device memory that
        // lives as long as the handle (same struct, dropped after the handle is destroyed).
        unsafe {
            cublas::set_stream(handle, stream.cu_stream() as sys::cudaStream_t)
                .map_err(dev_err("cublasSetStream"))?;
            let status = sys::cublasSetWorkspace_v2(handle, ws as *mut c_void, WORKSPACE_BYTES);
            if status != sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                return Err(BackendError::Device(format!(
                    "cublasSetWorkspace: {status:?}"
                )));
            }
        }
        Ok(blas)
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        // SAFETY: created by cublasCreate and destroyed only here; nothing can be done about a
        // failure at this point.
        let _ = unsafe { cublas::destroy_handle(self.handle) };
    }
}

/// Most rows the GEMV kernel (gemv.cu) takes. By default `matmul` gives it only single rows:
/// measured on the H200 it beats cuBLAS by 20% there and loses from 4 rows on, where each
/// weight load waits on as many x loads (the tuning's `gemm.gemv_max_rows`, up to this, for
/// comparisons).
pub(super) const GEMV_MAX_ROWS: usize = crate::tuning::registry::GEMV_MAX_ROWS;
/// Warps of a GEMV block (GEMV_WARPS in gemv.cu): one output column each.
const GEMV_WARPS: usize = 8;
/// Most rows `gemv_bf16_mma` takes (one B tile of the mma).
const BF16_MMA_MAX_ROWS: usize = 8;
/// The largest weight (elements) `gemv_bf16_mma` takes. At 4 rows on the H200 (an MTP verify
/// step of Qwen3.6-35B-A3B) it beat cuBLAS on small weights (the router, 256 × 2048: 4.4
/// against 7.1 µs; 4096 × 2048: 7.7 against about 10) and lost on large ones (12352 × 2048:
/// 19.7 against 18.7 µs; the 248k-row head: 331 against 253), where its loads keep fewer
/// bytes in flight than cuBLAS's tiles.
const BF16_MMA_MAX_WEIGHTS: usize = 4096 * 2048;
/// Warps of a `gemv_bf16_mma` block (FP8_MMA_WARPS in prelude/fp8_mma.cuh), which owns 16
/// output columns.
const BF16_MMA_WARPS: usize = 8;

/// The parameters of the bf16 GEMVs (`gemv_*`): out, x, w, n, k.
type GemvArgs = (u64, u64, u64, i32, i32);
/// The parameters of the FP8 GEMVs (`gemv_fp8_*`, fp8.rs): out, x, w, scales, n, k.
pub(super) type Fp8GemvArgs = (u64, u64, u64, u64, i32, i32);

/// `gemv_m<m>` and `gemv_silu_m<m>`, for m rows of x (1 to GEMV_MAX_ROWS).
static GEMV: [Kernel<GemvArgs>; GEMV_MAX_ROWS] = [
    kernels::gemv_m1,
    kernels::gemv_m2,
    kernels::gemv_m3,
    kernels::gemv_m4,
    kernels::gemv_m5,
    kernels::gemv_m6,
    kernels::gemv_m7,
    kernels::gemv_m8,
];
static GEMV_SILU: [Kernel<GemvArgs>; GEMV_MAX_ROWS] = [
    kernels::gemv_silu_m1,
    kernels::gemv_silu_m2,
    kernels::gemv_silu_m3,
    kernels::gemv_silu_m4,
    kernels::gemv_silu_m5,
    kernels::gemv_silu_m6,
    kernels::gemv_silu_m7,
    kernels::gemv_silu_m8,
];

/// A whole-row GEMV (`gemv_full_*`, `gemv_fp8_full_*`): the kernel, rows a warp, 16-byte
/// chunks of a row a lane, blocks a multiprocessor (the kernel's __launch_bounds__).
type FullKernel<A> = (Kernel<A>, usize, usize, usize);
/// The whole-row kernels of each weight type, the fewest registers first.
static FULL_BF16: [FullKernel<GemvArgs>; 3] = [
    (kernels::gemv_full_r1g8, 1, 8, 4),
    (kernels::gemv_full_r2g8, 2, 8, 3),
    (kernels::gemv_full_r1g16, 1, 16, 2),
];
static FULL_FP8: [FullKernel<Fp8GemvArgs>; 2] = [
    (kernels::gemv_fp8_full_r1g8, 1, 8, 3),
    (kernels::gemv_fp8_full_r2g4, 2, 4, 3),
];

impl CudaBackend {
    /// Turns the per-shape timing of decode-sized GEMMs (gemm_tune.rs) on or off (the tuning's
    /// `gemm.gemm_tune`, changed by `set_tuning`).
    #[cfg(feature = "lab")]
    pub(super) fn set_gemm_tune(&self, on: bool) {
        let mut blas = self.blas.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(t) = blas.tuner.as_mut() {
            t.set_enabled(on);
        }
    }

    /// Each GEMM shape (m, n, k) tuned so far: whether a cuBLASLt algorithm beat
    /// `cublasGemmEx`, and both times in µs.
    pub fn gemm_tuning(&self) -> Vec<(Shape, bool, f32, f32)> {
        let blas = self.blas.lock().unwrap_or_else(PoisonError::into_inner);
        blas.tuner.as_ref().map_or_else(Vec::new, GemmTuner::report)
    }

    fn gemv_max_rows(&self) -> usize {
        self.tuning().gemm.gemv_max_rows.min(GEMV_MAX_ROWS)
    }

    /// Whether one-row GEMVs take the whole-row kernels where their grid fits in one wave
    /// (`gemv_full_*`, `gemv_fp8_full_*`: every weight byte loaded before the kernel waits on
    /// the one before; the tuning's `gemm.gemv_full`): the same output bit for bit either way.
    pub fn gemv_full(&self) -> bool {
        self.tuning().gemm.gemv_full
    }

    /// The whole-row kernel for a one-row product of `n` output columns over `k` (bf16 or FP8
    /// weights), if it is on and one fits: its name and rows a warp.
    pub fn gemv_full_kernel(&self, fp8: bool, n: usize, k: usize) -> Option<(&'static str, usize)> {
        if fp8 {
            self.gemv_full_fp8(n, k).map(|(f, rows)| (f.name(), rows))
        } else {
            self.gemv_full_bf16(n, k).map(|(f, rows)| (f.name(), rows))
        }
    }

    /// [`Self::gemv_full_kernel`] for bf16 weights: the kernel and its rows a warp.
    fn gemv_full_bf16(&self, n: usize, k: usize) -> Option<(&'static Kernel<GemvArgs>, usize)> {
        self.full_kernel(&FULL_BF16, 8, n, k)
    }

    /// [`Self::gemv_full_kernel`] for FP8 weights: the kernel and its rows a warp.
    pub(super) fn gemv_full_fp8(
        &self,
        n: usize,
        k: usize,
    ) -> Option<(&'static Kernel<Fp8GemvArgs>, usize)> {
        self.full_kernel(&FULL_FP8, 16, n, k)
    }

    /// The first kernel of `table` that fits (`per_chunk` weights a 16-byte chunk).
    fn full_kernel<A>(
        &self,
        table: &'static [FullKernel<A>],
        per_chunk: usize,
        n: usize,
        k: usize,
    ) -> Option<(&'static Kernel<A>, usize)> {
        if !self.gemv_full() || n == 0 || !k.is_multiple_of(per_chunk) {
            return None;
        }
        let chunks = k / per_chunk;
        table
            .iter()
            .find(|&&(_, rows, g, per_sm)| {
                chunks <= 32 * g
                    && n.div_ceil(GEMV_WARPS * rows) <= self.info.multiprocessors * per_sm
            })
            .map(|(f, rows, ..)| (f, *rows))
    }

    /// `out[m, n] = Σ_k x[m, k] · w[n, k]` for m ≤ GEMV_MAX_ROWS, k % 8 == 0, both bf16.
    fn gemv(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        w: &CudaTensor,
        (m, n, k): (i32, i32, i32),
    ) -> Result<()> {
        if m == 1
            && let Some((f, rows)) = self.gemv_full_bf16(n as usize, k as usize)
        {
            return self.launch_gemv_named(f, rows, out, x, w, (n, k));
        }
        self.launch_gemv(&GEMV, out, x, w, (m, n, k))
    }

    /// `matmul` then `silu_mul` in one kernel (gemv.cu's gemv_silu) where the GEMV would serve
    /// `x`'s rows: `out[m, j] = silu(x[m]·w[j]) · x[m]·w[I + j]`, `w` = `[2·I, K]`. Returns
    /// false (nothing done) where the caller must take the unfused path.
    pub(super) fn gemv_silu_op(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        w: &CudaTensor,
    ) -> Result<bool> {
        let (m, k, i) = (x.rows(), x.cols(), out.cols());
        let fits = m >= 1
            && m <= self.gemv_max_rows()
            && k % 8 == 0
            && x.dtype == DType::BF16
            && w.dtype == DType::BF16
            && w.rows() == 2 * i
            && w.cols() == k
            && out.rows() == m;
        let (Ok(mi), Ok(ii), Ok(ki)) = (i32::try_from(m), i32::try_from(i), i32::try_from(k))
        else {
            return Ok(false);
        };
        if !fits || i == 0 {
            return Ok(false);
        }
        self.set_dtype(out, DType::BF16)?;
        self.launch_gemv(&GEMV_SILU, out, x, w, (mi, ii, ki))?;
        Ok(true)
    }

    /// `matmul` then `add_bias` in one kernel (gemv.cu's gemv_bias_m1) where the one-row GEMV
    /// `gemv_m1` would serve the product (not the whole-row kernels): `out[0, n] = x·w[n] +
    /// bias[n]`, the same sums and add bit for bit. Returns false (nothing done) where the
    /// caller must take the unfused path.
    pub(super) fn gemv_bias_op(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        w: &CudaTensor,
        bias: &CudaTensor,
    ) -> Result<bool> {
        let (m, k, n) = (x.rows(), x.cols(), w.rows());
        let fits = m == 1
            && self.gemv_max_rows() >= 1
            && k > 0
            && n > 0
            && k % 8 == 0
            && x.dtype == DType::BF16
            && w.dtype == DType::BF16
            && w.cols() == k
            && bias.dtype == DType::BF16
            && bias.numel() == n
            && out.rows() == 1
            && out.cols() == n
            && self.gemv_full_bf16(n, k).is_none();
        let (Ok(ni), Ok(ki)) = (i32::try_from(n), i32::try_from(k)) else {
            return Ok(false);
        };
        if !fits {
            return Ok(false);
        }
        self.set_dtype(out, DType::F32)?;
        let s = &self.stream;
        let (o, xp, wp, bp) = (out.ptr(s), x.ptr(s), w.ptr(s), bias.ptr(s));
        let blocks = super::elementwise::dim(n.div_ceil(GEMV_WARPS), "matmul")?;
        let config = super::elementwise::cfg((blocks, 1), (32 * GEMV_WARPS) as u32);
        // SAFETY: as launch_gemv_named's gemv_m1 (out [1, n] f32, its type set above, x [1, k]
        // and w [n, k] bf16, k % 8 == 0 and k, n > 0, a warp a column, columns past n return
        // at once), and bias n bf16 values, read at each written column.
        unsafe {
            kernels::gemv_bias_m1.launch(self, config, (o, xp, wp, ni, ki, bp))?;
        }
        Ok(true)
    }

    /// Whether a bf16 product of `m` rows over `k` columns into `n` takes `gemv_bf16_mma`: 2 to
    /// 8 rows of a weight of at most BF16_MMA_MAX_WEIGHTS (where cuBLAS is latency-bound and the
    /// CUDA-core GEMV slower), k % 64 == 0, sm_80+, the tuning's `gemm.bf16_gemv_mma`.
    fn bf16_gemv_mma(&self, m: usize, n: usize, k: usize) -> bool {
        self.tuning().gemm.bf16_gemv_mma
            && (2..=BF16_MMA_MAX_ROWS).contains(&m)
            && n * k <= BF16_MMA_MAX_WEIGHTS
            && k.is_multiple_of(64)
            && self.info.compute_capability >= (8, 0)
    }

    /// `out[m, n] = Σ_k x[m, k] · w[n, k]` on tensor cores, for what `bf16_gemv_mma` admits.
    fn gemv_bf16_mma(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        w: &CudaTensor,
        (m, n, k): (i32, i32, i32),
    ) -> Result<()> {
        let s = &self.stream;
        let (o, xp, wp) = (out.ptr(s), x.ptr(s), w.ptr(s));
        let blocks = super::elementwise::dim((n as usize).div_ceil(16), "matmul")?;
        let config = super::elementwise::cfg((blocks, 1), (32 * BF16_MMA_WARPS) as u32);
        // SAFETY: out is [m, n] f32, x [m, k] and w [n, k] bf16 (matmul_op's checks); m <= 8,
        // the B tile's columns (x rows past m read as zeros and are not written); k % 64 == 0,
        // so each lane's two 16-byte loads of a 64-column slice of a row are inside it and
        // aligned (allocations 256-byte aligned, rows 2k bytes); a block of BF16_MMA_WARPS warps
        // per 16 output columns, rows past n read row n - 1 and are not written; sm_80+
        // (bf16_gemv_mma).
        unsafe { kernels::gemv_bf16_mma.launch(self, config, (o, xp, wp, m, n, k)) }
    }

    /// Launches one of a GEMV family (`family[m - 1]`): one warp an output column `n`.
    fn launch_gemv(
        &self,
        family: &[Kernel<GemvArgs>; GEMV_MAX_ROWS],
        out: &mut CudaTensor,
        x: &CudaTensor,
        w: &CudaTensor,
        (m, n, k): (i32, i32, i32),
    ) -> Result<()> {
        let f = &family[(m.clamp(1, GEMV_MAX_ROWS as i32) - 1) as usize];
        self.launch_gemv_named(f, 1, out, x, w, (n, k))
    }

    /// Launches GEMV kernel `f` (gemv.cu) with `rows` output columns a warp.
    fn launch_gemv_named(
        &self,
        f: &Kernel<GemvArgs>,
        rows: usize,
        out: &mut CudaTensor,
        x: &CudaTensor,
        w: &CudaTensor,
        (n, k): (i32, i32),
    ) -> Result<()> {
        let s = &self.stream;
        let (o, xp, wp) = (out.ptr(s), x.ptr(s), w.ptr(s));
        let blocks = super::elementwise::dim((n as usize).div_ceil(GEMV_WARPS * rows), "matmul")?;
        let config = super::elementwise::cfg((blocks, 1), (32 * GEMV_WARPS) as u32);
        // SAFETY: for gemv_m*, out is [m, n] f32, x [m, k] and w [n, k] bf16; for gemv_silu_m*,
        // out is [m, n] bf16, x [m, k] and w [2n, k] bf16 (checked by the callers); 1 <= m <= 8
        // matches the kernel's template and k % 8 == 0, so every 16-byte load of a row stays
        // inside it and is aligned (allocations are 256-byte aligned, rows 2k bytes); one warp
        // per `rows` output columns, columns past n return at once or are not written (the
        // gemv_full_* kernels, m = 1, load row n - 1 for them; k <= 256 · G by
        // gemv_full_kernel).
        unsafe { f.launch(self, config, (o, xp, wp, n, k)) }
    }

    /// Make `out` an f32 `[m, n]` result and finish the trivial cases: nothing to compute
    /// (`m` or `n` is 0) or a sum over nothing (`k` is 0: zeros). True when done.
    pub(super) fn empty_matmul(
        &self,
        out: &mut CudaTensor,
        (m, n, k): (usize, usize, usize),
    ) -> Result<bool> {
        self.set_dtype(out, DType::F32)?;
        if m == 0 || n == 0 {
            return Ok(true);
        }
        if k == 0 {
            self.stream
                .memset_zeros(&mut *out.buf)
                .map_err(dev_err("matmul: zero fill"))?;
            return Ok(true);
        }
        Ok(false)
    }

    /// `x` itself when it is bf16, else a bf16 copy kept in `tmp`: GEMM operands and the
    /// expert kernels read bf16.
    pub(super) fn as_bf16<'a>(
        &self,
        x: &'a CudaTensor,
        tmp: &'a mut Option<CudaTensor>,
    ) -> Result<&'a CudaTensor> {
        self.as_dtype(x, DType::BF16, tmp)
    }

    /// `x` itself when it is of `dtype` (bf16 or f32), else a copy of that type kept in `tmp`.
    pub(super) fn as_dtype<'a>(
        &self,
        x: &'a CudaTensor,
        dtype: DType,
        tmp: &'a mut Option<CudaTensor>,
    ) -> Result<&'a CudaTensor> {
        if x.dtype == dtype {
            return Ok(x);
        }
        let mut t = self.alloc(&x.shape, dtype)?;
        self.cast(&mut t, x)?;
        Ok(tmp.insert(t))
    }

    pub(super) fn matmul_op(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        w: &CudaTensor,
    ) -> Result<()> {
        if w.dtype == DType::F8 {
            return self.matmul_fp8(out, x, w);
        }
        if w.dtype == DType::F4 {
            return self.matmul_nvfp4(out, x, w);
        }
        let (m, k, n) = (x.rows(), x.cols(), w.rows());
        check(
            "matmul",
            w.cols() == k
                && out.rows() == m
                && out.cols() == n
                && !matches!(w.dtype, DType::F8 | DType::F4 | DType::Mx4),
            || {
                format!(
                    "out {:?} = x {:?} · w {:?}ᵀ (w {:?}, must be bf16 or f32)",
                    out.shape, x.shape, w.shape, w.dtype
                )
            },
        )?;
        let dims = |v: usize| {
            i32::try_from(v).map_err(|_| {
                super::shape_err("matmul", format!("dimension {v} exceeds cuBLAS's int"))
            })
        };
        let (mi, ni, ki) = (dims(m)?, dims(n)?, dims(k)?);
        if self.empty_matmul(out, (m, n, k))? {
            return Ok(());
        }
        if w.dtype == DType::F32 {
            return self.matmul_f32(out, x, w, (mi, ni, ki));
        }
        // cuBLAS (and the GEMV kernel) want both operands of one type.
        let mut narrowed = None;
        let x = self.as_bf16(x, &mut narrowed)?;
        if m <= self.gemv_max_rows() && k % 8 == 0 {
            return self.gemv(out, x, w, (mi, ni, ki));
        }
        if self.bf16_gemv_mma(m, n, k) {
            return self.gemv_bf16_mma(out, x, w, (mi, ni, ki));
        }
        let ops = self.gemm_operands(out, x, w)?;
        let s = &self.stream;
        let mut blas = self.blas.lock().unwrap_or_else(PoisonError::into_inner);
        let handle = blas.handle;
        let mut gemm_ex = || -> Result<()> {
            // SAFETY: w is [n, k] bf16, x [m, k] bf16 and out [m, n] f32, all checked above;
            // the handle runs on the backend's stream.
            unsafe {
                gemm_ex(
                    handle,
                    (mi, ni, ki),
                    ops,
                    sys::cudaDataType::CUDA_R_16BF,
                    sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                )
            }
        };
        let workspace = (blas.workspace_ptr, WORKSPACE_BYTES);
        let tuned = match blas.tuner.as_mut() {
            Some(t) => t.run(s, workspace, (mi, ni, ki), ops, &mut gemm_ex)?,
            None => false,
        };
        if !tuned {
            gemm_ex()?;
        }
        drop(blas);
        if self.syncs_each_launch() {
            self.synchronize()?;
        }
        Ok(())
    }

    /// Binds the context to this thread (cuBLAS needs it current) and takes the operands'
    /// device addresses.
    fn gemm_operands(&self, out: &CudaTensor, x: &CudaTensor, w: &CudaTensor) -> Result<Operands> {
        self.ctx
            .bind_to_thread()
            .map_err(dev_err("binding the context"))?;
        let s = &self.stream;
        Ok(Operands {
            out: out.ptr(s),
            x: x.ptr(s),
            w: w.ptr(s),
        })
    }

    /// The float32 path's GEMM: f32 `w` [n, k], `x` [m, k] (widened first when bf16) and `out`
    /// [m, n], all checked by `matmul_op`.
    fn matmul_f32(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        w: &CudaTensor,
        dims: (i32, i32, i32),
    ) -> Result<()> {
        let widened;
        let x = if x.dtype == DType::F32 {
            x
        } else {
            let mut t = self.alloc(&x.shape, DType::F32)?;
            self.cast(&mut t, x)?;
            widened = t;
            &widened
        };
        let ops = self.gemm_operands(out, x, w)?;
        let blas = self.blas.lock().unwrap_or_else(PoisonError::into_inner);
        // SAFETY: w is [n, k], x [m, k] and out [m, n], all f32 (checked by matmul_op and
        // above); the handle runs on the backend's stream.
        unsafe {
            gemm_ex(
                blas.handle,
                dims,
                ops,
                sys::cudaDataType::CUDA_R_32F,
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_PEDANTIC,
            )
        }?;
        drop(blas);
        if self.syncs_each_launch() {
            self.synchronize()?;
        }
        Ok(())
    }
}

/// `out[m, n] = Σ_k x[m, k] · w[n, k]` through `cublasGemmEx` (the column-major reading in this
/// file's header: lda = ldb = k, ldc = n), operands of type `operand`, an f32 result.
///
/// # Safety
/// `ops.w` must hold [n, k] and `ops.x` [m, k] values of `operand`, `ops.out` [m, n] f32, all
/// device memory of the handle's context, and the handle must be live.
unsafe fn gemm_ex(
    handle: sys::cublasHandle_t,
    (m, n, k): (i32, i32, i32),
    ops: Operands,
    operand: sys::cudaDataType,
    compute: sys::cublasComputeType_t,
) -> Result<()> {
    let (alpha, beta) = (1f32, 0f32);
    // SAFETY: the caller's contract; alpha and beta are host f32 scalars (the default pointer
    // mode) for an f32 compute type.
    unsafe {
        cublas::gemm_ex(
            handle,
            sys::cublasOperation_t::CUBLAS_OP_T,
            sys::cublasOperation_t::CUBLAS_OP_N,
            n,
            m,
            k,
            (&alpha as *const f32).cast::<c_void>(),
            ops.w as *const c_void,
            operand,
            k,
            ops.x as *const c_void,
            operand,
            k,
            (&beta as *const f32).cast::<c_void>(),
            ops.out as *mut c_void,
            sys::cudaDataType::CUDA_R_32F,
            n,
            compute,
            sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .map_err(|e| BackendError::Device(format!("cublasGemmEx ({m}×{k} · {n}×{k}ᵀ): {e}")))
}
