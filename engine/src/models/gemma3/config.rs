//! Gemma 3's text config (`Gemma3ForCausalLM`, and `text_config` of
//! `Gemma3ForConditionalGeneration`), read as transformers' `Gemma3TextConfig` reads it: its
//! defaults for absent keys (the Hub's configs leave many out), `layer_types` or the older
//! `sliding_window_pattern`, and the two rotary embeddings, either as transformers 5 writes
//! them (`rope_parameters.{full_attention, sliding_attention}`) or as older files do
//! (`rope_theta` + `rope_scaling` for global layers, `rope_local_base_freq` for local ones).

use std::path::Path;

use serde_json::{Map, Value, json};

use crate::loader::config::{RopeConfig, parse_file, rope_from_params, text_config};
use crate::loader::{LoadError, ModelConfig};

use super::super::llama::{check_known_keys, sliding_layer_types};

/// `Gemma3TextConfig`'s defaults for the keys [`ModelConfig`] needs.
fn defaults() -> [(&'static str, Value); 10] {
    [
        ("vocab_size", json!(262_208)),
        ("hidden_size", json!(2304)),
        ("intermediate_size", json!(9216)),
        ("num_hidden_layers", json!(26)),
        ("num_attention_heads", json!(8)),
        ("num_key_value_heads", json!(4)),
        ("head_dim", json!(256)),
        ("max_position_embeddings", json!(131_072)),
        ("rms_norm_eps", json!(1e-6)),
        ("query_pre_attn_scalar", json!(256)),
    ]
}

/// The keys of a Gemma 3 text config beyond the harmless ones.
const GEMMA3_KEYS: [&str; 23] = [
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_activation",
    "hidden_act",
    "attention_bias",
    "query_pre_attn_scalar",
    "sliding_window",
    "sliding_window_pattern",
    "_sliding_window_pattern",
    "layer_types",
    "rope_theta",
    "rope_local_base_freq",
    "rope_scaling",
    "rope_parameters",
    "final_logit_softcapping",
    "attn_logit_softcapping",
    "use_bidirectional_attention",
    "quantization_config",
    // The multimodal wrapper's token ids (image boundaries), copied into the text config by
    // some exports; they change nothing in the text model.
    "boi_token_index",
    "eoi_token_index",
    "image_token_index",
];

/// A Gemma 3 text config.
#[derive(Debug, Clone, PartialEq)]
pub struct Gemma3Config {
    /// Sizes, eps, tying (its `rope` is unused: see `global_rope` and `local_rope`).
    pub base: ModelConfig,
    /// Per layer: true for a sliding-window (local) layer, false for a global one.
    pub sliding: Vec<bool>,
    /// A local layer's query sees itself and the `w − 1` tokens before it.
    pub sliding_window: usize,
    /// Attention scores are scaled by `query_pre_attn_scalar^-1/2` (not `head_dim^-1/2`).
    pub query_pre_attn_scalar: f64,
    pub global_rope: RopeConfig,
    pub local_rope: RopeConfig,
}

impl Gemma3Config {
    pub fn from_file(path: &Path) -> std::result::Result<Self, LoadError> {
        parse_file(path, Self::from_json)
    }

    /// Parse and validate; absent keys take `Gemma3TextConfig`'s defaults.
    pub fn from_json(text: &str) -> std::result::Result<Self, String> {
        let value: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let Value::Object(mut flat) = text_config(value) else {
            return Err("config.json is not a JSON object".into());
        };
        let architecture = flat
            .get("architectures")
            .and_then(|a| a.get(0))
            .and_then(Value::as_str)
            .unwrap_or("Gemma3ForCausalLM")
            .to_string();
        check_known_keys(&architecture, &Value::Object(flat.clone()), &GEMMA3_KEYS)?;
        for (key, v) in defaults() {
            if flat.get(key).is_none_or(Value::is_null) {
                flat.insert(key.into(), v);
            }
        }
        flat.entry("tie_word_embeddings").or_insert(json!(true));
        let activation = ["hidden_activation", "hidden_act"]
            .iter()
            .find_map(|k| flat.get(*k).and_then(Value::as_str))
            .unwrap_or("gelu_pytorch_tanh")
            .to_string();
        if activation != "gelu_pytorch_tanh" {
            return Err(format!(
                "hidden_activation = {activation:?} is not supported for {architecture} \
                 (expected \"gelu_pytorch_tanh\")"
            ));
        }
        for key in ["final_logit_softcapping", "attn_logit_softcapping"] {
            if flat.get(key).is_some_and(|v| !v.is_null()) {
                return Err(format!(
                    "{key} is not supported for {architecture} (Gemma 3 checkpoints leave it \
                     null; Gemma 2's softcapping is not implemented)"
                ));
            }
        }
        if flat
            .get("use_bidirectional_attention")
            .and_then(Value::as_bool)
            == Some(true)
        {
            return Err(format!(
                "use_bidirectional_attention = true (an embedding model) is not supported for \
                 {architecture}"
            ));
        }
        let num = |key: &str| flat.get(key).and_then(Value::as_f64);
        let sliding_window = match flat.get("sliding_window") {
            None | Some(Value::Null) => 4096,
            Some(v) => match v.as_u64() {
                Some(w) if w > 0 => w as usize,
                _ => {
                    return Err(format!(
                        "sliding_window must be a positive integer, found {v}"
                    ));
                }
            },
        };
        let query_pre_attn_scalar = num("query_pre_attn_scalar").unwrap_or(256.0);
        if query_pre_attn_scalar <= 0.0 {
            return Err("query_pre_attn_scalar must be positive".into());
        }
        let (global_rope, local_rope) = ropes(&flat)?;
        // What ModelConfig reads, without Gemma's keys it would misread or refuse.
        let mut base_json = flat.clone();
        for key in [
            "rope_parameters",
            "rope_scaling",
            "rope_theta",
            "hidden_act",
        ] {
            base_json.remove(key);
        }
        let base = ModelConfig::from_json(&Value::Object(base_json).to_string())?;
        let n = base.num_hidden_layers;
        let sliding = match sliding_layer_types(flat.get("layer_types"), n)? {
            Some(sliding) => sliding,
            None => {
                let pattern = num("sliding_window_pattern")
                    .or_else(|| num("_sliding_window_pattern"))
                    .unwrap_or(6.0) as usize;
                if pattern == 0 {
                    return Err("sliding_window_pattern must be positive".into());
                }
                (0..n).map(|l| !(l + 1).is_multiple_of(pattern)).collect()
            }
        };
        if base.rope.partial_rotary_factor != 1.0 {
            return Err(format!(
                "partial_rotary_factor is not supported for {architecture}"
            ));
        }
        Ok(Self {
            base,
            sliding,
            sliding_window,
            query_pre_attn_scalar,
            global_rope,
            local_rope,
        })
    }
}

impl Gemma3Config {
    /// The window local layers attend in, `None` when it is as long as the context (then no
    /// position is ever outside it).
    pub fn window(&self) -> Option<usize> {
        (self.sliding.iter().any(|&s| s) && self.sliding_window < self.base.max_position_embeddings)
            .then_some(self.sliding_window)
    }
}

/// The global and the local layers' rotary embeddings.
fn ropes(flat: &Map<String, Value>) -> std::result::Result<(RopeConfig, RopeConfig), String> {
    let max_pos = flat
        .get("max_position_embeddings")
        .and_then(Value::as_u64)
        .unwrap_or(131_072) as usize;
    let empty = Value::Object(Map::new());
    let per_type = flat
        .get("rope_parameters")
        .filter(|p| p.get("full_attention").is_some() || p.get("sliding_attention").is_some());
    let (global, local) = match per_type {
        // transformers 5: one parameter set a layer type.
        Some(p) => (
            p.get("full_attention").cloned().unwrap_or(empty.clone()),
            p.get("sliding_attention").cloned().unwrap_or(empty.clone()),
        ),
        // Older files: rope_scaling (or a flat rope_parameters) for the global layers.
        None => {
            let mut global = flat
                .get("rope_parameters")
                .or_else(|| flat.get("rope_scaling"))
                .filter(|v| v.is_object())
                .cloned()
                .unwrap_or(empty.clone());
            if let (Some(obj), Some(theta)) = (global.as_object_mut(), flat.get("rope_theta")) {
                obj.entry("rope_theta").or_insert(theta.clone());
            }
            let mut local = Map::new();
            if let Some(theta) = flat.get("rope_local_base_freq") {
                local.insert("rope_theta".into(), theta.clone());
            }
            (global, Value::Object(local))
        }
    };
    let theta = |p: &Value, default: f64| {
        p.get("rope_theta")
            .and_then(Value::as_f64)
            .unwrap_or(default)
    };
    let global_rope = rope_from_params(&global, theta(&global, 1_000_000.0), 1.0, max_pos)?;
    let local_rope = rope_from_params(&local, theta(&local, 10_000.0), 1.0, max_pos)?;
    Ok((global_rope, local_rope))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loader::config::RopeScaling;

    /// Gemma 3 27B IT's config as the Hub has it (transformers 4.50's layout: most keys left
    /// at their defaults, rope as `rope_theta` + `rope_scaling` + `rope_local_base_freq`).
    const GEMMA3_27B: &str = r#"{
        "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
        "boi_token_index": 255999, "eoi_token_index": 256000, "image_token_index": 262144,
        "mm_tokens_per_image": 256, "initializer_range": 0.02, "eos_token_id": [1, 106],
        "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model"},
        "text_config": {"head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504,
            "model_type": "gemma3_text", "num_attention_heads": 32, "num_hidden_layers": 62,
            "num_key_value_heads": 16, "query_pre_attn_scalar": 168,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024}}"#;

    #[test]
    fn the_hubs_27b_config_reads_with_gemmas_defaults() {
        let c = Gemma3Config::from_json(GEMMA3_27B).expect("valid");
        assert_eq!(c.base.vocab_size, 262_208);
        assert!(c.base.tie_word_embeddings);
        assert_eq!(c.base.max_position_embeddings, 131_072);
        assert_eq!(c.sliding.len(), 62);
        // Every sixth layer is global.
        assert_eq!(c.sliding.iter().filter(|&&s| !s).count(), 10);
        assert!(!c.sliding[5] && c.sliding[4] && c.sliding[6]);
        assert_eq!((c.sliding_window, c.window()), (1024, Some(1024)));
        assert_eq!(c.query_pre_attn_scalar, 168.0);
        assert_eq!(c.global_rope.theta, 1_000_000.0);
        assert_eq!(c.global_rope.scaling, RopeScaling::Linear { factor: 8.0 });
        assert_eq!(c.local_rope.theta, 10_000.0);
        assert_eq!(c.local_rope.scaling, RopeScaling::Default);
    }

    #[test]
    fn softcapping_and_unknown_keys_are_refused_by_name() {
        let cap = GEMMA3_27B.replace(
            r#""sliding_window": 1024"#,
            r#""sliding_window": 1024, "final_logit_softcapping": 30.0"#,
        );
        let e = Gemma3Config::from_json(&cap).expect_err("softcapping");
        assert!(e.contains("final_logit_softcapping"), "{e}");
        let odd = GEMMA3_27B.replace(
            r#""sliding_window": 1024"#,
            r#""sliding_window": 1024, "altup_num_inputs": 4"#,
        );
        let e = Gemma3Config::from_json(&odd).expect_err("unknown");
        assert!(e.contains("altup_num_inputs"), "{e}");
    }
}
