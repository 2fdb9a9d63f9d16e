//! Every op of the CUDA backend against the CPU reference on fresh random inputs of several
//! shapes. The CPU gets exactly what the device holds (bf16 inputs rounded on the host first),
//! so the only differences are the device's arithmetic and its output rounding.
//!
//! Run on a float32-path backend (`CudaBackend::with_dtype(_, F32)`, section `ops-f32`), the
//! same cases take f32 weights, activations and caches, and every bf16-level tolerance becomes
//! [`Tol::F32`]: nothing is rounded on either side.

use anyhow::{Context, Result, bail};
use half::bf16;
use metrale_engine::backend::cpu::CpuTensor;
use metrale_engine::backend::cuda::{CudaBackend, CudaTensor, DType};
use metrale_engine::backend::sampling::SampleRow;
use metrale_engine::backend::{Backend, BatchInputs, CpuBackend, RopeTables, SeqChunk, TableWrite};
use metrale_engine::loader::{DType as HostDType, HostData, HostTensor};
use metrale_engine::sampling_params::SamplingParams;
use serde_json::json;

use crate::report::{Report, Tol, compare};

pub mod attention;
mod attention_window;
mod gemv;
mod gpt_oss;
mod matmul;
mod minimax;
mod mla;
pub mod moe;
mod moe_fp4;
pub mod nemotron_moe;
mod norm;
mod nvfp4;
mod uploads;

/// bf16 output rounded twice (a bf16 residual feeds the norm): two roundings of 2^-8.
const BF16_TWICE: Tol = Tol {
    atol: 0.0,
    atol_rms: 1e-4,
    rtol: 1e-2,
};

/// fused_moe: the CPU keeps the SiLU products in f32, the device rounds them to bf16 before the
/// down projection (about 2^-9 of each term: on the H200 the error's rms is 1.4e-3 to 1.7e-3 of
/// the output's on every route, and the largest of 2M outputs with FP8 experts' heavy-tailed
/// weights and skewed routing reaches 1.3e-2 of the rms; where four favoured experts' FP8
/// products cancel to a small output the rounding stays relative to the terms, and the H200
/// measured 2.5e-2 of the rms at one of 76,800 outputs of T 300 H 256 I 96 skewed, on every
/// route alike); a wrongly routed token would be off by the whole expert.
const MOE: Tol = Tol {
    atol: 0.0,
    atol_rms: 3e-2,
    rtol: 1e-2,
};

/// A small deterministic generator (splitmix64).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    pub fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform() * scale).collect()
    }

    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
}

pub fn round_bf16(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&x| bf16::from_f32(x).to_f32()).collect()
}

fn dt(d: DType) -> &'static str {
    match d {
        DType::BF16 => "bf16",
        DType::F32 => "f32",
        DType::F8 => "fp8",
        DType::F4 => "nvfp4",
        DType::Mx4 => "mxfp4",
    }
}

/// A batch of one sequence whose rows sit at arbitrary `positions` (for RoPE and write_kv).
fn positions_batch(positions: Vec<u32>, slots: Vec<u32>, bs: usize) -> BatchInputs {
    let t = positions.len();
    let ctx = positions.iter().map(|&p| p as usize + 1).max().unwrap_or(0);
    let blocks = ctx.div_ceil(bs).max(1);
    BatchInputs {
        token_ids: vec![0; t],
        positions,
        slot_mapping: slots,
        seq_starts: vec![0, t as u32],
        context_lens: vec![ctx as u32],
        block_tables: vec![0; blocks],
        max_blocks_per_seq: blocks,
        block_size: bs,
        logits_rows: Vec::new(),
        table_rows: Vec::new(),
        states: Vec::new(),
        groups: Vec::new(),
    }
}

fn sample_row<'a>(i: usize, params: &'a SamplingParams, history: &'a [u32]) -> SampleRow<'a> {
    SampleRow {
        logits_row: i,
        params,
        all_token_ids: history,
        num_prompt_tokens: 3,
        seq: None,
    }
}

/// An attention case: heads (q, kv, head_dim), sequences as (start position, new tokens).
struct Ops<'a> {
    cuda: &'a CudaBackend,
    cpu: CpuBackend,
    rng: Rng,
    report: &'a mut Report,
}

