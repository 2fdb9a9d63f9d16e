//! Every error the HTTP API returns, and the one place it becomes a status code and OpenAI's
//! envelope `{"error": {"message", "type", "param", "code"}}`, or on `/v1/messages`
//! Anthropic's `{"type": "error", "error": {"type", "message"}}` (through [`AnthropicError`]).
//!
//! A bad request is a 4xx that names the field at fault in `param`; a 5xx is a bug or the
//! engine being unavailable.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use metrale_protocol::anthropic;
use metrale_protocol::openai::{ErrorBody, ErrorResponse};

use crate::engine_core::AddRequestError;

/// Anthropic's status for "overloaded": the engine's queue is full.
pub const OVERLOADED: u16 = 529;

/// Seconds a client is told to wait after a 429 (529 on `/v1/messages`).
pub const RETRY_AFTER_SECS: u64 = 1;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    /// A field is missing, has the wrong type or is out of range.
    #[error("{message}")]
    InvalidRequest {
        message: String,
        param: Option<String>,
    },
    /// Prompt plus the tokens asked for do not fit in the context.
    #[error("{message}")]
    ContextLengthExceeded { message: String, param: String },
    /// A feature the request asks for that this server does not have (yet).
    #[error("{message}")]
    Unsupported { message: String, param: String },
    #[error(
        "missing or incorrect API key: send it as `Authorization: Bearer KEY` or `x-api-key: KEY`"
    )]
    Unauthorized,
    #[error("the model `{model}` does not exist; this server serves `{served}`")]
    ModelNotFound { model: String, served: String },
    #[error("no route for {method} {path}")]
    RouteNotFound { method: String, path: String },
    #[error("method {method} is not allowed on {path}")]
    MethodNotAllowed { method: String, path: String },
    #[error("the request body is larger than the limit of {limit} bytes")]
    PayloadTooLarge { limit: usize },
    /// Refused by its size in bytes before any tokenization: no prompt of that many bytes
    /// fits the context (`limits.rs` says why the bound holds).
    #[error(
        "the {what} is {bytes} bytes, more than the {limit} bytes any prompt that fits this \
         model's context of {max_model_len} tokens can take; shorten the prompt"
    )]
    TooManyBytes {
        what: &'static str,
        bytes: u64,
        limit: u64,
        max_model_len: usize,
        param: Option<String>,
    },
    #[error(
        "the request body did not arrive within the server's --body-read-timeout of {seconds} s; \
         send it faster or ask for a longer timeout"
    )]
    BodyTimeout { seconds: f64 },
    #[error(
        "the request's headers are too large (more than {limit} bytes or {max_headers} \
         headers); send fewer or shorter headers"
    )]
    HeadersTooLarge { limit: usize, max_headers: usize },
    #[error("the request's URI is too long; send parameters in the JSON body")]
    UriTooLong,
    #[error(
        "the request is not valid HTTP/1.1 (a malformed request line or header); send a \
         standard HTTP/1.1 request"
    )]
    MalformedHttp,
    #[error(
        "the server has {max} connections open, its --max-connections; retry shortly or reuse \
         a connection"
    )]
    TooManyConnections { max: usize },
    #[error("the server is at capacity ({queued} requests queued); retry shortly")]
    QueueFull { queued: usize },
    #[error("the model is still loading; retry when GET /ready answers 200")]
    Loading,
    #[error("the server is shutting down and accepts no new requests")]
    ShuttingDown,
    /// The engine stopped on its own (a tensor-parallel rank died or got stuck): the
    /// request was failed and the server is exiting; the reason is the engine's.
    #[error("the engine stopped and the server is exiting ({0}); restart it")]
    EngineFailed(String),
    /// Answered 400, not 504: the openai and anthropic clients retry 408, 409, 429 and every
    /// 5xx by default, and a request that outlived the operator's limit would only outlive it
    /// again (and load the server again). `x-should-retry: false` says the same to clients
    /// that read it.
    #[error(
        "the request ran longer than the server's --request-timeout of {seconds} s; ask for \
         fewer tokens (max_tokens) or a shorter prompt"
    )]
    Timeout { seconds: f64 },
    /// A bug: something that validation should have prevented.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::InvalidRequest {
            message: message.into(),
            param: Some(param.into()),
        }
    }

    /// Status, `type` and `code` of each error: the mapping, exhaustive.
    fn parts(&self) -> (StatusCode, &'static str, Option<&'static str>) {
        use StatusCode as S;
        match self {
            Self::InvalidRequest { .. } => (S::BAD_REQUEST, "invalid_request_error", None),
            Self::ContextLengthExceeded { .. } => (
                S::BAD_REQUEST,
                "invalid_request_error",
                Some("context_length_exceeded"),
            ),
            Self::Unsupported { .. } => (
                S::BAD_REQUEST,
                "invalid_request_error",
                Some("unsupported_parameter"),
            ),
            Self::Unauthorized => (
                S::UNAUTHORIZED,
                "invalid_request_error",
                Some("invalid_api_key"),
            ),
            Self::ModelNotFound { .. } => (
                S::NOT_FOUND,
                "invalid_request_error",
                Some("model_not_found"),
            ),
            Self::RouteNotFound { .. } => (S::NOT_FOUND, "invalid_request_error", None),
            Self::MethodNotAllowed { .. } => (S::METHOD_NOT_ALLOWED, "invalid_request_error", None),
            Self::PayloadTooLarge { .. } => (
                S::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                Some("request_too_large"),
            ),
            Self::TooManyBytes { .. } => (
                S::BAD_REQUEST,
                "invalid_request_error",
                Some("context_length_exceeded"),
            ),
            Self::BodyTimeout { .. } => (
                S::REQUEST_TIMEOUT,
                "timeout_error",
                Some("body_read_timeout"),
            ),
            Self::HeadersTooLarge { .. } => (
                S::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "invalid_request_error",
                Some("headers_too_large"),
            ),
            Self::UriTooLong => (
                S::URI_TOO_LONG,
                "invalid_request_error",
                Some("uri_too_long"),
            ),
            Self::MalformedHttp => (
                S::BAD_REQUEST,
                "invalid_request_error",
                Some("malformed_http"),
            ),
            Self::TooManyConnections { .. } => (
                S::SERVICE_UNAVAILABLE,
                "service_unavailable",
                Some("too_many_connections"),
            ),
            Self::QueueFull { .. } => (
                S::TOO_MANY_REQUESTS,
                "rate_limit_error",
                Some("server_at_capacity"),
            ),
            Self::Loading => (
                S::SERVICE_UNAVAILABLE,
                "service_unavailable",
                Some("model_loading"),
            ),
            Self::ShuttingDown => (
                S::SERVICE_UNAVAILABLE,
                "service_unavailable",
                Some("shutting_down"),
            ),
            Self::EngineFailed(_) => (
                S::SERVICE_UNAVAILABLE,
                "service_unavailable",
                Some("engine_failed"),
            ),
            Self::Timeout { .. } => (S::BAD_REQUEST, "timeout_error", Some("request_timeout")),
            Self::Internal(_) => (S::INTERNAL_SERVER_ERROR, "server_error", None),
        }
    }

    pub fn status(&self) -> StatusCode {
        self.parts().0
    }

    fn param(&self) -> Option<String> {
        match self {
            Self::InvalidRequest { param, .. } => param.clone(),
            Self::ContextLengthExceeded { param, .. } | Self::Unsupported { param, .. } => {
                Some(param.clone())
            }
            Self::ModelNotFound { .. } => Some("model".into()),
            Self::TooManyBytes { param, .. } => param.clone(),
            _ => None,
        }
    }

    /// The envelope, also sent as an SSE event when a stream fails after its headers.
    pub fn body(&self) -> ErrorResponse {
        let (_, kind, code) = self.parts();
        ErrorResponse {
            error: ErrorBody {
                message: self.to_string(),
                kind: kind.into(),
                param: self.param(),
                code: code.map(Into::into),
            },
        }
    }
}

