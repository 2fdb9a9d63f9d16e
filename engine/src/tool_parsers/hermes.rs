//! `--tool-call-parser hermes`: a JSON object inside `<tool_call>` tags, as Qwen3's template
//! asks for it:
//!
//! ```text
//! <tool_call>
//! {"name": "get_weather", "arguments": {"city": "Paris"}}
//! </tool_call>
//! ```
//!
//! The body must be one JSON object with a string `name` and an object `arguments` (an
//! arguments object encoded as a JSON string is accepted too); with tools declared, the name
//! must be one of them and the arguments must fit its schema ([`super::schema::validate`]).
//! Anything else is not a call.

use serde_json::{Map, Value};

use super::schema::{argument_pieces, tool_schema};
use super::{ParsedCall, ToolSpec};

/// Parse the text between `<tool_call>` and `</tool_call>`.
pub fn parse_call(body: &str, tools: &[ToolSpec]) -> Option<ParsedCall> {
    match serde_json::from_str::<Value>(body.trim()).ok()? {
        Value::Object(call) => call_from_object(call, tools),
        _ => None,
    }
}

/// A call object, `{"name": ..., "arguments": {...}}` (`parameters` for `arguments` too),
/// checked as [`parse_call`] checks it; nemotron_json's list items are these.
pub fn call_from_object(mut call: Map<String, Value>, tools: &[ToolSpec]) -> Option<ParsedCall> {
    let name = match call.remove("name")? {
        Value::String(n) if !n.is_empty() => n,
        _ => return None,
    };
    let schema = tool_schema(tools, &name)?;
    let args = match call
        .remove("arguments")
        .or_else(|| call.remove("parameters"))
    {
        None => Map::new(),
        Some(Value::Object(m)) => m,
        Some(Value::String(s)) => match serde_json::from_str::<Value>(&s).ok()? {
            Value::Object(m) => m,
            _ => return None,
        },
        Some(_) => return None,
    };
    if let Err(why) = super::schema::validate(schema, &args) {
        tracing::debug!("a {name} call does not fit its schema ({why}): returned as text");
        return None;
    }
    Some(ParsedCall {
        name,
        args: argument_pieces(&args),
    })
}
