//! The plan per shape, at Qwen3-30B-A3B's MoE shape (hidden 2048, 128 experts of 768, top 8)
//! on the H200 (9.0) unless said otherwise: what `fused_moe` launched before the plan existed.

use super::*;
use crate::tuning::Tuning;

const H200: (i32, i32) = (9, 0);

fn shape(t: usize) -> MoeShape {
    MoeShape {
        t,
        h: 2048,
        e: 128,
        i: 768,
        top_k: 8,
        logits_bf16: false,
        router: false,
    }
}

fn plan(t: usize, w: ExpertType) -> MoePlan {
    MoePlan::choose(shape(t), w, H200, &Tuning::default().moe)
}

fn cores(build: CoreBuild, gate_up: GateUp, down: Down) -> Experts {
    Experts::CudaCores {
        build,
        gate_up,
        down,
    }
}

#[test]
fn the_gpu_limits_are_the_kernels() {
    assert_eq!(
        MMA_MIN_CC,
        metrale_kernels::Module::MoeMma.min_compute_capability()
    );
}

#[test]
fn one_token_fp8_and_bf16() {
    let p = plan(1, ExpertType::Fp8);
    assert_eq!(p.route, Route::PlanOne);
    let dec1 = Down::Combined { cols: 1 };
    assert_eq!(p.experts, cores(CoreBuild::Fp8Vec, GateUp::Decode, dec1));
    let p = plan(1, ExpertType::Bf16);
    let dec2 = Down::Combined { cols: 2 };
    assert_eq!(p.experts, cores(CoreBuild::Bf16Vec, GateUp::Decode, dec2));
    let mut s = shape(1);
    s.router = true;
    let p = MoePlan::choose(s, ExpertType::Fp8, H200, &Tuning::default().moe);
    assert_eq!(p.route, Route::RouterPlanOne);
}

#[test]
fn decode_batches_take_the_small_tensor_core_kernels() {
    // FP8: split build up to 6 tokens, _any to 256; then the 64-row tiles.
    assert_eq!(
        plan(2, ExpertType::Fp8).experts,
        Experts::SmallMma {
            build: SmallBuild::Split
        }
    );
    assert_eq!(
        plan(6, ExpertType::Fp8).experts,
        Experts::SmallMma {
            build: SmallBuild::Split
        }
    );
    assert_eq!(
        plan(7, ExpertType::Fp8).experts,
        Experts::SmallMma {
            build: SmallBuild::Any
        }
    );
    assert_eq!(
        plan(256, ExpertType::Fp8).experts,
        Experts::SmallMma {
            build: SmallBuild::Any
        }
    );
    let fp8 = Experts::Mma {
        build: MmaBuild::Fp8,
    };
    assert_eq!(plan(257, ExpertType::Fp8).experts, fp8);
    // bf16: the CUDA cores below 9 tokens (combined down up to 8), then _any.
    let p = plan(8, ExpertType::Bf16);
    assert_eq!(p.route, Route::Plan);
    let combined = Down::Combined { cols: 0 };
    assert_eq!(
        p.experts,
        cores(CoreBuild::Bf16Vec, GateUp::Plain, combined)
    );
    assert_eq!(
        plan(9, ExpertType::Bf16).experts,
        Experts::SmallMma {
            build: SmallBuild::Any
        }
    );
}

