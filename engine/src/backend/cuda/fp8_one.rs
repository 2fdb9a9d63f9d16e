//! One-token FP8 products on tensor cores (`fp8_one.cu`): the dense projections of a
//! one-row `matmul` and the chosen experts' gate|up and down + weighted sum of a one-token
//! `fused_moe`, with x as an f16 mma operand (staged by each block with a power of two that
//! keeps its range) and the weights widened to f16 pairs by the hardware. About one
//! instruction a weight where the CUDA-core kernels take 3.7; the sums are the same exact
//! products in f32 in another order, so not those kernels' bits (checked against the CPU within
//! the FP8 tolerances). Needs compute capability 8.9 (e4m3 conversions), rows of whole
//! 128-column groups, and x staged in at most 47 KB of shared memory (4 bytes an element).
//! Off by default: slower than the CUDA-core kernels on the H200 (fp8_one.cu's header).

use std::sync::atomic::Ordering;

use metrale_kernels::Module;

use super::elementwise::{cfg, dim, int};
use super::tensor::CudaTensor;
use super::{CudaBackend, DType, Result};

/// Warps of a block (`ONE_WARPS`); a tile is 8 output columns.
const WARPS: usize = 8;
/// 64-column slices a warp keeps in flight (`ONE_SLICES`): the split of k is chosen so a warp's
/// share fits one batch where it can.
const SLICES: usize = 8;
/// Dynamic shared memory a block may take without opting in: 48 KB less the kernels' static
/// shared memory (the reduction's 256 bytes and block_max's 128).
const SMEM_MAX: usize = 47 * 1024;

/// Warps a tile's k is split over (`KW`, a power of two up to the block's 8): the fewest that
/// give a warp at most [`SLICES`] slices of 64 columns.
fn split(k: usize) -> usize {
    (k / 64)
        .div_ceil(SLICES)
        .next_power_of_two()
        .clamp(1, WARPS)
}

impl CudaBackend {
    /// Whether one-token FP8 products run on `fp8_one.cu`'s tensor-core kernels where they fit
    /// (off, the default: the CUDA-core `gemv_fp8_m1` and `moe_*_dec`/`moe_down_combine`
    /// kernels, faster on the H200: fp8_one.cu's header), for comparisons. `METRALE_FP8_ONE=1`
    /// starts it on.
    pub fn set_fp8_one(&self, on: bool) {
        self.fp8_one.store(on, Ordering::Relaxed);
    }

    /// What [`CudaBackend::set_fp8_one`] last set.
    pub fn fp8_one(&self) -> bool {
        self.fp8_one.load(Ordering::Relaxed)
    }

    /// Whether the device and a one-row product over `k` (x staged as `smem` bytes) suit these
    /// kernels (whatever [`CudaBackend::set_fp8_one`] says).
    fn fp8_one_fits(&self, k: usize, smem: usize) -> bool {
        k.is_multiple_of(128)
            && smem <= SMEM_MAX
            && self.info.compute_capability >= Module::Fp8One.min_compute_capability()
    }

    /// Whether a one-row FP8 `matmul` over `k` takes `gemv_fp8_one_*` when they are on.
    pub fn fp8_one_gemv_fits(&self, k: usize) -> bool {
        self.fp8_one_fits(k, 4 * k)
    }

    /// `out [1, n] = x [1, k] · w [n, k]ᵀ` for an FP8 `w` (out f32, x bf16; shapes checked by
    /// the caller), if the one-token kernel takes it: false when it does not.
    pub(super) fn gemv_fp8_one(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        w: &CudaTensor,
    ) -> Result<bool> {
        let (n, k) = (w.rows(), w.cols());
        if !self.fp8_one()
            || x.rows() != 1
            || !self.fp8_one_gemv_fits(k)
            || w.dtype != DType::F8
            || n == 0
        {
            return Ok(false);
        }
        let kw = split(k);
        let name = match kw {
            1 => "gemv_fp8_one_kw1",
            2 => "gemv_fp8_one_kw2",
            4 => "gemv_fp8_one_kw4",
            _ => "gemv_fp8_one_kw8",
        };
        let f = self.func(Module::Fp8One, name)?;
        let s = &self.stream;
        let (o, xp, wp, sp) = (out.ptr(s), x.ptr(s), w.ptr(s), w.scales_ptr(s));
        let (ni, ki) = (int(n, "matmul")?, int(k, "matmul")?);
        let blocks = dim(n.div_ceil(8).div_ceil(WARPS / kw), "matmul")?;
        let mut c = cfg((blocks, 1), (32 * WARPS) as u32);
        c.shared_mem_bytes = (4 * k) as u32;
        let mut a = self.launcher(&f);
        a.arg(&o).arg(&xp).arg(&wp).arg(&sp).arg(&ni).arg(&ki);
        // SAFETY: out is [1, n] f32, x [1, k] bf16, w [n, k] FP8 with [n, k / 128] scales (the
        // caller checked the shapes; k % 128 == 0 here), so every 16-byte load of a weight row
        // (at 64j + 16t < k) and of x is inside it and aligned; rows past n read row n - 1 and
        // are not written; the dynamic shared memory holds x's staged k f16, each twice (4k bytes
        // <= SMEM_MAX).
        let r = unsafe { a.launch(c) };
        self.launched(name, r)?;
        Ok(true)
    }

