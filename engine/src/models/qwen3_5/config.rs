//! Qwen3.5's text config: Qwen3's keys (read by [`ModelConfig`], rope from `rope_parameters` or
//! the older top-level keys) plus the hybrid layers' (`layer_types`, `linear_*`).

use std::path::Path;

use serde::Deserialize;

use crate::backend::cpu::hybrid::DeltaHeads;
use crate::loader::config::text_config;
use crate::loader::{LoadError, ModelConfig};

/// What a decoder layer mixes tokens with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerType {
    LinearAttention,
    FullAttention,
}

/// A Qwen3.5 text config: the Qwen3 keys (`base`, rope from `rope_parameters` or the older
/// top-level `rope_theta` / `partial_rotary_factor`) plus the linear-attention ones.
#[derive(Debug, Clone, PartialEq)]
pub struct Qwen3_5Config {
    pub base: ModelConfig,
    pub layer_types: Vec<LayerType>,
    /// Depthwise conv taps (`linear_conv_kernel_dim`).
    pub conv_kernel: usize,
    pub linear: DeltaHeads,
    /// Qwen3.5-MoE: the shared expert's width (`shared_expert_intermediate_size`); the routed
    /// experts are `base.moe`. `None` for the dense model.
    pub shared_expert_intermediate_size: Option<usize>,
    /// Where the text model's weights are: `model` (`*ForCausalLM`) or `model.language_model`
    /// (the Hub's `*ForConditionalGeneration`, whose vision tower is ignored).
    pub weight_prefix: &'static str,
    /// MTP blocks the checkpoint carries under `mtp.*` (`mtp_num_hidden_layers`, 0 when
    /// absent); speculative decoding uses the first.
    pub mtp_num_hidden_layers: usize,
}

#[derive(Deserialize)]
struct RawHybrid {
    layer_types: Option<Vec<String>>,
    full_attention_interval: Option<usize>,
    linear_conv_kernel_dim: Option<usize>,
    linear_key_head_dim: Option<usize>,
    linear_value_head_dim: Option<usize>,
    linear_num_key_heads: Option<usize>,
    linear_num_value_heads: Option<usize>,
    shared_expert_intermediate_size: Option<usize>,
    mtp_num_hidden_layers: Option<usize>,
}

impl Qwen3_5Config {
    pub fn from_file(path: &Path) -> std::result::Result<Self, LoadError> {
        let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_json(&text).map_err(|message| LoadError::Config {
            path: path.to_path_buf(),
            message,
        })
    }

    /// Parse and validate; defaults are transformers' (`Qwen3_5TextConfig`).
    pub fn from_json(text: &str) -> std::result::Result<Self, String> {
        let base = ModelConfig::from_json(text)?;
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let raw: RawHybrid =
            serde_json::from_value(text_config(value)).map_err(|e| e.to_string())?;
        if !super::is_hybrid(&base.architecture) {
            return Err(format!(
                "architecture {} is not a Qwen3.5 hybrid (models::registry lists each \
                 architecture's family)",
                base.architecture
            ));
        }
        let n = base.num_hidden_layers;
        let layer_types = match raw.layer_types {
            Some(types) => types
                .iter()
                .map(|t| match t.as_str() {
                    "linear_attention" => Ok(LayerType::LinearAttention),
                    "full_attention" => Ok(LayerType::FullAttention),
                    other => Err(format!(
                        "layer_types entry {other:?} is not supported (expected \
                         \"linear_attention\" or \"full_attention\")"
                    )),
                })
                .collect::<std::result::Result<Vec<_>, _>>()?,
            None => {
                let every = raw.full_attention_interval.unwrap_or(4).max(1);
                (0..n)
                    .map(|l| {
                        if (l + 1).is_multiple_of(every) {
                            LayerType::FullAttention
                        } else {
                            LayerType::LinearAttention
                        }
                    })
                    .collect()
            }
        };
        if layer_types.len() != n {
            return Err(format!(
                "layer_types has {} entries for num_hidden_layers = {n}",
                layer_types.len()
            ));
        }
        let linear = DeltaHeads {
            nk: raw.linear_num_key_heads.unwrap_or(16),
            dk: raw.linear_key_head_dim.unwrap_or(128),
            nv: raw.linear_num_value_heads.unwrap_or(32),
            dv: raw.linear_value_head_dim.unwrap_or(128),
        };
        if linear.nk == 0
            || linear.dk == 0
            || linear.dv == 0
            || !linear.nv.is_multiple_of(linear.nk)
        {
            return Err(format!(
                "linear_num_value_heads ({}) must be a positive multiple of \
                 linear_num_key_heads ({}), and head dims positive",
                linear.nv, linear.nk
            ));
        }
        let conv_kernel = raw.linear_conv_kernel_dim.unwrap_or(4);
        if conv_kernel == 0 {
            return Err("linear_conv_kernel_dim must be positive".into());
        }
        let shared_expert_intermediate_size = match (&base.moe, raw.shared_expert_intermediate_size)
        {
            (None, _) => None,
            (Some(_), Some(n)) if n > 0 => Some(n),
            (Some(_), _) => {
                return Err(format!(
                    "{} needs a positive \"shared_expert_intermediate_size\"",
                    base.architecture
                ));
            }
        };
        let weight_prefix = if base.architecture.ends_with("ForConditionalGeneration") {
            "model.language_model"
        } else {
            "model"
        };
        Ok(Self {
            base,
            layer_types,
            conv_kernel,
            linear,
            shared_expert_intermediate_size,
            weight_prefix,
            mtp_num_hidden_layers: raw.mtp_num_hidden_layers.unwrap_or(0),
        })
    }

    /// Channels through the conv: q, k and v of all heads.
    pub fn conv_dim(&self) -> usize {
        2 * self.linear.nk * self.linear.dk + self.linear.nv * self.linear.dv
    }
}
