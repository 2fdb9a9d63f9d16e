//! Launchers for the paged KV cache write and attention (`attention.cu`).

use cudarc::driver::LaunchConfig;

use super::attention_kernels::{self, AttnTypes};
use super::elementwise::{cfg, dim, int, row_threads};
use super::norm::MAX_HEAD_DIM;
use super::tensor::{CudaTensor, DType};
use super::{CudaBackend, CudaBatch, check, shape_err};
use crate::backend::Result;
use crate::backend::kernels::{self, Kernel};
use crate::tuning::{AttentionTuning, AttnKernelChoice};

/// Warps of a `paged_attention` block (ATTN_WARPS in attention.cu).
const ATTN_WARPS: u32 = 4;
/// Split-K: the most splits a row is cut into (the fewest keys a split takes is tuning).
const MAX_SPLITS: usize = 64;

/// q heads one attention block serves: the largest of 4, 2, 1 that divides the GQA group (the
/// `_g<G>` kernel variants).
fn head_group(num_heads: usize, num_kv_heads: usize) -> usize {
    let group = num_heads / num_kv_heads.max(1);
    [4usize, 2, 1]
        .into_iter()
        .find(|g| group.is_multiple_of(*g))
        .unwrap_or(1)
}

/// Which decode/prefill attention kernel `paged_attention` launches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AttnKernel {
    /// attention_mma.cu: tensor cores, a block a (row, kv head) serving the whole GQA group.
    Mma,
    /// attention.cu: CUDA cores, a block a (row, group of up to 4 q heads).
    Simt,
}

/// The kernel for this shape: the tensor-core one for head_dim 64 or 128 and GQA groups of at
/// most 16 on sm_80 and newer, else attention.cu's. On the H200 at 128 sequences the tensor-core
/// kernel reads the cache at 3.0 (ctx 512) and 3.6 TB/s (ctx 1024) against the CUDA-core
/// kernel's 2.2 and 2.4; at one sequence over 1024 keys 20 µs a layer against 23. The tuning's
/// `attention.kernel` = simt (`METRALE_ATTN_KERNEL=simt`) forces attention.cu's, for comparisons.
fn attn_kernel(
    head_dim: usize,
    num_heads: usize,
    num_kv_heads: usize,
    cc: (i32, i32),
    choice: AttnKernelChoice,
) -> AttnKernel {
    let fits = matches!(head_dim, 64 | 128)
        && num_kv_heads > 0
        && num_heads / num_kv_heads <= 16
        && cc >= metrale_kernels::Module::AttentionMma.min_compute_capability();
    if fits && choice == AttnKernelChoice::Auto {
        AttnKernel::Mma
    } else {
        AttnKernel::Simt
    }
}

/// Blocks one token row takes (before split-K) with this kernel.
fn row_blocks(kernel: AttnKernel, num_heads: usize, num_kv_heads: usize) -> usize {
    match kernel {
        AttnKernel::Mma => num_kv_heads,
        AttnKernel::Simt => num_heads / head_group(num_heads, num_kv_heads),
    }
}

/// How many key slices each (row, head group) is cut into: enough blocks for the tuning's
/// blocks a multiprocessor (4 by default: measured on the H200, 128 sequences, 1,024 blocks, 4
/// (no split) reads the cache at 2.40 TB/s at 1,024 tokens of context, 16 (3 splits, four
/// waves) at 2.16 and 32 at 2.07: the split's partial states and merge cost more than the last
/// wave's idle tail, so splits are for few sequences only), while each slice keeps at least the
/// tuning's fewest keys (64) (1 = the plain kernel).
pub(super) fn attention_splits(
    blocks: usize,
    max_len: usize,
    multiprocessors: usize,
    tuning: &AttentionTuning,
) -> usize {
    splits_for(
        blocks,
        max_len,
        multiprocessors,
        tuning.blocks_per_sm,
        tuning.min_split_keys,
    )
}

fn splits_for(
    blocks: usize,
    max_len: usize,
    multiprocessors: usize,
    per_sm: usize,
    min_keys: usize,
) -> usize {
    // Rounded down: a split must at least double the blocks to be worth its merge (at 128
    // sequences of 4 KV heads, 512 blocks against 528 wanted, rounding up split every row in
    // two: 35 + 14 us a layer for the kernel and merge on the H200, 30B-A3B FP8 at batch 128).
    let want = (per_sm * multiprocessors) / blocks.max(1);
    want.min(max_len.div_ceil(min_keys.max(1)))
        .clamp(1, MAX_SPLITS)
}

