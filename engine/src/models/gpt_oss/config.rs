//! The config of gpt-oss (`GptOssForCausalLM`): [`ModelConfig`]'s keys (rope, YaRN on the
//! released checkpoints, from `rope_parameters` or `rope_theta` + `rope_scaling`) plus
//! `layer_types` (sliding and full attention, alternating by default), `sliding_window`, the
//! experts (`num_local_experts`, `num_experts_per_tok`) and the clamped SwiGLU's
//! `swiglu_alpha` and `swiglu_limit`. Defaults are `GptOssConfig`'s in transformers. A key that
//! could change the forward and that this file does not know is refused by name.

use std::path::Path;

use serde_json::Value;

use crate::loader::config::{parse_file, text_config};
use crate::loader::mxfp4::Mxfp4Config;
use crate::loader::{LoadError, ModelConfig};
use crate::models::llama::{check_known_keys, sliding_layer_types};

/// The keys of a gpt-oss config beyond [`crate::models::llama::HARMLESS_KEYS`].
const GPT_OSS_KEYS: [&str; 21] = [
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_act",
    "attention_bias",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "sliding_window",
    "layer_types",
    "num_local_experts",
    "num_experts",
    "num_experts_per_tok",
    // The original release's name for num_experts_per_tok, beside it in the Hub's config.
    "experts_per_token",
    "swiglu_alpha",
    "swiglu_limit",
    "quantization_config",
    // Training and bookkeeping only.
    "router_aux_loss_coef",
    "output_router_logits",
    "initial_context_length",
];

/// A gpt-oss config.
#[derive(Debug, Clone, PartialEq)]
pub struct GptOssConfig {
    pub base: ModelConfig,
    /// Per layer: true for a sliding-window layer, false for a full-attention one.
    pub sliding: Vec<bool>,
    /// The window sliding layers attend in: a query sees itself and the `w − 1` keys before it.
    pub sliding_window: usize,
    pub num_experts: usize,
    pub top_k: usize,
    pub swiglu_alpha: f32,
    pub swiglu_limit: f32,
    /// The experts are stored MXFP4 (`quantization_config.quant_method = "mxfp4"`).
    pub mxfp4: bool,
}

impl GptOssConfig {
    pub fn from_file(path: &Path) -> std::result::Result<Self, LoadError> {
        parse_file(path, Self::from_json)
    }

