//! Anthropic's Messages API: `POST /v1/messages` (whole or streamed) and
//! `POST /v1/messages/count_tokens`. Errors on these routes are in Anthropic's envelope.
//!
//! A request becomes the same template messages as a chat completion: `system` (text or text
//! blocks) a system message, `tool_use` blocks the assistant's `tool_calls`, `tool_result`
//! blocks `tool` messages, `thinking` blocks the assistant's `reasoning_content`. `thinking`
//! `enabled`/`disabled` sets the template's `enable_thinking`; absent, the server's default
//! holds (the template's, or `--disable-thinking`).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, StreamExt};
use metrale_protocol::anthropic::{
    Block, Content, CountTokensRequest, CountTokensResponse, DeltaUsage, Message, MessageDelta,
    MessageRole, MessagesRequest, MessagesResponse, StopReason, StreamEvent, System, Thinking,
    Tool, ToolChoice, Usage,
};
use metrale_protocol::openai::{FinishReason, SamplingFields, Stop, StopReason as OpenAiStop};
use serde_json::{Map, Value, json};

use super::AppState;
use super::assemble::{AnthropicBlocks, anthropic_content};
use super::body::{JsonBody, from_value, parse_object};
use super::error::{AnthropicError, ApiError};
use super::generate::{self, Event, PromptIds};
use super::params::{Extras, Generation};
use super::tool_use::{self, ReplyPlan, ToolMode};
use crate::tool_parsers::{OutputParser, ParseEvent, ToolSpec};

/// The prompt side of a request, shared by both routes.
struct PromptFields<'a> {
    messages: &'a [Message],
    system: Option<&'a System>,
    tools: Option<&'a [Tool]>,
    tool_choice: Option<&'a ToolChoice>,
    thinking: Option<&'a Thinking>,
}

/// The prompt side of a messages or count_tokens request (same fields, two types).
macro_rules! prompt_fields {
    ($req:expr) => {
        PromptFields {
            messages: &$req.messages,
            system: $req.system.as_ref(),
            tools: $req.tools.as_deref(),
            tool_choice: $req.tool_choice.as_ref(),
            thinking: $req.thinking.as_ref(),
        }
    };
}

fn unsupported_block(param: String, kind: &str) -> ApiError {
    ApiError::Unsupported {
        message: format!(
            "content blocks of type `{kind}` are not supported: this model reads text"
        ),
        param,
    }
}

fn block_kind(b: &Map<String, Value>) -> &str {
    b.get("type").and_then(Value::as_str).unwrap_or("unknown")
}

/// Text blocks joined with newlines; any other block is refused, naming it.
fn join_text(blocks: &[Block], param: &str) -> Result<String, ApiError> {
    let mut texts = Vec::with_capacity(blocks.len());
    for (j, b) in blocks.iter().enumerate() {
        match b {
            Block::Text { text } => texts.push(text.as_str()),
            Block::Other(m) => {
                return Err(unsupported_block(
                    format!("{param}[{j}].type"),
                    block_kind(m),
                ));
            }
            _ => {
                return Err(ApiError::invalid(
                    format!("{param}[{j}].type"),
                    "only `text` blocks are allowed here",
                ));
            }
        }
    }
    Ok(texts.join("\n"))
}

fn content_text(c: &Content, param: &str) -> Result<String, ApiError> {
    match c {
        Content::Text(t) => Ok(t.clone()),
        Content::Blocks(b) => join_text(b, param),
    }
}

