//! NVFP4 checkpoints (`docs/nvfp4.md`): weights as E2M1 (4-bit float) values, two a byte, one
//! FP8 E4M3 scale a block of 16 consecutive values of a row, and one FP32 global scale a tensor.
//! Two producers write them, with the same bytes and opposite global-scale conventions:
//!
//! - NVIDIA ModelOpt (`quantization_config.quant_method = "modelopt"`, `quant_algo = "NVFP4"`):
//!   `X.weight` (U8 `[rows, cols / 2]`), `X.weight_scale` (F8_E4M3 `[rows, cols / 16]`),
//!   `X.weight_scale_2` (F32, one value) and `X.input_scale` (the activations' scale, which a
//!   weight-only engine does not read). The value is `e2m1 · (scale · scale_2)`
//!   (`NVFP4QTensor.dequantize`).
//! - compressed-tensors (`quant_method = "compressed-tensors"`, format `nvfp4-pack-quantized`):
//!   `X.weight_packed`, `X.weight_scale`, `X.weight_global_scale`. Its global scale is the
//!   reciprocal of ModelOpt's (`448 · 6 / amax`), so the value is `e2m1 · (scale / global)`
//!   (`_dequantize`: `scale = scale / global_scale`).
//!
//! In both, element `2i` of a row is the low nibble of byte `i` and `2i + 1` the high one; a
//! nibble is `sign << 3 | code`, `code` indexing [`E2M1`]. Layers the config leaves out
//! (`ignore` / `exclude_modules`: the LM head, the router, the linear-attention conv, whole
//! layers in some checkpoints) are stored in bf16, and a tensor's own dtype says which it is.
//!
//! The CPU reference dequantizes at upload, to f32, with exactly the producer's products.

use serde_json::Value;

pub mod ignore;
pub mod quantize;

/// Values of a block one E4M3 scale covers, in both formats.
pub const GROUP: usize = 16;

/// The magnitudes of the eight E2M1 codes (`0bEEM`, bias 1).
pub const E2M1: [f32; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];

/// Which producer's layout and global-scale convention a checkpoint follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nvfp4Format {
    /// ModelOpt: `weight`, `weight_scale`, `weight_scale_2`; value `e2m1 · scale · scale_2`.
    ModelOpt,
    /// compressed-tensors: `weight_packed`, `weight_scale`, `weight_global_scale`; value
    /// `e2m1 · scale / global`.
    CompressedTensors,
}

impl Nvfp4Format {
    /// The name of the packed values of the weight the model calls `name` (`X.weight`).
    pub fn packed_name(self, name: &str) -> String {
        match self {
            Self::ModelOpt => name.to_string(),
            Self::CompressedTensors => format!("{name}_packed"),
        }
    }

    /// The per-block E4M3 scales of `name`.
    pub fn scale_name(self, name: &str) -> String {
        format!("{name}_scale")
    }

    /// The global scale of `name`.
    pub fn global_name(self, name: &str) -> String {
        match self {
            Self::ModelOpt => format!("{name}_scale_2"),
            Self::CompressedTensors => format!("{name}_global_scale"),
        }
    }

    /// How the stored global scale enters a block's scale.
    pub fn global_rule(self) -> GlobalRule {
        match self {
            Self::ModelOpt => GlobalRule::Multiply,
            Self::CompressedTensors => GlobalRule::Divide,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::ModelOpt => "ModelOpt NVFP4",
            Self::CompressedTensors => "compressed-tensors nvfp4-pack-quantized",
        }
    }
}

/// How a tensor's stored global scale `g` makes a block's scale from its E4M3 scale `s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GlobalRule {
    /// `s · g` (ModelOpt's `weight_scale_2`).
    Multiply,
    /// `s / g` (compressed-tensors' `weight_global_scale`).
    Divide,
}

impl GlobalRule {
    /// The f32 scale of a block, computed as the producer computes it.
    #[inline]
    pub fn block_scale(self, e4m3_scale: f32, global: f32) -> f32 {
        match self {
            Self::Multiply => e4m3_scale * global,
            Self::Divide => e4m3_scale / global,
        }
    }
}

/// `quantization_config` of an NVFP4 checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nvfp4Config {
    pub format: Nvfp4Format,
    /// Modules left unquantized, as the config lists them (globs for ModelOpt, names or `re:`
    /// patterns for compressed-tensors). A checkpoint's tensors go by their dtype; dummy
    /// weights go by this list ([`ignore::IgnoreList`]).
    pub ignore: Vec<String>,
}

impl Nvfp4Config {
    /// `Some` for an NVFP4 `quantization_config`, `None` for another `quant_method` (the
    /// caller tries the others); an NVFP4 method whose settings are not NVFP4's is an error
    /// that names the key and what would work.
    pub fn from_json(q: &Value) -> Option<Result<Self, String>> {
        match q.get("quant_method").and_then(Value::as_str) {
            Some("modelopt") => Some(modelopt(q)),
            Some("compressed-tensors") => Some(compressed_tensors(q)),
            _ => None,
        }
    }

    pub fn describe(&self) -> &'static str {
        self.format.label()
    }
}

fn ignore_list(q: &Value, keys: &[&str]) -> Result<Vec<String>, String> {
    for key in keys {
        match q.get(*key) {
            None | Some(Value::Null) => continue,
            Some(Value::Array(a)) => {
                return a
                    .iter()
                    .map(|v| {
                        v.as_str().map(str::to_string).ok_or_else(|| {
                            format!("quantization_config.{key} must list module names, found {v}")
                        })
                    })
                    .collect();
            }
            Some(other) => {
                return Err(format!(
                    "quantization_config.{key} must be a list of module names, found {other}"
                ));
            }
        }
    }
    Ok(Vec::new())
}

