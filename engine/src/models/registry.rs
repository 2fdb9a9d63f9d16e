//! The model registry: `architectures[0]` in `config.json` → the family that runs it → its
//! constructor. Everything that loads a model goes through [`load`] (`met serve` in
//! `engine_core/start.rs`, `met score` in `main.rs`); every backend runs every family (the
//! CPU reference and CUDA: Qwen3, Qwen3-MoE, the Qwen3.5/3.6 hybrids, Llama 3.x, Mistral,
//! Gemma 3, gpt-oss, MiniMax-M2; Nemotron-H and DeepSeek-V3 on the CPU only for now). A
//! backend that lacks a feature a checkpoint needs refuses it at load, by name
//! (`models::check_backend`).

use std::sync::Arc;

use anyhow::{Context, bail};

use super::Model;
use super::deepseek_v3::{DeepseekV3, DeepseekV3Config};
use super::gemma3::{Gemma3, Gemma3Config};
use super::gpt_oss::{GptOss, GptOssConfig};
use super::llama::{Llama, LlamaConfig};
use super::minimax_m2::{MiniMaxM2, MiniMaxM2Config};
use super::nemotron_h::{NemotronH, NemotronHConfig};
use super::qwen3::Qwen3;
use super::qwen3_5::{Qwen3_5, Qwen3_5Config};
use crate::backend::HybridOps;
use crate::loader::{LoadError, LoadFormat, ModelDir, Requantize, Weights};
use crate::parallel::Collective;

/// A model family: one forward, one file (`docs/models.md` lists what runs where).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Qwen3, dense or mixture-of-experts (`qwen3.rs`, with `qwen3_moe.rs`).
    Qwen3,
    /// Qwen3.5/3.6 hybrids, Gated DeltaNet + gated attention, dense or MoE (`qwen3_5.rs`).
    Qwen3_5,
    /// Llama 3.x and Mistral: Qwen3's decoder without QK-norm, llama3 rope scaling, Mistral's
    /// optional sliding window (`llama.rs`).
    Llama,
    /// Gemma 3: sliding-window layers interleaved with global ones, (1 + w) norms around each
    /// block, scaled embeddings, GELU-tanh MLP (`gemma3.rs`).
    Gemma3,
    /// gpt-oss: attention sinks, alternating sliding and full layers, biased projections,
    /// experts with the clamped SwiGLU, bf16 or MXFP4 (`gpt_oss.rs`).
    GptOss,
    /// MiniMax-M2: QK norms over all heads, partial rotary, every layer's experts routed by
    /// sigmoid scores with a correction bias (`minimax_m2.rs`).
    MiniMaxM2,
    /// Nemotron-H: Mamba-2 layers interleaved with attention (no rotary embedding) and relu²
    /// MLP layers by the config's pattern, the Mamba state in the state pool
    /// (`nemotron_h.rs`).
    NemotronH,
    /// DeepSeek-V3 / V3.1: multi-head latent attention over a compressed cache, dense first
    /// layers, then experts routed by sigmoid scores within the best expert groups, with
    /// shared experts (`deepseek_v3.rs`).
    DeepseekV3,
}

/// Every architecture this engine runs, as `config.json` names it, and its family. The
/// `*ForConditionalGeneration` ones are the Hub's multimodal layouts, text model only.
pub const ARCHITECTURES: [(&str, Family); 15] = [
    ("Qwen3ForCausalLM", Family::Qwen3),
    ("Qwen3MoeForCausalLM", Family::Qwen3),
    ("Qwen3_5ForCausalLM", Family::Qwen3_5),
    ("Qwen3_5MoeForCausalLM", Family::Qwen3_5),
    ("Qwen3_5ForConditionalGeneration", Family::Qwen3_5),
    ("Qwen3_5MoeForConditionalGeneration", Family::Qwen3_5),
    ("LlamaForCausalLM", Family::Llama),
    ("MistralForCausalLM", Family::Llama),
    ("Mistral3ForConditionalGeneration", Family::Llama),
    ("Gemma3ForCausalLM", Family::Gemma3),
    ("Gemma3ForConditionalGeneration", Family::Gemma3),
    ("GptOssForCausalLM", Family::GptOss),
    ("MiniMaxM2ForCausalLM", Family::MiniMaxM2),
    ("NemotronHForCausalLM", Family::NemotronH),
    ("DeepseekV3ForCausalLM", Family::DeepseekV3),
];

