//! `met`'s command line (clap types only). The value enums are the engine's own types with
//! clap's `ValueEnum` derived on them, not copies.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use metrale_engine::engine_core::ranks::DEFAULT_DIST_TIMEOUT;
pub use metrale_engine::engine_core::{ComputeDtype, Device};
use metrale_engine::loader::LoadFormat;
use metrale_engine::server::config::KvCacheDtype;
use metrale_engine::server::limits;

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
    /// One rank of `met serve --tensor-parallel-size N` (started by rank 0, not by hand).
    #[command(hide = true)]
    Rank(RankArgs),
}

#[derive(Debug, Args)]
pub struct RankArgs {
    /// The checkpoint directory rank 0 serves.
    pub model: PathBuf,
    /// This rank, 1 to N - 1.
    #[arg(long)]
    pub rank: usize,
    /// The group size N.
    #[arg(long)]
    pub world: usize,
    /// Rank 0's rendezvous address, HOST:PORT.
    #[arg(long)]
    pub master: std::net::SocketAddr,
    /// What the ranks agree on (rank 0 passes it).
    #[arg(long)]
    pub fingerprint: String,
    #[arg(long, value_enum, default_value = "auto")]
    pub load_format: LoadFormat,
    #[arg(long, default_value = "")]
    pub requantize: String,
    #[arg(long)]
    pub kv_cache_fp8: bool,
    #[arg(long)]
    pub expert_parallel: bool,
}

#[derive(Debug, Args)]
pub struct DownloadArgs {
    /// The repository id, ORG/NAME.
    pub repo: String,
    /// The branch, tag or commit to fetch.
    #[arg(long, default_value = "main")]
    pub revision: String,
    #[command(flatten)]
    pub progress: DownloadProgress,
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
    /// Re-quantize part of the checkpoint as it loads, PART=FORMAT (repeatable or
    /// comma-separated): PART lm_head, experts, experts.gate_up or experts.down (the routed
    /// experts' projections), FORMAT nvfp4 (ModelOpt's rounding) or bf16. What a recipe's
    /// [checkpoint.requantize] passes; reported at start-up and in GET /version.
    #[arg(long, value_name = "PART=FORMAT", value_delimiter = ',')]
    pub requantize: Vec<String>,
}

