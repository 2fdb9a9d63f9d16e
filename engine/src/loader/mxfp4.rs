//! MXFP4 checkpoints (OCP Microscaling FP4, as gpt-oss is released): a weight is stored as
//! E2M1 values two a byte and one E8M0 scale (a power of two, `2^(byte − 127)`) a block of 32
//! consecutive values of a row. `config.json` says `quantization_config.quant_method = "mxfp4"`;
//! only the routed experts are quantized (`modules_to_not_convert` lists the rest, which stay
//! bf16), under two names a projection:
//!
//! - `X_blocks`: U8 `[E, rows, cols / 32, 16]`, element `2i` of a block the low nibble of byte
//!   `i` and `2i + 1` the high one, a nibble `sign << 3 | code` indexing [`E2M1`] (the same
//!   table as NVFP4's, `nvfp4.rs`);
//! - `X_scales`: U8 `[E, rows, cols / 32]`, the E8M0 exponents.
//!
//! The value is `e2m1 · 2^(scale − 127)`, exactly what transformers'
//! `integrations/mxfp4.py::convert_moe_packed_tensors` computes (`ldexp` of the table value);
//! the product of a power of two and an E2M1 value is exact in f32, so the CPU's dequantized
//! weights are bit for bit transformers'. For gpt-oss, `rows × cols` is `[2·I, H]` for
//! `gate_up_proj` (gate and up rows interleaved) and `[H, I]` for `down_proj`: the
//! checkpoint's matrices are already in the out × in layout of a linear layer
//! (`convert_moe_packed_tensors` transposes them into transformers' in × out parameters).
//!
//! The loader hands the packed parts over (`HostData::Mxfp4`, `safetensors_dir/mxfp4.rs`): the
//! CPU reference dequantizes them at upload with [`dequantize`], the CUDA backend keeps expert
//! stacks packed (`backend/cuda/moe_fp4.rs`).

use rayon::prelude::*;
use serde_json::Value;

pub use super::nvfp4::E2M1;
use super::nvfp4::e2m1_to_f32;

/// Values one E8M0 scale covers.
pub const BLOCK: usize = 32;

/// The E8M0 byte OCP reserves for NaN; no released checkpoint has it, and a weight with it is
/// refused rather than turned into infinities.
pub const E8M0_NAN: u8 = 0xff;

/// `quantization_config` of an MXFP4 checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mxfp4Config {
    /// Modules left in bf16, as the config lists them. Informational: the model reads the
    /// experts packed and everything else as stored.
    pub modules_to_not_convert: Vec<String>,
}

impl Mxfp4Config {
    /// `Some` for an MXFP4 `quantization_config` (`quant_method` `"mxfp4"`), `None` for
    /// another method; a malformed MXFP4 one is an error naming the key.
    pub fn from_json(q: &Value) -> Option<Result<Self, String>> {
        if q.get("quant_method").and_then(Value::as_str) != Some("mxfp4") {
            return None;
        }
        let list = match q.get("modules_to_not_convert") {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_str().map(str::to_string).ok_or_else(|| {
                        format!(
                            "quantization_config.modules_to_not_convert must list module \
                             names, found {v}"
                        )
                    })
                })
                .collect(),
            Some(other) => Err(format!(
                "quantization_config.modules_to_not_convert must be a list of module names, \
                 found {other}"
            )),
        };
        Some(list.map(|modules_to_not_convert| Self {
            modules_to_not_convert,
        }))
    }
}

/// The value of one E8M0 scale byte: `2^(byte − 127)` (`None` for the NaN byte).
#[inline]
pub fn e8m0_to_f32(byte: u8) -> Option<f32> {
    (byte != E8M0_NAN).then(|| 2f32.powi(i32::from(byte) - 127))
}

/// Dequantize `rows` rows of `cols` values (`cols` a multiple of [`BLOCK`]): `blocks` holds
/// `rows · cols / 2` bytes, `scales` `rows · cols / 32`. Returns the row-major f32 values, or
/// the index of the first scale that is the NaN byte.
pub fn dequantize(blocks: &[u8], scales: &[u8], cols: usize) -> Result<Vec<f32>, usize> {
    if let Some(bad) = scales.iter().position(|&s| s == E8M0_NAN) {
        return Err(bad);
    }
    let per_row = cols / BLOCK;
    let rows = scales.len() / per_row.max(1);
    let mut out = vec![0f32; rows * cols];
    out.par_chunks_mut(BLOCK)
        .zip(blocks.par_chunks(BLOCK / 2))
        .zip(scales.par_iter())
        .for_each(|((o, b), &s)| {
            let scale = e8m0_to_f32(s).unwrap_or(f32::NAN);
            for (pair, &byte) in o.chunks_exact_mut(2).zip(b) {
                pair[0] = e2m1_to_f32(byte & 0x0f) * scale;
                pair[1] = e2m1_to_f32(byte >> 4) * scale;
            }
        });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_are_powers_of_two_around_127() {
        assert_eq!(e8m0_to_f32(127), Some(1.0));
        assert_eq!(e8m0_to_f32(128), Some(2.0));
        assert_eq!(e8m0_to_f32(120), Some(1.0 / 128.0));
        assert_eq!(e8m0_to_f32(0), Some(2f32.powi(-127)));
        assert_eq!(e8m0_to_f32(E8M0_NAN), None);
    }

    /// One block by hand: low nibble first, the sign bit, the scale applied to all 32.
    #[test]
    fn a_block_decodes_low_nibble_first() {
        let mut blocks = [0u8; 16];
        blocks[0] = 0x9_2; // element 0: code 2 (1.0); element 1: sign | code 1 (−0.5)
        blocks[15] = 0x7_f; // element 30: −6.0; element 31: 6.0
        let v = dequantize(&blocks, &[129], BLOCK).expect("no NaN scale");
        assert_eq!(v.len(), BLOCK);
        assert_eq!((v[0], v[1]), (4.0, -2.0));
        assert_eq!((v[30], v[31]), (-24.0, 24.0));
        assert!(v[2..30].iter().all(|&x| x == 0.0));
    }

    #[test]
    fn the_nan_scale_is_reported_by_index() {
        let blocks = [0u8; 32];
        assert_eq!(dequantize(&blocks, &[127, E8M0_NAN], BLOCK), Err(1));
    }

    #[test]
    fn config_is_recognised_by_its_method() {
        let q: Value = serde_json::from_str(
            r#"{"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]}"#,
        )
        .expect("json");
        let c = Mxfp4Config::from_json(&q).expect("mxfp4").expect("valid");
        assert_eq!(c.modules_to_not_convert, ["model.layers.*.self_attn"]);
        let fp8: Value = serde_json::from_str(r#"{"quant_method": "fp8"}"#).expect("json");
        assert!(Mxfp4Config::from_json(&fp8).is_none());
        let bad: Value = serde_json::from_str(
            r#"{"quant_method": "mxfp4", "modules_to_not_convert": "lm_head"}"#,
        )
        .expect("json");
        let e = Mxfp4Config::from_json(&bad)
            .expect("mxfp4")
            .expect_err("bad");
        assert!(e.contains("modules_to_not_convert"), "{e}");
    }
}
