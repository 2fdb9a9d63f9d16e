//! `met serve`'s dashboard in its own terminal (unless `--no-tui` or stdout is not a
//! terminal): the `metrale-dashboard` crate fed in-process from the metrics hub. The
//! dashboard owns the terminal on this thread while the server runs on the runtime's. Ctrl-C in
//! the dashboard stops the server as Ctrl-C would; `q` asks first (`q` again stops it, `d`
//! leaves the dashboard and keeps serving, printing the server's lines from then on); the
//! server's own lines held back meanwhile are printed once the terminal is handed back.

use std::sync::mpsc::Sender;

use anyhow::Context;
use metrale_dashboard::term::Ended;
use metrale_dashboard::{App, Input, Key};
use metrale_engine::server::{self, config::ServeConfig};
use metrale_protocol::metrics::parse_line;

pub fn serve_with_dashboard(
    runtime: tokio::runtime::Runtime,
    config: ServeConfig,
    early: Option<server::EarlyMetrics>,
) -> anyhow::Result<()> {
    let (hub, socket) = match early {
        Some(e) => (e.hub, Some(e.socket)),
        None => (server::start_hub(&config)?, None),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    forward(hub.subscribe(), tx.clone())?;
    let (quit_tx, quit_rx) = tokio::sync::mpsc::unbounded_channel();
    server::hold_output();
    let done = tx.clone();
    let server = std::thread::Builder::new()
        .name("met-serve".into())
        .spawn(move || {
            let r = runtime.block_on(server::serve(config, hub, Some(quit_rx), socket));
            // The server ended by itself (SIGTERM, a failed start): close the dashboard.
            let _ = done.send(Input::Key(Key::Interrupt));
            r
        })
        .context("failed to start the server thread")?;
    let target = "met serve (this process)";
    let shown = metrale_dashboard::term::run_app(App::for_server(target), tx, rx);
    server::release_output();
    match &shown {
        Ok(Ended::Detach) => println!("met: dashboard closed; still serving (Ctrl-C stops it)"),
        // Quitting the dashboard stops the server (a no-op if it already stopped).
        _ => {
            let _ = quit_tx.send(());
        }
    }
    let served = server
        .join()
        .map_err(|_| anyhow::anyhow!("the server thread panicked"))?;
    shown.context("the dashboard failed")?;
    served
}

/// Hub lines → dashboard inputs, on a thread of their own.
fn forward(
    mut sub: metrale_engine::metrics::hub::Subscription,
    tx: Sender<Input>,
) -> anyhow::Result<()> {
    std::thread::Builder::new()
        .name("met-dashboard-feed".into())
        .spawn(move || {
            let _ = tx.send(Input::Connected {
                target: "met serve (this process)".into(),
            });
            while let Some(line) = sub.lines.blocking_recv() {
                if let Ok(Some(e)) = parse_line(&line)
                    && tx.send(Input::Event(e)).is_err()
                {
                    return;
                }
            }
            let _ = tx.send(Input::Disconnected {
                reason: "the dashboard fell behind the engine and was dropped".into(),
            });
        })
        .context("failed to start the dashboard feed")?;
    Ok(())
}
