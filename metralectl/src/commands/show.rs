//! `metralectl show NAME`: everything a recipe pins, and whether it fits this machine.

use std::process::ExitCode;

use serde::Serialize;

use super::list::{quantization_label, size_label};
use super::{JSON_VERSION, SourceJson, load_registry};
use crate::cli::ShowArgs;
use crate::gpu::{self, Probe};
use crate::printer::{Printer, Style};
use crate::recipe::capacity::{self, Estimate, Verdict, gib};
use crate::recipe::launch::{engine_env, image_reference};
use crate::recipe::resolve::{LocalCheckpoint, Location, locate};
use crate::recipe::schema::{FlagValue, Recipe};

const NOT_PINNED: &str = "not pinned";
const KEY_WIDTH: usize = 26;

#[derive(Debug, Serialize)]
struct ShowJson<'a> {
    version: u32,
    name: &'a str,
    source: SourceJson,
    recipe: &'a Recipe,
    /// The image `run` would start.
    image_reference: String,
    /// For a `path` checkpoint: the path as written, the directory found (or null) and where
    /// the launcher looked; null for a Hub checkpoint.
    local_checkpoint: Option<&'a LocalCheckpoint>,
    capacity: &'a Estimate,
    /// How many H200-class GPUs the estimate needs (`capacity::gpus_needed`); null when not
    /// even 64 would do.
    h200_class_gpus: Option<u32>,
    machine: &'a Probe,
    verdict: &'a Verdict,
}

pub fn show(args: &ShowArgs, printer: &Printer) -> anyhow::Result<ExitCode> {
    let registry = load_registry()?;
    let entry = registry.get(&args.name)?;
    let recipe = &entry.recipe;
    let version = env!("CARGO_PKG_VERSION");
    let estimate = capacity::estimate(recipe);
    let probe = gpu::probe();
    let verdict = capacity::check_fit(recipe, &estimate, &probe);
    let h200_gpus =
        capacity::gpus_needed(recipe, &estimate, capacity::H200_CLASS_GIB * capacity::GIB);
    let location = locate(entry);
    let found = match &location {
        Location::Local(local) => local.found.as_ref().map(|p| p.display().to_string()),
        Location::Hub { .. } => None,
    };

    if printer.json_mode() {
        printer.json(&ShowJson {
            version: JSON_VERSION,
            name: &recipe.name,
            source: SourceJson::of(entry),
            recipe,
            image_reference: image_reference(recipe, version),
            local_checkpoint: match &location {
                Location::Local(local) => Some(local),
                Location::Hub { .. } => None,
            },
            capacity: &estimate,
            h200_class_gpus: h200_gpus,
            machine: &probe,
            verdict: &verdict,
        })?;
        return Ok(ExitCode::SUCCESS);
    }

    let mut out = Sections::default();
    out.title(format!(
        "{}: {}",
        printer.paint(Style::Bold, &recipe.name),
        recipe.display_name
    ));
    if let Some(description) = &recipe.description {
        description.trim().lines().for_each(|line| out.text(line));
    }
    out.kv("source", entry.source_label());
    out.kv("vendor", &recipe.vendor);
    out.kv("family", &recipe.family);

    let ck = &recipe.checkpoint;
    out.section(printer, "checkpoint");
    match &location {
        Location::Hub { repo, revision } => {
            out.kv("repo", repo);
            out.kv(
                "revision",
                revision
                    .as_ref()
                    .map_or(NOT_PINNED.to_owned(), ToString::to_string),
            );
        }
        Location::Local(local) => {
            out.kv("path", &local.written);
            out.kv(
                "found",
                found
                    .clone()
                    .unwrap_or_else(|| "no: not on this machine".to_owned()),
            );
        }
    }
    out.kv("quantization", quantization_label(ck));
    out.kv("size", size_label(ck));
    out.kv(
        "weights",
        ck.weights_gib
            .map_or(format!("{NOT_PINNED} (estimated below)"), |g| {
                format!("{g} GiB")
            }),
    );

    out.section(printer, "image");
    out.kv("repository", &recipe.image.repository);
    out.kv(
        "tag",
        recipe
            .image
            .tag
            .clone()
            .unwrap_or_else(|| format!("{version} (the launcher's version)")),
    );
    out.kv(
        "digest",
        recipe
            .image
            .digest
            .as_ref()
            .map_or(NOT_PINNED.to_owned(), ToString::to_string),
    );

    serve_section(&mut out, printer, recipe);
    requirements_section(&mut out, printer, recipe);
    model_section(&mut out, printer, recipe);
    capacity_section(&mut out, printer, recipe, &estimate, &probe);

    for line in out.lines {
        printer.line(line)?;
    }
    let style = match verdict.fits {
        Some(true) => Style::Green,
        Some(false) => Style::Red,
        None => Style::Yellow,
    };
    printer.line(printer.paint(style, &verdict.message))?;
    if let Location::Local(local) = &location
        && local.found.is_none()
    {
        printer.warn(local.missing_note());
    }
    Ok(ExitCode::SUCCESS)
}

