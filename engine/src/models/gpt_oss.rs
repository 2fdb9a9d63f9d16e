//! gpt-oss (`GptOssForCausalLM`, openai/gpt-oss-20b and -120b): pre-norm residual blocks of
//! GQA attention and a mixture of experts, as transformers' `modeling_gpt_oss.py` computes
//! them:
//!
//! - attention with biases on q, k, v and o, YaRN rope (neox halves), and a learned sink a head
//!   ([`Backend::paged_attention_sinks`]: one more logit in the softmax's denominator); layers
//!   alternate between a sliding window (`sliding_window`, 128 released) and full attention
//!   (`layer_types`). The sliding layers are one KV group whose cache keeps only the window
//!   (as for Mistral and Gemma 3: [`Model::kv_windows`], `kv_cache/grouped.rs`);
//! - a router with a bias, each token to its top-k experts by logit, weighted by the softmax of
//!   those k logits; experts with biases and the clamped SwiGLU
//!   ([`Backend::fused_moe_clamped`]).
//!
//! Experts load from bf16 (`gate_up_proj` `[E, H, 2·I]` with gate and up columns interleaved,
//! `down_proj` `[E, I, H]`: transformers' in × out parameters) or from MXFP4 as released
//! (`loader/mxfp4.rs`: `*_blocks`/`*_scales`, out × in), and are rearranged once at load into
//! the engine's `[E, 2·I, H]` (gate rows first) and `[E, H, I]`. MXFP4 stacks stay packed
//! through the rearrangement (whole rows move): the CPU dequantizes them at upload, the CUDA
//! backend keeps them packed (`backend/cuda/moe_fp4.rs`).
//!
//! Loaded with a [`Collective`] ([`GptOss::load_sharded`]), the model is one rank of a
//! tensor-parallel group (`gpt_oss/shard.rs`): its heads, each expert's width and its head
//! vocabulary are the rank's slice, and each block's attention and experts' outputs are
//! all-reduced.
//!
//! Only backends that answer [`Feature::GptOss`] run it (the CPU reference); CUDA refuses it
//! by name at load.

use std::borrow::Cow;
use std::sync::Arc;

use crate::backend::{Backend, BatchInputs, ClampedExperts, Feature, Result, RopeTables};
use crate::loader::{DType, HostData, HostTensor, LoadError, TensorKind, Weights};
use crate::parallel::Collective;
use crate::parallel::plan::Tp;

use super::llama::upload_err;
use super::{
    KvStorage, Model, all_layers_kv, all_layers_kv_bytes, check_backend, lm_head_logits,
    routed_activation_bytes,
};

mod config;
mod shard;

pub use config::GptOssConfig;
use shard::Cut;

struct Layer<B: Backend> {
    input_norm: B::Tensor,   // [H]
    qkv: B::Tensor,          // [(nh + 2·nkv)·hd, H]
    qkv_bias: B::Tensor,     // [(nh + 2·nkv)·hd]
    o: B::Tensor,            // [H, nh·hd]
    o_bias: B::Tensor,       // [H]
    sinks: B::Tensor,        // [nh]
    post_norm: B::Tensor,    // [H]
    router: B::Tensor,       // [E, H]
    router_bias: B::Tensor,  // [E]
    gate_up: B::Tensor,      // [E, 2·I, H], gate rows first
    gate_up_bias: B::Tensor, // [E, 2·I], gate first
    down: B::Tensor,         // [E, H, I]
    down_bias: B::Tensor,    // [E, H]
}

pub struct GptOss<B: Backend> {
    /// The checkpoint's config with this rank's heads and expert width (all of them without a
    /// group).
    pub config: GptOssConfig,
    embed: B::Tensor, // [V, H]
    layers: Vec<Layer<B>>,
    norm: B::Tensor,    // [H]
    lm_head: B::Tensor, // [V, H] (this rank's V / world rows)
    rope: RopeTables,
    /// The tensor-parallel group this model is a rank of (none: the whole model).
    tp: Tp<B>,
}

