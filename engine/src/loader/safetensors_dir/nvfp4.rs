//! Reading one NVFP4 weight (`loader/nvfp4.rs` describes both layouts): the packed values, the
//! E4M3 block scales and the global scale, each checked against the shape the model expects,
//! every mismatch an error that names the tensor, what was found and what would fit.

use std::borrow::Cow;

use safetensors::Dtype;

use super::SafetensorsWeights;
use crate::loader::fp8::{ScaleDtype, scales_f32};
use crate::loader::nvfp4::GROUP;
use crate::loader::{HostData, HostTensor, LoadError};

impl SafetensorsWeights {
    /// The weight the model calls `name` with logical `shape` (`[.., rows, cols]`), stored
    /// packed: `[.., rows, cols / 2]` U8 values, `[.., rows, cols / 16]` E4M3 scales and one
    /// global scale (or one per leading index, for stacked experts).
    pub(super) fn get_nvfp4(
        &self,
        name: &str,
        shape: &[usize],
    ) -> Result<HostTensor<'_>, LoadError> {
        let err = |message: String| LoadError::Nvfp4 {
            name: name.to_string(),
            message,
        };
        let config = self.nvfp4.as_ref().ok_or_else(|| {
            err(
                "it is stored as U8 (packed 4-bit values) but config.json has no NVFP4 \
                 quantization_config (quant_method \"modelopt\" with quant_algo \"NVFP4\", or \
                 \"compressed-tensors\" with format \"nvfp4-pack-quantized\"), so it cannot be \
                 read"
                    .into(),
            )
        })?;
        let format = config.format;
        let cols = shape.last().copied().unwrap_or(0);
        if shape.len() < 2 || cols == 0 || !cols.is_multiple_of(GROUP) {
            return Err(err(format!(
                "the model expects shape {shape:?}, whose rows are not a positive multiple of \
                 the {GROUP} values an NVFP4 scale covers"
            )));
        }
        let with_last = |last: usize| {
            let mut s = shape.to_vec();
            if let Some(l) = s.last_mut() {
                *l = last;
            }
            s
        };
        let lookup = |tensor: String, dtype: Dtype, want: Vec<usize>, what: &str| {
            let e = self.tensors.get(&tensor).ok_or_else(|| {
                err(format!(
                    "its {what} {tensor} (shape {want:?}) is missing from the checkpoint ({})",
                    config.describe()
                ))
            })?;
            if e.dtype != dtype {
                return Err(err(format!(
                    "its {what} {tensor} has dtype {:?}, expected {dtype:?} ({})",
                    e.dtype,
                    config.describe()
                )));
            }
            if e.shape != want {
                return Err(err(format!(
                    "its {what} {tensor} has shape {:?}, expected {want:?} (the model's \
                     {shape:?} in NVFP4)",
                    e.shape
                )));
            }
            Ok(e)
        };
        let packed = lookup(
            format.packed_name(name),
            Dtype::U8,
            with_last(cols / 2),
            "packed values",
        )?;
        let scales = lookup(
            format.scale_name(name),
            Dtype::F8_E4M3,
            with_last(cols / GROUP),
            "block scales",
        )?;
        let global_name = format.global_name(name);
        let g = self.tensors.get(&global_name).ok_or_else(|| {
            err(format!(
                "its global scale {global_name} is missing from the checkpoint ({})",
                config.describe()
            ))
        })?;
        let values: Vec<f32> = match g.dtype {
            Dtype::F32 => scales_f32(self.bytes(g), ScaleDtype::F32),
            Dtype::BF16 => scales_f32(self.bytes(g), ScaleDtype::BF16),
            other => {
                return Err(err(format!(
                    "its global scale {global_name} has dtype {other:?}, expected F32"
                )));
            }
        };
        let rows: usize = shape[..shape.len() - 1].iter().product();
        let lead: usize = shape[..shape.len() - 2].iter().product();
        let per = match values.len() {
            1 => rows,
            n if n == lead && lead > 0 => rows / lead,
            n => {
                return Err(err(format!(
                    "its global scale {global_name} has {n} values, expected 1 (or {lead}, one \
                     per leading index of {shape:?})"
                )));
            }
        };
        // ModelOpt writes 0 for an all-zero weight (a product, harmless); compressed-tensors
        // divides by its global, which is never 0 (`generate_gparam` falls back to 1).
        let divides = format.global_rule() == crate::loader::nvfp4::GlobalRule::Divide;
        if let Some(bad) = values
            .iter()
            .find(|v| !v.is_finite() || **v < 0.0 || (divides && **v == 0.0))
        {
            return Err(err(format!(
                "its global scale {global_name} is {bad}, which no NVFP4 weight has"
            )));
        }
        let globals = values
            .iter()
            .flat_map(|&v| std::iter::repeat_n(v, per))
            .collect();
        Ok(HostTensor {
            shape: shape.to_vec(),
            data: HostData::Nvfp4 {
                packed: Cow::Borrowed(self.bytes(packed)),
                scales: Cow::Borrowed(self.bytes(scales)),
                globals,
                rule: format.global_rule(),
            },
        })
    }
}
