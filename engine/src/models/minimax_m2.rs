//! MiniMax-M2 (`MiniMaxM2ForCausalLM`, MiniMaxAI/MiniMax-M2): pre-norm residual blocks of GQA
//! attention and a mixture of experts, as transformers' `modeling_minimax_m2.py` computes them:
//!
//! - attention with one RMSNorm over all of q's heads and one over all of k's (not per head as
//!   Qwen3's: [`Backend::rms_norm_cols`] on the fused qkv), then rope on the first `rotary_dim`
//!   dims of each head (neox halves), no biases;
//! - every layer sparse: sigmoid router scores, each token's top-k by score plus the
//!   checkpoint's `e_score_correction_bias`, weighted by the chosen scores renormalised
//!   ([`Backend::fused_moe_sigmoid`]); SwiGLU experts, no shared expert.
//!
//! Experts load from the released layout (`block_sparse_moe.experts.{e}.w1` gate, `w3` up,
//! `w2` down; `block_sparse_moe.gate` the router) or transformers 5's (`mlp.experts.gate_up_proj`
//! `[E, 2·I, H]` and `down_proj` `[E, H, I]`, `mlp.gate`), stacked into the engine's
//! `[E, 2·I, H]` (gate rows first) and `[E, H, I]`.
//!
//! Loaded with a [`Collective`] ([`MiniMaxM2::load_sharded`]), the model is one rank of a
//! tensor-parallel group (`minimax_m2/shard.rs`): its heads, each expert's width and its head
//! vocabulary are the rank's slice; the QK norms' mean squares are averaged over the ranks, and
//! each block's attention and experts' outputs are all-reduced.
//!
//! Only backends that answer [`Feature::MiniMaxM2`] run it: the CPU reference and CUDA
//! (`cuda/norm.rs`'s `rms_norm_cols`, `cuda/minimax.rs`'s `fused_moe_sigmoid`); a backend
//! without them refuses it by name at load. The correction bias is kept in f32 on every
//! backend (`upload_f32_weight`): a bf16 copy would move the choices where scores are close.

use std::sync::Arc;

use crate::backend::{Backend, BatchInputs, Feature, Result, RopeTables, SigmoidRouting};
use crate::loader::{HostTensor, LoadError, TensorKind, Weights};
use crate::parallel::Collective;
use crate::parallel::plan::Tp;

use super::llama::upload_err;
use super::{
    KvStorage, Model, all_layers_kv, all_layers_kv_bytes, check_backend, lm_head_logits,
    routed_activation_bytes,
};

mod config;
mod shard;

pub use config::MiniMaxM2Config;
use shard::Cut;

struct Layer<B: Backend> {
    input_norm: B::Tensor, // [H]
    qkv: B::Tensor,        // [(nh + 2·nkv)·hd, H]
    q_norm: B::Tensor,     // [nh·hd]
    k_norm: B::Tensor,     // [nkv·hd]
    o: B::Tensor,          // [H, nh·hd]
    post_norm: B::Tensor,  // [H]
    router: B::Tensor,     // [E, H]
    bias: B::Tensor,       // [E] f32, the correction bias of the choice
    gate_up: B::Tensor,    // [E, 2·I, H], gate rows first
    down: B::Tensor,       // [E, H, I]
}

pub struct MiniMaxM2<B: Backend> {
    /// The checkpoint's config with this rank's heads and expert width (all of them without a
    /// group).
    pub config: MiniMaxM2Config,
    embed: B::Tensor, // [V, H]
    layers: Vec<Layer<B>>,
    norm: B::Tensor,            // [H]
    lm_head: Option<B::Tensor>, // [V, H] (this rank's V / world rows); None when tied
    rope: RopeTables,
    /// The tensor-parallel group this model is a rank of (none: the whole model).
    tp: Tp<B>,
}

