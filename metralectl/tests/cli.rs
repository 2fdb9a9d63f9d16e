//! Runs the real `metralectl` binary and checks stdout, stderr and the exit code.
//!
//! Every run is isolated: an empty environment, the config directory and the working directory
//! in a fresh temporary directory, no colour, and `nvidia-smi` either absent or a fake script
//! (the machines that run these tests have no GPU; tests that use a fake say so in their name).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

#[path = "cli_support/sandbox.rs"]
mod sandbox;
use sandbox::Sandbox;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn builtin_text(name: &str) -> String {
    fs::read_to_string(repo_root().join("recipes").join(format!("{name}.toml")))
        .expect("built-in recipe")
}

const H100: &str = "NVIDIA H100 80GB HBM3, 81559, 81000, 9.0";

// ---- list ----

#[test]
fn list_shows_every_builtin_recipe() {
    let sandbox = Sandbox::new();
    insta::assert_snapshot!("list", sandbox.transcript(&["list"]));
}

#[test]
fn list_filters_by_vendor_and_family_ignoring_case() {
    let sandbox = Sandbox::new();
    insta::assert_snapshot!(
        "list_vendor_nvidia",
        sandbox.transcript(&["list", "--vendor", "nvidia"])
    );
    insta::assert_snapshot!(
        "list_no_match",
        sandbox.transcript(&["list", "--family", "llama"])
    );
}

#[test]
fn list_json_names_every_file_in_recipes() {
    let sandbox = Sandbox::new();
    let json = sandbox.json(&["list", "--json"]);
    assert_eq!(json["version"], 1);
    let recipes = json["recipes"].as_array().expect("recipes is an array");
    let mut names: Vec<&str> = recipes
        .iter()
        .map(|r| r["name"].as_str().expect("name"))
        .collect();
    names.sort_unstable();
    let mut files: Vec<String> = fs::read_dir(repo_root().join("recipes"))
        .expect("recipes/")
        .map(|e| {
            e.expect("entry")
                .file_name()
                .to_string_lossy()
                .trim_end_matches(".toml")
                .to_owned()
        })
        .collect();
    files.sort();
    assert_eq!(names, files);
    let fp8 = recipes
        .iter()
        .find(|r| r["name"] == "qwen3.6-27b-fp8")
        .expect("qwen3.6-27b-fp8 listed");
    assert_eq!(fp8["checkpoint"], "Qwen/Qwen3.6-27B-FP8");
    assert_eq!(fp8["quantization"], "fp8");
    assert_eq!(fp8["gpus"], 1);
    assert_eq!(fp8["source"]["kind"], "built-in");
    assert!(fp8["memory_needed_bytes"].as_u64().expect("a number") > 60 << 30);
    assert_eq!(fp8["memory_estimate_complete"], true);
    assert_eq!(fp8["requantize"], Value::Null);
    let gate_up = recipes
        .iter()
        .find(|r| r["name"] == "qwen3.6-35b-a3b-fp8-nvfp4head-experts-nvfp4-gate-up")
        .expect("gate-up recipe listed");
    assert_eq!(gate_up["quantization"], "fp8");
    assert_eq!(gate_up["requantize"]["experts"], "nvfp4");
    assert_eq!(
        gate_up["requantize"]["expert_projections"],
        serde_json::json!(["gate", "up"])
    );
    assert_eq!(gate_up["active_parameters"], "3B");
}

#[test]
fn list_says_which_user_recipe_overrides_a_builtin_one() {
    let sandbox = Sandbox::new();
    sandbox.user_recipe(
        "qwen3-8b.toml",
        &builtin_text("qwen3-8b").replace("max_batch_size = 2", "max_batch_size = 1"),
    );
    sandbox.user_recipe(
        "mine.toml",
        &builtin_text("qwen3-0.6b").replace("name = \"qwen3-0.6b\"", "name = \"mine\""),
    );
    let json = sandbox.json(&["list", "--json"]);
    let find = |name: &str| {
        json["recipes"]
            .as_array()
            .expect("array")
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .expect("listed")
    };
    assert_eq!(find("qwen3-8b")["source"]["kind"], "user");
    assert_eq!(find("qwen3-8b")["source"]["overrides_builtin"], true);
    assert_eq!(find("mine")["source"]["overrides_builtin"], false);
    assert!(
        sandbox
            .scrub(find("mine")["source"]["path"].as_str().expect("path"))
            .ends_with("config/recipes/mine.toml")
    );
    insta::assert_snapshot!(
        "list_with_user_recipes",
        sandbox.transcript(&["list", "--family", "qwen3"])
    );
}

