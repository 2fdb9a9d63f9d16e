//! `met serve`'s flags, checked once into a [`ServeConfig`]: unknown values and contradictions
//! are errors at start, not surprises later.

use std::path::PathBuf;
use std::time::Duration;

use super::limits::{HttpFlags, HttpLimits};
use crate::engine_core::EngineConfig;
use crate::loader::{LoadFormat, ModelConfig, ModelDir};
use crate::scheduler::{DraftLadder, MAX_DRAFTS, SpeculativeConfig};
use crate::tool_parsers::{ReasoningFormat, ToolCallFormat};

/// Tokens a KV block holds.
pub const BLOCK_SIZE: usize = 16;

pub use crate::engine_core::{ComputeDtype, Device};
pub use parallel::NodeFlags;

mod parallel;

/// `--kv-cache-dtype` (a clap `ValueEnum`: `met`'s flag is this enum).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KvCacheDtype {
    /// The model's dtype.
    Auto,
    Bf16,
    /// e4m3 values with one f32 scale per 128 dims of each cached head: about half the memory
    /// of bf16 on cuda; the cpu rounds its f32 cache the same way (same accuracy, no saving).
    Fp8,
}

/// The flags as typed (clap's types live in `cli.rs`; the value enums are the engine's own).
#[derive(Debug, Clone)]
pub struct ServeFlags {
    pub model: PathBuf,
    pub host: String,
    pub port: u16,
    pub model_name: Option<String>,
    pub device: Device,
    pub dtype: ComputeDtype,
    pub load_format: LoadFormat,
    /// `--requantize`, parsed.
    pub requantize: crate::loader::Requantize,
    pub max_seq_len: Option<usize>,
    /// `None`: [`default_max_batch_size`] for the device.
    pub max_batch_size: Option<usize>,
    pub max_num_batched_tokens: Option<usize>,
    /// `--prefill-chunk-with-decodes`; `None`: off.
    pub prefill_chunk_with_decodes: Option<usize>,
    pub gpu_memory_utilization: f64,
    pub kv_cache_dtype: KvCacheDtype,
    pub enable_prefix_caching: bool,
    pub enforce_eager: bool,
    /// The tuning knobs (`crate::tuning`), read once at start-up.
    pub tuning: crate::tuning::Tuning,
    pub api_key: Option<String>,
    pub max_queued_requests: usize,
    /// Seconds.
    pub request_timeout: Option<f64>,
    pub disable_thinking: bool,
    pub no_tui: bool,
    pub metrics_socket: Option<PathBuf>,
    /// `--tool-call-parser`: `qwen3_coder` or `hermes`.
    pub tool_call_parser: Option<String>,
    /// `--disable-tool-grammar`.
    pub disable_tool_grammar: bool,
    /// `--reasoning-parser`: `qwen3`.
    pub reasoning_parser: Option<String>,
    /// `--num-gpu-blocks-override`: usable KV blocks, whatever the memory says.
    pub num_gpu_blocks_override: Option<usize>,
    /// `--ssm-cache-slots` (hybrid models; default: the batch size).
    pub ssm_cache_slots: Option<usize>,
    /// `--ssm-checkpoint-slots` (hybrid models with prefix caching; default: the cache slots).
    pub ssm_checkpoint_slots: Option<usize>,
    /// `--ssm-checkpoint-interval` in tokens (default [`DEFAULT_SSM_CHECKPOINT_INTERVAL`]).
    pub ssm_checkpoint_interval: Option<usize>,
    /// `--speculative` (drafts from the checkpoint's MTP head).
    pub speculative: bool,
    /// `--tensor-parallel-size` (1: the whole model in this process).
    pub tensor_parallel_size: usize,
    /// `--enable-expert-parallel` (with more than one rank).
    pub enable_expert_parallel: bool,
    /// `--nnodes`, `--node-rank`, `--master-addr`, `--master-port`.
    pub nodes: NodeFlags,
    /// `--num-drafts` (with `--speculative`; default [`DEFAULT_NUM_DRAFTS`]).
    pub num_drafts: Option<usize>,
    /// `--speculative-max-batch` (with `--speculative`; default
    /// [`DEFAULT_SPECULATIVE_MAX_BATCH`]).
    pub speculative_max_batch: Option<usize>,
    /// Connection timeouts and caps, the tokenizer pool (`limits.rs`).
    pub http: HttpFlags,
    /// `--special-tokens-in-content`.
    pub special_tokens_in_content: bool,
    /// `--speculative-ladder` as typed (with `--speculative`; default `1:NUM_DRAFTS`).
    pub speculative_ladder: Option<String>,
    /// `--speculative-draft-cost` (with `--speculative`; default [`DEFAULT_DRAFT_COST`]).
    pub speculative_draft_cost: Option<f64>,
}

