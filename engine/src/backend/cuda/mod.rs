//! The CUDA backend: the CPU reference's ops, op for op, on one NVIDIA GPU.
//!
//! bf16 storage, f32 accumulation; or, built with [`CudaBackend::with_dtype`] for `F32` (`met
//! --dtype float32`), f32 weights, activations and KV cache throughout, for checking against
//! float32 references. Kernels are our `.cu` files (crate `metrale-kernels`),
//! compiled at run time with NVRTC; GEMMs go through cuBLAS. Everything runs in order on one
//! stream, so cudarc's per-buffer event tracking is turned off. CUDA libraries are loaded when
//! the backend is created, and a missing one is an error that names it, never a panic.
//!
//! Each op checks shapes and index ranges on the host first (the same checks as the CPU
//! backend, plus what a kernel would otherwise read out of bounds), then launches. Launch
//! errors come back at once; a fault inside a kernel surfaces at the next synchronisation
//! (`to_host`, `sample`, or after every launch when `METRALE_CUDA_SYNC=1` or in debug builds).
//!
//! Its tuning (which kernels, launch options) is one [`Tuning`] value handed over at creation
//! (`crate::tuning`); `cuda_check` swaps it at run time through the `lab` feature's
//! [`CudaBackend::set_tuning`].
#![allow(unsafe_code)]

mod attention;
mod attention_flash;
mod attention_kernels;
mod backend_ops;
mod batch;
mod blas;
mod block_tables;
mod elementwise;
mod families;
mod fp8;
mod fp8_tiles;
mod gdn_chunk;
mod gdn_decode;
mod gdn_kernels;
mod gemm_tune;
mod gpt_oss;
mod graph;
mod graph_chain;
mod hybrid;
mod launch;
mod mamba2;
mod mamba2_chunk;
mod minimax;
mod mla;
mod moe;
mod moe_fp4;
mod moe_mma;
mod nemotron_moe;
mod norm;
mod nvfp4;
mod nvfp4_gemm;
mod nvfp4_w4a4;
#[cfg(feature = "lab")]
mod probe;
#[cfg(feature = "lab")]
mod probe_copy;
mod sample;
mod tensor;
mod typed_launch;

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, DriverError};
use metrale_kernels::{Kernels, Module};

pub use crate::tuning::{MoeGemm, Tuning};

pub use batch::CudaBatch;
pub use gdn_chunk::GDN_CHUNK_MIN;
#[cfg(feature = "lab")]
pub use probe::{SkeletonStage, SkeletonTimes, SyncProbe, TMA_SPLITS, TmaTimes};
#[cfg(feature = "lab")]
pub use probe_copy::CopyProbe;
pub use tensor::{CudaTensor, DType};

pub(crate) use super::cpu::shape_err;
use super::sampling::{SampleRow, Sampled};
use super::{
    Backend, BackendError, BatchInputs, ChainForward, ClampedExperts, Feature, ForwardMany,
    MlaDims, Result, RopeTables, SigmoidRouting, TableWrite,
};
use crate::loader::{DType as HostDType, HostData, HostTensor};
use blas::Blas;

fn check(op: &'static str, ok: bool, message: impl FnOnce() -> String) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(shape_err(op, message()))
    }
}

/// An op was handed an FP8 tensor where it reads activations (FP8 is a weight format here).
fn not_activation(op: &'static str) -> BackendError {
    shape_err(
        op,
        "an FP8 tensor is a weight: this op reads bf16 or f32 activations".to_string(),
    )
}

/// Maps a CUDA error to a backend error that names what failed.
pub(crate) fn dev_err<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> BackendError + '_ {
    move |e| BackendError::Device(format!("{what}: {e}"))
}

/// What the backend runs on.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub total_memory: usize,
    pub multiprocessors: usize,
    /// Bytes of shared memory a block may opt in to (227 KB on Hopper, 99 KB on Ada).
    pub smem_optin: usize,
    /// NVRTC's target: `sm_90a`, `sm_120a`, `sm_121a` or `compute_XY`.
    pub arch: String,
    pub nvrtc_version: (i32, i32),
    pub driver_version: i32,
}

