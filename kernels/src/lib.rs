//! CUDA kernel sources (`src/*.cu`, one op family a file) and the loader that compiles them with
//! NVRTC for the GPU it finds (`cuda` feature).
//!
//! Every file is compiled as `prelude.cuh` followed by the file's text: the kernels include no
//! header, so NVRTC needs no CUDA toolkit headers on the machine (bf16 is handled as 16-bit
//! patterns). Compiled images are cached on disk (see [`cache`]), keyed by the program text, the
//! target architecture, the NVRTC and driver versions and the options.

pub mod cache;
#[cfg(feature = "cuda")]
mod loader;

#[cfg(feature = "cuda")]
pub use loader::{KernelError, Kernels, LoadRecord, Target, compile};

/// Device helpers pasted in front of every kernel file.
pub const PRELUDE: &str = include_str!("prelude.cuh");

/// One `.cu` file: a family of kernels compiled and loaded together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Module {
    Convert,
    Embedding,
    Norm,
    Rope,
    Attention,
    AttentionMma,
    Activation,
    Softmax,
    Gemv,
    Sample,
    Moe,
    Fp8,
}

impl Module {
    pub const ALL: [Module; 12] = [
        Module::Convert,
        Module::Embedding,
        Module::Norm,
        Module::Rope,
        Module::Attention,
        Module::AttentionMma,
        Module::Activation,
        Module::Softmax,
        Module::Gemv,
        Module::Sample,
        Module::Moe,
        Module::Fp8,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Module::Convert => "convert",
            Module::Embedding => "embedding",
            Module::Norm => "norm",
            Module::Rope => "rope",
            Module::Attention => "attention",
            Module::AttentionMma => "attention_mma",
            Module::Activation => "activation",
            Module::Softmax => "softmax",
            Module::Gemv => "gemv",
            Module::Sample => "sample",
            Module::Moe => "moe",
            Module::Fp8 => "fp8",
        }
    }

    /// The oldest GPU (compute capability) the file compiles for: attention_mma.cu's mma.sync
    /// on bf16 needs Ampere; the rest run anywhere NVRTC targets.
    pub fn min_compute_capability(self) -> (i32, i32) {
        match self {
            Module::AttentionMma => (8, 0),
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
            Module::Activation => include_str!("activation.cu"),
            Module::Softmax => include_str!("softmax.cu"),
            Module::Gemv => include_str!("gemv.cu"),
            Module::Sample => include_str!("sample.cu"),
            Module::Moe => include_str!("moe.cu"),
            Module::Fp8 => include_str!("fp8.cu"),
        }
    }

    /// What NVRTC compiles: the prelude, then the file.
    pub fn program_text(self) -> String {
        format!(
            "// prelude.cuh\n{PRELUDE}\n// {}.cu\n{}",
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
}
