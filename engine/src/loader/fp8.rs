//! Fine-grained FP8 checkpoints (Qwen's `*-FP8` releases, transformers' `FineGrainedFP8Config`):
//! `config.json` carries `quantization_config = {quant_method: "fp8", fmt: "e4m3",
//! weight_block_size: [128, 128], ...}`; each quantized projection `X` is stored as `F8_E4M3`
//! with a companion `X_scale_inv` (`X.weight` → `X.weight_scale_inv`) holding one scale per
//! block of `block[0]` rows × `block[1]` columns (edge blocks may be partial). The real value
//! is `fp8 · scale_inv`. What stays unquantized (norms, embeddings, the LM head, the MoE
//! router) is stored in bf16 and read as usual: a tensor's own dtype says which it is.
//!
//! The CPU reference dequantizes at load, to f32, with exactly that product.

use std::sync::LazyLock;

use serde_json::Value;

/// `quantization_config` of a fine-grained FP8 checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fp8Config {
    /// Rows × columns of the weight covered by one scale.
    pub block: [usize; 2],
}

impl Fp8Config {
    /// Validate a `quantization_config` object; the error names the key and what would work.
    pub fn from_json(q: &Value) -> Result<Self, String> {
        let text = |key: &str| q.get(key).and_then(Value::as_str);
        match text("quant_method") {
            Some("fp8") => {}
            Some(other) => {
                return Err(format!(
                    "quantization_config.quant_method {other:?} is not supported: this engine loads \
                     unquantized checkpoints, fine-grained FP8 ones (quant_method \"fp8\") and \
                     NVFP4 ones (quant_method \"modelopt\" with quant_algo \"NVFP4\", or \
                     \"compressed-tensors\" in format \"nvfp4-pack-quantized\"), and gpt-oss's \
                     MXFP4 experts (quant_method \"mxfp4\")"
                ));
            }
            None => {
                return Err(
                    "quantization_config has no \"quant_method\" (expected \"fp8\")".to_string(),
                );
            }
        }
        // MiniMax-M2 names the same format by its torch dtype.
        if let Some(fmt) = text("fmt")
            && fmt != "e4m3"
            && fmt != "float8_e4m3fn"
        {
            return Err(format!(
                "quantization_config.fmt {fmt:?} is not supported (FP8 weights must be \"e4m3\" \
                 or \"float8_e4m3fn\")"
            ));
        }
        if let Some(scheme) = text("activation_scheme")
            && scheme != "dynamic"
        {
            return Err(format!(
                "quantization_config.activation_scheme {scheme:?} is not supported (expected \
                 \"dynamic\": static activation scales are not read)"
            ));
        }
        if let Some(fmt) = text("scale_fmt")
            && fmt != "float"
            && fmt != "ue8m0"
        {
            return Err(format!(
                "quantization_config.scale_fmt {fmt:?} is not supported (expected \"float\" or \"ue8m0\")"
            ));
        }
        let sizes: Option<Vec<usize>> = match q.get("weight_block_size") {
            Some(Value::Array(a)) => a.iter().map(|v| v.as_u64().map(|n| n as usize)).collect(),
            _ => None,
        };
        match sizes.as_deref() {
            Some(&[rows, cols]) if rows > 0 && cols > 0 => Ok(Self {
                block: [rows, cols],
            }),
            _ => Err(format!(
                "quantization_config.weight_block_size must be two positive integers such as \
                 [128, 128] (per-tensor FP8 is not supported), found {}",
                q.get("weight_block_size").unwrap_or(&Value::Null)
            )),
        }
    }

    /// The scale grid of a weight of `shape` (leading dims, e.g. experts, kept).
    pub fn scale_shape(&self, shape: &[usize]) -> Vec<usize> {
        let mut grid = shape.to_vec();
        let n = grid.len();
        if n >= 2 {
            grid[n - 2] = shape[n - 2].div_ceil(self.block[0]);
            grid[n - 1] = shape[n - 1].div_ceil(self.block[1]);
        }
        grid
    }
}

