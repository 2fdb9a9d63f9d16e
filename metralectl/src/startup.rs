//! Following an engine from start to `/ready`.
//!
//! Today the follower polls `GET /health` and `GET /ready` and watches the process (or
//! container) for an early exit. It reports [`Event`]s to a callback, so a richer source — the
//! metrics socket's `phase` events (download, verify, load, compile, warmup) — can feed the same
//! callback without the commands changing.

use std::future::Future;
use std::time::{Duration, Instant};

/// A step of the start-up, as the user sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The process runs but its HTTP server does not answer yet.
    Starting,
    /// `/health` answers: the server is up and the model is loading.
    Loading,
    /// A named phase with optional progress: the metrics socket's `phase` events, once that
    /// stream is wired into [`follow`]'s callback (the polling follower never sends it).
    #[allow(dead_code)]
    Phase {
        name: String,
        done: Option<u64>,
        total: Option<u64>,
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

/// Polls `base_url` until `/ready` says 200, the engine exits, or `timeout` passes.
pub async fn follow(
    base_url: &str,
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
    loop {
        match watched.exited().await {
            Ok(Some(status)) => return Err(Failure::Exited { status }),
            Ok(None) => {}
            Err(e) => return Err(Failure::Watch(e)),
        }
        if get_ok(&client, &format!("{base_url}/ready")).await {
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

async fn get_ok(client: &reqwest::Client, url: &str) -> bool {
    client
        .get(url)
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
}
