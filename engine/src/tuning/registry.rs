//! The one table of tuning settings: each row names its setting, its `METRALE_*` variable,
//! what it accepts, its default and what it does, and how it reads into and out of a
//! [`Tuning`]. [`Tuning::default`] is every row's default; `docs/cuda.md`'s table is
//! [`docs_table`].

use super::{AttnKernelChoice, Fp8ActKernel, KernelCache, MoeGemm, Tuning};

/// One tuning setting.
pub struct Setting {
    /// Where it lives in [`Tuning`] (`group.field`).
    pub name: &'static str,
    /// The environment variable that sets it.
    pub var: &'static str,
    /// The values it accepts, as the docs and errors spell them.
    pub accepts: &'static str,
    /// Its default, as the variable would spell it.
    pub default: &'static str,
    /// One line: what it does.
    pub doc: &'static str,
    /// Parse a value into the tuning (`Err`: not one it accepts).
    pub(super) set: fn(&mut Tuning, &str) -> Result<(), ()>,
    /// The tuning's value, as the variable would spell it.
    pub(super) get: fn(&Tuning) -> String,
}

/// `0`/`1` (also `false`/`true`, `off`/`on`, `no`/`yes`); empty keeps the default.
fn flag(v: &str, field: &mut bool) -> Result<(), ()> {
    match v.trim().to_ascii_lowercase().as_str() {
        "" => {}
        "1" | "true" | "on" | "yes" => *field = true,
        "0" | "false" | "off" | "no" => *field = false,
        _ => return Err(()),
    }
    Ok(())
}

fn show_flag(on: bool) -> String {
    if on { "1" } else { "0" }.to_string()
}

/// A flag named by one of two words, `words.0` for false and `words.1` for true (empty keeps
/// the default).
fn one_of(v: &str, words: (&str, &str), field: &mut bool) -> Result<(), ()> {
    match v.trim() {
        "" => {}
        w if w == words.0 => *field = false,
        w if w == words.1 => *field = true,
        _ => return Err(()),
    }
    Ok(())
}

/// The word [`one_of`] reads for `on`.
fn show_one_of(on: bool, words: (&str, &str)) -> String {
    (if on { words.1 } else { words.0 }).to_string()
}

/// A whole number in `range`; empty keeps the default.
fn number<T: std::str::FromStr + PartialOrd>(
    v: &str,
    field: &mut T,
    ok: impl Fn(&T) -> bool,
) -> Result<(), ()> {
    let v = v.trim();
    if v.is_empty() {
        return Ok(());
    }
    match v.parse::<T>() {
        Ok(n) if ok(&n) => {
            *field = n;
            Ok(())
        }
        _ => Err(()),
    }
}

/// `word` (case-insensitive) as `None`, else a whole number `ok` accepts.
fn number_or(
    v: &str,
    word: &str,
    field: &mut Option<usize>,
    ok: fn(usize) -> bool,
) -> Result<(), ()> {
    let v = v.trim();
    if v.is_empty() {
        return Ok(());
    }
    if v.eq_ignore_ascii_case(word) {
        *field = None;
        return Ok(());
    }
    match v.parse::<usize>() {
        Ok(n) if ok(n) => {
            *field = Some(n);
            Ok(())
        }
        _ => Err(()),
    }
}

fn show_or(v: Option<usize>, word: &str) -> String {
    v.map_or_else(|| word.to_string(), |n| n.to_string())
}

/// The most rows `matmul` hands the GEMV kernel (gemv.cu's `GEMV_MAX_ROWS`).
pub const GEMV_MAX_ROWS: usize = 8;

