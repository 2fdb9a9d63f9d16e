//! Following an engine from start to `/ready`.
//!
//! The follower polls `GET /health` and `GET /ready`, watches the process (or container) for an
//! early exit, and reads the engine's metrics socket for its start-up `phase` events (resolve,
//! download, load, allocate the KV cache, ...), reporting all of it as [`Event`]s to a callback.

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use metrale_dashboard::Input;
use metrale_protocol::metrics;

use crate::metrics_client::Source;

/// A step of the start-up, as the user sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The process runs but its HTTP server does not answer yet.
    Starting,
    /// `/health` answers: the server is up and the model is loading.
    Loading,
    /// A start-up phase from the metrics socket, with its progress (`done` of `total` in
    /// `unit`) and a line for people (the file being fetched).
    Phase {
        name: String,
        done: Option<u64>,
        total: Option<u64>,
        unit: String,
        message: Option<String>,
    },
    /// `/ready` answered 200.
    Ready,
}

/// How the start-up ended when it did not reach `/ready`.
#[derive(Debug)]
pub enum Failure {
    /// The engine exited; `status` in words.
    Exited { status: String },
    /// It did not become ready in time.
    TimedOut(Duration),
    /// The watcher itself failed (e.g. the Docker daemon went away).
    Watch(anyhow::Error),
}

/// The thing being started: asked whether it has ended.
pub trait Watched {
    /// `Some(description of the exit)` once the engine has ended.
    fn exited(&mut self) -> impl Future<Output = anyhow::Result<Option<String>>>;
}

/// Polls `base_url` until `/ready` says 200, the engine exits, or `timeout` passes; reports
/// the phases the engine publishes on `metrics_socket` (read on a thread that ends once the
/// follower is gone) as they come.
pub async fn follow(
    base_url: &str,
    metrics_socket: Option<PathBuf>,
    watched: &mut impl Watched,
    timeout: Duration,
    mut on_event: impl FnMut(&Event),
) -> Result<(), Failure> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .no_proxy()
        .build()
        .map_err(|e| Failure::Watch(e.into()))?;
    let started = Instant::now();
    let mut last: Option<Event> = None;
    let mut emit = |event: Event| {
        if last.as_ref() != Some(&event) {
            on_event(&event);
            last = Some(event);
        }
    };
    emit(Event::Starting);
    let (tx, phases) = std::sync::mpsc::channel();
    let reading = metrics_socket.is_some();
    if let Some(path) = metrics_socket {
        // Without the socket the follower still works from /health and /ready.
        let _ = Source::Socket(path).spawn(tx);
    }
    loop {
        while let Ok(input) = phases.try_recv() {
            if let Some(e) = phase_event(input) {
                emit(e);
            }
        }
        match watched.exited().await {
            Ok(Some(status)) => return Err(Failure::Exited { status }),
            Ok(None) => {}
            Err(e) => return Err(Failure::Watch(e)),
        }
        if get_ok(&client, &format!("{base_url}/ready")).await {
            // The engine's `ready` phase closes its phase history: pass on what came before it
            // (a reader that connected late gets the history), for at most a second (the
            // reader retries a missing socket every half second).
            let deadline = Instant::now() + Duration::from_secs(1);
            while reading && Instant::now() < deadline {
                match phases.try_recv() {
                    Ok(Input::Event(metrics::Event::Phase(p)))
                        if p.phase == metrics::Phase::Ready =>
                    {
                        break;
                    }
                    Ok(input) => {
                        if let Some(e) = phase_event(input) {
                            emit(e);
                        }
                    }
                    Err(std::sync::mpsc::TryRecvError::Empty) => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    Err(std::sync::mpsc::TryRecvError::Disconnected) => break,
                }
            }
            emit(Event::Ready);
            return Ok(());
        }
        if get_ok(&client, &format!("{base_url}/health")).await {
            emit(Event::Loading);
        }
        if started.elapsed() > timeout {
            return Err(Failure::TimedOut(timeout));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A start-up phase from the socket as the follower reports it (`ready` is [`Event::Ready`],
/// from `/ready`).
fn phase_event(input: Input) -> Option<Event> {
    match input {
        Input::Event(metrics::Event::Phase(p)) if p.phase != metrics::Phase::Ready => {
            Some(Event::Phase {
                name: p.phase.name().to_owned(),
                done: Some(p.done),
                total: p.total,
                unit: p.unit,
                message: p.message,
            })
        }
        _ => None,
    }
}

async fn get_ok(client: &reqwest::Client, url: &str) -> bool {
    client
        .get(url)
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
}
