//! `metralectl list`: a table of the recipes.

use std::process::ExitCode;

use serde::Serialize;

use super::{JSON_VERSION, SourceJson, load_registry};
use crate::cli::ListArgs;
use crate::dirs;
use crate::printer::Printer;
use crate::recipe::Entry;
use crate::recipe::capacity::{Estimate, estimate, gib};
use crate::recipe::schema::{Checkpoint, Device, FlagValue, Requantize};

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

    if printer.json_mode() {
        let recipes = entries.iter().map(|e| row_json(e)).collect();
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
                e.source_label(),
            ]
        })
        .collect();
    printer.table(
        &[
            "NAME",
            "CHECKPOINT",
            "QUANT",
            "SIZE",
            "GPUS",
            "MEMORY",
            "SOURCE",
        ],
        &rows,
    )?;
    if let Some(dir) = dirs::user_recipes_dir() {
        printer.note(format!(
            "your recipes are read from {} and replace built-in ones of the same name",
            dir.display()
        ));
    }
    Ok(ExitCode::SUCCESS)
}

fn row_json(e: &Entry) -> RowJson<'_> {
    let r = &e.recipe;
    let est = estimate(r);
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

fn memory_label(est: &Estimate) -> String {
    match (est.complete, est.total_bytes) {
        (true, total) => gib(total),
        (false, 0) => "unknown".to_owned(),
        (false, total) => format!(">= {}", gib(total)),
    }
}
