//! Gemma 3 text models (`Gemma3ForCausalLM`, and the text model of
//! `Gemma3ForConditionalGeneration`, whose vision tower is ignored).
//!
//! What differs from Llama (`llama.rs`):
//! - embeddings are scaled by `sqrt(hidden_size)` (the tied LM head reads the table unscaled);
//! - every RMSNorm multiplies by `1 + w` (weights stored around zero): `1` is added at load so
//!   the backend's plain `x̂ · w` norm serves; q and k get such a norm per head (QK-norm);
//! - each block is sandwiched: `x += post_norm(block(pre_norm(x)))`, for attention and MLP;
//! - the MLP is gated GELU (tanh approximation): `down(gelu_tanh(gate) · up)`;
//! - attention scores are scaled by `query_pre_attn_scalar^-1/2`;
//! - layers follow `layer_types`: sliding-window (local) layers, with their own rotary base
//!   (`rope_local_base_freq`, 10 000), interleaved with global ones (`rope_theta`, 1 000 000,
//!   with the config's scaling, linear ×8 for the 4B-27B models).
//!
//! Local layers attend to the last `sliding_window` positions
//! ([`Backend::paged_attention_window`]); on a backend that runs KV groups they are one sliding
//! group whose cache keeps only the window ([`Model::kv_windows`], `kv_cache/grouped.rs`).

use crate::backend::{Backend, BatchInputs, Feature, Result, RopeTables};
use std::borrow::Cow;

use crate::loader::config::RopeConfig;
use crate::loader::{DType, HostData, HostTensor, LoadError, TensorKind, Weights};

use super::llama::{text_weight_names, upload_err};
use super::{
    KvStorage, Model, all_layers_kv_bytes_of, all_layers_kv_of, check_backend, lm_head_logits,
};
use crate::parallel::Collective;
use crate::parallel::plan::{Plan, Tp};

mod config;

pub use config::Gemma3Config;

struct Layer<B: Backend> {
    input_norm: B::Tensor,     // [H], 1 + w
    qkv: B::Tensor,            // [(nh + 2·nkv)·hd, H]
    q_norm: B::Tensor,         // [hd], 1 + w
    k_norm: B::Tensor,         // [hd], 1 + w
    o: B::Tensor,              // [H, nh·hd]
    post_attn_norm: B::Tensor, // [H], 1 + w
    pre_mlp_norm: B::Tensor,   // [H], 1 + w
    gate_up: B::Tensor,        // [2·I, H]
    down: B::Tensor,           // [H, I]
    post_mlp_norm: B::Tensor,  // [H], 1 + w
    /// A local layer: attention in the sliding window, with the local rotary tables.
    sliding: bool,
}

pub struct Gemma3<B: Backend> {
    pub config: Gemma3Config,
    embed: B::Tensor, // [V, H], unscaled
    layers: Vec<Layer<B>>,
    norm: B::Tensor,            // [H], 1 + w
    lm_head: Option<B::Tensor>, // [V, H] (this rank's rows); None when tied to `embed`
    global_rope: RopeTables,
    local_rope: RopeTables,
    /// The tensor-parallel group this model is a rank of (none: the whole model).
    tp: Tp<B>,
    /// This rank's query heads, key/value heads and MLP width.
    local: (usize, usize, usize),
}

fn tables(rope: &RopeConfig, head_dim: usize) -> RopeTables {
    let (inv_freq, scale) = rope.inv_freq(head_dim);
    RopeTables {
        rotary_dim: 2 * inv_freq.len(),
        inv_freq,
        scale,
    }
}

impl<B: Backend> Gemma3<B> {
    /// Load the checkpoint's weights onto `backend`, calling `layer_done(n)` after the n-th
    /// decoder layer.
    pub fn load(
        backend: &B,
        config: &Gemma3Config,
        w: &Weights,
        layer_done: &mut dyn FnMut(usize),
    ) -> std::result::Result<Self, LoadError> {
        Self::load_sharded(backend, config, w, None, layer_done)
    }

