//! Structured outputs at the edge: what holds a request's reply, read from its fields, checked
//! and compiled into the request's [`Constraint`] on the tokenizer worker before anything is
//! submitted, so a bad schema, regex or grammar is a 400 that names its field and part and
//! costs no compute.
//!
//! One of these may hold the reply: `response_format` (`json_object`, `json_schema`), vLLM's
//! `structured_outputs` (`json`, `regex`, `choice`, `grammar`, `json_object`) or its older
//! `guided_json`, `guided_regex`, `guided_choice`, `guided_grammar` (`extras.rs`), or the tool
//! grammar: a forced call (`tool_choice` `required` or named, Anthropic `any`/`tool`) in the
//! `--tool-call-parser` format, or under `auto` any calls the model opens
//! (`--disable-tool-grammar` turns the tool grammar off).

use std::sync::Arc;

use serde_json::Value;

use super::AppState;
use super::error::ApiError;
use super::params::Generation;
use super::tool_use::ToolMode;
use crate::grammar::tools::{self, CallMode, ToolSchema};
use crate::grammar::{Constraint, GrammarError, Grammars, Spec, Think};
use crate::tool_parsers::ToolSpec;

/// What a request asks of its reply's shape.
pub struct Asked<'a> {
    /// The request body (`response_format` and the vLLM fields); `None` for an API without
    /// them (Anthropic's).
    pub body: Option<&'a Value>,
    /// The tool choice and the declared tools (chat endpoints).
    pub tools: Option<(&'a ToolMode, &'a [ToolSpec])>,
    /// Where the reply's answer starts (after the reasoning section).
    pub think: Think,
}

/// Put the constraint `asked` needs on `generation`, if any.
pub fn attach(
    state: &AppState,
    generation: &mut Generation,
    asked: Asked<'_>,
) -> Result<(), ApiError> {
    let output = match asked.body {
        Some(body) => output_spec(body)?,
        None => None,
    };
    let forced = match asked.tools {
        Some((ToolMode::Required, _)) => Some(None),
        Some((ToolMode::Named(n), _)) => Some(Some(n.as_str())),
        _ => None,
    };
    if let (Some(_), Some((_, param))) = (forced, &output) {
        return Err(ApiError::invalid(
            param.clone(),
            format!(
                "a forced tool call (`tool_choice`) and `{param}` cannot both hold the reply: \
                 drop one"
            ),
        ));
    }
    if let Some((spec, param)) = output {
        // A benchmark's `ignore_eos` runs to max_tokens: one value after another, every token
        // under the grammar (a constrained ladder measures the masks' cost).
        generation.sampling.constraint = Some(if generation.sampling.ignore_eos {
            compile_repeated(state, &spec, &param)?
        } else {
            compile(state, &spec, &param, asked.think)?
        });
        return Ok(());
    }
    let (Some(format), Some((mode, specs))) = (state.tool_call_parser, asked.tools) else {
        return Ok(());
    };
    if !state.tool_grammar {
        return Ok(());
    }
    let (mode, think) = match (forced, mode) {
        // The forced opening is in the prompt and thinking is off (`tool_use.rs`).
        (Some(named), _) => (CallMode::Forced(named), Think::Off),
        // A benchmark's `ignore_eos` runs past the end a grammar would force.
        // Llama 3's, Mistral's and harmony's calls have no opening tag a grammar could wait
        // for.
        (None, ToolMode::Auto)
            if !generation.sampling.ignore_eos && tools::has_auto_grammar(format) =>
        {
            (CallMode::Auto, asked.think)
        }
        _ => return Ok(()),
    };
    let tools: Vec<ToolSchema<'_>> = specs
        .iter()
        .map(|t| ToolSchema {
            name: &t.name,
            parameters: &t.parameters,
        })
        .collect();
    let grammars = grammars(state, "tools")?;
    let spec = tools::call_grammar(format, &tools, mode, grammars.specials())
        .map_err(|e| grammar_error(e, "tools"))?;
    generation.sampling.constraint = Some(
        grammars
            .compile(&spec, "tools", think)
            .map_err(|e| grammar_error(e, "tools"))?,
    );
    Ok(())
}

/// The one field of `body` that holds the reply's shape, and its name (`None`: free text).
fn output_spec(body: &Value) -> Result<Option<(Spec, String)>, ApiError> {
    let mut found: Vec<(Spec, String)> = Vec::new();
    if let Some(rf) = response_format(body.get("response_format"))? {
        found.push(rf);
    }
    found.extend(super::extras::vllm_specs(body)?);
    if found.len() > 1 {
        let names: Vec<&str> = found.iter().map(|(_, p)| p.as_str()).collect();
        return Err(ApiError::invalid(
            found[1].1.clone(),
            format!(
                "only one of these can hold the reply, got {}: drop all but one",
                names.join(", ")
            ),
        ));
    }
    Ok(found.pop())
}

/// What `response_format` asks for (`None` for absent or `text`), with the field to name in
/// errors.
fn response_format(rf: Option<&Value>) -> Result<Option<(Spec, String)>, ApiError> {
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
    Ok(Some((spec, param.to_owned())))
}

/// Compile `spec` with the model's grammar compiler (built on first use); checks that the
/// server can constrain at all.
pub fn compile(
    state: &AppState,
    spec: &Spec,
    param: &str,
    think: Think,
) -> Result<Constraint, ApiError> {
    let grammars = grammars(state, param)?;
    grammars
        .compile(spec, param, think)
        .map_err(|e| grammar_error(e, param))
}

/// [`compile`] for an `ignore_eos` request (`Grammars::compile_repeated`).
fn compile_repeated(state: &AppState, spec: &Spec, param: &str) -> Result<Constraint, ApiError> {
    let grammars = grammars(state, param)?;
    grammars
        .compile_repeated(spec, param)
        .map_err(|e| grammar_error(e, param))
}

fn grammar_error(e: GrammarError, param: &str) -> ApiError {
    match e {
        GrammarError::Schema(s) => ApiError::invalid(s.path.clone(), s.to_string()),
        GrammarError::Vocabulary(_) | GrammarError::MissingMarker { .. } => ApiError::Unsupported {
            message: e.to_string(),
            param: param.into(),
        },
    }
}

/// The model's grammar compiler, built once from the tokenizer and the engine's vocabulary.
fn grammars(state: &AppState, param: &str) -> Result<Arc<Grammars>, ApiError> {
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
        param: param.into(),
    })
}
