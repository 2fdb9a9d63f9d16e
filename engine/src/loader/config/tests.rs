//! `config.json` parsing against real Qwen3 and Qwen3-MoE configs.

use super::*;

const QWEN3_0_6B: &str = r#"{
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
  "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
  "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936 }"#;

#[test]
fn reads_a_real_qwen3_config() {
    let c = ModelConfig::from_json(QWEN3_0_6B).expect("valid");
    assert_eq!(c.head_dim, 128);
    assert_eq!(c.num_key_value_heads, 8);
    assert!(c.tie_word_embeddings);
    assert_eq!(c.rope.theta, 1_000_000.0);
    assert_eq!(c.rope.scaling, RopeScaling::Default);
    // Qwen3-0.6B is published as 0.6B parameters (0.44B without embeddings).
    let n = c.num_parameters();
    assert!((590_000_000..610_000_000).contains(&n), "{n}");
}

#[test]
fn reads_rope_parameters_and_legacy_yarn() {
    let new = QWEN3_0_6B.replace(
        "\"rope_scaling\": null, \"rope_theta\": 1000000,",
        "\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 5000.0},",
    );
    assert_eq!(
        ModelConfig::from_json(&new).expect("valid").rope.theta,
        5000.0
    );
    let yarn = QWEN3_0_6B.replace(
        "\"rope_scaling\": null",
        "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0, \"original_max_position_embeddings\": 32768}",
    );
    let c = ModelConfig::from_json(&yarn).expect("valid");
    match c.rope.scaling {
        RopeScaling::Yarn {
            factor,
            attention_factor,
            ..
        } => {
            assert_eq!(factor, 4.0);
            assert!((attention_factor - (0.1 * 4f64.ln() + 1.0)).abs() < 1e-12);
        }
        other => panic!("expected yarn, got {other:?}"),
    }
    let (inv, scale) = c.rope.inv_freq(128);
    assert_eq!(inv.len(), 64);
    assert!(scale > 1.0);
    // The highest frequencies are extrapolated (unchanged), the lowest interpolated (÷ factor).
    assert_eq!(inv[0], 1.0);
    let plain_last = 1.0 / 1_000_000f32.powf(126.0 / 128.0);
    assert!((inv[63] - plain_last / 4.0).abs() < 1e-12);
}

#[test]
fn rejects_what_it_cannot_run_with_the_key_named() {
    let bad = QWEN3_0_6B.replace("\"num_key_value_heads\": 8", "\"num_key_value_heads\": 3");
    let e = ModelConfig::from_json(&bad).expect_err("16 heads over 3 kv heads");
    assert!(e.contains("num_key_value_heads"), "{e}");
    let bad = QWEN3_0_6B.replace(
        "\"rope_scaling\": null",
        "\"rope_scaling\": {\"rope_type\": \"dynamic\", \"factor\": 2.0}",
    );
    assert!(
        ModelConfig::from_json(&bad)
            .expect_err("dynamic")
            .contains("dynamic")
    );
    let missing = QWEN3_0_6B.replace("\"hidden_size\": 1024,", "");
    assert!(
        ModelConfig::from_json(&missing)
            .expect_err("missing")
            .contains("hidden_size")
    );
}

/// Qwen/Qwen3-30B-A3B's config.json (its FP8 release adds the quantization_config).
const QWEN3_30B_A3B: &str = r#"{
  "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
  "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
  "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 48,
  "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768,
  "norm_topk_prob": true, "num_attention_heads": 32, "num_experts": 128,
  "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
  "output_router_logits": false, "rms_norm_eps": 1e-06, "rope_scaling": null,
  "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": null,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936 }"#;

#[test]
fn reads_a_real_qwen3_moe_config_and_its_fp8_release() {
    let c = ModelConfig::from_json(QWEN3_30B_A3B).expect("valid");
    let moe = c.moe.as_ref().expect("moe");
    assert_eq!((moe.num_experts, moe.num_experts_per_tok), (128, 8));
    assert_eq!(moe.moe_intermediate_size, 768);
    assert!(moe.norm_topk_prob);
    assert!((0..48).all(|l| moe.is_sparse(l)));
    assert_eq!(c.fp8, None);
    // Published as 30.5B parameters, 3.3B of them active.
    let n = c.num_parameters();
    assert!((30_400_000_000..30_600_000_000).contains(&n), "{n}");
    let fp8 = QWEN3_30B_A3B.replace(
        r#""norm_topk_prob": true,"#,
        r#""norm_topk_prob": true, "quantization_config": {"activation_scheme": "dynamic",
           "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]},"#,
    );
    let c = ModelConfig::from_json(&fp8).expect("valid");
    assert_eq!(c.fp8.map(|q| q.block), Some([128, 128]));
    // A dense Qwen3 config ignores MoE keys it does not have.
    assert_eq!(ModelConfig::from_json(QWEN3_0_6B).expect("dense").moe, None);
}

#[test]
fn sparse_layers_follow_step_and_mlp_only_layers_and_bad_moe_keys_are_named() {
    // transformers 5 writes num_local_experts.
    let text = QWEN3_30B_A3B
        .replace(r#""num_experts": 128"#, r#""num_local_experts": 8"#)
        .replace(r#""num_experts_per_tok": 8"#, r#""num_experts_per_tok": 2"#)
        .replace(r#""decoder_sparse_step": 1"#, r#""decoder_sparse_step": 2"#)
        .replace(r#""mlp_only_layers": []"#, r#""mlp_only_layers": [3]"#);
    let c = ModelConfig::from_json(&text).expect("valid");
    let moe = c.moe.as_ref().expect("moe");
    assert_eq!(moe.num_experts, 8);
    let sparse: Vec<usize> = (0..8).filter(|&l| moe.is_sparse(l)).collect();
    assert_eq!(sparse, vec![1, 5, 7]);
    for (from, to, needle) in [
        (
            r#""num_experts_per_tok": 8"#,
            r#""num_experts_per_tok": 129"#,
            "num_experts_per_tok",
        ),
        (
            r#""decoder_sparse_step": 1"#,
            r#""decoder_sparse_step": 0"#,
            "decoder_sparse_step",
        ),
        (r#""num_experts": 128,"#, "", "num_experts"),
        (
            r#""moe_intermediate_size": 768,"#,
            "",
            "moe_intermediate_size",
        ),
        (
            r#""rope_scaling": null"#,
            r#""rope_scaling": null, "quantization_config": {"quant_method": "gptq"}"#,
            "gptq",
        ),
    ] {
        let e = ModelConfig::from_json(&QWEN3_30B_A3B.replace(from, to)).expect_err(needle);
        assert!(e.contains(needle), "{needle}: {e}");
    }
}

#[test]
fn generation_config_eos_forms() {
    let g = GenerationConfig::from_json(
        r#"{"eos_token_id": [151645, 151643], "temperature": 0.6, "top_k": 20}"#,
    )
    .expect("valid");
    assert_eq!(g.eos_token_ids, vec![151645, 151643]);
    assert_eq!(g.top_k, Some(20));
    let g = GenerationConfig::from_json(r#"{"eos_token_id": 7}"#).expect("valid");
    assert_eq!(g.eos_token_ids, vec![7]);
    assert!(GenerationConfig::from_json(r#"{"eos_token_id": "x"}"#).is_err());
}
