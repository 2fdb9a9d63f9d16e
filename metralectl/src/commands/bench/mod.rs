//! `metralectl bench`: drives an OpenAI-compatible server over a concurrency ladder, measures
//! every request from its stream, prints a table and writes (and signs) a record.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use indicatif::{ProgressBar, ProgressStyle};
use metrale_protocol::bench::{Against, RECORD_VERSION, Record, Rep, Rung, Workload};

use super::runtime;
use crate::printer::Printer;
use crate::signing;

mod args;
mod client;
mod gate;
mod mixed;
mod record;
mod report;
mod stats;

pub use args::BenchArgs;
use args::{BenchCommand, RunArgs};
use client::{Outcome, Server};

/// Error messages kept a rung, to say what went wrong without flooding the record.
const ERROR_SAMPLES: usize = 3;

pub fn bench(args: &BenchArgs, printer: &Printer) -> anyhow::Result<ExitCode> {
    match &args.command {
        Some(BenchCommand::Keygen(k)) => {
            let id = signing::keygen(&k.keyfile)?;
            printer.line(format!(
                "wrote {} (secret, keep it) and {} (public, publish it), key {id}",
                k.keyfile.display(),
                signing::pub_path(&k.keyfile).display()
            ))?;
            Ok(ExitCode::SUCCESS)
        }
        Some(BenchCommand::Gate(g)) => gate::gate(g, printer),
        Some(BenchCommand::Report(r)) => report::report(r, printer),
        None => run(&args.run, printer),
    }
}

/// The flags, checked once.
pub(super) fn validate(args: &RunArgs) -> anyhow::Result<&str> {
    let Some(url) = args.url.as_deref() else {
        bail!(
            "--url is required: the server to measure, e.g. `metralectl bench --url http://127.0.0.1:8000`"
        );
    };
    if args.concurrency.is_empty() || args.concurrency.contains(&0) {
        bail!("--concurrency needs rungs of at least 1 request, e.g. --concurrency 1,2,4");
    }
    if args.isl == 0 || args.osl == 0 {
        bail!("--isl and --osl must be at least 1 token");
    }
    if args.reps == 0 {
        bail!("--reps must be at least 1: the figures come from the timed reps");
    }
    if !(0.0..=2.0).contains(&args.temperature) {
        bail!("--temperature {} is outside 0..=2", args.temperature);
    }
    Ok(url)
}

/// `--response-format` as the request field: `json_object`, or a JSON schema read from a file.
pub(super) fn response_format(arg: Option<&str>) -> anyhow::Result<Option<serde_json::Value>> {
    let Some(arg) = arg else { return Ok(None) };
    if arg == "json_object" {
        return Ok(Some(serde_json::json!({"type": "json_object"})));
    }
    let text = std::fs::read_to_string(arg).with_context(|| {
        format!("--response-format {arg}: not `json_object` and not a readable schema file")
    })?;
    let schema: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("--response-format {arg}: the file is not JSON"))?;
    if !schema.is_object() {
        bail!("--response-format {arg}: a JSON schema is an object, this file holds {schema}");
    }
    Ok(Some(serde_json::json!({
        "type": "json_schema",
        "json_schema": {"name": "bench", "schema": schema},
    })))
}

/// The model to send: the one asked for, else the first `GET /v1/models` lists.
pub(super) fn model_of(
    server: &Server,
    models: &serde_json::Value,
    asked: Option<&str>,
) -> anyhow::Result<String> {
    match asked {
        Some(m) => Ok(m.to_owned()),
        None => models["data"][0]["id"]
            .as_str()
            .map(str::to_owned)
            .with_context(|| {
                format!(
                    "{}/v1/models lists no model: pass --model (or --against-model)",
                    server.base()
                )
            }),
    }
}

/// With `--record`: writes the record atomically, and signs it with `--sign`'s key.
pub(super) fn save(
    rec: &Record,
    args: &RunArgs,
    key: Option<&minisign::SecretKey>,
    printer: &Printer,
) -> anyhow::Result<()> {
    if let Some(path) = &args.record {
        let mut bytes = serde_json::to_vec_pretty(rec).context("failed to encode the record")?;
        bytes.push(b'\n');
        record::write_atomic(path, &bytes)?;
        printer.note(format!("wrote the record {}", path.display()));
        if let Some(key) = key {
            let sig = signing::sign(path, &bytes, key, None)?;
            printer.note(format!("signed it: {}", sig.display()));
        }
    }
    Ok(())
}

