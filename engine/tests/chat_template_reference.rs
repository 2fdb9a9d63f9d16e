//! Chat templates rendered by minijinja against transformers' `apply_chat_template` output
//! (tests/fixtures/make_chat_cases.py wrote cases.json).

use std::path::PathBuf;

use metrale_engine::chat_template::{ChatTemplate, ChatTemplateError, ContentFormat};
use metrale_engine::tokenizer::SpecialTokens;
use serde_json::{Map, Value};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

fn cases() -> Value {
    let text =
        std::fs::read_to_string(fixtures().join("chat_template/cases.json")).expect("cases.json");
    serde_json::from_str(&text).expect("cases.json is JSON")
}

fn qwen3() -> ChatTemplate {
    ChatTemplate::from_tokenizer_dir(&fixtures().join("tokenizer"))
        .expect("template loads")
        .expect("the fixture tokenizer has a template")
}

fn fixture_special_tokens() -> SpecialTokens {
    SpecialTokens {
        eos_token: Some("<|im_end|>".into()),
        pad_token: Some("<|endoftext|>".into()),
        ..SpecialTokens::default()
    }
}

fn render_case(template: &ChatTemplate, case: &Value) -> Result<String, ChatTemplateError> {
    let messages = case["messages"].as_array().expect("messages");
    let tools = case["tools"].as_array().map(Vec::as_slice);
    let add_generation_prompt = case["add_generation_prompt"]
        .as_bool()
        .expect("add_generation_prompt");
    let kwargs = case["kwargs"].as_object().cloned().unwrap_or_default();
    template.render(messages, tools, add_generation_prompt, &kwargs)
}

#[test]
fn template_in_tokenizer_config_is_qwen3s_file() {
    let from_file =
        std::fs::read_to_string(fixtures().join("chat_template/qwen3.jinja")).expect("qwen3.jinja");
    let config = std::fs::read_to_string(fixtures().join("tokenizer/tokenizer_config.json"))
        .expect("config");
    let config: Value = serde_json::from_str(&config).expect("config is JSON");
    assert_eq!(config["chat_template"].as_str(), Some(from_file.as_str()));
}

#[test]
fn special_token_variables_match_transformers() {
    let doc = cases();
    let expected = doc["special_tokens_map"]
        .as_object()
        .expect("special_tokens_map");
    let tokens = fixture_special_tokens();
    let named: Map<String, Value> = tokens
        .named()
        .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
        .collect();
    assert_eq!(&named, expected);
    let config = std::fs::read_to_string(fixtures().join("tokenizer/tokenizer_config.json"))
        .expect("config");
    let config: Value = serde_json::from_str(&config).expect("config is JSON");
    let from_config =
        SpecialTokens::from_config(&config, &fixtures().join("tokenizer/tokenizer_config.json"))
            .expect("special tokens parse");
    assert_eq!(
        from_config.named().collect::<Vec<_>>(),
        tokens.named().collect::<Vec<_>>()
    );
}

#[test]
fn qwen3_renders_byte_identical_to_transformers() {
    let template = qwen3();
    assert_eq!(template.content_format(false), ContentFormat::String);
    let doc = cases();
    let mut checked = 0;
    for case in doc["cases"].as_array().expect("cases") {
        if case["template"] != "qwen3" {
            continue;
        }
        let name = case["name"].as_str().expect("name");
        let got = render_case(&template, case).unwrap_or_else(|e| panic!("case {name}: {e}"));
        let expected = case["expected"].as_str().expect("expected");
        assert_eq!(got, expected, "case {name}");
        checked += 1;
    }
    assert!(checked >= 25, "only {checked} Qwen3 cases");
}

#[test]
fn environment_features_match_transformers() {
    let doc = cases();
    let mut checked = 0;
    for case in doc["cases"].as_array().expect("cases") {
        let template = case["template"].as_str().expect("template");
        if template == "qwen3" || family_template(template).is_some() {
            continue;
        }
        let name = case["name"].as_str().expect("name");
        let source = case["template"].as_str().expect("template source");
        let template =
            ChatTemplate::new(source, fixture_special_tokens()).expect("template compiles");
        let result = render_case(&template, case);
        match (case.get("expected_error"), result) {
            (
                Some(message),
                Err(ChatTemplateError::Render {
                    line, message: got, ..
                }),
            ) => {
                assert_eq!(got, message.as_str().expect("message"), "case {name}");
                assert_eq!(line, 1, "case {name}: the error names the template line");
            }
            (Some(_), other) => panic!("case {name}: expected a render error, got {other:?}"),
            (None, Ok(got)) => assert_eq!(
                got,
                case["expected"].as_str().expect("expected"),
                "case {name}"
            ),
            (None, Err(e)) => panic!("case {name}: {e}"),
        }
        checked += 1;
    }
    assert!(checked >= 15, "only {checked} environment cases");
}

