//! What `met` serves, in one table both programs read: the architectures it loads, the
//! features each needs beyond the dense decoder ops, which of those the CUDA backend has, and
//! how many GPUs one engine spreads a model over.
//!
//! The engine's CUDA backend answers [`Feature`] questions from [`cuda_supports`], and its
//! registry's test checks that it loads exactly the architectures listed here; `metralectl`
//! reads the same table to refuse a recipe before anything is downloaded.

/// A device `met serve --device` runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    /// The reference backend: every feature.
    Cpu,
    Cuda,
}

/// What a checkpoint may need beyond the dense decoder's ops. A model's load asks its backend
/// before reading any weight, so a device that lacks one refuses the checkpoint with a
/// sentence instead of failing mid-forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    /// Mixture-of-experts MLP blocks.
    MoeExperts,
    /// Fine-grained FP8 weights (`F8_E4M3` with per-block scales).
    Fp8Weights,
    /// Qwen3.5's hybrid layers: Gated DeltaNet and the small ops around it.
    HybridLayers,
    /// Sliding-window attention layers: Mistral with a `sliding_window`, Gemma 3's local
    /// layers, gpt-oss's banded layers.
    SlidingWindow,
    /// gpt-oss's ops: attention with a learned sink logit per head, biased projections and
    /// experts with biases and the clamped SwiGLU.
    GptOss,
    /// MiniMax-M2's ops: QK norms over all heads at once and experts routed by sigmoid scores
    /// with a correction bias.
    MiniMaxM2,
    /// Nemotron-H's ops: the Mamba-2 mixer and the relu² MLP.
    NemotronH,
    /// Nemotron-H's routed-expert (`E`) layers (Nemotron 3 Nano): relu² experts routed by
    /// sigmoid scores with a correction bias. A checkpoint whose pattern has an `E` needs it.
    NemotronHExperts,
    /// DeepSeek-V3's ops: multi-head latent attention over a cache of compressed rows, the
    /// column-range norm of the latent and group-limited sigmoid routing.
    DeepseekV3,
}

impl Feature {
    /// What the feature is, for a sentence that says a backend lacks it.
    pub fn describe(self) -> &'static str {
        match self {
            Self::MoeExperts => "mixture-of-experts layers",
            Self::Fp8Weights => "FP8 block-scaled weights",
            Self::HybridLayers => "Gated DeltaNet layers",
            Self::SlidingWindow => "sliding-window attention",
            // (Attention sinks have CUDA kernels: `paged_attention_sinks`.)
            Self::GptOss => "biased projections and clamped-SwiGLU experts",
            Self::MiniMaxM2 => "QK norms over all heads and sigmoid-routed experts",
            Self::NemotronH => "Mamba-2 mixers and relu² MLPs",
            Self::NemotronHExperts => "Nemotron-H's sigmoid-routed relu² experts",
            Self::DeepseekV3 => "multi-head latent attention and group-limited routing",
        }
    }
}

/// Whether the CUDA backend has `feature`.
pub const fn cuda_supports(feature: Feature) -> bool {
    match feature {
        // On both of its paths (f32 and bf16), checked against transformers on every fixture
        // (docs/cuda.md, cuda_check e2e).
        Feature::MoeExperts | Feature::Fp8Weights | Feature::HybridLayers => true,
        // Every attention kernel takes a window (its key loop starts at the window's first
        // key; cuda_check attention_window).
        Feature::SlidingWindow => true,
        // Sinks (paged_attention_sinks), bias adds (add_bias_*) and the clamped-SwiGLU experts
        // (fused_moe_clamped: fused_moe's routing, moe_gate_up_clamped_*, moe_combine_bias_*);
        // cuda_check ops gpt_oss and e2e on the gpt-oss fixtures.
        Feature::GptOss => true,
        // The Mamba-2 mixer (mamba2.cu: the conv, the selective scan, the gated norm) and
        // relu²; attention without rotary is write_kv. cuda_check mamba2 and e2e on the
        // dense Nemotron-H fixture.
        Feature::NemotronH => true,
        // QK norms over all heads (rms_norm_cols_*) and sigmoid-routed experts
        // (fused_moe_sigmoid: fused_moe's launches with moe.cu's MoeSigmoid scoring); cuda_check
        // ops minimax and e2e on the MiniMax-M2 fixture.
        Feature::MiniMaxM2 => true,
        // Multi-head latent attention (mla.cu: mla_rope_kv_*, mla_q_absorb_*, mla_attend_*,
        // mla_out_*) and group-limited sigmoid routing (fused_moe_sigmoid with moe_score.cu's
        // kept groups); cuda_check ops mla and e2e on the DeepSeek-V3 fixtures. The FP8 KV
        // cache only for latents of a multiple of 128 (DeepSeek's 512; others refused by name
        // at the first step).
        Feature::DeepseekV3 => true,
        // Nemotron-H's routed experts (fused_moe_relu2: fused_moe_sigmoid's routing, the
        // un-gated moe_up_relu2_* and fused_moe's down and weighted sum, on the CUDA cores at
        // every size); cuda_check ops nemotron_moe and e2e on the Nemotron-H MoE fixture.
        Feature::NemotronHExperts => true,
    }
}