fn kv_dims(cache: &CudaTensor) -> Result<(usize, usize, usize, usize)> {
    match cache.shape[..] {
        [blocks, bs, nkv, hd] => Ok((blocks, bs, nkv, hd)),
        _ => Err(shape_err(
            "kv cache",
            format!(
                "expected [blocks, block_size, kv_heads, head_dim], got {:?} {:?}",
                cache.shape, cache.dtype
            ),
        )),
    }
}

impl CudaBackend {
    /// The fewest keys an attention split takes now.
    pub fn attention_min_split_keys(&self) -> usize {
        self.tuning().attention.min_split_keys
    }

    /// Key slices `paged_attention` cuts each (row, head group) into for `rows` rows of
    /// `heads` q heads over `kv_heads` of `head_dim`, whose longest causal range is `max_len`
    /// (1 = the plain kernel).
    pub fn attention_splits(
        &self,
        rows: usize,
        heads: usize,
        kv_heads: usize,
        head_dim: usize,
        max_len: usize,
    ) -> usize {
        let kernel = self.attn_kernel(head_dim, heads, kv_heads, self.compute == DType::F32);
        let blocks = rows * row_blocks(kernel, heads, kv_heads);
        attention_splits(
            blocks,
            max_len,
            self.info.multiprocessors,
            &self.tuning().attention,
        )
    }

    /// The kernel family `paged_attention` runs; an f32 cache (the float32 path) has only the
    /// CUDA-core one.
    fn attn_kernel(
        &self,
        head_dim: usize,
        heads: usize,
        kv_heads: usize,
        fp32: bool,
    ) -> AttnKernel {
        if fp32 {
            AttnKernel::Simt
        } else {
            attn_kernel(
                head_dim,
                heads,
                kv_heads,
                self.info.compute_capability,
                self.tuning().attention.kernel,
            )
        }
    }

