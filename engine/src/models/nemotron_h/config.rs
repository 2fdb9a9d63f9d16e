//! The config of Nemotron-H (`NemotronHForCausalLM`): [`ModelConfig`]'s keys for the attention
//! layers plus the layer pattern and the Mamba-2 layers'. The pattern is the released
//! checkpoints' `hybrid_override_pattern` (`M` Mamba-2, `*` attention, `-` MLP, `E` MoE) or
//! transformers 5's `layers_block_type` list, which wins where both are given, as in
//! transformers. The Mamba keys are read under their names and the older `mamba_*` ones
//! (`mamba_n_groups`, `mamba_d_conv`, `mamba_conv_bias`, `mamba_dt_limit`, ...), with
//! transformers 5.25's `NemotronHConfig` defaults. A key that could change the forward and that
//! this file does not know is refused by name. The MoE layers' keys (Nemotron 3: `E` layers,
//! [`MoeConfig`]) are read where the pattern has one; the latent projection of
//! `moe_latent_size` (not in Nemotron 3 Nano) is refused by name.

use std::path::Path;

use serde_json::Value;

use crate::backend::{SigmoidRouting, SsmHeads};
use crate::loader::config::{float_of, parse_file, parse_json, text_config};
use crate::loader::{LoadError, ModelConfig};
use crate::models::llama::check_known_keys;

/// The keys of a Nemotron-H config beyond [`crate::models::llama::HARMLESS_KEYS`].
const NEMOTRON_H_KEYS: [&str; 62] = [
    "hybrid_override_pattern",
    "layers_block_type",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "attention_head_dim",
    "attention_bias",
    "intermediate_size",
    "mlp_hidden_act",
    "mlp_bias",
    "use_bias",
    "layer_norm_epsilon",
    "mamba_num_heads",
    "mamba_head_dim",
    "ssm_state_size",
    "n_groups",
    "mamba_n_groups",
    "conv_kernel",
    "mamba_d_conv",
    "use_conv_bias",
    "mamba_conv_bias",
    "mamba_hidden_act",
    "time_step_limit",
    "mamba_dt_limit",
    "sliding_window",
    "quantization_config",
    // Unused by transformers' forward: the scan's chunking (numerics only, this engine runs
    // the exact recurrence), the f32 residual and state cache (the CPU computes in f32), the
    // width `mamba_num_heads · mamba_head_dim` already gives, and a bias flag it never reads.
    "chunk_size",
    "mamba_chunk_size",
    "residual_in_fp32",
    "mamba_ssm_cache_dtype",
    "expand",
    "mamba_expand",
    "mamba_proj_bias",
    "num_logits_to_keep",
    "use_mamba_kernels",
    // Nemotron-H attention has no rotary embedding: transformers reads none of these.
    "rope_theta",
    "rope_scaling",
    // The MoE layers' settings ([`MoeConfig`]); `moe_shared_expert_overlap` only schedules
    // the shared expert beside the routed ones and `n_shared_experts` is never read (the
    // shared expert's width is `moe_shared_expert_intermediate_size`), in transformers too;
    // the MTP head's (not loaded).
    "n_routed_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "moe_shared_expert_intermediate_size",
    "moe_latent_size",
    "moe_shared_expert_overlap",
    "n_group",
    "topk_group",
    "norm_topk_prob",
    "routed_scaling_factor",
    "n_shared_experts",
    "output_router_logits",
    "num_nextn_predict_layers",
    "mtp_layers_block_type",
    "mtp_hybrid_override_pattern",
    // Initialisation and training only.
    "time_step_min",
    "time_step_max",
    "time_step_floor",
    "time_step_rank",
    "mamba_dt_min",
    "mamba_dt_max",
    "mamba_dt_init_floor",
    "rescale_prenorm_residual",
    "hidden_dropout",
    "auto_map",
];

