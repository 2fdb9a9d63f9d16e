//! The newcomer's path, across both programs: `metralectl run demo --print --json` gives the
//! native `met serve` command for the shipped demo model; that exact command starts a server
//! that answers a chat request with readable text.

mod server_support;

use std::process::Command;

use serde_json::{Value, json};
use server_support::{Server, metralectl, repo_root};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_recipe_serves_the_shipped_model() {
    let out = Command::new(metralectl())
        .args(["run", "demo", "--print", "--json"])
        .current_dir(repo_root())
        .env(
            "METRALE_CONFIG_DIR",
            std::env::temp_dir().join("metrale-demo-recipe-test-empty"),
        )
        .output()
        .expect("run metralectl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: Value = serde_json::from_slice(&out.stdout).expect("run --print --json is JSON");
    let argv: Vec<String> = plan["native"]["argv"]
        .as_array()
        .expect("native argv")
        .iter()
        .map(|a| a.as_str().expect("string").to_string())
        .collect();
    assert_eq!(argv[..2], ["met", "serve"]);
    // The launcher's command as is, but on a free port.
    let mut args: Vec<String> = argv[1..].to_vec();
    let port = args.iter().position(|a| a == "--port").expect("--port");
    args[port + 1] = "0".into();
    let server = Server::spawn(&args).await;

    let (status, body) = server
        .post(
            "/v1/chat/completions",
            &json!({"model": "demo", "temperature": 0, "messages": [{"role": "user", "content": "What is the capital of France?"}]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let choice = &body["choices"][0];
    // Greedy, thinking off (the recipe says so): what transformers generates from these weights.
    assert_eq!(
        choice["message"]["content"],
        "The capital of France is Paris."
    );
    assert_eq!(choice["finish_reason"], "stop");
    assert_eq!(body["model"], "demo");
}
