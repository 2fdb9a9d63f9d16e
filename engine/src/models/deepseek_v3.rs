//! DeepSeek-V3 / V3.1 (`DeepseekV3ForCausalLM`): pre-norm residual blocks of multi-head latent
//! attention and an MLP, as transformers' `modeling_deepseek_v3.py` computes them:
//!
//! - **Latent attention (MLA).** q is `q_proj(x)`, or with `q_lora_rank`
//!   `q_b_proj(rms_norm(q_a_proj(x)))`, `[T, nh·(nope + rope)]`, each head's last `rope` values
//!   rotated. Keys and values come from one compressed row a token,
//!   `kv_a_proj_with_mqa(x)` = `c_kv` (`kv_lora_rank`, RMS-normalised by `kv_a_layernorm`) then
//!   `k_pe` (`rope`, rotated, shared by every head). That row is what the paged cache keeps
//!   (`latent + rope` values a token a layer, [`KvStorage::latent`]), and attention reads it in
//!   the absorbed form ([`Backend::mla_attention`]): `kv_b_proj`'s key rows of each head turn
//!   q's `nope` part into the latent space, and its value rows turn the attended latent into
//!   the head's output. The rotary layout is the released interleaved pairs
//!   (`rope_interleave`, transformers' default) or neox halves.
//! - **YaRN** rotary tables over `qk_rope_head_dim`, and the softmax scale
//!   `1/√(nope + rope) · mscale(factor, mscale_all_dim)²` ([`DeepseekV3Config::softmax_scale`]).
//! - **MLP.** The first `first_k_dense_replace` layers are a dense SwiGLU of
//!   `intermediate_size`; the others route each token by sigmoid scores plus the checkpoint's
//!   `e_score_correction_bias` to `num_experts_per_tok` experts within its `topk_group` best
//!   of `n_group` expert groups, weighted by the chosen scores (renormalised with
//!   `norm_topk_prob`) times `routed_scaling_factor` ([`Backend::fused_moe_sigmoid`]), SwiGLU
//!   experts of `moe_intermediate_size`; plus the shared experts, one SwiGLU of
//!   `n_shared_experts · moe_intermediate_size`, added to the routed sum.
//!
//! Weights as released (`deepseek_v3/load.rs`), bf16 or fine-grained FP8 (dequantized at
//! upload by the CPU). Only backends that answer [`Feature::DeepseekV3`] run it: the CPU
//! reference and CUDA (`backend/cuda/mla.rs`, bf16 and float32 paths; its FP8 KV cache for
//! latents of a multiple of 128).

use crate::backend::{
    BatchInputs, Feature, HybridOps, MlaDims, Result, RopeTables, SigmoidRouting,
};
use crate::loader::{LoadError, TensorKind, Weights};

use super::llama::upload_err;
use super::{KvStorage, Model, check_backend, lm_head_logits};

mod config;
mod load;
mod shard;

use crate::parallel::Collective;
use crate::parallel::plan::Tp;
pub use config::DeepseekV3Config;
use load::{Layer, Mlp, QProj};
use shard::Cut;

/// The eps of `q_a_layernorm` and `kv_a_layernorm`: transformers builds them with the RMSNorm's
/// default, not `rms_norm_eps`.
const LORA_NORM_EPS: f32 = 1e-6;

pub struct DeepseekV3<B: HybridOps> {
    pub config: DeepseekV3Config,
    embed: B::Tensor, // [V, H]
    layers: Vec<Layer<B>>,
    norm: B::Tensor,            // [H]
    lm_head: Option<B::Tensor>, // [V, H] (this rank's rows); None when tied to `embed`
    rope: RopeTables,
    /// The tensor-parallel group this model is a rank of (none: the whole model); `config`
    /// then holds the rank's heads and widths (`deepseek_v3/shard.rs`).
    tp: Tp<B>,
}

/// Refuse, before any weight is read, a backend without DeepSeek-V3's ops, naming them and
/// the device that runs them.
fn check_device(
    name: &str,
    supports: impl Fn(Feature) -> bool,
    architecture: &str,
) -> std::result::Result<(), LoadError> {
    if !supports(Feature::DeepseekV3) {
        return Err(LoadError::UnsupportedOnDevice(format!(
            "DeepSeek-V3 ({architecture}) needs multi-head latent attention and group-limited \
             sigmoid routing, which the {name} backend does not run yet: serve it with \
             --device cpu"
        )));
    }
    Ok(())
}

impl<B: HybridOps> DeepseekV3<B> {
    /// Load the checkpoint's weights onto `backend`, calling `layer_done(n)` after the n-th
    /// decoder layer.
    pub fn load(
        backend: &B,
        config: &DeepseekV3Config,
        w: &Weights,
        layer_done: &mut dyn FnMut(usize),
    ) -> std::result::Result<Self, LoadError> {
        Self::load_sharded(backend, config, w, None, layer_done)
    }