impl Ops<'_> {
    /// That `op` refused `what` with an error naming `needle` (a bad shape or count must be an
    /// error, never a launch): a line either way, a failure if it was accepted.
    fn expect_refusal(
        &mut self,
        op: &str,
        what: &str,
        needle: &str,
        result: metrale_engine::backend::Result<()>,
    ) {
        let e = result.err().map(|e| e.to_string()).unwrap_or_default();
        let ok = e.contains(needle);
        self.report.line(format!(
            "{op} refuses {what}: {}",
            if ok { "ok" } else { "FAIL" }
        ));
        if !ok {
            self.report.fail(format!("{op} accepted {what} ({e:?})"));
        }
    }

    /// The float32 path: f32 weights, GEMM operands and caches.
    fn fp32(&self) -> bool {
        self.cuda.compute_dtype() == DType::F32
    }

    /// The type of weights and caches the backend keeps.
    fn wd(&self) -> DType {
        self.cuda.compute_dtype()
    }

    /// An activation type of a case: as given on the bf16 path, f32 on the float32 path.
    fn act(&self, d: DType) -> DType {
        if self.fp32() { DType::F32 } else { d }
    }

    /// The CUDA matmul's activation operand is bf16 on the bf16 path (an f32 x is narrowed
    /// first, see blas.rs and fp8.rs): the CPU reference takes the same narrowed x, so a matmul
    /// check measures the GEMM, not that documented rounding. The float32 path narrows nothing.
    fn as_gemm_operand(&self, x: CpuTensor) -> CpuTensor {
        if self.fp32() {
            return x;
        }
        CpuTensor::new(x.shape.clone(), round_bf16(&x.data))
    }

    /// The same values on both sides (rounded to bf16 first when the device holds bf16).
    fn pair(
        &self,
        shape: &[usize],
        data: Vec<f32>,
        dtype: DType,
    ) -> Result<(CudaTensor, CpuTensor)> {
        let data = if dtype == DType::BF16 {
            round_bf16(&data)
        } else {
            data
        };
        let dev = self.cuda.tensor_from_f32(shape, &data, dtype)?;
        Ok((dev, CpuTensor::new(shape.to_vec(), data)))
    }

    fn random(
        &mut self,
        shape: &[usize],
        scale: f32,
        dtype: DType,
    ) -> Result<(CudaTensor, CpuTensor)> {
        let data = self.rng.vec(shape.iter().product(), scale);
        self.pair(shape, data, dtype)
    }

    /// A random FP8 weight as the loader hands it over: e4m3 bytes (no NaN) and one scale per
    /// row and 128 columns around 0.05 / 448 · 10.
    fn fp8_host(&mut self, shape: &[usize]) -> HostTensor<'static> {
        let n: usize = shape.iter().product();
        let cols = shape.last().copied().unwrap_or(1);
        let bytes: Vec<u8> = (0..n)
            .map(|_| {
                let b = (self.rng.next_u64() >> 56) as u8;
                if b & 0x7f == 0x7f { b ^ 1 } else { b }
            })
            .collect();
        let scales: Vec<f32> = (0..n / cols.max(1) * cols.div_ceil(128))
            .map(|_| 1e-3 * (1.5 + self.rng.uniform()))
            .collect();
        HostTensor {
            shape: shape.to_vec(),
            data: HostData::Fp8 {
                bytes: bytes.into(),
                scales,
                col_block: 128,
            },
        }
    }

    /// The same FP8 weight on both sides (the CPU dequantizes it at upload, as it does a
    /// checkpoint's).
    fn fp8_pair(&mut self, shape: &[usize]) -> Result<(CudaTensor, CpuTensor)> {
        let host = self.fp8_host(shape);
        Ok((self.cuda.upload(&host)?, self.cpu.upload(&host)?))
    }

    /// Weights around 1 (norm gains), of the backend's weight type.
    fn gains(&mut self, n: usize) -> Result<(CudaTensor, CpuTensor)> {
        let data = (0..n).map(|_| 1.0 + 0.2 * self.rng.uniform()).collect();
        self.pair(&[n], data, self.wd())
    }

    fn check(
        &mut self,
        op: &str,
        case: &str,
        tol: Tol,
        got: &CudaTensor,
        want: &CpuTensor,
    ) -> Result<bool> {
        // The float32 path rounds nothing: every bf16-level tolerance tightens to f32's.
        let tol = if self.fp32() && tol.rtol > Tol::F32.rtol {
            Tol::F32
        } else {
            tol
        };
        let g = self.cuda.to_host(got)?;
        if self.cuda.shape(got) != want.shape.as_slice() {
            bail!(
                "{op} {case}: shape {:?}, reference {:?}",
                self.cuda.shape(got),
                want.shape
            );
        }
        Ok(self
            .report
            .case(op, case, tol, &compare(&g, &want.data, tol)))
    }

    /// `got` against `want`, both on the device, bit for bit: one report line `{op} {case} =
    /// {against}: ok` or a failure counting the elements that differ (a shape mismatch counts
    /// every element).
    fn same_bits(
        &mut self,
        op: &str,
        case: &str,
        against: &str,
        pairs: &[(&CudaTensor, &CudaTensor)],
    ) -> Result<()> {
        let (mut differ, mut total) = (0, 0);
        for (got, want) in pairs {
            let (g, w) = (self.cuda.to_host(got)?, self.cuda.to_host(want)?);
            total += g.len().max(w.len());
            differ += if g.len() == w.len() {
                g.iter()
                    .zip(&w)
                    .filter(|(a, b)| a.to_bits() != b.to_bits())
                    .count()
            } else {
                g.len().max(w.len())
            };
        }
        let verdict = if differ == 0 { "ok" } else { "FAIL" };
        self.report
            .line(format!("{op} {case} = {against}: {verdict}"));
        if differ != 0 {
            self.report.fail(format!(
                "{op} {case}: {differ} of {total} values differ from {against}"
            ));
        }
        Ok(())
    }

    /// Run one case; an error fails the case, and a device that no longer answers ends the
    /// section (its context is lost after a fault).
    fn run(&mut self, op: &str, case: &str, f: impl FnOnce(&mut Self) -> Result<()>) -> Result<()> {
        if let Err(e) = f(self) {
            self.report.fail(format!("{op} {case}: {e:#}"));
            self.report
                .record(json!({"op": op, "case": case, "error": format!("{e:#}")}));
            if let Err(dead) = self.cuda.synchronize() {
                bail!("the device stopped answering after {op} {case}: {dead}");
            }
        }
        Ok(())
    }

    fn embedding(&mut self) -> Result<()> {
        for (vocab, h, t) in [
            (1536, 64, 7),
            (1536, 96, 130),
            (151_936, 64, 1000),
            (32_000, 4096, 1),
        ] {
            let case = format!("vocab {vocab} hidden {h} T={t}");
            self.run("embedding", &case, |s| {
                let (table_d, table_c) = s.random(&[vocab, h], 1.0, s.wd())?;
                let mut tokens: Vec<u32> = (0..t).map(|_| s.rng.below(vocab) as u32).collect();
                tokens[0] = vocab as u32 - 1;
                let b = positions_batch((0..t as u32).collect(), vec![0; t], 16);
                let b = BatchInputs {
                    token_ids: tokens,
                    ..b
                };
                let batch = s.cuda.prepare_batch(&b)?;
                let mut out_d = s.cuda.zeros(&[t, h])?;
                let mut out_c = s.cpu.zeros(&[t, h])?;
                s.cuda.embedding(&mut out_d, &batch, &table_d)?;
                s.cpu.embedding(&mut out_c, &b, &table_c)?;
                s.check("embedding", &case, Tol::EXACT, &out_d, &out_c)?;
                Ok(())
            })?;
        }
        Ok(())
    }

    fn rope(&mut self) -> Result<()> {
        // (T, heads, kv heads, head_dim, rotary_dim, theta, scale, positions below, qkv type)
        let cases = [
            (7, 4, 2, 32, 32, 1e4f32, 1.0f32, 512, DType::F32),
            (130, 8, 2, 24, 24, 1e4, 1.2, 2048, DType::F32),
            (1, 6, 6, 16, 16, 1e4, 1.0, 100, DType::F32),
            (1000, 32, 8, 128, 128, 1e6, 1.0, 40_000, DType::F32),
            (7, 8, 1, 64, 32, 1e4, 1.0, 2048, DType::F32),
            (130, 32, 8, 128, 128, 1e6, 1.0, 2048, DType::BF16),
        ];
        for (t, nh, nkv, hd, rot, theta, scale, max_pos, qd) in cases {
            let qd = self.act(qd);
            let case = format!(
                "qkv {} T={t} h={nh}/{nkv} hd={hd} rot={rot} pos<{max_pos}",
                dt(qd)
            );
            self.run("qk_norm_rope", &case, |s| {
                let width = (nh + 2 * nkv) * hd;
                let (mut q_d, mut q_c) = s.random(&[t, width], 2.0, qd)?;
                let (qw_d, qw_c) = s.gains(hd)?;
                let (kw_d, kw_c) = s.gains(hd)?;
                let rope = RopeTables {
                    inv_freq: (0..rot / 2)
                        .map(|i| 1.0 / theta.powf(2.0 * i as f32 / rot as f32))
                        .collect(),
                    scale,
                    rotary_dim: rot,
                };
                let mut positions: Vec<u32> = (0..t).map(|_| s.rng.below(max_pos) as u32).collect();
                positions[0] = max_pos as u32 - 1;
                let b = positions_batch(positions, vec![0; t], 16);
                let batch = s.cuda.prepare_batch(&b)?;
                s.cuda
                    .qk_norm_rope(&mut q_d, &batch, &qw_d, &kw_d, &rope, nh, nkv, 1e-6)?;
                s.cpu
                    .qk_norm_rope(&mut q_c, &b, &qw_c, &kw_c, &rope, nh, nkv, 1e-6)?;
                let tol = if qd == DType::F32 {
                    Tol::F32
                } else {
                    Tol::BF16
                };
                s.check("qk_norm_rope", &case, tol, &q_d, &q_c)?;
                Ok(())
            })?;
        }
        Ok(())
    }

    fn write_kv(&mut self) -> Result<()> {
        for (nh, nkv, hd, t, blocks) in [
            (4, 2, 32, 7, 8),
            (32, 8, 128, 130, 40),
            (6, 6, 16, 1000, 70),
        ] {
            let case = format!("T={t} h={nh}/{nkv} hd={hd} into {blocks}×16 slots");
            self.run("write_kv", &case, |s| {
                let bs = 16;
                let width = (nh + 2 * nkv) * hd;
                let (q_d, q_c) = s.random(&[t, width], 2.0, DType::F32)?;
                let mut slots: Vec<u32> = (0..(blocks * bs) as u32).collect();
                s.rng.shuffle(&mut slots);
                slots.truncate(t);
                let b = positions_batch((0..t as u32).collect(), slots, bs);
                let batch = s.cuda.prepare_batch(&b)?;
                let shape = [blocks, bs, nkv, hd];
                let (mut k_d, mut v_d) = (s.cuda.kv_zeros(&shape)?, s.cuda.kv_zeros(&shape)?);
                let (mut k_c, mut v_c) = (s.cpu.kv_zeros(&shape)?, s.cpu.kv_zeros(&shape)?);
                s.cuda.write_kv(&mut k_d, &mut v_d, &q_d, &batch, nh)?;
                s.cpu.write_kv(&mut k_c, &mut v_c, &q_c, &b, nh)?;
                s.check("write_kv", &format!("{case} k"), Tol::BF16, &k_d, &k_c)?;
                s.check("write_kv", &format!("{case} v"), Tol::BF16, &v_d, &v_c)?;
                Ok(())
            })?;
        }
        // The fused QK-norm + RoPE + cache write against the CPU's two ops.
        for (nh, nkv, hd, t, blocks, qd) in [
            (4, 2, 32, 7, 8, DType::F32),
            (32, 8, 128, 130, 40, DType::F32),
            (32, 8, 128, 1, 4, DType::BF16),
            (6, 6, 16, 300, 70, DType::F32),
        ] {
            let qd = self.act(qd);
            let case = format!(
                "qkv {} T={t} h={nh}/{nkv} hd={hd} into {blocks}×16 slots",
                dt(qd)
            );
            self.run("qk_norm_rope_write_kv", &case, |s| {
                let bs = 16;
                let width = (nh + 2 * nkv) * hd;
                let (mut q_d, mut q_c) = s.random(&[t, width], 2.0, qd)?;
                let (qw_d, qw_c) = s.gains(hd)?;
                let (kw_d, kw_c) = s.gains(hd)?;
                let rope = RopeTables {
                    inv_freq: (0..hd / 2)
                        .map(|i| 1.0 / 1e6f32.powf(2.0 * i as f32 / hd as f32))
                        .collect(),
                    scale: 1.0,
                    rotary_dim: hd,
                };
                let mut slots: Vec<u32> = (0..(blocks * bs) as u32).collect();
                s.rng.shuffle(&mut slots);
                slots.truncate(t);
                let positions: Vec<u32> = (0..t).map(|_| s.rng.below(4096) as u32).collect();
                let b = positions_batch(positions, slots, bs);
                let batch = s.cuda.prepare_batch(&b)?;
                let shape = [blocks, bs, nkv, hd];
                let (mut k_d, mut v_d) = (s.cuda.kv_zeros(&shape)?, s.cuda.kv_zeros(&shape)?);
                let (mut k_c, mut v_c) = (s.cpu.kv_zeros(&shape)?, s.cpu.kv_zeros(&shape)?);
                let dims = (nh, nkv, 1e-6);
                s.cuda.qk_norm_rope_write_kv(
                    &mut q_d, &batch, &qw_d, &kw_d, &rope, dims, &mut k_d, &mut v_d,
                )?;
                s.cpu.qk_norm_rope_write_kv(
                    &mut q_c, &b, &qw_c, &kw_c, &rope, dims, &mut k_c, &mut v_c,
                )?;
                let tol = if qd == DType::F32 {
                    Tol::F32
                } else {
                    Tol::BF16
                };
                // The cache: bf16 rounding, or with an FP8 cache one e4m3 step where the
                // device's bf16 rope output and the CPU's f32 one round apart.
                let cache_tol = if s.cuda.kv_cache_fp8() && qd == DType::BF16 {
                    Tol::KV8
                } else {
                    Tol::BF16
                };
                s.check(
                    "qk_norm_rope_write_kv",
                    &format!("{case} qkv"),
                    tol,
                    &q_d,
                    &q_c,
                )?;
                s.check(
                    "qk_norm_rope_write_kv",
                    &format!("{case} k"),
                    cache_tol,
                    &k_d,
                    &k_c,
                )?;
                s.check(
                    "qk_norm_rope_write_kv",
                    &format!("{case} v"),
                    cache_tol,
                    &v_d,
                    &v_c,
                )?;
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Gemma's gate: silu_mul's cases with GELU-tanh (last, so every earlier case keeps its
    /// random draws).
    fn gelu_tanh(&mut self) -> Result<()> {
        for (t, i, gd) in [
            (1, 160, DType::F32),
            (7, 12_288, DType::F32),
            (130, 192, DType::F32),
            (7, 160, DType::BF16),
        ] {
            let gd = self.act(gd);
            let case = format!("gate_up {} [{t}, 2·{i}]", dt(gd));
            self.run("gelu_tanh_mul", &case, |s| {
                let (g_d, g_c) = s.random(&[t, 2 * i], 4.0, gd)?;
                let (mut out_d, mut out_c) = (s.cuda.zeros(&[t, i])?, s.cpu.zeros(&[t, i])?);
                s.cuda.gelu_tanh_mul(&mut out_d, &g_d)?;
                s.cpu.gelu_tanh_mul(&mut out_c, &g_c)?;
                s.check("gelu_tanh_mul", &case, Tol::BF16, &out_d, &out_c)
                    .map(|_| ())
            })?;
        }
        Ok(())
    }

    fn silu_and_rows(&mut self) -> Result<()> {
        for (t, i, gd) in [
            (1, 160, DType::F32),
            (7, 12_288, DType::F32),
            (130, 192, DType::F32),
            (1000, 12_288, DType::F32),
            (7, 160, DType::BF16),
        ] {
            let gd = self.act(gd);
            let case = format!("gate_up {} [{t}, 2·{i}]", dt(gd));
            self.run("silu_mul", &case, |s| {
                let (g_d, g_c) = s.random(&[t, 2 * i], 4.0, gd)?;
                let mut out_d = s.cuda.zeros(&[t, i])?;
                let mut out_c = s.cpu.zeros(&[t, i])?;
                s.cuda.silu_mul(&mut out_d, &g_d)?;
                s.cpu.silu_mul(&mut out_c, &g_c)?;
                s.check("silu_mul", &case, Tol::BF16, &out_d, &out_c)?;
                Ok(())
            })?;
        }
        // The fused gate_up GEMV + SiLU (one row: the decode path; 3 rows: cuBLAS + silu_mul
        // unless METRALE_GEMV_MAX_ROWS says otherwise) against the CPU's matmul + silu_mul.
        for (t, i, k) in [(1, 12_288, 4096), (1, 40, 1048), (3, 160, 64), (1, 96, 20)] {
            let case = format!("x {} [{t}, {k}] · w [2·{i}, {k}]", dt(self.wd()));
            self.run("matmul_silu_mul", &case, |s| {
                let (x_d, x_c) = s.random(&[t, k], 1.0, s.wd())?;
                let (w_d, w_c) = s.random(&[2 * i, k], 0.05, s.wd())?;
                let mut out_d = s.cuda.zeros(&[t, i])?;
                let mut out_c = s.cpu.zeros(&[t, i])?;
                let mut gu_d = s.cuda.zeros(&[t, 2 * i])?;
                let mut gu_c = s.cpu.zeros(&[t, 2 * i])?;
                s.cuda.matmul_silu_mul(&mut out_d, &mut gu_d, &x_d, &w_d)?;
                s.cpu.matmul_silu_mul(&mut out_c, &mut gu_c, &x_c, &w_c)?;
                s.check("matmul_silu_mul", &case, Tol::BF16, &out_d, &out_c)?;
                Ok(())
            })?;
        }
        for (t, h, xd, rows) in [
            (130, 4096, DType::BF16, vec![129u32, 0, 5, 5, 77]),
            (7, 1536, DType::F32, vec![6]),
            (7, 64, DType::BF16, vec![]),
        ] {
            let case = format!("x {} [{t}, {h}] rows {rows:?}", dt(xd));
            self.run("gather_rows", &case, |s| {
                let (x_d, x_c) = s.random(&[t, h], 1.0, xd)?;
                let b = BatchInputs {
                    logits_rows: rows.clone(),
                    ..positions_batch((0..t as u32).collect(), vec![0; t], 16)
                };
                let batch = s.cuda.prepare_batch(&b)?;
                let mut out_d = s.cuda.zeros(&[rows.len(), h])?;
                let mut out_c = s.cpu.zeros(&[rows.len(), h])?;
                s.cuda.gather_rows(&mut out_d, &x_d, &batch)?;
                s.cpu.gather_rows(&mut out_c, &x_c, &b)?;
                s.check("gather_rows", &case, Tol::EXACT, &out_d, &out_c)?;
                Ok(())
            })?;
        }
        Ok(())
    }

    fn softmax_and_sample(&mut self) -> Result<()> {
        for (r, v, xd) in [
            (1, 151_936, DType::F32),
            (7, 1536, DType::F32),
            (130, 151_936, DType::F32),
            (7, 1536, DType::BF16),
        ] {
            let case = format!("logits {} [{r}, {v}]", dt(xd));
            self.run("log_softmax", &case, |s| {
                let (mut x_d, mut x_c) = s.random(&[r, v], 8.0, xd)?;
                s.cuda.log_softmax(&mut x_d)?;
                s.cpu.log_softmax(&mut x_c)?;
                s.check("log_softmax", &case, Tol::LOGPROB, &x_d, &x_c)?;
                Ok(())
            })?;
        }
        self.run("sample", "6 rows × 151936", |s| s.sample_case())
    }

    fn sample_case(&mut self) -> Result<()> {
        let (r, v) = (6, 151_936);
        let mut data = self.rng.vec(r * v, 5.0);
        // Row 2: a tie for the maximum; the lower index must win.
        data[2 * v + 10] = 50.0;
        data[2 * v + 20] = 50.0;
        let (x_d, x_c) = self.pair(&[r, v], data, DType::F32)?;
        let greedy = SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        };
        let greedy_lp = SamplingParams {
            logprobs: Some(5),
            ..greedy.clone()
        };
        let nucleus = SamplingParams {
            temperature: 0.8,
            top_p: 0.9,
            seed: 1,
            ..SamplingParams::default()
        };
        let penalised = SamplingParams {
            repetition_penalty: 1.3,
            ..greedy.clone()
        };
        let top_k = SamplingParams {
            top_k: 50,
            seed: 7,
            ..SamplingParams::default()
        };
        let history: Vec<u32> = (0..v as u32).step_by(97).collect();
        let row = |i: usize, p| sample_row(i, p, &history);
        let rows = vec![
            row(0, &greedy),
            row(1, &greedy_lp),
            row(2, &greedy),
            row(3, &nucleus),
            row(4, &penalised),
            row(5, &top_k),
        ];
        let got = self.cuda.sample(&x_d, &rows)?;
        let want = self.cpu.sample(&x_c, &rows)?;
        let same = got == want;
        let ids = |s: &[metrale_engine::backend::sampling::Sampled]| {
            s.iter().map(|x| x.token_id).collect::<Vec<_>>()
        };
        self.report.line(format!(
            "{:<16} {:<60} tokens {:?} (cpu {:?}) {}",
            "sample",
            "greedy/argmax, logprobs, top-p, penalty, top-k",
            ids(&got),
            ids(&want),
            if same { "ok" } else { "FAIL" }
        ));
        self.report
            .record(json!({"op": "sample", "pass": same, "cuda": ids(&got), "cpu": ids(&want)}));
        if !same {
            self.report.fail(format!(
                "sample: cuda {:?} vs cpu {:?}",
                ids(&got),
                ids(&want)
            ));
        }
        if got.get(2).map(|s| s.token_id) != Some(10) {
            self.report
                .fail("sample: the tie in row 2 did not go to the lower index 10");
        }
        Ok(())
    }
}

impl<'a> Ops<'a> {
    /// A section's cases against `cpu`, drawn from `seed`, after the table's header.
    fn start(cuda: &'a CudaBackend, cpu: CpuBackend, seed: u64, report: &'a mut Report) -> Self {
        let ops = Ops {
            cuda,
            cpu,
            rng: Rng::new(seed),
            report,
        };
        ops.report.case_header();
        ops
    }
}

/// The cache ops with an FP8 KV cache (`section ops-kv8`): `cuda` built
/// `with_fp8_kv_cache(true)`, against the CPU's FP8-rounding cache.
pub fn run_kv8(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    let mut ops = Ops::start(
        cuda,
        CpuBackend::with_fp8_kv_cache(true),
        0x6d65_7472_616c_6508,
        report,
    );
    ops.write_kv()?;
    ops.attention()?;
    ops.attention_window()?;
    ops.mla_kv8()
}

/// gpt-oss's experts alone (both routes of `fused_moe_clamped`) and the FP4 expert stacks:
/// the `ops-gpt-oss` section, a short check of that path when `ops` as a whole is not run.
pub fn run_gpt_oss(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    let mut ops = Ops::start(cuda, CpuBackend::default(), 0x6d65_7472_616c_6509, report);
    ops.gpt_oss()?;
    ops.moe_nvfp4()
}

/// The NVFP4 uploads, matmuls (every route) and expert stacks alone: the `ops-nvfp4` section,
/// a short check of the NVFP4 kernels when `ops` as a whole (about 210 s on an H200) is not run.
pub fn run_nvfp4(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    let mut ops = Ops::start(cuda, CpuBackend::default(), 0x6d65_7472_616c_650a, report);
    ops.uploads_nvfp4()?;
    ops.matmuls_nvfp4()?;
    ops.moe_nvfp4()
}

/// FP8 matmuls of 9 to 128 rows on both tensor-core routes alone: the `ops-fp8-rows` section,
/// a short check of the tile GEMM when `ops` as a whole is not run.
pub fn run_fp8_rows(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    let mut ops = Ops::start(cuda, CpuBackend::default(), 0x6d65_7472_616c_650b, report);
    ops.matmul_fp8_rows()
}

/// Every op, every case. Returns an error only when the device stopped answering.
pub fn run(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    let mut ops = Ops::start(cuda, CpuBackend::default(), 0x6d65_7472_616c_6501, report);
    ops.uploads()?;
    ops.embedding()?;
    ops.norms()?;
    ops.matmuls()?;
    if ops.fp32() {
        ops.moe_f32()?;
    } else {
        ops.moe()?;
    }
    ops.rope()?;
    ops.write_kv()?;
    ops.attention()?;
    ops.attention_window()?;
    ops.gpt_oss()?;
    ops.silu_and_rows()?;
    ops.softmax_and_sample()?;
    ops.gelu_tanh()?;
    // Last of the shared cases, so the ones above keep their random draws.
    ops.minimax()?;
    ops.mla()?;
    if ops.fp32() {
        return ops.nemotron_moe(); // f32 weights take cuBLAS's f32 GEMM: not the two below
    }
    ops.gemv_bf16_mma()?;
    ops.draft_head()?;
    // NVFP4 experts kept packed, then Nemotron-H's relu² experts, then the FP8 routes of 9
    // to 128 rows (after the rest, so the draws above stay as they were).
    ops.moe_nvfp4()?;
    ops.nemotron_moe()?;
    ops.matmul_fp8_rows()
}
