//! Launchers for DeepSeek-V3's multi-head latent attention (`mla.cu`; the CPU reference is
//! `backend/cpu/mla.rs`):
//!
//! - `mla_rope_write_kv`: one launch, `mla_rope_kv_*` (q's rope parts and the latent row's
//!   rotated, the row copied to its slot of the `[num_blocks, block_size, latent + rope]`
//!   cache);
//! - `mla_attention`: three, `mla_q_absorb_*` (each head's query in the latent space, f32),
//!   `mla_attend_*` (scores, softmax and the attended latent of each (token, head group,
//!   slice of the causal range), unnormalised states in f32) and `mla_out_*` (the slices
//!   merged, then each head's value up-projection).
//!
//! The bf16 path keeps a bf16 cache and reads bf16 `kv_b`; the float32 path (an f32 cache)
//! reads f32 q, `kv_b` and cache and writes f32. An FP8 `kv_b` is dequantized to bf16 at each
//! call (DeepSeek-V3's load widens a checkpoint's on the host, so the model never passes one).
//! The FP8 KV cache (`_kv8`) keeps `c_kv` and `k_pe` as two vectors of its format, as the CPU
//! rounds them, within the row's scale groups: so a latent of a multiple of 128 (DeepSeek's
//! 512) and rope of at most 128; other sizes are refused by name.

use cudarc::driver::LaunchConfig;

use super::attention::attention_splits;
use super::elementwise::{cfg, dim, int};
use super::tensor::{CudaTensor, DType};
use super::{CudaBackend, CudaBatch, check, shape_err};
use crate::backend::kernels;
use crate::backend::kv_fp8::KV_FP8_GROUP;
use crate::backend::{MlaDims, Result, RopeTables};

/// Warps of an `mla_rope_kv` block (MLA_ROPE_WARPS in mla.cu), one a head (and one a token
/// for the latent row).
const ROPE_WARPS: usize = 4;
/// Rotated pairs a lane holds (MLA_ROPE_PAIRS): rope at most 2 · 32 · 2.
const MAX_ROPE: usize = 128;
/// Tokens an `mla_q_absorb` or `mla_out` block serves (MLA_QT).
const QT: usize = 8;
/// Heads an `mla_attend` block serves, a warp each (MLA_HG).
const HG: usize = 8;
/// Threads of the absorb, attend and out blocks (MLA_THREADS).
const THREADS: u32 = 256;
/// The kernels' shared-memory limits (MLA_MAX_LATENT, MLA_MAX_ROW, MLA_MAX_NOPE).
const MAX_LATENT: usize = 512;
const MAX_ROW: usize = 576;
const MAX_NOPE: usize = 512;

/// That the head sizes fit the kernels' registers and shared memory.
fn dims_fit(op: &'static str, dims: MlaDims) -> Result<()> {
    check(
        op,
        dims.heads > 0
            && dims.rope.is_multiple_of(2)
            && dims.rope <= MAX_ROPE
            && dims.latent > 0
            && dims.latent <= MAX_LATENT
            && dims.row() <= MAX_ROW
            && dims.nope <= MAX_NOPE,
        || {
            format!(
                "{dims:?} (want an even rope of at most {MAX_ROPE}, latent at most \
                 {MAX_LATENT}, latent + rope at most {MAX_ROW}, nope at most {MAX_NOPE})"
            )
        },
    )
}

/// The FP8 KV cache's row has `ceil(row / 128)` scale groups; `c_kv` and `k_pe` are rounded
/// apart (as the CPU does) only when they fill them: a latent of a multiple of 128.
fn fp8_cache_fits(op: &'static str, cache: &CudaTensor, dims: MlaDims) -> Result<()> {
    let fits = dims.latent.is_multiple_of(KV_FP8_GROUP) && dims.rope <= KV_FP8_GROUP;
    check(op, cache.dtype != DType::F8 || fits, || {
        format!(
            "{dims:?} with the FP8 KV cache (it needs a latent of a multiple of \
             {KV_FP8_GROUP} and rope at most {KV_FP8_GROUP}): drop --kv-cache-dtype fp8"
        )
    })
}

