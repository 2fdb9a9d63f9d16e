//! The config of MiniMax-M2 (`MiniMaxM2ForCausalLM`): [`ModelConfig`]'s keys (`rope_theta`,
//! `head_dim`, ...) plus the experts (`num_local_experts`, `num_experts_per_tok`,
//! `intermediate_size` being an expert's width) and the released checkpoints' legacy keys:
//! `rotary_dim` (the rotated leading dims of a head; transformers turns it into
//! `partial_rotary_factor`), `scoring_func` (only `"sigmoid"`), `use_routing_bias`,
//! `use_qk_norm` and `qk_norm_type` (only `"per_layer"`: one norm over all heads),
//! `shared_intermediate_size` (only 0) and `attn_type_list` (only full attention). Defaults
//! are transformers' `MiniMaxM2Config`'s. A key that could change the forward and that this
//! file does not know is refused by name.

use std::path::Path;

use serde_json::Value;

use crate::loader::config::{parse_file, text_config};
use crate::loader::{LoadError, ModelConfig};
use crate::models::llama::check_known_keys;

/// The keys of a MiniMax-M2 config beyond [`crate::models::llama::HARMLESS_KEYS`].
const MINIMAX_M2_KEYS: [&str; 27] = [
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_act",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "rotary_dim",
    "partial_rotary_factor",
    "num_local_experts",
    "num_experts_per_tok",
    "scoring_func",
    "use_routing_bias",
    "use_qk_norm",
    "qk_norm_type",
    "shared_intermediate_size",
    "attn_type_list",
    "quantization_config",
    // The released checkpoint's multi-token-prediction modules, which are not loaded.
    "use_mtp",
    "num_mtp_modules",
    "mtp_transformer_layers",
    // Training and bookkeeping only.
    "router_aux_loss_coef",
    "router_jitter_noise",
    "output_router_logits",
    "auto_map",
    "sliding_window",
];

/// A MiniMax-M2 config.
#[derive(Debug, Clone, PartialEq)]
pub struct MiniMaxM2Config {
    pub base: ModelConfig,
    pub num_experts: usize,
    pub top_k: usize,
}

impl MiniMaxM2Config {
    pub fn from_file(path: &Path) -> std::result::Result<Self, LoadError> {
        parse_file(path, Self::from_json)
    }

