//! Memory-mapped safetensors files of one checkpoint: a single `model.safetensors`, or shards
//! listed by `model.safetensors.index.json`. FP8 and NVFP4 tensors come out with their scales
//! (`fp8.rs`, `nvfp4.rs`; `safetensors_dir/nvfp4.rs` reads the NVFP4 ones); MXFP4 experts
//! come out dequantized (`safetensors_dir/mxfp4.rs`).

mod mxfp4;
mod nvfp4;

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};

use super::fp8::{self, Fp8Config, ScaleDtype};
use super::nvfp4::{Nvfp4Config, Nvfp4Format};
use super::{DType, HostData, HostTensor, LoadError};

struct Entry {
    file: usize,
    dtype: Dtype,
    shape: Vec<usize>,
    /// Byte range within the file.
    start: usize,
    end: usize,
}

/// All tensors of a checkpoint, by name, backed by read-only memory maps.
pub struct SafetensorsWeights {
    files: Vec<(PathBuf, Mmap)>,
    tensors: HashMap<String, Entry>,
    /// The checkpoint's FP8 block size, if its config declares one.
    fp8: Option<Fp8Config>,
    /// The checkpoint's NVFP4 format, if its config declares one.
    nvfp4: Option<Nvfp4Config>,
}

impl SafetensorsWeights {
    pub fn open(dir: &Path) -> Result<Self, LoadError> {
        let paths = shard_paths(dir)?;
        let mut files = Vec::with_capacity(paths.len());
        let mut tensors = HashMap::new();
        for (i, path) in paths.into_iter().enumerate() {
            let map = map_file(&path)?;
            let (header_len, meta) =
                SafeTensors::read_metadata(&map).map_err(|e| LoadError::Safetensors {
                    path: path.clone(),
                    message: e.to_string(),
                })?;
            let data_start = 8 + header_len;
            for (name, info) in meta.tensors() {
                let (a, b) = info.data_offsets;
                tensors.insert(
                    name,
                    Entry {
                        file: i,
                        dtype: info.dtype,
                        shape: info.shape.clone(),
                        start: data_start + a,
                        end: data_start + b,
                    },
                );
            }
            files.push((path, map));
        }
        Ok(Self {
            files,
            tensors,
            fp8: None,
            nvfp4: None,
        })
    }

    /// Dequantize `F8_E4M3` tensors with `config`'s blocks (from `quantization_config`).
    pub fn with_fp8(mut self, config: Option<Fp8Config>) -> Self {
        self.fp8 = config;
        self
    }

    /// Read U8 tensors as packed NVFP4 in `config`'s format (from `quantization_config`).
    pub fn with_nvfp4(mut self, config: Option<Nvfp4Config>) -> Self {
        self.nvfp4 = config;
        self
    }

    /// Whether the checkpoint holds `name` (for compressed-tensors NVFP4, as `name_packed`).
    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name) || self.packed_elsewhere(name)
    }

    /// A compressed-tensors checkpoint stores the weight `name` as `name_packed`.
    fn packed_elsewhere(&self, name: &str) -> bool {
        self.nvfp4
            .as_ref()
            .is_some_and(|c| c.format == Nvfp4Format::CompressedTensors)
            && self
                .tensors
                .contains_key(&Nvfp4Format::CompressedTensors.packed_name(name))
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// The named tensor's bytes, borrowed from the map, after checking its shape and dtype.
    pub fn get(&self, name: &str, shape: &[usize]) -> Result<HostTensor<'_>, LoadError> {
        if self.packed_elsewhere(name)
            || self.tensors.get(name).is_some_and(|e| e.dtype == Dtype::U8)
        {
            return self.get_nvfp4(name, shape);
        }
        let e = self
            .tensors
            .get(name)
            .ok_or_else(|| LoadError::MissingTensor {
                name: name.to_string(),
                expected: shape.to_vec(),
            })?;
        if e.shape != shape {
            return Err(LoadError::ShapeMismatch {
                name: name.to_string(),
                found: e.shape.clone(),
                expected: shape.to_vec(),
            });
        }
        let dtype = match e.dtype {
            Dtype::F32 => DType::F32,
            Dtype::F16 => DType::F16,
            Dtype::BF16 => DType::BF16,
            Dtype::F8_E4M3 => return self.get_fp8(name, e),
            other => {
                return Err(LoadError::UnsupportedDtype {
                    name: name.to_string(),
                    dtype: format!("{other:?}"),
                });
            }
        };
        let bytes = self.bytes(e);
        Ok(HostTensor {
            shape: e.shape.clone(),
            data: HostData::Raw {
                dtype,
                bytes: Cow::Borrowed(bytes),
            },
        })
    }
}