    /// Checks what writing `qkv`'s k and v heads into the caches at the batch's slots needs;
    /// false when there is nothing to write.
    pub(super) fn write_kv_check(
        &self,
        op: &'static str,
        k_cache: &CudaTensor,
        v_cache: &CudaTensor,
        qkv: &CudaTensor,
        batch: &CudaBatch,
        num_heads: usize,
    ) -> Result<bool> {
        let (blocks, bs, nkv, hd) = kv_dims(k_cache)?;
        let width = (num_heads + 2 * nkv) * hd;
        check(
            op,
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
                op,
                format!("slot {slot} is outside the cache of {blocks} blocks"),
            ));
        }
        Ok(batch.num_tokens > 0 && nkv * hd > 0)
    }

    pub(super) fn write_kv_op(
        &self,
        k_cache: &mut CudaTensor,
        v_cache: &mut CudaTensor,
        qkv: &CudaTensor,
        batch: &CudaBatch,
        num_heads: usize,
    ) -> Result<()> {
        if !self.write_kv_check("write_kv", k_cache, v_cache, qkv, batch, num_heads)? {
            return Ok(());
        }
        let (_, _, nkv, hd) = kv_dims(k_cache)?;
        let slot_len = nkv * hd;
        /// The cache writers' parameters: k and v caches, (for _kv8 their scales,) qkv,
        /// slot_mapping, heads, kv heads, head_dim.
        type PlainArgs = (u64, u64, u64, u64, i32, i32, i32);
        type Kv8Args = (u64, u64, u64, u64, u64, u64, i32, i32, i32);
        /// The cache writers: bf16 or f32 caches, or FP8 ones with their scales.
        enum Writer {
            Plain(Kernel<PlainArgs>),
            Kv8(Kernel<Kv8Args>),
        }
        let writer = match (qkv.dtype, k_cache.dtype) {
            (DType::F8 | DType::F4 | DType::Mx4, _) => {
                return Err(super::not_activation("write_kv"));
            }
            (DType::F32, DType::F32) => Writer::Plain(kernels::write_kv_fp32),
            (DType::F32, DType::F8) => Writer::Kv8(kernels::write_kv_f32_kv8),
            (DType::BF16, DType::F8) => Writer::Kv8(kernels::write_kv_bf16_kv8),
            (DType::F32, _) => Writer::Plain(kernels::write_kv_f32),
            (DType::BF16, DType::BF16) => Writer::Plain(kernels::write_kv_bf16),
            (DType::BF16, _) => {
                return Err(shape_err(
                    "write_kv",
                    "an f32 cache (the float32 path) takes f32 qkv".to_string(),
                ));
            }
        };
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
        let (ks, vs) = (k_cache.scales_ptr(s), v_cache.scales_ptr(s));
        // The FP8 writer gives each head vector a warp (4 a block); the others a thread per
        // element of the token's slot.
        let kv8 = matches!(writer, Writer::Kv8(_));
        let threads = if kv8 { 128 } else { row_threads(slot_len) };
        let config = cfg((dim(batch.num_tokens, "write_kv")?, 1), threads);
        // SAFETY: the caches are [blocks, bs, nkv, hd] of the kernel's cache type (for _kv8,
        // e4m3 bytes with ceil(hd / 128) scales a (slot, kv head) in their scale regions,
        // fp8_alloc_bytes) and every slot is below blocks·bs (checked above), so each write
        // stays inside them; qkv is [T, (nh + 2·nkv)·hd] of the kernel's type.
        unsafe {
            match writer {
                Writer::Plain(kernel) => kernel.launch(self, config, (k, v, q, slots, nh, nk, d)),
                Writer::Kv8(kernel) => {
                    kernel.launch(self, config, (k, v, ks, vs, q, slots, nh, nk, d))
                }
            }
        }
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
        let heads = (num_heads, scale);
        self.attention_op(out, qkv, k_cache, v_cache, batch, heads, None, None)
    }

    /// [`crate::backend::Backend::paged_attention_window`]: causal attention in the last
    /// `window` positions (the kernels start their key loops at the window's first key).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn paged_attention_window_op(
        &self,
        out: &mut CudaTensor,
        qkv: &CudaTensor,
        k_cache: &CudaTensor,
        v_cache: &CudaTensor,
        batch: &CudaBatch,
        num_heads: usize,
        scale: f32,
        window: usize,
    ) -> Result<()> {
        check("paged_attention_window", window > 0, || {
            "a window of 0 tokens".into()
        })?;
        let heads = (num_heads, scale);
        self.attention_op(out, qkv, k_cache, v_cache, batch, heads, Some(window), None)
    }

    /// [`crate::backend::Backend::paged_attention_sinks`]: attention (in a sliding window when
    /// `window` is `Some`) with one learned logit a head in the softmax's denominator; `sinks`
    /// is `[nh]` f32 (gpt-oss uploads them with `upload_f32_weight`, so nothing is widened per call),
    /// or bf16, which is widened here at every call (the kernels read f32).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn paged_attention_sinks_op(
        &self,
        out: &mut CudaTensor,
        qkv: &CudaTensor,
        k_cache: &CudaTensor,
        v_cache: &CudaTensor,
        batch: &CudaBatch,
        heads: (usize, f32),
        window: Option<usize>,
        sinks: &CudaTensor,
    ) -> Result<()> {
        check(
            "paged_attention_sinks",
            window != Some(0) && sinks.numel() == heads.0 && sinks.dtype != DType::F8,
            || {
                format!(
                    "window {window:?}, sinks {:?} {:?} for {} heads",
                    sinks.shape, sinks.dtype, heads.0
                )
            },
        )?;
        if sinks.dtype == DType::F32 {
            return self.attention_op(
                out,
                qkv,
                k_cache,
                v_cache,
                batch,
                heads,
                window,
                Some(sinks),
            );
        }
        let mut wide = self.alloc(&sinks.shape, DType::F32)?;
        self.cast(&mut wide, sinks)?;
        self.attention_op(
            out,
            qkv,
            k_cache,
            v_cache,
            batch,
            heads,
            window,
            Some(&wide),
        )
    }

    /// Every attention entry point: `window` (`Some`: keys `q − window < p ≤ q` only) and
    /// `sinks` (`Some`: `[nh]` f32 logits in each head's softmax denominator) as the kernels'
    /// last two arguments (0 and null without them).
    #[allow(clippy::too_many_arguments)]
    fn attention_op(
        &self,
        out: &mut CudaTensor,
        qkv: &CudaTensor,
        k_cache: &CudaTensor,
        v_cache: &CudaTensor,
        batch: &CudaBatch,
        (num_heads, scale): (usize, f32),
        window: Option<usize>,
        sinks: Option<&CudaTensor>,
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
        // The float32 path (an f32 cache): f32 q and output, the CUDA-core kernel's fp32 build.
        let fp32 = k_cache.dtype == DType::F32;
        check("paged_attention", !fp32 || qkv.dtype == DType::F32, || {
            format!(
                "an f32 cache (the float32 path) takes f32 qkv, got {:?}",
                qkv.dtype
            )
        })?;
        self.set_dtype(out, if fp32 { DType::F32 } else { DType::BF16 })?;
        if t == 0 || num_heads == 0 || hd == 0 {
            return Ok(());
        }
        let s = &self.stream;
        // The window as the kernels take it (0: none; a window past i32 is none in practice).
        let win = window.map_or(0, |w| i32::try_from(w).unwrap_or(i32::MAX));
        let sink_ptr = sinks.map_or(0, |x| x.ptr(s));
        let extras = (win, sink_ptr);
        // Prefill chunks (the batch's flash plan) take the flash kernel; the rows before them,
        // `rows`, the decode kernels below.
        let flash = self
            .flash_plan(batch, qkv.dtype, k_cache.dtype, hd)
            .filter(|_| !fp32);
        let (rows, max_len) = flash.map_or((t, batch.max_len), |f| (f.first_row, f.decode_max_len));
        if let Some(plan) = flash {
            self.attention_flash_op(
                plan,
                out,
                qkv,
                k_cache,
                v_cache,
                batch,
                (num_heads, nkv, hd),
                scale,
                extras,
            )?;
        }
        if rows == 0 {
            return Ok(());
        }
        // An FP8 cache (`--kv-cache-dtype fp8`): the _kv8 kernels.
        let kv8 = k_cache.dtype == DType::F8;
        let ty = match (fp32, kv8, qkv.dtype) {
            (true, _, _) => AttnTypes::Fp32,
            (false, _, DType::F8 | DType::F4 | DType::Mx4) => {
                return Err(super::not_activation("paged_attention"));
            }
            (false, true, DType::F32) => AttnTypes::F32Kv8,
            (false, true, DType::BF16) => AttnTypes::Bf16Kv8,
            (false, false, DType::F32) => AttnTypes::F32,
            (false, false, DType::BF16) => AttnTypes::Bf16,
        };
        let kernel = self.attn_kernel(hd, num_heads, nkv, fp32);
        let head_blocks = row_blocks(kernel, num_heads, nkv);
        // A window bounds every row's keys (plus up to 15 before it: the tensor-core kernel's
        // first 16-key tile).
        let max_len = window.map_or(max_len, |w| max_len.min(w.saturating_add(15)));
        let splits = attention_splits(
            rows * head_blocks,
            max_len,
            self.info.multiprocessors,
            &self.tuning().attention,
        );
        let (q, k, v) = (qkv.ptr(s), k_cache.ptr(s), v_cache.ptr(s));
        let (ks, vs) = (k_cache.scales_ptr(s), v_cache.scales_ptr(s));
        let (pos, row_table, tables) = (
            batch.positions(s),
            batch.row_table(s),
            batch.block_tables(s),
        );
        let (max_blocks, block_size, nh, nk, d) = (
            int(batch.table_stride, "paged_attention")?,
            int(bs, "paged_attention")?,
            int(num_heads, "paged_attention")?,
            int(nkv, "paged_attention")?,
            int(hd, "paged_attention")?,
        );
        // One block a (row, head group or kv head), a row's blocks adjacent (x = row · groups +
        // group); both kernels have ATTN_WARPS (= MMA_WARPS) warps.
        let grid = |y: usize, z: usize| -> Result<LaunchConfig> {
            Ok(LaunchConfig {
                grid_dim: (
                    dim(rows * y, "paged_attention")?,
                    1,
                    dim(z, "paged_attention")?,
                ),
                block_dim: (32 * ATTN_WARPS, 1, 1),
                shared_mem_bytes: 0,
            })
        };
        // Split-K keeps partial states [T, nh, splits, hd + 2] in f32 for the merge.
        let partial = if splits > 1 {
            Some(self.alloc(&[rows * num_heads * splits * (hd + 2)], DType::F32)?)
        } else {
            None
        };
        let split = splits > 1;
        let attention = match kernel {
            AttnKernel::Mma => attention_kernels::mma(ty, hd, num_heads / nkv > 8, split),
            AttnKernel::Simt => {
                // Variants by head_dim (NPER = head_dim / 32 rounded up to 1, 2, 4 or 8) and by
                // the q heads a block serves (G: the largest of 4, 2, 1 dividing the GQA group).
                let d = match hd.div_ceil(32) {
                    1 => 32,
                    2 => 64,
                    3..=4 => 128,
                    _ => 256,
                };
                let g = head_group(num_heads, nkv);
                // head_dim exactly 64, 128 or 256 of a bf16 cache: the 16-byte-load variant.
                let vec = hd == d && d >= 64 && !fp32 && !kv8;
                attention_kernels::simt(ty, vec, d, g, split)
            }
        }?;
        let (o, pp) = (out.ptr(s), partial.as_ref().map_or(0, |p| p.ptr(s)));
        let args = (
            o, pp, q, k, v, pos, row_table, tables, max_blocks, block_size, nh, nk, d, scale, ks,
            vs, win, sink_ptr,
        );
        // SAFETY: out is [T, nh·hd], qkv [T, (nh + 2·nkv)·hd], the caches [blocks, bs, nkv, hd]
        // (out and the caches f32 for the fp32 kernels, e4m3 bytes with ceil(hd / 128) scales a
        // (slot, kv head) at ks / vs for _kv8 (null, unread, otherwise), else bf16), with hd no
        // larger than the kernel variant's 32·NPER (attention.cu) or equal to its D, with a GQA
        // group of at most 8 (16 for _wide) (attention_mma.cu, whose keys past a row's end are
        // read at the row's last key); each row's reach positions[row] / bs is inside its table
        // and every table entry is below blocks
        // (checked above and in prepare_batch), so every key and value read is in the cache.
        // The split kernel writes instead one state per (row, head, split) of its grid into
        // `partial` (T·nh·splits·(hd + 2) floats), and each row's causal range is cut into
        // those splits in the kernel; the plain kernel never touches the null `partial`. A
        // window only narrows the keys read; `sinks`, when not null, is [nh] f32 (checked by
        // paged_attention_sinks_op; the plain kernel reads it, the split kernel does not).
        unsafe { attention.launch(self, grid(head_blocks, splits)?, args)? };
        let Some(partial) = partial else {
            return Ok(());
        };
        let merge_kernel = if fp32 {
            kernels::attention_merge_fp32
        } else {
            kernels::attention_merge
        };
        let (pp, sp) = (partial.ptr(s), int(splits, "paged_attention")?);
        let merge = LaunchConfig {
            grid_dim: (
                dim(rows, "attention_merge")?,
                dim(num_heads, "attention_merge")?,
                1,
            ),
            block_dim: (32 * ATTN_WARPS, 1, 1),
            shared_mem_bytes: 0,
        };
        // `partial` is freed when it drops, after the merge on the same stream.
        // SAFETY: out is [T, nh·hd] (f32 for the fp32 merge, else bf16) and partial holds the
        // `splits` states of every (row, head) written above, split 0 of each with key 0 in it;
        // one block per (row, head) (grid x = row, y = head, as attention_merge reads them);
        // sinks is null or [nh] f32.
        unsafe { merge_kernel.launch(self, merge, (o, pp, nh, d, sp, sink_ptr)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_only_when_rows_times_heads_leave_the_gpu_idle() {
        let sms = 132;
        let splits = |blocks, max_len| {
            splits_for(
                blocks,
                max_len,
                sms,
                4,
                crate::tuning::Tuning::default().attention.min_split_keys,
            )
        };
        // Prefill: many rows already fill the GPU.
        assert_eq!(splits(1000 * 32, 1000), 1);
        // Decode of one sequence (8 head groups) over 129 keys: slices of at least 64 keys.
        assert_eq!(splits(8, 129), 3);
        // Over 2047 keys: enough blocks to fill the GPU four times over.
        assert_eq!(splits(8, 2047), 32);
        assert_eq!(splits(32, 2047), 16);
        // Over 100k keys: at most 64 slices.
        assert_eq!(splits(4, 100_000), 64);
        // Many sequences: few or no slices (none once the blocks are over half the target).
        assert_eq!(splits(8 * 32, 2047), 2);
        assert_eq!(splits(128 * 8, 1152), 1);
        assert_eq!(splits(128 * 4, 129), 1);
        // A larger target splits many sequences too (slower on the H200, see attention_splits).
        assert_eq!(
            splits_for(
                128 * 8,
                1152,
                sms,
                16,
                crate::tuning::Tuning::default().attention.min_split_keys
            ),
            2
        );
        // A larger minimum slice (METRALE_ATTN_MIN_SPLIT_KEYS): fewer slices, none past it.
        assert_eq!(splits_for(8, 2047, sms, 4, 512), 4);
        assert_eq!(splits_for(8, 2047, sms, 4, usize::MAX / 2), 1);
    }

    #[test]
    fn a_block_serves_the_largest_group_of_four_two_or_one_heads() {
        assert_eq!(head_group(32, 8), 4);
        assert_eq!(head_group(32, 32), 1);
        assert_eq!(head_group(16, 2), 4);
        assert_eq!(head_group(12, 2), 2);
        assert_eq!(head_group(18, 6), 1);
        assert_eq!(head_group(32, 1), 4);
    }
}
