//! Llama 3.x (`LlamaForCausalLM`) and Mistral (`MistralForCausalLM`, and the text model of
//! `Mistral3ForConditionalGeneration` checkpoints such as Mistral Small 3.2): GQA attention
//! with rotary embeddings (plain, linear, `llama3` or YaRN scaling) and no QK-norm, SwiGLU MLP,
//! pre-norm residual blocks, tied or untied LM head. Mistral's `sliding_window`, where the
//! config sets one, limits every layer's attention to the last `w` positions
//! ([`Backend::paged_attention_window`]); the layers are then one sliding KV group whose cache
//! keeps only the window ([`Model::kv_windows`], `kv_cache/grouped.rs`).
//!
//! The forward is Qwen3's (`qwen3.rs`) without the QK-norm: q|k|v and gate|up fused at load.
//! Loaded with a group ([`Llama::load_sharded`]), one rank of it, cut as Qwen3 is
//! (`parallel/plan.rs`).

use std::sync::Arc;

use crate::backend::{Backend, BatchInputs, Feature, Result, RopeTables};
use crate::loader::{HostTensor, LoadError, TensorKind, Weights};
use crate::parallel::Collective;
use crate::parallel::plan::{Plan, Tp};

use super::{
    KvStorage, Model, all_layers_kv_bytes_of, all_layers_kv_of, check_backend, lm_head_logits,
};

mod config;

pub use config::{HARMLESS_KEYS, LlamaConfig, check_known_keys, sliding_layer_types};

struct Layer<B: Backend> {
    input_norm: B::Tensor, // [H]
    qkv: B::Tensor,        // [(nh + 2·nkv)·hd, H]
    o: B::Tensor,          // [H, nh·hd]
    post_norm: B::Tensor,  // [H]
    gate_up: B::Tensor,    // [2·I, H]
    down: B::Tensor,       // [H, I]
}

pub struct Llama<B: Backend> {
    pub config: LlamaConfig,
    embed: B::Tensor, // [V, H]
    layers: Vec<Layer<B>>,
    norm: B::Tensor,            // [H]
    lm_head: Option<B::Tensor>, // [V, H] (this rank's rows); None when tied to `embed`
    rope: RopeTables,
    /// The tensor-parallel group this model is a rank of (none: the whole model).
    tp: Tp<B>,
    /// This rank's query heads, key/value heads and MLP width.
    local: (usize, usize, usize),
}

/// Where a text model's weights are: the decoder's prefix (`model` for `*ForCausalLM`; the
/// Hub's multimodal layouts keep it under `model.language_model`, as transformers 5 saves
/// them, or `language_model.model`, as older releases did) and the LM head's name.
pub(super) fn text_weight_names(w: &Weights, architecture: &str) -> (String, String) {
    if !architecture.ends_with("ForConditionalGeneration") {
        return ("model".into(), "lm_head.weight".into());
    }
    if w.contains("language_model.model.embed_tokens.weight")
        && !w.contains("model.language_model.embed_tokens.weight")
    {
        return (
            "language_model.model".into(),
            "language_model.lm_head.weight".into(),
        );
    }
    ("model.language_model".into(), "lm_head.weight".into())
}

/// A backend error at load, as a load error.
pub(super) fn upload_err(e: crate::backend::BackendError) -> LoadError {
    LoadError::Config {
        path: "weights".into(),
        message: e.to_string(),
    }
}

impl<B: Backend> Llama<B> {
    /// Load the checkpoint's weights onto `backend`, calling `layer_done(n)` after the n-th
    /// decoder layer.
    pub fn load(
        backend: &B,
        config: &LlamaConfig,
        w: &Weights,
        layer_done: &mut dyn FnMut(usize),
    ) -> std::result::Result<Self, LoadError> {
        Self::load_sharded(backend, config, w, None, layer_done)
    }