/// Anthropic messages → the template's (OpenAI-shaped) messages.
fn template_messages(f: &PromptFields) -> Result<Vec<Value>, ApiError> {
    if f.messages.is_empty() {
        return Err(ApiError::invalid(
            "messages",
            "`messages` must contain at least one message",
        ));
    }
    if f.messages
        .last()
        .is_some_and(|m| m.role == MessageRole::Assistant)
    {
        return Err(ApiError::Unsupported {
            message:
                "a final assistant message (prefill) is not supported: end with a user message"
                    .into(),
            param: format!("messages[{}].role", f.messages.len() - 1),
        });
    }
    let mut out = Vec::new();
    match f.system {
        Some(System::Text(s)) => out.push(json!({"role": "system", "content": s})),
        Some(System::Blocks(b)) => {
            out.push(json!({"role": "system", "content": join_text(b, "system")?}));
        }
        None => {}
    }
    for (i, m) in f.messages.iter().enumerate() {
        let param = format!("messages[{i}].content");
        let blocks = match &m.content {
            Content::Text(t) => {
                let role = match m.role {
                    MessageRole::User => "user",
                    MessageRole::Assistant => "assistant",
                };
                out.push(json!({"role": role, "content": t}));
                continue;
            }
            Content::Blocks(b) => b,
        };
        match m.role {
            MessageRole::User => {
                let mut text: Vec<&str> = Vec::new();
                for (j, b) in blocks.iter().enumerate() {
                    match b {
                        Block::Text { text: t } => text.push(t),
                        Block::ToolResult {
                            tool_use_id,
                            content,
                            ..
                        } => {
                            if !text.is_empty() {
                                out.push(json!({"role": "user", "content": text.join("\n")}));
                                text.clear();
                            }
                            let result = match content {
                                Some(c) => content_text(c, &format!("{param}[{j}].content"))?,
                                None => String::new(),
                            };
                            out.push(json!({"role": "tool", "tool_call_id": tool_use_id, "content": result}));
                        }
                        Block::Other(o) => {
                            return Err(unsupported_block(
                                format!("{param}[{j}].type"),
                                block_kind(o),
                            ));
                        }
                        _ => {
                            return Err(ApiError::invalid(
                                format!("{param}[{j}].type"),
                                "user messages hold `text` and `tool_result` blocks",
                            ));
                        }
                    }
                }
                if !text.is_empty() {
                    out.push(json!({"role": "user", "content": text.join("\n")}));
                }
            }
            MessageRole::Assistant => {
                let (mut text, mut thinking, mut calls) = (Vec::new(), Vec::new(), Vec::new());
                for (j, b) in blocks.iter().enumerate() {
                    match b {
                        Block::Text { text: t } => text.push(t.as_str()),
                        Block::Thinking { thinking: t, .. } => thinking.push(t.as_str()),
                        Block::RedactedThinking { .. } => {}
                        Block::ToolUse { id, name, input } => calls.push(json!({
                            "id": id, "type": "function",
                            "function": {"name": name, "arguments": input}})),
                        Block::Other(o) => {
                            return Err(unsupported_block(
                                format!("{param}[{j}].type"),
                                block_kind(o),
                            ));
                        }
                        Block::ToolResult { .. } => {
                            return Err(ApiError::invalid(
                                format!("{param}[{j}].type"),
                                "`tool_result` blocks belong in user messages",
                            ));
                        }
                    }
                }
                let mut msg = json!({"role": "assistant", "content": text.join("\n")});
                if !thinking.is_empty() {
                    msg["reasoning_content"] = Value::String(thinking.join("\n"));
                }
                if !calls.is_empty() {
                    msg["tool_calls"] = Value::Array(calls);
                }
                out.push(msg);
            }
        }
    }
    Ok(out)
}

/// Tools for the template (OpenAI's shape) and for the parser.
fn tools(tools: &[Tool]) -> Result<(Vec<Value>, Vec<ToolSpec>), ApiError> {
    let mut for_template = Vec::with_capacity(tools.len());
    let mut specs = Vec::with_capacity(tools.len());
    for (i, t) in tools.iter().enumerate() {
        let Some(schema) = &t.input_schema else {
            return Err(ApiError::Unsupported {
                message: format!(
                    "tool `{}` has no `input_schema`; Anthropic's server tools ({}) do not exist here",
                    t.name,
                    t.kind.as_deref().unwrap_or("type unknown")
                ),
                param: format!("tools[{i}].input_schema"),
            });
        };
        if t.name.is_empty() {
            return Err(ApiError::invalid(
                format!("tools[{i}].name"),
                "a tool needs a name",
            ));
        }
        let mut function = json!({"name": t.name, "parameters": schema});
        if let Some(d) = &t.description {
            function["description"] = Value::String(d.clone());
        }
        for_template.push(json!({"type": "function", "function": function}));
        specs.push(ToolSpec {
            name: t.name.clone(),
            parameters: schema.clone(),
        });
    }
    Ok((for_template, specs))
}

fn plan(state: &AppState, f: &PromptFields) -> Result<ReplyPlan, ApiError> {
    Ok(plan_with_tools(state, f)?.0)
}

