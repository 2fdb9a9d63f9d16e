//! Qwen3.5 hybrid text models (`Qwen3_5ForCausalLM`, `Qwen3_5MoeForCausalLM`, and the Hub's
//! `*ForConditionalGeneration` layouts of both, text only; transformers 5.17), on any backend
//! with [`HybridOps`] (the CPU reference and CUDA), served by the engine like Qwen3: one varlen batch of many sequences a
//! step through the paged KV cache ([`Model::forward`]), each sequence's recurrent state in its
//! slot of the cache manager's state pool (`kv_cache/state.rs`; memory:
//! [`StateStorage`](super::StateStorage)).
//!
//! Layers follow `layer_types`: most are Gated DeltaNet linear attention (a causal depthwise
//! conv, then the gated delta rule recurrence, a gated RMSNorm and an output projection; see
//! `backend/cpu/hybrid.rs`), every `full_attention_interval`-th is gated full attention (Qwen3's
//! attention with QK-norm, partial rotary embedding, and `o_proj(attn · sigmoid(gate))` where
//! `q_proj` yields each head's query and gate side by side). Every layer has a SwiGLU MLP, or in
//! the MoE model a sparse block (`qwen3_moe.rs`'s [`SparseMoe`], top-k renormalised) plus a
//! shared expert gated by `sigmoid(x · shared_expert_gateᵀ)`.
//! Qwen3.5's RMSNorms multiply by `1 + w` (stored around zero); `1` is added at load so the
//! backend's plain `x̂ · w` norm serves. The gated norm of the linear layers multiplies by `w`.
//!
//! Full-attention layers keep keys and values in the paged KV cache (only they have one);
//! linear-attention layers keep, per sequence, the conv window of the last `K − 1` q|k|v
//! inputs and the `[nv, dk, dv]` delta-rule state in the sequence's slot, and copy both into a
//! checkpoint slot where the batch's [`StatePlan`](crate::kv_cache::StatePlan) says so (prefix
//! caching).
//! [`SequenceState`] runs one sequence without the engine (tests).
//!
//! With `mtp` at load, the checkpoint's MTP block too (`mtp.*`, speculative decoding): see
//! [`Model::mtp_forward`]; its attention layer's keys and values are the KV cache's last layer.

use std::borrow::Cow;

use crate::backend::{
    Backend, BackendError, BatchInputs, CpuBackend, Feature, HybridOps, Result, RopeTables,
};
use crate::loader::{DType, HostData, HostTensor, LoadError, TensorKind, Weights};

use super::qwen3_moe::SparseMoe;
use super::{KvStorage, Model, StateSpec, StateStorage, lm_head_logits};
use crate::parallel::Collective;
use crate::parallel::plan::Tp;
use shard::Cut;

mod config;
mod linear;
mod mtp;
mod sequence;
mod shard;

pub use config::{LayerType, Qwen3_5Config};
pub use sequence::SequenceState;

use mtp::MtpHead;

/// Whether `architecture` is a Qwen3.5 hybrid this file runs ([`super::registry`]).
pub fn is_hybrid(architecture: &str) -> bool {
    super::registry::family(architecture).ok() == Some(super::registry::Family::Qwen3_5)
}

/// Why a backend without [`Feature::HybridLayers`] refuses them.
pub const NO_HYBRID_LAYERS: &str = "Qwen3.5 hybrid models (Qwen3_5*) do not run on this backend: \
     serve them with --device cpu or --device cuda";

/// A Gated DeltaNet layer's weights.
struct LinearAttn<B: Backend> {
    in_proj: B::Tensor, // qkv | z | b | a: [C + nv·dv + 2·nv, H]
    conv: B::Tensor,    // [C, K], f32
    neg_a: B::Tensor,   // −exp(A_log) [nv], f32
    dt_bias: B::Tensor, // [nv], f32
    norm: B::Tensor,    // [dv], gated norm, f32
    out: B::Tensor,     // [H, nv·dv]
    /// This layer's index among the linear-attention layers (its
    /// [`StateStorage`](super::StateStorage) entry).
    state: usize,
}