/// What one decoder layer mixes with (its letter in `hybrid_override_pattern`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockType {
    /// `M`: a Mamba-2 layer.
    Mamba,
    /// `*`: GQA attention without rotary embedding.
    Attention,
    /// `-`: a relu² MLP.
    Mlp,
    /// `E`: routed relu² experts and a shared one ([`MoeConfig`]).
    Moe,
}

/// The MoE layers' settings, with transformers 5.25's defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoeConfig {
    /// `n_routed_experts` (8).
    pub experts: usize,
    /// Each routed expert's width (`moe_intermediate_size`, 7688).
    pub intermediate: usize,
    /// The shared expert's width (`moe_shared_expert_intermediate_size`, 7688).
    pub shared_intermediate: usize,
    /// `num_experts_per_tok` (2), `norm_topk_prob` (true), `routed_scaling_factor` (1.0),
    /// `n_group` (1) and `topk_group` (1).
    pub routing: SigmoidRouting,
}

/// A Nemotron-H config.
#[derive(Debug, Clone, PartialEq)]
pub struct NemotronHConfig {
    /// The attention and MLP keys (`rms_norm_eps` is `layer_norm_epsilon`, which transformers
    /// reads; `head_dim` and `num_key_value_heads` default to transformers' 128 and 8).
    pub base: ModelConfig,
    pub layers: Vec<BlockType>,
    pub ssm: SsmHeads,
    /// Depthwise conv taps (`conv_kernel`).
    pub conv_kernel: usize,
    /// Whether the conv has a bias (`use_conv_bias`).
    pub conv_bias: bool,
    /// The range `dt` is clamped to (`time_step_limit`).
    pub dt_limit: (f32, f32),
    /// The MoE layers' settings, when the pattern has any.
    pub moe: Option<MoeConfig>,
}

impl NemotronHConfig {
    pub fn from_file(path: &Path) -> std::result::Result<Self, LoadError> {
        parse_file(path, Self::from_json)
    }

