//! `run` in container mode: the engine image through the Docker Engine API, followed to ready,
//! stopped and removed on Ctrl-C.

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;

use super::{
    CONTAINER_SOCKET_DIR, Interrupted, LAST_LINES, Plan, STOP_GRACE, Signals, ended, failure_error,
    follow_or_signal, print_ready, progress,
};
use crate::docker::{self, Client, ContainerSpec, DaemonInfo, GpuRequest};
use crate::engines::{CONTAINER_PREFIX, Mode, label};
use crate::error::UserError;
use crate::printer::Printer;
use crate::startup::Watched;

struct ContainerWatch<'a> {
    client: &'a Client,
    id: &'a str,
}

impl Watched for ContainerWatch<'_> {
    async fn exited(&mut self) -> anyhow::Result<Option<String>> {
        Ok(self
            .client
            .exited(self.id)
            .await?
            .map(|exit| describe(&exit)))
    }
}

async fn container_tail(client: &Client, id: &str) -> Vec<String> {
    use futures_util::StreamExt as _;
    let chunks: Vec<_> = client.logs(id, false, Some(LAST_LINES)).collect().await;
    chunks
        .into_iter()
        .filter_map(Result::ok)
        .collect::<String>()
        .lines()
        .map(str::to_owned)
        .collect()
}

pub(super) async fn run_container(
    plan: &Plan<'_>,
    client: &Client,
    daemon: &DaemonInfo,
    printer: &Printer,
) -> anyhow::Result<ExitCode> {
    let recipe = &plan.entry.recipe;
    let image = plan
        .args
        .image
        .clone()
        .unwrap_or_else(|| plan.launch.image.clone());
    ensure_image(client, &image, &recipe.name, printer).await?;

    let container = &plan.launch.container;
    let mut binds = container.binds.clone();
    // The Hub cache must exist before Docker mounts it, or the daemon creates it as root.
    for bind in &binds {
        if let Some(host) = bind.split(':').next().filter(|h| h.starts_with('/'))
            && !std::path::Path::new(host).exists()
        {
            std::fs::create_dir_all(host)
                .with_context(|| format!("failed to create {host} to mount into the container"))?;
        }
    }
    let socket_dir = plan.state_dir.join("sockets").join(&plan.name);
    std::fs::create_dir_all(&socket_dir)
        .with_context(|| format!("failed to create {}", socket_dir.display()))?;
    binds.push(format!("{}:{CONTAINER_SOCKET_DIR}", socket_dir.display()));
    let mut cmd = container.cmd.clone();
    cmd.extend([
        "--metrics-socket".into(),
        format!("{CONTAINER_SOCKET_DIR}/metrics.sock"),
    ]);
    cmd.extend(plan.args.extra.iter().cloned());
    let mut env: Vec<(String, String)> = container
        .env
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if container.hf_token
        && let Ok(token) = std::env::var("HF_TOKEN")
    {
        env.push(("HF_TOKEN".into(), token));
    }
    if let Some(key) = &plan.args.api_key {
        env.push(("MET_API_KEY".into(), key.clone()));
    }
    // A mirror or offline mode applies inside the container as outside.
    for var in ["HF_ENDPOINT", "HF_HUB_OFFLINE"] {
        if let Some(value) = std::env::var(var).ok().filter(|v| !v.is_empty()) {
            env.push((var.into(), value));
        }
    }
    // Run as the user (not root) so what the engine writes into the mounted Hub cache and
    // socket directory is theirs; HF_HOME points it at the mounted cache whatever its HOME.
    let uid = rustix::process::getuid().as_raw();
    let user = (uid != 0).then(|| format!("{uid}:{}", rustix::process::getgid().as_raw()));
    env.push((
        "HF_HOME".into(),
        crate::recipe::launch::CONTAINER_HF_CACHE.to_owned(),
    ));
    let gpus = container.gpus.then(|| match plan.gpus.as_str() {
        "all" | "none" => GpuRequest::All,
        ids => GpuRequest::Devices(ids.split(',').map(|s| s.trim().to_owned()).collect()),
    });
    let labels = HashMap::from([
        (label::RECIPE.to_owned(), recipe.name.clone()),
        (label::NAME.to_owned(), plan.name.clone()),
        (label::MODE.to_owned(), "container".to_owned()),
        (label::PORT.to_owned(), plan.port.to_string()),
        (label::HOST.to_owned(), plan.args.host.clone()),
        (label::GPUS.to_owned(), plan.gpus.clone()),
        (
            label::VERSION.to_owned(),
            env!("CARGO_PKG_VERSION").to_owned(),
        ),
        (
            label::METRICS_SOCKET.to_owned(),
            socket_dir.join("metrics.sock").display().to_string(),
        ),
    ]);
    let spec = ContainerSpec {
        name: format!("{CONTAINER_PREFIX}{}", plan.name),
        image: image.clone(),
        cmd,
        env,
        labels,
        binds,
        host_ip: plan.args.host.clone(),
        host_port: plan.port,
        container_port: container.port,
        gpus,
        user,
    };
    let id = match client.create_and_start(&spec, daemon).await {
        Ok(id) => id,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&socket_dir);
            return Err(container_error(e, &spec.name));
        }
    };
    let short: String = id.chars().take(12).collect();
    printer.note(format!(
        "started container {} ({short}) from {image}",
        spec.name
    ));

    // Signals from here on stop and remove the container (one listener to the end).
    let mut signals = Signals::new();
    let mut watch = ContainerWatch { client, id: &id };
    let socket = plan
        .state_dir
        .join("sockets")
        .join(&plan.name)
        .join("metrics.sock");
    match follow_or_signal(plan, socket, &mut watch, &mut signals, printer).await {
        Ok(()) => {}
        Err(Interrupted::Signal(s)) => {
            printer.note(format!("{s}: stopping and removing {}", spec.name));
            client.stop_and_remove(&id, STOP_GRACE).await?;
            let _ = std::fs::remove_dir_all(&socket_dir);
            return Ok(ExitCode::from(130));
        }
        Err(Interrupted::Failed(failure)) => {
            let lines = container_tail(client, &id).await;
            client.stop_and_remove(&id, STOP_GRACE).await?;
            let _ = std::fs::remove_dir_all(&socket_dir);
            return Err(failure_error(plan, failure, &lines));
        }
    }
    print_ready(plan, Mode::Container, &short, None, printer)?;
    if plan.args.detach {
        return Ok(ExitCode::SUCCESS);
    }
    let exit = loop {
        tokio::select! {
            s = signals.recv() => {
                printer.note(format!("{s}: stopping and removing {}", spec.name));
                break None;
            }
            () = tokio::time::sleep(Duration::from_millis(1000)) => {
                if let Some(exit) = client.exited(&id).await? {
                    break Some(exit);
                }
            }
        }
    };
    let lines = match &exit {
        Some(exit) if !exit.removed => container_tail(client, &id).await,
        _ => Vec::new(),
    };
    client.stop_and_remove(&id, STOP_GRACE).await?;
    let _ = std::fs::remove_dir_all(&socket_dir);
    match exit {
        None => Ok(ExitCode::SUCCESS),
        Some(exit) => ended(
            plan,
            exit.exit_code == 0 || exit.removed,
            &describe(&exit),
            &lines,
            printer,
        ),
    }
}

