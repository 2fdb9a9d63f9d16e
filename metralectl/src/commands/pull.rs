//! `metralectl pull NAME`: fetch a recipe's engine image ahead of time (the checkpoint is
//! fetched by the engine itself on its first start, into the Hugging Face cache).

use std::process::ExitCode;

use super::{load_registry, run::ensure_image, runtime};
use crate::cli::PullArgs;
use crate::docker::Client;
use crate::error::UserError;
use crate::printer::Printer;
use crate::recipe::launch::image_reference;

pub fn pull(args: &PullArgs, printer: &Printer) -> anyhow::Result<ExitCode> {
    let registry = load_registry()?;
    let entry = registry.get(&args.name)?;
    let image = args
        .image
        .clone()
        .unwrap_or_else(|| image_reference(&entry.recipe, env!("CARGO_PKG_VERSION")));
    runtime()?.block_on(async {
        let client = Client::connect().await.map_err(|e| {
            anyhow::Error::new(e).context(UserError::new(
                "pulling the engine image needs the Docker daemon, and it does not answer",
                "start Docker (e.g. `sudo systemctl start docker`) or check DOCKER_HOST",
            ))
        })?;
        ensure_image(&client, &image, &entry.recipe.name, printer).await?;
        printer.line(format!("image {image} is ready"))?;
        Ok(ExitCode::SUCCESS)
    })
}
