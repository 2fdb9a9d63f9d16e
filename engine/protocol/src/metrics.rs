//! The metrics socket, protocol version 1: the events `met serve` publishes on its Unix socket
//! and at `GET /v1/metrics/stream`, and that `metralectl top` reads. `docs/metrics-socket.md`
//! is the reader's guide; this file is the definition.
//!
//! On the wire each event is one line of JSON (NDJSON on the socket, one SSE `data:` payload
//! on HTTP): `{"v":1,"type":"<kind>", ...fields}`. Every field names its unit (`_ms`, `_tokens`,
//! `_blocks`, `_per_s`, `_ratio`, `_bytes`) unless it is an id, a name or a count of the thing
//! its name says (`running_seqs`). Times are milliseconds since the engine process started
//! (`t_ms`), so a reader never compares two clocks.
//!
//! Readers must ignore unknown fields and skip unknown event types ([`parse_line`] returns
//! `Ok(None)` for those): later engines may add both without changing the version.

use serde::{Deserialize, Serialize};

/// The protocol version this file defines (the `v` of every line).
pub const PROTOCOL_VERSION: u32 = 1;

/// One line: the version and the event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Line {
    pub v: u32,
    #[serde(flatten)]
    pub event: Event,
}

/// Every event, tagged by `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// First line to every subscriber: who is talking.
    Hello(Hello),
    /// A start-up phase began or made progress. A new subscriber gets every phase so far.
    Phase(PhaseEvent),
    /// The engine's state, about four times a second, and once to every new subscriber.
    Snapshot(Snapshot),
    /// A request entered the engine's queue.
    Queued(Queued),
    /// A request's first output token (its TTFT).
    FirstToken(FirstToken),
    /// A request ended: a stop condition or its length limit.
    Finished(Finished),
    /// A request ended early: the client went away, a timeout, a stop string seen by the
    /// server, or an engine error.
    Aborted(Aborted),
    /// A running request lost its KV blocks to make room and will be recomputed.
    Preempted(Preempted),
}

/// `hello`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// `met`'s version (`CARGO_PKG_VERSION`).
    pub engine_version: String,
    /// The name clients pass as `model`.
    pub model: String,
    /// The engine process.
    pub pid: u32,
    /// When the engine process started, Unix milliseconds (to show uptime).
    pub started_unix_ms: u64,
    /// Milliseconds since start when this hello was written.
    pub t_ms: u64,
    /// The HTTP API's address (`http://127.0.0.1:8000`), once bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_url: Option<String>,
    /// `cpu` or `cuda`.
    pub device: String,
}

/// The start-up phases, in the order they happen. A phase that does not apply is skipped
/// (a local checkpoint has no `download`; the CPU backend compiles no kernels).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Find the checkpoint; read its config, tokenizer and chat template.
    Resolve,
    /// Fetch checkpoint files (`done`/`total` in bytes).
    Download,
    /// Check downloaded files against their hashes (bytes).
    Verify,
    /// Read the weights onto the device (`done`/`total` in tensors).
    Load,
    /// Compile GPU kernels for this device (kernels).
    CompileKernels,
    /// Size and allocate the KV cache (blocks).
    AllocateKvCache,
    /// Run warm-up steps (steps).
    Warmup,
    /// Serving.
    Ready,
    /// Start-up failed; `message` says why. The engine exits after this.
    Failed,
}

impl Phase {
    /// Every phase, in order.
    pub const ALL: [Phase; 9] = [
        Phase::Resolve,
        Phase::Download,
        Phase::Verify,
        Phase::Load,
        Phase::CompileKernels,
        Phase::AllocateKvCache,
        Phase::Warmup,
        Phase::Ready,
        Phase::Failed,
    ];

    /// The wire name (`compile_kernels`).
    pub fn name(self) -> &'static str {
        match self {
            Phase::Resolve => "resolve",
            Phase::Download => "download",
            Phase::Verify => "verify",
            Phase::Load => "load",
            Phase::CompileKernels => "compile_kernels",
            Phase::AllocateKvCache => "allocate_kv_cache",
            Phase::Warmup => "warmup",
            Phase::Ready => "ready",
            Phase::Failed => "failed",
        }
    }
}

/// `phase`: progress through one start-up phase. `done` and `total` count in `unit`
/// (`bytes`, `tensors`, `kernels`, `blocks`, `steps`); `total` is absent when unknown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseEvent {
    pub phase: Phase,
    pub t_ms: u64,
    #[serde(default)]
    pub done: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// What `done` and `total` count.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub unit: String,
    /// A line for people: the file being fetched, the error that failed start-up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Speculative decoding's counters since start (`met serve --speculative`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SpecDecode {
    /// Drafts a step at most (`--num-drafts`).
    pub num_drafts: u64,
    /// Verify steps of a sequence with drafts, draft tokens verified and accepted.
    pub verify_steps_total: u64,
    pub draft_tokens_total: u64,
    pub accepted_tokens_total: u64,
    /// By draft position (0: a step's first draft): drafts verified there and accepted, and
    /// their ratio (0 when none was verified there).
    pub proposed_per_pos: Vec<u64>,
    pub accepted_per_pos: Vec<u64>,
    pub acceptance_per_pos: Vec<f64>,
    /// Accepted drafts per verify step: a step emits this plus one tokens on average.
    pub mean_accepted: f64,
    /// Steps in which drafting paused because more sequences ran than
    /// `--speculative-max-batch` (or the `--speculative-ladder` allowed none).
    pub paused_steps_total: u64,
    /// Drafts proposed a sequence in the last step: the adaptive policy's choice (0 while
    /// paused, or while acceptance does not pay for drafts).
    #[serde(default)]
    pub drafts_per_step: u64,
}

