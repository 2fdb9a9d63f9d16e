//! Structured outputs (`response_format`, `logit_bias`) on the shipped demo model, driven by
//! the official `openai` Python client (tests/clients/test_structured_outputs.py): 50 varied
//! JSON schemas whose replies must all validate with `jsonschema`, `json_object`, a reply cut
//! by `max_tokens` reported as `length`, `logit_bias`, and bad schemas refused by name; and
//! forced tool calls under the hermes, llama3_json and mistral call grammars through both
//! official clients (tests/clients/test_forced_tool_calls.py), each parsed back by its format's
//! parser.

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

/// Llama 3's JSON calls (issue 39): the same forced calls in its format, parsed back by
/// `--tool-call-parser llama3_json`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_llama3_json_tool_calls_validate_through_both_clients() {
    let s = demo(&["--tool-call-parser", "llama3_json"]).await;
    run_python_client(
        "anthropic",
        "test_forced_tool_calls.py",
        &[("METRALE_BASE_URL", s.url(""))],
    )
    .await;
}

/// Mistral's `[TOOL_CALLS]name[ARGS]{...}` calls (issue 39), parsed back by
/// `--tool-call-parser mistral`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_mistral_tool_calls_validate_through_both_clients() {
    let s = demo(&["--tool-call-parser", "mistral"]).await;
    run_python_client(
        "anthropic",
        "test_forced_tool_calls.py",
        &[("METRALE_BASE_URL", s.url(""))],
    )
    .await;
}
