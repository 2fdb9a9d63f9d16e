//! The route table, and the small routes: health, readiness, models, metrics.

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use metrale_protocol::openai::{ModelCard, ModelList};

use super::body::BODY_LIMIT;
use super::error::ApiError;
use super::{AppState, auth, chat, completions, messages, metrics_stream, tokenize};

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .route("/v1/metrics/stream", get(metrics_stream::stream))
        .route("/v1/models", get(models))
        .route("/version", get(super::version::version))
        .route("/v1/chat/completions", post(chat::chat_completions))
        .route("/v1/completions", post(completions::completions))
        .route("/v1/messages", post(messages::messages))
        .route("/v1/messages/count_tokens", post(messages::count_tokens))
        .route("/tokenize", post(tokenize::tokenize))
        .route("/detokenize", post(tokenize::detokenize))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_key,
        ))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

/// Live: the process answers.
async fn health() -> StatusCode {
    StatusCode::OK
}

/// Ready: the model is loaded and the server is not draining.
async fn ready(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    state.engine()?;
    Ok(axum::Json(serde_json::json!({"status": "ready"})).into_response())
}

async fn models(State(state): State<Arc<AppState>>) -> Result<axum::Json<ModelList>, ApiError> {
    let engine = state.loaded_engine().ok_or(ApiError::Loading)?;
    let info = engine.info();
    Ok(axum::Json(ModelList {
        object: "list".into(),
        data: vec![ModelCard {
            id: info.served_name.clone(),
            object: "model".into(),
            created: info.created,
            owned_by: "metrale".into(),
            max_model_len: info.max_model_len,
        }],
    }))
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let stats = state.loaded_engine().map(|e| e.stats());
    let text = state.metrics.render(&state.served_name, stats.as_ref());
    let mut resp = text.into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    resp
}

async fn not_found(req: Request) -> ApiError {
    ApiError::RouteNotFound {
        method: req.method().to_string(),
        path: req.uri().path().to_owned(),
    }
}

async fn method_not_allowed(req: Request) -> ApiError {
    ApiError::MethodNotAllowed {
        method: req.method().to_string(),
        path: req.uri().path().to_owned(),
    }
}