/// An f32 host tensor of `shape` from `values`.
fn f32_tensor(shape: Vec<usize>, values: &[f32]) -> HostTensor<'static> {
    HostTensor {
        shape,
        data: HostData::Raw {
            dtype: DType::F32,
            bytes: Cow::Owned(values.iter().flat_map(|v| v.to_le_bytes()).collect()),
        },
    }
}

/// Rows `[.., 2·I, c]` with gate and up interleaved (`2j` gate `j`, `2j + 1` up `j`) as gate
/// rows then up rows, for every leading index. `values` holds `n · 2·I · c` values.
fn split_interleaved<T: Copy + Default>(values: &[T], two_i: usize, c: usize) -> Vec<T> {
    let i = two_i / 2;
    let mut out = vec![T::default(); values.len()];
    for (src, dst) in values
        .chunks_exact(two_i * c)
        .zip(out.chunks_exact_mut(two_i * c))
    {
        for j in 0..i {
            dst[j * c..(j + 1) * c].copy_from_slice(&src[2 * j * c..(2 * j + 1) * c]);
            dst[(i + j) * c..(i + j + 1) * c]
                .copy_from_slice(&src[(2 * j + 1) * c..(2 * j + 2) * c]);
        }
    }
    out
}

/// Each `[r, c]` matrix of `values` (`n` of them) transposed to `[c, r]`.
fn transpose_each(values: &[f32], r: usize, c: usize) -> Vec<f32> {
    let mut out = vec![0f32; values.len()];
    for (src, dst) in values.chunks_exact(r * c).zip(out.chunks_exact_mut(r * c)) {
        for a in 0..r {
            for b in 0..c {
                dst[b * r + a] = src[a * c + b];
            }
        }
    }
    out
}

/// Layer `p`'s experts (`p` = `model.layers.{l}.mlp.experts`) as `gate_up` `[E, 2·I, H]`
/// (gate rows first), its bias `[E, 2·I]`, `down` `[E, H, I]` and its bias `[E, H]`.
fn load_experts<'w>(
    w: &'w Weights,
    p: &str,
    (e, h, i): (usize, usize, usize),
    mxfp4: bool,
) -> std::result::Result<[HostTensor<'w>; 4], LoadError> {
    let mat = |name: &str, shape: &[usize]| w.get(name, shape, TensorKind::Matrix);
    let (gate_up, down) = if mxfp4 {
        // Stored out × in: [E, 2·I, H] interleaved rows, and [E, H, I]; kept packed.
        let gu = w.get_mxfp4(&format!("{p}.gate_up_proj"), &[e, 2 * i, h])?;
        let d = w.get_mxfp4(&format!("{p}.down_proj"), &[e, h, i])?;
        (split_interleaved_rows(gu, 2 * i, h), d)
    } else {
        // transformers' parameters, in × out: [E, H, 2·I] interleaved columns, [E, I, H].
        let gu = mat(&format!("{p}.gate_up_proj"), &[e, h, 2 * i])?;
        let d = mat(&format!("{p}.down_proj"), &[e, i, h])?;
        let gu = transpose_each(&gu.to_f32(), h, 2 * i);
        (
            f32_tensor(vec![e, 2 * i, h], &split_interleaved(&gu, 2 * i, h)),
            f32_tensor(vec![e, h, i], &transpose_each(&d.to_f32(), i, h)),
        )
    };
    let gate_up_bias = mat(&format!("{p}.gate_up_proj_bias"), &[e, 2 * i])?;
    let down_bias = mat(&format!("{p}.down_proj_bias"), &[e, h])?;
    Ok([
        gate_up,
        f32_tensor(
            vec![e, 2 * i],
            &split_interleaved(&gate_up_bias.to_f32(), 2 * i, 1),
        ),
        down,
        down_bias,
    ])
}

