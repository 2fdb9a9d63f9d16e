//! `metralectl self update` against a real HTTP server on 127.0.0.1 serving a release made by
//! `scripts/release` with a throwaway key, which the command is told to trust with `--pubkey`
//! (a flag, so nothing in the environment can swap the release key in production).
//!
//! The binary under test is a copy of the debug `metralectl` in a temporary "install"
//! directory, beside an old `met`; the release carries the same `metralectl` and a fake `met`.

mod support;

use std::fs;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::busy::RunCopied as _;
use support::{FAKE_MET, Fault, Server, TARGET, VERSION, fixture, text};

const OLD_MET: &str = "#!/bin/sh\necho old-met\n";

struct Install {
    tmp: tempfile::TempDir,
    dir: PathBuf,
    root: PathBuf,
    server: Server,
}

impl Install {
    fn new() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("bin");
        fs::create_dir(&dir).expect("bin");
        fs::copy(support::metralectl(), dir.join("metralectl")).expect("copy metralectl");
        fs::write(dir.join("met"), OLD_MET).expect("old met");
        let root = tmp.path().join("www");
        let server = support::serve_release(&root);
        Self {
            tmp,
            dir,
            root,
            server,
        }
    }

    fn ctl(&self) -> PathBuf {
        self.dir.join("metralectl")
    }

    fn update_cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(self.ctl());
        cmd.args(["self", "update", "--url", &self.server.base, "--pubkey"])
            .arg(&fixture().pubkey)
            .args(args)
            .env_remove("METRALE_DOWNLOAD_URL");
        cmd
    }

    fn update(&self, args: &[&str]) -> Output {
        self.update_cmd(args)
            .output_copied()
            .expect("run self update")
    }

    fn inode(&self) -> u64 {
        fs::metadata(self.ctl()).expect("ctl").ino()
    }

    /// The old binaries are in place, whole, and run; no temporary directory is left.
    fn assert_unchanged(&self, inode: u64) {
        assert_eq!(self.inode(), inode, "metralectl was not replaced");
        assert_eq!(
            fs::read_to_string(self.dir.join("met")).expect("met"),
            OLD_MET
        );
        let out = Command::new(self.ctl())
            .arg("--version")
            .output_copied()
            .expect("run");
        assert!(out.status.success(), "the old metralectl still works");
        assert_eq!(self.entries(), ["met", "metralectl"], "nothing left behind");
    }

    /// The update failed, said `says`, and changed nothing.
    fn assert_refused(&self, out: &Output, says: &str, inode: u64) {
        assert!(!out.status.success(), "must fail");
        let err = text(&out.stderr);
        assert!(err.contains(says), "expected `{says}` in: {err}");
        self.assert_unchanged(inode);
    }

    fn entries(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(&self.dir)
            .expect("dir")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

#[test]
fn a_good_update_replaces_both_binaries() {
    let inst = Install::new();
    let inode = inst.inode();
    let out = inst.update(&["--json"]);
    assert!(out.status.success(), "update: {}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json");
    assert_eq!(json["updated"], true);
    assert_eq!(json["version"], VERSION);
    assert_eq!(json["target"], TARGET);
    assert_ne!(inst.inode(), inode, "metralectl was replaced");
    assert_eq!(
        fs::read_to_string(inst.dir.join("met")).expect("met"),
        FAKE_MET
    );
    assert_eq!(inst.entries(), ["met", "metralectl"]);
    let version = Command::new(inst.ctl())
        .arg("--version")
        .output_copied()
        .expect("run");
    assert!(version.status.success(), "the new metralectl runs");
    assert!(
        inst.server
            .hits()
            .iter()
            .all(|h| h.starts_with("/latest/download/")),
        "{:?}",
        inst.server.hits()
    );
}

#[test]
fn an_older_or_equal_latest_is_up_to_date() {
    let inst = Install::new();
    // The latest release, signed as this binary's own version.
    let sums = tempfile::tempdir().expect("tempdir");
    let path = sums.path().join("SHA256SUMS");
    fs::copy(fixture().release.join("SHA256SUMS"), &path).expect("sums");
    let current = env!("CARGO_PKG_VERSION");
    let signed = Command::new(support::metralectl())
        .arg("sign")
        .arg(&path)
        .arg("--key")
        .arg(&fixture().key)
        .args(["--trusted-comment", &format!("metrale release {current}")])
        .output_copied()
        .expect("sign");
    assert!(signed.status.success(), "{}", text(&signed.stderr));
    fs::remove_file(inst.root.join("latest/download/SHA256SUMS.minisig")).expect("rm");
    fs::copy(
        sums.path().join("SHA256SUMS.minisig"),
        inst.root.join("latest/download/SHA256SUMS.minisig"),
    )
    .expect("sig");
    let inode = inst.inode();
    let out = inst.update(&[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("is the latest release"));
    inst.assert_unchanged(inode);
}

#[test]
fn a_tampered_archive_leaves_the_old_binaries() {
    let inst = Install::new();
    support::replace_served(
        &inst.root,
        &format!("metrale-{TARGET}.tar.gz"),
        &support::flipped_archive(),
    );
    let inode = inst.inode();
    let out = inst.update(&["--version", VERSION]);
    inst.assert_refused(&out, "but the signed SHA256SUMS says", inode);
    assert!(text(&out.stderr).contains("nothing was changed"));
}

#[test]
fn a_forged_release_fails_the_signature() {
    for resign in [false, true] {
        let inst = Install::new();
        support::forged_release(&inst.root, resign);
        let inode = inst.inode();
        let says = if resign {
            "not by the key given"
        } else {
            "does not match its signature"
        };
        inst.assert_refused(&inst.update(&[]), says, inode);
    }
}

#[test]
fn the_built_in_release_key_refuses_a_release_signed_by_another() {
    let inst = Install::new();
    let inode = inst.inode();
    let out = Command::new(inst.ctl())
        .args(["self", "update", "--url", &inst.server.base])
        .output_copied()
        .expect("run");
    inst.assert_refused(&out, "the Metrale release key", inode);
}

#[test]
fn a_mislabelled_version_is_refused() {
    let inst = Install::new();
    std::os::unix::fs::symlink(
        inst.root.join(format!("download/v{VERSION}")),
        inst.root.join("download/v0.3.0"),
    )
    .expect("link");
    let inode = inst.inode();
    inst.assert_refused(&inst.update(&["--version", "0.3.0"]), "mislabelled", inode);
}

#[test]
fn an_interrupted_download_leaves_the_old_binaries() {
    let inst = Install::new();
    let archive = format!("/latest/download/metrale-{TARGET}.tar.gz");
    inst.server.fault(&archive, Fault::Truncate(1 << 20));
    let inode = inst.inode();
    inst.assert_refused(&inst.update(&[]), "cannot download", inode);
}

#[test]
fn an_update_killed_mid_download_leaves_the_old_binaries_working() {
    let inst = Install::new();
    let archive = format!("/latest/download/metrale-{TARGET}.tar.gz");
    inst.server.fault(&archive, Fault::Stall(1 << 20));
    let inode = inst.inode();
    let mut child = inst
        .update_cmd(&[])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn_copied()
        .expect("spawn");
    let start = Instant::now();
    while !inst.server.hits().contains(&archive) {
        assert!(start.elapsed() < Duration::from_secs(60), "never asked");
        if let Some(status) = child.try_wait().expect("try_wait") {
            panic!("the update ended ({status}) before asking for the archive");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    child.kill().expect("kill");
    child.wait().expect("wait");
    assert_eq!(inst.inode(), inode, "metralectl was not replaced");
    assert_eq!(
        fs::read_to_string(inst.dir.join("met")).expect("met"),
        OLD_MET
    );
    let out = Command::new(inst.ctl())
        .arg("--version")
        .output_copied()
        .expect("run");
    assert!(out.status.success(), "the old metralectl still works");
    // A kill leaves its temporary directory (only that); the next update succeeds beside it.
    inst.server.fault(&archive, Fault::Truncate(usize::MAX));
    let again = inst.update(&[]);
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert_eq!(
        fs::read_to_string(inst.dir.join("met")).expect("met"),
        FAKE_MET
    );
    let _ = inst.tmp.path();
}

#[test]
fn uninstall_removes_the_binaries_and_the_receipts_path_line() {
    let inst = Install::new();
    let home = inst.tmp.path().join("home");
    fs::create_dir(&home).expect("home");
    let line = format!(
        "export PATH=\"{}:$PATH\" # added by the Metrale installer",
        inst.dir.display()
    );
    fs::write(home.join(".profile"), format!("# mine\n{line}\n")).expect("profile");
    let receipt_dir = home.join(".local/share/metrale");
    fs::create_dir_all(&receipt_dir).expect("receipt dir");
    fs::write(
        receipt_dir.join("install-receipt"),
        format!(
            "version=0.2.0\nfile={d}/metralectl\nfile={d}/met\nprofile={h}/.profile\nline={line}\ndir={h}/.local\ndir={h}/.local/share\ndir={h}/.local/share/metrale\n",
            d = inst.dir.display(),
            h = home.display()
        ),
    )
    .expect("receipt");
    let refused = Command::new(inst.ctl())
        .args(["self", "uninstall"])
        .env("HOME", &home)
        .env_remove("XDG_DATA_HOME")
        .stdin(Stdio::null())
        .output_copied()
        .expect("run");
    assert!(!refused.status.success(), "no terminal and no --yes");
    assert!(inst.ctl().exists());

    let out = Command::new(inst.ctl())
        .args(["self", "uninstall", "--yes"])
        .env("HOME", &home)
        .env_remove("XDG_DATA_HOME")
        .output_copied()
        .expect("run");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(inst.entries().is_empty(), "{:?}", inst.entries());
    assert_eq!(
        fs::read_to_string(home.join(".profile")).expect("profile"),
        "# mine\n"
    );
    assert!(
        !home.join(".local").exists(),
        "the directories it made are gone"
    );
    let _: &Path = &inst.root;
}
