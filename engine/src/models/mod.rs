//! Model families, one file each. A model loads its weights onto a backend and runs one
//! varlen batch (`BatchInputs`) through the paged KV cache, returning logits for the rows that
//! asked for them.

pub mod deepseek_v3;
pub mod gemma3;
pub mod gpt_oss;
pub mod llama;
pub mod minimax_m2;
pub mod nemotron_h;
pub mod qwen3;
pub mod qwen3_5;
pub mod qwen3_moe;
mod recurrent;
pub mod registry;

use crate::backend::{Backend, BatchInputs, Feature, Result};
use crate::kv_cache::KvGroupSpec;
use crate::loader::{LoadError, ModelConfig};

/// Refuse, before any weight is read, a checkpoint that needs what `backend` cannot run.
pub fn check_backend<B: Backend>(
    backend: &B,
    c: &ModelConfig,
) -> std::result::Result<(), LoadError> {
    check_features(backend.name(), |f| backend.supports(f), c)
}

fn check_features(
    name: &str,
    supports: impl Fn(Feature) -> bool,
    c: &ModelConfig,
) -> std::result::Result<(), LoadError> {
    if c.moe.is_some() && !supports(Feature::MoeExperts) {
        return Err(LoadError::UnsupportedOnDevice(format!(
            "Qwen3-MoE ({}) does not run on the {name} backend: serve it with --device cpu",
            c.architecture
        )));
    }
    if c.fp8.is_some() && !supports(Feature::Fp8Weights) {
        return Err(LoadError::UnsupportedOnDevice(format!(
            "FP8 checkpoints (quantization_config.quant_method \"fp8\") do not run on the \
             {name} backend: serve them with --device cpu, which dequantizes them at load"
        )));
    }
    Ok(())
}

/// The paged KV cache's device memory: for each layer a k and a v tensor of
/// `[num_blocks, block_size, num_kv_heads, head_dim]`, or, for a model with multi-head latent
/// attention ([`KvStorage::latent`]), one tensor of compressed rows `[num_blocks, block_size,
/// row]` in `k` and no `v`. Which blocks belong to whom is the cache manager's business
/// (`kv_cache/`); this is only storage, addressed by the same slots either way.
pub struct KvStorage<B: Backend> {
    pub k: Vec<B::Tensor>,
    pub v: Vec<B::Tensor>,
    /// Blocks of KV group 0 (every layer's, without groups).
    pub num_blocks: usize,
    pub block_size: usize,
    /// Each layer's KV group, for a model with sliding-window layers (`kv_cache/groups.rs`):
    /// its tensors have that group's blocks and its attention reads that group's tables
    /// ([`Backend::group_batch`]). Empty: every layer in group 0.
    pub layer_group: Vec<usize>,
    /// Blocks of each KV group's pool (`[num_blocks]` without groups).
    pub group_blocks: Vec<usize>,
    /// The recurrent-state slots of a model with linear-attention layers (`None` otherwise).
    pub state: Option<StateStorage<B>>,
}

/// Recurrent-state memory for [`Model::state_spec`] models: per linear-attention layer, the conv
/// window `[slots, K − 1, C]` and the delta-rule state `[slots, nv, dk, dv]` of every slot.
/// Slot ids and what they hold are the cache manager's business (`kv_cache/state.rs`).
pub struct StateStorage<B: Backend> {
    pub conv: Vec<B::Tensor>,
    pub recurrent: Vec<B::Tensor>,
    pub num_slots: usize,
}

impl<B: Backend> StateStorage<B> {
    /// `slots` zeroed slots of `spec`'s layers (none without one), each tensor from `zeros`.
    pub fn new(
        spec: Option<StateSpec>,
        slots: usize,
        zeros: &dyn Fn(&[usize]) -> Result<B::Tensor>,
    ) -> Result<Self> {
        let spec = spec.unwrap_or(StateSpec {
            layers: 0,
            conv_elements: 0,
            recurrent_elements: 0,
        });
        let mut storage = StateStorage {
            conv: Vec::with_capacity(spec.layers),
            recurrent: Vec::with_capacity(spec.layers),
            num_slots: slots,
        };
        for _ in 0..spec.layers {
            storage.conv.push(zeros(&[slots, spec.conv_elements])?);
            storage
                .recurrent
                .push(zeros(&[slots, spec.recurrent_elements])?);
        }
        Ok(storage)
    }
}

/// The size of one recurrent-state slot, for sizing and the start-up log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateSpec {
    /// Linear-attention layers.
    pub layers: usize,
    /// Elements of one layer's conv window (`(K − 1) · C`) and recurrent state (`nv·dk·dv`).
    pub conv_elements: usize,
    pub recurrent_elements: usize,
}

