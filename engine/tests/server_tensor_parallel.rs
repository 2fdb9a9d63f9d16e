//! `met serve --tensor-parallel-size N --device cpu` over real HTTP: rank 0 starts N - 1
//! `met rank` processes, meets them over TCP, and every step runs on every rank's shard.
//! What it serves must be what one process serves (the sharding's arithmetic is checked
//! position by position in `tensor_parallel.rs`; here the whole path: the rank processes, the
//! step broadcast, the KV cache and state pool on each rank, batching and prefix caching). A
//! rank that dies fails every request in flight and takes the server down with a non-zero
//! exit, never a hang.

mod reference_support;
mod server_support;

use std::process::Command;
use std::time::Duration;

use reference_support::model_dir;
use serde_json::{Value, json};
use server_support::Server;

async fn serve(name: &str, extra: &[&str]) -> Server {
    serve_env(name, extra, &[]).await
}

async fn serve_env(name: &str, extra: &[&str], env: &[(&str, &str)]) -> Server {
    let mut args: Vec<String> = ["serve", model_dir(name).to_str().expect("utf8")]
        .map(String::from)
        .to_vec();
    args.extend(["--port", "0", "--model-name", "test"].map(String::from));
    args.extend(extra.iter().map(|s| s.to_string()));
    Server::spawn_with_env(&args, env).await
}

/// `n` deterministic token ids of the fixtures' vocabulary (1536), different per `salt`.
fn prompt(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) ^ salt.wrapping_mul(40_503)) % 1500 + 20)
        .collect()
}

/// Greedy text and each token's log-probability.
async fn complete(s: &Server, prompt: &[u32], max_tokens: usize) -> (String, Vec<f64>) {
    let body = json!({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                      "ignore_eos": true, "logprobs": 1});
    let (status, v) = s.post("/v1/completions", &body).await;
    assert_eq!(status, 200, "{v}");
    let choice = &v["choices"][0];
    let logprobs = choice["logprobs"]["token_logprobs"]
        .as_array()
        .expect("logprobs")
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    (choice["text"].as_str().expect("text").to_owned(), logprobs)
}

async fn complete_all(s: &Server, prompts: &[Vec<u32>], n: usize) -> Vec<(String, Vec<f64>)> {
    futures_util::future::join_all(prompts.iter().map(|p| complete(s, p, n))).await
}

/// The same text, and log-probabilities within what summing the ranks' parts in another
/// order moves them (`tensor_parallel.rs` measures ≤ 1.5e-4 on the hybrids).
fn assert_same(got: &[(String, Vec<f64>)], want: &[(String, Vec<f64>)], what: &str) {
    for (i, ((gt, gl), (wt, wl))) in got.iter().zip(want).enumerate() {
        assert_eq!(gt, wt, "{what}: prompt {i}'s text");
        let worst = gl
            .iter()
            .zip(wl)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(
            worst <= 5e-4,
            "{what}: prompt {i}'s logprobs differ by {worst}"
        );
    }
}

/// A dense model over 2 ranks and a hybrid (Gated DeltaNet state on each rank) over 2, its
/// experts split by width and then whole (expert parallelism), four prompts batched, prefix
/// caching on: the text of one process.
#[tokio::test]
async fn ranks_serve_what_one_process_serves() {
    let prompts = vec![prompt(40, 1), prompt(7, 2), prompt(33, 3), prompt(40, 1)];
    for (name, extra) in [
        ("qwen3-gqa-tied", &["--enable-prefix-caching"][..]),
        (
            "qwen3_5-hybrid-moe",
            &["--enable-prefix-caching", "--ssm-checkpoint-interval", "16"][..],
        ),
    ] {
        let one = serve(name, extra).await;
        let want = complete_all(&one, &prompts, 12).await;
        drop(one);
        let mut args = extra.to_vec();
        args.extend([
            "--tensor-parallel-size",
            "2",
            "--max-num-batched-tokens",
            "16",
        ]);
        let two = serve(name, &args).await;
        let got = complete_all(&two, &prompts, 12).await;
        assert_same(&got, &want, name);
        // The repeated prompt came back from the prefix cache, on every rank's cache alike.
        let again = complete(&two, &prompts[0], 12).await;
        assert_same(&[again], &want[..1], name);
        assert!(two.metric("vllm:prefix_cache_hits_total").await > 0.0);
        drop(two);
        if name.contains("moe") {
            // The experts split whole over the ranks instead of by width.
            args.push("--enable-expert-parallel");
            let ep = serve(name, &args).await;
            let got = complete_all(&ep, &prompts, 12).await;
            assert_same(&got, &want, &format!("{name} EP=2"));
        }
    }
}