/// The text of `show`, built line by line.
#[derive(Default)]
struct Sections {
    lines: Vec<String>,
}

impl Sections {
    fn title(&mut self, text: String) {
        self.lines.push(text);
    }

    fn text(&mut self, text: &str) {
        self.lines.push(format!("  {text}"));
    }

    fn section(&mut self, printer: &Printer, name: &str) {
        self.lines.push(String::new());
        self.lines.push(printer.paint(Style::Bold, name));
    }

    fn kv(&mut self, key: &str, value: impl std::fmt::Display) {
        self.lines.push(format!("  {key:<KEY_WIDTH$}{value}"));
    }
}

fn on_off(on: bool) -> &'static str {
    if on { "on" } else { "off" }
}

fn or_default<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "engine default".to_owned(), |v| v.to_string())
}

fn serve_section(out: &mut Sections, printer: &Printer, recipe: &Recipe) {
    let s = &recipe.serve;
    out.section(printer, "serve");
    out.kv("device", s.device.flag_value());
    out.kv("port", s.port);
    out.kv("max sequence length", s.max_seq_len);
    out.kv("max batch size", s.max_batch_size);
    out.kv("max batched tokens", or_default(s.max_num_batched_tokens));
    out.kv(
        "gpu memory utilization",
        or_default(s.gpu_memory_utilization),
    );
    out.kv("kv cache dtype", s.kv_cache_dtype.flag_value());
    out.kv("prefix caching", on_off(s.prefix_caching));
    out.kv("thinking", on_off(s.thinking));
    out.kv(
        "tool-call parser",
        s.tool_call_parser.map_or("none", |p| p.flag_value()),
    );
    out.kv(
        "speculative decoding",
        s.speculative.as_ref().map_or("off".to_owned(), |sp| {
            format!("{}, {} drafts", sp.method.flag_value(), sp.num_drafts)
        }),
    );
    out.kv("ssm cache slots", or_default(s.ssm_cache_slots));
    out.kv(
        "ssm checkpoint interval",
        or_default(s.ssm_checkpoint_interval),
    );
    out.kv(
        "load format",
        or_default(s.load_format.map(|f| f.flag_value())),
    );
    out.kv(
        "extra args",
        if s.extra_args.is_empty() {
            "none".to_owned()
        } else {
            s.extra_args.join(" ")
        },
    );
    let env = engine_env(recipe);
    if env.is_empty() {
        out.kv("env", "none");
    }
    for (k, v) in env {
        out.kv("env", format!("{k}={v}"));
    }
}

fn requirements_section(out: &mut Sections, printer: &Printer, recipe: &Recipe) {
    let r = &recipe.requirements;
    out.section(printer, "requirements");
    out.kv("gpus", r.gpus);
    out.kv(
        "gpu memory",
        r.gpu_memory_gib
            .map_or("-".to_owned(), |g| format!("{g} GiB a GPU")),
    );
    out.kv(
        "compute capability",
        r.compute_capability
            .map_or("-".to_owned(), |c| format!("{c} or newer")),
    );
    out.kv(
        "expert-parallel nodes",
        r.expert_parallel_nodes
            .map_or("-".to_owned(), |n| n.to_string()),
    );
}

