//! `met`: the Metrale inference engine.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Parser;
use metrale_engine::backend::{CpuBackend, HybridOps};
use metrale_engine::loader::ModelDir;
use metrale_engine::models::Model;
use metrale_engine::models::registry::{self, LoadOptions, WithModel};
use metrale_engine::score::{DEFAULT_CHUNK, PositionScore, score};

mod cli;
mod hub_progress;
mod tui;

use cli::{Cli, Command, ScoreArgs, ServeArgs};
use metrale_engine::server::config::{
    self as serve_config, ComputeDtype, Device, KvCacheDtype, ServeFlags,
};

/// mimalloc rather than glibc's malloc: the engine thread allocates each step's batch while the
/// HTTP threads allocate every streamed chunk, and a thread-caching allocator keeps them apart.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => run_serve(*args),
        Command::Score(args) => run_score(args),
        Command::Download(args) => {
            let json = args.progress.how == cli::ProgressStyle::Json;
            hub_progress::download(&args.repo, &args.revision, json)
        }
        Command::PrintTuningTable => {
            print!("{}", metrale_engine::tuning::docs_table());
            Ok(())
        }
        Command::Rank(args) => run_rank(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `met rank`: one rank of `met serve --tensor-parallel-size N`, started by rank 0.
fn run_rank(args: cli::RankArgs) -> anyhow::Result<()> {
    use metrale_engine::engine_core::ranks::{RankOptions, run_rank};
    let requantize = metrale_engine::loader::Requantize::parse([args.requantize.as_str()])
        .map_err(anyhow::Error::msg)?;
    let options = RankOptions {
        model_dir: args.model,
        load_format: args.load_format,
        requantize,
        kv_cache_fp8: args.kv_cache_fp8,
        expert_parallel: args.expert_parallel,
        // Only rank 0 waits on the others.
        step_timeout: metrale_engine::engine_core::ranks::DEFAULT_DIST_TIMEOUT,
    };
    run_rank(
        &options,
        args.rank,
        args.world,
        args.master,
        &args.fingerprint,
    )
    .with_context(|| format!("tensor-parallel rank {} of {}", args.rank, args.world))
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn run_serve(args: ServeArgs) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    // The reference ladder's flags and --requantize, refused or mapped before anything is
    // fetched.
    let ladder = apply_ladder(&args)?;
    let requantize = args.model.requantize()?;
    // A Hub repository id: fetched into the Hugging Face cache before anything else, with the
    // metrics socket already up so a client sees `download` rather than silence.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("met-http")
        .build()
        .context("failed to start the async runtime")?;
    // The socket's accept loop runs on the runtime (the download itself runs on its own).
    let early = {
        let _in_runtime = runtime.enter();
        hub_progress::early_metrics(&args)?
    };
    let (model, model_name) = match hub_progress::resolve(
        &args.model.model,
        &args.revision,
        early.as_ref().map(|e| e.hub.phases()),
    )? {
        Some(snapshot) => (
            snapshot,
            args.model_name
                .or_else(|| Some(args.model.model.display().to_string())),
        ),
        None => (args.model.model, args.model_name),
    };
    let config = ServeFlags {
        model,
        host: args.host,
        port: args.port,
        model_name,
        device: args.model.device,
        dtype: args.model.dtype,
        load_format: args.model.load_format,
        requantize,
        max_seq_len: args.max_seq_len,
        max_batch_size: args.max_batch_size,
        max_num_batched_tokens: args.max_num_batched_tokens,
        prefill_chunk_with_decodes: args.prefill_chunk_with_decodes,
        gpu_memory_utilization: args.gpu_memory_utilization,
        kv_cache_dtype: args.kv_cache_dtype,
        enable_prefix_caching: args.enable_prefix_caching,
        enforce_eager: args.enforce_eager,
        tuning: metrale_engine::tuning::Tuning::from_env()?,
        api_key: args.api_key,
        max_queued_requests: args.max_queued_requests,
        request_timeout: ladder.request_timeout,
        disable_thinking: args.disable_thinking,
        no_tui: args.no_tui,
        metrics_socket: args.metrics_socket,
        tool_call_parser: args.tool_call_parser,
        disable_tool_grammar: args.ladder.disable_tool_grammar.unwrap_or(false),
        reasoning_parser: args.reasoning_parser,
        num_gpu_blocks_override: args.num_gpu_blocks_override,
        ssm_cache_slots: args.ssm_cache_slots,
        ssm_checkpoint_slots: args.ssm_checkpoint_slots,
        ssm_checkpoint_interval: args.ssm_checkpoint_interval,
        speculative: args.speculative,
        tensor_parallel_size: args.tensor_parallel_size,
        enable_expert_parallel: args.enable_expert_parallel,
        nodes: serve_config::NodeFlags {
            nnodes: args.nnodes,
            node_rank: args.node_rank,
            master_addr: args.master_addr,
            master_port: args.master_port,
            dist_timeout_secs: args.dist_timeout,
        },
        num_drafts: args.num_drafts,
        speculative_max_batch: ladder.speculative_max_batch,
        http: args.http.flags(),
        special_tokens_in_content: args.special_tokens_in_content,
        speculative_ladder: args.speculative_ladder,
        speculative_draft_cost: args.speculative_draft_cost,
    }
    .validate()?;
    if let Some(node) = config.engine.rendezvous.filter(|r| r.node_rank > 0) {
        // Not the serving node: run this host's ranks until node 0 is done with them.
        return metrale_engine::engine_core::ranks::run_node(&config.engine, node);
    }
    let (host, port) = (config.host.clone(), config.port);
    let served = if !config.no_tui && std::io::stdout().is_terminal() {
        tui::serve_with_dashboard(runtime, config, early)
    } else {
        runtime.block_on(metrale_engine::server::run(config, early))
    };
    served.map_err(|e| busy_port(e, &host, port))
}

// ---- The reference ladder's flags (issue 38; cli.rs's `LadderArgs`, docs/api.md) ----

/// What the ladder's flags change in the flags `ServeFlags` takes.
struct Ladder {
    request_timeout: Option<f64>,
    speculative_max_batch: Option<usize>,
}

/// Maps the reference ladder's flags onto met's: `--request-timeout 0` is no timeout,
/// `--mtp-gate force` drafts at every batch size; flags asking for what met always does are
/// accepted, the rest refused with what met does instead.
fn apply_ladder(args: &ServeArgs) -> anyhow::Result<Ladder> {
    use cli::{MtpGate, SsmStateDtype};
    let l = &args.ladder;
    if l.ssm_tail_midchunk == Some(true) {
        bail!(
            "--ssm-tail-midchunk true: met saves recurrent-state checkpoints only at \
             --ssm-checkpoint-interval boundaries; drop the flag or pass false"
        );
    }
    if l.ssm_h_dtype == Some(SsmStateDtype::F16Pool) {
        eprintln!(
            "met: note: --ssm-h-dtype f16-pool: met keeps the recurrent state in float32 slots \
             (a pool, one a sequence); the state is not stored in f16"
        );
    }
    if l.mtp_gate.is_some() && !args.speculative {
        bail!("--mtp-gate: needs --speculative (it says when the MTP head drafts)");
    }
    let speculative_max_batch = match (l.mtp_gate, args.speculative_max_batch) {
        (Some(MtpGate::Force), None) => Some(usize::MAX),
        (Some(MtpGate::Force), Some(_)) => {
            bail!("--mtp-gate force drafts at every batch size: drop --speculative-max-batch")
        }
        (_, n) => n,
    };
    Ok(Ladder {
        // 0 seconds: no timeout, as other servers read it.
        request_timeout: args.request_timeout.filter(|t| *t != 0.0),
        speculative_max_batch,
    })
}

/// An error from listening on a port another process holds, said with the port and the way out.
fn busy_port(e: anyhow::Error, host: &str, port: u16) -> anyhow::Error {
    let in_use = e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::AddrInUse)
    });
    if !in_use {
        return e;
    }
    e.context(format!(
        "port {port} on {host} is already in use: pass another port (--port {}, or --port 0 for any \
         free one), or stop what listens there (`metralectl doctor --port {port}` names it)",
        port.saturating_add(1)
    ))
}

