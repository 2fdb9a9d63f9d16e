//! Tools and thinking on the request side, shared by the OpenAI and Anthropic endpoints:
//! the declared tools, what `tool_choice` asks for, and how the prompt and the output parser
//! are set up for it.
//!
//! `tool_choice` `required` (Anthropic `any`) and a named tool start the assistant's turn inside
//! a call (the format's opening, with the function name for a named tool) and turn thinking off
//! for that request, as Anthropic's API does for forced tool use. The rest of the call is
//! generated under the parser format's grammar (`server/structured.rs`, `grammar/tools.rs`): a
//! well-formed call of a declared tool whose arguments match its schema; under `auto` the same
//! grammar holds any call the model opens (`--disable-tool-grammar`: none). `none` leaves the
//! tools out of the prompt and parses no calls.

use serde_json::{Map, Value};

use super::AppState;
use super::error::ApiError;
use crate::grammar::Think;
use crate::tool_parsers::{OutputParser, ParseEvent, ReasoningFormat, ToolCallFormat, ToolSpec};

/// What `tool_choice` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolMode {
    /// No tools, or `none`: tools are not shown to the model, calls are not parsed.
    Off,
    Auto,
    /// At least one call (OpenAI `required`, Anthropic `any`).
    Required,
    /// A call of this tool.
    Named(String),
}

/// How one request's reply is prompted and parsed.
#[derive(Debug, Clone)]
pub struct ReplyPlan {
    /// The prompt: the rendered template plus `prefill`.
    pub prompt_ids: Vec<u32>,
    /// Text the assistant's turn starts with (a forced call's opening); the parser sees it
    /// first, the client never sees it on its own.
    pub prefill: String,
    pub reasoning: Option<ReasoningFormat>,
    /// The prompt opened a `<think>` block.
    pub reasoning_open: bool,
    /// The prompt closed an (empty) `<think>` block: thinking is off.
    pub reasoning_closed: bool,
    /// `<think>`/`</think>` are special tokens of the tokenizer (Nemotron-H's): with
    /// `--reasoning-parser qwen3` the reply's text must keep them, or the parser never sees
    /// where the reasoning ends.
    pub think_tags_special: bool,
    pub calls: Option<(ToolCallFormat, Vec<ToolSpec>)>,
}

impl ReplyPlan {
    /// Whether the reply's text must keep special tokens: the calls' markers are special
    /// tokens in the parser's format (Mistral's `[TOOL_CALLS]`, harmony's channels, with or
    /// without tools; vLLM does the same), or the reasoning's tags are.
    pub fn keeps_special_tokens(&self) -> bool {
        self.reasoning == Some(ReasoningFormat::Harmony)
            || (self.reasoning == Some(ReasoningFormat::Qwen3) && self.think_tags_special)
            || self
                .calls
                .as_ref()
                .is_some_and(|(format, _)| format.needs_special_tokens())
    }

    /// A parser for one choice; call ids are `id_prefix` and the call's index.
    pub fn parser(&self, id_prefix: &str) -> (OutputParser, Vec<ParseEvent>) {
        let mut p = OutputParser::new(
            self.reasoning,
            self.reasoning_open,
            self.calls.clone(),
            id_prefix,
        );
        let first = if self.prefill.is_empty() {
            vec![]
        } else {
            p.push(&self.prefill)
        };
        (p, first)
    }

    /// Where a grammar on the reply starts: after the reasoning section, if there is one.
    pub fn think(&self) -> Think {
        match self.reasoning {
            // Harmony's reasoning is a message of its own, not a `<think>` section the
            // grammar could let through: a constrained reply starts at the constrained text
            // (which the parser reads as the answer, having no channel header).
            None | Some(ReasoningFormat::Harmony) => Think::Off,
            Some(_) if self.reasoning_open => Think::Open,
            Some(_) if self.reasoning_closed => Think::Off,
            Some(_) => Think::Optional,
        }
    }

    pub fn parses(&self) -> bool {
        self.reasoning.is_some() || self.calls.is_some()
    }
}

/// The tools of an OpenAI request: `[{"type": "function", "function": {"name", "parameters"}}]`.
pub fn openai_tools(tools: &[Value]) -> Result<Vec<ToolSpec>, ApiError> {
    tools
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let f = t.get("function").ok_or_else(|| {
                ApiError::invalid(
                    format!("tools[{i}].function"),
                    "a tool needs `function` with a `name`: {\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": {...}}}",
                )
            })?;
            let name = f.get("name").and_then(Value::as_str).unwrap_or_default();
            if name.is_empty() {
                return Err(ApiError::invalid(
                    format!("tools[{i}].function.name"),
                    "a tool needs a non-empty `name`",
                ));
            }
            Ok(ToolSpec {
                name: name.to_owned(),
                parameters: f.get("parameters").cloned().unwrap_or(Value::Null),
            })
        })
        .collect()
}

/// OpenAI `tool_choice`: `none`, `auto`, `required`, or `{"type": "function", "function":
/// {"name": ...}}`.
pub fn openai_tool_mode(choice: Option<&Value>, tools: &[ToolSpec]) -> Result<ToolMode, ApiError> {
    let named = |v: &Value| {
        v.get("function")
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let mode = match choice {
        None | Some(Value::Null) => ToolMode::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "auto" => ToolMode::Auto,
            "none" => ToolMode::Off,
            "required" => ToolMode::Required,
            other => {
                return Err(ApiError::invalid(
                    "tool_choice",
                    format!(
                        "`tool_choice` must be `auto`, `none`, `required` or {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}, got `{other}`"
                    ),
                ));
            }
        },
        Some(v) => ToolMode::Named(named(v).ok_or_else(|| {
            ApiError::invalid(
                "tool_choice",
                "a named `tool_choice` is {\"type\": \"function\", \"function\": {\"name\": ...}}",
            )
        })?),
    };
    check_mode(mode, tools, "tool_choice")
}

