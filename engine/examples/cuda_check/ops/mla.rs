//! DeepSeek-V3's ops against the CPU: `mla_rope_write_kv` and `mla_attention` (multi-head
//! latent attention over the paged cache of compressed rows: one token at position 0, decode
//! rows over long contexts crossing block boundaries, several sequences of different lengths, a
//! chunk after a cached prefix, the tiny and FP8 fixtures' head sizes and DeepSeek-V3's,
//! interleaved pairs and neox halves, f32 and bf16 activations, an FP8 `kv_b`; the FP8 KV
//! cache in section ops-kv8), and
//! `fused_moe_sigmoid` with group-limited routing (`n_group` > 1). The attention is checked on
//! the rows the device wrote (the CPU attends over the device's rotated q and cache), so each
//! check measures one op.

use metrale_engine::backend::{MlaDims, SigmoidRouting};

use super::minimax::logits_bias;
use super::moe::{CUDA_CORES, Route, TENSOR_CORES};
use super::*;

/// A latent attention case: head sizes, block size, sequences as (start position, new tokens).
struct Mla {
    name: &'static str,
    dims: MlaDims,
    bs: usize,
    seqs: Vec<(usize, usize)>,
    interleaved: bool,
    act: DType,
    fp8_kv_b: bool,
}

const fn dims(heads: usize, nope: usize, rope: usize, v: usize, latent: usize) -> MlaDims {
    MlaDims {
        heads,
        nope,
        rope,
        v,
        latent,
    }
}

