//! Grammars for tool calls in the call formats our parsers read (`tool_parsers/`), with each
//! call's arguments held to its tool's `parameters` schema:
//!
//! - **forced** (`tool_choice` `required` or named, Anthropic `any`/`tool`): the rest of one
//!   call after the format's forced opening (`ToolCallFormat::forced_prefix`), then the end;
//! - **auto**: free text, in which the format's opening marker opens a block of calls that
//!   must then be well formed (blocks and text may alternate), then the end. Text stays free
//!   until a block opens.
//!
//! A tag format's block ([`Frame`]) is its opening marker, the calls (one a block, or several
//! with a separator), its closing marker. A call is a head (which names the tool), the
//! arguments, a tail:
//!
//! | format | block | call |
//! | --- | --- | --- |
//! | hermes | `<tool_call>\n` call `\n</tool_call>` | `{"name": "NAME", "arguments": ` JSON `}` |
//! | qwen3_coder | `<tool_call>\n` call `\n</tool_call>` | `<function=NAME>\n` parameters (`xml_call.rs`) `</function>` |
//! | minimax_m2 | `<minimax:tool_call>\n` calls, `\n` between, `\n</minimax:tool_call>` | `<invoke name="NAME">\n` parameters `</invoke>` |
//! | nemotron_json | `<TOOLCALL>[` calls, `, ` between, `]</TOOLCALL>` | as hermes's |
//! | deepseek_v3 | `<｜tool▁calls▁begin｜>` calls `<｜tool▁calls▁end｜>` | `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n` JSON `\n```<｜tool▁call▁end｜>` |
//! | deepseek_v31 | as V3's | `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>` JSON `<｜tool▁call▁end｜>` |
//!
//! Every fixed piece goes through [`Specials::lark`]: a marker that is a special token of the
//! tokenizer is written as that token (DeepSeek's always are; the grammar refuses a tokenizer
//! without them), anything else as text. Llama 3's, Mistral's and harmony's calls have no
//! closing tag: they are held only when forced ([`json_forced`]).

use serde_json::{Value, json};

use super::marks::Specials;
use super::schema::{self, SchemaError};
use super::xml_call::{self, Style};
use super::{GrammarError, Spec};
use crate::tool_parsers::{ToolCallFormat, deepseek};

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

/// How a tag format lays out a block of calls (see the module's table).
struct Frame {
    open: &'static str,
    /// After `open`, before the first call.
    before: &'static str,
    /// Between two calls of one block; `None`: one call a block.
    sep: Option<&'static str>,
    /// After the last call, before `close`.
    after: &'static str,
    close: &'static str,
}

/// The block layout of a tag format; `None` for Llama 3's, Mistral's and harmony's.
fn frame(format: ToolCallFormat) -> Option<Frame> {
    let (open, close) = format.tags();
    let (before, sep, after) = match format {
        ToolCallFormat::Hermes | ToolCallFormat::Qwen3Coder => ("\n", None, "\n"),
        ToolCallFormat::MiniMaxM2 => ("\n", Some("\n"), "\n"),
        ToolCallFormat::NemotronJson => ("[", Some(", "), "]"),
        ToolCallFormat::DeepSeekV3 | ToolCallFormat::DeepSeekV31 => ("", Some(""), ""),
        ToolCallFormat::Llama3Json | ToolCallFormat::Mistral | ToolCallFormat::Harmony => {
            return None;
        }
    };
    Some(Frame {
        open,
        before,
        sep,
        after,
        close,
    })
}

/// The markers a format's calls are written with that must be special tokens of the
/// tokenizer (DeepSeek's: as text they are not what the model writes).
fn special_markers(format: ToolCallFormat) -> &'static [&'static str] {
    match format {
        ToolCallFormat::DeepSeekV3 | ToolCallFormat::DeepSeekV31 => &[
            deepseek::OPEN,
            deepseek::CALL_BEGIN,
            deepseek::SEP,
            deepseek::CALL_END,
            deepseek::CLOSE,
        ],
        _ => &[],
    }
}

