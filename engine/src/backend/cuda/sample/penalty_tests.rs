//! The penalty states against the host sampler, with the device's work done on the host: the
//! absorb and prepare kernels' arithmetic in Rust (the kernels themselves are checked against
//! the same host code by kernels/dev/host_emulation, `t_sample_state`).

use std::collections::HashMap;

use super::penalty_state::{
    ABSORB_WORDS, MAX_EXTRAS, PenaltyStates, RowState, STALE_CALLS, STATE_PROMPT,
};
use crate::backend::sampling::{self, SampleRow};
use crate::sampling_params::SamplingParams;

/// Host copies of the device states, by address.
#[derive(Default)]
struct Mirror {
    bufs: HashMap<u64, Vec<u32>>,
    next: u64,
}

impl Mirror {
    fn sync(
        &mut self,
        states: &mut PenaltyStates<()>,
        rows: &[SampleRow<'_>],
        vocab: usize,
    ) -> Vec<Option<RowState>> {
        let idx: Vec<usize> = (0..rows.len()).collect();
        let (bufs, next) = (&mut self.bufs, &mut self.next);
        let synced = states.sync(rows, &idx, vocab, |n| {
            *next += 1;
            bufs.insert(*next, vec![0; n]);
            Some(((), *next))
        });
        // sample_penalty_absorb.
        for seg in synced.work[..synced.segments * ABSORB_WORDS].chunks(ABSORB_WORDS) {
            let addr = u64::from(seg[0]) | (u64::from(seg[1]) << 32);
            let buf = self.bufs.get_mut(&addr).expect("a live state");
            let tokens = &synced.work[seg[2] as usize..(seg[2] + seg[3]) as usize];
            for (i, &t) in tokens.iter().enumerate() {
                if (t as usize) < vocab {
                    if i as u32 >= seg[4] {
                        buf[t as usize] += 1;
                    } else {
                        buf[t as usize] |= STATE_PROMPT;
                    }
                }
            }
        }
        synced.rows
    }

    /// sample_prepare's penalties from a state: every column, its word plus the extras.
    fn penalised(&self, logits: &[f32], p: &SamplingParams, s: &RowState) -> Vec<f32> {
        let buf = &self.bufs[&s.addr];
        assert!(s.extras.len() <= MAX_EXTRAS);
        (0..logits.len())
            .map(|i| {
                let mut seen = buf[i] != 0;
                let mut count = buf[i] & !STATE_PROMPT;
                for &(id, c) in &s.extras {
                    if id as usize == i {
                        seen = true;
                        count += c;
                    }
                }
                // A token outside the history keeps its logit (penalise treats every token
                // it is given as one of the history's).
                if seen {
                    sampling::penalise(logits[i], count, p)
                } else {
                    logits[i]
                }
            })
            .collect()
    }
}

/// The host sampler's penalties (`sample_row`'s first step).
fn host_penalised(logits: &[f32], r: &SampleRow<'_>) -> Vec<f32> {
    let mut l = logits.to_vec();
    for (t, c) in sampling::penalty_entries(r.all_token_ids, r.output(), r.params, l.len()) {
        l[t as usize] = sampling::penalise(l[t as usize], c, r.params);
    }
    l
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
    fn below(&mut self, n: usize) -> usize {
        self.next() as usize % n
    }
    fn logits(&mut self, vocab: usize) -> Vec<f32> {
        (0..vocab)
            .map(|_| (self.below(20_000) as f32 - 10_000.0) / 1000.0)
            .collect()
    }
    /// A token: often one of a few, so counts grow; now and then one past the vocabulary.
    fn token(&mut self, vocab: usize) -> u32 {
        match self.below(10) {
            0..=3 => self.below(12) as u32,
            4 => (vocab + self.below(5)) as u32,
            _ => self.below(vocab) as u32,
        }
    }
}

fn row<'a>(p: &'a SamplingParams, h: &'a [u32], prompt: usize, seq: Option<u64>) -> SampleRow<'a> {
    SampleRow {
        logits_row: 0,
        params: p,
        all_token_ids: h,
        num_prompt_tokens: prompt,
        seq,
    }
}

/// Rows read from the states give the host sampler's penalised logits bit for bit, so the same
/// token (the device's later kernels are the host's on a penalised row).
fn check_rows(
    m: &Mirror,
    rows: &[SampleRow<'_>],
    states: &[Option<RowState>],
    vocab: usize,
    rng: &mut Rng,
) {
    for (r, s) in rows.iter().zip(states) {
        let s = s
            .as_ref()
            .expect("every penalised row of a sequence has a state");
        let logits = rng.logits(vocab);
        let want = host_penalised(&logits, r);
        let got = m.penalised(&logits, r.params, s);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&got),
            bits(&want),
            "history of {}",
            r.all_token_ids.len()
        );
        let plain = SamplingParams {
            repetition_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            ..r.params.clone()
        };
        let from_state = sampling::sample_row(
            &got,
            &SampleRow {
                params: &plain,
                ..r.clone()
            },
        );
        assert_eq!(
            from_state.token_id,
            sampling::sample_row(&logits, r).token_id
        );
    }
}

