//! `metralectl doctor`'s checks, one a file. Each returns a [`Check`]: a status, what it found
//! and the exact fix. Facts several checks share (Docker's answer, the GPUs) are gathered once
//! into [`Facts`].

mod disk;
mod docker;
mod driver;
mod engines;
mod hf;
mod nvidia_runtime;
mod port;
mod shm;

use serde::Serialize;

use crate::docker::{Client, DaemonInfo};
use crate::gpu;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warning,
    Error,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// Stable id for scripts (`docker`, `nvidia-runtime`, …).
    pub id: &'static str,
    /// One line: what was checked and the verdict.
    pub title: String,
    pub status: Status,
    /// Details, a line each.
    pub found: Vec<String>,
    /// What to do, when the status is not ok.
    pub fix: Option<String>,
}

impl Check {
    fn ok(id: &'static str, title: impl Into<String>, found: Vec<String>) -> Self {
        Self {
            id,
            title: title.into(),
            status: Status::Ok,
            found,
            fix: None,
        }
    }

    fn problem(
        id: &'static str,
        status: Status,
        title: impl Into<String>,
        found: Vec<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self {
            id,
            title: title.into(),
            status,
            found,
            fix: Some(fix.into()),
        }
    }
}

/// What the checks share.
pub struct Facts {
    pub docker: Result<(Client, DaemonInfo), String>,
    pub gpus: gpu::Probe,
    pub port: u16,
}

impl Facts {
    pub async fn gather(port: u16) -> Self {
        let docker = match Client::connect().await {
            Ok(client) => match client.info().await {
                Ok(info) => Ok((client, info)),
                Err(e) => Err(e.to_string()),
            },
            Err(e) => Err(e.to_string()),
        };
        let gpus = tokio::task::spawn_blocking(gpu::probe)
            .await
            .unwrap_or_else(|e| gpu::Probe {
                gpus: Vec::new(),
                note: Some(format!("the GPU probe failed: {e}")),
            });
        Self { docker, gpus, port }
    }

    /// What the engine can run as here, in one line.
    pub fn verdict(&self) -> String {
        let nvidia_containers = self
            .docker
            .as_ref()
            .is_ok_and(|(_, info)| info.nvidia_ready());
        match (
            self.gpus.gpus.is_empty(),
            nvidia_containers,
            self.docker.is_ok(),
        ) {
            (false, true, _) => "GPU engine in a container or native".into(),
            (false, false, _) => "GPU engine native only (no NVIDIA container runtime)".into(),
            (true, _, true) => {
                "no GPU: native CPU engine only (or a CPU recipe in a container with --docker)"
                    .into()
            }
            (true, _, false) => "native CPU engine only".into(),
        }
    }
}

/// Every check, in the order they print.
pub async fn run_all(facts: &Facts) -> Vec<Check> {
    vec![
        docker::check(facts),
        nvidia_runtime::check(facts).await,
        driver::check(facts),
        disk::check(),
        port::check(facts.port),
        shm::check(),
        hf::check(),
        engines::check(facts).await,
    ]
}

/// Bytes as GiB with one decimal.
fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// Free and total bytes of the file system holding `path` (or its nearest existing parent).
fn space(path: &std::path::Path) -> Option<(std::path::PathBuf, u64, u64)> {
    let existing = path.ancestors().find(|p| p.exists())?.to_path_buf();
    let st = rustix::fs::statvfs(&existing).ok()?;
    Some((
        existing,
        st.f_bavail.saturating_mul(st.f_frsize),
        st.f_blocks.saturating_mul(st.f_frsize),
    ))
}
