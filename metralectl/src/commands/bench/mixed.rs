//! `metralectl bench --mixed`: the mixed load of issue 32. `--streams` requests decode
//! continuously (each sends its next request as soon as its last one ends), first alone for
//! `--duration` (the baseline phase), then for `--duration` more while a `--long-isl` prompt
//! arrives every `--long-every` (the loaded phase). The streams' per-token gaps, timed chunk by
//! chunk from their streams, are compared across the two phases; the long prompts' TTFT is
//! measured as they arrive.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use metrale_protocol::bench::{LongPrompts, Mixed, MixedPhase, RECORD_VERSION, Record, Workload};

use super::args::{Endpoint, RunArgs};
use super::client::{Arrival, Outcome, Prompt, Server};
use super::{ERROR_SAMPLES, model_of, record, runtime, save, stats, validate};
use crate::printer::Printer;
use crate::signing;

/// Distinct prompts built a stream, used in turn by its successive requests.
const PROMPTS_A_STREAM: u64 = 4;
/// Seeds of the long prompts start here, apart from the streams'.
const LONG_SEED_BASE: u64 = 1 << 32;

/// The flags of the mixed load, checked once; each error names the flag and the fix.
fn validate_mixed(args: &RunArgs) -> anyhow::Result<()> {
    let m = &args.mixed;
    if m.streams == 0 {
        bail!("--streams must be at least 1: the streams whose inter-token latency is measured");
    }
    if args.osl < 2 {
        bail!(
            "--osl {} is too short for --mixed: the streams' inter-token gaps need at least 2 generated tokens a request",
            args.osl
        );
    }
    if m.long_isl == 0 || m.long_osl == 0 {
        bail!("--long-isl and --long-osl must be at least 1 token");
    }
    if m.long_every.is_zero() {
        bail!("--long-every must be more than 0, e.g. --long-every 1s");
    }
    if m.duration < m.long_every {
        bail!(
            "--duration {:?} is shorter than --long-every {:?}: no long prompt would arrive in the loaded phase; make --duration longer",
            m.duration,
            m.long_every
        );
    }
    Ok(())
}

/// What one stream request came to: when it ended, how, and its token-carrying chunks.
struct Done {
    ended: Instant,
    outcome: Outcome,
    arrivals: Vec<Arrival>,
}

