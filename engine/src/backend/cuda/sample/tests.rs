use super::*;
use crate::sampling_params::SamplingParams;

fn row(p: &SamplingParams, all: &'static [u32]) -> Route {
    route(&SampleRow {
        logits_row: 0,
        params: p,
        all_token_ids: all,
        num_prompt_tokens: 1,
        seq: None,
    })
}

#[test]
fn routes_follow_what_the_host_sampler_would_do() {
    let greedy = SamplingParams {
        temperature: 0.0,
        ..SamplingParams::default()
    };
    assert_eq!(row(&greedy, &[1, 2]), Route::Argmax);
    let masked = SamplingParams {
        min_tokens: 5,
        eos_token_ids: vec![0],
        ..greedy.clone()
    };
    assert_eq!(row(&masked, &[1, 2]), Route::Greedy);
    let no_eos = SamplingParams {
        min_tokens: 5,
        ..greedy.clone()
    };
    assert_eq!(row(&no_eos, &[1, 2]), Route::Argmax);
    let rep = SamplingParams {
        repetition_penalty: 1.2,
        ..greedy.clone()
    };
    assert_eq!(row(&rep, &[1]), Route::Greedy);
    let logprobs = SamplingParams {
        logprobs: Some(1),
        ..rep.clone()
    };
    assert_eq!(row(&logprobs, &[1]), Route::Host);
    let hot = SamplingParams::default();
    assert_eq!(row(&hot, &[1]), Route::Gumbel);
    let top_p = SamplingParams {
        top_p: 0.9,
        ..hot.clone()
    };
    assert_eq!(row(&top_p, &[1]), Route::Candidates);
    let nan = SamplingParams {
        presence_penalty: f32::NAN,
        ..hot.clone()
    };
    assert_eq!(row(&nan, &[1]), Route::Host);
    let negative = SamplingParams {
        temperature: -1.0,
        ..hot
    };
    assert_eq!(row(&negative, &[1]), Route::Host);
}

#[test]
fn the_plan_lists_each_rows_entries_masks_and_kernel() {
    let p = SamplingParams {
        repetition_penalty: 1.5,
        frequency_penalty: 0.5,
        min_tokens: 9,
        eos_token_ids: vec![3, 100],
        seed: 0x1234_5678_9abc_def0,
        top_k: 40,
        ..SamplingParams::default()
    };
    let all = [5u32, 7, 5, 200];
    let rows = [SampleRow {
        logits_row: 2,
        params: &p,
        all_token_ids: &all,
        num_prompt_tokens: 1,
        seq: None,
    }];
    let routes = [route(&rows[0])];
    let plan = build_plan(&rows, &[0], &routes, &[None], &[None], 50);
    let w = &plan.words;
    assert_eq!(w[0], 2);
    // (5, 1) and (7, 1): 200 is outside the vocabulary of 50.
    let (at, n) = (w[1] as usize, w[2] as usize);
    assert_eq!(&w[at..at + 2 * n], &[5, 1, 7, 1]);
    let (at, n) = (w[3] as usize, w[4] as usize);
    assert_eq!(&w[at..at + n], &[3]);
    assert_eq!(w[8], 3, "penalties; no total under top-k 40");
    assert_eq!((w[10], w[11]), (0x9abc_def0, 0x1234_5678));
    assert_eq!(
        (w[12], w[13]),
        (3, 0),
        "output index = generated tokens so far"
    );
    assert_eq!(w[14], 40);
    assert_eq!(plan.lists[2].1, vec![0]);
    assert_eq!(&w[plan.lists[2].0..], &[0]);
}

/// A grammar's mask rides in the plan: the masked rows' bitmasks (cut to the vocabulary's
/// words), then (position in the chunk, word offset) pairs for `sample_token_mask`.
#[test]
fn the_plan_carries_each_masked_rows_bits_and_a_pair_naming_them() {
    let p = SamplingParams {
        temperature: 0.0,
        ..SamplingParams::default()
    };
    let rows: Vec<SampleRow<'_>> = (0..3)
        .map(|r| SampleRow {
            logits_row: r,
            params: &p,
            all_token_ids: &[],
            num_prompt_tokens: 0,
            seq: None,
        })
        .collect();
    let vocab = 70; // 3 words, the last with 6 ids
    let mask = TokenMask::allowing(vocab, [0, 33, 69]);
    let masks = [None, Some(&mask), None];
    let routes = [Route::Greedy; 3];
    // Rows 2 and 1 of the batch, in that order, in this chunk.
    let plan = build_plan(&rows, &[2, 1], &routes, &[], &masks, vocab);
    let (at, n) = plan.mask_pairs;
    assert_eq!(n, 1);
    let w = &plan.words;
    let (b, bits) = (w[at] as usize, w[at + 1] as usize);
    assert_eq!(b, 1, "the chunk's second row is batch row 1");
    assert_eq!(&w[bits..bits + 3], &[1, 1 << 1, 1 << 5]);
    assert_eq!(w.len(), at + 2);
}

