//! `fused_moe`'s expert GEMMs on tensor cores (`moe_mma.cu`), for steps with many tokens an
//! expert: `moe_tiles` lists the 64-row tiles of the grouped pairs on the device, then one
//! launch over all experts computes gate|up + SiLU (`act`, the pair rows `moe_down_*` reads) and
//! one the down projection (`ys`, the pair rows `moe_combine` reads). Nothing waits on the host,
//! so decode graphs of large batches capture them too. The same down kernel with one expert and
//! no permutation is a plain FP8 GEMM, which `matmul` uses for prefill-sized FP8 GEMMs when
//! the tuning's `gemm.fp8_matmul_mma` is on. Which steps come here: `backend/moe_plan.rs`.
//!
//! FP8 weights run either with bf16 activations (each weight byte widened to bf16 exactly, a
//! group's sum scaled once: the CUDA-core kernels' arithmetic in another order) or, with
//! the tuning's `moe.fp8_activations`, on e4m3 tensor cores with the activations quantized per
//! token and 128 columns (`moe_quant_fp8_*`).
//!
//! NVFP4 and MXFP4 stacks run the `nvfp4` and `mxfp4` builds (`moe_mma_fp4.cu`): the bf16
//! build's tiles and launch, each weight read packed and widened to bf16 exactly as its B tile
//! is loaded (NVFP4's row multipliers applied to the sums), so no bf16 copy of the stacks is
//! made.
//!
//! gpt-oss's experts (`fused_moe_clamped`, `gpt_oss.rs`) take the same launches with bf16 or
//! FP4 weights and a [`ClampedAct`]: the gate|up kernels `moe_gate_up_clamped_mma_{bf16,nvfp4,
//! mxfp4}` and `moe_gate_up_clamped_bf16_small_any` add the gate|up bias and apply the clamped
//! SwiGLU in place of SiLU; down is unchanged.

use metrale_kernels::Module;

use super::CudaBackend;
use super::elementwise::{cfg, dim, int};
use super::tensor::{CudaTensor, DType};
use super::typed_launch::Args;
use crate::backend::Result;
use crate::backend::kernels::{self, Kernel};
use crate::backend::moe_plan::{self, MmaBuild, SmallBuild};
use crate::tuning::Fp8ActKernel;

/// Rows (pairs) of a block tile (`MMA_BM` in moe_mma.cu).
const BM: usize = 64;
/// Weight rows of a block tile (`MMA_BN`): the down kernel's output columns; gate_up's blocks
/// take half as many act columns (their gate and up rows).
const BN: usize = 128;
/// Rows (pairs) of a wgmma block tile (`MWG_BM`: `moe_tiles_wg`'s tiles).
const WG_BM: usize = 128;
/// Weight rows of a wgmma block (`MWG_BN` in moe_wg.cu): the down kernel's output columns;
/// gate_up's blocks take half as many act columns.
const WG_BN: usize = 256;
/// Weight rows of an e4m3-activation wgmma block (`MWG8_BN` in moe_wg8.cu).
const WG8_BN: usize = 128;
/// Stages of an e4m3-activation wgmma block (`Mwg8Cfg::STAGES`).
const WG8_STAGES: usize = 5;
/// Threads of the `moe_tiles` block (`MMA_TILE_THREADS`).
const TILE_THREADS: u32 = 256;
/// Rows (a warp each) of a `moe_quant_fp8_*` block.
const QUANT_ROWS: usize = 8;
/// Warps of a `moe_*_small*` block (FP8_MMA_WARPS in prelude/fp8_mma.cuh).
pub(super) const SMALL_MMA_WARPS: usize = 8;

/// The tensor-core kernels' parameters (`moe_gate_up_mma_*`, `moe_down_mma_*`): out, the A
/// operand and its scales, the weight and its scales, tiles, offsets, perm, three ints.
/// The FP4 builds take the packed stack's bytes, scale bytes and row multipliers (null for
/// MXFP4) in the three pointers after x, which they read without scales.
type MmaArgs = (u64, u64, u64, u64, u64, u64, u64, u64, i32, i32, i32);
/// The clamped gate|up kernels': [`MmaArgs`], then the gate|up bias, alpha, limit.
type ClampedMmaArgs = (
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    i32,
    i32,
    i32,
    u64,
    f32,
    f32,
);

/// gpt-oss's activation between gate and up (`fused_moe_clamped`): the gate|up bias `[E, 2I]`
/// (a bf16 device pointer, gate first), then the clamped SwiGLU with `alpha` and `limit`
/// (prelude/moe_act.cuh's `MoeClampedAct`). Without one the gate|up kernels apply SiLU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct ClampedAct {
    pub bias: u64,
    pub alpha: f32,
    pub limit: f32,
}

