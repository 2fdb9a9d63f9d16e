//! Where the NVFP4 bf16-copy route's time goes (`cuda_check`'s nvfp4-speed, lab only): on an
//! H200 the route took about 1 ms for a 356 MB copy whose bytes take 0.1 ms and whose cuBLAS
//! GEMM takes 0.1 ms (performance log part 16), blamed on the per-call scratch allocation
//! without a measurement. This times each part alone on the device (events) and the whole
//! route's host time (what enqueueing a call costs), so the next change aims at the right part.

use std::time::Instant;

use super::tensor::{CudaTensor, DType};
use super::{CudaBackend, Result, dev_err};
use cudarc::driver::sys::CUevent_flags;

/// Microseconds a call, each part of the copy route alone.
#[derive(Debug, Clone, Copy)]
pub struct CopyProbe {
    /// Allocating the bf16 scratch of w's shape and dropping it (device time).
    pub alloc_us: f64,
    /// `dequant_nvfp4_bf16` into a scratch kept across calls.
    pub dequant_us: f64,
    /// The bf16 GEMM (cuBLAS) on the kept scratch.
    pub gemm_us: f64,
    /// The route as serving runs it (`matmul` with `gemm.nvfp4_mma_rows` 0), device time.
    pub route_us: f64,
    /// The same route's host time a call (enqueueing, with the device kept busy).
    pub route_host_us: f64,
}

impl CudaBackend {
    /// [`CopyProbe`] for `out = x · wᵀ` with an F4 weight `w`, `iters` calls a part.
    pub fn nvfp4_copy_probe(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        w: &CudaTensor,
        iters: usize,
    ) -> Result<CopyProbe> {
        let s = &self.stream;
        let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
        let time = |f: &mut dyn FnMut() -> Result<()>| -> Result<(f64, f64)> {
            f()?;
            self.synchronize()?;
            let host = Instant::now();
            let start = s.record_event(flags).map_err(dev_err("event"))?;
            for _ in 0..iters {
                f()?;
            }
            let end = s.record_event(flags).map_err(dev_err("event"))?;
            let host_us = host.elapsed().as_secs_f64() * 1e6 / iters as f64;
            let ms = f64::from(start.elapsed_ms(&end).map_err(dev_err("elapsed"))?);
            Ok((ms * 1e3 / iters as f64, host_us))
        };
        let (alloc_us, _) = time(&mut || self.alloc(&w.shape, DType::BF16).map(drop))?;
        let mut kept = self.alloc(&w.shape, DType::BF16)?;
        let (dequant_us, _) = time(&mut || self.dequant_nvfp4(&mut kept, w))?;
        let (gemm_us, _) = time(&mut || self.matmul_op(out, x, &kept))?;
        let saved = self.tuning();
        self.retune(|t| t.gemm.nvfp4_mma_rows = 0);
        let route = time(&mut || self.matmul_op(out, x, w));
        self.set_tuning(saved);
        let (route_us, route_host_us) = route?;
        Ok(CopyProbe {
            alloc_us,
            dequant_us,
            gemm_us,
            route_us,
            route_host_us,
        })
    }
}
