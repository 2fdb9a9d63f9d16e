//! `run` in native mode: `met` as a process of ours, followed to ready, stopped on Ctrl-C.

use std::process::ExitCode;
use std::time::Duration;

use super::{
    Interrupted, LAST_LINES, Plan, STOP_GRACE, Signals, ended, failure_error, follow_or_signal,
    print_ready,
};
use crate::engines::Mode;
use crate::error::UserError;
use crate::native;
use crate::printer::Printer;
use crate::startup::Watched;

struct NativeWatch<'a>(&'a mut native::Started);

impl Watched for NativeWatch<'_> {
    async fn exited(&mut self) -> anyhow::Result<Option<String>> {
        Ok(self.0.exited().map(|s| s.to_string()))
    }
}

pub(super) async fn run_native(plan: &Plan<'_>, printer: &Printer) -> anyhow::Result<ExitCode> {
    let met = native::find_met().map_err(|e| {
        anyhow::Error::new(e).context(UserError::new(
            "native mode needs the engine binary `met`",
            "install it beside metralectl (the release archive has both), put it on PATH, or use --docker",
        ))
    })?;
    // The printed native command, `--host` included when it is not 127.0.0.1.
    let mut serve_args: Vec<String> = plan.launch.native.argv.iter().skip(1).cloned().collect();
    serve_args.push("--no-tui".into());
    serve_args.extend(plan.args.extra.iter().cloned());
    let mut env = plan.launch.native.env.clone();
    if let Some(key) = &plan.args.api_key {
        env.insert("MET_API_KEY".into(), key.clone());
    }
    if plan.gpus != "all" && plan.gpus != "none" {
        env.insert("CUDA_VISIBLE_DEVICES".into(), plan.gpus.clone());
    }
    let mut started = native::start(
        &plan.state_dir,
        &native::Launch {
            name: &plan.name,
            recipe: &plan.entry.recipe.name,
            met: &met,
            args: serve_args,
            env,
            host: &plan.args.host,
            port: plan.port,
            gpus: &plan.gpus,
        },
    )?;
    printer.note(format!(
        "started {} (pid {}), log {}",
        met.display(),
        started.record.pid,
        started.record.log.display()
    ));
    let log = started.record.log.clone();
    // `met serve` without --metrics-socket listens on the default socket for its port.
    let socket = crate::metrics_client::default_socket(plan.port);
    // Signals from here on stop the engine (one listener to the end).
    let mut signals = Signals::new();
    let followed = follow_or_signal(
        plan,
        socket,
        &mut NativeWatch(&mut started),
        &mut signals,
        printer,
    )
    .await;
    match followed {
        Ok(()) => {}
        Err(Interrupted::Signal(s)) => {
            printer.note(format!("{s}: stopping {}", plan.name));
            stop_native(started).await?;
            return Ok(ExitCode::from(130));
        }
        Err(Interrupted::Failed(failure)) => {
            let lines = native::tail(&log, LAST_LINES);
            stop_native(started).await?;
            return Err(failure_error(plan, failure, &lines));
        }
    }
    let pid = started.record.pid.to_string();
    print_ready(plan, Mode::Native, &pid, Some(log.clone()), printer)?;
    if plan.args.detach {
        started.detach();
        return Ok(ExitCode::SUCCESS);
    }
    // Foreground: until a signal or the engine's own exit.
    let exit = loop {
        tokio::select! {
            s = signals.recv() => {
                printer.note(format!("{s}: stopping {}", plan.name));
                break None;
            }
            () = tokio::time::sleep(Duration::from_millis(500)) => {
                if let Some(status) = started.exited() {
                    break Some(status);
                }
            }
        }
    };
    let lines = native::tail(&log, LAST_LINES);
    stop_native(started).await?;
    match exit {
        None => Ok(ExitCode::SUCCESS),
        Some(status) => ended(plan, status.success(), &status.to_string(), &lines, printer),
    }
}

async fn stop_native(started: native::Started) -> anyhow::Result<()> {
    tokio::task::spawn_blocking(move || started.stop(STOP_GRACE)).await??;
    Ok(())
}