/// The clamped builds take bf16 or FP4 experts (gpt-oss's are bf16, MXFP4 or NVFP4), the
/// small-step ones bf16 or FP4 with the `_any` build.
fn clamped_needs_bf16() -> crate::backend::BackendError {
    super::shape_err(
        "fused_moe_clamped",
        "the clamped SwiGLU runs on tensor cores with bf16 or FP4 experts only (the small-step \
         kernels with their `_any` build)"
            .into(),
    )
}

/// A build's gate|up and down kernels.
fn mma_kernels(build: MmaBuild) -> (Kernel<MmaArgs>, Kernel<MmaArgs>) {
    match build {
        MmaBuild::Bf16 => (kernels::moe_gate_up_mma_bf16, kernels::moe_down_mma_bf16),
        MmaBuild::Fp8 => (kernels::moe_gate_up_mma_fp8, kernels::moe_down_mma_fp8),
        MmaBuild::Fp8Act => (
            kernels::moe_gate_up_mma_fp8act,
            kernels::moe_down_mma_fp8act,
        ),
        MmaBuild::Nvfp4 => (kernels::moe_gate_up_mma_nvfp4, kernels::moe_down_mma_nvfp4),
        MmaBuild::Mxfp4 => (kernels::moe_gate_up_mma_mxfp4, kernels::moe_down_mma_mxfp4),
    }
}

/// The wgmma builds' gate|up and down kernels: bf16 and FP8 weights with bf16 activations
/// (`moe_wg.cu`), FP8 weights with e4m3 activations (`moe_wg8.cu`); `None` for the FP4 ones.
fn wg_kernels(build: MmaBuild) -> Option<(Kernel<MmaArgs>, Kernel<MmaArgs>)> {
    match build {
        MmaBuild::Bf16 => Some((kernels::moe_gate_up_wg_bf16, kernels::moe_down_wg_bf16)),
        MmaBuild::Fp8 => Some((kernels::moe_gate_up_wg_fp8, kernels::moe_down_wg_fp8)),
        MmaBuild::Fp8Act => Some((kernels::moe_gate_up_wg_fp8act, kernels::moe_down_wg_fp8act)),
        MmaBuild::Nvfp4 | MmaBuild::Mxfp4 => None,
    }
}

/// The gate|up and down kernels a launch takes: the wgmma build's where `wg` (and it has one),
/// else the mma.sync build's.
fn grouped_kernels(build: MmaBuild, wg: bool) -> (Kernel<MmaArgs>, Kernel<MmaArgs>) {
    match wg_kernels(build) {
        Some(k) if wg => k,
        _ => mma_kernels(build),
    }
}

/// A build's gpt-oss gate|up kernel (bias and clamped SwiGLU; `wg`: the wgmma one, bf16
/// only), `None` for the FP8 builds.
fn clamped_kernel(build: MmaBuild, wg: bool) -> Option<Kernel<ClampedMmaArgs>> {
    match build {
        MmaBuild::Bf16 if wg => Some(kernels::moe_gate_up_clamped_wg_bf16),
        MmaBuild::Bf16 => Some(kernels::moe_gate_up_clamped_mma_bf16),
        MmaBuild::Nvfp4 => Some(kernels::moe_gate_up_clamped_mma_nvfp4),
        MmaBuild::Mxfp4 => Some(kernels::moe_gate_up_clamped_mma_mxfp4),
        MmaBuild::Fp8 | MmaBuild::Fp8Act => None,
    }
}

/// The weight type a build reads (its stacks' [`DType`]).
fn build_dtype(build: MmaBuild) -> DType {
    match build {
        MmaBuild::Bf16 => DType::BF16,
        MmaBuild::Fp8 | MmaBuild::Fp8Act => DType::F8,
        MmaBuild::Nvfp4 => DType::F4,
        MmaBuild::Mxfp4 => DType::Mx4,
    }
}

/// How a grouped-GEMM kernel launches: threads, dynamic shared memory, and the pairs and
/// weight rows of a block (its static shared memory holds 2 · `bm` + `bn` ints of row tables).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MmaLaunch {
    threads: u32,
    smem: u32,
    bm: usize,
    bn: usize,
}

