//! Prometheus text for `GET /metrics`, under vLLM's metric names where the meaning is the same,
//! so existing Grafana boards work. Gauges and token counters come from the engine's
//! [`EngineStats`]; latency histograms and per-reason request counts are measured where the
//! tokens reach the client, in the server, by one [`RequestTimer`] per engine request.
//!
//! The live event stream (protocol v1, `docs/metrics-socket.md`) lives in [`hub`] (the
//! fan-out thread) and [`socket`] (the Unix socket); the SSE route is in `server/`.

pub mod hub;
pub mod socket;

pub use hub::{MetricsHub, PhaseReporter};

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::engine_core::EngineStats;
use crate::scheduler::SpecDecodeStats;

/// vLLM's buckets, so dashboards' quantile panels line up.
const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
const E2E_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

/// How a request ended, as `vllm:request_success_total{finished_reason}` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Stop,
    Length,
    Abort,
}

impl Outcome {
    const ALL: [Outcome; 3] = [Outcome::Stop, Outcome::Length, Outcome::Abort];

    fn label(self) -> &'static str {
        match self {
            Outcome::Stop => "stop",
            Outcome::Length => "length",
            Outcome::Abort => "abort",
        }
    }
}

#[derive(Debug)]
struct Histogram {
    bounds: Vec<f64>,
    /// Per bucket (not cumulative), plus one for +Inf.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &[f64]) -> Self {
        Self {
            bounds: bounds.to_vec(),
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, v: f64) {
        let i = self.bounds.partition_point(|&b| b < v);
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, help: &str, labels: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cum = 0;
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            cum += c;
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{b:?}\"}} {cum}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels},le=\"+Inf\"}} {}\n{name}_sum{{{labels}}} {}\n{name}_count{{{labels}}} {}",
            self.count, self.sum, self.count
        );
    }
}

/// 1, 2, 5, 10, 20, 50, … up to `max` (vLLM's buckets for token counts).
fn one_two_five(max: usize) -> Vec<f64> {
    let mut v = Vec::new();
    let mut scale = 1usize;
    'outer: loop {
        for m in [1, 2, 5] {
            let b = m * scale;
            if b > max {
                break 'outer;
            }
            v.push(b as f64);
        }
        scale = scale.saturating_mul(10);
    }
    v
}

#[derive(Debug)]
struct Inner {
    ttft: Histogram,
    itl: Histogram,
    e2e: Histogram,
    prompt_tokens: Histogram,
    generation_tokens: Histogram,
    success: [u64; 3],
}

/// Measurements the server makes; shared by all requests.
#[derive(Debug)]
pub struct ServerMetrics {
    inner: Mutex<Inner>,
}

