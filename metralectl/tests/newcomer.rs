//! The launcher as a newcomer meets it (issue 38), for real: the demo recipe started natively
//! with the `met` cargo built, found by name, stopped from another shell, talked to, gated; a
//! busy port named; the demo run from a launcher installed outside the checkout. The terminal
//! parts run in tmux.

mod term;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use term::{Ctl, Tmux, free_port, met_binary, repo_root, text};

/// `GET url` over plain HTTP/1.0: the status line and the body.
fn http_get(url: &str) -> (String, String) {
    let rest = url.strip_prefix("http://").expect("an http URL");
    let (host, path) = rest.split_once('/').map_or((rest, "/"), |(h, p)| (h, p));
    let mut stream = TcpStream::connect(host).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(stream, "GET /{path} HTTP/1.0\r\nHost: {host}\r\n\r\n").expect("send");
    let mut reply = String::new();
    stream.read_to_string(&mut reply).expect("read");
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    (
        head.lines().next().unwrap_or("").to_owned(),
        body.to_owned(),
    )
}

#[test]
fn top_finds_an_engine_by_name_on_any_port_in_tmux() {
    let ctl = Ctl::new();
    let (_, port) = ctl.demo("demo-top");
    // `run` ends by suggesting `metralectl top NAME`: by engine name, and by recipe name, on a
    // port other than 8000, with no --port, --socket or --url.
    for name in ["demo-top", "demo"] {
        let tmux = Tmux::run(
            "top-name",
            &format!("{} {} top {name}", ctl.env_words(), ctl.bin.display()),
        );
        tmux.wait_for("the engine's dashboard", |s| {
            s.contains(&format!("met-{port}.sock")) && s.contains("demo") && s.contains("KV ")
        });
        tmux.keys(&["q"]);
        tmux.wait_gone("metralectl top");
    }
    let out = ctl.run(&["top", "nosuch"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("no running engine is named nosuch"), "{err}");
    assert!(
        err.contains("`metralectl ps` lists the running engines"),
        "{err}"
    );
}

#[test]
fn stop_from_another_shell_ends_a_foreground_run_with_0() {
    let ctl = Ctl::new();
    let port = free_port().to_string();
    let mut child = ctl
        .command(&["run", "demo", "--native", "--port", &port])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start metralectl run");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let ready = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|l| l.starts_with("ready:"));
    assert!(ready, "run never said ready");
    let stop = ctl.run(&["stop", "demo"]);
    assert!(stop.status.success(), "stop: {}", text(&stop.stderr));
    for _ in lines {}
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("stderr");
    let status = child.wait().expect("run exits");
    assert!(status.success(), "the foreground run failed: {stderr}");
    assert!(!stderr.contains("error"), "{stderr}");
    assert!(
        stderr.contains("the engine demo stopped (exit status: 0"),
        "{stderr}"
    );
}

#[test]
fn doctor_run_and_met_serve_name_what_holds_a_busy_port() {
    let ctl = Ctl::new();
    let holder = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = holder.local_addr().expect("addr").port();
    let me = format!("pid {} (", std::process::id());

    let out = ctl.run(&["doctor", "--port", &port.to_string(), "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout).expect("doctor --json");
    let check = report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["id"] == "port")
        .expect("a port check")
        .clone();
    let title = check["title"].as_str().unwrap_or("");
    assert!(
        title.contains(&format!("port {port} is in use by {me}")),
        "{check}"
    );
    assert!(
        check["fix"]
            .as_str()
            .is_some_and(|f| f.contains(&format!("kill {}", std::process::id()))),
        "{check}"
    );

    let out = ctl.run(&["run", "demo", "--native", "--port", &port.to_string()]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!(
            "port {port} on 127.0.0.1 is already in use by {me}"
        )),
        "{err}"
    );

    let out = Command::new(met_binary())
        .arg("serve")
        .arg(repo_root().join("models/demo"))
        .args(["--port", &port.to_string(), "--no-tui"])
        .output()
        .expect("run met serve");
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("port {port} on 127.0.0.1 is already in use")),
        "{err}"
    );
    assert!(err.contains("--port 0 for any free one"), "{err}");
    drop(holder);
}