/// The name of the scale that goes with the FP8 tensor `name`.
pub fn scale_name(name: &str) -> String {
    format!("{name}_scale_inv")
}

/// How a scale tensor is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScaleDtype {
    F32,
    BF16,
    F16,
    /// A power of two, `2^(byte - 127)` (`scale_fmt = "ue8m0"` checkpoints).
    E8M0,
}

/// The f32 values of a weight of `shape` stored as e4m3 `weight` with one scale per block
/// (`scale`, little-endian `scale_dtype`, laid out as [`Fp8Config::scale_shape`]), as
/// little-endian bytes. The caller has checked both lengths.
pub fn dequantize(
    weight: &[u8],
    shape: &[usize],
    scale: &[u8],
    scale_dtype: ScaleDtype,
    config: &Fp8Config,
) -> Vec<u8> {
    let cols = shape.last().copied().unwrap_or(1);
    let scales = row_scales(scale, scale_dtype, shape, config);
    dequantize_rows(weight, cols, &scales, config.block[1])
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect()
}

/// The block scales of a weight of `shape` as f32, one row of `ceil(cols / block[1])` per
/// weight row (`[lead · rows, ceil(cols / block[1])]`): how [`HostData::Fp8`] carries them.
///
/// [`HostData::Fp8`]: super::HostData::Fp8
pub fn row_scales(
    scale: &[u8],
    scale_dtype: ScaleDtype,
    shape: &[usize],
    config: &Fp8Config,
) -> Vec<f32> {
    let scales = scales_f32(scale, scale_dtype);
    let nd = shape.len();
    let (rows, cols) = match nd {
        0 => (1, 1),
        1 => (1, shape[0]),
        _ => (shape[nd - 2], shape[nd - 1]),
    };
    let lead: usize = shape.iter().take(nd.saturating_sub(2)).product();
    let (br, bc) = (config.block[0], config.block[1]);
    let (grid_r, grid_c) = (rows.div_ceil(br), cols.div_ceil(bc));
    let mut out = Vec::with_capacity(lead * rows * grid_c);
    for g in 0..lead * rows {
        let (m, r) = (g / rows, g % rows);
        out.extend_from_slice(&scales[(m * grid_r + r / br) * grid_c..][..grid_c]);
    }
    out
}

/// `e4m3 · scale` for every element of a weight with `cols` columns, given its
/// [`row_scales`] for blocks of `col_block` columns.
pub fn dequantize_rows(weight: &[u8], cols: usize, scales: &[f32], col_block: usize) -> Vec<f32> {
    use rayon::prelude::*;
    let cols = cols.max(1);
    let per_row = cols.div_ceil(col_block.max(1));
    let lut = &*E4M3;
    let mut out = vec![0f32; weight.len()];
    out.par_chunks_mut(cols)
        .zip(weight.par_chunks(cols))
        .enumerate()
        .for_each(|(g, (o, w))| {
            let srow = &scales[g * per_row..][..per_row];
            for (c, (o, &b)) in o.iter_mut().zip(w).enumerate() {
                *o = lut[b as usize] * srow[c / col_block];
            }
        });
    out
}

/// Little-endian scales of `dtype` as f32 (the NVFP4 reader's global scales too).
pub(crate) fn scales_f32(bytes: &[u8], dtype: ScaleDtype) -> Vec<f32> {
    match dtype {
        ScaleDtype::F32 => bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        ScaleDtype::BF16 => bytes
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        ScaleDtype::F16 => bytes
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        ScaleDtype::E8M0 => bytes
            .iter()
            .map(|&b| {
                if b == 0xff {
                    f32::NAN
                } else {
                    (f32::from(b) - 127.0).exp2()
                }
            })
            .collect(),
    }
}

/// Every e4m3 (`float8_e4m3fn`: bias 7, no infinities, `S.1111.111` is NaN) byte as f32.
static E4M3: LazyLock<[f32; 256]> = LazyLock::new(|| std::array::from_fn(|b| e4m3_to_f32(b as u8)));

/// Every e4m3 byte's value, as the loader decodes it (for backends that check their own decode).
pub fn e4m3_table() -> &'static [f32; 256] {
    &E4M3
}

