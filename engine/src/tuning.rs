//! The engine's tuning knobs: one typed [`Tuning`] value, built once at start-up from the
//! `METRALE_*` environment by [`Tuning::from_env`] and passed by value to the backend and the
//! engine core (vLLM's `vllm/envs.py`). Every knob is a row of one registry
//! ([`registry::SETTINGS`]: setting, variable, type, default, doc); nothing else in the engine
//! reads a `METRALE_*` variable, and `docs/cuda.md`'s "Tuning" table is generated from it
//! (`met print-tuning-table`, checked by a unit test).
//!
//! A value a setting does not accept is an error naming the variable, what it got and what it
//! accepts; an unknown `METRALE_*` variable gets a warning naming the nearest known one.

pub mod registry;

use serde::Serialize;

pub use registry::{SETTINGS, Setting, docs_table};

/// Which kernels `fused_moe` runs its experts' GEMMs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MoeGemm {
    /// Tensor cores when the step's pairs average 4 an expert (bf16 experts) or 2 (FP8), else
    /// the CUDA-core kernels (the default).
    #[default]
    Auto,
    /// Tensor cores at every size where the GPU (compute capability 8.0) and the shapes (rows
    /// of a multiple of 8 bf16 or 16 FP8 elements) allow them.
    TensorCores,
    /// The CUDA-core kernels at every size.
    CudaCores,
}

/// Which kernels the FP8 experts' tile GEMMs (and the dense FP8 GEMM) take with e4m3
/// activations (`moe.fp8_activations`) on sm_90.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fp8ActKernel {
    /// moe_mma.cu's `fp8act` mma.sync build.
    Mma,
    /// moe_wg8.cu's wgmma build, every thread loading between block barriers (the default:
    /// 1.6x the mma.sync build on an H100, performance log part 31).
    #[default]
    Wgmma,
}

/// Which attention kernel `paged_attention` may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AttnKernelChoice {
    /// The tensor-core kernel where it fits the shape and GPU, else the CUDA-core one.
    #[default]
    Auto,
    /// Always attention.cu's CUDA-core kernel.
    Simt,
}

/// Where compiled kernels are cached between runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KernelCache {
    /// `$XDG_CACHE_HOME/metrale/kernels`, else `~/.cache/metrale/kernels`.
    #[default]
    Default,
    /// No cache: every module is compiled at start.
    Off,
    /// This directory (read once at start-up; kept for the process's life).
    Dir(&'static str),
}

/// Launches and CUDA graphs.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct LaunchTuning {
    /// Wait for every kernel right after its launch, so a fault names its kernel (always on in
    /// debug builds).
    pub cuda_sync: bool,
    /// Capture and replay decode steps as CUDA graphs (`--enforce-eager` turns it off too).
    pub cuda_graphs: bool,
    /// Programmatic dependent launch, on compute capability 9.0 and later.
    pub pdl: bool,
}

