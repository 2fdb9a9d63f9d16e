//! Grammars for tool calls in the call formats our parsers read (`tool_parsers/`), with each
//! call's arguments held to its tool's `parameters` schema:
//!
//! - **forced** (`tool_choice` `required` or named, Anthropic `any`/`tool`): the rest of one
//!   call after the format's forced opening (`ToolCallFormat::forced_prefix`), then the end;
//! - **auto**: free text, in which `<tool_call>` opens a call that must then be well formed
//!   (calls and text may alternate), then the end. Text stays free until a call opens.
//!
//! A call is the format's opening tag (`<tool_call>`; MiniMax-M2's `<minimax:tool_call>`), its
//! head (which names the tool), the arguments, its tail. hermes: `\n{"name": "NAME",
//! "arguments": ` + a JSON object + `}\n</tool_call>`; qwen3_coder: `\n<function=NAME>\n` +
//! parameters (`xml_call.rs`) + `</function>\n</tool_call>`; minimax_m2: `\n<invoke
//! name="NAME">\n` + parameters + `</invoke>\n</minimax:tool_call>` (one invocation a block).

use serde_json::{Value, json};

use super::Spec;
use super::schema::{self, SchemaError};
use super::xml_call::{self, Style};
use crate::tool_parsers::ToolCallFormat;

/// A tool as the grammar needs it: its name and its parameters' JSON schema.
pub struct ToolSchema<'a> {
    pub name: &'a str,
    pub parameters: &'a Value,
}

/// Which calls the grammar holds the reply to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallMode<'a> {
    /// One call after the forced opening: of any tool (`None`) or of this one.
    Forced(Option<&'a str>),
    /// Free text and any number of calls.
    Auto,
}