#[test]
fn a_sequence_over_many_steps_matches_the_host_sampler_at_every_step() {
    let vocab = 400;
    let mut rng = Rng(11);
    for p in [
        SamplingParams {
            repetition_penalty: 1.3,
            frequency_penalty: 0.4,
            presence_penalty: 0.2,
            temperature: 0.8,
            seed: 5,
            ..SamplingParams::default()
        },
        SamplingParams {
            repetition_penalty: 0.9,
            temperature: 0.0,
            ..SamplingParams::default()
        },
        SamplingParams {
            frequency_penalty: -0.3,
            presence_penalty: 0.5,
            top_k: 20,
            min_tokens: 40,
            eos_token_ids: vec![3],
            ..SamplingParams::default()
        },
    ] {
        let mut states = PenaltyStates::<()>::default();
        let mut m = Mirror::default();
        let prompt = 60;
        let mut h: Vec<u32> = (0..prompt).map(|_| rng.token(vocab)).collect();
        let mut rebuilds = 0;
        for step in 0..240 {
            // Speculative steps: the committed row, then two drafts past it.
            let drafts: Vec<u32> = if step % 3 == 1 {
                (0..2).map(|_| rng.token(vocab)).collect()
            } else {
                Vec::new()
            };
            let ctx: Vec<Vec<u32>> = (1..=drafts.len())
                .map(|j| [&h[..], &drafts[..j]].concat())
                .collect();
            let mut rows = vec![row(&p, &h, prompt, Some(7))];
            rows.extend(ctx.iter().map(|c| row(&p, c, prompt, Some(7))));
            let synced = m.sync(&mut states, &rows, vocab);
            check_rows(&m, &rows, &synced, vocab, &mut rng);
            let expected_rebuilds = match step {
                0 | 100 | 180 => rebuilds + 1,
                _ => rebuilds,
            };
            assert_eq!(states.rebuilds, expected_rebuilds, "step {step}");
            rebuilds = states.rebuilds;
            // The step's tokens: an accepted draft now and then, then a sampled one.
            if !drafts.is_empty() && step % 2 == 0 {
                h.push(drafts[0]);
            }
            h.push(rng.token(vocab));
            match step {
                // A rollback (a preemption's recompute, a speculative rewind): shorter.
                99 => h.truncate(h.len() - 5),
                // The id taken by another history of the same length: its marks differ.
                179 => {
                    for t in &mut h[..prompt] {
                        *t = (*t + 1) % vocab as u32;
                    }
                }
                _ => {}
            }
        }
        assert_eq!(states.len(), 1);
        states.end(&[7]);
        assert_eq!(states.len(), 0, "an ended sequence frees its state");
    }
}

#[test]
fn rows_without_a_sequence_or_penalties_take_no_state() {
    let (vocab, h) = (100, [1u32, 2, 3, 2, 5]);
    let pen = SamplingParams {
        repetition_penalty: 1.2,
        ..SamplingParams::default()
    };
    let plain = SamplingParams::default();
    let mut states = PenaltyStates::<()>::default();
    let mut m = Mirror::default();
    let rows = [row(&pen, &h, 2, None), row(&plain, &h, 2, Some(1))];
    assert_eq!(m.sync(&mut states, &rows, vocab), vec![None, None]);
    assert_eq!(states.len(), 0);
    // A seq-less row beside a state row: the state row reads its state, the other none.
    let rows = [row(&pen, &h, 2, None), row(&pen, &h, 2, Some(1))];
    let got = m.sync(&mut states, &rows, vocab);
    assert!(got[0].is_none() && got[1].is_some());
}

#[test]
fn too_many_tokens_past_the_state_fall_back_to_the_entry_list() {
    let vocab = 1000;
    let p = SamplingParams {
        presence_penalty: 0.5,
        ..SamplingParams::default()
    };
    let h: Vec<u32> = (0..20).collect();
    let long: Vec<u32> = (0..20 + MAX_EXTRAS as u32 + 1).collect();
    let mut states = PenaltyStates::<()>::default();
    let mut m = Mirror::default();
    let rows = [row(&p, &h, 4, Some(3)), row(&p, &long, 4, Some(3))];
    let got = m.sync(&mut states, &rows, vocab);
    assert!(got[0].is_some() && got[1].is_none());
    // A row of the sequence whose history is not the state's continued: no state either.
    let mut other = h.clone();
    other[19] = 999;
    other.push(1);
    let rows = [row(&p, &h, 4, Some(3)), row(&p, &other, 4, Some(3))];
    let got = m.sync(&mut states, &rows, vocab);
    assert!(got[0].is_some() && got[1].is_none());
}

#[test]
fn states_not_seen_go_stale_and_the_cache_stays_under_its_budget() {
    let vocab = 100;
    let p = SamplingParams {
        repetition_penalty: 1.1,
        ..SamplingParams::default()
    };
    let h = [1u32, 2, 3];
    let mut states = PenaltyStates::<()>::default();
    let mut m = Mirror::default();
    m.sync(&mut states, &[row(&p, &h, 1, Some(1))], vocab);
    for _ in 0..STALE_CALLS {
        m.sync(&mut states, &[row(&p, &h, 1, Some(2))], vocab);
    }
    assert_eq!(states.len(), 2, "seen within STALE_CALLS calls: kept");
    m.sync(&mut states, &[row(&p, &h, 1, Some(2))], vocab);
    assert_eq!(states.len(), 1, "unseen for longer: dropped");

    // Room for two states: a third in the same call goes without; later the oldest makes way.
    let mut states = PenaltyStates::<()>::default();
    states.max_bytes = 2 * vocab * 4;
    let three = [
        row(&p, &h, 1, Some(1)),
        row(&p, &h, 1, Some(2)),
        row(&p, &h, 1, Some(3)),
    ];
    let got = m.sync(&mut states, &three, vocab);
    assert_eq!(got.iter().filter(|s| s.is_some()).count(), 2);
    assert_eq!(states.len(), 2);
    let got = m.sync(&mut states, &three[2..], vocab);
    assert!(got[0].is_some());
    assert_eq!(states.len(), 2);
}
