//! Shared by the release tests (`install_sh.rs`, `self_update.rs`): a real HTTP server on
//! 127.0.0.1 that serves a directory and can cut a transfer short, and release fixtures made by
//! `scripts/release` with a throwaway key.
//!
//! The fixture's `met` is a fake (a shell script printing `fake-met 0.2.0`); its `metralectl` is
//! the real debug binary, because the installer may verify with it.

#![allow(dead_code)] // each test binary uses its part

use std::collections::HashMap;
use std::fs;
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::Duration;

pub mod busy;

pub const VERSION: &str = "0.2.0";
pub const TARGET: &str = "x86_64-unknown-linux-gnu";
pub const FAKE_MET: &str = "#!/bin/sh\necho fake-met 0.2.0\n";

pub fn metralectl() -> &'static str {
    env!("CARGO_BIN_EXE_metralectl")
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// How the server misbehaves on one path.
#[derive(Debug, Clone, Copy)]
pub enum Fault {
    /// Promise the whole file, send this many bytes, close the connection.
    Truncate(usize),
    /// Send this many bytes, then hang (until the client gives up or is killed).
    Stall(usize),
}

#[derive(Debug)]
pub struct Server {
    pub base: String,
    pub root: PathBuf,
    hits: Arc<Mutex<Vec<String>>>,
    faults: Arc<Mutex<HashMap<String, Fault>>>,
}

impl Server {
    /// Serves `root` on 127.0.0.1 (a free port) from a background thread.
    pub fn start(root: &Path) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let hits = Arc::new(Mutex::new(Vec::new()));
        let faults = Arc::new(Mutex::new(HashMap::new()));
        let (r, h, f) = (root.to_path_buf(), hits.clone(), faults.clone());
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (r, h, f) = (r.clone(), h.clone(), f.clone());
                thread::spawn(move || serve(stream, &r, &h, &f));
            }
        });
        Self {
            base,
            root: root.to_path_buf(),
            hits,
            faults,
        }
    }

    pub fn fault(&self, path: &str, fault: Fault) {
        self.faults
            .lock()
            .expect("faults")
            .insert(path.to_owned(), fault);
    }

    /// The paths requested so far.
    pub fn hits(&self) -> Vec<String> {
        self.hits.lock().expect("hits").clone()
    }
}

fn serve(
    stream: TcpStream,
    root: &Path,
    hits: &Mutex<Vec<String>>,
    faults: &Mutex<HashMap<String, Fault>>,
) {
    let mut reader = BufReader::new(match stream.try_clone() {
        Ok(s) => s,
        Err(_) => return,
    });
    let mut request = String::new();
    if reader.read_line(&mut request).is_err() {
        return;
    }
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) if line == "\r\n" || line == "\n" => break,
            Ok(_) => {}
        }
    }
    let path = request.split_whitespace().nth(1).unwrap_or("/").to_owned();
    hits.lock().expect("hits").push(path.clone());
    let mut out = stream;
    let file = root.join(path.trim_start_matches('/'));
    let body = match (path.contains(".."), fs::read(&file)) {
        (false, Ok(body)) => body,
        _ => {
            let _ = out.write_all(
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
            return;
        }
    };
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = out.write_all(head.as_bytes());
    let fault = faults.lock().expect("faults").get(&path).copied();
    match fault {
        None => {
            let _ = out.write_all(&body);
        }
        Some(Fault::Truncate(n)) => {
            let _ = out.write_all(&body[..n.min(body.len())]);
        }
        Some(Fault::Stall(n)) => {
            let _ = out.write_all(&body[..n.min(body.len())]);
            let _ = out.flush();
            thread::sleep(Duration::from_secs(60));
        }
    }
    let _ = out.flush();
}

/// A release made once per test binary by `scripts/release`, signed with a throwaway key.
#[derive(Debug)]
pub struct Fixture {
    pub dir: PathBuf,
    /// The release directory (flat).
    pub release: PathBuf,
    pub key: PathBuf,
    pub pubkey: PathBuf,
    /// The base64 line of the throwaway public key.
    pub pubkey_b64: String,
    /// A second throwaway key: the attacker's.
    pub other_key: PathBuf,
}

pub fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(make_fixture)
}

fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

