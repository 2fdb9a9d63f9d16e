//! `POST /tokenize` and `POST /detokenize` (vLLM's extensions): the server's own view of a
//! prompt, so clients can count tokens exactly as generation will. Both run on the tokenizer
//! pool (`workers.rs`).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use metrale_protocol::openai::{
    DetokenizeRequest, DetokenizeResponse, TokenizeRequest, TokenizeResponse,
};

use super::AppState;
use super::body::{JsonBody, from_value, parse_object};
use super::chat::render_prompt;
use super::error::ApiError;

pub async fn tokenize(
    State(state): State<Arc<AppState>>,
    JsonBody(bytes): JsonBody,
) -> Result<Json<TokenizeResponse>, ApiError> {
    state.on_workers(bytes, tokenize_body).await
}

/// `/tokenize`'s work, on a tokenizer worker.
fn tokenize_body(state: &AppState, bytes: &[u8]) -> Result<Json<TokenizeResponse>, ApiError> {
    let body = parse_object(bytes)?;
    let param = if body.get("messages").is_some() {
        "messages"
    } else {
        "prompt"
    };
    state.check_prompt_bytes(&body, param)?;
    let req: TokenizeRequest = from_value(&body)?;
    state.check_model(req.model.as_deref())?;
    let engine = state.engine()?;
    let tokens = match (&req.prompt, &req.messages) {
        (Some(prompt), None) => state
            .tokenizer
            .encode(prompt, req.add_special_tokens.unwrap_or(true))
            .map_err(|e| ApiError::Internal(format!("failed to tokenize: {e}")))?,
        (None, Some(messages)) => render_prompt(
            state,
            messages,
            None,
            req.add_generation_prompt.unwrap_or(true),
            req.chat_template_kwargs.as_ref(),
        )?,
        _ => {
            return Err(ApiError::invalid(
                "prompt",
                "send exactly one of `prompt` (text) and `messages` (chat)",
            ));
        }
    };
    Ok(Json(TokenizeResponse {
        count: tokens.len(),
        max_model_len: engine.info().max_model_len,
        tokens,
    }))
}

pub async fn detokenize(
    State(state): State<Arc<AppState>>,
    JsonBody(bytes): JsonBody,
) -> Result<Json<DetokenizeResponse>, ApiError> {
    state.on_workers(bytes, detokenize_body).await
}

/// `/detokenize`'s work, on a tokenizer worker.
fn detokenize_body(state: &AppState, bytes: &[u8]) -> Result<Json<DetokenizeResponse>, ApiError> {
    let body = parse_object(bytes)?;
    let req: DetokenizeRequest = from_value(&body)?;
    state.check_model(req.model.as_deref())?;
    let engine = state.engine()?;
    let vocab = engine.info().vocab_size;
    if let Some((i, bad)) = req
        .tokens
        .iter()
        .enumerate()
        .find(|(_, t)| **t as usize >= vocab)
    {
        return Err(ApiError::invalid(
            format!("tokens[{i}]"),
            format!("token id {bad} is outside the vocabulary (0..{vocab})"),
        ));
    }
    let prompt = state
        .tokenizer
        .decode(&req.tokens, false)
        .map_err(|e| ApiError::Internal(format!("failed to detokenize: {e}")))?;
    Ok(Json(DetokenizeResponse { prompt }))
}