/// An MXFP4 `gate_up` `[E, 2·I, H]` with gate and up rows interleaved as gate rows then up
/// rows ([`split_interleaved`]), still packed: a row's `H / 2` packed bytes and `H / 32` scales
/// move whole. A dummy's rows are drawn in any order alike (the CPU and the device read the same
/// draw), so it stays the recipe; anything else is split as f32 values.
fn split_interleaved_rows(t: HostTensor<'_>, two_i: usize, h: usize) -> HostTensor<'_> {
    use crate::loader::mxfp4::BLOCK;
    if let HostData::Mxfp4 { packed, scales } = &t.data
        && h.is_multiple_of(BLOCK)
    {
        return HostTensor {
            shape: t.shape.clone(),
            data: HostData::Mxfp4 {
                packed: Cow::Owned(split_interleaved(packed, two_i, h / 2)),
                scales: Cow::Owned(split_interleaved(scales, two_i, h / BLOCK)),
            },
        };
    }
    if matches!(t.data, HostData::RandomMxfp4 { .. }) {
        return t;
    }
    f32_tensor(t.shape.clone(), &split_interleaved(&t.to_f32(), two_i, h))
}

/// Refuse, before any weight is read, a backend without gpt-oss's ops, naming them and the
/// device that runs them.
fn check_device(
    name: &str,
    supports: impl Fn(Feature) -> bool,
    architecture: &str,
) -> std::result::Result<(), LoadError> {
    if supports(Feature::GptOss) {
        return Ok(());
    }
    Err(LoadError::UnsupportedOnDevice(format!(
        "gpt-oss ({architecture}) needs attention sinks, biased projections and clamped-SwiGLU \
         experts, which the {name} backend does not run yet: serve it with --device cpu"
    )))
}

impl<B: Backend> GptOss<B> {
    /// Load the checkpoint's weights onto `backend`, calling `layer_done(n)` after the n-th
    /// decoder layer.
    pub fn load(
        backend: &B,
        config: &GptOssConfig,
        w: &Weights,
        layer_done: &mut dyn FnMut(usize),
    ) -> std::result::Result<Self, LoadError> {
        Self::load_sharded(backend, config, w, None, layer_done)
    }

    /// [`GptOss::load`] as one rank of `tp`'s group (the whole model without one).
    pub fn load_sharded(
        backend: &B,
        config: &GptOssConfig,
        w: &Weights,
        tp: Option<Arc<dyn Collective<B>>>,
        layer_done: &mut dyn FnMut(usize),
    ) -> std::result::Result<Self, LoadError> {
        let c = &config.base;
        check_backend(backend, c)?;
        check_device(backend.name(), |f| backend.supports(f), &c.architecture)?;
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
            // With a group, the rank's heads of each (see `gpt_oss/shard.rs`).
            let qkv = cut.qkv([
                mat(&format!("{a}.q_proj.weight"), &[nh * hd, h])?,
                mat(&format!("{a}.k_proj.weight"), &[nkv * hd, h])?,
                mat(&format!("{a}.v_proj.weight"), &[nkv * hd, h])?,
            ]);
            let qkv_bias = cut.qkv_bias([
                mat(&format!("{a}.q_proj.bias"), &[nh * hd])?,
                mat(&format!("{a}.k_proj.bias"), &[nkv * hd])?,
                mat(&format!("{a}.v_proj.bias"), &[nkv * hd])?,
            ]);
            let experts = load_experts(w, &format!("{p}.mlp.experts"), (e, h, i), config.mxfp4)?;
            let [gate_up, gate_up_bias, down, down_bias] = cut.experts(experts);
            layers.push(Layer {
                input_norm: up(norm(&format!("{p}.input_layernorm.weight"), h)?)?,
                qkv: up(qkv)?,
                qkv_bias: up(qkv_bias)?,
                o: up(cut.o(mat(&format!("{a}.o_proj.weight"), &[h, nh * hd])?))?,
                o_bias: up(mat(&format!("{a}.o_proj.bias"), &[h])?)?,
                // Kept in f32 on every backend: the attention kernels read f32 sinks.
                sinks: backend
                    .upload_f32_weight(&cut.sinks(mat(&format!("{a}.sinks"), &[nh])?))
                    .map_err(upload_err)?,
                post_norm: up(norm(&format!("{p}.post_attention_layernorm.weight"), h)?)?,
                router: up(mat(&format!("{p}.mlp.router.weight"), &[e, h])?)?,
                router_bias: up(mat(&format!("{p}.mlp.router.bias"), &[e])?)?,
                gate_up: up(gate_up)?,
                gate_up_bias: up(gate_up_bias)?,
                down: up(down)?,
                down_bias: up(down_bias)?,
            });
            layer_done(l + 1);
        }
        let (inv_freq, scale) = c.rope.inv_freq(hd);
        Ok(Self {
            config: cut.local(config),
            embed: up(mat("model.embed_tokens.weight", &[c.vocab_size, h])?)?,
            layers,
            norm: up(norm("model.norm.weight", h)?)?,
            lm_head: up(cut.head(mat("lm_head.weight", &[c.vocab_size, h])?))?,
            rope: RopeTables {
                rotary_dim: 2 * inv_freq.len(),
                inv_freq,
                scale,
            },
            tp,
        })
    }
}

