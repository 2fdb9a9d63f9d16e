//! Section `kv-groups`: sliding-window KV groups on the device (issue 39). The tiny Gemma 3,
//! gpt-oss and Mistral fixtures (window 16) serve their reference sequences (up to 130 prompt
//! tokens and 20 more) through the real scheduler and runner twice: plain, every layer keeping
//! every position, and with KV groups, the sliding layers' pool far smaller than the
//! sequences. Both keep the tables on the device and replay decode graphs; prefill chunks of
//! 64 rows take the flash kernel, whose key tiles start before a row's window, in blocks the
//! grouped run has released to the null block. The tokens must be the same, every one.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use metrale_engine::backend::cuda::{CudaBackend, Tuning};
use metrale_engine::kv_cache::{GroupConfig, HashKey, kv_groups};
use metrale_engine::loader::ModelDir;
use metrale_engine::models::Model;
use metrale_engine::models::registry::{self, LoadOptions, WithModel};
use metrale_engine::runner::Runner;
use metrale_engine::sampling_params::SamplingParams;
use metrale_engine::scheduler::{Scheduler, SchedulerConfig};

use crate::report::Report;

const FIXTURES: [&str; 3] = ["gemma3-sliding", "gpt-oss-bf16", "mistral-sliding"];
const BS: usize = 16;
const MAX_TOKENS: usize = 20;
const MAX_LEN: usize = 256;
/// The sliding group's pool: four sequences' windows (one block) and their share of a step
/// of 64 rows (five blocks each at most), where the sequences need ten blocks each.
const SLIDING_BLOCKS: usize = 25;

pub fn run(tuning: Tuning, fixtures: &Path, report: &mut Report) -> Result<()> {
    for name in FIXTURES {
        let dir = ModelDir::open(&fixtures.join("models").join(name))?;
        let prompts = prompts(fixtures, name)?;
        let plain = serve(tuning, &dir, &prompts, None).with_context(|| format!("{name} plain"))?;
        let grouped = serve(tuning, &dir, &prompts, Some(SLIDING_BLOCKS))
            .with_context(|| format!("{name} grouped"))?;
        let differ: Vec<u64> = (0..prompts.len() as u64)
            .filter(|id| plain.tokens.get(id) != grouped.tokens.get(id))
            .collect();
        let line = format!(
            "{name}: {} sequences, peak blocks held: plain {} (every layer), sliding group {} of \
             {}; {} preemptions",
            prompts.len(),
            plain.peak_blocks,
            grouped.peak_blocks,
            SLIDING_BLOCKS - 1,
            grouped.preemptions
        );
        report.line(&line);
        if differ.is_empty() {
            report.summary_line(format!("{line}: tokens identical"));
        } else {
            report.fail(format!("{line}: requests {differ:?} decode differently"));
        }
        if grouped.peak_blocks >= plain.peak_blocks {
            report.fail(format!(
                "{name}: the sliding group held no less than the plain pool"
            ));
        }
    }
    Ok(())
}

/// The reference sequences and the greedy prompt of fixture `name`.
fn prompts(fixtures: &Path, name: &str) -> Result<Vec<Vec<u32>>> {
    let path = fixtures.join(format!("{name}.reference.json"));
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text)?;
    let tokens = |v: &serde_json::Value| -> Option<Vec<u32>> {
        v.as_array()?
            .iter()
            .map(|t| t.as_u64().map(|t| t as u32))
            .collect()
    };
    let mut out = vec![tokens(&v["greedy"]["prompt"]).context("greedy prompt")?];
    for s in v["sequences"].as_array().context("sequences")? {
        out.push(tokens(&s["tokens"]).context("sequence tokens")?);
    }
    Ok(out)
}

struct Served {
    tokens: HashMap<u64, Vec<u32>>,
    peak_blocks: usize,
    preemptions: u64,
}

struct Serve<'a> {
    prompts: &'a [Vec<u32>],
    sliding_blocks: Option<usize>,
}

fn serve(
    tuning: Tuning,
    dir: &ModelDir,
    prompts: &[Vec<u32>],
    sliding_blocks: Option<usize>,
) -> Result<Served> {
    let cuda = CudaBackend::new(0, tuning)?;
    let job = Serve {
        prompts,
        sliding_blocks,
    };
    registry::load(cuda, dir, LoadOptions::default(), &mut |_| {}, job)?
}

impl WithModel<CudaBackend> for Serve<'_> {
    type Output = Result<Served>;
    fn run<M: Model<CudaBackend> + 'static>(self, cuda: CudaBackend, model: M) -> Result<Served> {
        let cfg = SchedulerConfig {
            max_num_seqs: 4,
            max_num_batched_tokens: 64,
            max_prefill_with_decodes: None,
            block_size: BS,
            num_blocks: 4 * MAX_LEN / BS + 1,
            max_model_len: MAX_LEN,
            enable_prefix_caching: true,
            state: None,
            speculative: None,
        };
        let key = HashKey { k0: 5, k1: 6 };
        let (mut sched, mut runner, sliding) = match self.sliding_blocks {
            None => (
                Scheduler::with_hash_key(cfg, key)?,
                Runner::new(cuda, model, cfg.num_blocks, BS, 0)?,
                0,
            ),
            Some(sliding_blocks) => {
                let specs = kv_groups(&model.kv_windows());
                let Some(sliding) = specs.iter().position(|g| g.window().is_some()) else {
                    bail!("the model has no sliding layer");
                };
                let groups = GroupConfig::sized(&specs, cfg.num_blocks, sliding_blocks);
                let blocks: Vec<usize> = groups.iter().map(|g| g.num_blocks).collect();
                (
                    Scheduler::with_kv_groups(cfg, groups, key)?,
                    Runner::with_kv_groups(cuda, model, &specs, &blocks, BS)?,
                    sliding,
                )
            }
        };
        // Tables on the device, as serving keeps them (graphs bake their address in).
        runner.keep_block_tables(cfg.max_num_seqs, (MAX_LEN + 1).div_ceil(BS))?;
        let limits = sched.admission_limits(runner.model.vocab_size());
        for (id, p) in self.prompts.iter().enumerate() {
            let sampling = SamplingParams {
                max_tokens: MAX_TOKENS,
                temperature: 0.0,
                ignore_eos: true,
                ..SamplingParams::default()
            };
            let valid = limits.validate(p.clone(), sampling, Instant::now())?;
            sched.add_request(id as u64, valid);
        }
        let mut tokens: HashMap<u64, Vec<u32>> = HashMap::new();
        let mut peak_blocks = 0;
        while sched.has_unfinished_requests() {
            let out = sched.schedule();
            let res = runner.execute(&out)?;
            let pool = sched.kv_cache().group_pool(sliding);
            peak_blocks = peak_blocks.max(pool.num_usable() - pool.num_free());
            for ev in sched.update_from_output(&out, &res) {
                tokens
                    .entry(ev.req_id)
                    .or_default()
                    .extend(ev.new_token_ids);
            }
        }
        Ok(Served {
            tokens,
            peak_blocks,
            preemptions: sched.stats().num_preemptions,
        })
    }
}
