//! Embeds every `recipes/*.toml` of the workspace into the binary, so an installed `metralectl`
//! knows the built-in recipes without the repository. Writes `$OUT_DIR/builtin_recipes.rs`: a
//! sorted slice of (file name, contents) pairs, each contents an `include_str!` of the file.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::PathBuf;

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let recipes_dir = manifest_dir.join("..").join("recipes");
    println!("cargo:rerun-if-changed={}", recipes_dir.display());

    let mut files: Vec<PathBuf> = fs::read_dir(&recipes_dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", recipes_dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .collect();
    files.sort();

    let mut out = String::from("&[\n");
    for path in &files {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("recipe file names are UTF-8");
        let absolute = fs::canonicalize(path).expect("recipe path resolves");
        println!("cargo:rerun-if-changed={}", absolute.display());
        writeln!(
            out,
            "    ({name:?}, include_str!({:?})),",
            absolute.display().to_string()
        )
        .expect("writing to a String cannot fail");
    }
    out.push_str("]\n");

    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    fs::write(out_dir.join("builtin_recipes.rs"), out).expect("write builtin_recipes.rs");
}