impl ApiError {
    /// Status and Anthropic error `type` of each error: the mapping, exhaustive. A full queue
    /// is Anthropic's 529 `overloaded_error`, which its clients retry.
    fn anthropic_parts(&self) -> (StatusCode, &'static str) {
        use StatusCode as S;
        let overloaded = S::from_u16(OVERLOADED).unwrap_or(S::SERVICE_UNAVAILABLE);
        match self {
            Self::InvalidRequest { .. }
            | Self::ContextLengthExceeded { .. }
            | Self::Unsupported { .. }
            | Self::TooManyBytes { .. }
            | Self::MalformedHttp => (S::BAD_REQUEST, "invalid_request_error"),
            Self::HeadersTooLarge { .. } => {
                (S::REQUEST_HEADER_FIELDS_TOO_LARGE, "invalid_request_error")
            }
            Self::UriTooLong => (S::URI_TOO_LONG, "invalid_request_error"),
            Self::BodyTimeout { .. } => (S::REQUEST_TIMEOUT, "timeout_error"),
            Self::TooManyConnections { .. } => (S::SERVICE_UNAVAILABLE, "overloaded_error"),
            Self::Unauthorized => (S::UNAUTHORIZED, "authentication_error"),
            Self::ModelNotFound { .. } | Self::RouteNotFound { .. } => {
                (S::NOT_FOUND, "not_found_error")
            }
            Self::MethodNotAllowed { .. } => (S::METHOD_NOT_ALLOWED, "invalid_request_error"),
            Self::PayloadTooLarge { .. } => (S::PAYLOAD_TOO_LARGE, "request_too_large"),
            Self::QueueFull { .. } => (overloaded, "overloaded_error"),
            Self::Loading | Self::ShuttingDown | Self::EngineFailed(_) => {
                (S::SERVICE_UNAVAILABLE, "api_error")
            }
            Self::Timeout { .. } => (S::BAD_REQUEST, "timeout_error"),
            Self::Internal(_) => (S::INTERNAL_SERVER_ERROR, "api_error"),
        }
    }

