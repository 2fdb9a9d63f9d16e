//! Structured outputs (`response_format`, `logit_bias`) on the shipped demo model, driven by
//! the official `openai` Python client (tests/clients/test_structured_outputs.py): 50 varied
//! JSON schemas whose replies must all validate with `jsonschema`, `json_object`, a reply cut
//! by `max_tokens` reported as `length`, `logit_bias`, and bad schemas refused by name; and
//! forced tool calls under the hermes call grammar through both official clients
//! (tests/clients/test_forced_tool_calls.py).

mod server_support;

use server_support::{Server, repo_root, run_python_client};

/// `met serve` on the shipped demo model, served as `demo`, with `extra` flags.
async fn demo(extra: &[&str]) -> Server {
    let mut args: Vec<String> = vec![
        "serve".into(),
        repo_root().join("models/demo").display().to_string(),
    ];
    args.extend(["--port", "0", "--model-name", "demo"].map(String::from));
    args.extend(extra.iter().map(|s| s.to_string()));
    Server::spawn(&args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_outputs_validate_through_the_openai_client() {
    let s = demo(&[]).await;
    run_python_client(
        "jsonschema",
        "test_structured_outputs.py",
        &[("METRALE_BASE_URL", s.url("/v1"))],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_hermes_tool_calls_validate_through_both_clients() {
    let s = demo(&["--tool-call-parser", "hermes"]).await;
    // The Anthropic client appends `/v1/messages` itself.
    run_python_client(
        "anthropic",
        "test_forced_tool_calls.py",
        &[("METRALE_BASE_URL", s.url(""))],
    )
    .await;
}
