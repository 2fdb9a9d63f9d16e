//! `metralectl bench` and `metralectl verify`, run as binaries: a ladder against the real
//! `met serve` on a fixture model whose numbers must add up, a record that round-trips, verifies
//! and fails once tampered with or checked against another key; and a small server of our own
//! (axum on 127.0.0.1) whose streams break, to show those requests count as errors.

mod server_support;

use std::path::Path;
use std::process::{Command, Output};

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use metrale_protocol::bench::Record;
use serde_json::{Value, json};
use server_support::{Server, metralectl};

fn ctl(args: &[&str]) -> Output {
    Command::new(metralectl())
        .args(args)
        .env("NO_COLOR", "1")
        .env("METRALE_NVIDIA_SMI", "/nonexistent/nvidia-smi")
        .env_remove("MET_API_KEY")
        .output()
        .expect("run metralectl")
}

async fn ctl_async(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ctl(&args)
    })
    .await
    .expect("metralectl task")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn path_str(p: &Path) -> String {
    p.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ladder_adds_up_and_its_signed_record_verifies() {
    let server = Server::start(&[]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("bench.key");
    let record = dir.path().join("run.json");

    let out = ctl(&["bench", "keygen", &path_str(&key)]);
    assert!(out.status.success(), "keygen: {}", text(&out.stderr));
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&key).expect("key").permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "the secret key is private");
    let again = ctl(&["bench", "keygen", &path_str(&key)]);
    assert!(!again.status.success(), "an existing key is never replaced");
    assert!(
        text(&again.stderr).contains("an existing key is never replaced"),
        "{}",
        text(&again.stderr)
    );
    // A key in a directory that does not exist yet (a fresh ~/.config/metrale): made, private.
    let nested = dir.path().join("fresh/config/bench.key");
    let out = ctl(&["bench", "keygen", &path_str(&nested)]);
    assert!(out.status.success(), "keygen: {}", text(&out.stderr));
    let dir_mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(nested.parent().expect("parent"))
            .expect("dir")
            .permissions(),
    );
    assert_eq!(dir_mode & 0o077, 0, "the key's new directory is private");

    let (isl, osl, reps) = (12u32, 5u32, 2u32);
    for endpoint in ["chat", "completions"] {
        let out = ctl_async(
            [
                "bench",
                "--url",
                &server.base,
                "--endpoint",
                endpoint,
                "--concurrency",
                "1,3",
                "--isl",
                &isl.to_string(),
                "--osl",
                &osl.to_string(),
                "--reps",
                &reps.to_string(),
                "--warmup",
                "1",
                "--record",
                &path_str(&record),
                "--sign",
                &path_str(&key),
                "--json",
            ]
            .map(String::from)
            .to_vec(),
        )
        .await;
        assert!(
            out.status.success(),
            "bench {endpoint}: {}",
            text(&out.stderr)
        );
        let printed: Record = serde_json::from_slice(&out.stdout).expect("--json is a record");
        let bytes = std::fs::read(&record).expect("record written");
        let written: Record = serde_json::from_slice(&bytes).expect("the record parses");
        assert_eq!(printed, written, "the record round-trips");
        assert_eq!(written.workload.endpoint, endpoint);
        assert_eq!(written.workload.model, "test");
        assert_eq!(written.machine.kind, "cpu");
        assert_eq!(written.harness.binary_sha256.len(), 64);
        assert_eq!(written.server["models"]["data"][0]["id"], "test");
        // met describes its build and flags; the record keeps them.
        assert_eq!(written.server["version"]["build"]["name"], "met");
        assert_eq!(written.server["version"]["settings"]["device"], "cpu");
        assert_eq!(written.rungs.len(), 2);
        for (rung, c) in written.rungs.iter().zip([1u32, 3]) {
            assert_eq!(rung.concurrency, c);
            assert_eq!(rung.errors, 0, "{endpoint}: {:?}", rung.error_samples);
            assert_eq!(rung.requests, c * reps);
            assert_eq!(rung.reps.len(), reps as usize, "warmup reps are not timed");
            for rep in &rung.reps {
                assert_eq!(
                    rep.output_tokens,
                    u64::from(osl * c),
                    "tokens == OSL × requests"
                );
                assert_eq!(rep.ttft_ms.len(), c as usize);
                assert!(rep.wall_s > 0.0);
                assert!((rep.output_tok_s - rep.output_tokens as f64 / rep.wall_s).abs() < 1e-6);
                for (t, l) in rep.ttft_ms.iter().zip(&rep.latency_ms) {
                    assert!(*t > 0.0 && t <= l, "TTFT {t} within latency {l}");
                    assert!(l / 1e3 <= rep.wall_s + 1e-3);
                }
            }
            let itl = rung.itl_ms.as_ref().expect("ITL for OSL > 1");
            assert!(itl.p50 <= itl.p90 && itl.p90 <= itl.p99);
            let tok_s = &rung.output_tok_s;
            assert!(tok_s.min <= tok_s.median && tok_s.median <= tok_s.max && tok_s.mean > 0.0);
        }
    }
    let record_s = path_str(&record);
    let pubkey = format!("{}.pub", path_str(&key));
    let ok = ctl(&["verify", &record_s, "--key", &pubkey]);
    assert!(ok.status.success(), "verify: {}", text(&ok.stderr));
    assert!(
        text(&ok.stdout).contains("signature OK"),
        "{}",
        text(&ok.stdout)
    );

    // Another key: the signature is fine but not by the key asked for.
    let other = dir.path().join("other.key");
    assert!(
        ctl(&["bench", "keygen", &path_str(&other)])
            .status
            .success()
    );
    let wrong = ctl(&[
        "verify",
        &record_s,
        "--key",
        &format!("{}.pub", path_str(&other)),
    ]);
    assert!(!wrong.status.success());
    assert!(
        text(&wrong.stderr).contains("not by the key given"),
        "{}",
        text(&wrong.stderr)
    );

    // One digit of a figure changed: verification fails.
    let original = std::fs::read_to_string(&record).expect("record");
    let at = original.find("\"output_tokens\": ").expect("a figure") + "\"output_tokens\": ".len();
    let digit = original.as_bytes()[at];
    let mut tampered = original.into_bytes();
    tampered[at] = if digit == b'9' { b'8' } else { digit + 1 };
    std::fs::write(&record, &tampered).expect("tamper");
    let bad = ctl(&["verify", &record_s, "--pubkey", &pubkey]);
    assert!(!bad.status.success(), "a tampered record must not verify");
    assert!(
        text(&bad.stderr).contains("changed after it was signed"),
        "{}",
        text(&bad.stderr)
    );
}

