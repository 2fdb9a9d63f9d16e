//! Stamps the binary with the git commit it was built from, for `GET /version` and benchmark
//! records: `MET_GIT_COMMIT` (40 hex digits, or `unknown` outside a git checkout) and
//! `MET_GIT_DIRTY` (`true` when tracked files differed from that commit at build time), and
//! `MET_VERSION_LONG`, what `met --version` prints after the name (`0.1.0 (git 9561bc7)`).
//! `METRALE_GIT_COMMIT` in the build's environment overrides both (container builds copy the
//! sources without `.git`).

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn main() {
    println!("cargo:rerun-if-env-changed=METRALE_GIT_COMMIT");
    if let Ok(commit) = std::env::var("METRALE_GIT_COMMIT") {
        println!("cargo:rustc-env=MET_GIT_COMMIT={commit}");
        println!("cargo:rustc-env=MET_GIT_DIRTY=false");
        long_version(&commit, false);
        return;
    }
    let commit = git(&["rev-parse", "HEAD"]).filter(|c| c.len() == 40);
    let dirty = commit.is_some()
        && git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    // Rebuild the stamp when HEAD moves or the index changes (a commit, a checkout, an add).
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        let dir = PathBuf::from(dir);
        println!("cargo:rerun-if-changed={}", dir.join("HEAD").display());
        println!("cargo:rerun-if-changed={}", dir.join("index").display());
        if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"])
            && let Some(common) = git(&["rev-parse", "--git-common-dir"])
        {
            let common = PathBuf::from(common);
            let common = if common.is_absolute() {
                common
            } else {
                PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default())
                    .join(common)
            };
            // A branch lives in its loose ref file, or in packed-refs once packed.
            let loose = common.join(&head_ref);
            let watched = if loose.exists() {
                loose
            } else {
                common.join("packed-refs")
            };
            if watched.exists() {
                println!("cargo:rerun-if-changed={}", watched.display());
            }
        }
    }
    println!(
        "cargo:rustc-env=MET_GIT_COMMIT={}",
        commit.as_deref().unwrap_or("unknown")
    );
    println!("cargo:rustc-env=MET_GIT_DIRTY={dirty}");
    long_version(commit.as_deref().unwrap_or("unknown"), dirty);
}

/// `0.1.0 (git 9561bc7)`, `0.1.0 (git 9561bc7, modified)` or `0.1.0` outside a checkout.
fn long_version(commit: &str, dirty: bool) {
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let short: String = commit.chars().take(7).collect();
    let long = match (commit, dirty) {
        ("unknown", _) => version,
        (_, false) => format!("{version} (git {short})"),
        (_, true) => format!("{version} (git {short}, modified)"),
    };
    println!("cargo:rustc-env=MET_VERSION_LONG={long}");
}
