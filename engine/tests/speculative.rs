//! Speculative decoding with the MTP head on the Qwen3.5 hybrid fixtures (their `mtp.*`
//! heads are random: `tests/fixtures/make_mtp_heads.py`), through the engine's own scheduler
//! and runner with chunked prefill, prefix caching (state checkpoints), and several sequences
//! a step:
//!
//! - greedy and seeded sampling give token for token what they give without speculation,
//!   with the head's own drafts (nearly all rejected: the head is random) and with drafts
//!   replaced by ones mostly right (taken from the run without speculation, cut at a random
//!   place), which exercises acceptance, the KV cache's roll back by length and the recurrent
//!   state's roll back from scratch slots;
//! - so does adaptive drafting (`scheduler/draft_policy.rs`), whose drafts a step change with
//!   the batch and the acceptance so far, and which stops drafting for the random head;
//! - the drafts the head proposes step by step (its own KV layer rolled back with the rest)
//!   are the drafts it proposes for the same context computed from scratch.

use std::collections::HashMap;
use std::time::Instant;

use metrale_engine::sampling_params::SamplingParams;
use metrale_engine::scheduler::io::{RunnerOutput, SchedulerOutput};
use metrale_engine::scheduler::{SpecDecodeStats, SpeculativeConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

mod reference_support;
mod spec_support;
use reference_support::model_dir;
use spec_support::{Engine, SEQS};

const FIXTURES: [&str; 2] = ["qwen3_5-hybrid-dense", "qwen3_5-hybrid-moe"];
const DRAFTS: usize = 3;

fn engine(name: &str, drafts: Option<usize>) -> Engine {
    engine_with(name, drafts.map(|n| SpeculativeConfig::flat(n, SEQS)))
}

fn engine_with(name: &str, speculative: Option<SpeculativeConfig>) -> Engine {
    spec_support::engine(&model_dir(name), speculative, (96, 24, 512))
}

/// Prompts of several lengths (one longer than a step's budget), two sharing a prefix that
/// spans a state checkpoint; greedy, and seeded sampling.
fn requests() -> Vec<(Vec<u32>, SamplingParams)> {
    let mut rng = StdRng::seed_from_u64(42);
    let mut tokens = |n: usize| -> Vec<u32> { (0..n).map(|_| rng.random_range(2..1500)).collect() };
    let shared = tokens(20);
    let prompts = [
        tokens(5),
        [shared.clone(), tokens(3)].concat(),
        tokens(41),
        [shared, tokens(9)].concat(),
        tokens(2),
    ];
    prompts
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let params = SamplingParams {
                temperature: if i == 3 { 0.9 } else { 0.0 },
                seed: 7 + i as u64,
                max_tokens: 20 + 3 * i,
                ..SamplingParams::default()
            };
            (p, params)
        })
        .collect()
}

/// Runs `reqs` to the end (added two at a time, so they overlap at different points),
/// calling `tamper` on each step's runner output before the scheduler sees it. Each
/// request's output tokens, and the speculation counters.
fn run(
    e: &mut Engine,
    reqs: &[(Vec<u32>, SamplingParams)],
    tamper: &mut dyn FnMut(&SchedulerOutput, &mut RunnerOutput),
) -> (HashMap<u64, Vec<u32>>, SpecDecodeStats) {
    spec_support::run(e, reqs, (3, 2000), tamper)
}

/// Replace `drafts` with the true next tokens (`truth`), but for the k-th, made wrong (k
/// random, sometimes past the end: then all are right).
fn mostly_right(drafts: &mut [u32], truth: &[u32], rng: &mut StdRng) {
    let wrong = rng.random_range(0..DRAFTS + 2);
    for (k, d) in drafts.iter_mut().enumerate() {
        let right = truth.get(k).copied().unwrap_or(0);
        *d = if k == wrong {
            (right + 1) % 1536
        } else {
            right
        };
    }
}

/// Replaces each step's drafts by mostly right ones ([`mostly_right`] against `want`, the
/// run without speculation), counting what each request emitted so far.
struct MostlyRight<'a> {
    want: &'a HashMap<u64, Vec<u32>>,
    rng: StdRng,
    emitted: HashMap<u64, usize>,
}

