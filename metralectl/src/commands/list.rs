//! `metralectl list`: a table of the recipes.

use std::process::ExitCode;

use serde::Serialize;

use super::{JSON_VERSION, SourceJson, load_registry};
use crate::cli::ListArgs;
use crate::dirs;
use crate::gpu::{self, Probe};
use crate::printer::Printer;
use crate::recipe::capacity::{Estimate, check_fit, estimate, gib};
use crate::recipe::schema::{Checkpoint, Device, FlagValue, Requantize};
use crate::recipe::support;
use crate::recipe::{Entry, Source};

#[derive(Debug, Serialize)]
struct ListJson<'a> {
    version: u32,
    recipes: Vec<RowJson<'a>>,
}

#[derive(Debug, Serialize)]
struct RowJson<'a> {
    name: &'a str,
    display_name: &'a str,
    vendor: &'a str,
    family: &'a str,
    /// The Hub repository, or the local path.
    checkpoint: &'a str,
    /// The checkpoint's weight format.
    quantization: &'static str,
    /// Parts the engine re-quantizes at load, as the recipe's `[checkpoint.requantize]`.
    requantize: Option<&'a Requantize>,
    parameters: Option<&'a str>,
    active_parameters: Option<&'a str>,
    device: &'static str,
    gpus: u32,
    /// The capacity estimate's total (a lower bound when `memory_estimate_complete` is false).
    memory_needed_bytes: u64,
    memory_estimate_complete: bool,
    /// Whether this machine's devices fit it (`null`: the estimate cannot tell); false
    /// wherever `engine_refusal` is set.
    runs_here: Option<bool>,
    /// Why the engine does not serve the recipe on any machine yet (`recipe::support`), or
    /// null.
    engine_refusal: Option<String>,
    source: SourceJson,
}

pub fn list(args: &ListArgs, printer: &Printer) -> anyhow::Result<ExitCode> {
    let registry = load_registry()?;
    let matches = |wanted: &Option<String>, value: &str| {
        wanted
            .as_ref()
            .is_none_or(|w| w.eq_ignore_ascii_case(value))
    };
    let entries: Vec<&Entry> = registry
        .entries()
        .iter()
        .filter(|e| {
            matches(&args.vendor, &e.recipe.vendor) && matches(&args.family, &e.recipe.family)
        })
        .collect();

    if args.names {
        for e in &entries {
            printer.line(&e.recipe.name)?;
        }
        return Ok(ExitCode::SUCCESS);
    }

    if entries.is_empty() {
        let known = |f: fn(&Entry) -> &str| {
            let mut v: Vec<&str> = registry.entries().iter().map(f).collect();
            v.sort_unstable();
            v.dedup();
            v.join(", ")
        };
        printer.note(format!(
            "no recipe matches the filters; vendors: {}; families: {}",
            known(|e| &e.recipe.vendor),
            known(|e| &e.recipe.family)
        ));
    }

    let probe = gpu::probe();
    if printer.json_mode() {
        let recipes = entries.iter().map(|e| row_json(e, &probe)).collect();
        printer.json(&ListJson {
            version: JSON_VERSION,
            recipes,
        })?;
        return Ok(ExitCode::SUCCESS);
    }

    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            let r = &e.recipe;
            let est = estimate(r);
            vec![
                r.name.clone(),
                checkpoint_label(&r.checkpoint).to_owned(),
                quantization_label(&r.checkpoint),
                size_label(&r.checkpoint),
                if r.serve.device == Device::Cpu {
                    "cpu".to_owned()
                } else {
                    r.requirements.gpus.to_string()
                },
                memory_label(&est),
                match support::refusal(r) {
                    Some(_) => NOT_YET.to_owned(),
                    None => here_label(check_fit(r, &est, &probe).fits).to_owned(),
                },
                e.source_label(),
            ]
        })
        .collect();
    // The names stay whole (they are typed back); the checkpoint and quantization give way,
    // and SOURCE is left out when every recipe is built in.
    let mut header = vec![
        "NAME",
        "CHECKPOINT",
        "QUANT",
        "SIZE",
        "GPUS",
        "MEMORY",
        "HERE",
        "SOURCE",
    ];
    let mut rows = rows;
    if entries.iter().all(|e| matches!(e.source, Source::BuiltIn)) {
        header.pop();
        for row in &mut rows {
            row.pop();
        }
    }
    printer.table_fit(&header, &rows, &[1, 2])?;
    if rows.iter().any(|r| r[6] == "no") {
        printer.note(format!(
            "HERE no: this machine lacks the GPU, memory or compute capability ({}); `metralectl show NAME` says what it needs",
            probe
                .gpus
                .first()
                .map_or("no NVIDIA GPU found", |g| g.name.as_str())
        ));
    }
    if rows.iter().any(|r| r[6] == NOT_YET) {
        printer.note(
            "HERE not yet: met does not serve this model on its device or GPU count yet, on any \
             machine; `metralectl show NAME` says what is missing",
        );
    }
    if let Some(dir) = dirs::user_recipes_dir() {
        printer.note(format!(
            "your recipes are read from {} and replace built-in ones of the same name",
            dir.display()
        ));
    }
    Ok(ExitCode::SUCCESS)
}

