//! `metralectl top` (and `met serve`'s own dashboard) in a real terminal: tmux runs it
//! against a live `met serve --no-tui` on a fixture model while streaming requests flow, and
//! the captured screen must show them; then the engine is stopped and started again and the
//! screen must say so; `q` must quit.
//!
//! With `METRALE_TOP_CAPTURE=FILE` the busy screen is also written to FILE with its colours
//! (`tmux capture-pane -e`), for `scripts/top_screenshot.sh`.

mod term;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use term::{Tmux, met_binary, repo_root};

/// A running `met serve`, killed when dropped.
struct Met {
    child: Child,
    base: String,
}

impl Met {
    fn start(socket: &Path) -> Met {
        Self::start_with(socket, &[])
    }

    fn start_with(socket: &Path, extra: &[&str]) -> Met {
        let mut child = Command::new(met_binary())
            .arg("serve")
            .arg(repo_root().join("tests/fixtures/models/qwen3-gqa-tied"))
            .args(["--port", "0", "--model-name", "top-test", "--no-tui"])
            .arg("--metrics-socket")
            .arg(socket)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn met serve");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let base = loop {
            let line = lines
                .next()
                .expect("met printed its address")
                .expect("read");
            if let Some(rest) = line.split("listening on ").nth(1) {
                break rest.split_whitespace().next().expect("url").to_owned();
            }
        };
        // Keep draining stdout so met never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Met { child, base }
    }

    fn stop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for Met {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Streaming completions, 6 at a time, until `stop`.
fn load(base: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let client = reqwest::Client::new();
            while !stop.load(Ordering::SeqCst) {
                let mut set = tokio::task::JoinSet::new();
                for i in 0..6u64 {
                    let req =
                        client
                            .post(format!("{base}/v1/completions"))
                            .json(&serde_json::json!({
                            "prompt": format!("request {i} of the dashboard test"),
                            "max_tokens": 300 + i * 20, "ignore_eos": true, "stream": true}));
                    set.spawn(async move {
                        if let Ok(r) = req.send().await {
                            let _ = r.text().await;
                        }
                    });
                }
                while set.join_next().await.is_some() {}
            }
        });
    })
}

fn has_running_rows(screen: &str) -> bool {
    screen
        .lines()
        .filter(|l| {
            let cells: Vec<&str> = l.trim_matches('│').split_whitespace().collect();
            cells.len() >= 4 && cells[0].parse::<u64>().is_ok() && cells[1] == "running"
        })
        .count()
        >= 2
}