pub(super) fn run(args: &RunArgs, printer: &Printer) -> anyhow::Result<ExitCode> {
    let url = validate(args)?;
    validate_mixed(args)?;
    // Load the key first: a bad key should fail before minutes of measuring, not after.
    let key = args.sign.as_deref().map(signing::load_secret).transpose()?;
    let harness = record::harness()?;
    let server = Server::new(
        url,
        args.api_key.clone(),
        Duration::from_secs(args.request_timeout),
    )?;
    let base = server.base().to_owned();
    let (model, described, mixed) = runtime()?.block_on(measure(server, args, printer))?;
    let rec = Record {
        version: RECORD_VERSION,
        date: record::now_rfc3339(),
        harness,
        workload: Workload {
            url: base,
            model,
            endpoint: args.endpoint.as_str().to_owned(),
            isl: args.isl,
            osl: args.osl,
            concurrency: vec![args.mixed.streams],
            reps: 1,
            warmup: args.warmup,
            seed: args.seed,
            temperature: args.temperature,
            response_format: None,
        },
        server: described,
        machine: record::machine(),
        rungs: Vec::new(),
        against: None,
        mixed: Some(mixed),
    };
    save(&rec, args, key.as_ref(), printer)?;
    if printer.json_mode() {
        printer.json(&rec)?;
    } else {
        print_table(&rec, printer)?;
    }
    let Some(m) = &rec.mixed else {
        return Ok(ExitCode::FAILURE);
    };
    let errors = m.baseline.errors + m.loaded.errors + m.long.errors;
    if errors > 0 {
        let sample = [
            &m.baseline.error_samples,
            &m.loaded.error_samples,
            &m.long.error_samples,
        ]
        .into_iter()
        .flatten()
        .next();
        printer.warn(format!(
            "{errors} requests failed; their tokens are not counted (first: {})",
            sample.map_or("-", String::as_str)
        ));
        return Ok(ExitCode::FAILURE);
    }
    if m.itl_p99_ratio.is_none() {
        printer.warn(
            "a phase measured no inter-token gaps, so there is no ratio: make --duration longer than a stream request takes",
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// Builds the prompts, warms up, runs both phases and sums them up.
async fn measure(
    server: Server,
    args: &RunArgs,
    printer: &Printer,
) -> anyhow::Result<(String, serde_json::Value, Mixed)> {
    let m = &args.mixed;
    let (models, described) = server.describe().await?;
    let model: Arc<str> = model_of(&server, &models, args.model.as_deref())?.into();
    let server = Arc::new(server);
    // Long prompts arrive at D, D + every, … while before 2D; warm-up rounds add one each.
    let n_long = m.duration.as_nanos().div_ceil(m.long_every.as_nanos()) as u64;
    let total_long = n_long + u64::from(args.warmup);
    let n_stream = u64::from(m.streams) * PROMPTS_A_STREAM;
    printer.note(format!(
        "building {n_stream} stream prompts of {} tokens and {total_long} long ones of {}",
        args.isl, m.long_isl
    ));
    // Every prompt distinct (seeded words), built before the clock starts, so no long prompt
    // is a prefix-cache hit; a stream's few prompts repeat, which only shortens its prefill.
    let base = args.seed.wrapping_mul(1_000_003);
    let mut stream_prompts = Vec::new();
    for i in 0..n_stream {
        let seed = base.wrapping_add(i + 1);
        stream_prompts.push((
            server.prompt(&model, args.endpoint, args.isl, seed).await?,
            seed,
        ));
    }
    let mut long_prompts = Vec::new();
    for i in 0..total_long {
        let seed = base.wrapping_add(LONG_SEED_BASE + i);
        let prompt = server
            .prompt(&model, args.endpoint, m.long_isl, seed)
            .await?;
        long_prompts.push((prompt, seed));
    }
    let stream_prompts = Arc::new(stream_prompts);
    let spec = Arc::new(Spec {
        server,
        model: model.clone(),
        args_endpoint: args.endpoint,
        isl: args.isl,
        osl: args.osl,
        long_isl: m.long_isl,
        long_osl: m.long_osl,
        temperature: args.temperature,
    });

    // Warm-up rounds: every stream's request and a long prompt at once, untimed.
    let mut long_iter = long_prompts.into_iter();
    for _ in 0..args.warmup {
        let mut tasks = Vec::new();
        for s in 0..u64::from(m.streams) {
            let (spec, (prompt, seed)) = (spec.clone(), stream_prompts[s as usize].clone());
            tasks.push(tokio::spawn(async move {
                spec.stream_request(&prompt, seed).await
            }));
        }
        if let Some((prompt, seed)) = long_iter.next() {
            let spec = spec.clone();
            tasks.push(tokio::spawn(async move {
                spec.long_request(&prompt, seed).await
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    }

    printer.note(format!(
        "baseline: {} streams for {:?}, then loaded: a {}-token prompt every {:?} for {:?}",
        m.streams, m.duration, m.long_isl, m.long_every, m.duration
    ));
    let t0 = Instant::now();
    let end = t0 + 2 * m.duration;
    let streams: Vec<_> = (0..u64::from(m.streams))
        .map(|s| {
            let (spec, prompts) = (spec.clone(), stream_prompts.clone());
            tokio::spawn(async move {
                let mut done = Vec::new();
                let mut j = 0u64;
                while Instant::now() < end {
                    let (prompt, seed) =
                        &prompts[(s * PROMPTS_A_STREAM + j % PROMPTS_A_STREAM) as usize];
                    let (outcome, arrivals) = spec.stream_traced(prompt, *seed).await;
                    done.push(Done {
                        ended: Instant::now(),
                        outcome,
                        arrivals,
                    });
                    j += 1;
                }
                done
            })
        })
        .collect();
    let mut longs = Vec::new();
    for (k, (prompt, seed)) in long_iter.enumerate() {
        tokio::time::sleep_until((t0 + m.duration + m.long_every * k as u32).into()).await;
        let spec = spec.clone();
        longs.push(tokio::spawn(async move {
            spec.long_request(&prompt, seed).await
        }));
    }
    let mut requests = Vec::new();
    for s in streams {
        requests.extend(s.await.unwrap_or_default());
    }
    let mut long_outcomes = Vec::new();
    for l in longs {
        long_outcomes.push(
            l.await
                .unwrap_or_else(|e| Outcome::Err(format!("request task failed: {e}"))),
        );
    }
    let baseline = phase(&requests, t0, t0 + m.duration);
    let loaded = phase(&requests, t0 + m.duration, end);
    let ratio = |f: fn(&metrale_protocol::bench::Percentiles) -> f64| match (
        &baseline.itl_ms,
        &loaded.itl_ms,
    ) {
        (Some(b), Some(l)) if f(b) > 0.0 => Some(f(l) / f(b)),
        _ => None,
    };
    let mixed = Mixed {
        streams: m.streams,
        long_isl: m.long_isl,
        long_osl: m.long_osl,
        long_every_s: m.long_every.as_secs_f64(),
        phase_s: m.duration.as_secs_f64(),
        itl_p99_ratio: ratio(|p| p.p99),
        itl_p50_ratio: ratio(|p| p.p50),
        baseline,
        loaded,
        long: long_of(&long_outcomes),
    };
    Ok((model.to_string(), described, mixed))
}

/// What every request of the run shares.
struct Spec {
    server: Arc<Server>,
    model: Arc<str>,
    args_endpoint: Endpoint,
    isl: u32,
    osl: u32,
    long_isl: u32,
    long_osl: u32,
    temperature: f64,
}

impl Spec {
    async fn stream_traced(&self, prompt: &Prompt, seed: u64) -> (Outcome, Vec<Arrival>) {
        let (e, t) = (self.args_endpoint, self.temperature);
        self.server
            .run_traced(e, &self.model, prompt, self.isl, self.osl, t, seed)
            .await
    }

    async fn stream_request(&self, prompt: &Prompt, seed: u64) -> Outcome {
        self.stream_traced(prompt, seed).await.0
    }

    async fn long_request(&self, prompt: &Prompt, seed: u64) -> Outcome {
        let (e, t) = (self.args_endpoint, self.temperature);
        self.server
            .run(
                e,
                &self.model,
                prompt,
                self.long_isl,
                self.long_osl,
                t,
                seed,
            )
            .await
    }
}

/// The streams' figures over `[from, to)`: a token or gap counts where its chunk arrived, a
/// request where it ended; the tokens and gaps of failed requests are not counted.
fn phase(requests: &[Done], from: Instant, to: Instant) -> MixedPhase {
    let within = |t: Instant| t >= from && t < to;
    let mut gaps = Vec::new();
    let (mut tokens, mut count, mut errors) = (0u64, 0u32, 0u32);
    let mut error_samples = Vec::new();
    for d in requests {
        if within(d.ended) {
            count += 1;
            if let Outcome::Err(msg) = &d.outcome {
                errors += 1;
                if error_samples.len() < ERROR_SAMPLES {
                    error_samples.push(msg.clone());
                }
            }
        }
        if matches!(d.outcome, Outcome::Err(_)) {
            continue;
        }
        tokens += d
            .arrivals
            .iter()
            .filter(|a| within(a.at))
            .map(|a| a.tokens)
            .sum::<u64>();
        gaps.extend(
            d.arrivals
                .windows(2)
                .filter(|w| within(w[1].at))
                .map(|w| w[1].at.duration_since(w[0].at).as_secs_f64() * 1e3),
        );
    }
    let wall_s = to.duration_since(from).as_secs_f64();
    MixedPhase {
        wall_s,
        output_tokens: tokens,
        output_tok_s: if wall_s > 0.0 {
            tokens as f64 / wall_s
        } else {
            0.0
        },
        gaps: gaps.len() as u64,
        itl_ms: stats::percentiles(&gaps),
        itl_max_ms: gaps.iter().copied().reduce(f64::max),
        requests: count,
        errors,
        error_samples,
    }
}

fn long_of(outcomes: &[Outcome]) -> LongPrompts {
    let mut long = LongPrompts {
        sent: outcomes.len() as u32,
        errors: 0,
        ttft_ms: None,
        ttft_raw_ms: Vec::new(),
        latency_raw_ms: Vec::new(),
        error_samples: Vec::new(),
    };
    for o in outcomes {
        match o {
            Outcome::Ok { ttft, latency, .. } => {
                long.ttft_raw_ms.push(ttft.as_secs_f64() * 1e3);
                long.latency_raw_ms.push(latency.as_secs_f64() * 1e3);
            }
            Outcome::Err(msg) => {
                long.errors += 1;
                if long.error_samples.len() < ERROR_SAMPLES {
                    long.error_samples.push(msg.clone());
                }
            }
        }
    }
    long.ttft_ms = stats::percentiles(&long.ttft_raw_ms);
    long
}

fn print_table(rec: &Record, printer: &Printer) -> anyhow::Result<()> {
    let Some(m) = &rec.mixed else { return Ok(()) };
    let w = &rec.workload;
    printer.line(format!(
        "mixed load, {} {} on {} ({}): {} streams of ISL {} OSL {}; a {}-token prompt (OSL {}) every {:.2}s; {:.1}s a phase",
        w.endpoint, w.model, w.url, rec.machine.kind, m.streams, w.isl, w.osl, m.long_isl,
        m.long_osl, m.long_every_s, m.phase_s
    ))?;
    let p = |x: &Option<metrale_protocol::bench::Percentiles>| {
        x.as_ref().map_or_else(
            || "-".into(),
            |x| format!("{:.1}/{:.1}/{:.1}", x.p50, x.p90, x.p99),
        )
    };
    let rows: Vec<Vec<String>> = [
        ("streams alone", &m.baseline),
        ("with long prompts", &m.loaded),
    ]
    .into_iter()
    .map(|(name, ph)| {
        vec![
            name.to_owned(),
            format!("{:.1}", ph.output_tok_s),
            ph.gaps.to_string(),
            p(&ph.itl_ms),
            ph.itl_max_ms
                .map_or_else(|| "-".into(), |x| format!("{x:.1}")),
            ph.requests.to_string(),
            ph.errors.to_string(),
        ]
    })
    .collect();
    printer.table(
        &[
            "PHASE",
            "TOK/S",
            "GAPS",
            "ITL MS p50/90/99",
            "ITL MAX",
            "REQS",
            "ERRORS",
        ],
        &rows,
    )?;
    printer.line(format!(
        "long prompts: {} sent, {} errors, TTFT ms p50/90/99 {}",
        m.long.sent,
        m.long.errors,
        p(&m.long.ttft_ms)
    ))?;
    let r = |x: Option<f64>| x.map_or_else(|| "-".into(), |x| format!("{x:.2}"));
    printer.line(format!(
        "ITL with/without long prompts: p99 {} (issue 32 asks at most 2.5), p50 {}",
        r(m.itl_p99_ratio),
        r(m.itl_p50_ratio)
    ))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(t0: Instant, ms: &[u64], ok: bool) -> Done {
        let at = |x: u64| t0 + Duration::from_millis(x);
        Done {
            ended: at(*ms.last().unwrap_or(&0)),
            outcome: if ok {
                Outcome::Ok {
                    ttft: Duration::ZERO,
                    latency: Duration::ZERO,
                    output_tokens: ms.len() as u64,
                }
            } else {
                Outcome::Err("broke".into())
            },
            arrivals: ms
                .iter()
                .map(|x| Arrival {
                    at: at(*x),
                    tokens: 1,
                })
                .collect(),
        }
    }

    #[test]
    fn gaps_and_tokens_count_in_the_phase_where_they_arrived() {
        let t0 = Instant::now();
        let ms = |x| t0 + Duration::from_millis(x);
        // One request straddles the phases' boundary at 100 ms; a failed one is not counted.
        let reqs = [
            done(t0, &[10, 20, 40, 110, 130], true),
            done(t0, &[50, 60], false),
        ];
        let a = phase(&reqs, t0, ms(100));
        let b = phase(&reqs, ms(100), ms(200));
        assert_eq!(
            (a.output_tokens, a.gaps, a.requests, a.errors),
            (3, 2, 1, 1)
        );
        assert_eq!(
            (b.output_tokens, b.gaps, b.requests, b.errors),
            (2, 2, 1, 0)
        );
        // The gap that crosses the boundary (40 → 110) is the loaded phase's.
        assert_eq!(b.itl_max_ms.map(f64::round), Some(70.0));
        assert_eq!(a.itl_max_ms.map(f64::round), Some(20.0));
        assert_eq!(a.error_samples, vec!["broke".to_owned()]);
        assert!((a.output_tok_s - 30.0).abs() < 1e-6, "3 tokens in 0.1 s");
    }
}
