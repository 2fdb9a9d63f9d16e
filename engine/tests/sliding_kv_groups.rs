//! Sliding-window KV groups in serving (issue 39), on the CPU with the tiny Gemma 3, gpt-oss
//! and Mistral fixtures (window 16, sequences up to 150 tokens): the scheduler's grouped
//! manager and the runner's group batches give exactly the tokens of the plain path, which
//! keeps every position of every layer, while the sliding group holds only the window; and
//! the engine sizes its pools with `plan_groups` and reports less KV than full attention.

use std::collections::HashMap;
use std::time::Instant;

use metrale_engine::backend::CpuBackend;
use metrale_engine::engine_core::{EngineConfig, EngineHandle};
use metrale_engine::kv_cache::{GroupConfig, HashKey, kv_groups};
use metrale_engine::loader::ModelDir;
use metrale_engine::models::Model;
use metrale_engine::models::registry::{self, LoadOptions, WithModel};
use metrale_engine::runner::Runner;
use metrale_engine::sampling_params::SamplingParams;
use metrale_engine::scheduler::{Scheduler, SchedulerConfig};
mod reference_support;

use reference_support::{model_dir, reference};

const SLIDING: [&str; 3] = ["gemma3-sliding", "gpt-oss-bf16", "mistral-sliding"];
const BS: usize = 4;
const MAX_TOKENS: usize = 20;

fn greedy(max_tokens: usize) -> SamplingParams {
    SamplingParams {
        max_tokens,
        temperature: 0.0,
        ignore_eos: true,
        ..SamplingParams::default()
    }
}

/// What one serving run gave: each request's tokens, and the most blocks the sliding group
/// (or, plain, the only pool) held at once.
struct Served {
    tokens: HashMap<u64, Vec<u32>>,
    peak_blocks: usize,
    preemptions: u64,
}

/// Serve `prompts` through the real scheduler and runner: plain (every layer keeps every
/// position) or with KV groups, the sliding group's pool `sliding_blocks` blocks.
struct Serve {
    prompts: Vec<Vec<u32>>,
    grouped: Option<usize>,
}

impl WithModel<CpuBackend> for Serve {
    type Output = Served;
    fn run<M: Model<CpuBackend> + 'static>(self, cpu: CpuBackend, model: M) -> Served {
        let cfg = SchedulerConfig {
            max_num_seqs: 4,
            max_num_batched_tokens: 24,
            max_prefill_with_decodes: None,
            block_size: BS,
            num_blocks: 400,
            max_model_len: 256,
            enable_prefix_caching: true,
            state: None,
            speculative: None,
        };
        let key = HashKey { k0: 3, k1: 4 };
        let windows = model.kv_windows();
        let (mut sched, mut runner, sliding) = match self.grouped {
            None => (
                Scheduler::with_hash_key(cfg, key).expect("scheduler"),
                Runner::new(cpu, model, cfg.num_blocks, BS, 0).expect("runner"),
                0,
            ),
            Some(sliding_blocks) => {
                let specs = kv_groups(&windows);
                assert!(
                    specs.iter().any(|g| g.window().is_some()),
                    "{windows:?} has no sliding layer"
                );
                let groups = GroupConfig::sized(&specs, cfg.num_blocks, sliding_blocks);
                let blocks: Vec<usize> = groups.iter().map(|g| g.num_blocks).collect();
                let sliding = specs.iter().position(|g| g.window().is_some()).unwrap_or(0);
                (
                    Scheduler::with_kv_groups(cfg, groups, key).expect("scheduler"),
                    Runner::with_kv_groups(cpu, model, &specs, &blocks, BS).expect("runner"),
                    sliding,
                )
            }
        };
        let limits = sched.admission_limits(runner.model.vocab_size());
        for (id, p) in self.prompts.iter().enumerate() {
            let valid = limits
                .validate(p.clone(), greedy(MAX_TOKENS), Instant::now())
                .expect("admitted");
            sched.add_request(id as u64, valid);
        }
        let mut tokens: HashMap<u64, Vec<u32>> = HashMap::new();
        let mut peak_blocks = 0;
        while sched.has_unfinished_requests() {
            let out = sched.schedule();
            let res = runner.execute(&out).expect("step");
            let pool = sched.kv_cache().group_pool(sliding);
            peak_blocks = peak_blocks.max(pool.num_usable() - pool.num_free());
            for ev in sched.update_from_output(&out, &res) {
                tokens
                    .entry(ev.req_id)
                    .or_default()
                    .extend(ev.new_token_ids);
            }
        }
        Served {
            tokens,
            peak_blocks,
            preemptions: sched.stats().num_preemptions,
        }
    }
}

fn serve(name: &str, prompts: &[Vec<u32>], grouped: Option<usize>) -> Served {
    let dir = ModelDir::open(&model_dir(name)).expect("fixture checkpoint");
    let job = Serve {
        prompts: prompts.to_vec(),
        grouped,
    };
    registry::load(
        CpuBackend::default(),
        &dir,
        LoadOptions::default(),
        &mut |_| {},
        job,
    )
    .unwrap_or_else(|e| panic!("{name}: {e:#}"))
}