impl ServerMetrics {
    /// `max_model_len` sets the largest token-count bucket.
    pub fn new(max_model_len: usize) -> Self {
        let tokens = one_two_five(max_model_len.max(1));
        Self {
            inner: Mutex::new(Inner {
                ttft: Histogram::new(TTFT_BUCKETS),
                itl: Histogram::new(ITL_BUCKETS),
                e2e: Histogram::new(E2E_BUCKETS),
                prompt_tokens: Histogram::new(&tokens),
                generation_tokens: Histogram::new(&tokens),
                success: [0; 3],
            }),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> Option<R> {
        self.inner.lock().ok().map(|mut g| f(&mut g))
    }

    /// The whole exposition. `stats` is `None` while the model loads.
    pub fn render(&self, model_name: &str, stats: Option<&EngineStats>) -> String {
        let labels = format!("model_name=\"{}\"", escape_label(model_name));
        let s = stats.cloned().unwrap_or_default();
        let mut out = String::new();
        let gauges: [(&str, &str, f64); 3] = [
            (
                "vllm:num_requests_running",
                "Number of requests in model execution batches.",
                s.num_running as f64,
            ),
            (
                "vllm:num_requests_waiting",
                "Number of requests waiting to be processed.",
                s.num_waiting as f64,
            ),
            (
                "vllm:kv_cache_usage_perc",
                "KV-cache usage. 1 means 100 percent usage.",
                s.kv_cache_usage,
            ),
        ];
        for (name, help, v) in gauges {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{{labels}}} {v}"
            );
        }
        let mut counters: Vec<(&str, &str, u64)> = vec![
            (
                "vllm:prompt_tokens_total",
                "Number of prefill tokens processed.",
                s.prompt_tokens_total,
            ),
            (
                "vllm:generation_tokens_total",
                "Number of generation tokens processed.",
                s.generation_tokens_total,
            ),
            (
                "vllm:prefix_cache_queries_total",
                "Prefix cache queries, in terms of number of queried tokens.",
                s.prefix_cache_queries_total,
            ),
            (
                "vllm:prefix_cache_hits_total",
                "Prefix cache hits, in terms of number of cached tokens.",
                s.prefix_cache_hits_total,
            ),
            (
                "vllm:num_preemptions_total",
                "Cumulative number of preemptions from the engine.",
                s.num_preemptions_total,
            ),
        ];
        if s.num_drafts > 0 {
            counters.extend(spec_decode_counters(&s.spec));
        }
        for (name, help, v) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name}{{{labels}}} {v}"
            );
        }
        if s.num_drafts > 0 {
            render_spec_per_pos(&mut out, &labels, &s);
        }
        self.with(|m| {
            let name = "vllm:request_success_total";
            let _ = writeln!(
                out,
                "# HELP {name} Count of successfully processed requests.\n# TYPE {name} counter"
            );
            for (o, n) in Outcome::ALL.iter().zip(m.success) {
                let _ = writeln!(
                    out,
                    "{name}{{{labels},finished_reason=\"{}\"}} {n}",
                    o.label()
                );
            }
            m.ttft.render(
                &mut out,
                "vllm:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                &labels,
            );
            m.itl.render(
                &mut out,
                "vllm:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                &labels,
            );
            m.e2e.render(
                &mut out,
                "vllm:e2e_request_latency_seconds",
                "Histogram of e2e request latency in seconds.",
                &labels,
            );
            m.prompt_tokens.render(
                &mut out,
                "vllm:request_prompt_tokens",
                "Number of prefill tokens processed.",
                &labels,
            );
            m.generation_tokens.render(
                &mut out,
                "vllm:request_generation_tokens",
                "Number of generation tokens processed.",
                &labels,
            );
        });
        out
    }
}

/// Speculative decoding's counters, named as vLLM names them.
fn spec_decode_counters(sp: &SpecDecodeStats) -> [(&'static str, &'static str, u64); 3] {
    [
        (
            "vllm:spec_decode_num_drafts_total",
            "Number of spec decoding drafts (verify steps of a sequence with drafts).",
            sp.num_drafts,
        ),
        (
            "vllm:spec_decode_num_draft_tokens_total",
            "Number of draft tokens.",
            sp.num_draft_tokens,
        ),
        (
            "vllm:spec_decode_num_accepted_tokens_total",
            "Number of accepted tokens.",
            sp.num_accepted_tokens,
        ),
    ]
}

