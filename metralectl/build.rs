//! Embeds files of the workspace into the binary, so an installed `metralectl` needs no
//! repository:
//! - every `recipes/*.toml` (the built-in recipes) into `$OUT_DIR/builtin_recipes.rs`;
//! - every `bench/keys/*.pub` (the trusted benchmark keys, see docs/benchmarks.md) into
//!   `$OUT_DIR/bench_keys.rs`.
//!
//! Each is a sorted slice of (file name, contents) pairs, each contents an `include_str!`.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = manifest_dir.join("..");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    embed(
        &root.join("recipes"),
        "toml",
        true,
        &out_dir.join("builtin_recipes.rs"),
    );
    embed(
        &root.join("bench").join("keys"),
        "pub",
        false,
        &out_dir.join("bench_keys.rs"),
    );
    println!(
        "cargo:rerun-if-changed={}",
        root.join("keys").join("release.pub").display()
    );
    // The target triple, for `self update` to pick its release archive.
    let target = env::var("TARGET").expect("cargo sets TARGET");
    println!("cargo:rustc-env=METRALE_TARGET={target}");
}

/// Writes the slice of `dir/*.ext` to `out`; a missing `dir` is an empty slice unless `required`.
fn embed(dir: &Path, ext: &str, required: bool, out: &Path) {
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<PathBuf> = match fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| path.extension().is_some_and(|e| e == ext))
            .collect(),
        Err(e) if required => panic!("cannot read {}: {e}", dir.display()),
        Err(_) => Vec::new(),
    };
    files.sort();

    let mut text = String::from("&[\n");
    for path in &files {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("embedded file names are UTF-8");
        let absolute = fs::canonicalize(path).expect("embedded path resolves");
        println!("cargo:rerun-if-changed={}", absolute.display());
        writeln!(
            text,
            "    ({name:?}, include_str!({:?})),",
            absolute.display().to_string()
        )
        .expect("writing to a String cannot fail");
    }
    text.push_str("]\n");
    fs::write(out, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", out.display()));
}