/// `met score`'s work once the registry has loaded the model, whatever its family.
struct ScoreTokens<'a> {
    args: &'a ScoreArgs,
    tokens: &'a [u32],
}

impl<B: HybridOps> WithModel<B> for ScoreTokens<'_> {
    type Output = anyhow::Result<Vec<PositionScore>>;
    fn run<M: Model<B> + 'static>(self, backend: B, model: M) -> Self::Output {
        check_tokens(
            self.tokens,
            model.vocab_size(),
            model.max_position_embeddings(),
        )?;
        Ok(score(
            &backend,
            &model,
            self.tokens,
            self.args.top_k,
            DEFAULT_CHUNK,
        )?)
    }
}

/// Load the model on `backend` through the registry and score `tokens` with it.
fn score_on<B: HybridOps>(
    backend: B,
    args: &ScoreArgs,
    tokens: &[u32],
) -> anyhow::Result<Vec<PositionScore>> {
    let dir = ModelDir::open(&args.model.model)?;
    let options = LoadOptions {
        load_format: args.model.load_format,
        mtp: false,
        requantize: args.model.requantize()?,
    };
    registry::load(
        backend,
        &dir,
        options,
        &mut |_| {},
        ScoreTokens { args, tokens },
    )?
}

/// Check `tokens` against a model's vocabulary and context.
fn check_tokens(tokens: &[u32], vocab: usize, context: usize) -> anyhow::Result<()> {
    if let Some(bad) = tokens.iter().find(|&&t| t as usize >= vocab) {
        bail!("token id {bad} is outside the model's vocabulary (0..{vocab})");
    }
    if tokens.len() > context {
        bail!(
            "{} tokens exceed the model's context of {context} positions",
            tokens.len()
        );
    }
    Ok(())
}