    /// Parse and validate.
    pub fn from_json(text: &str) -> std::result::Result<Self, String> {
        let base = ModelConfig::from_json(text)?;
        let value: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let flat = text_config(value);
        let arch = base.architecture.clone();
        check_known_keys(&arch, &flat, &GPT_OSS_KEYS)?;
        let uint = |key: &str| -> std::result::Result<Option<usize>, String> {
            match flat.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => match v.as_u64() {
                    Some(n) if n > 0 => Ok(Some(n as usize)),
                    _ => Err(format!("{key} must be a positive integer, found {v}")),
                },
            }
        };
        let float = |key: &str, default: f64| -> std::result::Result<f32, String> {
            match flat.get(key) {
                None | Some(Value::Null) => Ok(default as f32),
                Some(v) => match v.as_f64() {
                    Some(x) if x > 0.0 && x.is_finite() => Ok(x as f32),
                    _ => Err(format!("{key} must be a positive number, found {v}")),
                },
            }
        };
        if flat.get("attention_bias").and_then(Value::as_bool) == Some(false) {
            return Err(format!(
                "attention_bias = false is not supported for {arch} (every released gpt-oss \
                 checkpoint has attention biases)"
            ));
        }
        if base.rope.partial_rotary_factor != 1.0 {
            return Err(format!("partial_rotary_factor is not supported for {arch}"));
        }
        let num_experts = uint("num_local_experts")?
            .or(uint("num_experts")?)
            .unwrap_or(128);
        let top_k = uint("num_experts_per_tok")?
            .or(uint("experts_per_token")?)
            .unwrap_or(4);
        if top_k > num_experts {
            return Err(format!(
                "num_experts_per_tok ({top_k}) must be at most num_local_experts ({num_experts})"
            ));
        }
        let n = base.num_hidden_layers;
        // Default: sliding, full, sliding, ... (GptOssConfig's).
        let sliding = sliding_layer_types(flat.get("layer_types"), n)?
            .unwrap_or_else(|| (0..n).map(|l| l % 2 == 0).collect());
        let sliding_window = uint("sliding_window")?.unwrap_or(128);
        let mxfp4 = match flat.get("quantization_config") {
            None | Some(Value::Null) => false,
            Some(q) => match Mxfp4Config::from_json(q) {
                Some(c) => c.map(|_| true)?,
                None => {
                    return Err(format!(
                        "quantization_config {} is not supported for {arch}: gpt-oss loads in \
                         bf16 or with MXFP4 experts (quant_method \"mxfp4\", as released)",
                        q.get("quant_method").unwrap_or(&Value::Null)
                    ));
                }
            },
        };
        Ok(Self {
            sliding,
            sliding_window,
            num_experts,
            top_k,
            swiglu_alpha: float("swiglu_alpha", 1.702)?,
            swiglu_limit: float("swiglu_limit", 7.0)?,
            mxfp4,
            base,
        })
    }

    /// The window of layer `l`, `None` for a full-attention layer (or a window as long as the
    /// context, which masks nothing).
    pub fn window(&self, l: usize) -> Option<usize> {
        (self.sliding[l] && self.sliding_window < self.base.max_position_embeddings)
            .then_some(self.sliding_window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loader::config::RopeScaling;

    /// openai/gpt-oss-20b's config.json as the Hub has it (its 24 layer types shortened to
    /// the four of a shorter model).
    const GPT_OSS_20B: &str = r#"{
        "architectures": ["GptOssForCausalLM"], "attention_bias": true,
        "attention_dropout": 0.0, "eos_token_id": 200002, "experts_per_token": 4,
        "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880,
        "initial_context_length": 4096, "initializer_range": 0.02, "intermediate_size": 2880,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention",
                        "full_attention"],
        "max_position_embeddings": 131072, "model_type": "gpt_oss", "num_attention_heads": 64,
        "num_experts_per_tok": 4, "num_hidden_layers": 4, "num_key_value_heads": 8,
        "num_local_experts": 32, "output_router_logits": false, "pad_token_id": 199999,
        "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn",
            "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"],
            "quant_method": "mxfp4"},
        "rms_norm_eps": 1e-05,
        "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
            "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": false},
        "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128,
        "swiglu_limit": 7.0, "tie_word_embeddings": false, "transformers_version": "4.55.0.dev0",
        "use_cache": true, "vocab_size": 201088}"#;

    #[test]
    fn reads_the_released_config() {
        let c = GptOssConfig::from_json(GPT_OSS_20B).expect("valid");
        assert_eq!((c.num_experts, c.top_k), (32, 4));
        assert_eq!(c.sliding, [true, false, true, false]);
        assert_eq!((c.window(0), c.window(1)), (Some(128), None));
        assert!(c.mxfp4);
        assert_eq!((c.swiglu_alpha, c.swiglu_limit), (1.702, 7.0));
        assert!(matches!(
            c.base.rope.scaling,
            RopeScaling::Yarn {
                factor: 32.0,
                truncate: false,
                ..
            }
        ));
        assert_eq!(c.base.head_dim, 64);
    }

    #[test]
    fn layer_types_default_to_alternating() {
        let no_types = GPT_OSS_20B.replace(
            r#""layer_types": ["sliding_attention", "full_attention", "sliding_attention",
                        "full_attention"],"#,
            "",
        );
        let c = GptOssConfig::from_json(&no_types).expect("valid");
        assert_eq!(c.sliding, [true, false, true, false]);
    }

    #[test]
    fn what_is_not_implemented_is_refused_by_name() {
        for (from, to, expect) in [
            (
                r#""attention_bias": true"#,
                r#""attention_bias": false"#,
                "attention_bias",
            ),
            (
                r#""swiglu_limit": 7.0"#,
                r#""swiglu_limit": -1"#,
                "swiglu_limit",
            ),
            (
                r#""sliding_window": 128"#,
                r#""sliding_window": 0"#,
                "sliding_window",
            ),
            (
                r#""use_cache": true"#,
                r#""use_cache": true, "qk_norm": true"#,
                "qk_norm",
            ),
            (
                r#""num_experts_per_tok": 4"#,
                r#""num_experts_per_tok": 40"#,
                "num_experts_per_tok",
            ),
            (
                r#""quant_method": "mxfp4""#,
                r#""quant_method": "fp8""#,
                "quantization_config",
            ),
            (
                r#""full_attention"],"#,
                r#""chunked_attention"],"#,
                "chunked_attention",
            ),
        ] {
            let bad = GPT_OSS_20B.replacen(from, to, 1);
            assert_ne!(bad, GPT_OSS_20B, "{from}");
            let e = GptOssConfig::from_json(&bad).expect_err(expect);
            assert!(e.contains(expect), "{expect}: {e}");
        }
    }

    /// MXFP4 belongs to gpt-oss: another architecture with it is refused when its config is
    /// read, before any weight.
    #[test]
    fn mxfp4_is_refused_for_other_architectures() {
        let llama = GPT_OSS_20B
            .replace("GptOssForCausalLM", "LlamaForCausalLM")
            .replace(r#""attention_bias": true"#, r#""attention_bias": false"#);
        let e = ModelConfig::from_json(&llama).expect_err("mxfp4 llama");
        assert!(e.contains("mxfp4") && e.contains("LlamaForCausalLM"), "{e}");
    }
}
