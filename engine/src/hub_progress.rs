//! `met serve ORG/NAME`: fetch the checkpoint from the Hub with a progress line a file on
//! stderr. (The metrics socket's `download` phase will take the same callback.)

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use metrale_engine::loader::hub;

/// `met download ORG/NAME`: fetch into the cache and print the snapshot directory.
pub fn download(repo: &str, revision: &str) -> anyhow::Result<()> {
    if !hub::looks_like_repo_id(repo) {
        anyhow::bail!(
            "{repo:?} is not a Hugging Face repository id: expected ORG/NAME, e.g. Qwen/Qwen3-8B"
        );
    }
    let dir = resolve(Path::new(repo), revision)?
        .with_context(|| format!("{repo} is not a repository id"))?;
    println!("{}", dir.display());
    Ok(())
}

pub fn resolve(model: &Path, revision: &str) -> anyhow::Result<Option<PathBuf>> {
    let mut last_file = String::new();
    let mut last_print = Instant::now();
    let mut progress = |file: &str, done: u64, total: u64| {
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
