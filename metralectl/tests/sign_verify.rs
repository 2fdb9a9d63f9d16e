//! `metralectl sign` and `metralectl verify`, run as the binary: minisign files, and a message
//! that names what failed.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

fn ctl(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_metralectl"))
        .args(args)
        .output()
        .expect("run metralectl")
}

fn err(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn keygen(dir: &Path, name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let key = dir.join(name);
    let out = ctl(&[&"bench", &"keygen", &key]);
    assert!(out.status.success(), "{}", err(&out));
    let public = dir.join(format!("{name}.pub"));
    (key, public)
}

#[test]
fn sign_then_verify_says_who_signed_and_what_failed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (key, public) = keygen(dir.path(), "a.key");
    let (_, other) = keygen(dir.path(), "b.key");
    let file = dir.path().join("SHA256SUMS");
    fs::write(&file, "0000  x\n").expect("file");

    let out = ctl(&[
        &"sign",
        &file,
        &"--key",
        &key,
        &"--trusted-comment",
        &"metrale release 9.9.9",
    ]);
    assert!(out.status.success(), "{}", err(&out));
    let sig = dir.path().join("SHA256SUMS.minisig");
    let text = fs::read_to_string(&sig).expect("FILE.minisig");
    assert_eq!(text.lines().count(), 4, "minisign's four lines: {text}");
    assert_eq!(
        text.lines().nth(2),
        Some("trusted comment: metrale release 9.9.9")
    );
    assert!(
        text.lines().nth(1).is_some_and(|l| l.starts_with("RU")),
        "pre-hashed: `ED` encodes as RU…, legacy `Ed` as RW…"
    );

    let ok = ctl(&[&"verify", &file, &"--pubkey", &public, &"--json"]);
    assert!(ok.status.success(), "{}", err(&ok));
    let json: serde_json::Value = serde_json::from_slice(&ok.stdout).expect("json");
    assert_eq!(json["verified"], true);
    assert_eq!(json["trusted_comment"], "metrale release 9.9.9");

    let wrong = ctl(&[&"verify", &file, &"--pubkey", &other]);
    assert!(!wrong.status.success());
    assert!(
        err(&wrong).contains("not by the key given"),
        "{}",
        err(&wrong)
    );

    let moved = dir.path().join("elsewhere.minisig");
    fs::rename(&sig, &moved).expect("move");
    let missing = ctl(&[&"verify", &file, &"--pubkey", &public]);
    assert!(!missing.status.success());
    assert!(
        err(&missing).contains("cannot read the signature"),
        "{}",
        err(&missing)
    );
    let named = ctl(&[&"verify", &file, &"--sig", &moved, &"--pubkey", &public]);
    assert!(named.status.success(), "{}", err(&named));

    fs::write(&file, "0001  x\n").expect("tamper");
    let bad = ctl(&[&"verify", &file, &"--sig", &moved, &"--pubkey", &public]);
    assert!(!bad.status.success());
    assert!(
        err(&bad).contains("changed after it was signed"),
        "{}",
        err(&bad)
    );

    fs::write(&moved, "not a signature\n").expect("garble");
    let garbled = ctl(&[&"verify", &file, &"--sig", &moved, &"--pubkey", &public]);
    assert!(!garbled.status.success());
    assert!(
        err(&garbled).contains("is not a minisign signature"),
        "{}",
        err(&garbled)
    );
}

#[test]
fn a_password_protected_or_foreign_key_is_refused_with_the_fix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("k");
    fs::write(&key, "untrusted comment: x\nnot base64\n").expect("key");
    let file = dir.path().join("f");
    fs::write(&file, "x").expect("f");
    let out = ctl(&[&"sign", &file, &"--key", &key]);
    assert!(!out.status.success());
    assert!(err(&out).contains("bench keygen"), "{}", err(&out));
    assert!(
        !dir.path().join("f.minisig").exists(),
        "no signature written"
    );
}
