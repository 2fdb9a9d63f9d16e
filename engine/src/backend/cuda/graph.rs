//! CUDA graphs for decode steps: a decode step is ~330 small launches (nine ops a layer, 36
//! layers on Qwen3-8B), and at batch 1 the host cannot issue them as fast as the GPU runs
//! them. A graph replays the whole forward with one launch.
//!
//! How: the runner pads a decode step to a fixed shape (a batch-size bucket and a block-table
//! width, see `runner/`). The first step of each shape runs the model's forward eagerly once
//! (counting the bytes its activations take), then again under stream capture with every
//! allocation carved from one arena at a fixed address, so the captured kernels' pointers stay
//! valid. Later steps of that shape copy their indices into the captured batch's buffer and
//! replay. The arena is shared by all graphs (they run one at a time on the one stream) and
//! grows when a larger shape needs more; graphs cut from an old arena are dropped and
//! recaptured on their next use.
//!
//! A capture that fails (an op that cannot be captured) leaves its shape eager for the rest of
//! the run, with a warning: slower, never wrong.

use std::collections::{HashMap, HashSet};
use std::mem::ManuallyDrop;
use std::sync::PoisonError;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaGraph, CudaSlice, DevicePtr};

use super::block_tables::TablesView;
use super::tensor::{CudaTensor, DType, Storage};
use super::{CudaBackend, CudaBatch, dev_err};
use crate::backend::{BackendError, BatchInputs, ForwardMany, Result};

/// Batch sizes decode steps are padded to. Above the last, steps run eagerly.
pub(super) const BUCKETS: &[usize] = &[
    1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256,
];

/// Allocation granularity inside the arena (cuBLAS and vector loads like 256-byte alignment).
const ALIGN: usize = 256;

/// Where `CudaBackend::alloc` takes memory from.
#[derive(Debug, Default)]
pub(super) enum ArenaMode {
    /// The stream's allocator (the normal case).
    #[default]
    Off,
    /// The stream's allocator, adding up what a forward takes.
    Count,
    /// Bump allocation from the arena (during a capture).
    Carve,
}

#[derive(Debug, Default)]
pub(super) struct Arena {
    pub(super) mode: ArenaMode,
    cursor: usize,
    memory: Option<CudaSlice<u8>>,
}

impl Arena {
    fn size(&self) -> usize {
        self.memory.as_ref().map_or(0, |m| m.len())
    }
}

/// A captured step: its graph, the batch buffer its kernels read, and its outputs (the logits
/// `[rows, vocab]` f32 first), in the arena.
struct Captured {
    graph: CudaGraph,
    batch: CudaBatch,
    outputs: Vec<CudaTensor>,
}

/// What fixes a graph's launches: sequences, rows, block-table width, state saves (a verify
/// step's), logits rows, outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Key {
    seqs: usize,
    rows: usize,
    blocks: usize,
    saves: usize,
    /// Rows that get logits (a head pass that only fills the cache has none).
    logits: usize,
    outputs: usize,
}

impl Key {
    fn of(host: &BatchInputs, outputs: usize) -> Self {
        Self {
            seqs: host.num_seqs(),
            rows: host.num_tokens(),
            blocks: host.max_blocks_per_seq,
            saves: host.states.iter().map(|p| p.saves.len()).sum(),
            logits: host.logits_rows.len(),
            outputs,
        }
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} sequences ({} rows, {} state saves) × {} blocks",
            self.seqs, self.rows, self.saves, self.blocks
        )
    }
}

#[derive(Default)]
pub(super) struct Graphs {
    pub(super) enabled: bool,
    captured: HashMap<Key, Captured>,
    failed: HashSet<Key>,
    /// Chained forwards (`graph_chain.rs`), keyed by their passes' keys and inputs' shapes.
    pub(super) chains: HashMap<ChainKey, CapturedChain>,
    pub(super) chains_failed: HashSet<ChainKey>,
}

/// What fixes a chain graph's launches: each pass's batch shape, the inputs' shapes, outputs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct ChainKey {
    pub(super) passes: Vec<Key>,
    pub(super) inputs: Vec<(Vec<usize>, DType)>,
}

impl ChainKey {
    pub(super) fn of(hosts: &[BatchInputs], inputs: &[&CudaTensor], outputs: usize) -> Self {
        Self {
            passes: hosts.iter().map(|h| Key::of(h, outputs)).collect(),
            inputs: inputs.iter().map(|t| (t.shape.clone(), t.dtype)).collect(),
        }
    }
}

/// A captured chain: its graph, each pass's batch buffer, the buffers its inputs are copied
/// into before a replay (its own, so the caller's may sit in the arena), and its outputs.
pub(super) struct CapturedChain {
    pub(super) graph: CudaGraph,
    pub(super) batches: Vec<CudaBatch>,
    pub(super) inputs: Vec<CudaTensor>,
    pub(super) outputs: Vec<CudaTensor>,
}

