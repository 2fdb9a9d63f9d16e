//! `--tool-call-parser mistral`: Mistral's `[TOOL_CALLS]` calls. Everything after the first
//! `[TOOL_CALLS]` is calls, in either of the forms Mistral's tokenizers write:
//!
//! ```text
//! [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{}
//! [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]
//! ```
//!
//! The first is the v11+ tokenizers' (Mistral Small 3.2, Magistral, Devstral; a
//! `[CALL_ID]id` after the name is skipped), the second the older ones'. `[TOOL_CALLS]`,
//! `[ARGS]` and `[CALL_ID]` are control tokens: the server keeps special tokens in the text of
//! requests that use this parser (vLLM does the same). Each call is checked against the
//! declared tools and their schemas as [`super::hermes::parse_call`] checks it.

use serde_json::{Map, Value};

use super::{ParsedCall, ToolSpec};

pub const TOOL_CALLS: &str = "[TOOL_CALLS]";
const ARGS: &str = "[ARGS]";
const CALL_ID: &str = "[CALL_ID]";

/// Parse the text after the first `[TOOL_CALLS]`; `None` if any part is not a call.
pub fn parse_calls(after: &str, tools: &[ToolSpec]) -> Option<Vec<ParsedCall>> {
    let body = after.trim();
    if body.starts_with('[') && !body.starts_with(ARGS) {
        // The JSON-array form.
        let Value::Array(items) = serde_json::from_str::<Value>(body).ok()? else {
            return None;
        };
        let calls: Option<Vec<_>> = items
            .iter()
            .map(|item| super::hermes::parse_call(&item.to_string(), tools))
            .collect();
        return calls.filter(|c| !c.is_empty());
    }
    let mut calls = Vec::new();
    for part in body.split(TOOL_CALLS) {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let (name, args) = part.split_once(ARGS)?;
        let name = match name.split_once(CALL_ID) {
            Some((n, _id)) => n,
            None => name,
        }
        .trim();
        let args: Map<String, Value> = serde_json::from_str(args.trim()).ok()?;
        let call = serde_json::json!({"name": name, "arguments": args});
        calls.push(super::hermes::parse_call(&call.to_string(), tools)?);
    }
    (!calls.is_empty()).then_some(calls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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

    #[test]
    fn both_forms_and_refusals() {
        let v11 = parse_calls(
            r#"get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{}"#,
            &tools(),
        )
        .expect("two calls");
        assert_eq!(
            v11.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            ["get_weather", "get_time"]
        );
        let args: Value = serde_json::from_str(&v11[0].args.concat()).expect("json");
        assert_eq!(args, json!({"city": "Paris"}));
        let array = parse_calls(
            r#" [{"name": "get_weather", "arguments": {"city": "Rome"}}]"#,
            &tools(),
        )
        .expect("array form");
        assert_eq!(array.len(), 1);
        assert!(parse_calls(r#"nope[ARGS]{}"#, &tools()).is_none());
        assert!(parse_calls(r#"get_weather[ARGS]{"city": 3}"#, &tools()).is_none());
        assert!(parse_calls(r#"get_weather{"city": "Paris"}"#, &tools()).is_none());
        assert!(parse_calls("", &tools()).is_none());
    }
}
