//! Decode-sized GEMMs through cuBLASLt with the algorithm timed per shape.
//!
//! At 128 rows `cublasGemmEx`'s default choice streams Qwen3-8B's weights at 1.5 TB/s (o_proj)
//! to 3.1 TB/s (gate_up): a decode step's GEMMs took 6.2 ms against a 3.5 ms floor. Its heuristic
//! picks one configuration from the shape; the fastest for a short, wide GEMM (split-K, tile
//! shape, cluster size) is often another of the candidates cuBLASLt's own heuristic lists. So
//! the first time a shape (m one of the decode graphs' batch buckets, n, k) is seen outside a
//! graph capture, its
//! candidates (up to [`CANDIDATES`]) and `cublasGemmEx` itself are each timed on the call's own
//! operands and the fastest is kept for the rest of the run. Decode graphs are captured after an
//! eager run of the same shape, so the capture finds the choice made. Other row counts (prefill
//! chunks, whose lengths are whatever the prompts are) stay on `cublasGemmEx` and are never
//! timed: a new prompt length must not pay for a tuning in its time to first token, and large
//! GEMMs are compute-bound, where the default is already near the tensor cores' rate.
//!
//! `METRALE_GEMM_TUNE=0` turns it off (every GEMM on `cublasGemmEx`), for comparisons.

use std::collections::HashMap;
use std::ffi::c_void;

use cudarc::cublaslt::{result as lt, sys};
use cudarc::driver::CudaStream;
use cudarc::driver::sys::{CUevent_flags, CUstreamCaptureStatus};

use super::dev_err;
use super::graph::BUCKETS;
use crate::backend::{BackendError, Result};

/// Heuristic candidates timed a shape.
const CANDIDATES: usize = 8;
/// Timed runs a candidate (after one untimed), the median kept.
const REPS: usize = 7;

/// `(m, n, k)`: rows of x, rows of w, the shared dimension.
pub(super) type Shape = (i32, i32, i32);

/// One shape's cuBLASLt descriptors and chosen algorithm.
struct Plan {
    desc: sys::cublasLtMatmulDesc_t,
    a: sys::cublasLtMatrixLayout_t,
    b: sys::cublasLtMatrixLayout_t,
    d: sys::cublasLtMatrixLayout_t,
    /// None: `cublasGemmEx` was fastest (or no candidate ran).
    algo: Option<sys::cublasLtMatmulAlgo_t>,
    /// What the timing found, for reports: (chosen µs, `cublasGemmEx` µs).
    timing: (f32, f32),
}

impl Drop for Plan {
    fn drop(&mut self) {
        // SAFETY: each was created once by `Plan::new` and is destroyed only here.
        unsafe {
            let _ = lt::destroy_matrix_layout(self.a);
            let _ = lt::destroy_matrix_layout(self.b);
            let _ = lt::destroy_matrix_layout(self.d);
            let _ = lt::destroy_matmul_desc(self.desc);
        }
    }
}

fn lt_err(what: &'static str) -> impl Fn(cudarc::cublaslt::result::CublasError) -> BackendError {
    move |e| BackendError::Device(format!("cuBLASLt {what}: {e}"))
}

impl Plan {
    /// `out[m, n] (f32) = x[m, k] · w[n, k]ᵀ (bf16)` read column-major as in blas.rs:
    /// D (n × m, ld n) = op(A)ᵀ… with A = w as stored (k × n, ld k, transposed) and B = x as
    /// stored (k × m, ld k).
    fn new((m, n, k): Shape) -> Result<Self> {
        let (m, n, k) = (m as u64, n as u64, k as u64);
        let desc = lt::create_matmul_desc(
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            sys::cudaDataType::CUDA_R_32F,
        )
        .map_err(lt_err("matmul descriptor"))?;
        let transpose = cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_T;
        // SAFETY: desc was just created; the attribute is a cublasOperation_t read by value.
        unsafe {
            lt::set_matmul_desc_attribute(
                desc,
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                (&transpose as *const cudarc::cublas::sys::cublasOperation_t).cast(),
                std::mem::size_of::<cudarc::cublas::sys::cublasOperation_t>(),
            )
        }
        .map_err(lt_err("transpose attribute"))?;
        let plan = |a, b, d| Plan {
            desc,
            a,
            b,
            d,
            algo: None,
            timing: (0.0, 0.0),
        };
        let a = lt::create_matrix_layout(sys::cudaDataType::CUDA_R_16BF, k, n, k as i64)
            .map_err(lt_err("layout"))?;
        let b = lt::create_matrix_layout(sys::cudaDataType::CUDA_R_16BF, k, m, k as i64)
            .map_err(lt_err("layout"));
        let d = lt::create_matrix_layout(sys::cudaDataType::CUDA_R_32F, n, m, n as i64)
            .map_err(lt_err("layout"));
        match (b, d) {
            (Ok(b), Ok(d)) => Ok(plan(a, b, d)),
            (b, d) => {
                // SAFETY: what was created here is destroyed once.
                unsafe {
                    let _ = lt::destroy_matrix_layout(a);
                    if let Ok(b) = b {
                        let _ = lt::destroy_matrix_layout(b);
                    }
                    if let Ok(d) = d {
                        let _ = lt::destroy_matrix_layout(d);
                    }
                    let _ = lt::destroy_matmul_desc(desc);
                }
                Err(BackendError::Device("cuBLASLt layout".into()))
            }
        }
    }
}