/// Every tuning setting, grouped as [`Tuning`]'s fields are.
pub const SETTINGS: &[Setting] = &[
    Setting {
        name: "launch.cuda_sync",
        var: "METRALE_CUDA_SYNC",
        accepts: "0 | 1",
        default: "0",
        doc: "Wait for every kernel after its launch, so a fault names its kernel (always on in debug builds).",
        set: |t, v| flag(v, &mut t.launch.cuda_sync),
        get: |t| show_flag(t.launch.cuda_sync),
    },
    Setting {
        name: "launch.cuda_graphs",
        var: "METRALE_CUDA_GRAPHS",
        accepts: "0 | 1",
        default: "1",
        doc: "Capture and replay decode steps as CUDA graphs (`--enforce-eager` also turns them off).",
        set: |t, v| flag(v, &mut t.launch.cuda_graphs),
        get: |t| show_flag(t.launch.cuda_graphs),
    },
    Setting {
        name: "launch.pdl",
        var: "METRALE_PDL",
        accepts: "0 | 1",
        default: "1",
        doc: "Launch kernels with programmatic dependent launch (compute capability 9.0 and later only).",
        set: |t, v| flag(v, &mut t.launch.pdl),
        get: |t| show_flag(t.launch.pdl),
    },
    Setting {
        name: "gemm.gemv_max_rows",
        var: "METRALE_GEMV_MAX_ROWS",
        accepts: "0..=8",
        default: "1",
        doc: "`matmul` with at most this many rows runs the GEMV kernel instead of cuBLAS (0: always cuBLAS).",
        set: |t, v| number(v, &mut t.gemm.gemv_max_rows, |&n| n <= GEMV_MAX_ROWS),
        get: |t| t.gemm.gemv_max_rows.to_string(),
    },
    Setting {
        name: "gemm.gemv_full",
        var: "METRALE_GEMV_FULL",
        accepts: "0 | 1",
        default: "0",
        doc: "One-row GEMVs whose grid fits one wave take the whole-row kernels (`gemv_full_*`).",
        set: |t, v| flag(v, &mut t.gemm.gemv_full),
        get: |t| show_flag(t.gemm.gemv_full),
    },
    Setting {
        name: "gemm.gemm_tune",
        var: "METRALE_GEMM_TUNE",
        accepts: "0 | 1",
        default: "1",
        doc: "Time each decode-sized GEMM shape against cuBLASLt's algorithms once and keep the faster.",
        set: |t, v| flag(v, &mut t.gemm.gemm_tune),
        get: |t| show_flag(t.gemm.gemm_tune),
    },
    Setting {
        name: "gemm.fp8_gemv_mma",
        var: "METRALE_FP8_GEMV_MMA",
        accepts: "0 | 1",
        default: "1",
        doc: "Decode-sized FP8 GEMMs run on tensor cores (`gemv_fp8_mma*`) instead of `gemv_fp8_m*`.",
        set: |t, v| flag(v, &mut t.gemm.fp8_gemv_mma),
        get: |t| show_flag(t.gemm.fp8_gemv_mma),
    },
    Setting {
        name: "gemm.bf16_gemv_mma",
        var: "METRALE_BF16_GEMV_MMA",
        accepts: "0 | 1",
        default: "1",
        doc: "bf16 `matmul` with 2 to 8 rows (an MTP verify step's, small batches) runs on tensor cores (`gemv_bf16_mma`) instead of cuBLAS.",
        set: |t, v| flag(v, &mut t.gemm.bf16_gemv_mma),
        get: |t| show_flag(t.gemm.bf16_gemv_mma),
    },
    Setting {
        name: "gemm.fp8_draft_head",
        var: "METRALE_FP8_DRAFT_HEAD",
        accepts: "0 | 1",
        default: "1",
        doc: "With `--speculative`, the MTP head's drafts read an FP8 copy of a bf16 LM head (half the bytes a draft reads; verification keeps the bf16 head, so outputs are unchanged).",
        set: |t, v| flag(v, &mut t.gemm.fp8_draft_head),
        get: |t| show_flag(t.gemm.fp8_draft_head),
    },
    Setting {
        name: "gemm.fp8_matmul_mma",
        var: "METRALE_FP8_MATMUL_MMA",
        accepts: "0 | 1",
        default: "0",
        doc: "`matmul` with an FP8 weight and more than 32 rows runs the tensor-core kernel, not cuBLAS on a bf16 copy.",
        set: |t, v| flag(v, &mut t.gemm.fp8_matmul_mma),
        get: |t| show_flag(t.gemm.fp8_matmul_mma),
    },
    Setting {
        name: "gemm.fp8_tile_rows_min",
        var: "METRALE_FP8_TILE_ROWS_MIN",
        accepts: "off | an integer >= 1",
        default: "97",
        doc: "`matmul` with an FP8 weight (k % 64 == 0, tensor cores) and from this many rows up to 128 runs the tile GEMM (`fp8_gemm_rows_m*`: a block owns 128 weight rows and every x row, x and the weight staged in shared memory by cp.async, k split over blocks where the column tiles are fewer than the multiprocessors, at most `gemm.fp8_tile_max_splits` ways) instead of `gemv_fp8_mma_many`; off: never. 97 (the 128-row build): on an H100 it was faster at 128 rows for every shape of up to 3 splits (1.2-1.8x) and slower at 16 and 32 rows (performance log part 23).",
        set: |t, v| number_or(v, "off", &mut t.gemm.fp8_tile_rows_min, |n| n >= 1),
        get: |t| show_or(t.gemm.fp8_tile_rows_min, "off"),
    },
    Setting {
        name: "gemm.fp8_tile_max_splits",
        var: "METRALE_FP8_TILE_MAX_SPLITS",
        accepts: "1 .. 8",
        default: "4",
        doc: "Most splits of k the FP8 tile GEMM is taken with; a product whose column tiles would need more (few output columns) takes `gemv_fp8_mma_many`. 4: Qwen3-30B-A3B's o projection ([2048, 4096], 8 splits) was slower on the tiles at every row count on an H100 (performance log part 23).",
        set: |t, v| number(v, &mut t.gemm.fp8_tile_max_splits, |n| (1..=8).contains(n)),
        get: |t| t.gemm.fp8_tile_max_splits.to_string(),
    },
    Setting {
        name: "gemm.nvfp4_mma_rows",
        var: "METRALE_NVFP4_MMA_ROWS",
        accepts: "an integer >= 0",
        default: "256",
        doc: "`matmul` with an NVFP4 weight and at most this many rows runs on tensor cores (`gemv_nvfp4_mma_*`), more rows (all with 0) dequantize to a bf16 copy for cuBLAS; 256: the copy measured 4.5x slower than the tensor cores at 64 and 128 rows on an H200.",
        set: |t, v| number(v, &mut t.gemm.nvfp4_mma_rows, |_| true),
        get: |t| t.gemm.nvfp4_mma_rows.to_string(),
    },
    Setting {
        name: "gemm.nvfp4_tile_rows_min",
        var: "METRALE_NVFP4_TILE_ROWS_MIN",
        accepts: "off | an integer >= 1",
        default: "128",
        doc: "`matmul` with an NVFP4 weight and from this many rows up to `gemm.nvfp4_mma_rows` runs the tile GEMM (`nvfp4_gemm_*`: 32, 64 or 128 weight rows times 32 or 64 x rows a block, each weight converted once a block) instead of `gemv_nvfp4_mma_*`; 128: on an H100 a 27B step's GEMVs took 37.7 ms at 128 rows against the GEMV's 42.4 (59.8 against 78.8 at 256), and 29.9 against 24.2 at 64 (docs/nvfp4.md).",
        set: |t, v| number_or(v, "off", &mut t.gemm.nvfp4_tile_rows_min, |n| n >= 1),
        get: |t| show_or(t.gemm.nvfp4_tile_rows_min, "off"),
    },
    Setting {
        name: "gemm.nvfp4_w4a4",
        var: "METRALE_NVFP4_W4A4",
        accepts: "0 | 1",
        default: "0",
        doc: "On Blackwell GeForce and DGX Spark (sm_120a / sm_121a), `matmul` with an NVFP4 weight and up to `gemm.nvfp4_mma_rows` rows quantizes the activations to NVFP4 (a global per row, E4M3 scales per 16 values) and runs the block-scaled FP4 tensor cores (`gemm_nvfp4_w4a4_*`, W4A4: costs accuracy, as `moe.fp8_activations` does); elsewhere it changes nothing. Checked by the host emulation only, not yet on a Blackwell GPU: off by default.",
        set: |t, v| flag(v, &mut t.gemm.nvfp4_w4a4),
        get: |t| show_flag(t.gemm.nvfp4_w4a4),
    },
    Setting {
        name: "moe.small_paths",
        var: "METRALE_MOE_SMALL_PATHS",
        accepts: "0 | 1",
        default: "1",
        doc: "Small MoE steps in fewer launches (one-block routing, fused down + combine); 0: six launches at every size.",
        set: |t, v| flag(v, &mut t.moe.small_paths),
        get: |t| show_flag(t.moe.small_paths),
    },
    Setting {
        name: "moe.decode_gate_up",
        var: "METRALE_MOE_DECODE_GATE_UP",
        accepts: "0 | 1",
        default: "1",
        doc: "One-token MoE steps take `moe_gate_up_dec_*` (weight loads in flight at once).",
        set: |t, v| flag(v, &mut t.moe.decode_gate_up),
        get: |t| show_flag(t.moe.decode_gate_up),
    },
    Setting {
        name: "moe.fp4_gate_up",
        var: "METRALE_MOE_FP4_GATE_UP",
        accepts: "dec | split",
        default: "split",
        doc: "FP4 experts at least 1024 wide at one-token steps: gate|up on the CUDA cores (`moe_gate_up[_clamped]_dec_*`) or on tensor cores with k split over a block's warps (`moe_gate_up[_clamped]_{nvfp4,mxfp4}_small`); the `_dec` down + sum either way. split: on an H100 a gpt-oss-20b layer 0.041 against 0.042 ms, its gate|up 33.3 against 34.3 µs (ncu), C=1 411.9 against 408.6 tok/s (performance log part 23).",
        set: |t, v| one_of(v, ("dec", "split"), &mut t.moe.fp4_gate_up_split),
        get: |t| show_one_of(t.moe.fp4_gate_up_split, ("dec", "split")),
    },
    Setting {
        name: "moe.down_cols",
        var: "METRALE_MOE_DOWN_COLS",
        accepts: "auto | 0 | 1 | 2 | 4",
        default: "auto",
        doc: "Columns a block of the decode down + combine kernel (0: `moe_down_combine_*`; auto: 1 FP8 and FP4, 2 bf16 at one token, else 0).",
        set: |t, v| {
            number_or(v, "auto", &mut t.moe.down_cols, |n| {
                matches!(n, 0 | 1 | 2 | 4)
            })
        },
        get: |t| show_or(t.moe.down_cols, "auto"),
    },
    Setting {
        name: "moe.decode_tokens",
        var: "METRALE_MOE_DECODE_TOKENS",
        accepts: "auto | 1 .. 8",
        default: "auto",
        doc: "Most tokens a step takes the one-token MoE kernels with (`moe_gate_up_dec_*`, the `_dec` down with FP8 and FP4 experts, FP4 experts on the CUDA cores in place of the small-step tensor-core kernels; auto: 1).",
        set: |t, v| {
            number_or(v, "auto", &mut t.moe.decode_tokens, |n| {
                (1..=8).contains(&n)
            })
        },
        get: |t| show_or(t.moe.decode_tokens, "auto"),
    },
    Setting {
        name: "moe.gemm",
        var: "METRALE_MOE_GEMM",
        accepts: "auto | tensor-cores | cuda-cores",
        default: "auto",
        doc: "Where the experts' GEMMs run (auto: tensor cores from 4 pairs an expert with bf16 experts, 2 with FP8, 4 with FP4 ones widened to bf16).",
        set: |t, v| {
            t.moe.gemm = match v.trim().to_ascii_lowercase().as_str() {
                "" => t.moe.gemm,
                "auto" => MoeGemm::Auto,
                "tensor-cores" => MoeGemm::TensorCores,
                "cuda-cores" => MoeGemm::CudaCores,
                _ => return Err(()),
            };
            Ok(())
        },
        get: |t| {
            match t.moe.gemm {
                MoeGemm::Auto => "auto",
                MoeGemm::TensorCores => "tensor-cores",
                MoeGemm::CudaCores => "cuda-cores",
            }
            .to_string()
        },
    },
    Setting {
        name: "moe.fp8_activations",
        var: "METRALE_FP8_ACTIVATIONS",
        accepts: "0 | 1",
        default: "0",
        doc: "The FP8 tensor-core GEMMs quantize activations to e4m3 (compute capability 8.9+; costs accuracy).",
        set: |t, v| flag(v, &mut t.moe.fp8_activations),
        get: |t| show_flag(t.moe.fp8_activations),
    },
    Setting {
        name: "moe.small_mma",
        var: "METRALE_MOE_SMALL_MMA",
        accepts: "0 | 1 | pipe",
        default: "pipe",
        doc: "Decode-sized MoE steps (up to 256 tokens) run their experts on the `moe_*_small*` tensor-core kernels; pipe (the default): FP8 experts' `_any` builds stream the weights through a cp.async pipeline (`moe_*_fp8_pipe`, hidden and intermediate sizes multiples of 128); 1: the `_any` builds themselves.",
        set: |t, v| {
            t.moe.small_pipe = v.trim() == "pipe";
            if t.moe.small_pipe {
                t.moe.small_mma = true;
                Ok(())
            } else {
                flag(v, &mut t.moe.small_mma)
            }
        },
        get: |t| match t.moe.small_pipe {
            true => "pipe".to_string(),
            false => show_flag(t.moe.small_mma),
        },
    },
    Setting {
        name: "moe.expert_kernel",
        var: "METRALE_MOE_EXPERT_KERNEL",
        accepts: "mma | wgmma",
        default: "wgmma",
        doc: "The tensor-core expert GEMMs (prefill chunks, large decode batches) and the dense FP8 GEMM on sm_90 (H100, H200), for bf16 and FP8 weights: mma.sync on 64-pair tiles (`moe_*_mma_*`, exact FP8 sums), or Hopper's warpgroup MMA straight from shared memory on 128-pair tiles (`moe_*_wg_*`, FP8 widened to bf16 as e4m3 · scale rounded once; with e4m3 activations as `moe.fp8act_kernel` says); other GPUs and FP4 stacks always take mma.",
        set: |t, v| one_of(v, ("mma", "wgmma"), &mut t.moe.wgmma),
        get: |t| show_one_of(t.moe.wgmma, ("mma", "wgmma")),
    },
    Setting {
        name: "moe.fp8act_kernel",
        var: "METRALE_MOE_FP8ACT_KERNEL",
        accepts: "mma | wgmma",
        default: "wgmma",
        doc: "The FP8 tile GEMMs with e4m3 activations (`moe.fp8_activations`) on sm_90 with `moe.expert_kernel = wgmma`: moe_wg8.cu's wgmma on e4m3 × e4m3 (the default, 1.6x faster on an H100), or moe_mma.cu's mma.sync `fp8act` build.",
        set: |t, v| {
            t.moe.fp8act_kernel = match v.trim().to_ascii_lowercase().as_str() {
                "" => t.moe.fp8act_kernel,
                "mma" => Fp8ActKernel::Mma,
                "wgmma" => Fp8ActKernel::Wgmma,
                _ => return Err(()),
            };
            Ok(())
        },
        get: |t| {
            match t.moe.fp8act_kernel {
                Fp8ActKernel::Mma => "mma",
                Fp8ActKernel::Wgmma => "wgmma",
            }
            .to_string()
        },
    },
    Setting {
        name: "attention.kernel",
        var: "METRALE_ATTN_KERNEL",
        accepts: "auto | simt",
        default: "auto",
        doc: "auto: the tensor-core attention kernel where it fits; simt: always attention.cu's CUDA-core kernel.",
        set: |t, v| {
            t.attention.kernel = match v.trim().to_ascii_lowercase().as_str() {
                "" => t.attention.kernel,
                "auto" => AttnKernelChoice::Auto,
                "simt" => AttnKernelChoice::Simt,
                _ => return Err(()),
            };
            Ok(())
        },
        get: |t| {
            match t.attention.kernel {
                AttnKernelChoice::Auto => "auto",
                AttnKernelChoice::Simt => "simt",
            }
            .to_string()
        },
    },
    Setting {
        name: "attention.blocks_per_sm",
        var: "METRALE_ATTN_BLOCKS_PER_SM",
        accepts: "an integer >= 1",
        default: "4",
        doc: "Blocks a multiprocessor an attention launch aims for before rows are split along their keys.",
        set: |t, v| number(v, &mut t.attention.blocks_per_sm, |&n| n >= 1),
        get: |t| t.attention.blocks_per_sm.to_string(),
    },
    Setting {
        name: "attention.min_split_keys",
        var: "METRALE_ATTN_MIN_SPLIT_KEYS",
        accepts: "an integer >= 1",
        default: "64",
        doc: "The fewest keys an attention split (split-K) takes.",
        set: |t, v| number(v, &mut t.attention.min_split_keys, |&n| n >= 1),
        get: |t| t.attention.min_split_keys.to_string(),
    },
    Setting {
        name: "attention.flash_min_rows",
        var: "METRALE_ATTN_FLASH_MIN_ROWS",
        accepts: "off | an integer >= 1",
        default: "16",
        doc: "Sequences with at least this many rows in a step (prefill chunks) take the tensor-core flash prefill kernel, from the first such sequence of the batch on (off: none).",
        set: |t, v| number_or(v, "off", &mut t.attention.flash_min_rows, |n| n >= 1),
        get: |t| show_or(t.attention.flash_min_rows, "off"),
    },
    Setting {
        name: "attention.flash_kernel",
        var: "METRALE_ATTN_FLASH_KERNEL",
        accepts: "mma | wgmma",
        default: "wgmma",
        doc: "The flash prefill kernel's products on sm_90 (H100, H200): mma.sync fed by ldmatrix (`attention_flash_*`), or Hopper's warpgroup MMA straight from shared memory (`attention_flash_wg_*`); other GPUs always take mma.",
        set: |t, v| one_of(v, ("mma", "wgmma"), &mut t.attention.flash_wgmma),
        get: |t| show_one_of(t.attention.flash_wgmma, ("mma", "wgmma")),
    },
    Setting {
        name: "gdn.chunk_min",
        var: "METRALE_GDN_CHUNK_MIN",
        accepts: "off | an integer >= 1",
        default: "32",
        doc: "Gated DeltaNet: sequences with at least this many rows in a step take the chunked kernels (off: none).",
        set: |t, v| number_or(v, "off", &mut t.gdn.chunk_min, |n| n >= 1),
        get: |t| show_or(t.gdn.chunk_min, "off"),
    },
    Setting {
        name: "gdn.fused_decode",
        var: "METRALE_GDN_FUSED_DECODE",
        accepts: "0 | 1",
        default: "1",
        doc: "Gated DeltaNet: one-row-a-sequence steps run the single-launch decode kernel (0: three launches).",
        set: |t, v| flag(v, &mut t.gdn.fused_decode),
        get: |t| show_flag(t.gdn.fused_decode),
    },
    Setting {
        name: "gdn.decode_splits",
        var: "METRALE_GDN_DECODE_SPLITS",
        accepts: "auto | 1 | 2 | 4",
        default: "auto",
        doc: "Gated DeltaNet: blocks a key head's state columns take in the fused decode kernel (auto: by shape).",
        set: |t, v| {
            number_or(v, "auto", &mut t.gdn.decode_splits, |n| {
                matches!(n, 1 | 2 | 4)
            })
        },
        get: |t| show_or(t.gdn.decode_splits, "auto"),
    },
    Setting {
        name: "mamba2.chunk_min",
        var: "METRALE_MAMBA2_CHUNK_MIN",
        accepts: "off | an integer >= 1",
        default: "32",
        doc: "Mamba-2: sequences with at least this many rows in a step take the chunked (SSD) scan on tensor cores, the others the token-by-token scan (off: none).",
        set: |t, v| number_or(v, "off", &mut t.mamba2.chunk_min, |n| n >= 1),
        get: |t| show_or(t.mamba2.chunk_min, "off"),
    },
    Setting {
        name: "kernels.cache",
        var: "METRALE_KERNEL_CACHE",
        accepts: "a directory | off | 0 | (empty: off)",
        default: "default",
        doc: "Where compiled kernels are kept (default: `$XDG_CACHE_HOME/metrale/kernels`, else `~/.cache/metrale/kernels`).",
        set: |t, v| {
            t.kernels.cache = if v.is_empty() || v == "0" || v.eq_ignore_ascii_case("off") {
                KernelCache::Off
            } else if v == "default" {
                KernelCache::Default
            } else {
                // Read once at start-up and kept for the process's life.
                KernelCache::Dir(Box::leak(v.to_string().into_boxed_str()))
            };
            Ok(())
        },
        get: |t| match t.kernels.cache {
            KernelCache::Default => "default".to_string(),
            KernelCache::Off => "off".to_string(),
            KernelCache::Dir(d) => d.to_string(),
        },
    },
    Setting {
        name: "kernels.show_ptxas",
        var: "METRALE_SHOW_PTXAS",
        accepts: "0 | 1",
        default: "0",
        doc: "Compile kernels with ptxas statistics (registers, spills) and print them.",
        set: |t, v| flag(v, &mut t.kernels.show_ptxas),
        get: |t| show_flag(t.kernels.show_ptxas),
    },
    Setting {
        name: "debug.step_profile",
        var: "METRALE_STEP_PROFILE",
        accepts: "an integer >= 0",
        default: "0",
        doc: "Print where the engine step's time goes (schedule, launch, device, update) every N steps (0: off).",
        set: |t, v| number(v, &mut t.debug.step_profile, |_| true),
        get: |t| t.debug.step_profile.to_string(),
    },
    Setting {
        name: "debug.step_delay_ms",
        var: "METRALE_DEBUG_STEP_DELAY_MS",
        accepts: "an integer >= 0 (milliseconds)",
        default: "0",
        doc: "Test hook: pause this long after every engine step (0: none).",
        set: |t, v| number(v, &mut t.debug.step_delay_ms, |_| true),
        get: |t| t.debug.step_delay_ms.to_string(),
    },
    Setting {
        name: "debug.spec_force_accept",
        var: "METRALE_SPEC_FORCE_ACCEPT",
        accepts: "off | a rate in [0, 1]",
        default: "off",
        doc: "Test hook: accept each speculative draft with this probability regardless of the model (output is not the model's).",
        set: |t, v| {
            let v = v.trim();
            t.debug.spec_force_accept = if v.is_empty() || v.eq_ignore_ascii_case("off") {
                None
            } else {
                match v.parse::<f64>() {
                    Ok(r) if (0.0..=1.0).contains(&r) => Some(r),
                    _ => return Err(()),
                }
            };
            Ok(())
        },
        get: |t| {
            t.debug
                .spec_force_accept
                .map_or_else(|| "off".to_string(), |r| r.to_string())
        },
    },
    Setting {
        name: "debug.grammar_overlap",
        var: "METRALE_GRAMMAR_OVERLAP",
        accepts: "0 | 1",
        default: "1",
        doc: "Compute grammar masks on worker threads while the step runs (0: when sampling, on the engine thread; the tokens are the same).",
        set: |t, v| flag(v, &mut t.debug.grammar_overlap),
        get: |t| show_flag(t.debug.grammar_overlap),
    },
];