/// The launch of a build (`bf16`, `fp8`, `fp8act`; the FP4 builds are `bf16`'s with another
/// B-tile load): moe_mma.cu's `MmaCfg` (4 warps with bf16 weights, else 8; stages of 32
/// columns: 3 with bf16 weights, 6 with e4m3 activations, else 4); `wg`: moe_wg.cu's
/// `MwgCfg` (256 threads, 128-pair tiles; four stages of 64 columns, each the A tile, the
/// weights as stored and, FP8, their 256 rows' scales; FP8 adds two bf16 B buffers; 1024 bytes
/// to align); the e4m3-activation one (`Mwg8Cfg`): 128 weight rows, five stages of 128
/// columns, each the A and weight tiles (128 bytes a row) and a 1024-byte block of their scales.
fn launch_shape(build: MmaBuild, wg: bool) -> MmaLaunch {
    if wg && build == MmaBuild::Fp8Act {
        let stage = 128 * (WG_BM + WG8_BN) + 1024;
        return MmaLaunch {
            threads: 256,
            smem: (1024 + WG8_STAGES * stage) as u32,
            bm: WG_BM,
            bn: WG8_BN,
        };
    }
    if wg {
        let (w, scales, wide) = match build {
            MmaBuild::Bf16 => (2, 0, 0),
            _ => (1, 4 * WG_BN, 2 * WG_BN * 64 * 2),
        };
        let stage = 64 * (WG_BM * 2 + WG_BN * w) + scales;
        let smem = (1024 + 4 * stage + wide) as u32;
        return MmaLaunch {
            threads: 256,
            smem,
            bm: WG_BM,
            bn: WG_BN,
        };
    }
    let (a, w, warps, stages) = match build {
        MmaBuild::Bf16 | MmaBuild::Nvfp4 | MmaBuild::Mxfp4 => (2, 2, 4, 3),
        MmaBuild::Fp8 => (2, 1, 8, 4),
        MmaBuild::Fp8Act => (1, 1, 8, 6),
    };
    let stage = 32 * (BM * a + BN * w);
    MmaLaunch {
        threads: (32 * warps) as u32,
        smem: (stages * stage) as u32,
        bm: BM,
        bn: BN,
    }
}

/// Columns of x a `_any` kernel stages in shared memory at a time (`MOE_XS_COLS` in
/// moe_mma.cu), and the padding of each staged row (`MOE_XS_PAD`).
const ANY_XS_COLS: usize = 2048;
const ANY_XS_PAD: usize = 8;

/// Dynamic shared memory of a `_any` gate_up kernel over rows of `k` elements: 16 bf16 rows of
/// min(k, ANY_XS_COLS) + ANY_XS_PAD (65,792 bytes at k = 2048, within the H200's 227 KB a
/// block; the launch opts in past 48 KB).
/// Columns of a `moe_*_pipe` stage (PIPE_ROW_BYTES of FP8; the bf16 build's 64 are checked
/// against the same, so every width is whole stages either way).
const PIPE_COLS: usize = 128;

/// Dynamic shared memory of a `moe_*_fp8_pipe` block, PipeCfg's SMEM in moe_pipe.cu: 3 stages
/// of 128 weight rows × 128 bytes (128 FP8 columns), 16 activation rows of the stage's columns
/// (bf16, 16 bytes of padding each) and a scale a weight row.
fn pipe_smem() -> u32 {
    const STAGES: usize = 3;
    const ROWS: usize = 128;
    const ROW_BYTES: usize = 128;
    let x = 16 * (ROW_BYTES * 2 + 16);
    (STAGES * (ROWS * ROW_BYTES + x + ROWS * 4)) as u32
}

pub(super) fn any_smem(k: usize) -> u32 {
    (16 * (k.min(ANY_XS_COLS) + ANY_XS_PAD) * 2) as u32
}

impl CudaBackend {
    /// Whether `matmul` with an FP8 weight and more than 32 rows runs the tensor-core kernel
    /// (`moe_down_mma_fp8*`, one expert) instead of a bf16 copy of the weight and cuBLAS (the
    /// tuning's `gemm.fp8_matmul_mma`).
    pub(super) fn fp8_matmul_mma(&self) -> bool {
        self.tuning().gemm.fp8_matmul_mma
    }

    /// Whether `build`'s tile GEMMs (and the dense FP8 GEMM) run the wgmma kernels (moe_wg.cu,
    /// moe_wg8.cu): the tuning's `moe.expert_kernel = wgmma` (with e4m3 activations also
    /// `moe.fp8act_kernel` other than `mma`), a capability-9.0 GPU (the loader compiles it as
    /// sm_90a), and bf16 or FP8 weights.
    fn expert_wgmma(&self, build: MmaBuild) -> bool {
        let moe = self.tuning().moe;
        moe.wgmma
            && (build != MmaBuild::Fp8Act || moe.fp8act_kernel != Fp8ActKernel::Mma)
            && self.info.compute_capability == (9, 0)
            && wg_kernels(build).is_some()
    }

    /// `build`'s tile GEMM kernels (gate|up, down), their launch, and whether they are the
    /// wgmma ones ([`Self::expert_wgmma`]).
    fn tile_kernels(
        &self,
        build: MmaBuild,
    ) -> (bool, (Kernel<MmaArgs>, Kernel<MmaArgs>), MmaLaunch) {
        let wg = self.expert_wgmma(build);
        (wg, grouped_kernels(build, wg), launch_shape(build, wg))
    }

