//! Starting the engine: load the checkpoint, size the KV cache, build the scheduler and the
//! runner, and hand them to the engine thread.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};

use super::ranks::RankProcesses;
use super::step_loop::EngineLoop;
use super::{Device, EngineConfig, EngineHandle, Live, ModelInfo, Shared};
use crate::backend::{Backend, CpuBackend, HybridOps};
use crate::kv_cache::groups::{PlanShape, peak_blocks, plan_groups};
use crate::kv_cache::{Attention, GroupConfig, HashKey, StateCacheConfig, kv_groups};
use crate::loader::ModelDir;
use crate::metrics::MetricsHub;
use crate::metrics::hub::{Limits, StepReport};
use crate::models::Model;
use crate::models::registry::{self, LoadOptions, WithModel};
use crate::parallel::Collective;
use crate::parallel::ranks::Leader;
use crate::parallel::tcp::TcpGroup;
use crate::runner::Runner;
use crate::scheduler::Scheduler;
use crate::scheduler::SchedulerConfig;
use metrale_protocol::metrics::Phase;

/// What start-up decided, for the log line `met serve` prints.
#[derive(Debug, Clone, PartialEq)]
pub struct KvCachePlan {
    /// Blocks of the cache (of KV group 0 with groups), the null block included.
    pub num_blocks: usize,
    pub block_size: usize,
    /// Bytes of the cache, every group's pool included (the null blocks not).
    pub bytes: usize,
    /// The KV groups of a model with sliding-window layers (`kv_cache/groups.rs`): each
    /// group's layers and pool. Empty when every layer keeps every position.
    pub groups: Vec<GroupConfig>,
    /// What the same sequences would take with every layer keeping every position: `bytes`
    /// without groups, more with them (for the start-up report).
    pub full_attention_bytes: usize,
    /// The recurrent-state pool beside it (models with linear-attention layers).
    pub state: Option<StateCachePlan>,
}

/// The recurrent-state pool: slots for running sequences and for prefix checkpoints.
#[derive(Debug, Clone, PartialEq)]
pub struct StateCachePlan {
    pub config: StateCacheConfig,
    pub bytes_per_slot: usize,
    /// Slots a step's rejected drafts are rolled back from (speculative decoding).
    pub scratch_slots: usize,
}

impl StateCachePlan {
    pub fn bytes(&self) -> usize {
        (self.config.total_slots() + self.scratch_slots) * self.bytes_per_slot
    }
}

impl KvCachePlan {
    /// Usable tokens (the null block holds none) of group 0's pool.
    pub fn tokens(&self) -> usize {
        (self.num_blocks - 1) * self.block_size
    }

