//! `metralectl run NAME`: start a recipe's engine in a container or as a native process, follow
//! it to `/ready`, print the endpoint; Ctrl-C stops it (unless `--detach`).
//! `--print` prints the exact commands instead and runs nothing.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;

use super::{JSON_VERSION, load_registry};
use crate::cli::RunArgs;
use crate::dirs;
use crate::docker::{self, Client, DaemonInfo};
use crate::engines::{self, Mode};
use crate::error::UserError;
use crate::printer::{Printer, Style};
use crate::recipe::Entry;
use crate::recipe::launch::{Launch, LaunchEnv, launch};
use crate::recipe::schema::Device;
use crate::startup::{self, Event, Failure, Watched};

mod container;
mod native_mode;
pub(super) mod preflight;
mod progress;

pub(super) use container::ensure_image;
pub(super) use progress::Download;

/// Engine log lines shown when it exits during start-up.
const LAST_LINES: usize = 20;
/// How long an engine gets to drain on Ctrl-C before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(30);
/// Where the metrics socket's directory is mounted inside the container.
const CONTAINER_SOCKET_DIR: &str = "/run/metrale";

#[derive(Debug, Serialize)]
struct RunJson<'a> {
    version: u32,
    recipe: &'a str,
    #[serde(flatten)]
    launch: &'a Launch,
}

/// What `run --detach --json` prints.
#[derive(Debug, Serialize)]
struct StartedJson {
    version: u32,
    name: String,
    recipe: String,
    mode: Mode,
    /// Container id or process id.
    id: String,
    url: String,
    log: Option<PathBuf>,
}

pub fn run(args: &RunArgs, printer: &Printer) -> anyhow::Result<ExitCode> {
    let registry = load_registry()?;
    let entry = registry.get(&args.name)?;
    let env = LaunchEnv {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        hf_cache: dirs::hf_cache_dir(),
        hf_token_set: std::env::var_os("HF_TOKEN").is_some_and(|v| !v.is_empty()),
        port: args.port,
        host: args.host.clone(),
    };
    let launch = launch(entry, &env);
    for warning in &launch.warnings {
        printer.warn(warning);
    }
    if args.print {
        return print(entry, &launch, printer);
    }
    preflight::check_checkpoint(entry)?;
    if !args.skip_checks {
        preflight::check_device(entry)?;
    }
    if printer.json_mode() && !args.detach {
        return Err(UserError::new(
            "--json goes with --print or --detach",
            "add --detach to get the started engine as JSON, or --print for the commands",
        )
        .into());
    }
    super::runtime()?.block_on(start(args, entry, &launch, &env, printer))
}