impl StateSpec {
    /// Bytes of one slot across all layers, f32.
    pub fn bytes_per_slot(&self) -> usize {
        4 * self.layers * (self.conv_elements + self.recurrent_elements)
    }
}

impl<B: Backend> KvStorage<B> {
    /// A cache of one compressed row of `row` values a token a layer (DeepSeek-V3's latent
    /// `c_kv | k_pe`): `k[l]` is `[num_blocks, block_size, row]`, `v` is empty. The model
    /// that asks for it sizes it with the same row in its `kv_bytes_per_token`.
    pub fn latent(
        backend: &B,
        layers: usize,
        num_blocks: usize,
        block_size: usize,
        row: usize,
    ) -> Result<Self> {
        let k = (0..layers)
            .map(|_| backend.kv_zeros(&[num_blocks, block_size, row]))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            k,
            v: Vec::new(),
            num_blocks,
            block_size,
            layer_group: Vec::new(),
            group_blocks: vec![num_blocks],
            state: None,
        })
    }

    pub fn new(
        backend: &B,
        layers: usize,
        num_blocks: usize,
        block_size: usize,
        kv_heads: usize,
        head_dim: usize,
    ) -> Result<Self> {
        let shape = [num_blocks, block_size, kv_heads, head_dim];
        let mut k = Vec::with_capacity(layers);
        let mut v = Vec::with_capacity(layers);
        for _ in 0..layers {
            k.push(backend.kv_zeros(&shape)?);
            v.push(backend.kv_zeros(&shape)?);
        }
        Ok(Self {
            k,
            v,
            num_blocks,
            block_size,
            layer_group: Vec::new(),
            group_blocks: vec![num_blocks],
            state: None,
        })
    }

    /// A cache whose layers belong to KV groups (`groups`, as `kv_groups` makes them), group
    /// `g`'s layers with `group_blocks[g]` blocks each: a sliding group's pool holds only what
    /// its windows need.
    pub fn grouped(
        backend: &B,
        groups: &[KvGroupSpec],
        group_blocks: &[usize],
        block_size: usize,
        (kv_heads, head_dim): (usize, usize),
    ) -> Result<Self> {
        let layers: usize = groups.iter().map(|g| g.layers.len()).sum();
        let mut layer_group = vec![usize::MAX; layers];
        for (g, spec) in groups.iter().enumerate() {
            for &l in &spec.layers {
                if let Some(slot) = layer_group.get_mut(l) {
                    *slot = g;
                }
            }
        }
        if groups.len() != group_blocks.len() || layer_group.contains(&usize::MAX) {
            return Err(crate::backend::BackendError::Shape {
                op: "grouped KV cache",
                message: format!(
                    "{} groups of {layers} layers with {} pool sizes: every layer must be in \
                     exactly one group, each group with a pool",
                    groups.len(),
                    group_blocks.len()
                ),
            });
        }
        let mut k = Vec::with_capacity(layers);
        let mut v = Vec::with_capacity(layers);
        for &g in &layer_group {
            let shape = [group_blocks[g], block_size, kv_heads, head_dim];
            k.push(backend.kv_zeros(&shape)?);
            v.push(backend.kv_zeros(&shape)?);
        }
        Ok(Self {
            k,
            v,
            num_blocks: group_blocks[0],
            block_size,
            layer_group,
            group_blocks: group_blocks.to_vec(),
            state: None,
        })
    }

    /// Layer `l`'s KV group.
    pub fn group_of(&self, l: usize) -> usize {
        self.layer_group.get(l).copied().unwrap_or(0)
    }

    /// Blocks in group `g`'s pool.
    pub fn blocks_of(&self, g: usize) -> usize {
        self.group_blocks.get(g).copied().unwrap_or(self.num_blocks)
    }
}

/// A KV cache of `num_blocks` blocks for every layer of `c` (each layer k and v
/// `[num_blocks, block_size, num_kv_heads, head_dim]`), and the bytes one token takes in it:
/// what every model whose layers all keep keys and values needs (Llama, Mistral, Gemma 3,
/// gpt-oss).
pub(crate) fn all_layers_kv<B: Backend>(
    backend: &B,
    c: &ModelConfig,
    num_blocks: usize,
    block_size: usize,
) -> Result<KvStorage<B>> {
    all_layers_kv_of(backend, c, c.num_key_value_heads, (num_blocks, block_size))
}

/// [`all_layers_kv`] with `nkv` key/value heads a layer (a tensor-parallel rank's share).
pub(crate) fn all_layers_kv_of<B: Backend>(
    backend: &B,
    c: &ModelConfig,
    nkv: usize,
    (num_blocks, block_size): (usize, usize),
) -> Result<KvStorage<B>> {
    let layers = c.num_hidden_layers;
    KvStorage::new(backend, layers, num_blocks, block_size, nkv, c.head_dim)
}

