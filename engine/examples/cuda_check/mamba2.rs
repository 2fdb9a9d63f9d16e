//! Nemotron-H's ops in section `hybrid` (and `ops-f32`): `mamba2` and `relu2` of the CUDA
//! backend against the CPU's on random inputs. Each `mamba2` case runs a prefill-like step
//! (sequences of many rows, a decode row, an empty one, saves at 0, mid-sequence, twice at one
//! `after` and at the end) from random slot states, then a decode step (one row a sequence, two
//! padding rows, saves before and after the row) continuing from the states the first step
//! left, comparing the output, the SSM states and the conv windows after each. Each case runs
//! three ways ([`ROUTES`]): the defaults (the 70- and 130-row sequences on the chunked scan, the
//! others token by token), everything chunked (1-row sequences too), and the token-by-token
//! scan. The timings are `mamba2_speed.rs`'s.
//!
//! Tolerances as `gated_delta_net`'s (hybrid.rs): the states are f32 on both sides, each entry
//! the same expression (`S·decay + (dt·x)·B`), the read-out summed in another order:
//! [`Tol::F32`]; the windows are copies: exact; the output is the compute type after a
//! grouped RMSNorm of f32 values: [`Tol::BF16`] (bf16) or [`Tol::F32`] (float32 path).

use anyhow::Result;
use metrale_engine::backend::cpu::CpuTensor;
use metrale_engine::backend::cuda::{CudaTensor, DType};
use metrale_engine::backend::{Backend, HybridOps, Mamba2Layer, SsmHeads};

use crate::hybrid::{Check, batch_padded};
use crate::report::Tol;

/// The tunings each case runs under: `mamba2.chunk_min`.
const ROUTES: [(&str, Option<usize>); 3] = [
    ("chunked from 32 rows", Some(32)),
    ("all chunked", Some(1)),
    ("token scan", None),
];

/// One Mamba-2 case: heads, taps, the dt limits and the type of `mixed`.
pub struct Case {
    pub name: &'static str,
    pub heads: SsmHeads,
    pub kernel: usize,
    pub dt_limit: (f32, f32),
    pub mixed: DType,
}

/// A layer's f32 parameters (conv, conv_bias, neg_a, dt_bias, d, norm) on one side.
fn layer<'a, T>(case: &Case, p: &'a [T; 6]) -> Mamba2Layer<'a, T> {
    Mamba2Layer {
        heads: case.heads,
        kernel: case.kernel,
        conv: &p[0],
        conv_bias: &p[1],
        neg_a: &p[2],
        dt_bias: &p[3],
        d: &p[4],
        norm: &p[5],
        dt_limit: case.dt_limit,
        eps: 1e-5,
    }
}

fn six<T>(v: Vec<T>) -> Result<[T; 6]> {
    v.try_into().map_err(|_| anyhow::anyhow!("six parameters"))
}

