//! Prefill-sized GEMMs with an FP8 weight on Hopper's FP8 tensor cores: cuBLASLt's
//! block-scaled FP8 GEMM (cuBLAS 12.9+, sm_90 only), the scheme Qwen's fine-grained FP8
//! checkpoints are made for.
//!
//! `out[m, n] (f32) = x[m, k] · w[n, k]ᵀ` with
//! - w: the checkpoint's e4m3 bytes as stored, and one f32 scale per 128 × 128 block
//!   (`BLK128x128_32F`): the backend keeps a scale per row and 128 columns
//!   (`tensor.rs`), so `fp8_block_scales` (fp8.cu) takes every 128th row's into a
//!   `[n / 128, kb']` array, `kb'` = the k blocks rounded up to 4 as cuBLASLt wants them. Only
//!   weights whose rows share their block's scales may go this way ([`CudaTensor`]'s
//!   `fp8_row_blocks`, set at upload when every 128-row block's rows agree).
//! - x: quantized per 1 × 128 group of a row the way the FP8 KV cache is (`s = amax / 448`,
//!   `e4m3(x / s)`; `quant_act_fp8`), scales `[k / 128, m']` with the rows fastest, `m'` = m
//!   rounded up to 4 (`VEC128_32F`). This is what transformers' fine-grained FP8 linear and
//!   vLLM do for these checkpoints; it costs accuracy against bf16 activations (an e4m3 value
//!   keeps 3 mantissa bits), which the decode GEMVs do not pay.
//!
//! In cuBLASLt's column-major terms D (n × m) = Aᵀ · B with A = w (k × n, ld k, transposed) and
//! B = xq (k × m, ld k): FP8 GEMMs must be "TN". A shape whose descriptor or heuristic cuBLASLt
//! refuses is remembered and goes back to the bf16 route (dequantized weight, cuBLAS).
//!
//! [`CudaTensor`]: super::tensor::CudaTensor
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::c_void;

use cudarc::cublaslt::{result as lt, sys};
use cudarc::driver::CudaStream;

use crate::backend::{BackendError, Result};

/// `(m, n, k)`: rows of x, rows of w, the shared dimension.
pub(super) type Shape = (u64, u64, u64);

/// Shapes kept before the cache is dropped (prefill chunk lengths vary with the prompts).
const MAX_PLANS: usize = 512;

fn lt_err(what: &'static str) -> impl Fn(lt::CublasError) -> BackendError {
    move |e| BackendError::Device(format!("cuBLASLt FP8 {what}: {e}"))
}

/// One shape's descriptors and algorithm.
struct Plan {
    desc: sys::cublasLtMatmulDesc_t,
    a: sys::cublasLtMatrixLayout_t,
    b: sys::cublasLtMatrixLayout_t,
    d: sys::cublasLtMatrixLayout_t,
    algo: sys::cublasLtMatmulAlgo_t,
}

impl Drop for Plan {
    fn drop(&mut self) {
        // SAFETY: each was created once by `Plan::new` and is destroyed only here (null ones,
        // from a failed creation, are skipped).
        unsafe {
            for l in [self.a, self.b, self.d] {
                if !l.is_null() {
                    let _ = lt::destroy_matrix_layout(l);
                }
            }
            if !self.desc.is_null() {
                let _ = lt::destroy_matmul_desc(self.desc);
            }
        }
    }
}

/// Sets one descriptor attribute from a plain value.
///
/// # Safety
/// `desc` is a live descriptor and `T` the attribute's type.
unsafe fn set<T>(
    desc: sys::cublasLtMatmulDesc_t,
    attr: sys::cublasLtMatmulDescAttributes_t,
    value: &T,
) -> Result<()> {
    // SAFETY: the caller's contract; the value is read during the call.
    unsafe {
        lt::set_matmul_desc_attribute(
            desc,
            attr,
            std::ptr::from_ref(value).cast(),
            std::mem::size_of::<T>(),
        )
    }
    .map_err(lt_err("descriptor attribute"))
}

