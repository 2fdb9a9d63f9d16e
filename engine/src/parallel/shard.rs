//! A rank's slice of a weight at load: rows (column-parallel layers: q|k|v, gate|up, the LM
//! head) or columns (row-parallel: `o_proj`, `down`). Raw weights stay in their dtype, and rows
//! of FP8 and NVFP4 weights (stored or dummy) stay FP8 and NVFP4 (each row carries its own
//! scales); columns of those, and other dummies, become f32 values, which the CPU reference
//! computes in anyway.

use std::borrow::Cow;
use std::ops::Range;

use super::Shard;
use crate::loader::{HostData, HostTensor};

/// `t` itself for a group of one, else rows `r` of it.
pub fn rows_of<'a>(sh: Shard, t: HostTensor<'a>, r: Range<usize>) -> HostTensor<'a> {
    if sh.world == 1 { t } else { rows(&t, r) }
}

/// `t` itself for a group of one, else columns `c` of it.
pub fn cols_of<'a>(sh: Shard, t: HostTensor<'a>, c: Range<usize>) -> HostTensor<'a> {
    if sh.world == 1 { t } else { cols(&t, c) }
}

/// Rows `ranges` of `t`, in order (a vector's rows are its elements); `t` itself for a
/// group of one.
pub fn pick_rows<'a>(sh: Shard, t: HostTensor<'a>, ranges: &[Range<usize>]) -> HostTensor<'a> {
    if sh.world == 1 {
        return t;
    }
    let t = match t.shape[..] {
        [n] => t.reshaped(vec![n, 1]),
        _ => t.drawn(),
    };
    let parts: Vec<HostTensor<'_>> = ranges.iter().map(|r| rows(&t, r.clone())).collect();
    HostTensor::concat_rows(&parts)
}

/// Elements `ranges` of a vector `t` (a bias or a norm's weight, cut as its layer's rows), in
/// order, still a vector; `t` itself for a group of one.
pub fn pick_elems<'a>(sh: Shard, t: HostTensor<'a>, ranges: &[Range<usize>]) -> HostTensor<'a> {
    if sh.world == 1 {
        return t;
    }
    let n = ranges.iter().map(ExactSizeIterator::len).sum();
    pick_rows(sh, t, ranges).reshaped(vec![n])
}

/// The LM head a rank of several keeps: rows `vocab` of `head` (or of `embed` when the head is
/// `tied` to it), read by `get`; `None` for a group of one, whose head is the family's own
/// choice (a tied head may be the embedding itself).
pub fn head_rows<'a>(
    (sh, vocab): (Shard, Range<usize>),
    tied: bool,
    (embed, head): (&str, &str),
    get: impl Fn(&str) -> Result<HostTensor<'a>, crate::loader::LoadError>,
) -> Result<Option<HostTensor<'a>>, crate::loader::LoadError> {
    if sh.world == 1 {
        return Ok(None);
    }
    let t = get(if tied { embed } else { head })?;
    Ok(Some(rows(&t, vocab)))
}

/// Stacked experts' `gate_up` `[E, 2·I, H]` (each expert's gate rows, then its up rows): each
/// expert's gate and up rows in `width` (`[E, 2·w, H]`); `t` itself for a group of one.
pub fn experts_gate_up<'a>(sh: Shard, t: HostTensor<'a>, width: Range<usize>) -> HostTensor<'a> {
    if sh.world == 1 {
        return t;
    }
    let (e, i2, h) = (t.shape[0], t.shape[1], t.cols());
    let i = i2 / 2;
    let keep = |row: usize| width.contains(&(row % i2 % i));
    slice(&t, |row, _| keep(row), vec![e, 2 * width.len(), h])
}

/// Stacked experts' `up` `[E, I, H]` (not gated: Nemotron-H's): each expert's rows `width`
/// (`[E, w, H]`); `t` itself for a group of one.
pub fn experts_up<'a>(sh: Shard, t: HostTensor<'a>, width: Range<usize>) -> HostTensor<'a> {
    if sh.world == 1 {
        return t;
    }
    let (e, i, h) = (t.shape[0], t.shape[1], t.cols());
    slice(
        &t,
        |row, _| width.contains(&(row % i)),
        vec![e, width.len(), h],
    )
}

/// Stacked experts `[E, R, C]` (gate|up or down): experts `range` whole (`[e, R, C]`), a
/// rank's slice under expert parallelism.
pub fn experts<'a>(t: HostTensor<'a>, range: Range<usize>) -> HostTensor<'a> {
    if range.start == 0 && range.end == t.shape[0] {
        return t;
    }
    let (r, c) = (t.shape[1], t.cols());
    slice(
        &t,
        |row, _| range.contains(&(row / r)),
        vec![range.len(), r, c],
    )
}

/// Stacked experts' `down` `[E, H, I]`: each expert's columns `width` (`[E, H, w]`); `t`
/// itself for a group of one.
pub fn experts_down<'a>(sh: Shard, t: HostTensor<'a>, width: Range<usize>) -> HostTensor<'a> {
    if sh.world == 1 {
        return t;
    }
    let (e, h) = (t.shape[0], t.shape[1]);
    slice(&t, |_, col| width.contains(&col), vec![e, h, width.len()])
}

