//! The paged attention checks: every case against the CPU, with the kernel the launcher picks
//! and again with attention.cu's CUDA-core kernel where the tensor-core one would serve.

use super::*;

/// The tuning's default `attention.flash_min_rows`, which these checks run with.
const FLASH_MIN_ROWS: usize = 16;

struct Attn {
    name: &'static str,
    heads: (usize, usize, usize),
    seqs: Vec<(usize, usize)>,
    qkv: DType,
}

impl Attn {
    fn new(
        name: &'static str,
        heads: (usize, usize, usize),
        seqs: Vec<(usize, usize)>,
        qkv: DType,
    ) -> Self {
        Self {
            name,
            heads,
            seqs,
            qkv,
        }
    }
}

/// The attention cases (plain and sliding-window) on a bf16 and an FP8 cache with the tuning's
/// flash build (on sm_90 wgmma by default, `METRALE_ATTN_FLASH_KERNEL=mma` for mma.sync): the
/// `ops-flash` section, a part of `ops` and `ops-kv8` that runs in a minute.
pub fn run_flash(cuda: &CudaBackend, report: &mut Report) -> Result<()> {
    let kv8 = CudaBackend::new(0, cuda.tuning()).and_then(|c| c.with_fp8_kv_cache(true))?;
    for (backend, cpu) in [
        (cuda, CpuBackend::default()),
        (&kv8, CpuBackend::with_fp8_kv_cache(true)),
    ] {
        backend.retune(|t| t.launch.cuda_sync = true);
        let mut ops = Ops::start(backend, cpu, 0x6d65_7472_616c_650c, report);
        ops.attention().and_then(|()| ops.attention_window())?;
    }
    Ok(())
}

