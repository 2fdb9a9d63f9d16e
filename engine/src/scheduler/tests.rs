//! Scheduler tests with hand-made runner outputs: no model.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::io::{RunnerOutput, SchedulerOutput, SeqOutput, TokenLogprobs};
use super::*;
use crate::kv_cache::HashKey;
use crate::sampling_params::SamplingParams;

pub(super) const BS: usize = 4;
pub(super) const EOS: u32 = 2;

pub(super) fn config() -> SchedulerConfig {
    SchedulerConfig {
        max_num_seqs: 4,
        max_num_batched_tokens: 16,
        max_prefill_with_decodes: None,
        block_size: BS,
        num_blocks: 65,
        max_model_len: 256,
        enable_prefix_caching: true,
        state: None,
        speculative: None,
    }
}

pub(super) fn scheduler(cfg: SchedulerConfig) -> Scheduler {
    Scheduler::with_hash_key(cfg, HashKey { k0: 1, k1: 2 }).expect("valid config")
}

pub(super) fn params(max_tokens: usize) -> SamplingParams {
    SamplingParams {
        max_tokens,
        eos_token_ids: vec![EOS],
        ..SamplingParams::default()
    }
}

pub(super) fn prompt(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32).map(|i| 100 + i * 3 + salt).collect()
}

pub(super) fn add(s: &mut Scheduler, id: u64, prompt: Vec<u32>, p: SamplingParams) {
    let t0 = Instant::now();
    add_at(s, id, prompt, p, t0 + Duration::from_millis(id));
}

/// Admit a request as the engine does: validated against the scheduler's own limits.
pub(super) fn add_at(
    s: &mut Scheduler,
    id: u64,
    prompt: Vec<u32>,
    p: SamplingParams,
    arrival: Instant,
) {
    let valid = s
        .admission_limits(u32::MAX as usize)
        .validate(prompt, p, arrival)
        .expect("admitted");
    s.add_request(id, valid);
}

/// A runner that samples `token(seq)` wherever the scheduler asks for a sample.
pub(super) fn run(
    out: &SchedulerOutput,
    token: impl Fn(&super::io::ScheduledSeq) -> u32,
) -> RunnerOutput {
    RunnerOutput {
        seqs: out
            .seqs
            .iter()
            .map(|q| SeqOutput {
                req_id: q.req_id,
                sampled: q.sample.then(|| token(q)),
                ..SeqOutput::default()
            })
            .collect(),
    }
}

/// One engine step with a runner that always samples token 7.
pub(super) fn step(s: &mut Scheduler) -> (SchedulerOutput, Vec<EngineEvent>) {
    let out = s.schedule();
    let events = s.update_from_output(&out, &run(&out, |_| 7));
    s.check_invariants().expect("invariants");
    (out, events)
}

/// (id, start_pos, number of tokens, sample) of each scheduled sequence.
pub(super) fn plan(out: &SchedulerOutput) -> Vec<(u64, usize, usize, bool)> {
    out.seqs
        .iter()
        .map(|q| (q.req_id, q.start_pos, q.token_ids.len(), q.sample))
        .collect()
}

fn finished_reason(events: &[EngineEvent], id: u64) -> Option<FinishReason> {
    events
        .iter()
        .find(|e| e.req_id == id)
        .and_then(|e| e.finished.as_ref().map(|f| f.reason.clone()))
}

/// Steps until `id` finishes; returns its output tokens and final counts.
pub(super) fn run_to_finish(
    s: &mut Scheduler,
    id: u64,
    token: impl Fn(usize) -> u32,
) -> (Vec<u32>, FinishedRequest) {
    let mut toks = Vec::new();
    for _ in 0..1000 {
        let out = s.schedule();
        let events = s.update_from_output(&out, &run(&out, |q| token(q.all_token_ids.len())));
        s.check_invariants().expect("invariants");
        for e in events.into_iter().filter(|e| e.req_id == id) {
            toks.extend(&e.new_token_ids);
            if let Some(f) = e.finished {
                return (toks, f);
            }
        }
    }
    panic!("request {id} never finished");
}

