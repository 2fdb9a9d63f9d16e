//! The lock a first pull writes (`metrale-locks/<commit>.json`: each file's sha256 and size),
//! and the checks later runs make against it.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{HubError, io_err, sha256_file, wanted};

/// What the first pull of a commit recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lock {
    pub repo: String,
    pub revision: String,
    pub commit: String,
    /// File name → its sha256 and size.
    pub files: BTreeMap<String, LockedFile>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LockedFile {
    pub sha256: String,
    pub size: u64,
}

fn lock_path(dir: &Path, commit: &str) -> PathBuf {
    dir.join("metrale-locks").join(format!("{commit}.json"))
}

/// The lock of `commit`, if its first pull wrote one.
pub fn read_lock(dir: &Path, commit: &str) -> Result<Option<Lock>, HubError> {
    let path = lock_path(dir, commit);
    match fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| HubError::Io {
                op: "parse",
                path,
                source: io::Error::new(io::ErrorKind::InvalidData, e),
            }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(HubError::Io {
            op: "read",
            path,
            source,
        }),
    }
}

pub(super) fn write_lock(dir: &Path, lock: &Lock) -> Result<(), HubError> {
    let path = lock_path(dir, &lock.commit);
    let parent = path.parent().unwrap_or(dir);
    fs::create_dir_all(parent).map_err(io_err("create", parent))?;
    let text = serde_json::to_string_pretty(lock).map_err(|e| HubError::Io {
        op: "encode",
        path: path.clone(),
        source: io::Error::new(io::ErrorKind::InvalidData, e),
    })?;
    let tmp = path.with_extension("json.tmp");
    fs::write(&tmp, text).map_err(io_err("write", &tmp))?;
    fs::rename(&tmp, &path).map_err(io_err("rename", &tmp))
}

/// Every locked file is in the snapshot with the size and sha256 recorded at its first pull.
pub(super) fn verify_lock(snapshot: &Path, lock: &Lock) -> Result<(), HubError> {
    for (file, want) in &lock.files {
        let path = snapshot.join(file);
        let mismatch = |what: String| HubError::LockMismatch {
            repo: lock.repo.clone(),
            commit: lock.commit.clone(),
            file: file.clone(),
            what,
            path: path.clone(),
        };
        let size = match fs::metadata(&path) {
            Ok(m) => m.len(),
            Err(_) => return Err(mismatch("missing".into())),
        };
        if size != want.size {
            return Err(mismatch(format!("{size} bytes, locked {}", want.size)));
        }
        let got = sha256_file(&path)?;
        if got != want.sha256 {
            return Err(mismatch(format!("sha256 {got}, locked {}", want.sha256)));
        }
    }
    Ok(())
}

/// A lock for a snapshot we did not download: every file hashed, and an LFS blob (named by its
/// sha256) must hash to its name.
pub(super) fn adopt(
    snapshot: &Path,
    repo: &str,
    revision: &str,
    commit: &str,
) -> Result<Lock, HubError> {
    let mut files = BTreeMap::new();
    let mut pending = vec![snapshot.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).map_err(io_err("read", &dir))? {
            let path = entry.map_err(io_err("read", &dir))?.path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            let name = path
                .strip_prefix(snapshot)
                .unwrap_or(&path)
                .to_string_lossy()
                .replace('\\', "/");
            if !wanted(&name) {
                continue;
            }
            let sha256 = sha256_file(&path)?;
            let blob_name = fs::read_link(&path)
                .ok()
                .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()));
            if let Some(blob) =
                blob_name.filter(|b| b.len() == 64 && b.chars().all(|c| c.is_ascii_hexdigit()))
                && blob != sha256
            {
                return Err(HubError::Corrupted {
                    repo: repo.to_owned(),
                    file: name,
                    expected: blob,
                    got: sha256,
                });
            }
            let size = fs::metadata(&path).map_err(io_err("read", &path))?.len();
            files.insert(name, LockedFile { sha256, size });
        }
    }
    if !files.contains_key("config.json") {
        return Err(HubError::NotCached {
            repo: repo.to_owned(),
            revision: revision.to_owned(),
            cache: snapshot.to_path_buf(),
        });
    }
    Ok(Lock {
        repo: repo.to_owned(),
        revision: revision.to_owned(),
        commit: commit.to_owned(),
        files,
    })
}
