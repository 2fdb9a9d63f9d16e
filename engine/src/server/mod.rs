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
mod extras;
pub mod generate;
pub mod limits;
mod listen;
pub mod messages;
pub mod metrics_stream;
pub mod output;
pub mod params;
pub mod prompt;
mod routes;
pub mod shutdown;
pub mod sse;
mod structured;
pub mod tokenize;
pub mod tool_use;
pub mod version;
pub mod workers;

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde_json::{Map, Value};

use self::config::ServeConfig;
use self::deps::{ChatTemplate, Tokenizer};
use self::error::ApiError;
use self::limits::{ByteBounds, HttpLimits};
use self::workers::Workers;
use crate::engine_core::EngineHandle;
use crate::loader::{GenerationConfig, ModelDir};
use crate::metrics::hub::HubInfo;
use crate::metrics::socket::{self, MetricsSocket};
use crate::metrics::{MetricsHub, ServerMetrics};
use crate::tool_parsers::{ReasoningFormat, ToolCallFormat};
use metrale_protocol::metrics::Phase;

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
    /// Connection and body timeouts, the connection cap, the pool's size (`limits.rs`).
    pub http: HttpLimits,
    /// Where request parsing, rendering and tokenization run (`workers.rs`).
    pub workers: Workers,
    /// `--special-tokens-in-content`: message content may carry control tokens (the old
    /// behaviour; `prompt.rs`).
    pub special_tokens_in_content: bool,
    pub metrics: Arc<ServerMetrics>,
    /// The live event stream (`/v1/metrics/stream`, the metrics socket).
    pub hub: MetricsHub,
    /// The resolved settings, for `GET /version`.
    pub settings: Value,
    /// Tool calls are held to the parser format's grammar (off: `--disable-tool-grammar`).
    pub tool_grammar: bool,
    /// The grammar compiler for structured outputs, built on the first constrained request
    /// (`structured.rs`), or why this model cannot have one.
    pub grammars: OnceLock<Result<Arc<crate::grammar::Grammars>, String>>,
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
            return Err(match self.engine.get().and_then(EngineHandle::failure) {
                Some(why) => ApiError::EngineFailed(why),
                None => ApiError::ShuttingDown,
            });
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

    /// Run `job` on a request's body on the tokenizer pool (`workers.rs`): everything a
    /// request costs in CPU before generation, off the async workers.
    pub async fn on_workers<T: Send + 'static>(
        self: &Arc<Self>,
        body: axum::body::Bytes,
        job: fn(&AppState, &[u8]) -> Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        let state = self.clone();
        self.workers.run(move || job(&state, &body)).await?
    }

    /// The byte bounds of the served model, once it is loaded.
    pub fn byte_bounds(&self) -> Option<ByteBounds> {
        self.engine
            .get()
            .map(|e| ByteBounds::new(e.info().max_model_len, self.tokenizer.max_token_bytes()))
    }

    /// Refuse a parsed body whose prompt text cannot fit the context, before tokenizing it.
    pub fn check_prompt_bytes(&self, body: &Value, param: &str) -> Result<(), ApiError> {
        match self.byte_bounds() {
            Some(b) => b.check_prompt(body::prompt_text_bytes(body), param),
            None => Ok(()),
        }
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

/// How long a failed start waits so metrics readers see why.
const FAILED_LINGER: Duration = Duration::from_millis(1000);

/// Lines held back while a dashboard owns the terminal (`None`: print at once).
static HELD: Mutex<Option<Vec<String>>> = Mutex::new(None);

/// Print a line for the person (or test) that started us.
fn say(line: &str) {
    if let Ok(mut held) = HELD.lock()
        && let Some(lines) = held.as_mut()
    {
        lines.push(line.to_owned());
        return;
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Hold `met serve`'s own lines back (a dashboard is drawing on stdout).
pub fn hold_output() {
    if let Ok(mut held) = HELD.lock() {
        held.get_or_insert_with(Vec::new);
    }
}

/// Print the held lines and print at once again.
pub fn release_output() {
    let lines = HELD.lock().ok().and_then(|mut h| h.take());
    for l in lines.unwrap_or_default() {
        say(&l);
    }
}

/// The metrics hub for this configuration (started now: `t_ms` counts from here).
pub fn start_hub(config: &ServeConfig) -> anyhow::Result<MetricsHub> {
    MetricsHub::start(
        HubInfo {
            model: config.engine.served_name.clone(),
            device: match config.engine.device {
                crate::engine_core::Device::Cpu => "cpu".into(),
                crate::engine_core::Device::Cuda => "cuda".into(),
            },
        },
        std::time::Instant::now(),
    )
    .context("failed to start the metrics thread")
}

/// The metrics hub and its socket when they had to start before the configuration could be
/// validated: `met serve ORG/NAME` publishes its download on them before the model exists.
pub struct EarlyMetrics {
    pub hub: MetricsHub,
    pub socket: MetricsSocket,
}

/// Serve until SIGTERM or Ctrl-C, then drain and return.
pub async fn run(config: ServeConfig, early: Option<EarlyMetrics>) -> anyhow::Result<()> {
    let (hub, socket) = match early {
        Some(e) => (e.hub, Some(e.socket)),
        None => (start_hub(&config)?, None),
    };
    serve(config, hub, None, socket).await
}

/// [`run`] with a given hub (and its socket when already bound), and a dashboard's quit
/// channel when one is shown.
pub async fn serve(
    config: ServeConfig,
    hub: MetricsHub,
    quit: Option<tokio::sync::mpsc::UnboundedReceiver<()>>,
    socket: Option<MetricsSocket>,
) -> anyhow::Result<()> {
    let phases = hub.phases();
    phases.report(
        Phase::Resolve,
        0,
        None,
        "",
        Some(config.engine.model_dir.display().to_string()),
    );
    // The socket lives here, not in run_with, so that it still accepts while a failed start
    // lingers: a reader that connected just before the failure (still in the listener's
    // backlog) then gets the phases, `failed` among them, instead of a closed connection.
    let mut socket = socket;
    let result = run_with(config, hub, quit, &mut socket).await;
    if let Err(e) = &result {
        phases.failed(&format!("{e:#}"));
        // Connected readers keep their writers after the socket file goes; give them a
        // moment to receive `failed` before the process exits.
        tokio::time::sleep(FAILED_LINGER).await;
    }
    drop(socket);
    result
}

/// Serves until drained; the metrics socket (bound early, or here) stays in `socket` for the
/// caller to drop.
async fn run_with(
    config: ServeConfig,
    hub: MetricsHub,
    quit: Option<tokio::sync::mpsc::UnboundedReceiver<()>>,
    socket: &mut Option<MetricsSocket>,
) -> anyhow::Result<()> {
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
    let listener = listen::bind(&config.host, config.port)
        .await
        .with_context(|| format!("failed to listen on {}:{}", config.host, config.port))?;
    let addr = listener.local_addr()?;
    hub.set_http_url(format!("http://{addr}"));
    let metrics_socket = match socket.take() {
        // Bound early under a per-process name (`--port 0` before its port was known): it
        // takes the port's default name now, where `metralectl top --port` looks.
        Some(mut s) if config.metrics_socket.is_none() && config.port == 0 => {
            let want = socket::default_path(addr.port());
            if let Err(e) = s.move_to(&want) {
                tracing::warn!("the metrics socket stays at {}: {e}", s.path().display());
            }
            s
        }
        Some(s) => s,
        None => {
            let socket_path = config
                .metrics_socket
                .clone()
                .unwrap_or_else(|| socket::default_path(addr.port()));
            MetricsSocket::bind(&socket_path, hub.clone())?
        }
    };
    say(&format!(
        "met: listening on http://{addr} (model {} loading)",
        config.engine.served_name
    ));
    say(&format!(
        "met: metrics events on unix:{} and http://{addr}/v1/metrics/stream",
        metrics_socket.path().display()
    ));
    *socket = Some(metrics_socket);
    let state = Arc::new(AppState {
        served_name: config.engine.served_name.clone(),
        settings: version::settings(&config),
        engine: OnceLock::new(),
        tokenizer: Arc::new(tokenizer),
        template,
        defaults,
        template_kwargs,
        tool_call_parser: config.tool_call_parser,
        reasoning_parser: config.reasoning_parser,
        api_key: config.api_key.clone(),
        request_timeout: config.request_timeout,
        http: config.http,
        workers: Workers::new(config.http.tokenizer_workers),
        special_tokens_in_content: config.special_tokens_in_content,
        metrics: Arc::new(ServerMetrics::new(
            config.engine.max_seq_len.unwrap_or(1 << 20),
        )),
        hub,
        tool_grammar: !config.disable_tool_grammar,
        grammars: OnceLock::new(),
        inflight: Arc::new(AtomicUsize::new(0)),
        draining: AtomicBool::new(false),
    });
    shutdown::serve_until_drained(listener, state, config, quit).await
}
