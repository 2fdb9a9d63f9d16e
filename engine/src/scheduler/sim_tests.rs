//! Randomized simulation: many requests of random lengths through a tiny cache, with a fake
//! runner that keeps a shadow KV cache (the token and position written to each slot) and
//! checks that every sequence attends over exactly its own tokens. Invariants are checked
//! every step; at the end every request must have finished with exactly the output an
//! unbatched run would give.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::io::{RunnerOutput, SchedulerOutput, SeqOutput, TokenLogprobs};
use super::tests::{BS, scheduler};
use super::*;
use crate::admission::AddRequestError;
use crate::runner::BlockTables;
use crate::sampling_params::SamplingParams;

const EOS: u32 = 1;
const VOCAB: u32 = 50;

/// The token a request samples as its `index`-th output: a pure function, so the expected
/// output does not depend on batching, chunking, caching or preemption.
fn oracle_token(req: u64, index: usize) -> u32 {
    let mut x = req.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ (index as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 31;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 29;
    // About one in 25 samples is EOS.
    (x % u64::from(VOCAB)) as u32
}

/// What an unbatched engine would output for this request.
fn expected_output(
    req: u64,
    prompt_len: usize,
    p: &SamplingParams,
    max_model_len: usize,
) -> (Vec<u32>, FinishReason) {
    let mut out = Vec::new();
    loop {
        let t = oracle_token(req, out.len());
        out.push(t);
        let n = out.len();
        let stops =
            (!p.ignore_eos && p.eos_token_ids.contains(&t)) || p.stop_token_ids.contains(&t);
        if n > p.min_tokens && stops {
            return (out, FinishReason::Stop { token: t });
        }
        if n >= p.max_tokens || prompt_len + n >= max_model_len {
            return (out, FinishReason::Length);
        }
    }
}

/// A fake runner over a shadow KV cache: `(token, position)` per slot. With speculation it
/// verifies drafts against the oracle and proposes new ones, most right, some wrong.
/// It reads block tables only from the runner's persistent ones, fed by the step's deltas.
struct ShadowRunner {
    slots: Vec<Option<(u32, usize)>>,
    rng: StdRng,
    tables: BlockTables,
    /// Block ids the steps' deltas carried, and those whole tables would have.
    ids_sent: usize,
    ids_full: usize,
}

impl ShadowRunner {
    fn execute(&mut self, out: &SchedulerOutput, s: &Scheduler) -> RunnerOutput {
        // The persistent tables after this step's deltas are the scheduler's full view, and
        // no two sequences of a step share a row.
        self.tables.apply(out, 0).expect("deltas apply");
        let mut rows = std::collections::HashSet::new();
        for q in &out.seqs {
            assert!(rows.insert(q.table.slot), "row {} shared", q.table.slot);
            assert!((q.table.slot as usize) < s.config().max_num_seqs);
            assert_eq!(
                self.tables.row(q.table.slot),
                s.kv_cache().block_ids(q.req_id)
            );
            assert_eq!(self.tables.row(q.table.slot), q.block_ids);
            self.ids_sent += q.table.new_block_ids.len();
            self.ids_full += q.block_ids.len();
        }
        let tables = &self.tables;
        // Write every sequence's new KV first (as a layer writes all rows before attention).
        for q in &out.seqs {
            let table = tables.row(q.table.slot);
            for (j, &t) in q.token_ids.iter().enumerate() {
                let pos = q.start_pos + j;
                let block = table[pos / BS];
                let pool = s.kv_cache().pool();
                assert!(
                    pool.ref_count(block) == 1 && pool.block_hash(block).is_none(),
                    "request {} writes into shared or cached block {block}",
                    q.req_id
                );
                self.slots[block as usize * BS + pos % BS] = Some((t, pos));
            }
        }
        // Then "attend": every row sees exactly the sequence's own tokens at their positions.
        let mut res = RunnerOutput::default();
        for q in &out.seqs {
            let table = tables.row(q.table.slot);
            let end = q.start_pos + q.token_ids.len();
            let own = end - q.num_drafts;
            assert!(q.num_drafts == 0 || (q.sample && q.token_ids.len() == 1 + q.num_drafts));
            assert_eq!(
                q.token_ids[..own - q.start_pos],
                q.all_token_ids[q.start_pos..own]
            );
            assert!(table.len() * BS >= end, "block table too short");
            for pos in 0..end {
                let slot = table[pos / BS] as usize * BS + pos % BS;
                let want = match pos < own {
                    true => q.all_token_ids[pos],
                    false => q.token_ids[pos - q.start_pos],
                };
                assert_eq!(
                    self.slots[slot],
                    Some((want, pos)),
                    "request {} position {pos}: wrong KV in slot {slot}",
                    q.req_id
                );
            }
            // Drafts are accepted while they are what the oracle samples; the row after the
            // last accepted one samples the next token.
            let index = q.all_token_ids.len() - q.num_prompt_tokens;
            let drafts = &q.token_ids[own - q.start_pos..];
            let accepted = (0..drafts.len())
                .take_while(|&j| drafts[j] == oracle_token(q.req_id, index + j))
                .count();
            let sampled = q.sample.then(|| oracle_token(q.req_id, index + accepted));
            let next = index + accepted + 1;
            let proposed = match q.sample {
                true => (0..q.propose)
                    .map(|i| match self.rng.random_bool(0.7) {
                        true => oracle_token(q.req_id, next + i),
                        false => self.rng.random_range(0..VOCAB),
                    })
                    .collect(),
                false => Vec::new(),
            };
            let prompt_rows = q.start_pos..own.min(q.num_prompt_tokens - 1);
            res.seqs.push(SeqOutput {
                req_id: q.req_id,
                sampled,
                accepted: drafts[..accepted].to_vec(),
                drafts: proposed,
                accepted_logprobs: Vec::new(),
                sampled_logprobs: None,
                prompt_logprobs: if q.want_prompt_logprobs {
                    prompt_rows
                        .map(|p| TokenLogprobs {
                            token_id: q.all_token_ids[p + 1],
                            logprob: -(p as f32),
                            top: vec![],
                        })
                        .collect()
                } else {
                    Vec::new()
                },
            });
        }
        res
    }
}

struct Tracked {
    prompt: Vec<u32>,
    params: SamplingParams,
    output: Vec<u32>,
    prompt_rows: Vec<u32>,
    finished: Option<FinishedRequest>,
    cut_short: bool,
}

/// Runs one random workload to the end; returns the final stats.
fn simulate(seed: u64) -> SchedulerStats {
    let mut rng = StdRng::seed_from_u64(seed);
    let cfg = SchedulerConfig {
        max_num_seqs: rng.random_range(1..8),
        max_num_batched_tokens: rng.random_range(1..40),
        max_prefill_with_decodes: rng.random_bool(0.3).then(|| rng.random_range(1..12)),
        block_size: BS,
        num_blocks: rng.random_range(14..30),
        max_model_len: rng.random_range(40..80),
        enable_prefix_caching: rng.random_bool(0.8),
        state: None,
        speculative: rng.random_bool(0.5).then(|| SpeculativeConfig {
            draft_cost: [0.0, 0.15][rng.random_range(0..2)],
            ..SpeculativeConfig::flat(rng.random_range(1..5), rng.random_range(1..6))
        }),
    };
    // The engine's queue limit (its gate counts the scheduler's waiting queue).
    let max_queued = rng.random_range(1..20);
    let mut s = scheduler(cfg);
    let limits = s.admission_limits(VOCAB as usize);
    let mut runner = ShadowRunner {
        slots: vec![None; cfg.num_blocks * BS],
        rng: StdRng::seed_from_u64(seed ^ 0x5bec),
        tables: BlockTables::default(),
        ids_sent: 0,
        ids_full: 0,
    };
    // A few shared prefixes so the prefix cache gets hits.
    let prefixes: Vec<Vec<u32>> = (0..3)
        .map(|_| {
            (0..rng.random_range(4..24))
                .map(|_| rng.random_range(2..VOCAB))
                .collect()
        })
        .collect();
    let total = 120;
    let t0 = Instant::now();
    let mut reqs: HashMap<u64, Tracked> = HashMap::new();
    let mut next_id = 0u64;
    let mut pending: Option<(u64, Tracked)> = None;

    for step in 0..20_000 {
        // Arrivals.
        for _ in 0..rng.random_range(0..3) {
            if next_id >= total && pending.is_none() {
                break;
            }
            let (id, t) = pending.take().unwrap_or_else(|| {
                next_id += 1;
                (
                    next_id,
                    random_request(&mut rng, &prefixes, cfg.max_model_len),
                )
            });
            let arrival = t0 + Duration::from_micros(id);
            if s.num_waiting() >= max_queued {
                pending = Some((id, t));
                break;
            }
            match limits.validate(t.prompt.clone(), t.params.clone(), arrival) {
                Ok(valid) => {
                    s.add_request(id, valid);
                    reqs.insert(id, t);
                }
                Err(AddRequestError::TooLong { .. }) => {}
                Err(e) => panic!("unexpected refusal: {e}"),
            }
        }
        // Clients that go away, and stop strings found by the output side.
        if rng.random_bool(0.02) {
            let live: Vec<u64> = reqs
                .iter()
                .filter(|(_, t)| t.finished.is_none() && !t.cut_short)
                .map(|(&i, _)| i)
                .collect();
            if !live.is_empty() {
                let id = live[rng.random_range(0..live.len())];
                if rng.random_bool(0.5) {
                    assert!(s.abort_request(id));
                } else {
                    assert!(
                        s.finish_request(id, FinishReason::StopString("x".into()))
                            .is_some()
                    );
                }
                if let Some(t) = reqs.get_mut(&id) {
                    t.cut_short = true;
                }
            }
        }

        let out = s.schedule();
        assert!(
            out.num_batched_tokens <= cfg.max_num_batched_tokens,
            "budget"
        );
        let tokens: usize = out.seqs.iter().map(|q| q.token_ids.len()).sum();
        assert_eq!(tokens, out.num_batched_tokens);
        assert!(out.seqs.len() <= cfg.max_num_seqs, "max_num_seqs");
        assert!(out.seqs.iter().all(|q| !q.token_ids.is_empty()));
        let usage = s.stats().kv_cache_usage;
        assert!((0.0..=1.0).contains(&usage), "usage {usage}");
        s.check_invariants()
            .unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));

        let res = runner.execute(&out, &s);
        for e in s.update_from_output(&out, &res) {
            let t = reqs.get_mut(&e.req_id).expect("tracked");
            assert!(t.finished.is_none(), "event after finish");
            t.output.extend(&e.new_token_ids);
            t.prompt_rows
                .extend(e.prompt_logprobs.iter().map(|r| r.token_id));
            t.finished = e.finished;
        }
        drop(out);
        s.check_invariants()
            .unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));

        if next_id >= total && pending.is_none() && !s.has_unfinished_requests() {
            break;
        }
    }
    assert!(
        !s.has_unfinished_requests(),
        "seed {seed}: requests left unfinished: livelock?"
    );
    assert_eq!(s.stats().kv_cache_usage, 0.0, "seed {seed}: blocks leaked");
    // Each block id crosses once per admission, not once per step.
    assert!(
        runner.ids_sent < runner.ids_full,
        "seed {seed}: {} ids sent, {} in whole tables",
        runner.ids_sent,
        runner.ids_full
    );
    assert_eq!(s.kv_cache().num_free_blocks(), cfg.num_blocks - 1);

    let mut completed = 0;
    for (id, t) in &reqs {
        if t.cut_short {
            continue;
        }
        let f = t
            .finished
            .as_ref()
            .unwrap_or_else(|| panic!("seed {seed}: request {id} never finished"));
        let (want, why) = expected_output(*id, t.prompt.len(), &t.params, cfg.max_model_len);
        assert_eq!(t.output, want, "seed {seed}: request {id} output");
        assert_eq!(f.reason, why);
        assert_eq!(f.num_generated_tokens, want.len());
        assert_eq!(f.num_prompt_tokens, t.prompt.len());
        if t.params.prompt_logprobs.is_some() {
            assert_eq!(
                t.prompt_rows,
                t.prompt[1..],
                "seed {seed}: request {id} prompt logprobs"
            );
        }
        completed += 1;
    }
    assert!(
        completed > total / 2,
        "seed {seed}: only {completed} requests ran to the end"
    );
    s.stats()
}

