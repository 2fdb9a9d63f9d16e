//! Forwards chained on the device and replayed as one graph ([`Backend::graph_chain`]): the
//! MTP head's draft passes, each fed the argmax of the pass before (`argmax_ids`, then
//! `feed_tokens` into the next pass's batch), so k drafts cost one launch and one download
//! instead of k eager passes, each waiting on the host for its argmax (issue 33).
//!
//! A chain is captured like a decode step (`graph.rs`: counted eagerly, then recorded into
//! the shared arena), with a batch buffer per pass and buffers of its own for its inputs:
//! those are copied in before every replay, because the caller's (a verify graph's hidden
//! states) live in the same arena the chain's activations are carved from.
//!
//! [`Backend::graph_chain`]: crate::backend::Backend::graph_chain

use std::sync::PoisonError;

use super::block_tables::TablesView;
use super::elementwise::{cfg, dim, int};
use super::graph::{CapturedChain, ChainKey, Graphs};
use super::sample::{ARGMAX_THREADS, argmax_splits};
use super::tensor::{CudaTensor, DType};
use super::{CudaBackend, CudaBatch, dev_err, shape_err};
use crate::backend::kernels;
use crate::backend::{BackendError, BatchInputs, ChainForward, Result};

/// Threads of a feed_token_ids block.
const FEED_THREADS: usize = 256;

impl CudaBackend {
    /// [`crate::backend::Backend::graph_chain`].
    pub(super) fn graph_chain_op(
        &self,
        hosts: &[BatchInputs],
        inputs: &[&CudaTensor],
        outputs: usize,
        forward: &mut ChainForward<'_, CudaBackend>,
    ) -> Result<Option<Vec<CudaTensor>>> {
        let key = ChainKey::of(hosts, inputs, outputs);
        let mut g = self.graphs.lock().unwrap_or_else(PoisonError::into_inner);
        if !g.enabled || hosts.is_empty() || g.chains_failed.contains(&key) {
            return Ok(None);
        }
        let tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        // The MTP head's chains run on models of one KV group.
        let kept = tables.first().map(|t| t.view(self));
        if let Some(c) = g.chains.get_mut(&key) {
            for (batch, host) in c.batches.iter_mut().zip(hosts) {
                batch.refill(&self.stream, host, kept)?;
            }
            self.copy_inputs(&mut c.inputs, inputs)?;
            c.graph
                .launch()
                .map_err(dev_err("launching a chain graph"))?;
            return Ok(Some(c.outputs.iter().map(|t| self.arena_view(t)).collect()));
        }
        match self.capture_chain(&mut g, hosts, inputs, kept, outputs, forward) {
            Ok(c) => {
                c.graph
                    .launch()
                    .map_err(dev_err("launching a chain graph"))?;
                let views = c.outputs.iter().map(|t| self.arena_view(t)).collect();
                tracing::debug!("captured a chain graph of {} passes", hosts.len());
                g.chains.insert(key, c);
                Ok(Some(views))
            }
            Err(e) => {
                tracing::warn!(
                    "chains of {} passes ({} rows first) run without a CUDA graph: {e}",
                    hosts.len(),
                    hosts[0].num_tokens()
                );
                g.chains_failed.insert(key);
                Ok(None)
            }
        }
    }

    fn capture_chain(
        &self,
        g: &mut Graphs,
        hosts: &[BatchInputs],
        inputs: &[&CudaTensor],
        kept: Option<TablesView<'_>>,
        outputs: usize,
        forward: &mut ChainForward<'_, CudaBackend>,
    ) -> Result<CapturedChain> {
        // Recording runs the chain twice (counted, then captured): harmless for keys and
        // values written twice, not for a recurrent state moved on twice.
        if hosts.iter().any(|h| !h.states.is_empty()) {
            return Err(BackendError::Device(
                "a chained pass moves a recurrent state".into(),
            ));
        }
        let batches = hosts
            .iter()
            .map(|h| CudaBatch::new(&self.stream, h, None, kept).map(CudaBatch::for_graph))
            .collect::<Result<Vec<_>>>()?;
        // The inputs' own buffers, outside the arena (its mode is off here).
        let mut own = inputs
            .iter()
            .map(|t| self.alloc(&t.shape, t.dtype))
            .collect::<Result<Vec<_>>>()?;
        self.copy_inputs(&mut own, inputs)?;
        let refs: Vec<&CudaBatch> = batches.iter().collect();
        let (graph, outputs) = self.record(g, outputs, &mut |_| forward(&refs, &own))?;
        Ok(CapturedChain {
            graph,
            batches,
            inputs: own,
            outputs,
        })
    }

