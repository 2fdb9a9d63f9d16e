//! Choosing the next token from a row of logits, on the host: penalties, temperature,
//! top-k / top-p / min-p filtering, and a seeded draw. The CPU backend's `sample` op; the
//! reference a device sampler is checked against.
//!
//! A draw is a pure function of (seed, output index, logits): the noise for the `i`-th
//! generated token of a request comes from a counter-based hash of `(seed, i, token id)`, so
//! the same seed gives the same text whatever else shares the batch, and a preempted request
//! that recomputes draws the same tokens again.

mod detmath;

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
    /// `min_tokens` outputs exist), those inside a vocabulary of `vocab`.
    pub fn masked_tokens(&self, vocab: usize) -> Vec<u32> {
        let p = self.params;
        if self.output().len() >= p.min_tokens {
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

/// Sample one token from `logits` (one row of the vocabulary).
pub fn sample_row(logits: &[f32], row: &SampleRow<'_>) -> Sampled {
    let p = row.params;
    let output = row.output();
    let mut l = logits.to_vec();
    for (t, count) in penalty_entries(row.all_token_ids, output, p, l.len()) {
        l[t as usize] = penalise(l[t as usize], count, p);
    }
    // Before min_tokens, end-of-sequence and stop tokens may not be chosen.
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
pub fn gumbel_pick(cand: &[(u32, f32)], seed: u64, index: u64) -> Option<u32> {
    let mut best = (cand.first()?.0, f64::NEG_INFINITY);
    for &(id, v) in cand {
        let score = f64::from(v) + gumbel(seed, index, id);
        if score > best.1 {
            best = (id, score);
        }
    }
    Some(best.0)
}

/// Standard Gumbel noise for token `token` of draw `index` of the stream `seed`.
pub fn gumbel(seed: u64, index: u64, token: u32) -> f64 {
    let u = uniform(
        seed ^ u64::from(token).wrapping_mul(0xd6e8_feb8_6659_fd93),
        index,
    );
    let u = u.max(f64::MIN_POSITIVE); // (0, 1)
    -det_ln(-det_ln(u))
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
mod tests {
    use super::*;

    fn params(f: impl FnOnce(&mut SamplingParams)) -> SamplingParams {
        let mut p = SamplingParams {
            temperature: 1.0,
            seed: 42,
            ..SamplingParams::default()
        };
        f(&mut p);
        p
    }

    fn sample(logits: &[f32], p: &SamplingParams, history: &[u32], prompt: usize) -> u32 {
        sample_row(
            logits,
            &SampleRow {
                logits_row: 0,
                params: p,
                all_token_ids: history,
                num_prompt_tokens: prompt,
            },
        )
        .token_id
    }

    #[test]
    fn top_k_is_sorted_and_stable() {
        let row = [0.1, 0.5, -1.0, 0.5, 0.3];
        assert_eq!(top_k_of(&row, 3), vec![(1, 0.5), (3, 0.5), (4, 0.3)]);
        assert_eq!(top_k_of(&row, 0), vec![]);
        assert_eq!(top_k_of(&row, 9).len(), 5);
    }

    #[test]
    fn greedy_takes_the_argmax() {
        let p = params(|p| p.temperature = 0.0);
        assert_eq!(sample(&[0.1, 2.0, 1.9, 2.0], &p, &[0], 1), 1);
    }

    #[test]
    fn draws_follow_the_distribution_and_the_seed() {
        let logits = [0.0f32, (3f32).ln(), f32::NEG_INFINITY]; // p = 1/4, 3/4, 0
        let mut counts = [0usize; 3];
        for seed in 0..4000 {
            let p = params(|p| p.seed = seed);
            counts[sample(&logits, &p, &[], 0) as usize] += 1;
        }
        assert_eq!(counts[2], 0);
        let frac = counts[1] as f64 / 4000.0;
        assert!((frac - 0.75).abs() < 0.03, "{frac}");
        let p = params(|_| {});
        let a: Vec<u32> = (0..50)
            .map(|i| sample(&logits, &p, &vec![0; i], 0))
            .collect();
        let b: Vec<u32> = (0..50)
            .map(|i| sample(&logits, &p, &vec![0; i], 0))
            .collect();
        assert_eq!(a, b, "same seed and index, same token");
    }

    #[test]
    fn a_rounding_error_in_the_logits_does_not_change_the_draw() {
        // Many close candidates (0.002 apart on average): with an inverse-CDF draw over a
        // probability-sorted list, a 1e-4 nudge (what batching does to CPU logits after a few layers) that reorders two of them changes the token
        // for a large share of seeds. The Gumbel draw, keyed on token ids, must not care.
        let logits: Vec<f32> = (0..500).map(|i| (uniform(7, i) as f32) * 1.0).collect();
        let nudged: Vec<f32> = logits
            .iter()
            .enumerate()
            .map(|(i, v)| v + if i % 2 == 0 { 1e-4 } else { -1e-4 })
            .collect();
        let mut changed = 0;
        for seed in 0..2000 {
            let top_p = if seed % 2 == 0 { 1.0 } else { 0.9 };
            let p = params(|p| {
                p.seed = seed;
                p.top_p = top_p
            });
            if sample(&logits, &p, &[], 0) != sample(&nudged, &p, &[], 0) {
                changed += 1;
            }
        }
        assert!(changed <= 4, "{changed} of 2000 draws changed");
    }

    #[test]
    fn top_k_top_p_min_p_cut_the_tail() {
        let logits = [3.0f32, 2.0, 1.0, 0.0, -1.0];
        for seed in 0..300 {
            let k = params(|p| {
                p.top_k = 2;
                p.seed = seed
            });
            assert!(sample(&logits, &k, &[], 0) < 2);
            let tp = params(|p| {
                p.top_p = 0.5;
                p.seed = seed
            }); // p0 ≈ 0.64 ≥ 0.5
            assert_eq!(sample(&logits, &tp, &[], 0), 0);
            let mp = params(|p| {
                p.min_p = 0.3;
                p.seed = seed
            }); // keeps p ≥ 0.3·p0: ids 0, 1
            assert!(sample(&logits, &mp, &[], 0) < 2);
        }
    }

    #[test]
    fn penalties_and_min_tokens() {
        let g = |f: fn(&mut SamplingParams)| {
            params(|p| {
                p.temperature = 0.0;
                f(p)
            })
        };
        // Repetition penalty divides a positive logit of a seen token.
        assert_eq!(
            sample(&[2.0, 1.5], &g(|p| p.repetition_penalty = 2.0), &[0], 1),
            1
        );
        // Frequency penalty counts generated tokens only, not the prompt.
        assert_eq!(
            sample(&[2.0, 1.5], &g(|p| p.frequency_penalty = 0.3), &[0], 1),
            0
        );
        assert_eq!(
            sample(
                &[2.0, 1.5],
                &g(|p| p.frequency_penalty = 0.3),
                &[0, 0, 0],
                1
            ),
            1
        );
        assert_eq!(
            sample(&[2.0, 1.5], &g(|p| p.presence_penalty = 0.6), &[9, 0], 1),
            1
        );
        // EOS is masked until min_tokens outputs exist.
        let p = g(|p| {
            p.eos_token_ids = vec![0];
            p.min_tokens = 2
        });
        assert_eq!(sample(&[5.0, 1.0], &p, &[7, 1], 1), 1);
        assert_eq!(sample(&[5.0, 1.0], &p, &[7, 1, 1], 1), 0);
    }

    #[test]
    fn logprobs_are_of_the_raw_distribution() {
        let p = params(|p| {
            p.temperature = 0.0;
            p.logprobs = Some(2);
            p.repetition_penalty = 3.0
        });
        let s = sample_row(
            &[1.0, 0.0, -1.0],
            &SampleRow {
                logits_row: 0,
                params: &p,
                all_token_ids: &[0],
                num_prompt_tokens: 1,
            },
        );
        let lp = s.logprobs.expect("asked for logprobs");
        let z = (1f32.exp() + 1.0 + (-1f32).exp()).ln();
        assert_eq!(lp.top.len(), 2);
        assert!((lp.top[0].1 - (1.0 - z)).abs() < 1e-6);
        assert_eq!(lp.token_id, s.token_id);
    }

    /// The penalties as they were written before the compact entry list (a `seen` mask over
    /// the vocabulary, then a count per output token): the entry list must give the same bits.
    fn penalties_by_mask(l: &mut [f32], all: &[u32], output: &[u32], p: &SamplingParams) {
        if p.repetition_penalty != 1.0 {
            let mut seen = vec![false; l.len()];
            for &t in all {
                if let Some(s) = seen.get_mut(t as usize) {
                    *s = true;
                }
            }
            for (v, s) in l.iter_mut().zip(seen) {
                if s {
                    *v = if *v > 0.0 {
                        *v / p.repetition_penalty
                    } else {
                        *v * p.repetition_penalty
                    };
                }
            }
        }
        if p.frequency_penalty != 0.0 || p.presence_penalty != 0.0 {
            let mut counts = std::collections::HashMap::<u32, u32>::new();
            for &t in output {
                *counts.entry(t).or_default() += 1;
            }
            for (t, c) in counts {
                if let Some(v) = l.get_mut(t as usize) {
                    *v -= p.frequency_penalty * c as f32 + p.presence_penalty;
                }
            }
        }
    }

    #[test]
    fn penalty_entries_edit_the_logits_like_the_vocabulary_mask() {
        let vocab = 300;
        for case in 0..60u64 {
            let p = params(|p| {
                p.repetition_penalty = [1.0, 1.3, 0.7][case as usize % 3];
                p.frequency_penalty = [0.0, 0.4, -0.2, 0.0][case as usize % 4];
                p.presence_penalty = [0.0, 0.0, 0.5, 1.1, -0.3][case as usize % 5];
            });
            let all: Vec<u32> = (0..case * 7)
                .map(|i| (uniform(case, i) * 320.0) as u32) // some ids past the vocabulary
                .collect();
            let prompt = (case as usize * 3).min(all.len());
            let logits: Vec<f32> = (0..vocab)
                .map(|i| (uniform(case + 100, i as u64) as f32 - 0.5) * 20.0)
                .collect();
            let mut want = logits.clone();
            penalties_by_mask(&mut want, &all, &all[prompt..], &p);
            let mut got = logits.clone();
            for (t, c) in penalty_entries(&all, &all[prompt..], &p, vocab) {
                got[t as usize] = penalise(got[t as usize], c, &p);
            }
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "case {case}");
        }
    }

    /// A sorted candidate list of `n` finite logits over temperature `t`.
    fn sorted(n: usize, t: f32, seed: u64) -> Vec<(u32, f32)> {
        let mut c: Vec<(u32, f32)> = (0..n as u32)
            .map(|i| {
                (
                    i,
                    ((uniform(seed, u64::from(i)) as f32 - 0.5) * 16.0).round() / 4.0 / t,
                )
            })
            .collect();
        c.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        c
    }

    #[test]
    fn a_head_decides_the_cut_like_the_whole_list_or_declines() {
        let (mut decided, mut declined) = (0, 0);
        for seed in 0..40u64 {
            let cand = sorted(2000, 0.8, seed);
            let total = fixed_sum(
                &cand
                    .iter()
                    .map(|&(_, v)| det_exp(f64::from(v - cand[0].1)))
                    .collect::<Vec<_>>(),
            );
            for (top_k, top_p, min_p) in [
                (0, 0.5, 0.0),
                (0, 0.95, 0.0),
                (0, 1.0, 0.1),
                (20, 1.0, 0.0),
                (0, 0.9, 0.05),
                (300, 0.99, 0.0),
                (1500, 1.0, 0.0),
                (0, 1.0, 0.0001),
            ] {
                let p = params(|p| {
                    p.top_k = top_k;
                    p.top_p = top_p;
                    p.min_p = min_p;
                });
                let whole = kept(&cand, cand.len(), None, &p).expect("the whole list decides");
                for head in [1, 64, 256, 1024] {
                    match kept(&cand[..head], cand.len(), Some(total), &p) {
                        Some(k) => {
                            assert_eq!(k, whole, "seed {seed} {top_k}/{top_p}/{min_p} head {head}");
                            decided += 1;
                        }
                        None => {
                            // Only a cut at or past the head's end, or a top-k wider than
                            // it (whose total the head cannot give), is left undecided.
                            assert!(whole >= head || top_k as usize > head, "seed {seed}");
                            declined += 1;
                        }
                    }
                }
            }
        }
        assert!(
            decided > 200 && declined > 200,
            "{decided} decided, {declined} declined"
        );
        assert_eq!(kept(&[], 0, None, &params(|p| p.top_p = 0.5)), None);
    }

    #[test]
    fn the_fixed_point_sum_is_order_free_and_close_to_the_true_sum() {
        let qs: Vec<f64> = (0..151_936)
            .map(|i| (-(uniform(3, i) * 30.0)).exp())
            .collect();
        let mut rev = qs.clone();
        rev.reverse();
        assert_eq!(fixed_sum(&qs).to_bits(), fixed_sum(&rev).to_bits());
        let plain: f64 = qs.iter().sum();
        assert!((fixed_sum(&qs) - plain).abs() < 1e-11 * plain);
        assert_eq!(fixed_sum(&[1.0, 0.5, 0.25]), 1.75);
        assert!(
            fixed_sum(&[1.0, f64::NAN]).is_nan(),
            "NaN keeps the plain sum"
        );
    }

    #[test]
    fn gumbel_matches_the_values_the_device_port_is_checked_against() {
        // kernels/dev/host_emulation/test.cpp holds the same (seed, index, token) → bits.
        for (seed, index, token, bits) in [
            (0u64, 0u64, 0u32, 0x3feb_3ab6_afcf_9b8eu64),
            (42, 0, 1, 0x3fbd_d49f_9cdb_852d),
            (42, 7, 151_935, 0xbfc3_9dae_f06d_c734),
            (u64::MAX, 123_456_789, 77, 0xbfd3_d63b_3856_f69e),
            (1 << 63, 1 << 40, 12345, 0xbfe9_ffba_b1b2_a3ed),
        ] {
            assert_eq!(gumbel(seed, index, token).to_bits(), bits);
        }
    }

    #[test]
    fn masked_tokens_until_min_tokens() {
        let p = params(|p| {
            p.min_tokens = 2;
            p.eos_token_ids = vec![4, 900];
            p.stop_token_ids = vec![6];
        });
        let r = |all: &'static [u32]| SampleRow {
            logits_row: 0,
            params: &p,
            all_token_ids: all,
            num_prompt_tokens: 1,
        };
        assert_eq!(r(&[1, 2]).masked_tokens(100), vec![4, 6]);
        assert_eq!(r(&[1, 2, 3]).masked_tokens(100), Vec::<u32>::new());
        assert_eq!(r(&[1, 2]).output(), &[2]);
    }
}
