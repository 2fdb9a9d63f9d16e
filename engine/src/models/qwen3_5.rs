//! Qwen3.5 dense hybrid text model (`Qwen3_5ForCausalLM`, transformers 5.17), on the CPU
//! reference backend, one sequence at a time: a whole sequence from position 0
//! ([`Qwen3_5::forward_sequence`]), or in pieces with its [`SequenceState`] carried between
//! calls ([`Qwen3_5::forward`]: prefill in chunks, then decode token by token).
//!
//! Layers follow `layer_types`: most are Gated DeltaNet linear attention (a causal depthwise
//! conv, then the gated delta rule recurrence, a gated RMSNorm and an output projection; see
//! `backend/cpu/hybrid.rs`), every `full_attention_interval`-th is gated full attention (Qwen3's
//! attention with QK-norm, partial rotary embedding, and `o_proj(attn · sigmoid(gate))` where
//! `q_proj` yields each head's query and gate side by side). Every layer has a SwiGLU MLP.
//! Qwen3.5's RMSNorms multiply by `1 + w` (stored around zero); `1` is added at load so the
//! backend's plain `x̂ · w` norm serves. The gated norm of the linear layers multiplies by `w`.
//!
//! Not yet here (issue 12): the state in the engine's cache manager (a `SequenceState` is a
//! plain per-sequence struct, keys and values contiguous, not paged), batching, MoE layers,
//! MTP, and CUDA. The engine refuses these checkpoints at load
//! (`ModelConfig::check_architecture`).

use crate::backend::cpu::CpuTensor;
use crate::backend::cpu::hybrid;
use crate::backend::{Backend, CpuBackend, Result};
use crate::loader::{HostTensor, LoadError, TensorKind, Weights};

mod config;

pub use config::{LayerType, Qwen3_5Config};

/// The architecture name in `config.json`.
pub const ARCHITECTURE: &str = "Qwen3_5ForCausalLM";

/// A Gated DeltaNet layer's weights.
struct LinearAttn {
    in_proj: CpuTensor, // qkv | z | b | a: [C + nv·dv + 2·nv, H]
    conv: Vec<f32>,     // [C, K]
    neg_a: Vec<f32>,    // −exp(A_log) [nv]
    dt_bias: Vec<f32>,  // [nv]
    norm: Vec<f32>,     // [dv], gated norm
    out: CpuTensor,     // [H, nv·dv]
}

/// A gated full-attention layer's weights.
struct FullAttn {
    qkv: CpuTensor,    // q|gate per head, k, v: [nh·2·hd + 2·nkv·hd, H]
    q_norm: CpuTensor, // [hd], 1 + w
    k_norm: CpuTensor, // [hd], 1 + w
    o: CpuTensor,      // [H, nh·hd]
}

enum Mixer {
    Linear(LinearAttn),
    Full(FullAttn),
}

struct Layer {
    input_norm: CpuTensor, // [H], 1 + w
    mixer: Mixer,
    post_norm: CpuTensor, // [H], 1 + w
    gate_up: CpuTensor,   // [2·I, H]
    down: CpuTensor,      // [H, I]
}