    /// Stages 3 and 4 for a small step (`moe_plan::Experts::SmallMma`): `act` [pairs,
    /// i] (bf16, pair rows) from x [t, h] (bf16), then the returned `ys` [pairs, h] (f32, pair
    /// rows). `offsets` and `active` (e + 1 each) and `perm` (pairs) are the plan's device
    /// arrays; `build`: which kernels (the split build takes FP8 and FP4 experts and at most 8
    /// tokens, the plan's choice; FP4 stacks take `moe_experts_small_fp4`); `clamp`: gpt-oss's
    /// activation (bf16 experts' `_any` build, FP4 experts' both) in place of SiLU.
    pub(super) fn moe_experts_small_mma(
        &self,
        act: &CudaTensor,
        x: &CudaTensor,
        (gate_up, down): (&CudaTensor, &CudaTensor),
        (offsets, active, perm): (u64, u64, u64),
        (t, h, e, i, top_k): (usize, usize, usize, usize, usize),
        (build, clamp): (SmallBuild, Option<ClampedAct>),
    ) -> Result<CudaTensor> {
        if super::moe_fp4::is_fp4(gate_up.dtype) {
            let arrays = (offsets, active, perm);
            let dims = (t, h, e, i, top_k);
            let plan = (build, clamp);
            return self.moe_experts_small_fp4(act, x, (gate_up, down), arrays, dims, plan);
        }
        if clamp.is_some() && (gate_up.dtype != DType::BF16 || build != SmallBuild::Any) {
            return Err(clamped_needs_bf16());
        }
        let pairs = t * top_k;
        let s = &self.stream;
        let (ei, ki, ii, hi) = (
            int(e, "fused_moe")?,
            int(top_k, "fused_moe")?,
            int(i, "fused_moe")?,
            int(h, "fused_moe")?,
        );
        let experts = dim(e.min(pairs), "fused_moe")?;
        let warps = SMALL_MMA_WARPS;
        let threads = (32 * warps) as u32;
        let (actp, xp) = (act.ptr(s), x.ptr(s));
        let (w13, w13s) = (gate_up.ptr(s), gate_up.scales_ptr(s));
        // Split: one B tile of pairs, k split over the block's warps; any: each warp over the
        // whole k, 16 pairs a chunk
        // (`moe_mma.cu`). `any`: the `_any` kernels.
        // pipe: the FP8 `_any` builds' cp.async-pipelined twins (moe_pipe.cu: same grid, same
        // bits), which take whole 128-column stages of both widths.
        let pipe = self.tuning().moe.small_pipe
            && gate_up.dtype == DType::F8
            && build == SmallBuild::Any
            && h % PIPE_COLS == 0
            && i % PIPE_COLS == 0;
        let (gate_up_kernel, down_kernel, any) = match gate_up.dtype {
            DType::F8 if build == SmallBuild::Split => (
                kernels::moe_gate_up_fp8_small,
                kernels::moe_down_fp8_small,
                false,
            ),
            DType::F8 if pipe => (
                kernels::moe_gate_up_fp8_pipe,
                kernels::moe_down_fp8_pipe,
                true,
            ),
            DType::F8 => (
                kernels::moe_gate_up_fp8_small_any,
                kernels::moe_down_fp8_small_any,
                true,
            ),
            DType::F4 | DType::Mx4 => return Err(super::not_activation("fused_moe")),
            DType::BF16 => (
                kernels::moe_gate_up_bf16_small_any,
                kernels::moe_down_bf16_small_any,
                true,
            ),
            DType::F32 => {
                return Err(super::shape_err(
                    "fused_moe",
                    "f32 experts run on the CUDA-core kernels, not the small-step ones".into(),
                ));
            }
        };
        let args = (actp, xp, w13, w13s, offsets, active, perm, ei, ki, ii, hi);
        // SAFETY: act is [pairs, i] bf16, x [t, h] bf16, gate_up [e, 2i, h] FP8 with [e·2i,
        // h/128] scales, or bf16 (the bf16 build reads no scales); offsets, active and perm were
        // written by the plan (ranges inside 0..pairs of at most t pairs an expert, which the
        // split build takes only up to 8 tokens, its one B tile; perm
        // entries < pairs, so tokens perm / k < t); h % 64 == 0 (moe_plan's small_mma), so every
        // 16-byte load is inside its row and aligned; rows past i read row i - 1 of their half
        // and are not written; block rows past the active count return; 8 warps (the kernel's
        // launch bounds); _any: the dynamic shared memory its staged x
        // rows need (any_smem); pipe: its stages (pipe_smem, checked against PipeCfg by a
        // test), and h, i multiples of 128.
        // _any: 8 j a warp (the chunk's x rows in shared memory), split 16 a block.
        let per_block = if any { 8 * warps } else { 16 };
        let mut c = cfg((dim(i.div_ceil(per_block), "fused_moe")?, experts), threads);
        let clamped = kernels::moe_gate_up_clamped_bf16_small_any;
        if pipe {
            c.shared_mem_bytes = pipe_smem();
            gate_up_kernel.allow_shared_memory(self, c.shared_mem_bytes)?;
        } else if any {
            c.shared_mem_bytes = any_smem(h);
            // Past 48 KB a block a kernel must opt in (as launch_mma does).
            if c.shared_mem_bytes as usize > 48 * 1024 {
                match clamp {
                    Some(_) => clamped.allow_shared_memory(self, c.shared_mem_bytes)?,
                    None => gate_up_kernel.allow_shared_memory(self, c.shared_mem_bytes)?,
                }
            }
        }
        // clamped: the bf16 _any build (checked above) with the gate|up bias [e, 2i] bf16
        // (ClampedAct's contract), read at rows below e·2i (experts < e, j < i).
        unsafe {
            match clamp {
                Some(ClampedAct { bias, alpha, limit }) => {
                    let (a, xp, w, ws, o, ac, p, ei, ki, ii, hi) = args;
                    let args = (a, xp, w, ws, o, ac, p, ei, ki, ii, hi, bias, alpha, limit);
                    clamped.launch(self, c, args)?
                }
                None => gate_up_kernel.launch(self, c, args)?,
            }
        }
        let ys = self.alloc(&[pairs, h], DType::F32)?; // [pairs, h]: pair rows
        let (ysp, w2, w2s) = (ys.ptr(s), down.ptr(s), down.scales_ptr(s));
        let args = (ysp, actp, w2, w2s, offsets, active, perm, ei, ii, hi);
        // _any: 16 output columns a warp, split 16 a block.
        let per_block = if any { 16 * warps } else { 16 };
        let mut c = cfg((dim(h.div_ceil(per_block), "fused_moe")?, experts), threads);
        if pipe {
            c.shared_mem_bytes = pipe_smem();
            down_kernel.allow_shared_memory(self, c.shared_mem_bytes)?;
        }
        // SAFETY: ys is [pairs, h] f32, act [pairs, i] bf16 (every row written by gate_up:
        // each pair is in exactly one expert's range), down [e, h, i] FP8 with [e·h, i/128]
        // scales, or bf16; i % 64 == 0; the plan's arrays as above; columns past h read row
        // h - 1 and are not written; block rows past the active count return; pipe: its
        // stages' shared memory (set above).
        unsafe {
            down_kernel.launch(self, c, args)?;
        }
        Ok(ys)
    }

