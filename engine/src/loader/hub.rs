//! Checkpoints from the Hugging Face Hub, into the standard cache layout so caches that other
//! tools filled are reused and ours are theirs:
//!
//! ```text
//! $HF_HUB_CACHE (else $HF_HOME/hub, else ~/.cache/huggingface/hub)
//!   models--Qwen--Qwen3-8B/
//!     blobs/<etag>                 file contents, named by the hub's etag (sha256 for LFS files)
//!     refs/main                    the commit a branch or tag resolved to
//!     snapshots/<commit>/<file>    relative symlinks into blobs/
//!     metrale-locks/<commit>.json  ours: the files and their sha256, written on the first pull
//! ```
//!
//! The protocol is the Hub's: `GET {endpoint}/api/models/{repo}/revision/{rev}` lists the files
//! and names the commit; `HEAD {endpoint}/{repo}/resolve/{commit}/{file}` (redirects not followed)
//! gives `X-Repo-Commit`, `ETag`, and for LFS files `X-Linked-Etag` (the sha256) and
//! `X-Linked-Size`; `GET` the same URL with `Range` fetches the bytes. A download goes to
//! `blobs/<etag>.incomplete`, resumes from its length, and is renamed into place only once its
//! sha256 matches the LFS etag: a corrupted file is refused and nothing is cached.
//!
//! Environment: `HF_ENDPOINT`, `HF_HOME`, `HF_HUB_CACHE`, `HF_TOKEN`, `HF_HUB_OFFLINE`.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};

mod client;
mod lock;

use client::Client;
pub use lock::{Lock, LockedFile, read_lock};
use lock::{adopt, verify_lock, write_lock};

/// The Hub's address when `HF_ENDPOINT` is unset.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// Files the engine reads from a checkpoint; the rest of a repository (other weight formats,
/// images, READMEs) is not downloaded.
fn wanted(file: &str) -> bool {
    let name = file.rsplit('/').next().unwrap_or(file);
    name.ends_with(".safetensors")
        || matches!(
            name,
            "config.json"
                | "generation_config.json"
                | "tokenizer.json"
                | "tokenizer_config.json"
                | "special_tokens_map.json"
                | "chat_template.jinja"
                | "chat_template.json"
                | "model.safetensors.index.json"
                | "preprocessor_config.json"
        )
}

#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("failed to reach {url}: {message}")]
    Http { url: String, message: String },
    #[error("{url} answered {status}: {hint}")]
    Status {
        url: String,
        status: u16,
        hint: String,
    },
    #[error("unexpected answer from {url}: {message}")]
    Protocol { url: String, message: String },
    #[error(
        "{file} of {repo} is corrupted: the hub's sha256 is {expected}, the bytes received hash to {got}; nothing was cached"
    )]
    Corrupted {
        repo: String,
        file: String,
        expected: String,
        got: String,
    },
    #[error(
        "HF_HUB_OFFLINE is set and {repo}@{revision} is not in the cache at {cache}: unset HF_HUB_OFFLINE to download it"
    )]
    NotCached {
        repo: String,
        revision: String,
        cache: PathBuf,
    },
    #[error(
        "cached {file} of {repo}@{commit} does not match the lock written on its first pull ({what}): delete {path} to download it again"
    )]
    LockMismatch {
        repo: String,
        commit: String,
        file: String,
        what: String,
        path: PathBuf,
    },
    #[error("failed to {op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("{0:?} is not a Hugging Face repository id (expected ORG/NAME)")]
    BadRepo(String),
    /// The checkpoint's `config.json` (fetched first) is one `met` cannot load.
    #[error("{repo}@{commit} cannot be served: {message}; nothing else was downloaded")]
    Checkpoint {
        repo: String,
        commit: String,
        message: String,
    },
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> HubError + 'a {
    move |source| HubError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Where and how to download.
#[derive(Debug, Clone)]
pub struct HubConfig {
    pub endpoint: String,
    /// The hub cache directory (holds `models--org--name/`).
    pub cache: PathBuf,
    pub token: Option<String>,
    pub offline: bool,
}

