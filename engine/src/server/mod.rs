//! `met serve`'s HTTP server: everything from the socket to the [`EngineHandle`].
//!
//! HTTP only: routes, request validation, SSE, the error envelope (mapped in `error.rs`
//! alone), auth, limits, shutdown and drain. It never touches the KV cache or a backend; it
//! talks to the engine through `EngineHandle` and turns outputs into text in `output.rs`.
//!
//! Start-up order: load the tokenizer and chat template (fast, so mistakes show at once), bind
//! the socket and print its address, then load the model in the background. Until the model
//! is ready, `GET /health` answers 200 and `GET /ready` and the API answer 503.

pub mod assemble;
pub mod auth;
pub mod body;
pub mod chat;
pub mod completions;
pub mod config;
pub mod deps;
pub mod error;
pub mod generate;
pub mod messages;
pub mod output;
pub mod params;
mod routes;
pub mod shutdown;
pub mod sse;
pub mod tokenize;
pub mod tool_use;

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde_json::{Map, Value};

use self::config::ServeConfig;
use self::deps::{ChatTemplate, Tokenizer};
use self::error::ApiError;
use crate::engine_core::EngineHandle;
use crate::loader::{GenerationConfig, ModelDir};
use crate::metrics::ServerMetrics;
use crate::tool_parsers::{ReasoningFormat, ToolCallFormat};

/// What every handler shares.
#[derive(Debug)]
pub struct AppState {
    pub served_name: String,
    /// Set once the model is loaded.
    engine: OnceLock<EngineHandle>,
    pub tokenizer: Arc<Tokenizer>,
    pub template: Option<ChatTemplate>,
    /// Sampling defaults from the checkpoint's `generation_config.json`.
    pub defaults: GenerationConfig,
    /// Chat template variables every request starts from (`--disable-thinking`).
    pub template_kwargs: Map<String, Value>,
    /// `--tool-call-parser`: how calls are read from replies (none: tools reach the template
    /// but replies stay text).
    pub tool_call_parser: Option<ToolCallFormat>,
    /// `--reasoning-parser`.
    pub reasoning_parser: Option<ReasoningFormat>,
    pub api_key: Option<String>,
    pub request_timeout: Option<Duration>,
    pub metrics: Arc<ServerMetrics>,
    /// Requests being answered (handlers and open streams), for drain.
    inflight: Arc<AtomicUsize>,
    draining: AtomicBool,
}

/// Counts a request as in flight while alive.
#[derive(Debug)]
pub struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl AppState {
    /// The engine, or 503 while loading or draining.
    pub fn engine(&self) -> Result<&EngineHandle, ApiError> {
        if self.draining.load(Ordering::SeqCst) {
            return Err(ApiError::ShuttingDown);
        }
        self.engine.get().ok_or(ApiError::Loading)
    }

    pub fn loaded_engine(&self) -> Option<&EngineHandle> {
        self.engine.get()
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    pub fn in_flight(&self) -> InFlight {
        self.inflight.fetch_add(1, Ordering::SeqCst);
        InFlight(self.inflight.clone())
    }

    pub fn num_in_flight(&self) -> usize {
        self.inflight.load(Ordering::SeqCst)
    }

    /// 404 `model_not_found` unless `model` is absent or the served name.
    pub fn check_model(&self, model: Option<&str>) -> Result<(), ApiError> {
        match model {
            Some(m) if m != self.served_name => Err(ApiError::ModelNotFound {
                model: m.to_owned(),
                served: self.served_name.clone(),
            }),
            _ => Ok(()),
        }
    }
}

/// Unix seconds now, for `created`.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A response id like `chatcmpl-1f0c…`.
pub fn response_id(prefix: &str) -> String {
    format!("{prefix}-{:032x}", rand::random::<u128>())
}

/// Print a line for the person (or test) that started us.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Serve until SIGTERM or Ctrl-C, then drain and return.
pub async fn run(config: ServeConfig) -> anyhow::Result<()> {
    let dir = ModelDir::open(&config.engine.model_dir)?;
    let defaults = dir.generation_config()?;
    let tokenizer = Tokenizer::from_dir(&dir.root)
        .with_context(|| format!("failed to load the tokenizer of {}", dir.root.display()))?;
    let template = ChatTemplate::from_tokenizer_dir(&dir.root)
        .with_context(|| format!("failed to load the chat template of {}", dir.root.display()))?;
    if template.is_none() {
        say("warning: the model has no chat template; /v1/chat/completions will answer 400");
    }
    let mut template_kwargs = Map::new();
    if config.disable_thinking {
        template_kwargs.insert("enable_thinking".into(), Value::Bool(false));
    }
    let listener = tokio::net::TcpListener::bind((config.host.as_str(), config.port))
        .await
        .with_context(|| format!("failed to listen on {}:{}", config.host, config.port))?;
    let addr = listener.local_addr()?;
    say(&format!(
        "met: listening on http://{addr} (model {} loading)",
        config.engine.served_name
    ));
    let state = Arc::new(AppState {
        served_name: config.engine.served_name.clone(),
        engine: OnceLock::new(),
        tokenizer: Arc::new(tokenizer),
        template,
        defaults,
        template_kwargs,
        tool_call_parser: config.tool_call_parser,
        reasoning_parser: config.reasoning_parser,
        api_key: config.api_key.clone(),
        request_timeout: config.request_timeout,
        metrics: Arc::new(ServerMetrics::new(
            config.engine.max_seq_len.unwrap_or(1 << 20),
        )),
        inflight: Arc::new(AtomicUsize::new(0)),
        draining: AtomicBool::new(false),
    });
    shutdown::serve_until_drained(listener, state, config).await
}
