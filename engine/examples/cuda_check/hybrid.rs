//! Section `hybrid`: every `HybridOps` op of the CUDA backend against the CPU's on random
//! inputs, `gated_delta_net` through the fused decode kernel (decode steps, padding rows and
//! saves; and bit for bit against the 3-launch path), the recurrent kernel, the chunked kernels (every sequence
//! sent there: lengths around a chunk, saves mid-chunk and at chunk ends, 2048 tokens) and the
//! default split between them; Nemotron-H's `mamba2` and `relu2` (`mamba2.rs`); then the
//! timings of `hybrid_speed.rs` and `mamba2_speed.rs`.
//!
//! Tolerances: the elementwise ops are one f32 expression (`expf` within 2 ulp of glibc's), so
//! an f32 output is within [`Tol::F32`] and a bf16 output one rounding away ([`Tol::BF16`]).
//! `gated_delta_net`'s states are f32 on both sides, summed in another order (four partial
//! sums and a shuffle tree against the CPU's row loop, fused multiply-adds): [`Tol::F32`]
//! measured against the state's rms; its conv windows are copies of inputs: exact. Its output
//! is bf16 after an RMSNorm of that f32 core: [`Tol::BF16`]; on the float32 path (section
//! `ops-f32`, [`run_ops`]) it is f32: [`Tol::F32`]. The chunked kernels keep f32's accuracy
//! (their tensor-core products take each f32 operand as two tf32 terms, 3xTF32; the WY form
//! reassociates the same sums; the decay products are multiplied out as the CPU does, not
//! taken as exp of cumulative sums), so the same tolerances hold, and their state error must
//! not grow with the length (the 2048-token case).

use anyhow::{Context, Result};
use metrale_engine::backend::cpu::CpuTensor;
use metrale_engine::backend::cuda::{CudaBackend, CudaTensor, DType, GDN_CHUNK_MIN};
use metrale_engine::backend::{Backend, BatchInputs, CpuBackend, DeltaHeads, GdnLayer, HybridOps};
use metrale_engine::kv_cache::state::{StateInit, StatePlan, StateSave};
use serde_json::json;

use crate::ops::{Rng, round_bf16};
use crate::report::{Report, Tol, compare};

pub struct Check<'a> {
    pub cuda: &'a CudaBackend,
    pub cpu: CpuBackend,
    pub rng: Rng,
    report: &'a mut Report,
}

/// One Gated DeltaNet case: heads, taps, and the batch's sequences as (rows, saves).
struct Case {
    name: &'static str,
    heads: DeltaHeads,
    kernel: usize,
    /// Rows of each sequence and the `after`s of its saves.
    seqs: Vec<(usize, Vec<u32>)>,
    mixed: DType,
    /// Scale of the `a` column (softplus turns linear above 20).
    a_scale: f32,
    /// Sequences of at least this many rows take the chunked kernels (None: none does).
    chunk_min: Option<usize>,
    /// Sequences that are a CUDA graph's padding rows (no state slot, no saves).
    pads: Vec<usize>,
}

/// The batch of `seqs` (rows each) with state plans: sequence s in slot 2s + 1 (so slots are
/// not in order), saves into slots after the sequences' own.
pub fn batch(seqs: &[(usize, Vec<u32>)]) -> (BatchInputs, usize) {
    batch_padded(seqs, &[])
}