/// The family that runs `architecture`, or an error that names it and lists the supported.
pub fn family(architecture: &str) -> Result<Family, LoadError> {
    ARCHITECTURES
        .iter()
        .find(|(name, _)| *name == architecture)
        .map(|&(_, f)| f)
        .ok_or_else(|| LoadError::UnsupportedArchitecture(architecture.to_string()))
}

/// The supported architectures, comma-separated (for error messages).
pub fn supported() -> String {
    let names: Vec<&str> = ARCHITECTURES.iter().map(|(n, _)| *n).collect();
    names.join(", ")
}

/// What the caller does with the model once it is loaded. Each family is its own type, so the
/// code after loading is generic over it and the registry calls it with the one it built.
pub trait WithModel<B: HybridOps> {
    type Output;
    fn run<M: Model<B> + 'static>(self, backend: B, model: M) -> Self::Output;
}

/// How to load: where the weights come from, whether to load the MTP head too (the
/// drafter of `--speculative`, in Qwen3.5/3.6 checkpoints only), and what to re-quantize on
/// the way (`--requantize`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoadOptions {
    pub load_format: LoadFormat,
    pub mtp: bool,
    pub requantize: Requantize,
}

/// Load the checkpoint in `dir` onto `backend` with its family's constructor, calling
/// `layer_done(n)` after each decoder layer, then hand backend and model to `then`. The
/// weights' memory maps are closed before `then` runs.
pub fn load<B: HybridOps, W: WithModel<B>>(
    backend: B,
    dir: &ModelDir,
    options: LoadOptions,
    layer_done: &mut dyn FnMut(usize),
    then: W,
) -> anyhow::Result<W::Output> {
    load_rank(backend, dir, options, None, layer_done, then)
}

/// [`load`] as one rank of a tensor-parallel group (`tp`; `None` is the whole model): each
/// family cuts its own slice (`parallel/`).
pub fn load_rank<B: HybridOps, W: WithModel<B>>(
    backend: B,
    dir: &ModelDir,
    options: LoadOptions,
    tp: Option<Arc<dyn Collective<B>>>,
    layer_done: &mut dyn FnMut(usize),
    then: W,
) -> anyhow::Result<W::Output> {
    let config = dir.config()?;
    let family = family(&config.architecture)?;
    if options.mtp && family != Family::Qwen3_5 {
        bail!(
            "--speculative drafts with the checkpoint's MTP head, which Qwen3.5/3.6 checkpoints \
             carry and {} does not: serve it without --speculative",
            config.architecture
        );
    }
    let expert_parallel = tp.as_ref().is_some_and(|g| g.shard().expert_parallel);
    if expert_parallel && !matches!(family, Family::Qwen3 | Family::Qwen3_5) {
        bail!(
            "expert parallelism is built for Qwen3-MoE and the Qwen3.5/3.6 MoE hybrids, not {}: \
             serve it without --enable-expert-parallel",
            config.architecture
        );
    }
    let failed = || format!("failed to load {}", dir.root.display());
    if !options.requantize.is_empty() {
        check_requantize(&config, options.requantize)?;
    }
    let weights =
        Weights::open(&dir.root, options.load_format)?.with_requantize(options.requantize);
    let json = dir.root.join("config.json");
    macro_rules! finish {
        ($model:expr) => {{
            let model = $model.with_context(failed)?;
            drop(weights);
            Ok(then.run(backend, model))
        }};
    }
    match family {
        Family::Qwen3 => finish!(Qwen3::load_sharded(
            &backend, &config, &weights, tp, layer_done
        )),
        Family::Qwen3_5 => {
            let hybrid = Qwen3_5Config::from_file(&json)?;
            finish!(Qwen3_5::load_sharded(
                &backend,
                &hybrid,
                &weights,
                (options.mtp, tp),
                layer_done
            ))
        }
        Family::Llama => {
            let llama = LlamaConfig::from_file(&json)?;
            finish!(Llama::load_sharded(
                &backend, &llama, &weights, tp, layer_done
            ))
        }
        Family::Gemma3 => {
            let gemma = Gemma3Config::from_file(&json)?;
            finish!(Gemma3::load_sharded(
                &backend, &gemma, &weights, tp, layer_done
            ))
        }
        Family::GptOss => {
            let gpt_oss = GptOssConfig::from_file(&json)?;
            finish!(GptOss::load_sharded(
                &backend, &gpt_oss, &weights, tp, layer_done
            ))
        }
        Family::MiniMaxM2 => {
            let minimax = MiniMaxM2Config::from_file(&json)?;
            finish!(MiniMaxM2::load_sharded(
                &backend, &minimax, &weights, tp, layer_done
            ))
        }
        Family::NemotronH => {
            let nemotron = NemotronHConfig::from_file(&json)?;
            finish!(NemotronH::load_sharded(
                &backend, &nemotron, &weights, tp, layer_done
            ))
        }
        Family::DeepseekV3 => {
            let deepseek = DeepseekV3Config::from_file(&json)?;
            finish!(DeepseekV3::load_sharded(
                &backend, &deepseek, &weights, tp, layer_done
            ))
        }
    }
}

