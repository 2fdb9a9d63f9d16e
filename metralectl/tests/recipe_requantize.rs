//! `[checkpoint.requantize]` as `met serve --requantize`: which built-in recipe passes what,
//! and the tables `met` could not honour refused when the recipe loads. (That `met` accepts
//! each command line is `engine/tests/recipes_requantize.rs`; that the plan does what it says,
//! `engine/tests/nvfp4_checkpoints.rs`.) Each run is isolated as in `cli.rs`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        std::fs::create_dir_all(dir.path().join("config/recipes")).expect("config dir");
        Self { dir }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    fn user_recipe(&self, file: &str, text: &str) {
        std::fs::write(self.path("config/recipes").join(file), text).expect("write recipe");
    }

    fn output(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_metralectl"))
            .args(args)
            .env_clear()
            .env("METRALE_CONFIG_DIR", self.path("config"))
            .env("METRALE_DATA_DIR", self.path("data"))
            .env("METRALE_STATE_DIR", self.path("state"))
            .env("METRALE_NVIDIA_SMI", self.path("no-nvidia-smi-here"))
            .env("HOME", self.dir.path())
            .env("NO_COLOR", "1")
            .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")))
            .output()
            .expect("metralectl runs")
    }

    fn json(&self, args: &[&str]) -> Value {
        let out = self.output(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("json")
    }
}

fn builtin_text(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../recipes/{name}.toml")),
    )
    .expect("built-in recipe")
}

/// Every built-in recipe that re-quantizes passes exactly what it says to `met serve
/// --requantize`, and no other recipe passes the flag (engine/tests/recipes_requantize.rs
/// checks that `met` accepts each of these command lines).
#[test]
fn every_requantizing_recipe_passes_what_it_says_to_met() {
    let sandbox = Sandbox::new();
    for (recipe, want) in [
        ("qwen3.6-35b-a3b-fp8-bf16head", Some("lm_head=bf16")),
        ("qwen3.6-35b-a3b-fp8-nvfp4head", Some("lm_head=nvfp4")),
        (
            "qwen3.6-35b-a3b-fp8-nvfp4head-experts-nvfp4",
            Some("lm_head=nvfp4,experts=nvfp4"),
        ),
        (
            "qwen3.6-35b-a3b-fp8-nvfp4head-experts-nvfp4-gate-up",
            Some("lm_head=nvfp4,experts.gate_up=nvfp4"),
        ),
        ("qwen3.6-35b-a3b-nvfp4", None),
        ("qwen3.6-35b-a3b-nvfp4-declared", None),
        ("qwen3.6-27b-nvfp4", None),
        ("qwen3.6-27b-nvfp4-unsloth", None),
        ("qwen3.6-27b-nvfp4-prefill-record", None),
        ("qwen3.6-27b-fp8", None),
    ] {
        let json = sandbox.json(&["run", recipe, "--print", "--json"]);
        let native: Vec<&str> = json["native"]["argv"]
            .as_array()
            .expect("argv")
            .iter()
            .filter_map(|a| a.as_str())
            .collect();
        let got = native
            .windows(2)
            .find(|w| w[0] == "--requantize")
            .map(|w| w[1]);
        assert_eq!(got, want, "{recipe}");
    }
}

#[test]
fn a_requantize_met_cannot_honour_is_refused_when_the_recipe_loads() {
    let sandbox = Sandbox::new();
    for (table, needle) in [
        (
            "[checkpoint.requantize]\nexperts = \"nvfp4\"\nexpert_projections = [\"gate\"]",
            "both or neither",
        ),
        (
            "[checkpoint.requantize]\nlm_head = \"fp8\"",
            "nvfp4 or bf16",
        ),
    ] {
        sandbox.user_recipe(
            "mine.toml",
            &builtin_text("qwen3.6-35b-a3b-fp8-nvfp4head")
                .replace(
                    "name = \"qwen3.6-35b-a3b-fp8-nvfp4head\"",
                    "name = \"mine\"",
                )
                .replace("[checkpoint.requantize]\nlm_head = \"nvfp4\"", table),
        );
        let out = sandbox.output(&["run", "mine", "--print"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("checkpoint.requantize") && err.contains(needle),
            "{err}"
        );
    }
}
