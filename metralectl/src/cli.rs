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
    /// Start a recipe: in a container when Docker and the NVIDIA runtime are ready, else natively.
    Run(RunArgs),
    /// Live dashboard of a running engine: throughput, batch, KV cache, every request.
    Top(TopArgs),
    /// Talk to a model in the terminal: a running engine, or a recipe started for it.
    Chat(ChatArgs),
    /// Check this machine: Docker, NVIDIA runtime and driver, disk, port, shared memory, Hub token.
    Doctor(DoctorArgs),
    /// List the running engines.
    Ps(PsArgs),
    /// Stop engines (a container is removed).
    Stop(StopArgs),
    /// Show an engine's log.
    Logs(LogsArgs),
    /// Fetch a recipe's engine image and Hub checkpoint ahead of time.
    Pull(PullArgs),
    /// Write shell completions to stdout.
    Completions(CompletionsArgs),
    /// Measure an OpenAI-compatible server over a concurrency ladder (see docs/benchmarks.md).
    Bench(Box<crate::commands::bench::BenchArgs>),
    /// Sign a file (a release's SHA256SUMS, a benchmark record): writes FILE.minisig.
    Sign(SignArgs),
    /// Check a signed file (a release's SHA256SUMS, a benchmark record) against a trusted key.
    Verify(VerifyArgs),
    /// Update or remove this installation of metralectl and met.
    #[command(name = "self", subcommand)]
    SelfCmd(SelfCommand),
}

