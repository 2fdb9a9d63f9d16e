//! Benchmark records: what `metralectl bench --record FILE` writes and `metralectl verify`
//! checks. Documented field by field in `docs/benchmarks.md`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The layout version of [`Record`]; bumped on any change that could break a reader.
pub const RECORD_VERSION: u32 = 1;

/// One run of the concurrency ladder against one server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// [`RECORD_VERSION`].
    pub version: u32,
    /// When the run ended, RFC 3339 in UTC (`2026-11-29T22:50:00Z`).
    pub date: String,
    pub harness: Harness,
    pub workload: Workload,
    /// The server's own description: `{"models": GET /v1/models, "version": GET /version}`
    /// as it sent them (`version` is `null` for a server without that route; met's names its
    /// build, git commit, command line and resolved settings).
    pub server: Value,
    pub machine: Machine,
    /// One entry a rung of the ladder, in the order they ran.
    pub rungs: Vec<Rung>,
    /// With `--against URL2`: the same ladder on a second server, its reps alternating with
    /// these rep by rep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub against: Option<Against>,
    /// With `--mixed`: the mixed load (streams decoding while long prompts arrive) instead of a
    /// ladder; `rungs` is then empty. Absent from ladder records, so older ones still parse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mixed: Option<Mixed>,
}

/// A mixed-load run: `streams` requests decoding continuously (each sends its next request as
/// soon as its previous one ends), first alone for a phase (`baseline`), then for a phase while
/// a long prompt arrives every `long_every_s` (`loaded`). Stream ISL/OSL are the workload's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mixed {
    pub streams: u32,
    /// Prompt and generated tokens of each long prompt.
    pub long_isl: u32,
    pub long_osl: u32,
    /// Seconds between two long prompts' arrivals.
    pub long_every_s: f64,
    /// Seconds each phase lasts.
    pub phase_s: f64,
    pub baseline: MixedPhase,
    pub loaded: MixedPhase,
    pub long: LongPrompts,
    /// `loaded.itl_ms.p99 / baseline.itl_ms.p99` (issue 32 asks ≤ 2.5); `None` when a phase
    /// saw no gaps.
    pub itl_p99_ratio: Option<f64>,
    /// The same for p50.
    pub itl_p50_ratio: Option<f64>,
}

/// The streams' figures over one phase's window; a gap or token counts in the phase where it
/// arrived.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MixedPhase {
    /// The window's length, seconds.
    pub wall_s: f64,
    /// Stream tokens that arrived in the window, and those over `wall_s`.
    pub output_tokens: u64,
    pub output_tok_s: f64,
    /// Inter-token gaps measured (one a token-carrying chunk after a stream's first).
    pub gaps: u64,
    /// The gaps between consecutive token-carrying chunks of a stream, milliseconds.
    pub itl_ms: Option<Percentiles>,
    pub itl_max_ms: Option<f64>,
    /// Stream requests that ended in the window, and how many of those failed.
    pub requests: u32,
    pub errors: u32,
    pub error_samples: Vec<String>,
}

/// The long prompts of the loaded phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LongPrompts {
    pub sent: u32,
    pub errors: u32,
    /// Time to first token of the successful ones, milliseconds.
    pub ttft_ms: Option<Percentiles>,
    /// Per successful long prompt, in the order sent.
    pub ttft_raw_ms: Vec<f64>,
    pub latency_raw_ms: Vec<f64>,
    pub error_samples: Vec<String>,
}

/// The second server of an A/B run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Against {
    pub url: String,
    pub model: String,
    /// Its `{"models": …, "version": …}`, as for [`Record::server`].
    pub server: Value,
    pub rungs: Vec<Rung>,
    /// A's mean output tok/s over B's, a rung (0 where B made no tokens).
    pub ratio: Vec<f64>,
}

/// The program that measured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Harness {
    /// `metralectl`.
    pub name: String,
    pub version: String,
    /// sha256 (hex) of the harness binary that ran.
    pub binary_sha256: String,
}

/// What was asked of the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    /// The server's base URL.
    pub url: String,
    pub model: String,
    /// `chat` or `completions`.
    pub endpoint: String,
    /// Prompt tokens a request, exactly (by the server's own tokenizer).
    pub isl: u32,
    /// Generated tokens a request, exactly (`ignore_eos` and `min_tokens`).
    pub osl: u32,
    /// The ladder: concurrent requests a rung.
    pub concurrency: Vec<u32>,
    /// Timed repetitions a rung.
    pub reps: u32,
    /// Untimed repetitions before the timed ones, a rung.
    pub warmup: u32,
    /// Seed of the prompts and of the sampler.
    pub seed: u64,
    pub temperature: f64,
    /// The `response_format` every request of the measured server carried (a constrained
    /// ladder: `--response-format`); absent for free text. An `--against` side is free.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<serde_json::Value>,
}

/// Where it ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// `cpu` when no NVIDIA GPU was found, else the GPUs' names.
    pub kind: String,
    pub gpus: Vec<GpuInfo>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuInfo {
    pub name: String,
    pub driver: String,
    /// Maximum SM and memory clocks in MHz, where `nvidia-smi` reports them.
    pub sm_clock_max_mhz: Option<u32>,
    pub mem_clock_max_mhz: Option<u32>,
}

/// The figures of one rung.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rung {
    pub concurrency: u32,
    /// Timed requests sent (concurrency × reps).
    pub requests: u32,
    /// Timed requests that failed, ended early, carried an error or fell short of the OSL.
    pub errors: u32,
    /// Aggregate output tokens a second, over the timed reps.
    pub output_tok_s: Summary,
    /// Time to first token of the successful timed requests, milliseconds.
    pub ttft_ms: Percentiles,
    /// Inter-token latency `(latency − TTFT) / (OSL − 1)`, milliseconds (absent for OSL 1).
    pub itl_ms: Option<Percentiles>,
    /// The raw numbers of every timed rep.
    pub reps: Vec<Rep>,
    /// The first few error messages, to say what went wrong.
    pub error_samples: Vec<String>,
}

/// A rep: `concurrency` requests sent at once, timed until the last one ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rep {
    pub wall_s: f64,
    /// Output tokens of the successful requests.
    pub output_tokens: u64,
    pub errors: u32,
    /// `output_tokens / wall_s`.
    pub output_tok_s: f64,
    /// Per successful request, in the order they were sent.
    pub ttft_ms: Vec<f64>,
    pub latency_ms: Vec<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub mean: f64,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// Sample standard deviation (0 with one rep).
    pub stddev: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
}
