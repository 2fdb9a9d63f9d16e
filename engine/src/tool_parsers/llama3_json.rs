//! `--tool-call-parser llama3_json`: Llama 3.1's JSON tool calls, as its template asks for
//! them ("respond in the format {"name": function name, "parameters": dictionary of argument
//! name and its value}"):
//!
//! ```text
//! {"name": "get_weather", "parameters": {"city": "Paris"}}
//! ```
//!
//! The call is the whole message (optionally after `<|python_tag|>`, which the detokenizer
//! drops unless special tokens are kept); several calls are separated by `;` (vLLM's
//! `llama3_json` reads the same). Each object is read as [`super::hermes::parse_call`] reads
//! one (`parameters` or `arguments`, a JSON-string arguments object accepted, the tool and its
//! schema checked). A message that does not start with `{` is text.

use serde_json::Value;

use super::{ParsedCall, ToolSpec};

/// What `<|python_tag|>` looks like when special tokens are kept.
pub const PYTHON_TAG: &str = "<|python_tag|>";

/// Whether a message starting with `head` (at least its first non-blank characters) may be a
/// call: `Some(true)` yes (hold it), `Some(false)` no (text), `None` not known yet.
pub fn starts_call(head: &str) -> Option<bool> {
    let head = head.trim_start();
    let head = head.strip_prefix(PYTHON_TAG).unwrap_or(head).trim_start();
    if head.is_empty() {
        return if PYTHON_TAG.starts_with(head) {
            None
        } else {
            Some(false)
        };
    }
    if PYTHON_TAG.starts_with(head) && head.starts_with('<') {
        return None;
    }
    Some(head.starts_with('{'))
}

/// Parse a whole message of calls; `None` if any part is not a call.
pub fn parse_calls(message: &str, tools: &[ToolSpec]) -> Option<Vec<ParsedCall>> {
    let body = message.trim();
    let mut rest = body.strip_prefix(PYTHON_TAG).unwrap_or(body).trim_start();
    let mut calls = Vec::new();
    // Objects one after another, `;`-separated (a trailing `;` allowed).
    while !rest.is_empty() {
        let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
        let value = stream.next()?.ok()?;
        calls.push(super::hermes::parse_call(&value.to_string(), tools)?);
        rest = rest[stream.byte_offset()..].trim_start();
        if let Some(after) = rest.strip_prefix(';') {
            rest = after.trim_start();
        } else if !rest.is_empty() {
            return None;
        }
    }
    (!calls.is_empty()).then_some(calls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "get_weather".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}},
                               "required": ["city"]}),
        }]
    }

    #[test]
    fn one_call_several_calls_and_text() {
        let one = parse_calls(
            r#"{"name": "get_weather", "parameters": {"city": "Paris"}}"#,
            &tools(),
        )
        .expect("a call");
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].name, "get_weather");
        let args: Value = serde_json::from_str(&one[0].args.concat()).expect("json");
        assert_eq!(args, json!({"city": "Paris"}));
        let two = parse_calls(
            r#"<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "get_weather", "arguments": {"city": "Rome"}}"#,
            &tools(),
        )
        .expect("two calls");
        assert_eq!(two.len(), 2);
        assert!(parse_calls(r#"{"name": "nope", "parameters": {}}"#, &tools()).is_none());
        assert!(
            parse_calls(
                r#"{"name": "get_weather", "parameters": {"city": "P"}} and"#,
                &tools()
            )
            .is_none()
        );
        assert_eq!(starts_call("  {\"na"), Some(true));
        assert_eq!(starts_call("<|pyth"), None);
        assert_eq!(starts_call("<|python_tag|>{"), Some(true));
        assert_eq!(starts_call("Sure"), Some(false));
        assert_eq!(starts_call("  "), None);
    }
}