#[test]
fn large_steps_route_in_three_launches_and_tile() {
    // Up to 32 tokens route and group in one block; to 128 tokens · 8 = 1024 pairs they route
    // in their own launch and group in one block; 129 take three launches.
    assert_eq!(plan(32, ExpertType::Fp8).route, Route::Plan);
    assert_eq!(plan(33, ExpertType::Fp8).route, Route::RouteGroupPlan);
    assert_eq!(plan(128, ExpertType::Fp8).route, Route::RouteGroupPlan);
    assert_eq!(plan(129, ExpertType::Fp8).route, Route::RouteGroupActive);
    // bf16 from 4 pairs an expert: 64 tokens = 512 pairs = 4 · 128.
    let bf16 = Experts::Mma {
        build: MmaBuild::Bf16,
    };
    assert_eq!(plan(512, ExpertType::Bf16).experts, bf16);
    let mut t = Tuning::default().moe;
    t.small_mma = false;
    let p = MoePlan::choose(shape(63), ExpertType::Bf16, H200, &t);
    assert_eq!(
        p.experts,
        cores(CoreBuild::Bf16Vec, GateUp::Plain, Down::Separate)
    );
    assert_eq!(
        MoePlan::choose(shape(64), ExpertType::Bf16, H200, &t).experts,
        bf16
    );
}

#[test]
fn float32_experts_stay_on_the_cuda_cores() {
    for t in [1, 2, 9, 300] {
        let p = plan(t, ExpertType::F32);
        assert!(
            matches!(
                p.experts,
                Experts::CudaCores {
                    build: CoreBuild::Fp32,
                    ..
                }
            ),
            "{t}: {p:?}"
        );
    }
    let p = plan(1, ExpertType::F32);
    assert_eq!(
        p.experts,
        cores(CoreBuild::Fp32, GateUp::Plain, Down::Combined { cols: 0 })
    );
}

#[test]
fn older_gpus_and_odd_shapes_take_the_cuda_cores() {
    let ampere_less = (7, 5);
    let p = MoePlan::choose(
        shape(4),
        ExpertType::Fp8,
        ampere_less,
        &Tuning::default().moe,
    );
    assert_eq!(
        p.experts,
        cores(CoreBuild::Fp8Vec, GateUp::Plain, Down::Combined { cols: 0 })
    );
    let mut s = shape(1);
    s.h = 2040; // not a multiple of 16: the scalar kernels, no decode columns
    let p = MoePlan::choose(s, ExpertType::Fp8, H200, &Tuning::default().moe);
    assert_eq!(
        p.experts,
        cores(CoreBuild::Fp8, GateUp::Plain, Down::Combined { cols: 0 })
    );
}

#[test]
fn settings_override_the_defaults() {
    let d = Tuning::default().moe;
    let mut t = d;
    t.small_paths = false;
    let p = MoePlan::choose(shape(1), ExpertType::Fp8, H200, &t);
    assert_eq!(p.route, Route::RouteGroupActive);
    assert_eq!(
        p.experts,
        cores(CoreBuild::Fp8Vec, GateUp::Plain, Down::Separate)
    );
    let mut t = d;
    t.gemm = MoeGemm::TensorCores;
    let p = MoePlan::choose(shape(1), ExpertType::Fp8, H200, &t);
    assert_eq!(
        p.experts,
        Experts::Mma {
            build: MmaBuild::Fp8
        }
    );
    let mut t = d;
    t.gemm = MoeGemm::CudaCores;
    let p = MoePlan::choose(shape(2), ExpertType::Fp8, H200, &t);
    assert_eq!(
        p.experts,
        cores(CoreBuild::Fp8Vec, GateUp::Plain, Down::Combined { cols: 0 })
    );
    let mut t = d;
    t.fp8_activations = true;
    let p = MoePlan::choose(shape(300), ExpertType::Fp8, H200, &t);
    assert_eq!(
        p.experts,
        Experts::Mma {
            build: MmaBuild::Fp8Act
        }
    );
    let p = MoePlan::choose(shape(300), ExpertType::Fp8, (8, 6), &t);
    assert_eq!(
        p.experts,
        Experts::Mma {
            build: MmaBuild::Fp8
        }
    );
    let mut t = d;
    t.down_cols = Some(4);
    t.decode_gate_up = false;
    let p = MoePlan::choose(shape(1), ExpertType::Bf16, H200, &t);
    assert_eq!(
        p.experts,
        cores(
            CoreBuild::Bf16Vec,
            GateUp::Plain,
            Down::Combined { cols: 4 }
        )
    );
}

