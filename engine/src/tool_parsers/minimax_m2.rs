//! `--tool-call-parser minimax_m2` (vLLM's name): MiniMax-M2's XML calls, one block holding
//! one or more invocations:
//!
//! ```text
//! <minimax:tool_call>
//! <invoke name="get_weather">
//! <parameter name="city">Paris</parameter>
//! <parameter name="days">3</parameter>
//! </invoke>
//! </minimax:tool_call>
//! ```
//!
//! Names may be quoted with `"` or `'` or bare. A value is the text between its tags, less one
//! leading and one trailing newline (layout); it becomes a JSON value by the type the tool's
//! schema declares for it ([`super::schema::convert`], as qwen3_coder's). With tools
//! declared, every invocation's function must be one of them and its arguments must fit the
//! schema ([`super::schema::validate`]); one invocation that does not parse makes the whole
//! block text. The tool grammar (`grammar/tools.rs`, `grammar/xml_call.rs`) holds a forced
//! call, and under `auto` the calls of a block once it opens, to this format with values inline.

use serde_json::Map;

use super::schema::{checked_call, tool_schema, typed_parameter};
use super::{ParsedCall, ToolSpec};

pub const OPEN: &str = "<minimax:tool_call>";
pub const CLOSE: &str = "</minimax:tool_call>";
const INVOKE: &str = "<invoke name=";
const INVOKE_END: &str = "</invoke>";
const PARAMETER: &str = "<parameter name=";
const PARAMETER_END: &str = "</parameter>";

/// A tag's name attribute (`"x"`, `'x'` or `x`), unquoted; `None` if empty or holding a tag
/// or a newline.
fn name_of(raw: &str) -> Option<&str> {
    let raw = raw.trim();
    let name = ['"', '\'']
        .iter()
        .find_map(|q| raw.strip_prefix(*q)?.strip_suffix(*q))
        .unwrap_or(raw);
    (!name.is_empty() && !name.contains(['<', '>', '\n'])).then_some(name)
}

/// One invocation's body after `<invoke name=`, up to and excluding `</invoke>`.
fn parse_invoke(body: &str, tools: &[ToolSpec]) -> Option<ParsedCall> {
    let (name, mut rest) = body.split_once('>')?;
    let name = name_of(name)?;
    let schema = tool_schema(tools, name)?;
    let mut args = Map::new();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        let p = rest.strip_prefix(PARAMETER)?;
        let (key, p) = p.split_once('>')?;
        let key = name_of(key)?;
        let (raw, after) = p.split_once(PARAMETER_END)?;
        let raw = raw.strip_prefix('\n').unwrap_or(raw);
        let raw = raw.strip_suffix('\n').unwrap_or(raw);
        args.insert(key.to_owned(), typed_parameter(schema, key, raw));
        rest = after;
    }
    checked_call(name, schema, args)
}

/// Parse the text between `<minimax:tool_call>` and `</minimax:tool_call>`: its invocations,
/// in order, or `None` if there is none or one does not parse.
pub fn parse_block(body: &str, tools: &[ToolSpec]) -> Option<Vec<ParsedCall>> {
    let mut calls = Vec::new();
    let mut rest = body.trim();
    while !rest.is_empty() {
        let inv = rest.strip_prefix(INVOKE)?;
        let (inv, after) = inv.split_once(INVOKE_END)?;
        calls.push(parse_invoke(inv, tools)?);
        rest = after.trim_start();
    }
    (!calls.is_empty()).then_some(calls)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "get_weather".into(),
            parameters: json!({"type": "object", "properties": {
                "city": {"type": "string"}, "days": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "string"}}},
                "required": ["city"]}),
        }]
    }

    fn args(c: &ParsedCall) -> Value {
        serde_json::from_str(&c.args.concat()).expect("json")
    }

    #[test]
    fn invocations_become_calls_with_typed_arguments() {
        let body = "\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris</parameter>\n\
                    <parameter name=\"days\">3</parameter>\n\
                    <parameter name='tags'>[\"sun\", \"rain\"]</parameter>\n</invoke>\n\
                    <invoke name=get_weather>\n<parameter name=\"city\">\nNew\nYork\n</parameter>\n\
                    </invoke>\n";
        let calls = parse_block(body, &tools()).expect("two calls");
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].name, "get_weather");
        assert_eq!(
            args(&calls[0]),
            json!({"city": "Paris", "days": 3, "tags": ["sun", "rain"]})
        );
        // One newline each side is layout; the one inside is the value's.
        assert_eq!(args(&calls[1]), json!({"city": "New\nYork"}));
    }

    #[test]
    fn anything_malformed_is_not_a_call() {
        for body in [
            "",
            "<invoke name=\"get_weather\"><parameter name=\"city\">Paris</parameter>",
            "<invoke name=\"nope\"><parameter name=\"city\">Paris</parameter></invoke>",
            "<invoke name=\"get_weather\"><parameter name=\"days\">3</parameter></invoke>",
            "<invoke name=\"get_weather\"><parameter name=\"city\">Paris</invoke>",
            "<invoke name=\"\"></invoke>",
            "text <invoke name=\"get_weather\"><parameter name=\"city\">P</parameter></invoke>",
        ] {
            assert!(parse_block(body, &tools()).is_none(), "{body:?}");
        }
    }
}
