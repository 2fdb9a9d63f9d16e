//! CUDA kernel sources (`src/*.cu`, one op family a file) and the loader that compiles them with
//! NVRTC for the GPU it finds (`cuda` feature).
//!
//! Every file is compiled as the prelude (`src/prelude/*.cuh`, one header per concern) followed
//! by the file's text: the kernels include no
//! header, so NVRTC needs no CUDA toolkit headers on the machine (bf16 is handled as 16-bit
//! patterns). Compiled images are cached on disk (see [`cache`]), keyed by the program text, the
//! target architecture, the NVRTC and driver versions and the options.

pub mod cache;
#[cfg(feature = "cuda")]
mod loader;

#[cfg(feature = "cuda")]
pub use loader::{KernelError, Kernels, LoadRecord, Target, compile};

/// Device helpers pasted in front of every kernel file: the prelude's headers in the order NVRTC
/// needs (each uses only the ones before it).
pub const PRELUDE: &str = concat!(
    include_str!("prelude/types.cuh"),
    include_str!("prelude/reduce.cuh"),
    include_str!("prelude/loads.cuh"),
    include_str!("prelude/cp_async.cuh"),
    include_str!("prelude/pdl.cuh"),
    include_str!("prelude/rows.cuh"),
    include_str!("prelude/attention.cuh"),
    include_str!("prelude/fp8.cuh"),
    include_str!("prelude/fp4.cuh"),
    include_str!("prelude/random.cuh"),
    include_str!("prelude/mma.cuh"),
    include_str!("prelude/fp8_mma.cuh"),
    include_str!("prelude/moe_act.cuh"),
    include_str!("prelude/wgmma.cuh"),
    include_str!("prelude/barrier.cuh"),
);

/// One `.cu` file: a family of kernels compiled and loaded together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Module {
    Convert,
    Embedding,
    Norm,
    Rope,
    Attention,
    AttentionMma,
    AttentionFlash,
    Activation,
    Softmax,
    Gemv,
    Sample,
    Moe,
    MoeMma,
    Fp8,
    Hybrid,
    /// DeepSeek-V3's multi-head latent attention (`mla.cu`).
    Mla,
    /// The lab's probes and skeletons (`kernels/lab/`): `lab` feature only, never in `met`.
    #[cfg(feature = "lab")]
    Probe,
}

impl Module {
    /// The serving modules (what `met` compiles).
    pub const SERVING: [Module; 16] = [
        Module::Convert,
        Module::Embedding,
        Module::Norm,
        Module::Rope,
        Module::Attention,
        Module::AttentionMma,
        Module::AttentionFlash,
        Module::Activation,
        Module::Softmax,
        Module::Gemv,
        Module::Sample,
        Module::Moe,
        Module::MoeMma,
        Module::Fp8,
        Module::Hybrid,
        Module::Mla,
    ];

    /// Every module this build has: the serving ones, and the lab's under the `lab` feature.
    #[cfg(not(feature = "lab"))]
    pub const ALL: [Module; 16] = Module::SERVING;
    #[cfg(feature = "lab")]
    pub const ALL: [Module; 17] = {
        let mut all = [Module::Probe; 17];
        let mut i = 0;
        while i < Module::SERVING.len() {
            all[i] = Module::SERVING[i];
            i += 1;
        }
        all
    };