/// The operands of one GEMM call (device pointers).
#[derive(Clone, Copy)]
pub(super) struct Operands {
    pub out: u64,
    pub x: u64,
    pub w: u64,
}

/// The tuner: a cuBLASLt handle and the plans made so far.
pub(super) struct GemmTuner {
    handle: sys::cublasLtHandle_t,
    plans: HashMap<Shape, Plan>,
    enabled: bool,
}

// SAFETY: used only under the backend's `Mutex<Blas>`, one call at a time; cuBLASLt handles and
// descriptors may move between threads.
unsafe impl Send for GemmTuner {}

impl Drop for GemmTuner {
    fn drop(&mut self) {
        self.plans.clear();
        // SAFETY: created once in `new`, destroyed only here, after the plans.
        let _ = unsafe { lt::destroy_handle(self.handle) };
    }
}

impl GemmTuner {
    /// None when libcublasLt is missing or the handle cannot be made (GEMMs then stay on
    /// `cublasGemmEx`); timing shapes only when `enabled` (the tuning's `gemm.gemm_tune`).
    pub(super) fn new(enabled: bool) -> Option<Self> {
        // SAFETY: only probes for the library.
        if !unsafe { sys::is_culib_present() } {
            return None;
        }
        let handle = lt::create_handle().ok()?;
        Some(Self {
            handle,
            plans: HashMap::new(),
            enabled,
        })
    }

    #[cfg(feature = "lab")]
    pub(super) fn set_enabled(&mut self, on: bool) {
        self.enabled = on;
    }

    /// What was chosen for each tuned shape: (shape, cuBLASLt chosen, chosen µs, GemmEx µs).
    pub(super) fn report(&self) -> Vec<(Shape, bool, f32, f32)> {
        let mut v: Vec<_> = self
            .plans
            .iter()
            .map(|(s, p)| (*s, p.algo.is_some(), p.timing.0, p.timing.1))
            .collect();
        v.sort_by_key(|r| r.0);
        v
    }

    /// Runs the GEMM through the shape's chosen cuBLASLt algorithm and returns true, or returns
    /// false (nothing run) where the caller's `cublasGemmEx` is the choice or the shape is not
    /// tuned. `gemm_ex` runs the caller's `cublasGemmEx` on the same operands (for timing).
    pub(super) fn run(
        &mut self,
        stream: &CudaStream,
        workspace: (u64, usize),
        shape: Shape,
        ops: Operands,
        gemm_ex: &mut dyn FnMut() -> Result<()>,
    ) -> Result<bool> {
        let bucket = usize::try_from(shape.0).is_ok_and(|m| BUCKETS.binary_search(&m).is_ok());
        if !self.enabled || !bucket {
            return Ok(false);
        }
        if !self.plans.contains_key(&shape) {
            // A capture may not time anything (nor synchronize): GemmEx now, tuning on the next
            // eager call of this shape.
            let capturing = stream.capture_status().map_err(dev_err("capture status"))?
                != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
            if capturing {
                return Ok(false);
            }
            let plan = self.tune(stream, workspace, shape, ops, gemm_ex)?;
            tracing::debug!(
                "GEMM {shape:?}: {} {:.1} µs (cublasGemmEx {:.1} µs)",
                if plan.algo.is_some() {
                    "cuBLASLt"
                } else {
                    "cublasGemmEx"
                },
                plan.timing.0,
                plan.timing.1
            );
            self.plans.insert(shape, plan);
        }
        let plan = &self.plans[&shape];
        let Some(algo) = plan.algo else {
            return Ok(false);
        };
        self.launch(stream, workspace, plan, &algo, ops)?;
        Ok(true)
    }

