//! Reading a Hugging Face checkpoint directory: config, generation config and weights.
//!
//! Weights come from memory-mapped safetensors (one file or many with an index) or, with
//! `--load-format dummy`, from a seeded random source of the right shapes. Either way the
//! model asks for a tensor by name and expected shape and gets a [`HostTensor`], so a missing
//! or misshaped tensor is one error that names it and the shape expected.

pub mod config;
pub mod fp8;
mod host_tensor;
pub mod hub;
pub mod mxfp4;
pub mod nvfp4;
pub mod requantize;
mod safetensors_dir;

use std::path::{Path, PathBuf};

pub use config::{GenerationConfig, ModelConfig, MoeConfig};
pub use fp8::Fp8Config;
pub use host_tensor::{DType, FP8_COL_BLOCK, HostData, HostTensor, random_fp8_scale};
pub use nvfp4::Nvfp4Config;
pub use requantize::Requantize;
pub use safetensors_dir::SafetensorsWeights;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("failed to read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path} is not a model directory: {what} is missing (expected a Hugging Face checkpoint with config.json and *.safetensors)"
    )]
    NotAModel { path: PathBuf, what: String },
    #[error("invalid {path}: {message}")]
    Config { path: PathBuf, message: String },
    #[error("invalid safetensors file {path}: {message}")]
    Safetensors { path: PathBuf, message: String },
    #[error("tensor {name} is missing from the checkpoint (expected shape {expected:?})")]
    MissingTensor { name: String, expected: Vec<usize> },
    #[error("tensor {name} has shape {found:?}, expected {expected:?}")]
    ShapeMismatch {
        name: String,
        found: Vec<usize>,
        expected: Vec<usize>,
    },
    #[error(
        "tensor {name} has dtype {dtype}, which is not supported (expected bf16, f16, f32, F8_E4M3 in a fine-grained FP8 checkpoint, or U8 packed E2M1 in an NVFP4 one)"
    )]
    UnsupportedDtype { name: String, dtype: String },
    #[error("FP8 tensor {name}: {message}")]
    Fp8 { name: String, message: String },
    #[error("NVFP4 tensor {name}: {message}")]
    Nvfp4 { name: String, message: String },
    #[error("MXFP4 tensor {name}: {message}")]
    Mxfp4 { name: String, message: String },
    #[error("cannot re-quantize {name} to {target} (--requantize): {message}")]
    Requantize {
        name: String,
        target: &'static str,
        message: String,
    },
    #[error(
        "unsupported architecture {0:?} (architectures in config.json): this engine runs \
         {supported} (the *ForConditionalGeneration layouts text only)",
        supported = crate::models::registry::supported()
    )]
    UnsupportedArchitecture(String),
    /// The checkpoint is valid but the chosen device cannot run it.
    #[error("{0}")]
    UnsupportedOnDevice(String),
}

/// How weights are obtained (`--load-format`, a clap `ValueEnum`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LoadFormat {
    /// Safetensors weights from the model directory.
    #[default]
    Auto,
    /// Random weights of the right shapes from config.json alone (for benchmarks).
    Dummy,
}

/// The source of named tensors for a model's `load`, and what to re-quantize on the way.
pub struct Weights {
    source: Source,
    requantize: Requantize,
}

enum Source {
    Safetensors(SafetensorsWeights),
    /// Seeded random weights; norms are ones so activations stay in range. With `fp8` (the
    /// config has an FP8 `quantization_config`) the projections an FP8 checkpoint quantizes
    /// (`*_proj.weight` and the fused experts) are FP8 recipes, which a GPU draws on the device.
    /// (An NVFP4 config draws plain random matrices: no backend keeps NVFP4 packed yet.)
    Dummy {
        seed: u64,
        fp8: bool,
    },
}

impl Weights {
    pub fn open(dir: &Path, format: LoadFormat) -> Result<Self, LoadError> {
        let (fp8, nvfp4) = config::quantization_of_model_dir(dir)?;
        let source = match format {
            LoadFormat::Auto => Source::Safetensors(
                SafetensorsWeights::open(dir)?
                    .with_fp8(fp8)
                    .with_nvfp4(nvfp4),
            ),
            LoadFormat::Dummy => Source::Dummy {
                seed: 0x006d_6574_7261_6c65,
                fp8: fp8.is_some(),
            },
        };
        Ok(Self {
            source,
            requantize: Requantize::default(),
        })
    }

    /// Re-quantize the parts `plan` names as they are read (`requantize.rs`).
    pub fn with_requantize(mut self, plan: Requantize) -> Self {
        self.requantize = plan;
        self
    }

    pub fn requantize(&self) -> Requantize {
        self.requantize
    }

