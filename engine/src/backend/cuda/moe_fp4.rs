//! FP4 experts kept packed on the device (`moe_fp4.cu`): the launches of `fused_moe`'s and
//! `fused_moe_clamped`'s stages 3-4 when the expert stacks are NVFP4 ([`DType::F4`]: packed
//! E2M1 pairs, an E4M3 scale byte per 16 values, an f32 multiplier a row: the expert's global
//! repeated over its rows) or MXFP4 ([`DType::Mx4`], gpt-oss's: packed pairs, an E8M0 scale
//! byte per 32 values); the uploads of MXFP4 stacks, a checkpoint's and dummy ones drawn on
//! the device. The routing before and the weighted sums after are `moe.rs`'s.
//!
//! Steps with few tokens an expert run the CUDA-core kernels `moe_gate_up_{nvfp4,mxfp4}`,
//! `moe_down_*` / `moe_down_combine_*` (and `moe_gate_up_clamped_*` for gpt-oss's experts,
//! `moe_up_relu2_*` for Nemotron-H's, the latter at every size: `nemotron_moe.rs`),
//! which read the packed bytes: 0.5625 (NVFP4) or 0.53 (MXFP4) bytes a weight against bf16's
//! 2; one-token steps their `_dec` twins (a lane's loads of a row all in flight, gpt-oss's
//! down bias inside the fused down + weighted sum). Steps the plan sends to tensor cores (`Experts::Mma` with the `nvfp4` or `mxfp4` build)
//! run `moe_mma_fp4.cu`'s 64-row tiles on the same packed stacks (`moe_mma.rs`), for
//! `fused_moe` and gpt-oss's `fused_moe_clamped` alike; decode batches (`Experts::SmallMma`)
//! its `_small_any` kernels, the expert's pairs as the mma's B columns
//! ([`CudaBackend::moe_experts_small_fp4`]). A stack whose pair is not an
//! [`fp4_pair`] (one stack packed, the other widened at upload) is widened to bf16 for the
//! step ([`CudaBackend::fp4_or_widened`]).

use super::elementwise::{cfg, dim, int};
use super::moe::{ExpertAct, expert_rows_cfg};
use super::moe_mma::{ClampedAct, SMALL_MMA_WARPS, any_smem};
use super::tensor::{self, CudaTensor, DType};
use super::{CudaBackend, check, dev_err};
use crate::backend::Result;
use crate::backend::kernels::{self, Kernel};
use crate::backend::moe_plan::{CoreBuild, Down, GateUp, SmallBuild};
use crate::loader::{MXFP4_SCALE_STREAM, random_mxfp4_scale_base};

/// Rows of a multiple of this many values: the kernels' 16-byte chunks (32 values).
pub(super) const FP4_ROW_ALIGN: usize = 32;

/// The gate|up kernels' parameters: act, x, w, scales, globals, offsets, active, perm,
/// experts, top_k, inter, hidden.
type GateUpArgs = (u64, u64, u64, u64, u64, u64, u64, u64, i32, i32, i32, i32);
/// The down kernels': ys, act, w, scales, globals, offsets, active, perm, experts, inter,
/// hidden.
type DownArgs = (u64, u64, u64, u64, u64, u64, u64, u64, i32, i32, i32);
/// The fused down + weighted sum's: out, act, w, scales, globals, ids, weights, tokens, top_k,
/// inter, hidden.
type DownCombineArgs = (u64, u64, u64, u64, u64, u64, u64, i32, i32, i32, i32);
/// The one-token down + weighted sum's: [`DownCombineArgs`], then gpt-oss's down bias (bf16
/// `[E, H]`, or 0 for none).
type DownCombineDecArgs = (u64, u64, u64, u64, u64, u64, u64, i32, i32, i32, i32, u64);
/// gpt-oss's gate|up: [`GateUpArgs`], then the gate|up bias (bf16), alpha, limit.
type ClampedArgs = (
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
    i32,
    u64,
    f32,
    f32,
);