/// Dense products.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct GemmTuning {
    /// `matmul` with at most this many rows runs the GEMV kernel instead of cuBLAS (0..=8).
    pub gemv_max_rows: usize,
    /// One-row GEMVs whose grid fits one wave take the whole-row kernels.
    pub gemv_full: bool,
    /// Time decode-sized GEMM shapes against cuBLASLt's algorithms once, keep the faster.
    pub gemm_tune: bool,
    /// Decode-sized FP8 GEMMs run on tensor cores (`gemv_fp8_mma*`).
    pub fp8_gemv_mma: bool,
    /// bf16 `matmul` of 2-8 rows runs on tensor cores (`gemv_bf16_mma`), not cuBLAS.
    pub bf16_gemv_mma: bool,
    /// The MTP head drafts through an FP8 copy of a bf16 LM head (`Backend::draft_head`).
    pub fp8_draft_head: bool,
    /// `matmul` with an FP8 weight and more than 32 rows runs the tensor-core kernel.
    pub fp8_matmul_mma: bool,
    /// `matmul` with an FP8 weight and from this many rows up to 128 runs the tile GEMM
    /// (`fp8_gemm_rows_*`, x and the weight staged in shared memory) instead of
    /// `gemv_fp8_mma_many`; `None`: never.
    pub fp8_tile_rows_min: Option<usize>,
    /// Most splits of k the tile GEMM is taken with (fewer column tiles than that needs:
    /// `gemv_fp8_mma_many`).
    pub fp8_tile_max_splits: usize,
    /// `matmul` with an NVFP4 weight and at most this many rows runs the tensor-core kernel;
    /// more rows take a bf16 copy and cuBLAS.
    pub nvfp4_mma_rows: usize,
    /// `matmul` with an NVFP4 weight and from this many rows up to `nvfp4_mma_rows` runs the
    /// tile GEMM (`nvfp4_gemm_*`, each weight converted once a block); `None`: never.
    pub nvfp4_tile_rows_min: Option<usize>,
    /// `matmul` with an NVFP4 weight on Blackwell GeForce / DGX Spark (sm_120a / sm_121a)
    /// quantizes the activations to NVFP4 and runs the block-scaled FP4 tensor cores
    /// (`nvfp4_w4a4.cu`, W4A4); untested on hardware, so off by default.
    pub nvfp4_w4a4: bool,
}

/// Mixture-of-experts blocks (`fused_moe`, see `backend::moe_plan`).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct MoeTuning {
    /// Small steps in fewer launches (one-block routing, fused down + combine).
    pub small_paths: bool,
    /// One-token steps take `moe_gate_up_dec_*`.
    pub decode_gate_up: bool,
    /// Where they would, FP4 experts 1024+ wide take the split tensor-core gate|up instead.
    pub fp4_gate_up_split: bool,
    /// Columns a block of the decode down + combine kernel (0, 1, 2, 4); `None`: by step and
    /// expert type.
    pub down_cols: Option<usize>,
    /// Most tokens a step takes the one-token kernels with (1 to 8; `moe_plan.rs`'s
    /// `decode_tokens`); `None`: by expert type and width.
    pub decode_tokens: Option<usize>,
    /// Where the experts' GEMMs run.
    pub gemm: MoeGemm,
    /// The FP8 tensor-core GEMMs quantize their activations to e4m3.
    pub fp8_activations: bool,
    /// Decode-sized steps run their experts on `moe_*_small*` tensor-core kernels.
    pub small_mma: bool,
    /// Where those would take the FP8 `_any` builds, the cp.async-pipelined `moe_*_fp8_pipe`
    /// ones (`moe_pipe.cu`; `moe.small_mma = pipe`, the default).
    pub small_pipe: bool,
    /// The tensor-core expert GEMMs (128-pair tiles) and the dense FP8 GEMM on sm_90 issue wgmma
    /// (`moe_wg.cu`) instead of mma.sync (`moe_mma.cu`), for bf16 and FP8 weights.
    pub wgmma: bool,
    /// The kernels of the e4m3-activation tile GEMMs on sm_90 (`moe.expert_kernel = wgmma`).
    pub fp8act_kernel: Fp8ActKernel,
}

/// Paged attention.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct AttentionTuning {
    pub kernel: AttnKernelChoice,
    /// Blocks a multiprocessor a launch aims for before rows are split along their keys.
    pub blocks_per_sm: usize,
    /// The fewest keys a split takes.
    pub min_split_keys: usize,
    /// Sequences with at least this many rows in a step take the flash prefill kernel
    /// (`attention_flash.cu`); `None`: none do.
    pub flash_min_rows: Option<usize>,
    /// The flash kernel on sm_90 issues its products as wgmma (`attention_flash_wg.cu`)
    /// instead of mma.sync (`attention_flash.cu`).
    pub flash_wgmma: bool,
}

/// Gated DeltaNet (hybrid models).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct GdnTuning {
    /// Sequences with at least this many rows in a step take the chunked kernels; `None`:
    /// none do.
    pub chunk_min: Option<usize>,
    /// One-row-a-sequence steps run the single-launch decode kernel.
    pub fused_decode: bool,
    /// Blocks a key head's state columns take in the fused decode kernel; `None`: by shape.
    pub decode_splits: Option<usize>,
}

