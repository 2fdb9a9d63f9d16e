//! Releases: where they live, what they are called, and checking them (`SHA256SUMS` signed with
//! the release key). `update.rs` is `metralectl self update`, built on these.
//!
//! A release directory holds, for each target: `metrale-TARGET.tar.gz` (the directory
//! `metrale-TARGET/` with `metralectl` and `met`) and `metralectl-TARGET` (the bare binary,
//! the installers' last-resort signature checker); and once: `SHA256SUMS` and
//! `SHA256SUMS.minisig`, whose signed trusted comment is `metrale release VERSION`.
//! `scripts/release` makes it; docs/install.md describes it.

use anyhow::{Context as _, bail};
use sha2::{Digest as _, Sha256};

pub mod receipt;
pub mod update;

/// Where releases are published: `BASE/download/vVERSION/FILE` and `BASE/latest/download/FILE`
/// (the layout of GitHub releases, which any static mirror can copy).
pub const DEFAULT_BASE_URL: &str = "https://github.com/metrale/metrale/releases";

/// The target triple this binary was built for.
pub const TARGET: &str = env!("METRALE_TARGET");

/// The prefix of a release's trusted comment (`scripts/release` signs it); the version follows.
const COMMENT_PREFIX: &str = "metrale release ";

/// The version a release's trusted comment names.
pub fn version_of(comment: &str) -> anyhow::Result<&str> {
    match comment.strip_prefix(COMMENT_PREFIX) {
        Some(v) if !v.is_empty() && !v.contains(char::is_whitespace) => Ok(v),
        _ => bail!(
            "the signed SHA256SUMS does not name a release (its trusted comment is `{comment}`, \
             expected `{COMMENT_PREFIX}VERSION`)"
        ),
    }
}

pub fn archive_name(target: &str) -> String {
    format!("metrale-{target}.tar.gz")
}

/// The base URL: `--url` (which clap fills from `$METRALE_DOWNLOAD_URL`, as the installers
/// read it), else the default; checked.
pub fn base_url(flag: Option<&str>) -> anyhow::Result<String> {
    let url = flag
        .filter(|u| !u.is_empty())
        .unwrap_or(DEFAULT_BASE_URL)
        .to_owned();
    check_url(&url)?;
    Ok(url.trim_end_matches('/').to_owned())
}

/// HTTPS only, except plain HTTP to a loopback address (how the tests serve releases).
pub fn check_url(url: &str) -> anyhow::Result<()> {
    if url.starts_with("https://") {
        return Ok(());
    }
    if let Some(rest) = url.strip_prefix("http://") {
        let authority = rest.split('/').next().unwrap_or_default();
        let host = match authority.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or_default(),
            None => authority.split(':').next().unwrap_or_default(),
        };
        if host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
        {
            return Ok(());
        }
    }
    bail!(
        "refusing to download from {url}: only https:// URLs are allowed (plain http:// only to a \
         loopback address such as 127.0.0.1)"
    )
}

/// The directory URL of a release: a version (with or without its `v`), or the latest.
pub fn release_url(base: &str, version: Option<&str>) -> String {
    match version {
        Some(v) => format!("{base}/download/v{}", v.trim_start_matches('v')),
        None => format!("{base}/latest/download"),
    }
}

/// Lowercase hex SHA-256 of a file, read in chunks (archives are large).
pub fn sha256_file(path: &std::path::Path) -> anyhow::Result<String> {
    use std::io::Read as _;
    let mut file = std::fs::File::open(path)
        .with_context(|| format!("cannot read {} to hash it", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file
            .read(&mut buf)
            .with_context(|| format!("cannot read {} to hash it", path.display()))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// The hash `SHA256SUMS` lists for `name` (lines `HEX  NAME` or `HEX *NAME`).
pub fn expected_hash(sums: &str, name: &str) -> anyhow::Result<String> {
    let mut names = Vec::new();
    for line in sums.lines().filter(|l| !l.trim().is_empty()) {
        let (hash, file) = line
            .split_once(' ')
            .map(|(h, f)| (h, f.trim_start_matches([' ', '*'])))
            .context("SHA256SUMS has a line that is not `HASH  FILE`")?;
        if file == name {
            if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                bail!("SHA256SUMS lists {name} with a malformed hash `{hash}`");
            }
            return Ok(hash.to_ascii_lowercase());
        }
        names.push(file.to_owned());
    }
    bail!(
        "this release has no {name} (it carries: {}); build from source instead (docs/install.md)",
        names.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_https_or_loopback_http() {
        for ok in [
            "https://example.com/x",
            "http://127.0.0.1:8080/r",
            "http://localhost/r",
            "http://[::1]:9/r",
        ] {
            assert!(check_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://example.com/r",
            "http://127.0.0.1.evil.com/r",
            "ftp://127.0.0.1/r",
            "file:///tmp",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sums_lookup_names_what_is_there() {
        let h = "a".repeat(64);
        let sums = format!("{h}  metrale-x.tar.gz\n{h} *metralectl-x\n");
        assert_eq!(expected_hash(&sums, "metralectl-x").expect("found"), h);
        let err = expected_hash(&sums, "metrale-y.tar.gz").expect_err("absent");
        assert!(format!("{err}").contains("metrale-x.tar.gz, metralectl-x"));
    }

    #[test]
    fn file_hash_is_sha256() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        std::fs::write(&path, b"abc").expect("write");
        assert_eq!(
            sha256_file(&path).expect("hash"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn trusted_comment_round_trips() {
        assert_eq!(version_of("metrale release 1.2.3").expect("v"), "1.2.3");
        assert!(version_of("timestamp:1 file:SHA256SUMS").is_err());
        assert_eq!(release_url("b", Some("v1.0.0")), "b/download/v1.0.0");
        assert_eq!(release_url("b", None), "b/latest/download");
    }
}
