//! Synchronisation probes (`probe.cu`) for `cuda_check`'s moe-speed: the cost of one link of a
//! chain of kernels replayed from a CUDA graph (with programmatic dependent launch, as every
//! launch here), of one grid-wide barrier inside a kernel, and of one hand-off of a flag
//! between blocks. Timed with device events; nothing else runs meanwhile. Written 2026-12-01
//! and not yet run on a GPU (the lease ended first): `cuda_check` reports a failure here as a
//! line and goes on.

use cudarc::driver::DevicePtr;
use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
use metrale_kernels::Module;

use super::elementwise::cfg;
use super::{BackendError, CudaBackend, Result, dev_err};

/// Kernels in the probed chain, and barriers / hand-off rounds in one launch.
const LINKS: usize = 200;
const ROUNDS: i32 = 200;
/// Threads of a probe block (the chain's and the barriers': a full grid, as a real kernel's).
const THREADS: u32 = 256;

/// What [`CudaBackend::sync_probe`] measured, in microseconds each.
#[derive(Debug, Clone, Copy)]
pub struct SyncProbe {
    /// One more kernel in a graph-replayed chain of empty kernels (a block a multiprocessor).
    pub link_us: f64,
    /// One grid_sync of a block a multiprocessor (`None`: not measured, the context may use
    /// fewer multiprocessors than the device has, so the grid might never all be resident).
    pub barrier_us: Option<f64>,
    /// One hand-off of a counter from one block to the next (a block a multiprocessor; `None`
    /// as for the barrier).
    pub handoff_us: Option<f64>,
}

impl CudaBackend {
    /// Measures [`SyncProbe`]'s three costs (median of five timings each).
    pub fn sync_probe(&self) -> Result<SyncProbe> {
        let s = &self.stream;
        let blocks = self.info.multiprocessors as u32;
        // The barrier and the ring spin until every block has arrived: only where the whole
        // grid is surely resident (not under MPS with an SM limit, nor in a green context).
        let resident = self.context_multiprocessors()? >= self.info.multiprocessors;
        // The chain's sink and the barrier's two words apart: the chain counts into its sink,
        // and the barrier needs its arrivals at zero.
        let sink = s.alloc_zeros::<u32>(1).map_err(dev_err("probe sink"))?;
        let bar = s.alloc_zeros::<u32>(2).map_err(dev_err("probe barrier"))?;
        let (sp, bp) = (sink.device_ptr(s).0, bar.device_ptr(s).0);
        let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
        let time = |run: &dyn Fn() -> Result<()>| -> Result<f64> {
            run()?; // warm-up (module load, first launch)
            let mut ms = Vec::new();
            for _ in 0..5 {
                let start = s.record_event(flags).map_err(dev_err("event"))?;
                run()?;
                let end = s.record_event(flags).map_err(dev_err("event"))?;
                ms.push(f64::from(
                    start.elapsed_ms(&end).map_err(dev_err("elapsed"))?,
                ));
            }
            ms.sort_by(f64::total_cmp);
            Ok(ms[2])
        };
        // A chain of LINKS empty kernels, captured once and replayed.
        let empty = self.func(Module::Probe, "sync_probe_empty")?;
        let launch_empty = || -> Result<()> {
            let mut a = self.launcher(&empty);
            a.arg(&sp);
            // SAFETY: sink is one u32 this function allocated; the kernel writes it from one
            // thread.
            let r = unsafe { a.launch(cfg((blocks, 1), THREADS)) };
            self.launched("sync_probe_empty", r)
        };
        launch_empty()?;
        let sync = self.syncs_each_launch();
        self.set_sync_each_launch(false);
        s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
            .map_err(dev_err("beginning a graph capture"))?;
        let chain = (0..LINKS).try_for_each(|_| launch_empty());
        let graph = s
            .end_capture(CUgraphInstantiate_flags(0))
            .map_err(dev_err("ending a graph capture"));
        self.set_sync_each_launch(sync);
        chain?;
        let graph = graph?.ok_or_else(|| BackendError::Device("empty probe graph".into()))?;
        let replay = || graph.launch().map_err(dev_err("graph launch"));
        let link_us = time(&replay)? * 1e3 / LINKS as f64;
        if !resident {
            return Ok(SyncProbe {
                link_us,
                barrier_us: None,
                handoff_us: None,
            });
        }

        // ROUNDS barriers against one, in one launch each.
        let barriers = self.func(Module::Probe, "sync_probe_barriers")?;
        let launch_barriers = |rounds: i32| -> Result<()> {
            let mut a = self.launcher(&barriers);
            a.arg(&bp).arg(&rounds);
            // SAFETY: bar is two u32 at zero arrivals (allocated zeroed here, for this alone; every barrier
            // sets the arrivals back to 0); a block of THREADS a multiprocessor, tiny, so the
            // whole grid is resident and every grid_sync returns.
            let r = unsafe { a.launch(cfg((blocks, 1), THREADS)) };
            self.launched("sync_probe_barriers", r)
        };
        let one = time(&|| launch_barriers(1))?;
        let many = time(&|| launch_barriers(ROUNDS + 1))?;
        let barrier_us = (many - one) * 1e3 / f64::from(ROUNDS);

        // A counter around the blocks ROUNDS times.
        let ring = self.func(Module::Probe, "sync_probe_ring")?;
        let counter = s.alloc_zeros::<u32>(1).map_err(dev_err("probe counter"))?;
        let cp = counter.device_ptr(s).0;
        let launch_ring = || -> Result<()> {
            let mut a = self.launcher(&ring);
            a.arg(&cp).arg(&ROUNDS);
            // SAFETY: counter is one u32 at 0 (allocated zeroed; each launch's last hand-off
            // sets it back); one block of 32 a multiprocessor, all resident, so every block's
            // turn comes.
            let r = unsafe { a.launch(cfg((blocks, 1), 32)) };
            self.launched("sync_probe_ring", r)
        };
        let handoff_us = time(&launch_ring)? * 1e3 / (f64::from(ROUNDS) * f64::from(blocks));
        Ok(SyncProbe {
            link_us,
            barrier_us: Some(barrier_us),
            handoff_us: Some(handoff_us),
        })
    }
}
