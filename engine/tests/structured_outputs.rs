//! Structured outputs (`response_format`, `logit_bias`) on the shipped demo model, driven by
//! the official `openai` Python client (tests/clients/test_structured_outputs.py): 50 varied
//! JSON schemas whose replies must all validate with `jsonschema`, `json_object`, a reply cut
//! by `max_tokens` reported as `length`, `logit_bias`, and bad schemas refused by name.

mod server_support;

use server_support::{Server, repo_root, run_python_client};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_outputs_validate_through_the_openai_client() {
    let demo = repo_root().join("models/demo").display().to_string();
    let args: Vec<String> = vec![
        "serve".into(),
        demo,
        "--port".into(),
        "0".into(),
        "--model-name".into(),
        "demo".into(),
    ];
    let s = Server::spawn(&args).await;
    run_python_client(
        "jsonschema",
        "test_structured_outputs.py",
        &[("METRALE_BASE_URL", s.url("/v1"))],
    )
    .await;
}
