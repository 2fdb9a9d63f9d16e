//! Reading a JSON request body into the envelope's terms: too large (413, or 400 when no
//! prompt of that size could fit the context), too slow (408), not UTF-8, not JSON, not an
//! object, or a field of the wrong type (400 naming the field).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use futures_util::StreamExt;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::AppState;
use super::error::ApiError;

/// Largest request body accepted.
pub const BODY_LIMIT: usize = 32 * 1024 * 1024;

/// A request body, read whole within `--body-read-timeout` and the byte bounds, not parsed
/// yet: parsing belongs to the tokenizer pool with the rest of the CPU work
/// (`workers.rs`), so a large body never holds up an async worker.
#[derive(Debug)]
pub struct JsonBody(pub Bytes);

/// The field that holds a route's prompt, for errors that refuse a body by its size.
fn prompt_param(path: &str) -> Option<&'static str> {
    match path {
        "/v1/completions" => Some("prompt"),
        "/v1/chat/completions" | "/v1/messages" | "/v1/messages/count_tokens" => Some("messages"),
        _ => None,
    }
}

impl FromRequest<Arc<AppState>> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, ApiError> {
        let param = prompt_param(req.uri().path());
        let bounds = state.byte_bounds();
        // Refuse from the headers when they announce too much, without reading it.
        let announced = req
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if let Some(n) = announced {
            if n > BODY_LIMIT as u64 {
                return Err(ApiError::PayloadTooLarge { limit: BODY_LIMIT });
            }
            if let Some(b) = &bounds {
                b.check_body(n, param)?;
            }
        }
        let limit = bounds.map_or(BODY_LIMIT as u64, |b| b.body);
        let timeout = state.http.body_read_timeout;
        let read = async {
            let mut stream = req.into_body().into_data_stream();
            let mut buf = Vec::with_capacity(announced.unwrap_or(0).min(1 << 20) as usize);
            while let Some(chunk) = stream.next().await {
                let chunk = chunk
                    .map_err(|e| body_error(format!("failed to read the request body: {e}")))?;
                let len = (buf.len() + chunk.len()) as u64;
                if len > limit {
                    return Err(match &bounds {
                        Some(b) if b.body < BODY_LIMIT as u64 => b
                            .check_body(len, param)
                            .err()
                            .unwrap_or(ApiError::PayloadTooLarge { limit: BODY_LIMIT }),
                        _ => ApiError::PayloadTooLarge { limit: BODY_LIMIT },
                    });
                }
                buf.extend_from_slice(&chunk);
            }
            Ok(Bytes::from(buf))
        };
        match tokio::time::timeout(timeout, read).await {
            Ok(r) => r.map(JsonBody),
            Err(_) => Err(ApiError::BodyTimeout {
                seconds: timeout.as_secs_f64(),
            }),
        }
    }
}

/// Bytes of prompt text in a parsed body (`messages`, `system`, `prompt`): what is checked
/// against [`super::limits::ByteBounds::check_prompt`] before tokenizing.
pub fn prompt_text_bytes(body: &Value) -> usize {
    ["messages", "system", "prompt"]
        .iter()
        .filter_map(|k| body.get(k))
        .map(super::limits::text_bytes)
        .sum()
}

fn body_error(message: String) -> ApiError {
    ApiError::InvalidRequest {
        message,
        param: None,
    }
}

/// The body as a JSON object.
pub fn parse_object(bytes: &[u8]) -> Result<Value, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(body_error(
            "the request body is empty; send a JSON object".into(),
        ));
    }
    let text = std::str::from_utf8(bytes).map_err(|e| ApiError::InvalidRequest {
        message: format!(
            "the request body is not valid UTF-8 (invalid byte at offset {})",
            e.valid_up_to()
        ),
        param: invalid_utf8_field(bytes),
    })?;
    let value: Value = serde_json::from_str(text)
        .map_err(|e| body_error(format!("the request body is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(body_error("the request body must be a JSON object".into()));
    }
    Ok(value)
}

/// A character no client sends, standing in for invalid bytes while we look for their field.
const SENTINEL: char = '\u{10fffe}';

/// The field whose string holds the first invalid UTF-8 bytes, e.g. `messages[0].content`.
fn invalid_utf8_field(bytes: &[u8]) -> Option<String> {
    let mut text = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        text.push_str(chunk.valid());
        if !chunk.invalid().is_empty() {
            text.push(SENTINEL);
        }
    }
    let value: Value = serde_json::from_str(&text).ok()?;
    find_sentinel(&value, String::new())
}

