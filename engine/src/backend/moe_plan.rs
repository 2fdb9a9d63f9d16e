//! Which kernels `fused_moe` runs for a step: [`MoePlan::choose`] names the routing, the
//! experts' gate|up and the down + weighted sum from the step's shape, the experts' type, the
//! GPU and the [`MoeTuning`], in one place; the CUDA backend (`cuda/moe.rs`, `cuda/moe_mma.rs`)
//! launches what it names. No GPU needed: the choice is tested here, per shape. gpt-oss's
//! `fused_moe_clamped` (`cuda/gpt_oss.rs`) takes the same plan, its gate|up kernels adding the
//! bias and the clamped SwiGLU (the CUDA-core `Down` and `GateUp` kinds aside: it runs the plain
//! gate|up and down apart, then `moe_combine_bias`). Nemotron-H's relu² experts
//! (`cuda/nemotron_moe.rs`) take [`MoePlan::choose_cuda_cores`]: the same routing and down, the
//! experts on the CUDA cores at every size.
//!
//! Every plan gives the same output within the op's tolerance (the CUDA-core routes bit for
//! bit); the defaults are the fastest measured on the H200 (docs/performance.md).

use crate::tuning::{MoeGemm, MoeTuning};

/// Most pairs (`T · top_k`) grouped by one block (`moe_plan_*`, `moe_group_plan`;
/// `MOE_PLAN_MAX_PAIRS` in moe.cu); more take `moe_route_*` + `moe_group` + `moe_active`.
pub const PLAN_MAX_PAIRS: usize = 1024;
/// Most tokens `moe_plan_*` routes inside its one block (a token a warp of its 32); more
/// route in their own launch over many blocks (`moe_route_*`) before `moe_group_plan`.
pub const PLAN_ROUTE_TOKENS: usize = 32;
/// Most tokens whose down projection and weighted sum run as one launch
/// (`moe_down_combine_*`, `MOE_FUSED_DOWN_TOKENS`); more take `moe_down_*` + `moe_combine`,
/// which read an expert's down row once for up to 8 of its tokens.
pub const FUSED_DOWN_TOKENS: usize = 8;
/// Most experts `moe_router_plan_one` routes (its shared copy of the logits: `32 ·
/// MOE_ROUTE_REGS`).
pub const ROUTER_PLAN_MAX_EXPERTS: usize = 256;
/// With [`MoeGemm::Auto`], steps whose pairs average at least this many an expert run on
/// tensor cores, bf16 experts and FP8 ones: where they beat the CUDA-core kernels on the H200
/// (fused_moe alone at 30B-A3B's shape: bf16 575 against 671 us at 4, 523 against 496 at 2;
/// FP8 586 against 649 us at 2, 423 against 411 at 1; docs/performance.md).
pub const MMA_MIN_PAIRS_PER_EXPERT: (usize, usize) = (4, 2);
/// With [`MoeGemm::Auto`], steps with FP4 experts whose pairs average at least this many
/// halves an expert (half a pair: a step of E / (2 · top_k) tokens) run on tensor cores: the
/// 64-row tiles reading the packed stacks themselves (`moe_mma_fp4.cu`, [`MmaBuild::Nvfp4`] /
/// [`MmaBuild::Mxfp4`]). Measured (cuda_check `moe-fp4-speed`, H100, one layer, tiles against
/// the packed CUDA-core kernels, performance log part 18): Qwen3.6-35B-A3B's shape 0.218 against
/// 0.142 ms at a quarter pair an expert, 0.343 against 0.621 at half; gpt-oss-120b's 1.025
/// against 1.012 at half, 1.734 against 1.908 at one; gpt-oss-20b's 0.542 against 0.497 at one,
/// 0.711 against 0.800 at two. Half a pair costs 20b at most 9% between one and two pairs; one
/// pair would cost Qwen's shape up to 2x between a half and one.
pub const FP4_MMA_MIN_HALF_PAIRS_PER_EXPERT: usize = 1;
/// Most pairs an expert (on average) FP4 experts take the small-step `_any` kernels with: one
/// 16-pair chunk, each further chunk reading the expert's rows again. `cuda_check`'s
/// moe-fp4-speed on an H100 (one layer, ms, `_any` against the 64-row tiles): gpt-oss-20b 0.53
/// against 0.74 at 16 pairs (128 tokens), 0.95 against 0.75 at 32 (256 tokens); 120b and
/// Qwen3.6-35B-A3B's NVFP4 shape 1.33 against 2.66 and 0.36 against 0.75 at 8 (performance log
/// part 19).
pub const SMALL_MMA_FP4_MAX_PAIRS_PER_EXPERT: usize = 16;
/// FP4 experts at least this wide take the split small-step kernels (`moe_fp4_small.cu`) from
/// two tokens to [`SMALL_MMA_FP4_SPLIT_TOKENS`]; narrower ones the `_any` kernels. One-token
/// steps stay on the CUDA cores' `_dec` kernels ([`decode_tokens`]). `moe-fp4-speed` on an H100
/// (one layer, ms, routing and sum included; performance log part 22), split against `_dec`:
/// gpt-oss-20b 0.045 against 0.042 at one token, 0.074 against 0.078 at 2, 0.105 against 0.143
/// at 4, 0.175 against 0.266 at 8 (`_any` 0.217, part 20); 120b alike. Qwen3.6-35B-A3B's 512-wide
/// NVFP4 experts: split 0.040 at 2 tokens against `_any`'s 0.037 (part 20), and its C=4 ladder
/// 651 tok/s with the split kernels against 717 with `_any`.
pub const FP4_SPLIT_MIN_WIDTH: usize = 1024;
/// Most tokens a step may have for `moe_*_fp8_small` (at most 6 pairs an expert in one mma n8
/// tile, k split over the block's warps); larger steps take `moe_*_fp8_small_any` (a warp over
/// the whole k, chunks of 16 pairs). On the H200 (30B-A3B FP8 graph steps, distinct tokens,
/// split against _any): batch 2 4.02-4.18 against 4.20 ms, batch 4 5.19-5.36 against 5.60,
/// batch 8 7.53-7.55 against 7.38, batch 16 13.12 (two tiles, since removed) against 10.11;
/// 5 to 7 not measured.
pub const SMALL_MMA_SPLIT_TOKENS: usize = 6;
/// Most tokens a step may have for the small-step kernels at all: decode batches (a few pairs
/// an expert, which the 64-row tiles would mostly leave empty); larger steps (prefill chunks)
/// take the 64-row tensor-core kernels.
pub const SMALL_MMA_MAX_TOKENS: usize = 256;
/// Fewest tokens a step with bf16 experts needs for `moe_*_bf16_small_any` (fewer stay on the
/// CUDA-core kernels). On the H200 (30B-A3B bf16 graph steps, _any against the CUDA cores):
/// batch 2 5.20 against 4.86 ms, 4 7.25 against 6.74, 8 10.04 against 9.93, 16 13.95 against
/// 20.28 (9 to 15 not measured; from 9 the CUDA-core path takes one launch more).
pub const SMALL_MMA_BF16_MIN_TOKENS: usize = 9;
/// Most tokens a step of FP4 experts ([`FP4_SPLIT_MIN_WIDTH`] wide) takes the split build with
/// (`moe_fp4_small.cu`): all the one B tile allows.
pub const SMALL_MMA_FP4_SPLIT_TOKENS: usize = 8;
/// The largest split-build step the kernel's one B tile allows.
const _: () = assert!(SMALL_MMA_SPLIT_TOKENS <= 8 && SMALL_MMA_FP4_SPLIT_TOKENS <= 8);
/// The compute capability the tensor-core MoE kernels need (mma.sync, `moe_mma.cu`).
const MMA_MIN_CC: (i32, i32) = (8, 0);
/// The compute capability e4m3 mma needs (the `fp8act` build).
const FP8_MMA_MIN_CC: (i32, i32) = (8, 9);