/// A gated full-attention layer's weights.
struct FullAttn<B: Backend> {
    qkv: B::Tensor,    // q (all heads), k, v: [(nh + 2·nkv)·hd, H]
    gate: B::Tensor,   // the output gate (all heads): [nh·hd, H]
    q_norm: B::Tensor, // [hd], 1 + w
    k_norm: B::Tensor, // [hd], 1 + w
    o: B::Tensor,      // [H, nh·hd]
    /// This layer's index among the full-attention layers (its [`KvStorage`] entry).
    cache: usize,
}

enum Mixer<B: Backend> {
    Linear(LinearAttn<B>),
    Full(FullAttn<B>),
}

/// A SwiGLU MLP: `down(silu(gate) · up)`.
struct SwiGlu<B: Backend> {
    gate_up: B::Tensor, // [2·I, H]
    down: B::Tensor,    // [H, I]
}

/// Qwen3.5-MoE's MLP: routed experts plus a shared expert gated by `sigmoid(x · gateᵀ)`.
struct MoeMlp<B: Backend> {
    experts: SparseMoe<B>,
    shared: SwiGlu<B>,
    shared_gate: B::Tensor, // [1, H]
}

enum Mlp<B: Backend> {
    Dense(SwiGlu<B>),
    Sparse(Box<MoeMlp<B>>),
}

struct Layer<B: Backend> {
    input_norm: B::Tensor, // [H], 1 + w
    mixer: Mixer<B>,
    post_norm: B::Tensor, // [H], 1 + w
    mlp: Mlp<B>,
}

/// A Qwen3.5 hybrid model on backend `B` (the CPU reference by default).
pub struct Qwen3_5<B: Backend = CpuBackend> {
    pub config: Qwen3_5Config,
    embed: B::Tensor, // [V, H]
    layers: Vec<Layer<B>>,
    mtp: Option<MtpHead<B>>,
    norm: B::Tensor,            // [H], 1 + w
    lm_head: Option<B::Tensor>, // [V, H]; None when tied
    /// The head the MTP drafts read where the backend keeps a smaller copy
    /// (`Backend::draft_head`); None: the head itself.
    draft_head: Option<B::Tensor>,
    rope: RopeTables, // partial: the first `rotary_dim` channels of a head
    num_linear: usize,
    num_full: usize,
    /// The tensor-parallel group this model is a rank of (none: the whole model); `config`
    /// then holds the rank's head counts and widths (`qwen3_5/shard.rs`).
    tp: Tp<B>,
}

/// Host values as a loader tensor (f32).
fn host_f32(shape: Vec<usize>, values: &[f32]) -> HostTensor<'static> {
    let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    HostTensor {
        shape,
        data: HostData::Raw {
            dtype: DType::F32,
            bytes: Cow::Owned(bytes),
        },
    }
}

/// The loader's uploads onto the backend, failures as load errors.
struct Up<'b, B: HybridOps>(&'b B);

impl<B: HybridOps> Up<'_, B> {
    fn err(e: BackendError) -> LoadError {
        LoadError::Config {
            path: "weights".into(),
            message: e.to_string(),
        }
    }

    /// In the backend's storage type (matrices, norms).
    fn t(&self, t: HostTensor<'_>) -> std::result::Result<B::Tensor, LoadError> {
        self.0.upload(&t).map_err(Self::err)
    }

    /// In f32 whatever the compute type (the linear layers' small parameters).
    fn f32(&self, shape: &[usize], v: &[f32]) -> std::result::Result<B::Tensor, LoadError> {
        self.0.upload_f32(shape, v).map_err(Self::err)
    }

    /// A zero-centred norm weight as the plain multiplier `1 + w`.
    fn plus_one(&self, t: HostTensor<'_>) -> std::result::Result<B::Tensor, LoadError> {
        let v: Vec<f32> = t.to_f32().iter().map(|w| w + 1.0).collect();
        self.t(host_f32(t.shape.clone(), &v))
    }
}

fn shape_err(message: String) -> BackendError {
    BackendError::Shape {
        op: "qwen3_5 forward",
        message,
    }
}

