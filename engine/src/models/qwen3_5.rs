//! Qwen3.5 hybrid text models (`Qwen3_5ForCausalLM`, `Qwen3_5MoeForCausalLM`, and the Hub's
//! `*ForConditionalGeneration` layouts of both, text only; transformers 5.17), on the CPU
//! reference backend, served by the engine like Qwen3: one varlen batch of many sequences a
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
//!
//! Not yet here (issue 12): CUDA.

use crate::backend::cpu::CpuTensor;
use crate::backend::{Backend, BackendError, BatchInputs, CpuBackend, Result, RopeTables};
use crate::loader::{HostTensor, LoadError, TensorKind, Weights};

use super::qwen3_moe::SparseMoe;
use super::{KvStorage, Model, StateSpec, StateStorage, lm_head_logits};

mod config;
mod linear;
mod sequence;

pub use config::{LayerType, Qwen3_5Config};
pub use sequence::SequenceState;

/// The architecture names in `config.json`: the text models, and the Hub's multimodal
/// checkpoints whose text model this runs (vision tower and MTP head ignored).
pub const ARCHITECTURES: [&str; 4] = [
    "Qwen3_5ForCausalLM",
    "Qwen3_5MoeForCausalLM",
    "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration",
];

/// Whether `architecture` is a Qwen3.5 hybrid this file runs.
pub fn is_hybrid(architecture: &str) -> bool {
    ARCHITECTURES.contains(&architecture)
}

/// Why `--device cuda` refuses them.
pub const CPU_ONLY: &str = "Qwen3.5 hybrid models (Qwen3_5*) run on --device cpu only in this \
     version: the cuda backend has no linear-attention kernels yet";

/// A Gated DeltaNet layer's weights.
struct LinearAttn {
    in_proj: CpuTensor, // qkv | z | b | a: [C + nv·dv + 2·nv, H]
    conv: Vec<f32>,     // [C, K]
    neg_a: Vec<f32>,    // −exp(A_log) [nv]
    dt_bias: Vec<f32>,  // [nv]
    norm: Vec<f32>,     // [dv], gated norm
    out: CpuTensor,     // [H, nv·dv]
    /// This layer's index among the linear-attention layers (its
    /// [`StateStorage`](super::StateStorage) entry).
    state: usize,
}

/// A gated full-attention layer's weights.
struct FullAttn {
    qkv: CpuTensor,    // q (all heads), k, v: [(nh + 2·nkv)·hd, H]
    gate: CpuTensor,   // the output gate (all heads): [nh·hd, H]
    q_norm: CpuTensor, // [hd], 1 + w
    k_norm: CpuTensor, // [hd], 1 + w
    o: CpuTensor,      // [H, nh·hd]
    /// This layer's index among the full-attention layers (its [`KvStorage`] entry).
    cache: usize,
}

enum Mixer {
    Linear(LinearAttn),
    Full(FullAttn),
}

/// A SwiGLU MLP: `down(silu(gate) · up)`.
struct SwiGlu {
    gate_up: CpuTensor, // [2·I, H]
    down: CpuTensor,    // [H, I]
}

/// Qwen3.5-MoE's MLP: routed experts plus a shared expert gated by `sigmoid(x · gateᵀ)`.
struct MoeMlp {
    experts: SparseMoe<CpuBackend>,
    shared: SwiGlu,
    shared_gate: CpuTensor, // [1, H]
}

enum Mlp {
    Dense(SwiGlu),
    Sparse(Box<MoeMlp>),
}

struct Layer {
    input_norm: CpuTensor, // [H], 1 + w
    mixer: Mixer,
    post_norm: CpuTensor, // [H], 1 + w
    mlp: Mlp,
}

