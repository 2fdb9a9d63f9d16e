//! `HybridOps` on CUDA: Qwen3.5's Gated DeltaNet mixer and the elementwise ops around it
//! (`kernels/src/hybrid.cu`, whose header has the design); Nemotron-H's Mamba-2 mixer and
//! relu² launch from `mamba2.rs`, its routed relu² experts from `nemotron_moe.rs`. The CPU's
//! `backend/cpu/hybrid.rs` is the reference; `cuda_check`'s `hybrid` section compares the two
//! (the experts: `ops`' `fused_moe_relu2` cases).

use super::elementwise::{dim, int, stride_cfg};
use super::gdn_chunk::ChunkArgs;
use super::gdn_decode::DecodeArgs;
use super::gdn_kernels;
use super::tensor::{CudaTensor, DType, alloc_bytes};
use super::{CudaBackend, CudaBatch, check, shape_err};
use crate::backend::kernels::{self, Kernel};
use crate::backend::{BatchInputs, GdnLayer, HybridOps, Mamba2Layer, Result, SigmoidRouting};

/// Key head sizes the recurrent kernel is built for (its state rows live in registers), and
/// the fused decode kernel (`gdn_decode.rs`).
pub(super) const HEAD_DIMS: [usize; 5] = [16, 32, 64, 128, 256];
/// Conv taps the conv kernel keeps in registers at most (`GDN_MAX_K`).
pub(super) const MAX_TAPS: usize = 8;

/// An activation operand of an elementwise kernel: its pointer and whether it is bf16.
pub(super) fn operand(b: &CudaBackend, op: &'static str, t: &CudaTensor) -> Result<(u64, i32)> {
    match t.dtype {
        DType::BF16 => Ok((t.ptr(&b.stream), 1)),
        DType::F32 => Ok((t.ptr(&b.stream), 0)),
        DType::F8 | DType::F4 | DType::Mx4 => Err(super::not_activation(op)),
    }
}

fn same_shape(op: &'static str, a: &CudaTensor, b: &CudaTensor) -> Result<()> {
    check(op, a.shape == b.shape, || {
        format!("{:?} and {:?} differ", a.shape, b.shape)
    })
}

pub(super) fn f32_tensor(op: &'static str, what: &str, t: &CudaTensor) -> Result<()> {
    check(op, t.dtype == DType::F32, || {
        format!(
            "{what} is {:?}: upload it with upload_f32/zeros_f32",
            t.dtype
        )
    })
}

impl CudaBackend {
    /// `x = f(x, y)` elementwise for the two-operand kernels (`sigmoid_mul`, `add_assign`).
    fn binary_op(
        &self,
        f: Kernel<(u64, i32, u64, i32, u64)>,
        x: &mut CudaTensor,
        y: &CudaTensor,
    ) -> Result<()> {
        let name = f.name();
        same_shape(name, x, y)?;
        let n = x.numel() as u64;
        let ((xp, xb), (yp, yb)) = (operand(self, name, x)?, operand(self, name, y)?);
        if n == 0 {
            return Ok(());
        }
        // SAFETY: x and y hold n elements each, of the types their flags name; the grid-stride
        // loop stays below n.
        unsafe { f.launch(self, stride_cfg(n), (xp, xb, yp, yb, n)) }
    }

    /// Blocks of the recurrent kernel take `cols` state columns of one (sequence, head): as
    /// many as keep about two blocks a multiprocessor busy, from 32 down to 8.
    fn recurrent_cols(&self, seqs: usize, nv: usize, dv: usize) -> usize {
        let mut cols = 32;
        while cols > 8
            && (cols / 2 >= dv || seqs * nv * dv.div_ceil(cols) < 2 * self.info.multiprocessors)
        {
            cols /= 2;
        }
        cols
    }
}

impl HybridOps for CudaBackend {
    fn upload_f32(&self, shape: &[usize], data: &[f32]) -> Result<CudaTensor> {
        self.tensor_from_f32(shape, data, DType::F32)
    }

    fn zeros_f32(&self, shape: &[usize]) -> Result<CudaTensor> {
        let numel: usize = shape.iter().product();
        let buf = self.raw_alloc(alloc_bytes(numel, DType::F32), true)?;
        Ok(CudaTensor {
            shape: shape.to_vec(),
            dtype: DType::F32,
            buf,
        })
    }

