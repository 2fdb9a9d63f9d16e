//! The Anthropic Messages API and tool use over real HTTP on 127.0.0.1, against the real
//! `met serve` on the fixture model, plus the official `anthropic` Python client.

mod server_support;

use std::process::Command;

use serde_json::{Value, json};
use server_support::{SLOW_STEPS, Server, repo_root, run_python_client};

const PARSERS: [&str; 4] = [
    "--tool-call-parser",
    "hermes",
    "--reasoning-parser",
    "qwen3",
];

fn msg(extra: Value) -> Value {
    let mut body = json!({"model": "test", "max_tokens": 16, "temperature": 0,
                          "messages": [{"role": "user", "content": "Tell me a story."}]});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    body
}

fn weather() -> Value {
    json!({"name": "get_weather", "description": "Weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}})
}

/// `event:` name and parsed `data:` of each SSE event.
fn sse_events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter_map(|ev| {
            let name = ev.lines().find_map(|l| l.strip_prefix("event: "))?;
            let data = ev.lines().find_map(|l| l.strip_prefix("data: "))?;
            Some((
                name.to_owned(),
                serde_json::from_str(data).expect("data is JSON"),
            ))
        })
        .collect()
}

async fn stream(s: &Server, body: &Value) -> Vec<(String, Value)> {
    let r = s.send("/v1/messages", body).await;
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .expect("ascii")
            .starts_with("text/event-stream")
    );
    sse_events(&r.text().await.expect("body"))
}

