//! `met serve` as clients see it: the real binary on 127.0.0.1, a fixture model (tiny random
//! Qwen3 whose text is noise but deterministic), real HTTP. Checked against transformers where
//! a reference exists (greedy continuation, prompt log-probabilities).

mod server_support;

use std::process::Command;

use serde_json::{Value, json};
use server_support::{Server, fixture_model, join_stream, repo_root, run_python_client};

fn reference() -> Value {
    let path = repo_root().join("tests/fixtures/qwen3-gqa-tied.reference.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("reference")).expect("json")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

fn chat(content: &str, extra: Value) -> Value {
    let mut body = json!({"model": "test", "messages": [{"role": "user", "content": content}]});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    body
}

#[tokio::test]
async fn greedy_completion_matches_transformers_and_usage_is_exact() {
    let s = Server::start(&[]).await;
    let r = reference();
    let prompt = ids(&r["greedy"]["prompt"]);
    let want = ids(&r["greedy"]["continuation"]);
    let (status, v) = s
        .post(
            "/v1/completions",
            &json!({"prompt": prompt, "max_tokens": want.len(), "temperature": 0, "ignore_eos": true}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let (_, text) = s.post("/detokenize", &json!({"tokens": want})).await;
    assert_eq!(v["choices"][0]["text"], text["prompt"]);
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["prompt_tokens"], prompt.len());
    assert_eq!(v["usage"]["completion_tokens"], want.len());
    assert_eq!(v["usage"]["total_tokens"], prompt.len() + want.len());
    assert_eq!(v["model"], "test");
    assert_eq!(v["object"], "text_completion");
}

/// Qwen3-MoE and FP8 checkpoints serve on the CPU like dense ones: greedy text is what
/// transformers generated.
#[tokio::test]
async fn moe_and_fp8_checkpoints_serve_transformers_greedy_continuation() {
    for name in ["qwen3-moe-mixed", "qwen3-moe-fp8"] {
        let fixtures = repo_root().join("tests/fixtures");
        let model = fixtures.join("models").join(name);
        let args = [
            "serve",
            model.to_str().expect("utf8"),
            "--port",
            "0",
            "--device",
            "cpu",
        ];
        let s = Server::spawn(&args.map(String::from)).await;
        let text = std::fs::read_to_string(fixtures.join(format!("{name}.reference.json")));
        let r: Value = serde_json::from_str(&text.expect("reference")).expect("json");
        let prompt = ids(&r["greedy"]["prompt"]);
        let want = ids(&r["greedy"]["continuation"]);
        let body = json!({"prompt": prompt, "max_tokens": want.len(), "temperature": 0,
                          "ignore_eos": true, "logprobs": 1});
        let (status, v) = s.post("/v1/completions", &body).await;
        assert_eq!(status, 200, "{name}: {v}");
        let (_, text) = s.post("/detokenize", &json!({"tokens": want})).await;
        assert_eq!(v["choices"][0]["text"], text["prompt"], "{name}");
        assert_eq!(v["usage"]["completion_tokens"], want.len(), "{name}");
    }
}

#[tokio::test]
async fn echo_with_logprobs_returns_the_prompts_logprobs_as_transformers_computed_them() {
    let s = Server::start(&[]).await;
    let seq = &reference()["sequences"][0];
    let tokens = ids(&seq["tokens"]);
    let (status, v) = s
        .post(
            "/v1/completions",
            &json!({"prompt": tokens, "max_tokens": 0, "echo": true, "logprobs": 1}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let lp = &v["choices"][0]["logprobs"];
    let got = lp["token_logprobs"].as_array().expect("token_logprobs");
    assert_eq!(got.len(), tokens.len());
    assert!(got[0].is_null(), "the first prompt token has no prediction");
    assert!(lp["top_logprobs"][0].is_null());
    for (i, want) in seq["next_token_logprobs"]
        .as_array()
        .expect("ref")
        .iter()
        .enumerate()
    {
        let g = got[i + 1].as_f64().expect("logprob");
        let w = want.as_f64().expect("f64");
        assert!((g - w).abs() < 1e-3, "position {}: {g} vs {w}", i + 1);
    }
    assert_eq!(v["usage"]["completion_tokens"], 0);
    let (_, text) = s.post("/detokenize", &json!({"tokens": tokens})).await;
    assert_eq!(v["choices"][0]["text"], text["prompt"]);
    // The demo command from the README, as a newcomer pastes it.
    let (status, v) = s
        .post(
            "/v1/chat/completions",
            &json!({"model":"test","messages":[{"role":"user","content":"hi"}], "max_tokens": 8}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert!(v["choices"][0]["message"]["content"].is_string());
}

#[tokio::test]
async fn streamed_text_is_byte_identical_to_non_streamed_for_the_same_seed() {
    let s = Server::start(&[]).await;
    for (path, chat_api) in [("/v1/chat/completions", true), ("/v1/completions", false)] {
        let mut body = if chat_api {
            chat("Tell me a story", json!({}))
        } else {
            json!({"prompt": "Once upon a time"})
        };
        let extra = json!({"seed": 1234, "temperature": 1.0, "n": 3, "max_tokens": 40});
        body.as_object_mut()
            .expect("obj")
            .extend(extra.as_object().expect("obj").clone());
        let (status, whole) = s.post(path, &body).await;
        assert_eq!(status, 200, "{whole}");
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
        let chunks = s.stream(path, &body).await;
        let streamed = join_stream(&chunks, chat_api);
        assert_eq!(streamed.len(), 3);
        for (i, (text, finish)) in streamed.iter().enumerate() {
            let c = &whole["choices"][i];
            let want = if chat_api {
                &c["message"]["content"]
            } else {
                &c["text"]
            };
            assert_eq!(want.as_str(), Some(text.as_str()), "{path} choice {i}");
            assert_eq!(c["finish_reason"].as_str(), finish.as_deref());
        }
        let texts: Vec<&String> = streamed.iter().map(|c| &c.0).collect();
        assert!(
            texts[0] != texts[1] || texts[1] != texts[2],
            "n choices use different seeds"
        );
        // The usage chunk comes last, with no choices, and counts the same as non-streamed.
        let usage: Value = serde_json::from_str(&chunks[chunks.len() - 2]).expect("json");
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(usage["usage"], whole["usage"]);
    }
}

#[tokio::test]
async fn continuous_usage_sends_a_chunk_with_the_count_for_every_token() {
    let s = Server::start(&[]).await;
    for (path, chat_api) in [("/v1/completions", false), ("/v1/chat/completions", true)] {
        let mut body = if chat_api {
            chat("Count with me", json!({}))
        } else {
            json!({"prompt": "Once upon a time"})
        };
        let extra = json!({"max_tokens": 12, "ignore_eos": true, "stream": true, "temperature": 0.0,
            "stream_options": {"include_usage": true, "continuous_usage_stats": true}});
        body.as_object_mut()
            .expect("obj")
            .extend(extra.as_object().expect("obj").clone());
        let chunks = s.stream(path, &body).await;
        let counts: Vec<u64> = chunks
            .iter()
            .filter(|c| *c != "[DONE]")
            .map(|c| serde_json::from_str::<Value>(c).expect("json"))
            .filter(|v| v["choices"].as_array().is_some_and(|c| !c.is_empty()))
            .filter(|v| !chat_api || v["choices"][0]["delta"]["role"].is_null())
            .map(|v| {
                v["usage"]["completion_tokens"]
                    .as_u64()
                    .expect("usage in every chunk")
            })
            .collect();
        // One chunk a generated token (the test model's steps yield one token each), counted
        // 1, 2, …, 12 whatever text each token had.
        assert_eq!(counts, (1..=12).collect::<Vec<u64>>(), "{path}");
        // The text is the same as without continuous usage.
        body["stream_options"] = json!({"include_usage": true});
        let plain = join_stream(&s.stream(path, &body).await, chat_api);
        assert_eq!(join_stream(&chunks, chat_api), plain, "{path}");
    }
}

#[tokio::test]
async fn same_seed_same_output_and_another_seed_another() {
    let s = Server::start(&[]).await;
    let run = |seed: u64| {
        let body = json!({"prompt": "abc", "seed": seed, "temperature": 1.0, "max_tokens": 30, "ignore_eos": true});
        let s = &s;
        async move { s.post("/v1/completions", &body).await.1["choices"][0]["text"].clone() }
    };
    let a = run(7).await;
    assert_eq!(a, run(7).await);
    assert_ne!(a, run(8).await);
}

#[tokio::test]
async fn stop_strings_match_across_tokens_and_never_leak() {
    let s = Server::start(&[]).await;
    let base = json!({"prompt": "The answer is", "seed": 5, "temperature": 1.0, "max_tokens": 40,
                      "ignore_eos": true, "logprobs": 0});
    let (_, v) = s.post("/v1/completions", &base).await;
    let tokens: Vec<String> = v["choices"][0]["logprobs"]["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|t| t.as_str().expect("str").to_owned())
        .collect();
    let full = v["choices"][0]["text"].as_str().expect("text").to_owned();
    // A stop string made of the end of one token and the start of the next, after some text.
    let clean = |t: &str| !t.is_empty() && !t.contains('\u{fffd}') && !t.contains("<|");
    let stop = (3..tokens.len() - 1)
        .filter(|&i| clean(&tokens[i]) && clean(&tokens[i + 1]))
        .map(|i| {
            let (a, b) = (&tokens[i], &tokens[i + 1]);
            format!(
                "{}{}",
                &a[a.char_indices().last().expect("char").0..],
                &b[..b.char_indices().nth(1).map_or(b.len(), |c| c.0)]
            )
        })
        .find(|stop| full.find(stop.as_str()).is_some_and(|at| at > 0))
        .expect("two clean adjacent tokens");
    let cut = full.find(&stop).expect("stop occurs");
    let mut body = base.clone();
    body["stop"] = json!(["never-happens", stop]);
    let (status, v) = s.post("/v1/completions", &body).await;
    assert_eq!(status, 200, "{v}");
    let c = &v["choices"][0];
    assert_eq!(c["text"].as_str(), Some(&full[..cut]), "stop {stop:?}");
    assert_eq!(c["finish_reason"], "stop");
    assert_eq!(c["stop_reason"].as_str(), Some(stop.as_str()));
    let used = v["usage"]["completion_tokens"].as_u64().expect("usage") as usize;
    assert!(used < tokens.len(), "generation stopped early ({used})");
    body["stream"] = json!(true);
    let chunks = s.stream("/v1/completions", &body).await;
    let joined = join_stream(&chunks, false);
    assert_eq!(joined[0].0, full[..cut]);
    assert_eq!(joined[0].1.as_deref(), Some("stop"));
    for c in &chunks[..chunks.len() - 1] {
        let v: Value = serde_json::from_str(c).expect("json");
        let piece = v["choices"][0]["text"].as_str().expect("text");
        assert!(!piece.contains(&stop), "stop leaked in {c}");
    }
}

#[tokio::test]
async fn stop_token_ids_end_the_choice_without_their_text() {
    let s = Server::start(&[]).await;
    let r = reference();
    let prompt = ids(&r["greedy"]["prompt"]);
    let cont = ids(&r["greedy"]["continuation"]);
    // The first token of the continuation that did not occur before it.
    let k = (1..cont.len())
        .find(|&k| !cont[..k].contains(&cont[k]))
        .expect("a new token");
    let (_, v) = s
        .post(
            "/v1/completions",
            &json!({"prompt": prompt, "max_tokens": 16, "temperature": 0, "ignore_eos": true,
                    "stop_token_ids": [cont[k]]}),
        )
        .await;
    let c = &v["choices"][0];
    assert_eq!(c["finish_reason"], "stop");
    assert_eq!(c["stop_reason"], cont[k]);
    assert_eq!(v["usage"]["completion_tokens"], k + 1);
    let (_, text) = s.post("/detokenize", &json!({"tokens": &cont[..k]})).await;
    assert_eq!(c["text"], text["prompt"]);
}

#[tokio::test]
async fn chat_logprobs_cover_every_token_with_exact_bytes() {
    let s = Server::start(&[]).await;
    let body = chat(
        "hello",
        json!({"logprobs": true, "top_logprobs": 3, "max_tokens": 12, "seed": 3, "ignore_eos": true}),
    );
    let (status, v) = s.post("/v1/chat/completions", &body).await;
    assert_eq!(status, 200, "{v}");
    let content = v["choices"][0]["logprobs"]["content"]
        .as_array()
        .expect("content");
    assert_eq!(content.len(), 12);
    let mut bytes = Vec::new();
    for t in content {
        assert_eq!(t["top_logprobs"].as_array().expect("top").len(), 3);
        assert!(t["logprob"].as_f64().expect("lp") <= 0.0);
        bytes.extend(
            t["bytes"]
                .as_array()
                .expect("bytes")
                .iter()
                .map(|b| b.as_u64().expect("byte") as u8),
        );
    }
    let text = v["choices"][0]["message"]["content"]
        .as_str()
        .expect("text");
    assert_eq!(String::from_utf8_lossy(&bytes), text);
}

#[tokio::test]
async fn bad_requests_get_the_envelope_naming_the_field_and_harm_nobody() {
    let s = Server::start(&["--max-seq-len", "64"]).await;
    let long = "word ".repeat(100);
    // (path, body, status, param, code)
    type Case<'a> = (&'a str, Value, u16, Option<&'a str>, Option<&'a str>);
    let cases: Vec<Case> = vec![
        (
            "/v1/chat/completions",
            json!({"messages": []}),
            400,
            Some("messages"),
            None,
        ),
        (
            "/v1/chat/completions",
            json!({"model": "test"}),
            400,
            Some("messages"),
            None,
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "robot", "content": "x"}]}),
            400,
            Some("messages[0].role"),
            None,
        ),
        (
            "/v1/chat/completions",
            chat("x", json!({"temperature": "hot"})),
            400,
            Some("temperature"),
            None,
        ),
        (
            "/v1/chat/completions",
            chat("x", json!({"temperature": 2.5})),
            400,
            Some("temperature"),
            None,
        ),
        (
            "/v1/chat/completions",
            chat("x", json!({"top_p": 0})),
            400,
            Some("top_p"),
            None,
        ),
        (
            "/v1/chat/completions",
            chat("x", json!({"n": 0})),
            400,
            Some("n"),
            None,
        ),
        (
            "/v1/chat/completions",
            chat("x", json!({"top_logprobs": 21, "logprobs": true})),
            400,
            Some("top_logprobs"),
            None,
        ),
        (
            "/v1/chat/completions",
            chat("x", json!({"max_tokens": 60})),
            400,
            Some("max_tokens"),
            Some("context_length_exceeded"),
        ),
        (
            "/v1/chat/completions",
            chat(&long, json!({})),
            400,
            Some("messages"),
            Some("context_length_exceeded"),
        ),
        (
            "/v1/chat/completions",
            chat("x", json!({"model": "gpt-4"})),
            404,
            Some("model"),
            Some("model_not_found"),
        ),
        (
            "/v1/chat/completions",
            chat("x", json!({"stop": 5})),
            400,
            Some("stop"),
            None,
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
            400,
            Some("messages[0].content[0].type"),
            Some("unsupported_parameter"),
        ),
        (
            "/v1/completions",
            json!({"prompt": [1, 99999]}),
            400,
            Some("prompt"),
            None,
        ),
        (
            "/v1/completions",
            json!({"prompt": []}),
            400,
            Some("prompt"),
            None,
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "stop_token_ids": [99999]}),
            400,
            Some("stop_token_ids[0]"),
            None,
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "max_tokens": 0}),
            400,
            Some("max_tokens"),
            None,
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "seed": "x"}),
            400,
            Some("seed"),
            None,
        ),
        (
            "/detokenize",
            json!({"tokens": [99999]}),
            400,
            Some("tokens[0]"),
            None,
        ),
    ];
    for (path, body, status, param, code) in cases {
        let (got, v) = s.post(path, &body).await;
        assert_eq!(got, status, "{body} → {v}");
        let e = &v["error"];
        assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
        assert!(e["type"].is_string(), "{v}");
        assert_eq!(e["param"].as_str(), param, "{body} → {v}");
        assert_eq!(e["code"].as_str(), code, "{body} → {v}");
    }
    let client = reqwest::Client::new();
    let raw = |body: Vec<u8>| {
        client
            .post(s.url("/v1/chat/completions"))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let r = raw(b"{\"messages\": [{\"role\": \"user\", \"content\": \"\xe4\xbd\"}]}".to_vec())
        .await
        .expect("send");
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["error"]["param"], "messages[0].content");
    let r = raw(b"{not json".to_vec()).await.expect("send");
    assert_eq!(r.status(), 400);
    // Over the 32 MiB limit: refused from the headers, before the body is read.
    let head = oversized_request_head(&s.base).await;
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    assert!(head.contains("request_too_large"), "{head}");
    let r = client.get(s.url("/v1/nothing")).send().await.expect("send");
    assert_eq!(r.status(), 404);
    assert!(r.json::<Value>().await.expect("json")["error"].is_object());
    // Still serving.
    let (status, _) = s
        .post("/v1/chat/completions", &chat("x", json!({"max_tokens": 2})))
        .await;
    assert_eq!(status, 200);
}

