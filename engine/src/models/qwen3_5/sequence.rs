//! One sequence through [`Qwen3_5`] without the engine: a private paged KV cache that grows
//! as the sequence does and one state slot. The reference tests run the model this way (whole,
//! in chunks, token by token), through the same `Model::forward` the engine calls.

use crate::backend::cpu::CpuTensor;
use crate::backend::{BatchInputs, CpuBackend, Result, SeqChunk};
use crate::kv_cache::StatePlan;
use crate::models::{KvStorage, Model};

use super::Qwen3_5;

const BLOCK_SIZE: usize = 16;

/// One sequence's caches between [`Qwen3_5::forward_sequence_chunk`] calls.
pub struct SequenceState {
    /// Tokens seen so far (the next token's position).
    pub position: usize,
    kv: KvStorage<CpuBackend>,
}

impl Qwen3_5 {
    /// The state of a sequence that has seen no tokens.
    pub fn new_state(&self) -> Result<SequenceState> {
        let mut kv = self.new_kv_storage(&CpuBackend::default(), 2, BLOCK_SIZE)?;
        kv.state = Some(self.new_state_storage(&CpuBackend::default(), 1)?);
        Ok(SequenceState { position: 0, kv })
    }

    /// Logits `[T, V]` for every position of `tokens`, the sequence starting at position 0.
    pub fn forward_sequence(&self, tokens: &[u32]) -> Result<CpuTensor> {
        self.forward_sequence_chunk(&mut self.new_state()?, tokens)
    }

    /// Logits `[T, V]` for `tokens` at positions `state.position ..`, advancing `state`.
    pub fn forward_sequence_chunk(
        &self,
        state: &mut SequenceState,
        tokens: &[u32],
    ) -> Result<CpuTensor> {
        let end = state.position + tokens.len();
        self.grow(state, end.div_ceil(BLOCK_SIZE) + 1)?;
        // Block 0 is the null block; the sequence owns 1.. in order.
        let table: Vec<u32> = (1..state.kv.num_blocks as u32).collect();
        let mut host = BatchInputs::build(
            BLOCK_SIZE,
            &[SeqChunk {
                tokens,
                start_pos: state.position,
                block_table: &table,
                logits_rows: (0..tokens.len()).collect(),
            }],
        );
        host.states = vec![StatePlan::lone(state.position)];
        let logits = self.forward(&CpuBackend::default(), &host, &host, &mut state.kv)?;
        state.position = end;
        Ok(logits)
    }

    /// Make room for `num_blocks` blocks (the null block included), keeping what is cached.
    fn grow(&self, state: &mut SequenceState, num_blocks: usize) -> Result<()> {
        if num_blocks <= state.kv.num_blocks {
            return Ok(());
        }
        let num_blocks = num_blocks.max(2 * state.kv.num_blocks);
        let mut kv = self.new_kv_storage(&CpuBackend::default(), num_blocks, BLOCK_SIZE)?;
        // Blocks keep their ids: the old cache is the new one's prefix.
        for (new, old) in
            kv.k.iter_mut()
                .chain(kv.v.iter_mut())
                .zip(state.kv.k.iter().chain(&state.kv.v))
        {
            new.data[..old.data.len()].copy_from_slice(&old.data);
        }
        kv.state = state.kv.state.take();
        state.kv = kv;
        Ok(())
    }
}
