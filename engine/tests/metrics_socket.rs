//! The metrics socket and `/v1/metrics/stream` of the real `met serve` binary: what a new
//! subscriber sees, per-request events that agree with the HTTP responses, the API key on the
//! SSE route, and a reader that stops reading, which must be dropped without slowing the
//! engine.

mod server_support;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use metrale_protocol::metrics::{Event, Phase, parse_line};
use serde_json::json;
use server_support::Server;

fn socket_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("met-test-{}-{name}.sock", std::process::id()))
}

/// Reads events from a socket on a thread.
struct Reader {
    rx: std::sync::mpsc::Receiver<Event>,
}

impl Reader {
    fn connect(path: &std::path::Path) -> Reader {
        let stream = UnixStream::connect(path).expect("connect to the metrics socket");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                let event = parse_line(&line).expect("a valid protocol line");
                if let Some(e) = event
                    && tx.send(e).is_err()
                {
                    break;
                }
            }
        });
        Reader { rx }
    }

    fn next(&self) -> Event {
        self.rx
            .recv_timeout(Duration::from_secs(20))
            .expect("an event within 20 s")
    }

    /// Events until `stop` says so.
    fn until(&self, mut stop: impl FnMut(&Event) -> bool) -> Vec<Event> {
        let mut out = Vec::new();
        loop {
            let e = self.next();
            let done = stop(&e);
            out.push(e);
            if done {
                return out;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_sees_start_up_then_every_request_as_the_api_answers_it() {
    let path = socket_path("events");
    let s = Server::start(&["--metrics-socket", path.to_str().expect("utf-8")]).await;
    let mode = std::fs::metadata(&path)
        .expect("socket exists")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "socket permissions {mode:o}");

    let r = Reader::connect(&path);
    match r.next() {
        Event::Hello(h) => {
            assert_eq!(h.model, "test");
            assert_eq!(h.pid, s.pid());
            assert_eq!(h.http_url.as_deref(), Some(s.base.as_str()));
        }
        e => panic!("first event should be hello, got {e:?}"),
    }
    let start = r.until(|e| matches!(e, Event::Snapshot(_)));
    let phases: Vec<Phase> = start
        .iter()
        .filter_map(|e| match e {
            Event::Phase(p) => Some(p.phase),
            _ => None,
        })
        .collect();
    assert_eq!(
        phases,
        [
            Phase::Resolve,
            Phase::Load,
            Phase::AllocateKvCache,
            Phase::Ready
        ]
    );
    match start
        .iter()
        .find(|e| matches!(e, Event::Phase(p) if p.phase == Phase::Load))
    {
        // Every decoder layer of the fixture's config.json, loaded.
        Some(Event::Phase(p)) => {
            let config: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(server_support::fixture_model().join("config.json"))
                    .expect("config.json"),
            )
            .expect("json");
            let layers = config["num_hidden_layers"].as_u64().expect("layers");
            assert_eq!(
                (p.done, p.total, p.unit.as_str()),
                (layers, Some(layers), "layers")
            );
        }
        _ => unreachable!(),
    }
    match start.last() {
        Some(Event::Snapshot(snap)) => {
            assert!(snap.ready);
            assert_eq!(snap.max_step_seqs, 16);
            assert!(snap.kv_blocks_total > 0);
            assert_eq!(snap.running_seqs, 0);
        }
        e => panic!("expected a snapshot, got {e:?}"),
    }

    // Three requests of known lengths; the events must say the same as the responses.
    let mut usage = Vec::new();
    for n in [3u64, 5, 8] {
        let (status, v) = s
            .post(
                "/v1/completions",
                &json!({"prompt": "hello there", "max_tokens": n, "ignore_eos": true}),
            )
            .await;
        assert_eq!(status, 200, "{v}");
        usage.push((
            v["usage"]["prompt_tokens"].as_u64().expect("prompt_tokens"),
            v["usage"]["completion_tokens"]
                .as_u64()
                .expect("completion_tokens"),
        ));
    }
    let mut finished = Vec::new();
    let mut first_tokens = 0;
    let mut queued = 0;
    r.until(|e| {
        match e {
            Event::Queued(_) => queued += 1,
            Event::FirstToken(f) => {
                assert!(f.ttft_ms > 0.0);
                first_tokens += 1;
            }
            Event::Finished(f) => {
                assert_eq!(f.reason, "length");
                assert!(f.e2e_ms >= f.ttft_ms.expect("ttft"));
                assert!(f.itl_p50_ms.expect("itl p50") <= f.itl_p95_ms.expect("itl p95"));
                finished.push((f.prompt_tokens, f.generated_tokens));
            }
            _ => {}
        }
        finished.len() == 3
    });
    assert_eq!((queued, first_tokens), (3, 3));
    assert_eq!(finished, usage);

    // The next snapshots count those tokens.
    let snap = r.until(|e| matches!(e, Event::Snapshot(s) if s.generation_tokens_total >= 16));
    match snap.last() {
        Some(Event::Snapshot(snap)) => {
            assert_eq!(snap.generation_tokens_total, 16);
            assert!(snap.ttft_p50_ms.is_some() && snap.itl_p95_ms.is_some());
        }
        _ => unreachable!(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sse_stream_needs_the_key_and_carries_the_same_events() {
    let path = socket_path("sse");
    let s = Server::start(&[
        "--metrics-socket",
        path.to_str().expect("utf-8"),
        "--api-key",
        "k3y",
    ])
    .await;
    let client = reqwest::Client::new();
    let denied = client
        .get(s.url("/v1/metrics/stream"))
        .send()
        .await
        .expect("send");
    assert_eq!(denied.status(), 401);
    let mut resp = client
        .get(s.url("/v1/metrics/stream"))
        .bearer_auth("k3y")
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-type"].to_str().expect("ascii"),
        "text/event-stream"
    );
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut events = Vec::new();
    while !events.iter().any(|e| matches!(e, Event::Snapshot(_))) {
        assert!(
            Instant::now() < deadline,
            "no snapshot on the SSE stream: {text}"
        );
        let chunk = tokio::time::timeout(Duration::from_secs(20), resp.chunk())
            .await
            .expect("a chunk in time")
            .expect("read")
            .expect("stream still open");
        text.push_str(std::str::from_utf8(&chunk).expect("utf-8"));
        events = server_support::sse_data(&text)
            .iter()
            .filter_map(|d| parse_line(d).expect("valid line"))
            .collect();
    }
    assert!(matches!(&events[0], Event::Hello(h) if h.model == "test"));
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Phase(p) if p.phase == Phase::Ready))
    );
}

