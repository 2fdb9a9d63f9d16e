//! Synchronisation probes (`probe.cu`) for `cuda_check`'s moe-speed: the cost of one link of a
//! chain of kernels replayed from a CUDA graph (with programmatic dependent launch, as every
//! launch here), of one grid-wide barrier inside a kernel, and of one hand-off of a flag
//! between blocks; and the persistent decode step's skeletons (registers, a cp.async ring, the
//! bulk-copy engine's rings). Timed with device events; nothing else runs meanwhile; what they
//! measured on the H200 is in docs/performance.md. `cuda_check` reports a failure here as a
//! line and goes on.

use super::elementwise::cfg;
use super::{BackendError, CudaBackend, Result, dev_err};
use crate::backend::kernels as k;
use cudarc::driver::DevicePtr;
use cudarc::driver::sys::{self, CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};

/// Kernels in the probed chain, and barriers / hand-off rounds in one launch.
const LINKS: usize = 200;
const ROUNDS: i32 = 200;
/// Threads of a probe block (the chain's and the barriers': a full grid, as a real kernel's).
const THREADS: u32 = 256;

/// Which skeleton kernel a run launches: the register one, the cp.async ring, or the bulk-copy
/// rings with their (dense, routed) slot counts and slot bytes.
#[derive(Debug, Clone, Copy)]
enum Skel {
    Registers,
    Ring,
    Tma(i32, i32, i32),
}

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
        let launch_empty = || -> Result<()> {
            // SAFETY: sink is one u32 this function allocated; the kernel writes it from one
            // thread.
            unsafe { k::sync_probe_empty.launch(self, cfg((blocks, 1), THREADS), (sp,)) }
        };
        launch_empty()?;
        let paused = self.pause_sync_each_launch(true);
        s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
            .map_err(dev_err("beginning a graph capture"))?;
        let chain = (0..LINKS).try_for_each(|_| launch_empty());
        let graph = s
            .end_capture(CUgraphInstantiate_flags(0))
            .map_err(dev_err("ending a graph capture"));
        self.pause_sync_each_launch(paused);
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
        let launch_barriers = |rounds: i32| -> Result<()> {
            // SAFETY: bar is two u32 at zero arrivals (allocated zeroed here, for this alone; every barrier
            // sets the arrivals back to 0); a block of THREADS a multiprocessor, tiny, so the
            // whole grid is resident and every grid_sync returns.
            unsafe { k::sync_probe_barriers.launch(self, cfg((blocks, 1), THREADS), (bp, rounds)) }
        };
        let one = time(&|| launch_barriers(1))?;
        let many = time(&|| launch_barriers(ROUNDS + 1))?;
        let barrier_us = (many - one) * 1e3 / f64::from(ROUNDS);

        // A counter around the blocks ROUNDS times.
        let counter = s.alloc_zeros::<u32>(1).map_err(dev_err("probe counter"))?;
        let cp = counter.device_ptr(s).0;
        let launch_ring = || -> Result<()> {
            // SAFETY: counter is one u32 at 0 (allocated zeroed; each launch's last hand-off
            // sets it back); one block of 32 a multiprocessor, all resident, so every block's
            // turn comes.
            unsafe { k::sync_probe_ring.launch(self, cfg((blocks, 1), 32), (cp, ROUNDS)) }
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
    /// Whether the op reads the routed experts' weights: the bulk-copy skeleton streams those
    /// through a ring of their own, so that the other weights keep streaming while the router
    /// runs.
    pub routed: bool,
}

/// What [`CudaBackend::decode_skeleton`] measured, in milliseconds a step.
#[derive(Debug, Clone)]
pub struct SkeletonTimes {
    /// The bytes alone, no waits: this kernel's streaming rate.
    pub stream_ms: f64,
    /// The chain of hand-offs with the first loads of a stage before its wait.
    pub chain_ms: f64,
    /// The chain with every load after the wait.
    pub chain_behind_ms: f64,
    /// The chain with the flag in the data (each consumer thread spins on the word it reads;
    /// no fence, no counter), loads before the wait.
    pub chain_ll_ms: f64,
    /// The same with one warp a block spinning on the words and passing them on.
    pub chain_ll_warp_ms: f64,
    /// The bytes alone through the shared-memory ring (`decode_skeleton_ring`).
    pub ring_stream_ms: f64,
    /// The chain with the weights streamed through the ring, across stage boundaries.
    pub ring_chain_ms: f64,
    /// The bulk-copy engine's two rings (`decode_skeleton_tma`) at each split of
    /// [`TMA_SPLITS`]; empty below compute capability 9.0.
    pub tma: Vec<TmaTimes>,
}

