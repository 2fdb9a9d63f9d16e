//! The Docker Engine, through bollard. The only file that names bollard types: the rest of the
//! launcher sees plain structs ([`ContainerSpec`], [`EngineContainer`], [`DaemonInfo`]).
//!
//! The client honours `DOCKER_HOST` (unix socket or tcp) and negotiates the API version down to
//! what the daemon speaks, so older engines (API 1.41) work too.

use std::collections::HashMap;
use std::time::Duration;

use bollard::Docker;
use bollard::models::{ContainerCreateBody, DeviceRequest, HostConfig, PortBinding};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, CreateImageOptionsBuilder, ListContainersOptionsBuilder,
    LogsOptionsBuilder, RemoveContainerOptionsBuilder, StopContainerOptionsBuilder,
};
use futures_util::{Stream, StreamExt};

/// The label that marks a Metrale engine and names its recipe.
pub const LABEL_RECIPE: &str = "ai.metrale.recipe";

#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    // The bollard error is in the message and deliberately not a `source`, so `{:#}` does not
    // print it twice.
    #[error("cannot reach the Docker daemon at {host}: {cause}")]
    Unreachable {
        host: String,
        cause: bollard::errors::Error,
    },
    #[error("failed to {op}: {cause}")]
    Api {
        op: String,
        cause: bollard::errors::Error,
    },
    #[error("failed to pull image {image}: {message}")]
    Pull { image: String, message: String },
}

impl DockerError {
    fn api(op: impl Into<String>) -> impl FnOnce(bollard::errors::Error) -> Self {
        let op = op.into();
        move |cause| Self::Api { op, cause }
    }

    /// The daemon answered 409 (a name already taken, a removal already in progress).
    pub fn is_conflict(&self) -> bool {
        matches!(
            self,
            Self::Api {
                cause: bollard::errors::Error::DockerResponseServerError {
                    status_code: 409,
                    ..
                },
                ..
            }
        )
    }
}

/// Where the client connects: `$DOCKER_HOST`, else the platform's default socket.
pub fn host_description() -> String {
    std::env::var("DOCKER_HOST")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unix:///var/run/docker.sock".to_owned())
}

/// What the daemon says about itself.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DaemonInfo {
    pub host: String,
    pub server_version: String,
    pub api_version: String,
    /// Runtimes registered with the daemon (`runc`, `nvidia`, …).
    pub runtimes: Vec<String>,
    /// CDI devices the daemon discovered (`nvidia.com/gpu=0`, …); empty on older daemons.
    pub cdi_devices: Vec<String>,
    pub root_dir: Option<String>,
}

impl DaemonInfo {
    /// Whether containers can be given NVIDIA GPUs: the `nvidia` runtime or NVIDIA CDI devices.
    pub fn nvidia_ready(&self) -> bool {
        self.runtimes.iter().any(|r| r == "nvidia")
            || self
                .cdi_devices
                .iter()
                .any(|d| d.starts_with("nvidia.com/gpu"))
    }

    fn uses_cdi(&self) -> bool {
        !self.runtimes.iter().any(|r| r == "nvidia")
            && self
                .cdi_devices
                .iter()
                .any(|d| d.starts_with("nvidia.com/gpu"))
    }
}

/// A container to create and start.
#[derive(Debug, Clone)]
pub struct ContainerSpec {
    pub name: String,
    pub image: String,
    /// The command after the image (`met serve …`).
    pub cmd: Vec<String>,
    pub env: Vec<(String, String)>,
    pub labels: HashMap<String, String>,
    /// `host:container[:ro]` bind mounts.
    pub binds: Vec<String>,
    pub host_ip: String,
    pub host_port: u16,
    pub container_port: u16,
    /// Give the container every NVIDIA GPU (or these device ids).
    pub gpus: Option<GpuRequest>,
    /// `uid:gid` to run as, so files written to mounted host directories are the user's.
    pub user: Option<String>,
}

#[derive(Debug, Clone)]
pub enum GpuRequest {
    All,
    Devices(Vec<String>),
}

/// A Metrale engine container, as `ps` shows it.
#[derive(Debug, Clone)]
pub struct EngineContainer {
    pub id: String,
    pub name: String,
    pub labels: HashMap<String, String>,
    /// `running`, `exited`, …
    pub state: String,
    /// Seconds since the epoch.
    pub created: i64,
    pub host_port: Option<u16>,
}