    /// [`DeepseekV3::load`] as one rank of `tp`'s group (the whole model without one).
    pub fn load_sharded(
        backend: &B,
        config: &DeepseekV3Config,
        w: &Weights,
        tp: Option<std::sync::Arc<dyn Collective<B>>>,
        layer_done: &mut dyn FnMut(usize),
    ) -> std::result::Result<Self, LoadError> {
        let tp = Tp(tp);
        let cut = Cut::new(config, tp.shard())?;
        let c = &config.base;
        let supports = |f| backend.supports(f);
        check_device(backend.name(), supports, &c.architecture)?;
        check_backend(backend, c)?;
        let h = c.hidden_size;
        let up = |t| backend.upload(&t).map_err(upload_err);
        let mat = |name: &str, shape: &[usize]| w.get(name, shape, TensorKind::Matrix);
        let mut layers = Vec::with_capacity(c.num_hidden_layers);
        for l in 0..c.num_hidden_layers {
            layers.push(load::layer((backend, &cut), config, w, l)?);
            layer_done(l + 1);
        }
        let (inv_freq, scale) = c.rope.inv_freq(config.qk_rope_head_dim);
        // A tied head is the embedding (unless --requantize gives the head its own format); a
        // rank of several keeps its vocabulary rows of either.
        let sharded = crate::parallel::shard::head_rows(
            (cut.shard, cut.vocab.clone()),
            c.tie_word_embeddings,
            ("model.embed_tokens.weight", "lm_head.weight"),
            |n| mat(n, &[c.vocab_size, h]),
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
            norm: up(w.get("model.norm.weight", &[h], TensorKind::Norm)?)?,
            lm_head,
            rope: RopeTables {
                rotary_dim: 2 * inv_freq.len(),
                inv_freq,
                scale,
            },
            tp,
        })
    }

    fn dims(&self) -> MlaDims {
        let c = &self.config;
        MlaDims {
            heads: c.base.num_attention_heads,
            nope: c.qk_nope_head_dim,
            rope: c.qk_rope_head_dim,
            v: c.v_head_dim,
            latent: c.kv_lora_rank,
        }
    }
}

impl<B: HybridOps> Model<B> for DeepseekV3<B> {
    fn forward(
        &self,
        b: &B,
        host: &BatchInputs,
        batch: &B::Batch,
        kv: &mut KvStorage<B>,
    ) -> Result<B::Tensor> {
        let cfg = &self.config;
        let (t, h, e) = (
            host.num_tokens(),
            cfg.base.hidden_size,
            cfg.n_routed_experts,
        );
        let dims = self.dims();
        let eps = cfg.base.rms_norm_eps;
        let routing = SigmoidRouting {
            n_group: cfg.n_group,
            topk_group: cfg.topk_group,
            ..SigmoidRouting::ungrouped(
                cfg.num_experts_per_tok,
                cfg.norm_topk_prob,
                cfg.routed_scaling_factor,
            )
        };
        let mut x = b.zeros(&[t, h])?; // residual stream [T, H]
        let mut xn = b.zeros(&[t, h])?; // normalised input of a sub-block [T, H]
        let mut q = b.zeros(&[t, dims.q_width()])?; // [T, nh·(nope + rope)]
        let mut q_a = match cfg.q_lora_rank {
            Some(qr) => Some((b.zeros(&[t, qr])?, b.zeros(&[t, qr])?)), // [T, qr] twice
            None => None,
        };
        let mut latent = b.zeros(&[t, dims.row()])?; // c_kv | k_pe [T, kv_lora_rank + rope]
        let mut attn = b.zeros(&[t, dims.heads * dims.v])?; // [T, nh·v]
        let mut proj = b.zeros(&[t, h])?; // sub-block output [T, H]
        let mut shared_out = b.zeros(&[t, h])?; // the shared experts' output [T, H]
        let mut router_logits = b.zeros(&[t, e])?; // [T, E]
        // SwiGLU scratch by width: gate|up [T, 2·I] and the activation [T, I].
        let mut scratch: Vec<(usize, B::Tensor, B::Tensor)> = Vec::new();

        // x = embed[tokens]
        b.embedding(&mut x, batch, &self.embed)?;
        // The first block's norm has no residual to add.
        b.rms_norm(&mut xn, &x, &self.layers[0].input_norm, eps)?;
        for (l, layer) in self.layers.iter().enumerate() {
            // q = q_proj(xn), or q_b_proj(rms_norm(q_a_proj(xn)))
            match (&layer.q, &mut q_a) {
                (QProj::Direct(w), _) => b.matmul(&mut q, &xn, w)?,
                (QProj::Lora { a, norm, b: wb }, Some((qa, qa_n))) => {
                    b.matmul(qa, &xn, a)?;
                    b.rms_norm(qa_n, qa, norm, LORA_NORM_EPS)?;
                    b.matmul(&mut q, qa_n, wb)?;
                }
                (QProj::Lora { .. }, None) => unreachable!("q_lora_rank sizes the scratch"),
            }
            // latent = kv_a_proj_with_mqa(xn); c_kv normalised in place
            b.matmul(&mut latent, &xn, &layer.kv_a)?;
            b.rms_norm_cols(&mut latent, 0, &layer.kv_norm, LORA_NORM_EPS)?;
            // Rotate q's and k's rope parts, cache the latent rows; attend in the latent
            // space; o_proj.
            let interleaved = cfg.rope_interleave;
            b.mla_rope_write_kv(
                &mut q,
                &mut latent,
                batch,
                &self.rope,
                dims,
                interleaved,
                &mut kv.k[l],
            )?;
            let scale = cfg.softmax_scale;
            b.mla_attention(&mut attn, &q, &layer.kv_b, &kv.k[l], batch, dims, scale)?;
            b.matmul(&mut proj, &attn, &layer.o)?;
            self.tp.all_reduce(b, &mut proj)?;
            // x += attention; xn = post_norm(x)
            b.add_rms_norm(&mut xn, &mut x, &proj, &layer.post_norm, eps)?;
            match &layer.mlp {
                // proj = down(silu(gate(xn)) * up(xn))
                Mlp::Dense(d) => swiglu(b, &mut proj, &xn, d, &mut scratch, t)?,
                Mlp::Moe(m) => {
                    // proj = routed experts (group-limited sigmoid routing) + shared experts
                    b.matmul(&mut router_logits, &xn, &m.router)?;
                    let experts = (&m.gate_up, &m.down);
                    b.fused_moe_sigmoid(&mut proj, &xn, &router_logits, &m.bias, experts, routing)?;
                    if let Some(shared) = &m.shared {
                        swiglu(b, &mut shared_out, &xn, shared, &mut scratch, t)?;
                        b.add_assign(&mut proj, &shared_out)?;
                    }
                }
            }
            self.tp.all_reduce(b, &mut proj)?;
            // x += mlp; xn = next block's input norm (or the final norm)
            let next_norm = self.layers.get(l + 1).map_or(&self.norm, |n| &n.input_norm);
            b.add_rms_norm(&mut xn, &mut x, &proj, next_norm, eps)?;
        }
        // logits = norm(x)[rows] · lm_headᵀ
        let head = self.lm_head.as_ref().unwrap_or(&self.embed);
        self.tp
            .logits(b, lm_head_logits(b, &xn, host, batch, head)?)
    }