/// Run `n` short requests, 32 at a time; returns the wall time.
async fn workload(s: &Server, n: usize) -> Duration {
    let t = Instant::now();
    let body = json!({"prompt": "a slow reader", "max_tokens": 4, "ignore_eos": true});
    for chunk in (0..n).collect::<Vec<_>>().chunks(32) {
        let all =
            futures_util::future::join_all(chunk.iter().map(|_| s.post("/v1/completions", &body)));
        for (status, v) in all.await {
            assert_eq!(status, 200, "{v}");
        }
    }
    t.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_stops_reading_is_disconnected_and_does_not_slow_the_engine() {
    let path = socket_path("slow");
    let s = Server::start(&["--metrics-socket", path.to_str().expect("utf-8")]).await;
    let watcher = Reader::connect(&path);
    // Baseline: the same work with one reader that keeps up.
    workload(&s, 64).await; // warm up
    let alone = workload(&s, 600).await;

    // A reader that connects and never reads.
    let mut stuck = UnixStream::connect(&path).expect("connect");
    let with_stuck = workload(&s, 600).await;
    // Were the engine waiting on the stuck reader it would stall for good once the socket
    // buffer and the queue filled (a few hundred lines); 600 requests make ~1,800 events.
    assert!(
        with_stuck < alone * 3 + Duration::from_secs(2),
        "600 requests took {with_stuck:?} with a stuck reader, {alone:?} without"
    );

    // The stuck reader was hung up on: reading now drains what was buffered, then EOF.
    stuck
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut buf = Vec::new();
    stuck
        .read_to_end(&mut buf)
        .expect("EOF, not a timeout: the slow reader must be disconnected");
    let lines = buf.split(|&b| b == b'\n').filter(|l| !l.is_empty()).count();
    assert!(
        lines < 1_800,
        "the stuck reader got {lines} lines: it was never dropped"
    );

    // The reader that kept up saw it counted, and saw every request finish.
    let mut finished = 0;
    let events = watcher.until(|e| {
        if matches!(e, Event::Finished(_)) {
            finished += 1;
        }
        matches!(e, Event::Snapshot(s) if s.slow_subscribers_dropped_total >= 1 && s.running_seqs == 0)
    });
    assert!(!events.is_empty());
    assert!(finished > 0);
    let baseline_steps_per_s = 600.0 / alone.as_secs_f64();
    let stuck_steps_per_s = 600.0 / with_stuck.as_secs_f64();
    eprintln!(
        "requests/s without a stuck reader {baseline_steps_per_s:.0}, with one {stuck_steps_per_s:.0}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_socket_is_removed_on_exit_and_a_live_one_is_not_stolen() {
    let path = socket_path("exit");
    let mut s = Server::start(&["--metrics-socket", path.to_str().expect("utf-8")]).await;
    assert!(path.exists());
    // A second server on the same socket path refuses to start and names the path.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_met"))
        .args([
            "serve",
            server_support::fixture_model().to_str().expect("utf-8"),
        ])
        .args([
            "--port",
            "0",
            "--metrics-socket",
            path.to_str().expect("utf-8"),
        ])
        .output()
        .expect("run met");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("another process is serving metrics on")
            && err.contains(path.to_str().expect("utf-8")),
        "{err}"
    );
    s.sigterm();
    assert!(s.wait_exit(Duration::from_secs(20)).success());
    assert!(!path.exists(), "the socket file outlived the server");
}

#[test]
fn a_start_that_fails_after_the_socket_is_up_says_why_as_a_failed_phase() {
    // A checkpoint whose weight files are cut short: config and tokenizer load, the socket
    // comes up, then loading the weights fails.
    let dir = std::env::temp_dir().join(format!("met-test-broken-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let src = server_support::fixture_model();
    for entry in std::fs::read_dir(&src).expect("fixture") {
        let entry = entry.expect("entry");
        let name = entry.file_name();
        let bytes = std::fs::read(entry.path()).expect("read");
        let bytes = if name.to_string_lossy().ends_with(".safetensors") {
            bytes[..bytes.len() / 2].to_vec()
        } else {
            bytes
        };
        std::fs::write(dir.join(&name), bytes).expect("write");
    }
    let path = socket_path("failed");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_met"))
        .args(["serve", dir.to_str().expect("utf-8"), "--port", "0"])
        .args(["--metrics-socket", path.to_str().expect("utf-8")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn met");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    while let Some(Ok(line)) = lines.next() {
        if line.contains("metrics events on") {
            break;
        }
    }
    let r = Reader::connect(&path);
    let deadline = Instant::now() + Duration::from_secs(30);
    let failed = loop {
        match r.next() {
            Event::Phase(p) if p.phase == Phase::Failed => break p,
            Event::Phase(p) => assert_ne!(p.phase, Phase::Ready, "a broken checkpoint loaded"),
            _ => {}
        }
        assert!(Instant::now() < deadline, "no failed phase in 30 s");
    };
    let message = failed.message.unwrap_or_default();
    assert!(
        message.contains(".safetensors"),
        "the error names the file: {message}"
    );
    assert!(!child.wait().expect("exit").success());
    let _ = std::fs::remove_dir_all(&dir);
}