impl SafetensorsWeights {
    fn bytes(&self, e: &Entry) -> &[u8] {
        &self.files[e.file].1[e.start..e.end]
    }

    /// An e4m3 tensor with its per-block `_scale_inv` (expanded to every row): the CPU
    /// dequantizes it at upload, the CUDA backend keeps the bytes.
    fn get_fp8(&self, name: &str, e: &Entry) -> Result<HostTensor<'_>, LoadError> {
        let err = |message: String| LoadError::Fp8 {
            name: name.to_string(),
            message,
        };
        let config = self.fp8.ok_or_else(|| {
            err("it is stored as F8_E4M3 but config.json has no quantization_config with                  quant_method \"fp8\" and weight_block_size, so its scales cannot be read"
                .into())
        })?;
        let scale_name = fp8::scale_name(name);
        let want = config.scale_shape(&e.shape);
        let s = self.tensors.get(&scale_name).ok_or_else(|| {
            err(format!(
                "its scale tensor {scale_name} (shape {want:?}, one per {}x{} block) is missing                  from the checkpoint",
                config.block[0], config.block[1]
            ))
        })?;
        // transformers saves a one-block grid as a 0-d tensor.
        let numel = |shape: &[usize]| shape.iter().product::<usize>();
        if s.shape != want && !(numel(&want) == 1 && numel(&s.shape) == 1) {
            return Err(err(format!(
                "its scale {scale_name} has shape {:?}, expected {want:?} (weight {:?} in {}x{}                  blocks: is quantization_config.weight_block_size right?)",
                s.shape, e.shape, config.block[0], config.block[1]
            )));
        }
        let scale_dtype = match s.dtype {
            Dtype::F32 => ScaleDtype::F32,
            Dtype::BF16 => ScaleDtype::BF16,
            Dtype::F16 => ScaleDtype::F16,
            Dtype::F8_E8M0 => ScaleDtype::E8M0,
            other => {
                return Err(err(format!(
                    "its scale {scale_name} has dtype {other:?} (expected F32, BF16, F16 or F8_E8M0)"
                )));
            }
        };
        Ok(HostTensor {
            shape: e.shape.clone(),
            data: HostData::Fp8 {
                bytes: Cow::Borrowed(self.bytes(e)),
                scales: fp8::row_scales(self.bytes(s), scale_dtype, &e.shape, &config),
                col_block: config.block[1],
            },
        })
    }
}