/// Speculative decoding by draft position (0: a step's first draft), one series a position up
/// to `--num-drafts`: drafts accepted (vLLM's name) and verified (ours, vLLM has none), the
/// policy's acceptance estimate; then its current drafts a step (`draft_policy.rs`).
fn render_spec_per_pos(out: &mut String, labels: &str, s: &EngineStats) {
    let sp = &s.spec;
    let positions = s.num_drafts.min(sp.accepted_per_pos.len());
    let series: [(&str, &str, &str, Vec<f64>); 3] = [
        (
            "vllm:spec_decode_num_accepted_tokens_per_pos_total",
            "Accepted tokens per draft position.",
            "counter",
            sp.accepted_per_pos.iter().map(|&n| n as f64).collect(),
        ),
        (
            "metrale:spec_decode_num_draft_tokens_per_pos_total",
            "Draft tokens verified per draft position.",
            "counter",
            sp.proposed_per_pos.iter().map(|&n| n as f64).collect(),
        ),
        (
            "metrale:spec_decode_acceptance_per_pos",
            "Estimated chance a draft at this position is accepted when the drafts before it \
             were (exponentially weighted), which sets the drafts a step.",
            "gauge",
            sp.acceptance.to_vec(),
        ),
    ];
    for (name, help, kind, values) in series {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (p, v) in values[..positions].iter().enumerate() {
            let _ = writeln!(out, "{name}{{{labels},position=\"{p}\"}} {v}");
        }
    }
    let name = "metrale:spec_decode_drafts_per_step";
    let _ = writeln!(
        out,
        "# HELP {name} Drafts the MTP head proposed a sequence in the last step (0: speculation \
         off, by the ladder or because acceptance does not pay).\n# TYPE {name} gauge\n\
         {name}{{{labels}}} {}",
        sp.drafts_per_step
    );
    let name = "metrale:spec_decode_draft_cost";
    let _ = writeln!(
        out,
        "# HELP {name} What one draft adds to a decode step at the current batch size, as a \
         fraction of a plain step (timed by the engine; --speculative-draft-cost until it has).\n\
         # TYPE {name} gauge\n{name}{{{labels}}} {}",
        sp.draft_cost
    );
}