impl<B: Backend> Model<B> for GptOss<B> {
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
        // nh, nkv (and the experts' width) are this rank's (all of them without a group).
        let scale = 1.0 / (hd as f32).sqrt();
        let mut x = b.zeros(&[t, h])?; // residual stream [T, H]
        let mut xn = b.zeros(&[t, h])?; // normalised input of a sub-block [T, H]
        let mut qkv = b.zeros(&[t, (nh + 2 * nkv) * hd])?; // [T, (nh + 2·nkv)·hd]
        let mut attn = b.zeros(&[t, nh * hd])?; // [T, nh·hd]
        let mut proj = b.zeros(&[t, h])?; // sub-block output [T, H]
        let mut router_logits = b.zeros(&[t, e])?; // [T, E]

        // x = embed[tokens]
        b.embedding(&mut x, batch, &self.embed)?;
        // The first block's norm has no residual to add.
        b.rms_norm(&mut xn, &x, &self.layers[0].input_norm, c.rms_norm_eps)?;
        for (l, layer) in self.layers.iter().enumerate() {
            // Attention: qkv = xn · Wqkvᵀ + b; RoPE on q, k; cache k, v; attend with the
            // head's sink (in the window on sliding layers); o = attn · Woᵀ, summed over the
            // ranks, + b.
            // The layer's KV group's slots and tables (a sliding layer keeps only its window).
            let gb = b.group_batch(batch, kv.group_of(l))?;
            b.matmul_bias(&mut qkv, &xn, &layer.qkv, &layer.qkv_bias)?;
            b.rope_write_kv(
                &mut qkv,
                gb,
                &self.rope,
                nh,
                nkv,
                &mut kv.k[l],
                &mut kv.v[l],
            )?;
            b.paged_attention_sinks(
                &mut attn,
                &qkv,
                &kv.k[l],
                &kv.v[l],
                gb,
                (nh, scale),
                self.config.window(l),
                &layer.sinks,
            )?;
            let o = (&layer.o, &layer.o_bias);
            self.tp.matmul_bias_reduced(b, &mut proj, &attn, o)?;
            // x += attention; xn = post_norm(x)
            b.add_rms_norm(&mut xn, &mut x, &proj, &layer.post_norm, c.rms_norm_eps)?;
            // MoE: router_logits = xn · Wrᵀ + b; each token's top-k experts, clamped SwiGLU
            // (with a group, each rank's part of every expert's width, summed over the ranks).
            let experts = ClampedExperts {
                gate_up: &layer.gate_up,
                gate_up_bias: &layer.gate_up_bias,
                down: &layer.down,
                down_bias: &layer.down_bias,
                alpha: self.config.swiglu_alpha,
                limit: self.config.swiglu_limit,
            };
            let router = (&layer.router, &layer.router_bias);
            let k = self.config.top_k;
            b.routed_moe_clamped(&mut proj, &xn, router, &mut router_logits, &experts, k)?;
            self.tp.all_reduce(b, &mut proj)?;
            // x += moe; xn = next block's input norm (or the final norm)
            let next_norm = self.layers.get(l + 1).map_or(&self.norm, |n| &n.input_norm);
            b.add_rms_norm(&mut xn, &mut x, &proj, next_norm, c.rms_norm_eps)?;
        }
        // logits = norm(x)[rows] · lm_headᵀ (each rank's vocabulary, gathered)
        self.tp
            .logits(b, lm_head_logits(b, &xn, host, batch, &self.lm_head)?)
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