    /// The report of the KV groups' pools, one part a group ("full attention 2 layers: 640
    /// blocks; window 1024, 10 layers: 300 blocks"); empty without groups.
    pub fn describe_groups(&self) -> String {
        self.groups
            .iter()
            .map(|g| {
                let kind = match g.spec.attention {
                    Attention::Full => "full attention".to_string(),
                    Attention::Sliding { window } => format!("window {window}"),
                };
                format!(
                    "{kind}, {} layers: {} blocks",
                    g.spec.layers.len(),
                    g.num_blocks - 1
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

impl EngineHandle {
    /// Load the model on the configured device and start the engine thread; returns once the
    /// engine can serve.
    pub fn start(config: EngineConfig) -> anyhow::Result<(EngineHandle, KvCachePlan)> {
        Self::start_observed(config, MetricsHub::disabled())
    }

    /// [`EngineHandle::start`], reporting start-up phases and every step to `hub`.
    pub fn start_observed(
        config: EngineConfig,
        hub: MetricsHub,
    ) -> anyhow::Result<(EngineHandle, KvCachePlan)> {
        // One dispatch: the device picks the backend, the registry the model family.
        match config.device {
            Device::Cpu => start_on(
                CpuBackend::with_fp8_kv_cache(config.kv_cache_fp8),
                config,
                hub,
            ),
            #[cfg(feature = "cuda")]
            Device::Cuda => {
                hub.phases().phase(Phase::CompileKernels, 0, None, "");
                let backend =
                    crate::backend::cuda::CudaBackend::for_dtype(0, config.dtype, config.tuning)
                        .context("failed to open the GPU")?
                        .with_fp8_kv_cache(config.kv_cache_fp8)?;
                start_on(backend, config, hub)
            }
            #[cfg(not(feature = "cuda"))]
            Device::Cuda => {
                bail!("this build of met has no CUDA backend: build it with `--features cuda`")
            }
        }
    }
}

/// Load the checkpoint on `backend` through the model registry, then start serving it.
fn start_on<B: HybridOps>(
    backend: B,
    config: EngineConfig,
    hub: MetricsHub,
) -> anyhow::Result<(EngineHandle, KvCachePlan)> {
    let phases = hub.phases();
    let dir = ModelDir::open(&config.model_dir)?;
    let model_config = dir.config()?;
    let mpe = model_config.max_position_embeddings;
    let max_model_len = match config.max_seq_len {
        Some(n) if n > mpe => bail!(
            "--max-seq-len {n} exceeds the model's context of {mpe} tokens (max_position_embeddings in config.json)"
        ),
        Some(n) => n,
        None => mpe,
    };
    let layers = model_config.num_hidden_layers as u64;
    phases.phase(Phase::Load, 0, Some(layers), "layers");
    let options = LoadOptions {
        load_format: config.load_format,
        mtp: config.speculative.is_some(),
        requantize: config.requantize,
    };
    // With more than one rank, meet the others before loading: each then loads its own
    // shard while this one loads rank 0's.
    let group = match config.tensor_parallel_size {
        1 => None,
        world => Some(super::ranks::start_group(
            world,
            &super::ranks::RankOptions {
                model_dir: dir.root.clone(),
                load_format: config.load_format,
                requantize: config.requantize,
                kv_cache_fp8: config.kv_cache_fp8,
                expert_parallel: config.enable_expert_parallel,
                step_timeout: config.dist_timeout,
            },
            config.rendezvous,
        )?),
    };
    let tp = group
        .as_ref()
        .map(|(g, _)| g.clone() as Arc<dyn Collective<B>>);
    let loaded = Loaded {
        generation: dir.generation_config()?,
        model_config,
        max_model_len,
        config,
        hub,
        group,
    };
    let mut layer_done =
        |done: usize| phases.phase(Phase::Load, done as u64, Some(layers), "layers");
    registry::load_rank(backend, &dir, options, tp, &mut layer_done, loaded)?
}

/// What start-up knows once the model is loaded, for [`serve_model`].
struct Loaded {
    config: EngineConfig,
    hub: MetricsHub,
    model_config: crate::loader::ModelConfig,
    generation: crate::loader::GenerationConfig,
    max_model_len: usize,
    /// The tensor-parallel group this process leads, and the rank processes it started.
    group: Option<(Arc<TcpGroup>, RankProcesses)>,
}

impl<B: HybridOps> WithModel<B> for Loaded {
    type Output = anyhow::Result<(EngineHandle, KvCachePlan)>;
    fn run<M: Model<B> + 'static>(mut self, backend: B, model: M) -> Self::Output {
        match self.group.take() {
            None => serve_model(backend, model, self, None),
            Some((group, ranks)) => {
                serve_model(backend, Leader::new(model, group), self, Some(ranks))
            }
        }
    }
}

/// Size the KV cache, build the runner and the scheduler, and start the engine thread.
fn serve_model<B: Backend, M: Model<B> + 'static>(
    backend: B,
    model: M,
    loaded: Loaded,
    ranks: Option<RankProcesses>,
) -> anyhow::Result<(EngineHandle, KvCachePlan)> {
    let Loaded {
        config,
        hub,
        model_config,
        generation,
        max_model_len,
        group: _,
    } = loaded;
    let phases = hub.phases();

    let plan = plan_kv_cache(&backend, &config, &model, max_model_len)?;
    let blocks = plan.num_blocks as u64;
    phases.phase(Phase::AllocateKvCache, 0, Some(blocks), "blocks");
    let device_description = backend.describe();
    let state_slots = plan.state.as_ref().map_or(0, |s| s.config.total_slots());
    let mut runner = if plan.groups.is_empty() {
        Runner::new(
            backend,
            model,
            plan.num_blocks,
            plan.block_size,
            state_slots,
        )?
    } else {
        let specs: Vec<_> = plan.groups.iter().map(|g| g.spec.clone()).collect();
        let blocks: Vec<usize> = plan.groups.iter().map(|g| g.num_blocks).collect();
        Runner::with_kv_groups(backend, model, &specs, &blocks, plan.block_size)?
    };
    // The longest table a sequence can hold: max_model_len tokens and the drafts verified past
    // them; one row a sequence the scheduler runs at once.
    let drafts = config.speculative.map_or(0, |s| s.num_drafts());
    runner.keep_block_tables(
        config.max_num_seqs,
        (max_model_len + drafts + 1).div_ceil(plan.block_size),
    )?;
    runner.set_grammar_overlap(config.tuning.debug.grammar_overlap);
    if let Some(spec) = config.speculative {
        let force_accept = config.tuning.debug.spec_force_accept;
        let step_drafts = spec.ladder.max_drafts_in_step(config.max_num_seqs);
        runner.enable_speculation(spec.num_drafts(), step_drafts, force_accept)?;
    }
    phases.phase(Phase::AllocateKvCache, blocks, Some(blocks), "blocks");
    hub.set_limits(Limits {
        block_size: plan.block_size,
        max_model_len,
    });
    let scheduler_config = SchedulerConfig {
        max_num_seqs: config.max_num_seqs,
        max_num_batched_tokens: config.max_num_batched_tokens,
        max_prefill_with_decodes: config.max_prefill_with_decodes,
        block_size: plan.block_size,
        num_blocks: plan.num_blocks,
        max_model_len,
        enable_prefix_caching: config.enable_prefix_caching,
        state: plan.state.as_ref().map(|s| s.config),
        speculative: config.speculative,
    };
    let scheduler = match plan.groups.is_empty() {
        true => Scheduler::new(scheduler_config)?,
        false => {
            Scheduler::with_kv_groups(scheduler_config, plan.groups.clone(), HashKey::random())?
        }
    };

    let weights = describe_weights(&model_config, config.requantize, &device_description);
    let info = ModelInfo {
        served_name: config.served_name.clone(),
        max_model_len,
        vocab_size: model_config.vocab_size,
        eos_token_ids: generation.eos_token_ids.clone(),
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        device: device_description,
        kv_cache_blocks: plan.num_blocks - 1,
        kv_groups: plan.describe_groups(),
        block_size: plan.block_size,
        weights,
    };
    let live = Arc::new(Live::new(config.max_num_seqs, config.max_queued_requests));
    if let Ok(mut s) = live.stats.lock() {
        // Every KV group's pool (usage weighs each group's blocks by its layers).
        s.kv_blocks_total = match plan.groups.is_empty() {
            true => plan.num_blocks - 1,
            false => plan.groups.iter().map(|g| g.num_blocks - 1).sum(),
        };
        s.max_num_seqs = config.max_num_seqs;
        s.max_num_batched_tokens = config.max_num_batched_tokens;
        s.num_drafts = config.speculative.map_or(0, |sp| sp.num_drafts());
        // The engine reports after each step; observers need the limits before the first.
        hub.step(
            std::time::Instant::now(),
            StepReport {
                stats: s.clone(),
                ..Default::default()
            },
        );
    }
    // The scheduler's own view of its limits: what it is handed will fit in it.
    let limits = scheduler.admission_limits(model_config.vocab_size);
    let (tx, rx) = std::sync::mpsc::channel();
    let engine = EngineLoop::new(scheduler, runner, rx, live.clone(), hub, &config.tuning);
    let done = live.clone();
    std::thread::Builder::new()
        .name("met-engine".into())
        .spawn(move || {
            engine.run();
            // The runner (and so the leader, which tells the ranks to stop) is gone: reap them.
            drop(ranks);
            done.finished
                .store(true, std::sync::atomic::Ordering::SeqCst);
        })
        .context("failed to start the engine thread")?;
    let shared = Shared {
        commands: Mutex::new(tx),
        next_id: AtomicU64::new(1),
        info,
        live,
        limits,
    };
    Ok((
        EngineHandle {
            shared: Arc::new(shared),
        },
        plan,
    ))
}

/// Blocks for the KV cache. On a GPU: what `--gpu-memory-utilization` leaves once the weights
/// are in place and room for one full step's activations is set aside. On the CPU: the
/// configured bytes, or by default room for every sequence of a full batch at full length,
/// capped at a quarter of the machine's memory.
fn plan_kv_cache<B: Backend, M: Model<B>>(
    backend: &B,
    config: &EngineConfig,
    model: &M,
    max_model_len: usize,
) -> anyhow::Result<KvCachePlan> {
    let bs = config.block_size;
    let per_block = model.kv_bytes_per_token(backend) * bs;
    let state = model.state_spec().map(|spec| {
        let slots = config.ssm_cache_slots.unwrap_or(config.max_num_seqs);
        StateCachePlan {
            config: StateCacheConfig {
                num_slots: slots,
                // Checkpoints only serve prefix caching.
                num_checkpoints: if config.enable_prefix_caching {
                    config.ssm_checkpoint_slots.unwrap_or(slots)
                } else {
                    0
                },
                checkpoint_interval: config.ssm_checkpoint_interval,
            },
            bytes_per_slot: spec.bytes_per_slot(),
            scratch_slots: config
                .speculative
                .map_or(0, |s| s.ladder.max_drafts_in_step(config.max_num_seqs)),
        }
    });
    // The recurrent-state slots (and speculation's scratch) are device memory too.
    let state_bytes = state.as_ref().map_or(0, StateCachePlan::bytes);
    let bytes = match (config.kv_cache_bytes, backend.memory_info()) {
        (Some(b), _) => b,
        (None, Some((free, total))) => {
            let allowed = (total as f64 * config.gpu_memory_utilization) as usize;
            let used = total - free;
            let activations =
                model.activation_bytes(config.max_num_batched_tokens, config.max_num_seqs);
            let left = allowed.saturating_sub(used + activations + state_bytes);
            if left < per_block * (max_model_len.div_ceil(bs) + 1) {
                bail!(
                    "after the weights ({} MiB in use), one step's activations ({} MiB) and the \
                     recurrent-state slots ({} MiB), --gpu-memory-utilization {} leaves {} MiB of \
                     the GPU's {} MiB for the KV cache, too little for one sequence of \
                     {max_model_len} tokens; raise --gpu-memory-utilization or lower \
                     --max-seq-len / --max-num-batched-tokens / --ssm-cache-slots",
                    used >> 20,
                    activations >> 20,
                    state_bytes >> 20,
                    config.gpu_memory_utilization,
                    left >> 20,
                    total >> 20
                );
            }
            left
        }
        (None, None) => {
            let wanted = config.max_num_seqs * max_model_len.div_ceil(bs) * per_block;
            wanted.min(system_memory_bytes() / 4)
        }
    };
    let num_blocks = match config.num_gpu_blocks_override {
        Some(n) => n + 1,
        None => bytes / per_block + 1, // + the null block
    };
    let one_seq = max_model_len.div_ceil(bs) + 1;
    if num_blocks < one_seq {
        bail!(
            "the KV cache ({} MiB, {} blocks of {bs} tokens) cannot hold one sequence of {max_model_len} tokens; \
             lower --max-seq-len or give the cache more memory",
            bytes >> 20,
            num_blocks - 1
        );
    }
    let full = KvCachePlan {
        num_blocks,
        block_size: bs,
        bytes: (num_blocks - 1) * per_block,
        groups: Vec::new(),
        full_attention_bytes: (num_blocks - 1) * per_block,
        state,
    };
    // A model with sliding-window layers keeps only their window, where the backend runs KV
    // groups: the same bytes split between the groups' pools (`plan_groups`).
    let windows = model.kv_windows();
    if windows.iter().all(Option::is_none) || !backend.kv_groups() {
        return Ok(full);
    }
    let drafts = config.speculative.map_or(0, |s| s.num_drafts());
    let shape = PlanShape {
        block_size: bs,
        layer_block_bytes: per_block / windows.len().max(1),
        max_seq_len: max_model_len,
        max_num_seqs: config.max_num_seqs,
        step_tokens: config.max_num_batched_tokens + drafts,
    };
    plan_kv_groups(full, &shape, &windows, config)
}

/// [`plan_kv_cache`] for a model with sliding-window layers (`windows`, a layer each): the
/// bytes the plain plan would take split between the KV groups' pools in proportion to what a
/// full batch of full-length sequences needs in each (`plan_groups`). Without a byte budget on
/// the CPU, the pools hold exactly that batch; `--num-gpu-blocks-override` counts blocks of
/// every layer, as without groups.
fn plan_kv_groups(
    full: KvCachePlan,
    shape: &PlanShape,
    windows: &[Option<usize>],
    config: &EngineConfig,
) -> anyhow::Result<KvCachePlan> {
    let specs = kv_groups(windows);
    let lbb = shape.layer_block_bytes;
    let nulls: usize = specs.iter().map(|g| g.layers.len() * lbb).sum();
    let budget = match (config.kv_cache_bytes, config.num_gpu_blocks_override) {
        // The CPU's default: the configured batch at full length, as without groups.
        (None, None) if full.bytes >= full_batch_bytes(shape, windows.len()) => specs
            .iter()
            .map(|g| shape.group_blocks(g.attention, shape.max_num_seqs) * g.layers.len() * lbb)
            .sum::<usize>(),
        _ => full.bytes,
    } + nulls;
    let planned = plan_groups(budget, shape, &specs);
    let bs = shape.block_size;
    for (g, p) in specs.iter().zip(&planned) {
        let need = peak_blocks(g.attention, shape.max_seq_len, shape.step_tokens, bs);
        if p.usable() < need {
            bail!(
                "the KV cache ({} MiB) split between the model's full-attention and                  sliding-window layers leaves {} blocks to the {} layers of {:?}, which one                  sequence of {} tokens needs {need} of; lower --max-seq-len or give the cache                  more memory",
                full.bytes >> 20,
                p.usable(),
                g.layers.len(),
                g.attention,
                shape.max_seq_len
            );
        }
    }
    let groups: Vec<GroupConfig> = specs
        .into_iter()
        .zip(&planned)
        .map(|(spec, p)| GroupConfig {
            spec,
            num_blocks: p.num_blocks,
        })
        .collect();
    let bytes = planned.iter().map(|p| p.usable() * p.layers * lbb).sum();
    // What the sequences these pools hold would take with every layer keeping every position.
    let seqs = crate::kv_cache::groups::full_length_seqs(&planned, shape);
    let full_attention_bytes = seqs * shape.max_seq_len.div_ceil(bs) * windows.len() * lbb;
    Ok(KvCachePlan {
        num_blocks: groups[0].num_blocks,
        bytes,
        groups,
        full_attention_bytes,
        ..full
    })
}

/// Bytes the configured batch of full-length sequences takes with every layer keeping every
/// position (`layers` layers).
fn full_batch_bytes(shape: &PlanShape, layers: usize) -> usize {
    shape.max_num_seqs
        * shape.max_seq_len.div_ceil(shape.block_size)
        * layers
        * shape.layer_block_bytes
}

/// The weights' formats in words: the checkpoint's quantization, the parts `--requantize`
/// converted (ModelOpt's rounding for NVFP4), and, for NVFP4, how the device computes with it.
pub fn describe_weights(
    c: &crate::loader::ModelConfig,
    requantize: crate::loader::Requantize,
    device: &str,
) -> String {
    let checkpoint = match (&c.fp8, &c.nvfp4) {
        (Some(f), _) => format!("fp8 ({}x{} block scales)", f.block[0], f.block[1]),
        (_, Some(n)) => format!("nvfp4 ({})", n.describe()),
        _ => c.dtype.clone().unwrap_or_else(|| "unquantized".into()),
    };
    let mut s = format!("checkpoint {checkpoint}");
    if !requantize.is_empty() {
        s.push_str(&format!(
            "; re-quantized at load: {requantize} (NVFP4 with ModelOpt's rounding)"
        ));
    }
    let nvfp4_parts = c.nvfp4.is_some()
        || [
            requantize.lm_head,
            requantize.expert_gate_up,
            requantize.expert_down,
        ]
        .contains(&Some(crate::loader::requantize::Target::Nvfp4));
    if nvfp4_parts {
        s.push_str(&format!(
            "; NVFP4 weights on {device}: kept packed (4.5 bits a weight, weight-only kernels; \
             the MoE experts' stacks too) where CUDA computes in bf16; elsewhere dequantized at \
             load (their exact values)"
        ));
    }
    s
}

/// Total memory from /proc/meminfo; 8 GiB where it cannot be read.
fn system_memory_bytes() -> usize {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<usize>().ok())
        })
        .map_or(8 << 30, |kb| kb * 1024)
}
