//! `install.sh`, run under dash (and bash) against a real HTTP server on 127.0.0.1 serving a
//! release made by `scripts/release` with a throwaway key. The script under test is the
//! repository's, with only its `METRALE_RELEASE_PUBKEY=` line replaced by the throwaway key.

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::{FAKE_MET, Server, TARGET, VERSION, fixture, text};

/// The tools install.sh may call; a test's PATH holds links to some of them.
const TOOLS: &[&str] = &[
    "uname", "curl", "mktemp", "sed", "awk", "grep", "tr", "cut", "od", "dd", "wc", "tail", "cat",
    "cp", "mv", "rm", "mkdir", "chmod", "rmdir", "sort", "tar", "gzip", "base64", "ldd", "env",
    "perl",
];
const HASHERS: &[&str] = &["sha256sum", "shasum", "openssl"];

/// One installer run's world: a home, a server and the script.
struct World {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    root: PathBuf,
    server: Server,
    script: PathBuf,
    /// PATH for the script: a directory of tool links.
    tools: PathBuf,
}

impl World {
    fn new() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let home = tmp.path().join("home");
        let root = tmp.path().join("www");
        fs::create_dir_all(&home).expect("home");
        let server = support::serve_release(&root);
        let script = tmp.path().join("install.sh");
        fs::write(&script, patched_script()).expect("script");
        let tools = tmp.path().join("tools");
        let world = Self {
            _tmp: tmp,
            home,
            root,
            server,
            script,
            tools,
        };
        world.set_tools(&[TOOLS, HASHERS].concat());
        world
    }

    /// Makes PATH exactly these tools (links to the system's).
    fn set_tools(&self, tools: &[&str]) {
        let _ = fs::remove_dir_all(&self.tools);
        fs::create_dir_all(&self.tools).expect("tools");
        for tool in tools {
            if let Some(path) = which(tool) {
                std::os::unix::fs::symlink(path, self.tools.join(tool)).expect("tool link");
            }
        }
    }

    /// Replaces one tool with a shell script.
    fn fake_tool(&self, name: &str, body: &str) {
        let path = self.tools.join(name);
        let _ = fs::remove_file(&path);
        fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("fake tool");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
    }

    fn bin_dir(&self) -> PathBuf {
        self.home.join(".local/bin")
    }

    fn run_with(&self, shell: &str, script: &Path, args: &[&str]) -> Output {
        Command::new(shell)
            .arg(script)
            .args(args)
            .env_clear()
            .env("HOME", &self.home)
            .env("PATH", &self.tools)
            .env("METRALE_DOWNLOAD_URL", &self.server.base)
            .env("TMPDIR", self._tmp.path())
            .output()
            .expect("run the installer")
    }

    fn run(&self, args: &[&str]) -> Output {
        self.run_with("/usr/bin/dash", &self.script, args)
    }

    /// Every path under HOME, relative, sorted.
    fn home_tree(&self) -> Vec<String> {
        let mut out = Vec::new();
        walk(&self.home, &self.home, &mut out);
        out.sort();
        out
    }

    fn assert_nothing_installed(&self, out: &Output) {
        assert!(!out.status.success(), "must fail: {}", text(&out.stderr));
        assert!(
            !self.bin_dir().exists(),
            "nothing installed, but {:?}",
            self.home_tree()
        );
        assert!(self.home_tree().is_empty(), "{:?}", self.home_tree());
        let leftovers: Vec<_> = fs::read_dir(self._tmp.path())
            .expect("tmp")
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("metrale-install")
            })
            .collect();
        assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    }
}

fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        out.push(
            path.strip_prefix(base)
                .expect("under base")
                .display()
                .to_string(),
        );
        if path.is_dir() && !path.is_symlink() {
            walk(base, &path, out);
        }
    }
}

fn which(tool: &str) -> Option<PathBuf> {
    ["/usr/local/bin", "/usr/bin", "/bin"]
        .iter()
        .map(|d| Path::new(d).join(tool))
        .find(|p| p.is_file())
}