impl Ops<'_> {
    pub(super) fn attention(&mut self) -> Result<()> {
        let mut decode8 = Vec::new();
        for _ in 0..8 {
            decode8.push((1 + self.rng.below(2046), 1));
        }
        let mixed = vec![(100, 30), (1500, 1), (0, 7)];
        let cases = [
            Attn::new("prefill T=130", (4, 2, 32), vec![(0, 130)], DType::F32),
            Attn::new(
                "prefill T=1000 gqa 8:1",
                (8, 1, 64),
                vec![(0, 1000)],
                DType::F32,
            ),
            Attn::new(
                "decode 8 seqs ctx<=2047",
                (32, 8, 128),
                decode8.clone(),
                DType::F32,
            ),
            Attn::new(
                "decode 4 seqs ctx=2047",
                (32, 8, 128),
                vec![(2046, 1); 4],
                DType::F32,
            ),
            Attn::new(
                "chunk+decode+prefill",
                (8, 2, 24),
                mixed.clone(),
                DType::F32,
            ),
            Attn::new("chunk+decode+prefill", (8, 2, 24), mixed, DType::BF16),
            // The tensor-core kernel's shapes with a bf16 q (the decode path's), a full 16-head
            // group (its upper 8 rows) and an 8-head group at head_dim 64 (block sizes that are
            // not a multiple of 16 are covered by the host emulation).
            Attn::new("decode 8 seqs bf16 q", (32, 8, 128), decode8, DType::BF16),
            Attn::new(
                "gqa 16:1",
                (16, 1, 128),
                vec![(300, 1), (17, 2)],
                DType::BF16,
            ),
            Attn::new(
                "gqa 8:1 hd=64",
                (16, 2, 64),
                vec![(77, 1), (0, 20)],
                DType::BF16,
            ),
            Attn::new("mha hd=16", (6, 6, 16), vec![(0, 37), (20, 5)], DType::F32),
            Attn::new("hd=96", (4, 2, 96), vec![(50, 2), (0, 9)], DType::F32),
            Attn::new("hd=256", (4, 4, 256), vec![(10, 3)], DType::F32),
            // The flash prefill kernel (sequences of 16 rows and more, every head_dim of 64,
            // 128 and 256): a chunk after a cached prefix, decode rows before the prefill and
            // one after it (a one-row tile), partial tiles, GQA 8:1 at head_dim 256.
            Attn::new(
                "flash chunk after prefix",
                (32, 8, 128),
                vec![(700, 300)],
                DType::F32,
            ),
            Attn::new(
                "flash decode+prefill+decode",
                (32, 8, 128),
                vec![(500, 1), (30, 1), (0, 200), (100, 1)],
                DType::F32,
            ),
            Attn::new(
                "flash hd=256 gqa 8:1",
                (16, 2, 256),
                vec![(0, 300), (50, 40)],
                DType::F32,
            ),
            Attn::new("flash bf16 q", (8, 2, 128), vec![(3, 130)], DType::BF16),
        ];
        // Every case with the kernel the launcher picks, then again with attention.cu's
        // CUDA-core kernel forced (where the two differ: head_dim 64/128, groups up to 16; the
        // float32 path has only that kernel).
        let fp32 = self.fp32();
        for (c, simt) in cases.iter().map(|c| (c, false)).chain(
            cases
                .iter()
                .filter(|c| matches!(c.heads.2, 64 | 128) && !fp32)
                .map(|c| (c, true)),
        ) {
            let qkv = self.act(c.qkv);
            // The CUDA-core run takes every row to attention.cu's kernel, prefill rows too.
            self.cuda.retune(|t| {
                t.attention.kernel = if simt {
                    metrale_engine::tuning::AttnKernelChoice::Simt
                } else {
                    metrale_engine::tuning::AttnKernelChoice::Auto
                };
                t.attention.flash_min_rows = if simt { None } else { Some(FLASH_MIN_ROWS) };
            });
            let (nh, nkv, hd) = c.heads;
            let total: usize = c.seqs.iter().map(|s| s.0 + s.1).max().unwrap_or(0);
            let rows: usize = c.seqs.iter().map(|s| s.1).sum();
            let splits = self.cuda.attention_splits(rows, nh, nkv, hd, total);
            let case = format!(
                "{} h={nh}/{nkv} hd={hd} qkv {}{}",
                c.name,
                dt(qkv),
                if splits > 1 {
                    format!(" split-K {splits}")
                } else {
                    String::new()
                }
            ) + if simt { " (simt)" } else { "" };
            // Rows of the flash kernel carry bf16 q and weights (Tol::FLASH).
            let flash = !simt
                && !fp32
                && matches!(hd, 64 | 128 | 256)
                && c.seqs.iter().any(|s| s.1 >= FLASH_MIN_ROWS);
            let case = match (flash, self.cuda.tuning().attention.flash_wgmma) {
                (true, true) => case + " (flash wgmma)",
                (true, false) => case + " (flash)",
                _ => case,
            };
            self.run("paged_attention", &case, |s| {
                s.attention_case(&case, (nh, nkv, hd), &c.seqs, qkv, flash)
            })?;
        }
        self.cuda.retune(|t| {
            t.attention.kernel = metrale_engine::tuning::AttnKernelChoice::Auto;
            t.attention.flash_min_rows = Some(FLASH_MIN_ROWS);
        });
        Ok(())
    }

    fn attention_case(
        &mut self,
        case: &str,
        (nh, nkv, hd): (usize, usize, usize),
        seqs: &[(usize, usize)],
        qd: DType,
        flash: bool,
    ) -> Result<()> {
        let c = self.paged_case((nh, nkv, hd), seqs, qd, flash)?;
        let (t, scale, batch, b) = (c.t, c.scale, &c.batch, &c.host);
        let ((q_d, q_c), (k_d, k_c), (v_d, v_c)) = (&c.q, &c.k, &c.v);
        let mut out_d = self.cuda.zeros(&[t, nh * hd])?;
        let mut out_c = self.cpu.zeros(&[t, nh * hd])?;
        self.cuda
            .paged_attention(&mut out_d, q_d, k_d, v_d, batch, nh, scale)
            .context("cuda")?;
        self.cpu
            .paged_attention(&mut out_c, q_c, k_c, v_c, b, nh, scale)
            .context("cpu")?;
        let tol = match (flash, self.cuda.kv_cache_fp8()) {
            (false, _) => Tol::BF16,
            (true, false) => Tol::FLASH,
            (true, true) => Tol::FLASH_KV8,
        };
        self.check("paged_attention", case, tol, &out_d, &out_c)?;
        // The same batch reading block tables kept on the device (what `met serve` runs): the
        // same kernels on the same entries, so the same bits.
        let kept =
            self.kept_tables_output(&c.chunks(), &c.tables, &[q_d, k_d, v_d], (nh, scale))?;
        let whole = CpuTensor::new(vec![t, nh * hd], self.cuda.to_host(&out_d)?);
        self.check(
            "paged_attention",
            &format!("{case} kept tables"),
            Tol::EXACT,
            &kept,
            &whole,
        )?;
        Ok(())
    }

    /// `chunks`' attention read from block tables kept on the device: the tables written in
    /// two changes each (the first half, then the rest, as a sequence gains blocks) into rows
    /// in reverse order, over rows that held other tables before (stale entries past a row's
    /// end must not be read), then the batch built on those rows.
    fn kept_tables_output(
        &mut self,
        chunks: &[SeqChunk<'_>],
        tables: &[Vec<u32>],
        [q, k, v]: &[&CudaTensor; 3],
        (nh, scale): (usize, f32),
    ) -> Result<CudaTensor> {
        let n = tables.len();
        let width = tables.iter().map(Vec::len).max().unwrap_or(1) + 2;
        self.cuda.keep_block_tables(1, n + 1, width)?;
        let rows: Vec<u32> = (0..n as u32).rev().collect();
        // Stale entries name a real block (the first of the first table), not the null one.
        let stale: Vec<u32> =
            vec![tables.first().and_then(|t| t.first()).copied().unwrap_or(0); width];
        let mut writes: Vec<TableWrite<'_>> = (0..=n as u32)
            .map(|row| TableWrite {
                row,
                start: 0,
                ids: &stale,
                len: width,
            })
            .collect();
        for (table, &row) in tables.iter().zip(&rows) {
            let half = table.len() / 2;
            writes.push(TableWrite {
                row,
                start: 0,
                ids: &table[..half],
                len: half,
            });
            writes.push(TableWrite {
                row,
                start: half,
                ids: &table[half..],
                len: table.len(),
            });
        }
        self.cuda.write_block_tables(0, &writes)?;
        let b = BatchInputs::build_on_rows(16, chunks, 1, &rows);
        let batch = self.cuda.prepare_batch(&b)?;
        // The caches are [blocks, bs, nkv, hd].
        let mut out = self
            .cuda
            .zeros(&[b.num_tokens(), nh * self.cuda.shape(k)[3]])?;
        self.cuda
            .paged_attention(&mut out, q, k, v, &batch, nh, scale)
            .context("cuda, kept tables")?;
        Ok(out)
    }
}