    /// Parse and validate.
    pub fn from_json(text: &str) -> std::result::Result<Self, String> {
        let mut base = ModelConfig::from_json(text)?;
        let flat = text_config(parse_json(text)?);
        let arch = base.architecture.clone();
        check_known_keys(&arch, &flat, &NEMOTRON_H_KEYS)?;
        // The first of `keys` that is set (a name and its older spelling).
        let get = |keys: &[&str]| {
            keys.iter()
                .find_map(|k| flat.get(*k).filter(|v| !v.is_null()))
        };
        let uint = |keys: &[&str], default: usize| -> std::result::Result<usize, String> {
            match get(keys) {
                None => Ok(default),
                Some(v) => match v.as_u64() {
                    Some(n) => Ok(n as usize),
                    None => Err(format!(
                        "{} must be a non-negative integer, found {v}",
                        keys[0]
                    )),
                },
            }
        };
        let flag = |keys: &[&str], default: bool| -> std::result::Result<bool, String> {
            match get(keys) {
                None => Ok(default),
                Some(v) => v
                    .as_bool()
                    .ok_or_else(|| format!("{} must be true or false, found {v}", keys[0])),
            }
        };
        let must = |key: &str, want: Value, what: &str| -> std::result::Result<(), String> {
            match get(&[key]) {
                Some(v) if *v != want => Err(format!(
                    "{key} = {v} is not supported for {arch}: this engine runs {what} \
                     ({key} = {want}, as released)"
                )),
                _ => Ok(()),
            }
        };
        must("mlp_hidden_act", "relu2".into(), "relu² MLPs")?;
        must("mamba_hidden_act", "silu".into(), "the SiLU after the conv")?;
        must("mlp_bias", false.into(), "MLPs without biases")?;
        must("use_bias", false.into(), "Mamba projections without biases")?;
        must("sliding_window", Value::Null, "full attention")?;

        let layers = parse_layers(
            get(&["layers_block_type"]),
            get(&["hybrid_override_pattern"]),
        )?;
        if layers.len() != base.num_hidden_layers {
            return Err(format!(
                "the layer pattern has {} layers but num_hidden_layers is {}",
                layers.len(),
                base.num_hidden_layers
            ));
        }
        if !layers.contains(&BlockType::Attention) {
            return Err(format!(
                "{arch} without an attention layer ('*' in hybrid_override_pattern) is not \
                 supported: the engine sizes its cache by the attention layers (every released \
                 Nemotron-H has some)"
            ));
        }

        // transformers' defaults where the config is silent (not hidden / heads).
        base.head_dim = uint(&["head_dim", "attention_head_dim"], 128)?;
        base.num_key_value_heads = uint(&["num_key_value_heads"], 8)?;
        if let Some(eps) = get(&["layer_norm_epsilon"]) {
            base.rms_norm_eps = eps
                .as_f64()
                .ok_or_else(|| format!("layer_norm_epsilon must be a number, found {eps}"))?
                as f32;
        }
        let (nh, nkv) = (base.num_attention_heads, base.num_key_value_heads);
        if base.head_dim == 0 || nkv == 0 || !nh.is_multiple_of(nkv) {
            return Err(format!(
                "num_attention_heads ({nh}) must be a positive multiple of num_key_value_heads \
                 ({nkv}), and head_dim ({}) positive",
                base.head_dim
            ));
        }

        let ssm = SsmHeads {
            heads: uint(&["mamba_num_heads"], 128)?,
            head_dim: uint(&["mamba_head_dim"], 64)?,
            groups: uint(&["n_groups", "mamba_n_groups"], 8)?,
            state: uint(&["ssm_state_size"], 128)?,
        };
        if ssm.heads == 0
            || ssm.head_dim == 0
            || ssm.state == 0
            || ssm.groups == 0
            || !ssm.heads.is_multiple_of(ssm.groups)
        {
            return Err(format!(
                "mamba_num_heads ({}) must be a positive multiple of n_groups ({}), and \
                 mamba_head_dim ({}) and ssm_state_size ({}) positive",
                ssm.heads, ssm.groups, ssm.head_dim, ssm.state
            ));
        }
        let conv_kernel = uint(&["conv_kernel", "mamba_d_conv"], 4)?;
        if conv_kernel < 2 {
            return Err(format!(
                "conv_kernel ({conv_kernel}) must be at least 2: the state pool keeps the last \
                 conv_kernel − 1 inputs of each sequence"
            ));
        }
        let dt_limit = match get(&["time_step_limit", "mamba_dt_limit"]) {
            None => (0.0, f32::INFINITY),
            Some(v) => match v
                .as_array()
                .map(|a| a.iter().map(float_of).collect::<Vec<_>>())
            {
                Some(l) if l.len() == 2 && l.iter().all(|x| x.is_some_and(|x| !x.is_nan())) => {
                    let (lo, hi) = (l[0].unwrap_or(0.0), l[1].unwrap_or(0.0));
                    if lo > hi {
                        return Err(format!("time_step_limit {v} is not a [low, high] range"));
                    }
                    (lo as f32, hi as f32)
                }
                _ => {
                    return Err(format!(
                        "time_step_limit must be two numbers [low, high], found {v}"
                    ));
                }
            },
        };
        let moe = match layers.contains(&BlockType::Moe) {
            false => None,
            true => {
                let number = |key: &str, default: f64| -> std::result::Result<f64, String> {
                    match get(&[key]) {
                        None => Ok(default),
                        Some(v) => v
                            .as_f64()
                            .ok_or_else(|| format!("{key} must be a number, found {v}")),
                    }
                };
                must(
                    "moe_latent_size",
                    Value::Null,
                    "experts on the hidden state",
                )?;
                let routing = SigmoidRouting {
                    n_group: uint(&["n_group"], 1)?,
                    topk_group: uint(&["topk_group"], 1)?,
                    ..SigmoidRouting::ungrouped(
                        uint(&["num_experts_per_tok"], 2)?,
                        flag(&["norm_topk_prob"], true)?,
                        number("routed_scaling_factor", 1.0)? as f32,
                    )
                };
                let moe = MoeConfig {
                    experts: uint(&["n_routed_experts"], 8)?,
                    intermediate: uint(&["moe_intermediate_size"], 7688)?,
                    shared_intermediate: uint(&["moe_shared_expert_intermediate_size"], 7688)?,
                    routing,
                };
                check_moe(&moe)?;
                Some(moe)
            }
        };
        Ok(Self {
            base,
            layers,
            ssm,
            conv_kernel,
            conv_bias: flag(&["use_conv_bias", "mamba_conv_bias"], true)?,
            dt_limit,
            moe,
        })
    }
}

