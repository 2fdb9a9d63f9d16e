//! Sliding-window and sink attention (`paged_attention_window`, `paged_attention_sinks`) against
//! the CPU on random inputs: windows of 1 key, inside one key tile, not a multiple of the block
//! size and longer than the context, over decode, split-K, prefill (flash) and chunked prefill
//! after a cached prefix, GQA groups; every case with the kernel the launcher picks, and again
//! with attention.cu's CUDA-core kernel where the tensor-core one would serve.

use super::*;

/// The tuning's default `attention.flash_min_rows`, which these checks run with.
const FLASH_MIN_ROWS: usize = 16;

/// A case: heads (q, kv, head_dim), sequences as (start position, new tokens), the window
/// (`None`: full causal) and whether each head has a sink.
struct WinCase {
    name: &'static str,
    heads: (usize, usize, usize),
    seqs: Vec<(usize, usize)>,
    window: Option<usize>,
    sinks: bool,
    qkv: DType,
}

fn case(
    name: &'static str,
    heads: (usize, usize, usize),
    seqs: Vec<(usize, usize)>,
    window: Option<usize>,
    sinks: bool,
    qkv: DType,
) -> WinCase {
    WinCase {
        name,
        heads,
        seqs,
        window,
        sinks,
        qkv,
    }
}

