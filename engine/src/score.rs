//! Scoring a token sequence: the log-probability of each next token and the top-k at every
//! position (`met score`). The sequence runs through the same paged-KV forward as serving, in
//! chunks, so long texts need memory for one chunk's activations only.

use serde::Serialize;

pub use crate::backend::sampling::top_k_of;
use crate::backend::{Backend, BatchInputs, Result, SeqChunk};
use crate::kv_cache::StatePlan;
use crate::models::Model;

/// Tokens a forward pass takes at a time.
pub const DEFAULT_CHUNK: usize = 512;
const BLOCK_SIZE: usize = 16;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PositionScore {
    pub position: usize,
    pub token: u32,
    /// The token that follows, and its log-probability given tokens `0..=position`.
    pub next_token: Option<u32>,
    pub logprob: Option<f32>,
    /// The `k` most likely next tokens, best first, as `[token_id, logprob]`.
    pub top: Vec<(u32, f32)>,
}

/// Score `tokens` with `model`; `top_k` alternatives per position.
pub fn score<B: Backend, M: Model<B>>(
    backend: &B,
    model: &M,
    tokens: &[u32],
    top_k: usize,
    chunk: usize,
) -> Result<Vec<PositionScore>> {
    let blocks = tokens.len().div_ceil(BLOCK_SIZE);
    // Block 0 is the null block; the sequence owns 1..=blocks.
    let table: Vec<u32> = (1..=blocks as u32).collect();
    let mut kv = model.new_kv_storage(backend, blocks + 1, BLOCK_SIZE)?;
    // A model with recurrent state (Qwen3.5 hybrid) carries it in one slot between chunks.
    let stateful = model.state_spec().is_some();
    if stateful {
        kv.state = Some(model.new_state_storage(backend, 1)?);
    }
    let mut out = Vec::with_capacity(tokens.len());
    for start in (0..tokens.len()).step_by(chunk.max(1)) {
        let end = (start + chunk.max(1)).min(tokens.len());
        let mut host = BatchInputs::build(
            BLOCK_SIZE,
            &[SeqChunk {
                tokens: &tokens[start..end],
                start_pos: start,
                block_table: &table,
                logits_rows: (0..end - start).collect(),
            }],
        );
        if stateful {
            host.states = vec![StatePlan::lone(start)];
        }
        let batch = backend.prepare_batch(&host)?;
        let mut logits = model.forward(backend, &host, &batch, &mut kv)?;
        backend.log_softmax(&mut logits)?;
        let lp = backend.to_host(&logits)?;
        out.extend(positions(tokens, start, &lp, model.vocab_size(), top_k));
    }
    Ok(out)
}

/// The scores of positions `start..` of `tokens` from their log-probabilities `lp`
/// (`[rows, vocab]`, one row a position).
pub fn positions(
    tokens: &[u32],
    start: usize,
    lp: &[f32],
    vocab: usize,
    top_k: usize,
) -> Vec<PositionScore> {
    lp.chunks(vocab)
        .enumerate()
        .map(|(r, row)| {
            let p = start + r;
            let next = tokens.get(p + 1).copied();
            PositionScore {
                position: p,
                token: tokens[p],
                next_token: next,
                logprob: next.and_then(|t| row.get(t as usize).copied()),
                top: top_k_of(row, top_k),
            }
        })
        .collect()
}
