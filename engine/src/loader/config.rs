//! `config.json` and `generation_config.json` of a Hugging Face checkpoint.
//!
//! Only what the model families we run need is read; unknown keys are ignored. Rotary settings
//! are read from transformers 5's `rope_parameters` as well as the older top-level
//! `rope_theta` + `rope_scaling`, since checkpoints on the Hub carry either. Qwen3-MoE's keys
//! become [`MoeConfig`]; a `quantization_config` becomes [`Fp8Config`] (see `fp8.rs`) or
//! [`Nvfp4Config`] (`nvfp4.rs`).

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::LoadError;
use super::fp8::Fp8Config;
use super::mxfp4::Mxfp4Config;
use super::nvfp4::Nvfp4Config;

mod json;

pub use json::{float_of, parse_json};

/// Qwen3.5's mixture-of-experts architectures: every layer's MLP is sparse, with a shared
/// expert, and no dense `intermediate_size`.
const QWEN3_5_MOE: [&str; 2] = [
    "Qwen3_5MoeForCausalLM",
    "Qwen3_5MoeForConditionalGeneration",
];

/// gpt-oss, the one architecture with biased attention projections and MXFP4 experts.
const GPT_OSS: &str = "GptOssForCausalLM";

/// A multimodal config (`text_config` nested, as the Hub's Qwen3.5 checkpoints have) as the
/// text model's flat config: `text_config`'s keys, with the top level's `architectures` and
/// `tie_word_embeddings` (where the wrapper keeps them). Other configs are returned as they are.
pub fn text_config(mut v: Value) -> Value {
    let Some(Value::Object(mut text)) = v.get_mut("text_config").map(Value::take) else {
        return v;
    };
    for key in [
        "architectures",
        "tie_word_embeddings",
        "quantization_config",
    ] {
        if let Some(x) = v.get(key) {
            text.insert(key.to_string(), x.clone());
        }
    }
    Value::Object(text)
}

/// The Qwen3 configuration, dense (`Qwen3ForCausalLM`) or mixture-of-experts
/// (`Qwen3MoeForCausalLM`, with `moe`).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub architecture: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub max_position_embeddings: usize,
    pub rms_norm_eps: f32,
    pub tie_word_embeddings: bool,
    pub rope: RopeConfig,
    /// The dtype the checkpoint was saved in (`torch_dtype` / `dtype`), if stated.
    pub dtype: Option<String>,
    /// Sparse MLP layers (`Qwen3MoeForCausalLM`); `None` for a dense model.
    pub moe: Option<MoeConfig>,
    /// Fine-grained FP8 weights (`quantization_config.quant_method = "fp8"`).
    pub fp8: Option<Fp8Config>,
    /// NVFP4 weights (`quant_method` `"modelopt"` or `"compressed-tensors"`).
    pub nvfp4: Option<Nvfp4Config>,
}

/// A `quantization_config`, validated: FP8 or NVFP4, or an error naming the key and the fix.
/// MXFP4 (gpt-oss's experts) is valid and gives neither: its tensors name themselves
/// (`_blocks`, `_scales`) and the model reads them (`mxfp4.rs`).
pub fn parse_quantization(q: &Value) -> Result<(Option<Fp8Config>, Option<Nvfp4Config>), String> {
    if let Some(mxfp4) = Mxfp4Config::from_json(q) {
        return mxfp4.map(|_| (None, None));
    }
    match Nvfp4Config::from_json(q) {
        Some(nvfp4) => nvfp4.map(|c| (None, Some(c))),
        None => Fp8Config::from_json(q).map(|c| (Some(c), None)),
    }
}

/// The `quantization_config` of the checkpoint in `dir` (top level, or beside a multimodal
/// `text_config`), if its `config.json` has one.
pub fn quantization_of_model_dir(
    dir: &Path,
) -> Result<(Option<Fp8Config>, Option<Nvfp4Config>), LoadError> {
    let path = dir.join("config.json");
    if !path.is_file() {
        return Ok((None, None));
    }
    parse_file(&path, |text| {
        let v = parse_json(text)?;
        match v.get("quantization_config") {
            None | Some(Value::Null) => Ok((None, None)),
            Some(q) => parse_quantization(q),
        }
    })
}

