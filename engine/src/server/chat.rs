//! `POST /v1/chat/completions`: messages through the chat template, then generation.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use metrale_protocol::openai::{
    AssistantMessage, ChatChoice, ChatChunkChoice, ChatCompletionChunk, ChatCompletionRequest,
    ChatCompletionResponse, ChatDelta, ChatLogprobs, ChatMessage, ChatTokenLogprob, FinishReason,
    MessageContent, Role, SamplingFields, TopLogprob,
};
use serde_json::{Map, Value};

use super::body::{JsonBody, from_value, parse_object};
use super::error::ApiError;
use super::generate::{self, PromptIds};
use super::output::{Logprob, TokenText};
use super::params::{Extras, Generation};
use super::{AppState, assemble, response_id, sse, tool_use, unix_now};

/// Template variables a request may not set: the server sets them.
const RESERVED_KWARGS: &[&str] = &["messages", "tools", "add_generation_prompt"];

/// Messages as the chat template wants them: `developer` becomes `system`, text parts are
/// joined with newlines. Anything but text is refused, naming the part.
pub fn template_messages(messages: &[ChatMessage]) -> Result<Vec<Value>, ApiError> {
    if messages.is_empty() {
        return Err(ApiError::invalid(
            "messages",
            "`messages` must contain at least one message",
        ));
    }
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut m = m.clone();
            if m.role == Role::Developer {
                m.role = Role::System;
            }
            if let Some(MessageContent::Parts(parts)) = &m.content {
                let mut texts = Vec::with_capacity(parts.len());
                for (j, p) in parts.iter().enumerate() {
                    match (p.kind.as_str(), &p.text) {
                        ("text", Some(t)) => texts.push(t.as_str()),
                        ("text", None) => {
                            return Err(ApiError::invalid(
                                format!("messages[{i}].content[{j}].text"),
                                "a text part needs `text`",
                            ));
                        }
                        (other, _) => {
                            return Err(ApiError::Unsupported {
                                message: format!(
                                    "content parts of type `{other}` are not supported: this \
                                     model reads text only"
                                ),
                                param: format!("messages[{i}].content[{j}].type"),
                            });
                        }
                    }
                }
                m.content = Some(MessageContent::Text(texts.join("\n")));
            }
            if m.content.is_none() && m.role != Role::Assistant {
                return Err(ApiError::invalid(
                    format!("messages[{i}].content"),
                    "only assistant messages may have no content",
                ));
            }
            let mut v = serde_json::to_value(&m).map_err(|e| ApiError::Internal(e.to_string()))?;
            arguments_as_objects(&mut v);
            Ok(v)
        })
        .collect()
}

/// Earlier tool calls' `function.arguments` arrive as JSON text; templates that walk the
/// arguments (Qwen3-Coder's `arguments|items`) need the object, and the others print either.
fn arguments_as_objects(message: &mut Value) {
    let Some(calls) = message.get_mut("tool_calls").and_then(Value::as_array_mut) else {
        return;
    };
    for call in calls {
        if let Some(args) = call
            .get_mut("function")
            .and_then(|f| f.get_mut("arguments"))
            && let Some(Ok(obj @ Value::Object(_))) =
                args.as_str().map(serde_json::from_str::<Value>)
        {
            *args = obj;
        }
    }
}

/// Render messages to prompt token ids (message content as text: `prompt.rs`). Shared with
/// `/tokenize`.
pub fn render_prompt(
    state: &AppState,
    messages: &[ChatMessage],
    tools: Option<&[Value]>,
    add_generation_prompt: bool,
    request_kwargs: Option<&Map<String, Value>>,
) -> Result<Vec<u32>, ApiError> {
    let values = template_messages(messages)?;
    super::prompt::render(
        state,
        &values,
        tools,
        add_generation_prompt,
        request_kwargs,
        "",
    )
    .map(|r| r.ids)
}

