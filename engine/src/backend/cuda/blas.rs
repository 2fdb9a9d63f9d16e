//! `matmul` through cuBLAS: bf16 operands, f32 accumulation, f32 result.
//!
//! `out[m, n] = Σ_k x[m, k] · w[n, k]` in row-major terms is, read column-major (as cuBLAS
//! does), `outᵀ (n × m) = wᵀ-as-stored (k × n)ᵀ · xᵀ-as-stored (k × m)`: one `cublasGemmEx` with
//! `transa = T`, `transb = N`, `M = n`, `N = m`, `K = k`, `lda = ldb = k`, `ldc = n`, and no
//! copy or transpose of anything. The result is f32 so the residual stream and the logits keep
//! full precision; the operands must be bf16 (an f32 `x` is narrowed into a temporary first).

use std::ffi::c_void;
use std::sync::{Arc, PoisonError};

use cudarc::cublas::{result as cublas, sys};
use cudarc::driver::{CudaContext, CudaStream};

use super::tensor::{CudaTensor, DType};
use super::{CudaBackend, check, dev_err};
use crate::backend::{BackendError, Result};

/// A cuBLAS handle bound to the backend's stream.
pub(super) struct Blas {
    handle: sys::cublasHandle_t,
}

// SAFETY: the handle is only used under the backend's `Mutex<Blas>`, one call at a time, and
// cuBLAS handles may move between threads.
unsafe impl Send for Blas {}

impl Blas {
    pub(super) fn new(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>) -> Result<Self> {
        ctx.bind_to_thread()
            .map_err(dev_err("binding the context"))?;
        let handle = cublas::create_handle().map_err(dev_err("creating the cuBLAS handle"))?;
        let blas = Self { handle };
        // SAFETY: the handle was just created and the stream is alive (the backend owns both
        // and drops the handle first).
        unsafe { cublas::set_stream(handle, stream.cu_stream() as sys::cudaStream_t) }
            .map_err(dev_err("cublasSetStream"))?;
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

impl CudaBackend {
    pub(super) fn matmul_op(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        w: &CudaTensor,
    ) -> Result<()> {
        let (m, k, n) = (x.rows(), x.cols(), w.rows());
        check(
            "matmul",
            w.cols() == k && out.rows() == m && out.cols() == n && w.dtype == DType::BF16,
            || {
                format!(
                    "out {:?} = x {:?} · w {:?}ᵀ (w {:?}, must be bf16)",
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
        self.set_dtype(out, DType::F32)?;
        if m == 0 || n == 0 {
            return Ok(());
        }
        if k == 0 {
            return self
                .stream
                .memset_zeros(&mut out.buf)
                .map_err(dev_err("matmul: zero fill"));
        }
        // cuBLAS wants both operands of one type.
        let narrowed;
        let x = if x.dtype == DType::BF16 {
            x
        } else {
            let mut t = self.alloc(&x.shape, DType::BF16)?;
            self.cast(&mut t, x)?;
            narrowed = t;
            &narrowed
        };
        self.ctx
            .bind_to_thread()
            .map_err(dev_err("binding the context"))?;
        let s = &self.stream;
        let (alpha, beta) = (1f32, 0f32);
        let (op, xp, wp) = (out.ptr(s), x.ptr(s), w.ptr(s));
        let blas = self.blas.lock().unwrap_or_else(PoisonError::into_inner);
        // SAFETY: w is [n, k] bf16, x [m, k] bf16 and out [m, n] f32, all checked above, which
        // is exactly what the column-major reading in this file's header needs with lda = ldb
        // = k and ldc = n; alpha and beta are host f32 scalars (the default pointer mode) for
        // CUBLAS_COMPUTE_32F; the handle runs on the backend's stream.
        let r = unsafe {
            cublas::gemm_ex(
                blas.handle,
                sys::cublasOperation_t::CUBLAS_OP_T,
                sys::cublasOperation_t::CUBLAS_OP_N,
                ni,
                mi,
                ki,
                (&alpha as *const f32).cast::<c_void>(),
                wp as *const c_void,
                sys::cudaDataType::CUDA_R_16BF,
                ki,
                xp as *const c_void,
                sys::cudaDataType::CUDA_R_16BF,
                ki,
                (&beta as *const f32).cast::<c_void>(),
                op as *mut c_void,
                sys::cudaDataType::CUDA_R_32F,
                ni,
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        };
        drop(blas);
        r.map_err(|e| BackendError::Device(format!("cublasGemmEx ({m}×{k} · {n}×{k}ᵀ): {e}")))?;
        if self.syncs_each_launch() {
            self.synchronize()?;
        }
        Ok(())
    }
}