// SAFETY: a CUDA graph may be used from any thread as long as calls on it are serialised; the
// graphs live only inside the backend's `Mutex<Graphs>`.
unsafe impl Send for Graphs {}

impl Graphs {
    pub(super) fn new(enabled: bool) -> Self {
        Self {
            enabled,
            ..Self::default()
        }
    }
}

impl CudaBackend {
    /// Drops every captured graph (and the shapes that failed to capture): each shape is
    /// captured afresh at its next step. Graphs are keyed by shape only, so a caller that runs
    /// another model on this backend drops them first. Whether graphs are captured at all is
    /// the tuning's `launch.cuda_graphs` (`--enforce-eager`, `METRALE_CUDA_GRAPHS=0`).
    pub fn drop_graphs(&self) {
        let mut g = self.graphs.lock().unwrap_or_else(PoisonError::into_inner);
        g.captured.clear();
        g.failed.clear();
        g.chains.clear();
        g.chains_failed.clear();
    }

    /// Graphs captured so far, for logs and checks.
    pub fn graphs_captured(&self) -> usize {
        let g = self.graphs.lock().unwrap_or_else(PoisonError::into_inner);
        g.captured.len()
    }

    /// `bytes` of device memory: from the arena while capturing, else from the stream's pool
    /// (counted when a capture is being sized). Zero-filled when `zeroed`.
    pub(super) fn raw_alloc(&self, bytes: usize, zeroed: bool) -> Result<Storage> {
        let mut arena = self.arena.lock().unwrap_or_else(PoisonError::into_inner);
        let stream = &self.stream;
        let mut slice = match arena.mode {
            ArenaMode::Carve => {
                let at = arena.cursor;
                let end = at + bytes.next_multiple_of(ALIGN);
                let (base, size) = match arena.memory.as_ref() {
                    Some(m) => (m.device_ptr(stream).0, m.len()),
                    None => (0, 0),
                };
                if end > size {
                    return Err(BackendError::Device(format!(
                        "graph arena of {size} bytes is too small (a capture took more than the \
                         eager forward it was sized by)"
                    )));
                }
                arena.cursor = end;
                // SAFETY: [base + at, base + end) lies inside the arena, which outlives every
                // tensor carved from it (graphs and their logits are dropped before it is
                // replaced); ManuallyDrop keeps the tensor from freeing it.
                let s = unsafe { stream.upgrade_device_ptr::<u8>(base + at as u64, bytes) };
                Storage::Arena(ManuallyDrop::new(s))
            }
            ArenaMode::Count | ArenaMode::Off => {
                if matches!(arena.mode, ArenaMode::Count) {
                    arena.cursor += bytes.next_multiple_of(ALIGN);
                }
                // SAFETY: uninitialised bytes; zero-filled below when asked, otherwise every
                // caller writes them all before reading (see `alloc`).
                let s =
                    unsafe { stream.alloc::<u8>(bytes) }.map_err(dev_err("device allocation"))?;
                Storage::Owned(s)
            }
        };
        drop(arena);
        if zeroed {
            stream
                .memset_zeros(&mut *slice)
                .map_err(dev_err("zero fill"))?;
        }
        Ok(slice)
    }

    fn set_arena_mode(&self, mode: ArenaMode) -> usize {
        let mut arena = self.arena.lock().unwrap_or_else(PoisonError::into_inner);
        let used = arena.cursor;
        arena.mode = mode;
        arena.cursor = 0;
        used
    }

    /// The decode-step graph for `host`'s shape, captured now if it is new, replayed. `None`
    /// when graphs are off or this shape could not be captured: the caller runs `forward`.
    pub(super) fn graph_forward_op(
        &self,
        host: &BatchInputs,
        outputs: usize,
        forward: &mut ForwardMany<'_, CudaBackend>,
    ) -> Result<Option<Vec<CudaTensor>>> {
        let key = Key::of(host, outputs);
        let mut g = self.graphs.lock().unwrap_or_else(PoisonError::into_inner);
        if !g.enabled || g.failed.contains(&key) {
            return Ok(None);
        }
        let tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        let kept = super::block_tables::views(&tables, self);
        if let Some(c) = g.captured.get_mut(&key) {
            c.batch.refill_grouped(&self.stream, host, &kept)?;
            c.graph
                .launch()
                .map_err(dev_err("launching a decode graph"))?;
            return Ok(Some(c.outputs.iter().map(|t| self.arena_view(t)).collect()));
        }
        match self.capture(&mut g, host, &kept, outputs, forward) {
            Ok(c) => {
                c.graph
                    .launch()
                    .map_err(dev_err("launching a decode graph"))?;
                let views = c.outputs.iter().map(|t| self.arena_view(t)).collect();
                tracing::debug!("captured a decode graph for {key}");
                g.captured.insert(key, c);
                Ok(Some(views))
            }
            Err(e) => {
                tracing::warn!("decode steps of {key} run without a CUDA graph: {e}");
                g.failed.insert(key);
                Ok(None)
            }
        }
    }