impl<'a> MostlyRight<'a> {
    fn new(want: &'a HashMap<u64, Vec<u32>>, seed: u64) -> Self {
        Self {
            want,
            rng: StdRng::seed_from_u64(seed),
            emitted: HashMap::new(),
        }
    }

    /// `seen` gets each sequence's own drafts first, with the request and its outputs so far.
    fn tamper(
        &mut self,
        s: &SchedulerOutput,
        r: &mut RunnerOutput,
        seen: &mut dyn FnMut(u64, usize, &[u32]),
    ) {
        for (q, o) in s.seqs.iter().zip(&mut r.seqs) {
            let done = self.emitted.entry(q.req_id).or_default();
            *done += o.accepted.len() + usize::from(o.sampled.is_some());
            seen(q.req_id, *done, &o.drafts);
            let truth = &self.want[&q.req_id][*done..];
            mostly_right(&mut o.drafts, truth, &mut self.rng);
        }
    }
}

#[test]
fn speculation_changes_no_token_whatever_the_drafts() {
    for name in FIXTURES {
        let reqs = requests();
        let (want, _) = run(&mut engine(name, None), &reqs, &mut |_, _| {});
        assert_eq!(want.len(), reqs.len());

        // The random head's own drafts.
        let (got, spec) = run(&mut engine(name, Some(DRAFTS)), &reqs, &mut |_, _| {});
        assert_eq!(got, want, "{name}: with the head's drafts");
        assert!(spec.num_draft_tokens > 50, "{name}: {spec:?}");

        // Drafts mostly right: the next tokens of the run without speculation, with the
        // k-th replaced by a wrong one (k random, sometimes past the end: all accepted).
        let mut drafts = MostlyRight::new(&want, 9);
        let (got, spec) = run(&mut engine(name, Some(DRAFTS)), &reqs, &mut |s, r| {
            drafts.tamper(s, r, &mut |_, _, _| {})
        });
        assert_eq!(got, want, "{name}: with mostly right drafts");
        // Every draft position saw acceptances and rejections.
        for p in 0..DRAFTS {
            let (a, n) = (spec.accepted_per_pos[p], spec.proposed_per_pos[p]);
            assert!(0 < a && a < n, "{name}: position {p}: {a} of {n} accepted");
        }
        assert!(spec.mean_accepted() > 1.0, "{name}: {spec:?}");
    }
}

/// Drafts proposed each step (`ScheduledSeq::propose` of a sampling sequence; none when no
/// sequence samples).
fn proposed(s: &SchedulerOutput) -> Option<usize> {
    s.seqs.iter().filter(|q| q.sample).map(|q| q.propose).max()
}

/// [`run`], with the drafts proposed each step; `drafts` replaces the head's when given.
fn run_choosing(
    e: &mut Engine,
    reqs: &[(Vec<u32>, SamplingParams)],
    mut drafts: Option<&mut MostlyRight>,
) -> (HashMap<u64, Vec<u32>>, SpecDecodeStats, Vec<usize>) {
    let mut choices = Vec::new();
    let (out, spec) = run(e, reqs, &mut |s, r| {
        choices.extend(proposed(s));
        if let Some(d) = drafts.as_deref_mut() {
            d.tamper(s, r, &mut |_, _, _| {});
        }
    });
    (out, spec, choices)
}

#[test]
fn adaptive_drafting_changes_no_token() {
    // 3 drafts for one sequence, 2 for two, 1 for three; a draft costs 0.15 of a step.
    let adaptive = SpeculativeConfig {
        ladder: "1:3,2:2,3:1".parse().expect("ladder"),
        draft_cost: 0.15,
    };
    for name in FIXTURES {
        let reqs = requests();
        let (want, _) = run(&mut engine(name, None), &reqs, &mut |_, _| {});

        // The random head's drafts, nearly all rejected: after a warm-up only probes draft.
        let (got, spec, choices) =
            run_choosing(&mut engine_with(name, Some(adaptive)), &reqs, None);
        assert_eq!(got, want, "{name}: adaptive, with the head's drafts");
        let off = choices.iter().filter(|&&k| k == 0).count();
        assert!(
            spec.num_drafts > 0 && off * 2 > choices.len(),
            "{name}: {off} of {} steps without drafts: {choices:?}",
            choices.len()
        );
        assert!(spec.acceptance[0] < 0.15, "{name}: {:?}", spec.acceptance);

        // Mostly right drafts: the ladder's cap, which moves with the batch.
        let mut drafts = MostlyRight::new(&want, 3);
        let e = &mut engine_with(name, Some(adaptive));
        let (got, spec, choices) = run_choosing(e, &reqs, Some(&mut drafts));
        assert_eq!(got, want, "{name}: adaptive, with mostly right drafts");
        for k in 1..=3 {
            assert!(
                choices.contains(&k),
                "{name}: never {k} drafts: {choices:?}"
            );
        }
        assert!(spec.mean_accepted() > 0.8, "{name}: {spec:?}");
    }
}

