//! `--tool-call-parser deepseek_v3` and `deepseek_v31` (vLLM's names): DeepSeek's calls, one
//! block of one or more, between its special tokens. V3 (and R1) write each call's type, its
//! name, then the arguments as a fenced JSON block:
//!
//! ```text
//! <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
//! ```json
//! {"city": "Paris"}
//! ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
//! ```
//!
//! V3.1 writes the name, then the arguments as they are:
//!
//! ```text
//! <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>
//! ```
//!
//! The markers are special tokens of DeepSeek's tokenizer: requests with tools keep them in
//! the text ([`super::ToolCallFormat::needs_special_tokens`]). With tools declared, every
//! call's function must be one of them and its arguments (a JSON object) must fit the schema;
//! one call that does not parse makes the whole block text. The tool grammar
//! (`grammar/tools.rs`) writes the markers as the tokenizer's own special tokens, by id.

use serde_json::{Map, Value};

use super::schema::{checked_call, tool_schema};
use super::{ParsedCall, ToolSpec};

pub const OPEN: &str = "<｜tool▁calls▁begin｜>";
pub const CLOSE: &str = "<｜tool▁calls▁end｜>";
pub const CALL_BEGIN: &str = "<｜tool▁call▁begin｜>";
pub const CALL_END: &str = "<｜tool▁call▁end｜>";
pub const SEP: &str = "<｜tool▁sep｜>";

/// Which of DeepSeek's layouts a call is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// V3 and R1: `function<｜tool▁sep｜>NAME` then a fenced JSON block.
    V3,
    /// V3.1: `NAME<｜tool▁sep｜>ARGS`.
    V31,
}

/// The text that forces a call (`tool_choice` required, or the tool `name`).
pub fn forced_prefix(layout: Layout, name: Option<&str>) -> String {
    match (layout, name) {
        (Layout::V3, None) => format!("{OPEN}{CALL_BEGIN}function{SEP}"),
        (Layout::V3, Some(n)) => format!("{OPEN}{CALL_BEGIN}function{SEP}{n}\n```json\n"),
        (Layout::V31, None) => format!("{OPEN}{CALL_BEGIN}"),
        (Layout::V31, Some(n)) => format!("{OPEN}{CALL_BEGIN}{n}{SEP}"),
    }
}

/// One call's text between `<｜tool▁call▁begin｜>` and `<｜tool▁call▁end｜>`.
fn parse_call(text: &str, layout: Layout, tools: &[ToolSpec]) -> Option<ParsedCall> {
    let (head, rest) = text.split_once(SEP)?;
    let (name, args) = match layout {
        Layout::V3 => {
            if head.trim() != "function" {
                return None;
            }
            let (name, fenced) = rest.split_once('\n')?;
            let json = fenced.trim().strip_prefix("```json")?.strip_suffix("```")?;
            (name.trim(), json)
        }
        Layout::V31 => (head.trim(), rest),
    };
    if name.is_empty() || name.contains(['<', '>', '\n']) {
        return None;
    }
    let schema = tool_schema(tools, name)?;
    let args: Map<String, Value> = match serde_json::from_str::<Value>(args.trim()).ok()? {
        Value::Object(m) => m,
        _ => return None,
    };
    checked_call(name, schema, args)
}

/// The calls between `<｜tool▁calls▁begin｜>` and `<｜tool▁calls▁end｜>`, in order, or `None`
/// if there is none or one does not parse.
pub fn parse_block(body: &str, layout: Layout, tools: &[ToolSpec]) -> Option<Vec<ParsedCall>> {
    let mut calls = Vec::new();
    let mut rest = body.trim();
    while !rest.is_empty() {
        let call = rest.strip_prefix(CALL_BEGIN)?;
        let (call, after) = call.split_once(CALL_END)?;
        calls.push(parse_call(call, layout, tools)?);
        rest = after.trim_start();
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

    fn args(c: &ParsedCall) -> Value {
        serde_json::from_str(&c.args.concat()).expect("JSON")
    }

    #[test]
    fn both_layouts_parse_and_hold_to_the_schema() {
        let v3 = format!(
            "{CALL_BEGIN}function{SEP}get_weather\n```json\n{{\"city\": \"Paris\"}}\n```{CALL_END}"
        );
        let calls = parse_block(&format!("{v3}{v3}"), Layout::V3, &tools()).expect("parses");
        assert_eq!(calls.len(), 2);
        assert_eq!(args(&calls[1]), json!({"city": "Paris"}));
        let v31 = format!("{CALL_BEGIN}get_weather{SEP}{{\"city\": \"東京\"}}{CALL_END}");
        let calls = parse_block(&v31, Layout::V31, &tools()).expect("parses");
        assert_eq!(calls[0].name, "get_weather");
        assert_eq!(args(&calls[0]), json!({"city": "東京"}));
        // The other layout, an unknown tool, arguments off the schema, a cut call: not calls.
        assert!(parse_block(&v31, Layout::V3, &tools()).is_none());
        assert!(parse_block(&v3, Layout::V31, &tools()).is_none());
        let unknown = v31.replace("get_weather", "nope");
        assert!(parse_block(&unknown, Layout::V31, &tools()).is_none());
        let off = format!("{CALL_BEGIN}get_weather{SEP}{{\"town\": 1}}{CALL_END}");
        assert!(parse_block(&off, Layout::V31, &tools()).is_none());
        assert!(parse_block(&v31[..v31.len() - 4], Layout::V31, &tools()).is_none());
    }

    #[test]
    fn a_forced_prefix_and_the_rest_of_its_call_parse() {
        for layout in [Layout::V3, Layout::V31] {
            let rest = match layout {
                Layout::V3 => "{\"city\": \"Oslo\"}\n```",
                Layout::V31 => "{\"city\": \"Oslo\"}",
            };
            let text = format!(
                "{}{rest}{CALL_END}",
                forced_prefix(layout, Some("get_weather"))
            );
            let body = text.strip_prefix(OPEN).expect("opens");
            let calls = parse_block(body, layout, &tools()).expect("parses");
            assert_eq!(args(&calls[0]), json!({"city": "Oslo"}));
        }
    }
}