/// One decoder layer under `p` (`model.layers.{l}`, or `mtp.layers.0`): its mixer (the
/// `index`-th of its kind: its state or KV cache entry) and its MLP.
fn load_layer<B: HybridOps>(
    (up, cut): (&Up<'_, B>, &Cut),
    config: &Qwen3_5Config,
    w: &Weights,
    p: &str,
    kind: LayerType,
    index: usize,
) -> std::result::Result<Layer<B>, LoadError> {
    let c = &config.base;
    let s = config.linear;
    let (h, hd, nh, nkv) = (
        c.hidden_size,
        c.head_dim,
        c.num_attention_heads,
        c.num_key_value_heads,
    );
    let mat = |name: &str, shape: &[usize]| w.get(name, shape, TensorKind::Matrix);
    let norm = |name: &str, n: usize| w.get(name, &[n], TensorKind::Norm);
    let conv_dim = config.conv_dim();
    let swiglu = |p: &str, i: usize| -> std::result::Result<SwiGlu<B>, LoadError> {
        Ok(SwiGlu {
            gate_up: up.t(HostTensor::concat_rows(&[
                cut.mlp(mat(&format!("{p}.gate_proj.weight"), &[i, h])?, true),
                cut.mlp(mat(&format!("{p}.up_proj.weight"), &[i, h])?, true),
            ]))?,
            down: up.t(cut.mlp(mat(&format!("{p}.down_proj.weight"), &[h, i])?, false))?,
        })
    };
    let mixer = match kind {
        LayerType::LinearAttention => {
            let a = format!("{p}.linear_attn");
            // The rank's value heads of a per-head vector (all of them without a group).
            let per_head = |name: &str| -> std::result::Result<Vec<f32>, LoadError> {
                Ok(cut
                    .value_heads(norm(&format!("{a}.{name}"), s.nv)?, 1)
                    .to_f32())
            };
            let a_log = per_head("A_log")?;
            let neg_a: Vec<f32> = a_log.iter().map(|x| -x.exp()).collect();
            let dt_bias = per_head("dt_bias")?;
            let k = config.conv_kernel;
            let conv = mat(&format!("{a}.conv1d.weight"), &[conv_dim, 1, k])?;
            let conv = cut.delta_qkv(config, conv).to_f32();
            let proj = |n: &str, rows: usize| mat(&format!("{a}.{n}.weight"), &[rows, h]);
            Mixer::Linear(LinearAttn {
                in_proj: up.t(HostTensor::concat_rows(&[
                    cut.delta_qkv(config, proj("in_proj_qkv", conv_dim)?),
                    cut.value_heads(proj("in_proj_z", s.nv * s.dv)?, s.dv),
                    cut.value_heads(proj("in_proj_b", s.nv)?, 1),
                    cut.value_heads(proj("in_proj_a", s.nv)?, 1),
                ]))?,
                conv: up.f32(&[conv.len() / k, k], &conv)?,
                neg_a: up.f32(&[neg_a.len()], &neg_a)?,
                dt_bias: up.f32(&[dt_bias.len()], &dt_bias)?,
                norm: up.f32(&[s.dv], &norm(&format!("{a}.norm.weight"), s.dv)?.to_f32())?,
                out: up.t(cut.delta_out(
                    mat(&format!("{a}.out_proj.weight"), &[h, s.nv * s.dv])?,
                    s.dv,
                ))?,
                state: index,
            })
        }
        LayerType::FullAttention => {
            let a = format!("{p}.self_attn");
            // q_proj holds each head's query then its gate: split them into q rows (fused
            // with k and v) and gate rows, of the rank's heads only with a group. Rows are cut
            // in the checkpoint's format (FP8 and NVFP4 rows carry their own scales), so both
            // reach the device as packed as the rest.
            let q_gate = mat(&format!("{a}.q_proj.weight"), &[nh * 2 * hd, h])?.drawn();
            let heads: Vec<usize> = (0..nh).filter(|&i| cut.has_q_head(i)).collect();
            let half = |second: usize| -> Vec<HostTensor<'static>> {
                heads
                    .iter()
                    .map(|&i| {
                        let at = (2 * i + second) * hd;
                        crate::parallel::shard::rows(&q_gate, at..at + hd)
                    })
                    .collect()
            };
            let kv = |n: &str| -> std::result::Result<HostTensor<'_>, LoadError> {
                let t = mat(&format!("{a}.{n}_proj.weight"), &[nkv * hd, h])?;
                Ok(cut.kv_rows(t, hd))
            };
            let mut qkv: Vec<HostTensor<'_>> = half(0);
            qkv.push(kv("k")?);
            qkv.push(kv("v")?);
            Mixer::Full(FullAttn {
                qkv: up.t(HostTensor::concat_rows(&qkv))?,
                gate: up.t(HostTensor::concat_rows(&half(1)))?,
                q_norm: up.plus_one(norm(&format!("{a}.q_norm.weight"), hd)?)?,
                k_norm: up.plus_one(norm(&format!("{a}.k_norm.weight"), hd)?)?,
                o: up.t(cut.o(mat(&format!("{a}.o_proj.weight"), &[h, nh * hd])?, hd))?,
                cache: index,
            })
        }
    };
    let mlp = match (&c.moe, config.shared_expert_intermediate_size) {
        (Some(moe), Some(shared)) => Mlp::Sparse(Box::new(MoeMlp {
            experts: SparseMoe::load(w, moe, (h, cut.shard), &format!("{p}.mlp"), &|t| up.t(t))?,
            shared: swiglu(&format!("{p}.mlp.shared_expert"), shared)?,
            shared_gate: up.t(mat(&format!("{p}.mlp.shared_expert_gate.weight"), &[1, h])?)?,
        })),
        _ => Mlp::Dense(swiglu(&format!("{p}.mlp"), c.intermediate_size)?),
    };
    Ok(Layer {
        input_norm: up.plus_one(norm(&format!("{p}.input_layernorm.weight"), h)?)?,
        mixer,
        post_norm: up.plus_one(norm(&format!("{p}.post_attention_layernorm.weight"), h)?)?,
        mlp,
    })
}