fn find_sentinel(v: &Value, path: String) -> Option<String> {
    match v {
        Value::String(s) => s.contains(SENTINEL).then_some(path),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .find_map(|(i, x)| find_sentinel(x, format!("{path}[{i}]"))),
        Value::Object(o) => o.iter().find_map(|(k, x)| {
            let p = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            find_sentinel(x, p)
        }),
        _ => None,
    }
}

/// Deserialize `T` from a JSON object, naming the field at fault on error.
pub fn from_value<T: DeserializeOwned>(value: &Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        // A missing field is reported at its parent; name the field itself.
        let missing = inner
            .strip_prefix("missing field `")
            .and_then(|s| s.strip_suffix('`'));
        let param = match (missing, path.as_str()) {
            (Some(f), ".") => f.to_owned(),
            (Some(f), p) => format!("{p}.{f}"),
            (None, p) => p.to_owned(),
        };
        let message = if inner.contains("did not match any variant") {
            format!("`{param}` {}", expected_shape(&param))
        } else if missing.is_some() {
            format!("`{param}` is required")
        } else {
            format!("invalid `{param}`: {inner}")
        };
        ApiError::InvalidRequest {
            message,
            param: Some(param),
        }
    })
}

/// What the fields that take several shapes accept, for their error messages.
fn expected_shape(param: &str) -> &'static str {
    let last = param.rsplit('.').next().unwrap_or(param);
    if last == "stop" {
        "must be a string or an array of strings"
    } else if last == "prompt" {
        "must be a string, an array of token ids, or an array of either"
    } else if last == "content" {
        "must be a string or an array of content parts like {\"type\": \"text\", \"text\": \"...\"}"
    } else {
        "has the wrong type"
    }
}

#[cfg(test)]
mod tests {
    use metrale_protocol::openai::{ChatCompletionRequest, SamplingFields};

    use super::*;

    fn err(body: &str) -> (Option<String>, String) {
        let e = parse_object(body.as_bytes())
            .and_then(|v| {
                from_value::<SamplingFields>(&v)?;
                from_value::<ChatCompletionRequest>(&v)
            })
            .expect_err(body);
        let b = e.body().error;
        (b.param, b.message)
    }

    #[test]
    fn errors_name_the_field() {
        assert_eq!(err(r#"{"messages": 3}"#).0.as_deref(), Some("messages"));
        assert_eq!(err(r#"{}"#).0.as_deref(), Some("messages"));
        assert_eq!(
            err(r#"{"messages": [{"role": "robot", "content": "x"}]}"#)
                .0
                .as_deref(),
            Some("messages[0].role")
        );
        assert_eq!(
            err(r#"{"messages": [{"role": "user"}], "temperature": "hot"}"#)
                .0
                .as_deref(),
            Some("temperature")
        );
        let (p, m) = err(r#"{"messages": [], "stop": 5}"#);
        assert_eq!(p.as_deref(), Some("stop"));
        assert!(m.contains("string or an array of strings"), "{m}");
        let (p, m) = err(r#"{"messages": [{"role": "user", "content": 7}]}"#);
        assert_eq!(p.as_deref(), Some("messages[0].content"));
        assert!(m.contains("content parts"), "{m}");
    }

    #[test]
    fn bodies_that_are_not_json_objects_are_refused() {
        for (body, want) in [
            ("", "empty"),
            ("{", "not valid JSON"),
            ("[1]", "JSON object"),
        ] {
            let e = parse_object(body.as_bytes()).expect_err(body);
            assert!(e.to_string().contains(want), "{body}: {e}");
        }
        let e = parse_object(b"{\"a\": \"\xff\"}").expect_err("utf8");
        assert!(
            e.to_string().contains("UTF-8 (invalid byte at offset 7)"),
            "{e}"
        );
        let e =
            parse_object(b"{\"messages\": [{\"content\": \"ok \xe4\xbd\"}]}").expect_err("utf8");
        assert_eq!(e.body().error.param.as_deref(), Some("messages[0].content"));
    }
}