    /// [`Llama::load`] as one rank of `tp`'s group (the whole model without one).
    pub fn load_sharded(
        backend: &B,
        config: &LlamaConfig,
        w: &Weights,
        tp: Option<Arc<dyn Collective<B>>>,
        layer_done: &mut dyn FnMut(usize),
    ) -> std::result::Result<Self, LoadError> {
        let c = &config.base;
        check_backend(backend, c)?;
        if config.sliding_window.is_some() && !backend.supports(Feature::SlidingWindow) {
            return Err(LoadError::UnsupportedOnDevice(format!(
                "{} with sliding_window = {} needs sliding-window attention, which the {} \
                 backend does not run yet: serve it with --device cpu",
                c.architecture,
                config.sliding_window.unwrap_or_default(),
                backend.name()
            )));
        }
        let (h, hd, nh, nkv, i) = (
            c.hidden_size,
            c.head_dim,
            c.num_attention_heads,
            c.num_key_value_heads,
            c.intermediate_size,
        );
        let up = |t: HostTensor<'_>| backend.upload(&t).map_err(upload_err);
        let mat = |name: &str, shape: &[usize]| w.get(name, shape, TensorKind::Matrix);
        let norm = |name: &str, n: usize| w.get(name, &[n], TensorKind::Norm);
        let (model, head_name) = text_weight_names(w, &c.architecture);
        let tp = Tp(tp);
        let plan = Plan::new(tp.shard(), (nh, nkv, hd), i, c.vocab_size)?;

        let mut layers = Vec::with_capacity(c.num_hidden_layers);
        for l in 0..c.num_hidden_layers {
            let p = format!("{model}.layers.{l}");
            let qkv = plan.qkv(
                mat(&format!("{p}.self_attn.q_proj.weight"), &[nh * hd, h])?,
                mat(&format!("{p}.self_attn.k_proj.weight"), &[nkv * hd, h])?,
                mat(&format!("{p}.self_attn.v_proj.weight"), &[nkv * hd, h])?,
            );
            let gate_up = plan.gate_up(
                mat(&format!("{p}.mlp.gate_proj.weight"), &[i, h])?,
                mat(&format!("{p}.mlp.up_proj.weight"), &[i, h])?,
            );
            layers.push(Layer {
                input_norm: up(norm(&format!("{p}.input_layernorm.weight"), h)?)?,
                qkv: up(qkv)?,
                o: up(plan.o(mat(&format!("{p}.self_attn.o_proj.weight"), &[h, nh * hd])?))?,
                post_norm: up(norm(&format!("{p}.post_attention_layernorm.weight"), h)?)?,
                gate_up: up(gate_up)?,
                down: up(plan.down(mat(&format!("{p}.mlp.down_proj.weight"), &[h, i])?))?,
            });
            layer_done(l + 1);
        }
        let embed = up(mat(
            &format!("{model}.embed_tokens.weight"),
            &[c.vocab_size, h],
        )?)?;
        // A tied checkpoint may still carry lm_head.weight (a copy); untied ones must. A rank
        // of several keeps its vocabulary rows of the head, tied or not.
        let embed_name = format!("{model}.embed_tokens.weight");
        let sharded = plan.head_rows(c.tie_word_embeddings, (&embed_name, &head_name), |n| {
            mat(n, &[c.vocab_size, h])
        })?;
        let lm_head = if let Some(rows) = sharded {
            Some(up(rows)?)
        } else if c.tie_word_embeddings {
            None
        } else {
            Some(up(mat(&head_name, &[c.vocab_size, h])?)?)
        };
        let (inv_freq, scale) = c.rope.inv_freq(hd);
        Ok(Self {
            config: config.clone(),
            embed,
            layers,
            norm: up(norm(&format!("{model}.norm.weight"), h)?)?,
            lm_head,
            rope: RopeTables {
                rotary_dim: 2 * inv_freq.len(),
                inv_freq,
                scale,
            },
            tp,
            local: plan.local(),
        })
    }
}