/// The FP4 kernels of a build: gate|up, down, down + weighted sum, gpt-oss's gate|up,
/// Nemotron-H's up + relu², and the one-token `_dec` kernels (gate|up, gpt-oss's gate|up, down
/// + weighted sum at 1, 2 and 4 columns a block).
pub(super) struct Fp4Kernels {
    pub gate_up: Kernel<GateUpArgs>,
    pub down: Kernel<DownArgs>,
    pub down_combine: Kernel<DownCombineArgs>,
    pub clamped: Kernel<ClampedArgs>,
    pub relu2: Kernel<GateUpArgs>,
    pub gate_up_dec: Kernel<GateUpArgs>,
    pub clamped_dec: Kernel<ClampedArgs>,
    pub down_combine_dec: [Kernel<DownCombineDecArgs>; 3],
    /// The split tensor-core gate|up (`moe_fp4_small.cu`), plain and gpt-oss's.
    pub gate_up_split: Kernel<GateUpArgs>,
    pub clamped_split: Kernel<ClampedArgs>,
}

impl Fp4Kernels {
    /// gate|up as the plan names it: the one-token `_dec` kernel or the plain one.
    fn gate_up_of(&self, kind: GateUp) -> &Kernel<GateUpArgs> {
        match kind {
            GateUp::Decode => &self.gate_up_dec,
            GateUp::Plain => &self.gate_up,
            GateUp::Split => &self.gate_up_split,
        }
    }

    /// gpt-oss's clamped gate|up as the plan names it.
    fn clamped_of(&self, kind: GateUp) -> &Kernel<ClampedArgs> {
        match kind {
            GateUp::Decode => &self.clamped_dec,
            GateUp::Plain => &self.clamped,
            GateUp::Split => &self.clamped_split,
        }
    }

    /// The `_dec` down + weighted sum of `cols` (1, 2 or 4) columns a block.
    fn down_combine_dec_of(&self, cols: usize) -> Option<&Kernel<DownCombineDecArgs>> {
        match cols {
            1 => Some(&self.down_combine_dec[0]),
            2 => Some(&self.down_combine_dec[1]),
            4 => Some(&self.down_combine_dec[2]),
            _ => None,
        }
    }
}

/// The kernels of an FP4 build (`None` for the others).
pub(super) fn fp4_kernels(build: CoreBuild) -> Option<Fp4Kernels> {
    match build {
        CoreBuild::Nvfp4 => Some(Fp4Kernels {
            gate_up: kernels::moe_gate_up_nvfp4,
            down: kernels::moe_down_nvfp4,
            down_combine: kernels::moe_down_combine_nvfp4,
            clamped: kernels::moe_gate_up_clamped_nvfp4,
            relu2: kernels::moe_up_relu2_nvfp4,
            gate_up_dec: kernels::moe_gate_up_dec_nvfp4,
            clamped_dec: kernels::moe_gate_up_clamped_dec_nvfp4,
            down_combine_dec: [
                kernels::moe_down_combine_dec1_nvfp4,
                kernels::moe_down_combine_dec2_nvfp4,
                kernels::moe_down_combine_dec4_nvfp4,
            ],
            gate_up_split: kernels::moe_gate_up_nvfp4_small,
            clamped_split: kernels::moe_gate_up_clamped_nvfp4_small,
        }),
        CoreBuild::Mxfp4 => Some(Fp4Kernels {
            gate_up: kernels::moe_gate_up_mxfp4,
            down: kernels::moe_down_mxfp4,
            down_combine: kernels::moe_down_combine_mxfp4,
            clamped: kernels::moe_gate_up_clamped_mxfp4,
            relu2: kernels::moe_up_relu2_mxfp4,
            gate_up_dec: kernels::moe_gate_up_dec_mxfp4,
            clamped_dec: kernels::moe_gate_up_clamped_dec_mxfp4,
            down_combine_dec: [
                kernels::moe_down_combine_dec1_mxfp4,
                kernels::moe_down_combine_dec2_mxfp4,
                kernels::moe_down_combine_dec4_mxfp4,
            ],
            gate_up_split: kernels::moe_gate_up_mxfp4_small,
            clamped_split: kernels::moe_gate_up_clamped_mxfp4_small,
        }),
        _ => None,
    }
}

/// The grid of an FP4 gate|up the plan names: the split kernels' 16 rows of I a block, k over
/// its [`SMALL_MMA_WARPS`] warps (a row's first scale byte a 32-bit offset: the stack's scale
/// bytes below 2^32), else a warp a row ([`expert_rows_cfg`]).
fn gate_up_cfg(
    kind: GateUp,
    (t, e, h, i): (usize, usize, usize, usize),
    experts: u32,
    op: &'static str,
) -> Result<cudarc::driver::LaunchConfig> {
    if kind != GateUp::Split {
        return expert_rows_cfg(i, experts, op);
    }
    // MXFP4's 32 values a scale byte at most halve NVFP4's count: NVFP4's bound covers both.
    check_split((t, e, h, i), true, op)?;
    Ok(cfg(
        (dim(i.div_ceil(16), op)?, experts),
        (32 * SMALL_MMA_WARPS) as u32,
    ))
}

