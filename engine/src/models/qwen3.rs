//! Qwen3 dense (`Qwen3ForCausalLM`): GQA attention with per-head RMSNorm on q and k (QK-norm),
//! rotary embeddings, SwiGLU MLP, pre-norm residual blocks, tied or untied LM head.
//!
//! Projections are fused at load time: q|k|v into one `[(nh + 2·nkv)·hd, H]` matrix and
//! gate|up into one `[2·I, H]` matrix, so each block runs three GEMMs where the checkpoint has
//! seven.
//!
//! The same code runs Qwen3-MoE (`Qwen3MoeForCausalLM`): its sparse layers' MLP is a
//! [`SparseMoe`] (`qwen3_moe.rs`), everything else is identical.
//!
//! Loaded with a [`Collective`] ([`Qwen3::load_sharded`]), the model is one rank of a
//! tensor-parallel group (`parallel/mod.rs`): its heads, MLP width (each expert's, in sparse
//! layers) and head vocabulary are the rank's slice, and each block's attention and MLP outputs
//! are all-reduced.

use std::sync::Arc;

use crate::backend::{Backend, BatchInputs, Result, RopeTables};
use crate::loader::{HostTensor, LoadError, ModelConfig, TensorKind, Weights};
use crate::parallel::Collective;
use crate::parallel::plan::{Plan, Tp};

use super::qwen3_moe::SparseMoe;
use super::{
    KvStorage, Model, all_layers_kv_bytes_of, all_layers_kv_of, check_backend, lm_head_logits,
};

/// A decoder layer's MLP.
pub enum Mlp<B: Backend> {
    /// SwiGLU of width `intermediate_size`.
    Dense {
        gate_up: B::Tensor, // [2·I, H]
        down: B::Tensor,    // [H, I]
    },
    /// Qwen3-MoE's experts.
    Sparse(SparseMoe<B>),
}

pub struct Layer<B: Backend> {
    pub input_norm: B::Tensor, // [H]
    pub qkv: B::Tensor,        // [(nh + 2·nkv)·hd, H]
    pub q_norm: B::Tensor,     // [hd]
    pub k_norm: B::Tensor,     // [hd]
    pub o: B::Tensor,          // [H, nh·hd]
    pub post_norm: B::Tensor,  // [H]
    pub mlp: Mlp<B>,
}

pub struct Qwen3<B: Backend> {
    pub config: ModelConfig,
    pub embed: B::Tensor, // [V, H]
    pub layers: Vec<Layer<B>>,
    pub norm: B::Tensor,            // [H]
    pub lm_head: Option<B::Tensor>, // [V, H] (this rank's V / world rows); None when tied
    pub rope: RopeTables,
    /// The tensor-parallel group this model is a rank of (none: the whole model).
    tp: Tp<B>,
    /// This rank's query heads, key/value heads and MLP width (the config's, unsharded).
    local: (usize, usize, usize),
}

impl<B: Backend> Qwen3<B> {
    pub fn load(
        backend: &B,
        config: &ModelConfig,
        w: &Weights,
    ) -> std::result::Result<Self, LoadError> {
        Self::load_reporting(backend, config, w, &mut |_| {})
    }

    /// [`Qwen3::load`], calling `layer_done(n)` after the n-th decoder layer is on the device.
    pub fn load_reporting(
        backend: &B,
        config: &ModelConfig,
        w: &Weights,
        layer_done: &mut dyn FnMut(usize),
    ) -> std::result::Result<Self, LoadError> {
        Self::load_sharded(backend, config, w, None, layer_done)
    }

    /// [`Qwen3::load_reporting`] as one rank of `tp`'s group (the whole model without one).
    pub fn load_sharded(
        backend: &B,
        config: &ModelConfig,
        w: &Weights,
        tp: Option<Arc<dyn Collective<B>>>,
        layer_done: &mut dyn FnMut(usize),
    ) -> std::result::Result<Self, LoadError> {
        let c = config;
        if super::qwen3_5::is_hybrid(&c.architecture) {
            return Err(LoadError::Config {
                path: "config.json".into(),
                message: format!(
                    "{} is a Qwen3.5 hybrid: load it with models::qwen3_5, not as Qwen3",
                    c.architecture
                ),
            });
        }
        check_backend(backend, c)?;
        let (h, hd, nh, nkv, i) = (
            c.hidden_size,
            c.head_dim,
            c.num_attention_heads,
            c.num_key_value_heads,
            c.intermediate_size,
        );
        let up = |t: HostTensor<'_>| -> std::result::Result<B::Tensor, LoadError> {
            backend.upload(&t).map_err(|e| LoadError::Config {
                path: "weights".into(),
                message: e.to_string(),
            })
        };
        let mat = |name: &str, shape: &[usize]| w.get(name, shape, TensorKind::Matrix);
        let norm = |name: &str, n: usize| w.get(name, &[n], TensorKind::Norm);
        let tp = Tp(tp);
        let sh = tp.shard();
        let plan = Plan::new(sh, (nh, nkv, hd), i, c.vocab_size)?;

