//! The config of DeepSeek-V3 / V3.1 (`DeepseekV3ForCausalLM`): [`ModelConfig`]'s keys plus
//! multi-head latent attention's (`q_lora_rank`, which may be null for an uncompressed q;
//! `kv_lora_rank`, `qk_nope_head_dim`, `qk_rope_head_dim`, `v_head_dim`, `rope_interleave`),
//! the experts' (`n_routed_experts`, `num_experts_per_tok`, `n_group`, `topk_group`,
//! `n_shared_experts`, `moe_intermediate_size`, `norm_topk_prob`, `routed_scaling_factor`,
//! `first_k_dense_replace`) and the released checkpoints' routing keys, which transformers
//! ignores and this file checks hold the one routing it implements: `topk_method`
//! (`"noaux_tc"`), `scoring_func` (`"sigmoid"`), `moe_layer_freq` (1). Defaults are
//! transformers' `DeepseekV3Config`'s. A key that could change the forward and that this file
//! does not know is refused by name; the multi-token-prediction layer
//! (`num_nextn_predict_layers`, `model.layers.{num_hidden_layers}.*`) is not loaded.

use std::path::Path;

use serde_json::Value;

use crate::loader::config::{RopeScaling, parse_file, text_config};
use crate::loader::{LoadError, ModelConfig};
use crate::models::llama::check_known_keys;

/// The keys of a DeepSeek-V3 config beyond [`crate::models::llama::HARMLESS_KEYS`].
const DEEPSEEK_V3_KEYS: [&str; 39] = [
    "intermediate_size",
    "moe_intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "hidden_act",
    "attention_bias",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "rope_interleave",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    // transformers 5 writes these two, derived: qk_rope_head_dim and nope + rope.
    "head_dim",
    "qk_head_dim",
    "n_routed_experts",
    "num_local_experts",
    "num_experts_per_tok",
    "n_group",
    "topk_group",
    "n_shared_experts",
    "norm_topk_prob",
    "routed_scaling_factor",
    "first_k_dense_replace",
    "topk_method",
    "scoring_func",
    "moe_layer_freq",
    "quantization_config",
    // The multi-token-prediction layer, which is not loaded.
    "num_nextn_predict_layers",
    "num_mtp_layers",
    // Training, parallelism and bookkeeping only.
    "seq_aux",
    "aux_loss_alpha",
    "ep_size",
    "pretraining_tp",
    "output_router_logits",
    "router_aux_loss_coef",
    "auto_map",
];

/// A DeepSeek-V3 config.
#[derive(Debug, Clone, PartialEq)]
pub struct DeepseekV3Config {
    /// The common keys; `head_dim` is `qk_rope_head_dim` (as transformers sets it: the rotary
    /// tables' width).
    pub base: ModelConfig,
    /// The rank of q's compression (`q_a_proj`, `q_a_layernorm`, `q_b_proj`); `None`: one
    /// `q_proj`.
    pub q_lora_rank: Option<usize>,
    pub kv_lora_rank: usize,
    pub qk_nope_head_dim: usize,
    pub qk_rope_head_dim: usize,
    pub v_head_dim: usize,
    /// The released weights' rotary layout: interleaved pairs (transformers' default).
    pub rope_interleave: bool,
    pub n_routed_experts: usize,
    pub num_experts_per_tok: usize,
    pub n_group: usize,
    pub topk_group: usize,
    pub n_shared_experts: usize,
    pub moe_intermediate_size: usize,
    pub norm_topk_prob: bool,
    pub routed_scaling_factor: f32,
    /// Layers `0..first_k_dense_replace` have a dense MLP of `intermediate_size`; the others
    /// are MoE.
    pub first_k_dense_replace: usize,
    /// The attention's softmax scale (see [`softmax_scale`]).
    pub softmax_scale: f32,
}

impl DeepseekV3Config {
    pub fn from_file(path: &Path) -> std::result::Result<Self, LoadError> {
        parse_file(path, Self::from_json)
    }

    /// Whether layer `l` has routed experts.
    pub fn is_moe(&self, l: usize) -> bool {
        l >= self.first_k_dense_replace
    }