/// Fields drop in this order: the cuBLAS handle and buffers before the stream and context.
pub struct CudaBackend {
    /// Captured decode graphs, then the arena they allocate from (dropped in that order).
    graphs: Mutex<graph::Graphs>,
    arena: Mutex<graph::Arena>,
    blas: Mutex<Blas>,
    /// The last rotary table uploaded (models have one), so a step does not copy it per layer.
    /// Every rotary table uploaded so far (one a model, two for Gemma 3's local and global
    /// layers), kept for the backend's life: a replayed graph may read any of them.
    rope: Mutex<Vec<(Vec<f32>, CudaSlice<f32>)>>,
    kernels: Kernels,
    stream: Arc<CudaStream>,
    ctx: Arc<CudaContext>,
    info: DeviceInfo,
    /// Every tuning knob (`crate::tuning`): which kernels, launch options. Set at creation; only
    /// the `lab` feature's [`CudaBackend::set_tuning`] changes it.
    tuning: Mutex<Tuning>,
    /// The tuning's `launch.pdl` ([`PDL`]) and `launch.cuda_sync` ([`SYNC`]), which every
    /// launch reads: kept beside it so a launch takes no lock.
    launch_bits: AtomicU8,
    /// Per-launch syncs held off (while a graph is captured).
    sync_paused: AtomicBool,
    /// Arrival counters ([`CudaBackend::tickets`]): the fused Gated DeltaNet decode kernel's
    /// (`gdn_decode.rs`) and the FP8 tile GEMM's split-k tiles (`fp8_tiles.rs`).
    tickets: Mutex<Option<CudaSlice<u32>>>,
    /// The type of weights, GEMM operands and the KV cache: bf16, or f32 (the float32 path).
    compute: DType,
    /// `--kv-cache-dtype fp8`: KV-cache layers are [`DType::F8`] tensors (see
    /// `backend/kv_fp8.rs`).
    kv_fp8: bool,
    /// `moe_router_plan_one`'s ticket (the blocks that have written their logits); every
    /// launch leaves it at 0.
    router_ticket: CudaSlice<u32>,
    /// The sampler's per-sequence penalty counts (`sample/penalty_state.rs`).
    penalties: Mutex<sample::DevicePenaltyStates>,
    /// The block tables kept from step to step (`block_tables.rs`), once the runner asks: one
    /// set a KV group (a model with sliding-window layers has several).
    tables: Mutex<Vec<block_tables::DeviceTables>>,
}

/// Arrival counters ([`CudaBackend::tickets`]): one a (sequence, key head) of a fused GDN decode
/// step (steps with more take 3 launches), one a column tile of a split FP8 tile GEMM.
const TICKETS: usize = 1 << 16;

/// [`CudaBackend`]'s `launch_bits`: programmatic dependent launch, a sync after every launch.
const PDL: u8 = 1;
const SYNC: u8 = 2;

fn launch_bits(tuning: &Tuning) -> u8 {
    u8::from(tuning.launch.pdl) * PDL + u8::from(tuning.launch.cuda_sync) * SYNC
}

/// The kernel cache directory `tuning` names (`METRALE_KERNEL_CACHE`), else the default one.
fn kernel_cache_dir(tuning: &Tuning) -> Option<std::path::PathBuf> {
    use crate::tuning::KernelCache;
    match tuning.kernels.cache {
        KernelCache::Off => None,
        KernelCache::Dir(d) => Some(std::path::PathBuf::from(d)),
        KernelCache::Default => metrale_kernels::cache::default_cache_dir(|k| std::env::var_os(k)),
    }
}

/// Loadable? cudarc panics on first use of a library it cannot open; ask first.
fn require_library(present: bool, lib: &str, hint: &str) -> Result<()> {
    if present {
        Ok(())
    } else {
        Err(BackendError::Device(format!(
            "the CUDA library {lib} could not be loaded: {hint}"
        )))
    }
}

/// Let the device's default memory pool keep what is freed instead of handing it back to the
/// driver at every synchronisation: a forward allocates and frees its activations, and without
/// this every step would map that memory anew. Best effort: a failure only costs speed.
fn keep_freed_memory(ctx: &Arc<CudaContext>) {
    if !ctx.has_async_alloc() {
        return;
    }
    let mut threshold = u64::MAX;
    // SAFETY: the device handle comes from a live context; the attribute takes a u64 by pointer,
    // which outlives the call.
    unsafe {
        if let Ok(pool) = cudarc::driver::result::device::get_default_mem_pool(ctx.cu_device()) {
            let _ = cudarc::driver::sys::cuMemPoolSetAttribute(
                pool,
                cudarc::driver::sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut threshold as *mut u64).cast(),
            );
        }
    }
}