/// A `weights` group (`config_groups.*.weights`) must be 4-bit floats in groups of 16.
fn check_weight_args(w: &Value, at: &str) -> Result<(), String> {
    let num = |k: &str| w.get(k).and_then(Value::as_u64);
    let text = |k: &str| w.get(k).and_then(Value::as_str);
    if num("num_bits") != Some(4) || text("type") != Some("float") {
        return Err(format!(
            "{at} is {} bits of type {}: only NVFP4 weights (num_bits 4, type \"float\", \
             group_size 16) are supported",
            w.get("num_bits").unwrap_or(&Value::Null),
            w.get("type").unwrap_or(&Value::Null)
        ));
    }
    match num("group_size") {
        None | Some(16) => Ok(()),
        Some(g) => Err(format!(
            "{at}.group_size is {g}: NVFP4 has one scale per 16 values (group_size 32 is MXFP4, \
             which is not supported)"
        )),
    }
}

fn groups(q: &Value) -> impl Iterator<Item = (String, &Value)> {
    q.get("config_groups")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|g| g.iter())
        .map(|(name, group)| (name.clone(), group))
}

fn modelopt(q: &Value) -> Result<Nvfp4Config, String> {
    match q.get("quant_algo").and_then(Value::as_str) {
        Some("NVFP4" | "W4A16_NVFP4") => {}
        Some(other) => {
            return Err(format!(
                "quantization_config.quant_algo {other:?} (ModelOpt) is not supported: of \
                 ModelOpt's formats this engine loads NVFP4 (and fine-grained FP8 checkpoints \
                 with quant_method \"fp8\")"
            ));
        }
        None => {
            return Err(
                "quantization_config (quant_method \"modelopt\") has no \"quant_algo\": expected \
                 \"NVFP4\""
                    .into(),
            );
        }
    }
    if let Some(g) = q.get("group_size").and_then(Value::as_u64)
        && g != GROUP as u64
    {
        return Err(format!(
            "quantization_config.group_size is {g}: NVFP4 has one scale per {GROUP} values"
        ));
    }
    for (name, group) in groups(q) {
        if let Some(w) = group.get("weights") {
            check_weight_args(
                w,
                &format!("quantization_config.config_groups.{name}.weights"),
            )?;
        }
    }
    Ok(Nvfp4Config {
        format: Nvfp4Format::ModelOpt,
        ignore: ignore_list(q, &["ignore", "exclude_modules"])?,
    })
}

fn compressed_tensors(q: &Value) -> Result<Nvfp4Config, String> {
    const PACKED: &str = "nvfp4-pack-quantized";
    let top = q.get("format").and_then(Value::as_str);
    let mut any = false;
    for (name, group) in groups(q) {
        any = true;
        let at = format!("quantization_config.config_groups.{name}");
        let format = group.get("format").and_then(Value::as_str).or(top);
        if format != Some(PACKED) {
            return Err(format!(
                "{at} has format {:?}: of compressed-tensors' formats this engine loads only \
                 {PACKED:?} (NVFP4 weights)",
                format.unwrap_or("(none)")
            ));
        }
        let w = group
            .get("weights")
            .ok_or_else(|| format!("{at} has no \"weights\" arguments"))?;
        check_weight_args(w, &format!("{at}.weights"))?;
    }
    if !any {
        return Err(format!(
            "quantization_config (quant_method \"compressed-tensors\") has no config_groups: \
             expected {PACKED:?} groups of NVFP4 weights"
        ));
    }
    Ok(Nvfp4Config {
        format: Nvfp4Format::CompressedTensors,
        ignore: ignore_list(q, &["ignore"])?,
    })
}

/// The f32 value of a nibble.
#[inline]
pub fn e2m1_to_f32(nibble: u8) -> f32 {
    let v = E2M1[(nibble & 7) as usize];
    if nibble & 8 != 0 { -v } else { v }
}

/// `e2m1 · block scale` for every element of a weight with `cols` columns (a multiple of
/// [`GROUP`]): `packed` two values a byte, `scales` one E4M3 byte a block of a row, `globals`
/// one stored global scale a row (so tensors concatenate by rows), combined by `rule`.
pub fn dequantize_rows(
    packed: &[u8],
    scales: &[u8],
    globals: &[f32],
    rule: GlobalRule,
    cols: usize,
) -> Vec<f32> {
    use rayon::prelude::*;
    let e4m3 = super::fp8::e4m3_table();
    let rows = globals.len();
    let mut out = vec![0f32; rows * cols];
    out.par_chunks_mut(cols.max(1))
        .enumerate()
        .for_each(|(r, row)| {
            let p = &packed[r * cols / 2..][..cols / 2];
            let s = &scales[r * cols / GROUP..][..cols / GROUP];
            for (b, block) in row.chunks_mut(GROUP).enumerate() {
                let scale = rule.block_scale(e4m3[s[b] as usize], globals[r]);
                for (j, pair) in block.chunks_mut(2).enumerate() {
                    let byte = p[b * GROUP / 2 + j];
                    pair[0] = e2m1_to_f32(byte & 0x0f) * scale;
                    pair[1] = e2m1_to_f32(byte >> 4) * scale;
                }
            }
        });
    out
}

#[cfg(test)]
mod tests;
