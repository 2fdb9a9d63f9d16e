//! `metralectl bench --mixed` run as a binary against the real `met serve` of the demo model on
//! 127.0.0.1 with tiny numbers: the table and the signed record come out with both phases, the
//! long prompts' TTFT and the ratio; bad flag values are refused by name, before any request.

mod server_support;

use std::process::{Command, Output};

use metrale_protocol::bench::Record;
use server_support::{Server, metralectl, repo_root};

fn ctl(args: &[&str]) -> Output {
    Command::new(metralectl())
        .args(args)
        .env("NO_COLOR", "1")
        .env("METRALE_NVIDIA_SMI", "/nonexistent/nvidia-smi")
        .env_remove("MET_API_KEY")
        .output()
        .expect("run metralectl")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_load_records_both_phases_and_the_ratio() {
    let demo = repo_root().join("models/demo").display().to_string();
    let args: Vec<String> = [
        "serve",
        &demo,
        "--port",
        "0",
        "--model-name",
        "demo",
        "--no-tui",
    ]
    .map(String::from)
    .to_vec();
    let server = Server::spawn(&args).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("bench.key").display().to_string();
    let record = dir.path().join("mixed.json").display().to_string();
    assert!(ctl(&["bench", "keygen", &key]).status.success());
    let base = server.base.clone();
    let (rec_arg, key_arg) = (record.clone(), key.clone());
    let out = tokio::task::spawn_blocking(move || {
        ctl(&[
            "bench",
            "--url",
            &base,
            "--mixed",
            "--streams",
            "2",
            "--isl",
            "16",
            "--osl",
            "24",
            "--long-isl",
            "256",
            "--long-osl",
            "4",
            "--long-every",
            "0.5s",
            "--duration",
            "3s",
            "--warmup",
            "1",
            "--record",
            &rec_arg,
            "--sign",
            &key_arg,
        ])
    })
    .await
    .expect("metralectl task");
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "bench --mixed: {}\n{stdout}",
        text(&out.stderr)
    );
    for row in [
        "streams alone",
        "with long prompts",
        "long prompts: 6 sent, 0 errors",
        "p99 ",
    ] {
        assert!(stdout.contains(row), "{row} missing from\n{stdout}");
    }
    let rec: Record =
        serde_json::from_slice(&std::fs::read(&record).expect("record")).expect("a record");
    assert!(rec.rungs.is_empty() && rec.against.is_none());
    assert_eq!(rec.workload.concurrency, vec![2]);
    let m = rec.mixed.expect("the mixed section");
    assert_eq!(
        (m.streams, m.long_isl, m.long_osl, m.phase_s),
        (2, 256, 4, 3.0)
    );
    for p in [&m.baseline, &m.loaded] {
        assert_eq!(p.errors, 0, "{:?}", p.error_samples);
        assert!(p.requests > 0 && p.gaps > 0 && p.output_tokens > 0, "{p:?}");
        // Each token-carrying chunk after a stream's first is one gap; the demo model sends
        // one token a chunk, so a phase has no more gaps than tokens.
        assert!(p.gaps <= p.output_tokens);
        assert!((p.output_tok_s - p.output_tokens as f64 / p.wall_s).abs() < 1e-6);
        let itl = p.itl_ms.as_ref().expect("ITL");
        assert!(0.0 < itl.p50 && itl.p50 <= itl.p90 && itl.p90 <= itl.p99);
        assert!(p.itl_max_ms.is_some_and(|x| x >= itl.p99));
    }
    // Arrivals at 0, 0.5, … 2.5 s of the loaded phase: six, every one answered.
    assert_eq!(
        (m.long.sent, m.long.errors, m.long.ttft_raw_ms.len()),
        (6, 0, 6)
    );
    let ttft = m.long.ttft_ms.expect("long TTFT");
    assert!(0.0 < ttft.p50 && ttft.p50 <= ttft.p99);
    let (b, l) = (m.baseline.itl_ms.expect("b"), m.loaded.itl_ms.expect("l"));
    let ratio = m.itl_p99_ratio.expect("ratio");
    assert!((ratio - l.p99 / b.p99).abs() < 1e-9 && ratio > 0.0);

    // The signed record verifies, and a gate refuses it as a baseline by name.
    let pubkey = format!("{key}.pub");
    let ok = ctl(&["verify", &record, "--pubkey", &pubkey]);
    assert!(ok.status.success(), "verify: {}", text(&ok.stderr));
    let gate = ctl(&["bench", "gate", "--baseline", &record]);
    assert!(!gate.status.success());
    assert!(
        text(&gate.stderr).contains("mixed-load record"),
        "{}",
        text(&gate.stderr)
    );
}

#[test]
fn bad_mixed_flags_are_refused_by_name() {
    let url = "http://127.0.0.1:9";
    for (flags, says) in [
        (&["--streams", "0"][..], "--streams must be at least 1"),
        (&["--osl", "1"], "--osl 1 is too short"),
        (
            &["--long-isl", "0"],
            "--long-isl and --long-osl must be at least 1",
        ),
        (&["--long-every", "0s"], "--long-every must be more than 0"),
        (&["--long-every", "soon"], "not a time"),
        (
            &["--duration", "1s", "--long-every", "2s"],
            "no long prompt would arrive",
        ),
        (&["--concurrency", "1,2"], "cannot be used with"),
    ] {
        let mut args = vec!["bench", "--url", url, "--mixed"];
        args.extend_from_slice(flags);
        let out = ctl(&args);
        assert!(!out.status.success(), "{flags:?} must fail");
        assert!(
            text(&out.stderr).contains(says),
            "{flags:?}: {}",
            text(&out.stderr)
        );
    }
    // A mixed flag without --mixed says what it needs.
    let out = ctl(&["bench", "--url", url, "--streams", "4"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--mixed"),
        "{}",
        text(&out.stderr)
    );
}
