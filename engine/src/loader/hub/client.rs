//! The Hub's HTTP side: the revision API, `HEAD` for the etags, resumable `GET` with `Range`
//! into `blobs/<etag>.incomplete`, and the sha256 check before the rename.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use futures_util::StreamExt as _;

use super::{HubConfig, HubError, io_err, sha256_file};

/// One downloaded (or already cached) file.
pub(super) struct Fetched {
    pub blob: PathBuf,
    pub sha256: String,
    pub size: u64,
}

pub(super) struct Client {
    /// Follows redirects (downloads go to a CDN).
    get: reqwest::Client,
    /// Does not: the hub's own headers are on the first answer.
    head: reqwest::Client,
    token: Option<String>,
}

impl Client {
    pub(super) fn new(cfg: &HubConfig) -> Result<Self, HubError> {
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

    pub(super) async fn get_json<T: serde::de::DeserializeOwned>(
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

    pub(super) async fn fetch_file(
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
