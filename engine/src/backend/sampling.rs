//! Choosing the next token from a row of logits, on the host: penalties, temperature,
//! top-k / top-p / min-p filtering, and a seeded draw. The CPU backend's `sample` op; the
//! reference a device sampler is checked against.
//!
//! A draw is a pure function of (seed, output index, logits): the noise for the `i`-th
//! generated token of a request comes from a counter-based hash of `(seed, i, token id)`, so
//! the same seed gives the same text whatever else shares the batch, and a preempted request
//! that recomputes draws the same tokens again.

mod detmath;

use crate::grammar::{RowMask, TokenMask};
use crate::sampling_params::SamplingParams;
use crate::scheduler::io::TokenLogprobs;
pub use detmath::{det_exp, det_ln};

/// One row to sample, with what its penalties and masks need.
#[derive(Debug, Clone)]
pub struct SampleRow<'a> {
    /// Which row of the logits tensor.
    pub logits_row: usize,
    pub params: &'a SamplingParams,
    /// Prompt then generated tokens so far.
    pub all_token_ids: &'a [u32],
    pub num_prompt_tokens: usize,
    /// The running sequence this row belongs to (its request id), for a backend that keeps
    /// per-sequence state between steps (the CUDA sampler's penalty counts); `None` for a row
    /// with no sequence behind it (scoring, the speculative drafter's argmax). Rows of one
    /// sequence see its history growing from call to call; a backend must still check that
    /// (a shorter history is a rollback or a preemption) and may forget a sequence at any time,
    /// so the id only saves work: the result never depends on it. The CPU backend ignores it.
    pub seq: Option<u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    pub token_id: u32,
    /// Present when the request asked for logprobs: the chosen token's log-probability under
    /// the model (before penalties and temperature) and the top alternatives.
    pub logprobs: Option<TokenLogprobs>,
}

/// Row-wise log-softmax into a new vector, f64 accumulation.
pub fn log_softmax(row: &[f32]) -> Vec<f32> {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = row.iter().map(|&l| f64::from(l - max).exp()).sum();
    let log_z = max + sum.ln() as f32;
    row.iter().map(|l| l - log_z).collect()
}

/// The `k` largest entries, best first, ties broken by lower id.
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

/// The log-probability of `token` under `row`'s model distribution, with the top `k`.
pub fn token_logprobs(row: &[f32], token: u32, k: usize) -> TokenLogprobs {
    let lp = log_softmax(row);
    TokenLogprobs {
        token_id: token,
        logprob: lp.get(token as usize).copied().unwrap_or(f32::NEG_INFINITY),
        top: top_k_of(&lp, k),
    }
}

impl SampleRow<'_> {
    /// The generated tokens so far.
    pub fn output(&self) -> &[u32] {
        &self.all_token_ids[self.num_prompt_tokens.min(self.all_token_ids.len())..]
    }

    /// The tokens that may not be chosen yet (end-of-sequence and stop tokens before
    /// `min_tokens` outputs exist), those inside a vocabulary of `vocab`; none for a row with a
    /// grammar, which decides where the output ends.
    pub fn masked_tokens(&self, vocab: usize) -> Vec<u32> {
        let p = self.params;
        if self.output().len() >= p.min_tokens || p.constraint.is_some() {
            return Vec::new();
        }
        p.eos_token_ids
            .iter()
            .chain(&p.stop_token_ids)
            .copied()
            .filter(|&t| (t as usize) < vocab)
            .collect()
    }
}

/// Sample one token from `logits` (one row of the vocabulary), under the row's grammar mask
/// when it has a grammar.
pub fn sample_row(logits: &[f32], row: &SampleRow<'_>) -> Sampled {
    let mask = row_mask(row, logits.len());
    sample_row_with(logits, row, mask.tokens().map(|m| &**m))
}