fn print(entry: &Entry, launch: &Launch, printer: &Printer) -> anyhow::Result<ExitCode> {
    if printer.json_mode() {
        printer.json(&RunJson {
            version: JSON_VERSION,
            recipe: &entry.recipe.name,
            launch,
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

/// Everything the start needs, settled before anything is created.
struct Plan<'a> {
    args: &'a RunArgs,
    entry: &'a Entry,
    launch: &'a Launch,
    name: String,
    port: u16,
    gpus: String,
    state_dir: PathBuf,
}

async fn start(
    args: &RunArgs,
    entry: &Entry,
    launch: &Launch,
    env: &LaunchEnv,
    printer: &Printer,
) -> anyhow::Result<ExitCode> {
    let recipe = &entry.recipe;
    let name = args
        .engine_name
        .clone()
        .unwrap_or_else(|| recipe.name.clone());
    check_name(&name)?;
    let port = env.port.unwrap_or(recipe.serve.port);
    if port == 0 {
        return Err(UserError::new(
            "--port 0 cannot be used with run: the endpoint must be known",
            "pass a free port, e.g. --port 8001",
        )
        .into());
    }
    let gpu_recipe = recipe.serve.device == Device::Cuda;
    let gpus = match (&args.gpus, gpu_recipe) {
        (Some(g), _) => g.clone(),
        (None, true) => "all".into(),
        (None, false) => "none".into(),
    };
    let state_dir = dirs::state_dir().ok_or_else(|| {
        UserError::new(
            "cannot find a state directory to record the engine in",
            format!("set {} to a writable directory", dirs::STATE_DIR_ENV),
        )
    })?;

    let docker = if args.native {
        None
    } else {
        Some(Client::connect().await)
    };
    let mode = choose_mode(args, &recipe.name, gpu_recipe, docker, printer).await?;

    // Refuse before creating anything: a name in use, a port taken.
    let client = match &mode {
        Chosen::Container(c, _) => Some(Ok(c)),
        Chosen::Native => None,
    };
    let found = engines::list(Some(&state_dir), client).await?;
    if let Some(running) = found
        .engines
        .iter()
        .find(|e| e.name == name && e.state == "running")
    {
        return Err(UserError::new(
            format!(
                "an engine named {name} is already running ({}, port {})",
                running.mode.as_str(),
                running.port.map_or_else(|| "?".into(), |p| p.to_string())
            ),
            format!("stop it with `metralectl stop {name}`, or start this one with --name OTHER"),
        )
        .into());
    }
    check_port_free(&args.host, port)?;

    let plan = Plan {
        args,
        entry,
        launch,
        name,
        port,
        gpus,
        state_dir,
    };
    match mode {
        Chosen::Container(client, daemon) => {
            container::run_container(&plan, &client, &daemon, printer).await
        }
        Chosen::Native => native_mode::run_native(&plan, printer).await,
    }
}

enum Chosen {
    Container(Client, Box<DaemonInfo>),
    Native,
}

async fn choose_mode(
    args: &RunArgs,
    recipe: &str,
    gpu_recipe: bool,
    docker: Option<Result<Client, docker::DockerError>>,
    printer: &Printer,
) -> anyhow::Result<Chosen> {
    let Some(connected) = docker else {
        printer.note("native mode (--native)");
        return Ok(Chosen::Native);
    };
    let client = match connected {
        Ok(client) => client,
        Err(e) if args.docker => {
            return Err(anyhow::Error::new(e).context(UserError::new(
                "container mode needs the Docker daemon, and it does not answer",
                format!(
                    "start Docker (e.g. `sudo systemctl start docker`) or check DOCKER_HOST; {}",
                    native_hint(recipe, gpu_recipe)
                ),
            )));
        }
        Err(e) => {
            printer.note(format!("native mode: Docker is not reachable ({e})"));
            return Ok(Chosen::Native);
        }
    };
    let daemon = client.info().await?;
    if daemon.nvidia_ready() {
        printer.note(format!(
            "container mode: Docker {} with the NVIDIA runtime",
            daemon.server_version
        ));
        return Ok(Chosen::Container(client, Box::new(daemon)));
    }
    if args.docker {
        if gpu_recipe {
            return Err(UserError::new(
                format!(
                    "{recipe} runs on NVIDIA GPUs, and Docker at {} has no NVIDIA runtime (runtimes: {}; no CDI GPU devices)",
                    daemon.host,
                    daemon.runtimes.join(", ")
                ),
                format!(
                    "install the NVIDIA Container Toolkit and run `sudo nvidia-ctk runtime configure --runtime=docker \
                     && sudo systemctl restart docker`; {}",
                    native_hint(recipe, true)
                ),
            )
            .into());
        }
        printer.note(format!(
            "container mode (--docker): Docker {}, CPU recipe",
            daemon.server_version
        ));
        return Ok(Chosen::Container(client, Box::new(daemon)));
    }
    printer.note(format!(
        "native mode: Docker {} has no NVIDIA runtime (pass --docker to use a container anyway)",
        daemon.server_version
    ));
    Ok(Chosen::Native)
}

/// How to run natively instead: a GPU recipe needs a `met` built for CUDA.
fn native_hint(recipe: &str, gpu_recipe: bool) -> String {
    if gpu_recipe {
        format!(
            "a native run needs a met built for CUDA (`cargo install --path engine --features cuda`, \
             docs/cuda.md), then `metralectl run {recipe} --native`"
        )
    } else {
        format!("or run natively: `metralectl run {recipe} --native`")
    }
}

fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 100
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(UserError::new(
            format!("{name:?} cannot name an engine"),
            "use letters, digits, '_', '.' and '-', starting with a letter or digit",
        )
        .into())
    }
}

fn check_port_free(host: &str, port: u16) -> anyhow::Result<()> {
    match std::net::TcpListener::bind((host, port)) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            let holder = crate::port_owner::describe(port);
            let by = holder
                .as_deref()
                .map_or_else(String::new, |h| format!(" by {h}"));
            Err(UserError::new(
                format!("port {port} on {host} is already in use{by}"),
                crate::port_owner::busy_fix(port, holder.as_deref()),
            )
            .into())
        }
        Err(e) => Err(anyhow::Error::new(e).context(UserError::new(
            format!("cannot listen on {host}:{port}"),
            "pass an address of this machine with --host (127.0.0.1 or 0.0.0.0)",
        ))),
    }
}