/// [`plan`], with the tool mode and the tools (what a forced call's grammar needs).
fn plan_with_tools(
    state: &AppState,
    f: &PromptFields,
) -> Result<(ReplyPlan, ToolMode, Vec<ToolSpec>), ApiError> {
    let messages = template_messages(f)?;
    let (for_template, specs) = tools(f.tools.unwrap_or_default())?;
    let mode = match f.tool_choice {
        None | Some(ToolChoice::Auto { .. }) => ToolMode::Auto,
        Some(ToolChoice::Any { .. }) => ToolMode::Required,
        Some(ToolChoice::Tool { name, .. }) => ToolMode::Named(name.clone()),
        Some(ToolChoice::None) => ToolMode::Off,
    };
    let mode = tool_use::check_mode(mode, &specs, "tool_choice")?;
    let mut kwargs = Map::new();
    match f.thinking {
        Some(Thinking::Enabled { .. } | Thinking::Adaptive {} | Thinking::BetweenTools {}) => {
            kwargs.insert("enable_thinking".into(), Value::Bool(true));
        }
        Some(Thinking::Disabled) => {
            kwargs.insert("enable_thinking".into(), Value::Bool(false));
        }
        None => {}
    }
    let tools = (!for_template.is_empty()).then_some(for_template.as_slice());
    let plan = tool_use::plan(
        state,
        &messages,
        tools,
        specs.clone(),
        &mode,
        Some(&kwargs),
        true,
    )?;
    Ok((plan, mode, specs))
}

pub async fn count_tokens(
    State(state): State<Arc<AppState>>,
    body: Result<JsonBody, ApiError>,
) -> Result<axum::Json<CountTokensResponse>, AnthropicError> {
    let JsonBody(bytes) = body?;
    let input_tokens = state.on_workers(bytes, count).await?;
    Ok(axum::Json(CountTokensResponse { input_tokens }))
}

/// `count_tokens`' work, on a tokenizer worker.
fn count(state: &AppState, bytes: &[u8]) -> Result<usize, ApiError> {
    let body = parse_object(bytes)?;
    state.check_prompt_bytes(&body, "messages")?;
    let req: CountTokensRequest = from_value(&body)?;
    state.check_model(req.model.as_deref())?;
    state.engine()?;
    Ok(plan(state, &prompt_fields!(req))?.prompt_ids.len())
}

/// Why the reply ended, in Anthropic's terms.
fn stop_reason(
    finish: Option<(FinishReason, Option<OpenAiStop>)>,
    called: bool,
) -> (StopReason, Option<String>) {
    match finish {
        Some((FinishReason::Length, _)) => (StopReason::MaxTokens, None),
        Some((_, Some(OpenAiStop::Text(s)))) => (StopReason::StopSequence, Some(s)),
        _ if called => (StopReason::ToolUse, None),
        _ => (StopReason::EndTurn, None),
    }
}

fn usage(prompt_tokens: usize, cached: usize, output_tokens: usize) -> Usage {
    Usage {
        input_tokens: prompt_tokens.saturating_sub(cached),
        output_tokens,
        cache_read_input_tokens: cached,
        cache_creation_input_tokens: 0,
    }
}

/// A messages request as the tokenizer pool leaves it.
struct Prepared {
    req: MessagesRequest,
    generation: Generation,
    plan: ReplyPlan,
}

/// Everything a messages request needs before generation, on a tokenizer worker.
fn prepare(state: &AppState, bytes: &[u8]) -> Result<Prepared, ApiError> {
    let body = parse_object(bytes)?;
    state.check_prompt_bytes(&body, "messages")?;
    let req: MessagesRequest = from_value(&body)?;
    state.check_model(req.model.as_deref())?;
    let engine = state.engine()?;
    let max_tokens = req
        .max_tokens
        .ok_or_else(|| ApiError::invalid("max_tokens", "`max_tokens` is required"))?;
    let fields = SamplingFields {
        temperature: req.temperature,
        top_p: req.top_p,
        top_k: req.top_k,
        stop: req.stop_sequences.clone().map(Stop::Many),
        ..SamplingFields::default()
    };
    let mut generation = Generation::from_request(
        &fields,
        Extras {
            max_tokens: Some(max_tokens),
            ..Extras::default()
        },
        &state.defaults,
        engine.info(),
    )
    .map_err(|e| match e {
        // Our name for Anthropic's field.
        ApiError::InvalidRequest { message, param } if param.as_deref() == Some("stop") => {
            ApiError::InvalidRequest {
                message: message.replace("stop strings", "stop_sequences"),
                param: Some("stop_sequences".into()),
            }
        }
        e => e,
    })?;
    let (plan, mode, specs) = plan_with_tools(state, &prompt_fields!(req))?;
    if plan.keeps_special_tokens() {
        generation.skip_special_tokens = false;
    }
    // `any` and `tool` are held to a well-formed call whose input matches the tool's schema;
    // under `auto`, any call the model opens.
    let asked = super::structured::Asked {
        body: None,
        tools: Some((&mode, &specs)),
        think: plan.think(),
    };
    super::structured::attach(state, &mut generation, asked)?;
    Ok(Prepared {
        req,
        generation,
        plan,
    })
}