#[test]
fn requests_are_served_in_arrival_order() {
    let mut s = scheduler(SchedulerConfig {
        max_num_seqs: 2,
        ..config()
    });
    for id in 1..=3 {
        add(&mut s, id, prompt(3, 0), params(1));
    }
    let (out, events) = step(&mut s);
    assert_eq!(plan(&out), vec![(1, 0, 3, true), (2, 0, 3, true)]);
    assert_eq!(finished_reason(&events, 1), Some(FinishReason::Length));
    let (out, _) = step(&mut s);
    assert_eq!(plan(&out), vec![(3, 0, 3, true)]);
    assert_eq!(out.finished, vec![1, 2], "runner learns who left");
    assert!(!s.has_unfinished_requests());
}

#[test]
fn running_requests_are_ordered_by_arrival_time() {
    let mut s = scheduler(config());
    let t0 = Instant::now();
    // Added in the opposite order of their arrival stamps.
    add_at(
        &mut s,
        1,
        prompt(3, 0),
        params(5),
        t0 + Duration::from_millis(2),
    );
    add_at(
        &mut s,
        2,
        prompt(3, 1),
        params(5),
        t0 + Duration::from_millis(1),
    );
    let (out, _) = step(&mut s);
    assert_eq!(
        plan(&out).iter().map(|p| p.0).collect::<Vec<_>>(),
        vec![1, 2],
        "queue order"
    );
    let (out, _) = step(&mut s);
    assert_eq!(
        plan(&out).iter().map(|p| p.0).collect::<Vec<_>>(),
        vec![2, 1],
        "arrival order"
    );
}

#[test]
fn chunked_prefill_respects_the_token_budget() {
    let mut s = scheduler(config()); // budget 16
    add(&mut s, 1, prompt(40, 0), params(4));
    let mut plans = Vec::new();
    for _ in 0..3 {
        let (out, _) = step(&mut s);
        assert!(out.num_batched_tokens <= 16);
        plans.push(plan(&out));
    }
    assert_eq!(
        plans,
        vec![
            vec![(1, 0, 16, false)],
            vec![(1, 16, 16, false)],
            vec![(1, 32, 8, true)],
        ]
    );
    // The chunk's tokens are the prompt's, and the block table covers them.
    let out = s.schedule();
    assert_eq!(plan(&out), vec![(1, 40, 1, true)]);
    assert_eq!(
        out.seqs[0].token_ids,
        vec![7],
        "decode feeds the sampled token"
    );
    assert_eq!(out.seqs[0].block_ids.len(), 41usize.div_ceil(BS));
}

#[test]
fn budget_is_shared_running_first() {
    let mut s = scheduler(config());
    add(&mut s, 1, prompt(10, 0), params(5));
    add(&mut s, 2, prompt(10, 1), params(5));
    let (out, _) = step(&mut s);
    assert_eq!(plan(&out), vec![(1, 0, 10, true), (2, 0, 6, false)]);
    assert_eq!(out.num_batched_tokens, 16);
    let (out, _) = step(&mut s);
    assert_eq!(plan(&out), vec![(1, 10, 1, true), (2, 6, 4, true)]);
    assert_eq!(s.stats().num_batched_tokens, 5);
}

#[test]
fn max_num_seqs_caps_the_batch() {
    let mut s = scheduler(config()); // 4 seqs
    for id in 1..=6 {
        add(&mut s, id, prompt(2, id as u32), params(10));
    }
    let (out, _) = step(&mut s);
    assert_eq!(out.seqs.len(), 4);
    assert_eq!((s.num_running(), s.num_waiting()), (4, 2));
    let (out, _) = step(&mut s);
    assert_eq!(out.seqs.len(), 4, "no room while all four run");
}

