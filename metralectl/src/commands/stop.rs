//! `metralectl stop NAME|ID|--all`: stop engines; containers are removed.

use std::process::ExitCode;
use std::time::Duration;

use super::runtime;
use crate::cli::StopArgs;
use crate::docker::Client;
use crate::engines::{self, Engine};
use crate::error::UserError;
use crate::printer::Printer;

/// How long an engine gets to finish its requests before it is killed.
const GRACE: Duration = Duration::from_secs(30);

pub fn stop(args: &StopArgs, printer: &Printer) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let state_dir = crate::dirs::state_dir();
        let docker = Client::connect().await;
        let found = engines::list(state_dir.as_deref(), Some(docker.as_ref())).await?;
        if let Some(note) = &found.docker_note {
            printer.note(note);
        }
        let targets: Vec<&Engine> = if args.all {
            found.engines.iter().collect()
        } else {
            let mut targets = Vec::new();
            for query in &args.engines {
                let matched: Vec<&Engine> =
                    found.engines.iter().filter(|e| e.matches(query)).collect();
                if matched.is_empty() {
                    return Err(UserError::new(
                        format!("no running engine is named {query}"),
                        "`metralectl ps` lists the engines, with their names and ids",
                    )
                    .into());
                }
                targets.extend(matched);
            }
            targets
        };
        if targets.is_empty() {
            printer.note("no engines are running");
        }
        for engine in targets {
            engines::stop(engine, state_dir.as_deref(), docker.as_ref().ok(), GRACE).await?;
            printer.line(format!(
                "stopped {} ({}, {})",
                engine.name,
                engine.mode.as_str(),
                engine.id
            ))?;
        }
        Ok(ExitCode::SUCCESS)
    })
}