/// Refuse a `--requantize` plan the checkpoint gives no meaning to: experts of a model that
/// has none.
fn check_requantize(config: &crate::loader::ModelConfig, plan: Requantize) -> anyhow::Result<()> {
    if (plan.expert_gate_up.is_some() || plan.expert_down.is_some()) && config.moe.is_none() {
        bail!(
            "--requantize {plan}: {} has no routed experts to re-quantize; drop the experts part",
            config.architecture
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Backend, CpuBackend};

    #[test]
    fn every_architecture_has_one_family() {
        assert_eq!(family("Qwen3MoeForCausalLM").ok(), Some(Family::Qwen3));
        assert_eq!(
            family("Qwen3_5MoeForConditionalGeneration").ok(),
            Some(Family::Qwen3_5)
        );
        let mut names: Vec<_> = ARCHITECTURES.iter().map(|(n, _)| n).collect();
        names.dedup();
        assert_eq!(names.len(), ARCHITECTURES.len());
    }

    /// `metralectl` refuses recipes from the shared table, so it must list exactly what the
    /// registry loads.
    #[test]
    fn the_shared_support_table_lists_exactly_these_architectures() {
        let ours: Vec<&str> = ARCHITECTURES.iter().map(|(n, _)| *n).collect();
        let shared: Vec<&str> = metrale_protocol::support::ARCHITECTURES
            .iter()
            .map(|a| a.name)
            .collect();
        assert_eq!(ours, shared);
    }

    #[test]
    fn an_unsupported_architecture_is_named_with_the_supported_ones() {
        let e = family("Phi3ForCausalLM").expect_err("not ours").to_string();
        assert!(e.contains("\"Phi3ForCausalLM\""), "{e}");
        for (name, _) in ARCHITECTURES {
            assert!(e.contains(name), "{name} missing from: {e}");
        }
    }

    /// What `met serve` and `met score` see: the load stops at the architecture, before any
    /// weight is read, with the same message.
    #[test]
    fn load_refuses_an_unknown_checkpoint_by_name() {
        struct Never;
        impl<B: HybridOps> WithModel<B> for Never {
            type Output = ();
            fn run<M: Model<B> + 'static>(self, _: B, _: M) {
                panic!("nothing should load");
            }
        }
        let dir = std::env::temp_dir().join(format!("met-registry-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(
            dir.join("config.json"),
            r#"{"architectures": ["Phi3ForCausalLM"], "vocab_size": 64, "hidden_size": 32,
                "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                "max_position_embeddings": 64, "rms_norm_eps": 1e-6}"#,
        )
        .expect("config");
        let cpu = CpuBackend::default();
        let name = cpu.name().to_string();
        let opened = ModelDir::open(&dir).expect("a checkpoint directory");
        let e = load(cpu, &opened, LoadOptions::default(), &mut |_| {}, Never)
            .expect_err("unsupported");
        let _ = std::fs::remove_dir_all(&dir);
        let msg = format!("{e:#}");
        assert!(msg.contains("Phi3ForCausalLM"), "{msg} ({name})");
        assert!(msg.contains("Qwen3_5ForCausalLM"), "{msg}");
    }
}