/// Rebuild the message a stream describes, as the clients do.
fn assemble(events: &[(String, Value)]) -> Value {
    let mut message = events[0].1["message"].clone();
    let mut json_parts: Vec<String> = Vec::new();
    for (name, data) in events {
        assert_eq!(
            name,
            data["type"].as_str().expect("type"),
            "event name = type"
        );
        let i = data["index"].as_u64().unwrap_or(0) as usize;
        match name.as_str() {
            "content_block_start" => {
                message["content"]
                    .as_array_mut()
                    .expect("content")
                    .push(data["content_block"].clone());
                json_parts.push(String::new());
            }
            "content_block_delta" => {
                let block = &mut message["content"][i];
                let d = &data["delta"];
                match d["type"].as_str().expect("delta type") {
                    "text_delta" => {
                        let t = format!(
                            "{}{}",
                            block["text"].as_str().expect("text"),
                            d["text"].as_str().expect("text")
                        );
                        block["text"] = Value::String(t);
                    }
                    "thinking_delta" => {
                        let t = format!(
                            "{}{}",
                            block["thinking"].as_str().expect("thinking"),
                            d["thinking"].as_str().expect("thinking")
                        );
                        block["thinking"] = Value::String(t);
                    }
                    "input_json_delta" => {
                        json_parts[i].push_str(d["partial_json"].as_str().expect("json"));
                    }
                    other => panic!("unknown delta {other}"),
                }
            }
            "message_delta" => {
                message["stop_reason"] = data["delta"]["stop_reason"].clone();
                message["stop_sequence"] = data["delta"]["stop_sequence"].clone();
                message["usage"]["output_tokens"] = data["usage"]["output_tokens"].clone();
            }
            _ => {}
        }
    }
    for (i, j) in json_parts.iter().enumerate() {
        if !j.is_empty() {
            message["content"][i]["input"] = serde_json::from_str(j).expect("input JSON");
        }
    }
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_whole_and_streamed_say_the_same_in_anthropics_event_order() {
    let s = Server::start(&PARSERS).await;
    // `/version` reports the parsers by their flag names, as a record reproduces them.
    let v: Value = reqwest::get(s.url("/version"))
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert_eq!(v["settings"]["tool_call_parser"], "hermes");
    assert_eq!(v["settings"]["reasoning_parser"], "qwen3");
    let (status, whole) = s.post("/v1/messages", &msg(json!({}))).await;
    assert_eq!(status, 200, "{whole}");
    assert_eq!(whole["type"], "message");
    assert_eq!(whole["role"], "assistant");
    assert!(whole["id"].as_str().expect("id").starts_with("msg_"));
    let out = whole["usage"]["output_tokens"].as_u64().expect("output");
    assert!((1..=16).contains(&out), "{whole}");
    let events = stream(&s, &msg(json!({"stream": true}))).await;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[..2], ["message_start", "ping"]);
    assert_eq!(names[names.len() - 2..], ["message_delta", "message_stop"]);
    assert_eq!(events[0].1["message"]["content"], json!([]));
    assert_eq!(events[0].1["message"]["stop_reason"], Value::Null);
    let mut rebuilt = assemble(&events);
    // The stream cannot know the cache hit before it starts; the whole reply can.
    rebuilt["usage"] = whole["usage"].clone();
    rebuilt["id"] = whole["id"].clone();
    assert_eq!(rebuilt, whole);

    // count_tokens counts what generation is given.
    let (status, count) = s
        .post(
            "/v1/messages/count_tokens",
            &msg(json!({"system": "Be brief."})),
        )
        .await;
    assert_eq!(status, 200, "{count}");
    let (_, r) = s
        .post(
            "/v1/messages",
            &msg(json!({"system": [{"type": "text", "text": "Be brief."}], "max_tokens": 1})),
        )
        .await;
    let u = &r["usage"];
    assert_eq!(
        u["input_tokens"].as_u64().expect("in") + u["cache_read_input_tokens"].as_u64().expect("c"),
        count["input_tokens"].as_u64().expect("count")
    );
    // The same prompt through the OpenAI side renders to the same tokens.
    let (_, t) = s
        .post(
            "/tokenize",
            &json!({"messages": [{"role": "system", "content": "Be brief."},
                                 {"role": "user", "content": "Tell me a story."}]}),
        )
        .await;
    assert_eq!(t["count"], count["input_tokens"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_errors_use_anthropics_envelope() {
    let s = Server::start(&["--api-key", "sekret", "--tool-call-parser", "qwen3_coder"]).await;
    let client = reqwest::Client::new();
    let post = |body: Value, key: &'static str| {
        let req = client
            .post(s.url("/v1/messages"))
            .header("x-api-key", key)
            .header("anthropic-version", "2023-06-01")
            .json(&body);
        async move {
            let r = req.send().await.expect("send");
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.expect("json"))
        }
    };
    let (status, v) = post(msg(json!({})), "wrong").await;
    assert_eq!(
        (status, &v["type"], &v["error"]["type"]),
        (401, &json!("error"), &json!("authentication_error"))
    );
    let (status, v) = post(msg(json!({"max_tokens": 2})), "sekret").await;
    assert_eq!(status, 200, "x-api-key is accepted: {v}");
    let cases = [
        (json!({"max_tokens": null}), 400, "max_tokens"),
        (json!({"temperature": 7}), 400, "temperature"),
        (json!({"messages": []}), 400, "messages"),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}),
            400,
            "image",
        ),
        (
            json!({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure"}]}),
            400,
            "prefill",
        ),
        (
            json!({"tools": [weather()], "tool_choice": {"type": "tool", "name": "nope"}}),
            400,
            "`nope`",
        ),
        (json!({"tool_choice": {"type": "any"}}), 400, "no `tools`"),
        (
            json!({"model": "claude-sonnet-4-5"}),
            404,
            "claude-sonnet-4-5",
        ),
        (json!({"max_tokens": 100000}), 400, "context length"),
    ];
    for (extra, want_status, needle) in cases {
        let (status, v) = post(msg(extra.clone()), "sekret").await;
        assert_eq!(status, want_status, "{extra}: {v}");
        assert_eq!(v["type"], "error", "{v}");
        let m = v["error"]["message"].as_str().expect("message");
        assert!(m.contains(needle), "{extra}: {m}");
        let kind = v["error"]["type"].as_str().expect("type");
        assert_eq!(
            kind,
            if want_status == 404 {
                "not_found_error"
            } else {
                "invalid_request_error"
            }
        );
    }
    // Not JSON at all.
    let r = client
        .post(s.url("/v1/messages"))
        .header("x-api-key", "sekret")
        .body("{")
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    // The OpenAI routes keep OpenAI's envelope.
    let r = client
        .post(s.url("/v1/chat/completions"))
        .json(&json!({"messages": []}))
        .send()
        .await
        .expect("send");
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["error"]["code"], "invalid_api_key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_is_529_overloaded_error() {
    let s = Server::start_with_env(
        &["--max-batch-size", "1", "--max-queued-requests", "1"],
        &SLOW_STEPS,
    )
    .await;
    // Hold the one batch slot with a long completion, then ask for more than the queue holds.
    let long = json!({"prompt": "hello", "max_tokens": 490, "ignore_eos": true, "stream": true});
    let held = s.send("/v1/completions", &long).await;
    assert_eq!(held.status(), 200);
    let client = reqwest::Client::new();
    let results = futures_util::future::join_all((0..6).map(|_| {
        let r = client
            .post(s.url("/v1/messages"))
            .json(&msg(json!({"max_tokens": 4})))
            .send();
        async move {
            let r = r.await.expect("send");
            let status = r.status().as_u16();
            let retry = r.headers().get("retry-after").cloned();
            (status, retry, r.json::<Value>().await.expect("json"))
        }
    }))
    .await;
    let refused: Vec<_> = results.iter().filter(|r| r.0 == 529).collect();
    assert!(
        refused.len() >= 4,
        "{:?}",
        results.iter().map(|r| r.0).collect::<Vec<_>>()
    );
    for (_, retry, v) in refused {
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "overloaded_error");
        assert_eq!(retry.as_ref().map(|h| h.as_bytes()), Some(&b"1"[..]));
    }
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_fails_after_its_headers_ends_with_an_error_event() {
    let s = Server::start_with_env(
        &["--request-timeout", "0.1", "--max-batch-size", "1"],
        &SLOW_STEPS,
    )
    .await;
    // Four long completions ahead of it in the one batch slot use up the 0.1 s on their own
    // (each needs about a second with slowed steps), so the stream times out waiting, on any
    // machine.
    let blocker = json!({"prompt": "hello", "max_tokens": 490, "ignore_eos": true, "stream": true});
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(s.send("/v1/completions", &blocker).await);
    }
    let events = stream(&s, &msg(json!({"stream": true, "max_tokens": 480}))).await;
    let (name, data) = events.last().expect("events");
    assert_eq!(name, "error", "{events:?}");
    assert_eq!(data["type"], "error");
    assert_eq!(data["error"]["type"], "timeout_error");
    assert_eq!(events[0].0, "message_start");
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_tool_choice_opens_the_call_on_both_apis() {
    let s = Server::start(&PARSERS).await;
    // Anthropic: the reply starts inside a call for the named tool. The fixture model writes
    // noise after it, which is not a call, so it comes back as text with the opening.
    let (status, r) = s
        .post(
            "/v1/messages",
            &msg(json!({"max_tokens": 2, "tools": [weather()],
                        "tool_choice": {"type": "tool", "name": "get_weather"}})),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    let text = r["content"][0]["text"].as_str().expect("text block");
    assert!(
        text.starts_with("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "),
        "{text:?}"
    );
    // Streamed, the same text arrives in text deltas.
    let events = stream(
        &s,
        &msg(
            json!({"max_tokens": 2, "stream": true, "tools": [weather()],
                    "tool_choice": {"type": "tool", "name": "get_weather"}}),
        ),
    )
    .await;
    assert_eq!(assemble(&events)["content"], r["content"]);
    // OpenAI: `required` opens a call for any tool.
    let body = json!({"messages": [{"role": "user", "content": "Weather in Oslo?"}],
        "max_tokens": 2, "temperature": 0, "tool_choice": "required",
        "tools": [{"type": "function", "function": {"name": "get_weather",
                   "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]});
    let (status, r) = s.post("/v1/chat/completions", &body).await;
    assert_eq!(status, 200, "{r}");
    let content = r["choices"][0]["message"]["content"]
        .as_str()
        .expect("content");
    assert!(
        content.starts_with("<tool_call>\n{\"name\": \""),
        "{content:?}"
    );
    assert_eq!(r["choices"][0]["finish_reason"], "length");
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let chunks = s.stream("/v1/chat/completions", &streamed).await;
    let joined = server_support::join_stream(&chunks, true);
    assert_eq!(
        joined,
        vec![(content.to_owned(), Some("length".to_owned()))],
        "streamed = whole"
    );
    // Forcing a call renders the prompt without thinking (an empty think block) plus the
    // opening, so it is longer than the `auto` prompt.
    let mut auto = body.clone();
    auto["tool_choice"] = json!("auto");
    let (_, a) = s.post("/v1/chat/completions", &auto).await;
    assert!(
        r["usage"]["prompt_tokens"].as_u64() > a["usage"]["prompt_tokens"].as_u64(),
        "{r} {a}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forcing_a_call_without_a_parser_is_a_400_naming_the_flag() {
    let s = Server::start(&[]).await;
    let body = json!({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required",
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]});
    let (status, v) = s.post("/v1/chat/completions", &body).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["param"], "tool_choice");
    assert!(
        v["error"]["message"]
            .as_str()
            .expect("message")
            .contains("--tool-call-parser"),
        "{v}"
    );
}

#[test]
fn unknown_parsers_fail_at_start() {
    let model = server_support::fixture_model();
    for (flag, value) in [
        ("--tool-call-parser", "no-such-parser"),
        ("--reasoning-parser", "r1"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_met"))
            .args([
                "serve",
                &model.display().to_string(),
                "--port",
                "0",
                flag,
                value,
            ])
            .output()
            .expect("run met");
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag) && err.contains(value), "{err}");
    }
}

/// The official `anthropic` Python package against the server (tests/clients/). The
/// interpreter is `$METRALE_PYTHON`, default `python3`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_anthropic_python_client_works() {
    let mut args = vec!["--api-key", "sekret"];
    args.extend(PARSERS);
    let s = Server::start(&args).await;
    run_python_client(
        "anthropic",
        "test_anthropic_client.py",
        &[
            ("METRALE_BASE_URL", s.base.clone()),
            ("METRALE_API_KEY", "sekret".to_string()),
        ],
    )
    .await;
}

/// The shipped demo model was trained on Qwen3's layout with short `<think>` blocks, so greedy
/// decoding gives real reasoning to split: the end-to-end check of `--reasoning-parser`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reasoning_from_the_demo_model_on_both_apis() {
    let demo = repo_root().join("models/demo").display().to_string();
    let args: Vec<String> = [
        "serve",
        &demo,
        "--port",
        "0",
        "--model-name",
        "test",
        "--reasoning-parser",
        "qwen3",
    ]
    .map(String::from)
    .to_vec();
    let s = Server::spawn(&args).await;
    let ask = |extra: Value| {
        let mut b = json!({"temperature": 0, "max_tokens": 120,
                           "messages": [{"role": "user", "content": "What is 7 times 8? /think"}]});
        if let (Some(b), Some(e)) = (b.as_object_mut(), extra.as_object()) {
            b.extend(e.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        b
    };
    let (status, r) = s.post("/v1/chat/completions", &ask(json!({}))).await;
    assert_eq!(status, 200, "{r}");
    let m = &r["choices"][0]["message"];
    let reasoning = m["reasoning_content"].as_str().expect("reasoning_content");
    let content = m["content"].as_str().expect("content");
    assert!(reasoning.contains("56") && content.contains("56"), "{m}");
    assert!(
        !content.contains("think>") && !reasoning.contains("think>"),
        "{m}"
    );
    // Streamed: the reasoning and content deltas join to the same texts.
    let chunks = s
        .stream("/v1/chat/completions", &ask(json!({"stream": true})))
        .await;
    let (mut r2, mut c2) = (String::new(), String::new());
    for c in &chunks[..chunks.len() - 1] {
        let v: Value = serde_json::from_str(c).expect("chunk");
        let d = &v["choices"][0]["delta"];
        r2.push_str(d["reasoning_content"].as_str().unwrap_or_default());
        c2.push_str(d["content"].as_str().unwrap_or_default());
    }
    assert_eq!((r2.as_str(), c2.as_str()), (reasoning, content));
    // Thinking off through the template: no reasoning at all.
    let (_, off) = s
        .post(
            "/v1/chat/completions",
            &ask(json!({"chat_template_kwargs": {"enable_thinking": false}})),
        )
        .await;
    assert!(
        off["choices"][0]["message"]
            .get("reasoning_content")
            .is_none(),
        "{off}"
    );
    // Anthropic: a thinking block, then a text block, whole and streamed alike.
    let (_, a) = s.post("/v1/messages", &ask(json!({}))).await;
    assert_eq!(
        a["content"],
        json!([{"type": "thinking", "thinking": reasoning, "signature": ""},
               {"type": "text", "text": content}])
    );
    let events = stream(&s, &ask(json!({"stream": true}))).await;
    assert_eq!(assemble(&events)["content"], a["content"]);
    let (_, off) = s
        .post(
            "/v1/messages",
            &ask(json!({"thinking": {"type": "disabled"}})),
        )
        .await;
    let kinds: Vec<&Value> = off["content"]
        .as_array()
        .expect("content")
        .iter()
        .map(|b| &b["type"])
        .collect();
    assert_eq!(kinds, [&json!("text")], "{off}");
}