#[test]
fn top_in_tmux_shows_live_requests_a_restart_and_quits_on_q() {
    let dir = std::env::temp_dir().join(format!("metrale-top-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let socket = dir.join("met.sock");
    let mut met = Met::start(&socket);
    let tmux = Tmux::run(
        "top",
        &format!(
            "{} top --socket {}",
            env!("CARGO_BIN_EXE_metralectl"),
            socket.display()
        ),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let flow = load(met.base.clone(), stop.clone());

    let screen = tmux.wait_for("running requests", |s| {
        s.contains("top-test") && has_running_rows(s) && s.contains("generation")
    });
    assert!(screen.contains("KV "), "{screen}");
    if let Ok(path) = std::env::var("METRALE_TOP_CAPTURE") {
        // Let the sparklines fill a little for the picture.
        std::thread::sleep(Duration::from_secs(6));
        std::fs::write(&path, tmux.screen(true)).expect("write the capture");
    }
    stop.store(true, Ordering::SeqCst);
    let _ = flow.join();

    // The engine stops: the dashboard says it lost it and keeps trying.
    met.stop();
    tmux.wait_for("the disconnect", |s| s.contains("disconnected"));
    // It comes back (a new process): the dashboard reconnects and says the engine restarted.
    let _met2 = Met::start(&socket);
    tmux.wait_for("the reconnect", |s| {
        s.contains("reconnected") || s.contains("restarted")
    });
    tmux.wait_for("the new engine's hello", |s| s.contains("restarted"));

    // q quits and hands the terminal back (the session ends with the program).
    let _ = tmux.cmd().args(["send-keys", "-t", "top", "q"]).status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while tmux.alive() {
        assert!(
            Instant::now() < deadline,
            "metralectl top did not quit on q"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `met serve` in a terminal: its dashboard, which says `ready` with the address once the
/// model is loaded (the README tells the user to wait for it); `q` asks before it stops the
/// server (issue 38: it stopped it at once), a second `q` stops it.
#[test]
fn met_serve_shows_ready_in_its_own_terminal_and_q_asks_before_stopping() {
    let (tmux, socket, dir) = serve_in_tmux("serve");
    let _ = tmux.cmd().args(["send-keys", "-t", "top", "q"]).status();
    tmux.wait_for("the question", |s| {
        s.contains("Stop the server?") && s.contains("keep serving")
    });
    assert!(socket.exists(), "one q stopped the server");
    let _ = tmux.cmd().args(["send-keys", "-t", "top", "q"]).status();
    // The dashboard hands the terminal back and the server drains and stops, saying so.
    let screen = tmux.wait_for("met stopping", |s| s.contains("met: stopped"));
    assert!(
        screen.contains("met: quit from the dashboard: draining"),
        "{screen}"
    );
    assert!(screen.contains("met: model top-test ready"), "{screen}");
    assert!(!socket.exists(), "the socket outlived met");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `d` (after `q`, or alone) leaves the dashboard and keeps serving: the server's lines are
/// printed, `ready` among them, it still answers, and Ctrl-C then stops it.
#[test]
fn met_serve_detaches_its_dashboard_on_d_and_keeps_serving() {
    let (tmux, socket, dir) = serve_in_tmux("serve-detach");
    let _ = tmux
        .cmd()
        .args(["send-keys", "-t", "top", "q", "d"])
        .status();
    let screen = tmux.wait_for("the detached server", |s| {
        s.contains("met: dashboard closed; still serving")
    });
    assert!(screen.contains("met: model top-test ready"), "{screen}");
    let url = screen
        .split("listening on ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .expect("the address")
        .to_owned();
    let health = std::process::Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &format!("{url}/ready"),
        ])
        .output()
        .expect("curl");
    assert_eq!(
        String::from_utf8_lossy(&health.stdout),
        "200",
        "still serving"
    );
    assert!(socket.exists());
    let _ = tmux.cmd().args(["send-keys", "-t", "top", "C-c"]).status();
    tmux.wait_for("met stopping", |s| s.contains("met: stopped"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `met serve` on the fixture in a tmux session kept after it exits, once its dashboard says
/// ready (with the engine's limits from a snapshot and the address from a later hello).
fn serve_in_tmux(name: &str) -> (Tmux, std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("metrale-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let socket = dir.join("met.sock");
    let tmux = Tmux::run(
        name,
        &format!(
            "{} serve {} --port 0 --model-name top-test --metrics-socket {}",
            met_binary().display(),
            repo_root()
                .join("tests/fixtures/models/qwen3-gqa-tied")
                .display(),
            socket.display()
        ),
    );
    tmux.remain_on_exit();
    tmux.wait_for("the ready dashboard", |s| {
        s.contains("top-test")
            && s.contains("this process")
            && s.contains("KV 0 / ")
            && !s.contains("KV 0 / 0 ")
            && s.contains(" ready  http://127.0.0.1:")
            && s.contains("q stop  d detach")
    });
    (tmux, socket, dir)
}

#[test]
fn top_over_http_needs_the_key_and_then_shows_the_requests() {
    let dir = std::env::temp_dir().join(format!("metrale-top-url-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let met = Met::start_with(&dir.join("met.sock"), &["--api-key", "s3cret"]);
    let top = env!("CARGO_BIN_EXE_metralectl");
    let wrong = Tmux::run(
        "url-wrong",
        &format!("{top} top --url {} --api-key nope", met.base),
    );
    wrong.wait_for("the refused key", |s| {
        s.contains("401 unauthorized: pass the engine's key with --api-key")
    });
    drop(wrong);
    let tmux = Tmux::run(
        "url",
        &format!("{top} top --url {}/ --api-key s3cret", met.base),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let flow = load_with_key(met.base.clone(), stop.clone());
    tmux.wait_for("requests over SSE", |s| {
        s.contains("top-test") && s.contains("/v1/metrics/stream") && has_running_rows(s)
    });
    stop.store(true, Ordering::SeqCst);
    let _ = flow.join();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Like [`load`], with the API key.
fn load_with_key(base: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let client = reqwest::Client::new();
            while !stop.load(Ordering::SeqCst) {
                let mut set = tokio::task::JoinSet::new();
                for i in 0..4u64 {
                    let req = client
                        .post(format!("{base}/v1/completions"))
                        .bearer_auth("s3cret")
                        .json(&serde_json::json!({
                            "prompt": "over http", "max_tokens": 200 + i * 10,
                            "ignore_eos": true, "stream": true}));
                    set.spawn(async move {
                        if let Ok(r) = req.send().await {
                            let _ = r.text().await;
                        }
                    });
                }
                while set.join_next().await.is_some() {}
            }
        });
    })
}

#[test]
fn top_refuses_a_non_terminal_and_a_url_that_is_not_http() {
    let out = Command::new(env!("CARGO_BIN_EXE_metralectl"))
        .args(["top", "--socket", "/nonexistent/met.sock"])
        .output()
        .expect("run metralectl");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs a terminal"), "{err}");
    assert!(err.contains("socat"), "the hint names a raw reader: {err}");
    let out = Command::new(env!("CARGO_BIN_EXE_metralectl"))
        .args(["top", "--url", "localhost:8000"])
        .output()
        .expect("run metralectl");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--url localhost:8000 is not an http"), "{err}");
    assert!(err.contains("--url http://127.0.0.1:8000"), "{err}");
}