#[test]
fn a_new_request_joins_the_running_batch() {
    let mut s = scheduler(config());
    add(&mut s, 1, prompt(5, 0), params(10));
    step(&mut s);
    step(&mut s);
    add(&mut s, 2, prompt(6, 1), params(10));
    let (out, _) = step(&mut s);
    assert_eq!(plan(&out), vec![(1, 6, 1, true), (2, 0, 6, true)]);
}

#[test]
fn prefix_cache_hit_skips_computed_tokens() {
    let mut s = scheduler(config());
    let shared = prompt(20, 0);
    add(&mut s, 1, shared.clone(), params(1));
    step(&mut s);
    step(&mut s);
    assert!(!s.has_unfinished_requests());

    let mut p2 = shared.clone();
    p2.extend([1, 2, 3]);
    add(&mut s, 2, p2, params(1));
    let (out, events) = step(&mut s);
    assert_eq!(
        plan(&out),
        vec![(2, 20, 3, true)],
        "5 cached blocks skipped"
    );
    assert_eq!(out.seqs[0].token_ids, vec![1, 2, 3]);
    let fin = events[0].finished.as_ref().expect("finished");
    assert_eq!(fin.num_cached_prompt_tokens, 20);
    assert_eq!(fin.num_prompt_tokens, 23);
    let stats = s.stats().prefix_cache;
    assert_eq!((stats.queries, stats.hits), (20 + 23, 20));

    // The same prompt again: all but its last block's worth (one token must run).
    add(&mut s, 3, shared.clone(), params(1));
    let (out, _) = step(&mut s);
    assert_eq!(plan(&out), vec![(3, 16, 4, true)]);

    // Prompt logprobs need every row: no lookup.
    let p = SamplingParams {
        prompt_logprobs: Some(0),
        ..params(1)
    };
    add(&mut s, 4, shared, p);
    let (out, _) = step(&mut s);
    assert_eq!(plan(&out), vec![(4, 0, 16, false)]);
    assert!(out.seqs[0].want_prompt_logprobs);
}

#[test]
fn prefix_caching_off_computes_everything() {
    let mut s = scheduler(SchedulerConfig {
        enable_prefix_caching: false,
        ..config()
    });
    add(&mut s, 1, prompt(8, 0), params(1));
    step(&mut s);
    add(&mut s, 2, prompt(9, 0), params(1));
    let (out, _) = step(&mut s);
    assert_eq!(plan(&out), vec![(2, 0, 9, true)]);
    assert_eq!(s.stats().prefix_cache.queries, 0);
}

