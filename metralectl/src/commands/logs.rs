//! `metralectl logs NAME [-f]`: an engine's output, from its container or its log file.

use std::io::{Read as _, Seek as _, SeekFrom};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use futures_util::StreamExt as _;

use super::runtime;
use crate::cli::LogsArgs;
use crate::docker::Client;
use crate::engines::{self, Engine, Mode};
use crate::error::UserError;
use crate::native;
use crate::printer::Printer;

pub fn logs(args: &LogsArgs, printer: &Printer) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let state_dir = crate::dirs::state_dir();
        let docker = Client::connect().await;
        let found = engines::list(state_dir.as_deref(), Some(docker.as_ref())).await?;
        let Some(engine) = found.engines.iter().find(|e| e.matches(&args.engine)) else {
            let mut hint = "`metralectl ps` lists the engines, with their names and ids".to_owned();
            if let Some(note) = &found.docker_note {
                hint.push_str(&format!(" ({note})"));
            }
            return Err(UserError::new(format!("no engine is named {}", args.engine), hint).into());
        };
        match (engine.mode, &docker) {
            (Mode::Container, Ok(client)) => container_logs(client, engine, args, printer).await,
            (Mode::Container, Err(e)) => {
                Err(anyhow::anyhow!("cannot read the container's logs: {e}"))
            }
            (Mode::Native, _) => native_logs(engine, args, printer).await,
        }
    })
}

async fn container_logs(
    client: &Client,
    engine: &Engine,
    args: &LogsArgs,
    printer: &Printer,
) -> anyhow::Result<ExitCode> {
    let mut stream = Box::pin(client.logs(&engine.id, args.follow, args.tail));
    loop {
        tokio::select! {
            chunk = stream.next() => match chunk {
                Some(chunk) => printer.raw(chunk?.as_bytes())?,
                None => break,
            },
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn native_logs(
    engine: &Engine,
    args: &LogsArgs,
    printer: &Printer,
) -> anyhow::Result<ExitCode> {
    let Some(path) = &engine.log else {
        return Ok(ExitCode::SUCCESS);
    };
    let mut file =
        std::fs::File::open(path).with_context(|| format!("failed to open {}", path.display()))?;
    let mut text = String::new();
    let mut raw = Vec::new();
    file.read_to_end(&mut raw)
        .with_context(|| format!("failed to read {}", path.display()))?;
    text.push_str(&String::from_utf8_lossy(&raw));
    let shown: Vec<&str> = text.lines().collect();
    let from = args.tail.map_or(0, |n| shown.len().saturating_sub(n));
    for line in &shown[from..] {
        printer.line(line)?;
    }
    if !args.follow {
        return Ok(ExitCode::SUCCESS);
    }
    let mut offset = raw.len() as u64;
    let pid: i32 = engine.id.parse().unwrap_or(0);
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            () = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
        file.seek(SeekFrom::Start(offset))?;
        let mut more = Vec::new();
        file.read_to_end(&mut more)?;
        offset += more.len() as u64;
        printer.raw(&more)?;
        let alive = crate::dirs::state_dir()
            .map(|d| native::list(&d).unwrap_or_default())
            .is_some_and(|records| records.iter().any(|r| r.pid == pid));
        if !alive && more.is_empty() {
            break;
        }
    }
    Ok(ExitCode::SUCCESS)
}
