//! The command line, as clap types only. Behaviour lives in `commands/`.

use clap::{Args, Parser, Subcommand};
use clap_complete::Shell;

/// Run pinned LLM recipes on the Metrale engine (`met`).
#[derive(Debug, Parser)]
#[command(
    name = "metralectl",
    version,
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    /// Print only the result: no notes or warnings.
    #[arg(long, short, global = true)]
    pub quiet: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List the recipes: built-in ones and yours.
    List(ListArgs),
    /// Show everything a recipe pins, and whether it fits this machine.
    Show(ShowArgs),
    /// Start a recipe (for now: print the exact commands with --print).
    Run(RunArgs),
    /// Live dashboard of a running engine: throughput, batch, KV cache, every request.
    Top(TopArgs),
    /// Write shell completions to stdout.
    Completions(CompletionsArgs),
}

impl Command {
    /// Whether the command was asked for JSON output.
    pub fn json(&self) -> bool {
        match self {
            Self::List(a) => a.json,
            Self::Show(a) => a.json,
            Self::Run(a) => a.json,
            Self::Top(_) | Self::Completions(_) => false,
        }
    }
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only recipes whose checkpoint comes from this vendor (e.g. Qwen, NVIDIA).
    #[arg(long, value_name = "VENDOR")]
    pub vendor: Option<String>,
    /// Only recipes of this model family (e.g. qwen3, qwen3.6).
    #[arg(long, value_name = "FAMILY")]
    pub family: Option<String>,
    /// Print JSON (see docs/recipes.md for its fields).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The recipe name, as `metralectl list` shows it.
    pub name: String,
    /// Print JSON (see docs/recipes.md for its fields).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The recipe name, as `metralectl list` shows it.
    pub name: String,
    /// Print the docker and native commands instead of running anything.
    #[arg(long)]
    pub print: bool,
    /// Serve on this port instead of the recipe's.
    #[arg(long, value_name = "PORT")]
    pub port: Option<u16>,
    /// With --print: print JSON (see docs/recipes.md for its fields).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct TopArgs {
    /// The engine's metrics socket [default: the one `met serve` makes for --port].
    #[arg(long, value_name = "PATH", conflicts_with = "url")]
    pub socket: Option<std::path::PathBuf>,
    /// Read `URL/v1/metrics/stream` instead (a remote engine or a container).
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// The engine's API key, for --url.
    #[arg(long, value_name = "KEY", env = "MET_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// The engine's port, to find its default socket [default: 8000].
    #[arg(long, value_name = "PORT", conflicts_with_all = ["socket", "url"])]
    pub port: Option<u16>,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    pub shell: Shell,
}