// ---- show ----

#[test]
fn show_without_nvidia_smi_still_estimates() {
    let sandbox = Sandbox::new();
    insta::assert_snapshot!(
        "show_no_gpu",
        sandbox.transcript(&["show", "qwen3.6-27b-fp8"])
    );
}

#[cfg(unix)]
#[test]
fn show_fits_on_a_fake_nvidia_smi_h100() {
    let mut sandbox = Sandbox::new();
    sandbox.fake_nvidia_smi(H100);
    insta::assert_snapshot!(
        "show_fits_fake_h100",
        sandbox.transcript(&["show", "qwen3.6-35b-a3b-fp8-mtp"])
    );
}

#[cfg(unix)]
#[test]
fn show_does_not_fit_on_a_fake_nvidia_smi_small_gpu() {
    let mut sandbox = Sandbox::new();
    sandbox.fake_nvidia_smi("NVIDIA GeForce RTX 4090, 24564, 24000, 8.9");
    let text = sandbox.transcript(&["show", "qwen3.6-27b-fp8"]);
    assert!(
        text.contains("does not fit: needs 65.1 GiB, has 21.6 GiB"),
        "{text}"
    );
    let blackwell = sandbox.transcript(&["show", "qwen3.6-27b-nvfp4"]);
    insta::assert_snapshot!("show_old_gpu_fake_4090", blackwell);
}