    fn launch(
        &self,
        stream: &CudaStream,
        (ws, ws_bytes): (u64, usize),
        plan: &Plan,
        algo: &sys::cublasLtMatmulAlgo_t,
        ops: Operands,
    ) -> Result<()> {
        let (alpha, beta) = (1f32, 0f32);
        // SAFETY: the plan's layouts describe exactly these operands (w [n, k] and x [m, k]
        // bf16, out [m, n] f32, checked by matmul_op), the algorithm came from cuBLASLt's
        // heuristic for these descriptors with at most the workspace given, and everything runs
        // on the backend's stream; beta = 0 so C (= D) is only written.
        unsafe {
            lt::matmul(
                self.handle,
                plan.desc,
                (&alpha as *const f32).cast(),
                (&beta as *const f32).cast(),
                ops.w as *const c_void,
                plan.a,
                ops.x as *const c_void,
                plan.b,
                ops.out as *const c_void,
                plan.d,
                ops.out as *mut c_void,
                plan.d,
                algo,
                ws as *mut c_void,
                ws_bytes,
                stream.cu_stream() as sys::cudaStream_t,
            )
        }
        .map_err(lt_err("matmul"))
    }

    /// Times `cublasGemmEx` and each heuristic candidate on the call's operands; the fastest
    /// becomes the shape's plan. The output is overwritten by the trials (the caller runs the
    /// real GEMM after).
    fn tune(
        &self,
        stream: &CudaStream,
        workspace: (u64, usize),
        shape: Shape,
        ops: Operands,
        gemm_ex: &mut dyn FnMut() -> Result<()>,
    ) -> Result<Plan> {
        let mut plan = Plan::new(shape)?;
        let pref = lt::create_matmul_pref().map_err(lt_err("preference"))?;
        let ws_bytes = workspace.1 as u64;
        let mut results = [sys::cublasLtMatmulHeuristicResult_t {
            algo: sys::cublasLtMatmulAlgo_t { data: [0; 8] },
            workspaceSize: 0,
            state: sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS,
            wavesCount: 0.0,
            reserved: [0; 4],
        }; CANDIDATES];
        let mut count = 0i32;
        // SAFETY: pref was just created; the attribute is a u64 read by value; the heuristic
        // writes at most CANDIDATES results into the array and their number into count.
        let found = unsafe {
            lt::set_matmul_pref_attribute(
                pref,
                sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&ws_bytes as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
            .and_then(|()| {
                sys::cublasLtMatmulAlgoGetHeuristic(
                    self.handle,
                    plan.desc,
                    plan.a,
                    plan.b,
                    plan.d,
                    plan.d,
                    pref,
                    CANDIDATES as i32,
                    results.as_mut_ptr(),
                    &mut count,
                )
                .result()
            })
        };
        // SAFETY: created above, destroyed once.
        let _ = unsafe { lt::destroy_matmul_pref(pref) };
        let time = |f: &mut dyn FnMut() -> Result<()>| -> Result<f32> {
            f()?;
            let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
            let mut ms = Vec::with_capacity(REPS);
            for _ in 0..REPS {
                let start = stream.record_event(flags).map_err(dev_err("event"))?;
                f()?;
                let end = stream.record_event(flags).map_err(dev_err("event"))?;
                ms.push(start.elapsed_ms(&end).map_err(dev_err("event timing"))?);
            }
            ms.sort_by(f32::total_cmp);
            Ok(ms[REPS / 2] * 1e3)
        };
        let default_us = time(gemm_ex)?;
        let mut best = (default_us, None);
        if found.is_ok() {
            let n = usize::try_from(count).unwrap_or(0).min(CANDIDATES);
            for r in results[..n]
                .iter()
                .filter(|r| r.state == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS)
            {
                let algo = r.algo;
                // A candidate that fails to run is skipped, not fatal.
                if let Ok(us) = time(&mut || self.launch(stream, workspace, &plan, &algo, ops))
                    && us < best.0
                {
                    best = (us, Some(algo));
                }
            }
        }
        plan.algo = best.1;
        plan.timing = (best.0, default_us);
        Ok(plan)
    }
}