/// [`batch`] with the sequences in `pads` as a CUDA graph's padding rows (no state slot).
pub fn batch_padded(seqs: &[(usize, Vec<u32>)], pads: &[usize]) -> (BatchInputs, usize) {
    let mut starts = vec![0u32];
    let mut states = Vec::new();
    let mut next = 2 * seqs.len() + 1;
    for (s, (len, afters)) in seqs.iter().enumerate() {
        starts.push(starts[s] + *len as u32);
        let saves = afters
            .iter()
            .map(|&after| {
                next += 1;
                StateSave {
                    after,
                    slot: next as u32 - 1,
                }
            })
            .collect();
        states.push(if pads.contains(&s) {
            StatePlan::padding()
        } else {
            StatePlan {
                slot: 2 * s as u32 + 1,
                init: StateInit::Continue,
                saves,
            }
        });
    }
    let t = *starts.last().unwrap_or(&0) as usize;
    let n = seqs.len();
    let b = BatchInputs {
        token_ids: vec![0; t],
        positions: vec![0; t],
        slot_mapping: vec![0; t],
        seq_starts: starts,
        context_lens: vec![1; n],
        block_tables: vec![0; n],
        max_blocks_per_seq: 1,
        block_size: 16,
        logits_rows: Vec::new(),
        table_rows: Vec::new(),
        states,
        groups: Vec::new(),
    };
    (b, next)
}

fn four<T>(v: Vec<T>) -> Result<[T; 4]> {
    v.try_into().map_err(|_| anyhow::anyhow!("four parameters"))
}

/// The layer of `case` over its parameters (conv, neg_a, dt_bias, norm).
fn gdn<'a, T>(case: &Case, p: &'a [T; 4]) -> GdnLayer<'a, T> {
    GdnLayer {
        heads: case.heads,
        kernel: case.kernel,
        conv: &p[0],
        neg_a: &p[1],
        dt_bias: &p[2],
        norm: &p[3],
        eps: 1e-6,
    }
}

/// A layer's f32 parameters on both sides.
struct Layer {
    dev: [CudaTensor; 4],
    cpu: [CpuTensor; 4],
}

