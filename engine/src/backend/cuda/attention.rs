//! Launchers for the paged KV cache write and attention (`attention.cu`).

use cudarc::driver::{LaunchConfig, PushKernelArg};
use metrale_kernels::Module;

use super::elementwise::{cfg, dim, int, row_threads};
use super::norm::MAX_HEAD_DIM;
use super::tensor::{CudaTensor, DType};
use super::{CudaBackend, CudaBatch, check, shape_err};
use crate::backend::Result;

/// Warps of a `paged_attention` block (ATTN_WARPS in attention.cu).
const ATTN_WARPS: u32 = 4;
/// Split-K: the fewest keys a split takes, and the most splits a row is cut into.
const MIN_KEYS_PER_SPLIT: usize = 256;
const MAX_SPLITS: usize = 64;

/// How many key slices each (row, head) is cut into: enough blocks for about four per
/// multiprocessor when rows × heads alone leave the GPU idle (decode of few sequences over long
/// contexts), else 1 (the plain kernel).
fn attention_splits(blocks: usize, max_len: usize, multiprocessors: usize) -> usize {
    let want = (4 * multiprocessors).div_ceil(blocks.max(1));
    want.min(max_len.div_ceil(MIN_KEYS_PER_SPLIT))
        .clamp(1, MAX_SPLITS)
}

fn kv_dims(cache: &CudaTensor) -> Result<(usize, usize, usize, usize)> {
    match cache.shape[..] {
        [blocks, bs, nkv, hd] if cache.dtype == DType::BF16 => Ok((blocks, bs, nkv, hd)),
        _ => Err(shape_err(
            "kv cache",
            format!(
                "expected a bf16 [blocks, block_size, kv_heads, head_dim], got {:?} {:?}",
                cache.shape, cache.dtype
            ),
        )),
    }
}

impl CudaBackend {
    /// Key slices `paged_attention` cuts each (row, head) into for `rows` rows of `heads`
    /// heads whose longest causal range is `max_len` (1 = the plain kernel).
    pub fn attention_splits(&self, rows: usize, heads: usize, max_len: usize) -> usize {
        attention_splits(rows * heads, max_len, self.info.multiprocessors)
    }

