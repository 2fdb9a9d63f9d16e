//! `moe_one_*` (moe.cu): a one-token MoE block (router, routing, gate|up + SiLU, down and the
//! weighted sum) in one launch of one block a multiprocessor (by default: [`OneGrid`]), with two
//! grid-wide barriers where
//! the three-launch path (`moe_router_plan_one`, `moe_gate_up_dec_*`, `moe_down_combine_*`,
//! `moe.rs`) has kernel boundaries, and the chosen experts' down rows copied into shared memory
//! while gate|up streams. The same output bit for bit (host emulation; `cuda_check`).
//!
//! A grid barrier needs every block resident at once: the grid is a multiple of the
//! multiprocessor count and the launch is taken only when the occupancy calculator gives this
//! kernel, with its shared memory, that many blocks a multiprocessor. Otherwise `routed_moe`
//! runs the three launches.
//!
//! Off by default: on the H200 it is correct (`cuda_check` ops: the three launches' bits; e2e
//! against transformers) but slower. A 30B-A3B batch-1 step with it took 3.21 ms (FP8) and
//! 3.69 ms (bf16) against 2.84 and 3.27 with the three launches, on every grid tried
//! (docs/performance.md: one block of 512 threads a multiprocessor is 7 µs a layer slower).
//! With FP8 experts on sm_89+ it runs `moe_one_fp8_mma` (its products on tensor cores,
//! [`CudaBackend::set_moe_one_mma`]): 3.07 ms, faster than on CUDA cores, still slower than
//! the three launches (within the MoE tolerance of their output, not their bits).
//! `METRALE_MOE_ONE=1` or [`CudaBackend::set_moe_one`] turn it on; `cuda_check` checks it against
//! the other paths bit for bit and times a batch-1 step with and without it.
#![allow(unsafe_code)]

use std::sync::atomic::Ordering;

use cudarc::driver::DevicePtr;
use cudarc::driver::sys::{self, CUfunction_attribute};
use metrale_kernels::Module;

use super::elementwise::{cfg, int};
use super::moe::MAX_TOP_K;
use super::tensor::{CudaTensor, DType};
use super::{CudaBackend, check, dev_err};
use crate::backend::Result;

/// Most threads of a block (`MOE_ONE_WARPS` · 32 in moe.cu, its launch bounds).
const MAX_THREADS: u32 = 16 * 32;

/// How `moe_one_*` is launched: blocks a multiprocessor (all resident at once) and threads a
/// block (a multiple of 32, at most 512; the kernel's loops take any). The default is one
/// block of 512; two of 256 halve each block's columns and shared memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OneGrid {
    pub blocks_per_sm: usize,
    pub threads: u32,
}

impl Default for OneGrid {
    fn default() -> Self {
        Self {
            blocks_per_sm: 1,
            threads: MAX_THREADS,
        }
    }
}

/// What the kernel's launch needs: the grid (one block a multiprocessor), the output columns
/// a block owns and its dynamic shared memory (the layout in moe.cu's comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct OneShape {
    pub blocks: usize,
    pub cols: usize,
    pub smem: usize,
}

