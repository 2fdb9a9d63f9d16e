//! `metralectl bench gate --baseline FILE`: reruns a committed record's workload and fails when
//! any rung is slower than the baseline by more than the tolerance, when any request fails, or
//! when the coherence checks fail (greedy output deterministic across two runs, no special
//! tokens in the text).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use metrale_protocol::bench::Record;
use serde::Serialize;

use super::args::{Endpoint, GateArgs, MixedArgs, RunArgs};
use super::client::Server;
use super::{ladder, runtime, validate};
use crate::error::UserError;
use crate::printer::Printer;

/// Text that only a special token leaks into an answer.
const SPECIAL_MARKERS: &[&str] = &["<|", "|>", "</s>", "<s>"];

#[derive(Debug, Serialize)]
struct RungVerdict {
    concurrency: u32,
    baseline_tok_s: f64,
    tok_s: f64,
    /// Now over baseline.
    ratio: f64,
    errors: u32,
    pass: bool,
}

#[derive(Debug, Serialize)]
struct Coherence {
    deterministic: bool,
    leaked_special: Option<String>,
    pass: bool,
}

#[derive(Debug, Serialize)]
struct GateJson {
    pass: bool,
    tolerance: f64,
    rungs: Vec<RungVerdict>,
    coherence: Coherence,
}

