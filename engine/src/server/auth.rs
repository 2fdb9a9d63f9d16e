//! `--api-key`: every route except `/health`, `/ready` and `/metrics` needs
//! `Authorization: Bearer KEY` (or `x-api-key: KEY`, as Anthropic clients send it).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::error::{AnthropicError, ApiError};

/// Paths open without a key: probes and scrapes.
const OPEN_PATHS: &[&str] = &["/health", "/ready", "/metrics"];

pub async fn require_key(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let Some(key) = state.api_key.as_deref() else {
        return next.run(req).await;
    };
    if OPEN_PATHS.contains(&req.uri().path()) {
        return next.run(req).await;
    }
    let headers = req.headers();
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token);
    let x_api_key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
    let given = bearer.or(x_api_key);
    if given.is_some_and(|g| same(g.trim().as_bytes(), key.as_bytes())) {
        next.run(req).await
    } else if req.uri().path().starts_with("/v1/messages") {
        AnthropicError(ApiError::Unauthorized).into_response()
    } else {
        ApiError::Unauthorized.into_response()
    }
}

/// The token of `Bearer TOKEN`; the scheme is case-insensitive (RFC 9110 §11.1), so
/// `bearer` and `BEARER` pass too.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token)
}

/// Comparison whose time does not depend on where the first difference is.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    #[test]
    fn comparison_is_exact() {
        assert!(super::same(b"key", b"key"));
        assert!(!super::same(b"key", b"kez"));
        assert!(!super::same(b"key", b"key2"));
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        for v in ["Bearer k", "bearer k", "BEARER k", "  bEaReR k"] {
            assert_eq!(super::bearer_token(v), Some("k"), "{v}");
        }
        assert_eq!(super::bearer_token("Basic k"), None);
        assert_eq!(super::bearer_token("Bearerk"), None);
    }
}