/// Render messages already in the template's shape (OpenAI's message objects) to text: the
/// server's template variables (`--disable-thinking`), then the request's.
pub fn render_text(
    state: &AppState,
    messages: &[Value],
    tools: Option<&[Value]>,
    add_generation_prompt: bool,
    request_kwargs: Option<&Map<String, Value>>,
) -> Result<String, ApiError> {
    let template = state
        .template
        .as_ref()
        .ok_or_else(|| ApiError::Unsupported {
            message: "this model has no chat template; use /v1/completions with a prompt".into(),
            param: "messages".into(),
        })?;
    let mut kwargs = state.template_kwargs.clone();
    if let Some(extra) = request_kwargs {
        if let Some(k) = RESERVED_KWARGS.iter().find(|k| extra.contains_key(**k)) {
            return Err(ApiError::invalid(
                "chat_template_kwargs",
                format!("`{k}` is set by the server and cannot be a template kwarg"),
            ));
        }
        kwargs.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    template
        .render(messages, tools, add_generation_prompt, &kwargs)
        .map_err(|e| ApiError::invalid("messages", e.to_string()))
}

fn refuse_unsupported(req: &ChatCompletionRequest) -> Result<(), ApiError> {
    if req
        .top_logprobs
        .is_some_and(|k| k > super::params::MAX_TOP_LOGPROBS)
    {
        return Err(ApiError::invalid(
            "top_logprobs",
            format!(
                "`top_logprobs` must be between 0 and {}",
                super::params::MAX_TOP_LOGPROBS
            ),
        ));
    }
    if req.top_logprobs.is_some_and(|k| k > 0) && req.logprobs != Some(true) {
        return Err(ApiError::invalid(
            "top_logprobs",
            "`top_logprobs` needs `logprobs: true`",
        ));
    }
    Ok(())
}

fn top_logprob(t: &TokenText, logprob: f32) -> TopLogprob {
    TopLogprob {
        token: t.text.clone(),
        logprob,
        bytes: t.bytes.clone(),
    }
}

pub fn chat_logprobs(lps: &[Logprob]) -> ChatLogprobs {
    ChatLogprobs {
        content: lps
            .iter()
            .map(|lp| ChatTokenLogprob {
                token: lp.token.text.clone(),
                logprob: lp.logprob,
                bytes: lp.token.bytes.clone(),
                top_logprobs: lp.top.iter().map(|(t, l)| top_logprob(t, *l)).collect(),
            })
            .collect(),
    }
}

/// A chat request as the tokenizer pool leaves it: parsed, checked, rendered, tokenized.
struct Prepared {
    req: ChatCompletionRequest,
    generation: Generation,
    plan: tool_use::ReplyPlan,
    want_logprobs: bool,
}

/// Everything a chat request needs before generation, on a tokenizer worker.
fn prepare(state: &AppState, bytes: &[u8]) -> Result<Prepared, ApiError> {
    let body = parse_object(bytes)?;
    state.check_prompt_bytes(&body, "messages")?;
    let fields: SamplingFields = from_value(&body)?;
    let req: ChatCompletionRequest = from_value(&body)?;
    state.check_model(req.model.as_deref())?;
    let engine = state.engine()?;
    refuse_unsupported(&req)?;
    let want_logprobs = req.logprobs == Some(true);
    let mut generation = Generation::from_request(
        &fields,
        Extras {
            max_tokens: req.max_completion_tokens.or(req.max_tokens),
            n: req.n,
            logprobs: want_logprobs.then(|| req.top_logprobs.unwrap_or(0)),
            prompt_logprobs: None,
            allow_zero_max_tokens: false,
        },
        &state.defaults,
        engine.info(),
    )?;
    let specs = match &req.tools {
        Some(tools) => tool_use::openai_tools(tools)?,
        None => Vec::new(),
    };
    let mode = tool_use::openai_tool_mode(req.tool_choice.as_ref(), &specs)?;
    let plan = tool_use::plan(
        state,
        &template_messages(&req.messages)?,
        req.tools.as_deref(),
        specs.clone(),
        &mode,
        req.chat_template_kwargs.as_ref(),
        req.add_generation_prompt.unwrap_or(true),
    )?;
    if plan.keeps_special_tokens() {
        generation.skip_special_tokens = false;
    }
    let asked = super::structured::Asked {
        body: Some(&body),
        tools: Some((&mode, &specs)),
        think: plan.think(),
    };
    super::structured::attach(state, &mut generation, asked)?;
    Ok(Prepared {
        req,
        generation,
        plan,
        want_logprobs,
    })
}

pub async fn chat_completions(
    State(state): State<Arc<AppState>>,
    JsonBody(bytes): JsonBody,
) -> Result<Response, ApiError> {
    let in_flight = state.in_flight();
    let arrival = Instant::now();
    let p = state.on_workers(bytes, prepare).await?;
    let (req, generation, plan) = (p.req, p.generation, p.plan);
    let want_logprobs = p.want_logprobs;
    let prompts = vec![PromptIds {
        ids: plan.prompt_ids.clone(),
    }];
    let choices = generate::launch(&state, &prompts, &generation, "messages", arrival)?;
    let id = response_id("chatcmpl");
    let created = unix_now();
    let model = state.served_name.clone();
    let call_ids = format!("call_{:016x}_", rand::random::<u64>());
    // One parser per choice, with the events of the prefill (a forced call's opening).
    let mut parsers: Vec<_> = (0..choices.len())
        .map(|i| plan.parser(&format!("{call_ids}{i}_")))
        .collect();

    if req.stream != Some(true) {
        let collected = generate::collect_all(choices).await?;
        let completion_tokens = collected.iter().map(|c| c.num_tokens).sum();
        let cached = collected
            .iter()
            .map(|c| c.num_cached_tokens)
            .max()
            .unwrap_or(0);
        let choices = collected
            .into_iter()
            .zip(parsers)
            .enumerate()
            .map(|(i, (c, (mut parser, mut events)))| {
                let (finish, stop_reason) = c.finish.unzip();
                let mut finish = finish.unwrap_or(FinishReason::Stop);
                let message = if plan.parses() {
                    events.extend(parser.push(&c.text));
                    events.extend(parser.finish());
                    let r = assemble::openai_reply(events);
                    if !r.tool_calls.is_empty() && finish == FinishReason::Stop {
                        finish = FinishReason::ToolCalls;
                    }
                    AssistantMessage {
                        role: "assistant".into(),
                        content: r.content,
                        reasoning_content: r.reasoning_content,
                        tool_calls: (!r.tool_calls.is_empty()).then_some(r.tool_calls),
                    }
                } else {
                    AssistantMessage {
                        role: "assistant".into(),
                        content: Some(c.text),
                        reasoning_content: None,
                        tool_calls: None,
                    }
                };
                ChatChoice {
                    index: i as u32,
                    message,
                    logprobs: want_logprobs.then(|| chat_logprobs(&c.logprobs)),
                    finish_reason: finish,
                    stop_reason: stop_reason.flatten(),
                }
            })
            .collect();
        drop(in_flight);
        return Ok(axum::Json(ChatCompletionResponse {
            id,
            object: "chat.completion".into(),
            created,
            model,
            choices,
            usage: generate::usage(&prompts, completion_tokens, cached),
        })
        .into_response());
    }

    let include_usage = sse::include_usage(req.stream_options.as_ref());
    let chunk = {
        let (id, model) = (id.clone(), model.clone());
        move |choices: Vec<ChatChunkChoice>, usage| {
            sse::json(&ChatCompletionChunk {
                id: id.clone(),
                object: "chat.completion.chunk".into(),
                created,
                model: model.clone(),
                choices,
                usage,
            })
        }
    };
    let no_usage = include_usage.then_some(None);
    let continuous = sse::continuous_usage(req.stream_options.as_ref());
    let usage_prompts = prompts.clone();
    let first = (0..choices.len() as u32)
        .map(|index| {
            chunk(
                vec![ChatChunkChoice {
                    index,
                    delta: ChatDelta {
                        role: Some("assistant".into()),
                        content: Some(String::new()),
                        ..ChatDelta::default()
                    },
                    logprobs: None,
                    finish_reason: None,
                    stop_reason: None,
                }],
                no_usage,
            )
        })
        .collect();
    let parses = plan.parses();
    let on_delta = {
        let chunk = chunk.clone();
        move |index: u32, _prompt, d: super::output::Delta| -> Vec<String> {
            let (finish, stop_reason) = d.finish.unzip();
            let stop_reason = stop_reason.flatten();
            let logprobs = want_logprobs.then(|| chat_logprobs(&d.logprobs));
            let mut deltas = if !parses {
                if d.text.is_empty() && d.logprobs.is_empty() && finish.is_none() && !continuous {
                    return vec![];
                }
                vec![ChatDelta {
                    content: (!d.text.is_empty() || finish.is_none()).then_some(d.text),
                    ..ChatDelta::default()
                }]
            } else {
                let Some((parser, first)) = parsers.get_mut(index as usize) else {
                    return vec![];
                };
                let mut events = std::mem::take(first);
                events.extend(parser.push(&d.text));
                if finish.is_some() {
                    events.extend(parser.finish());
                }
                assemble::openai_deltas(events)
            };
            let called = parsers
                .get(index as usize)
                .is_some_and(|(p, _)| p.num_calls > 0);
            let finish = finish.map(|f| match f {
                FinishReason::Stop if called => FinishReason::ToolCalls,
                f => f,
            });
            if deltas.is_empty() && (finish.is_some() || !d.logprobs.is_empty() || continuous) {
                deltas.push(ChatDelta::default());
            }
            let usage = if continuous {
                Some(Some(generate::usage(&usage_prompts, d.tokens, 0)))
            } else {
                no_usage
            };
            let last = deltas.len().saturating_sub(1);
            let mut logprobs = logprobs;
            deltas
                .into_iter()
                .enumerate()
                .map(|(k, delta)| {
                    let end = k == last;
                    chunk(
                        vec![ChatChunkChoice {
                            index,
                            delta,
                            logprobs: logprobs.take(),
                            finish_reason: if end { finish } else { None },
                            stop_reason: if end { stop_reason.clone() } else { None },
                        }],
                        usage,
                    )
                })
                .collect()
        }
    };
    let on_done = sse::usage_chunk(include_usage, prompts, move |u| {
        chunk(vec![], Some(Some(u)))
    });
    Ok(sse::respond(
        first,
        generate::merged(choices),
        on_delta,
        on_done,
        in_flight,
    ))
}
