use serde_json::json;

use super::*;

#[test]
fn both_producers_configs_are_read_and_others_are_refused_by_name() {
    let modelopt = json!({"quant_method": "modelopt", "quant_algo": "NVFP4",
        "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "float", "group_size": 16},
                                      "input_activations": {"num_bits": 4, "type": "float"}}},
        "ignore": ["lm_head", "model.layers.6*"]});
    let c = Nvfp4Config::from_json(&modelopt)
        .expect("nvfp4")
        .expect("valid");
    assert_eq!(c.format, Nvfp4Format::ModelOpt);
    assert_eq!(c.ignore, vec!["lm_head", "model.layers.6*"]);
    let old = json!({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
        "exclude_modules": ["lm_head"]});
    assert_eq!(
        Nvfp4Config::from_json(&old)
            .expect("nvfp4")
            .expect("valid")
            .ignore,
        vec!["lm_head"]
    );
    let ct = json!({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"],
            "weights": {"num_bits": 4, "type": "float", "group_size": 16, "strategy": "tensor_group"}}},
        "ignore": ["lm_head", "re:.*mlp.gate$"]});
    let c = Nvfp4Config::from_json(&ct).expect("nvfp4").expect("valid");
    assert_eq!(c.format, Nvfp4Format::CompressedTensors);
    assert!(Nvfp4Config::from_json(&json!({"quant_method": "fp8"})).is_none());
    for (bad, needle) in [
        (
            json!({"quant_method": "modelopt", "quant_algo": "FP8"}),
            "\"FP8\"",
        ),
        (json!({"quant_method": "modelopt"}), "quant_algo"),
        (
            json!({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 32}),
            "group_size",
        ),
        (
            json!({"quant_method": "compressed-tensors", "format": "pack-quantized",
                   "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int"}}}}),
            "\"pack-quantized\"",
        ),
        (
            json!({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
                   "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}}}),
            "num_bits 4",
        ),
        (
            json!({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
                   "config_groups": {"g": {"weights": {"num_bits": 4, "type": "float", "group_size": 32}}}}),
            "MXFP4",
        ),
        (
            json!({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized"}),
            "config_groups",
        ),
        (
            json!({"quant_method": "modelopt", "quant_algo": "NVFP4", "ignore": "lm_head"}),
            "ignore",
        ),
    ] {
        let e = Nvfp4Config::from_json(&bad)
            .expect("nvfp4 method")
            .expect_err("invalid");
        assert!(e.contains(needle), "{bad}: {e}");
    }
}

#[test]
fn nibbles_decode_low_first_with_the_sign_in_bit_three() {
    assert_eq!(e2m1_to_f32(0x7), 6.0);
    assert_eq!(e2m1_to_f32(0xf), -6.0);
    assert_eq!(e2m1_to_f32(0x9), -0.5);
    // One row of 16: bytes 0x21 (1 → 0.5 low, 2 → 1.0 high), then 0xf7 (6, −6), then zeros;
    // block scale e4m3 0x40 = 2.0, global 0.25: ModelOpt multiplies, compressed-tensors divides.
    let mut packed = vec![0u8; 8];
    packed[0] = 0x21;
    packed[1] = 0xf7;
    let got = dequantize_rows(&packed, &[0x40], &[0.25], GlobalRule::Multiply, 16);
    assert_eq!(&got[..4], &[0.25, 0.5, 3.0, -3.0]);
    assert!(got[4..].iter().all(|v| *v == 0.0));
    let got = dequantize_rows(&packed, &[0x40], &[0.25], GlobalRule::Divide, 16);
    assert_eq!(&got[..4], &[4.0, 8.0, 48.0, -48.0]);
}

#[test]
fn every_row_and_block_gets_its_own_scale() {
    // 2 rows × 32 columns, every value code 2 (1.0): scales 1, 2 | 4, 8 and per-row globals.
    let packed = vec![0x22u8; 32];
    let scales = [0x38u8, 0x40, 0x48, 0x50];
    let got = dequantize_rows(&packed, &scales, &[1.0, 0.5], GlobalRule::Multiply, 32);
    assert!(got[..16].iter().all(|v| *v == 1.0));
    assert!(got[16..32].iter().all(|v| *v == 2.0));
    assert!(got[32..48].iter().all(|v| *v == 2.0));
    assert!(got[48..].iter().all(|v| *v == 4.0));
}