/// Ctrl-C (SIGINT) and SIGTERM, each listened for from this value's creation to its drop. A
/// foreground run keeps one for its whole life: once tokio's handler is installed a signal no
/// longer ends the process, so one arriving while no listener lived (between the follower's and
/// the foreground loop's, e.g. right after `ready:` was printed) was lost and the run never
/// stopped. `recv` is cancel-safe: a signal is kept until the next call takes it.
struct Signals {
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(windows)]
    ctrl_c: Option<tokio::signal::windows::CtrlC>,
}

impl Signals {
    /// Starts listening (inside the runtime). A signal that cannot be listened for is never
    /// reported, and keeps its default action.
    fn new() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Self {
                int: signal(SignalKind::interrupt()).ok(),
                term: signal(SignalKind::terminate()).ok(),
            }
        }
        #[cfg(windows)]
        {
            Self {
                ctrl_c: tokio::signal::windows::ctrl_c().ok(),
            }
        }
    }

    /// The next signal since the last call (or since `new`), by name.
    async fn recv(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            async fn next(s: &mut Option<tokio::signal::unix::Signal>) {
                match s {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            let Self { int, term } = self;
            tokio::select! {
                () = next(int) => "Ctrl-C",
                () = next(term) => "SIGTERM",
            }
        }
        #[cfg(windows)]
        {
            match self.ctrl_c.as_mut() {
                Some(c) => {
                    c.recv().await;
                }
                None => std::future::pending().await,
            }
            "Ctrl-C"
        }
    }
}

/// Follows start-up, stopping early on a signal.
async fn follow_or_signal(
    plan: &Plan<'_>,
    metrics_socket: PathBuf,
    watched: &mut impl Watched,
    signals: &mut Signals,
    printer: &Printer,
) -> Result<(), Interrupted> {
    let url = base_url(&plan.args.host, plan.port);
    let mut bar = progress::Startup::new(printer, &plan.name);
    let timeout = Duration::from_secs(plan.args.ready_timeout);
    let followed = tokio::select! {
        r = startup::follow(&url, Some(metrics_socket), watched, timeout, |e: &Event| bar.event(e)) => r,
        s = signals.recv() => return { bar.finish(); Err(Interrupted::Signal(s)) },
    };
    bar.finish();
    followed.map_err(Interrupted::Failed)
}