/// Rows `rows` of a `[R, C]` weight. Row-local formats keep their format (FP8 and NVFP4 carry
/// their scales a row; a dummy of either is [`HostTensor::drawn`] first: callers cutting many
/// ranges draw it once themselves); anything else becomes f32 as [`slice`] cuts it.
pub fn rows(t: &HostTensor<'_>, rows: Range<usize>) -> HostTensor<'static> {
    if matches!(
        t.data,
        HostData::RandomNvfp4 { .. } | HostData::RandomFp8 { .. }
    ) {
        let real = t.clone().drawn();
        if !matches!(real.data, HostData::RandomNvfp4 { .. }) {
            return self::rows(&real, rows);
        }
    }
    let cols = t.cols();
    let shape = vec![rows.len(), cols];
    let cut =
        |bytes: &[u8], per_row: usize| bytes[rows.start * per_row..rows.end * per_row].to_vec();
    let data = match &t.data {
        HostData::Fp8 {
            bytes,
            scales,
            col_block,
        } => {
            let per = cols.div_ceil(*col_block);
            HostData::Fp8 {
                bytes: Cow::Owned(cut(bytes, cols)),
                scales: scales[rows.start * per..rows.end * per].to_vec(),
                col_block: *col_block,
            }
        }
        HostData::Nvfp4 {
            packed,
            scales,
            globals,
            rule,
        } if cols.is_multiple_of(16) => HostData::Nvfp4 {
            packed: Cow::Owned(cut(packed, cols / 2)),
            scales: Cow::Owned(cut(scales, cols / 16)),
            globals: globals[rows.clone()].to_vec(),
            rule: *rule,
        },
        _ => return slice(t, |row, _| rows.contains(&row), shape),
    };
    HostTensor { shape, data }
}

/// Columns `cols` of a `[R, C]` weight.
pub fn cols(t: &HostTensor<'_>, cols: Range<usize>) -> HostTensor<'static> {
    let r = t.shape[0];
    slice(t, |_, col| cols.contains(&col), vec![r, cols.len()])
}

/// The elements of `t` (a matrix) that `keep(row, col)` keeps, in order, as `shape`.
fn slice(
    t: &HostTensor<'_>,
    keep: impl Fn(usize, usize) -> bool,
    shape: Vec<usize>,
) -> HostTensor<'static> {
    let cols = t.cols();
    let kept = |i: usize| keep(i / cols, i % cols);
    let data = match &t.data {
        HostData::Raw { dtype, bytes } => {
            let size = dtype.size();
            let bytes: Vec<u8> = bytes
                .chunks_exact(size)
                .enumerate()
                .filter(|(i, _)| kept(*i))
                .flat_map(|(_, b)| b.iter().copied())
                .collect();
            HostData::Raw {
                dtype: *dtype,
                bytes: Cow::Owned(bytes),
            }
        }
        _ => {
            let bytes: Vec<u8> = t
                .to_f32()
                .into_iter()
                .enumerate()
                .filter(|(i, _)| kept(*i))
                .flat_map(|(_, v)| v.to_le_bytes())
                .collect();
            HostData::Raw {
                dtype: crate::loader::DType::F32,
                bytes: Cow::Owned(bytes),
            }
        }
    };
    HostTensor { shape, data }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loader::DType;
    use crate::loader::nvfp4::GlobalRule;

    #[test]
    fn rows_and_columns_are_cut_in_order() {
        let values: Vec<f32> = (0..12).map(|v| v as f32).collect();
        let t = HostTensor {
            shape: vec![3, 4],
            data: HostData::Raw {
                dtype: DType::F32,
                bytes: Cow::Owned(values.iter().flat_map(|v| v.to_le_bytes()).collect()),
            },
        };
        let r = rows(&t, 1..3);
        assert_eq!(r.shape, [2, 4]);
        assert_eq!(r.to_f32(), [4., 5., 6., 7., 8., 9., 10., 11.]);
        let c = cols(&t, 2..4);
        assert_eq!(c.shape, [3, 2]);
        assert_eq!(c.to_f32(), [2., 3., 6., 7., 10., 11.]);
        // A dummy becomes its f32 values, cut the same way.
        let d = HostTensor {
            shape: vec![3, 4],
            data: HostData::Constant(1.5),
        };
        assert_eq!(cols(&d, 0..1).to_f32(), [1.5; 3]);
    }

    /// Rows of FP8 and NVFP4 weights, stored or dummy, stay in their format and keep their
    /// values (Qwen3.5's q|gate split of `q_proj` and every column-parallel shard rely on it).
    #[test]
    fn rows_keep_fp8_and_nvfp4_with_their_values() {
        let (r, c) = (5usize, 64usize);
        let packed: Vec<u8> = (0..r * c / 2).map(|i| (i * 37 + 11) as u8).collect();
        let scales: Vec<u8> = (0..r * c / 16).map(|i| 0x30 + (i % 9) as u8).collect();
        let stored = [
            HostData::Nvfp4 {
                packed: Cow::Owned(packed),
                scales: Cow::Owned(scales),
                globals: (0..r).map(|i| 1e-3 * (i + 1) as f32).collect(),
                rule: GlobalRule::Multiply,
            },
            HostData::RandomNvfp4 { seed: 7, std: 0.02 },
            HostData::Fp8 {
                bytes: Cow::Owned((0..r * c).map(|i| (i % 0x7e) as u8).collect()),
                scales: (0..r).map(|i| 0.5 + i as f32).collect(),
                col_block: 128,
            },
            HostData::RandomFp8 { seed: 9, std: 0.02 },
        ];
        for data in stored {
            let t = HostTensor {
                shape: vec![r, c],
                data,
            };
            let all = t.to_f32();
            let cut = rows(&t, 1..4);
            assert_eq!(cut.shape, [3, c]);
            assert!(
                matches!(cut.data, HostData::Nvfp4 { .. } | HostData::Fp8 { .. }),
                "{:?} became {:?}",
                t.data,
                cut.data
            );
            assert_eq!(cut.to_f32(), all[c..4 * c]);
        }
    }
}