/// Layer `p`'s router, correction bias and experts (`p` = `model.layers.{l}`), from either
/// layout (see the module's header).
fn load_moe<'w>(
    w: &'w Weights,
    p: &str,
    (e, h, i): (usize, usize, usize),
) -> std::result::Result<[HostTensor<'w>; 4], LoadError> {
    let mat = |name: &str, shape: &[usize]| w.get(name, shape, TensorKind::Matrix);
    // The bias is a vector; a dummy source gives it one constant, which moves no choice.
    let vec = |name: &str| w.get(name, &[e], TensorKind::Norm);
    if w.contains(&format!("{p}.mlp.experts.gate_up_proj")) {
        return Ok([
            mat(&format!("{p}.mlp.gate.weight"), &[e, h])?,
            vec(&format!("{p}.mlp.e_score_correction_bias"))?,
            mat(&format!("{p}.mlp.experts.gate_up_proj"), &[e, 2 * i, h])?,
            mat(&format!("{p}.mlp.experts.down_proj"), &[e, h, i])?,
        ]);
    }
    let m = format!("{p}.block_sparse_moe");
    let mut gate_up = Vec::with_capacity(2 * e);
    let mut down = Vec::with_capacity(e);
    for x in 0..e {
        let ex = format!("{m}.experts.{x}");
        gate_up.push(mat(&format!("{ex}.w1.weight"), &[i, h])?);
        gate_up.push(mat(&format!("{ex}.w3.weight"), &[i, h])?);
        down.push(mat(&format!("{ex}.w2.weight"), &[h, i])?);
    }
    Ok([
        mat(&format!("{m}.gate.weight"), &[e, h])?,
        vec(&format!("{m}.e_score_correction_bias"))?,
        HostTensor::concat_rows(&gate_up).reshaped(vec![e, 2 * i, h]),
        HostTensor::concat_rows(&down).reshaped(vec![e, h, i]),
    ])
}

/// Refuse, before any weight is read, a backend without MiniMax-M2's ops, naming them and the
/// device that runs them.
fn check_device(
    name: &str,
    supports: impl Fn(Feature) -> bool,
    architecture: &str,
) -> std::result::Result<(), LoadError> {
    if supports(Feature::MiniMaxM2) {
        return Ok(());
    }
    Err(LoadError::UnsupportedOnDevice(format!(
        "MiniMax-M2 ({architecture}) needs QK norms over all heads and sigmoid-routed experts, \
         which the {name} backend does not run yet: serve it with --device cpu"
    )))
}

impl<B: Backend> MiniMaxM2<B> {
    /// Load the checkpoint's weights onto `backend`, calling `layer_done(n)` after the n-th
    /// decoder layer.
    pub fn load(
        backend: &B,
        config: &MiniMaxM2Config,
        w: &Weights,
        layer_done: &mut dyn FnMut(usize),
    ) -> std::result::Result<Self, LoadError> {
        Self::load_sharded(backend, config, w, None, layer_done)
    }

