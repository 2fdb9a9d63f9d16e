//! `--tool-call-parser nemotron_json` (the name NVIDIA's vLLM plugin for the model registers;
//! `nemotron_nano_v2` too): NVIDIA Nemotron Nano v2's calls (Nemotron-H,
//! `NemotronHForCausalLM`), a JSON list of one or more calls in one block:
//!
//! ```text
//! <TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", "arguments": {}}]</TOOLCALL>
//! ```
//!
//! The model's chat template asks for exactly this (and writes earlier calls back so). Each
//! item is read as a hermes call ([`super::hermes::call_from_object`]): a string `name`, an
//! object `arguments` (or the object as a JSON string); with tools declared, the name must be
//! one of them and the arguments must fit its schema. A single object without the list is
//! accepted as one call, as NVIDIA's own parser accepts it. One item that does not parse, or
//! an empty list, makes the whole block text.
//!
//! Reasoning comes first in `<think>…</think>` (`--reasoning-parser qwen3`); the template
//! opens the block itself (`<think>\n`) or, for `/no_think`, writes it closed and empty
//! (`<think></think>`). Its markers may be special tokens of the tokenizer: requests with
//! tools keep special tokens in the text ([`super::ToolCallFormat::needs_special_tokens`]).

use serde_json::{Map, Value};

use super::hermes::call_from_object;
use super::{ParsedCall, ToolSpec};

pub const OPEN: &str = "<TOOLCALL>";
pub const CLOSE: &str = "</TOOLCALL>";

/// The text that forces a call (`tool_choice` required, or the tool `name`).
pub fn forced_prefix(name: Option<&str>) -> String {
    match name {
        None => format!("{OPEN}[{{\"name\": \""),
        Some(n) => format!(
            "{OPEN}[{{\"name\": {}, \"arguments\": ",
            Value::String(n.into())
        ),
    }
}

/// The calls of the text between `<TOOLCALL>` and `</TOOLCALL>`, in order, or `None` if it
/// holds none or one does not parse.
pub fn parse_block(body: &str, tools: &[ToolSpec]) -> Option<Vec<ParsedCall>> {
    let items: Vec<Map<String, Value>> = match serde_json::from_str::<Value>(body.trim()).ok()? {
        Value::Array(items) => items
            .into_iter()
            .map(|item| match item {
                Value::Object(m) => Some(m),
                _ => None,
            })
            .collect::<Option<_>>()?,
        Value::Object(m) => vec![m],
        _ => return None,
    };
    let calls: Vec<ParsedCall> = items
        .into_iter()
        .map(|m| call_from_object(m, tools))
        .collect::<Option<_>>()?;
    (!calls.is_empty()).then_some(calls)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tools() -> Vec<ToolSpec> {
        vec![
            ToolSpec {
                name: "get_weather".into(),
                parameters: json!({"type": "object", "properties": {"city": {"type": "string"}},
                    "required": ["city"]}),
            },
            ToolSpec {
                name: "get_time".into(),
                parameters: json!({"type": "object", "properties": {}}),
            },
        ]
    }

    fn args(c: &ParsedCall) -> Value {
        serde_json::from_str(&c.args.concat()).expect("JSON")
    }

    #[test]
    fn a_list_of_calls_an_object_and_string_arguments_parse() {
        let body = r#"[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", "arguments": {}}]"#;
        let calls = parse_block(body, &tools()).expect("two calls");
        assert_eq!(
            calls.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            ["get_weather", "get_time"]
        );
        assert_eq!(args(&calls[0]), json!({"city": "Paris"}));
        assert_eq!(args(&calls[1]), json!({}));
        let one = r#" {"name": "get_weather", "arguments": "{\"city\": \"東京\"}"} "#;
        let calls = parse_block(one, &tools()).expect("one call");
        assert_eq!(args(&calls[0]), json!({"city": "東京"}));
    }

    #[test]
    fn anything_malformed_is_not_a_call() {
        for body in [
            "",
            "[]",
            "[1]",
            r#"[{"name": "nope", "arguments": {}}]"#,
            r#"[{"name": "get_weather", "arguments": {"town": "Paris"}}]"#,
            r#"[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "nope"}]"#,
            r#"[{"name": "get_weather", "arguments": {"city": "Paris"}}"#,
            r#"[{"arguments": {"city": "Paris"}}]"#,
        ] {
            assert!(parse_block(body, &tools()).is_none(), "{body:?}");
        }
    }

    #[test]
    fn a_forced_prefix_and_the_rest_of_its_call_parse() {
        for (name, rest) in [
            (Some("get_weather"), r#"{"city": "Oslo"}}]"#),
            (None, r#"get_weather", "arguments": {"city": "Oslo"}}]"#),
        ] {
            let text = format!("{}{rest}", forced_prefix(name));
            let body = text.strip_prefix(OPEN).expect("opens");
            let calls = parse_block(body, &tools()).expect("parses");
            assert_eq!(args(&calls[0]), json!({"city": "Oslo"}), "{text}");
        }
    }
}