impl CudaBackend {
    /// Open GPU `ordinal`: driver, context, one stream, cuBLAS and the kernel loader; weights,
    /// GEMM operands and the KV cache in bf16; tuned by `tuning`.
    pub fn new(ordinal: usize, tuning: Tuning) -> Result<Self> {
        Self::with_dtype(ordinal, DType::BF16, tuning)
    }

    /// The backend `--dtype` asks for: `auto` and `bfloat16` are the bf16 path, `float32` the
    /// float32 path.
    pub fn for_dtype(
        ordinal: usize,
        dtype: crate::engine_core::ComputeDtype,
        tuning: Tuning,
    ) -> Result<Self> {
        use crate::engine_core::ComputeDtype;
        Self::with_dtype(
            ordinal,
            match dtype {
                ComputeDtype::Auto | ComputeDtype::Bfloat16 => DType::BF16,
                ComputeDtype::Float32 => DType::F32,
            },
            tuning,
        )
    }

    /// [`CudaBackend::new`] with weights, GEMM operands and the KV cache in `compute`: bf16, or
    /// f32 for the float32 path (FP8 weights dequantized to f32 at upload; twice the memory and
    /// far slower, for checking against float32 references).
    pub fn with_dtype(ordinal: usize, compute: DType, mut tuning: Tuning) -> Result<Self> {
        if compute == DType::F8 {
            return Err(BackendError::Device(
                "FP8 is a weight format, not a compute type: use bf16 or f32".into(),
            ));
        }
        let lib_path = "put the CUDA toolkit's lib directory on LD_LIBRARY_PATH \
                        (e.g. export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH)";
        // SAFETY: each probe only dlopens the library's candidate names and closes them.
        let (driver, blas_lib) = unsafe {
            (
                cudarc::driver::sys::is_culib_present(),
                cudarc::cublas::sys::is_culib_present(),
            )
        };
        require_library(
            driver,
            "libcuda.so (the NVIDIA driver)",
            "is the NVIDIA driver installed, and is this a GPU machine (or a container started with GPU access)?",
        )?;
        require_library(blas_lib, "libcublas", lib_path)?;
        let count = CudaContext::device_count().map_err(dev_err("counting CUDA devices"))?;
        if ordinal >= count.max(0) as usize {
            return Err(BackendError::Device(format!(
                "CUDA device {ordinal} does not exist ({count} visible; check CUDA_VISIBLE_DEVICES)"
            )));
        }
        let ctx = CudaContext::new(ordinal).map_err(dev_err("creating the CUDA context"))?;
        // SAFETY: all work goes to the one stream created below, in program order, and buffers
        // are freed on that stream (stream-ordered), so no cross-stream events are needed.
        unsafe { ctx.disable_event_tracking() };
        keep_freed_memory(&ctx);
        let stream = ctx.new_stream().map_err(dev_err("creating a stream"))?;
        let kernels = Kernels::new(
            ctx.clone(),
            kernel_cache_dir(&tuning),
            tuning.kernels.show_ptxas,
        )
        .map_err(|e| BackendError::Device(e.to_string()))?;
        let blas = Blas::new(&ctx, &stream, tuning.gemm.gemm_tune)?;
        let target = kernels.target().clone();
        let info = DeviceInfo {
            ordinal,
            name: ctx.name().map_err(dev_err("device name"))?,
            compute_capability: target.compute_capability,
            total_memory: ctx.total_mem().map_err(dev_err("device memory"))?,
            multiprocessors: ctx
                .attribute(
                    cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                )
                .map_err(dev_err("multiprocessor count"))?
                .max(1) as usize,
            smem_optin: ctx
                .attribute(
                    cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                )
                .map_err(dev_err("shared memory per block"))?
                .max(0) as usize,
            arch: target.arch,
            nvrtc_version: target.nvrtc_version,
            driver_version: target.driver_version,
        };
        // Debug builds wait after every launch; PDL needs compute capability 9.0.
        tuning.launch.cuda_sync |= cfg!(debug_assertions);
        tuning.launch.pdl &= target.compute_capability.0 >= 9;
        let router_ticket = stream
            .alloc_zeros::<u32>(1)
            .map_err(dev_err("router ticket"))?;
        Ok(Self {
            graphs: Mutex::new(graph::Graphs::new(tuning.launch.cuda_graphs)),
            arena: Mutex::new(graph::Arena::default()),
            blas: Mutex::new(blas),
            rope: Mutex::new(Vec::new()),
            kernels,
            stream,
            ctx,
            info,
            launch_bits: AtomicU8::new(launch_bits(&tuning)),
            tuning: Mutex::new(tuning),
            sync_paused: AtomicBool::new(false),
            tickets: Mutex::new(None),
            compute,
            kv_fp8: false,
            router_ticket,
            penalties: Mutex::default(),
            tables: Mutex::default(),
        })
    }