impl<B: Backend> Model<B> for Llama<B> {
    fn forward(
        &self,
        b: &B,
        host: &BatchInputs,
        batch: &B::Batch,
        kv: &mut KvStorage<B>,
    ) -> Result<B::Tensor> {
        let c = &self.config.base;
        let (t, h, hd) = (host.num_tokens(), c.hidden_size, c.head_dim);
        // This rank's heads and MLP width (all of them without a group).
        let (nh, nkv, i) = self.local;
        let scale = 1.0 / (hd as f32).sqrt();
        let mut x = b.zeros(&[t, h])?; // residual stream [T, H]
        let mut xn = b.zeros(&[t, h])?; // normalised input of a sub-block [T, H]
        let mut qkv = b.zeros(&[t, (nh + 2 * nkv) * hd])?; // [T, (nh + 2·nkv)·hd]
        let mut attn = b.zeros(&[t, nh * hd])?; // [T, nh·hd]
        let mut proj = b.zeros(&[t, h])?; // sub-block output [T, H]
        let mut gate_up = b.zeros(&[t, 2 * i])?; // [T, 2·I]
        let mut act = b.zeros(&[t, i])?; // [T, I]

        // x = embed[tokens]
        b.embedding(&mut x, batch, &self.embed)?;
        // The first block's norm has no residual to add.
        b.rms_norm(&mut xn, &x, &self.layers[0].input_norm, c.rms_norm_eps)?;
        for (l, layer) in self.layers.iter().enumerate() {
            // Attention: qkv = xn · Wqkvᵀ; RoPE on q, k; cache k, v; attend (in the window,
            // if any); project.
            // The layer's KV group's slots and tables (with a window, only the window's kept).
            let gb = b.group_batch(batch, kv.group_of(l))?;
            b.matmul(&mut qkv, &xn, &layer.qkv)?;
            b.rope_write_kv(
                &mut qkv,
                gb,
                &self.rope,
                nh,
                nkv,
                &mut kv.k[l],
                &mut kv.v[l],
            )?;
            match self.config.sliding_window {
                None => b.paged_attention(&mut attn, &qkv, &kv.k[l], &kv.v[l], gb, nh, scale)?,
                Some(w) => {
                    b.paged_attention_window(&mut attn, &qkv, &kv.k[l], &kv.v[l], gb, nh, scale, w)?
                }
            }
            b.matmul(&mut proj, &attn, &layer.o)?;
            self.tp.all_reduce(b, &mut proj)?;
            // x += attention; xn = post_norm(x)
            b.add_rms_norm(&mut xn, &mut x, &proj, &layer.post_norm, c.rms_norm_eps)?;
            // MLP: down(silu(gate) * up)
            b.matmul_silu_mul(&mut act, &mut gate_up, &xn, &layer.gate_up)?;
            b.matmul(&mut proj, &act, &layer.down)?;
            self.tp.all_reduce(b, &mut proj)?;
            // x += mlp; xn = next block's input norm (or the final norm)
            let next_norm = self.layers.get(l + 1).map_or(&self.norm, |n| &n.input_norm);
            b.add_rms_norm(&mut xn, &mut x, &proj, next_norm, c.rms_norm_eps)?;
        }
        // logits = norm(x)[rows] · lm_headᵀ
        let head = self.lm_head.as_ref().unwrap_or(&self.embed);
        self.tp
            .logits(b, lm_head_logits(b, &xn, host, batch, head)?)
    }

    fn new_kv_storage(
        &self,
        backend: &B,
        num_blocks: usize,
        block_size: usize,
    ) -> Result<KvStorage<B>> {
        all_layers_kv_of(
            backend,
            &self.config.base,
            self.local.1,
            (num_blocks, block_size),
        )
    }

    fn kv_bytes_per_token(&self, backend: &B) -> usize {
        all_layers_kv_bytes_of(backend, &self.config.base, self.local.1)
    }

    fn kv_windows(&self) -> Vec<Option<usize>> {
        match self.config.sliding_window {
            None => Vec::new(),
            Some(w) => vec![Some(w); self.layers.len()],
        }
    }

    fn kv_group_heads(&self) -> Option<(usize, usize)> {
        Some((self.local.1, self.config.base.head_dim))
    }

    fn activation_bytes(&self, tokens: usize, logits_rows: usize) -> usize {
        let c = &self.config.base;
        // x, xn, qkv, attn, proj, gate_up, act (see `forward`), then the gathered rows and
        // their logits; doubled for allocator slack and the backend's temporaries.
        let per_token = 3 * c.hidden_size
            + (2 * c.num_attention_heads + 2 * c.num_key_value_heads) * c.head_dim
            + 3 * c.intermediate_size;
        let rows = logits_rows.min(tokens);
        2 * 4 * (tokens * per_token + rows * (c.hidden_size + c.vocab_size))
    }

    fn vocab_size(&self) -> usize {
        self.config.base.vocab_size
    }

    fn max_position_embeddings(&self) -> usize {
        self.config.base.max_position_embeddings
    }
}