/// The split kernels' limits (`moe_fp4_small.cu`): one B tile (at most 8 pairs an expert,
/// which at most 8 tokens give) and a row's first scale byte a 32-bit offset (both stacks'
/// scale bytes below 2^32; `nv`: 16 values a byte, else MXFP4's 32).
fn check_split(
    (t, e, h, i): (usize, usize, usize, usize),
    nv: bool,
    op: &'static str,
) -> Result<()> {
    let block = if nv { 16 } else { 32 };
    if t > 8 || (e * 2 * i).max(e * h) * h.max(i) / block > u32::MAX as usize {
        return Err(super::shape_err(
            op,
            format!(
                "the split FP4 kernels take at most 8 tokens and stacks of fewer than 2^32 \
                 scale bytes (got {t} tokens, {e} experts of {i} x {h})"
            ),
        ));
    }
    Ok(())
}

/// An FP4 stack's device addresses: packed pairs, scale bytes, per-row multipliers.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fp4Ptrs {
    pub w: u64,
    pub scales: u64,
    pub globals: u64,
}

/// The routing's device pointers the expert launches read: ids, weights, offsets, perm,
/// active (`moe.rs`'s `RouteScratch::ptrs` order).
pub(super) type Routing = (u64, u64, u64, u64, u64);

/// Whether `d` is an FP4 weight type (NVFP4 or MXFP4).
pub(super) fn is_fp4(d: DType) -> bool {
    matches!(d, DType::F4 | DType::Mx4)
}

/// Whether `(gate_up, down)` are FP4 stacks the kernels take: both NVFP4 or both MXFP4, rows
/// of whole 32-value chunks (h and i multiples of [`FP4_ROW_ALIGN`]).
pub(super) fn fp4_pair(
    (gate_up, down): (&CudaTensor, &CudaTensor),
    (h, i): (usize, usize),
) -> bool {
    is_fp4(gate_up.dtype)
        && down.dtype == gate_up.dtype
        && h.is_multiple_of(FP4_ROW_ALIGN)
        && i.is_multiple_of(FP4_ROW_ALIGN)
}

