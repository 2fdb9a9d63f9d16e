//! Whether the engine serves what a recipe names, on the device and GPU count it names, read
//! from the table `met` itself loads by (`metrale_protocol::support`). `run` asks before any
//! download, `list` and `show` before that: a checkpoint the engine would refuse at load is
//! refused here, by the same reason.

use metrale_protocol::support::{self, Device as EngineDevice, Feature};

use super::schema::{Device, Quantization, Recipe};

/// Why the engine would not serve `recipe`, or `None` when it would (as far as the recipe
/// says: a recipe without `[model] architecture` is checked on its quantization and experts).
pub fn refusal(recipe: &Recipe) -> Option<String> {
    let device = match recipe.serve.device {
        Device::Cpu => EngineDevice::Cpu,
        Device::Cuda => EngineDevice::Cuda,
    };
    let gpus = recipe.requirements.gpus;
    if device == EngineDevice::Cuda && gpus > support::MAX_GPUS {
        return Some(format!(
            "it spreads the model over {gpus} GPUs, and met serves a model on one GPU for now \
             (its ranks meet over NCCL, which is not in the engine yet; on the CPU they run as \
             processes)"
        ));
    }
    let model = recipe.model.as_ref();
    let architecture = model.and_then(|m| m.architecture.as_deref());
    let mut needs: Vec<Feature> = architecture
        .and_then(support::architecture)
        .map_or_else(Vec::new, |a| a.needs.to_vec());
    if recipe.checkpoint.quantization == Quantization::Fp8 {
        needs.push(Feature::Fp8Weights);
    }
    if model.is_some_and(|m| m.experts.is_some()) {
        needs.push(Feature::MoeExperts);
        // Nemotron-H's `E` layers (Nemotron 3 Nano) route their relu² experts by sigmoid.
        if architecture == Some("NemotronHForCausalLM") {
            needs.push(Feature::NemotronHExperts);
        }
    }
    if model.is_some_and(|m| m.sliding_window.is_some()) {
        needs.push(Feature::SlidingWindow);
    }
    let lacking = support::missing(device, needs)?;
    let what = architecture.map_or_else(|| "this checkpoint".to_owned(), |a| a.to_owned());
    Some(format!(
        "met's CUDA backend does not run {what} yet: it has no kernels for {}; the CPU \
         reference does, slowly (a copy of the recipe with device = \"cpu\" and gpus = 0)",
        lacking.describe()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::fixtures::hybrid;

    fn recipe(text: &str) -> Recipe {
        toml::from_str(text).expect("test recipe parses")
    }

    fn with_architecture(text: &str, name: &str) -> String {
        text.replace(
            "[model]\n",
            &format!("[model]\narchitecture = \"{name}\"\n"),
        )
    }

    #[test]
    fn a_hybrid_on_cuda_is_served() {
        let text = with_architecture(&hybrid(), "Qwen3_5ForConditionalGeneration");
        assert_eq!(refusal(&recipe(&text)), None);
    }

    /// DeepSeek-V3's latent attention and grouped routing run on CUDA (issue 40).
    #[test]
    fn deepseek_v3_is_served_on_cuda() {
        let text = with_architecture(&hybrid(), "DeepseekV3ForCausalLM");
        assert_eq!(refusal(&recipe(&text)), None);
    }

    /// Nemotron-H's Mamba-2 and relu² layers and its routed relu² experts (Nemotron 3 Nano's
    /// `E` layers) run on CUDA (issue 40).
    #[test]
    fn nemotron_h_is_served_on_cuda_with_routed_experts() {
        let text = with_architecture(&hybrid(), "NemotronHForCausalLM");
        let dense = text
            .lines()
            .filter(|l| !l.starts_with("experts"))
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(refusal(&recipe(&dense)), None);
        let moe = dense.replace("[model]\n", "[model]\nexperts = 8\n");
        assert_eq!(refusal(&recipe(&moe)), None);
    }

    #[test]
    fn a_mistral_window_is_served_on_cuda() {
        let text = with_architecture(&hybrid(), "MistralForCausalLM")
            .replace("[model]\n", "[model]\nsliding_window = 4096\n");
        assert_eq!(refusal(&recipe(&text)), None);
    }

    #[test]
    fn gpt_oss_is_served_on_cuda() {
        let text = with_architecture(&hybrid(), "GptOssForCausalLM");
        assert_eq!(refusal(&recipe(&text)), None);
    }

    #[test]
    fn more_gpus_than_the_engine_spreads_over_are_refused() {
        let text = hybrid().replace("gpus = 1", "gpus = 8");
        let why = refusal(&recipe(&text)).expect("refused");
        assert!(why.contains("8 GPUs"), "{why}");
    }
}
