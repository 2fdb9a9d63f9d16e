//! The project's one signing scheme: minisign-compatible ed25519 (the `minisign` crate), for
//! benchmark records and release `SHA256SUMS` alike.
//!
//! - A key pair is two files: KEYFILE (the secret key box, unencrypted, mode 0600) and
//!   KEYFILE.pub (the public key box), both as `minisign -G -W` writes them.
//! - A signature is detached: FILE.minisig beside FILE, as `minisign -S` writes it (pre-hashed
//!   with BLAKE2b, and a signed "trusted comment"). `minisign -V -p KEYFILE.pub -m FILE` checks it.
//! - Which keys are trusted is decided here, never by the file being checked: the release key
//!   (`keys/release.pub`) and the benchmark keys (`bench/keys/*.pub`), both built into the binary,
//!   or exactly one key given on the command line (`--pubkey`).

use std::fs::{self, OpenOptions};
use std::io::{Cursor, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow, bail};
use minisign::{KeyPair, PublicKey, PublicKeyBox, SecretKey, SecretKeyBox, SignatureBox};

use crate::fsutil::write_atomic;

/// The release key's public half, as committed in `keys/release.pub`.
pub const RELEASE_PUB: &str = include_str!("../../keys/release.pub");

// The benchmark keys committed under `bench/keys/`: (file name, contents), made by build.rs.
const BENCH_KEYS: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/bench_keys.rs"));

/// `FILE.minisig` for `FILE`.
pub fn sig_path(file: &Path) -> PathBuf {
    with_suffix(file, ".minisig")
}

/// `KEYFILE.pub` for `KEYFILE`.
pub fn pub_path(keyfile: &Path) -> PathBuf {
    with_suffix(keyfile, ".pub")
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// A key id as minisign prints it: 16 hex digits of the little-endian u64.
pub fn key_id(keynum: &[u8]) -> String {
    keynum.iter().rev().map(|b| format!("{b:02X}")).collect()
}

/// A public key the verifier trusts, and the name it is reported by.
#[derive(Debug)]
pub struct TrustedKey {
    pub name: String,
    pub key: PublicKey,
    /// Given on the command line (`--pubkey`), rather than built in.
    pub given: bool,
}

impl TrustedKey {
    pub fn id(&self) -> String {
        key_id(self.key.keynum())
    }

    /// Parses a public key file's text (a minisign public key box, or its bare base64 line).
    pub fn parse(name: impl Into<String>, text: &str) -> anyhow::Result<Self> {
        let name = name.into();
        let key = match text.lines().filter(|l| !l.trim().is_empty()).count() {
            1 => PublicKey::from_base64(text.trim()),
            _ => PublicKeyBox::from_string(text).and_then(PublicKeyBox::into_public_key),
        }
        .map_err(|e| {
            anyhow!(
                "{name} is not a minisign public key ({e}): it should be the two lines \
                 `metralectl bench keygen` or `minisign -G` writes to KEYFILE.pub"
            )
        })?;
        Ok(Self {
            name,
            key,
            given: false,
        })
    }

    /// A key file named on the command line.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = fs::read_to_string(path)
            .with_context(|| format!("cannot read the public key {}", path.display()))?;
        Ok(Self {
            given: true,
            ..Self::parse(path.display().to_string(), &text)?
        })
    }
}

/// The keys built into this binary: the release key, then the benchmark keys.
pub fn builtin_keys() -> anyhow::Result<Vec<TrustedKey>> {
    let mut keys = vec![TrustedKey::parse(
        "the Metrale release key (keys/release.pub)",
        RELEASE_PUB,
    )?];
    for (name, text) in BENCH_KEYS {
        keys.push(TrustedKey::parse(format!("bench/keys/{name}"), text)?);
    }
    Ok(keys)
}

/// The release key alone: what installers and `self update` trust.
pub fn release_key() -> anyhow::Result<TrustedKey> {
    TrustedKey::parse("the Metrale release key (keys/release.pub)", RELEASE_PUB)
}