fn e4m3_to_f32(b: u8) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((b >> 3) & 0x0f);
    let mant = f32::from(b & 0x07);
    if exp == 0x0f && b & 0x07 == 0x07 {
        f32::NAN
    } else if exp == 0 {
        sign * mant / 8.0 * 2f32.powi(-6)
    } else {
        sign * (1.0 + mant / 8.0) * 2f32.powi(exp - 7)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e4m3_bytes_decode_like_torch() {
        // Values torch.float8_e4m3fn gives for these bytes.
        for (b, want) in [
            (0x00u8, 0.0f32),
            (0x38, 1.0),
            (0xb8, -1.0),
            (0x7e, 448.0),
            (0xfe, -448.0),
            (0x01, 2f32.powi(-9)),
            (0x08, 2f32.powi(-6)),
            (0x3c, 1.5),
            (0x40, 2.0),
        ] {
            assert_eq!(e4m3_to_f32(b), want, "byte {b:#04x}");
        }
        assert!(e4m3_to_f32(0x7f).is_nan() && e4m3_to_f32(0xff).is_nan());
    }

    #[test]
    fn dequantizes_partial_edge_blocks_of_every_leading_index() {
        // Two "experts" of a 3×5 weight in 2×2 blocks: grids of 2×3, the last row and column
        // of blocks partial.
        let cfg = Fp8Config { block: [2, 2] };
        let shape = [2, 3, 5];
        assert_eq!(cfg.scale_shape(&shape), vec![2, 2, 3]);
        let weight = vec![0x38u8; 30]; // every element 1.0
        let scales: Vec<f32> = (1..=12).map(|s| s as f32).collect();
        let bytes: Vec<u8> = scales.iter().flat_map(|s| s.to_le_bytes()).collect();
        let out = dequantize(&weight, &shape, &bytes, ScaleDtype::F32, &cfg);
        let got: Vec<f32> = out
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        #[rustfmt::skip]
        let want = [
            1., 1., 2., 2., 3.,
            1., 1., 2., 2., 3.,
            4., 4., 5., 5., 6.,
            7., 7., 8., 8., 9.,
            7., 7., 8., 8., 9.,
            10., 10., 11., 11., 12.,
        ];
        assert_eq!(got, want);
        // bf16 and e8m0 scales read the same numbers.
        let bf: Vec<u8> = scales
            .iter()
            .flat_map(|s| half::bf16::from_f32(*s).to_le_bytes())
            .collect();
        assert_eq!(
            dequantize(&weight, &shape, &bf, ScaleDtype::BF16, &cfg),
            out
        );
        assert_eq!(
            scales_f32(&[127, 128, 126], ScaleDtype::E8M0),
            vec![1.0, 2.0, 0.5]
        );
    }

    #[test]
    fn config_errors_name_the_key() {
        let ok = serde_json::json!({"quant_method": "fp8", "fmt": "e4m3",
            "activation_scheme": "dynamic", "weight_block_size": [128, 128]});
        assert_eq!(
            Fp8Config::from_json(&ok),
            Ok(Fp8Config { block: [128, 128] })
        );
        for (bad, needle) in [
            (
                serde_json::json!({"quant_method": "awq", "bits": 4}),
                "\"awq\"",
            ),
            (serde_json::json!({"bits": 4}), "quant_method"),
            (
                serde_json::json!({"quant_method": "fp8", "weight_block_size": [128, 0]}),
                "weight_block_size",
            ),
            (
                serde_json::json!({"quant_method": "fp8"}),
                "weight_block_size",
            ),
            (
                serde_json::json!({"quant_method": "fp8", "fmt": "e5m2", "weight_block_size": [128, 128]}),
                "e5m2",
            ),
            (
                serde_json::json!({"quant_method": "fp8", "activation_scheme": "static", "weight_block_size": [128, 128]}),
                "static",
            ),
        ] {
            let e = Fp8Config::from_json(&bad).expect_err("invalid");
            assert!(e.contains(needle), "{e}");
        }
    }
}