/// A mode that asks for calls needs tools, and a named tool must be declared.
pub fn check_mode(mode: ToolMode, tools: &[ToolSpec], param: &str) -> Result<ToolMode, ApiError> {
    match &mode {
        _ if tools.is_empty() && matches!(mode, ToolMode::Required | ToolMode::Named(_)) => {
            Err(ApiError::invalid(
                param,
                "this `tool_choice` asks for a tool call, but the request declares no `tools`",
            ))
        }
        _ if tools.is_empty() => Ok(ToolMode::Off),
        ToolMode::Named(n) if !tools.iter().any(|t| &t.name == n) => Err(ApiError::invalid(
            param,
            format!("`tool_choice` names `{n}`, which is not one of the request's `tools`"),
        )),
        _ => Ok(mode),
    }
}

/// Render `messages` (already in the template's shape) with `tools` as `mode` wants them,
/// and set up parsing. `kwargs` are the request's template variables.
pub fn plan(
    state: &AppState,
    messages: &[Value],
    tools_for_template: Option<&[Value]>,
    specs: Vec<ToolSpec>,
    mode: &ToolMode,
    request_kwargs: Option<&Map<String, Value>>,
    add_generation_prompt: bool,
) -> Result<ReplyPlan, ApiError> {
    let format = state.tool_call_parser;
    let forced = matches!(mode, ToolMode::Required | ToolMode::Named(_));
    if forced && format.is_none() {
        return Err(ApiError::Unsupported {
            message: "this `tool_choice` needs a tool-call parser: start met serve with \
                      --tool-call-parser (this model's: qwen3_coder, hermes, llama3_json, \
                      mistral, openai, minimax_m2, deepseek_v3, deepseek_v31 or nemotron_json)"
                .into(),
            param: "tool_choice".into(),
        });
    }
    let mut kwargs = request_kwargs.cloned().unwrap_or_default();
    if forced {
        // The reply starts inside a call, so there is no room to think first.
        kwargs.insert("enable_thinking".into(), Value::Bool(false));
    }
    let tools = match mode {
        ToolMode::Off => None,
        _ => tools_for_template,
    };
    let prefill = match (mode, format) {
        (ToolMode::Required, Some(f)) => f.forced_prefix(None),
        (ToolMode::Named(n), Some(f)) => f.forced_prefix(Some(n)),
        _ => String::new(),
    };
    let rendered = super::prompt::render(
        state,
        messages,
        tools,
        add_generation_prompt,
        Some(&kwargs),
        &prefill,
    )?;
    let calls = match (mode, format) {
        (ToolMode::Off, _) | (_, None) => None,
        (_, Some(f)) => Some((f, specs)),
    };
    Ok(ReplyPlan {
        prompt_ids: rendered.ids,
        prefill,
        reasoning: state.reasoning_parser,
        reasoning_open: rendered.reasoning_open,
        reasoning_closed: rendered.reasoning_closed,
        think_tags_special: ["<think>", "</think>"].iter().any(|t| {
            let tok = &state.tokenizer;
            tok.token_to_id(t).is_some_and(|id| tok.is_special(id))
        }),
        calls,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn specs() -> Vec<ToolSpec> {
        openai_tools(&[json!({"type": "function", "function": {"name": "f", "parameters": {}}})])
            .expect("valid")
    }

    /// Reasoning tags that are special tokens (Nemotron-H's) must survive decoding, or the
    /// qwen3 reasoning parser never sees `</think>`.
    #[test]
    fn special_think_tags_keep_special_tokens_in_the_text() {
        let plan = |reasoning, think_tags_special| ReplyPlan {
            prompt_ids: vec![],
            prefill: String::new(),
            reasoning,
            reasoning_open: true,
            reasoning_closed: false,
            think_tags_special,
            calls: None,
        };
        assert!(plan(Some(ReasoningFormat::Qwen3), true).keeps_special_tokens());
        assert!(!plan(Some(ReasoningFormat::Qwen3), false).keeps_special_tokens());
        assert!(!plan(None, true).keeps_special_tokens());
        let mut nemotron = plan(None, false);
        nemotron.calls = Some((ToolCallFormat::NemotronJson, specs()));
        assert!(nemotron.keeps_special_tokens());
    }

    #[test]
    fn tool_choice_values_map_to_modes_and_are_checked() {
        let m = |v: Value| openai_tool_mode(Some(&v), &specs());
        assert_eq!(m(json!("auto")), Ok(ToolMode::Auto));
        assert_eq!(m(json!("none")), Ok(ToolMode::Off));
        assert_eq!(m(json!("required")), Ok(ToolMode::Required));
        assert_eq!(
            m(json!({"type": "function", "function": {"name": "f"}})),
            Ok(ToolMode::Named("f".into()))
        );
        let e = m(json!({"type": "function", "function": {"name": "g"}})).expect_err("unknown");
        assert!(e.to_string().contains("`g`"), "{e}");
        assert!(m(json!("sometimes")).is_err());
        assert_eq!(
            openai_tool_mode(Some(&json!("auto")), &[]),
            Ok(ToolMode::Off),
            "no tools: nothing to parse"
        );
        assert!(openai_tool_mode(Some(&json!("required")), &[]).is_err());
        let e = openai_tools(&[json!({"type": "function"})]).expect_err("no function");
        assert_eq!(e.body().error.param.as_deref(), Some("tools[0].function"));
    }
}
