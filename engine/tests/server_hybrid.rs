//! `met serve` on the Qwen3.5 hybrid fixture (Gated DeltaNet + gated attention), over real HTTP
//! on 127.0.0.1: each sequence's recurrent state lives in a slot of the cache manager beside
//! the paged KV cache. Greedy text must equal transformers' continuation, and whatever the
//! engine does around a sequence (batching it with others, prefilling it in chunks, preempting
//! and recomputing it, resuming it from a prefix checkpoint) must not change a token: each
//! output is checked against the same model run alone, one sequence from position 0
//! (`Qwen3_5::forward_sequence_chunk`, itself checked against transformers in
//! `qwen3_5_reference.rs`).

mod reference_support;
mod server_support;

use metrale_engine::backend::{Backend, CpuBackend};
use metrale_engine::loader::{LoadFormat, Weights};
use metrale_engine::models::qwen3_5::{Qwen3_5, Qwen3_5Config};
use metrale_engine::score::top_k_of;
use reference_support::{model_dir, reference};
use serde_json::{Value, json};
use server_support::Server;

const NAME: &str = "qwen3_5-hybrid-dense";

async fn serve(extra: &[&str]) -> Server {
    serve_model(NAME, extra).await
}

async fn serve_model(name: &str, extra: &[&str]) -> Server {
    serve_with_env(name, extra, &[]).await
}

async fn serve_with_env(name: &str, extra: &[&str], env: &[(&str, &str)]) -> Server {
    let mut args: Vec<String> = ["serve", model_dir(name).to_str().expect("utf8")]
        .map(String::from)
        .to_vec();
    args.extend(["--port", "0", "--model-name", "test"].map(String::from));
    args.extend(extra.iter().map(|s| s.to_string()));
    Server::spawn_with_env(&args, env).await
}

/// Greedy text for `prompt` (token ids) from the server.
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

async fn detokenize(s: &Server, tokens: &[u32]) -> String {
    let (status, v) = s.post("/detokenize", &json!({"tokens": tokens})).await;
    assert_eq!(status, 200, "{v}");
    v["prompt"].as_str().expect("prompt").to_owned()
}

/// Greedy continuation of `prompt` by the model alone: one sequence, prefilled whole, then
/// decoded one token a call.
fn alone(prompt: &[u32], max_tokens: usize) -> Vec<u32> {
    let dir = model_dir(NAME);
    let cfg = Qwen3_5Config::from_file(&dir.join("config.json")).expect("config");
    let model = Qwen3_5::load(
        &cfg,
        &Weights::open(&dir, LoadFormat::Auto).expect("weights"),
    )
    .expect("load");
    let mut state = model.new_state().expect("state");
    let mut input = prompt.to_vec();
    let mut out = Vec::new();
    while out.len() < max_tokens {
        let mut logits = model
            .forward_sequence_chunk(&mut state, &input)
            .expect("forward");
        CpuBackend::default()
            .log_softmax(&mut logits)
            .expect("log_softmax");
        let v = cfg.base.vocab_size;
        let next = top_k_of(&logits.data[logits.data.len() - v..], 1)[0].0;
        out.push(next);
        input = vec![next];
    }
    out
}

/// Each of `got` (the server's text for `prompts`) is the model's greedy text alone.
async fn assert_each_as_alone(s: &Server, prompts: &[Vec<u32>], got: &[String], n: usize) {
    for (p, got) in prompts.iter().zip(got) {
        let want = detokenize(s, &alone(p, n)).await;
        assert_eq!(got, &want, "prompt of {} tokens", p.len());
    }
}

/// `n` deterministic token ids of the fixture's vocabulary (1536), different per `salt`.
fn prompt(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) ^ salt.wrapping_mul(40_503)) % 1500 + 20)
        .collect()
}

async fn metric(s: &Server, name: &str) -> f64 {
    s.metric(name).await
}

/// The reference prompt alone, then four prompts at once (one step serves them all), each
/// equal to the model's output alone; the first is transformers' greedy continuation.
#[tokio::test]
async fn greedy_through_the_server_matches_transformers_alone_and_batched() {
    let s = serve(&["--max-batch-size", "4"]).await;
    let g = reference(NAME).greedy;
    let n = g.continuation.len();
    let want = detokenize(&s, &g.continuation).await;
    assert_eq!(complete(&s, &g.prompt, n).await, want);

    let prompts = vec![g.prompt.clone(), prompt(37, 1), prompt(5, 2), prompt(54, 3)];
    let batched = complete_all(&s, &prompts, 24).await;
    assert_each_as_alone(&s, &prompts, &batched, 24).await;
    assert!(batched[0].starts_with(&want));
    // The batch and the single request each held a state slot and gave it back.
    s.wait_metric("vllm:num_requests_running", |v| v == 0.0)
        .await;
}