impl Check<'_> {
    fn mamba2_params(&mut self, case: &Case) -> Result<([CudaTensor; 6], [CpuTensor; 6])> {
        let h = case.heads;
        let (cd, nh) = (h.conv_dim(), h.heads);
        let neg_a: Vec<f32> = (0..nh).map(|_| -(0.5 + 0.4 * self.rng.uniform())).collect();
        let norm: Vec<f32> = (0..h.inner())
            .map(|_| 1.0 + 0.2 * self.rng.uniform())
            .collect();
        let params = [
            (vec![cd, case.kernel], self.rng.vec(cd * case.kernel, 0.6)),
            (vec![cd], self.rng.vec(cd, 0.5)),
            (vec![nh], neg_a),
            (vec![nh], self.rng.vec(nh, 1.0)),
            (vec![nh], self.rng.vec(nh, 1.0)),
            (vec![h.inner()], norm),
        ];
        let (mut dev, mut cpu) = (Vec::new(), Vec::new());
        for (shape, data) in params {
            let (d, c) = self.pair_f32(&shape, data)?;
            dev.push(d);
            cpu.push(c);
        }
        Ok((six(dev)?, six(cpu)?))
    }

    /// `mixed` `[T, z | xBC | dt]`, the dt column scaled past softplus's linear point and the
    /// limits.
    fn mamba2_mixed(&mut self, case: &Case, t: usize) -> Result<(CudaTensor, CpuTensor)> {
        let h = case.heads;
        let width = h.inner() + h.conv_dim() + h.heads;
        self.mixed_pair([t, width], (h.heads, 12.0), case.mixed)
    }

    /// The case's two steps under each of [`ROUTES`], each compared; the tuning's defaults
    /// after.
    pub fn mamba2(&mut self, case: &Case) -> Result<()> {
        let defaults = self.cuda.tuning().mamba2;
        let mut r = Ok(());
        for (route, chunk_min) in ROUTES {
            self.cuda.retune(|t| t.mamba2.chunk_min = chunk_min);
            r = self.mamba2_route(case, route);
            if r.is_err() {
                break;
            }
        }
        self.cuda.retune(|t| t.mamba2 = defaults);
        r
    }

    /// The case's two steps on the current tuning's route.
    fn mamba2_route(&mut self, case: &Case, route: &str) -> Result<()> {
        let h = case.heads;
        let (pd, pc) = self.mamba2_params(case)?;
        let (ld, lc) = (layer(case, &pd), layer(case, &pc));
        let prefill = vec![
            (1, vec![1]),
            (70, vec![0, 16, 33, 33, 70]),
            (2, vec![]),
            (7, (1..=7).collect()),
            (0, vec![]),
            (130, vec![64, 100]),
        ];
        let decode = vec![
            (1, vec![]),
            (1, vec![]),
            (1, vec![1]),
            (1, vec![0, 1, 1]),
            (1, vec![]),
        ];
        let steps = [("prefill", prefill, vec![]), ("decode", decode, vec![1, 4])];
        // Slots for the larger step's sequences and saves, random to start with.
        let slots = steps
            .iter()
            .map(|(_, seqs, pads)| batch_padded(seqs, pads).1)
            .max()
            .unwrap_or(0);
        let window = (case.kernel - 1) * h.conv_dim();
        let data = self.rng.vec(slots * window, 1.0);
        let (mut conv_d, mut conv_c) = self.pair_f32(&[slots, window], data)?;
        let data = self.rng.vec(slots * h.state_len(), 0.5);
        let (mut ssm_d, mut ssm_c) = self.pair_f32(&[slots, h.state_len()], data)?;
        let tol = if self.cuda.compute_dtype() == DType::F32 {
            Tol::F32
        } else {
            Tol::BF16
        };
        for (step, seqs, pads) in steps {
            let (b, _) = batch_padded(&seqs, &pads);
            let t = b.num_tokens();
            let (mixed_d, mixed_c) = self.mamba2_mixed(case, t)?;
            let mut out_d = self.cuda.zeros(&[t, h.inner()])?;
            let mut out_c = self.cpu.zeros(&[t, h.inner()])?;
            let batch_d = self.cuda.prepare_batch(&b)?;
            self.cuda.mamba2(
                &mut out_d,
                &mixed_d,
                &ld,
                &mut conv_d,
                &mut ssm_d,
                &b,
                &batch_d,
            )?;
            self.cpu
                .mamba2(&mut out_c, &mixed_c, &lc, &mut conv_c, &mut ssm_c, &b, &b)?;
            let name = format!("{}, {route}, {step}", case.name);
            self.compare("mamba2", &format!("{name} out"), tol, &out_d, &out_c)?;
            let states = format!("{name} ssm states");
            self.compare("mamba2", &states, Tol::F32, &ssm_d, &ssm_c)?;
            let windows = format!("{name} conv windows");
            self.compare("mamba2", &windows, Tol::EXACT, &conv_d, &conv_c)?;
        }
        Ok(())
    }

    /// `relu2` over every pair of activation types (the output takes the compute type).
    pub fn relu2(&mut self) -> Result<()> {
        let tol = if self.cuda.compute_dtype() == DType::F32 {
            Tol::F32
        } else {
            Tol::BF16
        };
        for (rows, cols, xd) in [
            (1, 96, DType::F32),
            (9, 4480, DType::BF16),
            (130, 96, DType::BF16),
        ] {
            let case = format!("x {xd:?} [{rows}, {cols}]");
            self.run("relu2", &case, |s| {
                let (xd_, xc) = s.pair(&[rows, cols], 3.0, xd)?;
                let mut od = s.cuda.zeros(&[rows, cols])?;
                let mut oc = s.cpu.zeros(&[rows, cols])?;
                s.cuda.relu2(&mut od, &xd_)?;
                s.cpu.relu2(&mut oc, &xc)?;
                s.compare("relu2", &case, tol, &od, &oc)
            })?;
        }
        Ok(())
    }

    pub fn mamba2_cases() -> Vec<Case> {
        let fixture = SsmHeads {
            heads: 8,
            head_dim: 8,
            groups: 2,
            state: 16,
        };
        // Nemotron Nano 9B v2's heads (its head_dim 80 leaves a partial block of rows).
        let nano = SsmHeads {
            heads: 128,
            head_dim: 80,
            groups: 8,
            state: 128,
        };
        vec![
            Case {
                name: "fixture heads, mixed bf16",
                heads: fixture,
                kernel: 4,
                dt_limit: (0.0, f32::INFINITY),
                mixed: DType::BF16,
            },
            Case {
                name: "fixture heads, dt limits, mixed f32",
                heads: fixture,
                kernel: 4,
                dt_limit: (0.01, 2.5),
                mixed: DType::F32,
            },
            Case {
                name: "Nano 9B heads, mixed bf16",
                heads: nano,
                kernel: 4,
                dt_limit: (0.0, f32::INFINITY),
                mixed: DType::BF16,
            },
            Case {
                name: "Nano 9B heads, dt limits, mixed f32",
                heads: nano,
                kernel: 4,
                dt_limit: (0.001, 0.1),
                mixed: DType::F32,
            },
        ]
    }
}