    /// Stages 3 and 4 of `fused_moe` on tensor cores: `act` [pairs, i] (bf16, pair rows) from x
    /// [t, h] (bf16) and gate_up, then the returned `ys` [pairs, h] (f32, pair rows) from act
    /// and down. `offsets` (e + 1) and `perm` (pairs) are the grouping's device arrays;
    /// `clamp`: gpt-oss's activation (the bf16 and FP4 builds) in place of SiLU. The stacks must
    /// be of the build's type (FP4 ones an [`fp4_pair`](super::moe_fp4::fp4_pair)).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn moe_experts_mma(
        &self,
        act: &CudaTensor,
        x: &CudaTensor,
        gate_up: &CudaTensor,
        down: &CudaTensor,
        (offsets, perm): (u64, u64),
        (t, h, e, i, top_k): (usize, usize, usize, usize, usize),
        (build, clamp): (MmaBuild, Option<ClampedAct>),
    ) -> Result<CudaTensor> {
        // The FP4 builds read whole 32-value slices of 16 packed bytes (4-byte loads).
        let want = build_dtype(build);
        let fp4 = matches!(want, DType::F4 | DType::Mx4);
        let rows_fit = !fp4 || (h.is_multiple_of(32) && i.is_multiple_of(32));
        if gate_up.dtype != want || down.dtype != want || !rows_fit {
            return Err(super::shape_err(
                "fused_moe",
                format!(
                    "the {} tensor-core build takes {want:?} experts (FP4: h and i multiples of \
                     32), not {:?} and {:?} with h {h}, i {i}",
                    build.name(),
                    gate_up.dtype,
                    down.dtype
                ),
            ));
        }
        let (wg, (gate_up_kernel, down_kernel), shape) = self.tile_kernels(build);
        let clamped = match clamp {
            Some(_) => Some(clamped_kernel(build, wg).ok_or_else(clamped_needs_bf16)?),
            None => None,
        };
        let pairs = t * top_k;
        let s = &self.stream;
        // An upper bound of the tiles: each expert's ceil(count / bm), at most one a pair.
        let bm = shape.bm;
        let max_tiles = pairs.min((pairs + e * (bm - 1)) / bm);
        let tiles = self.alloc(&[2 * max_tiles], DType::F32)?; // i32 [max_tiles, 2]
        let (tp, mt, ei) = (
            tiles.ptr(s),
            int(max_tiles, "fused_moe")?,
            int(e, "fused_moe")?,
        );
        // SAFETY: offsets holds e + 1 entries (moe_group's or moe_plan's: ascending, ending at
        // pairs), tiles 2 · max_tiles; the kernel writes entries below max_tiles only; one
        // block. moe_tiles_wg lists the wgmma kernels' 128-pair tiles, moe_tiles 64-pair ones.
        let tiles_kernel = if wg {
            kernels::moe_tiles_wg
        } else {
            kernels::moe_tiles
        };
        unsafe {
            tiles_kernel.launch(self, cfg((1, 1), TILE_THREADS), (tp, offsets, ei, mt))?;
        }

        let (ki, ii, hi) = (
            int(top_k, "fused_moe")?,
            int(i, "fused_moe")?,
            int(h, "fused_moe")?,
        );
        let x_q = (build == MmaBuild::Fp8Act)
            .then(|| self.quant_fp8(x))
            .transpose()?;
        let (xp, xsp) = x_q
            .as_ref()
            .map_or((x.ptr(s), 0), |q| (q.ptr(s), q.scales_ptr(s)));
        let rows = dim(max_tiles, "fused_moe")?;
        let (p2, p3, p4) = self.mma_operands(build, xsp, gate_up);
        // SAFETY: act is [pairs, i] bf16; the A operand x [t, h] bf16 (or its e4m3 copy with
        // [t, ceil(h/128)] scales); gate_up [e, 2i, h] of the build's type (checked above:
        // bf16, FP8 with its scales, or an FP4 stack with its scale bytes and, NVFP4, its
        // multipliers); tiles was just written from offsets, whose ranges lie in 0..pairs, perm
        // entries < pairs (so tokens perm / k < t); rows of h and i are multiples of 8 elements
        // (bf16), 16 bytes (FP8) or 32 values (FP4: whole 16-byte slices; moe_plan's mma);
        // blocks past the tile count return. clamped: a bf16 or FP4 build (clamped_kernel) and
        // the gate|up bias [e, 2i] bf16 (ClampedAct's contract), read at rows below e·2i (tile
        // experts < e, j < i).
        let grid = (rows, dim(i.div_ceil(shape.bn / 2), "fused_moe")?);
        let args = (act.ptr(s), xp, p2, p3, p4, tp, offsets, perm, ki, ii, hi);
        unsafe {
            match (clamp, clamped) {
                (Some(ClampedAct { bias, alpha, limit }), Some(f)) => {
                    let (a, xp, p2, p3, p4, tp, o, p, ki, ii, hi) = args;
                    let args = (a, xp, p2, p3, p4, tp, o, p, ki, ii, hi, bias, alpha, limit);
                    self.launch_mma(&f, shape, grid, args)?
                }
                _ => self.launch_mma(&gate_up_kernel, shape, grid, args)?,
            }
        }
        let act_q = (build == MmaBuild::Fp8Act)
            .then(|| self.quant_fp8(act))
            .transpose()?;
        let (ap, asp) = act_q
            .as_ref()
            .map_or((act.ptr(s), 0), |q| (q.ptr(s), q.scales_ptr(s)));
        let ys = self.alloc(&[pairs, h], DType::F32)?; // [pairs, h]: pair rows
        let (p2, p3, p4) = self.mma_operands(build, asp, down);
        // SAFETY: ys is [pairs, h] f32, act [pairs, i] bf16 (every row written by gate_up, each
        // pair being in exactly one tile) or its e4m3 copy; down [e, h, i] of the build's type
        // with its scales (FP4: scale bytes and multipliers); tiles, offsets and perm as above.
        unsafe {
            self.launch_mma(
                &down_kernel,
                shape,
                (rows, dim(h.div_ceil(shape.bn), "fused_moe")?),
                (ys.ptr(s), ap, p2, p3, p4, tp, offsets, perm, 0, hi, ii),
            )?;
        }
        Ok(ys)
    }

    /// The three pointers after the A operand in a build's kernels: the A operand's scales
    /// (`a_scales`, 0 without), the weight and its scales; for the FP4 builds (bf16 A, no
    /// scales) the packed stack, its scale bytes and its row multipliers (0 for MXFP4).
    fn mma_operands(&self, build: MmaBuild, a_scales: u64, w: &CudaTensor) -> (u64, u64, u64) {
        let s = &self.stream;
        match build {
            MmaBuild::Nvfp4 | MmaBuild::Mxfp4 => {
                let f = self.fp4_ptrs(w);
                (f.w, f.scales, f.globals)
            }
            _ => (a_scales, w.ptr(s), w.scales_ptr(s)),
        }
    }

    /// `out[m, n] = x[m, k] · w[n, k]ᵀ` for an FP8 `w` on tensor cores: the down kernel with
    /// one expert and no tiles or permutation. The caller has checked the shapes and made `out`
    /// f32 with m, n, k > 0. k must be a multiple of 16 (false is returned and nothing launched
    /// otherwise, or when the GPU is older than 8.0).
    pub(super) fn matmul_fp8_mma(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        w: &CudaTensor,
    ) -> Result<bool> {
        let (m, k, n) = (x.rows(), x.cols(), w.rows());
        if !k.is_multiple_of(16)
            || self.info.compute_capability < Module::MoeMma.min_compute_capability()
        {
            return Ok(false);
        }
        let mut narrowed = None;
        let x = self.as_bf16(x, &mut narrowed)?;
        let build = moe_plan::fp8_build(self.info.compute_capability, &self.tuning().moe);
        let x_q = (build == MmaBuild::Fp8Act)
            .then(|| self.quant_fp8(x))
            .transpose()?;
        let s = &self.stream;
        let (xp, xsp) = x_q
            .as_ref()
            .map_or((x.ptr(s), 0), |q| (q.ptr(s), q.scales_ptr(s)));
        let (mi, ni, ki) = (int(m, "matmul")?, int(n, "matmul")?, int(k, "matmul")?);
        let (wp, wsp) = (w.ptr(s), w.scales_ptr(s));
        let (_, (_, kernel), shape) = self.tile_kernels(build);
        // SAFETY: out is [m, n] f32 (the caller's checks), x [m, k] bf16 (or its
        // e4m3 copy with [m, ceil(k/128)] scales), w [n, k] FP8 with its scales; k % 16 == 0 so
        // every 16-byte load of a row is aligned and inside it; null tiles, offsets and perm:
        // block x covers rows bm·x .. bm·x + bm - 1 < m + bm - 1 (rows past m are not read or
        // written).
        unsafe {
            self.launch_mma(
                &kernel,
                shape,
                (
                    dim(m.div_ceil(shape.bm), "matmul")?,
                    dim(n.div_ceil(shape.bn), "matmul")?,
                ),
                (out.ptr(s), xp, xsp, wp, wsp, 0, 0, 0, mi, ni, ki),
            )?;
        }
        Ok(true)
    }

    /// The MTP drafts' FP8 copy of a bf16 LM head (`Backend::draft_head`): `quant_fp8`'s
    /// rows, which `matmul` reads as an FP8 weight (`gemv_fp8_m1` at one row: half the bytes
    /// of the bf16 head, the largest read of a draft). `None` when the tuning's
    /// `gemm.fp8_draft_head` is off, the head is not bf16 or the GPU lacks the kernel.
    pub(super) fn draft_head_op(&self, head: &CudaTensor) -> Result<Option<CudaTensor>> {
        let fits = self.tuning().gemm.fp8_draft_head
            && head.dtype == DType::BF16
            && head.shape.len() == 2
            && head.cols().is_multiple_of(64)
            && self.info.compute_capability >= Module::MoeMma.min_compute_capability();
        if !fits {
            return Ok(None);
        }
        self.quant_fp8(head).map(Some)
    }

    /// x (f32 or bf16, [rows, k]) as e4m3 with one scale per row and 128 columns: an FP8
    /// tensor (the weights' layout).
    fn quant_fp8(&self, x: &CudaTensor) -> Result<CudaTensor> {
        let (rows, k) = (x.rows(), x.cols());
        let q = self.alloc(&[rows, k], DType::F8)?;
        if rows == 0 {
            return Ok(q);
        }
        let f = match x.dtype {
            DType::BF16 => kernels::moe_quant_fp8_bf16,
            DType::F32 => kernels::moe_quant_fp8_f32,
            DType::F8 | DType::F4 | DType::Mx4 => return Err(super::not_activation("fused_moe")),
        };
        let s = &self.stream;
        let (qp, sp, xp, r, ki) = (
            q.ptr(s),
            q.scales_ptr(s),
            x.ptr(s),
            rows as u64,
            int(k, "fused_moe")?,
        );
        // SAFETY: q is an FP8 [rows, k] tensor (rows · k bytes, then rows · ceil(k/128) f32
        // scales), x [rows, k] of the kernel's type; a warp per row, rows past `rows` return.
        unsafe {
            f.launch(
                self,
                cfg(
                    (dim(rows.div_ceil(QUANT_ROWS), "fused_moe")?, 1),
                    (32 * QUANT_ROWS) as u32,
                ),
                (qp, sp, xp, r, ki),
            )?;
        }
        Ok(q)
    }

    /// One launch of `kernel`, `moe_gate_up_{mma,wg}_{build}` or `moe_down_{mma,wg}_{build}`
    /// (see [`MmaArgs`]), or `moe_gate_up_clamped_{mma,wg}_{build}` (those and a
    /// [`ClampedAct`]'s), with the kernel's [`launch_shape`].
    ///
    /// # Safety
    /// The pointers and sizes must be what the kernel's comment in moe_mma.cu asks for at this
    /// grid: out, a and w sized for the rows the tiles (or, with null tiles, the first int) and
    /// the ints name, rows 16-byte aligned.
    unsafe fn launch_mma<A: Args>(
        &self,
        kernel: &Kernel<A>,
        shape: MmaLaunch,
        grid: (u32, u32),
        args: A,
    ) -> Result<()> {
        // Past 48 KB of shared memory a block, static (the kernel's row tables: 2 · bm + bn
        // ints) and dynamic together, a kernel must opt in, or its launch fails with an invalid
        // argument (the mma.sync builds stay below; the wgmma ones take about 200 KB).
        if shape.smem as usize + 4 * (2 * shape.bm + shape.bn) > 48 * 1024 {
            kernel.allow_shared_memory(self, shape.smem)?;
        }
        let mut c = cfg(grid, shape.threads);
        c.shared_mem_bytes = shape.smem;
        // SAFETY: the caller's contract (above); threads and dynamic shared memory are the
        // kernel's MmaCfg / MwgCfg THREADS (its launch bounds) and SMEM (launch_shape).
        unsafe { kernel.launch(self, c, args) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_name_their_kernels() {
        for build in [
            MmaBuild::Bf16,
            MmaBuild::Fp8,
            MmaBuild::Fp8Act,
            MmaBuild::Nvfp4,
            MmaBuild::Mxfp4,
        ] {
            let (g, d) = mma_kernels(build);
            assert_eq!(g.name(), format!("moe_gate_up_mma_{}", build.name()));
            assert_eq!(d.name(), format!("moe_down_mma_{}", build.name()));
            if let Some(c) = clamped_kernel(build, false) {
                let want = format!("moe_gate_up_clamped_mma_{}", build.name());
                assert_eq!(c.name(), want);
            }
            if let Some((g, d)) = wg_kernels(build) {
                assert_eq!(g.name(), format!("moe_gate_up_wg_{}", build.name()));
                assert_eq!(d.name(), format!("moe_down_wg_{}", build.name()));
            }
        }
        let c = clamped_kernel(MmaBuild::Bf16, true).map(|k| k.name());
        assert_eq!(c, Some("moe_gate_up_clamped_wg_bf16"));
        // The FP4 builds launch as the bf16 one (moe_mma_fp4.cu: MmaCfg<0>).
        for build in [MmaBuild::Nvfp4, MmaBuild::Mxfp4] {
            assert_eq!(
                launch_shape(build, false),
                launch_shape(MmaBuild::Bf16, false)
            );
        }
    }

    #[test]
    fn wgmma_shared_memory_is_mwgcfgs() {
        // MwgCfg<0>::SMEM and MwgCfg<1>::SMEM in moe_wg.cu, within the 227 KB a block may
        // take beside its static row tables.
        for (build, smem) in [(MmaBuild::Bf16, 197_632), (MmaBuild::Fp8, 201_728)] {
            let l = launch_shape(build, true);
            assert_eq!((l.threads, l.smem, l.bm, l.bn), (256, smem, WG_BM, WG_BN));
            assert!(smem as usize + 4 * (2 * WG_BM + WG_BN) <= 227 * 1024);
        }
        // Mwg8Cfg::SMEM in moe_wg8.cu: 1024 + 5 stages of 33 KB.
        let l = launch_shape(MmaBuild::Fp8Act, true);
        assert_eq!(
            (l.threads, l.smem, l.bm, l.bn),
            (256, 169_984, WG_BM, WG8_BN)
        );
        // The row tables beside it.
        assert!(l.smem as usize + 4 * (2 * WG_BM + WG8_BN) <= 227 * 1024);
        let (g, d) = grouped_kernels(MmaBuild::Fp8Act, true);
        assert_eq!(
            (g.name(), d.name()),
            ("moe_gate_up_wg_fp8act", "moe_down_wg_fp8act")
        );
    }

    #[test]
    fn pipe_shared_memory_is_pipecfgs() {
        // PipeCfg::SMEM in moe_pipe.cu, three blocks of which fit a multiprocessor's 227 KB
        // (the kernels' launch bounds ask for three).
        assert_eq!(pipe_smem(), 63_744);
        assert!(3 * pipe_smem() as usize <= 227 * 1024);
    }
}