/// Writes a fresh key pair (KEYFILE, mode 0600, and KEYFILE.pub); never replaces a secret key.
pub fn keygen(keyfile: &Path) -> anyhow::Result<String> {
    let KeyPair { pk, sk } = KeyPair::generate_unencrypted_keypair()
        .map_err(|e| anyhow!("failed to generate a key pair: {e}"))?;
    let id = key_id(pk.keynum());
    let secret = sk
        .to_box(Some(&format!("metrale secret key {id}")))
        .map_err(|e| anyhow!("failed to encode the secret key: {e}"))?;
    let public = pk
        .to_box()
        .map_err(|e| anyhow!("failed to encode the public key: {e}"))?;
    // A missing directory (a fresh ~/.config/metrale) is made, private, as ssh-keygen does.
    if let Some(dir) = keyfile.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.exists()
    {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("cannot create the directory {}", dir.display()))?;
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(keyfile)
        .map_err(|e| {
            let why = if e.kind() == std::io::ErrorKind::AlreadyExists {
                "it exists, and an existing key is never replaced: pick another path".to_string()
            } else {
                e.to_string()
            };
            anyhow!("cannot create {}: {why}", keyfile.display())
        })?;
    file.write_all(secret.to_string().as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("failed to write {}", keyfile.display()))?;
    write_atomic(&pub_path(keyfile), public.into_string().as_bytes())?;
    Ok(id)
}

/// Reads an unencrypted secret key (KEYFILE from `keygen`, or `minisign -G -W`).
pub fn load_secret(keyfile: &Path) -> anyhow::Result<SecretKey> {
    let text = fs::read_to_string(keyfile)
        .with_context(|| format!("cannot read the secret key {}", keyfile.display()))?;
    SecretKeyBox::from_string(&text)
        .and_then(SecretKeyBox::into_unencrypted_secret_key)
        .map_err(|e| {
            anyhow!(
                "{} is not an unencrypted minisign secret key ({e}): make one with \
                 `metralectl bench keygen KEYFILE`, or remove a password with \
                 `minisign -C -s KEYFILE` and an empty new password",
                keyfile.display()
            )
        })
}

/// Signs `bytes` (FILE's exact contents) into FILE.minisig, written atomically. The trusted
/// comment is signed too; by default it is minisign's `timestamp:… file:…`.
pub fn sign(
    file: &Path,
    bytes: &[u8],
    key: &SecretKey,
    trusted_comment: Option<&str>,
) -> anyhow::Result<PathBuf> {
    let pk =
        PublicKey::from_secret_key(key).map_err(|e| anyhow!("the secret key is damaged: {e}"))?;
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let default_comment = format!("timestamp:{}\tfile:{name}", unix_now());
    let untrusted = format!("signature from metrale key {}", key_id(pk.keynum()));
    let sig = minisign::sign(
        Some(&pk),
        key,
        Cursor::new(bytes),
        Some(trusted_comment.unwrap_or(&default_comment)),
        Some(&untrusted),
    )
    .map_err(|e| anyhow!("failed to sign {}: {e}", file.display()))?;
    let path = sig_path(file);
    let mut text = sig.into_string();
    if !text.ends_with('\n') {
        text.push('\n'); // as the minisign tool writes it
    }
    write_atomic(&path, text.as_bytes())?;
    Ok(path)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A signature that checked out.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The trusted key's name (where it came from).
    pub key_name: String,
    pub key_id: String,
    /// The signed trusted comment (a release's says `metrale release VERSION`).
    pub trusted_comment: String,
}

