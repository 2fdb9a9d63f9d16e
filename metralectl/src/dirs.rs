//! Where the launcher keeps and finds things on this machine.

use std::env;
use std::path::PathBuf;

/// Overrides the config directory (tests point it at a temporary directory).
pub const CONFIG_DIR_ENV: &str = "METRALE_CONFIG_DIR";

fn non_empty_env(name: &str) -> Option<PathBuf> {
    env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// `$METRALE_CONFIG_DIR`, else the platform's config directory for Metrale
/// (`~/.config/metrale` on Linux, `~/Library/Application Support/ai.metrale.metrale` on macOS).
pub fn config_dir() -> Option<PathBuf> {
    non_empty_env(CONFIG_DIR_ENV).or_else(|| {
        directories::ProjectDirs::from("ai", "metrale", "metrale")
            .map(|d| d.config_dir().to_path_buf())
    })
}

/// Where user recipes live: `<config dir>/recipes`.
pub fn user_recipes_dir() -> Option<PathBuf> {
    config_dir().map(|d| d.join("recipes"))
}

/// The Hugging Face cache on this machine: `$HF_HOME`, else `~/.cache/huggingface`.
pub fn hf_cache_dir() -> PathBuf {
    non_empty_env("HF_HOME").unwrap_or_else(|| {
        directories::BaseDirs::new()
            .map(|d| d.home_dir().join(".cache").join("huggingface"))
            .unwrap_or_else(|| PathBuf::from("~/.cache/huggingface"))
    })
}

/// Overrides the state directory (tests point it at a temporary directory).
pub const STATE_DIR_ENV: &str = "METRALE_STATE_DIR";

/// Where the launcher records the engines it started and their logs: `$METRALE_STATE_DIR`,
/// else the platform's state directory (`~/.local/state/metrale` on Linux), else the local
/// data directory.
pub fn state_dir() -> Option<PathBuf> {
    non_empty_env(STATE_DIR_ENV).or_else(|| {
        directories::ProjectDirs::from("ai", "metrale", "metrale").map(|d| {
            d.state_dir()
                .unwrap_or_else(|| d.data_local_dir())
                .to_path_buf()
        })
    })
}

/// The Hugging Face hub cache: `$HF_HUB_CACHE`, else `<HF cache dir>/hub`.
pub fn hf_hub_cache_dir() -> PathBuf {
    non_empty_env("HF_HUB_CACHE").unwrap_or_else(|| hf_cache_dir().join("hub"))
}