/// The pids of `parent`'s children.
fn children(parent: u32) -> Vec<u32> {
    let out = Command::new("pgrep")
        .args(["-P", &parent.to_string()])
        .output()
        .expect("pgrep");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Rank 1 lost mid-request (`signal` sent to its process): the request fails with a 503 that
/// says why (not a hang), the server prints the reason and exits non-zero, and no rank
/// outlives it. Returns the reason the server printed.
async fn lose_rank_1(signal: &str, extra: &[&str]) -> String {
    // Slow steps, so the request is still running when the rank is lost.
    let mut args = vec!["--tensor-parallel-size", "2", "--max-seq-len", "400"];
    args.extend(extra);
    let mut s = serve_env(
        "qwen3-gqa-tied",
        &args,
        &[("METRALE_DEBUG_STEP_DELAY_MS", "20")],
    )
    .await;
    let ranks = children(s.pid());
    assert_eq!(ranks.len(), 1, "rank 0 starts rank 1: {ranks:?}");
    let long = json!({"prompt": prompt(8, 5), "max_tokens": 300, "ignore_eos": true});
    let request = s.post("/v1/completions", &long);
    let lose = async {
        tokio::time::sleep(Duration::from_millis(600)).await;
        let ok = Command::new("kill")
            .args([signal, &ranks[0].to_string()])
            .status()
            .expect("kill");
        assert!(ok.success());
    };
    let ((status, v), ()) = tokio::join!(request, lose);
    assert_eq!(status, 503, "{v}");
    assert_eq!(v["error"]["code"], "engine_failed", "{v}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("rank 1"), "the 503 names the rank: {v}");
    let code = s.wait_exit(Duration::from_secs(20));
    assert!(!code.success(), "the server must exit non-zero: {code:?}");
    let said = s.stdout_lines().join("\n");
    assert!(said.contains("met: the engine stopped: "), "{said}");
    let alive = ranks
        .iter()
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|st| !st.contains(") Z "))
        })
        .count();
    assert_eq!(alive, 0, "the lost rank is still running");
    said
}

/// Killing rank 1 mid-request.
#[tokio::test]
async fn a_rank_that_dies_fails_the_requests_and_stops_the_server() {
    let said = lose_rank_1("-KILL", &[]).await;
    assert!(said.contains("that rank is gone"), "{said}");
}

/// Rank 1 stopped (alive, its links open, answering nothing) mid-request: rank 0 gives up
/// at `--dist-timeout` instead of waiting forever.
#[tokio::test]
async fn a_rank_that_is_stuck_fails_the_requests_at_the_dist_timeout() {
    let said = lose_rank_1("-STOP", &["--dist-timeout", "2"]).await;
    assert!(
        said.contains("sent nothing within --dist-timeout"),
        "{said}"
    );
}

/// What does not split, or needs what met lacks, is refused by name before serving.
#[tokio::test]
async fn sizes_that_do_not_split_and_cuda_ranks_are_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_met"))
        .arg("serve")
        .arg(model_dir("qwen3-gqa-tied"))
        .args(["--port", "0", "--no-tui", "--tensor-parallel-size", "3"])
        .output()
        .expect("met runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("num_attention_heads = 4 does not split over a tensor-parallel size of 3"),
        "{err}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_met"))
        .arg("serve")
        .arg(model_dir("qwen3-gqa-tied"))
        .args(["--port", "0", "--no-tui", "--device", "cuda"])
        .args(["--tensor-parallel-size", "2"])
        .output()
        .expect("met runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("need NCCL between the GPUs"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_met"))
        .arg("serve")
        .arg(model_dir("qwen3-gqa-tied"))
        .args(["--port", "0", "--no-tui", "--tensor-parallel-size", "2"])
        .arg("--enable-expert-parallel")
        .output()
        .expect("met runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has no routed experts to split"), "{err}");
}

/// Two hosts, played by this one: node 1 runs ranks 2 and 3 and joins node 0, which serves
/// with ranks 0 and 1, at `--master-addr:--master-port`. The four ranks serve what one
/// process serves; when node 0 stops, it stops node 1's ranks, and node 1 exits cleanly.
#[tokio::test]
async fn ranks_on_another_node_join_at_the_master_address() {
    let name = "qwen3-gqa-tied";
    let prompts = vec![prompt(21, 7), prompt(9, 8)];
    let one = serve(name, &[]).await;
    let want = complete_all(&one, &prompts, 10).await;
    drop(one);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
        .to_string();
    let nodes = |rank: &'static str| {
        [
            "--tensor-parallel-size",
            "4",
            "--nnodes",
            "2",
            "--node-rank",
            rank,
            "--master-addr",
            "127.0.0.1",
            "--master-port",
        ]
        .map(String::from)
        .into_iter()
        .chain([port.clone()])
        .collect::<Vec<_>>()
    };
    let mut node1 = Command::new(env!("CARGO_BIN_EXE_met"))
        .arg("serve")
        .arg(model_dir(name))
        .args(nodes("1"))
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("node 1 starts");
    let flags = nodes("0");
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut s = serve(name, &flags).await;
    assert_same(
        &complete_all(&s, &prompts, 10).await,
        &want,
        "TP=4 over 2 nodes",
    );
    s.sigterm();
    assert!(s.wait_exit(Duration::from_secs(20)).success());
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = node1.try_wait().expect("try_wait") {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "node 1 did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "node 1: {status:?}");
}
