//! Reading an engine's metrics events (protocol v1, `docs/metrics-socket.md`) for `top`: from
//! the Unix socket or from `GET /v1/metrics/stream`. Each source runs on its own thread,
//! turns lines into dashboard inputs, and reconnects forever (an engine restart is a
//! disconnect, then a new `hello`).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::sync::mpsc::Sender;
use std::time::Duration;

use metrale_dashboard::Input;
use metrale_protocol::metrics::parse_line;

/// How long to wait between connection attempts.
const RETRY: Duration = Duration::from_millis(500);

/// Where the events come from.
#[derive(Debug, Clone)]
pub enum Source {
    Socket(PathBuf),
    Sse {
        url: String,
        api_key: Option<String>,
    },
}

impl Source {
    /// How the dashboard names it.
    pub fn target(&self) -> String {
        match self {
            Source::Socket(p) => format!("unix:{}", p.display()),
            Source::Sse { url, .. } => url.clone(),
        }
    }

    /// Read events into `tx` until the receiver goes away.
    pub fn spawn(self, tx: Sender<Input>) -> std::io::Result<()> {
        std::thread::Builder::new()
            .name("metrics-source".into())
            .spawn(move || {
                loop {
                    let reason = match &self {
                        Source::Socket(p) => read_socket(p, &tx, &self.target()),
                        Source::Sse { url, api_key } => {
                            read_sse(url, api_key.as_deref(), &tx, &self.target())
                        }
                    };
                    match reason {
                        Ended::ReceiverGone => return,
                        Ended::Lost(reason) => {
                            if tx.send(Input::Disconnected { reason }).is_err() {
                                return;
                            }
                        }
                    }
                    std::thread::sleep(RETRY);
                }
            })?;
        Ok(())
    }
}

enum Ended {
    ReceiverGone,
    Lost(String),
}

/// Pass one line on; `Err` when the dashboard is gone.
fn forward(line: &str, tx: &Sender<Input>) -> Result<(), Ended> {
    match parse_line(line) {
        Ok(Some(e)) => tx.send(Input::Event(e)).map_err(|_| Ended::ReceiverGone),
        Ok(None) => Ok(()),
        // A line from another protocol version: say so and keep the connection.
        Err(e) => Err(Ended::Lost(e.to_string())),
    }
}

fn read_socket(path: &std::path::Path, tx: &Sender<Input>, target: &str) -> Ended {
    let stream = match std::os::unix::net::UnixStream::connect(path) {
        Ok(s) => s,
        Err(e) => return Ended::Lost(socket_error(path, &e)),
    };
    if tx
        .send(Input::Connected {
            target: target.to_owned(),
        })
        .is_err()
    {
        return Ended::ReceiverGone;
    }
    for line in BufReader::new(stream).lines() {
        match line {
            Ok(l) => {
                if let Err(end) = forward(&l, tx) {
                    return end;
                }
            }
            Err(e) => return Ended::Lost(format!("read failed: {e}")),
        }
    }
    Ended::Lost("the engine closed the connection".into())
}

fn socket_error(path: &std::path::Path, e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => format!(
            "no socket at {} (is `met serve` running? pass --socket or --url)",
            path.display()
        ),
        std::io::ErrorKind::ConnectionRefused => "connection refused (the engine stopped)".into(),
        std::io::ErrorKind::PermissionDenied => format!(
            "permission denied on {} (the socket is only for the user running met)",
            path.display()
        ),
        _ => format!("cannot connect: {e}"),
    }
}

fn read_sse(url: &str, api_key: Option<&str>, tx: &Sender<Input>, target: &str) -> Ended {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return Ended::Lost(format!("cannot start the HTTP client: {e}")),
    };
    rt.block_on(async {
        let client = reqwest::Client::new();
        let mut req = client.get(url).header("accept", "text/event-stream");
        if let Some(k) = api_key {
            req = req.bearer_auth(k);
        }
        let mut resp = match req.send().await {
            Ok(r) => r,
            Err(e) => return Ended::Lost(format!("cannot reach {url}: {e}")),
        };
        match resp.status().as_u16() {
            200 => {}
            401 => {
                return Ended::Lost(
                    "401 unauthorized: pass the engine's key with --api-key".into(),
                );
            }
            s => return Ended::Lost(format!("{url} answered HTTP {s}")),
        }
        if tx
            .send(Input::Connected {
                target: target.to_owned(),
            })
            .is_err()
        {
            return Ended::ReceiverGone;
        }
        let mut buf = String::new();
        loop {
            let chunk = match resp.chunk().await {
                Ok(Some(c)) => c,
                Ok(None) => return Ended::Lost("the engine closed the stream".into()),
                Err(e) => return Ended::Lost(format!("read failed: {e}")),
            };
            buf.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(i) = buf.find('\n') {
                let line: String = buf.drain(..=i).collect();
                let line = line.trim_end_matches(['\r', '\n']);
                if let Some(data) = line.strip_prefix("data:")
                    && let Err(end) = forward(data.trim_start(), tx)
                {
                    return end;
                }
            }
        }
    })
}

/// The engine's default socket for `port` on this machine (what `met serve` uses without
/// `--metrics-socket`).
pub fn default_socket(port: u16) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let runtime = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from);
    let uid = std::fs::metadata("/proc/self").map_or(0, |m| m.uid());
    metrale_protocol::metrics::default_socket_path(runtime.as_deref(), uid, port)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn socket_lines_become_inputs_and_a_closed_socket_a_disconnect() {
        let dir = std::env::temp_dir().join(format!("mctl-src-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("s.sock");
        let _ = std::fs::remove_file(&path);
        let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        let (tx, rx) = std::sync::mpsc::channel();
        Source::Socket(path.clone()).spawn(tx).expect("spawn");
        let (mut conn, _) = listener.accept().expect("accept");
        conn.write_all(b"{\"v\":1,\"type\":\"preempted\",\"id\":4,\"t_ms\":1,\"generated_tokens\":2}\n{\"v\":1,\"type\":\"unknown_kind\"}\n")
            .expect("write");
        drop(conn);
        let next = || rx.recv_timeout(Duration::from_secs(5)).expect("input");
        assert!(matches!(next(), Input::Connected { target } if target.starts_with("unix:")));
        assert!(
            matches!(next(), Input::Event(metrale_protocol::metrics::Event::Preempted(p)) if p.id == 4)
        );
        assert!(matches!(next(), Input::Disconnected { reason } if reason.contains("closed")));
        drop(listener);
        let _ = std::fs::remove_file(&path);
        assert!(
            matches!(next(), Input::Disconnected { reason } if reason.contains("no socket at"))
        );
    }
}