fn model_section(out: &mut Sections, printer: &Printer, recipe: &Recipe) {
    out.section(printer, "model");
    let Some(m) = &recipe.model else {
        out.text("not pinned (the recipe has no [model] section)");
        return;
    };
    out.kv(
        "architecture",
        m.architecture.as_deref().unwrap_or(NOT_PINNED),
    );
    let layers = match (m.full_attention_layers, &m.mamba2) {
        (Some(full), Some(mamba)) => format!(
            "{} ({full} attention, {} Mamba-2, {} MLP)",
            m.layers,
            mamba.layers,
            m.layers.saturating_sub(full + mamba.layers)
        ),
        (Some(full), None) if full < m.layers => format!(
            "{} ({full} full attention, {} linear attention)",
            m.layers,
            m.layers - full
        ),
        _ => m.layers.to_string(),
    };
    out.kv("layers", layers);
    out.kv(
        "kv heads x head dim",
        format!("{} x {}", m.kv_heads, m.head_dim),
    );
    out.kv("hidden size", or_not_pinned(m.hidden_size));
    out.kv("vocabulary", or_not_pinned(m.vocab_size));
    if let Some(experts) = m.experts {
        out.kv(
            "experts",
            format!(
                "{experts} x {} intermediate",
                or_not_pinned(m.expert_intermediate_size)
            ),
        );
    }
    if let Some(w) = m.sliding_window {
        let layers = m.sliding_layers.unwrap_or(m.layers);
        out.kv(
            "sliding window",
            format!("{w} tokens, {layers} layers (the KV cache keeps only the window)"),
        );
    }
    if let Some(mamba) = &m.mamba2 {
        out.kv(
            "mamba-2",
            format!(
                "{} heads x {}, state {}, {} groups, conv kernel {}",
                mamba.heads, mamba.head_dim, mamba.state_size, mamba.groups, mamba.conv_kernel
            ),
        );
    }
    if let Some(latent) = &m.latent_attention {
        out.kv(
            "latent attention",
            format!(
                "{} latent + {} rope values a token a layer",
                latent.kv_lora_rank, latent.rope_head_dim
            ),
        );
    }
    if let Some(la) = &m.linear_attention {
        out.kv(
            "linear attention",
            format!(
                "{} key heads x {}, {} value heads x {}, conv kernel {}",
                la.key_heads, la.key_head_dim, la.value_heads, la.value_head_dim, la.conv_kernel
            ),
        );
    }
}

fn or_not_pinned(value: Option<u32>) -> String {
    value.map_or(NOT_PINNED.to_owned(), |v| v.to_string())
}

fn capacity_section(
    out: &mut Sections,
    printer: &Printer,
    recipe: &Recipe,
    estimate: &Estimate,
    probe: &Probe,
) {
    out.section(printer, "capacity estimate");
    for (name, part) in estimate.parts() {
        let size = part.bytes.map_or("?".to_owned(), gib);
        out.kv(name, format!("{size:>10}  {}", part.basis));
    }
    let total = gib(estimate.total_bytes);
    if estimate.complete {
        out.kv("total", format!("{total:>10}"));
    } else {
        out.kv(
            "total",
            format!("{total:>10}  at least: parts marked ? are left out"),
        );
    }
    let h200 = capacity::gpus_needed(recipe, estimate, capacity::H200_CLASS_GIB * capacity::GIB);
    out.kv(
        "h200-class gpus",
        h200.map_or("more than 64".to_owned(), |n| {
            format!(
                "{}{n} ({} GiB each, {:.0}% used, weights and caches split evenly)",
                if estimate.complete { "" } else { "at least " },
                capacity::H200_CLASS_GIB,
                100.0 * capacity::utilization(recipe)
            )
        }),
    );
    if probe.gpus.is_empty() {
        out.kv(
            "this machine",
            probe.note.as_deref().unwrap_or("no NVIDIA GPU found"),
        );
    }
    for g in &probe.gpus {
        let size = |b: Option<u64>| b.map_or("size unknown".to_owned(), gib);
        out.kv(
            &format!("gpu {}", g.index),
            format!(
                "{}, {} ({} free), compute capability {}",
                g.name,
                size(g.memory_total_bytes),
                size(g.memory_free_bytes),
                g.compute_capability
            ),
        );
    }
    out.lines.push(String::new());
}