/// Whether `device` has `feature`.
pub const fn supports(device: Device, feature: Feature) -> bool {
    match device {
        Device::Cpu => true,
        Device::Cuda => cuda_supports(feature),
    }
}

/// An architecture `met` loads, as `config.json`'s `architectures[0]` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Architecture {
    pub name: &'static str,
    /// The features every checkpoint of it needs. A checkpoint may need more, by what its
    /// config says: FP8 weights, Mistral's optional sliding window.
    pub needs: &'static [Feature],
}

const fn arch(name: &'static str, needs: &'static [Feature]) -> Architecture {
    Architecture { name, needs }
}

use Feature::{DeepseekV3, GptOss, HybridLayers, MiniMaxM2, MoeExperts, NemotronH, SlidingWindow};

/// Every architecture the engine loads. The `*ForConditionalGeneration` ones are the Hub's
/// multimodal layouts, text model only.
pub const ARCHITECTURES: [Architecture; 15] = [
    arch("Qwen3ForCausalLM", &[]),
    arch("Qwen3MoeForCausalLM", &[MoeExperts]),
    arch("Qwen3_5ForCausalLM", &[HybridLayers]),
    arch("Qwen3_5MoeForCausalLM", &[HybridLayers, MoeExperts]),
    arch("Qwen3_5ForConditionalGeneration", &[HybridLayers]),
    arch(
        "Qwen3_5MoeForConditionalGeneration",
        &[HybridLayers, MoeExperts],
    ),
    arch("LlamaForCausalLM", &[]),
    arch("MistralForCausalLM", &[]),
    arch("Mistral3ForConditionalGeneration", &[]),
    // Every released Gemma 3 has local layers.
    arch("Gemma3ForCausalLM", &[SlidingWindow]),
    arch("Gemma3ForConditionalGeneration", &[SlidingWindow]),
    arch("GptOssForCausalLM", &[GptOss, MoeExperts, SlidingWindow]),
    arch("MiniMaxM2ForCausalLM", &[MiniMaxM2, MoeExperts]),
    arch("NemotronHForCausalLM", &[NemotronH]),
    arch("DeepseekV3ForCausalLM", &[DeepseekV3, MoeExperts]),
];

/// The architecture called `name`, if the engine loads it.
pub fn architecture(name: &str) -> Option<&'static Architecture> {
    ARCHITECTURES.iter().find(|a| a.name == name)
}

/// The most GPUs one engine spreads a model over. Tensor parallelism's arithmetic exists on
/// the CPU reference (`engine/src/parallel/`), but no collective joins GPUs yet.
pub const MAX_GPUS: u32 = 1;

/// The first feature `device` lacks among `needs`, if any.
pub fn missing(device: Device, needs: impl IntoIterator<Item = Feature>) -> Option<Feature> {
    needs.into_iter().find(|&f| !supports(device, f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found() {
        for (i, a) in ARCHITECTURES.iter().enumerate() {
            assert_eq!(architecture(a.name), Some(a));
            assert!(ARCHITECTURES[..i].iter().all(|b| b.name != a.name));
        }
        assert_eq!(architecture("BertModel"), None);
    }

    #[test]
    fn the_cpu_has_everything_and_cuda_lacks_what_it_says() {
        let all = ARCHITECTURES.iter().flat_map(|a| a.needs.iter().copied());
        assert_eq!(missing(Device::Cpu, all), None);
        let gemma = architecture("Gemma3ForConditionalGeneration").map(|a| a.needs);
        assert_eq!(
            gemma.and_then(|n| missing(Device::Cuda, n.iter().copied())),
            None
        );
        let gpt_oss = architecture("GptOssForCausalLM").map(|a| a.needs);
        assert_eq!(
            gpt_oss.and_then(|n| missing(Device::Cuda, n.iter().copied())),
            None
        );
        let minimax = architecture("MiniMaxM2ForCausalLM").map(|a| a.needs);
        assert_eq!(
            minimax.and_then(|n| missing(Device::Cuda, n.iter().copied())),
            None
        );
        let deepseek = architecture("DeepseekV3ForCausalLM").map(|a| a.needs);
        assert_eq!(
            deepseek.and_then(|n| missing(Device::Cuda, n.iter().copied())),
            None
        );
        let nemotron = architecture("NemotronHForCausalLM").map(|a| a.needs);
        assert_eq!(
            nemotron.and_then(|n| missing(Device::Cuda, n.iter().copied())),
            None
        );
        assert!(cuda_supports(Feature::NemotronHExperts));
        let qwen = architecture("Qwen3_5MoeForConditionalGeneration").map(|a| a.needs);
        assert_eq!(
            qwen.and_then(|n| missing(Device::Cuda, n.iter().copied())),
            None
        );
    }
}