/// The checkpoint's multi-token-prediction block (`mtp.*`), loaded for speculative decoding:
/// `x = fc([norm_e(embed(t)); norm_h(h)])`, one gated full-attention decoder layer (its keys
/// and values in the KV cache's last layer), then `norm`; logits through the target's head.
struct MtpHead {
    fc: CpuTensor,          // [H, 2·H]
    norm_embed: CpuTensor,  // [H], 1 + w
    norm_hidden: CpuTensor, // [H], 1 + w
    layer: Layer,
    norm: CpuTensor, // [H], 1 + w
}

pub struct Qwen3_5 {
    pub config: Qwen3_5Config,
    embed: CpuTensor, // [V, H]
    layers: Vec<Layer>,
    mtp: Option<MtpHead>,
    norm: CpuTensor,            // [H], 1 + w
    lm_head: Option<CpuTensor>, // [V, H]; None when tied
    rope: RopeTables,           // partial: the first `rotary_dim` channels of a head
    num_linear: usize,
    num_full: usize,
}

fn tensor(t: HostTensor<'_>) -> CpuTensor {
    CpuTensor::new(t.shape.clone(), t.to_f32())
}

/// A zero-centred norm weight as the plain multiplier `1 + w`.
fn plus_one(t: HostTensor<'_>) -> CpuTensor {
    let mut t = tensor(t);
    t.data.iter_mut().for_each(|w| *w += 1.0);
    t
}

fn shape_err(message: String) -> BackendError {
    BackendError::Shape {
        op: "qwen3_5 forward",
        message,
    }
}