    pub(super) fn write_kv_op(
        &self,
        k_cache: &mut CudaTensor,
        v_cache: &mut CudaTensor,
        qkv: &CudaTensor,
        batch: &CudaBatch,
        num_heads: usize,
    ) -> Result<()> {
        let (blocks, bs, nkv, hd) = kv_dims(k_cache)?;
        let width = (num_heads + 2 * nkv) * hd;
        check(
            "write_kv",
            v_cache.shape == k_cache.shape
                && v_cache.dtype == k_cache.dtype
                && qkv.cols() == width
                && qkv.rows() == batch.num_tokens
                && bs == batch.block_size,
            || {
                format!(
                    "k {:?}, v {:?}, qkv {:?}, block_size {}",
                    k_cache.shape, v_cache.shape, qkv.shape, batch.block_size
                )
            },
        )?;
        if let Some(slot) = batch.max_slot.filter(|&s| s as usize >= blocks * bs) {
            return Err(shape_err(
                "write_kv",
                format!("slot {slot} is outside the cache of {blocks} blocks"),
            ));
        }
        let slot_len = nkv * hd;
        if batch.num_tokens == 0 || slot_len == 0 {
            return Ok(());
        }
        let name = match qkv.dtype {
            DType::F32 => "write_kv_f32",
            DType::BF16 => "write_kv_bf16",
        };
        let f = self.func(Module::Attention, name)?;
        let s = &self.stream;
        let (k, v, q, slots) = (
            k_cache.ptr(s),
            v_cache.ptr(s),
            qkv.ptr(s),
            batch.slot_mapping(s),
        );
        let (nh, nk, d) = (
            int(num_heads, "write_kv")?,
            int(nkv, "write_kv")?,
            int(hd, "write_kv")?,
        );
        let mut a = s.launch_builder(&f);
        a.arg(&k)
            .arg(&v)
            .arg(&q)
            .arg(&slots)
            .arg(&nh)
            .arg(&nk)
            .arg(&d);
        // SAFETY: the caches are bf16 [blocks, bs, nkv, hd] and every slot is below blocks·bs
        // (checked above), so each write stays inside them; qkv is [T, (nh + 2·nkv)·hd].
        let r = unsafe {
            a.launch(cfg(
                (dim(batch.num_tokens, "write_kv")?, 1),
                row_threads(slot_len),
            ))
        };
        self.launched(name, r)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn paged_attention_op(
        &self,
        out: &mut CudaTensor,
        qkv: &CudaTensor,
        k_cache: &CudaTensor,
        v_cache: &CudaTensor,
        batch: &CudaBatch,
        num_heads: usize,
        scale: f32,
    ) -> Result<()> {
        let (blocks, bs, nkv, hd) = kv_dims(k_cache)?;
        let width = (num_heads + 2 * nkv) * hd;
        let t = batch.num_tokens;
        check(
            "paged_attention",
            v_cache.shape == k_cache.shape
                && v_cache.dtype == k_cache.dtype
                && qkv.cols() == width
                && qkv.rows() == t
                && out.rows() == t
                && out.cols() == num_heads * hd
                && bs == batch.block_size
                && nkv > 0
                && num_heads.is_multiple_of(nkv)
                && hd <= MAX_HEAD_DIM,
            || {
                format!(
                    "out {:?}, qkv {:?}, cache {:?}, {num_heads} heads (a multiple of the kv heads), head_dim at most {MAX_HEAD_DIM}",
                    out.shape, qkv.shape, k_cache.shape
                )
            },
        )?;
        if batch.max_block_id.is_some_and(|b| b as usize >= blocks) {
            return Err(shape_err(
                "paged_attention",
                format!("a block table names a block beyond {blocks}"),
            ));
        }
        if let Some(e) = &batch.table_error {
            return Err(shape_err("paged_attention", e.clone()));
        }
        self.set_dtype(out, DType::BF16)?;
        if t == 0 || num_heads == 0 || hd == 0 {
            return Ok(());
        }
        // Kernel variants by head_dim: NPER = head_dim / 32 rounded up to 1, 2, 4 or 8.
        let (plain, split) = match (qkv.dtype, hd.div_ceil(32)) {
            (DType::F32, 1) => ("paged_attention_f32_d32", "paged_attention_split_f32_d32"),
            (DType::F32, 2) => ("paged_attention_f32_d64", "paged_attention_split_f32_d64"),
            (DType::F32, 3..=4) => ("paged_attention_f32_d128", "paged_attention_split_f32_d128"),
            (DType::F32, _) => ("paged_attention_f32_d256", "paged_attention_split_f32_d256"),
            (DType::BF16, 1) => ("paged_attention_bf16_d32", "paged_attention_split_bf16_d32"),
            (DType::BF16, 2) => ("paged_attention_bf16_d64", "paged_attention_split_bf16_d64"),
            (DType::BF16, 3..=4) => (
                "paged_attention_bf16_d128",
                "paged_attention_split_bf16_d128",
            ),
            (DType::BF16, _) => (
                "paged_attention_bf16_d256",
                "paged_attention_split_bf16_d256",
            ),
        };
        let splits = self.attention_splits(t, num_heads, batch.max_len);
        let s = &self.stream;
        let (q, k, v) = (qkv.ptr(s), k_cache.ptr(s), v_cache.ptr(s));
        let (pos, row_seq, tables) = (batch.positions(s), batch.row_seq(s), batch.block_tables(s));
        let (max_blocks, block_size, nh, nk, d) = (
            int(batch.max_blocks_per_seq, "paged_attention")?,
            int(bs, "paged_attention")?,
            int(num_heads, "paged_attention")?,
            int(nkv, "paged_attention")?,
            int(hd, "paged_attention")?,
        );
        let grid = |z: usize| -> Result<LaunchConfig> {
            Ok(LaunchConfig {
                grid_dim: (
                    dim(t, "paged_attention")?,
                    dim(num_heads, "paged_attention")?,
                    dim(z, "paged_attention")?,
                ),
                block_dim: (32 * ATTN_WARPS, 1, 1),
                shared_mem_bytes: 0,
            })
        };
        // Split-K keeps partial states [T, nh, splits, hd + 2] in f32 for the merge.
        let keys_per_split = int(batch.max_len.div_ceil(splits), "paged_attention")?;
        let partial = if splits > 1 {
            Some(self.alloc(&[t * num_heads * splits * (hd + 2)], DType::F32)?)
        } else {
            None
        };
        let name = if splits > 1 { split } else { plain };
        let f = self.func(Module::Attention, name)?;
        let (o, pp) = (out.ptr(s), partial.as_ref().map_or(0, |p| p.ptr(s)));
        let mut a = s.launch_builder(&f);
        a.arg(&o)
            .arg(&pp)
            .arg(&q)
            .arg(&k)
            .arg(&v)
            .arg(&pos)
            .arg(&row_seq)
            .arg(&tables)
            .arg(&max_blocks)
            .arg(&block_size)
            .arg(&nh)
            .arg(&nk)
            .arg(&d)
            .arg(&scale)
            .arg(&keys_per_split);
        // SAFETY: out is [T, nh·hd], qkv [T, (nh + 2·nkv)·hd], the caches bf16
        // [blocks, bs, nkv, hd] with hd no larger than the kernel variant's 32·NPER; each row's
        // reach positions[row] / bs is inside its table and every table entry is below blocks
        // (checked above and in prepare_batch), so every key and value read is in the cache.
        // The split kernel writes instead one state per (row, head, split) of its grid into
        // `partial` (T·nh·splits·(hd + 2) floats), and splits · keys_per_split covers every
        // row's causal range (max_len); the plain kernel never touches the null `partial`.
        let r = unsafe { a.launch(grid(splits)?) };
        self.launched(name, r)?;
        let Some(partial) = partial else {
            return Ok(());
        };
        let name = "attention_merge";
        let f = self.func(Module::Attention, name)?;
        let (pp, sp) = (partial.ptr(s), int(splits, "paged_attention")?);
        let mut a = s.launch_builder(&f);
        a.arg(&o).arg(&pp).arg(&nh).arg(&d).arg(&sp);
        // SAFETY: out is [T, nh·hd] bf16 and partial holds the `splits` states of every
        // (row, head) written above, split 0 of each with key 0 in it.
        let r = unsafe { a.launch(grid(1)?) };
        // `partial` is freed when it drops, after the merge on the same stream.
        self.launched(name, r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_only_when_rows_times_heads_leave_the_gpu_idle() {
        let sms = 132;
        // Prefill: many rows already fill the GPU.
        assert_eq!(attention_splits(1000 * 32, 1000, sms), 1);
        // Decode over a short context: nothing to split.
        assert_eq!(attention_splits(32, 129, sms), 1);
        // One sequence over 2047 keys: 8 slices of at least 256 keys.
        assert_eq!(attention_splits(32, 2047, sms), 8);
        // One sequence over 100k keys: as many as fill the GPU four times over, at most 64.
        assert_eq!(attention_splits(32, 100_000, sms), 17);
        assert_eq!(attention_splits(4, 100_000, sms), 64);
        assert_eq!(attention_splits(8 * 32, 2047, sms), 3);
    }
}