impl Qwen3_5 {
    pub fn load(config: &Qwen3_5Config, w: &Weights) -> std::result::Result<Self, LoadError> {
        Self::load_reporting(config, w, &mut |_| {})
    }

    /// [`Qwen3_5::load`], calling `layer_done(n)` after the n-th decoder layer is loaded.
    pub fn load_reporting(
        config: &Qwen3_5Config,
        w: &Weights,
        layer_done: &mut dyn FnMut(usize),
    ) -> std::result::Result<Self, LoadError> {
        Self::load_with(config, w, false, layer_done)
    }

    /// [`Qwen3_5::load_reporting`], with the MTP head (`mtp.*`) too when `mtp` is set (for
    /// speculative decoding): refused by name when the checkpoint has none.
    pub fn load_with(
        config: &Qwen3_5Config,
        w: &Weights,
        mtp: bool,
        layer_done: &mut dyn FnMut(usize),
    ) -> std::result::Result<Self, LoadError> {
        Qwen3_5::load_on(&CpuBackend::default(), config, w, mtp, layer_done)
    }
}

impl<B: HybridOps> Qwen3_5<B> {
    /// The model on `backend`, with the MTP head when `mtp` is set; refused by name when the
    /// backend lacks the hybrid layers' ops or the checkpoint the head.
    pub fn load_on(
        backend: &B,
        config: &Qwen3_5Config,
        w: &Weights,
        mtp: bool,
        layer_done: &mut dyn FnMut(usize),
    ) -> std::result::Result<Self, LoadError> {
        Self::load_sharded(backend, config, w, (mtp, None), layer_done)
    }

