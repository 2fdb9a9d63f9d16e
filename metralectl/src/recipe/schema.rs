//! The recipe file format: what one `recipes/*.toml` file may say, as serde types.
//!
//! Field-level checks that need only the field itself (a commit hash, a digest, a parameter
//! count) live in the `TryFrom<String>` of small newtypes, so the TOML parser reports them with
//! the line and column of the bad value. Checks across fields live in `validate.rs`.
//! `docs/recipes.md` documents every field; keep the two in step.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use super::values::{CommitHash, ComputeCapability, ImageDigest, ParamCount};

/// One recipe file, as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    /// The name users type; equal to the file name without `.toml`.
    pub name: String,
    pub display_name: String,
    /// Who publishes the checkpoint (`Qwen`, `NVIDIA`, `Unsloth`, `Metrale`).
    pub vendor: String,
    /// Model family (`qwen3`, `qwen3.6`).
    pub family: String,
    #[serde(default)]
    pub description: Option<String>,
    pub checkpoint: Checkpoint,
    /// Architecture numbers from the checkpoint's `config.json`, for the capacity estimate.
    #[serde(default)]
    pub model: Option<ModelShape>,
    #[serde(default)]
    pub image: Image,
    pub serve: Serve,
    pub requirements: Requirements,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    /// Hugging Face repository id, `owner/name`. Exactly one of `repo` and `path`.
    #[serde(default)]
    pub repo: Option<String>,
    /// A checkpoint on disk in Hugging Face layout (see `recipe::resolve` for relative paths).
    #[serde(default)]
    pub path: Option<String>,
    /// The commit of `repo` this recipe was checked against; absent means not pinned.
    #[serde(default)]
    pub revision: Option<CommitHash>,
    /// The weight format the checkpoint ships in.
    pub quantization: Quantization,
    /// Total parameter count, e.g. `"27B"`.
    #[serde(default)]
    pub parameters: Option<ParamCount>,
    /// Parameters active per token, for mixture-of-experts models.
    #[serde(default)]
    pub active_parameters: Option<ParamCount>,
    /// The measured size of the weights in GiB, when known; preferred over the parameter count.
    #[serde(default)]
    pub weights_gib: Option<f64>,
    /// Parts of the model the engine re-quantizes at load time.
    #[serde(default)]
    pub requantize: Option<Requantize>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Requantize {
    /// The output projection (`lm_head`).
    #[serde(default)]
    pub lm_head: Option<Quantization>,
    /// The routed experts of a mixture-of-experts model.
    #[serde(default)]
    pub experts: Option<Quantization>,
    /// Which expert projections `experts` applies to; absent means all three.
    #[serde(default)]
    pub expert_projections: Option<Vec<ExpertProjection>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExpertProjection {
    Gate,
    Up,
    Down,
}

impl FlagValue for ExpertProjection {
    fn flag_value(&self) -> &'static str {
        match self {
            Self::Gate => "gate",
            Self::Up => "up",
            Self::Down => "down",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Quantization {
    F32,
    Bf16,
    Fp8,
    Nvfp4,
    /// MXFP4 experts with the rest in bf16, as gpt-oss is released.
    Mxfp4,
}

impl FlagValue for Quantization {
    fn flag_value(&self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::Bf16 => "bf16",
            Self::Fp8 => "fp8",
            Self::Nvfp4 => "nvfp4",
            Self::Mxfp4 => "mxfp4",
        }
    }
}

impl Quantization {
    /// Bytes a weight takes, scales included: FP8 uses one f32 scale a 128×128 block (negligible),
    /// NVFP4 one FP8 scale a 16 values (4 bits + 8/16 bits), MXFP4 one E8M0 scale a 32 (4 bits
    /// + 8/32 bits; the parts it leaves in bf16 are not counted: pin `weights_gib`).
    pub fn bytes_per_param(self) -> f64 {
        match self {
            Self::F32 => 4.0,
            Self::Bf16 => 2.0,
            Self::Fp8 => 1.0,
            Self::Nvfp4 => 0.5625,
            Self::Mxfp4 => 0.53125,
        }
    }
}

/// Architecture numbers, copied from the checkpoint's `config.json`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelShape {
    /// `architectures[0]`: which of the engine's families loads the checkpoint, so the
    /// launcher can refuse what the recipe's device cannot run before any download.
    #[serde(default)]
    pub architecture: Option<String>,
    /// `num_hidden_layers`.
    pub layers: u32,
    /// Layers with softmax attention (and so a KV cache) in a hybrid model; absent means all.
    #[serde(default)]
    pub full_attention_layers: Option<u32>,
    /// `num_key_value_heads` of the attention layers.
    pub kv_heads: u32,
    /// `head_dim` of the attention layers.
    pub head_dim: u32,
    #[serde(default)]
    pub hidden_size: Option<u32>,
    #[serde(default)]
    pub vocab_size: Option<u32>,
    /// `num_experts`, for mixture-of-experts models.
    #[serde(default)]
    pub experts: Option<u32>,
    /// `moe_intermediate_size`.
    #[serde(default)]
    pub expert_intermediate_size: Option<u32>,
    /// `sliding_window`: the window of the layers that attend in one (Mistral's every layer
    /// where its config sets one; Gemma 3's local layers; gpt-oss's sliding ones). The engine
    /// keeps only the window of those layers' keys and values.
    #[serde(default)]
    pub sliding_window: Option<u32>,
    /// How many layers attend in `sliding_window` (from `layer_types`; absent: every layer).
    #[serde(default)]
    pub sliding_layers: Option<u32>,
    /// The linear-attention (Gated DeltaNet) layers of a hybrid model.
    #[serde(default)]
    pub linear_attention: Option<LinearAttention>,
    /// The Mamba-2 layers of a Nemotron-H model.
    #[serde(default)]
    pub mamba2: Option<Mamba2>,
    /// Multi-head latent attention (DeepSeek-V3): the cache keeps one compressed row a token a
    /// layer instead of `kv_heads` keys and values.
    #[serde(default)]
    pub latent_attention: Option<LatentAttention>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Mamba2 {
    /// How many layers are Mamba-2 mixers (`M` in `hybrid_override_pattern`).
    pub layers: u32,
    /// `mamba_num_heads`.
    pub heads: u32,
    /// `mamba_head_dim`.
    pub head_dim: u32,
    /// `ssm_state_size`.
    pub state_size: u32,
    /// `n_groups`: B and C are shared by the heads of a group.
    pub groups: u32,
    /// `conv_kernel`.
    pub conv_kernel: u32,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LatentAttention {
    /// `kv_lora_rank`: the compressed key-value latent.
    pub kv_lora_rank: u32,
    /// `qk_rope_head_dim`: the rotated key part, shared by all heads.
    pub rope_head_dim: u32,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LinearAttention {
    /// `linear_num_key_heads`.
    pub key_heads: u32,
    /// `linear_num_value_heads`.
    pub value_heads: u32,
    /// `linear_key_head_dim`.
    pub key_head_dim: u32,
    /// `linear_value_head_dim`.
    pub value_head_dim: u32,
    /// `linear_conv_kernel_dim`.
    pub conv_kernel: u32,
}

/// The engine container image.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Image {
    #[serde(default = "default_image_repository")]
    pub repository: String,
    /// Absent means the launcher's own version.
    #[serde(default)]
    pub tag: Option<String>,
    /// `sha256:` + 64 hex digits; absent until a published image exists.
    #[serde(default)]
    pub digest: Option<ImageDigest>,
}

pub const DEFAULT_IMAGE_REPOSITORY: &str = "ghcr.io/metrale/met";

fn default_image_repository() -> String {
    DEFAULT_IMAGE_REPOSITORY.to_owned()
}

impl Default for Image {
    fn default() -> Self {
        Self {
            repository: default_image_repository(),
            tag: None,
            digest: None,
        }
    }
}

/// The `met serve` settings.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Serve {
    #[serde(default)]
    pub device: Device,
    #[serde(default = "default_port")]
    pub port: u16,
    pub max_seq_len: u32,
    pub max_batch_size: u32,
    #[serde(default)]
    pub max_num_batched_tokens: Option<u32>,
    /// Most prompt tokens a step takes while other sequences decode (`met serve
    /// --prefill-chunk-with-decodes`).
    #[serde(default)]
    pub prefill_chunk_with_decodes: Option<u32>,
    #[serde(default)]
    pub gpu_memory_utilization: Option<f64>,
    #[serde(default)]
    pub kv_cache_dtype: KvCacheDtype,
    #[serde(default)]
    pub prefix_caching: bool,
    #[serde(default = "default_true")]
    pub thinking: bool,
    #[serde(default)]
    pub tool_call_parser: Option<ToolCallParser>,
    /// Split `<think>…</think>` into reasoning (`--reasoning-parser`).
    #[serde(default)]
    pub reasoning_parser: Option<ReasoningParser>,
    #[serde(default)]
    pub speculative: Option<Speculative>,
    #[serde(default)]
    pub ssm_cache_slots: Option<u32>,
    #[serde(default)]
    pub ssm_checkpoint_interval: Option<u32>,
    #[serde(default)]
    pub load_format: Option<LoadFormat>,
    /// Ranks the model is split over (`--tensor-parallel-size`): one GPU each on CUDA, so
    /// `requirements.gpus`; processes of this host on the CPU.
    #[serde(default = "one")]
    pub tensor_parallel_size: u32,
    /// Split the routed experts whole over the ranks (`--enable-expert-parallel`).
    #[serde(default)]
    pub enable_expert_parallel: bool,
    /// Further `met serve` arguments, appended as written.
    #[serde(default)]
    pub extra_args: Vec<String>,
    /// Environment for the engine process.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

fn default_port() -> u16 {
    8000
}

fn default_true() -> bool {
    true
}

fn one() -> u32 {
    1
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    Cpu,
    #[default]
    Cuda,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KvCacheDtype {
    #[default]
    Auto,
    Bf16,
    Fp8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallParser {
    Qwen3Coder,
    Hermes,
    Llama3Json,
    Mistral,
    /// gpt-oss's harmony format (vLLM's name).
    Openai,
    /// MiniMax-M2's XML invocations.
    MinimaxM2,
    /// DeepSeek-V3's and R1's calls.
    DeepseekV3,
    /// DeepSeek-V3.1's calls.
    DeepseekV31,
    /// Nemotron Nano v2's `<TOOLCALL>[...]</TOOLCALL>` JSON lists.
    NemotronJson,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LoadFormat {
    Auto,
    Dummy,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Speculative {
    pub method: SpeculativeMethod,
    pub num_drafts: u32,
}

/// Where draft tokens come from. `mtp`: the checkpoint's own multi-token-prediction head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SpeculativeMethod {
    Mtp,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Requirements {
    /// GPUs the recipe uses; 0 for a CPU recipe.
    pub gpus: u32,
    /// Memory a GPU needs, in GiB.
    #[serde(default)]
    pub gpu_memory_gib: Option<f64>,
    /// Lowest CUDA compute capability, e.g. `"8.9"`.
    #[serde(default)]
    pub compute_capability: Option<ComputeCapability>,
    /// Nodes an expert-parallel deployment spans.
    #[serde(default)]
    pub expert_parallel_nodes: Option<u32>,
}

/// The spelling of a value as the engine's flags and the recipe files write it.
pub trait FlagValue {
    fn flag_value(&self) -> &'static str;
}

impl FlagValue for KvCacheDtype {
    fn flag_value(&self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Bf16 => "bf16",
            Self::Fp8 => "fp8",
        }
    }
}

/// How the engine splits reasoning from the reply (`--reasoning-parser`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningParser {
    Qwen3,
    /// gpt-oss's harmony `analysis` channel (vLLM's name).
    OpenaiGptoss,
}

impl FlagValue for ReasoningParser {
    fn flag_value(&self) -> &'static str {
        match self {
            Self::Qwen3 => "qwen3",
            Self::OpenaiGptoss => "openai_gptoss",
        }
    }
}

impl FlagValue for ToolCallParser {
    fn flag_value(&self) -> &'static str {
        match self {
            Self::Qwen3Coder => "qwen3_coder",
            Self::Hermes => "hermes",
            Self::Llama3Json => "llama3_json",
            Self::Mistral => "mistral",
            Self::Openai => "openai",
            Self::MinimaxM2 => "minimax_m2",
            Self::DeepseekV3 => "deepseek_v3",
            Self::DeepseekV31 => "deepseek_v31",
            Self::NemotronJson => "nemotron_json",
        }
    }
}

impl FlagValue for Device {
    fn flag_value(&self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Cuda => "cuda",
        }
    }
}

impl FlagValue for LoadFormat {
    fn flag_value(&self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Dummy => "dummy",
        }
    }
}

impl FlagValue for SpeculativeMethod {
    fn flag_value(&self) -> &'static str {
        match self {
            Self::Mtp => "mtp",
        }
    }
}