/// That the routing fits the experts as transformers' `NemotronHTopkRouter` needs: `n_group`
/// groups that divide them, each of at least two (a group's score is its top two),
/// `1 <= topk_group <= n_group`, and `num_experts_per_tok` within the kept groups' experts;
/// and that the widths are positive.
fn check_moe(m: &MoeConfig) -> std::result::Result<(), String> {
    let r = m.routing;
    let (e, g, kg, k) = (m.experts, r.n_group, r.topk_group, r.top_k);
    if e == 0 || m.intermediate == 0 || m.shared_intermediate == 0 {
        return Err(format!(
            "n_routed_experts ({e}), moe_intermediate_size ({}) and \
             moe_shared_expert_intermediate_size ({}) must be positive",
            m.intermediate, m.shared_intermediate
        ));
    }
    let groups_fit = g >= 1 && e.is_multiple_of(g) && (g == 1 || e / g >= 2);
    if !groups_fit || !(1..=g).contains(&kg) || k == 0 || k > kg * (e / g.max(1)) {
        return Err(format!(
            "n_group = {g}, topk_group = {kg} and num_experts_per_tok = {k} do not fit \
             n_routed_experts = {e}: the groups must divide the experts (at least 2 a group), \
             1 <= topk_group <= n_group, and 1 <= num_experts_per_tok <= the kept groups' experts"
        ));
    }
    Ok(())
}

/// The layer kinds from transformers 5's list (which wins, as in transformers) or the
/// released pattern; an entry this engine does not run is named with its layer.
fn parse_layers(
    list: Option<&Value>,
    pattern: Option<&Value>,
) -> std::result::Result<Vec<BlockType>, String> {
    if let Some(list) = list {
        let Some(list) = list.as_array() else {
            return Err(format!("layers_block_type must be a list, found {list}"));
        };
        return list
            .iter()
            .enumerate()
            .map(|(l, t)| match t.as_str() {
                Some("linear_attention" | "mamba") => Ok(BlockType::Mamba),
                Some("full_attention" | "attention") => Ok(BlockType::Attention),
                Some("mlp") => Ok(BlockType::Mlp),
                Some("moe") => Ok(BlockType::Moe),
                _ => Err(format!(
                    "layers_block_type[{l}] = {t} is not a layer type (expected \
                     \"linear_attention\", \"full_attention\", \"mlp\" or \"moe\")"
                )),
            })
            .collect();
    }
    let Some(pattern) = pattern else {
        return Err(
            "the config has neither hybrid_override_pattern nor layers_block_type: \
                    which layers are Mamba-2, attention, MLP or MoE is unknown"
                .into(),
        );
    };
    let Some(pattern) = pattern.as_str() else {
        return Err(format!(
            "hybrid_override_pattern must be a string, found {pattern}"
        ));
    };
    pattern
        .chars()
        .enumerate()
        .map(|(l, c)| match c {
            'M' => Ok(BlockType::Mamba),
            '*' => Ok(BlockType::Attention),
            '-' => Ok(BlockType::Mlp),
            'E' => Ok(BlockType::Moe),
            other => Err(format!(
                "hybrid_override_pattern {pattern:?} has {other:?} at layer {l}, which is not a \
                 layer type (expected 'M' Mamba-2, '*' attention, '-' MLP or 'E' MoE)"
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests;
