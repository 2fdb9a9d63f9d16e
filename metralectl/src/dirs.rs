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