/// The same requests, the same batches (neither path preempts), the same tokens to the last
/// one, and the transformers continuation for the greedy prompt; the sliding group holds a
/// fraction of what the plain pool does.
#[test]
fn grouped_serving_gives_the_plain_paths_tokens_with_a_window_of_kv() {
    for name in SLIDING {
        let r = reference(name);
        let mut prompts = vec![r.greedy.prompt.clone()];
        prompts.extend(r.sequences.iter().map(|s| s.tokens.clone()));
        let plain = serve(name, &prompts, None);
        // 4 sequences × (a window of 16 and a step of 24 keys in blocks of 4) fit in 48.
        let grouped = serve(name, &prompts, Some(49));
        assert_eq!((plain.preemptions, grouped.preemptions), (0, 0), "{name}");
        for id in 0..prompts.len() as u64 {
            assert_eq!(plain.tokens[&id].len(), MAX_TOKENS, "{name} request {id}");
            assert_eq!(
                grouped.tokens[&id], plain.tokens[&id],
                "{name} request {id}: grouped and plain tokens"
            );
        }
        assert_eq!(
            &grouped.tokens[&0][..r.greedy.continuation.len()],
            &r.greedy.continuation[..],
            "{name}: greedy continuation"
        );
        eprintln!(
            "{name}: peak blocks held, plain {} (every layer), sliding group {}",
            plain.peak_blocks, grouped.peak_blocks
        );
        assert!(
            grouped.peak_blocks <= 48 && 2 * grouped.peak_blocks < plain.peak_blocks,
            "{name}: sliding group held {} blocks, plain {}",
            grouped.peak_blocks,
            plain.peak_blocks
        );
    }
}

/// A sliding pool far smaller than the sequences still serves them, preempting when four
/// windows do not fit, with the same tokens.
#[test]
fn a_tight_sliding_pool_preempts_and_still_gives_the_same_tokens() {
    let name = "gemma3-sliding";
    let r = reference(name);
    let prompts: Vec<Vec<u32>> = r.sequences.iter().map(|s| s.tokens.clone()).collect();
    let plain = serve(name, &prompts, None);
    // 15 blocks: one sequence's window and step (11 blocks at most), not two.
    let grouped = serve(name, &prompts, Some(16));
    assert!(grouped.peak_blocks <= 15);
    assert!(grouped.preemptions > 0, "the pool was meant to run short");
    for id in 0..prompts.len() as u64 {
        assert_eq!(grouped.tokens[&id], plain.tokens[&id], "request {id}");
    }
}

fn engine_config(name: &str) -> EngineConfig {
    reference_support::cpu_engine_config(model_dir(name), name)
}

/// The engine plans a pool a group: the sliding layers' pool holds the batch's windows, not
/// its every position, and the whole cache takes less than full attention would for the same
/// sequences; greedy decoding through it is transformers'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_plans_a_pool_a_group_and_decodes_as_transformers() {
    for name in SLIDING {
        let (engine, plan) = EngineHandle::start(engine_config(name)).expect("start");
        eprintln!(
            "{name}: KV {} bytes ({}), every position of every layer {} bytes",
            plan.bytes,
            plan.describe_groups(),
            plan.full_attention_bytes
        );
        let sliding = plan
            .groups
            .iter()
            .find(|g| g.spec.window().is_some())
            .expect("a sliding group");
        // 8 sequences of 256 tokens in blocks of 16: 128 blocks a layer with every position.
        assert!(
            sliding.num_blocks - 1 < 128 / 2,
            "{name}: {}",
            sliding.num_blocks
        );
        assert!(plan.bytes < plan.full_attention_bytes, "{name}");
        assert!(engine.info().kv_groups.contains("window 16"), "{name}");
        let r = reference(name);
        let valid = engine
            .limits()
            .validate(r.greedy.prompt.clone(), greedy(16), Instant::now())
            .expect("admitted");
        let mut stream = engine.add_request(valid).expect("submitted");
        let mut tokens = Vec::new();
        while let Some(out) = stream.next().await {
            tokens.extend(out.new_token_ids);
            if out.finished.is_some() {
                break;
            }
        }
        assert_eq!(tokens, r.greedy.continuation, "{name}");
        engine.shutdown();
    }
}

/// A byte budget (`--kv-cache-bytes`) is split between the pools, not exceeded, and holds
/// more full-length sequences than every layer keeping every position would: half of what 8
/// sequences of 256 tokens take in every layer holds 4 of them plain, 6 with groups.
#[test]
fn a_byte_budget_holds_more_sequences_with_groups() {
    let name = "gemma3-sliding";
    let mut cfg = engine_config(name);
    let (engine, full) = EngineHandle::start(cfg.clone()).expect("start");
    engine.shutdown();
    let budget = full.full_attention_bytes / 2;
    cfg.kv_cache_bytes = Some(budget);
    let (engine, plan) = EngineHandle::start(cfg).expect("start");
    engine.shutdown();
    eprintln!(
        "{name} with {budget} bytes: {} ({} bytes), every position would take {}",
        plan.describe_groups(),
        plan.bytes,
        plan.full_attention_bytes
    );
    assert!(plan.bytes <= budget, "{} > {budget}", plan.bytes);
    // The sequences the pools hold, at every position in every layer, take 1.5 budgets.
    assert_eq!(plan.full_attention_bytes, 3 * budget / 2);
}
