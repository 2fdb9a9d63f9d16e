//! `metralectl doctor`: what this machine can run, a line a check, in the style of
//! `flutter doctor`; `--json` for scripts. Exits non-zero when an error would stop `run`.

use std::process::ExitCode;

use serde::Serialize;

use super::{JSON_VERSION, runtime};
use crate::cli::DoctorArgs;
use crate::doctor::{self, Check, Facts, Status};
use crate::printer::{Printer, Style};

/// The port `run` uses when a recipe names none.
const DEFAULT_PORT: u16 = 8000;

#[derive(Debug, Serialize)]
struct DoctorJson<'a> {
    version: u32,
    verdict: String,
    issues: usize,
    errors: usize,
    checks: &'a [Check],
}

pub fn doctor(args: &DoctorArgs, printer: &Printer) -> anyhow::Result<ExitCode> {
    let (facts, checks) = runtime()?.block_on(async {
        let facts = Facts::gather(args.port.unwrap_or(DEFAULT_PORT)).await;
        let checks = doctor::run_all(&facts).await;
        (facts, checks)
    });
    let issues = checks.iter().filter(|c| c.status != Status::Ok).count();
    let errors = checks.iter().filter(|c| c.status == Status::Error).count();
    let code = if errors > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    };
    if printer.json_mode() {
        printer.json(&DoctorJson {
            version: JSON_VERSION,
            verdict: facts.verdict(),
            issues,
            errors,
            checks: &checks,
        })?;
        return Ok(code);
    }
    printer.line("Doctor summary (to see all details, run metralectl doctor --json):")?;
    for check in &checks {
        let mark = match check.status {
            Status::Ok => printer.paint(Style::Green, "[✓]"),
            Status::Warning => printer.paint(Style::Yellow, "[!]"),
            Status::Error => printer.paint(Style::Red, "[✗]"),
        };
        printer.line(format!("{mark} {}", check.title))?;
        for line in &check.found {
            printer.line(format!("    • {line}"))?;
        }
        if let Some(fix) = &check.fix {
            printer.line(format!("    {} {fix}", printer.paint(Style::Bold, "fix:")))?;
        }
    }
    printer.line("")?;
    printer.line(format!("• {}", facts.verdict()))?;
    if issues == 0 {
        printer.line("• No issues found!")?;
    } else {
        let s = if issues == 1 {
            "category"
        } else {
            "categories"
        };
        printer.line(format!("! Doctor found issues in {issues} {s}."))?;
    }
    Ok(code)
}
