//! Detached ed25519 signatures of records: `FILE.sig` beside `FILE` holds one line,
//! `ed25519 PUBKEY_HEX SIGNATURE_HEX`, over the record's exact bytes. Key files are one line too:
//! `ed25519-secret HEX` (mode 0600) and `ed25519 HEX` for the public half.

use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow, bail};
use ed25519_dalek::{Signature, Signer as _, SigningKey, Verifier as _, VerifyingKey};
use rand::RngCore as _;

use super::record::write_atomic;

const SECRET_TAG: &str = "ed25519-secret";
const PUBLIC_TAG: &str = "ed25519";

/// `FILE.sig` for `FILE`.
pub fn sig_path(record: &Path) -> PathBuf {
    let mut name = record.as_os_str().to_owned();
    name.push(".sig");
    PathBuf::from(name)
}

/// `KEYFILE.pub` for `KEYFILE`.
pub fn pub_path(keyfile: &Path) -> PathBuf {
    let mut name = keyfile.as_os_str().to_owned();
    name.push(".pub");
    PathBuf::from(name)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != 2 * N || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// Writes a fresh key pair; refuses to replace an existing secret key.
pub fn keygen(keyfile: &Path) -> anyhow::Result<VerifyingKey> {
    let mut seed = [0u8; 32];
    rand::rng().fill_bytes(&mut seed);
    let key = SigningKey::from_bytes(&seed);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(keyfile)
        .with_context(|| {
            format!(
                "cannot create {} (an existing key is never replaced: pick another path)",
                keyfile.display()
            )
        })?;
    writeln!(file, "{SECRET_TAG} {}", hex(&seed))
        .with_context(|| format!("failed to write {}", keyfile.display()))?;
    let public = key.verifying_key();
    write_atomic(
        &pub_path(keyfile),
        format!("{PUBLIC_TAG} {}\n", hex(public.as_bytes())).as_bytes(),
    )?;
    Ok(public)
}

fn read_tagged(path: &Path, tag: &str, what: &str) -> anyhow::Result<Vec<String>> {
    let text = fs::read_to_string(path)
        .with_context(|| format!("cannot read {what} {}", path.display()))?;
    let fields: Vec<String> = text.split_whitespace().map(str::to_owned).collect();
    if fields.first().map(String::as_str) != Some(tag) {
        bail!(
            "{} is not {what} (it should start with `{tag}`)",
            path.display()
        );
    }
    Ok(fields[1..].to_vec())
}

pub fn load_secret(keyfile: &Path) -> anyhow::Result<SigningKey> {
    let fields = read_tagged(keyfile, SECRET_TAG, "an ed25519 secret key")?;
    let seed = fields.first().and_then(|h| unhex::<32>(h)).ok_or_else(|| {
        anyhow!(
            "{} holds no 32-byte hex key: make one with `metralectl bench keygen`",
            keyfile.display()
        )
    })?;
    Ok(SigningKey::from_bytes(&seed))
}

pub fn load_public(path: &Path) -> anyhow::Result<VerifyingKey> {
    let fields = read_tagged(path, PUBLIC_TAG, "an ed25519 public key")?;
    let bytes = fields
        .first()
        .and_then(|h| unhex::<32>(h))
        .ok_or_else(|| anyhow!("{} holds no 32-byte hex public key", path.display()))?;
    VerifyingKey::from_bytes(&bytes)
        .with_context(|| format!("{} is not a valid ed25519 public key", path.display()))
}

/// Signs `bytes` (the record as written) into `FILE.sig`.
pub fn sign(record: &Path, bytes: &[u8], key: &SigningKey) -> anyhow::Result<PathBuf> {
    let sig = key.sign(bytes);
    let path = sig_path(record);
    let line = format!(
        "{PUBLIC_TAG} {} {}\n",
        hex(key.verifying_key().as_bytes()),
        hex(&sig.to_bytes())
    );
    write_atomic(&path, line.as_bytes())?;
    Ok(path)
}

/// Checks `bytes` against `FILE.sig`, and the signer against `expected` when given. Returns the
/// signer's public key (hex).
pub fn verify(
    record: &Path,
    bytes: &[u8],
    expected: Option<&VerifyingKey>,
) -> anyhow::Result<String> {
    let path = sig_path(record);
    let fields = read_tagged(&path, PUBLIC_TAG, "a record signature")?;
    let (Some(signer), Some(sig)) = (
        fields.first().and_then(|h| unhex::<32>(h)),
        fields.get(1).and_then(|h| unhex::<64>(h)),
    ) else {
        bail!(
            "{} is malformed: expected `ed25519 PUBKEY_HEX SIGNATURE_HEX`",
            path.display()
        );
    };
    let signer = VerifyingKey::from_bytes(&signer)
        .with_context(|| format!("{} names an invalid public key", path.display()))?;
    if let Some(expected) = expected
        && expected != &signer
    {
        bail!(
            "{} was signed by key {}, not by the key given with --key ({})",
            record.display(),
            hex(signer.as_bytes()),
            hex(expected.as_bytes())
        );
    }
    signer
        .verify(bytes, &Signature::from_bytes(&sig))
        .map_err(|_| {
            anyhow!(
                "{} does not match its signature {}: the record was changed after it was signed",
                record.display(),
                path.display()
            )
        })?;
    Ok(hex(signer.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_rejects_bad_text() {
        let bytes = [0u8, 1, 0xab, 0xff];
        assert_eq!(unhex::<4>(&hex(&bytes)), Some(bytes));
        assert_eq!(unhex::<4>("00zz00ff"), None);
        assert_eq!(unhex::<4>("00"), None);
    }
}
