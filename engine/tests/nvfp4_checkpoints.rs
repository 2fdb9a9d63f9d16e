//! NVFP4 beyond the reference fixtures (`qwen3_reference.rs` and `qwen3_5_reference.rs` check
//! that the NVFP4 fixtures compute what transformers computes): `--requantize` reproduces
//! ModelOpt's quantizer bit for bit and serves what transformers computes on ModelOpt's
//! re-quantized weights; what goes wrong in a checkpoint is named with the tensor and the fix.

use std::path::PathBuf;

use metrale_engine::backend::CpuBackend;
use metrale_engine::loader::nvfp4::quantize::quantize_matrix;
use metrale_engine::loader::{LoadFormat, ModelDir, Requantize, Weights};
use metrale_engine::models::qwen3::Qwen3;
use metrale_engine::score::score;
use safetensors::SafeTensors;
use safetensors::tensor::TensorView;

mod reference_support;

use reference_support::{fixtures, load_error, model_dir, reference};

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// `tests/fixtures/nvfp4-requantize.safetensors`: matrices (bf16, and f32 dequantized from
/// FP8) and what ModelOpt's `NVFP4QTensor.quantize` made of them.
#[test]
fn requantization_matches_modelopt_bit_for_bit() {
    let bytes = std::fs::read(fixtures().join("nvfp4-requantize.safetensors")).expect("fixture");
    let st = SafeTensors::deserialize(&bytes).expect("safetensors");
    for case in ["bf16", "fp8"] {
        let input = st.tensor(&format!("{case}.input")).expect("input");
        let values: Vec<f32> = match input.dtype() {
            safetensors::Dtype::BF16 => input
                .data()
                .chunks_exact(2)
                .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            _ => f32s(input.data()),
        };
        let q = quantize_matrix(&values).expect("finite");
        let want = |k: &str| st.tensor(&format!("{case}.{k}")).expect(k).data().to_vec();
        assert_eq!(q.scale_2, f32s(&want("scale_2"))[0], "{case}: scale_2");
        assert_eq!(q.scales, want("scale"), "{case}: block scales");
        let packed = want("packed");
        let differ = q.packed.iter().zip(&packed).filter(|(a, b)| a != b).count();
        assert_eq!(
            differ,
            0,
            "{case}: {differ} of {} packed bytes differ",
            packed.len()
        );
    }
}

/// `met serve --requantize experts=nvfp4` on the FP8 fixture: every position within 1e-3 of
/// transformers on the same experts re-quantized by ModelOpt.
#[test]
fn fp8_experts_requantized_to_nvfp4_match_transformers() {
    let dir = ModelDir::open(&model_dir("qwen3-moe-fp8")).expect("fixture");
    let cfg = dir.config().expect("config");
    let plan = Requantize::parse(["experts=nvfp4"]).expect("plan");
    let weights = Weights::open(&dir.root, LoadFormat::Auto)
        .expect("weights")
        .with_requantize(plan);
    let model = Qwen3::load(&CpuBackend::default(), &cfg, &weights).expect("load");
    let reference = reference("qwen3-moe-fp8-nvfp4-experts");
    let plain = reference_support::reference("qwen3-moe-fp8");
    let mut max_diff = 0f32;
    let mut moved = 0f32;
    for (seq, fp8) in reference.sequences.iter().zip(&plain.sequences) {
        let got = score(&CpuBackend::default(), &model, &seq.tokens, 5, 7).expect("score");
        for (p, (want, before)) in seq
            .next_token_logprobs
            .iter()
            .zip(&fp8.next_token_logprobs)
            .enumerate()
        {
            let lp = got[p].logprob.expect("has next");
            max_diff = max_diff.max((lp - want).abs());
            moved = moved.max((want - before).abs());
            assert!(
                (lp - want).abs() <= 1e-3,
                "pos {p}: got {lp}, transformers {want}"
            );
        }
    }
    eprintln!("requantized experts: max diff {max_diff:.2e}; NVFP4 moved log-probs by {moved:.2e}");
    assert!(
        moved > 1e-2,
        "the re-quantization must change something measurable"
    );
}