    /// [`Qwen3_5::load_on`] as one rank of `tp`'s group (`qwen3_5/shard.rs`); the MTP head
    /// is not split yet, so a group of several refuses `mtp`.
    pub fn load_sharded(
        backend: &B,
        config: &Qwen3_5Config,
        w: &Weights,
        (mtp, tp): (bool, Option<std::sync::Arc<dyn Collective<B>>>),
        layer_done: &mut dyn FnMut(usize),
    ) -> std::result::Result<Self, LoadError> {
        let tp = Tp(tp);
        let cut = Cut::new(config, tp.shard())?;
        if mtp && cut.shard.world > 1 {
            return Err(LoadError::UnsupportedOnDevice(
                "--speculative with a tensor-parallel size above 1 is not built yet (the MTP \
                 head is not split over ranks): serve without --speculative"
                    .into(),
            ));
        }
        if !backend.supports(Feature::HybridLayers) {
            return Err(LoadError::UnsupportedOnDevice(NO_HYBRID_LAYERS.into()));
        }
        super::check_backend(backend, &config.base)?;
        let up = Up(backend);
        let c = &config.base;
        let h = c.hidden_size;
        let mat = |name: &str, shape: &[usize]| w.get(name, shape, TensorKind::Matrix);
        let norm = |name: &str, n: usize| w.get(name, &[n], TensorKind::Norm);
        let root = config.weight_prefix;
        let mut layers = Vec::with_capacity(c.num_hidden_layers);
        let (mut num_linear, mut num_full) = (0, 0);
        for (l, kind) in config.layer_types.iter().enumerate() {
            let index = match kind {
                LayerType::LinearAttention => &mut num_linear,
                LayerType::FullAttention => &mut num_full,
            };
            let p = format!("{root}.layers.{l}");
            layers.push(load_layer((&up, &cut), config, w, &p, *kind, *index)?);
            *index += 1;
            layer_done(l + 1);
        }
        let mtp = if mtp {
            if !w.contains("mtp.fc.weight") {
                return Err(LoadError::UnsupportedOnDevice(format!(
                    "--speculative needs the checkpoint's MTP head, and this one has none (no \
                     mtp.* tensors; config.json's mtp_num_hidden_layers is {}): serve it \
                     without --speculative",
                    config.mtp_num_hidden_layers
                )));
            }
            // Its attention layer's keys and values go in the cache layer after the target's.
            let full = LayerType::FullAttention;
            let layer = load_layer((&up, &cut), config, w, "mtp.layers.0", full, num_full)?;
            let fc = mat("mtp.fc.weight", &[h, 2 * h])?.to_f32();
            let half = |second: bool| -> Vec<f32> {
                fc.chunks(2 * h)
                    .flat_map(|r| if second { &r[h..] } else { &r[..h] })
                    .copied()
                    .collect()
            };
            Some(MtpHead {
                fc_embed: up.t(host_f32(vec![h, h], &half(false)))?,
                fc_hidden: up.t(host_f32(vec![h, h], &half(true)))?,
                norm_embed: up.plus_one(norm("mtp.pre_fc_norm_embedding.weight", h)?)?,
                norm_hidden: up.plus_one(norm("mtp.pre_fc_norm_hidden.weight", h)?)?,
                layer,
                norm: up.plus_one(norm("mtp.norm.weight", h)?)?,
            })
        } else {
            None
        };
        let embed = up.t(mat(
            &format!("{root}.embed_tokens.weight"),
            &[c.vocab_size, h],
        )?)?;
        // A tied head is the embedding, unless --requantize gives the head its own format. A
        // rank of several keeps its vocabulary rows of either.
        let embed_name = format!("{root}.embed_tokens.weight");
        let sharded = crate::parallel::shard::head_rows(
            (cut.shard, cut.vocab.clone()),
            c.tie_word_embeddings,
            (&embed_name, "lm_head.weight"),
            |n| mat(n, &[c.vocab_size, h]),
        )?;
        let lm_head = if let Some(rows) = sharded {
            Some(up.t(rows)?)
        } else if c.tie_word_embeddings {
            match w.tied_head(&embed_name, &[c.vocab_size, h])? {
                Some(head) => Some(up.t(head)?),
                None => None,
            }
        } else {
            Some(up.t(mat("lm_head.weight", &[c.vocab_size, h])?)?)
        };
        let draft_head = match &mtp {
            Some(_) => backend
                .draft_head(lm_head.as_ref().unwrap_or(&embed))
                .map_err(Up::<B>::err)?,
            None => None,
        };
        let (inv_freq, scale) = c.rope.inv_freq(c.head_dim);
        Ok(Self {
            config: cut.local(config),
            embed,
            layers,
            mtp,
            norm: up.plus_one(norm(&format!("{root}.norm.weight"), h)?)?,
            lm_head,
            draft_head,
            rope: RopeTables {
                rotary_dim: 2 * inv_freq.len(),
                inv_freq,
                scale,
            },
            num_linear,
            num_full,
            tp,
        })
    }