impl Check<'_> {
    pub fn pair_f32(&self, shape: &[usize], data: Vec<f32>) -> Result<(CudaTensor, CpuTensor)> {
        Ok((
            self.cuda.upload_f32(shape, &data)?,
            self.cpu.upload_f32(shape, &data)?,
        ))
    }

    pub fn pair(
        &mut self,
        shape: &[usize],
        scale: f32,
        d: DType,
    ) -> Result<(CudaTensor, CpuTensor)> {
        let data = self.rng.vec(shape.iter().product(), scale);
        let data = if d == DType::BF16 {
            round_bf16(&data)
        } else {
            data
        };
        Ok((
            self.cuda.tensor_from_f32(shape, &data, d)?,
            CpuTensor::new(shape.to_vec(), data),
        ))
    }

    pub fn compare(
        &mut self,
        op: &str,
        case: &str,
        tol: Tol,
        got: &CudaTensor,
        want: &CpuTensor,
    ) -> Result<()> {
        let g = self.cuda.to_host(got)?;
        anyhow::ensure!(
            self.cuda.shape(got) == want.shape.as_slice(),
            "{op} {case}: shape {:?}, reference {:?}",
            self.cuda.shape(got),
            want.shape
        );
        self.report
            .case(op, case, tol, &compare(&g, &want.data, tol));
        Ok(())
    }

    pub fn run(
        &mut self,
        op: &str,
        case: &str,
        f: impl FnOnce(&mut Self) -> Result<()>,
    ) -> Result<()> {
        if let Err(e) = f(self) {
            self.report.fail(format!("{op} {case}: {e:#}"));
            self.report
                .record(json!({"op": op, "case": case, "error": format!("{e:#}")}));
            self.cuda
                .synchronize()
                .with_context(|| format!("the device stopped answering after {op} {case}"))?;
        }
        Ok(())
    }

    fn elementwise(&mut self) -> Result<()> {
        use DType::{BF16, F32};
        let tol = |d: DType| if d == BF16 { Tol::BF16 } else { Tol::F32 };
        for (rows, cols, xd, yd) in [
            (1, 64, F32, F32),
            (7, 2048, F32, BF16),
            (130, 96, BF16, F32),
            (33, 4096, BF16, BF16),
        ] {
            let case = format!("x {xd:?} y {yd:?} [{rows}, {cols}]");
            self.run("sigmoid_mul", &case, |s| {
                let (mut xd_, mut xc) = s.pair(&[rows, cols], 3.0, xd)?;
                let (gd, gc) = s.pair(&[rows, cols], 6.0, yd)?;
                s.cuda.sigmoid_mul(&mut xd_, &gd)?;
                s.cpu.sigmoid_mul(&mut xc, &gc)?;
                s.compare("sigmoid_mul", &case, tol(xd), &xd_, &xc)
            })?;
            self.run("add_assign", &case, |s| {
                let (mut xd_, mut xc) = s.pair(&[rows, cols], 3.0, xd)?;
                let (yd_, yc) = s.pair(&[rows, cols], 3.0, yd)?;
                s.cuda.add_assign(&mut xd_, &yd_)?;
                s.cpu.add_assign(&mut xc, &yc)?;
                s.compare("add_assign", &case, tol(xd), &xd_, &xc)
            })?;
            self.run("add_gated", &case, |s| {
                let (mut od, mut oc) = s.pair(&[rows, cols], 3.0, xd)?;
                let (rd, rc) = s.pair(&[rows, cols], 3.0, yd)?;
                let (gd, gc) = s.pair(&[rows, 1], 6.0, yd)?;
                s.cuda.add_gated(&mut od, &rd, &gd)?;
                s.cpu.add_gated(&mut oc, &rc, &gc)?;
                s.compare("add_gated", &case, tol(xd), &od, &oc)
            })?;
        }
        self.run(
            "state_row",
            "copy 3 -> 1, zero 4, copy 2 -> 2 of [6, 1000]",
            |s| {
                let data = s.rng.vec(6000, 1.0);
                let (mut d, mut c) = s.pair_f32(&[6, 1000], data)?;
                for (from, to) in [(Some(3), 1), (None, 4), (Some(2), 2)] {
                    s.cuda.state_row(&mut d, from, to)?;
                    s.cpu.state_row(&mut c, from, to)?;
                }
                s.compare("state_row", "copy and zero rows", Tol::EXACT, &d, &c)?;
                let z = s.cuda.zeros_f32(&[3, 5])?;
                let zc = s.cpu.zeros_f32(&[3, 5])?;
                s.compare("zeros_f32", "[3, 5]", Tol::EXACT, &z, &zc)
            },
        )
    }

    fn layer(&mut self, case: &Case) -> Result<Layer> {
        let h = case.heads;
        let cd = 2 * h.nk * h.dk + h.nv * h.dv;
        let conv = self.rng.vec(cd * case.kernel, 0.6);
        let neg_a: Vec<f32> = (0..h.nv)
            .map(|_| -(1.25 + 0.75 * self.rng.uniform()))
            .collect();
        let dt_bias = self.rng.vec(h.nv, 1.0);
        let norm: Vec<f32> = (0..h.dv).map(|_| 1.0 + 0.2 * self.rng.uniform()).collect();
        let mut dev = Vec::new();
        let mut cpu = Vec::new();
        for (shape, data) in [
            (vec![cd, case.kernel], conv),
            (vec![h.nv], neg_a),
            (vec![h.nv], dt_bias),
            (vec![h.dv], norm),
        ] {
            let (d, c) = self.pair_f32(&shape, data)?;
            dev.push(d);
            cpu.push(c);
        }
        Ok(Layer {
            dev: four(dev)?,
            cpu: four(cpu)?,
        })
    }

    /// `mixed` `[T, qkv | z | b | a]`: the `a` column scaled apart.
    fn mixed(&mut self, case: &Case, t: usize) -> Result<(CudaTensor, CpuTensor)> {
        let h = case.heads;
        let cd = 2 * h.nk * h.dk + h.nv * h.dv;
        let width = cd + h.nv * h.dv + 2 * h.nv;
        self.mixed_pair([t, width], (h.nv, case.a_scale / 2.0), case.mixed)
    }

    /// A recurrent layer's `mixed` input `[T, width]` of type `dtype`, random in ±2, its last
    /// `tail.0` columns (a gate's input) scaled by `tail.1`; the CPU gets the device's values.
    pub(crate) fn mixed_pair(
        &mut self,
        [t, width]: [usize; 2],
        (cols, scale): (usize, f32),
        dtype: DType,
    ) -> Result<(CudaTensor, CpuTensor)> {
        let mut data = self.rng.vec(t * width, 2.0);
        for row in data.chunks_mut(width) {
            for v in &mut row[width - cols..] {
                *v *= scale;
            }
        }
        let data = if dtype == DType::BF16 {
            round_bf16(&data)
        } else {
            data
        };
        Ok((
            self.cuda.tensor_from_f32(&[t, width], &data, dtype)?,
            CpuTensor::new(vec![t, width], data),
        ))
    }

    fn gated_delta_net(&mut self, case: &Case) -> Result<()> {
        let h = case.heads;
        let (b, slots) = batch_padded(&case.seqs, &case.pads);
        let t = b.num_tokens();
        let cd = 2 * h.nk * h.dk + h.nv * h.dv;
        let layer = self.layer(case)?;
        let (mixed_d, mixed_c) = self.mixed(case, t)?;
        let window = (case.kernel - 1) * cd;
        let rec = h.nv * h.dk * h.dv;
        let conv_data = self.rng.vec(slots * window, 1.0);
        let (mut conv_d, mut conv_c) = self.pair_f32(&[slots, window], conv_data.clone())?;
        let rec_data = self.rng.vec(slots * rec, 0.5);
        let (mut rec_d, mut rec_c) = self.pair_f32(&[slots, rec], rec_data.clone())?;
        let mut out_d = self.cuda.zeros(&[t, h.nv * h.dv])?;
        let mut out_c = self.cpu.zeros(&[t, h.nv * h.dv])?;
        let batch_d = self.cuda.prepare_batch(&b)?;
        let (ld, lc) = (gdn(case, &layer.dev), gdn(case, &layer.cpu));
        self.cuda.retune(|t| t.gdn.chunk_min = case.chunk_min);
        let r = self.cuda.gated_delta_net(
            &mut out_d,
            &mixed_d,
            &ld,
            &mut conv_d,
            &mut rec_d,
            &b,
            &batch_d,
        );
        self.cuda.retune(|t| t.gdn.chunk_min = Some(GDN_CHUNK_MIN));
        r?;
        self.cpu
            .gated_delta_net(&mut out_c, &mixed_c, &lc, &mut conv_c, &mut rec_c, &b, &b)?;
        let op = "gated_delta_net";
        // The output has the backend's compute type: bf16, or f32 on the float32 path.
        let tol = if self.cuda.compute_dtype() == DType::F32 {
            Tol::F32
        } else {
            Tol::BF16
        };
        self.compare(op, &format!("{} out", case.name), tol, &out_d, &out_c)?;
        let states = format!("{} recurrent states", case.name);
        self.compare(op, &states, Tol::F32, &rec_d, &rec_c)?;
        let windows = format!("{} conv windows", case.name);
        self.compare(op, &windows, Tol::EXACT, &conv_d, &conv_c)?;
        // A decode step (one row a sequence) runs the fused kernel: the 3-launch path on the
        // same inputs must give the same bits.
        let decode = case.seqs.iter().all(|(rows, _)| *rows == 1);
        let fused = self.cuda.gdn_fused_decode_covers(&b, &h);
        anyhow::ensure!(
            decode == fused,
            "{}: the fused decode kernel {} this step",
            case.name,
            if fused { "takes" } else { "does not take" }
        );
        if !fused {
            return Ok(());
        }
        // The same step on fresh copies of the inputs: (splits, fused) → out, states, windows.
        let again = |s: &mut Self, splits: Option<usize>, fused: bool| -> Result<_> {
            let mut conv = s.cuda.upload_f32(&[slots, window], &conv_data)?;
            let mut rec = s.cuda.upload_f32(&[slots, rec], &rec_data)?;
            let mut out = s.cuda.zeros(&[t, h.nv * h.dv])?;
            s.cuda.retune(|t| t.gdn.fused_decode = fused);
            s.cuda.retune(|t| t.gdn.decode_splits = splits);
            let r = s
                .cuda
                .gated_delta_net(&mut out, &mixed_d, &ld, &mut conv, &mut rec, &b, &batch_d);
            s.cuda.retune(|t| t.gdn.fused_decode = true);
            s.cuda.retune(|t| t.gdn.decode_splits = None);
            r?;
            Ok([out, rec, conv].map(|x| s.cuda.to_host(&x)))
        };
        let three = again(self, None, false)?;
        let default = [&out_d, &rec_d, &conv_d].map(|x| self.cuda.to_host(x));
        let mut runs = vec![("fused".to_string(), default)];
        for splits in [1, 2, 4] {
            if (h.dv / splits).is_multiple_of(4) {
                let got = again(self, Some(splits), true)?;
                runs.push((format!("fused in {splits} blocks a key head"), got));
            }
        }
        for (how, got) in runs {
            for ((what, g), w) in ["out", "recurrent states", "conv windows"]
                .into_iter()
                .zip(got)
                .zip(&three)
            {
                let (g, w) = (g?, w.as_ref().map_err(|e| anyhow::anyhow!("{e}"))?);
                let case = format!("{} {what}: {how} = 3 launches", case.name);
                self.report
                    .case(op, &case, Tol::EXACT, &compare(&g, w, Tol::EXACT));
            }
        }
        Ok(())
    }

    fn cases() -> Vec<Case> {
        let fixture = DeltaHeads {
            nk: 2,
            dk: 16,
            nv: 4,
            dv: 16,
        };
        let big = DeltaHeads {
            nk: 16,
            dk: 128,
            nv: 32,
            dv: 128,
        };
        // Decode rows (saved after their row, as speculative scratch is), a 130-row prefill
        // chunk with two saves at one `after`, a 2-row chunk (shorter than the window), a
        // 7-row draft verification saved after every row, an empty sequence.
        let mixed_batch = vec![
            (1, vec![1]),
            (130, vec![16, 64, 64, 130]),
            (2, vec![]),
            (7, (1..=7).collect()),
            (1, vec![]),
            (0, vec![]),
        ];
        // A decode step as a CUDA graph runs it: padding rows (sequences 1 and 4), saves before
        // and after the row (two at one `after`) into several slots.
        let decode_batch = vec![
            (1, vec![]),
            (1, vec![]),
            (1, vec![1]),
            (1, vec![0, 1, 1]),
            (1, vec![]),
            (1, vec![0]),
        ];
        // Every sequence through the chunked kernels: lengths around a chunk (64 rows), saves
        // at 0, mid-chunk, at chunk ends and at the end, several sequences in one step.
        let chunked = vec![
            (1, vec![1]),
            (63, vec![0, 63]),
            (64, vec![32, 64]),
            (65, vec![64, 64, 65]),
            (200, vec![17, 64, 100, 128, 199]),
            (0, vec![]),
            (7, vec![]),
        ];
        vec![
            Case {
                name: "fixture heads, mixed bf16",
                heads: fixture,
                kernel: 4,
                seqs: mixed_batch.clone(),
                mixed: DType::BF16,
                a_scale: 24.0,
                chunk_min: Some(GDN_CHUNK_MIN),
                pads: vec![],
            },
            Case {
                name: "fixture heads, mixed f32",
                heads: fixture,
                kernel: 4,
                seqs: mixed_batch.clone(),
                mixed: DType::F32,
                a_scale: 4.0,
                chunk_min: Some(GDN_CHUNK_MIN),
                pads: vec![],
            },
            Case {
                name: "35B-A3B heads, mixed f32",
                heads: big,
                kernel: 4,
                seqs: mixed_batch.clone(),
                mixed: DType::F32,
                a_scale: 4.0,
                chunk_min: Some(GDN_CHUNK_MIN),
                pads: vec![],
            },
            Case {
                name: "35B-A3B heads, 4 decode rows, bf16",
                heads: big,
                kernel: 4,
                seqs: vec![(1, vec![]), (1, vec![1]), (1, vec![]), (1, vec![1, 1])],
                mixed: DType::BF16,
                a_scale: 4.0,
                chunk_min: Some(GDN_CHUNK_MIN),
                pads: vec![],
            },
            Case {
                name: "fixture heads, 6 decode rows, 2 padding, saves, bf16",
                heads: fixture,
                kernel: 4,
                seqs: decode_batch.clone(),
                mixed: DType::BF16,
                a_scale: 24.0,
                chunk_min: Some(GDN_CHUNK_MIN),
                pads: vec![1, 4],
            },
            Case {
                name: "35B-A3B heads, 6 decode rows, 2 padding, saves, f32",
                heads: big,
                kernel: 4,
                seqs: decode_batch,
                mixed: DType::F32,
                a_scale: 4.0,
                chunk_min: Some(GDN_CHUNK_MIN),
                pads: vec![1, 4],
            },
            Case {
                name: "35B-A3B heads, mixed f32, recurrent only",
                heads: big,
                kernel: 4,
                seqs: mixed_batch.clone(),
                mixed: DType::F32,
                a_scale: 4.0,
                chunk_min: None,
                pads: vec![],
            },
            Case {
                name: "chunked, fixture heads, mixed bf16",
                heads: fixture,
                kernel: 4,
                seqs: chunked.clone(),
                mixed: DType::BF16,
                a_scale: 24.0,
                chunk_min: Some(1),
                pads: vec![],
            },
            Case {
                name: "chunked, 35B-A3B heads, mixed f32",
                heads: big,
                kernel: 4,
                seqs: chunked,
                mixed: DType::F32,
                a_scale: 4.0,
                chunk_min: Some(1),
                pads: vec![],
            },
            Case {
                name: "chunked, 35B-A3B heads, bf16, 2048 rows",
                heads: big,
                kernel: 4,
                seqs: vec![(2048, vec![1000, 1024])],
                mixed: DType::BF16,
                a_scale: 4.0,
                chunk_min: Some(1),
                pads: vec![],
            },
        ]
    }
}