    fn kv_windows(&self) -> Vec<Option<usize>> {
        (0..self.layers.len())
            .map(|l| self.config.window(l))
            .collect()
    }

    fn kv_group_heads(&self) -> Option<(usize, usize)> {
        let c = &self.config.base;
        Some((c.num_key_value_heads, c.head_dim))
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

    #[test]
    fn interleaved_rows_split_into_gate_then_up() {
        // Two leading indices, I = 2, c = 1: rows g0 u0 g1 u1.
        let v = [1.0, 10.0, 2.0, 20.0, 3.0, 30.0, 4.0, 40.0];
        assert_eq!(
            split_interleaved(&v, 4, 1),
            [1.0, 2.0, 10.0, 20.0, 3.0, 4.0, 30.0, 40.0]
        );
    }

    /// What a backend without the ops answers: the model, the ops, the backend and the device
    /// that runs it.
    #[test]
    fn a_backend_without_the_ops_refuses_by_name() {
        let e = check_device("cuda", |_| false, "GptOssForCausalLM")
            .expect_err("refused")
            .to_string();
        for part in [
            "GptOssForCausalLM",
            "attention sinks",
            "cuda",
            "--device cpu",
        ] {
            assert!(e.contains(part), "{part}: {e}");
        }
        let cpu = crate::backend::CpuBackend::default();
        check_device(cpu.name(), |f| cpu.supports(f), "GptOssForCausalLM")
            .expect("the cpu runs it");
    }

    #[test]
    fn each_matrix_is_transposed() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        assert_eq!(transpose_each(&v, 2, 3), [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    }
    /// An MXFP4 `gate_up` split on its packed rows reads back as the split of its values, and
    /// stays packed; a dummy stays its recipe.
    #[test]
    fn packed_rows_split_as_their_values() {
        let (e, two_i, h) = (2usize, 6usize, 64usize);
        let n = e * two_i * h;
        let (packed, scales) = crate::loader::random_mxfp4_parts(5, 0.02, n);
        let t = HostTensor {
            shape: vec![e, two_i, h],
            data: HostData::Mxfp4 {
                packed: Cow::Owned(packed),
                scales: Cow::Owned(scales),
            },
        };
        let want = split_interleaved(&t.to_f32(), two_i, h);
        let got = split_interleaved_rows(t, two_i, h);
        assert!(matches!(got.data, HostData::Mxfp4 { .. }));
        assert_eq!(got.shape, vec![e, two_i, h]);
        assert_eq!(got.to_f32(), want);
        let dummy = HostTensor {
            shape: vec![e, two_i, h],
            data: HostData::RandomMxfp4 { seed: 3, std: 0.02 },
        };
        let kept = split_interleaved_rows(dummy, two_i, h);
        assert!(matches!(kept.data, HostData::RandomMxfp4 { seed: 3, .. }));
    }
}
