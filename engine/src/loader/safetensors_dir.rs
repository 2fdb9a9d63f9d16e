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