/// Qwen3-MoE's sparse MLP blocks: which layers have them and how tokens are routed.
#[derive(Debug, Clone, PartialEq)]
pub struct MoeConfig {
    /// `num_experts` (Hub configs) or `num_local_experts` (what transformers 5 writes).
    pub num_experts: usize,
    /// Experts each token is routed to (top-k).
    pub num_experts_per_tok: usize,
    /// Each expert's intermediate size (dense layers use `intermediate_size`).
    pub moe_intermediate_size: usize,
    /// Renormalise the top-k routing weights to sum to one.
    pub norm_topk_prob: bool,
    /// Layer `l` is sparse when `(l + 1) % decoder_sparse_step == 0` ...
    pub decoder_sparse_step: usize,
    /// ... and it is not listed here.
    pub mlp_only_layers: Vec<usize>,
}

impl MoeConfig {
    /// Whether layer `l` has a sparse (mixture-of-experts) MLP, as transformers decides it.
    pub fn is_sparse(&self, layer: usize) -> bool {
        !self.mlp_only_layers.contains(&layer)
            && (layer + 1).is_multiple_of(self.decoder_sparse_step)
    }
}

/// Rotary embedding: base, scaling kind and the derived per-pair inverse frequencies.
#[derive(Debug, Clone, PartialEq)]
pub struct RopeConfig {
    pub theta: f64,
    pub scaling: RopeScaling,
    /// Fraction of `head_dim` that is rotated (1.0 for Qwen3).
    pub partial_rotary_factor: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    /// Plain RoPE.
    Default,
    /// Positions divided by `factor`.
    Linear { factor: f64 },
    /// Llama 3.1's: long wavelengths divided by `factor`, short ones kept, a smooth ramp
    /// between (`low_freq_factor`, `high_freq_factor` of the original context).
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position_embeddings: usize,
    },
    /// YaRN (what Qwen3 documents for contexts beyond its native length).
    Yarn {
        factor: f64,
        original_max_position_embeddings: usize,
        beta_fast: f64,
        beta_slow: f64,
        /// Scale applied to cos/sin.
        attention_factor: f64,
        truncate: bool,
    },
}

#[derive(Deserialize)]
struct RawConfig {
    #[serde(default)]
    architectures: Vec<String>,
    vocab_size: usize,
    hidden_size: usize,
    /// Absent in Qwen3.5-MoE, whose every MLP is sparse.
    #[serde(default)]
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    max_position_embeddings: usize,
    rms_norm_eps: f64,
    #[serde(default)]
    tie_word_embeddings: bool,
    rope_theta: Option<f64>,
    rope_scaling: Option<Value>,
    rope_parameters: Option<Value>,
    partial_rotary_factor: Option<f64>,
    #[serde(default)]
    attention_bias: bool,
    #[serde(default)]
    use_sliding_window: bool,
    hidden_act: Option<String>,
    torch_dtype: Option<String>,
    dtype: Option<String>,
    num_experts: Option<usize>,
    num_local_experts: Option<usize>,
    num_experts_per_tok: Option<usize>,
    moe_intermediate_size: Option<usize>,
    #[serde(default)]
    norm_topk_prob: bool,
    decoder_sparse_step: Option<usize>,
    mlp_only_layers: Option<Vec<usize>>,
    quantization_config: Option<Value>,
}

impl ModelConfig {
    pub fn from_file(path: &Path) -> Result<Self, LoadError> {
        parse_file(path, Self::from_json)
    }

