//! One file a subcommand, each with one entry function that returns the exit status.

use std::process::ExitCode;

use anyhow::Context as _;
use serde::Serialize;

use crate::cli::{Command, SelfCommand};
use crate::dirs;
use crate::docker::Client;
use crate::engines::{self, Engine};
use crate::error::UserError;
use crate::printer::Printer;
use crate::recipe::{Entry, Registry, Source};

pub mod bench;
mod chat;
mod completions;
mod doctor;
mod list;
mod logs;
mod ps;
mod pull;
mod run;
mod self_cmd;
mod show;
mod sign;
mod stop;
mod top;
mod verify;

pub fn dispatch(command: &Command, printer: &Printer) -> anyhow::Result<ExitCode> {
    match command {
        Command::List(args) => list::list(args, printer),
        Command::Show(args) => show::show(args, printer),
        Command::Run(args) => run::run(args, printer),
        Command::Top(args) => top::top(args, printer),
        Command::Chat(args) => chat::chat(args, printer),
        Command::Doctor(args) => doctor::doctor(args, printer),
        Command::Ps(args) => ps::ps(args, printer),
        Command::Stop(args) => stop::stop(args, printer),
        Command::Logs(args) => logs::logs(args, printer),
        Command::Pull(args) => pull::pull(args, printer),
        Command::Completions(args) => completions::completions(args, printer),
        Command::Bench(args) => bench::bench(args, printer),
        Command::Sign(args) => sign::sign(args, printer),
        Command::Verify(args) => verify::verify(args, printer),
        Command::SelfCmd(SelfCommand::Update(args)) => self_cmd::update(args, printer),
        Command::SelfCmd(SelfCommand::Uninstall(args)) => self_cmd::uninstall(args, printer),
    }
}

/// The async runtime of the commands that talk to Docker or to engines.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("failed to start the async runtime")
}

/// The one running engine `query` names (name, recipe or id), among those `ps` lists: a
/// container or a native engine, on any port. `None` when none does; an error when several do.
fn find_engine(query: &str) -> anyhow::Result<Option<Engine>> {
    let found = runtime()?.block_on(async {
        let state_dir = dirs::state_dir();
        let docker = Client::connect().await;
        engines::list(state_dir.as_deref(), Some(docker.as_ref())).await
    })?;
    let mut matched: Vec<Engine> = found
        .engines
        .into_iter()
        .filter(|e| e.state == "running" && e.matches(query))
        .collect();
    if matched.len() > 1 {
        return Err(UserError::new(
            format!(
                "{query} names {} engines: {}",
                matched.len(),
                matched
                    .iter()
                    .map(|e| format!("{} ({}, {})", e.name, e.mode.as_str(), e.id))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "name one of them by its engine name or id, as `metralectl ps` lists them",
        )
        .into());
    }
    Ok(matched.pop())
}

/// The built-in recipes with the user's on top.
fn load_registry() -> anyhow::Result<Registry> {
    let dir = dirs::user_recipes_dir();
    Registry::load(dir.as_deref()).context("cannot load the recipes")
}

/// Where a recipe came from, as the JSON outputs say it.
#[derive(Debug, Serialize)]
struct SourceJson {
    /// `"built-in"` or `"user"`.
    kind: &'static str,
    /// The user file, for `"user"`.
    path: Option<String>,
    /// A user recipe that replaces a built-in one of the same name.
    overrides_builtin: bool,
}

impl SourceJson {
    fn of(entry: &Entry) -> Self {
        let (kind, path) = match &entry.source {
            Source::BuiltIn => ("built-in", None),
            Source::User(path) => ("user", Some(path.display().to_string())),
        };
        Self {
            kind,
            path,
            overrides_builtin: entry.overrides_builtin,
        }
    }
}

/// The version of the JSON layouts; bumped on any change that could break a reader.
const JSON_VERSION: u32 = 1;