#[test]
fn the_router_fuses_at_one_token_with_a_bf16_router() {
    let d = Tuning::default().moe;
    assert!(fuses_router(1, (128, 2048), true, ExpertType::Fp8, &d));
    assert!(!fuses_router(2, (128, 2048), true, ExpertType::Fp8, &d));
    assert!(!fuses_router(1, (128, 2048), false, ExpertType::Fp8, &d));
    assert!(!fuses_router(1, (128, 2048), true, ExpertType::F32, &d));
    assert!(!fuses_router(1, (257, 2048), true, ExpertType::Bf16, &d));
    assert!(!fuses_router(1, (128, 2044), true, ExpertType::Bf16, &d));
    let mut t = d;
    t.small_paths = false;
    assert!(!fuses_router(1, (128, 2048), true, ExpertType::Fp8, &t));
}

/// FP4 experts (NVFP4 kept packed; MXFP4's kernels): the small-step `_any` kernels on the
/// packed stacks at decode sizes from two tokens (these experts are 512 wide), the 64-row
/// tiles' FP4 builds past them; with the small-step
/// kernels off, the CUDA-core FP4 kernels (the one-token `_dec` ones at one token) below half a pair an
/// expert (`FP4_MMA_MIN_HALF_PAIRS_PER_EXPERT`) and the tiles from there; the CUDA cores where
/// the GPU or the setting rules the tensor cores out. Qwen3.6-35B-A3B's
/// shape: 256 experts of 512, top 8.
#[test]
fn fp4_experts_take_their_kernels_on_either_cores() {
    let s = |t| MoeShape {
        t,
        h: 2048,
        e: 256,
        i: 512,
        top_k: 8,
        logits_bf16: false,
        router: false,
    };
    let d = Tuning::default().moe;
    for w in [ExpertType::Nvfp4, ExpertType::Mxfp4] {
        let (build, tiles) = if w == ExpertType::Nvfp4 {
            (CoreBuild::Nvfp4, MmaBuild::Nvfp4)
        } else {
            (CoreBuild::Mxfp4, MmaBuild::Mxfp4)
        };
        let tiles = Experts::Mma { build: tiles };
        let small = Experts::SmallMma {
            build: SmallBuild::Any,
        };
        assert!(w.is_fp4() && !build.is_vec() && build.has_dec());
        // One token: the packed CUDA-core kernels' one-token builds (`_dec`, one down column a
        // block).
        let p = MoePlan::choose(s(1), w, H200, &d);
        assert_eq!(p.route, Route::PlanOne);
        assert_eq!(
            p.experts,
            cores(build, GateUp::Decode, Down::Combined { cols: 1 })
        );
        // Decode batches: the small-step `_any` kernels on the packed stacks, up to
        // SMALL_MMA_MAX_TOKENS (8 pairs an expert here); the tiles past them.
        for t in [2, 8, 15, 16, 128, SMALL_MMA_MAX_TOKENS] {
            assert_eq!(MoePlan::choose(s(t), w, H200, &d).experts, small, "{t}");
        }
        for t in [SMALL_MMA_MAX_TOKENS + 1, 2047, 2048] {
            assert_eq!(MoePlan::choose(s(t), w, H200, &d).experts, tiles, "{t}");
        }
        // With the small-step kernels off: the packed CUDA-core kernels below half a pair an
        // expert (16 tokens · 8 = 128 pairs for 256 experts), the tiles from there.
        let mut no_small = d;
        no_small.small_mma = false;
        for t in [1, 2, 8, 15] {
            let p = MoePlan::choose(s(t), w, H200, &no_small);
            let (gate_up, down) = match t {
                1 => (GateUp::Decode, Down::Combined { cols: 1 }),
                _ if t <= FUSED_DOWN_TOKENS => (GateUp::Plain, Down::Combined { cols: 0 }),
                _ => (GateUp::Plain, Down::Separate),
            };
            assert_eq!(p.experts, cores(build, gate_up, down), "{t}");
        }
        for t in [16, 127, 128] {
            assert_eq!(
                MoePlan::choose(s(t), w, H200, &no_small).experts,
                tiles,
                "{t}"
            );
        }
        // Pre-Ampere GPUs and the CUDA-core setting keep the packed kernels at every size.
        let p = MoePlan::choose(s(2048), w, (7, 5), &d);
        assert_eq!(p.experts, cores(build, GateUp::Plain, Down::Separate));
        let mut t = d;
        t.gemm = MoeGemm::CudaCores;
        let p = MoePlan::choose(s(2048), w, H200, &t);
        assert_eq!(p.experts, cores(build, GateUp::Plain, Down::Separate));
        // The tensor-core setting takes the small-step kernels from two tokens, the tiles at
        // one and with those off.
        let mut t = d;
        t.gemm = MoeGemm::TensorCores;
        assert_eq!(MoePlan::choose(s(2), w, H200, &t).experts, small);
        assert_eq!(MoePlan::choose(s(1), w, H200, &t).experts, tiles);
        t.small_mma = false;
        assert_eq!(MoePlan::choose(s(2), w, H200, &t).experts, tiles);
        // The plan's own guard: widths not of whole 32-value slices never take the FP4 tiles
        // (moe.rs widens such stacks to bf16 before planning).
        let mut odd = s(2048);
        odd.i = 528;
        let p = MoePlan::choose(odd, w, H200, &d);
        assert_eq!(p.experts, cores(build, GateUp::Plain, Down::Separate));
        // The decode-column setting applies (the FP4 `_dec` down kernels at 1, 2, 4), and the
        // one-token gate|up setting.
        let mut t = no_small;
        t.down_cols = Some(2);
        t.decode_gate_up = false;
        let p = MoePlan::choose(s(1), w, H200, &t);
        assert_eq!(
            p.experts,
            cores(build, GateUp::Plain, Down::Combined { cols: 2 })
        );
        // `moe.decode_tokens`: steps of up to that many tokens on the CUDA cores' `_dec`
        // kernels (one down column a block), the small-step kernels past it.
        let mut t = d;
        t.decode_tokens = Some(8);
        for n in [1, 2, 8] {
            let p = MoePlan::choose(s(n), w, H200, &t);
            let want = cores(build, GateUp::Decode, Down::Combined { cols: 1 });
            assert_eq!(p.experts, want, "{n}");
        }
        assert_eq!(MoePlan::choose(s(9), w, H200, &t).experts, small);
        // The router still fuses at one token (routing only).
        assert!(fuses_router(1, (256, 2048), true, w, &d));
    }
}