        let mut layers = Vec::with_capacity(c.num_hidden_layers);
        for l in 0..c.num_hidden_layers {
            let p = format!("model.layers.{l}");
            let proj = |n: &str, total: usize| {
                mat(&format!("{p}.self_attn.{n}_proj.weight"), &[total * hd, h])
            };
            let qkv = plan.qkv(proj("q", nh)?, proj("k", nkv)?, proj("v", nkv)?);
            let mlp = match &c.moe {
                Some(moe) if moe.is_sparse(l) => {
                    Mlp::Sparse(SparseMoe::load(w, moe, (h, sh), &format!("{p}.mlp"), &up)?)
                }
                _ => Mlp::Dense {
                    gate_up: up(plan.gate_up(
                        mat(&format!("{p}.mlp.gate_proj.weight"), &[i, h])?,
                        mat(&format!("{p}.mlp.up_proj.weight"), &[i, h])?,
                    ))?,
                    down: up(plan.down(mat(&format!("{p}.mlp.down_proj.weight"), &[h, i])?))?,
                },
            };
            layers.push(Layer {
                input_norm: up(norm(&format!("{p}.input_layernorm.weight"), h)?)?,
                qkv: up(qkv)?,
                q_norm: up(norm(&format!("{p}.self_attn.q_norm.weight"), hd)?)?,
                k_norm: up(norm(&format!("{p}.self_attn.k_norm.weight"), hd)?)?,
                o: up(plan.o(mat(&format!("{p}.self_attn.o_proj.weight"), &[h, nh * hd])?))?,
                post_norm: up(norm(&format!("{p}.post_attention_layernorm.weight"), h)?)?,
                mlp,
            });
            layer_done(l + 1);
        }
        let embed = up(mat("model.embed_tokens.weight", &[c.vocab_size, h])?)?;
        // A tied checkpoint may still carry lm_head.weight (a copy); untied ones must. A tied
        // head is the embedding, unless --requantize gives the head its own format.
        let shape = [c.vocab_size, h];
        let sharded = plan.head_rows(
            c.tie_word_embeddings,
            ("model.embed_tokens.weight", "lm_head.weight"),
            |n| mat(n, &shape),
        )?;
        let lm_head = if let Some(rows) = sharded {
            Some(up(rows)?)
        } else if c.tie_word_embeddings {
            w.tied_head("model.embed_tokens.weight", &[c.vocab_size, h])?
                .map(up)
                .transpose()?
        } else {
            Some(up(mat("lm_head.weight", &[c.vocab_size, h])?)?)
        };
        let (inv_freq, scale) = c.rope.inv_freq(hd);
        let rope = RopeTables {
            rotary_dim: 2 * inv_freq.len(),
            inv_freq,
            scale,
        };
        Ok(Self {
            config: c.clone(),
            embed,
            layers,
            norm: up(norm("model.norm.weight", h)?)?,
            lm_head,
            rope,
            tp,
            local: plan.local(),
        })
    }

    /// The whole model from weights already on the backend (benchmarks build random ones).
    pub fn from_parts(
        config: ModelConfig,
        (embed, layers, norm): (B::Tensor, Vec<Layer<B>>, B::Tensor),
        lm_head: Option<B::Tensor>,
        rope: RopeTables,
    ) -> Self {
        let c = &config;
        let local = (
            c.num_attention_heads,
            c.num_key_value_heads,
            c.intermediate_size,
        );
        Self {
            config,
            embed,
            layers,
            norm,
            lm_head,
            rope,
            tp: Tp(None),
            local,
        }
    }

    fn has_dense_mlp(&self) -> bool {
        self.layers
            .iter()
            .any(|l| matches!(l.mlp, Mlp::Dense { .. }))
    }
}

