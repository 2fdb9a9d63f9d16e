use super::*;

/// A config of NVIDIA-Nemotron-Nano-9B-v2's shape in the released checkpoints' spelling (the
/// pattern string, `rms_norm_eps` beside `layer_norm_epsilon`, Python's bare `Infinity`).
const NANO_9B_V2: &str = r#"{
    "architectures": ["NemotronHForCausalLM"], "attention_bias": false,
    "attention_dropout": 0.0, "attention_head_dim": 128, "bos_token_id": 1, "chunk_size": 128,
    "conv_kernel": 4, "eos_token_id": 12, "head_dim": 128, "hidden_dropout": 0.0,
    "hidden_size": 4480,
    "hybrid_override_pattern": "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-",
    "initializer_range": 0.02, "intermediate_size": 15680, "layer_norm_epsilon": 1e-05,
    "mamba_head_dim": 80, "mamba_hidden_act": "silu", "mamba_num_heads": 128,
    "mamba_proj_bias": false, "max_position_embeddings": 131072, "mlp_bias": false,
    "mlp_hidden_act": "relu2", "model_type": "nemotron_h", "n_groups": 8,
    "num_attention_heads": 40, "num_hidden_layers": 56, "num_key_value_heads": 8,
    "num_logits_to_keep": 1, "pad_token_id": 0, "rescale_prenorm_residual": true,
    "residual_in_fp32": false, "rms_norm_eps": 1e-05, "sliding_window": null,
    "ssm_state_size": 128, "tie_word_embeddings": false, "time_step_floor": 0.0001,
    "time_step_limit": [0.0, Infinity], "time_step_max": 0.1, "time_step_min": 0.001,
    "torch_dtype": "bfloat16", "use_bias": false, "use_cache": true, "use_conv_bias": true,
    "use_mamba_kernels": true, "vocab_size": 131072
}"#;

#[test]
fn the_released_layout_parses() {
    let c = NemotronHConfig::from_json(NANO_9B_V2).expect("parses");
    assert_eq!(c.layers.len(), 56);
    let count = |k| c.layers.iter().filter(|&&t| t == k).count();
    assert_eq!(
        (
            count(BlockType::Mamba),
            count(BlockType::Attention),
            count(BlockType::Mlp)
        ),
        (27, 4, 25)
    );
    assert_eq!(
        c.ssm,
        SsmHeads {
            heads: 128,
            head_dim: 80,
            groups: 8,
            state: 128
        }
    );
    assert_eq!(c.ssm.conv_dim(), 128 * 80 + 2 * 8 * 128);
    assert_eq!((c.conv_kernel, c.conv_bias), (4, true));
    assert_eq!(c.dt_limit, (0.0, f32::INFINITY));
    assert_eq!((c.base.head_dim, c.base.num_key_value_heads), (128, 8));
    assert_eq!(c.base.rms_norm_eps, 1e-5);
}