    /// Parse and validate; the error is a sentence that names the key.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let value = parse_json(text)?;
        let raw: RawConfig =
            serde_json::from_value(with_aliases(text_config(value))).map_err(|e| e.to_string())?;
        let architecture = raw
            .architectures
            .first()
            .cloned()
            .unwrap_or_else(|| "Qwen3ForCausalLM".to_string());
        let gpt_oss = architecture == GPT_OSS;
        if raw.attention_bias && !gpt_oss {
            return Err(format!(
                "attention_bias = true is not supported for {architecture} (no released \
                 Qwen3, Llama 3, Mistral or Gemma 3 checkpoint uses it)"
            ));
        }
        if !gpt_oss
            && let Some(q) = &raw.quantization_config
            && Mxfp4Config::from_json(q).is_some()
        {
            return Err(format!(
                "quantization_config.quant_method \"mxfp4\" is supported for gpt-oss \
                 ({GPT_OSS}) only, not {architecture}: use a bf16, FP8 or NVFP4 checkpoint"
            ));
        }
        if raw.use_sliding_window {
            return Err(
                "use_sliding_window = true is not supported: Qwen3 checkpoints ship with it off"
                    .into(),
            );
        }
        if let Some(act) = &raw.hidden_act
            && act != "silu"
        {
            return Err(format!(
                "hidden_act = {act:?} is not supported (expected \"silu\")"
            ));
        }
        let heads = raw.num_attention_heads;
        let kv_heads = raw.num_key_value_heads.unwrap_or(heads);
        if heads == 0 || kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
            return Err(format!(
                "num_attention_heads ({heads}) must be a positive multiple of num_key_value_heads ({kv_heads})"
            ));
        }
        let head_dim = raw.head_dim.unwrap_or(raw.hidden_size / heads);
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return Err(format!("head_dim ({head_dim}) must be positive and even"));
        }
        let dense_mlp = usize::from(!QWEN3_5_MOE.contains(&architecture.as_str()));
        for (name, v) in [
            ("vocab_size", raw.vocab_size),
            ("hidden_size", raw.hidden_size),
            (
                "intermediate_size",
                raw.intermediate_size.max(1 - dense_mlp),
            ),
            ("num_hidden_layers", raw.num_hidden_layers),
            ("max_position_embeddings", raw.max_position_embeddings),
        ] {
            if v == 0 {
                return Err(format!("{name} must be positive"));
            }
        }
        let rope = parse_rope(&raw)?;
        let moe = parse_moe(&raw, &architecture)?;
        let (fp8, nvfp4) = match &raw.quantization_config {
            None | Some(Value::Null) => (None, None),
            Some(q) => parse_quantization(q)?,
        };
        Ok(Self {
            architecture,
            vocab_size: raw.vocab_size,
            hidden_size: raw.hidden_size,
            intermediate_size: raw.intermediate_size,
            num_hidden_layers: raw.num_hidden_layers,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim,
            max_position_embeddings: raw.max_position_embeddings,
            rms_norm_eps: raw.rms_norm_eps as f32,
            tie_word_embeddings: raw.tie_word_embeddings,
            rope,
            dtype: raw.dtype.or(raw.torch_dtype),
            moe,
            fp8,
            nvfp4,
        })
    }

    /// `architectures[0]` is one this engine runs (`models::registry`).
    pub fn check_architecture(&self) -> Result<(), LoadError> {
        crate::models::registry::family(&self.architecture).map(drop)
    }

    /// Number of parameters (embedding counted once when tied; every expert counted).
    pub fn num_parameters(&self) -> usize {
        let h = self.hidden_size;
        let q = self.num_attention_heads * self.head_dim;
        let kv = self.num_key_value_heads * self.head_dim;
        let attention = h * (q + 2 * kv) + q * h + 2 * h + 2 * self.head_dim;
        let mlp = |l: usize| match &self.moe {
            Some(m) if m.is_sparse(l) => m.num_experts * (3 * h * m.moe_intermediate_size + h),
            _ => 3 * h * self.intermediate_size,
        };
        let layers: usize = (0..self.num_hidden_layers)
            .map(|l| attention + mlp(l))
            .sum();
        let embed = self.vocab_size * h;
        let head = if self.tie_word_embeddings { 0 } else { embed };
        embed + head + layers + h
    }
}