    fn sigmoid_mul(&self, x: &mut CudaTensor, gate: &CudaTensor) -> Result<()> {
        self.binary_op(kernels::sigmoid_mul, x, gate)
    }

    fn add_assign(&self, x: &mut CudaTensor, y: &CudaTensor) -> Result<()> {
        self.binary_op(kernels::add_assign, x, y)
    }

    fn add_gated(
        &self,
        out: &mut CudaTensor,
        routed: &CudaTensor,
        gate: &CudaTensor,
    ) -> Result<()> {
        const OP: &str = "add_gated";
        same_shape(OP, out, routed)?;
        check(OP, gate.shape == [out.rows(), 1], || {
            format!("gate {:?} for out {:?}", gate.shape, out.shape)
        })?;
        let (rows, cols) = (out.rows() as u64, out.cols() as u64);
        let (o, ob) = operand(self, OP, out)?;
        let ((r, rb), (g, gb)) = (operand(self, OP, routed)?, operand(self, OP, gate)?);
        if rows * cols == 0 {
            return Ok(());
        }
        let args = (o, ob, r, rb, g, gb, rows, cols);
        // SAFETY: out and routed hold rows·cols elements, gate one a row, each of the type its
        // flag names; the grid-stride loop stays below rows·cols.
        unsafe { kernels::add_gated.launch(self, stride_cfg(rows * cols), args) }
    }

    fn state_row(&self, t: &mut CudaTensor, from: Option<usize>, to: usize) -> Result<()> {
        const OP: &str = "state_row";
        let (rows, n) = (t.rows(), t.cols() as u64);
        f32_tensor(OP, "the state", t)?;
        check(OP, to < rows && from.is_none_or(|f| f < rows), || {
            format!("rows {from:?} -> {to} of {rows}")
        })?;
        if n == 0 || from == Some(to) {
            return Ok(());
        }
        let p = t.ptr(&self.stream);
        let (src, dst, zero) = (
            from.unwrap_or(0) as u64,
            to as u64,
            i32::from(from.is_none()),
        );
        // SAFETY: t is [rows, n] f32 and both rows are below rows (checked above); the
        // grid-stride loop stays below n.
        unsafe { kernels::state_row.launch(self, stride_cfg(n), (p, n, src, dst, zero)) }
    }