/// Mamba-2 (Nemotron-H).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Mamba2Tuning {
    /// Sequences with at least this many rows in a step take the chunked (SSD) scan; `None`:
    /// none do.
    pub chunk_min: Option<usize>,
}

/// The kernel loader.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct KernelTuning {
    pub cache: KernelCache,
    /// Compile with ptxas statistics and print them.
    pub show_ptxas: bool,
}

/// The engine loop and test hooks.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct DebugTuning {
    /// Print where a step's time goes every this many steps (0: off).
    pub step_profile: u64,
    /// A pause after every engine step, in ms (0: none).
    pub step_delay_ms: u64,
    /// Accept each speculative draft with this probability regardless of the target.
    pub spec_force_accept: Option<f64>,
    /// Compute grammar masks on worker threads while the step runs (else when sampling).
    pub grammar_overlap: bool,
}

/// Every tuning knob, resolved. Copied by value: the backend and the engine core each keep
/// theirs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Tuning {
    pub launch: LaunchTuning,
    pub gemm: GemmTuning,
    pub moe: MoeTuning,
    pub attention: AttentionTuning,
    pub gdn: GdnTuning,
    pub mamba2: Mamba2Tuning,
    pub kernels: KernelTuning,
    pub debug: DebugTuning,
}

/// A `METRALE_*` variable whose value its setting does not accept.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{var}={value:?} is not a valid value: {var} accepts {accepts}")]
pub struct TuningError {
    pub var: &'static str,
    pub value: String,
    pub accepts: &'static str,
}

impl Default for Tuning {
    /// Every setting at its registry default.
    fn default() -> Self {
        let mut t = Tuning {
            launch: LaunchTuning::default(),
            gemm: GemmTuning::default(),
            moe: MoeTuning::default(),
            attention: AttentionTuning::default(),
            gdn: GdnTuning::default(),
            mamba2: Mamba2Tuning::default(),
            kernels: KernelTuning::default(),
            debug: DebugTuning::default(),
        };
        for s in SETTINGS {
            // Each default parses (the unit test `defaults_parse` checks every one).
            let _ = (s.set)(&mut t, s.default);
        }
        t
    }
}

impl Tuning {
    /// The process environment's tuning: each registered variable read once; a bad value is an
    /// error, an unknown `METRALE_*` variable a warning (see [`Tuning::from_vars`]).
    pub fn from_env() -> Result<Self, TuningError> {
        let (tuning, warnings) =
            Self::from_vars(std::env::vars_os().filter_map(|(k, v)| {
                Some((k.into_string().ok()?, v.to_string_lossy().into_owned()))
            }))?;
        // Printed before any logging is set up (and whatever RUST_LOG says).
        for w in warnings {
            eprintln!("met: warning: {w}");
        }
        Ok(tuning)
    }

    /// The tuning `vars` (name, value) give, and a warning for each unknown `METRALE_*` name.
    pub fn from_vars(
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<(Self, Vec<String>), TuningError> {
        let mut t = Tuning::default();
        let mut warnings = Vec::new();
        let mut vars: Vec<_> = vars
            .into_iter()
            .filter(|(k, _)| k.starts_with("METRALE_"))
            .collect();
        vars.sort();
        for (k, v) in vars {
            match SETTINGS.iter().find(|s| s.var == k) {
                Some(s) => (s.set)(&mut t, &v).map_err(|()| TuningError {
                    var: s.var,
                    value: v.clone(),
                    accepts: s.accepts,
                })?,
                None if registry::OTHER_VARS.contains(&k.as_str()) => {}
                None => warnings.push(registry::unknown_warning(&k)),
            }
        }
        Ok((t, warnings))
    }

    /// Each setting's resolved value, as the environment variable would spell it.
    pub fn values(&self) -> Vec<(&'static str, String)> {
        SETTINGS.iter().map(|s| (s.var, (s.get)(self))).collect()
    }
}

#[cfg(test)]
mod tests;
