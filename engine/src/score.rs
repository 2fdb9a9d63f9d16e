//! Scoring a token sequence: the log-probability of each next token and the top-k at every
//! position (`met score`). The sequence runs through the same paged-KV forward as serving, in
//! chunks, so long texts need memory for one chunk's activations only.

use serde::Serialize;

use crate::backend::{Backend, BatchInputs, Result, SeqChunk};
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
    let mut out = Vec::with_capacity(tokens.len());
    for start in (0..tokens.len()).step_by(chunk.max(1)) {
        let end = (start + chunk.max(1)).min(tokens.len());
        let host = BatchInputs::build(
            BLOCK_SIZE,
            &[SeqChunk {
                tokens: &tokens[start..end],
                start_pos: start,
                block_table: &table,
                logits_rows: (0..end - start).collect(),
            }],
        );
        let batch = backend.prepare_batch(&host)?;
        let mut logits = model.forward(backend, &host, &batch, &mut kv)?;
        backend.log_softmax(&mut logits)?;
        let lp = backend.to_host(&logits)?;
        let vocab = model.vocab_size();
        for (r, row) in lp.chunks(vocab).enumerate() {
            let p = start + r;
            let next = tokens.get(p + 1).copied();
            out.push(PositionScore {
                position: p,
                token: tokens[p],
                next_token: next,
                logprob: next.and_then(|t| row.get(t as usize).copied()),
                top: top_k_of(row, top_k),
            });
        }
    }
    Ok(out)
}

/// The `k` largest entries of `row`, best first, ties broken by lower id.
pub fn top_k_of(row: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut best: Vec<(u32, f32)> = Vec::with_capacity(k + 1);
    for (i, &v) in row.iter().enumerate() {
        if best.len() == k && best.last().is_none_or(|&(_, w)| v <= w) {
            continue;
        }
        let at = best.partition_point(|&(_, w)| w >= v);
        best.insert(at, (i as u32, v));
        best.truncate(k);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::top_k_of;

    #[test]
    fn top_k_is_sorted_and_stable() {
        let row = [0.1, 0.5, -1.0, 0.5, 0.3];
        assert_eq!(top_k_of(&row, 3), vec![(1, 0.5), (3, 0.5), (4, 0.3)]);
        assert_eq!(top_k_of(&row, 0), vec![]);
        assert_eq!(top_k_of(&row, 9).len(), 5);
    }
}
