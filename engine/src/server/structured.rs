//! Structured outputs at the edge: `response_format` (chat and completions) read, checked and
//! compiled into the request's [`Constraint`] on the tokenizer worker, before anything is
//! submitted, so a bad schema is a 400 that names its part and costs no compute.

use std::sync::Arc;

use serde_json::Value;

use super::AppState;
use super::error::ApiError;
use super::params::Generation;
use super::tool_use::ToolMode;
use crate::grammar::tools::{self, ToolSchema};
use crate::grammar::{Constraint, GrammarError, Grammars, Spec};
use crate::tool_parsers::{ToolCallFormat, ToolSpec};

/// Put the constraint `rf` asks for on `generation` (nothing for absent or `text`).
pub fn attach(
    state: &AppState,
    generation: &mut Generation,
    rf: Option<&Value>,
) -> Result<(), ApiError> {
    let Some(c) = response_format(state, rf)? else {
        return Ok(());
    };
    if generation.sampling.ignore_eos {
        return Err(ApiError::invalid(
            "ignore_eos",
            "`ignore_eos` cannot be combined with `response_format`: a complete value ends \
             with end-of-sequence; drop `ignore_eos`",
        ));
    }
    generation.sampling.constraint = Some(c);
    Ok(())
}

/// A forced call (`tool_choice` `required` or named) in a format with a call grammar (hermes,
/// llama3_json, mistral): the reply after the forced opening is held to a well-formed call whose arguments
/// match the tool's `parameters`. Other formats keep the opening alone (`tool_use.rs`).
pub fn forced_tool_call(
    state: &AppState,
    generation: &mut Generation,
    mode: &ToolMode,
    specs: &[ToolSpec],
) -> Result<(), ApiError> {
    let named = match mode {
        ToolMode::Required => None,
        ToolMode::Named(n) => Some(n.as_str()),
        ToolMode::Off | ToolMode::Auto => return Ok(()),
    };
    let grammar = match state.tool_call_parser {
        Some(ToolCallFormat::Hermes) => tools::hermes_forced,
        Some(ToolCallFormat::Llama3Json) => tools::llama3_json_forced,
        Some(ToolCallFormat::Mistral) => tools::mistral_forced,
        Some(ToolCallFormat::Qwen3Coder) | None => return Ok(()),
    };
    if generation.sampling.constraint.is_some() {
        return Err(ApiError::invalid(
            "tool_choice",
            "a forced tool call and `response_format` cannot both hold the reply: drop one",
        ));
    }
    let tools: Vec<ToolSchema<'_>> = specs
        .iter()
        .map(|t| ToolSchema {
            name: &t.name,
            parameters: &t.parameters,
        })
        .collect();
    let spec =
        grammar(&tools, named).map_err(|e| ApiError::invalid(e.path.clone(), e.to_string()))?;
    generation.sampling.constraint = Some(compile(state, &spec, "tools")?);
    Ok(())
}

/// The constraint `response_format` asks for (`None` for absent or `text`).
pub fn response_format(
    state: &AppState,
    rf: Option<&Value>,
) -> Result<Option<Constraint>, ApiError> {
    let Some(rf) = rf.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let kind = rf.get("type").and_then(Value::as_str).ok_or_else(|| {
        ApiError::invalid(
            "response_format.type",
            "`response_format` needs a `type`: `text`, `json_object` or `json_schema`",
        )
    })?;
    let (spec, param) = match kind {
        "text" => return Ok(None),
        "json_object" => (Spec::JsonObject, "response_format"),
        "json_schema" => {
            let js = rf.get("json_schema").ok_or_else(|| {
                ApiError::invalid(
                    "response_format.json_schema",
                    "`json_schema` responses need `response_format.json_schema` with a \
                     `schema` (and a `name`)",
                )
            })?;
            let schema = js.get("schema").cloned().ok_or_else(|| {
                ApiError::invalid(
                    "response_format.json_schema.schema",
                    "`response_format.json_schema.schema` is missing: give the JSON schema \
                     the reply must match",
                )
            })?;
            let strict = match js.get("strict") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => {
                    return Err(ApiError::invalid(
                        "response_format.json_schema.strict",
                        "`strict` must be true or false",
                    ));
                }
            };
            (
                Spec::JsonSchema { schema, strict },
                "response_format.json_schema.schema",
            )
        }
        other => {
            return Err(ApiError::invalid(
                "response_format.type",
                format!(
                    "unknown response_format type `{other}`: use `text`, `json_object` or \
                     `json_schema`"
                ),
            ));
        }
    };
    compile(state, &spec, param).map(Some)
}

/// Compile `spec` with the model's grammar compiler (built on first use); checks that the
/// server can constrain at all.
pub fn compile(state: &AppState, spec: &Spec, param: &str) -> Result<Constraint, ApiError> {
    if state.speculative {
        return Err(ApiError::Unsupported {
            message: "structured outputs are not available with --speculative yet (drafts are \
                      not checked against the grammar); serve without --speculative"
                .into(),
            param: param.into(),
        });
    }
    let grammars = grammars(state)?;
    grammars.compile(spec, param).map_err(|e| match e {
        GrammarError::Schema(s) => ApiError::invalid(s.path.clone(), s.to_string()),
        GrammarError::Vocabulary(_) => ApiError::Unsupported {
            message: e.to_string(),
            param: param.into(),
        },
    })
}

/// The model's grammar compiler, built once from the tokenizer and the engine's vocabulary.
fn grammars(state: &AppState) -> Result<Arc<Grammars>, ApiError> {
    let engine = state.engine()?;
    let built = state.grammars.get_or_init(|| {
        let info = engine.info();
        let eos = info.eos_token_ids.first().copied().ok_or_else(|| {
            "the checkpoint names no end-of-sequence token (generation_config.json \
             `eos_token_id`), so a constrained reply could never end"
                .to_string()
        })?;
        Grammars::new(state.tokenizer.hf(), info.vocab_size, eos)
            .map(Arc::new)
            .map_err(|e| e.to_string())
    });
    built.clone().map_err(|message| ApiError::Unsupported {
        message,
        param: "response_format".into(),
    })
}
