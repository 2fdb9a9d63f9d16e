//! How much GPU memory a recipe needs, and whether this machine has it.
//!
//! needed = weights + KV cache + recurrent state + headroom, where
//! - weights: `checkpoint.weights_gib` when pinned, else parameters × bytes a parameter of the
//!   checkpoint's quantization, corrected for parts the engine re-quantizes at load;
//! - KV cache: full-attention layers × 2 (K and V) × KV heads × head dim × bytes of the KV dtype
//!   × max sequence length × max batch size; with latent attention, one row of
//!   `kv_lora_rank + rope_head_dim` values a layer instead of the K and V heads;
//! - recurrent state, a layer, a sequence slot: for Gated DeltaNet layers a float32 state of
//!   value heads × key dim × value dim and a bf16 convolution state of
//!   (2 × key heads × key dim + value heads × value dim) × (kernel − 1); for Mamba-2 layers a
//!   float32 state of heads × head dim × state size and a bf16 convolution state of
//!   (heads × head dim + 2 × groups × state size) × (kernel − 1);
//! - headroom: [`CONTEXT_GIB_PER_GPU`] a GPU for the CUDA context and library workspaces, plus
//!   [`ACTIVATION_FRACTION`] of the rest for activations and allocator fragmentation.
//!
//! A part whose numbers the recipe does not pin is left out and the estimate is marked incomplete.

use serde::Serialize;

use super::schema::{Device, FlagValue, KvCacheDtype, Quantization, Recipe};
use super::support;
use crate::gpu::Probe;

pub const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
/// CUDA context, cuBLAS/cuBLASLt workspaces and the like, a GPU.
pub const CONTEXT_GIB_PER_GPU: f64 = 1.0;
/// Activations and fragmentation, as a fraction of weights and caches.
pub const ACTIVATION_FRACTION: f64 = 0.10;
/// The share of a GPU's memory the engine takes when the recipe does not say.
pub const DEFAULT_GPU_MEMORY_UTILIZATION: f64 = 0.9;

/// One part of the estimate: its size when it can be known, and how it was reckoned.
#[derive(Debug, Clone, Serialize)]
pub struct Part {
    pub bytes: Option<u64>,
    pub basis: String,
}

impl Part {
    fn known(bytes: f64, basis: String) -> Self {
        Self {
            bytes: Some(bytes.max(0.0).round() as u64),
            basis,
        }
    }

