//! `metralectl run NAME --print`: the exact commands that would start a recipe.
//! Starting the engine for real comes in a later version; until then `run` says so.

use std::process::ExitCode;

use serde::Serialize;

use super::{JSON_VERSION, load_registry};
use crate::cli::RunArgs;
use crate::dirs;
use crate::error::UserError;
use crate::printer::{Printer, Style};
use crate::recipe::launch::{Launch, LaunchEnv, launch};

#[derive(Debug, Serialize)]
struct RunJson<'a> {
    version: u32,
    recipe: &'a str,
    #[serde(flatten)]
    launch: &'a Launch,
}

pub fn run(args: &RunArgs, printer: &Printer) -> anyhow::Result<ExitCode> {
    let registry = load_registry()?;
    let entry = registry.get(&args.name)?;
    if !args.print {
        return Err(UserError::new(
            "this version of metralectl cannot start the engine yet; it can only print the commands",
            format!("run `metralectl run {} --print` and start one of the printed commands yourself", args.name),
        )
        .into());
    }

    let env = LaunchEnv {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        hf_cache: dirs::hf_cache_dir(),
        hf_token_set: std::env::var_os("HF_TOKEN").is_some_and(|v| !v.is_empty()),
        port: args.port,
    };
    let launch = launch(entry, &env);
    for warning in &launch.warnings {
        printer.warn(warning);
    }
    if printer.json_mode() {
        printer.json(&RunJson {
            version: JSON_VERSION,
            recipe: &entry.recipe.name,
            launch: &launch,
        })?;
        return Ok(ExitCode::SUCCESS);
    }
    printer.line(printer.paint(Style::Dim, "# in a container"))?;
    printer.line(launch.docker.multiline())?;
    printer.line("")?;
    printer.line(printer.paint(Style::Dim, "# native"))?;
    printer.line(launch.native.multiline())?;
    Ok(ExitCode::SUCCESS)
}