    /// Anthropic's envelope; the message names the field where OpenAI's has `param`.
    pub fn anthropic_body(&self) -> anthropic::ErrorResponse {
        let (_, kind) = self.anthropic_parts();
        let message = match self.param() {
            Some(p) if !self.to_string().contains(&format!("`{p}`")) => {
                format!("{p}: {self}")
            }
            _ => self.to_string(),
        };
        anthropic::ErrorResponse {
            kind: "error".into(),
            error: anthropic::ErrorBody {
                kind: kind.into(),
                message,
            },
        }
    }
}

/// An [`ApiError`] answered in Anthropic's envelope (the `/v1/messages` routes).
#[derive(Debug, Clone, PartialEq)]
pub struct AnthropicError(pub ApiError);

impl From<ApiError> for AnthropicError {
    fn from(e: ApiError) -> Self {
        Self(e)
    }
}

impl IntoResponse for AnthropicError {
    fn into_response(self) -> Response {
        let (status, _) = self.0.anthropic_parts();
        if matches!(self.0, ApiError::Internal(_)) {
            tracing::error!("{}", self.0);
        }
        let mut resp = (status, axum::Json(self.0.anthropic_body())).into_response();
        self.0.add_headers(&mut resp);
        resp
    }
}

impl ApiError {
    /// An admission refusal (`admission.rs`) as the client sees it; `prompt_param` names the
    /// field that holds the prompt (`messages` or `prompt`).
    pub fn refused(e: AddRequestError, prompt_param: &str) -> Self {
        match e {
            AddRequestError::EmptyPrompt => Self::invalid(prompt_param, "the prompt is empty"),
            AddRequestError::TokenOutOfVocabulary { .. } => {
                Self::invalid(prompt_param, e.to_string())
            }
            AddRequestError::ZeroMaxTokens => {
                Self::invalid("max_tokens", "`max_tokens` must be at least 1")
            }
            AddRequestError::TooLong {
                prompt_tokens,
                needed,
                limit,
            } => {
                let (param, what) = if prompt_tokens >= limit {
                    (
                        prompt_param,
                        format!(
                            "the {prompt_param} has {prompt_tokens}, leaving no room to generate"
                        ),
                    )
                } else {
                    (
                        "max_tokens",
                        format!(
                            "{prompt_tokens} in the {prompt_param} plus {} asked for is {needed}",
                            needed - prompt_tokens
                        ),
                    )
                };
                Self::ContextLengthExceeded {
                    message: format!(
                        "this model's maximum context length is {limit} tokens, but {what}; \
                         shorten the {prompt_param} or lower max_tokens"
                    ),
                    param: param.into(),
                }
            }
            AddRequestError::QueueFull { queued } => Self::QueueFull { queued },
            AddRequestError::ShuttingDown => Self::ShuttingDown,
        }
    }
}