/// `exit code N: error`, or that the container was removed (by `metralectl stop`).
fn describe(exit: &docker::ContainerExit) -> String {
    if exit.removed {
        return "its container was removed".into();
    }
    let mut s = format!("exit code {}", exit.exit_code);
    if let Some(e) = &exit.error {
        s.push_str(&format!(": {e}"));
    }
    s
}

fn container_error(e: docker::DockerError, name: &str) -> anyhow::Error {
    if e.is_conflict() {
        return anyhow::Error::new(e).context(UserError::new(
            format!("a container named {name} already exists"),
            format!("remove it with `docker rm -f {name}`, or pass --name OTHER"),
        ));
    }
    anyhow::Error::new(e)
}

/// Pulls `image` unless it is on this machine already, with a progress bar a layer.
pub(in crate::commands) async fn ensure_image(
    client: &Client,
    image: &str,
    recipe: &str,
    printer: &Printer,
) -> anyhow::Result<()> {
    if client.image_present(image).await? {
        printer.note(format!("image {image} is on this machine"));
        return Ok(());
    }
    printer.note(format!("pulling {image}"));
    let mut bars = progress::Layers::new(printer);
    let pulled = client.pull(image, |event| bars.event(&event)).await;
    bars.finish();
    pulled.map_err(|e| {
        anyhow::Error::new(e).context(UserError::new(
            format!("the engine image {image} is not on this machine and could not be pulled"),
            format!(
                "check the network and the image name; build the image yourself (docs/launcher.md) and pass \
                 --image TAG, or run natively: `metralectl run {recipe} --native`"
            ),
        ))
    })
}