/// How a container ended, when it has.
#[derive(Debug, Clone)]
pub struct ContainerExit {
    pub exit_code: i64,
    pub error: Option<String>,
    /// The container is gone (removed by `metralectl stop` or `docker rm`).
    pub removed: bool,
}

/// Layer progress while pulling: (layer id, status, bytes done, bytes total).
pub type PullEvent = (String, String, Option<u64>, Option<u64>);

#[derive(Debug, Clone)]
pub struct Client {
    docker: Docker,
    host: String,
}

impl Client {
    /// Connects to `$DOCKER_HOST` (or the default socket), checks the daemon answers and
    /// settles the API version with it.
    pub async fn connect() -> Result<Self, DockerError> {
        let host = host_description();
        let unreachable = |cause| DockerError::Unreachable {
            host: host.clone(),
            cause,
        };
        let docker = Docker::connect_with_defaults()
            .map_err(unreachable)?
            .with_timeout(Duration::from_secs(600));
        let docker = tokio::time::timeout(Duration::from_secs(10), docker.negotiate_version())
            .await
            .map_err(|_| unreachable(bollard::errors::Error::RequestTimeoutError))?
            .map_err(unreachable)?;
        docker.ping().await.map_err(unreachable)?;
        Ok(Self { docker, host })
    }

    pub async fn info(&self) -> Result<DaemonInfo, DockerError> {
        let version = self
            .docker
            .version()
            .await
            .map_err(DockerError::api("read the daemon's version"))?;
        let info = self
            .docker
            .info()
            .await
            .map_err(DockerError::api("read the daemon's info"))?;
        let mut runtimes: Vec<String> = info.runtimes.unwrap_or_default().into_keys().collect();
        runtimes.sort();
        let cdi_devices = info
            .discovered_devices
            .unwrap_or_default()
            .into_iter()
            .filter_map(|d| d.id)
            .collect();
        Ok(DaemonInfo {
            host: self.host.clone(),
            server_version: version.version.unwrap_or_default(),
            api_version: version.api_version.unwrap_or_default(),
            runtimes,
            cdi_devices,
            root_dir: info.docker_root_dir,
        })
    }

    /// Whether the image is on this machine (by tag or digest).
    pub async fn image_present(&self, image: &str) -> Result<bool, DockerError> {
        match self.docker.inspect_image(image).await {
            Ok(_) => Ok(true),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(false),
            Err(cause) => Err(DockerError::Api {
                op: format!("inspect image {image}"),
                cause,
            }),
        }
    }

    /// Pulls `image`, reporting each layer's progress to `on_event`.
    pub async fn pull(
        &self,
        image: &str,
        mut on_event: impl FnMut(PullEvent),
    ) -> Result<(), DockerError> {
        let options = CreateImageOptionsBuilder::default()
            .from_image(image)
            .build();
        let mut stream = self.docker.create_image(Some(options), None, None);
        while let Some(item) = stream.next().await {
            let info = item.map_err(|e| DockerError::Pull {
                image: image.to_owned(),
                message: pull_message(e),
            })?;
            let detail = info.progress_detail.unwrap_or_default();
            let as_u64 = |v: Option<i64>| v.and_then(|v| u64::try_from(v).ok());
            on_event((
                info.id.unwrap_or_default(),
                info.status.unwrap_or_default(),
                as_u64(detail.current),
                as_u64(detail.total),
            ));
        }
        Ok(())
    }

