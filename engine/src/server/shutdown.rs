//! Serving's life: accept connections while the model loads, then serve; on SIGTERM or
//! Ctrl-C drain (`/ready` turns 503, new requests get 503, running ones finish), then close
//! the listener and stop the engine. A second signal while draining aborts what is left.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::mpsc::UnboundedReceiver;

use super::config::ServeConfig;
use super::{AppState, deps, listen, routes, say};
use metrale_protocol::metrics::Phase;

/// How long open connections get to finish once the engine is idle.
const CLOSE_GRACE: Duration = Duration::from_secs(10);

/// Waits for SIGTERM, SIGINT or the dashboard's quit, and says which.
struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    /// The dashboard's quit key (it holds the terminal in raw mode, so Ctrl-C arrives as a key).
    ui: Option<UnboundedReceiver<()>>,
}

/// The next quit from the dashboard; never, once it is gone.
async fn ui_quit(ui: &mut Option<UnboundedReceiver<()>>) {
    if let Some(rx) = ui {
        if rx.recv().await.is_some() {
            return;
        }
        *ui = None;
    }
    std::future::pending::<()>().await;
}

impl Signals {
    fn new(ui: Option<UnboundedReceiver<()>>) -> anyhow::Result<Self> {
        Ok(Self {
            #[cfg(unix)]
            term: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .context("failed to listen for SIGTERM")?,
            ui,
        })
    }

    async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.term.recv() => "SIGTERM",
                _ = tokio::signal::ctrl_c() => "SIGINT",
                _ = ui_quit(&mut self.ui) => "quit from the dashboard",
            }
        }
        #[cfg(not(unix))]
        {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => "Ctrl-C",
                _ = ui_quit(&mut self.ui) => "quit from the dashboard",
            }
        }
    }
}

/// Resolves with the reason once the engine has stopped on its own (a tensor-parallel rank
/// is gone); never otherwise.
async fn engine_failure(engine: &crate::engine_core::EngineHandle) -> String {
    loop {
        if let Some(why) = engine.failure() {
            return why;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(super) async fn serve_until_drained(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    config: ServeConfig,
    ui: Option<UnboundedReceiver<()>>,
) -> anyhow::Result<()> {
    let mut signals = Signals::new(ui)?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let app = routes::router(state.clone());
    let fd_limit = listen::raise_fd_limit();
    let max_connections = listen::connection_cap(config.http.max_connections, fd_limit);
    if max_connections < config.http.max_connections {
        say(&format!(
            "met: warning: --max-connections lowered to {max_connections}: the open-file \
             limit is {} (raise it with `ulimit -n` to serve more)",
            fd_limit.unwrap_or(0)
        ));
    }
    let server = tokio::spawn(listen::serve(
        listener,
        app,
        config.http,
        max_connections,
        stop_rx,
    ));
    let stop_http = |server: tokio::task::JoinHandle<()>| async move {
        let _ = stop_tx.send(true);
        match tokio::time::timeout(CLOSE_GRACE, server).await {
            Ok(r) => r.context("the HTTP server panicked"),
            Err(_) => Ok(()),
        }
    };

    let engine_config = config.engine.clone();
    let hub = state.hub.clone();
    let load = tokio::task::spawn_blocking(move || deps::start_engine(engine_config, hub));
    let (engine, plan) = tokio::select! {
        r = load => match r.context("loading the model panicked")? {
            Ok(started) => started,
            Err(e) => {
                let _ = stop_http(server).await;
                return Err(e.context(format!("failed to start the engine for {}", config.engine.model_dir.display())));
            }
        },
        sig = signals.next() => {
            say(&format!("met: {sig} while loading the model; exiting"));
            return stop_http(server).await;
        }
    };
    let info = engine.info().clone();
    let _ = state.engine.set(engine.clone());
    state.hub.phases().report(
        Phase::Ready,
        1,
        Some(1),
        "",
        Some(format!(
            "KV cache {} blocks of {} tokens",
            plan.num_blocks - 1,
            plan.block_size
        )),
    );
    say(&format!(
        "met: model {} ready: max_model_len {}, KV cache {} blocks of {} tokens = {} tokens \
         ({:.1} MiB)",
        info.served_name,
        info.max_model_len,
        plan.num_blocks - 1,
        plan.block_size,
        plan.tokens(),
        plan.bytes as f64 / (1 << 20) as f64,
    ));
    if !plan.groups.is_empty() {
        say(&format!(
            "met: KV groups (sliding layers keep only their window): {}; {:.1} MiB where \
             every layer keeping every position would take {:.1} MiB for the same sequences",
            plan.describe_groups(),
            plan.bytes as f64 / (1 << 20) as f64,
            plan.full_attention_bytes as f64 / (1 << 20) as f64,
        ));
    }
    say(&format!("met: weights: {}", info.weights));
    if let Some(st) = &plan.state {
        say(&format!(
            "met: recurrent state {} sequence slots + {} checkpoints (every {} tokens) of \
             {:.2} MiB = {:.1} MiB",
            st.config.num_slots,
            st.config.num_checkpoints,
            st.config.checkpoint_interval,
            st.bytes_per_slot as f64 / (1 << 20) as f64,
            st.bytes() as f64 / (1 << 20) as f64,
        ));
    }

    let sig = tokio::select! {
        sig = signals.next() => sig,
        why = engine_failure(&engine) => {
            say(&format!("met: the engine stopped: {why}; every request in flight was failed"));
            let _ = stop_http(server).await;
            engine.shutdown();
            engine_finished(&engine).await;
            anyhow::bail!("the engine stopped: {why}");
        }
    };
    say(&format!(
        "met: {sig}: draining ({} requests in flight); a second signal aborts them",
        state.num_in_flight()
    ));
    state
        .draining
        .store(true, std::sync::atomic::Ordering::SeqCst);
    engine.drain();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(20)) => {
                if engine.is_idle() && state.num_in_flight() == 0 {
                    break;
                }
            }
            sig = signals.next() => {
                say(&format!("met: {sig} again: aborting the requests left"));
                engine.shutdown();
                break;
            }
        }
    }
    let r = stop_http(server).await;
    engine.shutdown();
    engine_finished(&engine).await;
    say("met: stopped");
    r
}

/// Waits (a few seconds at most) for the engine thread to end, so the model is dropped before
/// the process exits: a tensor-parallel group's ranks are then told to stop rather than
/// finding their links cut.
async fn engine_finished(engine: &crate::engine_core::EngineHandle) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !engine.is_finished() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