/// gpt-oss's clamped experts (`fused_moe_clamped`) take `fused_moe`'s plan: at 20b's shape
/// (hidden = experts' width = 2880, a multiple of 64; top-4 of 32) and 120b's (of 128), bf16
/// experts on the CUDA cores up to 8 tokens, the small-step `_any` kernels from 9 to 256 (the
/// 126-sequence decode step of issue 39 among them), the 64-row tiles past that; MXFP4 stacks
/// packed on the CUDA cores' one-token `_dec` kernels up to 4 tokens and the small-step `_any`
/// kernels from five up to 256 tokens and 16 pairs an expert, the tiles'
/// `mxfp4` build (the packed stacks) past them; f32 experts and pre-Ampere GPUs on the CUDA cores at every size.
#[test]
fn gpt_oss_clamped_experts_by_step() {
    let s = |t, e| MoeShape {
        t,
        h: 2880,
        e,
        i: 2880,
        top_k: 4,
        logits_bf16: false,
        router: false,
    };
    let d = Tuning::default().moe;
    let experts = |t, e, w| MoePlan::choose(s(t, e), w, H200, &d).experts;
    let on_cores = |x: Experts, want: CoreBuild| matches!(x, Experts::CudaCores { build, .. } if build == want);
    for e in [32, 128] {
        for t in [1, 2, 8] {
            let x = experts(t, e, ExpertType::Bf16);
            assert!(on_cores(x, CoreBuild::Bf16Vec), "bf16 T {t} E {e}: {x:?}");
        }
        for t in [9, 126, 128, 256] {
            let any = Experts::SmallMma {
                build: SmallBuild::Any,
            };
            assert_eq!(experts(t, e, ExpertType::Bf16), any, "bf16 T {t} E {e}");
        }
        let tiles = Experts::Mma {
            build: MmaBuild::Bf16,
        };
        for t in [257, 2048] {
            assert_eq!(experts(t, e, ExpertType::Bf16), tiles, "bf16 T {t} E {e}");
        }
        // MXFP4: at one token the split gate|up beside the `_dec` down + sum (`moe.fp4_gate_up`
        // split, the default), then (these experts are 2880 wide) the split small-step kernels
        // up to SMALL_MMA_FP4_SPLIT_TOKENS, then the small-step `_any`
        // kernels on the packed stacks while they average at most 16 pairs an expert (4e tokens
        // at top-4) and up to 256 tokens, the tiles' mxfp4 build past that (20b's 256-token
        // step among them).
        let one = Experts::CudaCores {
            build: CoreBuild::Mxfp4,
            gate_up: GateUp::Split,
            down: Down::Combined { cols: 1 },
        };
        assert_eq!(experts(1, e, ExpertType::Mxfp4), one, "mxfp4 T 1 E {e}");
        let split = Experts::SmallMma {
            build: SmallBuild::Split,
        };
        for t in 2..=SMALL_MMA_FP4_SPLIT_TOKENS {
            assert_eq!(experts(t, e, ExpertType::Mxfp4), split, "mxfp4 T {t} E {e}");
        }
        let any = Experts::SmallMma {
            build: SmallBuild::Any,
        };
        for t in [
            SMALL_MMA_FP4_SPLIT_TOKENS + 1,
            (e / 8).max(SMALL_MMA_FP4_SPLIT_TOKENS + 1),
            126,
            (4 * e).min(256),
        ] {
            assert_eq!(experts(t, e, ExpertType::Mxfp4), any, "mxfp4 T {t} E {e}");
        }
        let mx_tiles = Experts::Mma {
            build: MmaBuild::Mxfp4,
        };
        for t in [(4 * e + 1).min(257), 257, 16 * e, 4096] {
            let x = experts(t, e, ExpertType::Mxfp4);
            assert_eq!(x, mx_tiles, "mxfp4 T {t} E {e}");
        }
        let x = experts(2048, e, ExpertType::F32);
        assert!(on_cores(x, CoreBuild::Fp32), "f32 E {e}: {x:?}");
        for w in [ExpertType::Bf16, ExpertType::Mxfp4] {
            let x = MoePlan::choose(s(2048, e), w, (7, 5), &d).experts;
            assert!(matches!(x, Experts::CudaCores { .. }), "{w:?} sm_75: {x:?}");
        }
    }
    // The tensor-core setting (cuda_check's forced cases): the 64-row tiles past 256 tokens
    // whatever the count an expert, the small-step kernels from 9.
    let mut t = d;
    t.gemm = MoeGemm::TensorCores;
    let forced = |n| MoePlan::choose(s(n, 32), ExpertType::Bf16, H200, &t).experts;
    assert_eq!(
        forced(300),
        Experts::Mma {
            build: MmaBuild::Bf16
        }
    );
    assert_eq!(
        forced(9),
        Experts::SmallMma {
            build: SmallBuild::Any
        }
    );
}