/// What transformers 5 writes: `layers_block_type` instead of the pattern, no
/// `num_hidden_layers` or `rms_norm_eps`, `{"__float__": "Infinity"}`, the MoE defaults.
#[test]
fn transformers_5s_layout_reads_the_same() {
    let t5 = NANO_9B_V2
        .replace(
            r#""hybrid_override_pattern": "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-","#,
            "",
        )
        .replace(r#""num_hidden_layers": 56, "#, "")
        .replace(r#""rms_norm_eps": 1e-05, "#, "")
        .replace("Infinity", r#"{"__float__": "Infinity"}"#)
        .replace(
            r#""vocab_size": 131072"#,
            r#""vocab_size": 131072, "n_routed_experts": 8, "moe_latent_size": null,
               "mtp_layers_block_type": ["full_attention", "moe"], "layers_block_type": LIST"#,
        );
    let names: Vec<String> = "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-"
        .chars()
        .map(|c| {
            match c {
                'M' => "\"linear_attention\"",
                '*' => "\"full_attention\"",
                _ => "\"mlp\"",
            }
            .to_string()
        })
        .collect();
    let t5 = t5.replace("LIST", &format!("[{}]", names.join(", ")));
    let a = NemotronHConfig::from_json(&t5).expect("transformers 5");
    let b = NemotronHConfig::from_json(NANO_9B_V2).expect("released");
    assert_eq!(a, b);
}

#[test]
fn what_this_engine_does_not_run_is_refused_by_name() {
    for (from, to, needle) in [
        ("M-M-M-MM-", "M-X-M-MM-", "'X' at layer 2"),
        (
            r#""num_hidden_layers": 56"#,
            r#""num_hidden_layers": 55"#,
            "num_hidden_layers is 55",
        ),
        (
            r#""mlp_hidden_act": "relu2""#,
            r#""mlp_hidden_act": "silu""#,
            "mlp_hidden_act",
        ),
        (r#""mlp_bias": false"#, r#""mlp_bias": true"#, "mlp_bias"),
        (r#""use_bias": false"#, r#""use_bias": true"#, "use_bias"),
        (
            r#""sliding_window": null"#,
            r#""sliding_window": 64"#,
            "sliding_window",
        ),
        (r#""n_groups": 8"#, r#""n_groups": 3"#, "n_groups"),
        (
            r#""conv_kernel": 4"#,
            r#""conv_kernel": 1"#,
            "conv_kernel (1)",
        ),
        (r#"[0.0, Infinity]"#, r#"[0.0]"#, "time_step_limit"),
        (
            r#""use_cache": true"#,
            r#""use_cache": true, "mamba_rmsnorm": true"#,
            "mamba_rmsnorm",
        ),
    ] {
        assert!(NANO_9B_V2.contains(from), "{from}");
        let e = NemotronHConfig::from_json(&NANO_9B_V2.replace(from, to)).expect_err(to);
        assert!(e.contains(needle), "{to}: {e}");
    }
    let all_mamba = NANO_9B_V2.replace('*', "M");
    let e = NemotronHConfig::from_json(&all_mamba).expect_err("no attention");
    assert!(e.contains("without an attention layer"), "{e}");
}

/// The older `mamba_*` spellings, and transformers' defaults for what the config leaves out.
#[test]
fn legacy_keys_and_defaults() {
    let legacy = NANO_9B_V2
        .replace(r#""n_groups": 8"#, r#""mamba_n_groups": 4"#)
        .replace(r#""conv_kernel": 4"#, r#""mamba_d_conv": 3"#)
        .replace("[0.0, Infinity]", "[0.001, 0.5]")
        .replace("time_step_limit", "mamba_dt_limit")
        .replace(r#""use_conv_bias": true"#, r#""mamba_conv_bias": false"#)
        .replace(r#""attention_head_dim": 128, "#, "")
        .replace(r#""head_dim": 128, "#, "")
        .replace(r#""num_key_value_heads": 8, "#, "");
    let c = NemotronHConfig::from_json(&legacy).expect("legacy");
    assert_eq!((c.ssm.groups, c.conv_kernel, c.conv_bias), (4, 3, false));
    assert_eq!(c.dt_limit, (0.001, 0.5));
    // transformers' defaults, not hidden / heads (112) and heads (40)
    assert_eq!((c.base.head_dim, c.base.num_key_value_heads), (128, 8));
}

/// MoE layers (`E`, Nemotron 3) with the released keys, and transformers' defaults for what
/// the config leaves out.
#[test]
fn moe_layers_read_their_settings() {
    let moe = NANO_9B_V2.replace("M-M-M-MM-", "MEMEM-MM-").replace(
        r#""vocab_size": 131072"#,
        r#""vocab_size": 131072, "n_routed_experts": 128, "num_experts_per_tok": 6,
           "moe_intermediate_size": 1856, "moe_shared_expert_intermediate_size": 3712,
           "n_group": 1, "topk_group": 1, "norm_topk_prob": true, "routed_scaling_factor": 2.5,
           "n_shared_experts": 1, "moe_latent_size": null, "moe_shared_expert_overlap": false"#,
    );
    let c = NemotronHConfig::from_json(&moe).expect("parses");
    assert_eq!(
        &c.layers[..3],
        &[BlockType::Mamba, BlockType::Moe, BlockType::Mamba]
    );
    assert_eq!(
        c.moe,
        Some(MoeConfig {
            experts: 128,
            intermediate: 1856,
            shared_intermediate: 3712,
            routing: SigmoidRouting::ungrouped(6, true, 2.5),
        })
    );
    // Without the keys: 8 experts, top 2, widths 7688, one group, no scaling.
    let bare = NANO_9B_V2.replace("M-M-M-MM-", "MEMEM-MM-");
    let m = NemotronHConfig::from_json(&bare)
        .expect("parses")
        .moe
        .expect("moe");
    assert_eq!(
        (m.experts, m.intermediate, m.shared_intermediate),
        (8, 7688, 7688)
    );
    assert_eq!(m.routing, SigmoidRouting::ungrouped(2, true, 1.0));
    // No MoE layer, no MoE settings, whatever keys are set.
    assert_eq!(
        NemotronHConfig::from_json(NANO_9B_V2).expect("parses").moe,
        None
    );
    // transformers 5's list spells it "moe".
    let list = serde_json::json!(["mamba", "moe", "full_attention"]);
    assert_eq!(
        parse_layers(Some(&list), None).expect("parses"),
        [BlockType::Mamba, BlockType::Moe, BlockType::Attention]
    );

    for (from, to, needle) in [
        (
            r#""moe_latent_size": null"#,
            r#""moe_latent_size": 1024"#,
            "moe_latent_size = 1024",
        ),
        (r#""n_group": 1"#, r#""n_group": 3"#, "n_group = 3"),
        (r#""topk_group": 1"#, r#""topk_group": 2"#, "topk_group = 2"),
        (
            r#""num_experts_per_tok": 6"#,
            r#""num_experts_per_tok": 0"#,
            "num_experts_per_tok = 0",
        ),
        (
            r#""moe_intermediate_size": 1856"#,
            r#""moe_intermediate_size": 0"#,
            "moe_intermediate_size (0)",
        ),
        (
            r#""routed_scaling_factor": 2.5"#,
            r#""routed_scaling_factor": "x""#,
            "routed_scaling_factor must be a number",
        ),
    ] {
        assert!(moe.contains(from), "{from}");
        let e = NemotronHConfig::from_json(&moe.replace(from, to)).expect_err(to);
        assert!(e.contains(needle), "{to}: {e}");
    }
}
