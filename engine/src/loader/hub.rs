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
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use futures_util::StreamExt as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

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

    let mut locked = BTreeMap::new();
    for file in &files {
        let entry = client
            .fetch_file(cfg, &dir, repo, &commit, file, progress)
            .await?;
        link(&dir, &snapshot, file, &entry.blob)?;
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

fn write_lock(dir: &Path, lock: &Lock) -> Result<(), HubError> {
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
fn verify_lock(snapshot: &Path, lock: &Lock) -> Result<(), HubError> {
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
fn adopt(snapshot: &Path, repo: &str, revision: &str, commit: &str) -> Result<Lock, HubError> {
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

/// One downloaded (or already cached) file.
struct Fetched {
    blob: PathBuf,
    sha256: String,
    size: u64,
}

struct Client {
    /// Follows redirects (downloads go to a CDN).
    get: reqwest::Client,
    /// Does not: the hub's own headers are on the first answer.
    head: reqwest::Client,
    token: Option<String>,
}

impl Client {
    fn new(cfg: &HubConfig) -> Result<Self, HubError> {
        let build = |redirects: bool| {
            let mut b = reqwest::Client::builder()
                .user_agent(concat!("metrale-met/", env!("CARGO_PKG_VERSION")))
                .connect_timeout(std::time::Duration::from_secs(30));
            if !redirects {
                b = b.redirect(reqwest::redirect::Policy::none());
            }
            b.build().map_err(|e| HubError::Http {
                url: cfg.endpoint.clone(),
                message: e.to_string(),
            })
        };
        Ok(Self {
            get: build(true)?,
            head: build(false)?,
            token: cfg.token.clone(),
        })
    }

    fn auth(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        url: &str,
        repo: &str,
    ) -> Result<T, HubError> {
        let resp = self
            .auth(self.get.get(url))
            .send()
            .await
            .map_err(|e| http_err(url, e))?;
        check_status(url, repo, resp.status().as_u16())?;
        resp.json().await.map_err(|e| HubError::Protocol {
            url: url.to_owned(),
            message: e.to_string(),
        })
    }

    async fn fetch_file(
        &self,
        cfg: &HubConfig,
        dir: &Path,
        repo: &str,
        commit: &str,
        file: &str,
        progress: &mut dyn FnMut(&str, u64, u64),
    ) -> Result<Fetched, HubError> {
        let url = format!("{}/{repo}/resolve/{commit}/{file}", cfg.endpoint);
        let head = self
            .auth(self.head.head(&url))
            .send()
            .await
            .map_err(|e| http_err(&url, e))?;
        let status = head.status().as_u16();
        if !(200..400).contains(&status) {
            check_status(&url, repo, status)?;
        }
        let header = |name: &str| {
            head.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(|v| v.trim_start_matches("W/").trim_matches('"').to_owned())
        };
        // LFS files: the linked etag is the sha256 of the contents.
        let lfs_sha = header("x-linked-etag").filter(|e| e.len() == 64);
        let etag = lfs_sha
            .clone()
            .or_else(|| header("etag"))
            .filter(|e| !e.is_empty() && !e.contains('/') && !e.contains(".."))
            .ok_or_else(|| HubError::Protocol {
                url: url.clone(),
                message: "no ETag header".into(),
            })?;
        let size: Option<u64> = header("x-linked-size")
            .or_else(|| header("content-length"))
            .and_then(|s| s.parse().ok());

        let blobs = dir.join("blobs");
        fs::create_dir_all(&blobs).map_err(io_err("create", &blobs))?;
        let blob = blobs.join(&etag);
        if blob.is_file() {
            let sha256 = sha256_file(&blob)?;
            if lfs_sha.as_ref().is_none_or(|want| *want == sha256) {
                let size = fs::metadata(&blob).map_err(io_err("read", &blob))?.len();
                progress(file, size, size);
                return Ok(Fetched { blob, sha256, size });
            }
            // A blob that does not hash to its name: fetch it again.
            fs::remove_file(&blob).map_err(io_err("remove", &blob))?;
        }

        let partial = blobs.join(format!("{etag}.incomplete"));
        let have = fs::metadata(&partial).map(|m| m.len()).unwrap_or(0);
        let mut req = self.auth(self.get.get(&url));
        if have > 0 {
            req = req.header(reqwest::header::RANGE, format!("bytes={have}-"));
        }
        let resp = req.send().await.map_err(|e| http_err(&url, e))?;
        let status = resp.status().as_u16();
        check_status(&url, repo, status)?;
        // 206: the server resumed; 200: it sent everything, so start over.
        let mut out = if status == 206 {
            OpenOptions::new()
                .append(true)
                .open(&partial)
                .map_err(io_err("open", &partial))?
        } else {
            File::create(&partial).map_err(io_err("create", &partial))?
        };
        let mut done = if status == 206 { have } else { 0 };
        let total = size.unwrap_or(0);
        progress(file, done, total);
        let mut body = resp.bytes_stream();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| HubError::Http {
                url: url.clone(),
                message: format!(
                    "download interrupted after {done} bytes ({e}); run again to resume"
                ),
            })?;
            out.write_all(&chunk).map_err(io_err("write", &partial))?;
            done += chunk.len() as u64;
            progress(file, done, total);
        }
        out.flush().map_err(io_err("write", &partial))?;
        drop(out);

        let sha256 = sha256_file(&partial)?;
        if let Some(want) = &lfs_sha
            && *want != sha256
        {
            fs::remove_file(&partial).map_err(io_err("remove", &partial))?;
            return Err(HubError::Corrupted {
                repo: repo.to_owned(),
                file: file.to_owned(),
                expected: want.clone(),
                got: sha256,
            });
        }
        if let Some(want) = size
            && done != want
        {
            fs::remove_file(&partial).map_err(io_err("remove", &partial))?;
            return Err(HubError::Protocol {
                url,
                message: format!("received {done} bytes, the hub announced {want}"),
            });
        }
        fs::rename(&partial, &blob).map_err(io_err("rename", &partial))?;
        Ok(Fetched {
            blob,
            sha256,
            size: done,
        })
    }
}

fn http_err(url: &str, e: reqwest::Error) -> HubError {
    HubError::Http {
        url: url.to_owned(),
        message: e.to_string(),
    }
}

fn check_status(url: &str, repo: &str, status: u16) -> Result<(), HubError> {
    if (200..300).contains(&status) {
        return Ok(());
    }
    let hint = match status {
        401 | 403 => format!(
            "{repo} is gated or private: accept its terms on the Hub and set HF_TOKEN to a read token"
        ),
        404 => {
            format!("no such repository, revision or file: check the name {repo} and the revision")
        }
        416 => "the server refused to resume: delete the .incomplete file and run again".into(),
        s if s >= 500 => "the hub has trouble: try again later".into(),
        _ => "unexpected status".into(),
    };
    Err(HubError::Status {
        url: url.to_owned(),
        status,
        hint,
    })
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