/// Bytes one cached token takes in [`all_layers_kv`]'s cache (k and v of every layer).
pub(crate) fn all_layers_kv_bytes<B: Backend>(backend: &B, c: &ModelConfig) -> usize {
    all_layers_kv_bytes_of(backend, c, c.num_key_value_heads)
}

/// [`all_layers_kv_bytes`] with `nkv` key/value heads a layer.
pub(crate) fn all_layers_kv_bytes_of<B: Backend>(
    backend: &B,
    c: &ModelConfig,
    nkv: usize,
) -> usize {
    2 * c.num_hidden_layers * nkv * backend.kv_head_bytes(c.head_dim)
}

/// Activation bytes of a forward of `tokens` tokens (`logits_rows` of them scored) through a
/// model whose every layer is attention then `top_k` of `experts` routed experts (gpt-oss,
/// MiniMax-M2): x, xn, qkv, attn, proj and the router's logits, the experts' gathered rows,
/// gate|up and activations for every routed (token, expert) pair, then the gathered rows and
/// their logits; doubled for allocator slack and the backend's temporaries.
pub(crate) fn routed_activation_bytes(
    c: &ModelConfig,
    (experts, top_k): (usize, usize),
    tokens: usize,
    logits_rows: usize,
) -> usize {
    let per_token = 3 * c.hidden_size
        + (2 * c.num_attention_heads + 2 * c.num_key_value_heads) * c.head_dim
        + experts
        + top_k * (2 * c.hidden_size + 3 * c.intermediate_size);
    let rows = logits_rows.min(tokens);
    2 * 4 * (tokens * per_token + rows * (c.hidden_size + c.vocab_size))
}

/// The last step of a forward: `logits = xn[rows] · headᵀ` for the batch's logits rows
/// (`xn` `[T, H]`, final-normed; `head` `[V, H]`), `[R, V]`.
pub(crate) fn lm_head_logits<B: Backend>(
    b: &B,
    xn: &B::Tensor,
    host: &BatchInputs,
    batch: &B::Batch,
    head: &B::Tensor,
) -> Result<B::Tensor> {
    let (vocab, hidden) = match b.shape(head) {
        [v, h] => (*v, *h),
        other => {
            return Err(crate::backend::BackendError::Shape {
                op: "lm_head_logits",
                message: format!("head {other:?} is not [vocab, hidden]"),
            });
        }
    };
    let rows = host.logits_rows.len();
    let mut last = b.zeros(&[rows, hidden])?; // [R, H]
    b.gather_rows(&mut last, xn, batch)?;
    let mut logits = b.zeros(&[rows, vocab])?; // [R, V]
    b.matmul(&mut logits, &last, head)?;
    Ok(logits)
}

fn no_mtp(op: &'static str) -> crate::backend::BackendError {
    crate::backend::BackendError::Shape {
        op,
        message: "this model has no MTP head (speculative decoding)".into(),
    }
}