    fn unknown(why: &str) -> Self {
        Self {
            bytes: None,
            basis: format!("cannot estimate: {why}"),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Estimate {
    pub weights: Part,
    pub kv_cache: Part,
    pub recurrent_state: Part,
    pub headroom: Part,
    /// The sum of the parts that are known.
    pub total_bytes: u64,
    /// False when a part could not be estimated: then `total_bytes` is a lower bound.
    pub complete: bool,
}

impl Estimate {
    /// Weights, KV cache and recurrent state: what is spread over GPUs (the known parts).
    pub fn body_bytes(&self) -> u64 {
        [&self.weights, &self.kv_cache, &self.recurrent_state]
            .iter()
            .filter_map(|p| p.bytes)
            .sum()
    }

    pub fn parts(&self) -> [(&'static str, &Part); 4] {
        [
            ("weights", &self.weights),
            ("kv cache", &self.kv_cache),
            ("recurrent state", &self.recurrent_state),
            ("headroom", &self.headroom),
        ]
    }
}

/// The memory of one H200-class GPU (141 GB of HBM3e) as the driver reports it, in GiB.
pub const H200_CLASS_GIB: f64 = 140.0;

/// How many GPUs of `gpu_bytes` each the estimate needs when weights and caches are spread
/// evenly over them (tensor parallelism, in a power-of-two group so heads and experts split
/// evenly) and each pays its own CUDA context: the least such `n` with
/// `body × (1 + activations) + n × context ≤ n × gpu_bytes × utilization`. `None` when not
/// even 64 are enough. What every rank keeps whole (norms, small biases) is not counted twice:
/// an estimate, like the rest.
pub fn gpus_needed(recipe: &Recipe, estimate: &Estimate, gpu_bytes: f64) -> Option<u32> {
    let body = estimate.body_bytes() as f64 * (1.0 + ACTIVATION_FRACTION);
    let share = gpu_bytes * utilization(recipe) - CONTEXT_GIB_PER_GPU * GIB;
    (0..=6)
        .map(|p| 1u32 << p)
        .find(|&n| body <= f64::from(n) * share)
}

/// The share of each GPU's memory the engine takes: the recipe's, or the engine's default.
pub fn utilization(recipe: &Recipe) -> f64 {
    recipe
        .serve
        .gpu_memory_utilization
        .unwrap_or(DEFAULT_GPU_MEMORY_UTILIZATION)
}

pub fn estimate(recipe: &Recipe) -> Estimate {
    let weights = weights(recipe);
    let kv_cache = kv_cache(recipe);
    let recurrent_state = recurrent_state(recipe);
    let parts = [&weights, &kv_cache, &recurrent_state];
    let complete = parts.iter().all(|p| p.bytes.is_some());
    let body: u64 = parts.iter().filter_map(|p| p.bytes).sum();
    let gpus = if recipe.serve.device == Device::Cpu {
        0
    } else {
        recipe.requirements.gpus
    };
    let headroom = Part::known(
        f64::from(gpus) * CONTEXT_GIB_PER_GPU * GIB + ACTIVATION_FRACTION * body as f64,
        format!(
            "{CONTEXT_GIB_PER_GPU:.1} GiB a GPU × {gpus} (CUDA context, workspaces) + {:.0}% of the above \
             (activations, fragmentation)",
            ACTIVATION_FRACTION * 100.0
        ),
    );
    let total_bytes = body + headroom.bytes.unwrap_or(0);
    Estimate {
        weights,
        kv_cache,
        recurrent_state,
        headroom,
        total_bytes,
        complete,
    }
}

fn bytes_word(bytes: f64) -> String {
    if bytes == 1.0 {
        "1 byte".to_owned()
    } else {
        format!("{bytes} bytes")
    }
}

fn billions(count: f64) -> String {
    format!("{:.2}B", count / 1e9)
}

fn weights(recipe: &Recipe) -> Part {
    let ck = &recipe.checkpoint;
    if let Some(gib) = ck.weights_gib {
        return Part::known(gib * GIB, format!("{gib} GiB, pinned in the recipe"));
    }
    let Some(params) = &ck.parameters else {
        return Part::unknown("the recipe pins neither `weights_gib` nor `parameters`");
    };
    let q = ck.quantization;
    let mut bytes = params.count() * q.bytes_per_param();
    let mut basis = format!(
        "{} parameters × {} ({})",
        params.as_str(),
        bytes_word(q.bytes_per_param()),
        q.flag_value()
    );
    let Some(rq) = &ck.requantize else {
        return Part::known(bytes, basis);
    };
    let model = recipe.model.as_ref();
    if let Some(to) = rq.lm_head {
        let Some(n) =
            model.and_then(|m| Some(f64::from(m.hidden_size?) * f64::from(m.vocab_size?)))
        else {
            return Part::unknown(
                "lm_head is re-quantized but [model] pins no `hidden_size` and `vocab_size`",
            );
        };
        bytes += n * (to.bytes_per_param() - q.bytes_per_param());
        basis.push_str(&format!(
            ", lm_head ({}) as {}",
            billions(n),
            to.flag_value()
        ));
    }
    if let Some(to) = rq.experts {
        let projections = rq.expert_projections.as_ref().map_or(3, Vec::len) as f64;
        let n = model.and_then(|m| {
            Some(
                f64::from(m.layers)
                    * f64::from(m.experts?)
                    * f64::from(m.hidden_size?)
                    * f64::from(m.expert_intermediate_size?),
            )
        });
        let Some(n) = n.map(|n| n * projections) else {
            return Part::unknown(
                "experts are re-quantized but [model] pins no `experts`, `expert_intermediate_size` and `hidden_size`",
            );
        };
        bytes += n * (to.bytes_per_param() - q.bytes_per_param());
        basis.push_str(&format!(
            ", experts ({}) as {}",
            billions(n),
            to.flag_value()
        ));
    }
    Part::known(bytes, basis)
}

fn kv_bytes(dtype: KvCacheDtype, weights: Quantization) -> (f64, &'static str) {
    match dtype {
        KvCacheDtype::Auto if weights == Quantization::F32 => (4.0, "auto = f32"),
        KvCacheDtype::Auto => (2.0, "auto, counted as bf16"),
        KvCacheDtype::Bf16 => (2.0, "bf16"),
        KvCacheDtype::Fp8 => (1.0, "fp8"),
    }
}

fn kv_cache(recipe: &Recipe) -> Part {
    let Some(m) = &recipe.model else {
        return Part::unknown("the recipe has no [model] section");
    };
    let serve = &recipe.serve;
    let layers = m.full_attention_layers.unwrap_or(m.layers);
    let (dtype_bytes, dtype) = kv_bytes(serve.kv_cache_dtype, recipe.checkpoint.quantization);
    if let Some(la) = &m.latent_attention {
        let row = la.kv_lora_rank + la.rope_head_dim;
        return Part::known(
            f64::from(layers)
                * f64::from(row)
                * dtype_bytes
                * f64::from(serve.max_seq_len)
                * f64::from(serve.max_batch_size),
            format!(
                "{layers} layers × {row} latent values ({} + {} rope) × {} ({dtype}) × {} tokens × {} sequences",
                la.kv_lora_rank,
                la.rope_head_dim,
                bytes_word(dtype_bytes),
                serve.max_seq_len,
                serve.max_batch_size
            ),
        );
    }
    if let Some(window) = m.sliding_window {
        return windowed_kv_cache(recipe, (layers, window), (dtype_bytes, dtype));
    }
    let per_token =
        f64::from(layers) * 2.0 * f64::from(m.kv_heads) * f64::from(m.head_dim) * dtype_bytes;
    Part::known(
        per_token * f64::from(serve.max_seq_len) * f64::from(serve.max_batch_size),
        format!(
            "{layers} layers × 2 × {} KV heads × {} dims × {} ({dtype}) × {} tokens × {} sequences",
            m.kv_heads,
            m.head_dim,
            bytes_word(dtype_bytes),
            serve.max_seq_len,
            serve.max_batch_size
        ),
    )
}

/// Tokens a KV block holds in the engine (its `--block-size`).
const KV_BLOCK: u64 = 16;
/// The engine's step budget (`--max-num-batched-tokens`) when the recipe sets none.
const DEFAULT_STEP_TOKENS: u32 = 2048;

/// The KV cache of a model whose `sliding_layers` attend in a window of `window` positions:
/// the engine keeps only the window for them, in a pool of its own sized as its start-up
/// planner sizes it (`engine/src/kv_cache/groups.rs`, `PlanShape::group_blocks`): a
/// full-attention layer holds every position of every sequence, a sliding one each
/// sequence's `window − 1` positions (plus three blocks of slack) and the positions one step
/// writes, never more than every position.
fn windowed_kv_cache(
    recipe: &Recipe,
    (layers, window): (u32, u32),
    (dtype_bytes, dtype): (f64, &str),
) -> Part {
    let Some(m) = &recipe.model else {
        return Part::unknown("the recipe has no [model] section");
    };
    let serve = &recipe.serve;
    let sliding = m.sliding_layers.unwrap_or(layers).min(layers);
    let full = layers - sliding;
    let seqs = u64::from(serve.max_batch_size);
    let step = serve
        .max_num_batched_tokens
        .unwrap_or(DEFAULT_STEP_TOKENS.max(serve.max_batch_size));
    let full_blocks = seqs * u64::from(serve.max_seq_len).div_ceil(KV_BLOCK);
    let per_seq = u64::from(window.saturating_sub(1)).div_ceil(KV_BLOCK) + 3;
    let sliding_blocks = full_blocks.min(seqs * per_seq + u64::from(step).div_ceil(KV_BLOCK));
    let layer_block =
        KV_BLOCK as f64 * 2.0 * f64::from(m.kv_heads) * f64::from(m.head_dim) * dtype_bytes;
    let blocks = u64::from(full) * full_blocks + u64::from(sliding) * sliding_blocks;
    Part::known(
        blocks as f64 * layer_block,
        format!(
            "({full} full-attention layers × {full_blocks} blocks + {sliding} sliding layers × \
             {sliding_blocks} blocks: a {window}-token window × {seqs} sequences and a step of \
             {step} tokens) × {KV_BLOCK} tokens × 2 × {} KV heads × {} dims × {} ({dtype}); \
             {} tokens × {seqs} sequences",
            m.kv_heads,
            m.head_dim,
            bytes_word(dtype_bytes),
            serve.max_seq_len
        ),
    )
}

fn recurrent_state(recipe: &Recipe) -> Part {
    let Some(m) = &recipe.model else {
        return Part::unknown("the recipe has no [model] section");
    };
    let slots = recipe
        .serve
        .ssm_cache_slots
        .unwrap_or(recipe.serve.max_batch_size);
    if let Some(mamba) = &m.mamba2 {
        let inner = mamba.heads * mamba.head_dim;
        let state = f64::from(inner) * f64::from(mamba.state_size) * 4.0;
        let conv_channels = inner + 2 * mamba.groups * mamba.state_size;
        let conv = f64::from(conv_channels) * f64::from(mamba.conv_kernel.saturating_sub(1)) * 2.0;
        return Part::known(
            f64::from(mamba.layers) * (state + conv) * f64::from(slots),
            format!(
                "{} Mamba-2 layers × {:.2} MiB (f32 state {}×{}×{} + bf16 conv state) × {slots} sequence slots",
                mamba.layers,
                (state + conv) / (1024.0 * 1024.0),
                mamba.heads,
                mamba.head_dim,
                mamba.state_size
            ),
        );
    }
    let linear_layers = m.layers - m.full_attention_layers.unwrap_or(m.layers).min(m.layers);
    if linear_layers == 0 {
        return Part::known(0.0, "no linear-attention layers".to_owned());
    }
    let Some(la) = &m.linear_attention else {
        return Part::unknown(
            "the model has linear-attention layers but [model.linear_attention] is not pinned",
        );
    };
    let state =
        f64::from(la.value_heads) * f64::from(la.key_head_dim) * f64::from(la.value_head_dim) * 4.0;
    let conv_channels = 2 * la.key_heads * la.key_head_dim + la.value_heads * la.value_head_dim;
    let conv = f64::from(conv_channels) * f64::from(la.conv_kernel.saturating_sub(1)) * 2.0;
    Part::known(
        f64::from(linear_layers) * (state + conv) * f64::from(slots),
        format!(
            "{linear_layers} layers × {:.2} MiB (f32 state {}×{}×{} + bf16 conv state) × {slots} sequence slots",
            (state + conv) / (1024.0 * 1024.0),
            la.value_heads,
            la.key_head_dim,
            la.value_head_dim
        ),
    )
}

/// Whether the recipe fits the GPUs found.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// `None` when the estimate is incomplete and its known part fits.
    pub fits: Option<bool>,
    /// GPU memory the engine may take on the GPUs the recipe uses.
    pub usable_bytes: Option<u64>,
    pub message: String,
}

pub fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / GIB)
}

pub fn check_fit(recipe: &Recipe, estimate: &Estimate, probe: &Probe) -> Verdict {
    let needed = estimate.total_bytes;
    let verdict = |fits: Option<bool>, usable: Option<u64>, message: String| Verdict {
        fits,
        usable_bytes: usable,
        message,
    };
    if let Some(why) = support::refusal(recipe) {
        return verdict(Some(false), None, format!("does not run: {why}"));
    }
    if recipe.serve.device == Device::Cpu {
        return verdict(
            Some(true),
            None,
            "fits: runs on the CPU, no GPU needed".to_owned(),
        );
    }
    if probe.gpus.is_empty() {
        let why = probe.note.as_deref().unwrap_or("no NVIDIA GPU found");
        return verdict(
            Some(false),
            Some(0),
            format!("does not fit: needs {}, has 0 GiB ({why})", gib(needed)),
        );
    }
    let wanted = recipe.requirements.gpus as usize;
    if probe.gpus.len() < wanted {
        return verdict(
            Some(false),
            None,
            format!(
                "does not fit: needs {wanted} GPUs, has {}",
                probe.gpus.len()
            ),
        );
    }
    let used = &probe.gpus[..wanted];
    if let Some(min) = recipe.requirements.compute_capability
        && let Some(gpu) = used.iter().find(|g| g.compute_capability < min)
    {
        return verdict(
            Some(false),
            None,
            format!(
                "does not fit: needs compute capability {min} or newer, GPU {} ({}) has {}",
                gpu.index, gpu.name, gpu.compute_capability
            ),
        );
    }
    let utilization = utilization(recipe);
    let usable: u64 = used
        .iter()
        .map(|g| {
            let share = (g.memory_total_bytes.unwrap_or(0) as f64 * utilization) as u64;
            share.min(g.memory_free_bytes.unwrap_or(0))
        })
        .sum();
    let sizes = format!("needs {}, has {}", gib(needed), gib(usable));
    if needed > usable {
        verdict(Some(false), Some(usable), format!("does not fit: {sizes}"))
    } else if estimate.complete {
        verdict(Some(true), Some(usable), format!("fits: {sizes}"))
    } else {
        verdict(
            None,
            Some(usable),
            format!("may fit: {sizes}, but the estimate leaves out parts it cannot size"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::Gpu;
    use crate::recipe::fixtures::hybrid;
    use crate::recipe::schema::ComputeCapability;

    fn recipe(text: &str) -> Recipe {
        toml::from_str(text).expect("test recipe parses")
    }

    #[test]
    fn parts_follow_the_formulas_by_hand() {
        let e = estimate(&recipe(&hybrid()));
        assert_eq!(e.weights.bytes, Some(27_000_000_000));
        // 16 layers × 2 × 4 heads × 256 dims × 1 byte × 1024 tokens × 2 sequences
        assert_eq!(e.kv_cache.bytes, Some(16 * 2 * 4 * 256 * 1024 * 2));
        // 48 layers × (48×128×128×4 + (2×16×128 + 48×128)×3×2) × 2 slots
        assert_eq!(
            e.recurrent_state.bytes,
            Some(48 * (48 * 128 * 128 * 4 + 10240 * 3 * 2) * 2)
        );
        let body = 27_000_000_000u64 + 16 * 2 * 4 * 256 * 1024 * 2 + 48 * 3_207_168 * 2;
        let headroom = (GIB + 0.1 * body as f64).round() as u64;
        assert_eq!(e.headroom.bytes, Some(headroom));
        assert_eq!(e.total_bytes, body + headroom);
        assert!(e.complete);
    }

    #[test]
    fn requantized_lm_head_changes_the_weights() {
        let text = hybrid().replace(
            "parameters = \"27B\"",
            "parameters = \"27B\"\n[checkpoint.requantize]\nlm_head = \"bf16\"",
        );
        let e = estimate(&recipe(&text));
        let lm_head = 5120.0 * 248320.0;
        assert_eq!(e.weights.bytes, Some((27e9 + lm_head * (2.0 - 1.0)) as u64));
    }

    #[test]
    fn missing_model_numbers_leave_the_estimate_incomplete() {
        let full = hybrid();
        let cut = full
            .find("[model.linear_attention]")
            .expect("fixture has the table");
        let e = estimate(&recipe(&full[..cut]));
        assert_eq!(e.recurrent_state.bytes, None);
        assert!(!e.complete);
        assert!(e.recurrent_state.basis.starts_with("cannot estimate"));
    }

    #[test]
    fn latent_rows_replace_the_heads_in_the_kv_cache() {
        let text = hybrid().replace(
            "[model.linear_attention]",
            "[model.latent_attention]\nkv_lora_rank = 512\nrope_head_dim = 64\n[model.linear_attention]",
        );
        let e = estimate(&recipe(&text));
        // 16 layers × (512 + 64) × 1 byte (fp8) × 1024 tokens × 2 sequences
        assert_eq!(e.kv_cache.bytes, Some(16 * 576 * 1024 * 2));
        assert!(
            e.kv_cache.basis.contains("576 latent values"),
            "{}",
            e.kv_cache.basis
        );
    }

    /// 12 of 16 layers in a 128-token window, fp8, 2 × 1024 tokens and a step of 1024: the
    /// engine's planner's blocks, by hand.
    #[test]
    fn sliding_layers_count_only_their_window() {
        let text = hybrid().replace(
            "kv_cache_dtype = \"fp8\"",
            "kv_cache_dtype = \"fp8\"\nmax_num_batched_tokens = 1024",
        );
        let mut r = recipe(&text);
        let m = r.model.as_mut().expect("model");
        m.full_attention_layers = None;
        m.linear_attention = None;
        m.layers = 16;
        m.sliding_window = Some(128);
        m.sliding_layers = Some(12);
        let e = estimate(&r);
        // 2 sequences of 1024 tokens: 128 blocks in a full layer; a sliding layer
        // 2 × (ceil(127 / 16) + 3) + 1024 / 16 = 86 blocks; a block of a layer is 16 tokens ×
        // 2 × 4 heads × 256 dims × 1 byte (fp8).
        let layer_block = 16 * 2 * 4 * 256;
        assert_eq!(
            e.kv_cache.bytes,
            Some((4 * 128 + 12 * 86) * layer_block),
            "{}",
            e.kv_cache.basis
        );
        assert!(
            e.kv_cache.basis.contains("12 sliding layers"),
            "{}",
            e.kv_cache.basis
        );
        // Every layer sliding, a window as long as the sequences: every position.
        let m = r.model.as_mut().expect("model");
        m.sliding_layers = None;
        m.sliding_window = Some(4096);
        assert_eq!(estimate(&r).kv_cache.bytes, Some(16 * 128 * layer_block),);
    }

    #[test]
    fn mamba_layers_count_their_own_state() {
        let full = hybrid();
        let cut = full
            .find("[model.linear_attention]")
            .expect("fixture has the table");
        let text = format!(
            "{}[model.mamba2]\nlayers = 27\nheads = 128\nhead_dim = 80\nstate_size = 128\n\
             groups = 8\nconv_kernel = 4\n",
            &full[..cut]
        );
        let e = estimate(&recipe(&text));
        // 27 layers × (128×80×128×4 + (128×80 + 2×8×128)×3×2) × 2 slots
        let per_layer = 128 * 80 * 128 * 4 + (128 * 80 + 2 * 8 * 128) * 3 * 2;
        assert_eq!(e.recurrent_state.bytes, Some(27 * per_layer * 2));
        assert!(e.complete);
    }

    #[test]
    fn gpus_needed_counts_a_context_on_each() {
        let r = recipe(&hybrid());
        let e = estimate(&r);
        // ~31 GiB at 0.5 of the GPU: 80 GiB GPUs give 39 GiB each after the context.
        assert_eq!(gpus_needed(&r, &e, 80.0 * GIB), Some(1));
        assert_eq!(gpus_needed(&r, &e, 40.0 * GIB), Some(2));
        // Not even 64 GPUs of 1 GiB at half use (0 after the context).
        assert_eq!(gpus_needed(&r, &e, GIB), None);
        // ~28 GiB over 11 GiB shares: 3 would do, but groups are powers of two.
        let body = e.body_bytes() as f64 * 1.1;
        assert!(3.0 * 11.0 * GIB >= body && 2.0 * 11.0 * GIB < body);
        assert_eq!(gpus_needed(&r, &e, 24.0 * GIB), Some(4));
    }

    fn gpu(total_gib: u64, free_gib: u64, cc: &str) -> Gpu {
        Gpu {
            index: 0,
            name: "Test GPU".to_owned(),
            memory_total_bytes: Some(total_gib << 30),
            memory_free_bytes: Some(free_gib << 30),
            compute_capability: cc
                .parse::<ComputeCapability>()
                .expect("test capability parses"),
        }
    }

    #[test]
    fn fit_uses_the_utilization_share_and_free_memory() {
        let r = recipe(&hybrid());
        let e = estimate(&r);
        let fit_on = |gpus: Vec<Gpu>| check_fit(&r, &e, &Probe { gpus, note: None });
        // 0.5 × 80 GiB = 40 GiB usable: enough for ~31 GiB.
        let big = fit_on(vec![gpu(80, 80, "9.0")]);
        assert_eq!(big.fits, Some(true), "{}", big.message);
        assert_eq!(big.usable_bytes, Some(40 << 30));
        // Only 20 GiB free: does not fit.
        let busy = fit_on(vec![gpu(80, 20, "9.0")]);
        assert_eq!(busy.fits, Some(false));
        assert!(
            busy.message.starts_with("does not fit: needs"),
            "{}",
            busy.message
        );
        // Too old for FP8.
        let old = fit_on(vec![gpu(80, 80, "8.0")]);
        assert_eq!(old.fits, Some(false));
        assert!(
            old.message.contains("compute capability 8.9"),
            "{}",
            old.message
        );
        // No GPU at all.
        let none = fit_on(vec![]);
        assert!(
            none.message.ends_with("has 0 GiB (no NVIDIA GPU found)"),
            "{}",
            none.message
        );
    }
}
