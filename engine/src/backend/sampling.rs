//! Choosing the next token from a row of logits, on the host: penalties, temperature,
//! top-k / top-p / min-p filtering, and a seeded draw. The CPU backend's `sample` op; the
//! reference a device sampler is checked against.
//!
//! A draw is a pure function of (seed, output index, logits): the noise for the `i`-th
//! generated token of a request comes from a counter-based hash of `(seed, i, token id)`, so
//! the same seed gives the same text whatever else shares the batch, and a preempted request
//! that recomputes draws the same tokens again.

use crate::sampling_params::SamplingParams;
use crate::scheduler::io::TokenLogprobs;

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

/// Sample one token from `logits` (one row of the vocabulary).
pub fn sample_row(logits: &[f32], row: &SampleRow<'_>) -> Sampled {
    let p = row.params;
    let output = &row.all_token_ids[row.num_prompt_tokens.min(row.all_token_ids.len())..];
    let mut l = logits.to_vec();
    apply_penalties(&mut l, row.all_token_ids, output, p);
    // Before min_tokens, end-of-sequence and stop tokens may not be chosen.
    if output.len() < p.min_tokens {
        for &t in p.eos_token_ids.iter().chain(&p.stop_token_ids) {
            if let Some(v) = l.get_mut(t as usize) {
                *v = f32::NEG_INFINITY;
            }
        }
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

fn apply_penalties(l: &mut [f32], all: &[u32], output: &[u32], p: &SamplingParams) {
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

/// Highest logit, lowest id on ties.
fn argmax(l: &[f32]) -> u32 {
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
    let filtering = p.top_k > 0 || p.top_p < 1.0 || p.min_p > 0.0;
    let mut cand: Vec<(u32, f32)> = l
        .iter()
        .enumerate()
        .filter(|(_, v)| v.is_finite())
        .map(|(i, &v)| (i as u32, v / t))
        .collect();
    if cand.is_empty() {
        return argmax(l);
    }
    if filtering {
        // Largest first; ties by id so the kept set is deterministic.
        cand.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        if p.top_k > 0 {
            cand.truncate(p.top_k as usize);
        }
        let max = cand[0].1;
        let probs: Vec<f64> = cand
            .iter()
            .map(|&(_, v)| f64::from(v - max).exp())
            .collect();
        let total: f64 = probs.iter().sum();
        let mut keep = probs.len();
        if p.top_p < 1.0 {
            // Smallest prefix whose mass reaches top_p (always at least one token).
            let mut acc = 0.0;
            for (i, &q) in probs.iter().enumerate() {
                acc += q / total;
                if acc >= f64::from(p.top_p) {
                    keep = i + 1;
                    break;
                }
            }
        }
        if p.min_p > 0.0 {
            let floor = f64::from(p.min_p) * probs[0];
            keep = keep.min(probs.iter().take_while(|&&q| q >= floor).count().max(1));
        }
        cand.truncate(keep);
    }
    let seed = p.seed;
    let index = output_index as u64;
    let mut best = (cand[0].0, f64::NEG_INFINITY);
    for &(id, v) in &cand {
        let score = f64::from(v) + gumbel(seed, index, id);
        if score > best.1 {
            best = (id, score);
        }
    }
    best.0
}

/// Standard Gumbel noise for token `token` of draw `index` of the stream `seed`.
fn gumbel(seed: u64, index: u64, token: u32) -> f64 {
    let u = uniform(
        seed ^ u64::from(token).wrapping_mul(0xd6e8_feb8_6659_fd93),
        index,
    );
    let u = u.max(f64::MIN_POSITIVE); // (0, 1)
    -(-u.ln()).ln()
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
}