impl ModelArgs {
    /// `--requantize`, parsed (before anything is fetched or loaded).
    pub fn requantize(&self) -> anyhow::Result<metrale_engine::loader::Requantize> {
        metrale_engine::loader::Requantize::parse(self.requantize.iter().map(String::as_str))
            .map_err(anyhow::Error::msg)
    }
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
    /// Most prompt tokens a step prefills while other sequences are decoding (e.g. 512): long
    /// prompts then advance in chunks of this size beside running streams, whose inter-token
    /// latency stays near a small chunk's step; a step with nothing decoding still takes the
    /// whole --max-num-batched-tokens [default: off].
    #[arg(long)]
    pub prefill_chunk_with_decodes: Option<usize>,
    /// Fraction of GPU memory to use, in (0, 1] (CUDA).
    #[arg(long, default_value_t = 0.9)]
    pub gpu_memory_utilization: f64,
    /// KV cache storage type.
    #[arg(long, value_enum, default_value = "auto")]
    pub kv_cache_dtype: KvCacheDtype,
    /// Reuse the KV cache of shared prompt prefixes (`--enable-prefix-caching true|false` is
    /// accepted too).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL",
          action = clap::ArgAction::Set, default_value_t = false)]
    pub enable_prefix_caching: bool,
    /// Run every step op by op, never replaying a captured CUDA graph (slower; for debugging).
    #[arg(long)]
    pub enforce_eager: bool,
    /// Require `Authorization: Bearer KEY` on the API (not on /health, /ready, /metrics).
    #[arg(long, env = "MET_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Requests waiting for a batch slot beyond this are refused with 429 and Retry-After
    /// (a request that gets a free slot at once never counts; `n` choices count once).
    #[arg(long, default_value_t = 1024)]
    pub max_queued_requests: usize,
    /// Abort a request running longer than this many seconds (400 `request_timeout`, which
    /// clients do not retry, or an error event when streaming).
    #[arg(long, value_name = "SECONDS")]
    pub request_timeout: Option<f64>,
    /// Chat templates get `enable_thinking=false` unless a request's `chat_template_kwargs`
    /// says otherwise.
    #[arg(long)]
    pub disable_thinking: bool,
    /// Do not show the terminal dashboard.
    #[arg(long)]
    pub no_tui: bool,
    /// Parse tool calls in replies: qwen3_coder (Qwen3-Coder, Qwen3.5/3.6), hermes (Qwen3), llama3_json (Llama 3.1+), mistral, openai (gpt-oss), minimax_m2, deepseek_v3, deepseek_v31 or nemotron_json (Nemotron Nano v2).
    #[arg(long, value_name = "PARSER")]
    pub tool_call_parser: Option<String>,
    /// Split reasoning from the answer: qwen3 (`<think>…</think>`) or openai_gptoss (gpt-oss).
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
    /// Split the model over N ranks (tensor parallelism: attention by heads, MLPs by columns
    /// then rows, the head by vocabulary). With --device cpu the ranks are processes on this
    /// host joined over TCP; CUDA ranks need NCCL, not built yet.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub tensor_parallel_size: usize,
    /// With --tensor-parallel-size: split the routed experts whole over the ranks (each rank
    /// a slice of the experts at full width) instead of every expert's width; attention stays
    /// split by heads (vLLM's flag).
    #[arg(long)]
    pub enable_expert_parallel: bool,
    /// Hosts the --tensor-parallel-size ranks span (each runs N / NNODES of them); node 0
    /// serves HTTP, the others only run their ranks.
    #[arg(long, value_name = "NNODES", default_value_t = 1)]
    pub nnodes: usize,
    /// This host's place among --nnodes, 0 to NNODES - 1.
    #[arg(long, value_name = "RANK", default_value_t = 0)]
    pub node_rank: usize,
    /// Node 0's address the ranks meet at (with --nnodes above 1) [default: 127.0.0.1].
    #[arg(long, value_name = "ADDR")]
    pub master_addr: Option<String>,
    /// The port they meet on [default: a free one, with one node].
    #[arg(long, value_name = "PORT")]
    pub master_port: Option<u16>,
    /// Seconds rank 0 waits on another rank inside a step before it takes that rank for
    /// stuck, fails every request and stops (as a rank that died does).
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_DIST_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..))]
    pub dist_timeout: u64,
    /// With --speculative: drafting pauses while more sequences than this are running
    /// [default: 32].
    #[arg(long, value_name = "SEQS")]
    pub speculative_max_batch: Option<usize>,
    #[command(flatten)]
    pub http: HttpArgs,
    /// Let message content carry control tokens: `<|im_start|>` written in a message becomes
    /// the special token, so a client can forge chat turns (the old behaviour; by default
    /// what clients write is text and only the chat template's markup is control tokens).
    #[arg(long)]
    pub special_tokens_in_content: bool,
    /// With --speculative: the most drafts a step by running sequences, as rungs
    /// RUNNING:DRAFTS, e.g. `1:3,2:2,8:1,32:0` (3 drafts from 1 sequence, 2 from 2, 1 from 8,
    /// none from 32; without a `N:0` rung, drafts at any batch); --num-drafts and
    /// --speculative-max-batch cap it [default: 1:NUM_DRAFTS,MAX_BATCH+1:0].
    #[arg(long, value_name = "LADDER")]
    pub speculative_ladder: Option<String>,
    /// With --speculative: what one draft adds to a step's time, as a fraction of a plain
    /// decode step, until the engine has timed its own steps at the batch size; with the
    /// acceptance measured so far it decides how many drafts pay, down to none (0: always
    /// draft the ladder's cap, time nothing) [default: 0.35].
    #[arg(long, value_name = "FRACTION", allow_negative_numbers = true)]
    pub speculative_draft_cost: Option<f64>,
    /// Unix socket for live metrics events (NDJSON, docs/metrics-socket.md) [default:
    /// $XDG_RUNTIME_DIR/metrale/met-PORT.sock, else /tmp/metrale-UID/met-PORT.sock].
    #[arg(long, value_name = "PATH")]
    pub metrics_socket: Option<PathBuf>,
    #[command(flatten)]
    pub ladder: LadderArgs,
}

