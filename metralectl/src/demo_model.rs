//! The demo model, shipped inside `metralectl` (15 MB): an installed launcher, with no checkout
//! of the repository, writes it to `<data dir>/models/demo` the first time a recipe needs
//! `models/demo` and finds nothing on disk (`recipe/resolve.rs` looks in the checkout and
//! beside the binary first).

use std::fs;
use std::path::{Path, PathBuf};

/// The path a built-in recipe writes for it.
pub const WRITTEN: &str = "models/demo";

/// Overrides the data directory (tests point it at a temporary directory).
pub const DATA_DIR_ENV: &str = "METRALE_DATA_DIR";

/// Each file of `models/demo`, by name.
const FILES: &[(&str, &[u8])] = &[
    ("README.md", include_bytes!("../../models/demo/README.md")),
    (
        "config.json",
        include_bytes!("../../models/demo/config.json"),
    ),
    (
        "generation_config.json",
        include_bytes!("../../models/demo/generation_config.json"),
    ),
    (
        "model.safetensors",
        include_bytes!("../../models/demo/model.safetensors"),
    ),
    (
        "tokenizer.json",
        include_bytes!("../../models/demo/tokenizer.json"),
    ),
    (
        "tokenizer_config.json",
        include_bytes!("../../models/demo/tokenizer_config.json"),
    ),
];

/// `$METRALE_DATA_DIR`, else the platform's data directory (`~/.local/share/metrale`).
pub fn data_dir() -> Option<PathBuf> {
    std::env::var_os(DATA_DIR_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            directories::ProjectDirs::from("ai", "metrale", "metrale")
                .map(|d| d.data_dir().to_path_buf())
        })
}

/// The demo model's directory under the data directory, written there (or rewritten where a
/// file differs from the shipped one) first; the reason when it cannot be.
pub fn materialize() -> Result<PathBuf, String> {
    let root = data_dir().ok_or("no data directory (set METRALE_DATA_DIR)")?;
    let dir = root.join(WRITTEN);
    write_all(&dir)
        .map_err(|e| format!("cannot write the demo model to {}: {e:#}", dir.display()))?;
    Ok(dir)
}

fn write_all(dir: &Path) -> anyhow::Result<()> {
    fs::create_dir_all(dir)?;
    for (name, bytes) in FILES {
        let path = dir.join(name);
        let same = fs::metadata(&path).is_ok_and(|m| m.len() == bytes.len() as u64)
            && fs::read(&path).is_ok_and(|on_disk| on_disk == *bytes);
        if !same {
            // A reader (a met starting meanwhile) never sees half a file.
            crate::fsutil::write_atomic(&path, bytes)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_every_file_and_repairs_a_changed_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let demo = dir.path().join("demo");
        write_all(&demo).expect("write");
        for (name, bytes) in FILES {
            assert_eq!(fs::read(demo.join(name)).expect("read"), *bytes, "{name}");
        }
        fs::write(demo.join("config.json"), b"{}").expect("spoil");
        write_all(&demo).expect("rewrite");
        assert_eq!(
            fs::read(demo.join("config.json")).expect("read"),
            FILES[1].1
        );
    }
}
