//! The config of a Llama-architecture text model (`LlamaForCausalLM`, `MistralForCausalLM`, the
//! text model of `Mistral3ForConditionalGeneration`): [`ModelConfig`]'s keys (rope from
//! `rope_parameters` or `rope_theta` + `rope_scaling`, `llama3` scaling included) plus
//! Mistral's `sliding_window`. Every key is one this file knows: a key that could change what
//! the model computes and that we do not implement is refused by name ([`check_known_keys`]).

use std::path::Path;

use serde_json::Value;

use crate::loader::config::{parse_file, text_config};
use crate::loader::{LoadError, ModelConfig};

/// Keys every transformers config may carry that change nothing a forward computes
/// (bookkeeping, training-only settings, token ids the generation config also holds).
pub const HARMLESS_KEYS: [&str; 27] = [
    "_name_or_path",
    "architectures",
    "model_type",
    "transformers_version",
    "torch_dtype",
    "dtype",
    "use_cache",
    "initializer_range",
    "attention_dropout",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "id2label",
    "label2id",
    "output_attentions",
    "output_hidden_states",
    "return_dict",
    "problem_type",
    "chunk_size_feed_forward",
    "is_encoder_decoder",
    "tie_word_embeddings",
    "max_position_embeddings",
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "rms_norm_eps",
    "cache_implementation",
];

/// Refuse a config (its text model's keys, flattened by [`text_config`]) with keys outside
/// [`HARMLESS_KEYS`] and `known`, naming them: an option we do not implement must not be
/// silently computed wrong.
pub fn check_known_keys(
    architecture: &str,
    text: &Value,
    known: &[&str],
) -> std::result::Result<(), String> {
    let Some(obj) = text.as_object() else {
        return Err("config.json is not a JSON object".into());
    };
    let mut unknown: Vec<&str> = obj
        .keys()
        .map(String::as_str)
        .filter(|k| !HARMLESS_KEYS.contains(k) && !known.contains(k))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    unknown.sort_unstable();
    Err(format!(
        "config.json has options this engine does not implement for {architecture}: {} \
         (remove them if they are at their defaults, or open an issue)",
        unknown.join(", ")
    ))
}

/// A config's `layer_types` (the value given) as one flag a layer (true: `sliding_attention`,
/// false: `full_attention`), or `None` when the config has none; another type, a non-list or
/// a count other than `layers` is an error that names it.
pub fn sliding_layer_types(
    layer_types: Option<&Value>,
    layers: usize,
) -> std::result::Result<Option<Vec<bool>>, String> {
    let types = match layer_types {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(types)) => types,
        Some(other) => return Err(format!("layer_types must be a list, found {other}")),
    };
    let sliding = types
        .iter()
        .map(|t| match t.as_str() {
            Some("sliding_attention") => Ok(true),
            Some("full_attention") => Ok(false),
            _ => Err(format!(
                "layer_types entry {t} is not supported (expected \
                 \"sliding_attention\" or \"full_attention\")"
            )),
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    if sliding.len() != layers {
        return Err(format!(
            "layer_types has {} entries for num_hidden_layers = {layers}",
            sliding.len()
        ));
    }
    Ok(Some(sliding))
}

/// The keys of a Llama / Mistral text config beyond [`HARMLESS_KEYS`].
const LLAMA_KEYS: [&str; 14] = [
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_act",
    "attention_bias",
    "mlp_bias",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "sliding_window",
    // Llama 2's tensor-parallel split at pretraining; the product it computes is the same.
    "pretraining_tp",
    "quantization_config",
    "partial_rotary_factor",
];

/// A Llama or Mistral text config.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    pub base: ModelConfig,
    /// Mistral's sliding window: a query sees itself and the `w − 1` tokens before it.
    /// `None` (no window) when the config has none or a `null` one.
    pub sliding_window: Option<usize>,
}

impl LlamaConfig {
    pub fn from_file(path: &Path) -> std::result::Result<Self, LoadError> {
        parse_file(path, Self::from_json)
    }