    /// Creates and starts the container; returns its id. A container that fails to start is
    /// removed again.
    pub async fn create_and_start(
        &self,
        spec: &ContainerSpec,
        daemon: &DaemonInfo,
    ) -> Result<String, DockerError> {
        let port_key = format!("{}/tcp", spec.container_port);
        let port_bindings = HashMap::from([(
            port_key.clone(),
            Some(vec![PortBinding {
                host_ip: Some(spec.host_ip.clone()),
                host_port: Some(spec.host_port.to_string()),
            }]),
        )]);
        let device_requests = spec.gpus.as_ref().map(|g| {
            let cdi = daemon.uses_cdi();
            let request = match (g, cdi) {
                (GpuRequest::All, false) => DeviceRequest {
                    driver: Some("nvidia".into()),
                    count: Some(-1),
                    capabilities: Some(vec![vec!["gpu".into()]]),
                    ..Default::default()
                },
                (GpuRequest::Devices(ids), false) => DeviceRequest {
                    driver: Some("nvidia".into()),
                    device_ids: Some(ids.clone()),
                    capabilities: Some(vec![vec!["gpu".into()]]),
                    ..Default::default()
                },
                (GpuRequest::All, true) => DeviceRequest {
                    driver: Some("cdi".into()),
                    device_ids: Some(vec!["nvidia.com/gpu=all".into()]),
                    ..Default::default()
                },
                (GpuRequest::Devices(ids), true) => DeviceRequest {
                    driver: Some("cdi".into()),
                    device_ids: Some(ids.iter().map(|i| format!("nvidia.com/gpu={i}")).collect()),
                    ..Default::default()
                },
            };
            vec![request]
        });
        let body = ContainerCreateBody {
            image: Some(spec.image.clone()),
            cmd: Some(spec.cmd.clone()),
            env: Some(spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            labels: Some(spec.labels.clone()),
            user: spec.user.clone(),
            exposed_ports: Some(vec![port_key]),
            host_config: Some(HostConfig {
                binds: Some(spec.binds.clone()),
                port_bindings: Some(port_bindings),
                ipc_mode: Some("host".into()),
                device_requests,
                ..Default::default()
            }),
            ..Default::default()
        };
        let options = CreateContainerOptionsBuilder::default()
            .name(&spec.name)
            .build();
        let created = self
            .docker
            .create_container(Some(options), body)
            .await
            .map_err(|cause| DockerError::Api {
                op: format!("create container {}", spec.name),
                cause,
            })?;
        if let Err(cause) = self.docker.start_container(&created.id, None).await {
            // Leave nothing behind: the caller reports the start error.
            let _ = self.remove(&created.id).await;
            return Err(DockerError::Api {
                op: format!("start container {}", spec.name),
                cause,
            });
        }
        Ok(created.id)
    }

    /// Runs `cmd` in a throw-away container of `image` (with every GPU when `gpus`), waits up to
    /// `timeout` for it to end, and returns its exit code and output. The container is removed
    /// whatever happens.
    pub async fn run_to_end(
        &self,
        image: &str,
        cmd: &[&str],
        gpus: bool,
        daemon: &DaemonInfo,
        timeout: Duration,
    ) -> Result<(i64, String), DockerError> {
        let device_requests = gpus.then(|| {
            vec![if daemon.uses_cdi() {
                DeviceRequest {
                    driver: Some("cdi".into()),
                    device_ids: Some(vec!["nvidia.com/gpu=all".into()]),
                    ..Default::default()
                }
            } else {
                DeviceRequest {
                    driver: Some("nvidia".into()),
                    count: Some(-1),
                    capabilities: Some(vec![vec!["gpu".into()]]),
                    ..Default::default()
                }
            }]
        });
        let body = ContainerCreateBody {
            image: Some(image.to_owned()),
            cmd: Some(cmd.iter().map(|c| (*c).to_owned()).collect()),
            labels: Some(HashMap::from([(
                "ai.metrale.throwaway".to_owned(),
                "doctor".to_owned(),
            )])),
            host_config: Some(HostConfig {
                device_requests,
                ..Default::default()
            }),
            ..Default::default()
        };
        let created = self
            .docker
            .create_container(
                None::<bollard::query_parameters::CreateContainerOptions>,
                body,
            )
            .await
            .map_err(DockerError::api(format!("create a container of {image}")))?;
        let id = created.id;
        let result = async {
            self.docker
                .start_container(&id, None)
                .await
                .map_err(DockerError::api(format!("start a container of {image}")))?;
            let deadline = tokio::time::Instant::now() + timeout;
            let code = loop {
                if let Some(exit) = self.exited(&id).await? {
                    break exit.exit_code;
                }
                if tokio::time::Instant::now() > deadline {
                    break -1;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            };
            let output: String = self
                .logs(&id, false, None)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .filter_map(Result::ok)
                .collect();
            Ok((code, output))
        }
        .await;
        let _ = self.remove(&id).await;
        result
    }

    /// The container's exit, or `None` while it runs.
    pub async fn exited(&self, id: &str) -> Result<Option<ContainerExit>, DockerError> {
        let inspect = match self.docker.inspect_container(id, None).await {
            Ok(inspect) => inspect,
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => {
                return Ok(Some(ContainerExit {
                    exit_code: 0,
                    error: None,
                    removed: true,
                }));
            }
            Err(cause) => {
                return Err(DockerError::Api {
                    op: format!("inspect container {id}"),
                    cause,
                });
            }
        };
        let state = inspect.state.unwrap_or_default();
        if state.running.unwrap_or(false) || state.restarting.unwrap_or(false) {
            return Ok(None);
        }
        Ok(Some(ContainerExit {
            exit_code: state.exit_code.unwrap_or(-1),
            error: state.error.filter(|e| !e.is_empty()),
            removed: false,
        }))
    }

    /// Every container labelled as a Metrale engine, running or not.
    pub async fn list_engines(&self) -> Result<Vec<EngineContainer>, DockerError> {
        let filters = HashMap::from([("label".to_owned(), vec![LABEL_RECIPE.to_owned()])]);
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        let list = self
            .docker
            .list_containers(Some(options))
            .await
            .map_err(DockerError::api("list containers"))?;
        Ok(list
            .into_iter()
            .map(|c| EngineContainer {
                id: c.id.unwrap_or_default(),
                name: c
                    .names
                    .and_then(|n| n.into_iter().next())
                    .map(|n| n.trim_start_matches('/').to_owned())
                    .unwrap_or_default(),
                labels: c.labels.unwrap_or_default(),
                state: c.state.map(|s| s.to_string()).unwrap_or_default(),
                created: c.created.unwrap_or_default(),
                host_port: c
                    .ports
                    .unwrap_or_default()
                    .into_iter()
                    .find_map(|p| p.public_port),
            })
            .collect())
    }

    /// The container's log, both streams, as text chunks; `tail` lines (or all), then new ones
    /// with `follow`.
    pub fn logs(
        &self,
        id: &str,
        follow: bool,
        tail: Option<usize>,
    ) -> impl Stream<Item = Result<String, DockerError>> + use<> {
        let tail = tail.map_or_else(|| "all".to_owned(), |n| n.to_string());
        let options = LogsOptionsBuilder::default()
            .stdout(true)
            .stderr(true)
            .follow(follow)
            .tail(&tail)
            .build();
        let op = format!("read the logs of container {id}");
        self.docker.logs(id, Some(options)).map(move |chunk| {
            chunk
                .map(|c| c.to_string())
                .map_err(|cause| DockerError::Api {
                    op: op.clone(),
                    cause,
                })
        })
    }

    /// Stops the container (SIGTERM, then SIGKILL after `grace`) and removes it.
    pub async fn stop_and_remove(&self, id: &str, grace: Duration) -> Result<(), DockerError> {
        let secs = i32::try_from(grace.as_secs()).unwrap_or(i32::MAX);
        let options = StopContainerOptionsBuilder::default().t(secs).build();
        match self.docker.stop_container(id, Some(options)).await {
            Ok(()) => {}
            // 304: already stopped; 404: already gone.
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 304 | 404,
                ..
            }) => {}
            Err(cause) => {
                return Err(DockerError::Api {
                    op: format!("stop container {id}"),
                    cause,
                });
            }
        }
        self.remove(id).await
    }

    async fn remove(&self, id: &str) -> Result<(), DockerError> {
        let options = RemoveContainerOptionsBuilder::default().force(true).build();
        match self.docker.remove_container(id, Some(options)).await {
            Ok(()) => Ok(()),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404 | 409,
                ..
            }) => Ok(()),
            Err(cause) => Err(DockerError::Api {
                op: format!("remove container {id}"),
                cause,
            }),
        }
    }
}

/// The daemon's message for a failed pull, without bollard's wrapping.
fn pull_message(e: bollard::errors::Error) -> String {
    match e {
        bollard::errors::Error::DockerStreamError { error } => error,
        bollard::errors::Error::DockerResponseServerError { message, .. } => message,
        other => other.to_string(),
    }
}
