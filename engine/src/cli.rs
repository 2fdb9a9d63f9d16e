//! `met`'s command line (clap types only). The value enums are the engine's own types with
//! clap's `ValueEnum` derived on them, not copies.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
pub use metrale_engine::engine_core::{ComputeDtype, Device};
use metrale_engine::loader::LoadFormat;
use metrale_engine::server::config::KvCacheDtype;

#[derive(Debug, Parser)]
#[command(
    name = "met",
    version = env!("MET_VERSION_LONG"),
    about = "Metrale inference engine",
    propagate_version = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the model over an OpenAI-compatible HTTP API.
    Serve(Box<ServeArgs>),
    /// Score a token sequence: each next token's log-probability and the top-k alternatives, as JSON.
    Score(ScoreArgs),
    /// Fetch a Hub checkpoint (ORG/NAME) into the Hugging Face cache and print its directory.
    Download(DownloadArgs),
    /// Print the tuning settings' Markdown table (docs/cuda.md's "Tuning" is this).
    #[command(hide = true)]
    PrintTuningTable,
}

#[derive(Debug, Args)]
pub struct DownloadArgs {
    /// The repository id, ORG/NAME.
    pub repo: String,
    /// The branch, tag or commit to fetch.
    #[arg(long, default_value = "main")]
    pub revision: String,
}

#[derive(Debug, Clone, Args)]
pub struct ModelArgs {
    /// A Hugging Face checkpoint directory (config.json, *.safetensors, tokenizer.json), or
    /// with `serve` a Hub repository id (ORG/NAME), fetched into the Hugging Face cache.
    pub model: PathBuf,
    /// Where to run the model.
    #[arg(long, value_enum, default_value = "cpu")]
    pub device: Device,
    /// The type weights, activations and the KV cache are computed in.
    #[arg(long, value_enum, default_value = "auto")]
    pub dtype: ComputeDtype,
    /// How to obtain weights.
    #[arg(long, value_enum, default_value = "auto")]
    pub load_format: LoadFormat,
}