/// `snapshot`: the engine now. Rates are over the interval since the previous snapshot;
/// latency percentiles over the last minute.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub t_ms: u64,
    /// False while starting (the model limits below are then zero).
    pub ready: bool,
    /// Sequences being computed (prefilling or decoding).
    pub running_seqs: u64,
    /// Requests queued, preempted ones included.
    pub waiting_seqs: u64,
    /// Preemptions since start.
    pub preemptions_total: u64,
    /// Sequences in the last step, and the most one step may hold (`--max-batch-size`).
    pub step_seqs: u64,
    pub max_step_seqs: u64,
    /// Tokens computed in the last step, and the step's token budget
    /// (`--max-num-batched-tokens`).
    pub step_tokens: u64,
    pub max_step_tokens: u64,
    /// Batch occupancy: `step_seqs / max_step_seqs`, and `step_tokens / max_step_tokens`.
    pub batch_seqs_ratio: f64,
    pub batch_tokens_ratio: f64,
    pub kv_blocks_used: u64,
    pub kv_blocks_total: u64,
    /// Tokens a KV block holds.
    pub kv_block_size_tokens: u64,
    /// Longest sequence the engine accepts, prompt plus output.
    pub max_model_len_tokens: u64,
    /// Prefix cache since start: prompt tokens looked up and found.
    pub prefix_cache_queries_tokens_total: u64,
    pub prefix_cache_hits_tokens_total: u64,
    /// `hits / queries` since start (0 when nothing was looked up).
    pub prefix_cache_hit_ratio: f64,
    /// Prompt tokens computed and tokens generated per second over the interval.
    pub prompt_tokens_per_s: f64,
    pub generation_tokens_per_s: f64,
    pub prompt_tokens_total: u64,
    pub generation_tokens_total: u64,
    pub steps_total: u64,
    pub steps_per_s: f64,
    /// Over requests whose first token came in the last minute (absent when none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_p50_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_p95_ms: Option<f64>,
    /// Over the gaps between tokens generated in the last minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl_p50_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl_p95_ms: Option<f64>,
    /// Subscribers disconnected since start for not keeping up.
    pub slow_subscribers_dropped_total: u64,
    /// Speculative decoding since start (absent when it is off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative: Option<Box<SpecDecode>>,
    /// Requests in the engine (queued or running), oldest first, at most 256.
    #[serde(default)]
    pub requests: Vec<RequestProgress>,
}

/// Where one request stands, in a snapshot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestProgress {
    pub id: u64,
    pub state: RequestState,
    pub prompt_tokens: u64,
    pub generated_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl_p50_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl_p95_ms: Option<f64>,
    /// Generated tokens per second since the first token.
    pub generation_tokens_per_s: f64,
}

/// A request's state as readers show it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestState {
    #[default]
    Waiting,
    Running,
    Preempted,
    Finished,
    Aborted,
}

impl RequestState {
    pub fn name(self) -> &'static str {
        match self {
            RequestState::Waiting => "waiting",
            RequestState::Running => "running",
            RequestState::Preempted => "preempted",
            RequestState::Finished => "finished",
            RequestState::Aborted => "aborted",
        }
    }
}

/// `queued`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Queued {
    pub id: u64,
    pub t_ms: u64,
    pub prompt_tokens: u64,
    pub max_tokens: u64,
}

/// `first_token`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FirstToken {
    pub id: u64,
    pub t_ms: u64,
    /// From arrival at the server to the first token leaving the engine.
    pub ttft_ms: f64,
}

/// `finished`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finished {
    pub id: u64,
    pub t_ms: u64,
    /// `stop` or `length`.
    pub reason: String,
    pub prompt_tokens: u64,
    pub generated_tokens: u64,
    pub cached_prompt_tokens: u64,
    pub preemptions: u64,
    /// Arrival to last token.
    pub e2e_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    /// Over this request's gaps between tokens (absent with fewer than two tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl_p50_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl_p95_ms: Option<f64>,
    pub generation_tokens_per_s: f64,
}

/// `aborted`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Aborted {
    pub id: u64,
    pub t_ms: u64,
    pub prompt_tokens: u64,
    pub generated_tokens: u64,
    pub e2e_ms: f64,
}

/// `preempted`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Preempted {
    pub id: u64,
    pub t_ms: u64,
    /// Tokens generated so far (kept; they are recomputed, not regenerated).
    pub generated_tokens: u64,
}