/// The experts' weight type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpertType {
    Bf16,
    Fp8,
    /// NVFP4, kept packed (E2M1 pairs, an E4M3 scale per 16 values, an f32 multiplier a row):
    /// the CUDA-core `_nvfp4` kernels (`moe_fp4.cu`), or the 64-row tensor-core tiles'
    /// `_nvfp4` build (`moe_mma_fp4.cu`). Rows of a multiple of 32 values (the upload widens
    /// others).
    Nvfp4,
    /// MXFP4 (gpt-oss's experts), kept packed (E2M1 pairs, an E8M0 scale per 32 values): as
    /// [`ExpertType::Nvfp4`] with the `_mxfp4` kernels.
    Mxfp4,
    /// The float32 path: always the CUDA-core `_fp32` kernels.
    F32,
}

impl ExpertType {
    /// Whether the experts are FP4 (two values a byte).
    pub fn is_fp4(self) -> bool {
        matches!(self, ExpertType::Nvfp4 | ExpertType::Mxfp4)
    }
}

/// A `fused_moe` step's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeShape {
    /// Tokens.
    pub t: usize,
    /// Hidden size.
    pub h: usize,
    /// Experts.
    pub e: usize,
    /// Intermediate size of an expert.
    pub i: usize,
    pub top_k: usize,
    /// The router's logits are bf16 (else f32).
    pub logits_bf16: bool,
    /// The router's product is fused into the routing (`routed_moe` at one token, see
    /// [`fuses_router`]).
    pub router: bool,
}

