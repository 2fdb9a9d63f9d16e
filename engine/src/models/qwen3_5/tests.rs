use super::*;

const BASE: &str = r#""architectures": ["Qwen3_5ForCausalLM"], "vocab_size": 64,
    "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 4,
    "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
    "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "linear_num_key_heads": 2,
    "linear_num_value_heads": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 8"#;

fn parse(extra: &str) -> std::result::Result<Qwen3_5Config, String> {
    Qwen3_5Config::from_json(&format!("{{{BASE}{extra}}}"))
}

#[test]
fn rope_parameters_and_the_older_top_level_keys_give_the_same_partial_rope() {
    let new = parse(
        r#", "rope_parameters": {"rope_type": "default", "rope_theta": 5000.0,
            "partial_rotary_factor": 0.25}"#,
    )
    .expect("transformers 5");
    let old = parse(r#", "rope_theta": 5000.0, "partial_rotary_factor": 0.25"#).expect("older");
    assert_eq!(new.base.rope, old.base.rope);
    let (inv_freq, _) = new.base.rope.inv_freq(16);
    assert_eq!(
        inv_freq.len(),
        2,
        "a quarter of 16 channels rotate: 2 pairs"
    );
    assert!((inv_freq[1] - 1.0 / 5000f32.powf(0.5)).abs() < 1e-9);
}

#[test]
fn layer_types_default_to_every_fourth_layer_full_attention() {
    use LayerType::{FullAttention as F, LinearAttention as L};
    let c = parse("").expect("defaults");
    assert_eq!(c.layer_types, [L, L, L, F]);
    assert_eq!(c.conv_kernel, 4);
    let c = parse(r#", "full_attention_interval": 2"#).expect("interval");
    assert_eq!(c.layer_types, [L, F, L, F]);
    let c = parse(
        r#", "layer_types": ["full_attention", "linear_attention", "linear_attention",
            "full_attention"]"#,
    )
    .expect("explicit");
    assert_eq!(c.layer_types, [F, L, L, F]);
    assert_eq!(c.conv_dim(), 2 * 2 * 8 + 4 * 8);
}

#[test]
fn bad_layer_types_and_head_counts_are_refused_by_name() {
    let e = parse(
        r#", "layer_types": ["mamba", "full_attention", "full_attention", "full_attention"]"#,
    )
    .expect_err("unknown type");
    assert!(e.contains("\"mamba\""), "{e}");
    let e = parse(r#", "layer_types": ["full_attention"]"#).expect_err("too few");
    assert!(e.contains("num_hidden_layers = 4"), "{e}");
    let three = BASE.replace(
        r#""linear_num_value_heads": 4"#,
        r#""linear_num_value_heads": 3"#,
    );
    let e = Qwen3_5Config::from_json(&format!("{{{three}}}")).expect_err("heads");
    assert!(e.contains("multiple of"), "{e}");
}

/// The MoE model's config: no dense `intermediate_size`, every layer sparse with the top-k
/// renormalised, and the shared expert's width required; the Hub's layout reads the same keys
/// from `text_config` and puts the weights under `model.language_model`.
#[test]
fn moe_and_the_hub_layout_are_read_from_their_keys() {
    let moe = BASE
        .replace("Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM")
        .replace(r#""intermediate_size": 64, "#, "");
    let experts = r#", "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 8"#;
    let e = Qwen3_5Config::from_json(&format!("{{{moe}{experts}}}")).expect_err("no shared");
    assert!(e.contains("shared_expert_intermediate_size"), "{e}");
    let text = format!(r#"{{{moe}{experts}, "shared_expert_intermediate_size": 12}}"#);
    let c = Qwen3_5Config::from_json(&text).expect("moe");
    let m = c.base.moe.as_ref().expect("sparse");
    assert!(m.norm_topk_prob && (0..4).all(|l| m.is_sparse(l)));
    assert_eq!(
        (c.shared_expert_intermediate_size, c.weight_prefix),
        (Some(12), "model")
    );
    let inner = text.replace(r#""architectures": ["Qwen3_5MoeForCausalLM"], "#, "");
    let hub = format!(
        r#"{{"architectures": ["Qwen3_5MoeForConditionalGeneration"], "text_config": {inner},
            "vision_config": {{"depth": 1}}}}"#
    );
    let h = Qwen3_5Config::from_json(&hub).expect("hub layout");
    assert_eq!(h.weight_prefix, "model.language_model");
    assert_eq!(h.base.architecture, "Qwen3_5MoeForConditionalGeneration");
    assert_eq!((h.base.moe, h.linear), (c.base.moe, c.linear));
}
