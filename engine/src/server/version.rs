//! `GET /version`: what is serving, so a benchmark record can say exactly what it measured.
//! The build (version, git commit, CUDA or not), the command line as typed (the API key's
//! value withheld), the settings `met serve` resolved from it, and the device and KV cache the
//! engine ended up with.

use std::sync::Arc;

use axum::extract::State;
use serde_json::{Value, json};

use super::AppState;
use super::config::{KvCacheDtype, ServeConfig};
use crate::engine_core::{ComputeDtype, Device};
use crate::loader::LoadFormat;

/// The git commit this binary was built from (`unknown` outside a checkout).
pub const GIT_COMMIT: &str = env!("MET_GIT_COMMIT");
/// Whether tracked files differed from [`GIT_COMMIT`] when it was built.
pub const GIT_DIRTY: &str = env!("MET_GIT_DIRTY");

/// The build, for `GET /version` and `met --version`-style reports.
pub fn build() -> Value {
    json!({
        "name": "met",
        "version": env!("CARGO_PKG_VERSION"),
        "git_commit": GIT_COMMIT,
        "git_dirty": GIT_DIRTY == "true",
        "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        "cuda": cfg!(feature = "cuda"),
    })
}

/// The command line with the values of secret flags replaced by `***`.
pub fn redacted_args(args: impl IntoIterator<Item = String>) -> Vec<String> {
    const SECRET: &str = "--api-key";
    let mut out = Vec::new();
    let mut hide_next = false;
    for a in args {
        if hide_next {
            out.push("***".to_owned());
            hide_next = false;
        } else if a == SECRET {
            out.push(a);
            hide_next = true;
        } else if a.starts_with(&format!("{SECRET}=")) {
            out.push(format!("{SECRET}=***"));
        } else {
            out.push(a);
        }
    }
    out
}

/// The settings `met serve` resolved from its flags and defaults.
pub fn settings(config: &ServeConfig) -> Value {
    let e = &config.engine;
    json!({
        "model_dir": e.model_dir.display().to_string(),
        "served_model_name": e.served_name,
        "device": match e.device { Device::Cpu => "cpu", Device::Cuda => "cuda" },
        "dtype": match e.dtype {
            ComputeDtype::Auto => "auto",
            ComputeDtype::Bfloat16 => "bfloat16",
            ComputeDtype::Float32 => "float32",
        },
        "load_format": match e.load_format { LoadFormat::Auto => "auto", LoadFormat::Dummy => "dummy" },
        "requantize": e.requantize.to_string(),
        "max_seq_len": e.max_seq_len,
        "max_batch_size": e.max_num_seqs,
        "max_num_batched_tokens": e.max_num_batched_tokens,
        "prefill_chunk_with_decodes": e.max_prefill_with_decodes,
        "max_queued_requests": e.max_queued_requests,
        "gpu_memory_utilization": e.gpu_memory_utilization,
        "kv_cache_dtype": match config.kv_cache_dtype {
            KvCacheDtype::Auto => "auto",
            KvCacheDtype::Bf16 => "bf16",
            KvCacheDtype::Fp8 => "fp8",
        },
        "enable_prefix_caching": e.enable_prefix_caching,
        "enforce_eager": e.enforce_eager,
        "tuning": e.tuning,
        "block_size": e.block_size,
        "num_gpu_blocks_override": e.num_gpu_blocks_override,
        "ssm_cache_slots": e.ssm_cache_slots,
        "ssm_checkpoint_slots": e.ssm_checkpoint_slots,
        "ssm_checkpoint_interval": e.ssm_checkpoint_interval,
        "speculative": e.speculative.map(|s| json!({
            "method": "mtp", "num_drafts": s.num_drafts(), "ladder": s.ladder.to_string(),
            "draft_cost": s.draft_cost,
        })),
        "request_timeout_s": config.request_timeout.map(|d| d.as_secs_f64()),
        "disable_thinking": config.disable_thinking,
        "tool_call_parser": config.tool_call_parser.map(|p| p.flag_value()),
        "tool_grammar": !config.disable_tool_grammar,
        "reasoning_parser": config.reasoning_parser.map(|p| p.flag_value()),
        "api_key": config.api_key.is_some(),
        "header_read_timeout_s": config.http.header_read_timeout.as_secs_f64(),
        "body_read_timeout_s": config.http.body_read_timeout.as_secs_f64(),
        "keep_alive_timeout_s": config.http.keep_alive_timeout.as_secs_f64(),
        "max_connections": config.http.max_connections,
        "tokenizer_workers": config.http.tokenizer_workers,
        "special_tokens_in_content": config.special_tokens_in_content,
    })
}

pub async fn version(State(state): State<Arc<AppState>>) -> axum::Json<Value> {
    let engine = state.loaded_engine().map(|e| {
        let info = e.info();
        json!({
            "device": info.device,
            "max_model_len": info.max_model_len,
            "kv_cache_blocks": info.kv_cache_blocks,
            "kv_cache_tokens": info.kv_cache_blocks * info.block_size,
            "kv_cache_groups": info.kv_groups,
            "weights": info.weights,
        })
    });
    axum::Json(json!({
        "build": build(),
        "args": redacted_args(std::env::args()),
        "settings": state.settings,
        "engine": engine,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        redacted_args(a.iter().map(|s| s.to_string()))
    }

    #[test]
    fn api_key_values_are_withheld_in_both_spellings() {
        assert_eq!(
            args(&["met", "serve", "m", "--api-key", "sk-1", "--port", "9"]),
            ["met", "serve", "m", "--api-key", "***", "--port", "9"]
        );
        assert_eq!(
            args(&["met", "serve", "--api-key=sk-1", "m"]),
            ["met", "serve", "--api-key=***", "m"]
        );
        assert_eq!(args(&["met", "--api-keys"]), ["met", "--api-keys"]);
    }

    #[test]
    fn build_names_a_commit() {
        let b = build();
        let commit = b["git_commit"].as_str().unwrap_or_default();
        assert!(
            commit == "unknown"
                || (commit.len() == 40 && commit.chars().all(|c| c.is_ascii_hexdigit())),
            "{commit}"
        );
        assert_eq!(b["version"], env!("CARGO_PKG_VERSION"));
    }
}
