//! The metrics socket: a Unix socket where every connection receives the hub's lines as
//! NDJSON. Created with permissions 0600 (in a 0700 directory when we create the
//! directory); removed when the server stops.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::io::AsyncWriteExt;
use tokio::net::{UnixListener, UnixStream};

use super::hub::{MetricsHub, Subscription};

/// Why the socket could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("failed to create the directory {dir} for the metrics socket: {source}")]
    Dir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "another process is serving metrics on {path}; stop it, or pass --metrics-socket with another path"
    )]
    InUse { path: PathBuf },
    #[error("failed to listen on the metrics socket {path}: {source}")]
    Bind {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The default path for this user and port (see `metrale_protocol::metrics::default_socket_path`).
pub fn default_path(port: u16) -> PathBuf {
    let runtime = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from);
    let uid = std::fs::metadata("/proc/self").map_or(0, |m| m.uid());
    metrale_protocol::metrics::default_socket_path(runtime.as_deref(), uid, port)
}

/// A listening socket; the file is removed on drop.
#[derive(Debug)]
pub struct MetricsSocket {
    path: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl MetricsSocket {
    /// Bind `path` and serve every connection from `hub`. Must run inside a tokio runtime.
    pub fn bind(path: &Path, hub: MetricsHub) -> Result<Self, SocketError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
            && !dir.exists()
        {
            std::fs::create_dir_all(dir).map_err(|source| SocketError::Dir {
                dir: dir.to_owned(),
                source,
            })?;
            let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
        }
        if path.exists() {
            // A live engine answers; a stale file from a crash does not and is replaced.
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(SocketError::InUse {
                    path: path.to_owned(),
                });
            }
            let _ = std::fs::remove_file(path);
        }
        let listener = UnixListener::bind(path).map_err(|source| SocketError::Bind {
            path: path.to_owned(),
            source,
        })?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(
            |source| SocketError::Bind {
                path: path.to_owned(),
                source,
            },
        )?;
        let task = tokio::spawn(accept_loop(listener, hub));
        Ok(Self {
            path: path.to_owned(),
            task,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Moves the socket file to `path` in the same directory, keeping the listener and its
    /// readers: an early socket bound before `--port 0` had its port takes the port's name.
    /// Refuses a path another live engine answers on; replaces a stale file.
    pub fn move_to(&mut self, path: &Path) -> Result<(), SocketError> {
        if path.exists() {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(SocketError::InUse {
                    path: path.to_owned(),
                });
            }
            let _ = std::fs::remove_file(path);
        }
        std::fs::rename(&self.path, path).map_err(|source| SocketError::Bind {
            path: path.to_owned(),
            source,
        })?;
        self.path = path.to_owned();
        Ok(())
    }
}

/// The early socket's default name for `met serve --port 0` (bound before the port is known):
/// the process id keeps two such servers apart until each moves to its port's name.
pub fn default_path_unknown_port() -> PathBuf {
    default_path(0).with_file_name(format!("met-0-{}.sock", std::process::id()))
}

impl Drop for MetricsSocket {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

async fn accept_loop(listener: UnixListener, hub: MetricsHub) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let sub = hub.subscribe();
                tokio::spawn(write_lines(stream, sub));
            }
            Err(e) => {
                tracing::warn!("metrics socket: accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

/// Copy lines to one reader until it leaves or the hub drops it for being slow; either way
/// the connection closes.
async fn write_lines(mut stream: UnixStream, mut sub: Subscription) {
    loop {
        let line = tokio::select! {
            biased;
            _ = &mut sub.kicked => break,
            line = sub.lines.recv() => match line {
                Some(l) => l,
                None => break,
            },
        };
        let write = async {
            stream.write_all(line.as_bytes()).await?;
            stream.write_all(b"\n").await
        };
        tokio::select! {
            biased;
            _ = &mut sub.kicked => break,
            r = write => if r.is_err() { break },
        }
    }
    let _ = stream.shutdown().await;
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::metrics::hub::HubInfo;

    #[tokio::test]
    async fn a_moved_socket_still_serves_and_refuses_a_live_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let hub = MetricsHub::start(
            HubInfo {
                model: "m".into(),
                device: "cpu".into(),
            },
            Instant::now(),
        )
        .expect("hub");
        let (early, other, target) = (
            dir.path().join("met-0-1.sock"),
            dir.path().join("met-9.sock"),
            dir.path().join("met-8.sock"),
        );
        let mut s = MetricsSocket::bind(&early, hub.clone()).expect("bind");
        let live = MetricsSocket::bind(&other, hub.clone()).expect("bind other");
        // Another engine's live socket is never taken over.
        assert!(matches!(s.move_to(&other), Err(SocketError::InUse { .. })));
        assert!(other.exists() && early.exists());
        // A stale file is replaced; the listener answers on the new name only.
        std::fs::write(&target, b"stale").expect("stale file");
        s.move_to(&target).expect("move");
        assert_eq!(s.path(), target.as_path());
        assert!(!early.exists());
        UnixStream::connect(&target)
            .await
            .expect("the moved socket answers");
        drop(s);
        assert!(!target.exists(), "the moved file goes on drop");
        drop(live);
    }
}