#[test]
fn a_head_is_finished_like_the_host_or_handed_back() {
    // 3000 finite logits, e^(-0.01 j) apart, in shuffled columns; the device would return
    // the best 1024 and the fixed-point total over all 3000.
    let n = 3000;
    let mut cols: Vec<u32> = (0..n as u32).collect();
    let mut z = 7u64;
    for i in (1..n).rev() {
        z = z.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        cols.swap(i, (z >> 33) as usize % (i + 1));
    }
    let mut logits = vec![0f32; n];
    for (j, &c) in cols.iter().enumerate() {
        logits[c as usize] = 1.0 - 0.01 * j as f32;
    }
    let device_out = |t: f32| {
        let mut cand: Vec<(u32, f32)> =
            (0..n as u32).map(|i| (i, logits[i as usize] / t)).collect();
        cand.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let total: u128 = cand
            .iter()
            .map(|&(_, v)| sampling::fixed_term(sampling::det_exp(f64::from(v - cand[0].1))))
            .sum();
        let mut out = vec![0u32; CAND_WORDS];
        out[0] = n as u32;
        for k in 0..4 {
            out[2 + k] = (total >> (32 * k)) as u32;
        }
        for (j, &(id, v)) in cand.iter().take(KMAX).enumerate() {
            out[META_WORDS + j] = id;
            out[META_WORDS + KMAX + j] = v.to_bits();
        }
        out
    };
    let mut decided = 0;
    for seed in 0..40u64 {
        for (top_p, min_p, t) in [(0.5, 0.0, 1.0), (0.95, 0.0, 0.7), (1.0, 0.1, 1.3)] {
            let p = SamplingParams {
                top_p,
                min_p,
                temperature: t,
                seed,
                ..SamplingParams::default()
            };
            let history = vec![1u32; seed as usize % 5];
            let r = SampleRow {
                logits_row: 0,
                params: &p,
                all_token_ids: &history,
                num_prompt_tokens: 1,
                seq: None,
            };
            let want = sampling::sample_row(&logits, &r).token_id;
            let out = device_out(t);
            if let Some(got) = finish_candidates(&r, &out) {
                assert_eq!(got, want, "seed {seed} top_p {top_p} min_p {min_p}");
                decided += 1;
            }
            let mut bad = out.clone();
            bad[1] = 1;
            assert_eq!(
                finish_candidates(&r, &bad),
                None,
                "overflow goes to the host"
            );
        }
    }
    assert_eq!(decided, 120, "all three cuts fall inside the head");
    // Top-p 0.99999 needs ~1150 candidates, more than the head: the host samples the row.
    let p = SamplingParams {
        top_p: 0.99999,
        ..SamplingParams::default()
    };
    let r = SampleRow {
        logits_row: 0,
        params: &p,
        all_token_ids: &[],
        num_prompt_tokens: 0,
        seq: None,
    };
    assert_eq!(finish_candidates(&r, &device_out(1.0)), None);
}

#[test]
fn a_row_with_a_penalty_state_sends_its_address_and_only_its_extras() {
    let p = SamplingParams {
        repetition_penalty: 1.5,
        ..SamplingParams::default()
    };
    let all = [5u32, 7, 5, 9];
    let rows = [SampleRow {
        logits_row: 0,
        params: &p,
        all_token_ids: &all,
        num_prompt_tokens: 1,
        seq: Some(4),
    }];
    let routes = [route(&rows[0])];
    let state = RowState {
        addr: 0x1234_5678_9abc_def0,
        extras: vec![(9, 1)],
    };
    let plan = build_plan(&rows, &[0], &routes, &[Some(state)], &[None], 50);
    let w = &plan.words;
    let (at, n) = (w[1] as usize, w[2] as usize);
    assert_eq!(
        &w[at..at + 2 * n],
        &[9, 1],
        "the extras, not the whole history"
    );
    assert_eq!(w[8] & PLAN_FROM_STATE, PLAN_FROM_STATE);
    assert_eq!((w[15], w[16]), (0x9abc_def0, 0x1234_5678));
}