/// Nemotron-H's relu² experts stay on the CUDA cores with the plain gate|up at every size and
/// expert type, and keep `choose`'s routing and down + weighted sum (Nemotron 3 Nano's shape:
/// hidden 2688, 128 experts of 1856, top-6).
#[test]
fn relu2_experts_stay_on_the_cuda_cores() {
    let tuning = Tuning::default().moe;
    for t in [1, 2, 8, 9, 40, 300, 2048] {
        let s = MoeShape {
            t,
            h: 2688,
            e: 128,
            i: 1856,
            top_k: 6,
            logits_bf16: false,
            router: false,
        };
        for w in [
            ExpertType::Bf16,
            ExpertType::Fp8,
            ExpertType::F32,
            ExpertType::Nvfp4,
        ] {
            let all = MoePlan::choose(s, w, H200, &tuning);
            let cores = MoePlan::choose_cuda_cores(s, w, H200, &tuning);
            assert_eq!(cores.route, all.route, "t {t} {w:?}");
            let Experts::CudaCores { gate_up, down, .. } = cores.experts else {
                panic!("t {t} {w:?}: {:?}", cores.experts);
            };
            assert_eq!(gate_up, GateUp::Plain, "t {t} {w:?}");
            let fused = matches!(down, Down::Combined { .. });
            assert_eq!(fused, t <= FUSED_DOWN_TOKENS, "t {t} {w:?}");
        }
    }
}

