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
            seq: None,
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
            seq: None,
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
        seq: None,
    };
    assert_eq!(r(&[1, 2]).masked_tokens(100), vec![4, 6]);
    assert_eq!(r(&[1, 2, 3]).masked_tokens(100), Vec::<u32>::new());
    assert_eq!(r(&[1, 2]).output(), &[2]);
}

/// `gumbel_pick` skips tokens that cannot win; scoring every one must give the same token.
#[test]
fn skipping_hopeless_tokens_does_not_change_the_draw() {
    let every = |cand: &[(u32, f32)], seed, index| {
        let mut best = (cand[0].0, f64::NEG_INFINITY);
        for &(id, v) in cand {
            let score = f64::from(v) + gumbel(seed, index, id);
            if score > best.1 {
                best = (id, score);
            }
        }
        best.0
    };
    for case in 0..300u64 {
        let n = 50 + (case as usize * 37) % 3000;
        let spread = [0.5f32, 4.0, 20.0, 80.0][case as usize % 4];
        let mut cand: Vec<(u32, f32)> = (0..n as u32)
            .map(|i| (i, (uniform(case, u64::from(i)) as f32 - 0.5) * spread))
            .collect();
        // A few strong tokens, a tie, and rows of huge or infinite scores.
        cand[(case as usize * 7) % n].1 = spread * 2.0;
        cand[(case as usize * 13) % n].1 = spread * 2.0;
        if case % 25 == 0 {
            cand.iter_mut().for_each(|c| c.1 = c.1 * 1e12 + 3e13);
        }
        if case % 40 == 1 {
            cand[n / 2].1 = f32::INFINITY;
            cand[n / 3].1 = f32::INFINITY;
        }
        if case % 40 == 2 {
            cand.iter_mut().for_each(|c| c.1 = f32::NEG_INFINITY);
        }
        let (seed, index) = (case * 977, case % 7);
        assert_eq!(
            gumbel_pick(&cand, seed, index),
            Some(every(&cand, seed, index)),
            "case {case}"
        );
    }
}