/// The grammar's mask for `row` (its sequence's matcher brought up to its output), over
/// `vocab` ids; `Free` for a row without a grammar.
pub fn row_mask(row: &SampleRow<'_>, vocab: usize) -> RowMask {
    match &row.params.constraint {
        Some(c) => c.row_mask(row.seq, row.output(), &row.params.eos_token_ids, vocab),
        None => RowMask::Free,
    }
}

/// [`sample_row`] with the row's grammar mask given (`None`: nothing to mask): penalties,
/// `logit_bias`, the mask, then the draw. The CUDA sampler applies the same mask on the device.
pub fn sample_row_with(logits: &[f32], row: &SampleRow<'_>, mask: Option<&TokenMask>) -> Sampled {
    let p = row.params;
    let output = row.output();
    let mut l = logits.to_vec();
    for (t, count) in penalty_entries(row.all_token_ids, output, p, l.len()) {
        l[t as usize] = penalise(l[t as usize], count, p);
    }
    for &(t, bias) in &p.logit_bias {
        if let Some(v) = l.get_mut(t as usize) {
            *v += bias;
        }
    }
    // The grammar decides where the output may end (min_tokens does not apply to a row with
    // one: forbidding the end of a complete value would leave nothing to choose); before
    // min_tokens, end-of-sequence and stop tokens may not be chosen (`masked_tokens`).
    if let Some(m) = mask {
        m.apply(&mut l);
    }
    for t in row.masked_tokens(l.len()) {
        l[t as usize] = f32::NEG_INFINITY;
    }
    let token_id = if p.is_greedy() {
        argmax(&l)
    } else {
        draw(&l, p, output.len())
    };
    let logprobs = p
        .logprobs
        .map(|k| token_logprobs(logits, token_id, k as usize));
    Sampled { token_id, logprobs }
}

/// The tokens penalties touch, as `(id, count in the output)`, sorted by id: every distinct
/// token of the history (prompt and output) when the repetition penalty is on, else only the
/// output's; ids outside a vocabulary of `vocab` are dropped. The CUDA sampler uploads this
/// list and its kernel applies [`penalise`] to each entry, so both paths edit the same logits.
pub fn penalty_entries(
    all: &[u32],
    output: &[u32],
    p: &SamplingParams,
    vocab: usize,
) -> Vec<(u32, u32)> {
    let repetition = p.repetition_penalty != 1.0;
    let frequency = p.frequency_penalty != 0.0 || p.presence_penalty != 0.0;
    let mut counts = std::collections::HashMap::<u32, u32>::new();
    let inside = |t: &&u32| (**t as usize) < vocab;
    if repetition {
        for &t in all.iter().filter(inside) {
            counts.entry(t).or_default();
        }
    }
    if frequency {
        for &t in output.iter().filter(inside) {
            *counts.entry(t).or_default() += 1;
        }
    }
    let mut entries: Vec<(u32, u32)> = counts.into_iter().collect();
    entries.sort_unstable();
    entries
}

/// One penalised logit: the repetition penalty divides a positive logit and multiplies a
/// negative one (every token of the history), then the frequency and presence penalties
/// subtract `frequency · count + presence` (tokens generated `count > 0` times). Plain f32
/// operations in this order; the CUDA kernel repeats them with round-to-nearest intrinsics
/// (no fused multiply-add), so the two agree bit for bit.
pub fn penalise(v: f32, count: u32, p: &SamplingParams) -> f32 {
    let mut v = v;
    if p.repetition_penalty != 1.0 {
        v = if v > 0.0 {
            v / p.repetition_penalty
        } else {
            v * p.repetition_penalty
        };
    }
    if (p.frequency_penalty != 0.0 || p.presence_penalty != 0.0) && count > 0 {
        v -= p.frequency_penalty * count as f32 + p.presence_penalty;
    }
    v
}