#[test]
fn bench_gate_says_the_model_names_differ() {
    let ctl = Ctl::new();
    let (base, _) = ctl.demo("demo");
    let record = ctl.path("measured.json");
    let out = ctl.run(&[
        "bench",
        "--url",
        &base,
        "--concurrency",
        "1",
        "--isl",
        "24",
        "--osl",
        "2",
        "--reps",
        "1",
        "--warmup",
        "0",
        "--record",
        record.to_str().expect("utf-8 path"),
    ]);
    assert!(out.status.success(), "bench: {}", text(&out.stderr));
    let mut baseline: Value =
        serde_json::from_slice(&std::fs::read(&record).expect("record")).expect("JSON");
    baseline["workload"]["model"] = "Qwen/Qwen3-8B".into();
    let other = ctl.path("other-model.json");
    std::fs::write(&other, baseline.to_string()).expect("write");
    let out = ctl.run(&[
        "bench",
        "gate",
        "--baseline",
        other.to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("the model names differ"), "{err}");
    assert!(
        err.contains("the baseline measured `Qwen/Qwen3-8B`"),
        "{err}"
    );
    assert!(err.contains("serves `demo`"), "{err}");
    assert!(err.contains("--model-name Qwen/Qwen3-8B"), "{err}");
    assert!(err.contains("--model demo"), "{err}");
    assert!(!err.contains("404"), "{err}");
}

#[test]
fn the_demo_runs_from_a_launcher_installed_outside_a_checkout() {
    let mut ctl = Ctl::new();
    let bin = ctl.path("prefix/bin");
    std::fs::create_dir_all(&bin).expect("bin dir");
    for name in ["metralectl", "met"] {
        let from = ctl.bin.parent().expect("bin dir").join(name);
        std::fs::copy(&from, bin.join(name)).expect("install a binary");
    }
    ctl.bin = bin.join("metralectl");
    ctl.cwd = ctl.path("elsewhere");
    std::fs::create_dir_all(&ctl.cwd).expect("a directory outside the checkout");
    let (base, _) = ctl.demo("demo");
    let (status, body) = http_get(&format!("{base}/v1/models"));
    assert!(status.contains("200"), "{status}");
    assert!(body.contains("\"demo\""), "{body}");
    // The shipped model was written under the data directory, byte for byte.
    let shipped = ctl.path("data/models/demo/model.safetensors");
    let original = repo_root().join("models/demo/model.safetensors");
    assert_eq!(
        std::fs::metadata(&shipped).expect("written").len(),
        std::fs::metadata(&original).expect("in the checkout").len()
    );
}

#[test]
fn chat_demo_streams_keeps_a_history_and_resets_in_tmux() {
    let ctl = Ctl::new();
    let port = free_port();
    // No engine runs: chat starts the demo recipe itself, then talks to it.
    let tmux = Tmux::run(
        "chat",
        &format!(
            "{} {} chat demo --temperature 0 --port {port}",
            ctl.env_words(),
            ctl.bin.display()
        ),
    );
    tmux.remain_on_exit();
    tmux.wait_for_within("the prompt", Duration::from_secs(180), |s| {
        s.contains("talking to demo") && s.lines().any(|l| l.trim_end() == ">")
    });
    tmux.type_text("What is the capital of France?");
    tmux.keys(&["Enter"]);
    tmux.wait_for("the streamed answer", |s| {
        s.contains("The capital of France is Paris.")
    });
    // Two lines in one message: a trailing backslash continues it.
    tmux.type_text("Hello!\\");
    tmux.keys(&["Enter"]);
    tmux.type_text("Who are you?");
    tmux.wait_for("the second line", |s| {
        s.lines().any(|l| l.starts_with("> Hello!"))
            && s.lines().any(|l| l.starts_with(". Who are you?"))
    });
    tmux.keys(&["Enter"]);
    // ↑ brings the last message back, both lines; Ctrl-C clears it.
    tmux.wait_for("the next prompt", |s| s.trim_end().ends_with('>'));
    tmux.keys(&["Up"]);
    tmux.wait_for("the recalled message", |s| {
        let shown: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
        shown.ends_with(&["> Hello!", ". Who are you?"])
    });
    tmux.keys(&["C-c"]);
    tmux.type_text("/reset");
    tmux.keys(&["Enter"]);
    tmux.wait_for("the reset", |s| s.contains("the conversation is forgotten"));
    // A Ctrl-D that lands while the prompt is being redrawn (before the editor has the terminal
    // raw again) is taken by the terminal, not the chat: send it again until the chat ends.
    let ended = (0..4).any(|_| {
        tmux.keys(&["C-d"]);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            if tmux.dead() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(150));
        }
        false
    });
    assert!(
        ended,
        "the chat did not end on Ctrl-D:\n{}\n{}",
        tmux.screen(false),
        tmux.diagnose()
    );
    // The history outlives the chat; the engine it started runs on until stopped.
    let history = std::fs::read_to_string(ctl.path("state/chat_history")).expect("history");
    assert!(
        history.contains("What is the capital of France?\nHello!\\nWho are you?\n/reset"),
        "{history}"
    );
    let ps = ctl.run(&["ps", "--json"]);
    assert!(
        text(&ps.stdout).contains("\"demo\""),
        "{}",
        text(&ps.stdout)
    );
}

#[test]
fn chat_reads_messages_from_a_pipe_and_keeps_the_conversation() {
    let ctl = Ctl::new();
    ctl.demo("demo");
    let mut child = ctl
        .command(&["chat", "demo", "--temperature", "0"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chat");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"What is the capital of France?\n/nosuch\n/reset\n")
        .expect("write");
    let out = child.wait_with_output().expect("chat ends with its input");
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout.trim(), "The capital of France is Paris.", "{stderr}");
    assert!(stderr.contains("unknown command /nosuch: /reset, /exit and /help are known"));
    assert!(stderr.contains("the conversation is forgotten"), "{stderr}");
    // A name that is neither an engine nor a recipe says both, and where to look.
    let out = ctl.run(&["chat", "nosuch"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("no engine named nosuch runs, and no recipe has that name"),
        "{err}"
    );
}
