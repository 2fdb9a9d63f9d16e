//! `met serve ORG/NAME`: fetch the checkpoint from the Hub with a progress line a file on
//! stderr (`met download --progress json`: a JSON object a tenth of a second, which
//! `metralectl pull` draws as one progress bar) and `download` phase events (bytes done/total, the file in `message`) on the metrics
//! socket, which is bound before the download starts.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use metrale_engine::loader::hub;
use metrale_engine::metrics::hub::HubInfo;
use metrale_engine::metrics::socket::{self, MetricsSocket};
use metrale_engine::metrics::{MetricsHub, PhaseReporter};
use metrale_engine::server;
use metrale_protocol::metrics::Phase;

use crate::cli::{Device, ServeArgs};

/// `met download ORG/NAME`: fetch into the cache and print the snapshot directory.
pub fn download(repo: &str, revision: &str, json: bool) -> anyhow::Result<()> {
    if !hub::looks_like_repo_id(repo) {
        anyhow::bail!(
            "{repo:?} is not a Hugging Face repository id: expected ORG/NAME, e.g. Qwen/Qwen3-8B"
        );
    }
    let dir = resolve_with(Path::new(repo), revision, None, json)?
        .with_context(|| format!("{repo} is not a repository id"))?;
    println!("{}", dir.display());
    Ok(())
}

/// The metrics hub and its socket, started before the download when `met serve` was given a
/// Hub repository id (`None` for a local directory: the server starts them as usual).
pub fn early_metrics(args: &ServeArgs) -> anyhow::Result<Option<server::EarlyMetrics>> {
    let Some(repo) = args
        .model
        .model
        .to_str()
        .filter(|m| hub::looks_like_repo_id(m))
    else {
        return Ok(None);
    };
    let hub = MetricsHub::start(
        HubInfo {
            model: args.model_name.clone().unwrap_or_else(|| repo.to_owned()),
            device: match args.model.device {
                Device::Cpu => "cpu".into(),
                Device::Cuda => "cuda".into(),
            },
        },
        Instant::now(),
    )
    .context("failed to start the metrics thread")?;
    // `--port 0` has no port yet: a per-process name, moved to the port's once it is bound.
    let path = args
        .metrics_socket
        .clone()
        .unwrap_or_else(|| match args.port {
            0 => socket::default_path_unknown_port(),
            port => socket::default_path(port),
        });
    let socket = MetricsSocket::bind(&path, hub.clone())?;
    Ok(Some(server::EarlyMetrics { hub, socket }))
}

pub fn resolve(
    model: &Path,
    revision: &str,
    phases: Option<PhaseReporter>,
) -> anyhow::Result<Option<PathBuf>> {
    resolve_with(model, revision, phases, false)
}

/// [`resolve`], its stderr progress as JSON objects when `json`.
fn resolve_with(
    model: &Path,
    revision: &str,
    phases: Option<PhaseReporter>,
    json: bool,
) -> anyhow::Result<Option<PathBuf>> {
    let mut last_file = String::new();
    let mut last_print = Instant::now();
    // Phase events at most every 100 ms a file (plus its first and last), so a fast download
    // does not flood the subscribers' queues.
    let mut reported: Option<(String, Instant)> = None;
    let mut progress = |file: &str, done: u64, total: u64| {
        let due = match &reported {
            Some((f, at)) => {
                f != file || done == total || at.elapsed() >= Duration::from_millis(100)
            }
            None => true,
        };
        if json {
            if due {
                reported = Some((file.to_owned(), Instant::now()));
                eprintln!(
                    "{}",
                    serde_json::json!({"file": file, "done": done, "total": total})
                );
            }
            return;
        }
        if let Some(p) = phases.as_ref().filter(|_| due) {
            reported = Some((file.to_owned(), Instant::now()));
            p.report(
                Phase::Download,
                done,
                Some(total),
                "bytes",
                Some(file.to_owned()),
            );
        }
        let new_file = file != last_file;
        let finished = total > 0 && done == total;
        if new_file || finished || last_print.elapsed() > Duration::from_secs(2) {
            eprintln!(
                "met: download {file}: {:.1}/{:.1} MB",
                done as f64 / 1e6,
                total as f64 / 1e6
            );
            last_file = file.to_owned();
            last_print = Instant::now();
        }
    };
    let resolved = hub::resolve_model(model, Some(revision), &mut progress).with_context(|| {
        format!(
            "failed to fetch {} from the Hugging Face Hub",
            model.display()
        )
    })?;
    if let Some(dir) = &resolved {
        eprintln!("met: {} is at {}", model.display(), dir.display());
    }
    Ok(resolved)
}