/// Highest logit, lowest id on ties; NaN is never chosen unless it sits in column 0 (nothing
/// compares greater than it).
pub fn argmax(l: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in l.iter().enumerate() {
        if v > l[best] {
            best = i;
        }
    }
    best as u32
}

/// Temperature, then top-k, top-p and min-p on the sorted distribution, then a Gumbel-max
/// draw among the tokens kept: each token gets its own noise, a hash of (seed, output index,
/// token id), and the highest `logit / T + noise` wins. Keyed on the token id rather than on a
/// position in a sorted list, the draw only changes if two tokens' noisy scores are within the
/// rounding error of the logits, so batching (which moves logits by ~1e-6) does not change text.
fn draw(l: &[f32], p: &SamplingParams, output_index: usize) -> u32 {
    let t = p.temperature;
    let mut cand: Vec<(u32, f32)> = l
        .iter()
        .enumerate()
        .filter(|(_, v)| v.is_finite())
        .map(|(i, &v)| (i as u32, v / t))
        .collect();
    if cand.is_empty() {
        return argmax(l);
    }
    if filters(p) {
        // Largest first; ties by id so the kept set is deterministic.
        cand.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        // The whole list is here, so the cut is always decided.
        let keep = kept(&cand, cand.len(), None, p).unwrap_or(cand.len());
        cand.truncate(keep);
    }
    gumbel_pick(&cand, p.seed, output_index as u64).unwrap_or_else(|| argmax(l))
}

/// Does the request cut the distribution (top-k, top-p or min-p)?
pub fn filters(p: &SamplingParams) -> bool {
    p.top_k > 0 || p.top_p < 1.0 || p.min_p > 0.0
}

/// How many of the sorted candidates (`logit / T`, largest first, ties by lower id) top-k,
/// top-p and min-p keep. Shared by the host sampler, which passes the whole list, and the CUDA
/// sampler, which passes only the list's head (the device's best few hundred) with `len`, the
/// number of finite candidates in the row, and `total_all`, the device's
/// `Σ exp(v − max)` over all of them. `None` when the head is too short to decide: top-k keeps
/// more than the head holds, or top-p / min-p would cut beyond it (the caller then samples
/// the whole row on the host). On a head that is the whole list the result is always `Some`.
pub fn kept(
    head: &[(u32, f32)],
    len: usize,
    total_all: Option<f64>,
    p: &SamplingParams,
) -> Option<usize> {
    let max = head.first()?.1;
    let limit = if p.top_k > 0 {
        len.min(p.top_k as usize)
    } else {
        len
    };
    // Every candidate that top-k keeps is in the head.
    let complete = limit <= head.len();
    let probs: Vec<f64> = head[..limit.min(head.len())]
        .iter()
        .map(|&(_, v)| det_exp(f64::from(v - max)))
        .collect();
    let total: f64 = if complete {
        fixed_sum(&probs)
    } else if limit == len {
        total_all?
    } else {
        return None;
    };
    let mut keep = limit;
    if p.top_p < 1.0 {
        // Smallest prefix whose mass reaches top_p (always at least one token).
        let mut acc = 0.0;
        let mut reached = false;
        for (i, &q) in probs.iter().enumerate() {
            acc += q / total;
            if acc >= f64::from(p.top_p) {
                keep = i + 1;
                reached = true;
                break;
            }
        }
        if !reached && !complete {
            return None;
        }
    }
    if p.min_p > 0.0 {
        let floor = f64::from(p.min_p) * probs[0];
        let above = probs.iter().take_while(|&&q| q >= floor).count();
        if above == probs.len() && !complete && keep > probs.len() {
            return None; // the cut lies past the head
        }
        keep = keep.min(above.max(1));
    }
    (keep <= probs.len()).then_some(keep)
}