    /// This backend with an FP8 KV cache (`--kv-cache-dtype fp8`) when `fp8`: e4m3 values with
    /// one f32 scale per 128 dims of each cached head vector (`backend/kv_fp8.rs`), about half
    /// the bf16 cache's memory. The float32 path keeps its f32 cache.
    pub fn with_fp8_kv_cache(mut self, fp8: bool) -> Result<Self> {
        check("kv cache", !fp8 || self.compute == DType::BF16, || {
            "an FP8 KV cache runs on the bf16 path: drop --dtype float32 or --kv-cache-dtype fp8"
                .to_string()
        })?;
        self.kv_fp8 = fp8;
        Ok(self)
    }

    /// The type of weights, GEMM operands and the KV cache (see [`CudaBackend::with_dtype`]).
    pub fn compute_dtype(&self) -> DType {
        self.compute
    }

    /// The backend's tuning now.
    pub fn tuning(&self) -> Tuning {
        *self.tuning.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Replaces the tuning, for comparing paths in one process (`cuda_check`). Drops captured
    /// graphs when anything changed: they keep the kernels and launches they were captured
    /// with. PDL stays off below compute capability 9.0.
    #[cfg(feature = "lab")]
    pub fn set_tuning(&self, mut tuning: Tuning) {
        tuning.launch.pdl &= self.info.compute_capability.0 >= 9;
        let old = std::mem::replace(
            &mut *self.tuning.lock().unwrap_or_else(PoisonError::into_inner),
            tuning,
        );
        self.launch_bits
            .store(launch_bits(&tuning), Ordering::Relaxed);
        if old != tuning {
            self.drop_graphs();
            let mut g = self.graphs.lock().unwrap_or_else(PoisonError::into_inner);
            g.enabled = tuning.launch.cuda_graphs;
        }
        if old.gemm.gemm_tune != tuning.gemm.gemm_tune {
            self.set_gemm_tune(tuning.gemm.gemm_tune);
        }
    }

    /// [`CudaBackend::set_tuning`] of the tuning `f` makes of the current one.
    #[cfg(feature = "lab")]
    pub fn retune(&self, f: impl FnOnce(&mut Tuning)) {
        let mut t = self.tuning();
        f(&mut t);
        self.set_tuning(t);
    }

    /// Whether every launch waits for its kernel now (the tuning, unless a capture is on).
    fn syncs_each_launch(&self) -> bool {
        !self.sync_paused.load(Ordering::Relaxed)
            && self.launch_bits.load(Ordering::Relaxed) & SYNC != 0
    }

    /// Holds per-launch syncs off (`true`, while capturing) or lets them be again; returns the
    /// previous state, for restoring.
    pub(super) fn pause_sync_each_launch(&self, paused: bool) -> bool {
        self.sync_paused.swap(paused, Ordering::Relaxed)
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The stream every op runs on (for timing with events).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The kernel loader (compile/cache records, target).
    pub fn kernels(&self) -> &Kernels {
        &self.kernels
    }

    /// Compile or load every kernel module now rather than on first use.
    pub fn load_kernels(&self) -> Result<()> {
        self.kernels
            .load_all()
            .map_err(|e| BackendError::Device(e.to_string()))
    }

    /// Wait for all queued work; reports any fault a kernel hit since the last wait.
    pub fn synchronize(&self) -> Result<()> {
        self.stream.synchronize().map_err(dev_err("synchronize"))?;
        self.ctx.check_err().map_err(dev_err("deferred CUDA error"))
    }

    /// Free and total device memory, in bytes.
    pub fn memory(&self) -> Result<(usize, usize)> {
        self.ctx.mem_get_info().map_err(dev_err("memory info"))
    }

    /// An uninitialised tensor.
    fn alloc(&self, shape: &[usize], dtype: DType) -> Result<CudaTensor> {
        let numel: usize = shape.iter().product();
        // The bytes are uninitialised; every caller writes all `numel` elements before
        // anything reads them (an upload, a fill, or an op's full output).
        let bytes = match dtype {
            DType::F8 => tensor::fp8_alloc_bytes(shape),
            DType::F4 => tensor::f4_alloc_bytes(shape),
            DType::Mx4 => tensor::mx4_alloc_bytes(shape),
            d => tensor::alloc_bytes(numel, d),
        };
        let buf = self.raw_alloc(bytes, false)?;
        Ok(CudaTensor {
            shape: shape.to_vec(),
            dtype,
            buf,
        })
    }

    /// Make `t` hold `dtype` (new, uninitialised storage when it held the other type): for ops
    /// that overwrite their whole output and choose its type.
    fn set_dtype(&self, t: &mut CudaTensor, dtype: DType) -> Result<()> {
        if t.dtype != dtype {
            *t = self.alloc(&t.shape, dtype)?;
        }
        Ok(())
    }

    /// [`TICKETS`] arrival counters, allocated (zeroed) on first use and kept at a fixed address
    /// (CUDA graphs keep it). A kernel that counts its blocks' arrivals on them leaves every
    /// counter it used at zero when it ends, and touches them only after its `pdl_wait`, so
    /// kernels of the one stream share them, one after another.
    fn tickets(&self) -> Result<u64> {
        let mut t = self.tickets.lock().unwrap_or_else(PoisonError::into_inner);
        if t.is_none() {
            let buf = self
                .stream
                .alloc_zeros::<u32>(TICKETS)
                .map_err(dev_err("arrival counters"))?;
            *t = Some(buf);
        }
        let buf = t
            .as_ref()
            .ok_or_else(|| shape_err("tickets", "no counters".into()))?;
        let (p, _guard) = cudarc::driver::DevicePtr::device_ptr(buf, &self.stream);
        Ok(p)
    }

    fn func(&self, module: Module, name: &str) -> Result<CudaFunction> {
        self.kernels
            .function(module, name)
            .map_err(|e| BackendError::Device(e.to_string()))
    }

    /// A launch of `f` on the backend's stream (see `launch.rs`).
    fn launcher<'a>(&'a self, f: &'a CudaFunction) -> launch::Launch<'a> {
        launch::Launch::new(&self.stream, f, self.pdl())
    }

    /// Whether launches use programmatic dependent launch.
    pub fn pdl(&self) -> bool {
        self.launch_bits.load(Ordering::Relaxed) & PDL != 0
    }

    /// After a launch: its own error, then (when asked) the kernel's.
    fn launched<T>(&self, name: &str, r: std::result::Result<T, DriverError>) -> Result<()> {
        r.map_err(dev_err(&format!("launching {name}")))?;
        if self.syncs_each_launch() {
            self.stream
                .synchronize()
                .map_err(dev_err(&format!("running {name}")))?;
        }
        Ok(())
    }

    /// The device copy of `rope.inv_freq`, uploaded once per distinct table.
    fn inv_freq(&self, rope: &RopeTables) -> Result<u64> {
        let mut cached = self.rope.lock().unwrap_or_else(PoisonError::into_inner);
        let index = match cached.iter().position(|(host, _)| *host == rope.inv_freq) {
            Some(i) => i,
            None => {
                let mut values = rope.inv_freq.clone();
                if values.is_empty() {
                    values.push(0.0);
                }
                let dev = self
                    .stream
                    .clone_htod(&values)
                    .map_err(dev_err("upload inv_freq"))?;
                cached.push((rope.inv_freq.clone(), dev));
                cached.len() - 1
            }
        };
        let (_, dev) = &cached[index];
        let (p, _guard) = cudarc::driver::DevicePtr::device_ptr(dev, &self.stream);
        Ok(p)
    }
}