#[test]
fn fp4_one_token_gate_up_splits_on_wide_experts() {
    let s = |t, h, i, top_k| MoeShape {
        t,
        h,
        e: 32,
        i,
        top_k,
        logits_bf16: false,
        router: true,
    };
    let mut split = Tuning::default().moe;
    assert!(split.fp4_gate_up_split, "split is the default");
    let experts = |shape, w, cc, tu: &MoeTuning| MoePlan::choose(shape, w, cc, tu).experts;
    let gpt_oss = s(1, 2880, 2880, 4);
    // gpt-oss's 2880-wide MXFP4 experts: the split gate|up beside the `_dec` down + sum.
    let want = cores(CoreBuild::Mxfp4, GateUp::Split, Down::Combined { cols: 1 });
    assert_eq!(experts(gpt_oss, ExpertType::Mxfp4, H200, &split), want);
    let nv = experts(gpt_oss, ExpertType::Nvfp4, H200, &split);
    assert_eq!(
        nv,
        cores(CoreBuild::Nvfp4, GateUp::Split, Down::Combined { cols: 1 })
    );
    // With `moe.fp4_gate_up = dec`, on narrow experts (Qwen3.6-35B-A3B's 512), FP8 ones and
    // below sm_80: `_dec`.
    let dec = cores(CoreBuild::Mxfp4, GateUp::Decode, Down::Combined { cols: 1 });
    let mut d = Tuning::default().moe;
    d.fp4_gate_up_split = false;
    assert_eq!(experts(gpt_oss, ExpertType::Mxfp4, H200, &d), dec);
    let narrow = experts(s(1, 2048, 512, 8), ExpertType::Nvfp4, H200, &split);
    assert_eq!(
        narrow,
        cores(CoreBuild::Nvfp4, GateUp::Decode, Down::Combined { cols: 1 })
    );
    let fp8 = experts(gpt_oss, ExpertType::Fp8, H200, &split);
    assert_eq!(
        fp8,
        cores(
            CoreBuild::Fp8Vec,
            GateUp::Decode,
            Down::Combined { cols: 1 }
        )
    );
    let old = experts(gpt_oss, ExpertType::Mxfp4, (7, 5), &split);
    assert!(
        matches!(
            old,
            Experts::CudaCores {
                gate_up: GateUp::Decode,
                ..
            }
        ),
        "{old:?}"
    );
    // With `moe.decode_tokens` 8, every step up to 8 tokens.
    split.decode_tokens = Some(8);
    let eight = experts(s(8, 2880, 2880, 4), ExpertType::Mxfp4, H200, &split);
    assert!(
        matches!(
            eight,
            Experts::CudaCores {
                gate_up: GateUp::Split,
                ..
            }
        ),
        "{eight:?}"
    );
}