/// install.sh with the throwaway key: the one test-only change.
fn patched_script() -> String {
    let original = fs::read_to_string(support::repo_root().join("install.sh")).expect("install.sh");
    let mut replaced = 0;
    let patched: String = original
        .lines()
        .map(|l| {
            if l.starts_with("METRALE_RELEASE_PUBKEY=") {
                replaced += 1;
                format!("METRALE_RELEASE_PUBKEY='{}'\n", fixture().pubkey_b64)
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    assert_eq!(replaced, 1, "install.sh has one key line");
    patched
}

fn count_lines(path: &Path, needle: &str) -> usize {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(needle))
        .count()
}

#[test]
fn installs_twice_into_one_copy_and_uninstalls_exactly() {
    let w = World::new();
    fs::write(w.home.join(".bashrc"), "# mine\n").expect("bashrc");
    let before = w.home_tree();

    let out = w.run(&[]);
    assert!(out.status.success(), "install: {}", text(&out.stderr));
    let bin = w.bin_dir();
    assert_eq!(
        fs::read_to_string(bin.join("met")).expect("met"),
        FAKE_MET,
        "the release's met"
    );
    let ctl = bin.join("metralectl");
    assert_eq!(
        support::sha256_file(&ctl),
        support::sha256_file(Path::new(support::metralectl())),
        "the release's metralectl"
    );
    assert_eq!(
        fs::metadata(&ctl).expect("ctl").permissions().mode() & 0o777,
        0o755
    );
    let version = Command::new(&ctl).arg("--version").output().expect("run");
    assert!(version.status.success(), "the installed metralectl runs");
    assert!(text(&out.stderr).contains(&format!("installed metralectl and met {VERSION}")));

    // Twice, under bash this time: still one copy, one PATH line a profile.
    let again = w.run_with("/usr/bin/bash", &w.script, &["--version", VERSION]);
    assert!(again.status.success(), "reinstall: {}", text(&again.stderr));
    let mut names: Vec<String> = fs::read_dir(&bin)
        .expect("bin")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["met", "metralectl"], "one copy, no temporary files");
    for profile in [".profile", ".bashrc"] {
        assert_eq!(
            count_lines(&w.home.join(profile), "added by the Metrale installer"),
            1,
            "{profile}"
        );
    }
    assert_eq!(
        fs::read_to_string(w.home.join(".bashrc"))
            .expect("bashrc")
            .lines()
            .next(),
        Some("# mine")
    );

    let un = w.run(&["--uninstall"]);
    assert!(un.status.success(), "uninstall: {}", text(&un.stderr));
    assert_eq!(
        w.home_tree(),
        before,
        "uninstall removes exactly what install added"
    );
    assert_eq!(
        fs::read_to_string(w.home.join(".bashrc")).expect("bashrc"),
        "# mine\n"
    );
    let none = w.run(&["--uninstall"]);
    assert!(!none.status.success() && text(&none.stderr).contains("no install receipt"));
}

#[test]
fn no_modify_path_and_a_custom_dir_leave_profiles_alone() {
    let w = World::new();
    let dir = w.home.join("opt/metrale");
    let out = Command::new("/usr/bin/dash")
        .arg(&w.script)
        .arg("--no-modify-path")
        .env_clear()
        .env("HOME", &w.home)
        .env("PATH", &w.tools)
        .env("METRALE_DOWNLOAD_URL", &w.server.base)
        .env("METRALE_INSTALL_DIR", &dir)
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(dir.join("metralectl").is_file() && dir.join("met").is_file());
    assert!(!w.home.join(".profile").exists(), "no profile touched");
    assert!(text(&out.stderr).contains("is not on your PATH"));
    let un = w.run(&["--uninstall"]);
    assert!(un.status.success(), "{}", text(&un.stderr));
    assert!(w.home_tree().is_empty(), "{:?}", w.home_tree());
}

/// Each signature checker accepts the genuine release and refuses a consistent forgery
/// (archive and SHA256SUMS both replaced), with the genuine signature or the attacker's own.
fn verifier_case(tools: &[&str], says: &str) {
    let w = World::new();
    w.set_tools(tools);
    let out = w.run(&[]);
    assert!(out.status.success(), "genuine: {}", text(&out.stderr));
    assert!(text(&out.stderr).contains(says), "{}", text(&out.stderr));

    for resign in [false, true] {
        let w = World::new();
        w.set_tools(tools);
        support::forged_release(&w.root, resign);
        let out = w.run(&[]);
        let err = text(&out.stderr);
        w.assert_nothing_installed(&out);
        assert!(err.contains("nothing was installed"), "{err}");
        if resign {
            assert!(
                err.contains("not by the release key") || err.contains("not by the key given"),
                "an attacker's key is named as such: {err}"
            );
        } else {
            assert!(
                err.contains("does not match its signature"),
                "resign={resign}: {err}"
            );
        }
        assert!(
            !w.server
                .hits()
                .iter()
                .any(|h| h.ends_with(&format!("metrale-{TARGET}.tar.gz"))),
            "the forged archive is never even downloaded"
        );
    }
}

#[test]
fn minisign_checks_the_signature_when_installed() {
    if which("minisign").is_none() {
        eprintln!("skipped: minisign is not installed here (.ci/run installs it)");
        return;
    }
    verifier_case(&[TOOLS, HASHERS, &["minisign"]].concat(), "with minisign");
}

#[test]
fn openssl_checks_the_signature() {
    verifier_case(&[TOOLS, HASHERS].concat(), "with OpenSSL");
}

#[test]
fn without_openssl_the_hash_checked_metralectl_checks_the_signature() {
    verifier_case(
        &[TOOLS, &["sha256sum"]].concat(),
        "with the release's metralectl",
    );
}

#[test]
fn a_flipped_byte_in_the_archive_aborts_before_unpacking() {
    let w = World::new();
    support::replace_served(
        &w.root,
        &format!("metrale-{TARGET}.tar.gz"),
        &support::flipped_archive(),
    );
    let out = w.run(&[]);
    w.assert_nothing_installed(&out);
    let err = text(&out.stderr);
    assert!(
        err.contains("but the signed SHA256SUMS says") && err.contains("nothing was installed"),
        "{err}"
    );
    assert!(!err.contains("cannot unpack"), "{err}");
}

#[test]
fn a_missing_signature_installs_nothing() {
    let w = World::new();
    support::remove_served(&w.root, "SHA256SUMS.minisig");
    let out = w.run(&[]);
    w.assert_nothing_installed(&out);
    assert!(
        text(&out.stderr).contains("cannot download") && text(&out.stderr).contains(".minisig"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn no_hash_tool_aborts_before_downloading() {
    let w = World::new();
    w.set_tools(TOOLS);
    let out = w.run(&[]);
    w.assert_nothing_installed(&out);
    assert!(
        text(&out.stderr).contains("no SHA-256 tool"),
        "{}",
        text(&out.stderr)
    );
    assert!(w.server.hits().is_empty(), "{:?}", w.server.hits());
}

#[test]
fn a_truncated_script_runs_nothing() {
    let w = World::new();
    let full = patched_script();
    // Before the brace group opens there are only comments: a cut there exits 0, running nothing.
    let group = full.find("\n{\n").map_or(0, |i| i + 3);
    let mut offsets: Vec<usize> = full
        .match_indices('\n')
        .map(|(i, _)| i + 1)
        .filter(|&i| i < full.len())
        .collect();
    let last = full.trim_end().len();
    // Inside the last line too, just after `main` above all (which would run main with no args).
    let main = full.rfind("main").expect("the call of main") + "main".len();
    offsets.extend([
        10,
        full.len() / 3,
        full.len() / 2,
        main,
        last - 1,
        last - 3,
        last - 5,
    ]);
    let cut = w.home.parent().expect("tmp").join("cut.sh");
    for at in offsets {
        fs::write(&cut, &full.as_bytes()[..at]).expect("cut");
        let out = w.run_with("/usr/bin/dash", &cut, &[]);
        assert!(
            w.server.hits().is_empty(),
            "cut at {at}: it downloaded {:?}",
            w.server.hits()
        );
        assert!(w.home_tree().is_empty(), "cut at {at}: {:?}", w.home_tree());
        if at > group {
            assert!(!out.status.success(), "cut at {at} must fail");
        }
    }
}

#[test]
fn an_unsupported_platform_is_an_explicit_error() {
    let w = World::new();
    for (os, arch, says) in [
        ("Linux", "riscv64", "unsupported CPU architecture 'riscv64'"),
        (
            "FreeBSD",
            "x86_64",
            "unsupported operating system 'FreeBSD'",
        ),
        ("MINGW64_NT-10.0", "x86_64", "install.ps1"),
    ] {
        w.fake_tool(
            "uname",
            &format!("case $1 in -s) echo {os} ;; -m) echo {arch} ;; esac"),
        );
        let out = w.run(&[]);
        w.assert_nothing_installed(&out);
        assert!(text(&out.stderr).contains(says), "{}", text(&out.stderr));
    }
    assert!(w.server.hits().is_empty(), "{:?}", w.server.hits());
}

#[test]
fn plain_http_is_refused_except_to_loopback() {
    let w = World::new();
    for url in [
        "http://example.com/releases",
        "http://127.0.0.1.example.com",
    ] {
        let out = Command::new("/usr/bin/dash")
            .arg(&w.script)
            .env_clear()
            .env("HOME", &w.home)
            .env("PATH", &w.tools)
            .env("METRALE_DOWNLOAD_URL", url)
            .output()
            .expect("run");
        w.assert_nothing_installed(&out);
        assert!(
            text(&out.stderr).contains("refusing"),
            "{}",
            text(&out.stderr)
        );
    }
}

#[test]
fn a_release_signed_as_another_version_is_refused() {
    let w = World::new();
    std::os::unix::fs::symlink(
        w.root.join(format!("download/v{VERSION}")),
        w.root.join("download/v0.3.0"),
    )
    .expect("link");
    let out = w.run(&["--version", "0.3.0"]);
    w.assert_nothing_installed(&out);
    assert!(
        text(&out.stderr).contains(&format!("signed as {VERSION}")),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn both_installers_and_metralectl_carry_the_committed_release_key() {
    let root = support::repo_root();
    let committed = fs::read_to_string(root.join("keys/release.pub")).expect("keys/release.pub");
    let key = committed.lines().nth(1).expect("the key line");
    for (file, prefix) in [
        ("install.sh", "METRALE_RELEASE_PUBKEY='"),
        ("install.ps1", "$MetraleReleasePubkey = '"),
    ] {
        let text = fs::read_to_string(root.join(file)).expect(file);
        let line = format!("{prefix}{key}'");
        assert_eq!(
            text.lines().filter(|l| *l == line).count(),
            1,
            "{file} must carry keys/release.pub's key on one line: {line}"
        );
    }
    // metralectl embeds the file itself: a record signed by the release key verifies with no
    // --pubkey only if so; here, a throwaway-key signature must be refused by the built-in keys.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("f");
    fs::write(&file, b"x").expect("f");
    let signed = Command::new(support::metralectl())
        .arg("sign")
        .arg(&file)
        .arg("--key")
        .arg(&fixture().key)
        .output()
        .expect("sign");
    assert!(signed.status.success(), "{}", text(&signed.stderr));
    let out = Command::new(support::metralectl())
        .arg("verify")
        .arg(&file)
        .output()
        .expect("verify");
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("not one of the trusted keys") && err.contains("CB50D936C40C8BC9"),
        "{err}"
    );
}

#[test]
fn a_target_the_release_does_not_carry_is_named_not_substituted() {
    let w = World::new();
    for (os, arch, ldd, target) in [
        (
            "Linux",
            "x86_64",
            "musl libc (x86_64)",
            "x86_64-unknown-linux-musl",
        ),
        (
            "Linux",
            "aarch64",
            "ldd (GNU libc) 2.41",
            "aarch64-unknown-linux-gnu",
        ),
        ("Darwin", "arm64", "", "aarch64-apple-darwin"),
    ] {
        w.fake_tool(
            "uname",
            &format!("case $1 in -s) echo {os} ;; -m) echo {arch} ;; esac"),
        );
        w.fake_tool("ldd", &format!("echo '{ldd}'"));
        let out = w.run(&[]);
        w.assert_nothing_installed(&out);
        let err = text(&out.stderr);
        assert!(
            err.contains(&format!("has no build for {target}"))
                && err.contains(&format!("metrale-{TARGET}.tar.gz")),
            "{err}"
        );
    }
}

/// `scripts/release` with fake payloads (instant to pack): the key from the environment, and a
/// signature that does not check against the published key stops the release.
#[test]
fn the_release_script_signs_with_the_key_given_and_checks_it() {
    let fx = fixture();
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("bin");
    fs::create_dir(&bin).expect("bin");
    for name in ["metralectl", "met"] {
        fs::write(bin.join(name), format!("#!/bin/sh\necho fake-{name}\n")).expect("fake");
    }
    let release = |out: &str, pubkey: &Path| {
        Command::new(support::repo_root().join("scripts/release"))
            .args(["--version", "9.9.9", "--target", TARGET])
            .arg("--bin-dir")
            .arg(&bin)
            .arg("--out")
            .arg(dir.path().join(out))
            .arg("--pubkey")
            .arg(pubkey)
            .arg("--signer")
            .arg(support::metralectl())
            .env_remove("METRALE_RELEASE_KEY_FILE")
            .env(
                "METRALE_RELEASE_KEY",
                fs::read_to_string(&fx.key).expect("key"),
            )
            .output()
            .expect("run scripts/release")
    };
    let ok = release("good", &fx.pubkey);
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    let sig = fs::read_to_string(dir.path().join("good/SHA256SUMS.minisig")).expect("sig");
    assert!(
        sig.contains("trusted comment: metrale release 9.9.9"),
        "{sig}"
    );
    let sums = fs::read_to_string(dir.path().join("good/SHA256SUMS")).expect("sums");
    for name in [
        format!("metrale-{TARGET}.tar.gz"),
        format!("metralectl-{TARGET}"),
        "install.sh".to_owned(),
        "install.ps1".to_owned(),
    ] {
        assert!(sums.contains(&format!("  {name}\n")), "{name} in {sums}");
    }

    let other_pub = support::pub_of(&fx.other_key);
    let wrong = release("wrong", &other_pub);
    assert!(
        !wrong.status.success(),
        "a key the published one does not check"
    );
    assert!(
        text(&wrong.stderr).contains("wrong key?"),
        "{}",
        text(&wrong.stderr)
    );
    assert!(
        !dir.path().join("wrong/SHA256SUMS.minisig").exists(),
        "no signature that the published key does not check is left to upload"
    );
}

/// With a terminal (a pty from util-linux `script`), the installer asks first; "n" changes
/// nothing and downloads nothing, "y" installs.
#[test]
fn with_a_terminal_it_asks_and_no_means_nothing() {
    let Some(script) = which("script") else {
        eprintln!("skipped: util-linux `script` is not installed");
        return;
    };
    let w = World::new();
    let run = |answer: &str| {
        let mut child = Command::new(&script)
            .arg("-qec")
            .arg(format!("/usr/bin/dash {}", w.script.display()))
            .arg("/dev/null")
            .env_clear()
            .env("HOME", &w.home)
            .env("PATH", &w.tools)
            .env("METRALE_DOWNLOAD_URL", &w.server.base)
            .env("TMPDIR", w._tmp.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn script");
        std::io::Write::write_all(child.stdin.as_mut().expect("stdin"), answer.as_bytes())
            .expect("answer");
        child.wait_with_output().expect("wait")
    };
    let no = run("n\n");
    assert!(!no.status.success());
    assert!(text(&no.stdout).contains("[Y/n]"), "{}", text(&no.stdout));
    assert!(text(&no.stdout).contains("cancelled; nothing was changed"));
    assert!(w.server.hits().is_empty() && w.home_tree().is_empty());

    let yes = run("y\n");
    assert!(yes.status.success(), "{}", text(&yes.stdout));
    assert!(w.bin_dir().join("metralectl").is_file());
}
