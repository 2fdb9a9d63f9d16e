//! Before anything is downloaded or started: does the engine serve what the recipe names on
//! its device, and does this machine have that device, with the memory and compute capability
//! it asks for? `show` says the same at length.

use crate::error::UserError;
use crate::gpu;
use crate::recipe::Entry;
use crate::recipe::capacity::{self, gib};
use crate::recipe::resolve::{Location, locate};
use crate::recipe::schema::Device;
use crate::recipe::support;

/// Refuses a recipe this machine cannot run, saying what it lacks and what would make it run.
/// A CPU recipe always passes; a fit the estimate cannot decide passes too.
pub(in crate::commands) fn check_device(entry: &Entry) -> anyhow::Result<()> {
    let recipe = &entry.recipe;
    if let Some(why) = support::refusal(recipe) {
        return Err(UserError::new(
            format!("{} cannot run: {why}", recipe.name),
            format!(
                "nothing was downloaded; `metralectl list` shows the recipes met serves, and \
                 --skip-checks starts {} anyway (with an --image whose met serves it)",
                recipe.name
            ),
        )
        .into());
    }
    if recipe.serve.device == Device::Cpu {
        return Ok(());
    }
    let probe = gpu::probe();
    let estimate = capacity::estimate(recipe);
    let verdict = capacity::check_fit(recipe, &estimate, &probe);
    if verdict.fits != Some(false) {
        return Ok(());
    }
    let r = &recipe.requirements;
    let mut needs = vec![format!(
        "{} NVIDIA GPU{}",
        r.gpus.max(1),
        if r.gpus > 1 { "s" } else { "" }
    )];
    if let Some(cc) = &r.compute_capability {
        needs.push(format!("compute capability {cc} or newer"));
    }
    needs.push(format!("{} of free GPU memory", gib(estimate.total_bytes)));
    Err(UserError::new(
        format!(
            "{} cannot run on this machine: {}",
            recipe.name, verdict.message
        ),
        format!(
            "nothing was downloaded; it runs on a machine with {}; `metralectl show {}` has the estimate, `metralectl list` marks \
             the recipes this machine can run (the demo runs on any CPU), and --skip-checks starts it anyway",
            needs.join(", "),
            recipe.name
        ),
    )
    .into())
}

/// Refuses a recipe whose local checkpoint directory is not on this machine: `met` would take the
/// relative path for a Hub repository id and fail with a misleading Hub error.
pub(super) fn check_checkpoint(entry: &Entry) -> anyhow::Result<()> {
    let Location::Local(local) = locate(entry) else {
        return Ok(());
    };
    if local.found.is_some() {
        return Ok(());
    }
    let searched: Vec<String> = local
        .searched
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    Err(UserError::new(
        format!(
            "the checkpoint directory {} of {} is not on this machine (looked in: {})",
            local.written,
            entry.recipe.name,
            if searched.is_empty() {
                "nowhere: the recipe names no path".to_owned()
            } else {
                searched.join(", ")
            }
        ),
        "give the recipe an absolute `checkpoint.path`, or run from the directory that holds it",
    )
    .into())
}