/// One decoder layer under `p` (`model.layers.{l}`, or `mtp.layers.0`): its mixer (the
/// `index`-th of its kind: its state or KV cache entry) and its MLP.
fn load_layer(
    config: &Qwen3_5Config,
    w: &Weights,
    p: &str,
    kind: LayerType,
    index: usize,
) -> std::result::Result<Layer, LoadError> {
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
    let swiglu = |p: &str, i: usize| -> std::result::Result<SwiGlu, LoadError> {
        Ok(SwiGlu {
            gate_up: tensor(HostTensor::concat_rows(&[
                mat(&format!("{p}.gate_proj.weight"), &[i, h])?,
                mat(&format!("{p}.up_proj.weight"), &[i, h])?,
            ])),
            down: tensor(mat(&format!("{p}.down_proj.weight"), &[h, i])?),
        })
    };
    let mixer = match kind {
        LayerType::LinearAttention => {
            let a = format!("{p}.linear_attn");
            let a_log = norm(&format!("{a}.A_log"), s.nv)?.to_f32();
            Mixer::Linear(LinearAttn {
                in_proj: tensor(HostTensor::concat_rows(&[
                    mat(&format!("{a}.in_proj_qkv.weight"), &[conv_dim, h])?,
                    mat(&format!("{a}.in_proj_z.weight"), &[s.nv * s.dv, h])?,
                    mat(&format!("{a}.in_proj_b.weight"), &[s.nv, h])?,
                    mat(&format!("{a}.in_proj_a.weight"), &[s.nv, h])?,
                ])),
                conv: mat(
                    &format!("{a}.conv1d.weight"),
                    &[conv_dim, 1, config.conv_kernel],
                )?
                .to_f32(),
                neg_a: a_log.iter().map(|x| -x.exp()).collect(),
                dt_bias: norm(&format!("{a}.dt_bias"), s.nv)?.to_f32(),
                norm: norm(&format!("{a}.norm.weight"), s.dv)?.to_f32(),
                out: tensor(mat(&format!("{a}.out_proj.weight"), &[h, s.nv * s.dv])?),
                state: index,
            })
        }
        LayerType::FullAttention => {
            let a = format!("{p}.self_attn");
            // q_proj holds each head's query then its gate: split them into q rows (fused
            // with k and v) and gate rows.
            let q_gate = mat(&format!("{a}.q_proj.weight"), &[nh * 2 * hd, h])?.to_f32();
            let (mut q, mut gate) = (Vec::new(), Vec::new());
            for head in q_gate.chunks(2 * hd * h) {
                q.extend_from_slice(&head[..hd * h]);
                gate.extend_from_slice(&head[hd * h..]);
            }
            q.extend(mat(&format!("{a}.k_proj.weight"), &[nkv * hd, h])?.to_f32());
            q.extend(mat(&format!("{a}.v_proj.weight"), &[nkv * hd, h])?.to_f32());
            Mixer::Full(FullAttn {
                qkv: CpuTensor::new(vec![(nh + 2 * nkv) * hd, h], q),
                gate: CpuTensor::new(vec![nh * hd, h], gate),
                q_norm: plus_one(norm(&format!("{a}.q_norm.weight"), hd)?),
                k_norm: plus_one(norm(&format!("{a}.k_norm.weight"), hd)?),
                o: tensor(mat(&format!("{a}.o_proj.weight"), &[h, nh * hd])?),
                cache: index,
            })
        }
    };
    let mlp = match (&c.moe, config.shared_expert_intermediate_size) {
        (Some(moe), Some(shared)) => Mlp::Sparse(Box::new(MoeMlp {
            experts: SparseMoe::load(w, moe, h, &format!("{p}.mlp"), &|t| Ok(tensor(t)))?,
            shared: swiglu(&format!("{p}.mlp.shared_expert"), shared)?,
            shared_gate: tensor(mat(&format!("{p}.mlp.shared_expert_gate.weight"), &[1, h])?),
        })),
        _ => Mlp::Dense(swiglu(&format!("{p}.mlp"), c.intermediate_size)?),
    };
    Ok(Layer {
        input_norm: plus_one(norm(&format!("{p}.input_layernorm.weight"), h)?),
        mixer,
        post_norm: plus_one(norm(&format!("{p}.post_attention_layernorm.weight"), h)?),
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
            layers.push(load_layer(
                config,
                w,
                &format!("{root}.layers.{l}"),
                *kind,
                *index,
            )?);
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
            let layer = load_layer(
                config,
                w,
                "mtp.layers.0",
                LayerType::FullAttention,
                num_full,
            )?;
            Some(MtpHead {
                fc: tensor(mat("mtp.fc.weight", &[h, 2 * h])?),
                norm_embed: plus_one(norm("mtp.pre_fc_norm_embedding.weight", h)?),
                norm_hidden: plus_one(norm("mtp.pre_fc_norm_hidden.weight", h)?),
                layer,
                norm: plus_one(norm("mtp.norm.weight", h)?),
            })
        } else {
            None
        };
        let embed = tensor(mat(
            &format!("{root}.embed_tokens.weight"),
            &[c.vocab_size, h],
        )?);
        let lm_head = if c.tie_word_embeddings {
            None
        } else {
            Some(tensor(mat("lm_head.weight", &[c.vocab_size, h])?))
        };
        let (inv_freq, scale) = c.rope.inv_freq(c.head_dim);
        Ok(Self {
            config: config.clone(),
            embed,
            layers,
            mtp,
            norm: plus_one(norm(&format!("{root}.norm.weight"), h)?),
            lm_head,
            rope: RopeTables {
                rotary_dim: 2 * inv_freq.len(),
                inv_freq,
                scale,
            },
            num_linear,
            num_full,
        })
    }

    /// Gated attention: `out = o_proj(attn(rope(norm(q)), rope(norm(k)), v) · sigmoid(gate))`,
    /// keys and values through the paged cache.
    #[allow(clippy::too_many_arguments)]
    fn full_attention(
        &self,
        b: &CpuBackend,
        out: &mut CpuTensor,
        xn: &CpuTensor,
        a: &FullAttn,
        batch: &BatchInputs,
        k_cache: &mut CpuTensor,
        v_cache: &mut CpuTensor,
    ) -> Result<()> {
        let c = &self.config.base;
        let (t, hd, nh, nkv) = (
            xn.rows(),
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
        attn.data
            .iter_mut()
            .zip(&gate.data)
            .for_each(|(o, g)| *o *= 1.0 / (1.0 + (-g).exp()));
        b.matmul(out, &attn, &a.o)
    }
}

/// Scratch of one pass through decoder layers over `T` rows.
struct Bufs {
    x: CpuTensor,       // residual stream [T, H]
    xn: CpuTensor,      // normalised sub-block input [T, H]
    proj: CpuTensor,    // sub-block output [T, H]
    gate_up: CpuTensor, // [T, 2·I]
    act: CpuTensor,     // [T, I]
}

impl Qwen3_5 {
    fn bufs(&self, b: &CpuBackend, t: usize) -> Result<Bufs> {
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

    /// One decoder layer over the batch: `x += mixer(norm(x)); x += mlp(post_norm(x))`.
    /// `state` is needed by linear-attention layers only.
    #[allow(clippy::too_many_arguments)]
    fn run_layer(
        &self,
        b: &CpuBackend,
        layer: &Layer,
        f: &mut Bufs,
        host: &BatchInputs,
        batch: &BatchInputs,
        kv: (&mut [CpuTensor], &mut [CpuTensor]),
        state: Option<&mut StateStorage<CpuBackend>>,
    ) -> Result<()> {
        let c = &self.config.base;
        let (eps, h, t) = (c.rms_norm_eps, c.hidden_size, f.x.rows());
        let Bufs {
            x,
            xn,
            proj,
            gate_up,
            act,
        } = f;
        // xn = norm(x); x += mixer(xn)
        b.rms_norm(xn, x, &layer.input_norm, eps)?;
        match &layer.mixer {
            Mixer::Linear(a) => {
                let state = state.ok_or_else(|| {
                    shape_err("a linear-attention layer ran without state storage".into())
                })?;
                self.linear_attention(proj, xn, a, host, state)?
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
                for ((p, r), g) in proj
                    .data
                    .chunks_mut(h)
                    .zip(routed.data.chunks(h))
                    .zip(&gate.data)
                {
                    let g = 1.0 / (1.0 + (-g).exp());
                    p.iter_mut().zip(r).for_each(|(p, r)| *p = r + g * *p);
                }
            }
        }
        x.data.iter_mut().zip(&proj.data).for_each(|(x, p)| *x += p);
        Ok(())
    }

    /// The decoder over the batch: the final-normed hidden state of every row `[T, H]`.
    fn trunk(
        &self,
        b: &CpuBackend,
        host: &BatchInputs,
        batch: &BatchInputs,
        kv: &mut KvStorage<CpuBackend>,
    ) -> Result<CpuTensor> {
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
        self.start_states(host, state)?;
        let mut f = self.bufs(b, host.num_tokens())?;
        // x = embed[tokens]
        b.embedding(&mut f.x, batch, &self.embed)?;
        for layer in &self.layers {
            let kv = (k_caches.as_mut_slice(), v_caches.as_mut_slice());
            self.run_layer(b, layer, &mut f, host, batch, kv, Some(state))?;
        }
        b.rms_norm(&mut f.xn, &f.x, &self.norm, self.config.base.rms_norm_eps)?;
        Ok(f.xn)
    }

    /// KV cache layers: the full-attention layers, then the MTP head's when loaded.
    fn num_kv_layers(&self) -> usize {
        self.num_full + usize::from(self.mtp.is_some())
    }

    fn head(&self) -> &CpuTensor {
        self.lm_head.as_ref().unwrap_or(&self.embed)
    }
}

impl Model<CpuBackend> for Qwen3_5 {
    fn forward(
        &self,
        b: &CpuBackend,
        host: &BatchInputs,
        batch: &BatchInputs,
        kv: &mut KvStorage<CpuBackend>,
    ) -> Result<CpuTensor> {
        // logits = norm(x)[rows] · lm_headᵀ
        let xn = self.trunk(b, host, batch, kv)?;
        lm_head_logits(b, &xn, host, batch, self.head())
    }

    fn has_mtp(&self) -> bool {
        self.mtp.is_some()
    }

    fn forward_with_hidden(
        &self,
        b: &CpuBackend,
        host: &BatchInputs,
        batch: &BatchInputs,
        kv: &mut KvStorage<CpuBackend>,
    ) -> Result<(CpuTensor, CpuTensor)> {
        let xn = self.trunk(b, host, batch, kv)?;
        Ok((lm_head_logits(b, &xn, host, batch, self.head())?, xn))
    }

    fn mtp_forward(
        &self,
        b: &CpuBackend,
        host: &BatchInputs,
        batch: &BatchInputs,
        hidden: &CpuTensor,
        kv: &mut KvStorage<CpuBackend>,
    ) -> Result<(CpuTensor, CpuTensor)> {
        let m = self.mtp.as_ref().ok_or_else(|| {
            shape_err("mtp_forward: the model was loaded without its MTP head".into())
        })?;
        let c = &self.config.base;
        let (t, h, eps) = (host.num_tokens(), c.hidden_size, c.rms_norm_eps);
        if hidden.shape != [t, h] {
            return Err(shape_err(format!(
                "mtp_forward: hidden {:?} for {t} rows of width {h}",
                hidden.shape
            )));
        }
        // x = fc([norm_e(embed(t)); norm_h(h)])  [T, H]
        let mut e = b.zeros(&[t, h])?;
        b.embedding(&mut e, batch, &self.embed)?;
        let mut en = b.zeros(&[t, h])?;
        b.rms_norm(&mut en, &e, &m.norm_embed, eps)?;
        let mut hn = b.zeros(&[t, h])?;
        b.rms_norm(&mut hn, hidden, &m.norm_hidden, eps)?;
        let cat: Vec<f32> = en
            .data
            .chunks(h)
            .zip(hn.data.chunks(h))
            .flat_map(|(e, g)| e.iter().chain(g).copied())
            .collect();
        let cat = CpuTensor::new(vec![t, 2 * h], cat);
        let mut f = self.bufs(b, t)?;
        b.matmul(&mut f.x, &cat, &m.fc)?;
        let kv = (kv.k.as_mut_slice(), kv.v.as_mut_slice());
        self.run_layer(b, &m.layer, &mut f, host, batch, kv, None)?;
        // The head's output, normed: the next draft's hidden input and its logits.
        b.rms_norm(&mut f.xn, &f.x, &m.norm, eps)?;
        let logits = lm_head_logits(b, &f.xn, host, batch, self.head())?;
        let mut rows = b.zeros(&[host.logits_rows.len(), h])?;
        b.gather_rows(&mut rows, &f.xn, batch)?;
        Ok((logits, rows))
    }

    fn copy_state_slot(
        &self,
        _: &CpuBackend,
        kv: &mut KvStorage<CpuBackend>,
        from: usize,
        to: usize,
    ) -> Result<()> {
        let state = kv
            .state
            .as_mut()
            .ok_or_else(|| shape_err("no recurrent-state storage was allocated".into()))?;
        if from.max(to) >= state.num_slots {
            return Err(shape_err(format!(
                "state slots {from} -> {to}: only {} slots",
                state.num_slots
            )));
        }
        for t in state.conv.iter_mut().chain(state.recurrent.iter_mut()) {
            let len = t.cols();
            linear::copy_slot(&mut t.data, len, from, to);
        }
        Ok(())
    }

    fn new_kv_storage(
        &self,
        backend: &CpuBackend,
        num_blocks: usize,
        block_size: usize,
    ) -> Result<KvStorage<CpuBackend>> {
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

    fn kv_bytes_per_token(&self, backend: &CpuBackend) -> usize {
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