enum Interrupted {
    Signal(&'static str),
    Failed(Failure),
}

fn base_url(host: &str, port: u16) -> String {
    let host = match host {
        "0.0.0.0" => "127.0.0.1",
        "::" => "[::1]",
        h if h.contains(':') && !h.starts_with('[') => return format!("http://[{h}]:{port}"),
        h => h,
    };
    format!("http://{host}:{port}")
}

/// An engine's last log lines, indented, or `(no output)`.
fn tail_text(last_lines: &[String]) -> String {
    if last_lines.is_empty() {
        return "  (no output)".to_owned();
    }
    last_lines
        .iter()
        .map(|l| format!("  | {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn failure_error(plan: &Plan<'_>, failure: Failure, last_lines: &[String]) -> anyhow::Error {
    let tail = tail_text(last_lines);
    match failure {
        Failure::Exited { status } => UserError::new(
            format!(
                "the engine {} exited during start-up ({status}); its last lines:\n{tail}",
                plan.name
            ),
            "fix what the engine says above; `metralectl run NAME --print` shows the exact command",
        )
        .into(),
        Failure::TimedOut(t) => UserError::new(
            format!(
                "the engine {} was not ready after {}s (stopped it); its last lines:\n{tail}",
                plan.name,
                t.as_secs()
            ),
            "a large checkpoint can take long to download and load: raise --ready-timeout",
        )
        .into(),
        Failure::Watch(e) => e.context(format!("lost track of the engine {}", plan.name)),
    }
}

/// The foreground run's end when the engine exits by itself: a clean exit (`metralectl stop`
/// from another shell, or a SIGTERM: the engine drains and exits 0) ends the run with 0 too.
fn ended(
    plan: &Plan<'_>,
    clean: bool,
    status: &str,
    last_lines: &[String],
    printer: &Printer,
) -> anyhow::Result<ExitCode> {
    if clean {
        printer.note(format!(
            "the engine {} stopped ({status}; `metralectl stop` or a signal ended it)",
            plan.name
        ));
        return Ok(ExitCode::SUCCESS);
    }
    Err(UserError::new(
        format!(
            "the engine {} exited ({status}); its last lines:\n{}",
            plan.name,
            tail_text(last_lines)
        ),
        format!(
            "fix what the engine says above, then start it again with `metralectl run {}`",
            plan.entry.recipe.name
        ),
    )
    .into())
}

fn print_ready(
    plan: &Plan<'_>,
    mode: Mode,
    id: &str,
    log: Option<PathBuf>,
    printer: &Printer,
) -> anyhow::Result<()> {
    let url = base_url(&plan.args.host, plan.port);
    if printer.json_mode() {
        return printer.json(&StartedJson {
            version: JSON_VERSION,
            name: plan.name.clone(),
            recipe: plan.entry.recipe.name.clone(),
            mode,
            id: id.to_owned(),
            url,
            log,
        });
    }
    let auth = if plan.args.api_key.is_some() {
        " -H \"Authorization: Bearer $MET_API_KEY\""
    } else {
        ""
    };
    let body = serde_json::json!({
        "model": plan.entry.recipe.name,
        "messages": [{"role": "user", "content": "Hello!"}],
    });
    let what = match mode {
        Mode::Container => format!("container {id}"),
        Mode::Native => format!("pid {id}"),
    };
    printer.line(format!(
        "{} {} ({}, {what}) at {url}/v1",
        printer.paint(Style::Green, "ready:"),
        plan.name,
        mode.as_str()
    ))?;
    printer.line(format!(
        "  curl {url}/v1/chat/completions -H 'Content-Type: application/json'{auth} -d '{body}'"
    ))?;
    printer.line(format!("  live dashboard: metralectl top {}", plan.name))?;
    if plan.args.detach {
        printer.line(format!(
            "  logs: metralectl logs {0} -f    stop: metralectl stop {0}",
            plan.name
        ))?;
    } else {
        printer.line(format!(
            "  logs: metralectl logs {} -f    Ctrl-C stops it",
            plan.name
        ))?;
    }
    Ok(())
}

#[cfg(all(test, unix))]
mod signal_tests {
    use std::time::Duration;

    use super::Signals;

    /// A signal that arrives while nobody waits is reported by the next wait: `run` used to
    /// make a new listener for each wait, and a Ctrl-C sent right after `ready:` (between the
    /// follower's listener and the foreground loop's) was swallowed by the installed handler.
    #[tokio::test]
    async fn a_signal_before_the_wait_is_kept() {
        let mut signals = Signals::new();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &std::process::id().to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success());
        // The signal lands with no recv() in progress.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let got = tokio::time::timeout(Duration::from_secs(10), signals.recv())
            .await
            .expect("the signal sent before the wait is reported");
        assert_eq!(got, "SIGTERM");
    }
}