impl HubConfig {
    /// From `HF_ENDPOINT`, `HF_HUB_CACHE`/`HF_HOME`, `HF_TOKEN`, `HF_HUB_OFFLINE`.
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let cache = var("HF_HUB_CACHE").map(PathBuf::from).unwrap_or_else(|| {
            var("HF_HOME")
                .map(PathBuf::from)
                .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".cache/huggingface")))
                .unwrap_or_else(|| PathBuf::from(".cache/huggingface"))
                .join("hub")
        });
        Self {
            endpoint: var("HF_ENDPOINT")
                .unwrap_or_else(|| DEFAULT_ENDPOINT.into())
                .trim_end_matches('/')
                .to_owned(),
            cache,
            token: var("HF_TOKEN"),
            offline: var("HF_HUB_OFFLINE").is_some_and(|v| {
                matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on")
            }),
        }
    }
}

/// For `met serve MODEL`: when `model` is not a directory here but an `org/name` repository id,
/// fetch it (on a runtime of its own, before serving starts) and return the snapshot directory;
/// `None` for a local path. Progress goes to `progress(file, done, total)`.
pub fn resolve_model(
    model: &Path,
    revision: Option<&str>,
    progress: &mut dyn FnMut(&str, u64, u64),
) -> Result<Option<PathBuf>, HubError> {
    let Some(repo) = model.to_str().filter(|m| looks_like_repo_id(m)) else {
        return Ok(None);
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io_err("start a runtime for", model))?;
    let cfg = HubConfig::from_env();
    runtime
        .block_on(fetch(&cfg, repo, revision.unwrap_or("main"), progress))
        .map(Some)
}

/// Whether `arg` names a Hub repository (`org/name`) rather than a local directory.
pub fn looks_like_repo_id(arg: &str) -> bool {
    let parts: Vec<&str> = arg.split('/').collect();
    parts.len() == 2
        && !Path::new(arg).exists()
        && parts.iter().all(|p| {
            !p.is_empty()
                && *p != "."
                && *p != ".."
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        })
}

#[derive(Debug, Deserialize)]
struct RevisionInfo {
    sha: String,
    #[serde(default)]
    siblings: Vec<Sibling>,
}

#[derive(Debug, Deserialize)]
struct Sibling {
    rfilename: String,
}

/// The repository's folder in the cache: `models--org--name`.
pub fn repo_dir(cache: &Path, repo: &str) -> PathBuf {
    cache.join(format!("models--{}", repo.replace('/', "--")))
}

fn is_commit(rev: &str) -> bool {
    rev.len() == 40 && rev.chars().all(|c| c.is_ascii_hexdigit())
}

/// Downloads (or finds in the cache) `repo` at `revision` and returns the snapshot directory.
/// `progress(file, bytes_done, bytes_total)` is called as bytes arrive.
pub async fn fetch(
    cfg: &HubConfig,
    repo: &str,
    revision: &str,
    progress: &mut dyn FnMut(&str, u64, u64),
) -> Result<PathBuf, HubError> {
    if repo.split('/').count() != 2 || repo.split('/').any(str::is_empty) {
        return Err(HubError::BadRepo(repo.to_owned()));
    }
    let dir = repo_dir(&cfg.cache, repo);
    if cfg.offline {
        let commit = cached_commit(&dir, revision).ok_or_else(|| HubError::NotCached {
            repo: repo.to_owned(),
            revision: revision.to_owned(),
            cache: cfg.cache.clone(),
        })?;
        let snapshot = dir.join("snapshots").join(&commit);
        match read_lock(&dir, &commit)? {
            Some(lock) => verify_lock(&snapshot, &lock)?,
            // A snapshot another tool (huggingface_hub) downloaded: adopt it.
            None => write_lock(&dir, &adopt(&snapshot, repo, revision, &commit)?)?,
        }
        return Ok(snapshot);
    }

    let client = Client::new(cfg)?;
    let info_url = format!("{}/api/models/{repo}/revision/{revision}", cfg.endpoint);
    let info: RevisionInfo = client.get_json(&info_url, repo).await?;
    if !is_commit(&info.sha) {
        return Err(HubError::Protocol {
            url: info_url,
            message: format!("{:?} is not a commit hash", info.sha),
        });
    }
    let commit = info.sha;
    let snapshot = dir.join("snapshots").join(&commit);
    if revision != commit {
        let refs = dir.join("refs");
        fs::create_dir_all(&refs).map_err(io_err("create", &refs))?;
        let r = refs.join(revision);
        fs::write(&r, &commit).map_err(io_err("write", &r))?;
    }

    let mut files: Vec<String> = info
        .siblings
        .into_iter()
        .map(|s| s.rfilename)
        .filter(|f| wanted(f))
        .collect();
    files.sort();
    if !files.iter().any(|f| f == "config.json") {
        return Err(HubError::Protocol {
            url: info_url,
            message: format!("{repo}@{commit} has no config.json: not a transformers checkpoint"),
        });
    }

    // A snapshot pulled before: verify it against its lock rather than asking the hub again.
    if let Some(lock) = read_lock(&dir, &commit)?
        && files.iter().all(|f| lock.files.contains_key(f))
    {
        verify_lock(&snapshot, &lock)?;
        return Ok(snapshot);
    }

    // config.json first: a checkpoint met cannot load (an unknown architecture or
    // quantization_config) is refused before its weights are fetched.
    files.sort_by_key(|f| f != "config.json");
    let mut locked = BTreeMap::new();
    for file in &files {
        let entry = client
            .fetch_file(cfg, &dir, repo, &commit, file, progress)
            .await?;
        link(&dir, &snapshot, file, &entry.blob)?;
        if file == "config.json" {
            check_config(&snapshot.join(file)).map_err(|message| HubError::Checkpoint {
                repo: repo.to_owned(),
                commit: commit.clone(),
                message,
            })?;
        }
        locked.insert(
            file.clone(),
            LockedFile {
                sha256: entry.sha256,
                size: entry.size,
            },
        );
    }
    let lock = Lock {
        repo: repo.to_owned(),
        revision: revision.to_owned(),
        commit: commit.clone(),
        files: locked,
    };
    write_lock(&dir, &lock)?;
    Ok(snapshot)
}