#[test]
fn the_heads_drafts_step_by_step_are_its_drafts_from_scratch() {
    for name in FIXTURES {
        drafts_match_from_scratch(name, SpeculativeConfig::flat(DRAFTS, SEQS), (40, 5));
    }
}

/// Drafting paused while three or more sequences run (`1:3,3:0`, drafts free): the head fills
/// only its keys and values then (`Model::mtp_fill_cache`), and the drafts it proposes once a
/// sequence runs alone again read them, so they must be the drafts from scratch too.
#[test]
fn drafts_after_a_pause_are_the_drafts_from_scratch() {
    let pausing = SpeculativeConfig {
        ladder: "1:3,3:0".parse().expect("ladder"),
        draft_cost: 0.0,
    };
    for name in FIXTURES {
        drafts_match_from_scratch(name, pausing, (10, 2));
    }
}

/// Runs [`requests`] greedily with `config` and drafts mostly right, then checks every
/// seventh of the head's own proposals (at least `min.0` made, `min.1` compared) against the
/// drafts a fresh engine proposes for the same context.
fn drafts_match_from_scratch(name: &str, config: SpeculativeConfig, min: (usize, usize)) {
    {
        let reqs: Vec<_> = requests()
            .into_iter()
            .map(|(p, params)| {
                (
                    p,
                    SamplingParams {
                        temperature: 0.0,
                        ..params
                    },
                )
            })
            .collect();
        let (want, _) = run(&mut engine(name, None), &reqs, &mut |_, _| {});
        // Step by step, drafts mostly right as above (so the head's cache is rolled back after
        // partial acceptances): the head's own proposals, with the context they follow.
        let mut drafts = MostlyRight::new(&want, 5);
        let mut proposals: Vec<(u64, usize, Vec<u32>)> = Vec::new();
        run(&mut engine_with(name, Some(config)), &reqs, &mut |s, r| {
            drafts.tamper(s, r, &mut |id, done, own| {
                if !own.is_empty() {
                    proposals.push((id, done, own.to_vec()));
                }
            })
        });
        assert!(
            proposals.len() > min.0,
            "{name}: {} proposals",
            proposals.len()
        );
        // From scratch: the request's prompt and the outputs up to the proposal but the last
        // as a prompt, whose one greedy token is that last output.
        let mut agree = 0;
        for (id, done, drafts) in proposals.iter().step_by(7) {
            let (prompt, params) = &reqs[*id as usize - 1];
            let context = [&prompt[..], &want[id][..done - 1]].concat();
            let mut fresh = engine(name, Some(DRAFTS));
            let one = SamplingParams {
                max_tokens: 1,
                ..params.clone()
            };
            let valid = fresh
                .sched
                .admission_limits(usize::MAX)
                .validate(context, one, Instant::now())
                .expect("admitted");
            fresh.sched.add_request(1, valid);
            let mut last = None;
            while fresh.sched.has_unfinished_requests() {
                let s = fresh.sched.schedule();
                let r = fresh.runner.execute(&s).expect("step");
                if let Some(o) = r.seqs.iter().find(|o| o.sampled.is_some()) {
                    assert_eq!(o.sampled, Some(want[id][done - 1]), "{name}: request {id}");
                    last = Some(o.drafts.clone());
                }
                fresh.sched.update_from_output(&s, &r);
            }
            // Each run drafts as far as its sequence's blocks reach: compare what both have.
            let fresh_drafts = last.expect("a sampled step");
            let m = fresh_drafts.len().min(drafts.len());
            assert!(m > 0, "{name}: no drafts from scratch");
            assert_eq!(
                fresh_drafts[..m],
                drafts[..m],
                "{name}: request {id} after {done} tokens"
            );
            agree += 1;
        }
        assert!(agree >= min.1, "{name}: only {agree} proposals compared");
    }
}