// ---- The reference ladder's flags and met's completions (issue 38) ----------------------------
// The published `met serve` command line of the reference ladder (docs/api.md, "Flags of the
// reference ladder") passes these. Each does what its name says in met, maps to met's
// equivalent, or is accepted because met always does what it asks; `main.rs::apply_ladder` is
// where they take effect. Kept in one block, apart from the flags above.

/// `--mtp-gate`: when the MTP head drafts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MtpGate {
    /// Drafting pauses while more than --speculative-max-batch sequences run (met's default).
    Auto,
    /// Draft at every batch size (--speculative-max-batch unlimited).
    Force,
}

/// `--scheduling-policy`: met's scheduler admits requests first come, first served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SchedulingPolicy {
    Fifo,
}

/// `--mtp-quantization`: the MTP head's weights stay in the checkpoint's 16-bit type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MtpQuantization {
    Bf16,
}

/// `--ssm-h-dtype`: how the recurrent (Gated DeltaNet) state is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SsmStateDtype {
    /// A float32 state in per-sequence slots (what met keeps).
    F32,
    /// Accepted as a name for met's slot pool; met keeps the state in float32 (a note says so).
    #[value(name = "f16-pool")]
    F16Pool,
}

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Flags of the reference ladder (docs/api.md)")]
pub struct LadderArgs {
    /// When the MTP head drafts: auto (pause above --speculative-max-batch running sequences)
    /// or force (at every batch size).
    #[arg(long, value_enum, value_name = "GATE")]
    pub mtp_gate: Option<MtpGate>,
    /// Request scheduling: fifo, the only policy met has (first come, first served).
    #[arg(long, value_enum, value_name = "POLICY")]
    pub scheduling_policy: Option<SchedulingPolicy>,
    /// The MTP head's weight type: bf16, the checkpoint's (met does not quantize the head).
    #[arg(long, value_enum, value_name = "TYPE")]
    pub mtp_quantization: Option<MtpQuantization>,
    /// Do not hold tool calls to the --tool-call-parser format's grammar (forced calls, and
    /// the calls a model opens under `auto`); false (the default) keeps it.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL",
          action = clap::ArgAction::Set)]
    pub disable_tool_grammar: Option<bool>,
    /// Hybrid models' recurrent state storage: f32 (met's); f16-pool is accepted and runs as f32.
    #[arg(long, value_enum, value_name = "DTYPE")]
    pub ssm_h_dtype: Option<SsmStateDtype>,
    /// Gated DeltaNet's output norm fused with its gate: what met's kernels always do.
    #[arg(long)]
    pub gdn_fused_norm: bool,
    /// The recurrent state of a step's sequences updated in one batched launch: what met always
    /// does.
    #[arg(long)]
    pub ssm_batched_recurrent: bool,
    /// Save recurrent-state checkpoints in the middle of a prefill chunk's tail: met saves them
    /// only at --ssm-checkpoint-interval boundaries, so false is what it does; true is refused.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL",
          action = clap::ArgAction::Set)]
    pub ssm_tail_midchunk: Option<bool>,
    /// Prefill chunks of several sequences in one variable-length step: what met always does.
    #[arg(long)]
    pub prefill_varlen_batch: bool,
}

