//! `met serve` on the Nemotron-H fixture (Mamba-2, attention and relu² MLP layers), over real
//! HTTP on 127.0.0.1: each sequence's Mamba state lives in a slot of the cache manager's state
//! pool beside the paged KV cache, as Qwen3.5's Gated DeltaNet state does
//! (`server_hybrid.rs`). Greedy text must equal transformers' continuation, and batching,
//! chunked prefill, preemption and resuming from a prefix checkpoint must not change a token:
//! each output is checked against the same prompt served alone by a plain server (one
//! sequence at a time, prefilled whole), whose model `family_reference.rs` checks against
//! transformers.

mod reference_support;
mod server_support;

use reference_support::{model_dir, reference};
use serde_json::json;
use server_support::Server;

const NAME: &str = "nemotron-h-tiny";

async fn serve(extra: &[&str]) -> Server {
    let mut args: Vec<String> = ["serve", model_dir(NAME).to_str().expect("utf8")]
        .map(String::from)
        .to_vec();
    args.extend(["--port", "0", "--model-name", "test"].map(String::from));
    args.extend(extra.iter().map(|s| s.to_string()));
    Server::spawn(&args).await
}

/// Greedy token ids for `prompt` (token ids) from the server.
async fn complete(s: &Server, prompt: &[u32], max_tokens: usize) -> String {
    let body = json!({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                      "ignore_eos": true});
    let (status, v) = s.post("/v1/completions", &body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], max_tokens, "{v}");
    v["choices"][0]["text"].as_str().expect("text").to_owned()
}

/// All `prompts` at once: the engine batches them in the same steps.
async fn complete_all(s: &Server, prompts: &[Vec<u32>], max_tokens: usize) -> Vec<String> {
    futures_util::future::join_all(prompts.iter().map(|p| complete(s, p, max_tokens))).await
}

/// Each prompt served alone, one after the other, by a server that batches nothing and
/// prefills every prompt whole.
async fn alone(prompts: &[Vec<u32>], max_tokens: usize) -> Vec<String> {
    let s = serve(&["--max-batch-size", "1"]).await;
    let mut out = Vec::new();
    for p in prompts {
        out.push(complete(&s, p, max_tokens).await);
    }
    out
}

/// `n` deterministic token ids of the fixture's vocabulary (1536), different per `salt`.
fn prompt(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) ^ salt.wrapping_mul(40_503)) % 1500 + 20)
        .collect()
}

/// transformers' greedy continuation through the server; then four prompts at once (one step
/// serves them all) give what each gives alone.
#[tokio::test]
async fn greedy_through_the_server_matches_transformers_alone_and_batched() {
    let g = reference(NAME).greedy;
    let n = g.continuation.len();
    let prompts = vec![g.prompt.clone(), prompt(37, 1), prompt(5, 2), prompt(54, 3)];
    let want = alone(&prompts, n).await;
    let s = serve(&["--max-batch-size", "4"]).await;
    let (status, v) = s
        .post("/detokenize", &json!({"tokens": g.continuation}))
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        complete(&s, &g.prompt, n).await,
        v["prompt"],
        "transformers"
    );
    assert_eq!(complete_all(&s, &prompts, n).await, want);
    // The batch and the single request each held a state slot and gave it back.
    s.wait_metric("vllm:num_requests_running", |v| v == 0.0)
        .await;
}

/// A step budget of 8 tokens splits every prompt into chunks (some shorter than the conv
/// window), two sequences at a time; a KV cache too small for four sequences preempts some
/// and recomputes their state when they resume.
#[tokio::test]
async fn chunked_prefill_and_preemption_change_no_token() {
    let prompts = vec![prompt(45, 4), prompt(19, 5), prompt(41, 8), prompt(18, 9)];
    let want = alone(&prompts, 36).await;
    let chunked = serve(&["--max-batch-size", "2", "--max-num-batched-tokens", "8"]).await;
    assert_eq!(complete_all(&chunked, &prompts[..2], 36).await, want[..2]);
    let small = serve(&[
        "--max-batch-size",
        "4",
        "--num-gpu-blocks-override",
        "6",
        "--max-seq-len",
        "96",
    ])
    .await;
    assert_eq!(complete_all(&small, &prompts, 36).await, want);
    assert!(
        small.metric("vllm:num_preemptions_total").await > 0.0,
        "the cache is too small for all four: some must have been preempted"
    );
}

/// Prefix caching with state checkpoints every 32 tokens: a second request sharing 100 tokens
/// reuses 96 of them (the longest prefix with both KV blocks and a Mamba checkpoint), a third
/// sharing 85 reuses 64; each gives the tokens it gives alone.
#[tokio::test]
async fn prefix_caching_resumes_from_state_checkpoints() {
    let shared = prompt(100, 10);
    let with_tail = |n: usize, tail: &[u32]| -> Vec<u32> {
        let mut p = shared[..n].to_vec();
        p.extend_from_slice(tail);
        p
    };
    let prompts = [
        with_tail(100, &[31, 32, 33, 34, 35]),
        with_tail(100, &[41, 42, 43]),
        with_tail(85, &[51, 52, 53, 54, 55, 56, 57]),
    ];
    let want = alone(&prompts, 10).await;
    let s = serve(&["--enable-prefix-caching", "--ssm-checkpoint-interval", "32"]).await;
    let hits = "vllm:prefix_cache_hits_total";
    assert_eq!(complete(&s, &prompts[0], 10).await, want[0]);
    assert_eq!(s.metric(hits).await, 0.0);
    assert_eq!(complete(&s, &prompts[1], 10).await, want[1]);
    assert_eq!(s.metric(hits).await, 96.0);
    assert_eq!(complete(&s, &prompts[2], 10).await, want[2]);
    assert_eq!(s.metric(hits).await, 96.0 + 64.0);
}

/// The start-up log sizes the pool from the Mamba layers: conv window and SSM state.
#[tokio::test]
async fn the_state_pool_is_sized_from_the_mamba_layers() {
    let s = serve(&["--max-batch-size", "3"]).await;
    // 3 Mamba layers × (conv window 3 × (64 + 2·2·16) channels + state 8 × 8 × 16) × 4 bytes.
    let per_slot = 3 * (3 * 128 + 8 * 8 * 16) * 4;
    let line = s.wait_stdout_line("recurrent state").await;
    assert!(
        line.contains("3 sequence slots")
            && line.contains(&format!("{:.2} MiB", per_slot as f64 / (1 << 20) as f64)),
        "{line}"
    );
}