/// The bulk-copy skeleton at one split of its 208 KB of slots.
#[derive(Debug, Clone, Copy)]
pub struct TmaTimes {
    /// Slots of the ring for the weights known ahead, and of the routed experts' ring.
    pub dense_slots: u32,
    pub routed_slots: u32,
    /// Bytes a slot (one bulk copy).
    pub slot_bytes: u32,
    /// The bytes alone, no waits.
    pub stream_ms: f64,
    /// The chain with producer warps streaming both rings ahead of the consumers.
    pub chain_ms: f64,
}

/// The (dense, routed, bytes a slot) splits of the bulk-copy skeleton's slots that are timed
/// (probe.cu: slots of a multiple of 8 KB, 26 slots and 208 KB at most).
pub const TMA_SPLITS: [(u32, u32, u32); 5] = [
    (14, 12, 8192),
    (8, 18, 8192),
    (7, 6, 16384),
    (3, 3, 32768),
    (2, 4, 32768),
];

// The splits the kernel accepts (it refuses any other with its failure word): at least one slot
// a ring, slots of a multiple of 8 KB, 26 slots and 26 · 8 KB at most.
const _: () = {
    let mut i = 0;
    while i < TMA_SPLITS.len() {
        let (dense, routed, slot) = TMA_SPLITS[i];
        assert!(dense >= 1 && routed >= 1 && dense + routed <= 26);
        assert!(slot >= 8192 && slot % 8192 == 0 && (dense + routed) * slot <= 26 * 8192);
        i += 1;
    }
};

/// Threads of a skeleton block (probe.cu's SKEL_THREADS); the register kernel's dynamic shared
/// memory (a word a warp, then two words a block of the grid, for grids up to 1024 blocks), and
/// the ring kernel's (RING_ITEMS · RING_CHUNKS · SKEL_THREADS · 16, then the words a warp).
const SKEL_THREADS: u32 = 512;
const SKEL_SMEM: u32 = SKEL_THREADS / 32 * 4;
const SKEL_REG_SMEM: u32 = SKEL_SMEM + 2 * 1024 * 4;
const RING_SMEM: u32 = 6 * 4 * SKEL_THREADS * 16 + SKEL_SMEM;
/// The bulk-copy kernel's block (probe.cu's TMA_THREADS: the consumers and two producer warps)
/// and shared memory (TMA_SMEM: 26 slots of 8 KB, 52 barriers of 16 bytes, the words).
const TMA_THREADS: u32 = SKEL_THREADS + 64;
const TMA_SMEM: u32 = 26 * 8192 + 2 * 26 * 16 + SKEL_SMEM;