/// `v` with the common keys a family spells its own way filled in where absent: Nemotron-H's
/// `layer_norm_epsilon` as `rms_norm_eps` (transformers 5 writes only the first) and its layer
/// count, the length of `hybrid_override_pattern` or `layers_block_type` (transformers 5
/// writes no `num_hidden_layers` for it).
fn with_aliases(mut v: Value) -> Value {
    let Some(o) = v.as_object_mut() else {
        return v;
    };
    if !o.contains_key("rms_norm_eps")
        && let Some(eps) = o.get("layer_norm_epsilon").cloned()
    {
        o.insert("rms_norm_eps".into(), eps);
    }
    if !o.contains_key("num_hidden_layers") {
        let layers = match (o.get("hybrid_override_pattern"), o.get("layers_block_type")) {
            (Some(Value::String(p)), _) => Some(p.chars().count()),
            (_, Some(Value::Array(a))) => Some(a.len()),
            _ => None,
        };
        if let Some(n) = layers {
            o.insert("num_hidden_layers".into(), n.into());
        }
    }
    v
}

/// Read `path` and parse it with `parse`, naming the file in either error.
pub fn parse_file<T>(path: &Path, parse: fn(&str) -> Result<T, String>) -> Result<T, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text).map_err(|message| LoadError::Config {
        path: path.to_path_buf(),
        message,
    })
}

/// The sparse-MLP keys of a `Qwen3MoeForCausalLM` config; `None` for other architectures.
fn parse_moe(raw: &RawConfig, architecture: &str) -> Result<Option<MoeConfig>, String> {
    let qwen3_5 = QWEN3_5_MOE.contains(&architecture);
    if architecture != "Qwen3MoeForCausalLM" && !qwen3_5 {
        return Ok(None);
    }
    let num_experts = raw.num_experts.or(raw.num_local_experts).ok_or_else(|| {
        format!("{architecture} needs \"num_experts\" (or \"num_local_experts\")")
    })?;
    let top_k = raw
        .num_experts_per_tok
        .ok_or_else(|| format!("{architecture} needs \"num_experts_per_tok\""))?;
    let moe_intermediate_size = raw
        .moe_intermediate_size
        .ok_or_else(|| format!("{architecture} needs \"moe_intermediate_size\""))?;
    let decoder_sparse_step = raw.decoder_sparse_step.unwrap_or(1);
    if num_experts == 0 {
        return Err(format!("num_experts must be positive for {architecture}"));
    }
    if top_k == 0 || top_k > num_experts {
        return Err(format!(
            "num_experts_per_tok ({top_k}) must be between 1 and num_experts ({num_experts})"
        ));
    }
    if moe_intermediate_size == 0 {
        return Err("moe_intermediate_size must be positive".into());
    }
    if decoder_sparse_step == 0 {
        return Err("decoder_sparse_step must be at least 1".into());
    }
    // Qwen3.5-MoE: every layer sparse, and its router always renormalises the top-k.
    Ok(Some(MoeConfig {
        num_experts,
        num_experts_per_tok: top_k,
        moe_intermediate_size,
        norm_topk_prob: raw.norm_topk_prob || qwen3_5,
        decoder_sparse_step: if qwen3_5 { 1 } else { decoder_sparse_step },
        mlp_only_layers: if qwen3_5 {
            Vec::new()
        } else {
            raw.mlp_only_layers.clone().unwrap_or_default()
        },
    }))
}

fn get_f64(obj: &Value, key: &str) -> Result<Option<f64>, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| format!("rope parameter {key:?} must be a number, found {v}")),
    }
}

