//! The limits that keep one client from stalling the others (issue 37), in one place:
//! connection timeouts and caps (`--header-read-timeout`, `--body-read-timeout`,
//! `--keep-alive-timeout`, `--max-connections`), the tokenizer pool's size
//! (`--tokenizer-workers`), and the byte bounds that refuse an oversized prompt before any
//! tokenization. `docs/security.md` lists each with its default and what a client sees.

use std::time::Duration;

use super::body::BODY_LIMIT;
use super::config::FlagError;
use super::error::ApiError;

/// Default of `--header-read-timeout`.
pub const DEFAULT_HEADER_READ_TIMEOUT: f64 = 10.0;
/// Default of `--body-read-timeout`: 32 MiB at about 1 MB/s.
pub const DEFAULT_BODY_READ_TIMEOUT: f64 = 60.0;
/// Default of `--keep-alive-timeout` (uvicorn's, and below the usual 60 s of a proxy).
pub const DEFAULT_KEEP_ALIVE_TIMEOUT: f64 = 5.0;
/// Default of `--max-connections` (lowered at start-up to what the descriptor limit allows).
pub const DEFAULT_MAX_CONNECTIONS: usize = 8192;
/// Descriptors kept for everything but client connections (model files, sockets, logs).
pub const RESERVED_FDS: u64 = 256;

/// How many bytes of text one token can stand for, at most, is the longest vocabulary
/// entry's bytes; Unicode normalization (NFC, NFKC) can shrink a text before it is
/// tokenized, by at most 3× (three jamo into one Hangul syllable), so we allow 4×.
pub const NORMALIZATION_SLACK: u64 = 4;
/// A JSON string escape is at most 6 bytes for one byte of text (`\u0000`).
pub const JSON_ESCAPE_SLACK: u64 = 6;
/// Room in a request body for everything that is not prompt text (sampling fields, tools).
pub const BODY_OVERHEAD: u64 = 1 << 20;

/// The connection limits as `met serve` was given them (seconds as typed).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HttpFlags {
    pub header_read_timeout: f64,
    pub body_read_timeout: f64,
    pub keep_alive_timeout: f64,
    pub max_connections: usize,
    /// `None`: one a CPU core.
    pub tokenizer_workers: Option<usize>,
}

impl Default for HttpFlags {
    fn default() -> Self {
        Self {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            keep_alive_timeout: DEFAULT_KEEP_ALIVE_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            tokenizer_workers: None,
        }
    }
}

/// The connection limits, checked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HttpLimits {
    /// From when the server waits for a request's head (a new connection, or the end of the
    /// previous response) until the whole head is in; past it the connection is closed.
    pub header_read_timeout: Duration,
    /// From when a handler starts reading the body until all of it is in; past it, 408.
    pub body_read_timeout: Duration,
    /// A connection with no request in progress and no bytes either way is closed after this.
    pub keep_alive_timeout: Duration,
    /// Connections open at once; past it a new one gets 503 and is closed.
    pub max_connections: usize,
    /// Threads that parse, render and tokenize requests at once.
    pub tokenizer_workers: usize,
}

fn seconds(flag: &'static str, v: f64) -> Result<Duration, FlagError> {
    if v > 0.0 && v.is_finite() && v <= 86_400.0 {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(FlagError {
            flag,
            message: format!("must be a number of seconds in (0, 86400], got {v}"),
        })
    }
}

impl HttpFlags {
    pub fn validate(self) -> Result<HttpLimits, FlagError> {
        let at_least_one = |flag, v: usize| {
            if v == 0 {
                Err(FlagError {
                    flag,
                    message: "must be at least 1".into(),
                })
            } else {
                Ok(v)
            }
        };
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Ok(HttpLimits {
            header_read_timeout: seconds("--header-read-timeout", self.header_read_timeout)?,
            body_read_timeout: seconds("--body-read-timeout", self.body_read_timeout)?,
            keep_alive_timeout: seconds("--keep-alive-timeout", self.keep_alive_timeout)?,
            max_connections: at_least_one("--max-connections", self.max_connections)?,
            tokenizer_workers: at_least_one(
                "--tokenizer-workers",
                self.tokenizer_workers.unwrap_or(cores),
            )?,
        })
    }
}

