//! Memory-mapped safetensors files of one checkpoint: a single `model.safetensors`, or shards
//! listed by `model.safetensors.index.json`.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};

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
        Ok(Self { files, tensors })
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// The named tensor's bytes, borrowed from the map, after checking its shape and dtype.
    pub fn get(&self, name: &str, shape: &[usize]) -> Result<HostTensor<'_>, LoadError> {
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
            other => {
                return Err(LoadError::UnsupportedDtype {
                    name: name.to_string(),
                    dtype: format!("{other:?}"),
                });
            }
        };
        let bytes = &self.files[e.file].1[e.start..e.end];
        Ok(HostTensor {
            shape: e.shape.clone(),
            data: HostData::Raw {
                dtype,
                bytes: Cow::Borrowed(bytes),
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