/// Default of `--num-drafts`: what our recipes use.
pub const DEFAULT_NUM_DRAFTS: usize = 3;
/// Default of `--speculative-max-batch`: above this many running sequences a step is
/// bandwidth-bound no more, and verifying drafts costs more than it saves.
pub const DEFAULT_SPECULATIVE_MAX_BATCH: usize = 32;

/// Default of `--speculative-draft-cost`: what a draft adds to a step, as a fraction of a plain
/// decode step, measured on the H200 with verify steps replayed as graphs (35B-A3B FP8 shape,
/// C=1: 3.89 ms plain, 8.24 ms with 3 drafts, 0.37 a draft; docs/speculative.md). At 0.35 the
/// policy drafts 2 at acceptance 0.7 and stops drafting below about 0.37; issue 33's target
/// verify step (c ≤ 0.18) would make 3 pay.
pub const DEFAULT_DRAFT_COST: f64 = 0.35;

/// Default of `--ssm-checkpoint-interval`: a state checkpoint every 512 tokens of a prefix
/// (32 blocks), so a shared system prompt of a few thousand tokens keeps a handful.
pub const DEFAULT_SSM_CHECKPOINT_INTERVAL: usize = 512;

/// Everything `met serve` runs with, validated.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub engine: EngineConfig,
    pub host: String,
    pub port: u16,
    pub api_key: Option<String>,
    pub request_timeout: Option<Duration>,
    pub disable_thinking: bool,
    pub gpu_memory_utilization: f64,
    pub kv_cache_dtype: KvCacheDtype,
    /// Accepted now; the TUI and the metrics socket come later.
    pub no_tui: bool,
    pub metrics_socket: Option<PathBuf>,
    pub tool_call_parser: Option<ToolCallFormat>,
    /// `--disable-tool-grammar`: tool calls are not held to the format's grammar.
    pub disable_tool_grammar: bool,
    pub reasoning_parser: Option<ReasoningFormat>,
    pub http: HttpLimits,
    pub special_tokens_in_content: bool,
}

/// Default of `--max-batch-size`: the engine sizes the KV cache for this many sequences at
/// full length, so the CPU default stays small (16 × the demo's 2048 tokens is ~0.4 GiB of
/// cache, where vLLM's 256 would be 6 GiB).
pub fn default_max_batch_size(device: Device) -> usize {
    match device {
        Device::Cpu => 16,
        Device::Cuda => 256,
    }
}

/// Default of `--max-num-batched-tokens` (raised to the batch size when that is larger).
pub const DEFAULT_MAX_NUM_BATCHED_TOKENS: usize = 2048;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{flag}: {message}")]
pub struct FlagError {
    pub flag: &'static str,
    pub message: String,
}

pub(super) fn bad(flag: &'static str, message: impl Into<String>) -> FlagError {
    FlagError {
        flag,
        message: message.into(),
    }
}

/// `--dtype` against the device (`met serve` and `met score` alike). Every checkpoint the
/// device runs runs on either path: the CUDA float32 path takes MoE, FP8 (dequantized to f32)
/// and Qwen3.5 hybrids too.
pub fn check_dtype(dtype: ComputeDtype, device: Device) -> Result<(), FlagError> {
    match (dtype, device) {
        (ComputeDtype::Bfloat16, Device::Cpu) => Err(bad(
            "--dtype bfloat16",
            "the cpu backend computes in float32: drop --dtype, or use --device cuda",
        )),
        _ => Ok(()),
    }
}

