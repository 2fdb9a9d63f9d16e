//! `metralectl pull NAME`: fetch a recipe's engine image and its Hub checkpoint ahead of time.
//! The checkpoint is fetched by the engine itself (`met download`), into the shared Hugging
//! Face cache that native and container runs both use, and verified the same way.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, ExitCode, Stdio};

use anyhow::Context as _;

use super::{load_registry, run::Download, run::ensure_image, runtime};
use crate::cli::PullArgs;
use crate::docker::Client;
use crate::error::UserError;
use crate::native;
use crate::printer::Printer;
use crate::recipe::launch::image_reference;
use crate::recipe::resolve::{Location, locate};

/// A progress line of `met download --progress json`.
#[derive(serde::Deserialize)]
struct Progress {
    file: String,
    done: u64,
    total: u64,
}

pub fn pull(args: &PullArgs, printer: &Printer) -> anyhow::Result<ExitCode> {
    let registry = load_registry()?;
    let entry = registry.get(&args.name)?;
    // Fetching for another machine is fine, but say so before gigabytes arrive.
    if let Err(e) = super::run::preflight::check_device(entry) {
        printer.warn(format!("{e}; pulling anyway (for another machine?)"));
    }
    if !args.no_image {
        let image = args
            .image
            .clone()
            .unwrap_or_else(|| image_reference(&entry.recipe, env!("CARGO_PKG_VERSION")));
        runtime()?.block_on(async {
            let client = Client::connect().await.map_err(|e| {
                anyhow::Error::new(e).context(UserError::new(
                    "pulling the engine image needs the Docker daemon, and it does not answer",
                    format!(
                        "start Docker (e.g. `sudo systemctl start docker`) or check DOCKER_HOST; for native runs \
                         fetch only the checkpoint: `metralectl pull {} --no-image`",
                        entry.recipe.name
                    ),
                ))
            })?;
            ensure_image(&client, &image, &entry.recipe.name, printer).await?;
            printer.line(format!("image {image} is ready"))?;
            anyhow::Ok(())
        })?;
    }
    match locate(entry) {
        Location::Local(local) => {
            printer.note(format!(
                "the checkpoint is the local directory {}: nothing to download",
                local
                    .found
                    .map_or(local.written, |p| p.display().to_string())
            ));
        }
        Location::Hub { repo, revision } => {
            let met = native::find_met().map_err(|e| {
                anyhow::Error::new(e).context(UserError::new(
                    "fetching the checkpoint needs the engine binary `met`",
                    "install it beside metralectl or on PATH; or let the first `metralectl run` fetch it",
                ))
            })?;
            let revision = revision.map_or_else(|| "main".to_owned(), |r| r.as_str().to_owned());
            printer.note(format!("fetching {repo}@{revision} with {}", met.display()));
            let mut child = Command::new(&met)
                .args([
                    "download",
                    &repo,
                    "--revision",
                    &revision,
                    "--progress",
                    "json",
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .with_context(|| format!("failed to run {}", met.display()))?;
            // met's progress, one JSON object a line, drawn as one bar; its other lines as they are.
            let mut bar = Download::new(printer);
            if let Some(stderr) = child.stderr.take() {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    match serde_json::from_str::<Progress>(&line) {
                        Ok(p) => bar.update(&p.file, p.done, p.total),
                        Err(_) => bar.note(line),
                    }
                }
            }
            bar.finish();
            let out = child
                .wait_with_output()
                .with_context(|| format!("failed to run {}", met.display()))?;
            if !out.status.success() {
                return Err(UserError::new(
                    format!("fetching {repo}@{revision} failed ({})", out.status),
                    "see the engine's message above; HF_TOKEN for gated repositories, HF_ENDPOINT for a mirror",
                )
                .into());
            }
            let dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            printer.line(format!("checkpoint {repo}@{revision} is at {dir}"))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
