//! Every built-in Hub recipe's `met serve` command line, as `metralectl run --print` writes it, is
//! one `met` accepts: each flag exists and `--requantize` (what `[checkpoint.requantize]`
//! becomes) parses. Run offline against an empty cache, `met` gets as far as looking the
//! checkpoint up and stops there, before any download; a flag it did not know or a plan it could
//! not honour would stop it earlier, with a different message. (That the plan then does what
//! it says is `nvfp4_checkpoints.rs`; which recipe passes which plan is metralectl's
//! `every_requantizing_recipe_passes_what_it_says_to_met`.)

mod reference_support;
mod server_support;

use std::process::Command;

use server_support::{metralectl, repo_root};

#[test]
fn met_accepts_every_recipes_command_line_before_any_download() {
    let recipes: Vec<String> = std::fs::read_dir(repo_root().join("recipes"))
        .expect("recipes/")
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".toml").map(str::to_owned)
        })
        // The demo's checkpoint is a local path, not a Hub repository.
        .filter(|n| n != "demo")
        .collect();
    assert_eq!(recipes.len(), 22, "{recipes:?}");
    let tmp = tempfile::tempdir().expect("tmp");
    let mut requantizing = 0;
    for recipe in recipes {
        let out = Command::new(metralectl())
            .args(["run", &recipe, "--print", "--json"])
            .current_dir(repo_root())
            .env("METRALE_STATE_DIR", tmp.path().join("state"))
            .env("METRALE_CONFIG_DIR", tmp.path().join("config"))
            .env("HOME", tmp.path())
            .output()
            .expect("metralectl runs");
        assert!(
            out.status.success(),
            "{recipe}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        let argv: Vec<String> = json["native"]["argv"]
            .as_array()
            .expect("argv")
            .iter()
            .filter_map(|a| a.as_str().map(str::to_owned))
            .collect();
        assert_eq!(argv[..2], ["met", "serve"], "{recipe}");
        requantizing += usize::from(argv.iter().any(|a| a == "--requantize"));
        let out = Command::new(env!("CARGO_BIN_EXE_met"))
            .args(&argv[1..])
            .args(["--no-tui", "--metrics-socket"])
            .arg(tmp.path().join(format!("{recipe}.sock")))
            .env("HF_HUB_OFFLINE", "1")
            .env("HF_HUB_CACHE", tmp.path().join("hub"))
            .output()
            .expect("met runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{recipe}: {err}");
        assert!(
            err.contains("HF_HUB_OFFLINE is set") && err.contains("is not in the cache"),
            "{recipe}: met refused its command line before looking the checkpoint up: {err}"
        );
    }
    assert_eq!(
        requantizing, 4,
        "the four recipes with [checkpoint.requantize]"
    );
}