impl CudaBackend {
    /// The skeleton of a persistent decode step (probe.cu's `decode_skeleton`): `stages` in
    /// order, each streaming its bytes over its producers, with a flag hand-off between one
    /// stage's producers and the next stage's blocks; a block a multiprocessor. `None` where
    /// the grid might not all be resident (fewer multiprocessors in this context than the
    /// device has, or the occupancy calculator says not even one block fits), or where the grid
    /// has more than 1024 blocks (the shared words of the flag-in-data hand-off).
    pub fn decode_skeleton(&self, stages: &[SkeletonStage]) -> Result<Option<SkeletonTimes>> {
        let s = &self.stream;
        if stages.is_empty() || self.context_multiprocessors()? < self.info.multiprocessors {
            return Ok(None);
        }
        let f = k::decode_skeleton.function(self)?;
        let ring = k::decode_skeleton_ring.function(self)?;
        let tma = (self.info.compute_capability.0 >= 9)
            .then(|| k::decode_skeleton_tma.function(self))
            .transpose()?;
        let mut kernels = vec![
            (&f, SKEL_THREADS, SKEL_REG_SMEM),
            (&ring, SKEL_THREADS, RING_SMEM),
        ];
        if let Some(tma) = &tma {
            kernels.push((tma, TMA_THREADS, TMA_SMEM));
        }
        for &(func, threads, smem) in &kernels {
            func.set_attribute(
                cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                smem as i32,
            )
            .map_err(dev_err("decode_skeleton: shared memory"))?;
            let mut fit = 0i32;
            // SAFETY: the function handle is live (the module stays loaded for the context's
            // life); the out pointer is valid for the call.
            unsafe {
                cudarc::driver::sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(
                    &mut fit,
                    func.cu_function(),
                    threads as i32,
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
        if grid > 1024 {
            return Ok(None); // SKEL_REG_SMEM holds the words of up to 1024 blocks
        }
        // The stage table as probe.cu's SkelStage: offset, bytes, producers | ahead << 32.
        let mut table = Vec::with_capacity(stages.len() * 3);
        let mut total = 0u64;
        for st in stages {
            let bytes = st.bytes.div_ceil(16) * 16;
            table.extend([
                total,
                bytes,
                u64::from(st.producers.clamp(1, grid))
                    | u64::from(u32::from(st.ahead) | u32::from(st.routed) << 1) << 32,
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
        // A u64 a stage a block (the flag-in-data mode's word and tag; the others use the
        // first half as u32), zeroed before each launch.
        let mut out = s
            .alloc_zeros::<u64>(stages.len() * grid as usize)
            .map_err(dev_err("skeleton outputs"))?;
        let failed = s
            .alloc_zeros::<u32>(1)
            .map_err(dev_err("skeleton failure word"))?;
        let (wp, tp, fp) = (
            weights.device_ptr(s).0,
            table.device_ptr(s).0,
            failed.device_ptr(s).0,
        );
        let n = stages.len() as i32;
        // A kernel at a mode; the bulk-copy one also takes its ring sizes.
        let mut run = |kernel: Skel, threads: u32, smem: u32, mode: i32| -> Result<f64> {
            let mut ms = Vec::new();
            for rep in 0..6 {
                s.memset_zeros(&mut done)
                    .map_err(dev_err("skeleton counters"))?;
                s.memset_zeros(&mut out)
                    .map_err(dev_err("skeleton outputs"))?;
                let (dp, op) = (done.device_ptr(s).0, out.device_ptr(s).0);
                let start = s
                    .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                    .map_err(dev_err("event"))?;
                let config = cudarc::driver::LaunchConfig {
                    grid_dim: (grid, 1, 1),
                    block_dim: (threads, 1, 1),
                    shared_mem_bytes: smem,
                };
                let args = (wp, tp, n, dp, op, fp, mode);
                // SAFETY: the weights hold every stage's offset + bytes (the table was built
                // from the same sums); done has a counter a stage, at zero; out has a word a
                // stage a block, failed one word; the occupancy calculator says the grid is
                // resident at once with this shared memory, and every wait is on an earlier
                // stage's producers (and bounded), so every wait returns.
                unsafe {
                    match kernel {
                        Skel::Registers => k::decode_skeleton.launch(self, config, args),
                        Skel::Ring => k::decode_skeleton_ring.launch(self, config, args),
                        Skel::Tma(dense, routed, slot) => k::decode_skeleton_tma.launch(
                            self,
                            config,
                            (wp, tp, n, dp, op, fp, mode, dense, routed, slot),
                        ),
                    }
                }?;
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
            stream_ms: run(Skel::Registers, SKEL_THREADS, SKEL_REG_SMEM, 1)?,
            chain_ms: run(Skel::Registers, SKEL_THREADS, SKEL_REG_SMEM, 0)?,
            chain_behind_ms: run(Skel::Registers, SKEL_THREADS, SKEL_REG_SMEM, 2)?,
            chain_ll_ms: run(Skel::Registers, SKEL_THREADS, SKEL_REG_SMEM, 4)?,
            chain_ll_warp_ms: run(Skel::Registers, SKEL_THREADS, SKEL_REG_SMEM, 12)?,
            ring_stream_ms: run(Skel::Ring, SKEL_THREADS, RING_SMEM, 1)?,
            ring_chain_ms: run(Skel::Ring, SKEL_THREADS, RING_SMEM, 0)?,
            tma: match &tma {
                None => Vec::new(),
                Some(_) => TMA_SPLITS
                    .iter()
                    .map(|&(dense, routed, slot)| {
                        let tma = Skel::Tma(dense as i32, routed as i32, slot as i32);
                        Ok(TmaTimes {
                            dense_slots: dense,
                            routed_slots: routed,
                            slot_bytes: slot,
                            stream_ms: run(tma, TMA_THREADS, TMA_SMEM, 1)?,
                            chain_ms: run(tma, TMA_THREADS, TMA_SMEM, 0)?,
                        })
                    })
                    .collect::<Result<Vec<_>>>()?,
            },
        };
        Ok(Some(times))
    }
}

impl CudaBackend {
    /// The multiprocessors this context may use (its execution affinity); the device's count
    /// where the driver does not say. A grid-barrier probe needs its whole grid resident.
    fn context_multiprocessors(&self) -> Result<usize> {
        self.ctx
            .bind_to_thread()
            .map_err(dev_err("binding the context"))?;
        // SAFETY: an all-zero value is a valid instance of this plain C struct, the out
        // pointer is valid for the call, and the union's only member is the SM count (a u32:
        // zeroed, or what the call wrote for CU_EXEC_AFFINITY_TYPE_SM_COUNT; used only when it
        // succeeded).
        let sms = unsafe {
            let mut p: sys::CUexecAffinityParam = std::mem::zeroed();
            let r = sys::cuCtxGetExecAffinity(
                &mut p,
                sys::CUexecAffinityType::CU_EXEC_AFFINITY_TYPE_SM_COUNT,
            );
            (r == sys::CUresult::CUDA_SUCCESS).then_some(p.param.smCount.val as usize)
        };
        Ok(sms.unwrap_or(self.info.multiprocessors))
    }
}
