//! `metralectl self update`: the installers' checks, in Rust, through the `self_update` crate's
//! download, extract and all-or-nothing move.
//!
//! 1. Download `SHA256SUMS` and `SHA256SUMS.minisig` of the release (the latest, or `--version`).
//! 2. Verify the signature against the release key built into this binary (or `--pubkey`); the
//!    signed trusted comment names the version, which must be the one asked for.
//! 3. Download `metrale-TARGET.tar.gz` into a temporary directory beside this binary (the same
//!    file system, so the final renames are atomic) and compare its SHA-256 with the signed sums.
//! 4. Only then unpack it, and move `metralectl` and `met` into place together: both or neither.
//!
//! Any failure before step 4's renames leaves the installed binaries as they were, and the
//! temporary directory is removed (an update killed mid-download leaves a `.metrale-update*`
//! directory that the next update ignores, and nothing else).
//!
//! The `self_update` crate's own release backends are not used: they pick and install an asset
//! before anything we could check, and its signature option is zipsign, a second scheme; the
//! project has one (minisign), checked here before anything is unpacked.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow, bail};
use self_update::{ArchiveKind, Compression, Download, Extract, MoveAll};

use super::{TARGET, archive_name, expected_hash, release_url, sha256_file, version_of};
use crate::signing::{self, TrustedKey};

/// The most a `SHA256SUMS` or signature may weigh: anything bigger is not one.
const SMALL_FILE_LIMIT: u64 = 1 << 20;
/// The most a release archive may weigh.
const ARCHIVE_LIMIT: u64 = 2 << 30;

#[derive(Debug)]
pub struct Request<'a> {
    /// The release base URL (checked).
    pub base: &'a str,
    /// A version to install (up or down); `None`: the latest, if newer.
    pub version: Option<&'a str>,
    /// The key the release must be signed with.
    pub key: &'a TrustedKey,
    /// This binary (it and `met` beside it are replaced).
    pub exe: &'a Path,
    /// Show download progress bars.
    pub progress: bool,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    UpToDate {
        version: String,
    },
    Updated {
        from: String,
        to: String,
        dir: PathBuf,
    },
}

pub fn update(req: &Request<'_>) -> anyhow::Result<Outcome> {
    let current = env!("CARGO_PKG_VERSION");
    let url = release_url(req.base, req.version);
    let sums = fetch_small(&format!("{url}/SHA256SUMS"))?;
    let sig = fetch_small(&format!("{url}/SHA256SUMS.minisig"))?;
    let sums_name = PathBuf::from(format!("{url}/SHA256SUMS"));
    let sig_name = PathBuf::from(format!("{url}/SHA256SUMS.minisig"));
    let sig_text = String::from_utf8(sig)
        .map_err(|_| anyhow!("{} is not text, so not a signature", sig_name.display()))?;
    let verified = signing::verify(
        &sums_name,
        &sums,
        &sig_name,
        &sig_text,
        std::slice::from_ref(req.key),
    )?;
    let version = version_of(&verified.trusted_comment)?.to_owned();
    match req.version {
        Some(asked) if asked.trim_start_matches('v') != version => bail!(
            "{url} holds a release signed as version {version}, not {asked}: refusing a \
             mislabelled release"
        ),
        None if !self_update::version::bump_is_greater(current, &version)
            .with_context(|| format!("the release version {version} is not semver"))? =>
        {
            return Ok(Outcome::UpToDate {
                version: current.to_owned(),
            });
        }
        _ => {}
    }
    let sums = String::from_utf8(sums).context("SHA256SUMS is not text")?;
    let name = archive_name(TARGET);
    let expected = expected_hash(&sums, &name)?;

    let dir = req
        .exe
        .parent()
        .with_context(|| format!("{} has no directory", req.exe.display()))?;
    let tmp = tempfile::Builder::new()
        .prefix(".metrale-update")
        .tempdir_in(dir)
        .with_context(|| {
            format!(
                "cannot make a temporary directory in {} (is it writable by you?)",
                dir.display()
            )
        })?;
    let archive = tmp.path().join(&name);
    download(&format!("{url}/{name}"), &archive, req.progress)?;
    let got = sha256_file(&archive)?;
    if got != expected {
        bail!(
            "{name} has SHA-256 {got}, but the signed SHA256SUMS says {expected}: the download \
             is corrupt or was tampered with; nothing was changed"
        );
    }

    let unpack = tmp.path().join("unpack");
    Extract::from_source(&archive)
        .archive(ArchiveKind::Tar(Some(Compression::Gz)))
        .extract_into(&unpack)
        .map_err(|e| anyhow!("cannot unpack {name}: {e}"))?;
    let stash = tmp.path().join("stash");
    fs::create_dir(&stash).with_context(|| format!("cannot create {}", stash.display()))?;
    let mut moves = MoveAll::from_temp(&stash);
    // `met` first and `metralectl` last: a failure rolls both back.
    for bin in ["met", "metralectl"] {
        let new = unpack.join(format!("metrale-{TARGET}")).join(bin);
        if !new.is_file() {
            bail!("{name} has no metrale-{TARGET}/{bin}: not a Metrale release archive");
        }
        fs::set_permissions(&new, fs::Permissions::from_mode(0o755))
            .with_context(|| format!("cannot make {} executable", new.display()))?;
        let dest = if bin == "metralectl" {
            req.exe.to_path_buf()
        } else {
            dir.join(bin)
        };
        moves.add(new, dest);
    }
    moves
        .commit()
        .map_err(|e| anyhow!("cannot move the new binaries into {}: {e}", dir.display()))?;
    Ok(Outcome::Updated {
        from: current.to_owned(),
        to: version,
        dir: dir.to_path_buf(),
    })
}

fn fetch_small(url: &str) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    Download::from_url(url)
        .max_download_size(SMALL_FILE_LIMIT)
        .download_to(&mut out)
        .map_err(|e| {
            anyhow!(
                "cannot download {url}: {e} (check the network, and --url or \
                 METRALE_DOWNLOAD_URL for a mirror)"
            )
        })?;
    Ok(out)
}

fn download(url: &str, to: &Path, progress: bool) -> anyhow::Result<()> {
    let file = fs::File::create(to).with_context(|| format!("cannot create {}", to.display()))?;
    Download::from_url(url)
        .max_download_size(ARCHIVE_LIMIT)
        .show_download_progress(progress)
        .download_to(file)
        .map_err(|e| anyhow!("cannot download {url}: {e}; nothing was changed"))
}