/// `met score --kv-cache-dtype fp8`.
fn kv_fp8(args: &ScoreArgs) -> bool {
    args.kv_cache_dtype == KvCacheDtype::Fp8
}

#[cfg(feature = "cuda")]
fn score_on_cuda(args: &ScoreArgs, tokens: &[u32]) -> anyhow::Result<Vec<PositionScore>> {
    let tuning = metrale_engine::tuning::Tuning::from_env()?;
    let backend =
        metrale_engine::backend::cuda::CudaBackend::for_dtype(0, args.model.dtype, tuning)
            .context("failed to start the CUDA backend")?
            .with_fp8_kv_cache(kv_fp8(args))?;
    score_on(backend, args, tokens)
}

#[cfg(not(feature = "cuda"))]
fn score_on_cuda(_: &ScoreArgs, _: &[u32]) -> anyhow::Result<Vec<PositionScore>> {
    bail!(
        "this met was built without CUDA support: rebuild with `cargo build --release -p metrale-engine --features cuda`, or use --device cpu"
    )
}

fn run_score(args: ScoreArgs) -> anyhow::Result<()> {
    let tokens = match &args.tokens_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("failed to read {}", path.display()))?;
            serde_json::from_str::<Vec<u32>>(&text).with_context(|| {
                format!(
                    "{} must hold a JSON array of token ids, e.g. [9707, 11, 1879]",
                    path.display()
                )
            })?
        }
        None => args.tokens.clone(),
    };
    if tokens.is_empty() {
        bail!("no tokens to score: pass --tokens 1,2,3 or --tokens-file FILE");
    }
    serve_config::check_dtype(args.model.dtype, args.model.device)?;
    if kv_fp8(&args) && args.model.dtype == ComputeDtype::Float32 {
        bail!(
            "--kv-cache-dtype fp8: the float32 path keeps an f32 cache: drop one of --dtype float32 and --kv-cache-dtype fp8"
        );
    }
    let positions = match args.model.device {
        Device::Cpu => score_on(CpuBackend::with_fp8_kv_cache(kv_fp8(&args)), &args, &tokens)?,
        Device::Cuda => score_on_cuda(&args, &tokens)?,
    };
    let total: f64 = positions
        .iter()
        .filter_map(|p| p.logprob)
        .map(f64::from)
        .sum();
    let scored = tokens.len() - 1;
    let report = serde_json::json!({
        "model": args.model.model.display().to_string(),
        "num_tokens": tokens.len(),
        "sum_logprob": total,
        "perplexity": if scored > 0 { Some((-total / scored as f64).exp()) } else { None },
        "positions": positions,
    });
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, &report)?;
    writeln!(out)?;
    Ok(())
}