/// `--speculative` drafts with the checkpoint's MTP head: refuse, before anything is served, a
/// checkpoint whose `config.json` says it has none.
fn check_mtp_head(dir: &ModelDir, model: &ModelConfig) -> anyhow::Result<()> {
    use crate::models::qwen3_5::{self, Qwen3_5Config};
    let without = "serve it without --speculative";
    if !qwen3_5::is_hybrid(&model.architecture) {
        return Err(bad(
            "--speculative",
            format!(
                "needs the checkpoint's multi-token-prediction (MTP) head, which Qwen3.5/3.6 \
                 checkpoints carry and {} does not: {without}",
                model.architecture
            ),
        )
        .into());
    }
    let hybrid = Qwen3_5Config::from_file(&dir.root.join("config.json"))?;
    if hybrid.mtp_num_hidden_layers == 0 {
        return Err(bad(
            "--speculative",
            format!(
                "this checkpoint has no MTP head (config.json's mtp_num_hidden_layers is 0 or \
                 absent): {without}"
            ),
        )
        .into());
    }
    Ok(())
}

impl ServeFlags {
    /// Check the flags against each other and the checkpoint's `config.json`.
    pub fn validate(self) -> anyhow::Result<ServeConfig> {
        let dir = ModelDir::open(&self.model)?;
        let model = dir.config()?;
        let rendezvous = parallel::check(&self, &model)?;
        if self.device == Device::Cuda && !cfg!(feature = "cuda") {
            return Err(bad(
                "--device cuda",
                "this build of met has no CUDA backend: build it with `--features cuda`, or use --device cpu",
            )
            .into());
        }
        check_dtype(self.dtype, self.device)?;
        if self.dtype == ComputeDtype::Float32 && self.kv_cache_dtype == KvCacheDtype::Fp8 {
            return Err(bad(
                "--kv-cache-dtype fp8",
                "the float32 path keeps an f32 cache: drop one of --dtype float32 and --kv-cache-dtype fp8",
            )
            .into());
        }
        if !(self.gpu_memory_utilization > 0.0 && self.gpu_memory_utilization <= 1.0) {
            return Err(bad(
                "--gpu-memory-utilization",
                format!("must be in (0, 1], got {}", self.gpu_memory_utilization),
            )
            .into());
        }
        let served_name = match self.model_name {
            Some(n) if n.trim().is_empty() => {
                return Err(bad("--model-name", "must not be empty").into());
            }
            Some(n) => n,
            None => default_name(&self.model),
        };
        if let Some(n) = self.max_seq_len {
            if n == 0 {
                return Err(bad("--max-seq-len", "must be at least 1").into());
            }
            if n > model.max_position_embeddings {
                return Err(bad(
                    "--max-seq-len",
                    format!(
                        "{n} exceeds the model's context of {} tokens (max_position_embeddings)",
                        model.max_position_embeddings
                    ),
                )
                .into());
            }
        }
        let max_batch_size = self
            .max_batch_size
            .unwrap_or_else(|| default_max_batch_size(self.device));
        if max_batch_size == 0 {
            return Err(bad("--max-batch-size", "must be at least 1").into());
        }
        let max_num_batched_tokens = match self.max_num_batched_tokens {
            Some(t) if t < max_batch_size => {
                return Err(bad(
                    "--max-num-batched-tokens",
                    format!(
                        "{t} is less than --max-batch-size {}: every sequence in a step needs at \
                         least one token",
                        max_batch_size
                    ),
                )
                .into());
            }
            Some(t) => t,
            None => DEFAULT_MAX_NUM_BATCHED_TOKENS.max(max_batch_size),
        };
        if self.prefill_chunk_with_decodes == Some(0) {
            return Err(bad(
                "--prefill-chunk-with-decodes",
                "must be at least 1 (leave it out to let prompts take the whole step budget)",
            )
            .into());
        }
        if self.max_queued_requests == 0 {
            return Err(bad("--max-queued-requests", "must be at least 1").into());
        }
        let request_timeout = match self.request_timeout {
            Some(t) if !(t > 0.0 && t.is_finite()) => {
                return Err(bad(
                    "--request-timeout",
                    format!("must be a positive number of seconds, got {t}"),
                )
                .into());
            }
            Some(t) => Some(Duration::from_secs_f64(t)),
            None => None,
        };
        let tool_call_parser = match self.tool_call_parser.as_deref() {
            None => None,
            Some(p) => Some(ToolCallFormat::from_flag(p).ok_or_else(|| {
                bad(
                    "--tool-call-parser",
                    format!("unknown parser `{p}`; use qwen3_coder (Qwen3-Coder, Qwen3.5/3.6), hermes (Qwen3, Qwen2.5), llama3_json (Llama 3.1+), mistral (Mistral), openai (gpt-oss's harmony), minimax_m2 (MiniMax-M2), deepseek_v3 (DeepSeek-V3, R1), deepseek_v31 (DeepSeek-V3.1) or nemotron_json (Nemotron Nano v2)"),
                )
            })?),
        };
        let reasoning_parser = match self.reasoning_parser.as_deref() {
            None => None,
            Some(p) => Some(ReasoningFormat::from_flag(p).ok_or_else(|| {
                bad(
                    "--reasoning-parser",
                    format!(
                        "unknown parser `{p}`; use qwen3 (`<think>…</think>`) or \
                         openai_gptoss (gpt-oss's harmony `analysis` channel)"
                    ),
                )
            })?),
        };
        for (flag, set) in [
            ("--num-drafts", self.num_drafts.is_some()),
            (
                "--speculative-max-batch",
                self.speculative_max_batch.is_some(),
            ),
            ("--speculative-ladder", self.speculative_ladder.is_some()),
            (
                "--speculative-draft-cost",
                self.speculative_draft_cost.is_some(),
            ),
        ] {
            if set && !self.speculative {
                return Err(bad(flag, "needs --speculative").into());
            }
        }
        if let Some(n) = self.num_drafts
            && !(1..=MAX_DRAFTS).contains(&n)
        {
            return Err(bad(
                "--num-drafts",
                format!("{n} is not between 1 and {MAX_DRAFTS}"),
            )
            .into());
        }
        if self.speculative_max_batch == Some(0) {
            return Err(bad("--speculative-max-batch", "must be at least 1").into());
        }
        // A ladder as given, capped by the two older flags when they are given too; without
        // one, `--num-drafts` drafts up to `--speculative-max-batch` sequences.
        let ladder = match self.speculative_ladder.as_deref() {
            Some(l) => l
                .parse::<DraftLadder>()
                .map_err(|e| bad("--speculative-ladder", e.to_string()))?
                .limited(self.num_drafts, self.speculative_max_batch),
            None => DraftLadder::flat(
                self.num_drafts.unwrap_or(DEFAULT_NUM_DRAFTS),
                self.speculative_max_batch
                    .unwrap_or(DEFAULT_SPECULATIVE_MAX_BATCH),
            ),
        };
        let draft_cost = self.speculative_draft_cost.unwrap_or(DEFAULT_DRAFT_COST);
        if !(draft_cost.is_finite() && draft_cost >= 0.0) {
            return Err(bad(
                "--speculative-draft-cost",
                format!(
                    "{draft_cost} is not a fraction of a decode step at least 0 (e.g. \
                     {DEFAULT_DRAFT_COST}; 0 drafts the ladder's cap whatever the acceptance)"
                ),
            )
            .into());
        }
        if self.speculative {
            check_mtp_head(&dir, &model)?;
        }
        let speculative = self
            .speculative
            .then_some(SpeculativeConfig { ladder, draft_cost });
        if self.api_key.as_deref().is_some_and(str::is_empty) {
            return Err(bad("--api-key", "must not be empty").into());
        }
        for (flag, value) in [
            ("--num-gpu-blocks-override", self.num_gpu_blocks_override),
            ("--ssm-cache-slots", self.ssm_cache_slots),
        ] {
            if value == Some(0) {
                return Err(bad(flag, "must be at least 1").into());
            }
        }
        let ssm_checkpoint_interval = self
            .ssm_checkpoint_interval
            .unwrap_or(DEFAULT_SSM_CHECKPOINT_INTERVAL);
        if ssm_checkpoint_interval == 0 || !ssm_checkpoint_interval.is_multiple_of(BLOCK_SIZE) {
            return Err(bad(
                "--ssm-checkpoint-interval",
                format!(
                    "{ssm_checkpoint_interval} must be a positive multiple of the KV block size \
                     ({BLOCK_SIZE} tokens), e.g. {DEFAULT_SSM_CHECKPOINT_INTERVAL}"
                ),
            )
            .into());
        }
        Ok(ServeConfig {
            engine: EngineConfig {
                model_dir: self.model,
                device: self.device,
                dtype: self.dtype,
                gpu_memory_utilization: self.gpu_memory_utilization,
                served_name,
                load_format: self.load_format,
                requantize: self.requantize,
                max_seq_len: self.max_seq_len,
                max_num_seqs: max_batch_size,
                max_num_batched_tokens,
                max_prefill_with_decodes: self.prefill_chunk_with_decodes,
                max_queued_requests: self.max_queued_requests,
                enable_prefix_caching: self.enable_prefix_caching,
                enforce_eager: self.enforce_eager,
                // Resolved: `--enforce-eager` turns graphs off whatever the environment says.
                tuning: {
                    let mut t = self.tuning;
                    t.launch.cuda_graphs &= !self.enforce_eager;
                    t
                },
                block_size: BLOCK_SIZE,
                kv_cache_bytes: None,
                num_gpu_blocks_override: self.num_gpu_blocks_override,
                ssm_cache_slots: self.ssm_cache_slots,
                ssm_checkpoint_slots: self.ssm_checkpoint_slots,
                ssm_checkpoint_interval,
                kv_cache_fp8: self.kv_cache_dtype == KvCacheDtype::Fp8,
                speculative,
                tensor_parallel_size: self.tensor_parallel_size,
                enable_expert_parallel: self.enable_expert_parallel,
                rendezvous,
                dist_timeout: Duration::from_secs(self.nodes.dist_timeout_secs),
            },
            host: self.host,
            port: self.port,
            api_key: self.api_key,
            request_timeout,
            disable_thinking: self.disable_thinking,
            gpu_memory_utilization: self.gpu_memory_utilization,
            kv_cache_dtype: self.kv_cache_dtype,
            no_tui: self.no_tui,
            metrics_socket: self.metrics_socket,
            tool_call_parser,
            disable_tool_grammar: self.disable_tool_grammar,
            reasoning_parser,
            http: self.http.validate()?,
            special_tokens_in_content: self.special_tokens_in_content,
        })
    }
}