/// `Σ q` over probabilities in [0, 1], in a way whose result does not depend on the order: each
/// term is cut to 128-bit fixed point (`floor(q · 2^96)`, an error below 2^-96 a term) and the
/// terms are added as integers. The CUDA sampler sums a whole row this way in a tree and must get
/// this loop's bits (its kernel adds the same integers). A term outside [0, 1] (NaN, when `v / T`
/// overflowed) makes it the plain sequential sum.
pub fn fixed_sum(qs: &[f64]) -> f64 {
    if !qs.iter().all(|q| (0.0..=1.0).contains(q)) {
        return qs.iter().sum();
    }
    fixed_to_f64(qs.iter().map(|&q| fixed_term(q)).sum())
}

/// `floor(q · 2^96)` for q in [0, 1]: the high word counts units of 2^-32, the low word the
/// next 64 bits (the same operations as `fixed_add` in `sample.cu`).
pub fn fixed_term(q: f64) -> u128 {
    let x = q * 4_294_967_296.0; // 2^32, exact
    let hi = x.floor();
    let lo = ((x - hi) * 18_446_744_073_709_551_616.0) as u64; // 2^64, exact, then truncated
    (u128::from(hi as u64) << 64) | u128::from(lo)
}

/// A fixed-point sum back to f64 (one rounding).
pub fn fixed_to_f64(sum: u128) -> f64 {
    let (hi, lo) = ((sum >> 64) as u64, sum as u64);
    (hi as f64 + lo as f64 * 5.421_010_862_427_522e-20) * 2.328_306_436_538_696_3e-10 // 2^-64, 2^-32
}

/// The Gumbel-max draw among `cand` (`(id, logit / T)`): the highest `v + gumbel(seed, index,
/// id)`, the earlier candidate on ties. `None` for an empty list.
///
/// Only tokens that could still win get their exact noise (two `det_ln`), as in `sample.cu`'s
/// `sample_gumbel`: the largest `v` is scored first, a lower bound of the winner; a token more
/// than 37.01 below the bound or the best so far is skipped (the noise is at most
/// `-ln(2^-53) = 36.74`), and so is one whose noise bound `-ln(1 - u)` (an f32 log, + 0.01)
/// cannot close the gap. Skipped tokens score strictly below an achieved score, so the result
/// is that of scoring every token; past scores of 1e12 nothing is skipped (rounding).
pub fn gumbel_pick(cand: &[(u32, f32)], seed: u64, index: u64) -> Option<u32> {
    let top = cand
        .iter()
        .copied()
        .reduce(|a, b| if b.1 > a.1 { b } else { a })?;
    let bound = f64::from(top.1) + gumbel(seed, index, top.0);
    let prune = bound.abs() < 1e12;
    let mut best = (cand[0].0, f64::NEG_INFINITY);
    for &(id, v) in cand {
        let v = f64::from(v);
        let floor = best.1.max(bound);
        if prune && floor - v > 37.01 {
            continue;
        }
        let u = noise_uniform(seed, index, id);
        if prune && f64::from(-((1.0 - u) as f32).ln()) + 0.01 < floor - v {
            continue;
        }
        let score = v + -det_ln(-det_ln(u));
        if score > best.1 {
            best = (id, score);
        }
    }
    Some(best.0)
}

/// Standard Gumbel noise for token `token` of draw `index` of the stream `seed`.
pub fn gumbel(seed: u64, index: u64, token: u32) -> f64 {
    -det_ln(-det_ln(noise_uniform(seed, index, token)))
}

/// The uniform behind `gumbel`, in (0, 1).
fn noise_uniform(seed: u64, index: u64, token: u32) -> f64 {
    uniform(
        seed ^ u64::from(token).wrapping_mul(0xd6e8_feb8_6659_fd93),
        index,
    )
    .max(f64::MIN_POSITIVE)
}

/// A uniform number in [0, 1) for the `index`-th draw of the stream `seed`.
pub fn uniform(seed: u64, index: u64) -> f64 {
    let mut z = seed ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17);
    for _ in 0..2 {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
    }
    (z >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests;