/// `METRALE_*` variables that are not tuning: read by `metralectl`, the installers, the test
/// and GPU scripts, and kernel builds (`METRALE_HOST_EMULATION`, `METRALE_CP_ASYNC` are
/// preprocessor macros, never variables); `met` does not warn about them.
pub(super) const OTHER_VARS: &[&str] = &[
    "METRALE_API_KEY",
    "METRALE_BASE_URL",
    "METRALE_CONFIG_DIR",
    "METRALE_DOWNLOAD_URL",
    "METRALE_GIT_COMMIT",
    "METRALE_GPU_BIN",
    "METRALE_HYBRID_PREFILL",
    "METRALE_HYBRID_SPEED_ONLY",
    "METRALE_INSTALL_DIR",
    "METRALE_MODEL",
    "METRALE_MOE_SPEED_BATCHES",
    "METRALE_MOE_SPEED_CONTEXTS",
    "METRALE_MOE_SPEED_ONLY",
    "METRALE_MOE_SPEED_PREFILL",
    "METRALE_NVIDIA_SMI",
    "METRALE_PYTHON",
    "METRALE_RELEASE_KEY",
    "METRALE_RELEASE_KEY_FILE",
    "METRALE_RELEASE_PUBKEY",
    "METRALE_STATE_DIR",
    "METRALE_TARGET",
    "METRALE_TOP_CAPTURE",
];