fn parse_rope(raw: &RawConfig) -> Result<RopeConfig, String> {
    // transformers 5 writes `rope_parameters`; older files have `rope_theta` + `rope_scaling`.
    let params = match (&raw.rope_parameters, &raw.rope_scaling) {
        (Some(p), _) if p.is_object() => p.clone(),
        (_, Some(s)) if s.is_object() => s.clone(),
        _ => Value::Object(Default::default()),
    };
    let theta = get_f64(&params, "rope_theta")?
        .or(raw.rope_theta)
        .unwrap_or(10_000.0);
    let partial = get_f64(&params, "partial_rotary_factor")?
        .or(raw.partial_rotary_factor)
        .unwrap_or(1.0);
    rope_from_params(&params, theta, partial, raw.max_position_embeddings)
}

/// One rotary embedding from its parameters (`rope_type` or `type`, `factor`, ...), with the
/// base `theta` and the rotated fraction `partial` already resolved: what a model with several
/// rotary embeddings (Gemma 3's local and global layers) reads once for each.
pub fn rope_from_params(
    params: &Value,
    theta: f64,
    partial: f64,
    max_position_embeddings: usize,
) -> Result<RopeConfig, String> {
    let params = params.clone();
    let kind = params
        .get("rope_type")
        .or_else(|| params.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    let factor = || {
        get_f64(&params, "factor")?.ok_or_else(|| format!("rope_type {kind:?} needs a \"factor\""))
    };
    let scaling = match kind {
        "default" => RopeScaling::Default,
        "linear" => RopeScaling::Linear { factor: factor()? },
        "llama3" => {
            let need = |key: &str| {
                get_f64(&params, key)?.ok_or_else(|| format!("rope_type \"llama3\" needs {key:?}"))
            };
            RopeScaling::Llama3 {
                factor: factor()?,
                low_freq_factor: need("low_freq_factor")?,
                high_freq_factor: need("high_freq_factor")?,
                original_max_position_embeddings: need("original_max_position_embeddings")?
                    as usize,
            }
        }
        "yarn" => {
            let factor = factor()?;
            let original = get_f64(&params, "original_max_position_embeddings")?
                .map(|v| v as usize)
                .unwrap_or(max_position_embeddings);
            let mscale = get_f64(&params, "mscale")?;
            let mscale_all_dim = get_f64(&params, "mscale_all_dim")?;
            let get_mscale = |scale: f64, m: f64| {
                if scale <= 1.0 {
                    1.0
                } else {
                    0.1 * m * scale.ln() + 1.0
                }
            };
            let attention_factor = match get_f64(&params, "attention_factor")? {
                Some(a) => a,
                None => match (mscale, mscale_all_dim) {
                    (Some(m), Some(md)) if m != 0.0 && md != 0.0 => {
                        get_mscale(factor, m) / get_mscale(factor, md)
                    }
                    _ => get_mscale(factor, 1.0),
                },
            };
            RopeScaling::Yarn {
                factor,
                original_max_position_embeddings: original,
                beta_fast: get_f64(&params, "beta_fast")?
                    .filter(|v| *v != 0.0)
                    .unwrap_or(32.0),
                beta_slow: get_f64(&params, "beta_slow")?
                    .filter(|v| *v != 0.0)
                    .unwrap_or(1.0),
                attention_factor,
                truncate: params
                    .get("truncate")
                    .and_then(Value::as_bool)
                    .unwrap_or(true),
            }
        }
        other => {
            return Err(format!(
                "rope_type {other:?} is not supported (supported: default, linear, llama3, yarn)"
            ));
        }
    };
    Ok(RopeConfig {
        theta,
        scaling,
        partial_rotary_factor: partial,
    })
}

impl RopeConfig {
    /// Inverse frequency of each rotated pair (`rotary_dim / 2` values) and the cos/sin scale,
    /// computed the way transformers does (float32 powers of the base).
    pub fn inv_freq(&self, head_dim: usize) -> (Vec<f32>, f32) {
        let dim = ((head_dim as f64) * self.partial_rotary_factor) as usize;
        let base = self.theta as f32;
        let plain: Vec<f32> = (0..dim)
            .step_by(2)
            .map(|i| 1.0 / base.powf(i as f32 / dim as f32))
            .collect();
        match &self.scaling {
            RopeScaling::Default => (plain, 1.0),
            RopeScaling::Linear { factor } => {
                (plain.iter().map(|f| f / *factor as f32).collect(), 1.0)
            }
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => {
                // transformers' `_compute_llama3_parameters`, in f32 as it computes them.
                let (factor, low, high) = (
                    *factor as f32,
                    *low_freq_factor as f32,
                    *high_freq_factor as f32,
                );
                let old = *original_max_position_embeddings as f32;
                let (low_wavelen, high_wavelen) = (old / low, old / high);
                let inv = plain
                    .iter()
                    .map(|&f| {
                        let wavelen = 2.0 * std::f32::consts::PI / f;
                        if wavelen < high_wavelen {
                            f
                        } else if wavelen > low_wavelen {
                            f / factor
                        } else {
                            let smooth = (old / wavelen - low) / (high - low);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect();
                (inv, 1.0)
            }
            RopeScaling::Yarn {
                factor,
                original_max_position_embeddings,
                beta_fast,
                beta_slow,
                attention_factor,
                truncate,
            } => {
                let correction_dim = |rot: f64| {
                    (dim as f64
                        * ((*original_max_position_embeddings as f64)
                            / (rot * 2.0 * std::f64::consts::PI))
                            .ln())
                        / (2.0 * self.theta.ln())
                };
                let (mut low, mut high) = (correction_dim(*beta_fast), correction_dim(*beta_slow));
                if *truncate {
                    low = low.floor();
                    high = high.ceil();
                }
                let low = low.max(0.0);
                let high = high.min(dim as f64 - 1.0);
                let high = if low == high { high + 0.001 } else { high };
                let inv = plain
                    .iter()
                    .enumerate()
                    .map(|(i, &extra)| {
                        let ramp =
                            ((i as f32 - low as f32) / (high as f32 - low as f32)).clamp(0.0, 1.0);
                        let extrapolation_factor = 1.0 - ramp;
                        let inter = extra / *factor as f32;
                        inter * (1.0 - extrapolation_factor) + extra * extrapolation_factor
                    })
                    .collect();
                (inv, *attention_factor as f32)
            }
        }
    }
}

/// Sampling defaults and end-of-sequence ids from `generation_config.json`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenerationConfig {
    pub eos_token_ids: Vec<u32>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<u32>,
    pub min_p: Option<f32>,
    pub repetition_penalty: Option<f32>,
}

impl GenerationConfig {
    /// Read the file if it exists; a checkpoint without one gets empty defaults.
    pub fn from_file(path: &Path) -> Result<Self, LoadError> {
        if !path.exists() {
            return Ok(Self::default());
        }
        parse_file(path, Self::from_json)
    }

    pub fn from_json(text: &str) -> Result<Self, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let eos_token_ids = match v.get("eos_token_id") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Number(n)) => {
                vec![n.as_u64().ok_or("eos_token_id must be a token id")? as u32]
            }
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| {
                    x.as_u64()
                        .map(|n| n as u32)
                        .ok_or("eos_token_id entries must be token ids")
                })
                .collect::<Result<_, _>>()?,
            Some(other) => {
                return Err(format!(
                    "eos_token_id must be an id or a list of ids, found {other}"
                ));
            }
        };
        let f = |k: &str| v.get(k).and_then(Value::as_f64).map(|x| x as f32);
        Ok(Self {
            eos_token_ids,
            temperature: f("temperature"),
            top_p: f("top_p"),
            top_k: v.get("top_k").and_then(Value::as_u64).map(|x| x as u32),
            min_p: f("min_p"),
            repetition_penalty: f("repetition_penalty"),
        })
    }
}

#[cfg(test)]
mod tests;