    pub fn name(self) -> &'static str {
        match self {
            Module::Convert => "convert",
            Module::Embedding => "embedding",
            Module::Norm => "norm",
            Module::Rope => "rope",
            Module::Attention => "attention",
            Module::AttentionMma => "attention_mma",
            Module::AttentionFlash => "attention_flash",
            Module::Activation => "activation",
            Module::Softmax => "softmax",
            Module::Gemv => "gemv",
            Module::Sample => "sample",
            Module::Moe => "moe",
            Module::MoeMma => "moe_mma",
            Module::Fp8 => "fp8",
            Module::Hybrid => "hybrid",
            Module::Mla => "mla",
            #[cfg(feature = "lab")]
            Module::Probe => "probe",
        }
    }

    /// The oldest GPU (compute capability) the file compiles for: attention_mma.cu's and
    /// moe_mma.cu's mma.sync on bf16 needs Ampere (moe_mma.cu's e4m3 kernels need 8.9 and trap
    /// below); the rest run anywhere NVRTC targets.
    pub fn min_compute_capability(self) -> (i32, i32) {
        match self {
            Module::AttentionMma | Module::AttentionFlash | Module::MoeMma => (8, 0),
            _ => (0, 0),
        }
    }

    /// The file's own text (without the prelude).
    pub fn source(self) -> &'static str {
        match self {
            Module::Convert => include_str!("convert.cu"),
            Module::Embedding => include_str!("embedding.cu"),
            Module::Norm => include_str!("norm.cu"),
            Module::Rope => include_str!("rope.cu"),
            Module::Attention => include_str!("attention.cu"),
            Module::AttentionMma => include_str!("attention_mma.cu"),
            Module::AttentionFlash => concat!(
                include_str!("attention_flash.cu"),
                include_str!("attention_flash_wg.cu")
            ),
            Module::Activation => include_str!("activation.cu"),
            Module::Softmax => include_str!("softmax.cu"),
            Module::Gemv => include_str!("gemv.cu"),
            Module::Sample => include_str!("sample.cu"),
            Module::Moe => concat!(
                include_str!("moe_score.cu"),
                include_str!("moe.cu"),
                include_str!("moe_decode.cu"),
                include_str!("moe_fp4.cu")
            ),
            Module::MoeMma => concat!(
                include_str!("moe_mma.cu"),
                include_str!("moe_mma_fp4.cu"),
                include_str!("moe_pipe.cu"),
                include_str!("moe_wg.cu"),
                include_str!("moe_wg8.cu")
            ),
            Module::Fp8 => concat!(
                include_str!("fp8.cu"),
                include_str!("fp8_gemm_rows.cu"),
                include_str!("nvfp4.cu"),
                include_str!("nvfp4_gemv.cu"),
                include_str!("nvfp4_gemm.cu"),
                include_str!("nvfp4_w4a4.cu"),
                include_str!("moe_fp4_small.cu")
            ),
            Module::Hybrid => concat!(
                include_str!("hybrid.cu"),
                include_str!("hybrid_chunk.cu"),
                include_str!("hybrid_decode.cu"),
                include_str!("mamba2.cu"),
                include_str!("mamba2_chunk.cu"),
            ),
            Module::Mla => include_str!("mla.cu"),
            // The lab's helpers (grid_sync, DYNAMIC_SMEM), then its kernels.
            #[cfg(feature = "lab")]
            Module::Probe => concat!(
                include_str!("../lab/lab.cuh"),
                include_str!("../lab/probe.cu")
            ),
        }
    }

    /// What NVRTC compiles: the prelude, then the file.
    pub fn program_text(self) -> String {
        format!(
            "// prelude\n{PRELUDE}\n// {}.cu\n{}",
            self.name(),
            self.source()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_include_no_header_and_name_their_kernels_by_file() {
        for m in Module::ALL {
            let text = m.program_text();
            assert!(
                !text.lines().any(|l| l.trim_start().starts_with("#include")),
                "{}.cu must not #include (NVRTC would need the CUDA headers)",
                m.name()
            );
            // Each file opens with a comment on its design.
            assert!(m.source().starts_with("//"), "{}.cu", m.name());
            assert!(text.contains("extern \"C\" __global__"), "{}.cu", m.name());
        }
    }

    /// What `met` compiles holds none of the lab's kernels or helpers, nor the removed losers'.
    #[test]
    fn serving_modules_hold_no_lab_code() {
        let lab_names = [
            "decode_skeleton",
            "sync_probe",
            "skel_",
            "grid_sync",
            "DYNAMIC_SMEM",
            "moe_one",
            "fp8_one",
        ];
        for m in Module::SERVING {
            let text = m.program_text();
            for name in lab_names {
                assert!(!text.contains(name), "{}.cu holds `{name}`", m.name());
            }
        }
        #[cfg(not(feature = "lab"))]
        assert_eq!(Module::ALL, Module::SERVING);
    }

    /// The body of the function whose signature ends at `open` (the index of its `{`).
    fn body(text: &str, open: usize) -> &str {
        let mut depth = 0usize;
        for (i, c) in text[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        return &text[open..=open + i];
                    }
                }
                _ => {}
            }
        }
        &text[open..]
    }

    /// The engine launches every kernel with programmatic dependent launch on Hopper
    /// (engine/src/backend/cuda/launch.rs), which is only correct if each kernel waits
    /// (`pdl_start` or `pdl_wait`) before it reads an earlier kernel's output or writes: every
    /// kernel's body must wait, itself, in a prelude helper it calls that waits (the FP8
    /// tensor-core tiles, which wait after their first weight loads), or in the one
    /// `__device__` function it hands its work to.
    #[test]
    fn every_kernel_waits_for_the_previous_one() {
        let waits = |b: &str| b.contains("pdl_start();") || b.contains("pdl_wait();");
        // The `__device__` helpers of `text` (other than pdl_start itself) whose bodies wait.
        let waiting_helpers_of = |text: &'static str| -> Vec<&'static str> {
            text.match_indices("__device__ __forceinline__ void ")
                .filter_map(|(at, _)| {
                    let rest = &text[at..];
                    let name_at = rest.find("void ")? + 5;
                    let name = rest[name_at..]
                        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                        .next()?;
                    let open = at + rest.find('{')?;
                    (name != "pdl_start" && waits(body(text, open))).then_some(name)
                })
                .collect()
        };
        let waiting_helpers = waiting_helpers_of(PRELUDE);
        assert!(
            waiting_helpers.contains(&"fp8_mma_tiles"),
            "the prelude's waiting helpers: {waiting_helpers:?}"
        );
        for m in Module::ALL {
            let text = m.source();
            let mut kernels = 0;
            for (at, _) in text.match_indices("extern \"C\" __global__") {
                let open = at + text[at..].find('{').expect("a kernel body");
                let b = body(text, open);
                let name = text[at..open].split('(').next().unwrap_or("").to_string();
                kernels += 1;
                let calls_waiting_helper = b
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .any(|w| waiting_helpers.contains(&w));
                if waits(b) || calls_waiting_helper {
                    continue;
                }
                // Handed to an impl: `name_impl<...>(` or `name_impl(` in the body.
                let callee = b
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .find(|w| w.ends_with("_impl"))
                    .unwrap_or_else(|| {
                        panic!("{}.cu: {name} neither waits nor calls an impl", m.name())
                    });
                let def = text
                    .match_indices(callee)
                    .map(|(i, _)| i)
                    .find(|&i| text[..i].trim_end().ends_with("void"))
                    .unwrap_or_else(|| panic!("{}.cu: no definition of {callee}", m.name()));
                let open = def + text[def..].find('{').expect("a body");
                let local_helpers = waiting_helpers_of(text);
                let impl_body = body(text, open);
                let impl_calls_helper = impl_body
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .any(|w| waiting_helpers.contains(&w) || local_helpers.contains(&w));
                assert!(
                    waits(impl_body) || impl_calls_helper,
                    "{}.cu: {name} and its {callee} never call pdl_start/pdl_wait",
                    m.name()
                );
            }
            assert!(kernels > 0, "{}.cu has no kernels", m.name());
        }
    }
}