    /// Parse and validate.
    pub fn from_json(text: &str) -> std::result::Result<Self, String> {
        let mut base = ModelConfig::from_json(text)?;
        let value: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let flat = text_config(value);
        let arch = base.architecture.clone();
        check_known_keys(&arch, &flat, &DEEPSEEK_V3_KEYS)?;
        let get = |key: &str| flat.get(key).filter(|v| !v.is_null());
        let uint = |key: &str, default: usize| -> std::result::Result<usize, String> {
            match get(key) {
                None => Ok(default),
                Some(v) => v
                    .as_u64()
                    .map(|n| n as usize)
                    .ok_or_else(|| format!("{key} must be a non-negative integer, found {v}")),
            }
        };
        let positive = |key: &str, default: usize| -> std::result::Result<usize, String> {
            match uint(key, default)? {
                0 => Err(format!("{key} must be positive for {arch}")),
                n => Ok(n),
            }
        };
        let flag = |key: &str, default: bool| -> std::result::Result<bool, String> {
            match get(key) {
                None => Ok(default),
                Some(v) => v
                    .as_bool()
                    .ok_or_else(|| format!("{key} must be true or false, found {v}")),
            }
        };
        let must = |key: &str, want: Value, what: &str| -> std::result::Result<(), String> {
            match get(key) {
                None => Ok(()),
                Some(v) if *v == want => Ok(()),
                Some(v) => Err(format!(
                    "{key} = {v} is not supported for {arch}: this engine runs {what} \
                     ({key} = {want}, as DeepSeek-V3 is released)"
                )),
            }
        };
        must(
            "topk_method",
            "noaux_tc".into(),
            "group-limited routing with the correction bias",
        )?;
        must("scoring_func", "sigmoid".into(), "sigmoid routing")?;
        must("moe_layer_freq", 1.into(), "routed experts in every layer")?;

        let q_lora_rank = match get("q_lora_rank") {
            None => None,
            Some(_) => Some(positive("q_lora_rank", 0)?),
        };
        let kv_lora_rank = positive("kv_lora_rank", 512)?;
        let nope = positive("qk_nope_head_dim", 128)?;
        let rope = positive("qk_rope_head_dim", 64)?;
        let v = positive("v_head_dim", 128)?;
        if !rope.is_multiple_of(2) {
            return Err(format!("qk_rope_head_dim ({rope}) must be even"));
        }
        for (key, want) in [("head_dim", rope), ("qk_head_dim", nope + rope)] {
            let found = uint(key, want)?;
            if found != want {
                return Err(format!(
                    "{key} ({found}) must be {want} for {arch} (transformers derives it from \
                     qk_nope_head_dim and qk_rope_head_dim)"
                ));
            }
        }
        if base.num_key_value_heads != base.num_attention_heads {
            return Err(format!(
                "num_key_value_heads ({}) must equal num_attention_heads ({}) for {arch}: \
                 latent attention expands the one latent into every head",
                base.num_key_value_heads, base.num_attention_heads
            ));
        }
        base.head_dim = rope;

        let n_routed_experts = match get("n_routed_experts") {
            Some(_) => positive("n_routed_experts", 256)?,
            None => positive("num_local_experts", 256)?,
        };
        let top_k = positive("num_experts_per_tok", 8)?;
        let n_group = positive("n_group", 8)?;
        let topk_group = positive("topk_group", 4)?;
        let first_k_dense_replace = uint("first_k_dense_replace", 3)?;
        if !n_routed_experts.is_multiple_of(n_group) {
            return Err(format!(
                "n_group ({n_group}) must divide n_routed_experts ({n_routed_experts}): the \
                 experts are routed in equal groups"
            ));
        }
        let group = n_routed_experts / n_group;
        if n_group > 1 && group < 2 {
            return Err(format!(
                "n_routed_experts / n_group ({n_routed_experts} / {n_group}) must be at least 2: \
                 a group is scored by its two best experts"
            ));
        }
        if topk_group > n_group {
            return Err(format!(
                "topk_group ({topk_group}) must be at most n_group ({n_group})"
            ));
        }
        if top_k > topk_group * group {
            return Err(format!(
                "num_experts_per_tok ({top_k}) must be at most the experts of the kept groups \
                 (topk_group {topk_group} × {group})"
            ));
        }
        if first_k_dense_replace < base.num_hidden_layers && base.intermediate_size == 0 {
            return Err("intermediate_size must be positive".into());
        }
        let scaling = match get("routed_scaling_factor") {
            None => 2.5,
            Some(v) => v
                .as_f64()
                .filter(|f| f.is_finite() && *f > 0.0)
                .ok_or_else(|| {
                    format!("routed_scaling_factor must be a positive number, found {v}")
                })?,
        };
        let softmax_scale = softmax_scale(&base, &flat, nope + rope);
        Ok(Self {
            base,
            softmax_scale,
            q_lora_rank,
            kv_lora_rank,
            qk_nope_head_dim: nope,
            qk_rope_head_dim: rope,
            v_head_dim: v,
            rope_interleave: flag("rope_interleave", true)?,
            n_routed_experts,
            num_experts_per_tok: top_k,
            n_group,
            topk_group,
            n_shared_experts: uint("n_shared_experts", 1)?,
            moe_intermediate_size: positive("moe_intermediate_size", 2048)?,
            norm_topk_prob: flag("norm_topk_prob", true)?,
            routed_scaling_factor: scaling as f32,
            first_k_dense_replace,
        })
    }
}

