//! Shared by the `server_*` tests: start the real `met serve` binary on a free port of
//! 127.0.0.1 with a fixture model, and talk to it over real HTTP.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `metralectl` cargo built beside `met` (`cargo test --workspace` builds both).
pub fn metralectl() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_BIN_EXE_met"))
        .with_file_name(format!("metralectl{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.is_file(),
        "{} is missing: build the workspace (`cargo test --workspace` builds both programs)",
        path.display()
    );
    path
}

/// `METRALE_DEBUG_STEP_DELAY_MS` for tests that need a long request still running when they act
/// (timeouts, drains, a full queue): 2 ms a step makes a 490-token completion take about a
/// second however fast the machine is.
pub const SLOW_STEPS: [(&str, &str); 1] = [("METRALE_DEBUG_STEP_DELAY_MS", "2")];

pub fn fixture_model() -> PathBuf {
    repo_root().join("tests/fixtures/models/qwen3-gqa-tied")
}

/// A running `met serve`; killed when dropped.
pub struct Server {
    child: Child,
    pub base: String,
    /// stdout lines after the listening line.
    lines: mpsc::Receiver<String>,
}

impl Server {
    /// Serve the fixture model as `test` with `extra` flags; returns once `/ready` is 200.
    pub async fn start(extra: &[&str]) -> Server {
        Self::start_with_env(extra, &[]).await
    }