fn row_json<'a>(e: &'a Entry, probe: &Probe) -> RowJson<'a> {
    let r = &e.recipe;
    let est = estimate(r);
    let runs_here = check_fit(r, &est, probe).fits;
    RowJson {
        name: &r.name,
        display_name: &r.display_name,
        vendor: &r.vendor,
        family: &r.family,
        checkpoint: checkpoint_label(&r.checkpoint),
        quantization: r.checkpoint.quantization.flag_value(),
        requantize: r.checkpoint.requantize.as_ref(),
        parameters: r.checkpoint.parameters.as_ref().map(|p| p.as_str()),
        active_parameters: r.checkpoint.active_parameters.as_ref().map(|p| p.as_str()),
        device: r.serve.device.flag_value(),
        gpus: r.requirements.gpus,
        memory_needed_bytes: est.total_bytes,
        memory_estimate_complete: est.complete,
        runs_here,
        engine_refusal: support::refusal(r),
        source: SourceJson::of(e),
    }
}

pub fn checkpoint_label(ck: &Checkpoint) -> &str {
    ck.repo.as_deref().or(ck.path.as_deref()).unwrap_or("")
}

/// `fp8`, or `fp8 +lm_head nvfp4 +experts nvfp4 (gate,up)` when parts are re-quantized.
pub fn quantization_label(ck: &Checkpoint) -> String {
    let mut label = ck.quantization.flag_value().to_owned();
    if let Some(rq) = &ck.requantize {
        if let Some(q) = rq.lm_head {
            label.push_str(&format!(" +lm_head {}", q.flag_value()));
        }
        if let Some(q) = rq.experts {
            label.push_str(&format!(" +experts {}", q.flag_value()));
            if let Some(p) = &rq.expert_projections {
                let names: Vec<&str> = p.iter().map(|p| p.flag_value()).collect();
                label.push_str(&format!(" ({})", names.join(",")));
            }
        }
    }
    label
}

/// `27B`, `35B-A3B` for a mixture of experts, `-` when unknown.
pub fn size_label(ck: &Checkpoint) -> String {
    match (&ck.parameters, &ck.active_parameters) {
        (Some(total), Some(active)) => format!("{}-A{}", total.as_str(), active.as_str()),
        (Some(total), None) => total.as_str().to_owned(),
        (None, _) => "-".to_owned(),
    }
}

/// The HERE column of a recipe the engine does not serve yet, anywhere.
const NOT_YET: &str = "not yet";

/// The HERE column: whether this machine fits the recipe.
fn here_label(fits: Option<bool>) -> &'static str {
    match fits {
        Some(true) => "yes",
        Some(false) => "no",
        None => "maybe",
    }
}

fn memory_label(est: &Estimate) -> String {
    match (est.complete, est.total_bytes) {
        (true, total) => gib(total),
        (false, 0) => "unknown".to_owned(),
        (false, total) => format!(">= {}", gib(total)),
    }
}