/// A residency answer: kernel, shape, grid, whether every block fits at once.
pub(super) type Fits = (&'static str, OneShape, OneGrid, bool);

/// The launch shape for `experts` experts of hidden size `h` and intermediate size `i`, `k` a
/// token, weights of `wbytes` bytes, on `blocks` multiprocessors; `None` when the shape is not
/// one the kernel takes (rows of whole 16-byte words, at most `MAX_TOP_K` experts a token) or
/// its shared memory would pass `smem_max`.
pub(super) fn one_shape(
    (experts, h, i, k): (usize, usize, usize, usize),
    wbytes: usize,
    blocks: usize,
    smem_max: usize,
) -> Option<OneShape> {
    // Whole 16-byte words in every row: the router's and x's (bf16, H), gate|up's (H weights),
    // down's and act's (I weights, I bf16).
    let words = h.is_multiple_of(8)
        && (h * wbytes).is_multiple_of(16)
        && (i * wbytes).is_multiple_of(16)
        && i.is_multiple_of(8);
    if !words || blocks == 0 || k == 0 || k > MAX_TOP_K || experts < k || h == 0 {
        return None;
    }
    let cols = h.div_ceil(blocks);
    let rows = cols * k;
    let scales = if wbytes == 1 { i.div_ceil(128) } else { 0 };
    let smem = rows * i * wbytes
        + k * i * 2
        + rows * scales * 4
        + experts * 4
        + 2 * MAX_TOP_K * 4
        + rows * 4;
    (smem <= smem_max).then_some(OneShape { blocks, cols, smem })
}

/// [`one_shape`] for `moe_one_fp8_mma` (FP8 experts, products on tensor cores): its shared
/// memory (moe.cu's layout: down rows a row every I + 64 bytes, their scales padded to 16
/// bytes, act and x staged at 4 bytes an element); `None` unless H and I are whole 128-column
/// groups and it fits `smem_max`.
pub(super) fn one_shape_mma(
    (experts, h, i, k): (usize, usize, usize, usize),
    blocks: usize,
    smem_max: usize,
) -> Option<OneShape> {
    if !h.is_multiple_of(128) || !i.is_multiple_of(128) {
        return None;
    }
    let base = one_shape((experts, h, i, k), 1, blocks, usize::MAX)?;
    let rows = base.cols * k;
    let smem = rows * (i + 64)
        + (rows * (i / 128)).next_multiple_of(4) * 4
        + k * i * 4
        + h * 4
        + experts * 4
        + 3 * MAX_TOP_K * 4
        + rows * 4
        + (16 * 8 + 32) * 4; // the warps' tile sums, a block max's scratch
    (smem <= smem_max).then_some(OneShape { smem, ..base })
}

impl CudaBackend {
    /// Whether `moe_one` runs FP8 experts' products on tensor cores (`moe_one_fp8_mma`, where
    /// the device has e4m3 conversions and the rows are whole 128-column groups) or on CUDA
    /// cores (`moe_one_fp8`, moe_one's bits). On by default; it matters only when moe_one is.
    pub fn set_moe_one_mma(&self, on: bool) {
        self.moe_one_mma.store(on, Ordering::Relaxed);
    }

    /// Whether one-token MoE blocks take `moe_one_*` where it fits (off by default, see the
    /// module docs; off: the three launches; both give the same output bit for bit).
    pub fn set_moe_one(&self, on: bool) {
        self.moe_one.store(on, Ordering::Relaxed);
    }

    /// Sets how `moe_one_*` is launched (for comparisons); a grid the device cannot hold
    /// resident makes `routed_moe` take the three launches instead.
    pub fn set_moe_one_grid(&self, grid: OneGrid) -> Result<()> {
        check("moe_one grid", grid.blocks_per_sm >= 1, || {
            "at least one block a multiprocessor".to_string()
        })?;
        check(
            "moe_one grid",
            grid.threads.is_multiple_of(32) && (32..=MAX_THREADS).contains(&grid.threads),
            || {
                format!(
                    "threads must be a multiple of 32 up to {MAX_THREADS}, got {}",
                    grid.threads
                )
            },
        )?;
        *self.moe_one_grid.lock().unwrap_or_else(|p| p.into_inner()) = grid;
        Ok(())
    }

    /// Whether [`CudaBackend::set_moe_one`] is on.
    pub fn moe_one(&self) -> bool {
        self.moe_one.load(Ordering::Relaxed)
    }

    /// How many `moe_one_*` launches this backend has made (graph captures count once).
    pub fn moe_one_launches(&self) -> u64 {
        self.moe_one_launches.load(Ordering::Relaxed)
    }

    /// `routed_moe` at one token through `moe_one_*`: `Ok(false)` (nothing launched) when it
    /// is off or the shape or the device does not allow it. The caller has checked the router
    /// (bf16 [E, H], E logits) and x (one row).
    pub(super) fn moe_one_op(
        &self,
        (out, x): (&mut CudaTensor, &CudaTensor),
        (router, router_logits): (&CudaTensor, &mut CudaTensor),
        (gate_up, down): (&CudaTensor, &CudaTensor),
        (top_k, norm_topk_prob): (usize, bool),
    ) -> Result<bool> {
        if !self.moe_one() || gate_up.dtype != down.dtype {
            return Ok(false);
        }
        let (name, wbytes) = match gate_up.dtype {
            DType::F8 => ("moe_one_fp8", 1),
            DType::BF16 => ("moe_one_bf16", 2),
            DType::F32 => return Ok(false),
        };
        let (t, h, e, i) = crate::backend::moe_dims(
            &out.shape,
            &x.shape,
            &router_logits.shape,
            (&gate_up.shape, &down.shape),
            top_k,
            MAX_TOP_K,
        )?;
        let dims = (e, h, i, top_k);
        let grid = *self.moe_one_grid.lock().unwrap_or_else(|p| p.into_inner());
        let blocks = self.info.multiprocessors * grid.blocks_per_sm;
        // FP8 on tensor cores where it can (threads in whole groups of 4 warps: a gate|up tile's).
        let mma = wbytes == 1
            && self.moe_one_mma.load(Ordering::Relaxed)
            && grid.threads.is_multiple_of(128)
            && self.info.compute_capability >= Module::Fp8One.min_compute_capability();
        let (name, shape) = match mma
            .then(|| one_shape_mma(dims, blocks, self.info.smem_optin))
            .flatten()
        {
            Some(shape) => ("moe_one_fp8_mma", Some(shape)),
            None => (name, one_shape(dims, wbytes, blocks, self.info.smem_optin)),
        };
        let Some(shape) = shape else {
            return Ok(false);
        };
        if t != 1 {
            return Ok(false);
        }
        let f = self.func(Module::Moe, name)?;
        // Past 48 KB of shared memory a kernel must opt in, for this launch's size (set at every
        // launch: another shape may have set less), before the occupancy question too.
        if shape.smem > 48 * 1024 {
            f.set_attribute(
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                shape.smem as i32,
            )
            .map_err(dev_err(&format!("{name}: shared memory")))?;
        }
        if !self.moe_one_resident(name, shape, grid)? {
            return Ok(false);
        }
        self.set_dtype(out, DType::F32)?;
        self.set_dtype(router_logits, DType::F32)?;
        let mut converted = None;
        let x = self.as_dtype(x, DType::BF16, &mut converted)?;
        let act = self.alloc(&[top_k, i], DType::BF16)?;
        let s = &self.stream;
        let (op, lp, ap, xp, rp) = (
            out.ptr(s),
            router_logits.ptr(s),
            act.ptr(s),
            x.ptr(s),
            router.ptr(s),
        );
        let (w13, w13s) = (gate_up.ptr(s), gate_up.scales_ptr(s));
        let (w2, w2s) = (down.ptr(s), down.scales_ptr(s));
        let sync = self.grid_sync.device_ptr(s).0;
        let (ei, hi, ii, ki) = (
            int(e, "routed_moe")?,
            int(h, "routed_moe")?,
            int(i, "routed_moe")?,
            int(top_k, "routed_moe")?,
        );
        let (norm, cols) = (i32::from(norm_topk_prob), int(shape.cols, "routed_moe")?);
        let mut a = self.launcher(&f);
        a.arg(&op)
            .arg(&lp)
            .arg(&ap)
            .arg(&xp)
            .arg(&rp)
            .arg(&w13)
            .arg(&w13s)
            .arg(&w2)
            .arg(&w2s)
            .arg(&sync)
            .arg(&ei)
            .arg(&hi)
            .arg(&ii)
            .arg(&ki)
            .arg(&norm)
            .arg(&cols);
        let mut c = cfg((shape.blocks as u32, 1), grid.threads);
        c.shared_mem_bytes = shape.smem as u32;
        // SAFETY: out is [1, h] f32, logits [1, e] f32, act [k, i] bf16, x [1, h] bf16, router
        // [e, h] bf16 (the caller's checks), gate_up [e, 2i, h] and down [e, h, i] of the
        // kernel's weight type (fp8 with [rows, ceil(cols / 128)] f32 scales); one_shape checked
        // the rows' 16-byte words, k <= MAX_TOP_K <= e and sized the shared memory by moe.cu's
        // layout (one_shape_mma for moe_one_fp8_mma: its layout, h and i whole 128-column
        // groups, and threads a multiple of 128, checked above, on sm_89+), cols · blocks >= h; the grid is grid.blocks_per_sm blocks a multiprocessor of
        // grid.threads (<= the kernel's launch bounds, set_moe_one_grid) and moe_one_resident
        // found room for them all, so every block is resident at the barriers; the
        // barrier words are this backend's, back at zero arrivals between launches (the
        // launches on this stream one after another).
        let r = unsafe { a.launch(c) };
        self.launched(name, r)?;
        self.moe_one_launches.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    /// Whether `name` at `shape` fits `grid.blocks_per_sm` blocks a multiprocessor (its shared
    /// memory opted in by the caller): the condition for its grid barriers to return.
    fn moe_one_resident(&self, name: &'static str, shape: OneShape, grid: OneGrid) -> Result<bool> {
        let mut known = self.moe_one_fits.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(&(.., fits)) = known
            .iter()
            .find(|k| (k.0, k.1, k.2) == (name, shape, grid))
        {
            return Ok(fits);
        }
        let fits = self.moe_one_resident_now(name, shape, grid)?;
        // Once a kernel, shape and grid: whether the one-launch MoE block runs (a serve log
        // then says which path the decode steps took).
        tracing::info!(
            "moe_one: {name} (cols {}, {} B shared, {} blocks of {} threads) {}",
            shape.cols,
            shape.smem,
            shape.blocks,
            grid.threads,
            if fits {
                "runs"
            } else {
                "declined: the grid would not all be resident"
            }
        );
        known.push((name, shape, grid, fits));
        Ok(fits)
    }

    /// [`CudaBackend::moe_one_resident`] asked of the driver (each shape once).
    fn moe_one_resident_now(&self, name: &str, shape: OneShape, grid: OneGrid) -> Result<bool> {
        // Under MPS with an SM limit (or in a green context) fewer multiprocessors than the
        // device's serve this context: a grid sized by the device would never all be resident.
        if self.context_multiprocessors()? < self.info.multiprocessors {
            return Ok(false);
        }
        let f = self.func(Module::Moe, name)?;
        let mut blocks = 0i32;
        // SAFETY: the function handle is live (the module is loaded for the context's life);
        // the out pointer is valid for the call.
        unsafe {
            sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(
                &mut blocks,
                f.cu_function(),
                grid.threads as i32,
                shape.smem,
            )
        }
        .result()
        .map_err(dev_err(&format!("{name}: occupancy")))?;
        Ok(usize::try_from(blocks).is_ok_and(|b| b >= grid.blocks_per_sm))
    }
}

impl CudaBackend {
    /// The multiprocessors this context may use (its execution affinity); the device's count
    /// where the driver does not say.
    pub(super) fn context_multiprocessors(&self) -> Result<usize> {
        self.ctx
            .bind_to_thread()
            .map_err(dev_err("binding the context"))?;
        // SAFETY: an all-zero value is a valid instance of this plain C struct, the out
        // pointer is valid for the call, and the union's only member is the SM count (a u32:
        // zeroed, or what the call wrote for CU_EXEC_AFFINITY_TYPE_SM_COUNT; used only when it
        // succeeded).
        let sms = unsafe {
            let mut p: sys::CUexecAffinityParam = std::mem::zeroed();
            let r = sys::cuCtxGetExecAffinity(
                &mut p,
                sys::CUexecAffinityType::CU_EXEC_AFFINITY_TYPE_SM_COUNT,
            );
            (r == sys::CUresult::CUDA_SUCCESS).then_some(p.param.smCount.val as usize)
        };
        Ok(sms.unwrap_or(self.info.multiprocessors))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qwen3_30b_a3b_shapes_fit_an_h200() {
        // 132 multiprocessors, 227 KB a block: 16 columns a block, k = 8, I = 768.
        let scales = 16 * 8 * 6 * 4;
        let tail = 8 * 768 * 2 + 128 * 4 + 2 * 16 * 4 + 16 * 8 * 4; // act, logits, ids, terms
        let fp8 = OneShape {
            blocks: 132,
            cols: 16,
            smem: 16 * 8 * 768 + scales + tail,
        };
        assert_eq!(one_shape((128, 2048, 768, 8), 1, 132, 232_448), Some(fp8));
        let bf16 = OneShape {
            smem: 2 * 16 * 8 * 768 + tail,
            ..fp8
        };
        assert_eq!(one_shape((128, 2048, 768, 8), 2, 132, 232_448), Some(bf16));
        // Ada's 99 KB: the bf16 rows do not fit, so the three launches run.
        assert!(one_shape((128, 2048, 768, 8), 2, 132, 101_376).is_none());
    }

    #[test]
    fn two_blocks_a_multiprocessor_halve_the_columns_and_the_rows_in_shared_memory() {
        let one = one_shape((128, 2048, 768, 8), 1, 132, 232_448);
        let two = one_shape((128, 2048, 768, 8), 1, 264, 232_448);
        let (Some(one), Some(two)) = (one, two) else {
            panic!("both grids fit an H200: {one:?} {two:?}");
        };
        assert_eq!((one.cols, two.cols), (16, 8));
        // The down rows and their scales halve; act, logits, ids and weights do not.
        let rows = |s: OneShape| s.cols * 8 * (768 + 6 * 4 + 4);
        assert_eq!(one.smem - rows(one), two.smem - rows(two));
        assert!(
            2 * two.smem <= 232_448,
            "two blocks fit one multiprocessor's shared memory"
        );
        // 35B-A3B's shape (256 experts of 512) on both grids.
        assert!(one_shape((256, 2048, 512, 8), 1, 264, 232_448).is_some());
        assert!(one_shape((256, 2048, 512, 8), 2, 132, 232_448).is_some());
    }

    #[test]
    fn the_tensor_core_build_fits_an_h200_and_wants_whole_groups() {
        // 30B-A3B FP8 on 132 multiprocessors: 16 columns a block, k = 8, I = 768.
        let rows = 16 * 8;
        let smem = rows * (768 + 64)
            + rows * 6 * 4
            + 8 * 768 * 4
            + 2048 * 4
            + 128 * 4
            + 3 * 16 * 4
            + rows * 4
            + (16 * 8 + 32) * 4;
        let want = OneShape {
            blocks: 132,
            cols: 16,
            smem,
        };
        assert_eq!(one_shape_mma((128, 2048, 768, 8), 132, 232_448), Some(want));
        assert!(smem < 150_000, "{smem}");
        // Two blocks a multiprocessor: half the rows each, both fit.
        let two = one_shape_mma((128, 2048, 768, 8), 264, 232_448).expect("fits");
        assert!(2 * two.smem <= 232_448 && two.cols == 8);
        // Not whole 128-column groups: the CUDA-core build takes these.
        assert!(one_shape_mma((128, 2048, 720, 8), 132, 232_448).is_none());
        assert!(one_shape_mma((128, 2112, 768, 8), 132, 232_448).is_none());
        assert!(one_shape((128, 2048, 720, 8), 1, 132, 232_448).is_some());
        // Too little shared memory (Ada's 99 KB with 16 columns a block).
        assert!(one_shape_mma((128, 2048, 768, 8), 132, 101_376).is_none());
    }

    #[test]
    fn shapes_the_kernel_cannot_take_are_refused() {
        assert!(one_shape((128, 2048, 760, 8), 1, 132, 232_448).is_none()); // I % 16 (fp8)
        assert!(one_shape((128, 2044, 768, 8), 1, 132, 232_448).is_none()); // H % 8
        // FP8 gate|up rows of 2056 bytes are not whole words (the kernel would drop the tail);
        // bf16 ones are.
        assert!(one_shape((128, 2056, 768, 8), 1, 132, 232_448).is_none());
        assert!(one_shape((128, 2056, 768, 8), 2, 132, 232_448).is_some());
        assert!(one_shape((128, 2048, 768, 17), 1, 132, 232_448).is_none()); // k > 16
        assert!(one_shape((4, 2048, 768, 8), 1, 132, 232_448).is_none()); // k > E
        assert!(one_shape((128, 2048, 768, 8), 1, 0, 232_448).is_none()); // no multiprocessor
    }
}