    /// One latent row a token a layer: `[num_blocks, block_size, kv_lora_rank + rope]`.
    fn new_kv_storage(
        &self,
        backend: &B,
        num_blocks: usize,
        block_size: usize,
    ) -> Result<KvStorage<B>> {
        let layers = self.config.base.num_hidden_layers;
        KvStorage::latent(backend, layers, num_blocks, block_size, self.dims().row())
    }

    fn kv_bytes_per_token(&self, backend: &B) -> usize {
        self.config.base.num_hidden_layers * backend.kv_head_bytes(self.dims().row())
    }

    fn activation_bytes(&self, tokens: usize, logits_rows: usize) -> usize {
        let c = &self.config;
        let (h, d) = (c.base.hidden_size, self.dims());
        let moe = c.n_routed_experts
            + c.num_experts_per_tok * (2 * h + 3 * c.moe_intermediate_size)
            + 3 * c.n_shared_experts * c.moe_intermediate_size;
        let mlp = moe.max(3 * c.base.intermediate_size);
        // x, xn, proj, shared_out; q (and q_a twice); the latent row; attn; the MLP.
        let per_token =
            4 * h + d.q_width() + 2 * c.q_lora_rank.unwrap_or(0) + d.row() + d.heads * d.v + mlp;
        let rows = logits_rows.min(tokens);
        2 * 4 * (tokens * per_token + rows * (h + c.base.vocab_size))
    }

    fn vocab_size(&self) -> usize {
        self.config.base.vocab_size
    }

    fn max_position_embeddings(&self) -> usize {
        self.config.base.max_position_embeddings
    }
}

/// `out = down · (silu(g) * u)` with `g | u = mlp.gate_up · xn`, through scratch of the MLP's
/// width (made on first use).
fn swiglu<B: HybridOps>(
    b: &B,
    out: &mut B::Tensor,
    xn: &B::Tensor,
    mlp: &load::Dense<B>,
    scratch: &mut Vec<(usize, B::Tensor, B::Tensor)>,
    t: usize,
) -> Result<()> {
    let i = mlp.width;
    let at = match scratch.iter().position(|(w, _, _)| *w == i) {
        Some(at) => at,
        None => {
            scratch.push((i, b.zeros(&[t, 2 * i])?, b.zeros(&[t, i])?));
            scratch.len() - 1
        }
    };
    let (_, gate_up, act) = &mut scratch[at];
    b.matmul_silu_mul(act, gate_up, xn, &mlp.gate_up)?;
    b.matmul(out, act, &mlp.down)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;

    /// A backend without the ops is told the model, the ops, the backend and the device that
    /// runs it.
    #[test]
    fn a_backend_without_the_ops_refuses_by_name() {
        let arch = "DeepseekV3ForCausalLM";
        let e = check_device("cuda", |_| false, arch)
            .expect_err("refused")
            .to_string();
        for part in [arch, "latent attention", "cuda", "--device cpu"] {
            assert!(e.contains(part), "{part}: {e}");
        }
        let cpu = crate::backend::CpuBackend::default();
        check_device(cpu.name(), |f| cpu.supports(f), arch).expect("the cpu runs it");
    }
}