/// `met download --progress`: how the download reports itself on stderr.
#[derive(Debug, Clone, Args)]
pub struct DownloadProgress {
    /// `lines`: a line a file every few seconds; `json`: a JSON object a tenth of a second
    /// (`{"file","done","total"}`, bytes), for `metralectl pull`'s progress bar.
    #[arg(
        long = "progress",
        value_enum,
        default_value = "lines",
        value_name = "HOW"
    )]
    pub how: ProgressStyle,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProgressStyle {
    Lines,
    Json,
}

#[cfg(test)]
mod ladder_tests {
    use clap::{CommandFactory as _, Parser as _};

    use super::*;

    /// The reference ladder's published command line, exactly (issue 38).
    const LADDER: &str = "met serve unsloth/Qwen3.6-27B-NVFP4 --host 0.0.0.0 --port 8888 \
        --model-name unsloth/Qwen3.6-27B-NVFP4 --max-seq-len 2048 --max-batch-size 128 \
        --gpu-memory-utilization 0.85 --kv-cache-dtype fp8 --enable-prefix-caching true \
        --ssm-cache-slots 8 --ssm-checkpoint-interval 32 --speculative --num-drafts 3 \
        --mtp-quantization bf16 --scheduling-policy fifo --tool-call-parser qwen3_coder \
        --disable-tool-grammar true --disable-thinking --request-timeout 0 --ssm-h-dtype f16-pool \
        --gdn-fused-norm --ssm-batched-recurrent --ssm-tail-midchunk false --mtp-gate force \
        --prefill-varlen-batch --no-tui";

    fn serve(line: &str) -> ServeArgs {
        match Cli::try_parse_from(line.split_whitespace()) {
            Ok(Cli {
                command: Command::Serve(args),
            }) => *args,
            Ok(other) => panic!("not serve: {other:?}"),
            Err(e) => panic!("{line}\n{e}"),
        }
    }

    #[test]
    fn the_reference_ladder_command_line_parses_to_what_it_says() {
        let a = serve(LADDER);
        assert_eq!(a.model.model, PathBuf::from("unsloth/Qwen3.6-27B-NVFP4"));
        assert_eq!((a.host.as_str(), a.port), ("0.0.0.0", 8888));
        assert_eq!(a.model_name.as_deref(), Some("unsloth/Qwen3.6-27B-NVFP4"));
        assert_eq!((a.max_seq_len, a.max_batch_size), (Some(2048), Some(128)));
        assert!((a.gpu_memory_utilization - 0.85).abs() < 1e-12);
        assert_eq!(a.kv_cache_dtype, KvCacheDtype::Fp8);
        assert!(a.enable_prefix_caching);
        assert_eq!(
            (a.ssm_cache_slots, a.ssm_checkpoint_interval),
            (Some(8), Some(32))
        );
        assert!(a.speculative && a.num_drafts == Some(3));
        assert_eq!(a.tool_call_parser.as_deref(), Some("qwen3_coder"));
        assert!(a.disable_thinking && a.no_tui);
        assert_eq!(a.request_timeout, Some(0.0));
        let l = &a.ladder;
        assert_eq!(l.mtp_quantization, Some(MtpQuantization::Bf16));
        assert_eq!(l.scheduling_policy, Some(SchedulingPolicy::Fifo));
        assert_eq!(l.disable_tool_grammar, Some(true));
        assert_eq!(l.ssm_h_dtype, Some(SsmStateDtype::F16Pool));
        assert!(l.gdn_fused_norm && l.ssm_batched_recurrent && l.prefill_varlen_batch);
        assert_eq!(l.ssm_tail_midchunk, Some(false));
        assert_eq!(l.mtp_gate, Some(MtpGate::Force));
    }