/// Send only the headers of a 33 MiB body and read what comes back.
async fn oversized_request_head(base: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.trim_start_matches("http://");
    let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{{",
        33 << 20
    );
    tcp.write_all(head.as_bytes()).await.expect("write");
    let mut buf = vec![0u8; 4096];
    let mut got = Vec::new();
    while !String::from_utf8_lossy(&got).contains("}}") {
        let n = tokio::time::timeout(std::time::Duration::from_secs(10), tcp.read(&mut buf))
            .await
            .expect("an answer before the body is sent")
            .expect("read");
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test]
async fn api_key_guards_the_api_but_not_the_probes() {
    let s = Server::start(&["--api-key", "sekrit"]).await;
    let client = reqwest::Client::new();
    let body = chat("x", json!({"max_tokens": 2}));
    let r = client
        .post(s.url("/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 401);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["error"]["code"], "invalid_api_key");
    for auth in ["Bearer wrong", "sekrit"] {
        let r = client
            .post(s.url("/v1/chat/completions"))
            .header("authorization", auth)
            .json(&body)
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), 401, "{auth}");
    }
    let r = client
        .post(s.url("/v1/chat/completions"))
        .bearer_auth("sekrit")
        .json(&body)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 200);
    for path in ["/health", "/ready", "/metrics"] {
        let r = client.get(s.url(path)).send().await.expect("send");
        assert_eq!(r.status(), 200, "{path}");
    }
    let r = client.get(s.url("/v1/models")).send().await.expect("send");
    assert_eq!(r.status(), 401);
    // `/version` tells what is serving, with the key's value withheld from the flags it echoes.
    let r = client.get(s.url("/version")).send().await.expect("send");
    assert_eq!(r.status(), 401);
    let v: Value = client
        .get(s.url("/version"))
        .bearer_auth("sekrit")
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    assert_eq!(v["build"]["name"], "met");
    assert_eq!(v["build"]["version"], env!("CARGO_PKG_VERSION"));
    let commit = v["build"]["git_commit"].as_str().expect("commit");
    assert!(commit == "unknown" || commit.len() == 40, "{commit}");
    let args: Vec<&str> = v["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(args.contains(&"--api-key"), "{args:?}");
    assert!(!args.contains(&"sekrit"), "the key leaked: {args:?}");
    assert_eq!(v["settings"]["device"], "cpu");
    assert_eq!(v["settings"]["api_key"], true);
    assert_eq!(v["engine"]["device"], "cpu");
    let blocks = v["engine"]["kv_cache_blocks"].as_u64().expect("blocks");
    assert!(blocks > 0);
    assert_eq!(
        v["engine"]["kv_cache_tokens"],
        blocks * v["settings"]["block_size"].as_u64().expect("bs")
    );
}

#[tokio::test]
async fn models_tokenize_and_metrics_speak_their_formats() {
    let s = Server::start(&["--max-seq-len", "256"]).await;
    let v: Value = reqwest::get(s.url("/v1/models"))
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert_eq!(v["data"][0]["id"], "test");
    assert_eq!(v["data"][0]["max_model_len"], 256);
    let (_, t) = s.post("/tokenize", &json!({"prompt": "hello world"})).await;
    assert_eq!(t["count"], t["tokens"].as_array().expect("tokens").len());
    assert_eq!(t["max_model_len"], 256);
    let (_, d) = s.post("/detokenize", &json!({"tokens": t["tokens"]})).await;
    assert_eq!(d["prompt"], "hello world");
    // Chat usage counts exactly the tokens the template produced.
    let msgs =
        json!([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]);
    let (_, t) = s.post("/tokenize", &json!({"messages": msgs})).await;
    let (_, v) = s
        .post(
            "/v1/chat/completions",
            &json!({"messages": msgs, "max_tokens": 3, "ignore_eos": true}),
        )
        .await;
    assert_eq!(v["usage"]["prompt_tokens"], t["count"]);
    assert_eq!(
        s.metric("vllm:request_success_total,finished_reason=\"length\"")
            .await,
        1.0
    );
    assert_eq!(s.metric("vllm:generation_tokens_total").await, 3.0);
    assert_eq!(
        s.metric("vllm:e2e_request_latency_seconds_count").await,
        1.0
    );
    assert_eq!(
        s.metric("vllm:time_to_first_token_seconds_count").await,
        1.0
    );
    assert_eq!(
        s.metric("vllm:inter_token_latency_seconds_count").await,
        2.0
    );
    // Gauges are updated after the step that answered: wait for them to settle.
    s.wait_metric("vllm:num_requests_running", |v| v == 0.0)
        .await;
    s.wait_metric("vllm:kv_cache_usage_perc", |v| v == 0.0)
        .await;
}

#[test]
fn flags_that_cannot_work_fail_at_start() {
    let model = fixture_model();
    let model = model.to_str().expect("utf8");
    let cases: [(&[&str], &str); 7] = [
        (
            &["--dtype", "float32", "--kv-cache-dtype", "fp8"],
            "the float32 path keeps an f32 cache",
        ),
        (
            &["--max-seq-len", "100000"],
            "--max-seq-len: 100000 exceeds",
        ),
        (&["--device", "cuda"], "no CUDA backend"),
        (
            &["--max-batch-size", "8", "--max-num-batched-tokens", "4"],
            "--max-num-batched-tokens",
        ),
        (
            &["--gpu-memory-utilization", "0"],
            "--gpu-memory-utilization",
        ),
        (&["--no-such-flag"], "unexpected argument '--no-such-flag'"),
        // What the flagship recipe passes, on a checkpoint without an MTP head: refused with
        // the way to serve it.
        (
            &["--speculative", "--num-drafts", "3"],
            "--speculative: needs the checkpoint's multi-token-prediction (MTP) head",
        ),
    ];
    for (flags, want) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_met"))
            .args(["serve", model, "--port", "0"])
            .args(flags)
            .output()
            .expect("run met");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flags:?} started");
        assert!(stderr.contains(want), "{flags:?}: {stderr}");
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("listening"),
            "{flags:?} bound a socket before failing"
        );
    }
}

/// The official `openai` Python package against the server (tests/clients/). The interpreter
/// is `$METRALE_PYTHON`, default `python3`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_python_client_works() {
    let s = Server::start(&[]).await;
    run_python_client(
        "openai",
        "test_openai_client.py",
        &[("METRALE_BASE_URL", s.url("/v1"))],
    )
    .await;
}

#[tokio::test]
async fn disable_thinking_is_a_default_that_requests_override() {
    let plain = Server::start(&[]).await;
    let off = Server::start(&["--disable-thinking"]).await;
    async fn count(s: &Server, kwargs: Value) -> u64 {
        let mut body = json!({"messages": [{"role": "user", "content": "hi"}]});
        if !kwargs.is_null() {
            body["chat_template_kwargs"] = kwargs;
        }
        s.post("/tokenize", &body).await.1["count"]
            .as_u64()
            .expect("count")
    }
    let thinking = count(&plain, Value::Null).await;
    let not_thinking = count(&off, Value::Null).await;
    assert!(not_thinking > thinking, "an empty think block is added");
    assert_eq!(
        count(&off, json!({"enable_thinking": true})).await,
        thinking
    );
    assert_eq!(
        count(&plain, json!({"enable_thinking": false})).await,
        not_thinking
    );
}
