//! The installer's receipt: what `install.sh` added, so that uninstalling removes exactly that.
//! `install.sh` writes it (one `key=value` a line); `install.sh --uninstall` and
//! `metralectl self uninstall` read it.
//!
//! ```text
//! version=0.2.0
//! file=/home/u/.local/bin/metralectl
//! file=/home/u/.local/bin/met
//! profile=/home/u/.profile
//! created=/home/u/.profile
//! line=export PATH="/home/u/.local/bin:$PATH" # added by the Metrale installer
//! dir=/home/u/.local/bin
//! ```

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow};

use crate::fsutil::write_atomic;

/// The binaries a receipt may name; anything else in it is never removed.
const BINARIES: [&str; 2] = ["metralectl", "met"];

/// `${XDG_DATA_HOME:-$HOME/.local/share}/metrale/install-receipt`, as install.sh computes it.
pub fn path() -> Option<PathBuf> {
    let data = std::env::var_os("XDG_DATA_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))?;
    Some(data.join("metrale").join("install-receipt"))
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Receipt {
    pub files: Vec<PathBuf>,
    pub profiles: Vec<PathBuf>,
    pub created: Vec<PathBuf>,
    pub line: Option<String>,
    /// Directories the installer created (removed when empty).
    pub dirs: Vec<PathBuf>,
}

impl Receipt {
    pub fn parse(text: &str) -> Self {
        let mut r = Self::default();
        for line in text.lines() {
            match line.split_once('=') {
                Some(("file", v)) => r.files.push(v.into()),
                Some(("profile", v)) => r.profiles.push(v.into()),
                Some(("created", v)) => r.created.push(v.into()),
                Some(("line", v)) => r.line = Some(v.to_owned()),
                Some(("dir", v)) => r.dirs.push(v.into()),
                _ => {}
            }
        }
        r
    }
}

/// What an uninstall removed.
#[derive(Debug, Default)]
pub struct Removed {
    pub files: Vec<PathBuf>,
    pub profile_lines: Vec<PathBuf>,
}

/// Undoes `receipt`: its binaries, its PATH line in each profile (a profile it created and
/// left empty goes too), then the receipt file itself.
pub fn undo(receipt_path: &Path, receipt: &Receipt) -> anyhow::Result<Removed> {
    let mut removed = Removed::default();
    for file in &receipt.files {
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if BINARIES.contains(&name) && remove_if_present(file)? {
            removed.files.push(file.clone());
        }
    }
    if let Some(line) = &receipt.line {
        for profile in &receipt.profiles {
            if remove_line(profile, line, receipt.created.contains(profile))? {
                removed.profile_lines.push(profile.clone());
            }
        }
    }
    remove_if_present(receipt_path)?;
    // The directories it created, deepest first, each only if now empty.
    let mut dirs: Vec<&PathBuf> = receipt.dirs.iter().collect();
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for dir in dirs
        .into_iter()
        .chain(receipt_path.parent().map(Path::to_path_buf).as_ref())
    {
        let _ = fs::remove_dir(dir); // fails, as it should, when not empty
    }
    Ok(removed)
}

pub fn remove_if_present(path: &Path) -> anyhow::Result<bool> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(anyhow!(e).context(format!(
            "cannot remove {} (is its directory writable by you?)",
            path.display()
        ))),
    }
}

/// Removes every line equal to `line` from `profile`, keeping its mode; deletes the file when
/// the installer created it and nothing else is left. Whether a line was removed.
fn remove_line(profile: &Path, line: &str, created: bool) -> anyhow::Result<bool> {
    let text = match fs::read_to_string(profile) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(anyhow!(e).context(format!("cannot read {}", profile.display()))),
    };
    let kept: Vec<&str> = text.lines().filter(|l| *l != line).collect();
    if kept.len() == text.lines().count() {
        return Ok(false);
    }
    if created && kept.iter().all(|l| l.trim().is_empty()) {
        remove_if_present(profile)?;
        return Ok(true);
    }
    let mode = fs::metadata(profile)
        .with_context(|| format!("cannot read {}", profile.display()))?
        .permissions()
        .mode();
    let mut out = kept.join("\n");
    out.push('\n');
    write_atomic(profile, out.as_bytes())?;
    fs::set_permissions(profile, fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot restore the mode of {}", profile.display()))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undo_removes_exactly_what_the_receipt_names() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bin = dir.path().join("bin");
        fs::create_dir(&bin).expect("bin");
        for f in ["metralectl", "met", "other"] {
            fs::write(bin.join(f), b"x").expect("bin file");
        }
        let line = format!(
            "export PATH=\"{}:$PATH\" # added by the Metrale installer",
            bin.display()
        );
        let profile = dir.path().join(".profile");
        fs::write(&profile, format!("# mine\n{line}\nalias ll='ls -l'\n")).expect("profile");
        let created = dir.path().join(".zprofile");
        fs::write(&created, format!("{line}\n")).expect("created");
        let receipt_path = dir.path().join("receipt");
        let text = format!(
            "version=1\nfile={b}/metralectl\nfile={b}/met\nfile={b}/other\nprofile={p}\nprofile={c}\ncreated={c}\nline={line}\n",
            b = bin.display(),
            p = profile.display(),
            c = created.display()
        );
        fs::write(&receipt_path, &text).expect("receipt");
        let removed = undo(&receipt_path, &Receipt::parse(&text)).expect("undo");
        assert_eq!(removed.files.len(), 2);
        assert!(
            bin.join("other").exists(),
            "only metralectl and met are ever removed"
        );
        assert_eq!(
            fs::read_to_string(&profile).expect("profile"),
            "# mine\nalias ll='ls -l'\n"
        );
        assert!(!created.exists() && !receipt_path.exists());
    }
}
