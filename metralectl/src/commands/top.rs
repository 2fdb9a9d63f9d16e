//! `metralectl top`: the live dashboard of a running engine, from its metrics socket or its
//! `/v1/metrics/stream`. Reconnects when the engine restarts, and says so on screen.

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Context as _;

use crate::cli::TopArgs;
use crate::error::UserError;
use crate::metrics_client::{Source, default_socket};
use crate::printer::Printer;

/// The engine's default port (`met serve --port`).
const DEFAULT_PORT: u16 = 8000;

pub fn top(args: &TopArgs, _printer: &Printer) -> anyhow::Result<ExitCode> {
    let source = match (&args.socket, &args.url) {
        (_, Some(url)) => {
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
        (Some(path), None) => Source::Socket(path.clone()),
        (None, None) => Source::Socket(default_socket(args.port.unwrap_or(DEFAULT_PORT))),
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