pub fn gate(args: &GateArgs, printer: &Printer) -> anyhow::Result<ExitCode> {
    if !(0.0..1.0).contains(&args.tolerance) {
        bail!(
            "--tolerance {} must be a fraction in 0..1 (0.10 allows 10% slower)",
            args.tolerance
        );
    }
    let bytes = std::fs::read(&args.baseline)
        .with_context(|| format!("cannot read the baseline {}", args.baseline.display()))?;
    let base: Record = serde_json::from_slice(&bytes).with_context(|| {
        format!(
            "{} is not a benchmark record (see docs/benchmarks.md)",
            args.baseline.display()
        )
    })?;
    if base.mixed.is_some() {
        bail!(
            "{} is a mixed-load record (`bench --mixed`): gate reruns ladders only; give a ladder record as --baseline",
            args.baseline.display()
        );
    }
    let w = &base.workload;
    let endpoint = match w.endpoint.as_str() {
        "chat" => Endpoint::Chat,
        "completions" => Endpoint::Completions,
        other => bail!("the baseline's endpoint `{other}` is neither chat nor completions"),
    };
    let run = RunArgs {
        url: Some(args.url.clone().unwrap_or_else(|| w.url.clone())),
        model: Some(args.model.clone().unwrap_or_else(|| w.model.clone())),
        concurrency: w.concurrency.clone(),
        isl: w.isl,
        osl: w.osl,
        reps: w.reps,
        warmup: w.warmup,
        seed: w.seed,
        temperature: w.temperature,
        api_key: args.api_key.clone(),
        against: None,
        against_model: None,
        endpoint,
        request_timeout: 600,
        record: None,
        sign: None,
        json: args.json,
        response_format: None,
        mixed: MixedArgs::default(),
    };
    let url = validate(&run)?;
    let server = Server::new(
        url,
        run.api_key.clone(),
        Duration::from_secs(run.request_timeout),
    )?
    // A constrained baseline is rerun constrained.
    .with_response_format(w.response_format.clone());
    let (series, coherence) = runtime()?.block_on(async {
        same_model(&server, url, &w.model, args.model.as_deref()).await?;
        let series = ladder(vec![server.clone()], &run, printer).await?;
        let coherence = coherence(&server, &run).await?;
        anyhow::Ok((series, coherence))
    })?;
    let now = series
        .into_iter()
        .next()
        .context("the ladder measured nothing")?;
    let mut rungs = Vec::new();
    for b in &base.rungs {
        let Some(n) = now.rungs.iter().find(|n| n.concurrency == b.concurrency) else {
            continue;
        };
        let ratio = if b.output_tok_s.mean > 0.0 {
            n.output_tok_s.mean / b.output_tok_s.mean
        } else {
            f64::INFINITY
        };
        rungs.push(RungVerdict {
            concurrency: b.concurrency,
            baseline_tok_s: b.output_tok_s.mean,
            tok_s: n.output_tok_s.mean,
            ratio,
            errors: n.errors,
            pass: n.errors == 0 && ratio >= 1.0 - args.tolerance,
        });
    }
    let pass = coherence.pass && rungs.iter().all(|r| r.pass);
    let out = GateJson {
        pass,
        tolerance: args.tolerance,
        rungs,
        coherence,
    };
    if printer.json_mode() {
        printer.json(&out)?;
    } else {
        let rows: Vec<Vec<String>> = out
            .rungs
            .iter()
            .map(|r| {
                vec![
                    r.concurrency.to_string(),
                    format!("{:.1}", r.baseline_tok_s),
                    format!("{:.1}", r.tok_s),
                    format!("{:+.1}%", (r.ratio - 1.0) * 100.0),
                    r.errors.to_string(),
                    if r.pass { "ok" } else { "FAIL" }.to_owned(),
                ]
            })
            .collect();
        printer.table(
            &[
                "CONC",
                "BASELINE TOK/S",
                "TOK/S",
                "CHANGE",
                "ERRORS",
                "VERDICT",
            ],
            &rows,
        )?;
        printer.line(format!(
            "coherence: greedy output {}, {}",
            if out.coherence.deterministic {
                "deterministic"
            } else {
                "NOT deterministic"
            },
            match &out.coherence.leaked_special {
                Some(m) => format!("special token text `{m}` LEAKED"),
                None => "no special tokens in the text".to_owned(),
            }
        ))?;
    }
    if !pass {
        printer.warn(format!(
            "the gate failed against {} (tolerance {:.0}%)",
            args.baseline.display(),
            args.tolerance * 100.0
        ));
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// Two greedy runs of the same prompt must give the same text, without special tokens in it.
async fn coherence(server: &Server, run: &RunArgs) -> anyhow::Result<Coherence> {
    let model = run.model.as_deref().unwrap_or_default();
    let prompt = server
        .prompt(model, run.endpoint, run.isl, run.seed)
        .await?;
    let first = server
        .greedy_text(run.endpoint, model, &prompt, run.osl)
        .await?;
    let second = server
        .greedy_text(run.endpoint, model, &prompt, run.osl)
        .await?;
    let deterministic = first == second;
    let leaked_special = SPECIAL_MARKERS
        .iter()
        .find(|m| first.contains(**m) || second.contains(**m))
        .map(|m| (*m).to_owned());
    Ok(Coherence {
        deterministic,
        pass: deterministic && leaked_special.is_none(),
        leaked_special,
    })
}

/// Refuses a server that does not serve the model the baseline measured (it would answer the
/// prompts' `/tokenize` with a 404), saying which names differ.
async fn same_model(
    server: &Server,
    url: &str,
    baseline: &str,
    chosen: Option<&str>,
) -> anyhow::Result<()> {
    let models = server.models().await?;
    let served: Vec<&str> = models["data"]
        .as_array()
        .map(|d| d.iter().filter_map(|m| m["id"].as_str()).collect())
        .unwrap_or_default();
    let wanted = chosen.unwrap_or(baseline);
    if served.is_empty() || served.contains(&wanted) {
        return Ok(());
    }
    let served_list = served.join(", ");
    let (what, fix) = match chosen {
        Some(m) => (
            format!("--model {m} is not served at {url} (it serves {served_list})"),
            format!("pass one of the served names: --model {}", served[0]),
        ),
        None => (
            format!(
                "the model names differ: the baseline measured `{baseline}`, and {url} serves `{served_list}`"
            ),
            format!(
                "serve the model under the baseline's name (`met serve ... --model-name {baseline}`), or \
                 gate against the served one with --model {}",
                served[0]
            ),
        ),
    };
    Err(UserError::new(what, fix).into())
}