    /// The LM head of a model whose head is tied to its embedding `embed` (`[V, H]`), as its
    /// own tensor when the plan re-quantizes the head (the embedding itself stays as it is);
    /// `None` when the tied embedding serves as the head.
    pub fn tied_head(
        &self,
        embed: &str,
        shape: &[usize],
    ) -> Result<Option<HostTensor<'_>>, LoadError> {
        match self.requantize.lm_head {
            None => Ok(None),
            Some(_) => {
                let t = self.read(embed, shape, TensorKind::Matrix)?;
                self.requantize.apply("lm_head.weight", t).map(Some)
            }
        }
    }

    /// The tensor `name`, checked against `shape`, in the format the re-quantization plan
    /// asks for. `kind` tells a dummy source what values make sense (norm weights are ones,
    /// matrices small random numbers).
    pub fn get(
        &self,
        name: &str,
        shape: &[usize],
        kind: TensorKind,
    ) -> Result<HostTensor<'_>, LoadError> {
        let t = self.read(name, shape, kind)?;
        self.requantize.apply(name, t)
    }

    fn read(
        &self,
        name: &str,
        shape: &[usize],
        kind: TensorKind,
    ) -> Result<HostTensor<'_>, LoadError> {
        match &self.source {
            Source::Safetensors(w) => w.get(name, shape),
            Source::Dummy { seed, fp8 } => Ok(HostTensor {
                shape: shape.to_vec(),
                data: match kind {
                    TensorKind::Norm => HostData::Constant(1.0),
                    TensorKind::Matrix if *fp8 && quantized_in_fp8(name) => HostData::RandomFp8 {
                        seed: seed ^ fnv1a(name.as_bytes()),
                        std: 0.02,
                    },
                    TensorKind::Matrix => HostData::Random {
                        seed: seed ^ fnv1a(name.as_bytes()),
                        std: 0.02,
                    },
                },
            }),
        }
    }

    /// An MXFP4 weight `name` of logical `shape` (`loader/mxfp4.rs`: `name_blocks` and
    /// `name_scales`), dequantized to f32; a dummy source draws it as a random matrix.
    pub fn get_mxfp4(&self, name: &str, shape: &[usize]) -> Result<HostTensor<'_>, LoadError> {
        match &self.source {
            Source::Safetensors(w) => w.get_mxfp4(name, shape),
            Source::Dummy { .. } => self.read(name, shape, TensorKind::Matrix),
        }
    }

    pub fn contains(&self, name: &str) -> bool {
        match &self.source {
            Source::Safetensors(w) => w.contains(name),
            Source::Dummy { .. } => true,
        }
    }
}

/// Whether an FP8 checkpoint stores `name` in FP8: the linear projections (`*_proj.weight`,
/// the Gated DeltaNet's `in_proj_{qkv,z,b,a}.weight` as Qwen's FP8 checkpoints and our FP8
/// hybrid fixture have them, and transformers 5's fused `mlp.experts.gate_up_proj` /
/// `down_proj`); embeddings, norms, the LM head, the MoE router and the shared-expert gate stay
/// bf16. (Before the `in_proj_*` names counted, a dummy FP8 hybrid drew its fused input
/// projection in bf16: twice the bytes of the checkpoint it stands for.)
fn quantized_in_fp8(name: &str) -> bool {
    let module = name.strip_suffix(".weight").unwrap_or(name);
    let last = module.rsplit('.').next().unwrap_or(module);
    last.ends_with("_proj") || last.contains("_proj_")
}

/// What a tensor is, for sources that invent values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorKind {
    Matrix,
    Norm,
}

/// The files of a checkpoint directory.
#[derive(Debug, Clone)]
pub struct ModelDir {
    pub root: PathBuf,
}

impl ModelDir {
    /// Check that `root` looks like a checkpoint (a `config.json` at least).
    pub fn open(root: &Path) -> Result<Self, LoadError> {
        if !root.is_dir() {
            return Err(LoadError::NotAModel {
                path: root.to_path_buf(),
                what: "the directory itself".into(),
            });
        }
        if !root.join("config.json").is_file() {
            return Err(LoadError::NotAModel {
                path: root.to_path_buf(),
                what: "config.json".into(),
            });
        }
        Ok(Self {
            root: root.to_path_buf(),
        })
    }

    pub fn config(&self) -> Result<ModelConfig, LoadError> {
        let path = self.root.join("config.json");
        let cfg = ModelConfig::from_file(&path)?;
        cfg.check_architecture()?;
        Ok(cfg)
    }

    pub fn generation_config(&self) -> Result<GenerationConfig, LoadError> {
        GenerationConfig::from_file(&self.root.join("generation_config.json"))
    }
}

/// A small stable hash for seeding per-tensor random streams.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::quantized_in_fp8;

    #[test]
    fn the_fp8_dummy_quantizes_the_projections_qwen_quantizes() {
        for name in [
            "model.layers.0.self_attn.q_proj.weight",
            "model.layers.0.mlp.experts.3.down_proj.weight",
            "model.layers.0.mlp.experts.gate_up_proj",
            "model.layers.0.linear_attn.in_proj_qkv.weight",
            "model.layers.0.linear_attn.in_proj_z.weight",
            "model.layers.0.linear_attn.in_proj_b.weight",
            "model.layers.0.linear_attn.in_proj_a.weight",
            "model.layers.0.linear_attn.out_proj.weight",
        ] {
            assert!(quantized_in_fp8(name), "{name}");
        }
        for name in [
            "model.embed_tokens.weight",
            "lm_head.weight",
            "model.layers.0.mlp.gate.weight",
            "model.layers.0.mlp.shared_expert_gate.weight",
            "model.layers.0.linear_attn.conv1d.weight",
            "model.layers.0.input_layernorm.weight",
        ] {
            assert!(!quantized_in_fp8(name), "{name}");
        }
    }
}