/// A copy of an NVFP4 fixture with `edit_config` applied to its config.json and
/// `keep(name)` choosing the tensors that stay.
fn copy_fixture(
    name: &str,
    tag: &str,
    edit_config: impl Fn(&mut serde_json::Value),
    keep: impl Fn(&str) -> bool,
) -> PathBuf {
    let src = model_dir(name);
    let dir = std::env::temp_dir().join(format!("metrale-nvfp4-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    std::fs::copy(src.join("tokenizer.json"), dir.join("tokenizer.json")).expect("copy");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).expect("cfg"))
            .expect("json");
    edit_config(&mut cfg);
    std::fs::write(dir.join("config.json"), cfg.to_string()).expect("write");
    let bytes = std::fs::read(src.join("model.safetensors")).expect("read");
    let st = SafeTensors::deserialize(&bytes).expect("safetensors");
    let kept: Vec<(String, TensorView<'_>)> =
        st.tensors().into_iter().filter(|(n, _)| keep(n)).collect();
    std::fs::write(
        dir.join("model.safetensors"),
        safetensors::serialize(kept, None).expect("serialize"),
    )
    .expect("write");
    dir
}

#[test]
fn packed_tensors_without_an_nvfp4_config_are_refused_by_name() {
    let dir = copy_fixture(
        "qwen3-nvfp4",
        "noquant",
        |c| {
            c.as_object_mut()
                .expect("object")
                .remove("quantization_config");
        },
        |_| true,
    );
    let e = load_error(&dir);
    assert!(
        e.contains("U8") && e.contains("quantization_config") && e.contains("_proj.weight"),
        "{e}"
    );
}

#[test]
fn a_missing_scale_or_global_scale_is_named_in_both_formats() {
    for (fixture, gone) in [
        (
            "qwen3-nvfp4",
            "model.layers.0.self_attn.q_proj.weight_scale",
        ),
        (
            "qwen3-nvfp4",
            "model.layers.0.self_attn.o_proj.weight_scale_2",
        ),
        (
            "qwen3-moe-nvfp4-ct",
            "model.layers.0.mlp.experts.3.down_proj.weight_global_scale",
        ),
    ] {
        let dir = copy_fixture(fixture, "noscale", |_| {}, |n| n != gone);
        let e = load_error(&dir);
        assert!(e.contains(gone) && e.contains("missing"), "{e}");
    }
}

#[test]
fn unsupported_nvfp4_like_configs_are_config_errors_that_say_what_works() {
    for (tag, q, needle) in [
        (
            "fp8algo",
            serde_json::json!({"quant_method": "modelopt", "quant_algo": "FP8"}),
            "\"FP8\"",
        ),
        (
            "mxfp4",
            serde_json::json!({"quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized",
                "config_groups": {"g": {"weights": {"num_bits": 4, "type": "float", "group_size": 32}}}}),
            "nvfp4-pack-quantized",
        ),
        (
            "gptq",
            serde_json::json!({"quant_method": "gptq", "bits": 4}),
            "modelopt",
        ),
    ] {
        let dir = copy_fixture(
            "qwen3-nvfp4",
            tag,
            |c| c["quantization_config"] = q.clone(),
            |_| true,
        );
        let e = load_error(&dir);
        assert!(
            e.contains(needle) && e.contains("config.json"),
            "{tag}: {e}"
        );
    }
}

#[test]
fn requantizing_experts_of_a_dense_model_is_refused_before_loading() {
    use metrale_engine::models::registry::{self, LoadOptions, WithModel};
    struct Never;
    impl<B: metrale_engine::backend::HybridOps> WithModel<B> for Never {
        type Output = ();
        fn run<M: metrale_engine::models::Model<B> + 'static>(self, _: B, _: M) {
            panic!("nothing should load");
        }
    }
    let dir = ModelDir::open(&model_dir("qwen3-gqa-tied")).expect("fixture");
    let options = LoadOptions {
        requantize: Requantize::parse(["experts=nvfp4"]).expect("plan"),
        ..Default::default()
    };
    let e = registry::load(CpuBackend::default(), &dir, options, &mut |_| {}, Never)
        .expect_err("no experts");
    let e = format!("{e:#}");
    assert!(
        e.contains("--requantize experts=nvfp4") && e.contains("no routed experts"),
        "{e}"
    );
}

/// The tied head of a dense fixture re-quantized to NVFP4 gets its own tensor: the logits
/// move, the embedding does not (the first position's log-probs of a one-token prompt depend on
/// the embedding row and the head).
#[test]
fn a_tied_head_requantized_to_nvfp4_is_its_own_tensor() {
    let dir = ModelDir::open(&model_dir("qwen3-nvfp4")).expect("fixture");
    let cfg = dir.config().expect("config");
    assert!(cfg.tie_word_embeddings);
    let load = |plan: &str| {
        let weights = Weights::open(&dir.root, LoadFormat::Auto)
            .expect("weights")
            .with_requantize(Requantize::parse([plan]).expect("plan"));
        Qwen3::load(&CpuBackend::default(), &cfg, &weights).expect("load")
    };
    let tokens = [9u32, 8, 7];
    let plain = score(&CpuBackend::default(), &load(""), &tokens, 5, 8).expect("score");
    let head = score(
        &CpuBackend::default(),
        &load("lm_head=nvfp4"),
        &tokens,
        5,
        8,
    )
    .expect("score");
    let diff = plain
        .iter()
        .zip(&head)
        .map(|(a, b)| (a.top[0].1 - b.top[0].1).abs())
        .fold(0f32, f32::max);
    assert!(diff > 1e-4 && diff < 0.5, "{diff}");
}

/// `--load-format dummy` with an NVFP4 config draws NVFP4 exactly where the producer quantized
/// (the config's ignore list matched as ModelOpt and compressed-tensors match it): for every
/// matrix of the three NVFP4 fixtures (ModelOpt with a whole layer and the routers ignored,
/// compressed-tensors with a `re:` pattern), the dummy tensor is NVFP4 if and only if the
/// checkpoint stores it packed; then the dummy models run on the CPU to finite log-probs.
#[test]
fn dummy_weights_are_nvfp4_where_the_checkpoint_is() {
    use metrale_engine::loader::TensorKind;
    use metrale_engine::models::qwen3_5::{Qwen3_5, Qwen3_5Config};
    for (fixture, packed_suffix) in [
        ("qwen3_5-hybrid-dense-nvfp4", ""),
        ("qwen3_5-hybrid-moe-nvfp4", ""),
        ("qwen3-moe-nvfp4-ct", "_packed"),
    ] {
        let dir = model_dir(fixture);
        let bytes = std::fs::read(dir.join("model.safetensors")).expect("read");
        let st = SafeTensors::deserialize(&bytes).expect("safetensors");
        let dummy = Weights::open(&dir, LoadFormat::Dummy).expect("dummy weights");
        let (mut packed, mut plain) = (0, 0);
        for (name, view) in st.tensors() {
            let s = view.shape();
            let (weight, shape, stored_packed) = match view.dtype() {
                safetensors::Dtype::U8 => (
                    name.strip_suffix(packed_suffix)
                        .expect("packed name")
                        .to_string(),
                    vec![s[0], 2 * s[1]],
                    true,
                ),
                safetensors::Dtype::BF16 if s.len() == 2 && name.ends_with(".weight") => {
                    (name.clone(), s.to_vec(), false)
                }
                _ => continue,
            };
            let t = dummy
                .get(&weight, &shape, TensorKind::Matrix)
                .expect("dummy tensor");
            assert_eq!(
                t.is_nvfp4(),
                stored_packed,
                "{fixture}: {weight} (stored {})",
                if stored_packed { "packed" } else { "bf16" }
            );
            *(if stored_packed {
                &mut packed
            } else {
                &mut plain
            }) += 1;
        }
        assert!(
            packed > 0 && plain > 0,
            "{fixture}: {packed} packed, {plain} plain"
        );
        let tokens = [5u32, 17, 3, 250, 9, 1000, 2];
        let scores = if fixture.starts_with("qwen3_5") {
            let cfg = Qwen3_5Config::from_file(&dir.join("config.json")).expect("config");
            let model = Qwen3_5::load(&cfg, &dummy).expect("load");
            score(&CpuBackend::default(), &model, &tokens, 5, 4)
        } else {
            let cfg = ModelDir::open(&dir).expect("dir").config().expect("config");
            let model = Qwen3::load(&CpuBackend::default(), &cfg, &dummy).expect("load");
            score(&CpuBackend::default(), &model, &tokens, 5, 4)
        }
        .expect("score");
        assert!(
            scores
                .iter()
                .filter_map(|p| p.logprob)
                .all(|lp| lp.is_finite() && lp <= 0.0),
            "{fixture}: dummy NVFP4 log-probs must be finite"
        );
    }
}