impl MoeShape {
    pub fn pairs(&self) -> usize {
        self.t * self.top_k
    }
}

/// Stages 1-2: routing, grouping by expert and the list of active experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `moe_router_plan_one`: the router's logits and the one-token plan in one launch.
    RouterPlanOne,
    /// `moe_plan_one_{bf16,f32}`: one token's plan by one warp.
    PlanOne,
    /// `moe_plan_{bf16,f32}`: up to [`PLAN_ROUTE_TOKENS`] tokens and [`PLAN_MAX_PAIRS`]
    /// pairs' plan by one block.
    Plan,
    /// `moe_route_*`, then `moe_group_plan` (one block): more tokens, up to
    /// [`PLAN_MAX_PAIRS`] pairs.
    RouteGroupPlan,
    /// `moe_route_*`, `moe_group`, `moe_active`.
    RouteGroupActive,
}

/// The tensor-core kernels' build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MmaBuild {
    Bf16,
    /// FP8 weights widened to bf16.
    Fp8,
    /// FP8 weights, activations quantized to e4m3.
    Fp8Act,
    /// NVFP4 stacks read packed, each weight widened to bf16 in the B-tile load
    /// (`moe_mma_fp4.cu`).
    Nvfp4,
    /// MXFP4 stacks (gpt-oss's experts), as [`MmaBuild::Nvfp4`].
    Mxfp4,
}

impl MmaBuild {
    pub fn name(self) -> &'static str {
        match self {
            MmaBuild::Bf16 => "bf16",
            MmaBuild::Fp8 => "fp8",
            MmaBuild::Fp8Act => "fp8act",
            MmaBuild::Nvfp4 => "nvfp4",
            MmaBuild::Mxfp4 => "mxfp4",
        }
    }
}

/// The CUDA-core kernels' build (their names' suffix): the experts' type, with 16-byte loads
/// (`_vec`: rows of a multiple of 16 bytes) or without.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoreBuild {
    /// `bf16_vec`.
    Bf16Vec,
    /// `bf16`.
    Bf16,
    /// `fp8_vec`.
    Fp8Vec,
    /// `fp8`.
    Fp8,
    /// `fp32`: the float32 path.
    Fp32,
    /// `nvfp4`: rows of whole 32-value chunks (16-byte loads, and the one-token `_dec`
    /// kernels).
    Nvfp4,
    /// `mxfp4`: as `nvfp4`.
    Mxfp4,
}

impl CoreBuild {
    /// Whether the build loads 16 bytes at a time (the `_vec` kernels).
    pub fn is_vec(self) -> bool {
        matches!(self, CoreBuild::Bf16Vec | CoreBuild::Fp8Vec)
    }

    /// Whether the build has the one-token kernels (`moe_gate_up_dec_*`,
    /// `moe_down_combine_dec{cols}_*`): the 16-byte builds and the FP4 ones.
    pub fn has_dec(self) -> bool {
        self.is_vec() || matches!(self, CoreBuild::Nvfp4 | CoreBuild::Mxfp4)
    }
}

