//! `metralectl top [ENGINE]`: the live dashboard of a running engine, from its metrics socket or
//! its `/v1/metrics/stream`. Reconnects when the engine restarts, and says so on screen. ENGINE
//! is found as `ps` finds it (a container or a native engine, on any port).

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Context as _;

use crate::cli::TopArgs;
use crate::engines::{Engine, Mode};
use crate::error::UserError;
use crate::metrics_client::{Source, default_socket};
use crate::printer::Printer;

/// The engine's default port (`met serve --port`).
const DEFAULT_PORT: u16 = 8000;

pub fn top(args: &TopArgs, _printer: &Printer) -> anyhow::Result<ExitCode> {
    let source = match (&args.engine, &args.socket, &args.url) {
        (Some(query), _, _) => {
            let engine = super::find_engine(query)?.ok_or_else(|| {
                UserError::new(
                    format!("no running engine is named {query}"),
                    format!(
                        "`metralectl ps` lists the running engines; start this one with `metralectl run {query}`"
                    ),
                )
            })?;
            source_of(&engine, args.api_key.clone())
        }
        (None, _, Some(url)) => {
            let url = url.trim_end_matches('/');
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(UserError::new(
                    format!("--url {url} is not an http:// or https:// address"),
                    "pass the engine's base URL, e.g. --url http://127.0.0.1:8000",
                )
                .into());
            }
            let url = if url.ends_with("/v1/metrics/stream") {
                url.to_owned()
            } else {
                format!("{url}/v1/metrics/stream")
            };
            Source::Sse {
                url,
                api_key: args.api_key.clone(),
            }
        }
        (None, Some(path), None) => Source::Socket(path.clone()),
        (None, None, None) => Source::Socket(default_socket(args.port.unwrap_or(DEFAULT_PORT))),
    };
    if !std::io::stdout().is_terminal() {
        return Err(UserError::new(
            "metralectl top draws a dashboard and needs a terminal",
            "run it in a terminal; to read the raw events, connect to the socket (e.g. `socat - UNIX-CONNECT:PATH`) or `curl -N URL/v1/metrics/stream`",
        )
        .into());
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let target = source.target();
    source
        .spawn(tx.clone())
        .context("failed to start reading metrics")?;
    metrale_dashboard::term::run(target, tx, rx).context("the dashboard failed")?;
    Ok(ExitCode::SUCCESS)
}

/// Where `engine` publishes its events: its socket on this machine, else its HTTP stream.
fn source_of(engine: &Engine, api_key: Option<String>) -> Source {
    match (&engine.metrics_socket, engine.url()) {
        (Some(socket), _) if engine.mode == Mode::Native || socket.exists() => {
            Source::Socket(socket.clone())
        }
        (_, Some(url)) => Source::Sse {
            url: format!("{url}/v1/metrics/stream"),
            api_key,
        },
        (Some(socket), None) => Source::Socket(socket.clone()),
        (None, None) => Source::Socket(default_socket(DEFAULT_PORT)),
    }
}