    fn gated_delta_net(
        &self,
        out: &mut CudaTensor,
        mixed: &CudaTensor,
        layer: &GdnLayer<'_, CudaTensor>,
        conv_state: &mut CudaTensor,
        recurrent: &mut CudaTensor,
        host: &BatchInputs,
        batch: &CudaBatch,
    ) -> Result<()> {
        const OP: &str = "gated_delta_net";
        let s = layer.heads;
        let t = mixed.rows();
        let (kd, vd) = (s.nk * s.dk, s.nv * s.dv);
        let cd = 2 * kd + vd;
        let width = cd + vd + 2 * s.nv;
        let k = layer.kernel;
        check(
            OP,
            HEAD_DIMS.contains(&s.dk)
                && s.nk > 0
                && (s.nv * s.dv).is_multiple_of(4)
                && s.nv.is_multiple_of(s.nk)
                && (1..=MAX_TAPS).contains(&k),
            || {
                format!(
                    "heads {s:?}, kernel {k}: the CUDA kernels take dk in {HEAD_DIMS:?}, nv a \
                     multiple of nk, nv·dv a multiple of 4 and 1..={MAX_TAPS} taps"
                )
            },
        )?;
        check(
            OP,
            mixed.cols() == width
                && out.shape == [t, vd]
                && layer.conv.numel() == cd * k
                && layer.neg_a.numel() == s.nv
                && layer.dt_bias.numel() == s.nv
                && layer.norm.numel() == s.dv
                && conv_state.cols() == (k - 1) * cd
                && recurrent.cols() == s.nv * s.dk * s.dv,
            || {
                format!(
                    "mixed {:?}, out {:?}, conv state {:?}, recurrent {:?}",
                    mixed.shape, out.shape, conv_state.shape, recurrent.shape,
                )
            },
        )?;
        let params = [
            ("conv", layer.conv),
            ("neg_a", layer.neg_a),
            ("dt_bias", layer.dt_bias),
            ("norm", layer.norm),
        ];
        let Some(tm) = self.recurrent_step_checks(
            OP,
            out,
            mixed,
            (conv_state, ("recurrent", recurrent)),
            &params,
            host,
            batch,
        )?
        else {
            return Ok(());
        };
        let st = &self.stream;
        // The sequences' row offsets, slots, save offsets and saves, both kernels' next args.
        let plans = batch.state_arrays(st);
        let (row_seq, mx) = (batch.row_seq(st), mixed.ptr(st));
        let seqs = host.num_seqs();
        let (ti, ci, ki, wi) = (int(t, OP)?, int(cd, OP)?, int(k, OP)?, int(width, OP)?);
        let split = self.gdn_split(host, &s);

        // A decode step (one row a sequence) in one launch when the fused kernel covers it
        // (gdn_decode.rs); the same results as the three steps below.
        if let Some(plan) = self.gdn_decode_plan(host, &s, &split) {
            let args = DecodeArgs {
                mixed,
                tm,
                conv_state: conv_state.ptr(st),
                state: recurrent.ptr(st),
                plans,
                width: wi,
            };
            return self.gdn_decode(out, layer, &args, seqs, plan);
        }

        // 1. conv + SiLU into conv `[T, C]` f32; the windows move on.
        let conv = self.alloc(&[t, cd], DType::F32)?;
        let conv_kernel = gdn_kernels::conv(tm)?;
        let (cp, taps, cs) = (conv.ptr(st), layer.conv.ptr(st), conv_state.ptr(st));
        let [starts, seq_slots, save_starts, saves] = plans;
        let args = (
            cp,
            mx,
            taps,
            cs,
            row_seq,
            starts,
            seq_slots,
            save_starts,
            saves,
            ti,
            ci,
            ki,
            wi,
        );
        // SAFETY: conv is [T, C] f32, mixed [T, width] of the kernel's type with the qkv columns
        // first, taps [C, K] f32, conv_state [slots, (K−1)·C] f32; the batch's arrays describe
        // T rows in S sequences whose slots and save slots are below `slots` and whose saves
        // lie within their chunks (checked above); grid.y covers T rows in tiles then S sequences.
        unsafe {
            conv_kernel.launch(self, gdn_kernels::conv_cfg(cd, t, seqs)?, args)?;
        }

        // 2. the gated delta rule into core `[T, nv·dv]` f32; the states move on: sequences
        // of at least `chunk_min` rows chunk by chunk (gdn_chunk.rs), the others token by token.
        let core = self.alloc(&[t, vd], DType::F32)?;
        let recurrent_kernel = gdn_kernels::recurrent(s.dk, tm)?;
        let cols = self.recurrent_cols(seqs, s.nv, s.dv);
        let (op, na, db, rp) = (
            core.ptr(st),
            layer.neg_a.ptr(st),
            layer.dt_bias.ptr(st),
            recurrent.ptr(st),
        );
        let (nki, nvi, dvi) = (int(s.nk, OP)?, int(s.nv, OP)?, int(s.dv, OP)?);
        if split.recurrent {
            let args = (
                op,
                cp,
                mx,
                na,
                db,
                rp,
                starts,
                seq_slots,
                save_starts,
                saves,
                nki,
                nvi,
                dvi,
                wi,
                split.chunk_min,
            );
            let config = cudarc::driver::LaunchConfig {
                grid_dim: (
                    dim(s.dv.div_ceil(cols), OP)?,
                    dim(s.nv, OP)?,
                    dim(seqs, OP)?,
                ),
                block_dim: (4 * cols as u32, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: core is [T, nv·dv] f32, conv [T, C] f32 (written above), mixed as above
            // with b and a at columns C + nv·dv and + nv, neg_a and dt_bias [nv] f32, recurrent
            // [slots, nv, dk, dv] f32 with every slot in range (checked above); the kernel is
            // built for this dk; grid (dv / cols, nv, S), 4 threads a column (a multiple of 32
            // threads).
            unsafe { recurrent_kernel.launch(self, config, args)? };
        }
        if split.chunks > 0 {
            let args = ChunkArgs {
                core: op,
                conv: cp,
                mixed: mx,
                tm,
                neg_a: na,
                dt_bias: db,
                state: rp,
                plans,
                width: wi,
            };
            self.gdn_chunked(&args, &s, seqs, &split)?;
        }

        // 3. out = rms_norm(core) · norm · silu(z), per (row, value head).
        let norm_kernel = gdn_kernels::norm(tm, out.dtype)?;
        let (o, w) = (out.ptr(st), layer.norm.ptr(st));
        let heads = t * s.nv;
        let (hi, zi, eps) = (int(heads, OP)?, int(cd, OP)?, layer.eps);
        let args = (o, op, mx, w, hi, nvi, dvi, wi, zi, eps);
        // SAFETY: out is [T, nv·dv] of the kernel's output type (set above), core [T, nv·dv]
        // f32, mixed as above with z at column C, norm [dv] f32; a warp per (row, head), the
        // grid covers T·nv warps.
        unsafe {
            norm_kernel.launch(
                self,
                super::elementwise::cfg((dim(heads.div_ceil(4), OP)?, 1), 128),
                args,
            )
        }
    }

    fn mamba2(
        &self,
        out: &mut CudaTensor,
        mixed: &CudaTensor,
        layer: &Mamba2Layer<'_, CudaTensor>,
        conv_state: &mut CudaTensor,
        ssm_state: &mut CudaTensor,
        host: &BatchInputs,
        batch: &CudaBatch,
    ) -> Result<()> {
        self.mamba2_op(out, mixed, layer, conv_state, ssm_state, host, batch)
    }

    fn relu2(&self, out: &mut CudaTensor, x: &CudaTensor) -> Result<()> {
        self.relu2_op(out, x)
    }

    fn fused_moe_relu2(
        &self,
        out: &mut CudaTensor,
        x: &CudaTensor,
        router_logits: &CudaTensor,
        bias: &CudaTensor,
        experts: (&CudaTensor, &CudaTensor),
        routing: SigmoidRouting,
    ) -> Result<()> {
        self.fused_moe_relu2_op(out, x, router_logits, bias, experts, routing)
    }
}

impl CudaBackend {
    /// The checks a recurrent layer's step shares (Gated DeltaNet, Mamba-2): the layer's
    /// `params` and both state pools f32, the pools of as many slots, one state plan a
    /// sequence and `mixed`'s rows the step's tokens on host and device, the plans valid and
    /// inside the pools' slots; `out` set to the compute type. `None` for an empty step
    /// (nothing to launch), else mixed's type, a key of every kernel the layer launches.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn recurrent_step_checks(
        &self,
        op: &'static str,
        out: &mut CudaTensor,
        mixed: &CudaTensor,
        (conv_state, (name, state)): (&CudaTensor, (&'static str, &CudaTensor)),
        params: &[(&'static str, &CudaTensor)],
        host: &BatchInputs,
        batch: &CudaBatch,
    ) -> Result<Option<DType>> {
        let t = mixed.rows();
        check(
            op,
            conv_state.rows() == state.rows()
                && host.states.len() == host.num_seqs()
                && batch.states.num_seqs == host.num_seqs()
                && host.num_tokens() == t
                && batch.num_tokens == t,
            || {
                format!(
                    "conv state {:?}, {name} {:?}, {} rows of mixed, {} plans for {} sequences \
                     ({} in the device batch) of {} tokens",
                    conv_state.shape,
                    state.shape,
                    t,
                    host.states.len(),
                    host.num_seqs(),
                    batch.states.num_seqs,
                    host.num_tokens()
                )
            },
        )?;
        for &(what, p) in params {
            f32_tensor(op, what, p)?;
        }
        f32_tensor(op, "conv_state", conv_state)?;
        f32_tensor(op, name, state)?;
        if let Some(e) = &batch.states.error {
            return Err(shape_err(op, e.clone()));
        }
        let slots = conv_state.rows();
        if let Some(bad) = batch.states.max_slot.filter(|&m| m as usize >= slots) {
            return Err(shape_err(
                op,
                format!("state slot {bad} outside the {slots} slots"),
            ));
        }
        self.set_dtype(out, self.compute_dtype())?;
        if batch.num_tokens == 0 {
            return Ok(None);
        }
        match mixed.dtype {
            DType::F8 | DType::F4 | DType::Mx4 => Err(super::not_activation(op)),
            tm => Ok(Some(tm)),
        }
    }
}