    /// Gated attention: `out = o_proj(attn(rope(norm(q)), rope(norm(k)), v) · sigmoid(gate))`,
    /// keys and values through the paged cache.
    #[allow(clippy::too_many_arguments)]
    fn full_attention(
        &self,
        b: &B,
        out: &mut B::Tensor,
        xn: &B::Tensor,
        a: &FullAttn<B>,
        batch: &B::Batch,
        k_cache: &mut B::Tensor,
        v_cache: &mut B::Tensor,
    ) -> Result<()> {
        let c = &self.config.base;
        let (t, hd, nh, nkv) = (
            rows::<B>(b, xn),
            c.head_dim,
            c.num_attention_heads,
            c.num_key_value_heads,
        );
        // q, k, v = xn · Wᵀ; gate = xn · Wgateᵀ
        let mut qkv = b.zeros(&[t, (nh + 2 * nkv) * hd])?; // [T, (nh + 2·nkv)·hd]
        let mut gate = b.zeros(&[t, nh * hd])?; // [T, nh·hd]
        b.matmul(&mut qkv, xn, &a.qkv)?;
        b.matmul(&mut gate, xn, &a.gate)?;
        // QK-norm per head, partial rotary embedding; k, v into the paged cache
        b.qk_norm_rope_write_kv(
            &mut qkv,
            batch,
            &a.q_norm,
            &a.k_norm,
            &self.rope,
            (nh, nkv, c.rms_norm_eps),
            k_cache,
            v_cache,
        )?;
        // attn = causal softmax(q kᵀ / √hd) v, gated by sigmoid(gate)  [T, nh·hd]
        let mut attn = b.zeros(&[t, nh * hd])?;
        let scale = 1.0 / (hd as f32).sqrt();
        b.paged_attention(&mut attn, &qkv, k_cache, v_cache, batch, nh, scale)?;
        b.sigmoid_mul(&mut attn, &gate)?;
        b.matmul(out, &attn, &a.o)
    }
}

/// Rows of a `[rows, cols]` tensor.
fn rows<B: Backend>(b: &B, t: &B::Tensor) -> usize {
    b.shape(t).first().copied().unwrap_or(0)
}

/// Scratch of one pass through decoder layers over `T` rows.
struct Bufs<T> {
    x: T,       // residual stream [T, H]
    xn: T,      // normalised sub-block input [T, H]
    proj: T,    // sub-block output [T, H]
    gate_up: T, // [T, 2·I]
    act: T,     // [T, I]
}

impl<B: HybridOps> Qwen3_5<B> {
    fn bufs(&self, b: &B, t: usize) -> Result<Bufs<B::Tensor>> {
        let h = self.config.base.hidden_size;
        // The dense MLP's width, or the shared expert's in Qwen3.5-MoE.
        let i = self
            .config
            .shared_expert_intermediate_size
            .unwrap_or(self.config.base.intermediate_size);
        Ok(Bufs {
            x: b.zeros(&[t, h])?,
            xn: b.zeros(&[t, h])?,
            proj: b.zeros(&[t, h])?,
            gate_up: b.zeros(&[t, 2 * i])?,
            act: b.zeros(&[t, i])?,
        })
    }