fn escape_label(v: &str) -> String {
    v.replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Times one engine request from arrival to its last token. Dropped before
/// [`RequestTimer::finish`] (client gone, stop string, timeout, error), it counts as an abort.
#[derive(Debug)]
pub struct RequestTimer {
    metrics: Arc<ServerMetrics>,
    arrival: Instant,
    last_token: Option<Instant>,
    prompt_tokens: usize,
    generated: usize,
    done: bool,
}

impl RequestTimer {
    pub fn new(metrics: Arc<ServerMetrics>, arrival: Instant, prompt_tokens: usize) -> Self {
        Self {
            metrics,
            arrival,
            last_token: None,
            prompt_tokens,
            generated: 0,
            done: false,
        }
    }

    /// `n` tokens arrived now: the first is TTFT, each later arrival one inter-token gap.
    pub fn on_tokens(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        let now = Instant::now();
        let gap = match self.last_token {
            None => {
                let ttft = (now - self.arrival).as_secs_f64();
                self.metrics.with(|m| m.ttft.observe(ttft));
                None
            }
            Some(t) => Some((now - t).as_secs_f64() / n as f64),
        };
        if let Some(g) = gap {
            self.metrics.with(|m| (0..n).for_each(|_| m.itl.observe(g)));
        }
        self.last_token = Some(now);
        self.generated += n;
    }

    pub fn finish(&mut self, outcome: Outcome) {
        if self.done {
            return;
        }
        self.done = true;
        let e2e = self.arrival.elapsed().as_secs_f64();
        let (p, g) = (self.prompt_tokens as f64, self.generated as f64);
        self.metrics.with(|m| {
            m.e2e.observe(e2e);
            m.prompt_tokens.observe(p);
            m.generation_tokens.observe(g);
            m.success[Outcome::ALL.iter().position(|o| *o == outcome).unwrap_or(2)] += 1;
        });
    }
}

impl Drop for RequestTimer {
    fn drop(&mut self) {
        self.finish(Outcome::Abort);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line<'a>(text: &'a str, prefix: &str) -> &'a str {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line {prefix} in\n{text}"))
    }

    #[test]
    fn histograms_are_cumulative_and_counted() {
        let m = Arc::new(ServerMetrics::new(100));
        let t0 = Instant::now() - std::time::Duration::from_millis(30);
        let mut t = RequestTimer::new(m.clone(), t0, 12);
        t.on_tokens(1);
        t.on_tokens(2);
        t.finish(Outcome::Length);
        drop(RequestTimer::new(m.clone(), Instant::now(), 3));
        let text = m.render("de\"mo", None);
        let l = "model_name=\"de\\\"mo\"";
        assert_eq!(
            line(
                &text,
                &format!("vllm:time_to_first_token_seconds_bucket{{{l},le=\"0.02\"}}")
            ),
            format!("vllm:time_to_first_token_seconds_bucket{{{l},le=\"0.02\"}} 0")
        );
        assert!(
            line(
                &text,
                &format!("vllm:time_to_first_token_seconds_bucket{{{l},le=\"0.04\"}}")
            )
            .ends_with(" 1")
        );
        assert!(line(&text, "vllm:inter_token_latency_seconds_count").ends_with(" 2"));
        assert!(line(&text, "vllm:e2e_request_latency_seconds_count").ends_with(" 2"));
        assert!(
            line(
                &text,
                &format!("vllm:request_success_total{{{l},finished_reason=\"length\"}}")
            )
            .ends_with(" 1")
        );
        assert!(
            line(
                &text,
                &format!("vllm:request_success_total{{{l},finished_reason=\"abort\"}}")
            )
            .ends_with(" 1")
        );
        assert!(line(&text, "vllm:request_generation_tokens_sum").ends_with(" 3"));
        assert!(line(&text, "vllm:request_prompt_tokens_bucket").contains("le=\"1.0\""));
    }

    #[test]
    fn gauges_and_counters_come_from_engine_stats() {
        let stats = EngineStats {
            num_running: 3,
            kv_cache_usage: 0.25,
            prompt_tokens_total: 99,
            ..Default::default()
        };
        let text = ServerMetrics::new(10).render("m", Some(&stats));
        assert_eq!(
            line(&text, "vllm:num_requests_running{"),
            "vllm:num_requests_running{model_name=\"m\"} 3"
        );
        assert!(line(&text, "vllm:kv_cache_usage_perc{").ends_with(" 0.25"));
        assert!(line(&text, "vllm:prompt_tokens_total{").ends_with(" 99"));
        assert!(text.contains("# TYPE vllm:prompt_tokens_total counter"));
    }

    #[test]
    fn speculation_is_shown_by_draft_position() {
        let mut stats = EngineStats {
            num_drafts: 2,
            ..Default::default()
        };
        stats.spec.record(2, 1);
        stats.spec.record(2, 0);
        stats.spec.record(1, 1);
        stats.spec.acceptance[1] = 0.25;
        stats.spec.drafts_per_step = 1;
        let text = ServerMetrics::new(10).render("m", Some(&stats));
        let at = |name: &str, p: usize| {
            line(
                &text,
                &format!("{name}{{model_name=\"m\",position=\"{p}\"}}"),
            )
            .to_owned()
        };
        let proposed = "metrale:spec_decode_num_draft_tokens_per_pos_total";
        assert!(at(proposed, 0).ends_with(" 3") && at(proposed, 1).ends_with(" 2"));
        let accepted = "vllm:spec_decode_num_accepted_tokens_per_pos_total";
        assert!(at(accepted, 0).ends_with(" 2") && at(accepted, 1).ends_with(" 0"));
        assert!(at("metrale:spec_decode_acceptance_per_pos", 1).ends_with(" 0.25"));
        assert!(!text.contains("position=\"2\""), "{text}");
        assert_eq!(
            line(&text, "metrale:spec_decode_drafts_per_step{"),
            "metrale:spec_decode_drafts_per_step{model_name=\"m\"} 1"
        );
        assert!(text.contains("# TYPE metrale:spec_decode_drafts_per_step gauge"));
        // Off: none of it.
        let text = ServerMetrics::new(10).render("m", Some(&EngineStats::default()));
        assert!(!text.contains("spec_decode"), "{text}");
    }

    #[test]
    fn token_buckets_go_one_two_five() {
        assert_eq!(one_two_five(60), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0]);
    }
}
