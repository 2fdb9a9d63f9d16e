//! The Metrale engines running on this machine, whichever way they were started: containers
//! labelled `ai.metrale.*` and native processes recorded under the state directory.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::docker::{self, Client, DockerError};
use crate::native::{self, Record};

/// Labels the launcher sets on a container (`ai.metrale.recipe` marks it as an engine).
pub mod label {
    pub const RECIPE: &str = crate::docker::LABEL_RECIPE;
    pub const NAME: &str = "ai.metrale.name";
    pub const MODE: &str = "ai.metrale.mode";
    pub const PORT: &str = "ai.metrale.port";
    pub const HOST: &str = "ai.metrale.host";
    pub const GPUS: &str = "ai.metrale.gpus";
    pub const VERSION: &str = "ai.metrale.version";
    pub const METRICS_SOCKET: &str = "ai.metrale.metrics-socket";
}

/// The prefix of every container name the launcher gives.
pub const CONTAINER_PREFIX: &str = "metrale-";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Container,
    Native,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Container => "container",
            Self::Native => "native",
        }
    }
}

/// One engine, as `ps` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Engine {
    pub name: String,
    pub recipe: String,
    pub mode: Mode,
    /// The container id, or the process id.
    pub id: String,
    pub host: String,
    pub port: Option<u16>,
    /// Seconds since the epoch.
    pub started: u64,
    pub gpus: String,
    /// `running`, or Docker's state for a container that is not (`exited`, `created`).
    pub state: String,
    /// The native engine's log file.
    pub log: Option<PathBuf>,
    /// The host side of the metrics socket (containers: the mounted directory's socket; native
    /// engines: their `--metrics-socket`, else the default one for their port).
    pub metrics_socket: Option<PathBuf>,
}

impl Engine {
    fn from_record(r: Record) -> Self {
        // `met serve` listens on --metrics-socket, else on the default socket for its port.
        let socket = r
            .argv
            .iter()
            .position(|a| a == "--metrics-socket")
            .and_then(|i| r.argv.get(i + 1))
            .map_or_else(
                || crate::metrics_client::default_socket(r.port),
                PathBuf::from,
            );
        Self {
            name: r.name,
            recipe: r.recipe,
            mode: Mode::Native,
            id: r.pid.to_string(),
            host: r.host,
            port: Some(r.port),
            started: r.started,
            gpus: r.gpus,
            state: "running".into(),
            log: Some(r.log),
            metrics_socket: Some(socket),
        }
    }

    fn from_container(c: docker::EngineContainer) -> Self {
        let get = |k: &str| c.labels.get(k).cloned();
        let name = get(label::NAME).unwrap_or_else(|| {
            c.name
                .strip_prefix(CONTAINER_PREFIX)
                .unwrap_or(&c.name)
                .to_owned()
        });
        Self {
            name,
            recipe: get(label::RECIPE).unwrap_or_default(),
            mode: Mode::Container,
            id: c.id.chars().take(12).collect(),
            host: get(label::HOST).unwrap_or_else(|| "127.0.0.1".into()),
            port: c
                .host_port
                .or_else(|| get(label::PORT).and_then(|p| p.parse().ok())),
            started: u64::try_from(c.created).unwrap_or(0),
            gpus: get(label::GPUS).unwrap_or_else(|| "none".into()),
            state: c.state,
            log: None,
            metrics_socket: get(label::METRICS_SOCKET).map(PathBuf::from),
        }
    }

    /// The base URL of its HTTP API.
    pub fn url(&self) -> Option<String> {
        let host = match self.host.as_str() {
            "0.0.0.0" | "" => "127.0.0.1",
            "::" => "[::1]",
            h => h,
        };
        self.port.map(|p| format!("http://{host}:{p}"))
    }

    /// Whether `query` names it: its name, recipe, container id (a prefix of 4+) or pid.
    pub fn matches(&self, query: &str) -> bool {
        self.name == query
            || self.recipe == query
            || (self.mode == Mode::Container && query.len() >= 4 && self.id.starts_with(query))
            || (self.mode == Mode::Native && self.id == query)
    }
}

/// What was found, and what could not be looked at.
#[derive(Debug, Default)]
pub struct Found {
    pub engines: Vec<Engine>,
    /// Why containers are not listed (Docker unreachable).
    pub docker_note: Option<String>,
}

/// Every engine: native ones from `state_dir`, containers when Docker answered (else a note
/// that says why they are missing).
pub async fn list(
    state_dir: Option<&Path>,
    docker: Option<Result<&Client, &DockerError>>,
) -> anyhow::Result<Found> {
    let mut found = Found::default();
    if let Some(dir) = state_dir {
        found
            .engines
            .extend(native::list(dir)?.into_iter().map(Engine::from_record));
    }
    match docker {
        None => {}
        Some(Ok(client)) => found.engines.extend(
            client
                .list_engines()
                .await?
                .into_iter()
                .map(Engine::from_container),
        ),
        Some(Err(e)) => found.docker_note = Some(format!("containers not listed: {e}")),
    }
    found.engines.sort_by(|a, b| {
        (a.name.as_str(), a.mode.as_str()).cmp(&(b.name.as_str(), b.mode.as_str()))
    });
    Ok(found)
}

/// Stops one engine; a container is removed too.
pub async fn stop(
    engine: &Engine,
    state_dir: Option<&Path>,
    docker: Option<&Client>,
    grace: Duration,
) -> anyhow::Result<()> {
    match engine.mode {
        Mode::Container => {
            let client = docker.ok_or_else(|| {
                anyhow::anyhow!(
                    "cannot stop container {}: Docker is not reachable",
                    engine.id
                )
            })?;
            client.stop_and_remove(&engine.id, grace).await?;
            // The socket's directory was made for this container alone.
            if let Some(dir) = engine.metrics_socket.as_deref().and_then(Path::parent) {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
        Mode::Native => {
            let dir = state_dir
                .ok_or_else(|| anyhow::anyhow!("no state directory to find native engines in"))?;
            let record = native::list(dir)?
                .into_iter()
                .find(|r| r.pid.to_string() == engine.id);
            if let Some(record) = record {
                let dir = dir.to_path_buf();
                tokio::task::spawn_blocking(move || native::stop_recorded(&dir, &record, grace))
                    .await??;
            }
        }
    }
    Ok(())
}