#[test]
fn preemption_frees_blocks_requeues_first_and_the_victim_finishes() {
    // 6 usable blocks of 4 tokens; two requests of 8 prompt tokens that grow to 20, and a
    // third that waits for a batch slot.
    let mut s = scheduler(SchedulerConfig {
        num_blocks: 7,
        max_num_seqs: 2,
        ..config()
    });
    add(&mut s, 1, prompt(8, 0), params(12));
    add(&mut s, 2, prompt(8, 1), params(12));
    add(&mut s, 3, prompt(4, 9), params(1));
    let token = |len: usize| 1000 + len as u32;
    let mut outputs: HashMap<u64, Vec<u32>> = HashMap::new();
    let mut fins = HashMap::new();
    let mut preempted = false;
    let mut readmitted = false;
    for _ in 0..100 {
        if !s.has_unfinished_requests() {
            break;
        }
        let out = s.schedule();
        let ids: Vec<u64> = out.seqs.iter().map(|q| q.req_id).collect();
        if !out.preempted.is_empty() {
            assert!(!preempted, "one preemption is enough here");
            assert_eq!(out.preempted, vec![2], "the later arrival goes");
            assert_eq!(ids, vec![1]);
            assert!(s.kv_cache().block_ids(2).is_empty(), "its blocks are freed");
            assert_eq!(s.num_waiting(), 2);
            assert_eq!(s.stats().num_preemptions, 1);
            preempted = true;
        }
        if preempted && !readmitted && ids.contains(&2) {
            let q = &out.seqs[ids.iter().position(|&i| i == 2).unwrap_or(0)];
            assert_eq!(q.start_pos % BS, 0, "recomputed from a block boundary");
            assert_eq!(
                q.token_ids,
                q.all_token_ids[q.start_pos..],
                "generated tokens too"
            );
            assert!(q.sample);
            readmitted = true;
        }
        assert!(
            !ids.contains(&3) || !preempted || readmitted,
            "the preempted request is first in line"
        );
        let events = s.update_from_output(&out, &run(&out, |q| token(q.all_token_ids.len())));
        s.check_invariants().expect("invariants");
        for e in events {
            outputs
                .entry(e.req_id)
                .or_default()
                .extend(&e.new_token_ids);
            if let Some(f) = e.finished {
                fins.insert(e.req_id, f);
            }
        }
    }
    assert!(preempted && readmitted, "the cache is too small for both");
    assert!(!s.has_unfinished_requests());
    // Every output token exactly once, in order, despite the recompute.
    assert_eq!(outputs[&2], (8..20).map(token).collect::<Vec<_>>());
    assert_eq!(outputs[&1], (8..20).map(token).collect::<Vec<_>>());
    assert_eq!(fins[&2].reason, FinishReason::Length);
    assert_eq!(fins[&2].num_generated_tokens, 12);
    assert_eq!(fins[&2].num_preemptions, 1);
    assert_eq!(fins[&1].num_preemptions, 0);
    assert_eq!(s.stats().kv_cache_usage, 0.0);
}

#[test]
fn abort_frees_blocks_from_waiting_and_running() {
    let mut s = scheduler(SchedulerConfig {
        max_num_seqs: 1,
        ..config()
    });
    add(&mut s, 1, prompt(30, 0), params(10));
    add(&mut s, 2, prompt(30, 1), params(10));
    step(&mut s);
    assert!(s.stats().kv_cache_usage > 0.0);
    assert!(s.abort_request(2), "from waiting");
    assert!(s.abort_request(1), "from running");
    assert!(!s.abort_request(1), "already gone");
    assert_eq!(s.stats().kv_cache_usage, 0.0);
    s.check_invariants().expect("invariants");
    let out = s.schedule();
    assert!(out.seqs.is_empty());
    assert_eq!(out.finished, vec![2, 1]);
    assert!(!s.has_unfinished_requests());
}

#[test]
fn finish_request_reports_counts_and_frees() {
    let mut s = scheduler(config());
    add(&mut s, 1, prompt(6, 0), params(10));
    step(&mut s);
    step(&mut s);
    let f = s
        .finish_request(1, FinishReason::StopString("###".into()))
        .expect("known");
    assert_eq!(f.num_prompt_tokens, 6);
    assert_eq!(f.num_generated_tokens, 2);
    assert_eq!(f.reason.as_openai_str(), "stop");
    assert_eq!(s.stats().kv_cache_usage, 0.0);
    assert_eq!(s.finish_request(1, FinishReason::Abort), None);
}

#[test]
fn token_vectors_are_shared_not_copied() {
    let mut s = scheduler(config());
    add(&mut s, 1, prompt(4, 0), params(10));
    let out = s.schedule();
    let first = Arc::as_ptr(&out.seqs[0].all_token_ids);
    s.update_from_output(&out, &run(&out, |_| 7));
    drop(out);
    let out = s.schedule();
    assert_eq!(
        Arc::as_ptr(&out.seqs[0].all_token_ids),
        first,
        "appended in place"
    );
    assert_eq!(*out.seqs[0].all_token_ids, vec![100, 103, 106, 109, 7]);
    // Still correct when the engine keeps the old output around (it is copied then).
    let kept = out.clone();
    s.update_from_output(&out, &run(&out, |_| 8));
    let next = s.schedule();
    assert_eq!(next.seqs[0].all_token_ids.len(), 6);
    assert_eq!(kept.seqs[0].all_token_ids.len(), 5);
}