impl Command {
    /// Whether the command was asked for JSON output.
    pub fn json(&self) -> bool {
        match self {
            Self::List(a) => a.json,
            Self::Show(a) => a.json,
            Self::Run(a) => a.json,
            Self::Doctor(a) => a.json,
            Self::Ps(a) => a.json,
            Self::Top(_) | Self::Chat(_) | Self::Stop(_) | Self::Logs(_) | Self::Pull(_) => false,
            Self::Completions(_) | Self::Sign(_) => false,
            Self::Bench(a) => a.json(),
            Self::Verify(a) => a.json,
            Self::SelfCmd(SelfCommand::Update(a)) => a.json,
            Self::SelfCmd(SelfCommand::Uninstall(_)) => false,
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
    #[arg(long, conflicts_with = "names")]
    pub json: bool,
    /// Print only the names, one a line (shell completion reads them).
    #[arg(long)]
    pub names: bool,
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
    /// Run `met` as a native process (found beside metralectl, then on PATH).
    #[arg(long, conflicts_with = "docker")]
    pub native: bool,
    /// Run the engine image in a container through the Docker Engine.
    #[arg(long)]
    pub docker: bool,
    /// Serve on this port instead of the recipe's.
    #[arg(long, value_name = "PORT")]
    pub port: Option<u16>,
    /// Address to serve on (in a container: the host side of the port binding). The default
    /// keeps the engine to this machine; 0.0.0.0 opens it to every network it is on.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1")]
    pub host: String,
    /// Return once the engine is ready and leave it running (`metralectl stop` ends it).
    #[arg(long, short)]
    pub detach: bool,
    /// GPUs to give the engine: `all`, or indices like `0,1`.
    #[arg(long, value_name = "GPUS")]
    pub gpus: Option<String>,
    /// Require `Authorization: Bearer KEY` on the API (passed to the engine as MET_API_KEY).
    #[arg(long, value_name = "KEY", env = "MET_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Name of the engine for ps/stop/logs [default: the recipe name].
    #[arg(long = "name", value_name = "NAME")]
    pub engine_name: Option<String>,
    /// Use this engine image instead of the recipe's (e.g. one built locally).
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// Start even when this machine lacks the GPU, memory or compute capability the recipe
    /// asks for, or the engine lacks what its model needs on its device (the checks run
    /// before any download).
    #[arg(long)]
    pub skip_checks: bool,
    /// Give up if the engine is not ready after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 3600)]
    pub ready_timeout: u64,
    /// With --print: print JSON (see docs/recipes.md for its fields).
    #[arg(long)]
    pub json: bool,
    /// Extra `met serve` flags, after `--`.
    #[arg(last = true, value_name = "MET_SERVE_FLAGS")]
    pub extra: Vec<String>,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print JSON: each check's id, status, finding and fix.
    #[arg(long)]
    pub json: bool,
    /// Check this port instead of the default (8000).
    #[arg(long, value_name = "PORT")]
    pub port: Option<u16>,
}

#[derive(Debug, Args)]
pub struct PsArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct StopArgs {
    /// Engine names, recipe names or container ids (a prefix will do).
    #[arg(required_unless_present = "all")]
    pub engines: Vec<String>,
    /// Stop every running engine.
    #[arg(long, conflicts_with = "engines")]
    pub all: bool,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// Engine name, recipe name or container id.
    pub engine: String,
    /// Keep printing new lines until the engine stops (or Ctrl-C).
    #[arg(long, short)]
    pub follow: bool,
    /// Only the last N lines.
    #[arg(long, value_name = "N")]
    pub tail: Option<usize>,
}

#[derive(Debug, Args)]
pub struct PullArgs {
    /// The recipe name, as `metralectl list` shows it.
    pub name: String,
    /// Pull this image instead of the recipe's.
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// Only the checkpoint (for native runs): do not pull the engine image.
    #[arg(long)]
    pub no_image: bool,
}

#[derive(Debug, Args)]
pub struct TopArgs {
    /// The engine to watch: its name, recipe or id, as `metralectl ps` lists it (a container or
    /// a native engine, on any port) [default: the engine on --port].
    #[arg(value_name = "ENGINE", conflicts_with_all = ["socket", "url", "port"])]
    pub engine: Option<String>,
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
pub struct ChatArgs {
    /// A running engine (name, recipe or id, as `metralectl ps` lists it), or a recipe to start
    /// in the background when none runs.
    #[arg(value_name = "NAME", required_unless_present = "url")]
    pub name: Option<String>,
    /// Talk to this OpenAI-compatible server instead (e.g. http://127.0.0.1:8000).
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// The engine's API key.
    #[arg(long, value_name = "KEY", env = "MET_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// The model name to send [default: the first the server's /v1/models lists].
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,
    /// A system message that starts the conversation (and survives /reset).
    #[arg(long, value_name = "TEXT")]
    pub system: Option<String>,
    /// Most tokens a reply may have [default: the engine's].
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u32>,
    /// Sampling temperature [default: the model's].
    #[arg(long, value_name = "T")]
    pub temperature: Option<f64>,
    /// When the recipe is started for the chat: serve on this port instead of the recipe's.
    #[arg(long, value_name = "PORT")]
    pub port: Option<u16>,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    pub shell: Shell,
}

#[derive(Debug, Args)]
pub struct SignArgs {
    /// The file to sign; the signature goes to FILE.minisig (minisign's format).
    pub file: std::path::PathBuf,
    /// The secret key (from `metralectl bench keygen`, or `minisign -G -W`).
    #[arg(long, value_name = "KEYFILE")]
    pub key: std::path::PathBuf,
    /// The signed comment [default: `timestamp:UNIX_TIME<TAB>file:NAME`, as minisign writes].
    #[arg(long, value_name = "TEXT")]
    pub trusted_comment: Option<String>,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The signed file.
    pub file: std::path::PathBuf,
    /// Its signature [default: FILE.minisig].
    #[arg(long, value_name = "SIGFILE")]
    pub sig: Option<std::path::PathBuf>,
    /// Trust only this public key (a KEYFILE.pub) [default: the keys built in: the release
    /// key and bench/keys/*.pub].
    #[arg(long, visible_alias = "key", value_name = "PUBKEY")]
    pub pubkey: Option<std::path::PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum SelfCommand {
    /// Install the latest release (or --version) after checking its signature and hash.
    Update(SelfUpdateArgs),
    /// Remove metralectl, met and what the installer added to your shell profile.
    Uninstall(SelfUninstallArgs),
}

#[derive(Debug, Args)]
#[command(disable_version_flag = true)]
pub struct SelfUpdateArgs {
    /// Install this version (up or down) instead of the latest.
    #[arg(long, value_name = "VERSION")]
    pub version: Option<String>,
    /// Where releases live: URL/download/vVERSION/ and URL/latest/download/.
    #[arg(long, value_name = "URL", env = "METRALE_DOWNLOAD_URL")]
    pub url: Option<String>,
    /// Trust this public key instead of the built-in release key (a mirror that signs its own
    /// releases; the tests).
    #[arg(long, value_name = "PUBKEY")]
    pub pubkey: Option<std::path::PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct SelfUninstallArgs {
    /// Do not ask for confirmation.
    #[arg(long, short)]
    pub yes: bool,
}