/// Qwen3.5-MoE (routed experts + shared expert) serves transformers' greedy continuation,
/// alone and beside another request.
#[tokio::test]
async fn the_moe_hybrid_serves_transformers_greedy_continuation() {
    let name = "qwen3_5-hybrid-moe";
    let s = serve_model(name, &["--max-batch-size", "2"]).await;
    let g = reference(name).greedy;
    let n = g.continuation.len();
    let want = detokenize(&s, &g.continuation).await;
    let both = complete_all(&s, &[g.prompt.clone(), prompt(29, 11)], n).await;
    assert_eq!(both[0], want);
    assert_eq!(complete(&s, &g.prompt, n).await, want);
}

/// A step budget of 8 tokens splits every prompt into chunks (shorter than the conv window
/// and across the attention blocks), two sequences at a time.
#[tokio::test]
async fn chunked_prefill_gives_the_same_tokens() {
    let s = serve(&["--max-batch-size", "2", "--max-num-batched-tokens", "8"]).await;
    let prompts = vec![prompt(45, 4), prompt(19, 5)];
    let got = complete_all(&s, &prompts, 12).await;
    assert_each_as_alone(&s, &prompts, &got, 12).await;
}

/// A KV cache of 6 blocks (96 tokens) for four sequences of up to 80: the engine preempts,
/// frees the victims' state slots, and recomputes their state when they resume.
#[tokio::test]
async fn preemption_recomputes_the_state_and_changes_no_token() {
    let s = serve(&[
        "--max-batch-size",
        "4",
        "--num-gpu-blocks-override",
        "6",
        "--max-seq-len",
        "96",
    ])
    .await;
    let prompts = vec![prompt(30, 6), prompt(22, 7), prompt(41, 8), prompt(18, 9)];
    let got = complete_all(&s, &prompts, 36).await;
    assert_each_as_alone(&s, &prompts, &got, 36).await;
    assert!(
        metric(&s, "vllm:num_preemptions_total").await > 0.0,
        "the cache is too small for all four: some must have been preempted"
    );
}

/// Prefix caching with state checkpoints every 32 tokens: a second request sharing 100
/// tokens reuses 96 of them (the longest prefix that has both KV blocks and a checkpoint), a
/// third sharing 85 reuses 64 (its KV hit of 80 has no checkpoint at 80); both give the tokens
/// they give alone.
#[tokio::test]
async fn prefix_caching_resumes_from_state_checkpoints() {
    let s = serve(&["--enable-prefix-caching", "--ssm-checkpoint-interval", "32"]).await;
    let shared = prompt(100, 10);
    let with_tail = |n: usize, tail: &[u32]| -> Vec<u32> {
        let mut p = shared[..n].to_vec();
        p.extend_from_slice(tail);
        p
    };
    let (a, b, c) = (
        with_tail(100, &[31, 32, 33, 34, 35]),
        with_tail(100, &[41, 42, 43]),
        with_tail(85, &[51, 52, 53, 54, 55, 56, 57]),
    );
    let hits = "vllm:prefix_cache_hits_total";
    assert_eq!(
        complete(&s, &a, 10).await,
        detokenize(&s, &alone(&a, 10)).await
    );
    assert_eq!(metric(&s, hits).await, 0.0);
    assert_eq!(
        complete(&s, &b, 10).await,
        detokenize(&s, &alone(&b, 10)).await
    );
    assert_eq!(metric(&s, hits).await, 96.0);
    assert_eq!(
        complete(&s, &c, 10).await,
        detokenize(&s, &alone(&c, 10)).await
    );
    assert_eq!(metric(&s, hits).await, 96.0 + 64.0);
}

