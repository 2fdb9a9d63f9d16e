//! `met score` run as a user runs it: the real binary, JSON on stdout, errors on stderr.

use std::path::PathBuf;
use std::process::Command;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

fn met(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_met"))
        .args(args)
        .output()
        .expect("run met");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn score_prints_transformers_logprobs_as_json() {
    // Dense, MoE (fused experts), FP8 (dequantized at load) and Qwen3.5 hybrid (whole
    // sequence, no cache) checkpoints.
    for name in [
        "qwen3-mha-untied",
        "qwen3-moe-step2",
        "qwen3-moe-fp8",
        "qwen3_5-hybrid-dense",
    ] {
        score_matches_transformers(name);
    }
}

fn score_matches_transformers(name: &str) {
    let reference: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join(format!("{name}.reference.json"))).expect("ref"),
    )
    .expect("json");
    let seq = &reference["sequences"][2];
    let tokens: Vec<u64> = seq["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .filter_map(|t| t.as_u64())
        .collect();
    let file = std::env::temp_dir().join(format!("met-score-tokens-{}.json", std::process::id()));
    std::fs::write(&file, serde_json::to_string(&tokens).expect("json")).expect("write");
    let model = fixtures().join("models").join(name);
    let (code, stdout, stderr) = met(&[
        "score",
        model.to_str().expect("utf8"),
        "--tokens-file",
        file.to_str().expect("utf8"),
        "--top-k",
        "3",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let got: serde_json::Value = serde_json::from_str(&stdout).expect("stdout is JSON");
    let positions = got["positions"].as_array().expect("positions");
    assert_eq!(positions.len(), tokens.len());
    for (p, want) in seq["next_token_logprobs"]
        .as_array()
        .expect("lp")
        .iter()
        .enumerate()
    {
        let g = positions[p]["logprob"].as_f64().expect("logprob");
        assert!(
            (g - want.as_f64().expect("f64")).abs() < 1e-3,
            "{name} pos {p}: {g} vs {want}"
        );
        assert_eq!(positions[p]["next_token"].as_u64(), Some(tokens[p + 1]));
        let top = positions[p]["top"].as_array().expect("top");
        assert_eq!(top.len(), 3);
        assert_eq!(top[0][0], seq["top5"][p][0][0], "pos {p}: top-1 id");
    }
    assert!(positions.last().expect("last")["logprob"].is_null());
    std::fs::remove_file(file).ok();
}

#[test]
fn score_errors_name_the_problem() {
    let model = fixtures().join("models/qwen3-gqa-tied");
    let model = model.to_str().expect("utf8");
    let (code, stdout, stderr) = met(&["score", model, "--tokens", "1,2,999999"]);
    assert_ne!(code, 0);
    assert!(stdout.is_empty());
    assert!(
        stderr.contains("token id 999999") && stderr.contains("vocabulary"),
        "{stderr}"
    );

    let (code, _, stderr) = met(&["score", "/nonexistent/model", "--tokens", "1"]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("/nonexistent/model") && stderr.contains("not a model directory"),
        "{stderr}"
    );

    let bad = std::env::temp_dir().join(format!("met-score-bad-{}.json", std::process::id()));
    std::fs::write(&bad, "{\"not\": \"an array\"}").expect("write");
    let (code, _, stderr) = met(&["score", model, "--tokens-file", bad.to_str().expect("utf8")]);
    assert_ne!(code, 0);
    assert!(stderr.contains("JSON array of token ids"), "{stderr}");
    std::fs::remove_file(bad).ok();
}

/// `--device cuda` without a usable GPU fails with a message that says what is missing, never
/// a panic: a default build says it has no CUDA support; a `cuda` build on a machine without the
/// NVIDIA driver (CI) names the driver library.
#[test]
fn device_cuda_without_a_gpu_says_why() {
    let model = fixtures().join("models/qwen3-gqa-tied");
    let (code, stdout, stderr) = met(&[
        "score",
        model.to_str().expect("utf8"),
        "--device",
        "cuda",
        "--tokens",
        "1,2,3",
    ]);
    if code == 0 && cfg!(feature = "cuda") {
        // A machine with a GPU and a cuda build: it must have scored.
        assert!(stdout.contains("\"sum_logprob\""), "{stdout}");
        return;
    }
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let want = if cfg!(feature = "cuda") {
        "libcuda"
    } else {
        "built without CUDA support"
    };
    assert!(stderr.contains(want), "{stderr}");
}

#[test]
fn version_names_the_commit_it_was_built_from() {
    let (code, out, _) = met(&["--version"]);
    assert_eq!(code, 0);
    let rest = out
        .trim_end()
        .strip_prefix(&format!("met {}", env!("CARGO_PKG_VERSION")))
        .unwrap_or_else(|| panic!("{out:?}"));
    // Outside a git checkout the version stands alone; inside, the short commit follows.
    if let Some(git) = rest.strip_prefix(" (git ") {
        let short: String = git.chars().take(7).collect();
        assert!(short.chars().all(|c| c.is_ascii_hexdigit()), "{out:?}");
        assert!(git.ends_with(')'), "{out:?}");
    } else {
        assert_eq!(rest, "", "{out:?}");
    }
}