impl Ops<'_> {
    pub(super) fn attention_window(&mut self) -> Result<()> {
        let decode8: Vec<(usize, usize)> = (0..8).map(|_| (1 + self.rng.below(2046), 1)).collect();
        let mixed = vec![(100, 30), (1500, 1), (0, 7)];
        let (f32q, bf16q) = (DType::F32, DType::BF16);
        let cases = [
            // Decode (CUDA-core, 16-byte-load and tensor-core kernels), split-K over the window.
            case(
                "decode window 1",
                (32, 8, 128),
                decode8.clone(),
                Some(1),
                false,
                f32q,
            ),
            case(
                "decode window 5",
                (32, 8, 128),
                decode8.clone(),
                Some(5),
                false,
                bf16q,
            ),
            case(
                "decode window 100",
                (32, 8, 128),
                vec![(2046, 1); 4],
                Some(100),
                false,
                f32q,
            ),
            case(
                "decode window 4096",
                (16, 2, 64),
                vec![(900, 1), (3, 1)],
                Some(4096),
                false,
                bf16q,
            ),
            case(
                "gqa 16:1 window 37",
                (16, 1, 128),
                vec![(300, 1), (17, 2)],
                Some(37),
                false,
                bf16q,
            ),
            case(
                "hd=24 window 9",
                (8, 2, 24),
                mixed.clone(),
                Some(9),
                false,
                f32q,
            ),
            case(
                "hd=256 window 21",
                (4, 4, 256),
                vec![(60, 3)],
                Some(21),
                false,
                f32q,
            ),
            // Prefill (flash) and a chunk continuing a cached context: key tiles before every
            // row's window skipped, tiles straddling a window's start masked.
            case(
                "prefill window 1",
                (4, 2, 128),
                vec![(0, 130)],
                Some(1),
                false,
                f32q,
            ),
            case(
                "prefill window 13",
                (8, 1, 64),
                vec![(0, 300)],
                Some(13),
                false,
                f32q,
            ),
            case(
                "chunk after prefix window 100",
                (32, 8, 128),
                vec![(700, 300)],
                Some(100),
                false,
                bf16q,
            ),
            case(
                "decode+prefill window 77",
                (32, 8, 128),
                vec![(500, 1), (0, 200), (100, 1)],
                Some(77),
                false,
                f32q,
            ),
            case(
                "hd=256 gqa 8:1 window 50",
                (16, 2, 256),
                vec![(0, 300), (50, 40)],
                Some(50),
                false,
                f32q,
            ),
            case(
                "prefill window 4096",
                (8, 2, 128),
                vec![(3, 130)],
                Some(4096),
                false,
                bf16q,
            ),
            // Sinks (gpt-oss: one more logit a head in the denominator), with and without a
            // window, plain, split-K and flash.
            case("decode sinks", (32, 8, 128), decode8, None, true, bf16q),
            case(
                "decode sinks split-K",
                (16, 2, 64),
                vec![(2000, 1)],
                None,
                true,
                f32q,
            ),
            case(
                "decode sinks window 128",
                (64, 8, 64),
                vec![(1000, 1), (50, 1)],
                Some(128),
                true,
                bf16q,
            ),
            case(
                "mixed sinks window 9",
                (8, 2, 24),
                mixed,
                Some(9),
                true,
                f32q,
            ),
            case(
                "prefill sinks",
                (8, 2, 128),
                vec![(0, 200)],
                None,
                true,
                f32q,
            ),
            case(
                "chunk sinks window 128",
                (64, 8, 64),
                vec![(400, 150)],
                Some(128),
                true,
                bf16q,
            ),
        ];
        let fp32 = self.fp32();
        for (c, simt) in cases.iter().map(|c| (c, false)).chain(
            cases
                .iter()
                .filter(|c| matches!(c.heads.2, 64 | 128) && !fp32)
                .map(|c| (c, true)),
        ) {
            let qkv = self.act(c.qkv);
            self.cuda.retune(|t| {
                t.attention.kernel = if simt {
                    metrale_engine::tuning::AttnKernelChoice::Simt
                } else {
                    metrale_engine::tuning::AttnKernelChoice::Auto
                };
                t.attention.flash_min_rows = if simt { None } else { Some(FLASH_MIN_ROWS) };
            });
            let (nh, nkv, hd) = c.heads;
            let rows: usize = c.seqs.iter().map(|s| s.1).sum();
            let total: usize = c.seqs.iter().map(|s| s.0 + s.1).max().unwrap_or(0);
            let reach = c.window.map_or(total, |w| total.min(w + 15));
            let splits = self.cuda.attention_splits(rows, nh, nkv, hd, reach);
            let flash = !simt
                && !fp32
                && matches!(hd, 64 | 128 | 256)
                && c.seqs.iter().any(|s| s.1 >= FLASH_MIN_ROWS);
            let name = format!(
                "{} h={nh}/{nkv} hd={hd} qkv {}{}{}{}",
                c.name,
                dt(qkv),
                if splits > 1 {
                    format!(" split-K {splits}")
                } else {
                    String::new()
                },
                if simt { " (simt)" } else { "" },
                if flash { " (flash)" } else { "" },
            );
            let op = if c.sinks {
                "paged_attention_sinks"
            } else {
                "paged_attention_window"
            };
            self.run(op, &name, |s| s.window_case(op, &name, c, qkv, flash))?;
        }
        self.cuda.retune(|t| {
            t.attention.kernel = metrale_engine::tuning::AttnKernelChoice::Auto;
            t.attention.flash_min_rows = Some(FLASH_MIN_ROWS);
        });
        Ok(())
    }

    fn window_case(
        &mut self,
        op: &str,
        name: &str,
        c: &WinCase,
        qd: DType,
        flash: bool,
    ) -> Result<()> {
        let (nh, _, hd) = c.heads;
        let p = self.paged_case(c.heads, &c.seqs, qd, flash)?;
        let (t, scale, batch, b) = (p.t, p.scale, &p.batch, &p.host);
        let ((q_d, q_c), (k_d, k_c), (v_d, v_c)) = (&p.q, &p.k, &p.v);
        let mut out_d = self.cuda.zeros(&[t, nh * hd])?;
        let mut out_c = self.cpu.zeros(&[t, nh * hd])?;
        if c.sinks {
            // Sinks around the scores' range, bf16 as a checkpoint holds them, uploaded as
            // gpt-oss does (`upload_f32_weight`: f32 on the device); one case keeps them of the
            // weights' type, which the launcher widens at every call.
            let host = HostTensor {
                shape: vec![nh],
                data: HostData::Raw {
                    dtype: HostDType::BF16,
                    bytes: round_bf16(&self.rng.vec(nh, 3.0))
                        .iter()
                        .flat_map(|v| bf16::from_f32(*v).to_le_bytes())
                        .collect::<Vec<u8>>()
                        .into(),
                },
            };
            let (s_d, s_c) = if c.name == "decode sinks" {
                (self.cuda.upload(&host)?, self.cpu.upload(&host)?)
            } else {
                (
                    self.cuda.upload_f32_weight(&host)?,
                    self.cpu.upload_f32_weight(&host)?,
                )
            };
            let heads = (nh, scale);
            self.cuda
                .paged_attention_sinks(&mut out_d, q_d, k_d, v_d, batch, heads, c.window, &s_d)
                .context("cuda")?;
            self.cpu
                .paged_attention_sinks(&mut out_c, q_c, k_c, v_c, b, heads, c.window, &s_c)
                .context("cpu")?;
        } else {
            let w = c.window.unwrap_or(usize::MAX);
            self.cuda
                .paged_attention_window(&mut out_d, q_d, k_d, v_d, batch, nh, scale, w)
                .context("cuda")?;
            self.cpu
                .paged_attention_window(&mut out_c, q_c, k_c, v_c, b, nh, scale, w)
                .context("cpu")?;
        }
        let tol = match (flash, self.cuda.kv_cache_fp8()) {
            (false, _) => Tol::BF16,
            (true, false) => Tol::FLASH,
            (true, true) => Tol::FLASH_KV8,
        };
        self.check(op, name, tol, &out_d, &out_c)?;
        Ok(())
    }
}