#[cfg(unix)]
#[test]
fn show_json_on_a_fake_nvidia_smi_two_gpus() {
    let mut sandbox = Sandbox::new();
    sandbox.fake_nvidia_smi(&format!("{H100}\n{H100}"));
    let json = sandbox.json(&["show", "qwen3.6-27b-fp8", "--json"]);
    assert_eq!(json["version"], 1);
    assert_eq!(json["recipe"]["checkpoint"]["repo"], "Qwen/Qwen3.6-27B-FP8");
    assert_eq!(json["recipe"]["checkpoint"]["revision"], Value::Null);
    assert_eq!(json["recipe"]["image"]["digest"], Value::Null);
    assert_eq!(
        json["image_reference"],
        format!("ghcr.io/metrale/met:{}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(json["machine"]["gpus"].as_array().expect("gpus").len(), 2);
    let cap = &json["capacity"];
    let part = |name: &str| cap[name]["bytes"].as_u64().expect("a known part");
    let sum = part("weights") + part("kv_cache") + part("recurrent_state") + part("headroom");
    assert_eq!(cap["total_bytes"].as_u64(), Some(sum));
    // The recipe uses one GPU: 0.9 × 81559 MiB.
    assert_eq!(
        json["verdict"]["usable_bytes"].as_u64(),
        Some((81559.0 * 1048576.0 * 0.9) as u64)
    );
    assert_eq!(json["verdict"]["fits"], true);
}

#[cfg(unix)]
#[test]
fn show_reports_a_broken_fake_nvidia_smi() {
    let mut sandbox = Sandbox::new();
    sandbox.fake_nvidia_smi(
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver",
    );
    let text = sandbox.transcript(&["show", "qwen3-0.6b"]);
    assert!(
        text.contains("no NVIDIA GPU found: cannot read the output of [TMP]/fake-nvidia-smi"),
        "{text}"
    );
    assert!(text.contains("exit: 0"), "{text}");
}

/// Outside a checkout the demo is the copy shipped inside metralectl, written to the data
/// directory (issue 38: it was taken for a Hub repository id).
#[test]
fn show_demo_outside_a_checkout_finds_the_shipped_copy() {
    let sandbox = Sandbox::new();
    insta::assert_snapshot!("show_demo_shipped", sandbox.transcript(&["show", "demo"]));
    let config = fs::read(sandbox.dir.path().join("data/models/demo/config.json"));
    assert_eq!(
        config.expect("written"),
        fs::read(repo_root().join("models/demo/config.json")).expect("in the checkout")
    );
}

#[test]
fn run_refuses_a_local_checkpoint_that_is_not_there_before_starting_anything() {
    let sandbox = Sandbox::new();
    let text = builtin_text("demo")
        .replace("name = \"demo\"", "name = \"gone\"")
        .replace("path = \"models/demo\"", "path = \"models/gone\"");
    sandbox.user_recipe("gone.toml", &text);
    let out = sandbox.output(&["run", "gone", "--native"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the checkpoint directory models/gone of gone is not on this machine"),
        "{err}"
    );
    assert!(err.contains("absolute `checkpoint.path`"), "{err}");
}

// ---- run: checks before any download (issue 38) ----

#[test]
fn run_refuses_a_gpu_recipe_without_a_gpu_before_any_download() {
    let mut sandbox = Sandbox::new();
    sandbox.set("HF_HOME", sandbox.path("hf"));
    let out = sandbox.output(&["run", "qwen3-8b"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("qwen3-8b cannot run on this machine: does not fit: needs"),
        "{err}"
    );
    assert!(err.contains("no NVIDIA GPU found"), "{err}");
    assert!(err.contains("nothing was downloaded"), "{err}");
    assert!(
        err.contains("it runs on a machine with 1 NVIDIA GPU"),
        "{err}"
    );
    assert!(
        !err.contains("--native"),
        "no native run helps without a GPU: {err}"
    );
    assert!(
        !sandbox.dir.path().join("hf").exists(),
        "nothing may be fetched"
    );
}

#[cfg(unix)]
#[test]
fn run_refuses_a_gpu_too_small_or_too_old_on_a_fake_nvidia_smi() {
    let mut sandbox = Sandbox::new();
    sandbox.fake_nvidia_smi("NVIDIA GeForce RTX 4090, 24564, 24000, 8.9");
    let out = sandbox.output(&["run", "qwen3.6-27b-fp8"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("needs 65.1 GiB, has 21.6 GiB"), "{err}");
    let out = sandbox.output(&["run", "qwen3.6-27b-nvfp4"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs compute capability"), "{err}");
    assert!(err.contains("or newer"), "{err}");
}

/// A recipe the engine would refuse at load is refused before any download, whatever the
/// machine: a family without CUDA kernels, a model spread over more GPUs than met serves.
#[cfg(unix)]
#[test]
fn run_refuses_what_the_engine_does_not_serve_before_any_download() {
    let mut sandbox = Sandbox::new();
    sandbox.fake_nvidia_smi("NVIDIA H200, 143771, 143000, 9.0");
    for (name, why) in [
        (
            "minimax-m2",
            "over 4 GPUs, and met serves a model on one GPU",
        ),
        (
            "deepseek-v3.1",
            "over 8 GPUs, and met serves a model on one GPU",
        ),
    ] {
        let out = sandbox.output(&["run", name]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(&format!("{name} cannot run: ")), "{err}");
        assert!(err.contains(why), "{err}");
        assert!(err.contains("nothing was downloaded"), "{err}");
    }
    assert!(
        !sandbox.dir.path().join("hf").exists(),
        "nothing may be fetched"
    );
    // `show` says the same, and how many H200-class GPUs the estimate needs.
    let out = sandbox.output(&["show", "deepseek-v3.1"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("h200-class gpus           8 "), "{text}");
    assert!(
        text.contains("does not run: it spreads the model over 8 GPUs"),
        "{text}"
    );
    assert!(text.contains("61 layers × 576 latent values"), "{text}");
}

// ---- list fits the terminal (issue 38) ----

#[test]
fn list_fits_the_terminal_and_marks_what_this_machine_cannot_run() {
    let mut sandbox = Sandbox::new();
    for columns in [100, 80] {
        sandbox.set("COLUMNS", columns.to_string());
        let out = sandbox.output(&["list"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        for line in stdout.lines() {
            assert!(
                line.chars().count() <= columns,
                "wider than {columns}: {line}"
            );
        }
        // A name too long for its column has a line of its own, its cells on the next.
        let lines: Vec<&str> = stdout.lines().collect();
        let here = |name: &str| {
            let at = lines
                .iter()
                .position(|l| l.split_whitespace().next() == Some(name))
                .unwrap_or_else(|| panic!("no row {name} in\n{stdout}"));
            let row = if lines[at].trim() == name {
                lines[at + 1]
            } else {
                lines[at]
            };
            row.split_whitespace().last().unwrap_or("").to_owned()
        };
        assert_eq!(here("demo"), "yes", "{stdout}");
        assert_eq!(here("qwen3-8b"), "no", "{stdout}");
        assert_eq!(
            here("qwen3.6-35b-a3b-fp8-nvfp4head-experts-nvfp4-gate-up"),
            "no"
        );
    }
    let json = sandbox.json(&["list", "--json"]);
    let row = |name: &str| {
        json["recipes"]
            .as_array()
            .and_then(|rows| rows.iter().find(|r| r["name"] == name))
            .cloned()
            .unwrap_or_else(|| panic!("{name} is not listed: {json}"))
    };
    let demo = row("demo");
    assert_eq!(demo["runs_here"].as_bool(), Some(true));
    assert!(demo["engine_refusal"].is_null(), "{demo}");
    // More GPUs than met serves a model on: refused on every machine, with the reason.
    let deepseek = row("deepseek-v3.1");
    assert_eq!(deepseek["runs_here"].as_bool(), Some(false));
    let why = deepseek["engine_refusal"].as_str().unwrap_or_default();
    assert!(why.contains("8 GPUs"), "{deepseek}");
}

// ---- completions (issue 38) ----

#[cfg(unix)]
#[test]
fn recipe_names_complete_in_bash() {
    let sandbox = Sandbox::new();
    let names = sandbox.output(&["list", "--names"]);
    let names = String::from_utf8_lossy(&names.stdout);
    assert!(names.lines().any(|n| n == "demo"), "{names}");
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_metralectl"))
        .parent()
        .expect("bin dir");
    let script = repo_root().join("completions/metralectl.bash");
    // As bash calls it: the command, the word being completed, the one before.
    let complete = |words: &str| {
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "source {}; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); \
                 _metralectl_names metralectl \"${{COMP_WORDS[COMP_CWORD]}}\" \
                 \"${{COMP_WORDS[COMP_CWORD-1]}}\"; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
                script.display()
            ))
            .env("PATH", format!("{}:/usr/bin:/bin", bin_dir.display()))
            .envs(sandbox.env.iter().map(|(k, v)| (k, v)))
            .output()
            .expect("run bash");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let run = complete("metralectl run qwen3-");
    assert!(run.lines().any(|l| l == "qwen3-8b"), "{run}");
    assert!(!run.lines().any(|l| l == "demo"), "{run}");
    let chat = complete("metralectl chat dem");
    assert_eq!(chat.trim(), "demo");
    // Elsewhere clap's completion answers: subcommands.
    let sub = complete("metralectl ch");
    assert!(sub.lines().any(|l| l == "chat"), "{sub}");
    // zsh (not installed here): the same names, from the script's own function.
    let zsh = fs::read_to_string(repo_root().join("completions/_metralectl")).expect("_metralectl");
    assert!(
        zsh.contains("':name -- The recipe name, as `metralectl list` shows it:_metralectl_names'"),
        "run's NAME completes recipe names in zsh"
    );
    assert!(zsh.contains("$(metralectl list --names 2>/dev/null)"));
}

// ---- run --print ----

#[test]
fn run_print_gives_both_commands() {
    let mut sandbox = Sandbox::new();
    sandbox.set("HF_TOKEN", "hf_secret".into());
    let text = sandbox.transcript(&["run", "qwen3.6-27b-fp8-mtp", "--print"]);
    assert!(!text.contains("hf_secret"), "the token must not be printed");
    insta::assert_snapshot!("run_print_mtp", text);
}

#[test]
fn run_print_binds_what_run_binds() {
    let sandbox = Sandbox::new();
    let text = sandbox.transcript(&["run", "demo", "--print"]);
    assert!(text.contains("-p 127.0.0.1:8000:8000"), "{text}");
    assert!(!text.contains("-p 8000:8000"), "{text}");
    // Wider is asked for, and then both commands say so.
    let wide = sandbox.transcript(&["run", "demo", "--print", "--host", "0.0.0.0"]);
    assert!(wide.contains("-p 0.0.0.0:8000:8000"), "{wide}");
    assert!(wide.contains("# native\nmet serve"), "{wide}");
    assert!(
        wide.contains("met serve [TMP]/data/models/demo \\\n  --host 0.0.0.0"),
        "{wide}"
    );
}

#[test]
fn run_print_demo_finds_the_checkpoint_from_the_working_directory() {
    let sandbox = Sandbox::new();
    fs::create_dir_all(sandbox.dir.path().join("models").join("demo")).expect("demo dir");
    insta::assert_snapshot!(
        "run_print_demo",
        sandbox.transcript(&["run", "demo", "--print", "--port", "9000"])
    );
}

#[test]
fn run_print_json_is_parseable() {
    let sandbox = Sandbox::new();
    let json = sandbox.json(&[
        "run",
        "qwen3.6-35b-a3b-fp8-nvfp4head-experts-nvfp4-gate-up",
        "--print",
        "--json",
    ]);
    let argv = |form: &str| -> Vec<String> {
        json[form]["argv"]
            .as_array()
            .expect("argv")
            .iter()
            .map(|a| a.as_str().expect("string").to_owned())
            .collect()
    };
    let docker = argv("docker");
    let native = argv("native");
    assert_eq!(docker[..2], ["docker", "run"]);
    assert!(docker.windows(2).any(|w| w == ["--gpus", "all"]));
    assert!(docker.windows(2).any(|w| w
        == [
            "-v",
            "/home/user/.cache/huggingface:/root/.cache/huggingface"
        ]));
    assert!(
        !docker.contains(&"HF_TOKEN".to_owned()),
        "HF_TOKEN is unset, so not passed"
    );
    assert_eq!(native[..3], ["met", "serve", "Qwen/Qwen3.6-35B-A3B-FP8"]);
    assert!(native.windows(2).any(|w| w == ["--max-seq-len", "131072"]));
    // [checkpoint.requantize] is a flag of met serve, in both forms, not an environment.
    for form in [&native, &docker] {
        assert!(
            form.windows(2)
                .any(|w| w == ["--requantize", "lm_head=nvfp4,experts.gate_up=nvfp4"]),
            "{form:?}"
        );
    }
    assert!(
        json["native"]["env"]
            .as_object()
            .is_none_or(|e| e.is_empty())
    );
    assert_eq!(json["warnings"].as_array().map(Vec::len), Some(0));
}

#[test]
fn a_recipe_passes_its_tool_and_reasoning_parsers_to_the_engine() {
    let sandbox = Sandbox::new();
    let json = sandbox.json(&["run", "qwen3-8b", "--print", "--json"]);
    let native: Vec<&str> = json["native"]["argv"]
        .as_array()
        .expect("argv")
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert!(
        native
            .windows(2)
            .any(|w| w == ["--tool-call-parser", "hermes"]),
        "{native:?}"
    );
    assert!(
        native
            .windows(2)
            .any(|w| w == ["--reasoning-parser", "qwen3"]),
        "{native:?}"
    );
}

#[test]
fn run_ps_and_stop_without_a_docker_daemon() {
    let mut sandbox = Sandbox::new();
    sandbox.set("DOCKER_HOST", "unix:///nonexistent/docker.sock".into());
    sandbox.set("METRALE_STATE_DIR", sandbox.path("state"));
    insta::assert_snapshot!(
        "run_docker_without_daemon",
        sandbox.transcript(&["run", "qwen3-8b", "--docker", "--skip-checks"])
    );
    insta::assert_snapshot!("ps_without_daemon", sandbox.transcript(&["ps"]));
    insta::assert_snapshot!(
        "stop_unknown",
        sandbox.transcript(&["stop", "nothing-here"])
    );
}

/// `doctor --json`'s check of `id`.
fn doctor_check(report: &Value, id: &str) -> Value {
    report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no check {id} in {report}"))
        .clone()
}

#[test]
fn doctor_without_docker_or_gpu_says_native_cpu_only() {
    let mut sandbox = Sandbox::new();
    sandbox.set("DOCKER_HOST", "unix:///nonexistent/docker.sock".into());
    sandbox.set("METRALE_STATE_DIR", sandbox.path("state"));
    sandbox.set("HF_HUB_CACHE", sandbox.path("hub"));
    let out = sandbox.output(&["doctor", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "warnings only: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("doctor --json is JSON");
    assert_eq!(report["verdict"], "native CPU engine only");
    assert_eq!(doctor_check(&report, "docker")["status"], "warning");
    assert_eq!(doctor_check(&report, "nvidia-driver")["status"], "warning");
    assert_eq!(report["errors"], 0);
    let text = sandbox.output(&["doctor"]);
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(stdout.contains("[!] Docker is not reachable"), "{stdout}");
    assert!(
        stdout.contains("[!] no NVIDIA GPU: native CPU engine only"),
        "{stdout}"
    );
    assert!(stdout.contains("Doctor found issues in"), "{stdout}");
}

#[cfg(unix)]
#[test]
fn doctor_reports_gpus_and_fails_on_an_unwritable_cache() {
    use std::os::unix::fs::PermissionsExt;
    let mut sandbox = Sandbox::new();
    sandbox.set("DOCKER_HOST", "unix:///nonexistent/docker.sock".into());
    sandbox.set("METRALE_STATE_DIR", sandbox.path("state"));
    sandbox.fake_nvidia_smi("NVIDIA H100 80GB HBM3, 81559, 80000, 9.0");
    let ro = sandbox.dir.path().join("ro");
    fs::create_dir_all(&ro).expect("mkdir");
    fs::set_permissions(&ro, fs::Permissions::from_mode(0o555)).expect("chmod");
    sandbox.set("HF_HUB_CACHE", ro.join("hub").display().to_string());
    let out = sandbox.output(&["doctor", "--json"]);
    assert_eq!(out.status.code(), Some(1), "an error stops run");
    let report: Value = serde_json::from_slice(&out.stdout).expect("doctor --json is JSON");
    let gpu = doctor_check(&report, "nvidia-driver");
    assert_eq!(gpu["status"], "ok");
    assert_eq!(
        gpu["found"][0],
        "GPU 0: NVIDIA H100 80GB HBM3 (compute 9.0), memory 79.6 GiB total, 78.1 GiB free"
    );
    assert_eq!(
        report["verdict"],
        "GPU engine native only (no NVIDIA container runtime)"
    );
    let hf = doctor_check(&report, "huggingface");
    assert_eq!(hf["status"], "error");
    assert!(hf["fix"].as_str().expect("fix").contains("HF_HOME"));
    assert_eq!(report["errors"], 1);
}

// ---- errors ----

#[test]
fn an_unknown_name_gets_suggestions() {
    let sandbox = Sandbox::new();
    insta::assert_snapshot!("unknown_name", sandbox.transcript(&["show", "qwen3.6-27b"]));
    insta::assert_snapshot!(
        "unknown_name_typo",
        sandbox.transcript(&["run", "qwen3-8c", "--print"])
    );
}

#[test]
fn a_malformed_user_recipe_names_file_and_field() {
    let sandbox = Sandbox::new();
    sandbox.user_recipe(
        "qwen3-8b.toml",
        &builtin_text("qwen3-8b").replace(
            "gpu_memory_utilization = 0.9",
            "gpu_memory_utilization = 1.5",
        ),
    );
    insta::assert_snapshot!("malformed_value", sandbox.transcript(&["list"]));
    sandbox.user_recipe(
        "qwen3-8b.toml",
        &builtin_text("qwen3-8b").replace("max_batch_size", "max_batch_sise"),
    );
    insta::assert_snapshot!(
        "malformed_unknown_field",
        sandbox.transcript(&["show", "qwen3-8b"])
    );
    sandbox.user_recipe(
        "qwen3-8b.toml",
        &builtin_text("qwen3-8b").replace(
            "quantization = \"bf16\"",
            "quantization = \"bf16\"\nrevision = \"main\"",
        ),
    );
    insta::assert_snapshot!(
        "malformed_revision",
        sandbox.transcript(&["show", "qwen3-8b"])
    );
}

// ---- the rest ----

#[test]
fn version_is_the_crate_version() {
    let out = Sandbox::new().output(&["--version"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("metralectl {}\n", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn committed_completions_match_the_clap_definitions() {
    let sandbox = Sandbox::new();
    for (shell, file) in [
        ("bash", "metralectl.bash"),
        ("zsh", "_metralectl"),
        ("fish", "metralectl.fish"),
        ("powershell", "_metralectl.ps1"),
        ("elvish", "metralectl.elv"),
    ] {
        let out = sandbox.output(&["completions", shell]);
        assert!(out.status.success(), "completions {shell} failed");
        let committed = fs::read(repo_root().join("completions").join(file)).unwrap_or_default();
        assert!(
            out.stdout == committed,
            "completions/{file} is out of date with the CLI; regenerate it with\n  \
             cargo run -q -p metralectl -- completions {shell} > completions/{file}"
        );
    }
}

#[test]
fn a_closed_stdout_is_not_an_error() {
    let sandbox = Sandbox::new();
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = sandbox
        .command(&["list"])
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!String::from_utf8_lossy(&out.stderr).contains("error"));
}
