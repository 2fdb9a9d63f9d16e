//! `metralectl`: the Metrale launcher.

use std::process::ExitCode;

use clap::Parser;

mod cli;
mod commands;
mod demo_model;
mod dirs;
mod docker;
mod doctor;
mod engines;
mod error;
mod fsutil;
mod gpu;
mod metrics_client;
mod native;
mod port_owner;
mod printer;
mod recipe;
mod release;
mod signing;
mod startup;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let printer = printer::Printer::new(cli.quiet, cli.command.json());
    match commands::dispatch(&cli.command, &printer) {
        Ok(code) => code,
        Err(err) if error::is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            printer.error(&err, error::hint_for(&err).as_deref());
            ExitCode::FAILURE
        }
    }
}