/// The CUDA-core gate|up kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateUp {
    /// `moe_gate_up_{build}`.
    Plain,
    /// `moe_gate_up_dec_{build}`: a lane's weight loads in flight at once (one token).
    Decode,
    /// FP4 experts at one-token steps with `moe.fp4_gate_up = split`: the split tensor-core
    /// kernels' gate|up (`moe_gate_up[_clamped]_{nvfp4,mxfp4}_small`, k over a block's warps)
    /// beside the `_dec` down + weighted sum.
    Split,
}

/// The CUDA-core down projection and weighted sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Down {
    /// One launch: `moe_down_combine_{build}` (`cols` 0) or
    /// `moe_down_combine_dec{cols}_{build}`.
    Combined { cols: usize },
    /// `moe_down_{build}`, then `moe_combine`.
    Separate,
}

/// The small-step tensor-core kernels' build (`moe_*_small*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmallBuild {
    /// `moe_*_fp8_small`: one B tile of pairs, k split over the block's warps.
    Split,
    /// `moe_*_{w}_small_any`: chunks of 16 pairs, a warp over the whole k.
    Any,
}

/// Stages 3-5: the experts and the weighted sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Experts {
    /// The small-step kernels of `build`, then `moe_combine`: decode-sized steps on tensor
    /// cores.
    SmallMma { build: SmallBuild },
    /// `moe_tiles`, `moe_gate_up_mma_*`, `moe_down_mma_*`, `moe_combine`: 64-row tiles (FP4
    /// stacks read packed by the `nvfp4` and `mxfp4` builds).
    Mma { build: MmaBuild },
    /// The CUDA-core kernels of `build`.
    CudaCores {
        build: CoreBuild,
        gate_up: GateUp,
        down: Down,
    },
}

/// The kernels of one `fused_moe` step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoePlan {
    pub route: Route,
    pub experts: Experts,
}

/// Whether `routed_moe` hands the router's product to the routing launch
/// (`moe_router_plan_one`): one token, a bf16 router of at most
/// [`ROUTER_PLAN_MAX_EXPERTS`] experts over a hidden size of a multiple of 8, experts that are
/// not f32, and the small-step paths on.
pub fn fuses_router(
    t: usize,
    (experts, hidden): (usize, usize),
    router_bf16: bool,
    w: ExpertType,
    tuning: &MoeTuning,
) -> bool {
    tuning.small_paths
        && t == 1
        && router_bf16
        && w != ExpertType::F32
        && experts <= ROUTER_PLAN_MAX_EXPERTS
        && hidden.is_multiple_of(8)
}

/// The FP8 tensor-core build: e4m3 activations when asked and the GPU has e4m3 mma (8.9+),
/// else bf16 activations.
pub fn fp8_build(cc: (i32, i32), tuning: &MoeTuning) -> MmaBuild {
    if tuning.fp8_activations && cc >= FP8_MMA_MIN_CC {
        MmaBuild::Fp8Act
    } else {
        MmaBuild::Fp8
    }
}

