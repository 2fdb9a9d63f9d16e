//! Shared by the tests that compare against transformers: where the fixtures live and the
//! layout of `tests/fixtures/NAME.reference.json` (written by `tests/fixtures/make_*.py`).

#![allow(dead_code)]

use std::path::PathBuf;

use serde::Deserialize;

/// What transformers computed for one fixture checkpoint.
#[derive(Debug, Deserialize)]
pub struct Reference {
    pub sequences: Vec<Sequence>,
    pub greedy: Greedy,
}

/// One scored token sequence: the log-probability of each next token, and the top 5 at each
/// position.
#[derive(Debug, Deserialize)]
pub struct Sequence {
    pub tokens: Vec<u32>,
    pub next_token_logprobs: Vec<f32>,
    pub top5: Vec<Vec<(u32, f32)>>,
}

/// A greedy continuation of `prompt`.
#[derive(Debug, Deserialize)]
pub struct Greedy {
    pub prompt: Vec<u32>,
    pub continuation: Vec<u32>,
}

/// `tests/fixtures/`.
pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

/// `tests/fixtures/models/NAME`.
pub fn model_dir(name: &str) -> PathBuf {
    fixtures().join("models").join(name)
}

/// The models we ship and test against transformers like the fixtures (`models/NAME`).
pub const SHIPPED: [&str; 1] = ["demo-hybrid"];

/// The checkpoint `NAME.reference.json` was made from: `models/NAME` at the repository's root
/// for a model we ship ([`SHIPPED`]), else the fixture `tests/fixtures/models/NAME`.
pub fn checkpoint_dir(name: &str) -> PathBuf {
    if SHIPPED.contains(&name) {
        fixtures().join("../../models").join(name)
    } else {
        model_dir(name)
    }
}

/// The error of loading the Qwen3 checkpoint in `dir` on the CPU (config, weights or model)
/// as the user sees it; `dir` is removed.
pub fn load_error(dir: &std::path::Path) -> String {
    use metrale_engine::backend::CpuBackend;
    use metrale_engine::loader::{LoadFormat, ModelDir, Weights};
    let result = (|| -> anyhow::Result<()> {
        let md = ModelDir::open(dir)?;
        let cfg = md.config()?;
        let weights = Weights::open(dir, LoadFormat::Auto)?;
        metrale_engine::models::qwen3::Qwen3::load(&CpuBackend::default(), &cfg, &weights)?;
        Ok(())
    })();
    std::fs::remove_dir_all(dir).ok();
    format!("{:#}", result.expect_err("loading must fail"))
}

/// `tests/fixtures/NAME.reference.json`, parsed.
pub fn reference(name: &str) -> Reference {
    let path = fixtures().join(format!("{name}.reference.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

/// The CPU engine the engine-level tests start on `model_dir` (served as `name`): contexts of
/// 256, 8 sequences, steps of 64 tokens, blocks of 16, prefix caching on.
pub fn cpu_engine_config(
    model_dir: PathBuf,
    name: &str,
) -> metrale_engine::engine_core::EngineConfig {
    use metrale_engine::engine_core::EngineConfig;
    use metrale_engine::loader::LoadFormat;
    EngineConfig {
        model_dir,
        device: metrale_engine::engine_core::Device::Cpu,
        dtype: Default::default(),
        gpu_memory_utilization: 0.9,
        served_name: name.into(),
        load_format: LoadFormat::Auto,
        requantize: Default::default(),
        max_seq_len: Some(256),
        max_num_seqs: 8,
        max_num_batched_tokens: 64,
        max_prefill_with_decodes: None,
        max_queued_requests: 64,
        enable_prefix_caching: true,
        block_size: 16,
        kv_cache_bytes: None,
        num_gpu_blocks_override: None,
        ssm_cache_slots: None,
        ssm_checkpoint_slots: None,
        ssm_checkpoint_interval: 512,
        kv_cache_fp8: false,
        speculative: None,
        tensor_parallel_size: 1,
        enable_expert_parallel: false,
        rendezvous: None,
        dist_timeout: metrale_engine::engine_core::ranks::DEFAULT_DIST_TIMEOUT,
        enforce_eager: false,
        tuning: Default::default(),
    }
}
