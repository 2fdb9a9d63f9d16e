//! Loading fine-grained FP8 checkpoints: what goes wrong is named with the tensor and the fix.
//! (That they compute what transformers computes is `qwen3_reference.rs`.)

use std::path::PathBuf;

use safetensors::SafeTensors;
use safetensors::tensor::TensorView;

mod reference_support;

use reference_support::load_error;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/models/qwen3-moe-fp8")
}

/// A copy of the FP8 fixture in a fresh directory, with `edit` applied to its config.json.
fn copy_with_config(tag: &str, edit: impl Fn(&mut serde_json::Value)) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("metrale-fp8-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    for f in ["model.safetensors", "tokenizer.json"] {
        std::fs::copy(fixture().join(f), dir.join(f)).expect("copy");
    }
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture().join("config.json")).expect("cfg"))
            .expect("json");
    edit(&mut cfg);
    std::fs::write(dir.join("config.json"), cfg.to_string()).expect("write");
    dir
}

#[test]
fn fp8_tensors_without_a_quantization_config_are_refused_by_name() {
    let dir = copy_with_config("noquant", |c| {
        c.as_object_mut()
            .expect("object")
            .remove("quantization_config");
    });
    let e = load_error(&dir);
    assert!(
        e.contains("F8_E4M3") && e.contains("quantization_config") && e.contains("_proj.weight"),
        "{e}"
    );
}

#[test]
fn a_block_size_that_disagrees_with_the_scales_names_both_shapes() {
    let dir = copy_with_config("block", |c| {
        c["quantization_config"]["weight_block_size"] = serde_json::json!([64, 64]);
    });
    let e = load_error(&dir);
    assert!(
        e.contains("_scale_inv") && e.contains("weight_block_size") && e.contains("expected"),
        "{e}"
    );
}

#[test]
fn unknown_quant_methods_and_bad_block_sizes_are_config_errors() {
    for (tag, q, needle) in [
        (
            "awq",
            serde_json::json!({"quant_method": "awq", "bits": 4}),
            "\"awq\"",
        ),
        (
            "zero",
            serde_json::json!({"quant_method": "fp8", "weight_block_size": [0, 128]}),
            "weight_block_size",
        ),
    ] {
        let dir = copy_with_config(tag, |c| c["quantization_config"] = q.clone());
        let e = load_error(&dir);
        assert!(e.contains(needle) && e.contains("config.json"), "{e}");
    }
}

#[test]
fn a_missing_scale_is_named() {
    let dir = copy_with_config("noscale", |_| {});
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).expect("read");
    let st = SafeTensors::deserialize(&bytes).expect("safetensors");
    let gone = "model.layers.0.self_attn.q_proj.weight_scale_inv";
    let kept: Vec<(String, TensorView<'_>)> = st
        .tensors()
        .into_iter()
        .filter(|(name, _)| name != gone)
        .collect();
    let out = safetensors::serialize(kept, None).expect("serialize");
    std::fs::write(&path, out).expect("write");
    let e = load_error(&dir);
    assert!(e.contains(gone) && e.contains("missing"), "{e}");
}