/// The shard files in load order.
fn shard_paths(dir: &Path) -> Result<Vec<PathBuf>, LoadError> {
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        let text = std::fs::read_to_string(&index).map_err(|source| LoadError::Io {
            path: index.clone(),
            source,
        })?;
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| LoadError::Config {
            path: index.clone(),
            message: e.to_string(),
        })?;
        let map = v
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| LoadError::Config {
                path: index.clone(),
                message: "\"weight_map\" object is missing".into(),
            })?;
        let mut names = BTreeSet::new();
        for (tensor, file) in map {
            let file = file.as_str().ok_or_else(|| LoadError::Config {
                path: index.clone(),
                message: format!("weight_map[{tensor:?}] must be a file name"),
            })?;
            if file.contains('/') || file.contains('\\') || file.starts_with('.') {
                return Err(LoadError::Config {
                    path: index.clone(),
                    message: format!(
                        "weight_map[{tensor:?}] = {file:?} must name a file in the same directory"
                    ),
                });
            }
            names.insert(file.to_string());
        }
        let paths: Vec<PathBuf> = names.into_iter().map(|n| dir.join(n)).collect();
        if let Some(missing) = paths.iter().find(|p| !p.is_file()) {
            return Err(LoadError::NotAModel {
                path: dir.to_path_buf(),
                what: format!(
                    "shard {} named by model.safetensors.index.json",
                    missing.display()
                ),
            });
        }
        return Ok(paths);
    }
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|source| LoadError::Io {
            path: dir.to_path_buf(),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    paths.sort();
    if paths.is_empty() {
        return Err(LoadError::NotAModel {
            path: dir.to_path_buf(),
            what: "*.safetensors weights (or use --load-format dummy for random weights)".into(),
        });
    }
    Ok(paths)
}

#[allow(unsafe_code)]
fn map_file(path: &Path) -> Result<Mmap, LoadError> {
    let io = |source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    // SAFETY: the map is read-only and private to this process. Like every loader that maps
    // checkpoints, we rely on the file not being truncated or rewritten while the engine runs
    // (docs/architecture.md names this, the one unsafe block outside the CUDA code).
    unsafe { Mmap::map(&file) }.map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};
    use safetensors::tensor::TensorView;

    #[test]
    fn reads_f32_f16_bf16_and_rejects_other_dtypes() {
        let vals = [1.5f32, -2.0, 0.25, 3.0];
        let f32b: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let f16b: Vec<u8> = vals
            .iter()
            .flat_map(|v| f16::from_f32(*v).to_le_bytes())
            .collect();
        let bf16b: Vec<u8> = vals
            .iter()
            .flat_map(|v| bf16::from_f32(*v).to_le_bytes())
            .collect();
        let i32b: Vec<u8> = [1i32, 2, 3, 4]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let views = vec![
            (
                "a.f32",
                TensorView::new(Dtype::F32, vec![2, 2], &f32b).expect("view"),
            ),
            (
                "b.f16",
                TensorView::new(Dtype::F16, vec![2, 2], &f16b).expect("view"),
            ),
            (
                "c.bf16",
                TensorView::new(Dtype::BF16, vec![4], &bf16b).expect("view"),
            ),
            (
                "d.i32",
                TensorView::new(Dtype::I32, vec![4], &i32b).expect("view"),
            ),
        ];
        let dir = std::env::temp_dir().join(format!("metrale-st-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).expect("write");
        let w = SafetensorsWeights::open(&dir).expect("open");
        assert_eq!(w.get("a.f32", &[2, 2]).expect("f32").to_f32(), vals);
        assert_eq!(w.get("b.f16", &[2, 2]).expect("f16").to_f32(), vals);
        assert_eq!(w.get("c.bf16", &[4]).expect("bf16").to_f32(), vals);
        let e = w.get("d.i32", &[4]).expect_err("i32 refused").to_string();
        assert!(e.contains("d.i32") && e.contains("I32"), "{e}");
        let e = w.get("a.f32", &[4]).expect_err("shape").to_string();
        assert!(e.contains("[2, 2]") && e.contains("[4]"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn an_index_naming_a_missing_shard_is_an_error_that_names_it() {
        let dir = std::env::temp_dir().join(format!("metrale-idx-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(
            dir.join("model.safetensors.index.json"),
            r#"{"weight_map": {"x": "model-00001-of-00002.safetensors"}}"#,
        )
        .expect("write");
        let e = SafetensorsWeights::open(&dir)
            .err()
            .expect("missing shard")
            .to_string();
        assert!(e.contains("model-00001-of-00002.safetensors"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