#[test]
fn prompt_logprobs_come_in_order_without_repeats() {
    let mut s = scheduler(config()); // budget 16
    let p = SamplingParams {
        prompt_logprobs: Some(1),
        ..params(2)
    };
    add(&mut s, 1, prompt(30, 0), p);
    let mut rows = Vec::new();
    for _ in 0..4 {
        let out = s.schedule();
        let mut res = run(&out, |_| 7);
        for (q, r) in out.seqs.iter().zip(&mut res.seqs) {
            if q.want_prompt_logprobs {
                let end = (q.start_pos + q.token_ids.len()).min(q.num_prompt_tokens - 1);
                r.prompt_logprobs = (q.start_pos..end)
                    .map(|p| TokenLogprobs {
                        token_id: q.all_token_ids[p + 1],
                        logprob: -(p as f32),
                        top: vec![],
                    })
                    .collect();
            }
        }
        for e in s.update_from_output(&out, &res) {
            rows.extend(e.prompt_logprobs);
        }
    }
    let got: Vec<u32> = rows.iter().map(|r| r.token_id).collect();
    assert_eq!(
        got,
        prompt(30, 0)[1..].to_vec(),
        "one row per prompt token after the first"
    );
}

/// A hybrid model's requests each need a state slot: with 2 slots and room for 4 sequences,
/// the third waits for one to finish; preemption frees the slot and the state restarts from
/// zero on resume.
#[test]
fn requests_wait_for_a_state_slot_and_preemption_frees_it() {
    use crate::kv_cache::{StateCacheConfig, StateInit};
    let mut s = scheduler(SchedulerConfig {
        num_blocks: 6, // 5 usable: two sequences of 11 cached tokens need 6
        state: Some(StateCacheConfig {
            num_slots: 2,
            num_checkpoints: 0,
            checkpoint_interval: 8,
        }),
        ..config()
    });
    add(&mut s, 1, prompt(5, 0), params(7));
    add(&mut s, 2, prompt(5, 1), params(7));
    add(&mut s, 3, prompt(2, 2), params(1));
    let (out, _) = step(&mut s);
    assert_eq!(plan(&out), vec![(1, 0, 5, true), (2, 0, 5, true)]);
    let inits: Vec<_> = out
        .seqs
        .iter()
        .map(|q| q.state.clone().map(|p| p.init))
        .collect();
    assert_eq!(inits, [Some(StateInit::Zero), Some(StateInit::Zero)]);
    assert_eq!(s.num_waiting(), 1, "request 3 waits for a slot");
    // Decode until the cache runs out: request 2 (the latest) is preempted and its slot
    // freed; when it is admitted again its state starts from zero.
    let mut preempted = false;
    let mut restarted = None;
    for _ in 0..30 {
        let (out, _) = step(&mut s);
        preempted |= out.preempted.contains(&2);
        if preempted && let Some(q) = out.seqs.iter().find(|q| q.req_id == 2 && q.start_pos == 0) {
            restarted = q.state.clone();
        }
        if !s.has_unfinished_requests() {
            break;
        }
    }
    assert!(
        preempted,
        "the cache of 5 blocks cannot hold both to the end"
    );
    assert_eq!(restarted.map(|p| p.init), Some(StateInit::Zero));
    assert!(!s.has_unfinished_requests());
    let pool = s.kv_cache().state_pool().expect("state on");
    assert_eq!(pool.num_free_slots(), 2);
}