/// The grammar of `mode`'s calls in `format` (rules in Lark, entry rule `start`). Each error
/// names the tool's schema part (`tools[i].function.parameters...`).
pub fn call_grammar(
    format: ToolCallFormat,
    tools: &[ToolSchema<'_>],
    mode: CallMode<'_>,
) -> Result<Spec, SchemaError> {
    if let (
        ToolCallFormat::Llama3Json | ToolCallFormat::Mistral | ToolCallFormat::Harmony,
        CallMode::Forced(named),
    ) = (format, mode)
    {
        return json_forced(format, tools, named);
    }
    if !has_grammar(format) {
        return Err(SchemaError::new(
            "tool_choice",
            format!(
                "{} calls have no grammar yet: they are read as the model writes them",
                format.flag_value()
            ),
        ));
    }
    let mut rules = Vec::new();
    let mut alts = Vec::new();
    let open = format.tags().0;
    // What the reply already holds before the grammar starts.
    let written = match mode {
        CallMode::Forced(named) => format.forced_prefix(named),
        CallMode::Auto => open.to_owned(),
    };
    for (i, t) in tools.iter().enumerate() {
        if let CallMode::Forced(Some(n)) = mode
            && n != t.name
        {
            continue;
        }
        let param = format!("tools[{i}].function.parameters");
        let head = format!("{open}{}", head(format, t.name));
        // The forced opening is the head's start (`forced_prefix` writes it the same way).
        let rest = head.strip_prefix(written.as_str()).unwrap_or(&head);
        let (args, mut arg_rules) = match format {
            ToolCallFormat::Hermes => (
                format!("%json {}", json_args(t.parameters, &param)?),
                vec![],
            ),
            ToolCallFormat::Qwen3Coder => {
                xml_call::parameters(Style::Qwen3Coder, t.parameters, &param, i)?
            }
            ToolCallFormat::MiniMaxM2 => {
                xml_call::parameters(Style::MiniMax, t.parameters, &param, i)?
            }
            // DeepSeek's and Nemotron's never reach here (`has_grammar`).
            ToolCallFormat::Llama3Json
            | ToolCallFormat::Mistral
            | ToolCallFormat::Harmony
            | ToolCallFormat::DeepSeekV3
            | ToolCallFormat::DeepSeekV31
            | ToolCallFormat::NemotronJson => (
                format!("%json {}", json_args(t.parameters, &param)?),
                vec![],
            ),
        };
        rules.append(&mut arg_rules);
        let rest = if rest.is_empty() {
            String::new()
        } else {
            lark_str(rest)
        };
        rules.push(format!(
            "call_{i}: {rest} {args} {}",
            lark_str(tail(format))
        ));
        alts.push(format!("call_{i}"));
    }
    let calls = alts.join(" | ");
    let top = match mode {
        CallMode::Forced(_) => format!("start: {calls}"),
        // Text up to the first opening tag (lazy: the tag ends it), a call, and again; or
        // text to the end. A free text lexeme never holds the tag: the lazy one ends there.
        CallMode::Auto => format!(
            "start: TEXT | text_open call start\n\
             call: {calls}\n\
             text_open[suffix={}]: TEXT\n\
             TEXT: /(?s:.*)/",
            lark_str(open)
        ),
    };
    Ok(Spec::Lark(format!("{top}\n{}\n", rules.join("\n"))))
}

/// Whether `format`'s calls have a grammar at all (DeepSeek's and Nemotron's do not yet: their
/// markers are, or may be, special tokens, which the call grammar does not write; their calls
/// are parsed, not held).
pub fn has_grammar(format: ToolCallFormat) -> bool {
    !matches!(
        format,
        ToolCallFormat::DeepSeekV3 | ToolCallFormat::DeepSeekV31 | ToolCallFormat::NemotronJson
    )
}

/// Whether `format` has a grammar under `auto` (an opening tag the text waits for).
pub fn has_auto_grammar(format: ToolCallFormat) -> bool {
    matches!(
        format,
        ToolCallFormat::Hermes | ToolCallFormat::Qwen3Coder | ToolCallFormat::MiniMaxM2
    )
}

/// A forced call in Llama 3's JSON or Mistral's format, after the forced opening: Llama 3's
/// `{"name": "` for any tool (`{"name": "NAME", "parameters": ` for a named one), the call's
/// `}` ending the message; Mistral's `[TOOL_CALLS]` for any tool (then `NAME[ARGS]`),
/// `[TOOL_CALLS]NAME[ARGS]` for a named one, the arguments object ending the message.
fn json_forced(
    format: ToolCallFormat,
    tools: &[ToolSchema<'_>],
    named: Option<&str>,
) -> Result<Spec, SchemaError> {
    let (head, close): (&dyn Fn(&str) -> String, &str) = match format {
        ToolCallFormat::Mistral => (&|n| format!("{n}[ARGS]"), ""),
        // Harmony: `<|channel|>commentary to=functions.` for any tool (then `NAME <|constrain|>
        // json<|message|>`), the arguments object ending the message (`<|call|>` is an EOS).
        ToolCallFormat::Harmony => (
            &|n| format!("{n}{}", crate::tool_parsers::harmony::ARGS_OPEN),
            "",
        ),
        _ => (&|n| format!("{}\", \"parameters\": ", json_inner(n)), "}"),
    };
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
        let args = json_args(t.parameters, &format!("tools[{i}].function.parameters"))?;
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

/// `s` as a JSON string's inside (the name between the quotes the opening wrote).
fn json_inner(s: &str) -> String {
    let quoted = Value::String(s.into()).to_string();
    quoted[1..quoted.len() - 1].to_string()
}

/// What follows `<tool_call>` up to the arguments.
fn head(format: ToolCallFormat, name: &str) -> String {
    match format {
        ToolCallFormat::Hermes => format!(
            "\n{{\"name\": {}, \"arguments\": ",
            Value::String(name.into())
        ),
        ToolCallFormat::Qwen3Coder => format!("\n<function={name}>\n"),
        ToolCallFormat::MiniMaxM2 => format!("\n<invoke name=\"{name}\">\n"),
        // Forced only, through json_forced (has_auto_grammar is false for them); DeepSeek's
        // have no grammar (`has_grammar`).
        ToolCallFormat::Llama3Json
        | ToolCallFormat::Mistral
        | ToolCallFormat::Harmony
        | ToolCallFormat::DeepSeekV3
        | ToolCallFormat::DeepSeekV31
        | ToolCallFormat::NemotronJson => String::new(),
    }
}

/// What closes a call after its arguments.
fn tail(format: ToolCallFormat) -> &'static str {
    match format {
        ToolCallFormat::Hermes => "}\n</tool_call>",
        ToolCallFormat::Qwen3Coder => "</function>\n</tool_call>",
        ToolCallFormat::MiniMaxM2 => "</invoke>\n</minimax:tool_call>",
        ToolCallFormat::Llama3Json
        | ToolCallFormat::Mistral
        | ToolCallFormat::Harmony
        | ToolCallFormat::DeepSeekV3
        | ToolCallFormat::DeepSeekV31
        | ToolCallFormat::NemotronJson => "",
    }
}

/// A tool's parameters as the schema of its `arguments` object, laid out like
/// `response_format` JSON (absent parameters: any object).
fn json_args(parameters: &Value, param: &str) -> Result<String, SchemaError> {
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

/// `s` as a Lark string literal (JSON's escapes are Lark's).
pub(super) fn lark_str(s: &str) -> String {
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
        for format in [ToolCallFormat::Hermes, ToolCallFormat::Qwen3Coder] {
            let e = call_grammar(format, &tools, CallMode::Forced(None)).expect_err("refused");
            assert_eq!(e.path, "tools[1].function.parameters.properties.x.type");
            // A named call only reads its own tool's schema.
            let Ok(Spec::Lark(g)) = call_grammar(format, &tools, CallMode::Forced(Some("a")))
            else {
                panic!("a grammar")
            };
            assert!(g.starts_with("start: call_0\n"), "{g}");
        }
    }
}