fn make_fixture() -> Fixture {
    // Under cargo's per-target scratch directory, one a test binary, remade each run.
    let name = std::env::current_exe()
        .ok()
        .and_then(|e| e.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("release-fixture-{name}"));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("fixture dir");
    let key = dir.join("test-release.key");
    let other_key = dir.join("attacker.key");
    for k in [&key, &other_key] {
        run_ok(Command::new(metralectl()).args(["bench", "keygen"]).arg(k));
    }
    let bin = dir.join("bin");
    fs::create_dir(&bin).expect("bin dir");
    std::os::unix::fs::symlink(metralectl(), bin.join("metralectl")).expect("link metralectl");
    fs::write(bin.join("met"), FAKE_MET).expect("fake met");
    let release = dir.join("release");
    let pubkey = dir.join("test-release.key.pub");
    run_ok(
        Command::new(repo_root().join("scripts/release"))
            .args(["--version", VERSION, "--target", TARGET])
            .arg("--bin-dir")
            .arg(&bin)
            .arg("--out")
            .arg(&release)
            .arg("--key")
            .arg(&key)
            .arg("--pubkey")
            .arg(&pubkey)
            .arg("--signer")
            .arg(metralectl()),
    );
    let pubkey_b64 = fs::read_to_string(&pubkey)
        .expect("pubkey")
        .lines()
        .nth(1)
        .expect("the key line")
        .to_owned();
    Fixture {
        dir,
        release,
        key,
        pubkey,
        pubkey_b64,
        other_key,
    }
}

/// A server root with the fixture at `download/vVERSION/` and `latest/download/`, as links
/// (a test that tampers with a file replaces its link with a changed copy).
pub fn serve_release(root: &Path) -> Server {
    let fx = fixture();
    for sub in [format!("download/v{VERSION}"), "latest/download".to_owned()] {
        let d = root.join(&sub);
        fs::create_dir_all(&d).expect("server dirs");
        for entry in fs::read_dir(&fx.release).expect("release dir").flatten() {
            std::os::unix::fs::symlink(entry.path(), d.join(entry.file_name())).expect("link");
        }
    }
    Server::start(root)
}

/// Replaces a served file (in both release directories) with `bytes`.
pub fn replace_served(root: &Path, name: &str, bytes: &[u8]) {
    for sub in [format!("download/v{VERSION}"), "latest/download".to_owned()] {
        let path = root.join(sub).join(name);
        let _ = fs::remove_file(&path);
        fs::write(&path, bytes).expect("replace served file");
    }
}

pub fn remove_served(root: &Path, name: &str) {
    for sub in [format!("download/v{VERSION}"), "latest/download".to_owned()] {
        fs::remove_file(root.join(sub).join(name)).expect("remove served file");
    }
}

/// The release archive with one byte flipped in the middle.
pub fn flipped_archive() -> Vec<u8> {
    let mut bytes =
        fs::read(fixture().release.join(format!("metrale-{TARGET}.tar.gz"))).expect("archive");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    bytes
}

/// An attacker's consistent release: another archive and SHA256SUMS listing it, signed (when
/// `resign`) with the attacker's own key, else keeping the genuine signature.
pub fn forged_release(root: &Path, resign: bool) {
    let fx = fixture();
    let work = tempfile::tempdir().expect("tempdir");
    let stage = work.path().join(format!("metrale-{TARGET}"));
    fs::create_dir(&stage).expect("stage");
    fs::write(stage.join("metralectl"), "#!/bin/sh\necho evil\n").expect("evil");
    fs::write(stage.join("met"), "#!/bin/sh\necho evil\n").expect("evil");
    let archive = work.path().join(format!("metrale-{TARGET}.tar.gz"));
    run_ok(
        Command::new("tar")
            .arg("-czf")
            .arg(&archive)
            .arg("-C")
            .arg(work.path())
            .arg(format!("metrale-{TARGET}")),
    );
    let genuine = fs::read_to_string(fx.release.join("SHA256SUMS")).expect("sums");
    let forged_hash = sha256_file(&archive);
    let sums: String = genuine
        .lines()
        .map(|l| {
            if l.ends_with(&format!("metrale-{TARGET}.tar.gz")) {
                format!("{forged_hash}  metrale-{TARGET}.tar.gz\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let sums_path = work.path().join("SHA256SUMS");
    fs::write(&sums_path, &sums).expect("sums");
    replace_served(
        root,
        &format!("metrale-{TARGET}.tar.gz"),
        &fs::read(&archive).expect("archive"),
    );
    replace_served(root, "SHA256SUMS", sums.as_bytes());
    if resign {
        run_ok(
            Command::new(metralectl())
                .arg("sign")
                .arg(&sums_path)
                .arg("--key")
                .arg(&fx.other_key)
                .args(["--trusted-comment", &format!("metrale release {VERSION}")]),
        );
        replace_served(
            root,
            "SHA256SUMS.minisig",
            &fs::read(work.path().join("SHA256SUMS.minisig")).expect("sig"),
        );
    }
}

pub fn sha256_file(path: &Path) -> String {
    let out = run_ok(Command::new("sha256sum").arg(path));
    text(&out.stdout)
        .split_whitespace()
        .next()
        .expect("hash")
        .to_owned()
}

/// `KEYFILE.pub` for `KEYFILE`.
pub fn pub_of(key: &Path) -> PathBuf {
    let mut name = key.as_os_str().to_owned();
    name.push(".pub");
    PathBuf::from(name)
}