/// The byte bounds of one served model: a prompt of more bytes than these cannot fit its
/// context, whatever it says, so it is refused before it is tokenized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteBounds {
    pub max_model_len: usize,
    /// Most bytes of prompt text: `max_model_len` × longest token × [`NORMALIZATION_SLACK`].
    pub prompt: u64,
    /// Most bytes of request body: the prompt's bound × [`JSON_ESCAPE_SLACK`] +
    /// [`BODY_OVERHEAD`], never above [`BODY_LIMIT`].
    pub body: u64,
}

impl ByteBounds {
    pub fn new(max_model_len: usize, max_token_bytes: usize) -> Self {
        let prompt = (max_model_len as u64)
            .saturating_mul(max_token_bytes.max(1) as u64)
            .saturating_mul(NORMALIZATION_SLACK);
        let body = prompt
            .saturating_mul(JSON_ESCAPE_SLACK)
            .saturating_add(BODY_OVERHEAD)
            .min(BODY_LIMIT as u64);
        Self {
            max_model_len,
            prompt,
            body,
        }
    }

    /// Refuse a body that cannot hold a prompt that fits (before reading or parsing it).
    pub fn check_body(&self, bytes: u64, param: Option<&str>) -> Result<(), ApiError> {
        if bytes > self.body {
            return Err(ApiError::TooManyBytes {
                what: "request body",
                bytes,
                limit: self.body,
                max_model_len: self.max_model_len,
                param: param.map(Into::into),
            });
        }
        Ok(())
    }

    /// Refuse prompt text that cannot fit (before tokenizing it).
    pub fn check_prompt(&self, bytes: usize, param: &str) -> Result<(), ApiError> {
        if bytes as u64 > self.prompt {
            return Err(ApiError::TooManyBytes {
                what: "prompt",
                bytes: bytes as u64,
                limit: self.prompt,
                max_model_len: self.max_model_len,
                param: Some(param.into()),
            });
        }
        Ok(())
    }
}

/// Bytes of every string in a JSON value: the text a template can put in a prompt.
pub fn text_bytes(v: &serde_json::Value) -> usize {
    use serde_json::Value;
    match v {
        Value::String(s) => s.len(),
        Value::Array(a) => a.iter().map(text_bytes).sum(),
        Value::Object(o) => o.values().map(text_bytes).sum(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_follow_the_context_and_the_longest_token() {
        let b = ByteBounds::new(2048, 20);
        assert_eq!(b.prompt, 2048 * 20 * 4);
        assert_eq!(b.body, 2048 * 20 * 4 * 6 + (1 << 20));
        assert!(b.check_prompt(163_840, "messages").is_ok());
        let e = b.check_prompt(163_841, "messages").expect_err("too long");
        let body = e.body().error;
        assert_eq!(body.code.as_deref(), Some("context_length_exceeded"));
        assert_eq!(body.param.as_deref(), Some("messages"));
        assert!(body.message.contains("163840 bytes"), "{}", body.message);
        assert!(body.message.contains("2048 tokens"), "{}", body.message);
        // A long context never raises the body bound past the body limit.
        assert_eq!(ByteBounds::new(1 << 20, 256).body, BODY_LIMIT as u64);
        assert!(b.check_body(31 << 20, Some("prompt")).is_err());
    }

    #[test]
    fn flags_are_checked_by_name() {
        let mut f = HttpFlags::default();
        assert_eq!(
            f.validate().expect("defaults").keep_alive_timeout,
            Duration::from_secs(5)
        );
        f.body_read_timeout = 0.0;
        assert!(
            f.validate()
                .expect_err("zero")
                .to_string()
                .starts_with("--body-read-timeout: must be")
        );
        let f = HttpFlags {
            max_connections: 0,
            ..HttpFlags::default()
        };
        assert_eq!(
            f.validate().expect_err("zero").to_string(),
            "--max-connections: must be at least 1"
        );
    }
}
