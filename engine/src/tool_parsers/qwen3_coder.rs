//! `--tool-call-parser qwen3_coder`: Qwen3-Coder's (and Qwen3.5/3.6's) XML-style calls:
//!
//! ```text
//! <tool_call>
//! <function=get_weather>
//! <parameter=city>
//! Paris
//! </parameter>
//! </function>
//! </tool_call>
//! ```
//!
//! Parameter values are bare text (the template writes one newline after the opening tag and
//! one before the closing tag; those are layout and dropped). Each becomes a JSON value by the
//! type the tool's schema declares for it ([`super::schema::convert`]). With tools declared,
//! the function must be one of them and the converted arguments must fit its schema
//! ([`super::schema::validate`]: required present, declared types, enums). Missing closing
//! tags mean it is not a call.

use serde_json::Map;

use super::schema::{checked_call, tool_schema, typed_parameter};
use super::{ParsedCall, ToolSpec};

const FUNCTION: &str = "<function=";
const FUNCTION_END: &str = "</function>";
const PARAMETER: &str = "<parameter=";
const PARAMETER_END: &str = "</parameter>";

/// Parse the text between `<tool_call>` and `</tool_call>`.
pub fn parse_call(body: &str, tools: &[ToolSpec]) -> Option<ParsedCall> {
    let rest = body.trim().strip_prefix(FUNCTION)?;
    let (name, mut rest) = rest.split_once('>')?;
    let name = name.trim();
    if name.is_empty() || name.contains(['<', '\n']) {
        return None;
    }
    let schema = tool_schema(tools, name)?;
    let mut args = Map::new();
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix(FUNCTION_END) {
            if !after.trim().is_empty() {
                return None;
            }
            break;
        }
        let p = rest.strip_prefix(PARAMETER)?;
        let (key, p) = p.split_once('>')?;
        let key = key.trim();
        if key.is_empty() || key.contains(['<', '\n']) {
            return None;
        }
        let (raw, after) = p.split_once(PARAMETER_END)?;
        let raw = raw.strip_prefix('\n').unwrap_or(raw);
        let raw = raw.strip_suffix('\n').unwrap_or(raw);
        args.insert(key.to_owned(), typed_parameter(schema, key, raw));
        rest = after;
    }
    checked_call(name, schema, args)
}