    /// One decoder layer over the batch: `x += mixer(xn); x += mlp(post_norm(x))`, then
    /// `xn = next_norm(x)` (the next layer's input norm, or the final one), fused with the
    /// residual add. On entry `f.xn` holds this layer's `input_norm(x)`: the caller norms
    /// before the first layer. `state` is needed by linear-attention layers only.
    #[allow(clippy::too_many_arguments)]
    fn run_layer(
        &self,
        b: &B,
        layer: &Layer<B>,
        f: &mut Bufs<B::Tensor>,
        host: &BatchInputs,
        batch: &B::Batch,
        kv: (&mut [B::Tensor], &mut [B::Tensor]),
        state: Option<&mut StateStorage<B>>,
        next_norm: &B::Tensor,
    ) -> Result<()> {
        let c = &self.config.base;
        let (eps, h, t) = (c.rms_norm_eps, c.hidden_size, rows::<B>(b, &f.x));
        let Bufs {
            x,
            xn,
            proj,
            gate_up,
            act,
        } = f;
        // x += mixer(xn)
        match &layer.mixer {
            Mixer::Linear(a) => {
                let state = state.ok_or_else(|| {
                    shape_err("a linear-attention layer ran without state storage".into())
                })?;
                self.linear_attention(b, proj, xn, a, host, batch, state)?
            }
            Mixer::Full(a) => {
                let (k, v) = kv;
                let (k, v) = match (k.get_mut(a.cache), v.get_mut(a.cache)) {
                    (Some(k), Some(v)) => (k, v),
                    _ => {
                        return Err(shape_err(format!(
                            "KV cache layer {} was not allocated",
                            a.cache
                        )));
                    }
                };
                self.full_attention(b, proj, xn, a, batch, k, v)?
            }
        }
        // x += mixer; xn = post_norm(x)
        self.tp.all_reduce(b, proj)?;
        b.add_rms_norm(xn, x, proj, &layer.post_norm, eps)?;
        match &layer.mlp {
            // x += down(silu(gate) * up)
            Mlp::Dense(m) => {
                b.matmul_silu_mul(act, gate_up, xn, &m.gate_up)?;
                b.matmul(proj, act, &m.down)?;
            }
            // x += Σ top-k experts(xn) + sigmoid(xn · shared_gateᵀ) · shared(xn)
            Mlp::Sparse(moe) => {
                let MoeMlp {
                    experts,
                    shared,
                    shared_gate,
                } = moe.as_ref();
                experts.forward(b, proj, xn)?;
                let mut routed = b.zeros(&[t, h])?; // [T, H]
                std::mem::swap(&mut routed, proj);
                b.matmul_silu_mul(act, gate_up, xn, &shared.gate_up)?;
                b.matmul(proj, act, &shared.down)?;
                let mut gate = b.zeros(&[t, 1])?; // [T, 1]
                b.matmul(&mut gate, xn, shared_gate)?;
                b.add_gated(proj, &routed, &gate)?;
            }
        }
        // x += mlp; xn = next_norm(x)
        self.tp.all_reduce(b, proj)?;
        b.add_rms_norm(xn, x, proj, next_norm, eps)
    }

    /// The decoder over the batch: the final-normed hidden state of every row `[T, H]`.
    fn trunk(
        &self,
        b: &B,
        host: &BatchInputs,
        batch: &B::Batch,
        kv: &mut KvStorage<B>,
    ) -> Result<B::Tensor> {
        let KvStorage {
            k: k_caches,
            v: v_caches,
            state,
            ..
        } = kv;
        let state = state
            .as_mut()
            .ok_or_else(|| shape_err("no recurrent-state storage was allocated".into()))?;
        // Each sequence's state: zeros, a checkpoint's copy, or where it left off.
        super::recurrent::start_states(b, host, state)?;
        let mut f = self.bufs(b, host.num_tokens())?;
        // x = embed[tokens]
        b.embedding(&mut f.x, batch, &self.embed)?;
        // xn = the first layer's input norm (x); each layer norms for the next, the last with
        // the final norm.
        let norm_of = |i: usize| self.layers.get(i).map_or(&self.norm, |l| &l.input_norm);
        b.rms_norm(&mut f.xn, &f.x, norm_of(0), self.config.base.rms_norm_eps)?;
        for (i, layer) in self.layers.iter().enumerate() {
            let kv = (k_caches.as_mut_slice(), v_caches.as_mut_slice());
            self.run_layer(
                b,
                layer,
                &mut f,
                host,
                batch,
                kv,
                Some(state),
                norm_of(i + 1),
            )?;
        }
        Ok(f.xn)
    }

    /// KV cache layers: the full-attention layers, then the MTP head's when loaded.
    fn num_kv_layers(&self) -> usize {
        self.num_full + usize::from(self.mtp.is_some())
    }

    fn head(&self) -> &B::Tensor {
        self.lm_head.as_ref().unwrap_or(&self.embed)
    }
}

impl<B: HybridOps> Model<B> for Qwen3_5<B> {
    fn forward(
        &self,
        b: &B,
        host: &BatchInputs,
        batch: &B::Batch,
        kv: &mut KvStorage<B>,
    ) -> Result<B::Tensor> {
        // logits = norm(x)[rows] · lm_headᵀ
        let xn = self.trunk(b, host, batch, kv)?;
        self.tp
            .logits(b, lm_head_logits(b, &xn, host, batch, self.head())?)
    }