/// The checkpoint directory's name (`models/demo` → `demo`).
fn default_name(model: &std::path::Path) -> String {
    model
        .file_name()
        .map(ToOwned::to_owned)
        .or_else(|| {
            std::fs::canonicalize(model)
                .ok()
                .and_then(|p| p.file_name().map(ToOwned::to_owned))
        })
        .map_or_else(
            || model.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags() -> ServeFlags {
        ServeFlags {
            model: PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/fixtures/models/qwen3-gqa-tied"),
            host: "127.0.0.1".into(),
            port: 0,
            model_name: None,
            device: Device::Cpu,
            dtype: ComputeDtype::Auto,
            load_format: LoadFormat::Auto,
            requantize: Default::default(),
            max_seq_len: None,
            max_batch_size: Some(8),
            max_num_batched_tokens: None,
            prefill_chunk_with_decodes: None,
            gpu_memory_utilization: 0.9,
            kv_cache_dtype: KvCacheDtype::Auto,
            enable_prefix_caching: false,
            enforce_eager: false,
            tuning: crate::tuning::Tuning::default(),
            api_key: None,
            max_queued_requests: 4,
            request_timeout: None,
            disable_thinking: false,
            no_tui: false,
            metrics_socket: None,
            tool_call_parser: None,
            disable_tool_grammar: false,
            reasoning_parser: None,
            num_gpu_blocks_override: None,
            ssm_cache_slots: None,
            ssm_checkpoint_slots: None,
            ssm_checkpoint_interval: None,
            speculative: false,
            tensor_parallel_size: 1,
            enable_expert_parallel: false,
            nodes: NodeFlags {
                nnodes: 1,
                dist_timeout_secs: crate::engine_core::ranks::DEFAULT_DIST_TIMEOUT.as_secs(),
                ..Default::default()
            },
            num_drafts: None,
            speculative_max_batch: None,
            http: HttpFlags::default(),
            special_tokens_in_content: false,
            speculative_ladder: None,
            speculative_draft_cost: None,
        }
    }

    fn refused(f: ServeFlags) -> String {
        f.validate().expect_err("should be refused").to_string()
    }

    #[test]
    fn dtype_is_checked_against_the_device() {
        let mut f = flags();
        f.dtype = ComputeDtype::Bfloat16;
        assert_eq!(
            refused(f),
            "--dtype bfloat16: the cpu backend computes in float32: drop --dtype, or use --device cuda"
        );
        let mut f = flags();
        f.dtype = ComputeDtype::Float32;
        assert_eq!(
            f.validate().expect("float32 on the cpu").engine.dtype,
            ComputeDtype::Float32
        );
        // The CUDA float32 path runs every family the bf16 path runs (MoE, FP8 and hybrids
        // included), so no checkpoint is
        // refused for --dtype float32 on cuda; with the cpu device every dtype but bfloat16
        // passes.
        for dtype in [
            ComputeDtype::Auto,
            ComputeDtype::Bfloat16,
            ComputeDtype::Float32,
        ] {
            assert_eq!(check_dtype(dtype, Device::Cuda), Ok(()), "{dtype:?}");
        }
        assert_eq!(check_dtype(ComputeDtype::Auto, Device::Cpu), Ok(()));
    }

    #[test]
    fn defaults_fill_in() {
        let c = flags().validate().expect("valid");
        assert_eq!(c.engine.served_name, "qwen3-gqa-tied");
        assert_eq!(c.engine.max_num_batched_tokens, 2048);
        let mut f = flags();
        f.max_batch_size = None;
        assert_eq!(f.validate().expect("valid").engine.max_num_seqs, 16);
        assert_eq!(c.engine.block_size, BLOCK_SIZE);
    }

    #[test]
    fn contradictions_are_errors_that_name_the_flag() {
        let mut f = flags();
        f.max_seq_len = Some(100_000);
        assert!(refused(f).starts_with("--max-seq-len: 100000 exceeds"));
        let mut f = flags();
        f.max_num_batched_tokens = Some(4);
        assert!(refused(f).starts_with("--max-num-batched-tokens"));
        let mut f = flags();
        f.prefill_chunk_with_decodes = Some(0);
        assert!(refused(f).starts_with("--prefill-chunk-with-decodes: must be at least 1"));
        let mut f = flags();
        f.prefill_chunk_with_decodes = Some(512);
        let c = f.validate().expect("valid");
        assert_eq!(c.engine.max_prefill_with_decodes, Some(512));
        let mut f = flags();
        f.ssm_checkpoint_interval = Some(24);
        let e = refused(f);
        assert!(
            e.starts_with("--ssm-checkpoint-interval: 24 must be a positive multiple"),
            "{e}"
        );
        let mut f = flags();
        f.ssm_cache_slots = Some(0);
        assert!(refused(f).starts_with("--ssm-cache-slots: must be at least 1"));
        let mut f = flags();
        f.num_drafts = Some(3);
        assert_eq!(refused(f), "--num-drafts: needs --speculative");
        let mut f = flags();
        (f.speculative, f.num_drafts) = (true, Some(0));
        assert_eq!(refused(f), "--num-drafts: 0 is not between 1 and 16");
        let mut f = flags();
        f.speculative_max_batch = Some(8);
        assert_eq!(refused(f), "--speculative-max-batch: needs --speculative");
        let mut f = flags();
        (f.speculative, f.speculative_max_batch) = (true, Some(0));
        assert_eq!(refused(f), "--speculative-max-batch: must be at least 1");
        let mut f = flags();
        (f.speculative, f.num_drafts) = (true, Some(17));
        assert_eq!(refused(f), "--num-drafts: 17 is not between 1 and 16");
        let spec = |f: ServeFlags| f.validate().expect("valid").engine.speculative;
        let mut f = flags();
        f.speculative = true;
        let e = refused(f.clone());
        assert!(
            e.starts_with(
                "--speculative: needs the checkpoint's multi-token-prediction (MTP) head"
            ) && e.contains("Qwen3ForCausalLM does not"),
            "{e}"
        );
        f.model = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/models/qwen3_5-hybrid-dense");
        let ladder = |f: ServeFlags| spec(f).expect("speculative").ladder.to_string();
        let default = spec(f.clone()).expect("speculative");
        assert_eq!(default.ladder.to_string(), "1:3,33:0");
        assert_eq!(default.draft_cost, DEFAULT_DRAFT_COST);
        let mut g = f.clone();
        (g.num_drafts, g.speculative_max_batch) = (Some(5), Some(4));
        assert_eq!(ladder(g), "1:5,5:0");
        let mut g = f.clone();
        g.speculative_ladder = Some("1:3,2:2,8:1,32:0".into());
        assert_eq!(ladder(g.clone()), "1:3,2:2,8:1,32:0");
        (g.num_drafts, g.speculative_max_batch) = (Some(2), Some(16));
        assert_eq!(ladder(g.clone()), "1:2,2:2,8:1,17:0,32:0");
        g.speculative_draft_cost = Some(0.0);
        assert_eq!(spec(g).expect("speculative").draft_cost, 0.0);
        let mut g = f.clone();
        g.speculative_ladder = Some("1:3,8".into());
        assert_eq!(
            refused(g),
            "--speculative-ladder: `8` is not a rung RUNNING:DRAFTS (running sequences, then \
             drafts a step, both whole numbers), e.g. 1:3,2:2,8:1"
        );
        for bad_cost in [-0.1, f64::NAN, f64::INFINITY] {
            let mut g = f.clone();
            g.speculative_draft_cost = Some(bad_cost);
            assert!(
                refused(g).starts_with(&format!(
                    "--speculative-draft-cost: {bad_cost} is not a fraction of a decode step"
                )),
                "{bad_cost}"
            );
        }
        assert_eq!(spec(flags()), None);
        let mut g = flags();
        g.speculative_ladder = Some("1:3".into());
        assert_eq!(refused(g), "--speculative-ladder: needs --speculative");
        let mut g = flags();
        g.speculative_draft_cost = Some(0.2);
        assert_eq!(refused(g), "--speculative-draft-cost: needs --speculative");
        let mut f = flags();
        f.kv_cache_dtype = KvCacheDtype::Fp8;
        assert!(
            f.clone()
                .validate()
                .expect("fp8 cache on the cpu")
                .engine
                .kv_cache_fp8
        );
        f.dtype = ComputeDtype::Float32;
        assert!(
            refused(f).starts_with("--kv-cache-dtype fp8: the float32 path keeps an f32 cache")
        );
        let mut f = flags();
        f.gpu_memory_utilization = 1.5;
        assert!(refused(f).starts_with("--gpu-memory-utilization"));
        let mut f = flags();
        f.request_timeout = Some(0.0);
        assert!(refused(f).starts_with("--request-timeout"));
        let mut f = flags();
        f.tool_call_parser = Some("pythonic".into());
        assert!(refused(f).starts_with("--tool-call-parser: unknown parser `pythonic`"));
        let mut f = flags();
        f.reasoning_parser = Some("deepseek_r1".into());
        assert!(refused(f).starts_with("--reasoning-parser"));
        let mut f = flags();
        f.tool_call_parser = Some("qwen3_coder".into());
        f.reasoning_parser = Some("qwen3".into());
        let c = f.validate().expect("valid");
        assert_eq!(c.tool_call_parser, Some(ToolCallFormat::Qwen3Coder));
        assert_eq!(c.reasoning_parser, Some(ReasoningFormat::Qwen3));
        let mut f = flags();
        f.model = PathBuf::from("/nonexistent");
        assert!(refused(f).contains("is not a model directory"));
    }
}