fn run(args: &RunArgs, printer: &Printer) -> anyhow::Result<ExitCode> {
    if args.mixed.mixed {
        return mixed::run(args, printer);
    }
    let url = validate(args)?;
    let format = response_format(args.response_format.as_deref())?;
    // Load the key first: a bad key should fail before minutes of measuring, not after.
    let key = args.sign.as_deref().map(signing::load_secret).transpose()?;
    let harness = record::harness()?;
    let timeout = Duration::from_secs(args.request_timeout);
    let mut targets =
        vec![Server::new(url, args.api_key.clone(), timeout)?.with_response_format(format.clone())];
    if let Some(b) = &args.against {
        targets.push(Server::new(b, args.api_key.clone(), timeout)?);
    }
    let mut series = runtime()?.block_on(ladder(targets, args, printer))?;
    let b = (series.len() > 1).then(|| series.remove(1));
    let a = series.remove(0);
    let against = b.map(|b| Against {
        ratio: a
            .rungs
            .iter()
            .zip(&b.rungs)
            .map(|(ra, rb)| {
                if rb.output_tok_s.mean > 0.0 {
                    ra.output_tok_s.mean / rb.output_tok_s.mean
                } else {
                    0.0
                }
            })
            .collect(),
        url: b.url,
        model: b.model,
        server: b.server,
        rungs: b.rungs,
    });
    let rec = Record {
        version: RECORD_VERSION,
        date: record::now_rfc3339(),
        harness,
        workload: Workload {
            url: a.url,
            model: a.model,
            endpoint: args.endpoint.as_str().to_owned(),
            isl: args.isl,
            osl: args.osl,
            concurrency: args.concurrency.clone(),
            reps: args.reps,
            warmup: args.warmup,
            seed: args.seed,
            temperature: args.temperature,
            response_format: format,
        },
        server: a.server,
        machine: record::machine(),
        rungs: a.rungs,
        against,
        mixed: None,
    };
    save(&rec, args, key.as_ref(), printer)?;
    if printer.json_mode() {
        printer.json(&rec)?;
    } else {
        print_tables(&rec, printer)?;
    }
    let all = rec
        .rungs
        .iter()
        .chain(rec.against.iter().flat_map(|b| &b.rungs));
    let errors: u32 = all.clone().map(|r| r.errors).sum();
    if errors > 0 {
        let sample = all.flat_map(|r| r.error_samples.first()).next();
        printer.warn(format!(
            "{errors} requests failed; their tokens are not counted (first: {})",
            sample.map_or("-", String::as_str)
        ));
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// One server's side of the run.
pub(super) struct Series {
    pub url: String,
    pub model: String,
    /// `{"models": …, "version": …}` as the server described itself.
    pub server: serde_json::Value,
    pub rungs: Vec<Rung>,
}

/// Runs the ladder on every target (one, or A and B), rep by rep in turn so a drifting machine
/// affects them all alike.
pub(super) async fn ladder(
    targets: Vec<Server>,
    args: &RunArgs,
    printer: &Printer,
) -> anyhow::Result<Vec<Series>> {
    let mut sides = Vec::new();
    for (i, server) in targets.into_iter().enumerate() {
        let (models, described) = server.describe().await?;
        let asked = if i == 0 {
            &args.model
        } else {
            &args.against_model
        };
        let model = model_of(&server, &models, asked.as_deref())?;
        sides.push((Arc::new(server), Arc::<str>::from(model), described));
    }
    let per_rep: u64 = args
        .concurrency
        .iter()
        .map(|c| u64::from(*c) * u64::from(args.reps + args.warmup))
        .sum();
    let bar = if printer.live_progress() {
        ProgressBar::new(per_rep * sides.len() as u64)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len} requests, {elapsed}")
            .context("bad progress template")?
            .progress_chars("=> "),
    );
    let mut rungs: Vec<Vec<Rung>> = sides.iter().map(|_| Vec::new()).collect();
    let mut counter = 0u64;
    for &c in &args.concurrency {
        bar.set_message(format!("concurrency {c}"));
        let mut reps: Vec<Vec<Rep>> = sides.iter().map(|_| Vec::new()).collect();
        let mut samples: Vec<Vec<String>> = sides.iter().map(|_| Vec::new()).collect();
        for rep in 0..args.warmup + args.reps {
            let first = counter;
            for (side, (server, model, _)) in sides.iter().enumerate() {
                // The same seeds on every side: the same words, cut to ISL by each server's
                // own tokenizer; distinct for every request, built before the clock starts.
                counter = first;
                let mut prompts = Vec::new();
                for _ in 0..c {
                    counter += 1;
                    let seed = args.seed.wrapping_mul(1_000_003).wrapping_add(counter);
                    let prompt = server.prompt(model, args.endpoint, args.isl, seed).await?;
                    prompts.push((prompt, seed));
                }
                let start = Instant::now();
                let tasks: Vec<_> = prompts
                    .into_iter()
                    .map(|(prompt, seed)| {
                        let (server, model, bar) = (server.clone(), model.clone(), bar.clone());
                        let (endpoint, isl, osl, temp) =
                            (args.endpoint, args.isl, args.osl, args.temperature);
                        tokio::spawn(async move {
                            let out = server
                                .run(endpoint, &model, &prompt, isl, osl, temp, seed)
                                .await;
                            bar.inc(1);
                            out
                        })
                    })
                    .collect();
                let mut outcomes = Vec::new();
                for task in tasks {
                    outcomes.push(
                        task.await
                            .unwrap_or_else(|e| Outcome::Err(format!("request task failed: {e}"))),
                    );
                }
                let wall = start.elapsed();
                if rep >= args.warmup {
                    reps[side].push(rep_of(&outcomes, wall, &mut samples[side]));
                }
            }
        }
        for (side, (reps, samples)) in reps.into_iter().zip(samples).enumerate() {
            rungs[side].push(rung_of(c, args.osl, reps, samples));
        }
    }
    bar.finish_and_clear();
    Ok(sides
        .into_iter()
        .zip(rungs)
        .map(|((server, model, described), rungs)| Series {
            url: server.base().to_owned(),
            model: model.to_string(),
            server: described,
            rungs,
        })
        .collect())
}

fn rep_of(outcomes: &[Outcome], wall: Duration, samples: &mut Vec<String>) -> Rep {
    let mut rep = Rep {
        wall_s: wall.as_secs_f64(),
        output_tokens: 0,
        errors: 0,
        output_tok_s: 0.0,
        ttft_ms: Vec::new(),
        latency_ms: Vec::new(),
    };
    for outcome in outcomes {
        match outcome {
            Outcome::Ok {
                ttft,
                latency,
                output_tokens,
            } => {
                rep.output_tokens += output_tokens;
                rep.ttft_ms.push(ttft.as_secs_f64() * 1e3);
                rep.latency_ms.push(latency.as_secs_f64() * 1e3);
            }
            Outcome::Err(msg) => {
                rep.errors += 1;
                if samples.len() < ERROR_SAMPLES {
                    samples.push(msg.clone());
                }
            }
        }
    }
    rep.output_tok_s = if rep.wall_s > 0.0 {
        rep.output_tokens as f64 / rep.wall_s
    } else {
        0.0
    };
    rep
}

fn rung_of(concurrency: u32, osl: u32, reps: Vec<Rep>, error_samples: Vec<String>) -> Rung {
    let tok_s: Vec<f64> = reps.iter().map(|r| r.output_tok_s).collect();
    let ttfts: Vec<f64> = reps
        .iter()
        .flat_map(|r| r.ttft_ms.iter().copied())
        .collect();
    let zero = metrale_protocol::bench::Percentiles {
        p50: 0.0,
        p90: 0.0,
        p99: 0.0,
    };
    Rung {
        concurrency,
        requests: concurrency * reps.len() as u32,
        errors: reps.iter().map(|r| r.errors).sum(),
        output_tok_s: stats::summary(&tok_s).unwrap_or(metrale_protocol::bench::Summary {
            mean: 0.0,
            median: 0.0,
            min: 0.0,
            max: 0.0,
            stddev: 0.0,
        }),
        ttft_ms: stats::percentiles(&ttfts).unwrap_or(zero),
        itl_ms: stats::percentiles(&stats::itls(&reps, osl)),
        reps,
        error_samples,
    }
}

fn print_tables(rec: &Record, printer: &Printer) -> anyhow::Result<()> {
    let w = &rec.workload;
    printer.line(format!(
        "{} {} on {} ({}): ISL {} OSL {}, {} timed reps after {} warmup",
        w.endpoint, w.model, w.url, rec.machine.kind, w.isl, w.osl, w.reps, w.warmup
    ))?;
    print_rungs(&rec.rungs, printer)?;
    if let Some(b) = &rec.against {
        printer.line("")?;
        printer.line(format!("against {} on {}:", b.model, b.url))?;
        print_rungs(&b.rungs, printer)?;
        printer.line("")?;
        let rows: Vec<Vec<String>> = rec
            .rungs
            .iter()
            .zip(&b.rungs)
            .zip(&b.ratio)
            .map(|((ra, rb), ratio)| {
                vec![
                    ra.concurrency.to_string(),
                    format!("{:.1}", ra.output_tok_s.mean),
                    format!("{:.1}", rb.output_tok_s.mean),
                    format!("{ratio:.3}"),
                ]
            })
            .collect();
        printer.table(&["CONC", "A TOK/S", "B TOK/S", "A/B"], &rows)?;
    }
    Ok(())
}

fn print_rungs(rungs: &[Rung], printer: &Printer) -> anyhow::Result<()> {
    let p = |x: &metrale_protocol::bench::Percentiles| {
        format!("{:.1}/{:.1}/{:.1}", x.p50, x.p90, x.p99)
    };
    let rows: Vec<Vec<String>> = rungs
        .iter()
        .map(|r| {
            vec![
                r.concurrency.to_string(),
                r.requests.to_string(),
                r.errors.to_string(),
                format!("{:.1}", r.output_tok_s.mean),
                format!("{:.1}", r.output_tok_s.median),
                format!("{:.1}", r.output_tok_s.stddev),
                p(&r.ttft_ms),
                r.itl_ms.as_ref().map_or_else(|| "-".into(), p),
            ]
        })
        .collect();
    printer.table(
        &[
            "CONC",
            "REQS",
            "ERRORS",
            "TOK/S",
            "MEDIAN",
            "STDDEV",
            "TTFT MS p50/90/99",
            "ITL MS p50/90/99",
        ],
        &rows,
    )?;
    Ok(())
}