/// Issue 39's and 40's families: the official template's file under `chat_template/` and the
/// special tokens the case was rendered with (make_chat_cases.py's FAMILY_TEMPLATES).
fn family_template(name: &str) -> Option<(&'static str, SpecialTokens)> {
    let tokens = |bos: &str, eos: &str| SpecialTokens {
        bos_token: Some(bos.into()),
        eos_token: Some(eos.into()),
        pad_token: Some("<|endoftext|>".into()),
        ..SpecialTokens::default()
    };
    match name {
        "llama3.1" => Some(("llama3.1.jinja", tokens("<|begin_of_text|>", "<|eot_id|>"))),
        "gemma3" => Some(("gemma3.jinja", tokens("<bos>", "<eos>"))),
        // Its template prints no special token variable.
        "gpt-oss" => Some(("gpt-oss.jinja", tokens("<|startoftext|>", "<|return|>"))),
        "minimax-m2" => Some(("minimax-m2.jinja", tokens("]~!b[", "[e~["))),
        // Neither does Nemotron's; the recording passed none, so the fixture tokenizer's hold.
        "nemotron-nano-v2" => Some((
            "nemotron-nano-v2.jinja",
            SpecialTokens {
                eos_token: Some("<|im_end|>".into()),
                pad_token: Some("<|endoftext|>".into()),
                ..SpecialTokens::default()
            },
        )),
        "deepseek-v3.1" => Some((
            "deepseek-v3.1.jinja",
            tokens("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
        )),
        _ => None,
    }
}

/// gpt-oss's template prints today's date (`strftime_now`): the recorded rendering has the
/// day it was recorded, so both sides' `Current date: YYYY-MM-DD` are masked to compare the
/// rest byte for byte (the date's own format is `strftime.json`'s business).
fn mask_date(text: &str) -> String {
    const AT: &str = "Current date: ";
    match text.find(AT) {
        Some(i) if text.len() >= i + AT.len() + 10 => {
            let date = &text[i + AT.len()..i + AT.len() + 10];
            let shape = date.char_indices().all(|(k, c)| match k {
                4 | 7 => c == '-',
                _ => c.is_ascii_digit(),
            });
            assert!(shape, "not a date: {date:?}");
            text.replacen(date, "YYYY-MM-DD", 1)
        }
        _ => text.to_string(),
    }
}

#[test]
fn family_templates_render_byte_identical_to_transformers() {
    let doc = cases();
    let mut checked = std::collections::BTreeMap::new();
    for case in doc["cases"].as_array().expect("cases") {
        let family = case["template"].as_str().expect("template");
        let Some((file, tokens)) = family_template(family) else {
            continue;
        };
        let source = std::fs::read_to_string(fixtures().join("chat_template").join(file))
            .expect("template file");
        let template = ChatTemplate::new(&source, tokens).expect("template compiles");
        let name = case["name"].as_str().expect("name");
        let result = render_case(&template, case);
        match (case.get("expected_error"), result) {
            (Some(message), Err(ChatTemplateError::Render { message: got, .. })) => {
                // The template's own `raise_exception` (transformers' TemplateError) is repeated
                // word for word; Jinja2's own errors only have to be errors here too.
                if case["error_type"] == "TemplateError" {
                    assert_eq!(
                        got,
                        message.as_str().expect("message"),
                        "{family} case {name}"
                    );
                }
            }
            (Some(_), other) => {
                panic!("{family} case {name}: expected a render error, got {other:?}")
            }
            (None, Ok(got)) => {
                let expected = case["expected"].as_str().expect("expected");
                assert_eq!(mask_date(&got), mask_date(expected), "{family} case {name}");
            }
            (None, Err(e)) => panic!("{family} case {name}: {e}"),
        }
        *checked.entry(family).or_insert(0) += 1;
    }
    assert!(checked.get("llama3.1") >= Some(&9), "{checked:?}");
    assert!(checked.get("gemma3") >= Some(&6), "{checked:?}");
    assert!(checked.get("gpt-oss") >= Some(&9), "{checked:?}");
    assert!(checked.get("minimax-m2") >= Some(&19), "{checked:?}");
    assert!(checked.get("nemotron-nano-v2") >= Some(&16), "{checked:?}");
    assert!(checked.get("deepseek-v3.1") >= Some(&14), "{checked:?}");
}

#[test]
fn errors_name_the_line_and_never_panic() {
    let broken = ChatTemplate::new("line one\n{% if %}", SpecialTokens::default());
    match broken {
        Err(ChatTemplateError::Compile { line, .. }) => assert_eq!(line, 2),
        other => panic!("expected a compile error, got {other:?}"),
    }

    let template = ChatTemplate::new(
        "{% for m in messages %}\n{{ m.content + 1 }}\n{% endfor %}",
        SpecialTokens::default(),
    )
    .expect("compiles");
    let messages = [serde_json::json!({"role": "user", "content": "hi"})];
    match template.render(&messages, None, false, &Map::new()) {
        Err(e @ ChatTemplateError::Render { line: 2, .. }) => {
            assert!(e.to_string().contains("line 2"), "{e}")
        }
        other => panic!("expected a render error on line 2, got {other:?}"),
    }
}

#[test]
fn reserved_kwargs_are_refused() {
    let template = qwen3();
    let messages = [serde_json::json!({"role": "user", "content": "hi"})];
    let mut kwargs = Map::new();
    kwargs.insert("messages".into(), Value::Array(vec![]));
    assert!(matches!(
        template.render(&messages, None, true, &kwargs),
        Err(ChatTemplateError::ReservedKwarg { key }) if key == "messages"
    ));
}

#[test]
fn non_text_content_parts_are_refused_for_text_templates() {
    let template = qwen3();
    let messages = [serde_json::json!({"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    ]})];
    assert!(matches!(
        template.render(&messages, None, true, &Map::new()),
        Err(ChatTemplateError::Message { index: 0, .. })
    ));
}

#[test]
fn template_files_take_priority_over_the_config() {
    let dir = std::env::temp_dir().join(format!("metrale-chat-template-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("additional_chat_templates")).expect("temp dir");
    std::fs::copy(
        fixtures().join("tokenizer/tokenizer_config.json"),
        dir.join("tokenizer_config.json"),
    )
    .expect("copy config");
    let messages = [serde_json::json!({"role": "user", "content": "hi"})];
    let tools = [serde_json::json!({"type": "function", "function": {"name": "f"}})];

    // Config only: Qwen3's template.
    let from_config = ChatTemplate::from_tokenizer_dir(&dir)
        .expect("loads")
        .expect("some");
    let qwen = from_config
        .render(&messages, None, true, &Map::new())
        .expect("renders");
    assert!(qwen.starts_with("<|im_start|>user\nhi"), "{qwen}");

    // chat_template.jinja wins; a tool_use template renders requests with tools.
    std::fs::write(
        dir.join("chat_template.jinja"),
        "plain:{{ messages[0].content }}{{ eos_token }}",
    )
    .expect("write");
    std::fs::write(
        dir.join("additional_chat_templates/tool_use.jinja"),
        "tools:{{ tools | length }}",
    )
    .expect("write");
    let from_files = ChatTemplate::from_tokenizer_dir(&dir)
        .expect("loads")
        .expect("some");
    let plain = from_files
        .render(&messages, None, true, &Map::new())
        .expect("renders");
    let with_tools = from_files
        .render(&messages, Some(&tools), true, &Map::new())
        .expect("renders");
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(plain, "plain:hi<|im_end|>");
    assert_eq!(with_tools, "tools:1");
}

#[test]
fn a_checkpoint_without_template_has_none() {
    let dir = std::env::temp_dir().join(format!("metrale-no-template-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(
        dir.join("tokenizer_config.json"),
        r#"{"eos_token": "</s>"}"#,
    )
    .expect("write");
    let loaded = ChatTemplate::from_tokenizer_dir(&dir);
    std::fs::remove_dir_all(&dir).ok();
    assert!(matches!(loaded, Ok(None)), "{loaded:?}");
}
