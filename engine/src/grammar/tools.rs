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
    let close = lark_str("}\n</tool_call>");
    let mut rules = Vec::new();
    let mut alts = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        if named.is_some_and(|n| n != t.name) {
            continue;
        }
        let args = arguments(t.parameters, &format!("tools[{i}].function.parameters"))?;
        let body = match named {
            Some(_) => format!("%json {args} {close}"),
            None => format!(
                "{} %json {args} {close}",
                lark_str(&format!("{}\", \"arguments\": ", json_inner(t.name)))
            ),
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