impl Plan {
    /// The descriptors of one shape and cuBLASLt's first heuristic choice, or None when it
    /// offers none (the shape then takes the bf16 route).
    fn new(
        handle: sys::cublasLtHandle_t,
        (m, n, k): Shape,
        ws_bytes: usize,
    ) -> Result<Option<Self>> {
        use sys::cublasLtMatmulDescAttributes_t as A;
        use sys::cublasLtMatmulMatrixScale_t as S;
        let mut plan = Plan {
            desc: std::ptr::null_mut(),
            a: std::ptr::null_mut(),
            b: std::ptr::null_mut(),
            d: std::ptr::null_mut(),
            algo: sys::cublasLtMatmulAlgo_t { data: [0; 8] },
        };
        plan.desc = lt::create_matmul_desc(
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            sys::cudaDataType::CUDA_R_32F,
        )
        .map_err(lt_err("matmul descriptor"))?;
        let transpose = cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_T;
        // SAFETY: the descriptor is live; each attribute gets a value of its type.
        unsafe {
            set(plan.desc, A::CUBLASLT_MATMUL_DESC_TRANSA, &transpose)?;
            set(
                plan.desc,
                A::CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                &S::CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
            )?;
            set(
                plan.desc,
                A::CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                &S::CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
            )?;
        }
        let e4m3 = sys::cudaDataType::CUDA_R_8F_E4M3;
        plan.a = lt::create_matrix_layout(e4m3, k, n, k as i64).map_err(lt_err("layout"))?;
        plan.b = lt::create_matrix_layout(e4m3, k, m, k as i64).map_err(lt_err("layout"))?;
        plan.d = lt::create_matrix_layout(sys::cudaDataType::CUDA_R_32F, n, m, n as i64)
            .map_err(lt_err("layout"))?;
        let pref = lt::create_matmul_pref().map_err(lt_err("preference"))?;
        let ws = ws_bytes as u64;
        let mut result = sys::cublasLtMatmulHeuristicResult_t {
            algo: sys::cublasLtMatmulAlgo_t { data: [0; 8] },
            workspaceSize: 0,
            state: sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS,
            wavesCount: 0.0,
            reserved: [0; 4],
        };
        let mut count = 0i32;
        // SAFETY: pref was just created; the attribute is a u64 read by value; the heuristic
        // writes at most one result and the count.
        let found =
            unsafe {
                lt::set_matmul_pref_attribute(
                pref,
                sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                std::ptr::from_ref(&ws).cast(),
                std::mem::size_of::<u64>(),
            )
            .and_then(|()| {
                sys::cublasLtMatmulAlgoGetHeuristic(
                    handle, plan.desc, plan.a, plan.b, plan.d, plan.d, pref, 1, &mut result,
                    &mut count,
                )
                .result()
            })
            };
        // SAFETY: created above, destroyed once.
        let _ = unsafe { lt::destroy_matmul_pref(pref) };
        if found.is_err() || count < 1 || result.state != sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS
        {
            return Ok(None);
        }
        plan.algo = result.algo;
        Ok(Some(plan))
    }
}

/// The device operands of one block-scaled FP8 GEMM.
#[derive(Clone, Copy)]
pub(super) struct Operands {
    /// f32 [m, n].
    pub out: u64,
    /// e4m3 [m, k].
    pub xq: u64,
    /// f32 [k / 128, m rounded up to 4].
    pub x_scales: u64,
    /// e4m3 [n, k].
    pub w: u64,
    /// f32 [n / 128, k / 128 rounded up to 4].
    pub w_scales: u64,
}

/// A cuBLASLt handle and the plans (or refusals) per shape.
pub(super) struct Fp8Gemm {
    handle: sys::cublasLtHandle_t,
    plans: HashMap<Shape, Option<Plan>>,
}

// SAFETY: used only under the backend's `Mutex<Blas>`, one call at a time; cuBLASLt handles and
// descriptors may move between threads.
unsafe impl Send for Fp8Gemm {}

impl Drop for Fp8Gemm {
    fn drop(&mut self) {
        self.plans.clear();
        // SAFETY: created once in `new`, destroyed only here, after the plans.
        let _ = unsafe { lt::destroy_handle(self.handle) };
    }
}

impl Fp8Gemm {
    /// None without libcublasLt.
    pub(super) fn new() -> Option<Self> {
        // SAFETY: only probes for the library.
        if !unsafe { sys::is_culib_present() } {
            return None;
        }
        Some(Self {
            handle: lt::create_handle().ok()?,
            plans: HashMap::new(),
        })
    }

    /// Whether cuBLASLt takes this shape (planning it on first sight).
    pub(super) fn supports(&mut self, shape: Shape, ws_bytes: usize) -> Result<bool> {
        if !self.plans.contains_key(&shape) {
            if self.plans.len() >= MAX_PLANS {
                self.plans.clear();
            }
            let plan = Plan::new(self.handle, shape, ws_bytes)?;
            self.plans.insert(shape, plan);
        }
        Ok(self.plans.get(&shape).is_some_and(Option::is_some))
    }

    /// Runs a shape [`Fp8Gemm::supports`] accepted, on `stream`.
    ///
    /// # Safety
    /// The operands hold what [`Operands`] says for this shape, on the stream's device, and
    /// the workspace is `ws_bytes` of device memory no other stream uses.
    pub(super) unsafe fn run(
        &self,
        stream: &CudaStream,
        shape: Shape,
        ops: Operands,
        (ws, ws_bytes): (u64, usize),
    ) -> Result<()> {
        use sys::cublasLtMatmulDescAttributes_t as A;
        let Some(Some(plan)) = self.plans.get(&shape) else {
            return Err(BackendError::Device(format!(
                "cuBLASLt FP8: no plan for {shape:?}"
            )));
        };
        let (alpha, beta) = (1f32, 0f32);
        // SAFETY: the plan's layouts describe these operands (the caller's contract), the
        // scale pointers are device addresses read by value, beta = 0 so D (= C) is only
        // written, and the algorithm came from the heuristic for these descriptors within
        // the workspace given.
        unsafe {
            set(
                plan.desc,
                A::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                &ops.w_scales,
            )?;
            set(
                plan.desc,
                A::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                &ops.x_scales,
            )?;
            lt::matmul(
                self.handle,
                plan.desc,
                std::ptr::from_ref(&alpha).cast(),
                std::ptr::from_ref(&beta).cast(),
                ops.w as *const c_void,
                plan.a,
                ops.xq as *const c_void,
                plan.b,
                ops.out as *const c_void,
                plan.d,
                ops.out as *mut c_void,
                plan.d,
                &plan.algo,
                ws as *mut c_void,
                ws_bytes,
                stream.cu_stream() as sys::cudaStream_t,
            )
        }
        .map_err(lt_err("matmul"))
    }
}