    fn has_mtp(&self) -> bool {
        self.mtp.is_some()
    }

    fn forward_with_hidden(
        &self,
        b: &B,
        host: &BatchInputs,
        batch: &B::Batch,
        kv: &mut KvStorage<B>,
    ) -> Result<(B::Tensor, B::Tensor)> {
        let xn = self.trunk(b, host, batch, kv)?;
        let logits = lm_head_logits(b, &xn, host, batch, self.head())?;
        Ok((self.tp.logits(b, logits)?, xn))
    }

    fn mtp_forward(
        &self,
        b: &B,
        host: &BatchInputs,
        batch: &B::Batch,
        hidden: &B::Tensor,
        kv: &mut KvStorage<B>,
    ) -> Result<(B::Tensor, B::Tensor)> {
        self.mtp_pass(b, host, batch, hidden, kv)
    }

    fn mtp_fill_cache(
        &self,
        b: &B,
        host: &BatchInputs,
        batch: &B::Batch,
        hidden: &B::Tensor,
        kv: &mut KvStorage<B>,
    ) -> Result<()> {
        self.mtp_keys(b, host, batch, hidden, kv)
    }

    fn new_kv_storage(
        &self,
        backend: &B,
        num_blocks: usize,
        block_size: usize,
    ) -> Result<KvStorage<B>> {
        let c = &self.config.base;
        KvStorage::new(
            backend,
            self.num_kv_layers(),
            num_blocks,
            block_size,
            c.num_key_value_heads,
            c.head_dim,
        )
    }

    fn kv_bytes_per_token(&self, backend: &B) -> usize {
        let c = &self.config.base;
        2 * self.num_kv_layers() * c.num_key_value_heads * backend.kv_head_bytes(c.head_dim)
    }

    fn activation_bytes(&self, tokens: usize, logits_rows: usize) -> usize {
        let c = &self.config.base;
        let s = self.config.linear;
        // x, xn, proj, gate_up, act; the widest mixer (a linear layer's projections, conv
        // input and output, q/k/v copies, core and normed; or attention's qkv, gate, attn),
        // then the gathered rows and their logits; doubled for slack.
        let cd = self.config.conv_dim();
        let linear = 2 * (cd + s.nv * s.dv + 2 * s.nv) + 3 * cd + 3 * s.nv * s.dv;
        let hd = c.head_dim;
        let full = (c.num_attention_heads * 3 + 2 * c.num_key_value_heads) * hd;
        let i = self
            .config
            .shared_expert_intermediate_size
            .unwrap_or(c.intermediate_size);
        // MoE: router logits, the routed sum, the shared gate, and per top-k choice the
        // expert's rows, gate|up, act and output.
        let moe = c.moe.as_ref().map_or(0, |m| {
            m.num_experts
                + c.hidden_size
                + 1
                + m.num_experts_per_tok * (2 * c.hidden_size + 3 * m.moe_intermediate_size)
        });
        let per_token = 3 * c.hidden_size + 3 * i + moe + linear.max(full);
        let rows = logits_rows.min(tokens);
        2 * 4 * (tokens * per_token + rows * (c.hidden_size + c.vocab_size))
    }

    fn vocab_size(&self) -> usize {
        self.config.base.vocab_size
    }

    fn max_position_embeddings(&self) -> usize {
        self.config.base.max_position_embeddings
    }

    /// The slots in f32 whatever the compute type.
    fn new_state_storage(&self, backend: &B, slots: usize) -> Result<StateStorage<B>> {
        StateStorage::new(self.state_spec(), slots, &|shape| backend.zeros_f32(shape))
    }

    fn state_spec(&self) -> Option<StateSpec> {
        let s = self.config.linear;
        Some(StateSpec {
            layers: self.num_linear,
            conv_elements: (self.config.conv_kernel - 1) * self.config.conv_dim(),
            recurrent_elements: s.nv * s.dk * s.dv,
        })
    }
}

#[cfg(test)]
mod tests;