impl CudaBackend {
    /// Stages 3 and 4 of a decode batch on FP4 stacks kept packed (`Experts::SmallMma`):
    /// `moe_gate_up[_clamped]_{nvfp4,mxfp4}_small[_any]` into `act` [pairs, i] (bf16, pair
    /// rows), then `moe_down_*_small[_any]` into the returned ys [pairs, h] (f32, pair rows), on
    /// the grids of `moe_experts_small_mma`'s FP8 launches of the same build: `Split`
    /// (`moe_fp4_small.cu`, up to 8 tokens: one B tile, k split over the warps) or `Any`
    /// (`moe_mma_fp4.cu`). `offsets`, `active` (e + 1 each) and `perm` (pairs) are the plan's
    /// device arrays; `clamp`: gpt-oss's bias and activation in place of SiLU.
    pub(super) fn moe_experts_small_fp4(
        &self,
        act: &CudaTensor,
        x: &CudaTensor,
        (gate_up, down): (&CudaTensor, &CudaTensor),
        (offsets, active, perm): (u64, u64, u64),
        (t, h, e, i, top_k): (usize, usize, usize, usize, usize),
        (build, clamp): (SmallBuild, Option<ClampedAct>),
    ) -> Result<CudaTensor> {
        let nv = gate_up.dtype == DType::F4;
        let split = build == SmallBuild::Split;
        if !is_fp4(gate_up.dtype)
            || down.dtype != gate_up.dtype
            || !h.is_multiple_of(64)
            || !i.is_multiple_of(64)
        {
            return Err(super::shape_err(
                "fused_moe",
                format!(
                    "the small-step FP4 kernels take two stacks of one FP4 type with widths a \
                     multiple of 64 (got {:?} and {:?}, hidden {h}, intermediate {i})",
                    gate_up.dtype, down.dtype
                ),
            ));
        }
        let s = &self.stream;
        let pairs = t * top_k;
        let (ei, ki, ii, hi) = (
            int(e, "fused_moe")?,
            int(top_k, "fused_moe")?,
            int(i, "fused_moe")?,
            int(h, "fused_moe")?,
        );
        if split {
            check_split((t, e, h, i), nv, "fused_moe")?;
        }
        let experts = dim(e.min(pairs), "fused_moe")?;
        let threads = (32 * SMALL_MMA_WARPS) as u32;
        let (g, d) = (self.fp4_ptrs(gate_up), self.fp4_ptrs(down));
        // Split: 16 j a block. Any: 8 j a warp; the chunk's x rows staged in dynamic shared
        // memory.
        let per_block = if split { 16 } else { 8 * SMALL_MMA_WARPS };
        let mut c = cfg((dim(i.div_ceil(per_block), "fused_moe")?, experts), threads);
        if !split {
            c.shared_mem_bytes = any_smem(h);
        }
        let opt_in = c.shared_mem_bytes as usize > 48 * 1024;
        let args: GateUpArgs = (
            act.ptr(s),
            x.ptr(s),
            g.w,
            g.scales,
            g.globals,
            offsets,
            active,
            perm,
            ei,
            ki,
            ii,
            hi,
        );
        let (gate_up_kernel, clamped_kernel, down_kernel) = match (split, nv) {
            (true, true) => (
                kernels::moe_gate_up_nvfp4_small,
                kernels::moe_gate_up_clamped_nvfp4_small,
                kernels::moe_down_nvfp4_small,
            ),
            (true, false) => (
                kernels::moe_gate_up_mxfp4_small,
                kernels::moe_gate_up_clamped_mxfp4_small,
                kernels::moe_down_mxfp4_small,
            ),
            (false, true) => (
                kernels::moe_gate_up_nvfp4_small_any,
                kernels::moe_gate_up_clamped_nvfp4_small_any,
                kernels::moe_down_nvfp4_small_any,
            ),
            (false, false) => (
                kernels::moe_gate_up_mxfp4_small_any,
                kernels::moe_gate_up_clamped_mxfp4_small_any,
                kernels::moe_down_mxfp4_small_any,
            ),
        };
        // SAFETY: act is [pairs, i] bf16, x [t, h] bf16, gate_up [e, 2i, h] packed FP4 of
        // gate_up.dtype with its scale bytes and (NVFP4) row multipliers (fp4_ptrs); h, i
        // multiples of 64 (checked), so every 8- or 16-byte load is inside its row and
        // aligned (split: at most 8 pairs an expert, t <= 8, and 32-bit scale offsets,
        // checked);
        // offsets, active and perm were written by the plan (pairs < t · top_k, tokens perm /
        // top_k < t); rows past i read row i - 1 of their half and are not written; block rows
        // past the active count return; 8 warps (the launch bounds) and the staged x rows'
        // shared memory (any_smem, opted into past 48 KB); clamped: the bias [e, 2i] bf16
        // (ClampedAct's contract).
        unsafe {
            match clamp {
                Some(ClampedAct { bias, alpha, limit }) => {
                    if opt_in {
                        clamped_kernel.allow_shared_memory(self, c.shared_mem_bytes)?;
                    }
                    let (a, xp, w, sc, gl, o, ac, p, ei, ki, ii, hi) = args;
                    let args = (
                        a, xp, w, sc, gl, o, ac, p, ei, ki, ii, hi, bias, alpha, limit,
                    );
                    clamped_kernel.launch(self, c, args)?
                }
                None => {
                    if opt_in {
                        gate_up_kernel.allow_shared_memory(self, c.shared_mem_bytes)?;
                    }
                    gate_up_kernel.launch(self, c, args)?
                }
            }
        }
        let ys = self.alloc(&[pairs, h], DType::F32)?;
        // 16 output columns a block (split) or a warp (any).
        let per_block = if split { 16 } else { 16 * SMALL_MMA_WARPS };
        let c = cfg((dim(h.div_ceil(per_block), "fused_moe")?, experts), threads);
        let args: DownArgs = (
            ys.ptr(s),
            act.ptr(s),
            d.w,
            d.scales,
            d.globals,
            offsets,
            active,
            perm,
            ei,
            ii,
            hi,
        );
        // SAFETY: ys is [pairs, h] f32, act [pairs, i] bf16 (every row written by gate_up: each
        // pair is in exactly one expert's range), down [e, h, i] packed FP4 of the same type
        // (checked); i % 64 == 0; the plan's arrays as above; columns past h read row h - 1
        // and are not written; block rows past the active count return.
        unsafe { down_kernel.launch(self, c, args)? }
        Ok(ys)
    }