pub struct Qwen3_5 {
    pub config: Qwen3_5Config,
    embed: CpuTensor, // [V, H]
    layers: Vec<Layer>,
    norm: CpuTensor,            // [H], 1 + w
    lm_head: Option<CpuTensor>, // [V, H]; None when tied
    inv_freq: Vec<f32>,         // [rotary_dim / 2]
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

impl Qwen3_5 {
    pub fn load(config: &Qwen3_5Config, w: &Weights) -> std::result::Result<Self, LoadError> {
        let c = &config.base;
        let s = config.linear;
        let (h, hd, nh, nkv, i) = (
            c.hidden_size,
            c.head_dim,
            c.num_attention_heads,
            c.num_key_value_heads,
            c.intermediate_size,
        );
        let mat = |name: &str, shape: &[usize]| w.get(name, shape, TensorKind::Matrix);
        let norm = |name: &str, n: usize| w.get(name, &[n], TensorKind::Norm);
        let conv_dim = config.conv_dim();
        let mut layers = Vec::with_capacity(c.num_hidden_layers);
        for (l, kind) in config.layer_types.iter().enumerate() {
            let p = format!("model.layers.{l}");
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
                    })
                }
                LayerType::FullAttention => {
                    let a = format!("{p}.self_attn");
                    Mixer::Full(FullAttn {
                        qkv: tensor(HostTensor::concat_rows(&[
                            mat(&format!("{a}.q_proj.weight"), &[nh * 2 * hd, h])?,
                            mat(&format!("{a}.k_proj.weight"), &[nkv * hd, h])?,
                            mat(&format!("{a}.v_proj.weight"), &[nkv * hd, h])?,
                        ])),
                        q_norm: plus_one(norm(&format!("{a}.q_norm.weight"), hd)?),
                        k_norm: plus_one(norm(&format!("{a}.k_norm.weight"), hd)?),
                        o: tensor(mat(&format!("{a}.o_proj.weight"), &[h, nh * hd])?),
                    })
                }
            };
            layers.push(Layer {
                input_norm: plus_one(norm(&format!("{p}.input_layernorm.weight"), h)?),
                mixer,
                post_norm: plus_one(norm(&format!("{p}.post_attention_layernorm.weight"), h)?),
                gate_up: tensor(HostTensor::concat_rows(&[
                    mat(&format!("{p}.mlp.gate_proj.weight"), &[i, h])?,
                    mat(&format!("{p}.mlp.up_proj.weight"), &[i, h])?,
                ])),
                down: tensor(mat(&format!("{p}.mlp.down_proj.weight"), &[h, i])?),
            });
        }
        let embed = tensor(mat("model.embed_tokens.weight", &[c.vocab_size, h])?);
        let lm_head = if c.tie_word_embeddings {
            None
        } else {
            Some(tensor(mat("lm_head.weight", &[c.vocab_size, h])?))
        };
        let (inv_freq, _) = c.rope.inv_freq(hd);
        Ok(Self {
            config: config.clone(),
            embed,
            layers,
            norm: plus_one(norm("model.norm.weight", h)?),
            lm_head,
            inv_freq,
        })
    }

    /// Logits `[T, V]` for every position of `tokens`, the sequence starting at position 0.
    pub fn forward_sequence(&self, tokens: &[u32]) -> Result<CpuTensor> {
        self.forward(&mut self.new_state(), tokens)
    }

    /// The state of a sequence that has seen no tokens.
    pub fn new_state(&self) -> SequenceState {
        let s = self.config.linear;
        let conv_window = (self.config.conv_kernel - 1) * self.config.conv_dim();
        let layers = self
            .layers
            .iter()
            .map(|l| match l.mixer {
                Mixer::Linear(_) => LayerState::Linear {
                    conv: vec![0.0; conv_window],
                    recurrent: vec![0.0; s.nv * s.dk * s.dv],
                },
                Mixer::Full(_) => LayerState::Full {
                    k: Vec::new(),
                    v: Vec::new(),
                },
            })
            .collect();
        SequenceState {
            position: 0,
            layers,
        }
    }

    /// Logits `[T, V]` for `tokens` at positions `state.position ..`, advancing `state`.
    pub fn forward(&self, state: &mut SequenceState, tokens: &[u32]) -> Result<CpuTensor> {
        let b = CpuBackend;
        let c = &self.config.base;
        let (t, h, v, i) = (
            tokens.len(),
            c.hidden_size,
            c.vocab_size,
            c.intermediate_size,
        );
        let eps = c.rms_norm_eps;
        // x = embed[tokens]
        let mut x = b.zeros(&[t, h])?; // residual stream [T, H]
        for (row, &tok) in x.data.chunks_mut(h).zip(tokens) {
            let tok = (tok as usize).min(v - 1);
            row.copy_from_slice(&self.embed.data[tok * h..][..h]);
        }
        let mut xn = b.zeros(&[t, h])?; // normalised sub-block input [T, H]
        let mut proj = b.zeros(&[t, h])?; // sub-block output [T, H]
        let mut gate_up = b.zeros(&[t, 2 * i])?; // [T, 2·I]
        let mut act = b.zeros(&[t, i])?; // [T, I]
        let start = state.position;
        for (layer, st) in self.layers.iter().zip(&mut state.layers) {
            // xn = norm(x); x += mixer(xn)
            b.rms_norm(&mut xn, &x, &layer.input_norm, eps)?;
            match (&layer.mixer, st) {
                (Mixer::Linear(a), LayerState::Linear { conv, recurrent }) => {
                    self.linear_attention(&mut proj, &xn, a, conv, recurrent)?
                }
                (Mixer::Full(a), LayerState::Full { k, v }) => {
                    self.full_attention(&mut proj, &xn, a, start, k, v)?
                }
                _ => {
                    return Err(crate::backend::BackendError::Shape {
                        op: "qwen3_5 forward",
                        message: "the sequence state was made by another model".into(),
                    });
                }
            }
            // x += mixer; xn = post_norm(x); x += down(silu(gate) * up)
            b.add_rms_norm(&mut xn, &mut x, &proj, &layer.post_norm, eps)?;
            b.matmul_silu_mul(&mut act, &mut gate_up, &xn, &layer.gate_up)?;
            b.matmul(&mut proj, &act, &layer.down)?;
            x.data.iter_mut().zip(&proj.data).for_each(|(x, p)| *x += p);
        }
        // logits = norm(x) · lm_headᵀ
        b.rms_norm(&mut xn, &x, &self.norm, eps)?;
        let mut logits = b.zeros(&[t, v])?; // [T, V]
        b.matmul(
            &mut logits,
            &xn,
            self.lm_head.as_ref().unwrap_or(&self.embed),
        )?;
        state.position += t;
        Ok(logits)
    }

    /// Gated DeltaNet: `out = out_proj(gated_norm(delta_rule(conv(qkv)), z))`.
    fn linear_attention(
        &self,
        out: &mut CpuTensor,
        xn: &CpuTensor,
        a: &LinearAttn,
        window: &mut Vec<f32>,
        state: &mut [f32],
    ) -> Result<()> {
        let b = CpuBackend;
        let s = self.config.linear;
        let t = xn.rows();
        let cd = self.config.conv_dim();
        let vd = s.nv * s.dv;
        let width = cd + vd + 2 * s.nv;
        // qkv | z | b | a = xn · in_projᵀ  [T, C + nv·dv + 2·nv]
        let mut mixed = b.zeros(&[t, width])?;
        b.matmul(&mut mixed, xn, &a.in_proj)?;
        let col = |lo: usize, n: usize| -> Vec<f32> {
            mixed
                .data
                .chunks(width)
                .flat_map(|r| r[lo..lo + n].iter().copied())
                .collect()
        };
        let qkv = col(0, cd); // [T, C]
        let z = col(cd, vd); // [T, nv·dv]
        // beta = sigmoid(b); g = −exp(A_log) · softplus(a + dt_bias)  [T, nv]
        let beta: Vec<f32> = col(cd + vd, s.nv)
            .iter()
            .map(|x| 1.0 / (1.0 + (-x).exp()))
            .collect();
        let g: Vec<f32> = col(cd + vd + s.nv, s.nv)
            .chunks(s.nv)
            .flat_map(|r| {
                r.iter()
                    .zip(&a.dt_bias)
                    .zip(&a.neg_a)
                    .map(|((x, d), na)| na * softplus(x + d))
            })
            .collect();
        // conv = silu(causal depthwise conv(window | qkv))  [K−1 + T, C], whose first K−1 rows
        // (the window's own outputs) are dropped; the window becomes the last K−1 inputs.
        let kept = window.len();
        window.extend_from_slice(&qkv);
        let mut conv = vec![0f32; window.len()];
        hybrid::causal_conv1d_silu(&mut conv, window, &a.conv, cd);
        conv.drain(..kept);
        window.drain(..window.len() - kept);
        let kd = s.nk * s.dk;
        let split = |lo: usize, n: usize| -> Vec<f32> {
            conv.chunks(cd)
                .flat_map(|r| r[lo..lo + n].iter().copied())
                .collect()
        };
        let (q, k, v) = (split(0, kd), split(kd, kd), split(2 * kd, vd));
        // core = gated delta rule over the sequence  [T, nv, dv]
        let mut core = vec![0f32; t * vd];
        hybrid::gated_delta_rule(&mut core, state, &q, &k, &v, &g, &beta, s);
        // normed = rmsnorm(core) · w · silu(z); out = normed · out_projᵀ
        let mut normed = b.zeros(&[t, vd])?;
        hybrid::gated_rms_norm(
            &mut normed.data,
            &core,
            &z,
            &a.norm,
            self.config.base.rms_norm_eps,
        );
        b.matmul(out, &normed, &a.out)
    }

    /// Gated attention: `out = o_proj(attn(rope(norm(q)), rope(norm(k)), v) · sigmoid(gate))`.
    fn full_attention(
        &self,
        out: &mut CpuTensor,
        xn: &CpuTensor,
        a: &FullAttn,
        start: usize,
        k_cache: &mut Vec<f32>,
        v_cache: &mut Vec<f32>,
    ) -> Result<()> {
        let b = CpuBackend;
        let c = &self.config.base;
        let (t, hd, nh, nkv) = (
            xn.rows(),
            c.head_dim,
            c.num_attention_heads,
            c.num_key_value_heads,
        );
        let width = nh * 2 * hd + 2 * nkv * hd;
        // q|gate (per head), k, v = xn · Wᵀ  [T, nh·2·hd + 2·nkv·hd]
        let mut qkv = b.zeros(&[t, width])?;
        b.matmul(&mut qkv, xn, &a.qkv)?;
        let mut q = CpuTensor::new(vec![t * nh, hd], vec![0.0; t * nh * hd]); // [T·nh, hd]
        let mut gate = vec![0f32; t * nh * hd]; // [T, nh·hd]
        let mut k = CpuTensor::new(vec![t * nkv, hd], vec![0.0; t * nkv * hd]); // [T·nkv, hd]
        let mut v = vec![0f32; t * nkv * hd]; // [T, nkv·hd]
        for (r, row) in qkv.data.chunks(width).enumerate() {
            for (head, qg) in row[..nh * 2 * hd].chunks(2 * hd).enumerate() {
                let at = (r * nh + head) * hd;
                q.data[at..at + hd].copy_from_slice(&qg[..hd]);
                gate[at..at + hd].copy_from_slice(&qg[hd..]);
            }
            let kv = &row[nh * 2 * hd..];
            k.data[r * nkv * hd..][..nkv * hd].copy_from_slice(&kv[..nkv * hd]);
            v[r * nkv * hd..][..nkv * hd].copy_from_slice(&kv[nkv * hd..]);
        }
        // QK-norm per head, then partial rotary embedding
        let mut qn = b.zeros(&[t * nh, hd])?;
        let mut kn = b.zeros(&[t * nkv, hd])?;
        b.rms_norm(&mut qn, &q, &a.q_norm, c.rms_norm_eps)?;
        b.rms_norm(&mut kn, &k, &a.k_norm, c.rms_norm_eps)?;
        hybrid::partial_rope(&mut qn.data, start, nh, hd, &self.inv_freq);
        hybrid::partial_rope(&mut kn.data, start, nkv, hd, &self.inv_freq);
        // Keys and values of all positions so far  [start + T, nkv·hd]
        k_cache.extend_from_slice(&kn.data);
        v_cache.extend_from_slice(&v);
        // attn = causal softmax(q kᵀ / √hd) v, gated by sigmoid(gate)  [T, nh·hd]
        let mut attn = b.zeros(&[t, nh * hd])?;
        let scale = 1.0 / (hd as f32).sqrt();
        let heads = (nh, nkv, hd);
        hybrid::causal_attention(&mut attn.data, &qn.data, k_cache, v_cache, heads, scale);
        attn.data
            .iter_mut()
            .zip(&gate)
            .for_each(|(o, g)| *o *= 1.0 / (1.0 + (-g).exp()));
        b.matmul(out, &attn, &a.o)
    }
}

/// One sequence's state between [`Qwen3_5::forward`] calls: what the engine's cache manager
/// will hold per running sequence.
pub struct SequenceState {
    /// Tokens seen so far (the next token's position).
    pub position: usize,
    layers: Vec<LayerState>,
}

enum LayerState {
    Linear {
        conv: Vec<f32>,      // the last K−1 conv inputs [K−1, C]
        recurrent: Vec<f32>, // [nv, dk, dv]
    },
    Full {
        k: Vec<f32>, // [position, nkv·hd], normed and rotated
        v: Vec<f32>, // [position, nkv·hd]
    },
}

/// `log(1 + eˣ)`, linear above 20 as torch's `softplus` is.
fn softplus(x: f32) -> f32 {
    if x > 20.0 { x } else { x.exp().ln_1p() }
}

#[cfg(test)]
mod tests;
