//! `metralectl run` for real, across both programs: the `demo` recipe started natively and in a
//! container on this machine's Docker Engine, answered over HTTP, listed by `ps`, shown by
//! `logs`, ended by `stop` with nothing left behind; and each fault with its message.
//!
//! The container test builds a minimal image `FROM scratch` holding the `met` cargo built and
//! the libraries it links (no registry is reachable here), labels it, and removes it at the end.
//! No NVIDIA runtime exists here: the GPU-recipe test is named `..._no_nvidia_runtime_here`.

mod reference_support;
mod server_support;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};
use server_support::repo_root;

/// Every container and image the tests create carries this label.
const TEST_LABEL: &str = "ai.metrale.test=launcher_run";

/// An isolated launcher: its own state and config directories.
struct Ctl {
    state: tempfile::TempDir,
    config: tempfile::TempDir,
}

impl Ctl {
    fn new() -> Self {
        Self {
            state: tempfile::tempdir().expect("temp state dir"),
            config: tempfile::tempdir().expect("temp config dir"),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(server_support::metralectl());
        cmd.args(args)
            .current_dir(repo_root())
            .env("METRALE_STATE_DIR", self.state.path())
            .env("METRALE_CONFIG_DIR", self.config.path())
            .env("NO_COLOR", "1")
            .env_remove("MET_API_KEY");
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run metralectl")
    }

    fn run_env(&self, args: &[&str], key: &str, value: &str) -> Output {
        self.command(args)
            .env(key, value)
            .output()
            .expect("run metralectl")
    }

    /// `ps --json`'s engines.
    fn ps(&self) -> Vec<Value> {
        let out = self.run(&["ps", "--json"]);
        assert!(out.status.success(), "ps: {}", text(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).expect("ps --json is JSON");
        v["engines"].as_array().expect("engines").clone()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn pid_alive(pid: &str) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        })
}

/// A foreground `metralectl run`: waits for its `ready:` line, sends SIGINT, and returns its
/// whole stdout, stderr and whether it exited 0.
fn interrupt_once_ready(child: std::process::Child) -> (String, String, bool) {
    end_once_ready(child, |pid| {
        let kill = Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status()
            .expect("kill -INT");
        assert!(kill.success());
    })
}

/// [`interrupt_once_ready`], ended by `end(pid)` instead.
fn end_once_ready(mut child: std::process::Child, end: impl FnOnce(u32)) -> (String, String, bool) {
    use std::io::{BufRead as _, Read as _};
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut stdout = String::new();
    for line in lines.by_ref() {
        let line = line.expect("stdout line");
        stdout.push_str(&line);
        stdout.push('\n');
        if line.starts_with("ready:") {
            break;
        }
    }
    assert!(
        stdout.contains("ready:"),
        "metralectl run never said ready: {stdout}"
    );
    end(child.id());
    for line in lines {
        stdout.push_str(&line.expect("stdout line"));
        stdout.push('\n');
    }
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("stderr");
    let status = child.wait().expect("metralectl exits");
    (stdout, stderr, status.success())
}

async fn ask_capital(url: &str) -> Value {
    let client = reqwest::Client::new();
    let resp = client
        .post(format!("{url}/v1/chat/completions"))
        .json(&json!({"model": "demo", "temperature": 0, "messages": [{"role": "user", "content": "What is the capital of France?"}]}))
        .send()
        .await
        .expect("POST /v1/chat/completions");
    assert_eq!(resp.status(), 200);
    resp.json().await.expect("JSON body")
}

/// Starts `demo` detached and returns `run --json`'s answer.
fn run_detached(ctl: &Ctl, extra: &[&str]) -> Value {
    let mut args = vec![
        "run",
        "demo",
        "--detach",
        "--json",
        "--ready-timeout",
        "120",
    ];
    args.extend_from_slice(extra);
    let out = ctl.run(&args);
    assert!(
        out.status.success(),
        "run failed: {}\n{}",
        text(&out.stderr),
        text(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).expect("run --detach --json is JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_run_serves_lists_logs_and_stops() {
    let ctl = Ctl::new();
    let port = free_port();
    let port_s = port.to_string();
    let started = run_detached(
        &ctl,
        &["--native", "--port", &port_s, "--name", "demo-native"],
    );
    assert_eq!(started["mode"], "native");
    assert_eq!(started["url"], format!("http://127.0.0.1:{port}"));
    let pid = started["id"].as_str().expect("pid").to_owned();
    assert!(pid_alive(&pid), "met (pid {pid}) runs after run --detach");

    let body = ask_capital(&format!("http://127.0.0.1:{port}")).await;
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "The capital of France is Paris."
    );

    let engines = ctl.ps();
    assert_eq!(engines.len(), 1, "{engines:?}");
    assert_eq!(engines[0]["name"], "demo-native");
    assert_eq!(engines[0]["recipe"], "demo");
    assert_eq!(engines[0]["mode"], "native");
    assert_eq!(engines[0]["port"], port);
    assert_eq!(engines[0]["id"], pid.as_str());

    let logs = ctl.run(&["logs", "demo-native"]);
    assert!(logs.status.success());
    assert!(
        text(&logs.stdout).contains("model demo ready"),
        "{}",
        text(&logs.stdout)
    );

    // A second engine of the same name is refused; the first keeps running.
    let again = ctl.run(&[
        "run",
        "demo",
        "--native",
        "--port",
        &free_port().to_string(),
        "--name",
        "demo-native",
    ]);
    assert!(!again.status.success());
    assert!(
        text(&again.stderr).contains("already running"),
        "{}",
        text(&again.stderr)
    );

    // `logs -f` follows until the engine stops.
    let mut follower = ctl
        .command(&["logs", "demo-native", "-f"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn logs -f");
    // Once it has printed the log so far, it is following.
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(
        follower.stdout.take().expect("stdout"),
    ));
    assert!(
        lines
            .by_ref()
            .map_while(Result::ok)
            .any(|l| l.contains("model demo ready")),
        "logs -f printed the log"
    );

    let stop = ctl.run(&["stop", "demo-native"]);
    assert!(stop.status.success(), "{}", text(&stop.stderr));
    assert!(!pid_alive(&pid), "met (pid {pid}) is gone after stop");
    let followed = follower.wait().expect("logs -f ends with the engine");
    assert!(followed.success());
    drop(lines);
    assert!(ctl.ps().is_empty());
    let left: Vec<_> = std::fs::read_dir(ctl.state.path().join("engines"))
        .expect("engines dir")
        .collect();
    assert!(left.is_empty(), "nothing left in the state dir: {left:?}");

    let unknown = ctl.run(&["stop", "demo-native"]);
    assert!(!unknown.status.success());
    assert!(text(&unknown.stderr).contains("no running engine is named demo-native"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_run_in_the_foreground_stops_the_engine_on_sigint() {
    let ctl = Ctl::new();
    let port = free_port();
    let child = ctl
        .command(&["run", "demo", "--native", "--port", &port.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn metralectl run");
    let (stdout, stderr, ok) = interrupt_once_ready(child);
    // "ready: demo (native, pid 1234) at http://…"
    let met_pid = stdout
        .split("pid ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .expect("the ready line names met's pid")
        .to_owned();
    assert!(
        stdout.contains(&format!("at http://127.0.0.1:{port}/v1")),
        "{stdout}"
    );
    assert!(stdout.contains("curl http://127.0.0.1:"), "{stdout}");
    assert!(stdout.contains("metralectl top demo"), "{stdout}");
    // Start-up phases come from the engine's metrics socket: the model loads layer by layer.
    assert!(
        stderr.contains("demo: load 6/6 layers"),
        "no load phase from the metrics socket in:\n{stderr}"
    );
    assert!(ok, "{stderr}");
    assert!(!pid_alive(&met_pid), "met stopped with the launcher");
    assert!(ctl.ps().is_empty());
}

#[test]
fn run_refuses_a_taken_port_and_starts_nothing() {
    let ctl = Ctl::new();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port().to_string();
    let out = ctl.run(&["run", "demo", "--native", "--port", &port]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("port {port} on 127.0.0.1 is already in use")),
        "{err}"
    );
    assert!(err.contains("hint: pass another port"), "{err}");
    assert!(ctl.ps().is_empty());
}

#[test]
fn an_engine_that_exits_at_start_shows_its_last_lines() {
    let ctl = Ctl::new();
    let port = free_port().to_string();
    let out = ctl.run(&[
        "run",
        "demo",
        "--native",
        "--port",
        &port,
        "--",
        "--no-such-flag",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("the engine demo exited during start-up"),
        "{err}"
    );
    assert!(
        err.contains("| error: unexpected argument '--no-such-flag'"),
        "{err}"
    );
    assert!(ctl.ps().is_empty());
    let left: Vec<_> = std::fs::read_dir(ctl.state.path().join("engines"))
        .expect("engines dir")
        .collect();
    assert!(left.is_empty(), "no record or log left: {left:?}");
}

#[test]
fn docker_mode_with_the_daemon_unreachable_says_so_and_offers_native() {
    let ctl = Ctl::new();
    let out = ctl.run_env(
        &[
            "run",
            "demo",
            "--docker",
            "--port",
            &free_port().to_string(),
        ],
        "DOCKER_HOST",
        "unix:///nonexistent/docker.sock",
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("container mode needs the Docker daemon, and it does not answer"),
        "{err}"
    );
    assert!(err.contains("unix:///nonexistent/docker.sock"), "{err}");
    assert!(err.contains("metralectl run demo --native"), "{err}");

    // Without --docker, the launcher falls back to the native engine and says why.
    let doctor = ctl.run_env(
        &["doctor", "--json"],
        "DOCKER_HOST",
        "unix:///nonexistent/docker.sock",
    );
    let report: Value = serde_json::from_slice(&doctor.stdout).expect("doctor --json");
    let docker = report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["id"] == "docker")
        .expect("docker check")
        .clone();
    assert_eq!(docker["status"], "warning");
}

/// A fake `nvidia-smi` in `dir` that reports one H100 (this machine has no GPU; the run must
/// pass its device check to reach Docker's).
#[cfg(unix)]
fn fake_h100(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let script = dir.join("fake-nvidia-smi");
    std::fs::write(
        &script,
        "#!/bin/sh\necho 'NVIDIA H100 80GB HBM3, 81559, 81000, 9.0'\n",
    )
    .expect("write the fake nvidia-smi");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    script
}

#[cfg(unix)]
#[test]
fn a_gpu_recipe_in_docker_mode_explains_what_it_needs_no_nvidia_runtime_here_fake_gpu() {
    let ctl = Ctl::new();
    let smi = fake_h100(ctl.state.path());
    let out = ctl.run_env(
        &[
            "run",
            "qwen3-8b",
            "--docker",
            "--port",
            &free_port().to_string(),
        ],
        "METRALE_NVIDIA_SMI",
        smi.to_str().expect("utf-8 path"),
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("runs on NVIDIA GPUs"), "{err}");
    assert!(err.contains("has no NVIDIA runtime"), "{err}");
    assert!(err.contains("nvidia-ctk runtime configure"), "{err}");
    // A native run of a GPU recipe needs a met built for CUDA, and the hint says so.
    assert!(
        err.contains("a native run needs a met built for CUDA"),
        "{err}"
    );
    assert!(err.contains("--features cuda"), "{err}");
    let leftover = docker(&["ps", "-aq", "--filter", "label=ai.metrale.recipe=qwen3-8b"]);
    assert_eq!(leftover.trim(), "", "no container created");
}

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker")
        .args(args)
        .output()
        .expect("run docker");
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Removes the test's containers and image, even when an assertion fails.
struct DockerCleanup {
    image: String,
    name_label: String,
}

impl Drop for DockerCleanup {
    fn drop(&mut self) {
        let ids = Command::new("docker")
            .args(["ps", "-aq", "--filter", &self.name_label])
            .output()
            .map(|o| text(&o.stdout))
            .unwrap_or_default();
        for id in ids.split_whitespace() {
            let _ = Command::new("docker").args(["rm", "-f", id]).output();
        }
        let _ = Command::new("docker")
            .args(["rmi", "-f", &self.image])
            .output();
    }
}

/// A scratch image with the `met` cargo built and the libraries `ldd` lists.
fn build_scratch_image(tag: &str) {
    let met = PathBuf::from(env!("CARGO_BIN_EXE_met"));
    let ctx = tempfile::tempdir().expect("build context");
    let ldd = Command::new("ldd").arg(&met).output().expect("ldd");
    let mut copies = Vec::new();
    for line in text(&ldd.stdout).lines() {
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)" or "/lib64/ld-linux-x86-64.so.2 (0x…)"
        let path = line
            .split("=>")
            .last()
            .and_then(|r| r.split_whitespace().next())
            .filter(|p| p.starts_with('/'));
        if let Some(path) = path {
            let rel = path.trim_start_matches('/');
            let dest = ctx.path().join("root").join(rel);
            std::fs::create_dir_all(dest.parent().expect("parent")).expect("mkdir");
            std::fs::copy(std::fs::canonicalize(path).expect("resolve"), &dest).expect("copy lib");
            copies.push(rel.to_owned());
        }
    }
    assert!(
        !copies.is_empty(),
        "ldd listed no libraries: {}",
        text(&ldd.stdout)
    );
    let bin = ctx.path().join("root/usr/local/bin");
    std::fs::create_dir_all(&bin).expect("mkdir bin");
    std::fs::copy(&met, bin.join("met")).expect("copy met");
    std::fs::write(
        ctx.path().join("Dockerfile"),
        format!(
            "FROM scratch\nCOPY root/ /\nENV PATH=/usr/local/bin\nLABEL {TEST_LABEL}\nENTRYPOINT []\n"
        ),
    )
    .expect("Dockerfile");
    docker(&["build", "-q", "-t", tag, &ctx.path().display().to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_run_serves_the_demo_from_a_scratch_image() {
    let ctl = Ctl::new();
    let unique = format!("{}-{}", std::process::id(), free_port());
    let name = format!("demo-docker-{unique}");
    let image = format!("metrale-test/met:{unique}");
    let _cleanup = DockerCleanup {
        image: image.clone(),
        name_label: format!("label=ai.metrale.name={name}"),
    };
    build_scratch_image(&image);

    let port = free_port();
    let port_s = port.to_string();
    let started = run_detached(
        &ctl,
        &[
            "--docker", "--image", &image, "--port", &port_s, "--name", &name,
        ],
    );
    assert_eq!(started["mode"], "container");
    let body = ask_capital(&format!("http://127.0.0.1:{port}")).await;
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "The capital of France is Paris."
    );

    let engines = ctl.ps();
    let ours: Vec<&Value> = engines
        .iter()
        .filter(|e| e["name"] == name.as_str())
        .collect();
    assert_eq!(ours.len(), 1, "{engines:?}");
    assert_eq!(ours[0]["mode"], "container");
    assert_eq!(ours[0]["recipe"], "demo");
    assert_eq!(ours[0]["port"], port);
    let labels = docker(&[
        "inspect",
        "-f",
        "{{json .Config.Labels}} {{.HostConfig.IpcMode}}",
        &format!("metrale-{name}"),
    ]);
    assert!(
        labels.contains("\"ai.metrale.recipe\":\"demo\""),
        "{labels}"
    );
    assert!(labels.trim_end().ends_with("host"), "ipc=host: {labels}");
    let bound = docker(&["port", &format!("metrale-{name}")]);
    assert!(
        bound.contains(&format!("127.0.0.1:{port}")),
        "bound on loopback only: {bound}"
    );

    let logs = ctl.run(&["logs", &name]);
    assert!(logs.status.success(), "{}", text(&logs.stderr));
    assert!(
        text(&logs.stdout).contains("model demo ready"),
        "{}",
        text(&logs.stdout)
    );

    let stop = ctl.run(&["stop", &name]);
    assert!(stop.status.success(), "{}", text(&stop.stderr));
    let left = docker(&[
        "ps",
        "-aq",
        "--filter",
        &format!("label=ai.metrale.name={name}"),
    ]);
    assert_eq!(left.trim(), "", "the container is removed");

    // In the foreground, Ctrl-C stops and removes the container.
    let child = ctl
        .command(&[
            "run", "demo", "--docker", "--image", &image, "--port", &port_s, "--name", &name,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn metralectl run");
    let (stdout, stderr, ok) = interrupt_once_ready(child);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("(container, "), "{stdout}");
    assert!(
        stderr.contains(&format!("stopping and removing metrale-{name}")),
        "{stderr}"
    );
    let left = docker(&[
        "ps",
        "-aq",
        "--filter",
        &format!("label=ai.metrale.name={name}"),
    ]);
    assert_eq!(left.trim(), "", "Ctrl-C removed the container");

    // `metralectl stop` from another shell ends the foreground run cleanly (issue 38).
    let fg = format!("{name}-fg");
    let child = ctl
        .command(&[
            "run", "demo", "--docker", "--image", &image, "--port", &port_s, "--name", &fg,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn metralectl run");
    let (_, stderr, ok) = end_once_ready(child, |_| {
        assert!(ctl.run(&["stop", &fg]).status.success());
    });
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains(&format!("the engine {fg} stopped (")),
        "{stderr}"
    );

    // The engine exits at start: its last lines are shown and the container is removed.
    let out = ctl.run(&[
        "run",
        "demo",
        "--docker",
        "--image",
        &image,
        "--port",
        &port_s,
        "--name",
        &name,
        "--",
        "--no-such-flag",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("exited during start-up (exit code 2)"),
        "{err}"
    );
    assert!(
        err.contains("unexpected argument '--no-such-flag'"),
        "{err}"
    );
    let left = docker(&[
        "ps",
        "-aq",
        "--filter",
        &format!("label=ai.metrale.name={name}"),
    ]);
    assert_eq!(left.trim(), "", "no container left after a failed start");

    // An image that is not here and cannot be pulled.
    let missing = "127.0.0.1:9/metrale-test/missing:none";
    let out = ctl.run(&[
        "run", "demo", "--docker", "--image", missing, "--port", &port_s, "--name", &name,
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!(
            "the engine image {missing} is not on this machine and could not be pulled"
        )),
        "{err}"
    );
    assert!(err.contains("--native"), "{err}");
    let left = docker(&[
        "ps",
        "-aq",
        "--filter",
        &format!("label=ai.metrale.name={name}"),
    ]);
    assert_eq!(left.trim(), "", "no container left after a failed pull");
}

/// A user's recipe of the flagship family (`qwen3.6`: Gated DeltaNet hybrid, MoE with a shared
/// expert), pointing at the tiny Qwen3.5-MoE hybrid fixture and served natively on the CPU:
/// `metralectl run` starts it with the recipe's state-cache and speculative-decoding flags (MTP,
/// 2 drafts), and it serves transformers' greedy continuation under the recipe's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_recipe_of_the_hybrid_family_runs_and_serves_transformers_continuation() {
    let fixture = "qwen3_5-hybrid-moe";
    let ctl = Ctl::new();
    let recipes = ctl.config.path().join("recipes");
    std::fs::create_dir_all(&recipes).expect("recipes dir");
    let checkpoint = reference_support::model_dir(fixture)
        .canonicalize()
        .expect("fixture path");
    let recipe = format!(
        r#"name = "tiny-qwen3.6-moe"
display_name = "Tiny Qwen3.6-style MoE hybrid (test fixture)"
vendor = "Metrale"
family = "qwen3.6"
description = "The Qwen3.5-MoE hybrid fixture, on the CPU."

[checkpoint]
path = "{}"
quantization = "bf16"
parameters = "1M"

[model]
layers = 4
full_attention_layers = 1
kv_heads = 2
head_dim = 32
hidden_size = 64
vocab_size = 1536
experts = 8
expert_intermediate_size = 32

[model.linear_attention]
key_heads = 2
value_heads = 4
key_head_dim = 16
value_head_dim = 16
conv_kernel = 4

[serve]
device = "cpu"
max_seq_len = 512
max_batch_size = 2
prefix_caching = true
ssm_cache_slots = 2
ssm_checkpoint_interval = 32
prefill_chunk_with_decodes = 4

[serve.speculative]
method = "mtp"
num_drafts = 2

[requirements]
gpus = 0
"#,
        checkpoint.display()
    );
    std::fs::write(recipes.join("tiny-qwen3.6-moe.toml"), recipe).expect("write recipe");

    let port = free_port();
    let port_s = port.to_string();
    let out = ctl.run(&[
        "run",
        "tiny-qwen3.6-moe",
        "--native",
        "--detach",
        "--json",
        "--port",
        &port_s,
        "--ready-timeout",
        "120",
    ]);
    assert!(
        out.status.success(),
        "run failed: {}\n{}",
        text(&out.stderr),
        text(&out.stdout)
    );
    let started: Value = serde_json::from_slice(&out.stdout).expect("run --json is JSON");
    let url = format!("http://127.0.0.1:{port}");
    assert_eq!(started["url"], url.as_str());
    let engines = ctl.ps();
    assert_eq!(engines.len(), 1, "{engines:?}");
    assert_eq!(engines[0]["recipe"], "tiny-qwen3.6-moe");

    // The recipe's flags reached the engine.
    let client = reqwest::Client::new();
    let version: Value = client
        .get(format!("{url}/version"))
        .send()
        .await
        .expect("GET /version")
        .json()
        .await
        .expect("version JSON");
    let g = reference_support::reference(fixture).greedy;
    let want: Value = client
        .post(format!("{url}/detokenize"))
        .json(&json!({"tokens": g.continuation}))
        .send()
        .await
        .expect("POST /detokenize")
        .json()
        .await
        .expect("detokenize JSON");
    let got: Value = client
        .post(format!("{url}/v1/completions"))
        .json(&json!({"model": "tiny-qwen3.6-moe", "prompt": g.prompt,
                      "max_tokens": g.continuation.len(), "temperature": 0, "ignore_eos": true}))
        .send()
        .await
        .expect("POST /v1/completions")
        .json()
        .await
        .expect("completion JSON");
    let stop = ctl.run(&["stop", "tiny-qwen3.6-moe"]);
    assert!(stop.status.success(), "{}", text(&stop.stderr));
    assert_eq!(got["model"], "tiny-qwen3.6-moe", "{got}");
    assert_eq!(got["choices"][0]["text"], want["prompt"], "{got}");
    assert!(ctl.ps().is_empty());
    let settings = &version["settings"];
    assert_eq!(settings["device"], "cpu", "{settings}");
    assert_eq!(settings["enable_prefix_caching"], true, "{settings}");
    assert_eq!(settings["ssm_cache_slots"], 2, "{settings}");
    assert_eq!(settings["ssm_checkpoint_interval"], 32, "{settings}");
    assert_eq!(settings["max_batch_size"], 2, "{settings}");
    assert_eq!(settings["prefill_chunk_with_decodes"], 4, "{settings}");
    // The fixture's random MTP head drafts; the output above is still transformers' greedy.
    assert_eq!(settings["speculative"]["num_drafts"], 2, "{settings}");
}
