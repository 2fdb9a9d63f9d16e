//! `metralectl completions SHELL`: completions generated from the clap definitions.

use std::process::ExitCode;

use clap::CommandFactory;

use crate::cli::{Cli, CompletionsArgs};
use crate::printer::Printer;

pub fn completions(args: &CompletionsArgs, printer: &Printer) -> anyhow::Result<ExitCode> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), "metralectl", &mut script);
    printer.raw(&script)?;
    Ok(ExitCode::SUCCESS)
}