    /// [`Gemma3::load`] as one rank of `tp`'s group (`parallel/plan.rs`'s cuts; the
    /// all-reduces come before the post-norms, which need whole sums).
    pub fn load_sharded(
        backend: &B,
        config: &Gemma3Config,
        w: &Weights,
        tp: Option<std::sync::Arc<dyn Collective<B>>>,
        layer_done: &mut dyn FnMut(usize),
    ) -> std::result::Result<Self, LoadError> {
        let c = &config.base;
        check_backend(backend, c)?;
        if config.window().is_some() && !backend.supports(Feature::SlidingWindow) {
            return Err(LoadError::UnsupportedOnDevice(format!(
                "{}'s local layers need sliding-window attention, which the {} backend does \
                 not run yet: serve it with --device cpu",
                c.architecture,
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
        // A zero-centred norm weight as the plain multiplier `1 + w` (in f32, as transformers
        // computes `1.0 + weight.float()`).
        let norm = |name: &str, n: usize| -> std::result::Result<B::Tensor, LoadError> {
            let t = w.get(name, &[n], TensorKind::Norm)?;
            let v: Vec<f32> = t.to_f32().iter().map(|x| x + 1.0).collect();
            up(HostTensor {
                shape: vec![n],
                data: HostData::Raw {
                    dtype: DType::F32,
                    bytes: Cow::Owned(v.iter().flat_map(|x| x.to_le_bytes()).collect()),
                },
            })
        };
        let (model, head_name) = text_weight_names(w, &c.architecture);
        let tp = Tp(tp);
        let plan = Plan::new(tp.shard(), (nh, nkv, hd), i, c.vocab_size)?;

        let mut layers = Vec::with_capacity(c.num_hidden_layers);
        for (l, &sliding) in config.sliding.iter().enumerate() {
            let p = format!("{model}.layers.{l}");
            let a = format!("{p}.self_attn");
            let qkv = plan.qkv(
                mat(&format!("{a}.q_proj.weight"), &[nh * hd, h])?,
                mat(&format!("{a}.k_proj.weight"), &[nkv * hd, h])?,
                mat(&format!("{a}.v_proj.weight"), &[nkv * hd, h])?,
            );
            let gate_up = plan.gate_up(
                mat(&format!("{p}.mlp.gate_proj.weight"), &[i, h])?,
                mat(&format!("{p}.mlp.up_proj.weight"), &[i, h])?,
            );
            layers.push(Layer {
                input_norm: norm(&format!("{p}.input_layernorm.weight"), h)?,
                qkv: up(qkv)?,
                q_norm: norm(&format!("{a}.q_norm.weight"), hd)?,
                k_norm: norm(&format!("{a}.k_norm.weight"), hd)?,
                o: up(plan.o(mat(&format!("{a}.o_proj.weight"), &[h, nh * hd])?))?,
                post_attn_norm: norm(&format!("{p}.post_attention_layernorm.weight"), h)?,
                pre_mlp_norm: norm(&format!("{p}.pre_feedforward_layernorm.weight"), h)?,
                gate_up: up(gate_up)?,
                down: up(plan.down(mat(&format!("{p}.mlp.down_proj.weight"), &[h, i])?))?,
                post_mlp_norm: norm(&format!("{p}.post_feedforward_layernorm.weight"), h)?,
                sliding,
            });
            layer_done(l + 1);
        }
        let embed = up(mat(
            &format!("{model}.embed_tokens.weight"),
            &[c.vocab_size, h],
        )?)?;
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
        Ok(Self {
            config: config.clone(),
            embed,
            layers,
            norm: norm(&format!("{model}.norm.weight"), h)?,
            lm_head,
            global_rope: tables(&config.global_rope, hd),
            local_rope: tables(&config.local_rope, hd),
            tp,
            local: plan.local(),
        })
    }
}

impl<B: Backend> Model<B> for Gemma3<B> {
    fn forward(
        &self,
        b: &B,
        host: &BatchInputs,
        batch: &B::Batch,
        kv: &mut KvStorage<B>,
    ) -> Result<B::Tensor> {
        let c = &self.config.base;
        let (t, h, hd, eps) = (host.num_tokens(), c.hidden_size, c.head_dim, c.rms_norm_eps);
        // This rank's heads and MLP width (all of them without a group).
        let (nh, nkv, i) = self.local;
        let scale = (1.0 / self.config.query_pre_attn_scalar.sqrt()) as f32;
        let mut x = b.zeros(&[t, h])?; // residual stream [T, H]
        let mut xn = b.zeros(&[t, h])?; // normalised input of a sub-block [T, H]
        let mut qkv = b.zeros(&[t, (nh + 2 * nkv) * hd])?; // [T, (nh + 2·nkv)·hd]
        let mut attn = b.zeros(&[t, nh * hd])?; // [T, nh·hd]
        let mut proj = b.zeros(&[t, h])?; // sub-block output [T, H]
        let mut normed = b.zeros(&[t, h])?; // sub-block output, post-normed [T, H]
        let mut gate_up = b.zeros(&[t, 2 * i])?; // [T, 2·I]
        let mut act = b.zeros(&[t, i])?; // [T, I]

        // x = embed[tokens] · sqrt(H)
        b.embedding(&mut x, batch, &self.embed)?;
        b.scale(&mut x, (h as f32).sqrt())?;
        b.rms_norm(&mut xn, &x, &self.layers[0].input_norm, eps)?;
        for (l, layer) in self.layers.iter().enumerate() {
            // Attention: qkv = xn · Wqkvᵀ; QK-norm and RoPE (local or global) on q, k; cache
            // k, v; attend (in the window for a local layer); project.
            let rope = if layer.sliding {
                &self.local_rope
            } else {
                &self.global_rope
            };
            // The layer's KV group's slots and tables (a sliding layer keeps only its window).
            let gb = b.group_batch(batch, kv.group_of(l))?;
            b.matmul(&mut qkv, &xn, &layer.qkv)?;
            b.qk_norm_rope_write_kv(
                &mut qkv,
                gb,
                &layer.q_norm,
                &layer.k_norm,
                rope,
                (nh, nkv, eps),
                &mut kv.k[l],
                &mut kv.v[l],
            )?;
            match self.config.window() {
                Some(w) if layer.sliding => {
                    b.paged_attention_window(&mut attn, &qkv, &kv.k[l], &kv.v[l], gb, nh, scale, w)?
                }
                _ => b.paged_attention(&mut attn, &qkv, &kv.k[l], &kv.v[l], gb, nh, scale)?,
            }
            b.matmul(&mut proj, &attn, &layer.o)?;
            self.tp.all_reduce(b, &mut proj)?;
            // x += post_attn_norm(attention); xn = pre_mlp_norm(x)
            b.rms_norm(&mut normed, &proj, &layer.post_attn_norm, eps)?;
            b.add_rms_norm(&mut xn, &mut x, &normed, &layer.pre_mlp_norm, eps)?;
            // MLP: down(gelu_tanh(gate) * up)
            b.matmul(&mut gate_up, &xn, &layer.gate_up)?;
            b.gelu_tanh_mul(&mut act, &gate_up)?;
            b.matmul(&mut proj, &act, &layer.down)?;
            self.tp.all_reduce(b, &mut proj)?;
            // x += post_mlp_norm(mlp); xn = next block's input norm (or the final norm)
            b.rms_norm(&mut normed, &proj, &layer.post_mlp_norm, eps)?;
            let next_norm = self.layers.get(l + 1).map_or(&self.norm, |n| &n.input_norm);
            b.add_rms_norm(&mut xn, &mut x, &normed, next_norm, eps)?;
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
        let window = self.config.window();
        self.layers
            .iter()
            .map(|layer| window.filter(|_| layer.sliding))
            .collect()
    }

    fn kv_group_heads(&self) -> Option<(usize, usize)> {
        Some((self.local.1, self.config.base.head_dim))
    }

    fn activation_bytes(&self, tokens: usize, logits_rows: usize) -> usize {
        let c = &self.config.base;
        // x, xn, qkv, attn, proj, normed, gate_up, act (see `forward`), then the gathered rows
        // and their logits; doubled for allocator slack and the backend's temporaries.
        let per_token = 4 * c.hidden_size
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