    /// [`Server::start`] with extra environment variables for `met`.
    pub async fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut args: Vec<String> = vec!["serve".into(), fixture_model().display().to_string()];
        args.extend(["--port", "0", "--model-name", "test"].map(String::from));
        args.extend(extra.iter().map(|s| s.to_string()));
        Self::spawn_with_env(&args, env).await
    }

    /// Run `met` with exactly `args` (which must make it listen on port 0); returns once
    /// `/ready` is 200.
    pub async fn spawn(args: &[String]) -> Server {
        Self::spawn_with_env(args, &[]).await
    }

    /// [`Server::spawn`] with extra environment variables for `met`.
    pub async fn spawn_with_env(args: &[String], env: &[(&str, &str)]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_met"))
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn met serve");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        let base = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx
                .recv_timeout(left)
                .expect("met serve printed no `listening on` line");
            if let Some(rest) = line.split("listening on ").nth(1) {
                break rest.split_whitespace().next().expect("url").to_owned();
            }
        };
        let server = Server {
            child,
            base,
            lines: rx,
        };
        let client = reqwest::Client::new();
        loop {
            if let Ok(r) = client.get(server.url("/ready")).send().await
                && r.status() == 200
            {
                break;
            }
            assert!(Instant::now() < deadline, "met serve never became ready");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        server
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Send SIGTERM to this server (our own child, by pid).
    pub fn sigterm(&self) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(ok.success());
    }

    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                return s;
            }
            assert!(Instant::now() < deadline, "met serve did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// stdout lines printed so far (after the listening line).
    pub fn stdout_lines(&self) -> Vec<String> {
        self.lines.try_iter().collect()
    }

    /// The first stdout line holding `needle`, waiting up to 2 s for it (a start-up line may
    /// follow `/ready` by a moment); fails listing the lines seen.
    pub async fn wait_stdout_line(&self, needle: &str) -> String {
        let mut lines = Vec::new();
        for _ in 0..100 {
            lines.extend(self.stdout_lines());
            if let Some(line) = lines.iter().find(|l| l.contains(needle)) {
                return line.clone();
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!("no line with {needle:?} in {lines:?}")
    }

    /// Send `body` to `path` and return the response as it starts (headers read).
    pub async fn send(&self, path: &str, body: &Value) -> reqwest::Response {
        reqwest::Client::new()
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .expect("send")
    }

    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let r = self.send(path, body).await;
        let status = r.status().as_u16();
        let text = r.text().await.expect("body");
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, v)
    }

    /// A streamed request: every `data:` payload, `[DONE]` included, in order.
    pub async fn stream(&self, path: &str, body: &Value) -> Vec<String> {
        let r = self.send(path, body).await;
        assert_eq!(r.status(), 200, "{:?}", r.text().await);
        let text = r.text().await.expect("body");
        sse_data(&text)
    }

    /// A metric once `cond` holds for it (the engine updates its gauges after a step, which
    /// may be after the response it answered); fails after 10 s, naming the value it kept.
    pub async fn wait_metric(&self, name: &str, cond: impl Fn(f64) -> bool) -> f64 {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let v = self.metric(name).await;
            if cond(v) {
                return v;
            }
            assert!(std::time::Instant::now() < deadline, "{name} stayed at {v}");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// A metric's value for `model_name="test"` (and extra labels), from `/metrics`.
    pub async fn metric(&self, name_and_labels: &str) -> f64 {
        let text = reqwest::get(self.url("/metrics"))
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text");
        metric_value(&text, name_and_labels)
            .unwrap_or_else(|| panic!("no {name_and_labels} in /metrics:\n{text}"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `vllm:x` → the value of `vllm:x{model_name="test"}`; `vllm:x,k="v"` adds a label.
pub fn metric_value(text: &str, name_and_labels: &str) -> Option<f64> {
    let (name, extra) = name_and_labels
        .split_once(',')
        .map_or((name_and_labels, String::new()), |(n, e)| {
            (n, format!(",{e}"))
        });
    let prefix = format!("{name}{{model_name=\"test\"{extra}}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

/// The `data:` payloads of an SSE body.
pub fn sse_data(text: &str) -> Vec<String> {
    text.split("\n\n")
        .filter_map(|event| {
            event
                .lines()
                .find_map(|l| l.strip_prefix("data: ").or(l.strip_prefix("data:")))
                .map(str::to_owned)
        })
        .collect()
}

/// Join a stream's chunks per choice: (text, finish_reason) by index. `field` is
/// `delta.content` for chat and `text` for completions.
pub fn join_stream(chunks: &[String], chat: bool) -> Vec<(String, Option<String>)> {
    assert_eq!(chunks.last().map(String::as_str), Some("[DONE]"));
    let mut out: Vec<(String, Option<String>)> = Vec::new();
    for c in &chunks[..chunks.len() - 1] {
        let v: Value = serde_json::from_str(c).expect("chunk is JSON");
        assert!(v.get("error").is_none(), "error event: {c}");
        for choice in v["choices"].as_array().expect("choices") {
            let i = choice["index"].as_u64().expect("index") as usize;
            if out.len() <= i {
                out.resize(i + 1, (String::new(), None));
            }
            let piece = if chat {
                choice["delta"]["content"].as_str()
            } else {
                choice["text"].as_str()
            };
            out[i].0.push_str(piece.unwrap_or(""));
            if let Some(f) = choice["finish_reason"].as_str() {
                assert!(out[i].1.is_none(), "two finish reasons for choice {i}");
                out[i].1 = Some(f.to_owned());
            }
        }
    }
    out
}

/// Run the official Python client test `script` (under `tests/clients/`) against a server,
/// with `env` (base URL, key) set. The interpreter is `$METRALE_PYTHON`, default `python3`,
/// and must be able to import `module`; the failure says how to install it.
pub async fn run_python_client(module: &str, script: &str, env: &[(&str, String)]) {
    let python = std::env::var("METRALE_PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = Command::new(&python)
        .args(["-c", &format!("import {module}")])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}; set METRALE_PYTHON"));
    assert!(
        probe.status.success(),
        "{python} cannot import {module}: run `{python} -m pip install -r tests/requirements.txt` \
         (or set METRALE_PYTHON to an interpreter that has it)\n{}",
        String::from_utf8_lossy(&probe.stderr)
    );
    let script = repo_root().join("tests/clients").join(script);
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(&python)
            .arg(script)
            .envs(env)
            .output()
            .expect("run python")
    })
    .await
    .expect("join");
    assert!(
        out.status.success(),
        "{module} client tests failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