impl MoePlan {
    /// The kernels for a step of `shape` with `w` experts on a GPU of compute capability `cc`.
    pub fn choose(shape: MoeShape, w: ExpertType, cc: (i32, i32), tuning: &MoeTuning) -> Self {
        let MoeShape { t, h, i, .. } = shape;
        let pairs = shape.pairs();
        let small = tuning.small_paths;
        let route = if shape.router {
            Route::RouterPlanOne
        } else if small && t == 1 {
            Route::PlanOne
        } else if small && pairs <= PLAN_MAX_PAIRS && t <= PLAN_ROUTE_TOKENS {
            Route::Plan
        } else if small && pairs <= PLAN_MAX_PAIRS {
            Route::RouteGroupPlan
        } else {
            Route::RouteGroupActive
        };
        // FP4 experts' decode steps on the CUDA cores' `_dec` kernels ([`decode_tokens`]),
        // unless the setting asks for tensor cores.
        let fp4_dec =
            small && w.is_fp4() && tuning.gemm == MoeGemm::Auto && t <= decode_tokens(tuning);
        let experts = if small && small_mma(shape, w, cc, tuning) {
            Experts::SmallMma {
                build: match w {
                    ExpertType::Fp8 if t <= SMALL_MMA_SPLIT_TOKENS => SmallBuild::Split,
                    ExpertType::Nvfp4 | ExpertType::Mxfp4
                        if t <= SMALL_MMA_FP4_SPLIT_TOKENS && i >= FP4_SPLIT_MIN_WIDTH =>
                    {
                        SmallBuild::Split
                    }
                    _ => SmallBuild::Any,
                },
            }
        } else if !fp4_dec && mma(shape, w, cc, tuning) {
            Experts::Mma {
                build: match w {
                    ExpertType::Fp8 => fp8_build(cc, tuning),
                    ExpertType::Nvfp4 => MmaBuild::Nvfp4,
                    ExpertType::Mxfp4 => MmaBuild::Mxfp4,
                    _ => MmaBuild::Bf16,
                },
            }
        } else {
            let build = match w {
                ExpertType::Bf16 if h.is_multiple_of(8) && i.is_multiple_of(8) => {
                    CoreBuild::Bf16Vec
                }
                ExpertType::Bf16 => CoreBuild::Bf16,
                ExpertType::Fp8 if h.is_multiple_of(16) && i.is_multiple_of(16) => {
                    CoreBuild::Fp8Vec
                }
                ExpertType::Fp8 => CoreBuild::Fp8,
                ExpertType::F32 => CoreBuild::Fp32,
                ExpertType::Nvfp4 => CoreBuild::Nvfp4,
                ExpertType::Mxfp4 => CoreBuild::Mxfp4,
            };
            let dec = build.has_dec();
            // One-token steps: the kernel that holds a lane's weight loads in flight at once.
            // On the H200 (30B-A3B, graph steps) it is 3.5% (bf16) and 4.4% (FP8) faster at
            // batch 1; at batch 8 moe_gate_up is 9% faster with bf16 experts (its 8 x rows a
            // warp make fewer, fuller blocks) and level with FP8 ones.
            let gate_up = if tuning.decode_gate_up && small && t <= decode_tokens(tuning) && dec {
                // The split kernels: at most 8 pairs an expert (a step of at most 8 tokens),
                // widths multiples of 64, mma.sync.
                let split = tuning.fp4_gate_up_split
                    && w.is_fp4()
                    && t <= SMALL_MMA_FP4_SPLIT_TOKENS
                    && i >= FP4_SPLIT_MIN_WIDTH
                    && h.is_multiple_of(64)
                    && i.is_multiple_of(64)
                    && cc >= MMA_MIN_CC;
                if split { GateUp::Split } else { GateUp::Decode }
            } else {
                GateUp::Plain
            };
            let down = if small && t <= FUSED_DOWN_TOKENS {
                // Columns a block of the decode kernel: by default 1 with FP8 and FP4 experts
                // and 2 with bf16 ones at one token, 0 at more tokens (H200, 30B-A3B: the FP8
                // step 1.3% faster, bf16 0.6-1%; bf16 at batch 8 slower with any).
                let cols = match tuning.down_cols {
                    None if t <= decode_tokens(tuning) && w != ExpertType::Bf16 => 1,
                    None if t == 1 => 2,
                    None => 0,
                    Some(cols) => cols,
                };
                let cols = if matches!(cols, 1 | 2 | 4) && dec && h.is_multiple_of(cols) {
                    cols
                } else {
                    0
                };
                Down::Combined { cols }
            } else {
                Down::Separate
            };
            Experts::CudaCores {
                build,
                gate_up,
                down,
            }
        };
        MoePlan { route, experts }
    }

    /// [`Self::choose`] kept on the CUDA-core kernels with the plain gate|up
    /// ([`GateUp::Plain`]): for experts whose activation only `moe_gate_up_impl` builds
    /// (Nemotron-H's un-gated relu² experts, `cuda/nemotron_moe.rs`: no tensor-core or
    /// one-token `_dec` build yet). The routing and the down + weighted sum are `choose`'s.
    pub fn choose_cuda_cores(
        shape: MoeShape,
        w: ExpertType,
        cc: (i32, i32),
        tuning: &MoeTuning,
    ) -> Self {
        let cores = MoeTuning {
            gemm: MoeGemm::CudaCores,
            decode_gate_up: false,
            ..*tuning
        };
        Self::choose(shape, w, cc, &cores)
    }
}