/// What the engine needs from any model family.
pub trait Model<B: Backend>: Send {
    /// Logits `[batch.logits_rows.len(), vocab]` for the batch, after writing its keys and
    /// values into `kv`.
    fn forward(
        &self,
        backend: &B,
        host: &BatchInputs,
        batch: &B::Batch,
        kv: &mut KvStorage<B>,
    ) -> Result<B::Tensor>;
    /// Allocate a KV cache of `num_blocks` blocks.
    fn new_kv_storage(
        &self,
        backend: &B,
        num_blocks: usize,
        block_size: usize,
    ) -> Result<KvStorage<B>>;
    /// Bytes one cached token takes across all layers (k and v) in `backend`'s cache, for sizing
    /// the cache.
    fn kv_bytes_per_token(&self, backend: &B) -> usize;
    /// Each layer's sliding window (`None`: full attention), for a model whose KV cache can
    /// keep only the window of its sliding layers (KV groups, `kv_cache/groups.rs`); empty for
    /// a model that keeps every position of every layer. The layers must all take the same
    /// bytes a token ([`Model::kv_bytes_per_token`] over the layers).
    fn kv_windows(&self) -> Vec<Option<usize>> {
        Vec::new()
    }
    /// The KV heads this rank's layers cache and their head dimension, for a model with KV
    /// groups ([`Model::kv_windows`] not empty); `None` for one without.
    fn kv_group_heads(&self) -> Option<(usize, usize)> {
        None
    }
    /// A KV cache of group `g`'s layers with `group_blocks[g]` blocks each (only called when
    /// [`Model::kv_windows`] is not empty).
    fn new_grouped_kv_storage(
        &self,
        backend: &B,
        groups: &[KvGroupSpec],
        group_blocks: &[usize],
        block_size: usize,
    ) -> Result<KvStorage<B>> {
        let heads = self
            .kv_group_heads()
            .ok_or_else(|| crate::backend::BackendError::Shape {
                op: "new_grouped_kv_storage",
                message: "this model keeps every position of every layer (no KV groups)".into(),
            })?;
        KvStorage::grouped(backend, groups, group_blocks, block_size, heads)
    }
    /// An upper bound on the activation memory of one step of `tokens` tokens with up to
    /// `logits_rows` rows of logits (f32 everywhere), for sizing the KV cache next to it.
    fn activation_bytes(&self, tokens: usize, logits_rows: usize) -> usize;
    fn vocab_size(&self) -> usize;
    fn max_position_embeddings(&self) -> usize;
    /// The per-sequence recurrent state beside the KV cache, for models with linear-attention
    /// layers; `None` (no state machinery at all) for the others.
    fn state_spec(&self) -> Option<StateSpec> {
        None
    }
    /// Whether the model loaded an MTP head (speculative decoding). The next three calls are
    /// for such models only; the others refuse them.
    fn has_mtp(&self) -> bool {
        false
    }
    /// [`Model::forward`], also returning the final-normed hidden state of every row `[T, H]`
    /// (the MTP head's input).
    fn forward_with_hidden(
        &self,
        _backend: &B,
        _host: &BatchInputs,
        _batch: &B::Batch,
        _kv: &mut KvStorage<B>,
    ) -> Result<(B::Tensor, B::Tensor)> {
        Err(no_mtp("forward_with_hidden"))
    }
    /// One pass of the MTP head over the batch: row `i` is the token after target row `i`
    /// (`host`'s tokens) with that row's hidden state (`hidden` `[T, H]`), at the target row's
    /// position, its keys and values written to the head's own cache layer. Returns the
    /// logits of `host.logits_rows` `[R, V]` and the head's normed output for those rows
    /// `[R, H]` (the hidden input of the next draft).
    fn mtp_forward(
        &self,
        _backend: &B,
        _host: &BatchInputs,
        _batch: &B::Batch,
        _hidden: &B::Tensor,
        _kv: &mut KvStorage<B>,
    ) -> Result<(B::Tensor, B::Tensor)> {
        Err(no_mtp("mtp_forward"))
    }
    /// The MTP head's keys and values for every row, nothing else: what a step needs of the
    /// head while no sequence drafts (drafting paused), so the head's cache stays complete
    /// for when drafting resumes. Writes what [`Model::mtp_forward`] writes to the cache.
    fn mtp_fill_cache(
        &self,
        backend: &B,
        host: &BatchInputs,
        batch: &B::Batch,
        hidden: &B::Tensor,
        kv: &mut KvStorage<B>,
    ) -> Result<()> {
        self.mtp_forward(backend, host, batch, hidden, kv).map(drop)
    }
    /// Allocate `slots` recurrent-state slots (only called when `state_spec` is `Some`).
    fn new_state_storage(&self, backend: &B, slots: usize) -> Result<StateStorage<B>> {
        StateStorage::new(self.state_spec(), slots, &|shape| backend.zeros(shape))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a backend that supports neither answers: the family, the backend, and the device
    /// that runs it.
    #[test]
    fn a_backend_without_moe_or_fp8_refuses_them_by_name() {
        let dense = ModelConfig::from_json(
            r#"{"architectures": ["Qwen3MoeForCausalLM"], "vocab_size": 64, "hidden_size": 32,
                "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "num_experts": 4,
                "num_experts_per_tok": 2, "moe_intermediate_size": 16}"#,
        )
        .expect("valid");
        let none = |_: Feature| false;
        let e = check_features("cuda", none, &dense)
            .expect_err("moe")
            .to_string();
        assert!(
            e.contains("Qwen3-MoE") && e.contains("--device cpu") && e.contains("cuda"),
            "{e}"
        );
        let fp8 = ModelConfig {
            moe: None,
            architecture: "Qwen3ForCausalLM".into(),
            fp8: Some(crate::loader::Fp8Config { block: [128, 128] }),
            ..dense.clone()
        };
        let e = check_features("cuda", none, &fp8)
            .expect_err("fp8")
            .to_string();
        assert!(
            e.contains("FP8") && e.contains("--device cpu") && e.contains("cuda"),
            "{e}"
        );
        check_features("cpu", |_| true, &dense).expect("the cpu runs both");
        check_backend(&crate::backend::CpuBackend::default(), &fp8).expect("the cpu runs both");
    }
}