/// Whether `met` can load the checkpoint whose `config.json` is at `path`: its architecture
/// and its `quantization_config` (FP8, NVFP4), as loading will read them.
fn check_config(path: &Path) -> Result<(), String> {
    let config = crate::loader::ModelConfig::from_file(path).map_err(|e| e.to_string())?;
    config.check_architecture().map_err(|e| e.to_string())
}

/// The commit `revision` resolved to last time (or `revision` itself when it is one), if its
/// snapshot is in the cache.
fn cached_commit(dir: &Path, revision: &str) -> Option<String> {
    let commit = if is_commit(revision) {
        revision.to_owned()
    } else {
        fs::read_to_string(dir.join("refs").join(revision))
            .ok()?
            .trim()
            .to_owned()
    };
    dir.join("snapshots")
        .join(&commit)
        .is_dir()
        .then_some(commit)
}

/// `snapshots/<commit>/<file>` → `../../blobs/<etag>` (one more `..` per folder in `file`).
fn link(dir: &Path, snapshot: &Path, file: &str, blob: &Path) -> Result<(), HubError> {
    let path = snapshot.join(file);
    let parent = path.parent().unwrap_or(snapshot);
    fs::create_dir_all(parent).map_err(io_err("create", parent))?;
    let depth = file.matches('/').count() + 2;
    let mut target = PathBuf::new();
    for _ in 0..depth {
        target.push("..");
    }
    target.push(blob.strip_prefix(dir).unwrap_or(blob));
    let _ = fs::remove_file(&path);
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(&target, &path).map_err(io_err("link", &path))
    }
    #[cfg(not(unix))]
    {
        fs::copy(blob, &path)
            .map(|_| ())
            .map_err(io_err("copy", &path))
    }
}

pub fn sha256_file(path: &Path) -> Result<String, HubError> {
    let mut f = File::open(path).map_err(io_err("open", path))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(io_err("read", path))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_ids_are_told_from_paths() {
        assert!(looks_like_repo_id("Qwen/Qwen3-8B"));
        assert!(looks_like_repo_id("nvidia/Qwen3.6-35B-A3B-FP8"));
        assert!(!looks_like_repo_id("/abs/path"));
        assert!(!looks_like_repo_id("a/b/c"));
        assert!(!looks_like_repo_id("../x"));
    }

    #[test]
    fn only_what_the_engine_reads_is_fetched() {
        assert!(wanted("model-00001-of-00002.safetensors"));
        assert!(wanted("config.json"));
        assert!(!wanted("pytorch_model.bin"));
        assert!(!wanted("README.md"));
    }
}
