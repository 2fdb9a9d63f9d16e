//! Reading one MXFP4 weight (`loader/mxfp4.rs` describes the layout): its `_blocks` and
//! `_scales`, each checked against the shape the model expects (and the scales for E8M0's NaN
//! byte), handed over packed ([`HostData::Mxfp4`]).

use std::borrow::Cow;

use safetensors::Dtype;

use super::SafetensorsWeights;
use crate::loader::mxfp4::{self, BLOCK};
use crate::loader::{HostData, HostTensor, LoadError};

impl SafetensorsWeights {
    /// The weight `name` (`…experts.gate_up_proj`) with logical `shape` `[.., rows, cols]`,
    /// from `name_blocks` (U8 `[.., rows, cols / 32, 16]`) and `name_scales` (U8
    /// `[.., rows, cols / 32]`), packed: `_blocks`' bytes are the rows' packed pairs in
    /// order (a block's 16 bytes its 32 values), `_scales`' a scale per 32 values of a row.
    pub fn get_mxfp4(&self, name: &str, shape: &[usize]) -> Result<HostTensor<'_>, LoadError> {
        let err = |message: String| LoadError::Mxfp4 {
            name: name.to_string(),
            message,
        };
        let cols = shape.last().copied().unwrap_or(0);
        if shape.len() < 2 || cols == 0 || !cols.is_multiple_of(BLOCK) {
            return Err(err(format!(
                "the model expects shape {shape:?}, whose rows are not a positive multiple of the \
                 {BLOCK} values an MXFP4 scale covers"
            )));
        }
        let lead = &shape[..shape.len() - 1];
        let scales_shape = [lead, &[cols / BLOCK]].concat();
        let blocks_shape = [lead, &[cols / BLOCK, BLOCK / 2]].concat();
        let lookup = |tensor: String, want: &[usize], what: &str| {
            let e = self.tensors.get(&tensor).ok_or_else(|| {
                err(format!(
                    "its {what} {tensor} (U8 {want:?}) is missing from the checkpoint (an MXFP4 \
                     checkpoint stores each expert projection as _blocks and _scales; if this \
                     one's experts are bf16, remove quantization_config from config.json)"
                ))
            })?;
            if e.dtype != Dtype::U8 {
                return Err(err(format!(
                    "its {what} {tensor} has dtype {:?}, expected U8",
                    e.dtype
                )));
            }
            if e.shape != want {
                return Err(err(format!(
                    "its {what} {tensor} has shape {:?}, expected {want:?} (the weight is \
                     {shape:?}: is config.json's hidden_size or intermediate_size right?)",
                    e.shape
                )));
            }
            Ok(self.bytes(e))
        };
        let blocks = lookup(format!("{name}_blocks"), &blocks_shape, "packed values")?;
        let scales = lookup(format!("{name}_scales"), &scales_shape, "E8M0 scales")?;
        if let Some(at) = scales.iter().position(|&b| b == mxfp4::E8M0_NAN) {
            return Err(err(format!(
                "scale {at} of {name}_scales is 0xFF, E8M0's NaN: the checkpoint is corrupt \
                 (download it again)"
            )));
        }
        Ok(HostTensor {
            shape: shape.to_vec(),
            data: HostData::Mxfp4 {
                packed: Cow::Borrowed(blocks),
                scales: Cow::Borrowed(scales),
            },
        })
    }
}