/// The `HybridOps` against the CPU's: every pair of activation types, and `gated_delta_net`'s
/// cases (its output in the backend's compute type). `ops-f32` runs this on the float32 path.
pub fn run_ops(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    report.case_header();
    let mut c = Check {
        cuda,
        cpu: CpuBackend::default(),
        rng: Rng::new(0x5eed_0d17),
        report,
    };
    // METRALE_HYBRID_SPEED_ONLY=1 runs only the timings (e.g. under a profiler).
    if std::env::var_os("METRALE_HYBRID_SPEED_ONLY").is_none_or(|v| v != "1") {
        c.elementwise()?;
        for case in Check::cases() {
            let name = case.name;
            c.run("gated_delta_net", name, |s| s.gated_delta_net(&case))?;
        }
        // Nemotron-H's ops (mamba2.rs).
        c.relu2()?;
        for case in Check::mamba2_cases() {
            let name = case.name;
            c.run("mamba2", name, |s| s.mamba2(&case))?;
        }
    }
    Ok(())
}

pub fn run(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    run_ops(cuda, report)?;
    cuda.retune(|t| t.launch.cuda_sync = false);
    let r = crate::hybrid_speed::run(cuda, report)
        .and_then(|()| crate::mamba2_speed::run(cuda, report));
    cuda.retune(|t| t.launch.cuda_sync = true);
    r
}