/// A paged attention case's inputs: shuffled block tables (every sequence's table
/// non-contiguous and out of order), the step's batch, random caches (FP8 where the backend's
/// cache is: random e4m3 bytes and scales, the CPU holding e4m3 · scale) and a random q|k|v.
pub(super) struct PagedCase {
    pub tables: Vec<Vec<u32>>,
    tokens: Vec<Vec<u32>>,
    starts: Vec<usize>,
    pub host: BatchInputs,
    pub batch: <CudaBackend as Backend>::Batch,
    pub t: usize,
    pub scale: f32,
    pub q: (CudaTensor, CpuTensor),
    pub k: (CudaTensor, CpuTensor),
    pub v: (CudaTensor, CpuTensor),
}

impl PagedCase {
    pub fn chunks(&self) -> Vec<SeqChunk<'_>> {
        chunks_of(&self.starts, &self.tokens, &self.tables)
    }
}

fn chunks_of<'a>(
    starts: &[usize],
    tokens: &'a [Vec<u32>],
    tables: &'a [Vec<u32>],
) -> Vec<SeqChunk<'a>> {
    (starts.iter().zip(tokens).zip(tables))
        .map(|((&start_pos, tokens), block_table)| SeqChunk {
            tokens,
            start_pos,
            block_table,
            logits_rows: vec![],
        })
        .collect()
}

impl Ops<'_> {
    /// [`PagedCase`] for heads `(nh, nkv, hd)` and sequences `(start position, new tokens)`,
    /// blocks of 16; `qd` q|k|v's type. For the flash kernel an f32 q is given to the CPU as
    /// the bf16 q the kernel computes with by design: the check then holds what the kernel
    /// computes from it (its softmax weights' rounding), not the rounding of q, which on these
    /// peaked rows (q drawn at 3.0) moves a score by 2^-9 of up to ~10 and an output by up to
    /// 4% of the rms (2026-12-05, T=1000 hd=64).
    pub(super) fn paged_case(
        &mut self,
        (nh, nkv, hd): (usize, usize, usize),
        seqs: &[(usize, usize)],
        qd: DType,
        flash: bool,
    ) -> Result<PagedCase> {
        let bs = 16;
        let need: Vec<usize> = seqs.iter().map(|&(p, n)| (p + n).div_ceil(bs)).collect();
        let blocks = 1 + need.iter().sum::<usize>() + 3;
        let mut ids: Vec<u32> = (1..blocks as u32).collect();
        self.rng.shuffle(&mut ids);
        let mut tables = Vec::new();
        let mut next = 0;
        for &n in &need {
            tables.push(ids[next..next + n].to_vec());
            next += n;
        }
        let tokens: Vec<Vec<u32>> = seqs.iter().map(|&(_, n)| vec![0; n]).collect();
        let starts: Vec<usize> = seqs.iter().map(|&(p, _)| p).collect();
        let host = BatchInputs::build(bs, &chunks_of(&starts, &tokens, &tables));
        let t = host.num_tokens();
        let batch = self.cuda.prepare_batch(&host)?;
        let shape = [blocks, bs, nkv, hd];
        let (k, v) = if self.cuda.kv_cache_fp8() {
            (self.fp8_pair(&shape)?, self.fp8_pair(&shape)?)
        } else {
            (
                self.random(&shape, 1.0, self.wd())?,
                self.random(&shape, 1.0, self.wd())?,
            )
        };
        let mut q = self.random(&[t, (nh + 2 * nkv) * hd], 3.0, qd)?;
        if flash && qd == DType::F32 {
            q.1.data = super::round_bf16(&q.1.data);
        }
        Ok(PagedCase {
            tables,
            tokens,
            starts,
            host,
            batch,
            t,
            scale: 1.0 / (hd as f32).sqrt(),
            q,
            k,
            v,
        })
    }
}