pub async fn messages(
    State(state): State<Arc<AppState>>,
    body: Result<JsonBody, ApiError>,
) -> Result<Response, AnthropicError> {
    let in_flight = state.in_flight();
    let arrival = Instant::now();
    let JsonBody(bytes) = body?;
    let Prepared {
        req,
        generation,
        plan,
    } = state.on_workers(bytes, prepare).await?;
    let prompts = vec![PromptIds {
        ids: plan.prompt_ids.clone(),
    }];
    let prompt_tokens = plan.prompt_ids.len();
    let choices = generate::launch(&state, &prompts, &generation, "messages", arrival)?;
    let id = format!("msg_{:032x}", rand::random::<u128>());
    let model = state.served_name.clone();
    let (parser, first) = plan.parser(&format!("toolu_{:016x}_", rand::random::<u64>()));

    if req.stream != Some(true) {
        let mut collected = generate::collect_all(choices).await?;
        let c = collected
            .pop()
            .ok_or_else(|| ApiError::Internal("no choice came back".into()))?;
        let mut reply = Reply::new(parser, first);
        let mut events = reply.push(&c.text);
        events.extend(reply.finish());
        let (stop, stop_sequence) = stop_reason(c.finish, reply.parser.num_calls > 0);
        drop(in_flight);
        return Ok(axum::Json(MessagesResponse {
            id,
            kind: "message".into(),
            role: "assistant".into(),
            model,
            content: anthropic_content(&events),
            stop_reason: Some(stop),
            stop_sequence,
            usage: usage(prompt_tokens, c.num_cached_tokens, c.num_tokens),
        })
        .into_response());
    }

    let start = StreamEvent::MessageStart {
        message: MessagesResponse {
            id,
            kind: "message".into(),
            role: "assistant".into(),
            model,
            content: vec![],
            stop_reason: None,
            stop_sequence: None,
            usage: usage(prompt_tokens, 0, 0),
        },
    };
    let mut reply = Reply::new(parser, first);
    let mut stop = (StopReason::EndTurn, None);
    let events = generate::merged(choices).flat_map(move |ev| {
        let out: Vec<StreamEvent> = match ev {
            Event::Delta { delta, .. } => {
                let mut out = reply.push(&delta.text);
                if delta.finish.is_some() {
                    out.extend(reply.finish());
                    stop = stop_reason(delta.finish, reply.parser.num_calls > 0);
                }
                out
            }
            Event::Done {
                completion_tokens, ..
            } => vec![
                StreamEvent::MessageDelta {
                    delta: MessageDelta {
                        stop_reason: Some(stop.0),
                        stop_sequence: stop.1.take(),
                    },
                    usage: DeltaUsage {
                        output_tokens: completion_tokens,
                    },
                },
                StreamEvent::MessageStop,
            ],
            Event::Error(e) => vec![StreamEvent::Error {
                error: e.anthropic_body().error,
            }],
        };
        stream::iter(out)
    });
    let body = stream::iter([start, StreamEvent::Ping])
        .chain(events)
        .map(move |ev| {
            // The stream holds the in-flight count until it ends or the client leaves.
            let _held = &in_flight;
            let data = serde_json::to_string(&ev).unwrap_or_else(|_| "{}".into());
            Ok::<_, Infallible>(SseEvent::default().event(ev.name()).data(data))
        });
    Ok(Sse::new(body)
        .keep_alive(KeepAlive::new().interval(super::sse::KEEP_ALIVE))
        .into_response())
}

/// One reply's parser and content blocks.
struct Reply {
    parser: OutputParser,
    /// The prefill's events, released with the first text.
    first: Vec<ParseEvent>,
    blocks: AnthropicBlocks,
}

impl Reply {
    fn new(parser: OutputParser, first: Vec<ParseEvent>) -> Self {
        Self {
            parser,
            first,
            blocks: AnthropicBlocks::default(),
        }
    }

    fn push(&mut self, text: &str) -> Vec<StreamEvent> {
        let mut events = std::mem::take(&mut self.first);
        if self.parser.is_active() {
            events.extend(self.parser.push(text));
        } else if !text.is_empty() {
            events.push(ParseEvent::Text(text.to_owned()));
        }
        self.blocks.push(events)
    }

    fn finish(&mut self) -> Vec<StreamEvent> {
        let mut out = self.blocks.push(self.parser.finish());
        out.extend(self.blocks.finish());
        out
    }
}