/// The grammar of `mode`'s calls in `format` (rules in Lark, entry rule `start`), its fixed
/// text written as `specials` says. A schema error names the tool's schema part
/// (`tools[i].function.parameters...`); a DeepSeek format on a tokenizer without its special
/// tokens is [`GrammarError::MissingMarker`].
pub fn call_grammar(
    format: ToolCallFormat,
    tools: &[ToolSchema<'_>],
    mode: CallMode<'_>,
    specials: &Specials,
) -> Result<Spec, GrammarError> {
    if let Some(token) = special_markers(format)
        .iter()
        .copied()
        .find(|t| specials.id(t).is_none())
    {
        return Err(GrammarError::MissingMarker {
            format: format.flag_value(),
            token,
        });
    }
    let Some(frame) = frame(format) else {
        return match mode {
            CallMode::Forced(named) => Ok(json_forced(format, tools, named, specials)?),
            CallMode::Auto => Err(SchemaError::new(
                "tool_choice",
                format!(
                    "{} calls have no opening tag a grammar could wait for: under `auto` \
                     they are read as the model writes them",
                    format.flag_value()
                ),
            )
            .into()),
        };
    };
    let mut rules = Vec::new();
    let mut alts = Vec::new();
    // What the reply already holds before the grammar starts (forced: the opening).
    let written = match mode {
        CallMode::Forced(named) => format.forced_prefix(named),
        CallMode::Auto => format!("{}{}", frame.open, frame.before),
    };
    let end = match mode {
        CallMode::Forced(_) => specials.lark(&format!("{}{}", frame.after, frame.close)),
        CallMode::Auto => String::new(),
    };
    for (i, t) in tools.iter().enumerate() {
        if let CallMode::Forced(Some(n)) = mode
            && n != t.name
        {
            continue;
        }
        let param = format!("tools[{i}].function.parameters");
        let head = format!("{}{}{}", frame.open, frame.before, head(format, t.name));
        // The forced opening is the head's start (`forced_prefix` writes it the same way).
        let rest = head.strip_prefix(written.as_str()).unwrap_or(&head);
        let (args, mut arg_rules) = match format {
            ToolCallFormat::Qwen3Coder => {
                xml_call::parameters(Style::Qwen3Coder, t.parameters, &param, i)?
            }
            ToolCallFormat::MiniMaxM2 => {
                xml_call::parameters(Style::MiniMax, t.parameters, &param, i)?
            }
            _ => (
                format!("%json {}", json_args(t.parameters, &param)?),
                vec![],
            ),
        };
        rules.append(&mut arg_rules);
        let parts = [
            specials.lark(rest),
            args,
            specials.lark(&tail(format)),
            end.clone(),
        ];
        let parts: Vec<&str> = parts
            .iter()
            .map(String::as_str)
            .filter(|p| !p.is_empty())
            .collect();
        rules.push(format!("call_{i}: {}", parts.join(" ")));
        alts.push(format!("call_{i}"));
    }
    let calls = alts.join(" | ");
    let top = match mode {
        CallMode::Forced(_) => format!("start: {calls}"),
        CallMode::Auto => auto_top(&frame, &calls, specials),
    };
    Ok(Spec::Lark(format!("{top}\n{}\n", rules.join("\n"))))
}

/// Under `auto`: text up to a block's opening, the block, and again; or text to the end.
fn auto_top(frame: &Frame, calls: &str, specials: &Specials) -> String {
    let sep = match frame.sep {
        None => String::new(),
        Some(s) => match specials.lark(s) {
            s if s.is_empty() => "call*".to_owned(),
            s => format!("({s} call)*"),
        },
    };
    let block = [
        specials.lark(frame.before),
        "call".into(),
        sep,
        specials.lark(&format!("{}{}", frame.after, frame.close)),
    ];
    let block: Vec<&str> = block
        .iter()
        .map(String::as_str)
        .filter(|p| !p.is_empty())
        .collect();
    let block = block.join(" ");
    match specials.id(frame.open) {
        // A special token is never part of a text lexeme: text ends where it comes.
        Some(id) => format!(
            "start: TEXT | TEXT <[{id}]> block start\n\
             block: {block}\n\
             call: {calls}\n\
             TEXT: /(?s:.*)/"
        ),
        // A lazy text lexeme ends at the opening tag, so free text never holds it.
        None => format!(
            "start: TEXT | text_open block start\n\
             block: {block}\n\
             call: {calls}\n\
             text_open[suffix={}]: TEXT\n\
             TEXT: /(?s:.*)/",
            lark_str(frame.open)
        ),
    }
}

/// Whether `format` has a grammar under `auto` (an opening marker the text waits for).
pub fn has_auto_grammar(format: ToolCallFormat) -> bool {
    frame(format).is_some()
}

/// A forced call in Llama 3's JSON or Mistral's format, after the forced opening: Llama 3's
/// `{"name": "` for any tool (`{"name": "NAME", "parameters": ` for a named one), the call's
/// `}` ending the message; Mistral's `[TOOL_CALLS]` for any tool (then `NAME[ARGS]`),
/// `[TOOL_CALLS]NAME[ARGS]` for a named one, the arguments object ending the message.
fn json_forced(
    format: ToolCallFormat,
    tools: &[ToolSchema<'_>],
    named: Option<&str>,
    specials: &Specials,
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
        format!(" {}", specials.lark(close))
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
            None => format!("{} %json {args}{close}", specials.lark(&head(t.name))),
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

/// A call's head in a tag format: what comes before its arguments.
fn head(format: ToolCallFormat, name: &str) -> String {
    match format {
        ToolCallFormat::Hermes | ToolCallFormat::NemotronJson => format!(
            "{{\"name\": {}, \"arguments\": ",
            Value::String(name.into())
        ),
        ToolCallFormat::Qwen3Coder => format!("<function={name}>\n"),
        ToolCallFormat::MiniMaxM2 => format!("<invoke name=\"{name}\">\n"),
        ToolCallFormat::DeepSeekV3 => format!(
            "{}function{}{name}\n```json\n",
            deepseek::CALL_BEGIN,
            deepseek::SEP
        ),
        ToolCallFormat::DeepSeekV31 => {
            format!("{}{name}{}", deepseek::CALL_BEGIN, deepseek::SEP)
        }
        // No frame: forced only, through json_forced.
        ToolCallFormat::Llama3Json | ToolCallFormat::Mistral | ToolCallFormat::Harmony => {
            String::new()
        }
    }
}

/// A call's tail in a tag format: what comes after its arguments.
fn tail(format: ToolCallFormat) -> String {
    match format {
        ToolCallFormat::Hermes | ToolCallFormat::NemotronJson => "}".into(),
        ToolCallFormat::Qwen3Coder => "</function>".into(),
        ToolCallFormat::MiniMaxM2 => "</invoke>".into(),
        ToolCallFormat::DeepSeekV3 => format!("\n```{}", deepseek::CALL_END),
        ToolCallFormat::DeepSeekV31 => deepseek::CALL_END.into(),
        ToolCallFormat::Llama3Json | ToolCallFormat::Mistral | ToolCallFormat::Harmony => {
            String::new()
        }
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
        let none = Specials::default();
        for format in [
            ToolCallFormat::Hermes,
            ToolCallFormat::Qwen3Coder,
            ToolCallFormat::NemotronJson,
        ] {
            let e = call_grammar(format, &tools, CallMode::Forced(None), &none);
            let Err(GrammarError::Schema(e)) = e else {
                panic!("refused by name: {e:?}")
            };
            assert_eq!(e.path, "tools[1].function.parameters.properties.x.type");
            // A named call only reads its own tool's schema.
            let named = call_grammar(format, &tools, CallMode::Forced(Some("a")), &none);
            let Ok(Spec::Lark(g)) = named else {
                panic!("a grammar")
            };
            assert!(g.starts_with("start: call_0\n"), "{g}");
        }
    }

    /// DeepSeek's markers are special tokens: written by id, and a tokenizer without one is
    /// refused by the token's name.
    #[test]
    fn deepseek_markers_are_special_tokens_or_the_grammar_says_which_is_missing() {
        let any = json!({"type": "object"});
        let tools = [ToolSchema {
            name: "f",
            parameters: &any,
        }];
        let markers = [
            (deepseek::OPEN, 10),
            (deepseek::CALL_BEGIN, 11),
            (deepseek::SEP, 12),
            (deepseek::CALL_END, 13),
            (deepseek::CLOSE, 14),
        ];
        let specials = Specials::from_pairs(&markers);
        let Ok(Spec::Lark(g)) = call_grammar(
            ToolCallFormat::DeepSeekV31,
            &tools,
            CallMode::Auto,
            &specials,
        ) else {
            panic!("a grammar")
        };
        assert!(
            g.starts_with("start: TEXT | TEXT <[10]> block start\n"),
            "{g}"
        );
        assert!(g.contains("call_0: <[11]> \"f\" <[12]> %json"), "{g}");
        assert!(g.contains("block: call call* <[14]>"), "{g}");
        let partial = Specials::from_pairs(&markers[..4]);
        let e = call_grammar(
            ToolCallFormat::DeepSeekV3,
            &tools,
            CallMode::Forced(None),
            &partial,
        )
        .expect_err("refused");
        assert!(
            matches!(e, GrammarError::MissingMarker { token, .. } if token == deepseek::CLOSE),
            "{e}"
        );
        assert!(e.to_string().contains(deepseek::CLOSE), "{e}");
    }
}
