//! Kernel launches, with programmatic dependent launch (PDL) on Hopper and later.
//!
//! A decode step at batch 1 is a chain of a dozen short kernels a layer, each of which waits
//! for the one before. Launched with `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`,
//! a kernel's blocks may start as soon as every block of the kernel before it has called
//! `griddepcontrol.launch_dependents` (prelude's `pdl_launch_next`), instead of after that
//! kernel has finished and flushed. Every kernel of ours calls `pdl_wait` (the PTX
//! `griddepcontrol.wait`, which returns once the previous kernel has completed and its writes are
//! visible) before it touches anything an earlier kernel wrote, and writes nothing before it;
//! the weight-streaming kernels load their first weights (read-only for the whole run) before
//! waiting, so those loads overlap the previous kernel. Kernels call `pdl_launch_next` right
//! after their wait, so at most the running kernel and the next one are resident: the next
//! one's blocks take the free slots and prefetch while this one computes. Capture into a CUDA
//! graph keeps these programmatic edges. Without the attribute (other GPUs, or
//! `METRALE_PDL=0`) both instructions are no-ops and launches are ordinary.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::ptr;

use cudarc::driver::{CudaFunction, CudaStream, DeviceRepr, DriverError, LaunchConfig, sys};

/// One kernel launch being built: the same shape as cudarc's `LaunchArgs` (`arg`, then
/// `launch`), for the backend's stream without event tracking.
pub(super) struct Launch<'a> {
    stream: &'a CudaStream,
    func: &'a CudaFunction,
    args: Vec<*mut c_void>,
    pdl: bool,
}

impl<'a> Launch<'a> {
    pub(super) fn new(stream: &'a CudaStream, func: &'a CudaFunction, pdl: bool) -> Self {
        Self {
            stream,
            func,
            args: Vec::with_capacity(16),
            pdl,
        }
    }

    /// The next kernel parameter, passed by address (cuLaunchKernelEx copies it at launch).
    pub(super) fn arg<T: DeviceRepr>(&mut self, value: &'a T) -> &mut Self {
        self.args.push(ptr::from_ref(value).cast_mut().cast());
        self
    }

    /// Launches the kernel on the stream.
    ///
    /// # Safety
    /// The arguments must match the kernel's parameters in number, order and type, every
    /// pointer among them must be valid for what the kernel reads and writes at this grid, and
    /// the kernel must follow the PDL rule of the module docs (no reads of earlier kernels'
    /// results and no writes before `pdl_wait`).
    pub(super) unsafe fn launch(&mut self, cfg: LaunchConfig) -> Result<(), DriverError> {
        self.stream.context().bind_to_thread()?;
        // SAFETY: an all-zero attribute is a valid value of this plain C struct.
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let config = sys::CUlaunchConfig {
            gridDimX: cfg.grid_dim.0,
            gridDimY: cfg.grid_dim.1,
            gridDimZ: cfg.grid_dim.2,
            blockDimX: cfg.block_dim.0,
            blockDimY: cfg.block_dim.1,
            blockDimZ: cfg.block_dim.2,
            sharedMemBytes: cfg.shared_mem_bytes,
            hStream: self.stream.cu_stream(),
            attrs: if self.pdl { &mut attr } else { ptr::null_mut() },
            numAttrs: u32::from(self.pdl),
        };
        // SAFETY: config and attr outlive the call; the argument array holds one pointer per
        // kernel parameter, each to a value that lives as long as this builder (the caller's
        // contract above covers what the kernel does with them).
        unsafe {
            sys::cuLaunchKernelEx(
                &config,
                self.func.cu_function(),
                self.args.as_mut_ptr(),
                ptr::null_mut(),
            )
        }
        .result()
    }
}
