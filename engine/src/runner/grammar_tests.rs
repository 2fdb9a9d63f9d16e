//! Masks computed ahead on the grammar's workers, through the real runner and scheduler on
//! the shipped demo model (CPU): the tokens are those of masks computed when sampling, and
//! the forward runs while a step's masks are still being computed.

use std::collections::HashMap;
use std::time::Instant;

use serde_json::json;

use super::Runner;
use crate::backend::CpuBackend;
use crate::grammar::{Constraint, Grammars, Spec, Think};
use crate::loader::{LoadFormat, ModelDir, Weights};
use crate::models::qwen3::Qwen3;
use crate::sampling_params::SamplingParams;
use crate::scheduler::{Scheduler, SchedulerConfig};
use crate::tokenizer::Tokenizer;

const BLOCK: usize = 16;
const BLOCKS: usize = 64;
const SEQS: usize = 4;

struct Engine {
    sched: Scheduler,
    runner: Runner<CpuBackend, Qwen3<CpuBackend>>,
}

fn demo_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/demo")
}

fn engine(overlap: bool) -> Engine {
    let dir = ModelDir::open(&demo_dir()).expect("demo model");
    let cfg = dir.config().expect("config");
    let weights = Weights::open(&dir.root, LoadFormat::Auto).expect("weights");
    let model = Qwen3::load(&CpuBackend::default(), &cfg, &weights).expect("load");
    let mut runner = Runner::new(CpuBackend::default(), model, BLOCKS, BLOCK, 0).expect("runner");
    runner.set_grammar_overlap(overlap);
    let sched = Scheduler::new(SchedulerConfig {
        max_num_seqs: SEQS,
        max_num_batched_tokens: 64,
        max_prefill_with_decodes: None,
        block_size: BLOCK,
        num_blocks: BLOCKS,
        max_model_len: 512,
        enable_prefix_caching: true,
        state: None,
        speculative: None,
    })
    .expect("scheduler");
    Engine { sched, runner }
}

/// Constrained requests (a schema, `json_object`, a choice; greedy and seeded) and a free one.
fn requests() -> Vec<(Vec<u32>, SamplingParams)> {
    let tok = Tokenizer::from_dir(&demo_dir()).expect("tokenizer");
    let eos = tok.token_to_id("<|im_end|>").expect("eos");
    let grammars = Grammars::new(tok.hf(), tok.vocab_size(), eos).expect("grammars");
    let compile = |spec: &Spec| -> Constraint {
        grammars
            .compile(spec, "response_format", Think::Off)
            .expect("compiles")
    };
    let schema = Spec::JsonSchema {
        schema: json!({"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 12},
            "n": {"type": "integer"},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}}
        }, "required": ["name", "n", "tags"]}),
        strict: true,
    };
    let specs = [
        Some(schema.clone()),
        Some(Spec::JsonObject),
        None,
        Some(Spec::Choice(vec!["yes".into(), "no".into()])),
        Some(schema),
    ];
    specs
        .into_iter()
        .enumerate()
        .map(|(i, spec)| {
            let prompt = tok
                .encode(&format!("Reply {i} in JSON about cats:"), false)
                .expect("encode");
            let params = SamplingParams {
                temperature: if i % 2 == 0 { 0.0 } else { 0.9 },
                seed: 11 + i as u64,
                max_tokens: 40,
                eos_token_ids: vec![eos],
                constraint: spec.as_ref().map(compile),
                ..SamplingParams::default()
            };
            (prompt, params)
        })
        .collect()
}

/// Runs `reqs` to the end, two added every other step; each request's output tokens.
fn run(e: &mut Engine, reqs: &[(Vec<u32>, SamplingParams)]) -> HashMap<u64, Vec<u32>> {
    let mut out: HashMap<u64, Vec<u32>> = HashMap::new();
    let mut next = 0;
    for step in 0..1000 {
        if step % 2 == 0 {
            for (p, params) in reqs.iter().skip(next).take(2) {
                next += 1;
                let valid = e
                    .sched
                    .admission_limits(usize::MAX)
                    .validate(p.clone(), params.clone(), Instant::now())
                    .expect("admitted");
                e.sched.add_request(next as u64, valid);
            }
        }
        let s = e.sched.schedule();
        let r = e.runner.execute(&s).expect("step");
        for ev in e.sched.update_from_output(&s, &r) {
            out.entry(ev.req_id).or_default().extend(&ev.new_token_ids);
        }
        if next == reqs.len() && !e.sched.has_unfinished_requests() {
            return out;
        }
    }
    panic!("requests did not finish");
}

#[test]
fn masks_computed_ahead_give_the_tokens_of_masks_computed_when_sampling() {
    let reqs = requests();
    let ahead = run(&mut engine(true), &reqs);
    let reqs_inline = requests();
    let inline = run(&mut engine(false), &reqs_inline);
    assert_eq!(ahead, inline);
    // The JSON requests wrote JSON (the mask held), the choice one a choice.
    let tok = Tokenizer::from_dir(&demo_dir()).expect("tokenizer");
    let eos = tok.token_to_id("<|im_end|>").expect("eos");
    for id in [1u64, 2, 5] {
        let toks: Vec<u32> = ahead[&id].iter().copied().filter(|&t| t != eos).collect();
        let text = tok.decode(&toks, true).expect("decode");
        assert!(text.starts_with('{'), "request {id}: {text:?}");
    }
    let choice = tok.decode(&ahead[&4], true).expect("decode");
    assert!(["yes", "no"].contains(&choice.as_str()), "{choice:?}");
    // With the overlap off every mask was computed when sampling; with it on, the workers
    // computed masks.
    let off = reqs_inline[0]
        .1
        .constraint
        .as_ref()
        .expect("grammar")
        .mask_stats();
    assert_eq!((off.ahead, off.requested), (0, 0), "{off:?}");
    assert!(off.inline > 0);
    let on: u64 = reqs
        .iter()
        .filter_map(|(_, p)| p.constraint.as_ref())
        .map(|c| c.mask_stats().requested)
        .sum();
    assert!(on > 0);
}

/// With the workers held, a step's forward still runs: the engine thread queues the masks,
/// runs the model (the `launched` hook sees the jobs outstanding and no mask computed on the
/// engine thread), and only sampling needs them.
#[test]
fn the_forward_runs_while_the_step_masks_are_computed() {
    let reqs = requests();
    let mut e = engine(true);
    let c = reqs[0].1.constraint.clone().expect("grammar");
    let valid = e
        .sched
        .admission_limits(usize::MAX)
        .validate(reqs[0].0.clone(), reqs[0].1.clone(), Instant::now())
        .expect("admitted");
    e.sched.add_request(1, valid);
    let mut tokens = Vec::new();
    for step in 0..6 {
        let s = e.sched.schedule();
        let before = c.mask_stats();
        let mut hold = Some(crate::grammar::hold_workers());
        let mut at_launch = None;
        let r = e
            .runner
            .execute_with(&s, &mut || {
                at_launch = Some(c.mask_stats());
                hold = None; // sampling may need them now
            })
            .expect("step");
        drop(hold);
        let at = at_launch.expect("the forward was launched");
        assert_eq!(
            at.inline, before.inline,
            "step {step}: a mask computed before sampling"
        );
        assert!(
            at.requested > at.done,
            "step {step}: no mask job outstanding while the forward ran: {at:?}"
        );
        for ev in e.sched.update_from_output(&s, &r) {
            tokens.extend(ev.new_token_ids);
        }
    }
    assert_eq!(tokens.len(), 6);
    let after = c.mask_stats();
    assert!(after.ahead + after.inline >= 6, "{after:?}");
}