impl<B: Backend> Model<B> for Qwen3<B> {
    fn forward(
        &self,
        b: &B,
        host: &BatchInputs,
        batch: &B::Batch,
        kv: &mut KvStorage<B>,
    ) -> Result<B::Tensor> {
        let c = &self.config;
        let (t, h, hd) = (host.num_tokens(), c.hidden_size, c.head_dim);
        // This rank's heads and MLP width (all of them without a group).
        let (nh, nkv, i) = self.local;
        let scale = 1.0 / (hd as f32).sqrt();
        let mut x = b.zeros(&[t, h])?; // residual stream [T, H]
        let mut xn = b.zeros(&[t, h])?; // normalised input of a sub-block [T, H]
        let mut qkv = b.zeros(&[t, (nh + 2 * nkv) * hd])?; // [T, (nh + 2·nkv)·hd]
        let mut attn = b.zeros(&[t, nh * hd])?; // [T, nh·hd]
        let mut proj = b.zeros(&[t, h])?; // sub-block output [T, H]
        // The dense MLP's scratch (a token's worth where every layer is sparse).
        let i = if self.has_dense_mlp() { i } else { 1 };
        let mut gate_up = b.zeros(&[t, 2 * i])?; // [T, 2·I]
        let mut act = b.zeros(&[t, i])?; // [T, I]

        // x = embed[tokens]
        b.embedding(&mut x, batch, &self.embed)?;
        // The first block's norm has no residual to add.
        b.rms_norm(&mut xn, &x, &self.layers[0].input_norm, c.rms_norm_eps)?;
        for (l, layer) in self.layers.iter().enumerate() {
            // Attention: qkv = xn · Wqkvᵀ; QK-norm and RoPE on q, k; cache k, v; attend; project.
            b.matmul(&mut qkv, &xn, &layer.qkv)?;
            b.qk_norm_rope_write_kv(
                &mut qkv,
                batch,
                &layer.q_norm,
                &layer.k_norm,
                &self.rope,
                (nh, nkv, c.rms_norm_eps),
                &mut kv.k[l],
                &mut kv.v[l],
            )?;
            b.paged_attention(&mut attn, &qkv, &kv.k[l], &kv.v[l], batch, nh, scale)?;
            b.matmul(&mut proj, &attn, &layer.o)?;
            self.tp.all_reduce(b, &mut proj)?;
            // x += attention; xn = post_norm(x)
            b.add_rms_norm(&mut xn, &mut x, &proj, &layer.post_norm, c.rms_norm_eps)?;
            match &layer.mlp {
                // MLP: down(silu(gate) * up)
                Mlp::Dense { gate_up: w13, down } => {
                    b.matmul_silu_mul(&mut act, &mut gate_up, &xn, w13)?;
                    b.matmul(&mut proj, &act, down)?;
                }
                // Sparse MLP: each token's top-k experts, weighted by the router
                Mlp::Sparse(moe) => moe.forward(b, &mut proj, &xn)?,
            }
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
            &self.config,
            self.local.1,
            (num_blocks, block_size),
        )
    }

    fn kv_bytes_per_token(&self, backend: &B) -> usize {
        all_layers_kv_bytes_of(backend, &self.config, self.local.1)
    }

    fn activation_bytes(&self, tokens: usize, logits_rows: usize) -> usize {
        let c = &self.config;
        // x, xn, qkv, attn, proj, gate_up, act, router logits (see `forward`), a sparse
        // block's per-expert temporaries (rows, gate|up, act and output for each of its top-k
        // choices), then the gathered rows and their logits; doubled for allocator slack and
        // the backend's temporaries.
        let moe = c.moe.as_ref().map_or(0, |m| {
            m.num_experts
                + m.num_experts_per_tok * (2 * c.hidden_size + 3 * m.moe_intermediate_size)
        });
        let per_token = 3 * c.hidden_size
            + (c.num_attention_heads + 2 * c.num_key_value_heads) * c.head_dim
            + c.num_attention_heads * c.head_dim
            + 3 * c.intermediate_size
            + moe;
        let rows = logits_rows.min(tokens);
        2 * 4 * (tokens * per_token + rows * (c.hidden_size + c.vocab_size))
    }

    fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }

    fn max_position_embeddings(&self) -> usize {
        self.config.max_position_embeddings
    }
}
