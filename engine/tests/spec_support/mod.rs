//! Shared by the speculative-decoding tests on the Qwen3.5 hybrids (`speculative.rs` on the
//! random fixtures, `speculative_demo_hybrid.rs` on the trained demo hybrid): a scheduler and a
//! runner on the CPU backend, and a loop that runs requests to the end.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use metrale_engine::backend::CpuBackend;
use metrale_engine::kv_cache::StateCacheConfig;
use metrale_engine::loader::{LoadFormat, Weights};
use metrale_engine::models::qwen3_5::{Qwen3_5, Qwen3_5Config};
use metrale_engine::runner::Runner;
use metrale_engine::sampling_params::SamplingParams;
use metrale_engine::scheduler::io::{RunnerOutput, SchedulerOutput};
use metrale_engine::scheduler::{Scheduler, SchedulerConfig, SpecDecodeStats, SpeculativeConfig};

pub const BLOCK: usize = 16;
pub const SEQS: usize = 3;

pub struct Engine {
    pub sched: Scheduler,
    pub runner: Runner<CpuBackend, Qwen3_5>,
}

/// The checkpoint in `dir` (its MTP head too when speculating) behind a scheduler of [`SEQS`]
/// sequences, `blocks` KV blocks of [`BLOCK`], prefix caching and state checkpoints on;
/// `batched_tokens` the step budget, `max_model_len` the longest sequence.
pub fn engine(
    dir: &Path,
    speculative: Option<SpeculativeConfig>,
    (blocks, batched_tokens, max_model_len): (usize, usize, usize),
) -> Engine {
    let cfg = Qwen3_5Config::from_file(&dir.join("config.json")).expect("config");
    let weights = Weights::open(dir, LoadFormat::Auto).expect("weights");
    let model =
        Qwen3_5::load_with(&cfg, &weights, speculative.is_some(), &mut |_| {}).expect("load");
    let state = StateCacheConfig {
        num_slots: SEQS,
        num_checkpoints: 4,
        checkpoint_interval: BLOCK,
    };
    let mut runner = Runner::new(
        CpuBackend::default(),
        model,
        blocks,
        BLOCK,
        state.total_slots(),
    )
    .expect("runner");
    if let Some(spec) = speculative {
        let step_drafts = spec.ladder.max_drafts_in_step(SEQS);
        runner
            .enable_speculation(spec.num_drafts(), step_drafts, None)
            .expect("speculation");
    }
    let sched = Scheduler::new(SchedulerConfig {
        max_num_seqs: SEQS,
        max_num_batched_tokens: batched_tokens,
        max_prefill_with_decodes: None,
        block_size: BLOCK,
        num_blocks: blocks,
        max_model_len,
        enable_prefix_caching: true,
        state: Some(state),
        speculative,
    })
    .expect("scheduler");
    Engine { sched, runner }
}

/// Runs `reqs` to the end, two added every `every` steps so they overlap, `tamper` seeing each
/// step's output before the scheduler does; each request's output tokens, and the speculation
/// counters. Panics past `steps` steps.
pub fn run(
    e: &mut Engine,
    reqs: &[(Vec<u32>, SamplingParams)],
    (every, steps): (usize, usize),
    tamper: &mut dyn FnMut(&SchedulerOutput, &mut RunnerOutput),
) -> (HashMap<u64, Vec<u32>>, SpecDecodeStats) {
    let mut out: HashMap<u64, Vec<u32>> = HashMap::new();
    let mut next = 0;
    for step in 0..steps {
        if step % every == 0 {
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
        let mut r = e.runner.execute(&s).expect("step");
        tamper(&s, &mut r);
        for ev in e.sched.update_from_output(&s, &r) {
            out.entry(ev.req_id).or_default().extend(&ev.new_token_ids);
        }
        drop(s);
        e.sched.check_invariants().expect("invariants");
        if next == reqs.len() && !e.sched.has_unfinished_requests() {
            return (out, e.sched.stats().spec);
        }
    }
    panic!("requests did not finish");
}