/// Most tokens a step takes the one-token kernels with (`moe.decode_tokens`; auto: one):
/// `moe_gate_up_dec_*`, the one-column `_dec` down + sum with FP8 and FP4 experts, and FP4 experts
/// on the CUDA cores in place of the small-step tensor-core kernels.
fn decode_tokens(tuning: &MoeTuning) -> usize {
    tuning.decode_tokens.unwrap_or(1)
}

/// Whether the step takes the small-step tensor-core kernels: FP8 experts from 2 tokens, FP4
/// ones (packed: `moe_fp4_small.cu`'s split build up to [`SMALL_MMA_FP4_SPLIT_TOKENS`] where
/// they are [`FP4_SPLIT_MIN_WIDTH`] wide, `moe_mma_fp4.cu`'s `_small_any` otherwise) past
/// [`decode_tokens`] (the steps below take the CUDA cores' `_dec` kernels) while they average at
/// most [`SMALL_MMA_FP4_MAX_PAIRS_PER_EXPERT`] pairs, bf16 ones from
/// [`SMALL_MMA_BF16_MIN_TOKENS`], up to [`SMALL_MMA_MAX_TOKENS`]; both k dimensions
/// multiples of 64 (prelude's fp8_mma_tiles), the GPU 8.0+, the kernels on, experts not kept on
/// the CUDA cores and activations not asked as e4m3 (the 64-row kernels' `fp8act` build).
fn small_mma(s: MoeShape, w: ExpertType, cc: (i32, i32), tuning: &MoeTuning) -> bool {
    let first = match w {
        ExpertType::Fp8 => 2,
        ExpertType::Bf16 => SMALL_MMA_BF16_MIN_TOKENS,
        ExpertType::Nvfp4 | ExpertType::Mxfp4 => {
            if s.pairs() > SMALL_MMA_FP4_MAX_PAIRS_PER_EXPERT * s.e {
                return false;
            }
            match tuning.gemm {
                MoeGemm::Auto => decode_tokens(tuning) + 1,
                _ => 2,
            }
        }
        ExpertType::F32 => return false,
    };
    (first..=SMALL_MMA_MAX_TOKENS).contains(&s.t)
        && s.h.is_multiple_of(64)
        && s.i.is_multiple_of(64)
        && cc >= MMA_MIN_CC
        && tuning.small_mma
        && !tuning.fp8_activations
        && tuning.gemm != MoeGemm::CudaCores
}

/// Whether the step runs its experts on the 64-row tensor-core tiles: the setting, the GPU
/// (mma.sync needs 8.0) and rows the kernels' loads take (bf16 rows a multiple of 8 elements
/// and FP8 of 16: 16-byte loads; FP4 of 32: whole 32-wide k slices of 16 packed bytes); f32
/// experts (the float32 path) stay on the CUDA cores. FP4 experts from
/// [`FP4_MMA_MIN_HALF_PAIRS_PER_EXPERT`].
fn mma(s: MoeShape, w: ExpertType, cc: (i32, i32), tuning: &MoeTuning) -> bool {
    let align = match w {
        ExpertType::Fp8 => 16,
        ExpertType::Nvfp4 | ExpertType::Mxfp4 => 32,
        _ => 8,
    };
    let able = w != ExpertType::F32
        && cc >= MMA_MIN_CC
        && s.h.is_multiple_of(align)
        && s.i.is_multiple_of(align);
    able && match tuning.gemm {
        MoeGemm::Auto => {
            let (bf16, fp8) = MMA_MIN_PAIRS_PER_EXPERT;
            // Halves of a pair an expert.
            let half_pairs = match w {
                ExpertType::Fp8 => 2 * fp8,
                _ if w.is_fp4() => FP4_MMA_MIN_HALF_PAIRS_PER_EXPERT,
                _ => 2 * bf16,
            };
            2 * s.pairs() >= half_pairs * s.e
        }
        MoeGemm::TensorCores => true,
        MoeGemm::CudaCores => false,
    }
}

#[cfg(test)]
#[path = "moe_plan_tests.rs"]
mod tests;