/// The warning for an unknown `METRALE_*` variable, naming the nearest known setting.
pub(super) fn unknown_warning(var: &str) -> String {
    // Compared without the shared prefix, which would make every name look near.
    let bare = |v: &str| v.trim_start_matches("METRALE_").to_string();
    let nearest = SETTINGS
        .iter()
        .map(|s| (strsim::jaro_winkler(&bare(var), &bare(s.var)), s.var))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match nearest {
        Some((score, near)) if score >= 0.8 => format!(
            "{var} is not a tuning setting and is ignored: did you mean {near}? (the settings: \
             docs/cuda.md, \"Tuning\")"
        ),
        _ => format!(
            "{var} is not a tuning setting and is ignored (the settings: docs/cuda.md, \"Tuning\")"
        ),
    }
}

/// The start and end markers of the generated table in `docs/cuda.md`.
pub const DOCS_BEGIN: &str = "<!-- tuning-table:begin (generated: met print-tuning-table) -->";
pub const DOCS_END: &str = "<!-- tuning-table:end -->";

/// The Markdown table of every setting, as `docs/cuda.md` carries it between [`DOCS_BEGIN`]
/// and [`DOCS_END`].
pub fn docs_table() -> String {
    let mut s = String::from("| Setting | Variable | Accepts | Default | What it does |\n");
    s.push_str("|---|---|---|---|---|\n");
    for r in SETTINGS {
        s.push_str(&format!(
            "| `{}` | `{}` | {} | `{}` | {} |\n",
            r.name,
            r.var,
            r.accepts.replace('|', "\\|"),
            r.default,
            r.doc.replace('|', "\\|")
        ));
    }
    s
}
