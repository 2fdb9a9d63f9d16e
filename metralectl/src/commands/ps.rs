//! `metralectl ps`: the engines running on this machine, containers and native processes.

use std::process::ExitCode;

use serde::Serialize;

use super::{JSON_VERSION, runtime};
use crate::cli::PsArgs;
use crate::docker::Client;
use crate::engines::{self, Engine};
use crate::native::now_secs;
use crate::printer::Printer;

#[derive(Debug, Serialize)]
struct PsJson<'a> {
    version: u32,
    engines: &'a [Engine],
}

pub fn ps(args: &PsArgs, printer: &Printer) -> anyhow::Result<ExitCode> {
    let _ = args;
    let found = runtime()?.block_on(async {
        let docker = Client::connect().await;
        engines::list(crate::dirs::state_dir().as_deref(), Some(docker.as_ref())).await
    })?;
    if let Some(note) = &found.docker_note {
        printer.note(note);
    }
    if printer.json_mode() {
        printer.json(&PsJson {
            version: JSON_VERSION,
            engines: &found.engines,
        })?;
        return Ok(ExitCode::SUCCESS);
    }
    if found.engines.is_empty() {
        printer.note("no engines are running; start one with `metralectl run NAME`");
        return Ok(ExitCode::SUCCESS);
    }
    let now = now_secs();
    let rows: Vec<Vec<String>> = found
        .engines
        .iter()
        .map(|e| {
            vec![
                e.name.clone(),
                e.recipe.clone(),
                e.mode.as_str().to_owned(),
                e.url().unwrap_or_else(|| "-".into()),
                uptime(now.saturating_sub(e.started)),
                e.gpus.clone(),
                e.id.clone(),
                e.state.clone(),
            ]
        })
        .collect();
    printer.table(
        &[
            "NAME", "RECIPE", "MODE", "ENDPOINT", "UPTIME", "GPUS", "ID/PID", "STATE",
        ],
        &rows,
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `42s`, `5m`, `3h12m`, `2d4h`.
fn uptime(secs: u64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        s => format!("{}d{}h", s / 86_400, (s % 86_400) / 3600),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn uptime_reads_at_a_glance() {
        assert_eq!(super::uptime(42), "42s");
        assert_eq!(super::uptime(300), "5m");
        assert_eq!(super::uptime(3 * 3600 + 12 * 60), "3h12m");
        assert_eq!(super::uptime(2 * 86_400 + 4 * 3600), "2d4h");
    }
}