fn random_request(rng: &mut StdRng, prefixes: &[Vec<u32>], max_model_len: usize) -> Tracked {
    let mut prompt = if rng.random_bool(0.6) {
        prefixes[rng.random_range(0..prefixes.len())].clone()
    } else {
        Vec::new()
    };
    for _ in 0..rng.random_range(1..24) {
        prompt.push(rng.random_range(2..VOCAB));
    }
    prompt.truncate(max_model_len - 1);
    let params = SamplingParams {
        // Admission refuses prompt + max_tokens beyond the context (admission.rs).
        max_tokens: rng.random_range(1..40).min(max_model_len - prompt.len()),
        min_tokens: rng.random_range(0..3),
        eos_token_ids: vec![EOS],
        ignore_eos: rng.random_bool(0.2),
        stop_token_ids: if rng.random_bool(0.3) {
            vec![rng.random_range(2..VOCAB)]
        } else {
            vec![]
        },
        prompt_logprobs: rng.random_bool(0.15).then_some(1),
        ..SamplingParams::default()
    };
    Tracked {
        prompt,
        params,
        output: Vec::new(),
        prompt_rows: Vec::new(),
        finished: None,
        cut_short: false,
    }
}

#[test]
fn random_workloads_all_finish_with_the_right_output() {
    let (mut preemptions, mut hits) = (0, 0);
    let mut spec = SpecDecodeStats::default();
    for seed in 0..40 {
        let st = simulate(seed);
        preemptions += st.num_preemptions;
        hits += st.prefix_cache.hits;
        spec.num_drafts += st.spec.num_drafts;
        spec.num_draft_tokens += st.spec.num_draft_tokens;
        spec.num_accepted_tokens += st.spec.num_accepted_tokens;
        spec.num_paused_steps += st.spec.num_paused_steps;
        let per_pos = st
            .spec
            .accepted_per_pos
            .iter()
            .zip(&st.spec.proposed_per_pos);
        assert!(
            per_pos.clone().all(|(a, p)| a <= p),
            "seed {seed}: {:?}",
            st.spec
        );
        assert_eq!(
            per_pos.map(|(a, _)| a).sum::<u64>(),
            st.spec.num_accepted_tokens
        );
    }
    // The workloads must exercise what they are meant to check: drafts accepted whole, in
    // part and not at all, and drafting paused by a full batch.
    assert!(preemptions > 100, "only {preemptions} preemptions");
    assert!(hits > 1000, "only {hits} prefix-cache hit tokens");
    assert!(
        spec.num_accepted_tokens > 1000
            && spec.num_accepted_tokens < spec.num_draft_tokens
            && spec.num_paused_steps > 100,
        "speculation barely exercised: {spec:?}"
    );
}