    /// Whether a `fused_moe` step of `t` tokens over FP8 experts of (h, i) takes
    /// `moe_experts_one` when the one-token kernels are on (and no route is forced).
    pub fn fp8_one_moe_fits(&self, t: usize, h: usize, i: usize, top_k: usize) -> bool {
        t == 1
            && i.is_multiple_of(128)
            && top_k <= super::moe::MAX_TOP_K
            && self.fp8_one_fits(h, 4 * h)
            && self.fp8_one_fits(i, 4 * top_k * i)
    }

    /// Stages 3-5 of a one-token `fused_moe` with FP8 experts (`fp8_one_moe_fits`): act
    /// [k, i] (bf16, the pairs' rows) from x [1, h], then out [1, h] (f32): gate|up with SiLU,
    /// then down and the weighted sum in one launch. `plan` = the routing's device arrays
    /// (offsets, active, perm, ids, weights).
    pub(super) fn moe_experts_one(
        &self,
        (out, act, x): (u64, u64, u64),
        (gate_up, down): (&CudaTensor, &CudaTensor),
        (offsets, active, perm, ids, weights): (u64, u64, u64, u64, u64),
        (h, e, i, top_k): (usize, usize, usize, usize),
    ) -> Result<()> {
        let s = &self.stream;
        let (w13, w13s) = (gate_up.ptr(s), gate_up.scales_ptr(s));
        let (w2, w2s) = (down.ptr(s), down.scales_ptr(s));
        let (ei, ki, ii, hi) = (
            int(e, "fused_moe")?,
            int(top_k, "fused_moe")?,
            int(i, "fused_moe")?,
            int(h, "fused_moe")?,
        );
        let kw = split(h).max(2);
        let name = match kw {
            2 => "moe_gate_up_one_fp8_kw2",
            4 => "moe_gate_up_one_fp8_kw4",
            _ => "moe_gate_up_one_fp8_kw8",
        };
        let f = self.func(Module::Fp8One, name)?;
        // 4 outputs j a tile, 8 / kw tiles a block; a block row per chosen expert.
        let blocks = dim(i.div_ceil(4).div_ceil(WARPS / kw), "fused_moe")?;
        let mut c = cfg(
            (blocks, dim(e.min(top_k), "fused_moe")?),
            (32 * WARPS) as u32,
        );
        c.shared_mem_bytes = (4 * h) as u32;
        let mut a = self.launcher(&f);
        a.arg(&act)
            .arg(&x)
            .arg(&w13)
            .arg(&w13s)
            .arg(&offsets)
            .arg(&active)
            .arg(&perm)
            .arg(&ei)
            .arg(&ii)
            .arg(&hi);
        // SAFETY: x is [1, h] bf16, act [k, i] bf16, gate_up [e, 2i, h] FP8 with [e · 2i, h /
        // 128] scales (h % 128 == 0: every 16-byte row load inside its row, aligned); offsets,
        // active and perm are the one-token plan's (active names at most min(e, k) experts
        // below e, block rows past its count return; perm entries < k); outputs j past i are
        // not written; x's staged h f16, each twice, fit the dynamic shared memory (4h bytes <=
        // SMEM_MAX).
        let r = unsafe { a.launch(c) };
        self.launched(name, r)?;

        let name = "moe_down_combine_one_fp8";
        let f = self.func(Module::Fp8One, name)?;
        let mut c = cfg((dim(h.div_ceil(8), "fused_moe")?, 1), (32 * top_k) as u32);
        c.shared_mem_bytes = (4 * top_k * i) as u32;
        let mut a = self.launcher(&f);
        a.arg(&out)
            .arg(&act)
            .arg(&w2)
            .arg(&w2s)
            .arg(&ids)
            .arg(&weights)
            .arg(&ki)
            .arg(&ii)
            .arg(&hi);
        // SAFETY: out is [1, h] f32, act [k, i] bf16 (every row written by gate|up: each of the
        // token's k experts has its one pair), down [e, h, i] FP8 with [e · h, i / 128] scales
        // (i % 128 == 0), ids (k experts below e) and weights written by the plan; 32 · k
        // threads, k <= MOE_MAX_TOP_K (the kernel's 16 slots); columns past h read row h - 1
        // and are not written; the k staged act rows (4 · k · i bytes: each f16 twice) fit the
        // dynamic shared memory (<= SMEM_MAX).
        let r = unsafe { a.launch(c) };
        self.launched(name, r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k_is_split_so_a_warp_holds_at_most_one_batch() {
        // 30B-A3B: qkv and gate|up (k 2048: 32 slices) four ways, o (k 4096) eight ways,
        // 8B's down (k 12288: 192 slices) at most eight ways (three batches a warp).
        assert_eq!(split(2048), 4);
        assert_eq!(split(4096), 8);
        assert_eq!(split(12288), 8);
        assert_eq!(split(768), 2);
        assert_eq!(split(512), 1);
        assert_eq!(split(128), 1);
        for k in (128..=16384).step_by(128) {
            let kw = split(k);
            assert!(kw.is_power_of_two() && kw <= WARPS, "k {k}: {kw}");
            // A warp's share as the kernel cuts it (one_range: rounded up to whole groups).
            let per = ((k / 64).div_ceil(kw) + 1) & !1;
            assert!(
                kw == WARPS || per <= SLICES,
                "k {k}: {kw} warps of {per} slices"
            );
        }
    }
}