    /// Parse and validate.
    pub fn from_json(text: &str) -> std::result::Result<Self, String> {
        let base = ModelConfig::from_json(text)?;
        let value: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let flat = text_config(value);
        check_known_keys(&base.architecture, &flat, &LLAMA_KEYS)?;
        if flat.get("mlp_bias").and_then(Value::as_bool) == Some(true) {
            return Err(format!(
                "mlp_bias = true is not supported for {} (no released Llama 3 or Mistral \
                 checkpoint uses it)",
                base.architecture
            ));
        }
        if base.rope.partial_rotary_factor != 1.0 {
            return Err(format!(
                "partial_rotary_factor is not supported for {}",
                base.architecture
            ));
        }
        let sliding_window = match flat.get("sliding_window") {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_u64() {
                Some(w) if w > 0 => Some(w as usize),
                _ => {
                    return Err(format!(
                        "sliding_window must be a positive integer, found {v}"
                    ));
                }
            },
        };
        // A window as long as the context is no window.
        let sliding_window = sliding_window.filter(|&w| w < base.max_position_embeddings);
        Ok(Self {
            base,
            sliding_window,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mistral Small 3.2's config as the Hub has it (text_config nested, the vision keys
    /// beside it), shortened to the keys that matter.
    const MISTRAL3: &str = r#"{
        "architectures": ["Mistral3ForConditionalGeneration"], "model_type": "mistral3",
        "image_token_index": 10, "projector_hidden_act": "gelu", "spatial_merge_size": 2,
        "vision_config": {"hidden_size": 1024, "model_type": "pixtral"},
        "text_config": {"head_dim": 128, "hidden_act": "silu", "hidden_size": 5120,
            "intermediate_size": 32768, "max_position_embeddings": 131072,
            "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 40,
            "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000000.0,
            "sliding_window": null, "use_cache": true, "vocab_size": 131072,
            "attention_dropout": 0.0, "torch_dtype": "bfloat16"}}"#;

    #[test]
    fn mistral3_reads_its_text_config() {
        let c = LlamaConfig::from_json(MISTRAL3).expect("valid");
        assert_eq!(c.base.architecture, "Mistral3ForConditionalGeneration");
        assert_eq!((c.base.num_hidden_layers, c.base.head_dim), (40, 128));
        assert_eq!(c.sliding_window, None);
        assert_eq!(c.base.rope.theta, 1e9);
    }

    #[test]
    fn a_window_shorter_than_the_context_is_kept() {
        let text = MISTRAL3.replace(r#""sliding_window": null"#, r#""sliding_window": 4096"#);
        assert_eq!(
            LlamaConfig::from_json(&text).expect("valid").sliding_window,
            Some(4096)
        );
        let long = MISTRAL3.replace(r#""sliding_window": null"#, r#""sliding_window": 131072"#);
        assert_eq!(
            LlamaConfig::from_json(&long).expect("valid").sliding_window,
            None
        );
    }

    #[test]
    fn unknown_and_unsupported_options_are_named() {
        let text = MISTRAL3.replace(
            r#""use_cache": true"#,
            r#""use_cache": true, "logit_scale": 2.0, "attn_temperature": 0.5"#,
        );
        let e = LlamaConfig::from_json(&text).expect_err("unknown keys");
        assert!(
            e.contains("attn_temperature, logit_scale")
                && e.contains("Mistral3ForConditionalGeneration"),
            "{e}"
        );
        let bias = MISTRAL3.replace(
            r#""use_cache": true"#,
            r#""use_cache": true, "mlp_bias": true"#,
        );
        assert!(
            LlamaConfig::from_json(&bias)
                .expect_err("bias")
                .contains("mlp_bias")
        );
        let act = MISTRAL3.replace(r#""hidden_act": "silu""#, r#""hidden_act": "gelu""#);
        assert!(
            LlamaConfig::from_json(&act)
                .expect_err("act")
                .contains("hidden_act")
        );
    }

    /// Llama 3.1 8B's rope scaling, as its config has it: the rotary pairs of wavelength
    /// under 2048 are kept, over 8192 divided by 8, the rest smoothed between.
    #[test]
    fn llama3_rope_scaling_matches_its_three_regimes() {
        let text = r#"{"architectures": ["LlamaForCausalLM"], "vocab_size": 128256,
            "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 8,
            "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
            "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192, "rope_type": "llama3"},
            "mlp_bias": false, "attention_bias": false, "pretraining_tp": 1}"#;
        let c = LlamaConfig::from_json(text).expect("valid");
        let (scaled, _) = c.base.rope.inv_freq(128);
        let plain: Vec<f32> = (0..64)
            .map(|i| 1.0 / 500_000f32.powf((2 * i) as f32 / 128.0))
            .collect();
        let wavelen = |f: f32| 2.0 * std::f32::consts::PI / f;
        for (s, p) in scaled.iter().zip(&plain) {
            if wavelen(*p) < 2048.0 {
                assert_eq!(s, p);
            } else if wavelen(*p) > 8192.0 {
                assert_eq!(*s, p / 8.0);
            } else {
                assert!(*s < *p && *s > p / 8.0, "{s} between {p} and {}", p / 8.0);
            }
        }
    }
}