impl ApiError {
    /// The headers an error carries in either envelope: when to retry a full queue, not to
    /// retry a timeout, and closing a connection whose request body was left unread (hyper
    /// would otherwise try to read the rest of it to reuse the connection).
    fn add_headers(&self, resp: &mut Response) {
        let h = resp.headers_mut();
        match self {
            Self::QueueFull { .. } => {
                h.insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
            }
            Self::Timeout { .. } => {
                h.insert("x-should-retry", HeaderValue::from_static("false"));
            }
            Self::PayloadTooLarge { .. } | Self::TooManyBytes { .. } | Self::BodyTimeout { .. } => {
                h.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            _ => {}
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if matches!(self, Self::Internal(_)) {
            tracing::error!("{self}");
        }
        let mut resp = (status, axum::Json(self.body())).into_response();
        self.add_headers(&mut resp);
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_errors_name_the_field() {
        let e = ApiError::invalid("temperature", "must be between 0 and 2, got 3");
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        let b = e.body().error;
        assert_eq!(b.param.as_deref(), Some("temperature"));
        assert_eq!(b.kind, "invalid_request_error");
    }

    #[test]
    fn engine_refusals_map_to_429_400_503() {
        let full = ApiError::refused(AddRequestError::QueueFull { queued: 3 }, "prompt");
        assert_eq!(full.status(), StatusCode::TOO_MANY_REQUESTS);
        let resp = full.into_response();
        assert_eq!(resp.headers()[header::RETRY_AFTER], "1");
        let too_long = |prompt_tokens| AddRequestError::TooLong {
            prompt_tokens,
            needed: prompt_tokens + 80,
            limit: 100,
        };
        let long = ApiError::refused(too_long(30), "prompt");
        let b = long.body().error;
        assert_eq!(b.code.as_deref(), Some("context_length_exceeded"));
        assert_eq!(b.param.as_deref(), Some("max_tokens"));
        assert!(
            b.message.contains("30 in the prompt plus 80"),
            "{}",
            b.message
        );
        let full_prompt = ApiError::refused(too_long(100), "messages").body().error;
        assert_eq!(full_prompt.param.as_deref(), Some("messages"));
        let empty = ApiError::refused(AddRequestError::EmptyPrompt, "messages");
        assert_eq!(empty.status(), StatusCode::BAD_REQUEST);
        assert_eq!(empty.body().error.param.as_deref(), Some("messages"));
        let down = ApiError::refused(AddRequestError::ShuttingDown, "prompt");
        assert_eq!(down.status(), StatusCode::SERVICE_UNAVAILABLE);
    }

    #[test]
    fn anthropic_envelope_and_overloaded_529() {
        let full = AnthropicError(ApiError::refused(
            AddRequestError::QueueFull { queued: 3 },
            "messages",
        ));
        let body = full.0.anthropic_body();
        assert_eq!(body.kind, "error");
        assert_eq!(body.error.kind, "overloaded_error");
        let resp = full.into_response();
        assert_eq!(resp.status().as_u16(), 529);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "1");
        let bad = ApiError::invalid("max_tokens", "must be at least 1").anthropic_body();
        assert_eq!(bad.error.kind, "invalid_request_error");
        assert_eq!(bad.error.message, "max_tokens: must be at least 1");
        assert_eq!(
            ApiError::Unauthorized.anthropic_body().error.kind,
            "authentication_error"
        );
    }
}
