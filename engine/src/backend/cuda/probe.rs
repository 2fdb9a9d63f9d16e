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

/// One op of a decode step as [`CudaBackend::decode_skeleton`] streams it.
#[derive(Debug, Clone, Copy)]
pub struct SkeletonStage {
    /// Weight (or KV) bytes the op reads, rounded up to 16 by the probe.
    pub bytes: u64,
    /// Blocks that share the op's bytes and that the next op waits for (at least 1, at most
    /// the grid; more is taken as the whole grid).
    pub producers: u32,
    /// Whether the op's addresses are known before the op before it ends (every weight but
    /// the routed experts' gate|up), so its first loads may go before the wait.
    pub ahead: bool,
}

/// What [`CudaBackend::decode_skeleton`] measured, in milliseconds a step.
#[derive(Debug, Clone, Copy)]
pub struct SkeletonTimes {
    /// The bytes alone, no waits: this kernel's streaming rate.
    pub stream_ms: f64,
    /// The chain of hand-offs with the first loads of a stage before its wait.
    pub chain_ms: f64,
    /// The chain with every load after the wait.
    pub chain_behind_ms: f64,
    /// The bytes alone through the shared-memory ring (`decode_skeleton_ring`).
    pub ring_stream_ms: f64,
    /// The chain with the weights streamed through the ring, across stage boundaries.
    pub ring_chain_ms: f64,
}

/// Threads of a skeleton block (probe.cu's SKEL_THREADS); the register kernel's dynamic shared
/// memory (a word a warp), and the ring kernel's (RING_ITEMS · RING_CHUNKS · SKEL_THREADS · 16,
/// then the same words).
const SKEL_THREADS: u32 = 512;
const SKEL_SMEM: u32 = SKEL_THREADS / 32 * 4;
const RING_SMEM: u32 = 6 * 4 * SKEL_THREADS * 16 + SKEL_SMEM;

impl CudaBackend {
    /// The skeleton of a persistent decode step (probe.cu's `decode_skeleton`): `stages` in
    /// order, each streaming its bytes over its producers, with a flag hand-off between one
    /// stage's producers and the next stage's blocks; a block a multiprocessor. `None` where
    /// the grid might not all be resident (fewer multiprocessors in this context than the
    /// device has, or the occupancy calculator says not even one block fits).
    pub fn decode_skeleton(&self, stages: &[SkeletonStage]) -> Result<Option<SkeletonTimes>> {
        let s = &self.stream;
        if stages.is_empty() || self.context_multiprocessors()? < self.info.multiprocessors {
            return Ok(None);
        }
        let f = self.func(Module::Probe, "decode_skeleton")?;
        let ring = self.func(Module::Probe, "decode_skeleton_ring")?;
        ring.set_attribute(
            cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            RING_SMEM as i32,
        )
        .map_err(dev_err("decode_skeleton_ring: shared memory"))?;
        for (func, smem) in [(&f, SKEL_SMEM), (&ring, RING_SMEM)] {
            let mut fit = 0i32;
            // SAFETY: the function handle is live (the module stays loaded for the context's
            // life); the out pointer is valid for the call.
            unsafe {
                cudarc::driver::sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(
                    &mut fit,
                    func.cu_function(),
                    SKEL_THREADS as i32,
                    smem as usize,
                )
            }
            .result()
            .map_err(dev_err("decode_skeleton: occupancy"))?;
            if fit < 1 {
                return Ok(None);
            }
        }
        let grid = self.info.multiprocessors as u32;
        // The stage table as probe.cu's SkelStage: offset, bytes, producers | ahead << 32.
        let mut table = Vec::with_capacity(stages.len() * 3);
        let mut total = 0u64;
        for st in stages {
            let bytes = st.bytes.div_ceil(16) * 16;
            table.extend([
                total,
                bytes,
                u64::from(st.producers.clamp(1, grid)) | u64::from(st.ahead) << 32,
            ]);
            total += bytes;
        }
        let weights = s
            .alloc_zeros::<u8>(total.max(16) as usize)
            .map_err(dev_err("skeleton weights"))?;
        let table = s.clone_htod(&table).map_err(dev_err("skeleton stages"))?;
        let mut done = s
            .alloc_zeros::<u32>(stages.len())
            .map_err(dev_err("skeleton counters"))?;
        let out = s
            .alloc_zeros::<u32>(stages.len() * grid as usize)
            .map_err(dev_err("skeleton outputs"))?;
        let failed = s
            .alloc_zeros::<u32>(1)
            .map_err(dev_err("skeleton failure word"))?;
        let (wp, tp, op, fp) = (
            weights.device_ptr(s).0,
            table.device_ptr(s).0,
            out.device_ptr(s).0,
            failed.device_ptr(s).0,
        );
        let n = stages.len() as i32;
        let mut run =
            |kernel: &cudarc::driver::CudaFunction, smem: u32, mode: i32| -> Result<f64> {
                let mut ms = Vec::new();
                for rep in 0..6 {
                    s.memset_zeros(&mut done)
                        .map_err(dev_err("skeleton counters"))?;
                    let dp = done.device_ptr(s).0;
                    let start = s
                        .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                        .map_err(dev_err("event"))?;
                    let mut a = self.launcher(kernel);
                    a.arg(&wp)
                        .arg(&tp)
                        .arg(&n)
                        .arg(&dp)
                        .arg(&op)
                        .arg(&fp)
                        .arg(&mode);
                    // SAFETY: the weights hold every stage's offset + bytes (the table was built
                    // from the same sums); done has a counter a stage, at zero; out has a word a
                    // stage a block, failed one word; the occupancy calculator says the grid is
                    // resident at once with this shared memory, and every wait is on an earlier
                    // stage's producers (and bounded), so every wait returns.
                    let r = unsafe {
                        a.launch(cudarc::driver::LaunchConfig {
                            grid_dim: (grid, 1, 1),
                            block_dim: (SKEL_THREADS, 1, 1),
                            shared_mem_bytes: smem,
                        })
                    };
                    self.launched("decode_skeleton", r)?;
                    let end = s
                        .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                        .map_err(dev_err("event"))?;
                    if rep > 0 {
                        ms.push(f64::from(
                            start.elapsed_ms(&end).map_err(dev_err("elapsed"))?,
                        ));
                    }
                }
                if s.clone_dtoh(&failed)
                    .map_err(dev_err("skeleton failure word"))?[0]
                    != 0
                {
                    return Err(BackendError::Device(
                        "decode skeleton: a hand-off never landed (spin limit)".into(),
                    ));
                }
                ms.sort_by(f64::total_cmp);
                Ok(ms[ms.len() / 2])
            };
        let times = SkeletonTimes {
            stream_ms: run(&f, SKEL_SMEM, 1)?,
            chain_ms: run(&f, SKEL_SMEM, 0)?,
            chain_behind_ms: run(&f, SKEL_SMEM, 2)?,
            ring_stream_ms: run(&ring, RING_SMEM, 1)?,
            ring_chain_ms: run(&ring, RING_SMEM, 0)?,
        };
        Ok(Some(times))
    }
}