    /// `t` as the expert kernels take it: itself, or (an FP4 stack whose pair is not
    /// [`fp4_pair`]: the upload keeps a 3-D stack packed by its own rows and columns, so a
    /// model whose intermediate size is 16 mod 32 has one stack packed and one widened) its
    /// bf16 copy for this step, held in `held`.
    pub(super) fn fp4_or_widened<'a>(
        &self,
        t: &'a CudaTensor,
        pair: bool,
        held: &'a mut Option<CudaTensor>,
    ) -> Result<&'a CudaTensor> {
        if !is_fp4(t.dtype) || pair {
            return Ok(t);
        }
        Ok(held.insert(self.widen_fp4(t)?))
    }

    /// `t`'s [`Fp4Ptrs`] (MXFP4: no multipliers, 0).
    pub(super) fn fp4_ptrs(&self, t: &CudaTensor) -> Fp4Ptrs {
        let s = &self.stream;
        Fp4Ptrs {
            w: t.ptr(s),
            scales: t.scales_ptr(s),
            // MXFP4 has no multipliers (the kernels read none).
            globals: match t.dtype {
                DType::F4 => self.f4_globals_ptr(t),
                _ => 0,
            },
        }
    }

    /// An FP4 stack's values as a bf16 tensor of its shape (a stray stack's copy for the step,
    /// [`Self::fp4_or_widened`]): NVFP4's `e2m1 · f32(e4m3 · multiplier)` rounded once, MXFP4's `e2m1 · 2^(e8m0 − 127)`
    /// exactly.
    pub(super) fn widen_fp4(&self, w: &CudaTensor) -> Result<CudaTensor> {
        let mut out = self.alloc(&w.shape, DType::BF16)?;
        match w.dtype {
            DType::F4 => self.dequant_nvfp4(&mut out, w)?,
            DType::Mx4 => {
                let (rows, k) = (w.rows() as u64, w.cols());
                if rows * k as u64 > 0 {
                    let s = &self.stream;
                    let args = (
                        out.ptr(s),
                        w.ptr(s),
                        w.scales_ptr(s),
                        rows,
                        super::elementwise::int(k, "fused_moe")?,
                    );
                    // SAFETY: out is rows·k bf16 (w's shape), w rows·k Mx4 with k % 32 == 0
                    // (checked at upload): grid-stride over rows·k / 8 packed words (a thread
                    // a word: one aligned 16-byte store), each inside one row, with its block's
                    // one scale byte.
                    unsafe {
                        kernels::dequant_mxfp4_bf16.launch(
                            self,
                            super::elementwise::stride_cfg(rows * k as u64 / 8),
                            args,
                        )?;
                    }
                }
            }
            d => {
                return Err(super::shape_err(
                    "fused_moe",
                    format!("widen_fp4 of a {d:?} tensor"),
                ));
            }
        }
        Ok(out)
    }

    /// An Mx4 expert stack from the host's MXFP4 parts (`shape` 3-D, cols % 32 == 0):
    /// `packed` `numel / 2` bytes, `scales` `numel / 32`.
    pub(super) fn upload_mxfp4(
        &self,
        shape: &[usize],
        packed: &[u8],
        scales: &[u8],
    ) -> Result<CudaTensor> {
        let numel: usize = shape.iter().product();
        let cols = shape.last().copied().unwrap_or(1);
        check(
            "upload",
            shape.len() == 3
                && cols.is_multiple_of(FP4_ROW_ALIGN)
                && packed.len() == numel / 2
                && scales.len() == numel / 32,
            || {
                format!(
                    "MXFP4 tensor {shape:?}: {} packed bytes, {} scales",
                    packed.len(),
                    scales.len()
                )
            },
        )?;
        let mut t = self.alloc(shape, DType::Mx4)?;
        let so = tensor::f4_scales_offset(numel);
        for (at, bytes, what) in [
            (0, packed, "upload MXFP4 weight"),
            (so, scales, "upload MXFP4 scales"),
        ] {
            if bytes.is_empty() {
                continue;
            }
            let mut dst = t.buf.slice_mut(at..at + bytes.len());
            self.stream
                .memcpy_htod(bytes, &mut dst)
                .map_err(dev_err(what))?;
        }
        Ok(t)
    }

    /// Dummy MXFP4 weights drawn on the device as an Mx4 tensor of `shape` (cols % 32 == 0):
    /// `HostData::RandomMxfp4 { seed, std }` byte for byte (`random_mxfp4_parts`).
    pub fn random_mxfp4(&self, shape: &[usize], seed: u64, std: f32) -> Result<CudaTensor> {
        let numel: usize = shape.iter().product();
        let cols = shape.last().copied().unwrap_or(1);
        check("upload", cols.is_multiple_of(FP4_ROW_ALIGN), || {
            format!("dummy MXFP4 tensor {shape:?}: rows of whole 32-value blocks")
        })?;
        let t = self.alloc(shape, DType::Mx4)?;
        let base = t.ptr(&self.stream);
        for (at, n, seed, shift, bits) in [
            (0, numel / 2, seed, 56, 0u8),
            (
                tensor::f4_scales_offset(numel),
                numel / 32,
                seed ^ MXFP4_SCALE_STREAM,
                63,
                random_mxfp4_scale_base(std),
            ),
        ] {
            self.fill_random_bytes(base + at as u64, n as u64, seed, (shift, bits))?;
        }
        Ok(t)
    }

    /// The parts of an Mx4 tensor as the host holds them: the packed pairs and the E8M0 scale
    /// bytes (for checks that the device holds what the host drew).
    pub fn mx4_parts(&self, t: &CudaTensor) -> Result<(Vec<u8>, Vec<u8>)> {
        check("download", t.dtype == DType::Mx4, || {
            format!("mx4_parts of a {:?} tensor", t.dtype)
        })?;
        let numel = t.numel();
        let mut parts = self.download_ranges(
            t,
            &[
                (0, numel / 2),
                (tensor::f4_scales_offset(numel), numel / 32),
            ],
        )?;
        let scales = parts.swap_remove(1);
        Ok((parts.swap_remove(0), scales))
    }

    /// Stages 3-4 (and 5 when `down` is `Combined`) on the CUDA cores for FP4 experts:
    /// gate|up + SiLU (or, `ExpertAct::Relu2`, up + relu²) into `act` (bf16 `[T·k, I]`), then
    /// down and the weighted sum into `out` (`[T, H]` f32, at `op`) in one launch, or down into
    /// pair rows and `moe_combine`; `gate_up` [`GateUp::Decode`] and `down`
    /// `Combined { cols > 0 }` take the one-token `_dec` kernels. Checked by the caller: x
    /// `[T, H]` bf16, the stacks an FP4 pair of `[E, fan·I, H]` (fan 2, or 1 for relu²) and
    /// `[E, H, I]` ([`fp4_pair`]), the routing written for `T·k` pairs.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn moe_experts_fp4(
        &self,
        op: u64,
        act: &CudaTensor,
        x: &CudaTensor,
        (gate_up, down): (&CudaTensor, &CudaTensor),
        (idp, wtp, ofp, pmp, acp): Routing,
        (t, h, e, i, top_k): (usize, usize, usize, usize, usize),
        (build, gate_up_kind, down_kind, act_kind): (CoreBuild, GateUp, Down, ExpertAct),
    ) -> Result<()> {
        let k = fp4_kernels(build).ok_or_else(|| {
            super::shape_err("fused_moe", format!("{build:?} is not an FP4 build"))
        })?;
        let pairs = t * top_k;
        let (ei, ki, hi, ii) = (
            super::elementwise::int(e, "fused_moe")?,
            super::elementwise::int(top_k, "fused_moe")?,
            super::elementwise::int(h, "fused_moe")?,
            super::elementwise::int(i, "fused_moe")?,
        );
        let s = &self.stream;
        let (g, d) = (self.fp4_ptrs(gate_up), self.fp4_ptrs(down));
        let (xp, actp) = (x.ptr(s), act.ptr(s));
        let experts = dim(e.min(pairs), "fused_moe")?;
        let args = (
            actp, xp, g.w, g.scales, g.globals, ofp, acp, pmp, ei, ki, ii, hi,
        );
        let (gate_up_kernel, gu_cfg) = match act_kind {
            ExpertAct::Silu => (
                k.gate_up_of(gate_up_kind),
                gate_up_cfg(gate_up_kind, (t, e, h, i), experts, "fused_moe")?,
            ),
            ExpertAct::Relu2 => (&k.relu2, expert_rows_cfg(i, experts, "fused_moe")?),
        };
        // SAFETY: x is [t, h] bf16 and act [t·k, i] bf16; gate_up [e, fan·i, h] F4 (fan 2, or
        // 1 for the relu² kernel; packed [e·fan·i, h/2], scale bytes [e·fan·i, h/16],
        // multipliers [e·fan·i]) with h % 32 == 0, so each 16-byte load of a packed row (h/2
        // bytes) and of an x row is inside it and aligned (the _dec kernel's 2-byte scale
        // loads too: a row's h/16 bytes is even); offsets/perm/active were written by the
        // routing (ranges inside 0..t·k, perm entries below t·k, so token = perm / k < t;
        // active names at most min(e, t·k) experts); block rows past the active count and rows
        // past i return (the split kernel: at most 8 tokens and a row's scale offset below
        // 2^32, both checked by gate_up_cfg).
        unsafe {
            gate_up_kernel.launch(self, gu_cfg, args)?;
        }
        if let Down::Combined { cols } = down_kind {
            return self.down_combine_fp4(&k, op, actp, d, (idp, wtp), (t, h, i, top_k), cols, 0);
        }
        let ys = self.alloc(&[pairs, h], DType::F32)?; // [T·k, H]
        let ysp = ys.ptr(s);
        let args = (
            ysp, actp, d.w, d.scales, d.globals, ofp, acp, pmp, ei, ii, hi,
        );
        // SAFETY: act is [t·k, i] (every row written by gate|up), down [e, h, i] F4 with
        // i % 32 == 0, ys [t·k, h] f32; block rows past the active count and columns past h
        // return.
        unsafe {
            k.down
                .launch(self, expert_rows_cfg(h, experts, "fused_moe")?, args)?;
        }
        self.moe_combine(op, ysp, wtp, t, (ki, hi))
    }

    /// Stages 4-5 in one launch into `out` (`[T, H]` f32 at `op`): `moe_down_combine_*` (`cols`
    /// 0) or the one-token `moe_down_combine_dec{cols}_*`, the latter adding gpt-oss's down bias
    /// (`bias`: bf16 `[E, H]`, 0 for none) as `moe_combine_bias` does. act `[T·k, I]` bf16
    /// written by gate|up, the routing's ids and weights for `T·k` pairs (T <= 8).
    #[allow(clippy::too_many_arguments)]
    fn down_combine_fp4(
        &self,
        k: &Fp4Kernels,
        op: u64,
        actp: u64,
        d: Fp4Ptrs,
        (idp, wtp): (u64, u64),
        (t, h, i, top_k): (usize, usize, usize, usize),
        cols: usize,
        bias: u64,
    ) -> Result<()> {
        let op_name = "fused_moe";
        let (ti, ki, hi, ii) = (
            int(t, op_name)?,
            int(top_k, op_name)?,
            int(h, op_name)?,
            int(i, op_name)?,
        );
        let threads = (32 * top_k) as u32;
        let Some(f) = k
            .down_combine_dec_of(cols)
            .filter(|_| h.is_multiple_of(cols))
        else {
            check(op_name, bias == 0, || {
                "the down bias needs the one-token kernels".to_string()
            })?;
            let args = (op, actp, d.w, d.scales, d.globals, idp, wtp, ti, ki, ii, hi);
            // SAFETY: out is [t, h] f32, act [t·k, i] (every row written by gate|up: each pair
            // is in exactly one expert's range), down [e, h, i] F4 with i % 32 == 0, ids
            // (below e) and weights t·k; t·h blocks (t <= 8), block b writing out[b % t,
            // b / t]; 32·k threads, k <= MOE_MAX_TOP_K (its shared slots).
            return unsafe {
                k.down_combine
                    .launch(self, cfg((dim(t * h, op_name)?, 1), threads), args)
            };
        };
        let args = (
            op, actp, d.w, d.scales, d.globals, idp, wtp, ti, ki, ii, hi, bias,
        );
        // SAFETY: as above, block b writing out[b % t, (b / t)·cols ..+cols] (h % cols == 0,
        // checked); the scale bytes' 2-byte loads aligned (i/16 bytes a row, i % 32 == 0);
        // bias, when not 0, [e, h] bf16 (the caller's).
        unsafe { f.launch(self, cfg((dim(t * h / cols, op_name)?, 1), threads), args) }
    }

    /// gpt-oss's stages 3-4 for FP4 experts: gate|up + bias + clamped SwiGLU into `act`
    /// (bf16) by the plan's kernel (`gate_up_kind`), then either down into `ys` (`[T·k, H]`
    /// f32, pair rows, at `ysp`; `moe_combine_bias` is the caller's) or, with `one_token`
    /// `(cols, out, down bias bf16 [E, H])`, down + bias + the weighted sum into `out` in one
    /// launch (`ysp` unused). Checked by the caller as
    /// [`Self::moe_experts_fp4`]'s, the gate|up bias `[E, 2I]` bf16 at `b13p`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn clamped_experts_fp4(
        &self,
        (ysp, actp, xp, b13p): (u64, u64, u64, u64),
        (gate_up, down): (&CudaTensor, &CudaTensor),
        (idp, wtp, ofp, pmp, acp): Routing,
        (e, top_k, h, i, pairs): (usize, usize, usize, usize, usize),
        (build, gate_up_kind, one_token): (CoreBuild, GateUp, Option<(usize, u64, u64)>),
        (alpha, limit): (f32, f32),
    ) -> Result<()> {
        let k = fp4_kernels(build).ok_or_else(|| {
            super::shape_err(
                "fused_moe_clamped",
                format!("{build:?} is not an FP4 build"),
            )
        })?;
        let op = "fused_moe_clamped";
        let (ei, ki, hi, ii) = (int(e, op)?, int(top_k, op)?, int(h, op)?, int(i, op)?);
        let (g, d) = (self.fp4_ptrs(gate_up), self.fp4_ptrs(down));
        let experts = dim(e.min(pairs), op)?;
        let args = (
            actp, xp, g.w, g.scales, g.globals, ofp, acp, pmp, ei, ki, ii, hi, b13p, alpha, limit,
        );
        let clamped = k.clamped_of(gate_up_kind);
        let c = gate_up_cfg(gate_up_kind, (pairs / top_k, e, h, i), experts, op)?;
        // SAFETY: as moe_experts_fp4's gate|up, and the bias [e, 2i] bf16 (checked by the
        // caller).
        unsafe {
            clamped.launch(self, c, args)?;
        }
        if let Some((cols, out, bias)) = one_token {
            let t = pairs / top_k;
            return self.down_combine_fp4(
                &k,
                out,
                actp,
                d,
                (idp, wtp),
                (t, h, i, top_k),
                cols,
                bias,
            );
        }
        let args = (
            ysp, actp, d.w, d.scales, d.globals, ofp, acp, pmp, ei, ii, hi,
        );
        // SAFETY: as moe_experts_fp4's down: ys [t·k, h] f32.
        unsafe { k.down.launch(self, expert_rows_cfg(h, experts, op)?, args) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fp4_builds_name_their_kernels() {
        for (build, suffix) in [(CoreBuild::Nvfp4, "nvfp4"), (CoreBuild::Mxfp4, "mxfp4")] {
            let k = fp4_kernels(build).expect("an FP4 build");
            assert_eq!(k.gate_up.name(), format!("moe_gate_up_{suffix}"));
            assert_eq!(k.down.name(), format!("moe_down_{suffix}"));
            assert_eq!(k.down_combine.name(), format!("moe_down_combine_{suffix}"));
            assert_eq!(k.clamped.name(), format!("moe_gate_up_clamped_{suffix}"));
            assert_eq!(k.relu2.name(), format!("moe_up_relu2_{suffix}"));
            assert_eq!(k.gate_up_dec.name(), format!("moe_gate_up_dec_{suffix}"));
            assert_eq!(
                k.clamped_dec.name(),
                format!("moe_gate_up_clamped_dec_{suffix}")
            );
            for (cols, f) in [(1, 0), (2, 1), (4, 2)] {
                let dec = k.down_combine_dec_of(cols).expect("a _dec kernel");
                assert_eq!(dec.name(), k.down_combine_dec[f].name());
                assert_eq!(dec.name(), format!("moe_down_combine_dec{cols}_{suffix}"));
            }
            assert!(k.down_combine_dec_of(3).is_none());
            assert!(k.down_combine_dec_of(0).is_none());
            assert_eq!(k.gate_up_of(GateUp::Plain).name(), k.gate_up.name());
            assert_eq!(k.gate_up_of(GateUp::Decode).name(), k.gate_up_dec.name());
        }
        for build in [CoreBuild::Bf16Vec, CoreBuild::Fp8Vec, CoreBuild::Fp32] {
            assert!(fp4_kernels(build).is_none());
        }
    }
}
