//! The clap types of `metralectl bench`. They live here rather than in
//! `cli.rs` so the bench flags stay in one place; `cli.rs` only names them.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: Option<BenchCommand>,
    #[command(flatten)]
    pub run: RunArgs,
}

impl BenchArgs {
    /// Whether JSON output was asked for, by the ladder or by a subcommand.
    pub fn json(&self) -> bool {
        match &self.command {
            Some(BenchCommand::Gate(g)) => g.json,
            Some(BenchCommand::Keygen(_) | BenchCommand::Report(_)) => false,
            None => self.run.json,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Rerun a baseline record's workload; fail when a rung is slower than the baseline by more
    /// than the tolerance, or when greedy outputs are not deterministic or leak special tokens.
    Gate(GateArgs),
    /// Generate bench/README.md (a table a record) and bench/ladder.svg (tok/s against
    /// concurrency per series) from the committed records.
    Report(ReportArgs),
    /// Write a minisign key pair for `--sign`: KEYFILE (secret, mode 0600) and KEYFILE.pub.
    Keygen(KeygenArgs),
}

#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// Where to write the secret key (it must not exist); the public key goes to KEYFILE.pub.
    pub keyfile: PathBuf,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The directory of records.
    #[arg(long, value_name = "DIR", default_value = "bench/records")]
    pub records: PathBuf,
    /// Where README.md and ladder.svg go.
    #[arg(long, value_name = "DIR", default_value = "bench")]
    pub out: PathBuf,
}

#[derive(Debug, Args)]
pub struct GateArgs {
    /// The baseline record (e.g. bench/baselines/NAME.json).
    #[arg(long, value_name = "FILE")]
    pub baseline: PathBuf,
    /// The server to measure [default: the baseline's URL].
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// The server's API key (sent as `Authorization: Bearer KEY`).
    #[arg(long, value_name = "KEY", env = "MET_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Send this model name instead of the baseline's (the same model served under another
    /// name).
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// How much slower than the baseline a rung may be, as a fraction.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.10)]
    pub tolerance: f64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Endpoint {
    /// `POST /v1/chat/completions`, the prompt as one user message.
    Chat,
    /// `POST /v1/completions`, the prompt as token ids.
    Completions,
}

impl Endpoint {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Chat => "chat",
            Self::Completions => "completions",
        }
    }
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Base URL of the OpenAI-compatible server (e.g. http://127.0.0.1:8000).
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// The model name to send [default: the first one the server's /v1/models lists].
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,
    /// The ladder: concurrent requests of each rung, comma-separated.
    #[arg(
        long,
        value_name = "N,N,..",
        value_delimiter = ',',
        default_value = "1,2,4"
    )]
    pub concurrency: Vec<u32>,
    /// Prompt tokens a request, exactly.
    #[arg(long, value_name = "N", default_value_t = 128)]
    pub isl: u32,
    /// Generated tokens a request, exactly.
    #[arg(long, value_name = "N", default_value_t = 128)]
    pub osl: u32,
    /// Timed repetitions a rung.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub reps: u32,
    /// Untimed repetitions before the timed ones, a rung.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub warmup: u32,
    /// Seed of the prompts and of the sampler.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub seed: u64,
    /// Sampling temperature.
    #[arg(long, value_name = "T", default_value_t = 0.0)]
    pub temperature: f64,
    /// The server's API key (sent as `Authorization: Bearer KEY`).
    #[arg(long, value_name = "KEY", env = "MET_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Run the same ladder against this second server too, alternating rep by rep, and report
    /// the ratio a rung.
    #[arg(long, value_name = "URL2")]
    pub against: Option<String>,
    /// The model name to send to --against [default: the first one its /v1/models lists].
    #[arg(long, value_name = "MODEL", requires = "against")]
    pub against_model: Option<String>,
    /// Which API to drive.
    #[arg(long, value_enum, default_value = "chat")]
    pub endpoint: Endpoint,
    /// Give up on a request after this many seconds (it counts as an error).
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub request_timeout: u64,
    /// Write the run as a record (JSON, see docs/benchmarks.md).
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Constrain every request to the measured server (not --against's) with this
    /// `response_format`: `json_object`, or FILE holding a JSON schema (sent as `json_schema`).
    /// With the bench's `ignore_eos` the server writes one value after another up to --osl.
    /// `--against` the same URL measures the free ladder beside it (the ratio is constrained / free).
    #[arg(long, value_name = "json_object|FILE", conflicts_with = "mixed")]
    pub response_format: Option<String>,
    /// Sign the record with this secret key (from `metralectl bench keygen`): writes FILE.minisig.
    #[arg(long, value_name = "KEYFILE", requires = "record")]
    pub sign: Option<PathBuf>,
    /// Print the record as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub mixed: MixedArgs,
}

/// `--mixed` and its flags: streams decoding while long prompts arrive (docs/benchmarks.md).
#[derive(Debug, Default, Args)]
pub struct MixedArgs {
    /// Run the mixed load instead of the ladder: --streams requests decoding continuously
    /// (ISL/OSL from --isl/--osl), first alone, then while a long prompt arrives every
    /// --long-every; reports the streams' ITL in both phases and the long prompts' TTFT.
    #[arg(long, conflicts_with_all = ["concurrency", "reps", "against"])]
    pub mixed: bool,
    /// Streams decoding at once; each sends its next request as soon as its last one ends.
    #[arg(long, value_name = "N", default_value_t = 16, requires = "mixed")]
    pub streams: u32,
    /// Prompt tokens of each long prompt.
    #[arg(long, value_name = "N", default_value_t = 8192, requires = "mixed")]
    pub long_isl: u32,
    /// Generated tokens of each long prompt.
    #[arg(long, value_name = "N", default_value_t = 16, requires = "mixed")]
    pub long_osl: u32,
    /// Time between two long prompts' arrivals (`1s`, `500ms`, `0.5s`, `2m`; a bare number is
    /// seconds).
    #[arg(long, value_name = "TIME", default_value = "1s", value_parser = parse_duration, requires = "mixed")]
    pub long_every: Duration,
    /// How long each phase lasts: the baseline (streams alone), then the loaded one.
    #[arg(long, value_name = "TIME", default_value = "30s", value_parser = parse_duration, requires = "mixed")]
    pub duration: Duration,
}

/// `1s`, `500ms`, `0.5s`, `2m` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (number, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else {
        (t, 1.0)
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a time: write it like 1s, 500ms, 0.5s or 2m"))?;
    if !value.is_finite() || value < 0.0 {
        return Err(format!(
            "`{text}` is not a time: it must be a positive number, like 1s"
        ));
    }
    Duration::try_from_secs_f64(value * scale).map_err(|_| format!("`{text}` is too long a time"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_their_units_and_refuse_the_rest() {
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("0.5s"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        for bad in ["", "soon", "-1s", "1h", "NaNs"] {
            let err = parse_duration(bad).expect_err(bad);
            assert!(err.contains("not a time"), "{bad}: {err}");
        }
    }
}