    /// Parse and validate.
    pub fn from_json(text: &str) -> std::result::Result<Self, String> {
        let mut base = ModelConfig::from_json(text)?;
        let value: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let flat = text_config(value);
        let arch = base.architecture.clone();
        check_known_keys(&arch, &flat, &MINIMAX_M2_KEYS)?;
        let uint = |key: &str, default: usize| -> std::result::Result<usize, String> {
            match flat.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(v) => match v.as_u64() {
                    Some(n) => Ok(n as usize),
                    None => Err(format!("{key} must be a non-negative integer, found {v}")),
                },
            }
        };
        let must = |key: &str, want: Value, what: &str| -> std::result::Result<(), String> {
            match flat.get(key) {
                None | Some(Value::Null) => Ok(()),
                Some(v) if *v == want => Ok(()),
                Some(v) => Err(format!(
                    "{key} = {v} is not supported for {arch}: this engine runs {what} \
                     ({key} = {want}, as released)"
                )),
            }
        };
        must("scoring_func", "sigmoid".into(), "sigmoid routing")?;
        must(
            "use_routing_bias",
            true.into(),
            "routing with the correction bias",
        )?;
        must("use_qk_norm", true.into(), "QK norms")?;
        must(
            "qk_norm_type",
            "per_layer".into(),
            "one QK norm over all heads",
        )?;
        if uint("shared_intermediate_size", 0)? != 0 {
            return Err(format!(
                "shared_intermediate_size > 0 is not supported for {arch}: MiniMax-M2 has no \
                 shared expert"
            ));
        }
        if let Some(list) = flat.get("attn_type_list").and_then(Value::as_array)
            && list.iter().any(|v| v.as_u64() != Some(1))
        {
            return Err(format!(
                "attn_type_list with a value other than 1 is not supported for {arch}: \
                 MiniMax-M2's layers are all full attention"
            ));
        }
        // The released checkpoints give the rotated dims as `rotary_dim`.
        let hd = base.head_dim;
        let rotary_dim = uint("rotary_dim", 0)?;
        if rotary_dim > 0 {
            if rotary_dim > hd || rotary_dim % 2 != 0 {
                return Err(format!(
                    "rotary_dim ({rotary_dim}) must be even and at most head_dim ({hd})"
                ));
            }
            base.rope.partial_rotary_factor = rotary_dim as f64 / hd as f64;
        }
        let num_experts = uint("num_local_experts", 256)?;
        let top_k = uint("num_experts_per_tok", 8)?;
        if num_experts == 0 || top_k == 0 || top_k > num_experts {
            return Err(format!(
                "num_experts_per_tok ({top_k}) must be between 1 and num_local_experts \
                 ({num_experts})"
            ));
        }
        Ok(Self {
            base,
            num_experts,
            top_k,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MiniMaxAI/MiniMax-M2's config.json as the Hub has it (its 62-entry attn_type_list
    /// shortened to the four of a shorter model).
    const MINIMAX_M2: &str = r#"{
        "architectures": ["MiniMaxM2ForCausalLM"], "attn_type_list": [1, 1, 1, 1],
        "head_dim": 128, "hidden_act": "silu", "hidden_size": 3072, "intermediate_size": 1536,
        "max_position_embeddings": 196608, "model_type": "minimax_m2",
        "mtp_transformer_layers": 1, "num_attention_heads": 48, "num_experts_per_tok": 8,
        "num_hidden_layers": 4, "num_key_value_heads": 8, "num_local_experts": 256,
        "num_mtp_modules": 3, "qk_norm_type": "per_layer",
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "float8_e4m3fn",
            "quant_method": "fp8", "weight_block_size": [128, 128]},
        "rms_norm_eps": 1e-06, "rope_theta": 5000000, "rotary_dim": 64,
        "scoring_func": "sigmoid", "shared_intermediate_size": 0, "tie_word_embeddings": false,
        "use_cache": true, "use_mtp": true, "use_qk_norm": true, "use_routing_bias": true,
        "vocab_size": 200064
    }"#;

    #[test]
    fn the_released_config_parses() {
        let c = MiniMaxM2Config::from_json(MINIMAX_M2).expect("parses");
        assert_eq!((c.num_experts, c.top_k), (256, 8));
        assert_eq!(c.base.rope.partial_rotary_factor, 0.5);
        assert_eq!(c.base.rope.theta, 5_000_000.0);
        assert_eq!(c.base.head_dim, 128);
        assert!(c.base.fp8.is_some());
    }

    #[test]
    fn options_we_do_not_run_are_refused_by_name() {
        for (from, to, needle) in [
            (
                r#""scoring_func": "sigmoid""#,
                r#""scoring_func": "softmax""#,
                "scoring_func",
            ),
            (
                r#""qk_norm_type": "per_layer""#,
                r#""qk_norm_type": "per_head""#,
                "per_layer",
            ),
            (
                r#""shared_intermediate_size": 0"#,
                r#""shared_intermediate_size": 8"#,
                "shared",
            ),
            (r#"[1, 1, 1, 1]"#, r#"[1, 0, 1, 1]"#, "attn_type_list"),
            (r#""rotary_dim": 64"#, r#""rotary_dim": 63"#, "rotary_dim"),
            (
                r#""use_mtp": true"#,
                r#""use_mtp": true, "swa_window": 8"#,
                "swa_window",
            ),
        ] {
            let text = MINIMAX_M2.replace(from, to);
            let e = MiniMaxM2Config::from_json(&text).expect_err(to);
            assert!(e.contains(needle), "{to}: {e}");
        }
    }
}