    fn capture(
        &self,
        g: &mut Graphs,
        host: &BatchInputs,
        kept: &[TablesView<'_>],
        outputs: usize,
        forward: &mut ForwardMany<'_, CudaBackend>,
    ) -> Result<Captured> {
        // Every KV group's batch sits at a fixed address too, refilled before each replay.
        let batch = CudaBatch::grouped(&self.stream, host, None, kept)?.for_graph();
        // The counting pass (`record`'s step 1) runs too: writing the step's keys and values
        // twice is harmless, moving a recurrent state on twice is not, so it runs with every
        // state plan a padding row's, which moves none.
        let counting_batch = if host.states.is_empty() {
            None
        } else {
            Some(
                CudaBatch::grouped(&self.stream, &host.without_state_effects(), None, kept)?
                    .for_graph(),
            )
        };
        let (graph, out) = self.record(g, outputs, &mut |counting| match counting {
            true => forward(counting_batch.as_ref().unwrap_or(&batch)),
            false => forward(&batch),
        })?;
        Ok(Captured {
            graph,
            batch,
            outputs: out,
        })
    }

    /// Steps 1 to 3 of a capture (`run(true)`: the eager pass that counts what the forward
    /// allocates; `run(false)`: the forward to record) and the outputs' checks: the graph and
    /// its outputs, in the arena, the first (a step's logits, a chain's ids) f32; a chain may
    /// return none (the MTP head's cache fill). Drops every graph cut from an arena it
    /// outgrows.
    pub(super) fn record(
        &self,
        g: &mut Graphs,
        outputs: usize,
        run: &mut dyn FnMut(bool) -> Result<Vec<CudaTensor>>,
    ) -> Result<(CudaGraph, Vec<CudaTensor>)> {
        // 1. Eagerly, counting what the forward allocates (this also loads every kernel and
        //    uploads the rotary table, neither of which a capture may do).
        self.set_arena_mode(ArenaMode::Count);
        let eager = run(true);
        let need = self.set_arena_mode(ArenaMode::Off);
        drop(eager?);
        // 2. An arena that holds it. Graphs carved from a smaller one go.
        {
            let mut arena = self.arena.lock().unwrap_or_else(PoisonError::into_inner);
            if arena.size() < need {
                g.captured.clear();
                g.chains.clear();
                self.stream.synchronize().map_err(dev_err("synchronize"))?;
                arena.memory = None;
                let m = self
                    .stream
                    .alloc_zeros::<u8>(need)
                    .map_err(dev_err("graph arena"))?;
                arena.memory = Some(m);
            }
        }
        // 3. Capture the same forward, allocating from the arena, without per-launch syncs.
        let paused = self.pause_sync_each_launch(true);
        self.set_arena_mode(ArenaMode::Carve);
        let begun = self
            .stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
            .map_err(dev_err("beginning a graph capture"));
        let out = begun.and_then(|()| run(false));
        // Always end a begun capture, so the stream is usable whatever happened.
        let graph = self
            .stream
            .end_capture(CUgraphInstantiate_flags(0))
            .map_err(dev_err("ending a graph capture"));
        self.set_arena_mode(ArenaMode::Off);
        self.pause_sync_each_launch(paused);
        let out = out?;
        let graph = graph?.ok_or_else(|| {
            BackendError::Device("the graph capture recorded nothing".to_string())
        })?;
        let in_arena = out.iter().all(|t| matches!(t.buf, Storage::Arena(_)));
        if out.len() != outputs || !in_arena || out.first().is_some_and(|t| t.dtype != DType::F32) {
            return Err(BackendError::Device(format!(
                "the captured forward gave {} outputs ({:?} first), not {outputs} in the arena \
                 with f32 logits first",
                out.len(),
                out.first().map(|t| t.dtype)
            )));
        }
        Ok((graph, out))
    }

    /// Another handle on an arena tensor (valid until the next replay overwrites it).
    pub(super) fn arena_view(&self, t: &CudaTensor) -> CudaTensor {
        let ptr = t.ptr(&self.stream);
        // SAFETY: `t` is carved from the arena, which stays allocated while its graphs exist;
        // the view never frees it (ManuallyDrop).
        let s = unsafe { self.stream.upgrade_device_ptr::<u8>(ptr, t.buf.len()) };
        CudaTensor {
            shape: t.shape.clone(),
            dtype: t.dtype,
            buf: Storage::Arena(ManuallyDrop::new(s)),
        }
    }
}