#[derive(Debug, Args)]
pub struct ScoreArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Token ids, comma-separated (e.g. 9707,11,1879).
    #[arg(
        long,
        value_delimiter = ',',
        conflicts_with = "tokens_file",
        required_unless_present = "tokens_file"
    )]
    pub tokens: Vec<u32>,
    /// A JSON file holding an array of token ids.
    #[arg(long)]
    pub tokens_file: Option<PathBuf>,
    /// Alternatives to report at each position.
    #[arg(long, default_value_t = 5)]
    pub top_k: usize,
    /// The KV cache's number format while scoring (fp8: e4m3 with a scale per head; see
    /// `met serve --help`), to measure what the FP8 cache costs in accuracy.
    #[arg(long, value_enum, default_value_t = KvCacheDtype::Auto)]
    pub kv_cache_dtype: KvCacheDtype,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on; 0 picks a free one (the address is printed).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// The name clients pass as `model` (default: the checkpoint directory's name, or the
    /// repository id of a Hub checkpoint).
    #[arg(long)]
    pub model_name: Option<String>,
    /// With a Hub repository id as MODEL: the branch, tag or commit to fetch.
    #[arg(long, default_value = "main")]
    pub revision: String,
    /// Longest sequence, prompt plus output (default: the model's context).
    #[arg(long)]
    pub max_seq_len: Option<usize>,
    /// Most sequences in one engine step [default: 16 on the cpu, 256 on cuda].
    #[arg(long)]
    pub max_batch_size: Option<usize>,
    /// Token budget of one step; longer prompts are prefilled in chunks [default: 2048, or the
    /// batch size if larger].
    #[arg(long)]
    pub max_num_batched_tokens: Option<usize>,
    /// Fraction of GPU memory to use, in (0, 1] (CUDA).
    #[arg(long, default_value_t = 0.9)]
    pub gpu_memory_utilization: f64,
    /// KV cache storage type.
    #[arg(long, value_enum, default_value = "auto")]
    pub kv_cache_dtype: KvCacheDtype,
    /// Reuse the KV cache of shared prompt prefixes.
    #[arg(long)]
    pub enable_prefix_caching: bool,
    /// Run every step op by op, never replaying a captured CUDA graph (slower; for debugging).
    #[arg(long)]
    pub enforce_eager: bool,
    /// Require `Authorization: Bearer KEY` on the API (not on /health, /ready, /metrics).
    #[arg(long, env = "MET_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Requests waiting beyond this are refused with 429 and Retry-After.
    #[arg(long, default_value_t = 1024)]
    pub max_queued_requests: usize,
    /// Abort a request running longer than this many seconds (504, or an error event when
    /// streaming).
    #[arg(long, value_name = "SECONDS")]
    pub request_timeout: Option<f64>,
    /// Chat templates get `enable_thinking=false` unless a request's `chat_template_kwargs`
    /// says otherwise.
    #[arg(long)]
    pub disable_thinking: bool,
    /// Do not show the terminal dashboard.
    #[arg(long)]
    pub no_tui: bool,
    /// Parse tool calls in replies: qwen3_coder (Qwen3-Coder, Qwen3.5/3.6) or hermes (Qwen3).
    #[arg(long, value_name = "PARSER")]
    pub tool_call_parser: Option<String>,
    /// Split `<think>…</think>` into reasoning: qwen3.
    #[arg(long, value_name = "PARSER")]
    pub reasoning_parser: Option<String>,
    /// Exactly this many KV cache blocks, whatever the memory would allow (for tests and
    /// reproducing memory pressure).
    #[arg(long, value_name = "N")]
    pub num_gpu_blocks_override: Option<usize>,
    /// Hybrid (linear-attention) models: recurrent-state slots, one per running sequence; a
    /// request waits for a free one [default: --max-batch-size].
    #[arg(long, value_name = "N")]
    pub ssm_cache_slots: Option<usize>,
    /// Hybrid models with --enable-prefix-caching: recurrent-state checkpoints kept for
    /// prefix reuse, least recently used evicted first [default: --ssm-cache-slots].
    #[arg(long, value_name = "N")]
    pub ssm_checkpoint_slots: Option<usize>,
    /// Hybrid models with --enable-prefix-caching: tokens between recurrent-state checkpoints,
    /// a multiple of the 16-token KV block; a cached prefix is reused up to its last
    /// checkpoint [default: 512].
    #[arg(long, value_name = "TOKENS")]
    pub ssm_checkpoint_interval: Option<usize>,
    /// Speculative decoding with the checkpoint's multi-token-prediction (MTP) head
    /// (Qwen3.5/3.6), as our recipes ask (`[serve.speculative]`): the head drafts tokens that
    /// the model verifies in its next step; the output is what it would be without.
    #[arg(long)]
    pub speculative: bool,
    /// With --speculative: tokens the MTP head drafts a step (1 to 16) [default: 3].
    #[arg(long, value_name = "N")]
    pub num_drafts: Option<usize>,
    /// With --speculative: drafting pauses while more sequences than this are running
    /// [default: 32].
    #[arg(long, value_name = "SEQS")]
    pub speculative_max_batch: Option<usize>,
    /// With --speculative: the most drafts a step by running sequences, as rungs
    /// RUNNING:DRAFTS, e.g. `1:3,2:2,8:1,32:0` (3 drafts from 1 sequence, 2 from 2, 1 from 8,
    /// none from 32; without a `N:0` rung, drafts at any batch); --num-drafts and
    /// --speculative-max-batch cap it [default: 1:NUM_DRAFTS,MAX_BATCH+1:0].
    #[arg(long, value_name = "LADDER")]
    pub speculative_ladder: Option<String>,
    /// With --speculative: what one draft adds to a step's time, as a fraction of a plain
    /// decode step; with the acceptance measured so far it decides how many drafts pay, down
    /// to none (0: always draft the ladder's cap) [default: 0.15].
    #[arg(long, value_name = "FRACTION", allow_negative_numbers = true)]
    pub speculative_draft_cost: Option<f64>,
    /// Unix socket for live metrics events (NDJSON, docs/metrics-socket.md) [default:
    /// $XDG_RUNTIME_DIR/metrale/met-PORT.sock, else /tmp/metrale-UID/met-PORT.sock].
    #[arg(long, value_name = "PATH")]
    pub metrics_socket: Option<PathBuf>,
}
