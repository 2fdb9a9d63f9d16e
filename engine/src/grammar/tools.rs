//! Grammars for forced tool calls in the call formats our parsers read (`tool_parsers/`): the
//! rest of a call after the format's forced opening (`ToolCallFormat::forced_prefix`), with
//! the arguments held to the tool's `parameters` schema, then the call's close, then the end.

use serde_json::{Value, json};

use super::Spec;
use super::schema::{self, SchemaError};

/// A tool as the grammar needs it: its name and its parameters' JSON schema.
pub struct ToolSchema<'a> {
    pub name: &'a str,
    pub parameters: &'a Value,
}

/// The hermes format after its forced opening: `<tool_call>\n{"name": "` for any tool
/// (`named` None), `<tool_call>\n{"name": "NAME", "arguments": ` for a named one. Each
/// `param` error names the tool (`tools[i].function.parameters`).
pub fn hermes_forced(tools: &[ToolSchema<'_>], named: Option<&str>) -> Result<Spec, SchemaError> {
    forced(
        tools,
        named,
        &|n| format!("{}\", \"arguments\": ", json_inner(n)),
        "}\n</tool_call>",
    )
}

/// Llama 3's JSON call after its forced opening: `{"name": "` for any tool, `{"name": "NAME",
/// "parameters": ` for a named one; the call's `}` ends the message.
pub fn llama3_json_forced(
    tools: &[ToolSchema<'_>],
    named: Option<&str>,
) -> Result<Spec, SchemaError> {
    forced(
        tools,
        named,
        &|n| format!("{}\", \"parameters\": ", json_inner(n)),
        "}",
    )
}

/// Mistral's call after its forced opening: `[TOOL_CALLS]` for any tool (then `NAME[ARGS]`),
/// `[TOOL_CALLS]NAME[ARGS]` for a named one; the arguments object ends the message.
pub fn mistral_forced(tools: &[ToolSchema<'_>], named: Option<&str>) -> Result<Spec, SchemaError> {
    forced(tools, named, &|n| format!("{n}[ARGS]"), "")
}

/// A forced call's grammar: for each allowed tool, `head(name)` (unless the opening already
/// named it), the arguments under the tool's schema, then `close`.
fn forced(
    tools: &[ToolSchema<'_>],
    named: Option<&str>,
    head: &dyn Fn(&str) -> String,
    close: &str,
) -> Result<Spec, SchemaError> {
    let close = if close.is_empty() {
        String::new()
    } else {
        format!(" {}", lark_str(close))
    };
    let mut rules = Vec::new();
    let mut alts = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        if named.is_some_and(|n| n != t.name) {
            continue;
        }
        let args = arguments(t.parameters, &format!("tools[{i}].function.parameters"))?;
        let body = match named {
            Some(_) => format!("%json {args}{close}"),
            None => format!("{} %json {args}{close}", lark_str(&head(t.name))),
        };
        rules.push(format!("call_{i}: {body}"));
        alts.push(format!("call_{i}"));
    }
    Ok(Spec::Lark(format!(
        "start: {}\n{}\n",
        alts.join(" | "),
        rules.join("\n")
    )))
}

/// A tool's parameters as the schema of its `arguments` object, laid out like
/// `response_format` JSON (absent parameters: any object).
fn arguments(parameters: &Value, param: &str) -> Result<String, SchemaError> {
    let schema = match parameters {
        Value::Null => json!({"type": "object"}),
        p => p.clone(),
    };
    let spec = Spec::JsonSchema {
        schema,
        strict: false,
    };
    Ok(schema::prepare(&spec, param)?.to_string())
}

/// `s` as a JSON string's inside (the name between the quotes the opening wrote).
fn json_inner(s: &str) -> String {
    let quoted = Value::String(s.into()).to_string();
    quoted[1..quoted.len() - 1].to_string()
}

/// `s` as a Lark string literal (JSON's escapes are Lark's).
fn lark_str(s: &str) -> String {
    Value::String(s.into()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_parameters_schema_names_its_tool() {
        let good = json!({"type": "object"});
        let bad = json!({"type": "object", "properties": {"x": {"type": "strng"}}});
        let tools = [
            ToolSchema {
                name: "a",
                parameters: &good,
            },
            ToolSchema {
                name: "b",
                parameters: &bad,
            },
        ];
        let e = hermes_forced(&tools, None).expect_err("refused");
        assert_eq!(e.path, "tools[1].function.parameters.properties.x.type");
        // A named call only reads its own tool's schema.
        let Ok(Spec::Lark(g)) = hermes_forced(&tools, Some("a")) else {
            panic!("a grammar")
        };
        assert!(g.starts_with("start: call_0\n"), "{g}");
    }
}