    /// [`MiniMaxM2::load`] as one rank of `tp`'s group (the whole model without one).
    pub fn load_sharded(
        backend: &B,
        config: &MiniMaxM2Config,
        w: &Weights,
        tp: Option<Arc<dyn Collective<B>>>,
        layer_done: &mut dyn FnMut(usize),
    ) -> std::result::Result<Self, LoadError> {
        let c = &config.base;
        check_device(backend.name(), |f| backend.supports(f), &c.architecture)?;
        check_backend(backend, c)?;
        let tp = Tp(tp);
        let cut = Cut::new(config, tp.shard())?;
        let (h, hd, nh, nkv, i, e) = (
            c.hidden_size,
            c.head_dim,
            c.num_attention_heads,
            c.num_key_value_heads,
            c.intermediate_size,
            config.num_experts,
        );
        let up = |t: HostTensor<'_>| backend.upload(&t).map_err(upload_err);
        let mat = |name: &str, shape: &[usize]| w.get(name, shape, TensorKind::Matrix);
        let norm = |name: &str, n: usize| w.get(name, &[n], TensorKind::Norm);

        let mut layers = Vec::with_capacity(c.num_hidden_layers);
        for l in 0..c.num_hidden_layers {
            let p = format!("model.layers.{l}");
            let a = format!("{p}.self_attn");
            // With a group, the rank's heads of each (see `minimax_m2/shard.rs`).
            let qkv = cut.plan.qkv(
                mat(&format!("{a}.q_proj.weight"), &[nh * hd, h])?,
                mat(&format!("{a}.k_proj.weight"), &[nkv * hd, h])?,
                mat(&format!("{a}.v_proj.weight"), &[nkv * hd, h])?,
            );
            let [router, bias, gate_up, down] = load_moe(w, &p, (e, h, i))?;
            let (gate_up, down) = cut.experts((gate_up, down));
            layers.push(Layer {
                input_norm: up(norm(&format!("{p}.input_layernorm.weight"), h)?)?,
                qkv: up(qkv)?,
                q_norm: up(cut.q_norm(norm(&format!("{a}.q_norm.weight"), nh * hd)?))?,
                k_norm: up(cut.k_norm(norm(&format!("{a}.k_norm.weight"), nkv * hd)?))?,
                o: up(cut
                    .plan
                    .o(mat(&format!("{a}.o_proj.weight"), &[h, nh * hd])?))?,
                post_norm: up(norm(&format!("{p}.post_attention_layernorm.weight"), h)?)?,
                router: up(router)?,
                bias: backend.upload_f32_weight(&bias).map_err(upload_err)?,
                gate_up: up(gate_up)?,
                down: up(down)?,
            });
            layer_done(l + 1);
        }
        let (inv_freq, scale) = c.rope.inv_freq(hd);
        // A rank of several keeps its vocabulary's rows; a tied head is the embedding (unless
        // --requantize gives the head its own format).
        let shape = [c.vocab_size, h];
        let sharded = cut.plan.head_rows(
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
        Ok(Self {
            config: cut.local(config),
            embed: up(mat("model.embed_tokens.weight", &[c.vocab_size, h])?)?,
            layers,
            norm: up(norm("model.norm.weight", h)?)?,
            lm_head,
            rope: RopeTables {
                rotary_dim: 2 * inv_freq.len(),
                inv_freq,
                scale,
            },
            tp,
        })
    }
}

impl<B: Backend> Model<B> for MiniMaxM2<B> {
    fn forward(
        &self,
        b: &B,
        host: &BatchInputs,
        batch: &B::Batch,
        kv: &mut KvStorage<B>,
    ) -> Result<B::Tensor> {
        let c = &self.config.base;
        let (t, h, hd, nh, nkv, e) = (
            host.num_tokens(),
            c.hidden_size,
            c.head_dim,
            c.num_attention_heads,
            c.num_key_value_heads,
            self.config.num_experts,
        );
        let eps = c.rms_norm_eps;
        let scale = 1.0 / (hd as f32).sqrt();
        let routing = SigmoidRouting::ungrouped(self.config.top_k, true, 1.0);
        // nh, nkv (and the experts' width) are this rank's (all of them without a group).
        let world = self.tp.shard().world;
        let mut x = b.zeros(&[t, h])?; // residual stream [T, H]
        let mut xn = b.zeros(&[t, h])?; // normalised input of a sub-block [T, H]
        let mut qkv = b.zeros(&[t, (nh + 2 * nkv) * hd])?; // [T, (nh + 2·nkv)·hd]
        let mut attn = b.zeros(&[t, nh * hd])?; // [T, nh·hd]
        let mut proj = b.zeros(&[t, h])?; // sub-block output [T, H]
        let mut router_logits = b.zeros(&[t, e])?; // [T, E]
        let mut ms = b.zeros(&[t, 2])?; // with a group: q's and k's mean squares [T, 2]

        // x = embed[tokens]
        b.embedding(&mut x, batch, &self.embed)?;
        // The first block's norm has no residual to add.
        b.rms_norm(&mut xn, &x, &self.layers[0].input_norm, eps)?;
        for (l, layer) in self.layers.iter().enumerate() {
            // Attention: qkv = xn · Wqkvᵀ; q and k each normed over all their heads; RoPE on
            // the rotated dims; cache k, v; attend; project.
            b.matmul(&mut qkv, &xn, &layer.qkv)?;
            if world == 1 {
                b.rms_norm_cols(&mut qkv, 0, &layer.q_norm, eps)?;
                b.rms_norm_cols(&mut qkv, nh * hd, &layer.k_norm, eps)?;
            } else {
                // ms = mean over the ranks of each's mean(q²) and mean(k²) (equal widths, so
                // the mean over every head's); then q, k normed by it.
                let (q, k) = (0..nh * hd, nh * hd..(nh + nkv) * hd);
                b.mean_sq_cols(&mut ms, &qkv, &[q, k])?;
                self.tp.all_reduce(b, &mut ms)?;
                b.scale(&mut ms, 1.0 / world as f32)?;
                b.rms_norm_cols_by(&mut qkv, 0, &layer.q_norm, (&ms, 0), eps)?;
                b.rms_norm_cols_by(&mut qkv, nh * hd, &layer.k_norm, (&ms, 1), eps)?;
            }
            b.rope_write_kv(
                &mut qkv,
                batch,
                &self.rope,
                nh,
                nkv,
                &mut kv.k[l],
                &mut kv.v[l],
            )?;
            b.paged_attention(&mut attn, &qkv, &kv.k[l], &kv.v[l], batch, nh, scale)?;
            b.matmul(&mut proj, &attn, &layer.o)?;
            self.tp.all_reduce(b, &mut proj)?;
            // x += attention; xn = post_norm(x)
            b.add_rms_norm(&mut xn, &mut x, &proj, &layer.post_norm, eps)?;
            // MoE: router_logits = xn · Wrᵀ; each token's top-k by sigmoid score + bias (with a
            // group, each rank's part of every expert's width, summed over the ranks).
            b.matmul(&mut router_logits, &xn, &layer.router)?;
            let experts = (&layer.gate_up, &layer.down);
            b.fused_moe_sigmoid(
                &mut proj,
                &xn,
                &router_logits,
                &layer.bias,
                experts,
                routing,
            )?;
            self.tp.all_reduce(b, &mut proj)?;
            // x += moe; xn = next block's input norm (or the final norm)
            let next_norm = self.layers.get(l + 1).map_or(&self.norm, |n| &n.input_norm);
            b.add_rms_norm(&mut xn, &mut x, &proj, next_norm, eps)?;
        }
        // logits = norm(x)[rows] · lm_headᵀ (each rank's vocabulary, gathered)
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
        all_layers_kv(backend, &self.config.base, num_blocks, block_size)
    }

    fn kv_bytes_per_token(&self, backend: &B) -> usize {
        all_layers_kv_bytes(backend, &self.config.base)
    }

    fn activation_bytes(&self, tokens: usize, logits_rows: usize) -> usize {
        let routed = (self.config.num_experts, self.config.top_k);
        routed_activation_bytes(&self.config.base, routed, tokens, logits_rows)
    }

    fn vocab_size(&self) -> usize {
        self.config.base.vocab_size
    }

    fn max_position_embeddings(&self) -> usize {
        self.config.base.max_position_embeddings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a backend without the ops answers: the model, the ops, the backend and the device
    /// that runs it.
    #[test]
    fn a_backend_without_the_ops_refuses_by_name() {
        let e = check_device("cuda", |_| false, "MiniMaxM2ForCausalLM")
            .expect_err("refused")
            .to_string();
        for part in ["MiniMaxM2ForCausalLM", "sigmoid", "cuda", "--device cpu"] {
            assert!(e.contains(part), "{part}: {e}");
        }
        let cpu = crate::backend::CpuBackend::default();
        check_device(cpu.name(), |f| cpu.supports(f), "MiniMaxM2ForCausalLM")
            .expect("the cpu runs it");
    }
}
