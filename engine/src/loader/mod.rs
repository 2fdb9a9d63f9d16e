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
pub use host_tensor::{
    DType, FP8_COL_BLOCK, HostData, HostTensor, MXFP4_SCALE_STREAM, NVFP4_SCALE_BITS,
    NVFP4_SCALE_SHIFT, NVFP4_SCALE_STREAM, random_fp8_bytes, random_fp8_scale, random_mxfp4_parts,
    random_mxfp4_scale_base, random_nvfp4_global, random_nvfp4_parts,
};
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
    /// Seeded random weights; norms are ones so activations stay in range. The projections a
    /// quantized checkpoint stores quantized ([`quantized_projection`]) are drawn in its format:
    /// FP8 recipes with an FP8 `quantization_config`; with an NVFP4 one, NVFP4 recipes for those
    /// its ignore list does not name (matched as the producer matches it, `nvfp4/ignore.rs`)
    /// and whose rows are whole 16-value blocks. A GPU draws both on the device.
    Dummy {
        seed: u64,
        fp8: bool,
        nvfp4: Option<nvfp4::ignore::IgnoreList>,
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
                nvfp4: nvfp4
                    .map(|q| nvfp4::ignore::IgnoreList::new(&q.ignore))
                    .transpose()
                    .map_err(|message| LoadError::Config {
                        path: dir.join("config.json"),
                        message,
                    })?,
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
            Source::Dummy { seed, fp8, nvfp4 } => Ok(HostTensor {
                shape: shape.to_vec(),
                data: match kind {
                    TensorKind::Norm => HostData::Constant(1.0),
                    TensorKind::Matrix if *fp8 && quantized_projection(name) => {
                        HostData::RandomFp8 {
                            seed: seed ^ fnv1a(name.as_bytes()),
                            std: 0.02,
                        }
                    }
                    TensorKind::Matrix
                        if nvfp4
                            .as_ref()
                            .is_some_and(|ignore| drawn_in_nvfp4(ignore, name, shape)) =>
                    {
                        HostData::RandomNvfp4 {
                            seed: seed ^ fnv1a(name.as_bytes()),
                            std: 0.02,
                        }
                    }
                    TensorKind::Matrix => HostData::Random {
                        seed: seed ^ fnv1a(name.as_bytes()),
                        std: 0.02,
                    },
                },
            }),
        }
    }

    /// An MXFP4 weight `name` of logical `shape` (`loader/mxfp4.rs`: `name_blocks` and
    /// `name_scales`), packed as stored ([`HostData::Mxfp4`]: the CPU dequantizes it at upload,
    /// the CUDA backend keeps expert stacks packed); a dummy source draws it packed
    /// ([`HostData::RandomMxfp4`]) when its rows are whole 32-value blocks, else as a random
    /// matrix.
    pub fn get_mxfp4(&self, name: &str, shape: &[usize]) -> Result<HostTensor<'_>, LoadError> {
        match &self.source {
            Source::Safetensors(w) => w.get_mxfp4(name, shape),
            Source::Dummy { seed, .. }
                if shape
                    .last()
                    .is_some_and(|&c| c > 0 && c.is_multiple_of(mxfp4::BLOCK)) =>
            {
                Ok(HostTensor {
                    shape: shape.to_vec(),
                    data: HostData::RandomMxfp4 {
                        seed: seed ^ fnv1a(name.as_bytes()),
                        std: 0.02,
                    },
                })
            }
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

/// Whether a quantized (FP8 or NVFP4) checkpoint stores `name` quantized, unless its ignore
/// list says otherwise: the linear projections (`*_proj.weight`,
/// the Gated DeltaNet's `in_proj_{qkv,z,b,a}.weight` as Qwen's FP8 checkpoints and our FP8
/// hybrid fixture have them, and transformers 5's fused `mlp.experts.gate_up_proj` /
/// `down_proj`); embeddings, norms, the LM head, the MoE router and the shared-expert gate stay
/// bf16. (Before the `in_proj_*` names counted, a dummy FP8 hybrid drew its fused input
/// projection in bf16: twice the bytes of the checkpoint it stands for.)
fn quantized_projection(name: &str) -> bool {
    let module = name.strip_suffix(".weight").unwrap_or(name);
    let last = module.rsplit('.').next().unwrap_or(module);
    last.ends_with("_proj") || last.contains("_proj_")
}

/// Whether a dummy source with an NVFP4 config draws `name` (of `shape`) in NVFP4: a projection
/// the producer quantizes, which `ignore` does not name (by its module: the name without
/// `.weight`), with rows of whole 16-value blocks (a checkpoint could not hold other shapes).
fn drawn_in_nvfp4(ignore: &nvfp4::ignore::IgnoreList, name: &str, shape: &[usize]) -> bool {
    quantized_projection(name)
        && !ignore.ignores(name.strip_suffix(".weight").unwrap_or(name))
        && shape.len() >= 2
        && shape.last().is_some_and(|c| c % nvfp4::GROUP == 0)
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
    use super::*;

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
            assert!(quantized_projection(name), "{name}");
        }
        for name in [
            "model.embed_tokens.weight",
            "lm_head.weight",
            "model.layers.0.mlp.gate.weight",
            "model.layers.0.mlp.shared_expert_gate.weight",
            "model.layers.0.linear_attn.conv1d.weight",
            "model.layers.0.input_layernorm.weight",
        ] {
            assert!(!quantized_projection(name), "{name}");
        }
    }

    /// A dummy source draws an MXFP4 weight packed (rows of whole 32-value blocks) and as a
    /// plain random matrix otherwise.
    #[test]
    fn the_dummy_draws_mxfp4_packed() {
        let dir = std::env::temp_dir().join(format!("metrale-dummy-mxfp4-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp");
        std::fs::write(dir.join("config.json"), "{}").expect("write");
        let w = Weights::open(&dir, LoadFormat::Dummy).expect("dummy");
        let name = "model.layers.0.mlp.experts.gate_up_proj";
        let t = w.get_mxfp4(name, &[4, 64, 96]).expect("mxfp4");
        assert!(matches!(t.data, HostData::RandomMxfp4 { std, .. } if std == 0.02));
        let u = w.get_mxfp4(name, &[4, 64, 40]).expect("odd");
        assert!(matches!(u.data, HostData::Random { .. }));
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A dummy source with an NVFP4 config: NVFP4 recipes for the projections its ignore list
    /// leaves (ModelOpt globs, compressed-tensors `re:`), plain ones for the rest.
    #[test]
    fn the_nvfp4_dummy_draws_nvfp4_where_the_producer_quantizes() {
        let dir = std::env::temp_dir().join(format!("metrale-dummy-nvfp4-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp");
        let open = |q: serde_json::Value| {
            std::fs::write(
                dir.join("config.json"),
                serde_json::json!({"quantization_config": q}).to_string(),
            )
            .expect("write");
            Weights::open(&dir, LoadFormat::Dummy)
        };
        let groups = serde_json::json!({"group_0": {"targets": ["Linear"],
            "weights": {"num_bits": 4, "type": "float", "group_size": 16}}});
        let modelopt = open(
            serde_json::json!({"quant_method": "modelopt", "quant_algo": "NVFP4",
            "config_groups": groups.clone(), "ignore": ["lm_head", "model.layers.3*", "*in_proj_b"]}),
        )
        .expect("modelopt");
        let nvfp4 = |w: &Weights, name: &str, shape: &[usize]| {
            let t = w.get(name, shape, TensorKind::Matrix).expect("dummy");
            assert_eq!(t.shape, shape);
            matches!(t.data, HostData::RandomNvfp4 { std, .. } if std == 0.02)
        };
        assert!(nvfp4(
            &modelopt,
            "model.layers.0.self_attn.q_proj.weight",
            &[64, 32]
        ));
        assert!(nvfp4(
            &modelopt,
            "model.layers.13.mlp.down_proj.weight",
            &[32, 64]
        ));
        assert!(nvfp4(
            &modelopt,
            "model.layers.0.linear_attn.in_proj_a.weight",
            &[4, 32]
        ));
        assert!(nvfp4(
            &modelopt,
            "model.layers.0.mlp.experts.gate_up_proj",
            &[4, 64, 32]
        ));
        assert!(!nvfp4(
            &modelopt,
            "model.layers.0.linear_attn.in_proj_b.weight",
            &[4, 32]
        ));
        assert!(!nvfp4(
            &modelopt,
            "model.layers.3.mlp.down_proj.weight",
            &[32, 64]
        ));
        // A glob matches the whole name as fnmatch does: layer 3's prefix also takes 30-39.
        assert!(!nvfp4(
            &modelopt,
            "model.layers.31.mlp.down_proj.weight",
            &[32, 64]
        ));
        assert!(!nvfp4(&modelopt, "lm_head.weight", &[100, 32]));
        assert!(!nvfp4(&modelopt, "model.embed_tokens.weight", &[100, 32]));
        assert!(!nvfp4(
            &modelopt,
            "model.layers.0.mlp.gate.weight",
            &[8, 32]
        ));
        assert!(
            !nvfp4(&modelopt, "model.layers.0.mlp.down_proj.weight", &[32, 40]),
            "40 columns"
        );
        // The same name draws the same values on every open (a pure function of the name).
        let a = modelopt.get(
            "model.layers.0.self_attn.q_proj.weight",
            &[64, 32],
            TensorKind::Matrix,
        );
        let b = modelopt.get(
            "model.layers.0.self_attn.q_proj.weight",
            &[64, 32],
            TensorKind::Matrix,
        );
        assert_eq!(a.expect("a").to_f32(), b.expect("b").to_f32());
        let ct = open(serde_json::json!({"quant_method": "compressed-tensors",
            "format": "nvfp4-pack-quantized", "config_groups": groups.clone(),
            "ignore": ["lm_head", "re:.*self_attn\\.[qk]_proj$"]}))
        .expect("compressed-tensors");
        assert!(!nvfp4(
            &ct,
            "model.layers.0.self_attn.q_proj.weight",
            &[64, 32]
        ));
        assert!(nvfp4(
            &ct,
            "model.layers.0.self_attn.v_proj.weight",
            &[64, 32]
        ));
        let bad = open(serde_json::json!({"quant_method": "compressed-tensors",
            "format": "nvfp4-pack-quantized", "config_groups": groups.clone(), "ignore": ["re:(x"]}));
        let e = bad
            .err()
            .expect("an invalid pattern is refused")
            .to_string();
        assert!(e.contains("re:(x") && e.contains("config.json"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
