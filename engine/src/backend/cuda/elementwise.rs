//! Launchers for the row copies, SwiGLU, log-softmax, fills and casts
//! (`embedding.cu`, `activation.cu`, `softmax.cu`, `convert.cu`).

use crate::backend::kernels;
use cudarc::driver::LaunchConfig;

use super::tensor::{CudaTensor, DType};
use super::{CudaBackend, CudaBatch, check};
use crate::backend::Result;

/// A gated activation's kernel (`silu_mul_*`, `gelu_tanh_mul_*`): out, gate_up, rows, inter.
pub(super) type GatedKernel = crate::backend::kernels::Kernel<(u64, u64, u64, u64)>;

/// Threads of a grid-stride launch.
const STRIDE_THREADS: u32 = 256;
/// Blocks of a grid-stride launch: enough to fill an H200 several times over.
const STRIDE_MAX_BLOCKS: u64 = 132 * 16;

pub(super) fn cfg(grid: (u32, u32), block: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (grid.0, grid.1, 1),
        block_dim: (block, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A grid-stride loop over `n` elements.
pub(super) fn stride_cfg(n: u64) -> LaunchConfig {
    let blocks = n
        .div_ceil(u64::from(STRIDE_THREADS))
        .clamp(1, STRIDE_MAX_BLOCKS);
    cfg((blocks as u32, 1), STRIDE_THREADS)
}

/// Threads for a block that strides across a row of `width` elements: a multiple of 32, about
/// eight elements a thread, 32 to 1024.
pub(super) fn row_threads(width: usize) -> u32 {
    (width.div_ceil(8).next_multiple_of(32)).clamp(32, 1024) as u32
}

/// A grid dimension from a count the shape checks bounded.
pub(super) fn dim(n: usize, what: &'static str) -> Result<u32> {
    u32::try_from(n).map_err(|_| super::shape_err(what, format!("{n} is too large for a grid")))
}

/// A kernel's `int` argument.
pub(super) fn int(n: usize, what: &'static str) -> Result<i32> {
    i32::try_from(n)
        .map_err(|_| super::shape_err(what, format!("{n} does not fit the kernel's int")))
}

impl CudaBackend {
    pub(super) fn embedding_op(
        &self,
        out: &mut CudaTensor,
        batch: &CudaBatch,
        table: &CudaTensor,
    ) -> Result<()> {
        let (h, vocab) = (table.cols(), table.rows());
        check(
            "embedding",
            out.cols() == h && out.rows() == batch.num_tokens,
            || {
                format!(
                    "out {:?} for {} tokens of width {h}",
                    out.shape, batch.num_tokens
                )
            },
        )?;
        if let Some(bad) = batch.max_token_id.filter(|&t| t as usize >= vocab) {
            return Err(super::shape_err(
                "embedding",
                format!("token id {bad} is outside the vocabulary of {vocab}"),
            ));
        }
        self.set_dtype(out, DType::F32)?;
        if batch.num_tokens == 0 || h == 0 {
            return Ok(());
        }
        let name = match table.dtype {
            DType::BF16 => kernels::embedding_bf16,
            DType::F32 => kernels::embedding_f32,
            DType::F8 | DType::F4 | DType::Mx4 => return Err(super::not_activation("embedding")),
        };
        let s = &self.stream;
        let (o, t, ids, hh) = (
            out.ptr(s),
            table.ptr(s),
            batch.token_ids(s),
            int(h, "embedding")?,
        );
        // SAFETY: out is [T, h] f32; table is [vocab, h] of the kernel's type; every token id is
        // below vocab (checked above); the grid has one block per token.
        unsafe {
            name.launch(
                self,
                cfg((dim(batch.num_tokens, "embedding")?, 1), row_threads(h)),
                (o, t, ids, hh),
            )
        }
    }

    pub(super) fn gather_rows_op(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        batch: &CudaBatch,
    ) -> Result<()> {
        let h = x.cols();
        check(
            "gather_rows",
            out.cols() == h
                && out.rows() == batch.num_logits_rows
                && batch.max_logits_row.is_none_or(|r| (r as usize) < x.rows()),
            || {
                format!(
                    "out {:?}, x {:?}, rows {:?}",
                    out.shape, x.shape, batch.logits_rows
                )
            },
        )?;
        self.set_dtype(out, x.dtype)?;
        if batch.num_logits_rows == 0 || h == 0 {
            return Ok(());
        }
        let name = match x.dtype {
            DType::BF16 => kernels::gather_rows_bf16,
            DType::F32 => kernels::gather_rows_f32,
            DType::F8 | DType::F4 | DType::Mx4 => return Err(super::not_activation("gather_rows")),
        };
        let s = &self.stream;
        let (o, xp, rows, w) = (
            out.ptr(s),
            x.ptr(s),
            batch.logits_rows_ptr(s),
            int(h, "gather_rows")?,
        );
        // SAFETY: out is [R, h], x is [rows, h], both of x's type; every row index is below
        // x.rows() (checked above); one block per output row.
        unsafe {
            name.launch(
                self,
                cfg(
                    (dim(batch.num_logits_rows, "gather_rows")?, 1),
                    row_threads(h),
                ),
                (o, xp, rows, w),
            )
        }
    }

    pub(super) fn silu_mul_op(&self, out: &mut CudaTensor, gate_up: &CudaTensor) -> Result<()> {
        let silu = [
            kernels::silu_mul_fp32,
            kernels::silu_mul_bf16,
            kernels::silu_mul_f32,
        ];
        self.gated_mul_op("silu_mul", out, gate_up, silu)
    }

    /// `out = act(gate) * up` with `act`'s kernels for (f32 → f32 on the float32 path,
    /// bf16 → bf16, f32 → bf16): SwiGLU's and Gemma's gates.
    pub(super) fn gated_mul_op(
        &self,
        op: &'static str,
        out: &mut CudaTensor,
        gate_up: &CudaTensor,
        [fp32_k, bf16_k, f32_k]: [GatedKernel; 3],
    ) -> Result<()> {
        let i = out.cols();
        check(
            op,
            gate_up.cols() == 2 * i && gate_up.rows() == out.rows(),
            || format!("out {:?}, gate_up {:?}", out.shape, gate_up.shape),
        )?;
        // The float32 path keeps the product (the down projection's operand) in f32.
        let fp32 = self.compute_dtype() == DType::F32;
        self.set_dtype(out, if fp32 { DType::F32 } else { DType::BF16 })?;
        let (rows, inter) = (out.rows() as u64, i as u64);
        if rows * inter == 0 {
            return Ok(());
        }
        let name = match (gate_up.dtype, fp32) {
            (DType::F32, true) => fp32_k,
            (DType::BF16, false) => bf16_k,
            (DType::F32, false) => f32_k,
            (DType::BF16, true) => {
                return Err(super::shape_err(
                    op,
                    "the float32 path takes an f32 gate_up".to_string(),
                ));
            }
            (DType::F8 | DType::F4 | DType::Mx4, _) => return Err(super::not_activation(op)),
        };
        let s = &self.stream;
        let (o, g) = (out.ptr(s), gate_up.ptr(s));
        // SAFETY: out is [rows, I] and gate_up [rows, 2·I], each of the kernel's type (set and
        // matched above); the grid-stride loop stays below rows·I.
        unsafe { name.launch(self, stride_cfg(rows * inter), (o, g, rows, inter)) }
    }

    pub(super) fn log_softmax_op(&self, x: &mut CudaTensor) -> Result<()> {
        if x.dtype == DType::BF16 {
            let mut wide = self.alloc(&x.shape, DType::F32)?;
            self.cast(&mut wide, x)?;
            *x = wide;
        }
        let (rows, vocab) = (x.rows(), x.cols());
        if rows == 0 || vocab == 0 {
            return Ok(());
        }
        let name = kernels::log_softmax_f32;
        let s = &self.stream;
        let (p, v) = (x.ptr(s), int(vocab, "log_softmax")?);
        // SAFETY: x is [rows, vocab] f32; one block of 1024 threads (a multiple of 32, as the
        // block reductions need) per row.
        unsafe { name.launch(self, cfg((dim(rows, "log_softmax")?, 1), 1024), (p, v)) }
    }

    /// `out = x` converted to `out`'s type (same number of elements; the types differ).
    pub(super) fn cast(&self, out: &mut CudaTensor, x: &CudaTensor) -> Result<()> {
        check(
            "cast",
            out.numel() == x.numel() && out.dtype != x.dtype,
            || {
                format!(
                    "{:?} {:?} to {:?} {:?}",
                    x.shape, x.dtype, out.shape, out.dtype
                )
            },
        )?;
        let n = x.numel() as u64;
        if n == 0 {
            return Ok(());
        }
        let name = match out.dtype {
            DType::BF16 => kernels::cast_f32_bf16,
            DType::F32 => kernels::cast_bf16_f32,
            DType::F8 | DType::F4 | DType::Mx4 => return Err(super::not_activation("cast")),
        };
        let s = &self.stream;
        let (o, i) = (out.ptr(s), x.ptr(s));
        // SAFETY: both buffers hold n elements of their (different) types, checked above.
        unsafe { name.launch(self, stride_cfg(n), (o, i, n)) }
    }

    /// Fill a bf16 or f32 tensor with `HostData::Random`'s stream (`half_width` = std·√3).
    pub(super) fn fill_random(&self, t: &mut CudaTensor, seed: u64, half_width: f32) -> Result<()> {
        let name = match t.dtype {
            DType::BF16 => kernels::fill_random_bf16,
            DType::F32 => kernels::fill_random_f32,
            DType::F8 | DType::F4 | DType::Mx4 => return Err(super::not_activation("fill_random")),
        };
        let n = t.numel() as u64;
        if n == 0 {
            return Ok(());
        }
        const CHUNK: u64 = 65536; // elements a thread walks (RANDOM_CHUNK in convert.cu)
        const THREADS: u32 = 64; // few threads in all: spread them over many blocks
        let blocks = n.div_ceil(CHUNK).div_ceil(u64::from(THREADS));
        let s = &self.stream;
        let p = t.ptr(s);
        // SAFETY: t holds n elements of the kernel's type; each thread writes only its chunk
        // below n.
        unsafe {
            name.launch(
                self,
                cfg((dim(blocks as usize, "fill_random")?, 1), THREADS),
                (p, n, seed, half_width),
            )
        }
    }

    pub(super) fn fill_const(&self, t: &mut CudaTensor, value: f32) -> Result<()> {
        let name = match t.dtype {
            DType::BF16 => kernels::fill_const_bf16,
            DType::F32 => kernels::fill_const_f32,
            DType::F8 | DType::F4 | DType::Mx4 => return Err(super::not_activation("fill_const")),
        };
        let n = t.numel() as u64;
        if n == 0 {
            return Ok(());
        }
        let s = &self.stream;
        let p = t.ptr(s);
        // SAFETY: t holds n elements of the kernel's type; the grid-stride loop stays below n.
        unsafe { name.launch(self, stride_cfg(n), (p, n, value)) }
    }
}
