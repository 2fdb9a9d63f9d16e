//! The Hugging Face token and cache directory.

use std::env;

use super::{Check, Status};
use crate::dirs;

pub fn check() -> Check {
    let cache = dirs::hf_hub_cache_dir();
    let token = env::var("HF_TOKEN").ok().filter(|t| !t.is_empty());
    let offline = env::var("HF_HUB_OFFLINE")
        .ok()
        .is_some_and(|v| matches!(v.as_str(), "1" | "true" | "TRUE" | "yes"));
    let mut found = vec![format!("hub cache {}", cache.display())];
    if offline {
        found.push("HF_HUB_OFFLINE is set: only checkpoints already cached can start".into());
    }
    let writable = cache.ancestors().find(|p| p.exists()).is_some_and(|p| {
        !p.metadata()
            .map(|m| m.permissions().readonly())
            .unwrap_or(true)
    });
    if !writable {
        return Check::problem(
            "huggingface",
            Status::Error,
            "the Hugging Face cache is not writable",
            found,
            "point HF_HOME (or HF_HUB_CACHE) at a directory you can write",
        );
    }
    match token {
        Some(t) => {
            found.push(format!("HF_TOKEN is set ({} characters)", t.len()));
            Check::ok("huggingface", "Hugging Face token and cache", found)
        }
        None => {
            found.push(
                "HF_TOKEN is not set: public checkpoints download, gated ones are refused".into(),
            );
            Check::problem(
                "huggingface",
                Status::Warning,
                "no Hugging Face token",
                found,
                "create a read token at https://huggingface.co/settings/tokens and `export HF_TOKEN=hf_…`",
            )
        }
    }
}