/// The JSON line for `event` (no trailing newline).
pub fn to_line(event: &Event) -> String {
    let line = LineRef {
        v: PROTOCOL_VERSION,
        event,
    };
    // Serializing these plain types cannot fail; an empty object would be skipped by readers.
    serde_json::to_string(&line).unwrap_or_else(|_| "{}".into())
}

#[derive(Serialize)]
struct LineRef<'a> {
    v: u32,
    #[serde(flatten)]
    event: &'a Event,
}

/// Why a line could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    #[error("not a metrics event (expected a JSON object with `v` and `type`): {0}")]
    Json(#[from] serde_json::Error),
    #[error(
        "the engine speaks metrics protocol version {found}, this reader version {PROTOCOL_VERSION}; use matching versions of met and metralectl"
    )]
    Version { found: u64 },
}

/// Read one line. `Ok(None)`: a blank line or an event type this reader does not know.
pub fn parse_line(line: &str) -> Result<Option<Event>, LineError> {
    let line = line.trim();
    if line.is_empty() {
        return Ok(None);
    }
    let value: serde_json::Value = serde_json::from_str(line)?;
    let v = value
        .get("v")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0);
    if v != u64::from(PROTOCOL_VERSION) {
        return Err(LineError::Version { found: v });
    }
    let known = value
        .get("type")
        .and_then(serde_json::Value::as_str)
        .is_some_and(|t| {
            matches!(
                t,
                "hello"
                    | "phase"
                    | "snapshot"
                    | "queued"
                    | "first_token"
                    | "finished"
                    | "aborted"
                    | "preempted"
            )
        });
    if !known {
        return Ok(None);
    }
    Ok(Some(serde_json::from_value::<Line>(value)?.event))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_carry_version_and_type_and_read_back() {
        let e = Event::FirstToken(FirstToken {
            id: 7,
            t_ms: 1200,
            ttft_ms: 35.5,
        });
        let text = to_line(&e);
        assert_eq!(
            text,
            r#"{"v":1,"type":"first_token","id":7,"t_ms":1200,"ttft_ms":35.5}"#
        );
        assert_eq!(parse_line(&text).expect("parses"), Some(e));
    }

    #[test]
    fn phases_use_snake_case_names() {
        let e = Event::Phase(PhaseEvent {
            phase: Phase::CompileKernels,
            t_ms: 5,
            done: 3,
            total: Some(10),
            unit: "kernels".into(),
            message: None,
        });
        let text = to_line(&e);
        assert!(text.contains(r#""phase":"compile_kernels""#), "{text}");
        for p in Phase::ALL {
            let json = serde_json::to_string(&p).expect("serializes");
            assert_eq!(json, format!("\"{}\"", p.name()));
        }
    }

    #[test]
    fn unknown_types_and_fields_are_skipped_and_other_versions_refused() {
        assert_eq!(
            parse_line(r#"{"v":1,"type":"gpu_temp","c":70}"#).ok(),
            Some(None)
        );
        let with_extra =
            r#"{"v":1,"type":"preempted","id":1,"t_ms":2,"generated_tokens":3,"new_field":true}"#;
        assert!(matches!(
            parse_line(with_extra),
            Ok(Some(Event::Preempted(_)))
        ));
        let err = parse_line(r#"{"v":2,"type":"hello"}"#).expect_err("v2 refused");
        assert!(err.to_string().contains("version 2"), "{err}");
        assert!(parse_line("not json").is_err());
        assert_eq!(parse_line("   ").ok(), Some(None));
    }

    #[test]
    fn a_snapshot_round_trips() {
        let s = Snapshot {
            t_ms: 9,
            ready: true,
            running_seqs: 2,
            requests: vec![RequestProgress {
                id: 1,
                state: RequestState::Running,
                generated_tokens: 4,
                ttft_ms: Some(3.0),
                ..Default::default()
            }],
            ..Default::default()
        };
        let text = to_line(&Event::Snapshot(s.clone()));
        assert_eq!(parse_line(&text).expect("parses"), Some(Event::Snapshot(s)));
    }
}

/// Where `met serve --port PORT` puts its socket unless `--metrics-socket` says otherwise:
/// `$XDG_RUNTIME_DIR/metrale/met-PORT.sock`, else `/tmp/metrale-UID/met-PORT.sock`.
/// `metralectl top` looks in the same place.
pub fn default_socket_path(
    runtime_dir: Option<&std::path::Path>,
    uid: u32,
    port: u16,
) -> std::path::PathBuf {
    let dir = match runtime_dir {
        Some(d) if !d.as_os_str().is_empty() => d.join("metrale"),
        _ => std::path::PathBuf::from(format!("/tmp/metrale-{uid}")),
    };
    dir.join(format!("met-{port}.sock"))
}

#[cfg(test)]
mod path_tests {
    use std::path::{Path, PathBuf};

    #[test]
    fn the_default_socket_is_named_after_the_port() {
        assert_eq!(
            super::default_socket_path(Some(Path::new("/run/user/1000")), 1000, 8000),
            PathBuf::from("/run/user/1000/metrale/met-8000.sock")
        );
        assert_eq!(
            super::default_socket_path(None, 1000, 9001),
            PathBuf::from("/tmp/metrale-1000/met-9001.sock")
        );
    }
}