/// The start-up log names the state pool and its size.
#[tokio::test]
async fn the_state_pool_is_sized_from_the_config_and_logged() {
    let s = serve(&["--max-batch-size", "3", "--enable-prefix-caching"]).await;
    // 3 linear layers × (conv window 3 × 128 channels + state 4 × 16 × 16) × 4 bytes.
    let per_slot = 3 * (3 * 128 + 4 * 16 * 16) * 4;
    let line = s.wait_stdout_line("recurrent state").await;
    assert!(
        line.contains("3 sequence slots + 3 checkpoints (every 512 tokens)")
            && line.contains(&format!("{:.2} MiB", per_slot as f64 / (1 << 20) as f64)),
        "{line}"
    );
    let (_, v) = reqwest_get(&s, "/version").await;
    assert_eq!(v["settings"]["ssm_checkpoint_interval"], 512);
}

async fn reqwest_get(s: &Server, path: &str) -> (u16, Value) {
    let r = reqwest::get(s.url(path)).await.expect("get");
    let status = r.status().as_u16();
    (status, r.json().await.expect("json"))
}

/// `--speculative` with the fixture's (random) MTP head: transformers' greedy continuation
/// alone, then four at once with preemption (a cache too small for all) and prefix caching,
/// each the model's output alone; `/metrics` counts the drafts by position, as vLLM names
/// them. Drafts are free here (`--speculative-draft-cost 0`), so the random head drafts every
/// step and the roll back is exercised throughout.
#[tokio::test]
async fn speculation_serves_the_tokens_it_serves_without() {
    let s = serve(&[
        "--speculative",
        "--speculative-draft-cost",
        "0",
        "--num-drafts",
        "3",
        "--max-batch-size",
        "4",
        "--num-gpu-blocks-override",
        "8",
        "--max-seq-len",
        "120",
        "--enable-prefix-caching",
        "--ssm-checkpoint-interval",
        "16",
    ])
    .await;
    let g = reference(NAME).greedy;
    let n = g.continuation.len();
    let want = detokenize(&s, &g.continuation).await;
    assert_eq!(complete(&s, &g.prompt, n).await, want);

    let shared = prompt(33, 11);
    let prompts = vec![
        [shared.clone(), prompt(4, 12)].concat(),
        prompt(22, 13),
        [shared, prompt(9, 14)].concat(),
        prompt(5, 15),
    ];
    let got = complete_all(&s, &prompts, 30).await;
    assert_each_as_alone(&s, &prompts, &got, 30).await;
    let preempted = metric(&s, "vllm:num_preemptions_total").await;
    let hits = metric(&s, "vllm:prefix_cache_hits_total").await;
    assert!(
        preempted > 0.0 && hits > 0.0,
        "{preempted} preemptions, {hits} hit tokens"
    );
    let drafts = metric(&s, "vllm:spec_decode_num_draft_tokens_total").await;
    let verified = metric(&s, "vllm:spec_decode_num_drafts_total").await;
    assert!(
        drafts >= verified && verified > 20.0,
        "{drafts} drafts in {verified} verify steps"
    );
    let text = reqwest::get(s.url("/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    for p in 0..3 {
        let line = format!(
            "vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name=\"test\",position=\"{p}\"}}"
        );
        assert!(text.contains(&line), "no {line} in\n{text}");
    }
    assert!(!text.contains("position=\"3\""), "only 3 positions");
}

/// `/metrics` after a speculative run with adaptive drafting (the ladder of issue 33): drafts
/// verified and accepted by position, the policy's acceptance estimate and its drafts a step.
/// The random head's drafts are all but never right, so the engine stops paying for them
/// (greedy output unchanged); with every draft forced accepted it keeps the ladder's 3.
#[tokio::test]
async fn adaptive_drafting_shows_acceptance_by_position_in_metrics() {
    // The cost the bounds below were set at (a lower cost drafts longer before it stops).
    let args = [
        "--speculative",
        "--speculative-ladder",
        "1:3,2:2,8:1,32:0",
        "--speculative-draft-cost",
        "0.15",
    ];
    let at = |name: &str, p: usize| format!("{name},position=\"{p}\"");
    let verified = "metrale:spec_decode_num_draft_tokens_per_pos_total";
    let accepted = "vllm:spec_decode_num_accepted_tokens_per_pos_total";
    let estimate = "metrale:spec_decode_acceptance_per_pos";
    let now = "metrale:spec_decode_drafts_per_step";

    // Wrong drafts first, one a step at most: each drafting step then observes position 0,
    // so its estimate falls whatever the CPU's step times say. (With deeper drafts positions
    // 1-2 keep their prior, unobserved, and a loaded machine's noisy times could make two
    // drafts look cheap enough to pay at an estimate of 0.4.)
    let one = [
        "--speculative",
        "--speculative-ladder",
        "1:1,32:0",
        args[3],
        args[4],
    ];
    let s = serve(&one).await;
    let g = reference(NAME).greedy;
    let want = detokenize(&s, &g.continuation).await;
    assert_eq!(complete(&s, &g.prompt, g.continuation.len()).await, want);
    let p = prompt(12, 21);
    let got = complete(&s, &p, 80).await;
    assert_each_as_alone(&s, &[p], &[got], 80).await;
    let tokens = metric(&s, "vllm:generation_tokens_total").await;
    let tried = metric(&s, &at(verified, 0)).await;
    // How soon it stops depends on the times too: a plain step timed in a slow moment makes
    // a draft look nearly free, and the estimate must then fall below the floor's 0.05 first
    // (about 50 verifies; 65 of 96 tokens once with three copies of this test at once).
    assert!(
        tried >= 2.0 && tried < 0.9 * tokens,
        "{tried} first drafts verified for {tokens} tokens"
    );
    // The engine also times its steps: on the CPU a draft costs more than a plain step, so it
    // may stop drafting for the cost before the estimate reaches 0; the evidence still pulls
    // the estimate well below its prior (0.7).
    assert!(metric(&s, &at(estimate, 0)).await < 0.5);
    assert!(metric(&s, now).await <= 1.0, "only a probe drafts");

    // Every draft accepted, drafts free (cost 0: nothing timed, as a CPU step's times would
    // say drafts do not pay here): the estimates by position rise and the ladder's 3 stay.
    let free = [&args[..3], &["--speculative-draft-cost", "0"]].concat();
    let s = serve_with_env(NAME, &free, &[("METRALE_SPEC_FORCE_ACCEPT", "1")]).await;
    complete(&s, &prompt(12, 21), 80).await;
    for p in 0..3 {
        let (v, a) = (
            metric(&s, &at(verified, p)).await,
            metric(&s, &at(accepted, p)).await,
        );
        assert!(v > 5.0 && a == v, "position {p}: {a} of {v} accepted");
        let e = metric(&s, &at(estimate, p)).await;
        assert!(e > 0.9, "position {p}: estimated {e}");
    }
    assert_eq!(metric(&s, now).await, 3.0);
}

/// A checkpoint without an MTP head refuses `--speculative` by name before it serves.
#[test]
fn speculation_without_an_mtp_head_is_refused_at_start() {
    let dir = tempfile::tempdir().expect("tmp");
    let src = model_dir(NAME);
    for entry in std::fs::read_dir(&src).expect("fixture") {
        let path = entry.expect("entry").path();
        if path.file_name().is_some_and(|n| n != "mtp.safetensors") {
            std::fs::copy(&path, dir.path().join(path.file_name().expect("name"))).expect("copy");
        }
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_met"))
        .args(["serve", dir.path().to_str().expect("utf8"), "--port", "0"])
        .args(["--speculative"])
        .output()
        .expect("run met");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started without a head");
    assert!(
        stderr.contains("--speculative needs the checkpoint's MTP head")
            && stderr.contains("without --speculative"),
        "{stderr}"
    );
}

/// `--speculative` serves constrained requests (drafts are checked against the grammar,
/// issue 36): a `json_object` reply is a JSON object, and free requests still run.
#[tokio::test]
async fn speculative_serves_response_format() {
    let s = serve(&["--speculative", "--num-drafts", "2"]).await;
    let body = json!({"model": "test", "prompt": [1, 2, 3], "max_tokens": 64,
        "response_format": {"type": "json_object"}});
    let (status, v) = s.post("/v1/completions", &body).await;
    assert_eq!(status, 200, "{v}");
    // The grammar holds even a reply cut by max_tokens to an object's start; a whole one parses.
    let text = v["choices"][0]["text"].as_str().expect("text");
    assert!(text.trim_start().starts_with('{'), "{text:?}");
    if v["choices"][0]["finish_reason"] == "stop" {
        let parsed: serde_json::Value = serde_json::from_str(text).expect("a JSON reply");
        assert!(parsed.is_object(), "{text}");
    }
    let (status, v) = s
        .post(
            "/v1/completions",
            &json!({"model": "test", "prompt": [1, 2, 3], "max_tokens": 4}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
}