/// A stream that sends two chunks, then (by the requested model) an in-band error, or nothing
/// more: no `[DONE]`.
async fn broken_completions(axum::Json(body): axum::Json<Value>) -> impl IntoResponse {
    let chunk = |t: &str| {
        format!(
            "data: {}\n\n",
            json!({"object": "text_completion", "choices": [{"index": 0, "text": t, "finish_reason": null}]})
        )
    };
    let mut sse = chunk("a") + &chunk("b");
    if body["model"] == "inband" {
        sse += "data: {\"error\":{\"message\":\"engine died\",\"type\":\"server_error\"}}\n\n";
        sse += "data: [DONE]\n\n";
    }
    ([(header::CONTENT_TYPE, "text/event-stream")], sse)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_streams_count_as_errors() {
    let app = Router::new()
        .route(
            "/v1/models",
            get(|| async { axum::Json(json!({"object": "list", "data": [{"id": "inband"}]})) }),
        )
        .route(
            "/tokenize",
            post(|| async {
                axum::Json(json!({"tokens": (1..=64).collect::<Vec<u32>>(), "count": 64}))
            }),
        )
        .route("/v1/completions", post(broken_completions));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });

    for (model, why) in [
        ("inband", "carried an error: engine died"),
        ("early", "without [DONE]"),
    ] {
        let out = ctl_async(
            [
                "bench",
                "--url",
                &base,
                "--model",
                model,
                "--endpoint",
                "completions",
                "--concurrency",
                "2",
                "--isl",
                "8",
                "--osl",
                "4",
                "--reps",
                "2",
                "--warmup",
                "0",
                "--json",
            ]
            .map(String::from)
            .to_vec(),
        )
        .await;
        assert!(!out.status.success(), "{model}: errors make bench fail");
        let rec: Record = serde_json::from_slice(&out.stdout).expect("--json is a record");
        let rung = &rec.rungs[0];
        assert_eq!(
            (rung.requests, rung.errors),
            (4, 4),
            "{model}: every request is an error"
        );
        assert!(
            rung.reps
                .iter()
                .all(|r| r.output_tokens == 0 && r.output_tok_s == 0.0)
        );
        assert!(
            rung.error_samples[0].contains(why),
            "{model}: {:?}",
            rung.error_samples
        );
        assert!(
            text(&out.stderr).contains("4 requests failed"),
            "{}",
            text(&out.stderr)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn against_measures_both_servers_and_their_ratio() {
    let (a, b) = (Server::start(&[]).await, Server::start(&[]).await);
    let out = ctl_async(
        [
            "bench",
            "--url",
            &a.base,
            "--against",
            &format!("{}/v1", b.base),
            "--concurrency",
            "1,2",
            "--isl",
            "10",
            "--osl",
            "3",
            "--reps",
            "2",
            "--warmup",
            "0",
            "--json",
        ]
        .map(String::from)
        .to_vec(),
    )
    .await;
    assert!(
        out.status.success(),
        "bench --against: {}",
        text(&out.stderr)
    );
    let rec: Record = serde_json::from_slice(&out.stdout).expect("--json is a record");
    let against = rec.against.expect("the B side is recorded");
    assert_eq!(against.url, b.base, "a /v1 suffix is the same server");
    assert_eq!(against.rungs.len(), 2);
    for ((ra, rb), ratio) in rec.rungs.iter().zip(&against.rungs).zip(&against.ratio) {
        assert_eq!((ra.errors, rb.errors), (0, 0));
        for rep in ra.reps.iter().chain(&rb.reps) {
            assert_eq!(rep.output_tokens, u64::from(3 * ra.concurrency));
        }
        let expected = ra.output_tok_s.mean / rb.output_tok_s.mean;
        assert!((ratio - expected).abs() < 1e-9 && *ratio > 0.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_fails_an_impossible_baseline_and_passes_a_generous_one() {
    let server = Server::start(&[]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let records = dir.path().join("records");
    std::fs::create_dir(&records).expect("records dir");
    std::fs::write(
        records.join("other-schema.json"),
        b"{\"schema\": \"first-light/0\"}",
    )
    .expect("an older record");
    let measured = records.join("measured.json");
    let out = ctl_async(
        [
            "bench",
            "--url",
            &server.base,
            "--concurrency",
            "1,2",
            "--isl",
            "12",
            "--osl",
            "4",
            "--reps",
            "1",
            "--warmup",
            "0",
            "--record",
            &path_str(&measured),
        ]
        .map(String::from)
        .to_vec(),
    )
    .await;
    assert!(out.status.success(), "bench: {}", text(&out.stderr));
    let mut baseline: Value =
        serde_json::from_slice(&std::fs::read(&measured).expect("record")).expect("JSON");

    // The README and chart generated from the records: the figures, a line with a point a rung.
    let site = dir.path().join("site");
    let out = ctl(&[
        "bench",
        "report",
        "--records",
        &path_str(&records),
        "--out",
        &path_str(&site),
    ]);
    assert!(out.status.success(), "report: {}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("skipping"),
        "the older record is skipped, said so"
    );
    let readme = std::fs::read_to_string(site.join("README.md")).expect("README");
    let svg = std::fs::read_to_string(site.join("ladder.svg")).expect("svg");
    for rung in baseline["rungs"].as_array().expect("rungs") {
        let mean = rung["output_tok_s"]["mean"].as_f64().expect("mean");
        let row = format!("| {} | {mean:.1} |", rung["concurrency"]);
        assert!(readme.contains(&row), "{row} missing from\n{readme}");
    }
    assert!(
        readme.contains("## measured") && readme.contains("signed: no"),
        "{readme}"
    );
    assert_eq!(svg.matches("<polyline").count(), 1);
    assert_eq!(svg.matches("<circle").count(), 2);

    for (tok_s, passes) in [(1e12, false), (1e-3, true)] {
        for rung in baseline["rungs"].as_array_mut().expect("rungs") {
            rung["output_tok_s"]["mean"] = json!(tok_s);
        }
        let path = dir.path().join(format!("baseline-{passes}.json"));
        std::fs::write(&path, serde_json::to_vec(&baseline).expect("encode")).expect("write");
        let out = ctl_async(
            ["bench", "gate", "--baseline", &path_str(&path), "--json"]
                .map(String::from)
                .to_vec(),
        )
        .await;
        assert_eq!(
            out.status.success(),
            passes,
            "gate vs {tok_s} tok/s: {}",
            text(&out.stderr)
        );
        let verdict: Value = serde_json::from_slice(&out.stdout).expect("--json");
        assert_eq!(verdict["pass"], passes);
        assert_eq!(verdict["rungs"].as_array().map(Vec::len), Some(2));
        assert_eq!(verdict["coherence"]["deterministic"], true);
        assert_eq!(verdict["coherence"]["leaked_special"], Value::Null);
        for rung in verdict["rungs"].as_array().expect("rungs") {
            assert_eq!(rung["pass"], passes);
            assert!(rung["tok_s"].as_f64().is_some_and(|t| t > 0.0));
        }
    }
}

/// `--response-format` constrains every request of the measured server: with `--against` the
/// same server the record holds the constrained ladder and the free one beside it. The bench's
/// `ignore_eos` makes the server write one JSON value after another to exactly `--osl` tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_constrained_ladder_runs_beside_the_free_one() {
    let server = Server::start(&[]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let schema = dir.path().join("schema.json");
    let shape =
        json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]});
    std::fs::write(&schema, shape.to_string()).expect("schema");
    let out = ctl_async(
        [
            "bench",
            "--url",
            &server.base,
            "--response-format",
            &path_str(&schema),
            "--against",
            &server.base,
            "--concurrency",
            "1,2",
            "--isl",
            "10",
            "--osl",
            "12",
            "--reps",
            "1",
            "--warmup",
            "0",
            "--json",
        ]
        .map(String::from)
        .to_vec(),
    )
    .await;
    assert!(out.status.success(), "bench: {}", text(&out.stderr));
    let rec: Record = serde_json::from_slice(&out.stdout).expect("--json is a record");
    assert_eq!(
        rec.workload.response_format,
        Some(json!({"type": "json_schema", "json_schema": {"name": "bench", "schema": shape}}))
    );
    let against = rec.against.expect("the free side is recorded");
    for (ra, rb) in rec.rungs.iter().zip(&against.rungs) {
        assert_eq!((ra.errors, rb.errors), (0, 0), "{ra:?}");
        for rep in ra.reps.iter().chain(&rb.reps) {
            assert_eq!(rep.output_tokens, u64::from(12 * ra.concurrency));
        }
    }
    // What the bench sent: an `ignore_eos` request under the schema is JSON to its end.
    let (status, body) = server
        .post(
            "/v1/completions",
            &json!({"prompt": "hello", "max_tokens": 40, "ignore_eos": true, "temperature": 0,
                    "response_format": {"type": "json_object"}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let reply = body["choices"][0]["text"].as_str().expect("text");
    assert!(reply.starts_with('{'), "{reply:?}");
    assert_eq!(body["usage"]["completion_tokens"], 40);

    let bad = ctl(&[
        "bench",
        "--url",
        &server.base,
        "--response-format",
        "/nonexistent.json",
    ]);
    assert!(!bad.status.success());
    assert!(
        text(&bad.stderr).contains("not `json_object` and not a readable schema file"),
        "{}",
        text(&bad.stderr)
    );
}