/// The softmax scale: `1/√(nope + rope)`, times YaRN's `mscale(factor, mscale_all_dim)²` when
/// the rope is YaRN with a nonzero `mscale_all_dim` (transformers' `yarn_apply_mscale`:
/// DeepSeek scales all of q·k, not only the rotated dims), computed in f64 as Python does.
fn softmax_scale(base: &ModelConfig, flat: &Value, qk_head_dim: usize) -> f32 {
    let mut scale = (qk_head_dim as f64).powf(-0.5);
    let mscale_all_dim = ["rope_parameters", "rope_scaling"]
        .iter()
        .find_map(|k| flat.get(*k).filter(|p| p.is_object()))
        .and_then(|p| p.get("mscale_all_dim"))
        .and_then(Value::as_f64);
    if let (RopeScaling::Yarn { factor, .. }, Some(m)) = (&base.rope.scaling, mscale_all_dim)
        && m != 0.0
    {
        let mscale = if *factor <= 1.0 {
            1.0
        } else {
            0.1 * m * factor.ln() + 1.0
        };
        scale = scale * mscale * mscale;
    }
    scale as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// deepseek-ai/DeepSeek-V3's config.json as the Hub has it (auto_map shortened), with
    /// four layers instead of 61.
    const DEEPSEEK_V3: &str = r#"{
        "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": false,
        "attention_dropout": 0.0, "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config"},
        "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1,
        "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168,
        "initializer_range": 0.02, "intermediate_size": 18432, "kv_lora_rank": 512,
        "max_position_embeddings": 163840, "model_type": "deepseek_v3",
        "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8,
        "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": true,
        "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 4,
        "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
            "quant_method": "fp8", "weight_block_size": [128, 128]},
        "rms_norm_eps": 1e-06,
        "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
            "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096, "type": "yarn"},
        "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
        "seq_aux": true, "tie_word_embeddings": false, "topk_group": 4,
        "topk_method": "noaux_tc", "torch_dtype": "bfloat16", "transformers_version": "4.33.1",
        "use_cache": true, "v_head_dim": 128, "vocab_size": 129280
    }"#;

    #[test]
    fn the_released_config_parses() {
        let c = DeepseekV3Config::from_json(DEEPSEEK_V3).expect("parses");
        assert_eq!(c.q_lora_rank, Some(1536));
        assert_eq!(
            (c.kv_lora_rank, c.qk_nope_head_dim, c.qk_rope_head_dim),
            (512, 128, 64)
        );
        assert_eq!((c.n_routed_experts, c.n_group, c.topk_group), (256, 8, 4));
        assert_eq!((c.num_experts_per_tok, c.first_k_dense_replace), (8, 3));
        assert!(c.rope_interleave && c.norm_topk_prob);
        assert_eq!(c.base.head_dim, 64);
        assert!(c.base.fp8.is_some());
        // mscale == mscale_all_dim: cos/sin unscaled, the softmax scale times
        // (0.1·ln 40 + 1)², as transformers computes it.
        assert_eq!(c.base.rope.inv_freq(64).1, 1.0);
        let want = (192f64.powf(-0.5) * (0.1 * 40f64.ln() + 1.0).powi(2)) as f32;
        assert_eq!(c.softmax_scale, want);
    }

    #[test]
    fn options_we_do_not_run_are_refused_by_name() {
        for (from, to, needle) in [
            (
                r#""topk_method": "noaux_tc""#,
                r#""topk_method": "group_limited_greedy""#,
                "topk_method",
            ),
            (
                r#""scoring_func": "sigmoid""#,
                r#""scoring_func": "softmax""#,
                "scoring_func",
            ),
            (
                r#""n_group": 8"#,
                r#""n_group": 7"#,
                "n_group (7) must divide",
            ),
            (r#""n_group": 8"#, r#""n_group": 256"#, "at least 2"),
            (r#""topk_group": 4"#, r#""topk_group": 9"#, "topk_group"),
            (
                r#""num_experts_per_tok": 8"#,
                r#""num_experts_per_tok": 200"#,
                "num_experts_per_tok",
            ),
            (
                r#""moe_layer_freq": 1"#,
                r#""moe_layer_freq": 2"#,
                "moe_layer_freq",
            ),
            (
                r#""num_key_value_heads": 128"#,
                r#""num_key_value_heads": 16"#,
                "num_key_value_heads",
            ),
            (
                r#""qk_rope_head_dim": 64"#,
                r#""qk_rope_head_dim": 63"#,
                "even",
            ),
            (
                r#""kv_lora_rank": 512"#,
                r#""kv_lora_rank": 0"#,
                "kv_lora_rank",
            ),
            (
                r#""ep_size": 1"#,
                r#""ep_size": 1, "index_topk": 2048"#,
                "index_topk",
            ),
        ] {
            let text = DEEPSEEK_V3.replace(from, to);
            assert_ne!(text, DEEPSEEK_V3, "{from}");
            let e = DeepseekV3Config::from_json(&text).expect_err(to);
            assert!(e.contains(needle), "{to}: {e}");
        }
    }

    #[test]
    fn an_uncompressed_q_and_defaults_parse() {
        let text = DEEPSEEK_V3
            .replace(r#""q_lora_rank": 1536"#, r#""q_lora_rank": null"#)
            .replace(r#""norm_topk_prob": true,"#, "");
        let c = DeepseekV3Config::from_json(&text).expect("parses");
        assert_eq!(c.q_lora_rank, None);
        assert!(c.norm_topk_prob, "transformers' default");
    }
}