/// Checks `bytes` (FILE's contents) against the signature text `sig_text` (read from
/// `sig_name`) and one of `trusted`. Every failure says what failed and what to do.
pub fn verify(
    file: &Path,
    bytes: &[u8],
    sig_name: &Path,
    sig_text: &str,
    trusted: &[TrustedKey],
) -> anyhow::Result<Verified> {
    let sig = SignatureBox::from_string(sig_text).map_err(|e| {
        anyhow!(
            "{} is not a minisign signature ({e}): expected the four lines `minisign -S` or \
             `metralectl sign` writes",
            sig_name.display()
        )
    })?;
    let signer = key_id(sig.keynum());
    let Some(key) = trusted.iter().find(|k| k.key.keynum() == sig.keynum()) else {
        let names: Vec<String> = trusted
            .iter()
            .map(|k| format!("{} (key {})", k.name, k.id()))
            .collect();
        if let [only] = trusted
            && only.given
        {
            bail!(
                "{} was made by key {signer}, not by the key given: {} (key {}); nothing \
                 vouches for {}",
                sig_name.display(),
                only.name,
                only.id(),
                file.display()
            );
        }
        bail!(
            "{} was made by key {signer}, which is not one of the trusted keys ({}); check it \
             against another key with --pubkey KEYFILE.pub",
            sig_name.display(),
            names.join(", ")
        );
    };
    if !sig.is_prehashed() {
        bail!(
            "{} is a legacy (not pre-hashed) minisign signature, which is refused: re-sign with \
             `metralectl sign` or minisign 0.8+",
            sig_name.display()
        );
    }
    minisign::verify(&key.key, &sig, Cursor::new(bytes), true, false, false).map_err(|e| {
        anyhow!(
            "{} does not match its signature {} by {} ({signer}): {e}; the file (or the \
             signature's trusted comment) was changed after it was signed",
            file.display(),
            sig_name.display(),
            key.name
        )
    })?;
    let trusted_comment = sig.trusted_comment().map_err(|e| {
        anyhow!(
            "{} has no readable trusted comment: {e}",
            sig_name.display()
        )
    })?;
    Ok(Verified {
        key_name: key.name.clone(),
        key_id: signer,
        trusted_comment,
    })
}

/// Reads FILE and its signature (SIG, default FILE.minisig) and verifies them.
pub fn verify_file(
    file: &Path,
    sig: Option<&Path>,
    trusted: &[TrustedKey],
) -> anyhow::Result<(Vec<u8>, Verified)> {
    let bytes = fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let sig_file = sig.map_or_else(|| sig_path(file), Path::to_path_buf);
    let sig_text = fs::read_to_string(&sig_file).with_context(|| {
        format!(
            "cannot read the signature {} (sign with `metralectl sign {} --key KEYFILE`, or \
             name the signature with --sig)",
            sig_file.display(),
            file.display()
        )
    })?;
    let verified = verify(file, &bytes, &sig_file, &sig_text, trusted)?;
    Ok((bytes, verified))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(dir: &Path, name: &str) -> (PathBuf, TrustedKey) {
        let key = dir.join(name);
        keygen(&key).expect("keygen");
        let public = TrustedKey::load(&pub_path(&key)).expect("pub");
        (key, public)
    }

    #[test]
    fn signs_verifies_and_names_each_failure() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (key, public) = pair(dir.path(), "a.key");
        let (_, other) = pair(dir.path(), "b.key");
        let file = dir.path().join("SHA256SUMS");
        fs::write(&file, b"abc  x\n").expect("write");
        let sk = load_secret(&key).expect("secret");
        sign(&file, b"abc  x\n", &sk, Some("metrale release 1.2.3")).expect("sign");

        let (_, ok) = verify_file(&file, None, std::slice::from_ref(&public)).expect("verifies");
        assert_eq!(ok.trusted_comment, "metrale release 1.2.3");
        assert_eq!(ok.key_id, public.id());

        let err = verify_file(&file, None, std::slice::from_ref(&other)).expect_err("wrong key");
        assert!(
            format!("{err:#}").contains("not by the key given"),
            "{err:#}"
        );

        fs::write(&file, b"abd  x\n").expect("tamper");
        let err = verify_file(&file, None, &[public]).expect_err("changed file");
        assert!(
            format!("{err:#}").contains("changed after it was signed"),
            "{err:#}"
        );
    }

    #[test]
    fn a_changed_trusted_comment_fails() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (key, public) = pair(dir.path(), "a.key");
        let file = dir.path().join("f");
        fs::write(&file, b"data").expect("write");
        let sig = sign(
            &file,
            b"data",
            &load_secret(&key).expect("sk"),
            Some("metrale release 1.0.0"),
        )
        .expect("sign");
        let text = fs::read_to_string(&sig).expect("sig");
        fs::write(&sig, text.replace("1.0.0", "9.0.0")).expect("tamper");
        assert!(verify_file(&file, None, &[public]).is_err());
    }

    #[test]
    fn builtin_keys_parse() {
        let keys = builtin_keys().expect("built-in keys parse");
        assert_eq!(keys[0].id(), release_key().expect("release").id());
    }

    #[test]
    fn key_ids_print_like_minisign() {
        assert_eq!(key_id(&[1, 2, 3, 4, 5, 6, 7, 0xab]), "AB07060504030201");
    }
}
