//! `metralectl self update` and `metralectl self uninstall`.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use serde::Serialize;

use crate::cli::{SelfUninstallArgs, SelfUpdateArgs};
use crate::printer::Printer;
use crate::release::receipt::{self, Receipt};
use crate::release::update::{self, Outcome, Request};
use crate::release::{self, TARGET};
use crate::signing::{self, TrustedKey};

#[derive(Debug, Serialize)]
struct UpdateJson<'a> {
    updated: bool,
    from: &'a str,
    version: &'a str,
    target: &'a str,
}

fn this_exe() -> anyhow::Result<std::path::PathBuf> {
    let exe = std::env::current_exe().context("cannot find this metralectl binary")?;
    exe.canonicalize()
        .with_context(|| format!("cannot resolve {}", exe.display()))
}

pub fn update(args: &SelfUpdateArgs, printer: &Printer) -> anyhow::Result<ExitCode> {
    let base = release::base_url(args.url.as_deref())?;
    let key = match &args.pubkey {
        Some(path) => TrustedKey::load(path)?,
        None => signing::release_key()?,
    };
    let exe = this_exe()?;
    let outcome = update::update(&Request {
        base: &base,
        version: args.version.as_deref(),
        key: &key,
        exe: &exe,
        progress: printer.live_progress(),
    })?;
    let current = env!("CARGO_PKG_VERSION");
    let (updated, version) = match &outcome {
        Outcome::UpToDate { version } => (false, version.as_str()),
        Outcome::Updated { to, .. } => (true, to.as_str()),
    };
    if printer.json_mode() {
        printer.json(&UpdateJson {
            updated,
            from: current,
            version,
            target: TARGET,
        })?;
    } else if let Outcome::Updated { from, to, dir } = &outcome {
        printer.line(format!(
            "updated metralectl and met {from} -> {to} in {} (signature and SHA-256 checked)",
            dir.display()
        ))?;
    } else {
        printer.line(format!("metralectl {version} is the latest release"))?;
    }
    Ok(ExitCode::SUCCESS)
}

pub fn uninstall(args: &SelfUninstallArgs, printer: &Printer) -> anyhow::Result<ExitCode> {
    let exe = this_exe()?;
    let receipt_path = receipt::path();
    let receipt = receipt_path
        .as_deref()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .map(|t| Receipt::parse(&t));
    if !args.yes {
        if !std::io::stdin().is_terminal() {
            bail!("nothing removed: there is no terminal to confirm on; pass --yes to uninstall");
        }
        eprint!(
            "remove metralectl and met from {}{}? [y/N] ",
            exe.parent()
                .map_or(String::new(), |d| d.display().to_string()),
            if receipt.is_some() {
                " and the installer's PATH line"
            } else {
                ""
            }
        );
        std::io::stderr().flush().ok();
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer).ok();
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            printer.line("nothing removed")?;
            return Ok(ExitCode::FAILURE);
        }
    }
    let mut files = Vec::new();
    if let (Some(path), Some(receipt)) = (&receipt_path, &receipt) {
        let removed = receipt::undo(path, receipt)?;
        for profile in &removed.profile_lines {
            printer.line(format!("removed the PATH line from {}", profile.display()))?;
        }
        files = removed.files;
    }
    if files.is_empty() {
        // No receipt (installed another way): this binary and the `met` beside it.
        let dir = exe.parent().context("this binary has no directory")?;
        for path in [dir.join("met"), exe.clone()] {
            if receipt::remove_if_present(&path)? {
                files.push(path);
            }
        }
    }
    for file in &files {
        printer.line(format!("removed {}", file.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