impl Ops<'_> {
    pub(super) fn mla(&mut self) -> Result<()> {
        self.mla_attention()?;
        self.moe_grouped()
    }

    fn mla_attention(&mut self) -> Result<()> {
        let (tiny, fp8, v3) = (
            dims(4, 16, 8, 16, 32),
            dims(2, 64, 16, 64, 144),
            dims(128, 128, 64, 128, 512),
        );
        let mut decode8 = Vec::new();
        for _ in 0..8 {
            decode8.push((1 + self.rng.below(3000), 1));
        }
        let (f32d, bf) = (DType::F32, DType::BF16);
        let case = |name, dims, bs, seqs: Vec<(usize, usize)>, interleaved, act| Mla {
            name,
            dims,
            bs,
            seqs,
            interleaved,
            act,
            fp8_kv_b: false,
        };
        let mut cases = vec![
            case("one token", tiny, 16, vec![(0, 1)], true, f32d),
            case(
                "prompt then decode",
                tiny,
                4,
                vec![(0, 9), (30, 1)],
                true,
                bf,
            ),
            case(
                "chunk+decode+prefill",
                tiny,
                16,
                vec![(40, 7), (200, 1), (0, 33)],
                false,
                f32d,
            ),
            case("fp8 fixture dims", fp8, 16, vec![(0, 5), (17, 1)], true, bf),
            case("v3 decode 8 seqs", v3, 16, decode8.clone(), true, bf),
            case(
                "v3 decode 1 seq ctx 4096",
                v3,
                16,
                vec![(4095, 1)],
                true,
                bf,
            ),
            case("v3 chunk after prefix", v3, 16, vec![(100, 40)], true, f32d),
            // 12 heads: a full head group of 8 and one of 4; a row of 38 values (scalar tile
            // loads, no 16-byte chunks).
            case("12 heads", dims(12, 16, 8, 16, 32), 8, decode8, false, bf),
            case(
                "row of 38",
                dims(3, 8, 4, 8, 34),
                4,
                vec![(5, 3)],
                false,
                f32d,
            ),
        ];
        if !self.fp32() {
            cases.push(Mla {
                fp8_kv_b: true,
                ..case("fp8 kv_b", fp8, 16, vec![(0, 3), (9, 1)], true, bf)
            });
        }
        for c in &cases {
            let act = self.act(c.act);
            let d = c.dims;
            let case = format!(
                "{} h={} nope={} rope={} v={} lat={} bs={} {} {}{}",
                c.name,
                d.heads,
                d.nope,
                d.rope,
                d.v,
                d.latent,
                c.bs,
                dt(act),
                if c.interleaved {
                    "interleaved"
                } else {
                    "halves"
                },
                if c.fp8_kv_b { " fp8 kv_b" } else { "" }
            );
            self.run("mla_attention", &case, |s| s.mla_case(&case, c, act))?;
        }
        self.mla_bad()
    }

    fn mla_case(&mut self, case: &str, c: &Mla, act: DType) -> Result<()> {
        let (d, bs) = (c.dims, c.bs);
        let row = d.row();
        // Shuffled tables: every sequence's blocks non-contiguous and out of order, one block
        // no table names.
        let need: Vec<usize> = c.seqs.iter().map(|(st, n)| (st + n).div_ceil(bs)).collect();
        let blocks = need.iter().sum::<usize>() + 1;
        let mut ids: Vec<u32> = (0..blocks as u32).collect();
        self.rng.shuffle(&mut ids);
        let mut tables = Vec::new();
        let mut at = 0;
        for n in &need {
            tables.push(ids[at..at + n].to_vec());
            at += n;
        }
        let tokens: Vec<Vec<u32>> = c.seqs.iter().map(|(_, n)| vec![0; *n]).collect();
        let chunks: Vec<SeqChunk<'_>> = c
            .seqs
            .iter()
            .zip(&tokens)
            .zip(&tables)
            .map(|(((st, _), tokens), table)| SeqChunk {
                tokens,
                start_pos: *st,
                block_table: table,
                logits_rows: vec![],
            })
            .collect();
        let host = BatchInputs::build(bs, &chunks);
        let batch = self.cuda.prepare_batch(&host)?;
        let t = host.num_tokens();
        // The cache holds random rows (the context of earlier steps) before this step's; the
        // FP8 cache (section ops-kv8) starts empty and its cases write every row they read.
        let kv8 = self.cuda.kv_cache_fp8();
        let (mut cache_d, mut cache_c) = if kv8 {
            let shape = [blocks, bs, row];
            (self.cuda.kv_zeros(&shape)?, self.cpu.kv_zeros(&shape)?)
        } else {
            self.random(&[blocks, bs, row], 1.0, self.wd())?
        };
        let (mut q_d, mut q_c) = self.random(&[t, d.q_width()], 1.0, act)?;
        let (mut l_d, mut l_c) = self.random(&[t, row], 1.0, act)?;
        let half = d.rope / 2;
        let rope = RopeTables {
            inv_freq: (0..half)
                .map(|i| 10000f32.powf(-2.0 * i as f32 / d.rope as f32))
                .collect(),
            scale: 1.1, // YaRN's mscale enters as the tables' scale
            rotary_dim: d.rope,
        };
        let inter = c.interleaved;
        self.cuda
            .mla_rope_write_kv(&mut q_d, &mut l_d, &batch, &rope, d, inter, &mut cache_d)
            .context("cuda")?;
        self.cpu
            .mla_rope_write_kv(&mut q_c, &mut l_c, &host, &rope, d, inter, &mut cache_c)
            .context("cpu")?;
        // The rotated values, rounded once to the activations' (and the cache's) type; the
        // FP8 cache rounds the device's bf16 values where the CPU rounds f32 ones (Tol::KV8).
        self.check(
            "mla_rope_write_kv",
            &format!("{case} q"),
            Tol::BF16,
            &q_d,
            &q_c,
        )?;
        self.check(
            "mla_rope_write_kv",
            &format!("{case} cache"),
            if kv8 { Tol::KV8 } else { Tol::BF16 },
            &cache_d,
            &cache_c,
        )?;
        // Attention over what the device holds.
        let kv_b_shape = [d.heads * (d.nope + d.v), d.latent];
        let (kv_b_d, kv_b_c) = if c.fp8_kv_b {
            // The bf16 path dequantizes an FP8 kv_b to bf16 first (one rounding a weight, as
            // every FP8 prefill GEMM's copy): the reference takes those values, so what is
            // checked is the kernel (the dequantization has its own cases).
            let (w_d, w_c) = self.fp8_pair(&kv_b_shape)?;
            if self.fp32() {
                (w_d, w_c)
            } else {
                let rounded = round_bf16(&w_c.data);
                (w_d, CpuTensor::new(w_c.shape, rounded))
            }
        } else {
            self.random(&kv_b_shape, 0.2, self.wd())?
        };
        let q_c = CpuTensor::new(q_c.shape.clone(), self.cuda.to_host(&q_d)?);
        let cache_c = CpuTensor::new(cache_c.shape.clone(), self.cuda.to_host(&cache_d)?);
        let scale = 1.0 / ((d.nope + d.rope) as f32).sqrt();
        let mut out_d = self.cuda.zeros(&[t, d.heads * d.v])?;
        let mut out_c = self.cpu.zeros(&[t, d.heads * d.v])?;
        self.cuda
            .mla_attention(&mut out_d, &q_d, &kv_b_d, &cache_d, &batch, d, scale)
            .context("cuda")?;
        self.cpu
            .mla_attention(&mut out_c, &q_c, &kv_b_c, &cache_c, &host, d, scale)
            .context("cpu")?;
        // A bf16 output of f32 sums.
        self.check("mla_attention", case, Tol::BF16, &out_d, &out_c)?;
        Ok(())
    }

    /// The FP8 KV cache (section ops-kv8): latents of a multiple of 128 (DeepSeek-V3's 512,
    /// and 128 over several 32-row tiles), every row of the step written by it.
    pub(super) fn mla_kv8(&mut self) -> Result<()> {
        let (f32d, bf) = (DType::F32, DType::BF16);
        let cases = [
            (
                "lat 128",
                dims(4, 16, 16, 16, 128),
                vec![(0, 70), (0, 1)],
                bf,
            ),
            ("lat 128 f32", dims(4, 16, 16, 16, 128), vec![(0, 9)], f32d),
            (
                "v3",
                dims(128, 128, 64, 128, 512),
                vec![(0, 40), (0, 3)],
                bf,
            ),
        ];
        for (name, d, seqs, act) in cases {
            let c = Mla {
                name,
                dims: d,
                bs: 16,
                seqs,
                interleaved: true,
                act,
                fp8_kv_b: false,
            };
            let case = format!("{name} fp8 cache {}", dt(act));
            self.run("mla_attention", &case, |s| s.mla_case(&case, &c, act))?;
        }
        Ok(())
    }

    /// Shapes the kernels cannot take and a cache of the wrong row are errors that name the
    /// op, not faults.
    fn mla_bad(&mut self) -> Result<()> {
        let host = positions_batch(vec![0], vec![0], 16);
        let batch = self.cuda.prepare_batch(&host)?;
        let ok_dims = dims(2, 16, 8, 16, 32);
        for (what, d, cache_row) in [
            ("a latent of 1024", dims(2, 16, 8, 16, 1024), 1032),
            ("an odd rope", dims(2, 16, 7, 16, 32), 39),
            ("a cache row of 41", ok_dims, 41),
        ] {
            let q = self.cuda.zeros(&[1, d.q_width()])?;
            let kv_b = self.cuda.zeros(&[d.heads * (d.nope + d.v), d.latent])?;
            let cache = self.cuda.zeros(&[2, 16, cache_row])?;
            let mut out = self.cuda.zeros(&[1, d.heads * d.v])?;
            let r = self
                .cuda
                .mla_attention(&mut out, &q, &kv_b, &cache, &batch, d, 1.0);
            self.expect_refusal("mla_attention", what, "mla_attention", r);
        }
        Ok(())
    }

    /// fused_moe_sigmoid with DeepSeek-V3's group-limited routing against the CPU: the tiny
    /// fixture's (8 experts in 4 groups, 2 kept, top-2, scaled by 2.5), the FP8 fixture's (4
    /// in 2, 1 kept), DeepSeek-V3's (256 in 8 groups, 4 kept, top-8, 2.5) at one token, a
    /// decode batch and a prefill chunk, ties that the group and expert indices break.
    fn moe_grouped(&mut self) -> Result<()> {
        // (T, H, I, E, top-k, groups, kept, scaling, skew, ties)
        for (t, h, i, e, k, g, kg, scaling, skew, ties) in [
            (1, 64, 32, 8, 2, 4, 2, 2.5, false, false),
            (9, 64, 32, 8, 2, 4, 2, 2.5, false, true),
            (5, 160, 64, 4, 2, 2, 1, 1.0, false, false),
            (1, 512, 256, 256, 8, 8, 4, 2.5, false, false),
            (8, 512, 256, 256, 8, 8, 4, 2.5, true, true),
            (130, 512, 256, 256, 8, 8, 4, 2.5, true, false),
        ] {
            let case = format!(
                "T {t} H {h} I {i} E {e} top-{k} of {kg}/{g} groups x{scaling}{}{}",
                if skew { " skewed" } else { "" },
                if ties { " ties" } else { "" }
            );
            let routes: &[Route] = if self.fp32() {
                &[CUDA_CORES]
            } else {
                &[CUDA_CORES, TENSOR_CORES]
            };
            let routing = SigmoidRouting {
                n_group: g,
                topk_group: kg,
                ..SigmoidRouting::ungrouped(k, true, scaling)
            };
            self.run("fused_moe_sigmoid", &case, |s| {
                let (x_d, x_c) = s.random(&[t, h], 1.0, s.act(DType::BF16))?;
                let (l, b) = logits_bias(&mut s.rng, t, e, skew, ties);
                let (l_d, l_c) = s.pair(&[t, e], l, DType::F32)?;
                let (b_d, b_c) = s.pair(&[e], b, DType::F32)?;
                let (w13_d, w13_c) = s.random(&[e, 2 * i, h], 0.05, s.wd())?;
                let (w2_d, w2_c) = s.random(&[e, h, i], 0.05, s.wd())?;
                let inputs = ((&x_d, &x_c), (&l_d, &l_c), (&b_d, &b_c));
                s.sigmoid_routes(
                    &case,
                    routes,
                    inputs,
                    ((&w13_d, &w2_d), (&w13_c, &w2_c)),
                    routing,
                )
            })?;
        }
        Ok(())
    }
}