    /// Device copies of `inputs` into `own` (the same shapes and types: the chain's key).
    fn copy_inputs(&self, own: &mut [CudaTensor], inputs: &[&CudaTensor]) -> Result<()> {
        for (o, i) in own.iter_mut().zip(inputs) {
            let n = i.num_bytes();
            if n == 0 {
                continue;
            }
            self.stream
                .memcpy_dtod(&i.buf.slice(0..n), &mut o.buf.slice_mut(0..n))
                .map_err(dev_err("copying a chain's inputs"))?;
        }
        Ok(())
    }

    /// [`crate::backend::Backend::argmax_ids`]: `argmax_part_f32` over the rows themselves
    /// (no row list, which a capture could not upload), then `argmax_final_ids_f32` into row
    /// `row` of `ids`; the partials come from the arena while capturing.
    pub(super) fn argmax_ids_op(
        &self,
        ids: &mut CudaTensor,
        row: usize,
        logits: &CudaTensor,
    ) -> Result<()> {
        const OP: &str = "argmax_ids";
        let (r, vocab) = (logits.rows(), logits.cols());
        let passes = ids.shape.first().copied().unwrap_or(0);
        if logits.dtype != DType::F32
            || logits.shape.len() != 2
            || ids.shape.len() != 2
            || ids.shape[1] != r
            || row >= passes
        {
            return Err(shape_err(
                OP,
                format!(
                    "row {row} of ids {:?} from logits {:?} ({:?}; f32 [R, vocab] wanted)",
                    ids.shape, logits.shape, logits.dtype
                ),
            ));
        }
        self.set_dtype(ids, DType::F32)?;
        if r == 0 || vocab == 0 {
            return Ok(());
        }
        let splits = argmax_splits(vocab);
        let part_v = self.alloc(&[r, splits], DType::F32)?;
        let part_i = self.alloc(&[r, splits], DType::F32)?; // u32 indices, 4 bytes each
        let s = &self.stream;
        let (pv, pi, x) = (part_v.ptr(s), part_i.ptr(s), logits.ptr(s));
        let out = ids.ptr(s) + (row * r * 4) as u64;
        let (rows, vi, si) = (dim(r, OP)?, int(vocab, OP)?, int(splits, OP)?);
        // SAFETY: grid (splits, r): block (s, j) reads row j of x, [r, vocab] f32 (checked
        // above; a null row list means row j), and writes partial j · splits + s of the two
        // [r, splits] buffers; the block size matches the kernel's shared arrays.
        unsafe {
            kernels::argmax_part_f32.launch(
                self,
                cfg((splits as u32, rows), ARGMAX_THREADS),
                (pv, pi, x, 0u64, vi),
            )?;
        }
        // SAFETY: one warp a row j < r folds row j's partials and writes element j of ids row
        // `row` (ids is [passes, r] f32 with row < passes), reading x's first column of row j.
        unsafe {
            kernels::argmax_final_ids_f32.launch(
                self,
                cfg((rows, 1), 32),
                (out, pv, pi, x, 0u64, vi, si),
            )
        }
    }

    /// [`crate::backend::Backend::feed_tokens`]: `feed_token_ids` into the batch's token-id
    /// array, one id a row (the batch's `max_token_id` stays its placeholders': the ids are
    /// an argmax over the vocabulary, inside it by construction).
    pub(super) fn feed_tokens_op(
        &self,
        batch: &CudaBatch,
        ids: &CudaTensor,
        row: usize,
    ) -> Result<()> {
        const OP: &str = "feed_tokens";
        let n = batch.num_tokens;
        if ids.dtype != DType::F32
            || ids.shape.len() != 2
            || ids.shape[1] != n
            || row >= ids.shape[0]
        {
            return Err(shape_err(
                OP,
                format!(
                    "row {row} of ids {:?} ({:?}) for a batch of {n} rows",
                    ids.shape, ids.dtype
                ),
            ));
        }
        if n == 0 {
            return Ok(());
        }
        let s = &self.stream;
        let src = ids.ptr(s) + (row * n * 4) as u64;
        let ni = int(n, OP)?;
        // SAFETY: the batch's token-id array holds n u32 (its rows), ids row `row` n f32
        // (checked above); threads past n return.
        unsafe {
            kernels::feed_token_ids.launch(
                self,
                cfg((dim(n.div_ceil(FEED_THREADS), OP)?, 1), FEED_THREADS as u32),
                (batch.token_ids(s), src, ni),
            )
        }
    }
}
