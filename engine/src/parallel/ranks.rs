//! A tensor-parallel group serving as one model: rank 0 ([`Leader`]) is the model the engine
//! runs, and it repeats to the other ranks ([`follow`]) every call that touches the cache:
//! each step's batch, the KV cache's and the state pool's allocations. Every rank then runs
//! the same forward on its shard, and the collectives inside it join the parts, so rank 0's
//! logits are the whole model's. The scheduler, sampling and HTTP stay on rank 0 alone.
//!
//! Any error in a step is fatal to the group ([`BackendError::GroupLost`]): after one, the
//! ranks may disagree about where in the forward they are, so no further step is safe.

use std::sync::Arc;

use super::tcp::TcpGroup;
use super::wire::{self, Reader, Tag, Writer};
use crate::backend::{Backend, BackendError, BatchInputs, Result};
use crate::models::{KvStorage, Model, StateSpec, StateStorage};

/// Rank 0's model: the shard it loaded, and the group it repeats its calls to.
pub struct Leader<M> {
    model: M,
    group: Arc<TcpGroup>,
}

impl<M> Leader<M> {
    pub fn new(model: M, group: Arc<TcpGroup>) -> Self {
        Self { model, group }
    }
}

impl<M> Drop for Leader<M> {
    fn drop(&mut self) {
        // The other ranks exit when told; one already gone is no matter now.
        let _ = self.group.broadcast(Tag::Stop, &[]);
    }
}

fn fatal(e: BackendError) -> BackendError {
    match e {
        BackendError::GroupLost(m) => BackendError::GroupLost(m),
        other => BackendError::GroupLost(format!(
            "{other}; the tensor-parallel ranks may be out of step after it"
        )),
    }
}

impl<B: Backend, M: Model<B>> Model<B> for Leader<M> {
    fn forward(
        &self,
        backend: &B,
        host: &BatchInputs,
        batch: &B::Batch,
        kv: &mut KvStorage<B>,
    ) -> Result<B::Tensor> {
        self.group
            .broadcast(Tag::Step, &wire::encode_batch(host))
            .map_err(fatal)?;
        self.model.forward(backend, host, batch, kv).map_err(fatal)
    }

    fn new_kv_storage(
        &self,
        backend: &B,
        num_blocks: usize,
        block_size: usize,
    ) -> Result<KvStorage<B>> {
        let mut w = Writer::default();
        w.u64(num_blocks as u64).u64(block_size as u64);
        self.group.broadcast(Tag::Kv, &w.0)?;
        self.model.new_kv_storage(backend, num_blocks, block_size)
    }

    fn new_state_storage(&self, backend: &B, slots: usize) -> Result<StateStorage<B>> {
        let mut w = Writer::default();
        w.u64(slots as u64);
        self.group.broadcast(Tag::State, &w.0)?;
        self.model.new_state_storage(backend, slots)
    }

    fn kv_bytes_per_token(&self, backend: &B) -> usize {
        self.model.kv_bytes_per_token(backend)
    }

    fn activation_bytes(&self, tokens: usize, logits_rows: usize) -> usize {
        self.model.activation_bytes(tokens, logits_rows)
    }

    fn vocab_size(&self) -> usize {
        self.model.vocab_size()
    }

    fn max_position_embeddings(&self) -> usize {
        self.model.max_position_embeddings()
    }

    fn state_spec(&self) -> Option<StateSpec> {
        self.model.state_spec()
    }
}

/// A rank other than 0: do what rank 0 says until it says stop. Returns an error when rank 0
/// is gone or a step fails here (the process then exits non-zero, which rank 0 sees as its
/// link closing).
pub fn follow<B: Backend, M: Model<B>>(backend: &B, model: &M, group: &TcpGroup) -> Result<()> {
    let malformed = |e: std::io::Error| BackendError::GroupLost(format!("rank 0 sent {e}"));
    let mut kv: Option<KvStorage<B>> = None;
    loop {
        let (tag, payload) = group.next_control()?;
        let mut r = Reader(&payload);
        match tag {
            Tag::Kv => {
                let (blocks, size) = (r.u64().map_err(malformed)?, r.u64().map_err(malformed)?);
                kv = Some(model.new_kv_storage(backend, blocks as usize, size as usize)?);
            }
            Tag::State => {
                let slots = r.u64().map_err(malformed)? as usize;
                let cache = kv.as_mut().ok_or_else(|| out_of_order("a state pool"))?;
                cache.state = Some(model.new_state_storage(backend, slots)?);
            }
            Tag::Step => {
                let host = wire::decode_batch(&payload).map_err(malformed)?;
                let cache = kv.as_mut().ok_or_else(|| out_of_order("a step"))?;
                let batch = backend.prepare_batch(&host)?;
                model.forward(backend, &host, &batch, cache)?;
            }
            Tag::Stop => return Ok(()),
            other => {
                return Err(BackendError::GroupLost(format!(
                    "rank 0 sent {other:?} between steps: the group is out of step"
                )));
            }
        }
    }
}

fn out_of_order(what: &str) -> BackendError {
    BackendError::GroupLost(format!("rank 0 sent {what} before the KV cache"))
}