#[test]
fn timed_steps_teach_the_policy_that_drafts_do_not_pay_here() {
    // Each draft adds 2 plain steps to this machine's step and every draft is accepted, so k drafts give 1 + k tokens for 1 + 2k steps: never worth it. The
    // prior (0.35) drafts the cap until the engine has timed a plain step and a drafted one.
    let mut s = scheduler(SchedulerConfig {
        max_model_len: 100_000,
        num_blocks: 30_000,
        speculative: Some(SpeculativeConfig {
            ladder: "1:2".parse().expect("ladder"),
            draft_cost: 0.35,
        }),
        ..config()
    });
    add(&mut s, 1, prompt(4, 0), params(5_000));
    let mut proposed = Vec::new();
    for _ in 0..400 {
        let out = s.schedule();
        let runner = RunnerOutput {
            seqs: out
                .seqs
                .iter()
                .map(|q| SeqOutput {
                    req_id: q.req_id,
                    sampled: q.sample.then_some(7),
                    accepted: q.token_ids[q.token_ids.len() - q.num_drafts..].to_vec(),
                    drafts: vec![7; q.propose],
                    ..SeqOutput::default()
                })
                .collect(),
        };
        s.update_from_output(&out, &runner);
        let k = out.seqs[0].num_drafts;
        s.record_step_time(&out, 0.01 * (1.0 + 2.0 * k as f64));
        proposed.push(out.seqs[0].propose);
    }
    assert_eq!(proposed[1], 2, "the prior drafts the cap: {proposed:?}");
    let late = &proposed[100..];
    assert!(
        late.iter().filter(|&&k| k > 0).count() <= 300 / 16 + 2,
        "still drafting: {late:?}"
    );
    let cost = s.stats().spec.draft_cost;
    assert!((cost - 2.0).abs() < 1e-6, "{cost}");
}

#[test]
fn prompts_take_small_chunks_while_others_decode() {
    let mut s = scheduler(SchedulerConfig {
        max_prefill_with_decodes: Some(5),
        ..config() // budget 16
    });
    // Nothing decodes: a prompt takes the whole budget.
    add(&mut s, 1, prompt(20, 0), params(20));
    assert_eq!(plan(&step(&mut s).0), vec![(1, 0, 16, false)]);
    assert_eq!(plan(&step(&mut s).0), vec![(1, 16, 4, true)]);
    // 1 decodes: a new prompt advances 5 tokens a step beside it, admitted or running.
    add(&mut s, 2, prompt(12, 1), params(20));
    assert_eq!(
        plan(&step(&mut s).0),
        vec![(1, 20, 1, true), (2, 0, 5, false)]
    );
    assert_eq!(
        plan(&step(&mut s).0),
        vec![(1, 21, 1, true), (2, 5, 5, false)]
    );
    assert_eq!(
        plan(&step(&mut s).0),
        vec![(1, 22, 1, true), (2, 10, 2, true)]
    );
    // Two prompts share the 5, oldest first; the second waits in the running batch.
    add(&mut s, 3, prompt(4, 2), params(20));
    add(&mut s, 4, prompt(6, 3), params(20));
    let prompts = |out: &SchedulerOutput| -> Vec<_> {
        plan(out)
            .into_iter()
            .filter(|p| p.0 >= 3 && p.1 < [4, 6][p.0 as usize - 3])
            .collect()
    };
    assert_eq!(
        prompts(&step(&mut s).0),
        vec![(3, 0, 4, true), (4, 0, 1, false)]
    );
    assert_eq!(prompts(&step(&mut s).0), vec![(4, 1, 5, true)]);
    let (out, _) = step(&mut s);
    assert_eq!(out.seqs.len(), 4, "all four decode");
    assert_eq!(out.num_batched_tokens, 4);
}

#[test]
fn a_zero_prefill_cap_is_refused() {
    let cfg = SchedulerConfig {
        max_prefill_with_decodes: Some(0),
        ..config()
    };
    assert!(matches!(
        Scheduler::with_hash_key(cfg, HashKey { k0: 1, k1: 2 }),
        Err(SchedulerConfigError::Zero("max_prefill_with_decodes"))
    ));
}