/// Constrained requests (a JSON schema) with speculation: the drafts the runner hands back are
/// ones the grammar accepts after the step's tokens (the random head's others are cut before
/// verification), and the tokens are those without speculation, with the head's drafts and
/// with mostly right ones.
#[test]
fn drafts_the_grammar_refuses_are_cut_before_verification() {
    use metrale_engine::grammar::{Grammars, Spec, Think};
    use metrale_engine::models::Model;
    use metrale_engine::tokenizer::Tokenizer;

    let name = FIXTURES[0];
    let tok = Tokenizer::from_dir(&model_dir(name)).expect("tokenizer");
    let vocab = engine(name, None).runner.model.vocab_size();
    let eos = tok.token_to_id("<|im_end|>").expect("eos");
    let grammars = Grammars::new(tok.hf(), vocab, eos).expect("grammars");
    let spec = Spec::JsonSchema {
        schema: serde_json::json!({"type": "object", "properties": {
            "a": {"type": "integer"}, "b": {"type": "array", "items": {"type": "boolean"}}
        }, "required": ["a", "b"]}),
        strict: true,
    };
    // Each run gets its own compiled grammars (a grammar keeps its sequences' matchers).
    let reqs = || -> Vec<(Vec<u32>, SamplingParams)> {
        requests()
            .into_iter()
            .take(3)
            .map(|(p, mut params)| {
                params.eos_token_ids = vec![eos];
                params.constraint = Some(
                    grammars
                        .compile(&spec, "response_format", Think::Off)
                        .expect("compiles"),
                );
                (p, params)
            })
            .collect()
    };
    let (want, _) = run(&mut engine(name, None), &reqs(), &mut |_, _| {});
    // Every draft handed back, checked against a grammar of its own.
    let check = grammars
        .compile(&spec, "response_format", Think::Off)
        .expect("compiles");
    let mut emitted: HashMap<u64, Vec<u32>> = HashMap::new();
    let (mut drafts_seen, mut steps_with_head) = (0usize, 0usize);
    let (got, _) = run(&mut engine(name, Some(DRAFTS)), &reqs(), &mut |s, r| {
        for (q, o) in s.seqs.iter().zip(&r.seqs) {
            let out = emitted.entry(q.req_id).or_default();
            out.extend(&o.accepted);
            out.extend(o.sampled);
            if q.sample && q.propose > 0 {
                steps_with_head += 1;
            }
            drafts_seen += o.drafts.len();
            // A fresh sequence id each time: the check's matcher reads the whole output.
            let key = 1_000_000 + drafts_seen as u64 * 100 + q.req_id;
            assert_eq!(
                check.valid_drafts(key, out, &o.drafts),
                o.drafts.len(),
                "request {}: drafts {:?} after {:?}",
                q.req_id,
                o.drafts,
                out
            );
        }
    });
    assert_eq!(got, want, "with the head's drafts, cut by the grammar");
    assert!(steps_with_head > 10, "{steps_with_head}");
    // The random head's drafts are nearly all wrong JSON: most are cut.
    assert!(
        drafts_seen < steps_with_head * DRAFTS / 2,
        "{drafts_seen} drafts kept over {steps_with_head} proposing steps"
    );
    // Mostly right drafts (the grammar left the head none to replace: one a proposing step).
    let mut mostly = MostlyRight::new(&want, 5);
    let (got, spec_stats) = run(&mut engine(name, Some(DRAFTS)), &reqs(), &mut |s, r| {
        for (q, o) in s.seqs.iter().zip(&mut r.seqs) {
            if q.sample && q.propose > 0 && o.sampled.is_some() && o.drafts.is_empty() {
                o.drafts.push(0);
            }
        }
        mostly.tamper(s, r, &mut |_, _, _| {})
    });
    assert_eq!(got, want, "with mostly right drafts");
    assert!(spec_stats.num_accepted_tokens > 0, "{spec_stats:?}");
    let _ = tok.decode(&want[&1], true).expect("decode");
}