    #[test]
    fn boolean_flags_take_a_value_or_none() {
        let a = serve("met serve m --enable-prefix-caching --port 1");
        assert!(a.enable_prefix_caching && a.port == 1);
        assert!(!serve("met serve m --enable-prefix-caching false").enable_prefix_caching);
        assert!(!serve("met serve m").enable_prefix_caching);
        let e = Cli::try_parse_from("met serve m --enable-prefix-caching maybe".split(' '))
            .expect_err("not a bool");
        assert!(e.to_string().contains("--enable-prefix-caching"), "{e}");
        let e = Cli::try_parse_from("met serve m --scheduling-policy priority".split(' '))
            .expect_err("only fifo");
        assert!(e.to_string().contains("[possible values: fifo]"), "{e}");
    }

    /// `completions/met.*` are `met`'s shell completions, generated from these clap types
    /// (`UPDATE_COMPLETIONS=1 cargo test -p metrale-engine --bin met completions`
    /// rewrites them).
    #[test]
    fn committed_completions_match_the_clap_definitions() {
        use clap_complete::Shell;
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../completions");
        for (shell, file) in [
            (Shell::Bash, "met.bash"),
            (Shell::Zsh, "_met"),
            (Shell::Fish, "met.fish"),
        ] {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "met", &mut script);
            let path = dir.join(file);
            if std::env::var_os("UPDATE_COMPLETIONS").is_some() {
                std::fs::write(&path, &script).expect("write the completions");
            }
            let committed = std::fs::read(&path).unwrap_or_default();
            assert!(
                script == committed,
                "completions/{file} is out of date with met's flags; rewrite them with\n  \
                 UPDATE_COMPLETIONS=1 cargo test -p metrale-engine --bin met completions"
            );
        }
    }

    #[test]
    fn serve_help_documents_every_flag_of_the_ladder() {
        let mut cli = Cli::command();
        let help = cli
            .find_subcommand_mut("serve")
            .expect("serve")
            .render_long_help()
            .to_string();
        for flag in LADDER.split_whitespace().filter(|w| w.starts_with("--")) {
            let at = help
                .find(&format!("{flag} "))
                .or_else(|| help.find(&format!("{flag}\n")))
                .unwrap_or_else(|| panic!("{flag} is not in met serve --help:\n{help}"));
            // The line after the flag's own is its documentation.
            let doc = help[at..].lines().nth(1).unwrap_or("").trim();
            assert!(!doc.is_empty(), "{flag} has no documentation");
        }
    }
}

/// `met serve`'s connection limits (docs/security.md).
#[derive(Debug, Args)]
pub struct HttpArgs {
    /// Close a connection that has not sent a whole request head this many seconds after the
    /// server started waiting for one (a new connection, or the end of the previous response).
    #[arg(long, value_name = "SECONDS", default_value_t = limits::DEFAULT_HEADER_READ_TIMEOUT)]
    pub header_read_timeout: f64,
    /// Answer 408 to a request whose body has not all arrived this many seconds after the
    /// server started reading it.
    #[arg(long, value_name = "SECONDS", default_value_t = limits::DEFAULT_BODY_READ_TIMEOUT)]
    pub body_read_timeout: f64,
    /// Close a connection with no request in progress and no traffic for this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = limits::DEFAULT_KEEP_ALIVE_TIMEOUT)]
    pub keep_alive_timeout: f64,
    /// Connections open at once; a new one beyond it gets 503 and is closed (lowered at
    /// start-up to what the process's descriptor limit allows).
    #[arg(long, value_name = "N", default_value_t = limits::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Threads that parse, render and tokenize requests at once [default: one a CPU core].
    #[arg(long, value_name = "N")]
    pub tokenizer_workers: Option<usize>,
}

impl HttpArgs {
    pub fn flags(&self) -> limits::HttpFlags {
        limits::HttpFlags {
            header_read_timeout: self.header_read_timeout,
            body_read_timeout: self.body_read_timeout,
            keep_alive_timeout: self.keep_alive_timeout,
            max_connections: self.max_connections,
            tokenizer_workers: self.tokenizer_workers,
        }
    }
}