impl CudaBackend {
    /// [`crate::backend::Backend::mla_rope_write_kv`]: a warp a (token, q head) and a warp a
    /// token for its latent row.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn mla_rope_write_kv_op(
        &self,
        q: &mut CudaTensor,
        latent: &mut CudaTensor,
        batch: &CudaBatch,
        rope: &RopeTables,
        dims: MlaDims,
        interleaved: bool,
        cache: &mut CudaTensor,
    ) -> Result<()> {
        const OP: &str = "mla_rope_write_kv";
        let (blocks, bs) = dims.cache_blocks(OP, &cache.shape)?;
        dims_fit(OP, dims)?;
        fp8_cache_fits(OP, cache, dims)?;
        let t = batch.num_tokens;
        check(
            OP,
            q.cols() == dims.q_width()
                && q.rows() == t
                && latent.cols() == dims.row()
                && latent.rows() == t
                && q.dtype == latent.dtype
                && rope.rotary_dim == dims.rope
                && rope.inv_freq.len() * 2 == dims.rope
                && bs == batch.block_size,
            || {
                format!(
                    "q {:?} {:?}, latent {:?} {:?}, rotary dims {} with {} frequencies, \
                     block_size {} for {dims:?} and {t} tokens",
                    q.shape,
                    q.dtype,
                    latent.shape,
                    latent.dtype,
                    rope.rotary_dim,
                    rope.inv_freq.len(),
                    batch.block_size
                )
            },
        )?;
        if let Some(slot) = batch.max_slot.filter(|&s| s as usize >= blocks * bs) {
            return Err(shape_err(
                OP,
                format!("slot {slot} is outside the cache of {blocks} blocks"),
            ));
        }
        if t == 0 {
            return Ok(());
        }
        let inv_freq = self.inv_freq(rope)?;
        let s = &self.stream;
        let (qp, lp, cp, sp) = (q.ptr(s), latent.ptr(s), cache.ptr(s), cache.scales_ptr(s));
        let (pos, slots) = (batch.positions(s), batch.slot_mapping(s));
        let args = (
            qp,
            lp,
            cp,
            pos,
            slots,
            inv_freq,
            rope.scale,
            int(dims.heads, OP)?,
            int(dims.nope, OP)?,
            int(dims.rope, OP)?,
            int(dims.latent, OP)?,
            i32::from(interleaved),
        );
        let config = LaunchConfig {
            grid_dim: (
                dim(t, OP)?,
                dim((dims.heads + 1).div_ceil(ROPE_WARPS), OP)?,
                1,
            ),
            block_dim: (32 * ROPE_WARPS as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let kv8 = (
            args.0, args.1, args.2, args.3, args.4, args.5, args.6, args.7, args.8, args.9,
            args.10, args.11, sp,
        );
        // SAFETY (every launch): q is [T, heads·(nope + rope)] and latent [T, latent + rope] of
        // the kernel's type; the cache is [blocks, bs, latent + rope] of its type (e4m3 bytes
        // followed by ceil(row / 128) f32 scales a slot for _kv8, with latent % 128 == 0 and
        // rope <= 128: fp8_cache_fits) and every slot is below blocks·bs (checked above);
        // positions and slot_mapping hold T entries; inv_freq holds rope/2 floats with rope
        // even and at most 128 (a lane's two pairs); warps past the last head (heads + 1 a
        // token) return before touching memory.
        match (q.dtype, cache.dtype) {
            (DType::BF16, DType::F8) => unsafe {
                kernels::mla_rope_kv_bf16_kv8.launch(self, config, kv8)
            },
            (DType::F32, DType::F8) => unsafe {
                kernels::mla_rope_kv_f32_kv8.launch(self, config, kv8)
            },
            (DType::BF16, DType::BF16) => unsafe {
                kernels::mla_rope_kv_bf16.launch(self, config, args)
            },
            (DType::F32, DType::BF16) => unsafe {
                kernels::mla_rope_kv_f32.launch(self, config, args)
            },
            (DType::F32, DType::F32) => unsafe {
                kernels::mla_rope_kv_fp32.launch(self, config, args)
            },
            (a, c) => Err(shape_err(
                OP,
                format!("q and latent of {a:?} with a cache of {c:?}"),
            )),
        }
    }

    /// [`crate::backend::Backend::mla_attention`] (see the module's comment). `out` becomes
    /// bf16 on the bf16 path, f32 on the float32 path.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn mla_attention_op(
        &self,
        out: &mut CudaTensor,
        q: &CudaTensor,
        kv_b: &CudaTensor,
        cache: &CudaTensor,
        batch: &CudaBatch,
        dims: MlaDims,
        scale: f32,
    ) -> Result<()> {
        const OP: &str = "mla_attention";
        let (blocks, bs) = dims.cache_blocks(OP, &cache.shape)?;
        dims_fit(OP, dims)?;
        fp8_cache_fits(OP, cache, dims)?;
        let t = batch.num_tokens;
        let MlaDims {
            heads,
            nope,
            rope,
            v,
            latent,
        } = dims;
        check(
            OP,
            q.cols() == dims.q_width()
                && q.rows() == t
                && out.cols() == heads * v
                && out.rows() == t
                && kv_b.shape == [heads * (nope + v), latent]
                && bs == batch.block_size,
            || {
                format!(
                    "out {:?}, q {:?}, kv_b {:?} for {dims:?} and {t} tokens (want out [T, {}], \
                     kv_b [{}, {latent}])",
                    out.shape,
                    q.shape,
                    kv_b.shape,
                    heads * v,
                    heads * (nope + v)
                )
            },
        )?;
        if batch.max_block_id.is_some_and(|b| b as usize >= blocks) {
            return Err(shape_err(
                OP,
                format!("a block table names a block beyond {blocks}"),
            ));
        }
        if let Some(e) = &batch.table_error {
            return Err(shape_err(OP, e.clone()));
        }
        // The float32 path: f32 q, kv_b and cache, f32 out. The bf16 path: a bf16 cache and
        // bf16 kv_b (an FP8 one dequantized here), bf16 out.
        let fp32 = cache.dtype == DType::F32;
        let mut dequantized = None;
        let kv_b = if kv_b.dtype == DType::F8 && !fp32 {
            let mut w = self.alloc(&kv_b.shape, DType::BF16)?;
            self.dequant_fp8(&mut w, kv_b)?;
            &*dequantized.insert(w)
        } else {
            kv_b
        };
        let types_ok = if fp32 {
            q.dtype == DType::F32 && kv_b.dtype == DType::F32
        } else {
            matches!(cache.dtype, DType::BF16 | DType::F8)
                && kv_b.dtype == DType::BF16
                && matches!(q.dtype, DType::BF16 | DType::F32)
        };
        check(OP, types_ok, || {
            format!(
                "q {:?}, kv_b {:?}, cache {:?} (want f32 throughout, or a bf16 cache and kv_b \
                 with bf16 or f32 q)",
                q.dtype, kv_b.dtype, cache.dtype
            )
        })?;
        self.set_dtype(out, if fp32 { DType::F32 } else { DType::BF16 })?;
        if t == 0 {
            return Ok(());
        }
        let row = dims.row();
        let groups = heads.div_ceil(HG);
        let splits = attention_splits(
            t * groups,
            batch.max_len,
            self.info.multiprocessors,
            &self.tuning().attention,
        );
        // qf [T, heads, latent + rope] f32; partial [T, heads, splits, latent + 2] f32.
        let qf = self.alloc(&[t * heads * row], DType::F32)?;
        let partial = self.alloc(&[t * heads * splits * (latent + 2)], DType::F32)?;
        let s = &self.stream;
        let (qfp, pp, qp, wp, cp, op) = (
            qf.ptr(s),
            partial.ptr(s),
            q.ptr(s),
            kv_b.ptr(s),
            cache.ptr(s),
            out.ptr(s),
        );
        let (ti, hi, ni, ri, vi, li) = (
            int(t, OP)?,
            int(heads, OP)?,
            int(nope, OP)?,
            int(rope, OP)?,
            int(v, OP)?,
            int(latent, OP)?,
        );
        let by_tokens = cfg((dim(heads, OP)?, dim(t.div_ceil(QT), OP)?), THREADS);

        // 1. qf = W_UKᵀ q_nope | q_pe, each head.
        let args = (qfp, qp, wp, ti, hi, ni, ri, vi, li);
        // SAFETY (every launch): q is [T, heads·(nope + rope)] of the kernel's type, kv_b
        // [heads·(nope + v), latent] of its weight type (checked above), qf holds T·heads·(latent
        // + rope) f32; nope <= 512 (the block's shared q rows, dims_fit); a block a (head, 8
        // tokens), rows past T neither read nor written.
        match (q.dtype, kv_b.dtype) {
            (DType::BF16, DType::BF16) => unsafe {
                kernels::mla_q_absorb_bf16.launch(self, by_tokens, args)?
            },
            (DType::F32, DType::BF16) => unsafe {
                kernels::mla_q_absorb_f32.launch(self, by_tokens, args)?
            },
            _ => unsafe { kernels::mla_q_absorb_fp32.launch(self, by_tokens, args)? },
        }

        // 2. The attended latent of each (token, head group, slice).
        let (pos, row_table, tables) = (
            batch.positions(s),
            batch.row_table(s),
            batch.block_tables(s),
        );
        let args = (
            pp,
            qfp,
            cp,
            pos,
            row_table,
            tables,
            int(batch.table_stride, OP)?,
            int(bs, OP)?,
            hi,
            ri,
            li,
            scale,
        );
        let attend = LaunchConfig {
            grid_dim: (dim(t, OP)?, dim(groups, OP)?, dim(splits, OP)?),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY (every launch): qf holds the [T, heads, latent + rope] rows written above;
        // the cache is [blocks, bs, latent + rope] of the kernel's type (e4m3 bytes with
        // ceil(row / 128) scales a slot after them for _kv8) with latent <= 512 and latent +
        // rope <= 576 (the shared query rows and tile, dims_fit); each row's reach
        // positions[row] / bs is inside its table and every table entry is below blocks
        // (checked above and in prepare_batch), so every cached row read is in the cache;
        // partial holds T·heads·splits·(latent + 2) f32, one state a (row, head, slice) of the
        // grid; heads past the last in a group are neither read nor written.
        match cache.dtype {
            DType::F32 => unsafe { kernels::mla_attend_fp32.launch(self, attend, args)? },
            DType::F8 => {
                let kv8 = (
                    args.0,
                    args.1,
                    args.2,
                    args.3,
                    args.4,
                    args.5,
                    args.6,
                    args.7,
                    args.8,
                    args.9,
                    args.10,
                    args.11,
                    cache.scales_ptr(s),
                );
                unsafe { kernels::mla_attend_kv8.launch(self, attend, kv8)? }
            }
            _ => unsafe { kernels::mla_attend_bf16.launch(self, attend, args)? },
        }

        // 3. out = W_UV · (the merged slices), each head.
        let args = (op, pp, wp, ti, hi, ni, vi, li, int(splits, OP)?);
        // SAFETY: out is [T, heads·v] (f32 for the fp32 kernel, else bf16, set above), partial
        // holds every (row, head)'s `splits` states (slice 0 of each with row 0 in it), kv_b
        // [heads·(nope + v), latent] of the kernel's weight type with latent <= 512 (the
        // block's shared o_lat rows); a block a (head, 8 tokens), rows past T not written.
        // qf, partial and a dequantized kv_b are freed when they drop, after these launches on
        // the same stream.
        if fp32 {
            unsafe { kernels::mla_out_fp32.launch(self, by_tokens, args) }
        } else {
            unsafe { kernels::mla_out_bf16.launch(self, by_tokens, args) }
        }
    }
}
