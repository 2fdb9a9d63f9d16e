//! Nemotron-H (`NemotronHForCausalLM`: NVIDIA Nemotron-H, Nemotron Nano 9B/12B v2, Nemotron 3
//! Nano 30B-A3B), as
//! transformers 5.25's `modeling_nemotron_h.py` computes it: a stack of pre-norm residual
//! blocks, each with one mixer chosen by the config's pattern (`config.rs`):
//!
//! - `M`, Mamba-2: `in_proj` gives `z | xBC | dt`; a causal depthwise conv (with bias) and SiLU
//!   over `xBC`, which splits into `x` (`nh` heads of `p` channels) and `B`, `C` (`G` groups of
//!   an `N`-wide state); the selective scan with `dt = softplus(dt + dt_bias)` clamped to
//!   `time_step_limit`, `A = −exp(A_log)` and the skip `D`; then `norm(y · silu(z))`, an RMSNorm
//!   over each group's channels, and `out_proj` ([`HybridOps::mamba2`]);
//! - `*`, attention: GQA with no rotary embedding (the Mamba layers carry position) and no
//!   biases, scaled by `1/√head_dim`;
//! - `-`, MLP: `down(relu(up(x))²)` ([`HybridOps::relu2`]);
//! - `E`, MoE (Nemotron 3): each token's `num_experts_per_tok` routed experts by
//!   `sigmoid(x · gateᵀ)` plus `e_score_correction_bias`, within its `topk_group` best of
//!   `n_group` expert groups, weighted by the plain sigmoid scores (renormalised with
//!   `norm_topk_prob`) times `routed_scaling_factor`; each expert a relu² MLP like `-`'s
//!   (`down(relu(up(x))²)`, not gated, width `moe_intermediate_size`:
//!   [`HybridOps::fused_moe_relu2`]); plus one shared relu² MLP of
//!   `moe_shared_expert_intermediate_size` on the same input, added.
//!
//! `x += mixer(norm(x))` around each, `norm_f` at the end, the head tied or not.
//!
//! Attention layers keep keys and values in the paged KV cache (only they have one). Mamba-2
//! layers keep, per sequence, the conv window of the last `K − 1` xBC inputs and the
//! `[nh, p, N]` SSM state in the sequence's slot of the state pool, started, carried across
//! chunks and checkpointed for prefix caching exactly as Qwen3.5's Gated DeltaNet layers' are
//! ([`StateStorage`], `kv_cache/state.rs`, [`super::recurrent::start_states`]).
//!
//! Weights load from the released layout (`backbone.embeddings`, `backbone.layers.{l}.norm`,
//! `backbone.layers.{l}.mixer.*`, the experts one by one as `mixer.experts.{e}.up_proj.weight`,
//! `backbone.norm_f`, `lm_head`) or transformers' in-memory one (`model.` for `backbone.`,
//! the experts stacked as `mixer.experts.up_proj`). Only backends that answer [`Feature::NemotronH`] run it (the
//! CPU reference and CUDA), and a checkpoint with `E` layers only those that also answer
//! [`Feature::NemotronHExperts`] (the CPU and CUDA); others refuse it by name at load.

use crate::backend::{Backend, BatchInputs, Feature, HybridOps, Mamba2Layer, Result};
use crate::loader::{HostTensor, LoadError, TensorKind, Weights};

use super::llama::upload_err;
use super::{KvStorage, Model, StateSpec, StateStorage, check_backend, lm_head_logits};
use crate::parallel::Collective;
use crate::parallel::plan::Tp;
use shard::Cut;

mod config;
mod shard;

pub use config::{BlockType, MoeConfig, NemotronHConfig};

/// A Mamba-2 layer's weights.
struct Mamba<B: Backend> {
    in_proj: B::Tensor,   // z | xBC | dt: [nh·p + C + nh, H]
    conv: B::Tensor,      // [C, K], f32
    conv_bias: B::Tensor, // [C], f32 (zeros without use_conv_bias)
    neg_a: B::Tensor,     // −exp(A_log) [nh], f32
    dt_bias: B::Tensor,   // [nh], f32
    d: B::Tensor,         // [nh], f32
    norm: B::Tensor,      // [nh·p], the gated norm's weight, f32
    out: B::Tensor,       // [H, nh·p]
    /// This layer's index among the Mamba layers (its [`StateStorage`] entry).
    state: usize,
}

/// An attention layer's weights.
struct Attention<B: Backend> {
    qkv: B::Tensor, // [(nh + 2·nkv)·hd, H]
    o: B::Tensor,   // [H, nh·hd]
    /// This layer's index among the attention layers (its [`KvStorage`] entry).
    cache: usize,
}

/// An MLP layer's weights.
struct Mlp<B: Backend> {
    up: B::Tensor,   // [I, H]
    down: B::Tensor, // [H, I]
}

/// An MoE layer's weights.
struct Moe<B: Backend> {
    router: B::Tensor,      // gate.weight [E, H]
    bias: B::Tensor,        // gate.e_score_correction_bias [E], f32
    up: B::Tensor,          // the routed experts' [E, I, H]
    down: B::Tensor,        // [E, H, I]
    shared_up: B::Tensor,   // [Is, H]
    shared_down: B::Tensor, // [H, Is]
}

enum Mixer<B: Backend> {
    Mamba(Mamba<B>),
    Attention(Attention<B>),
    Mlp(Mlp<B>),
    Moe(Moe<B>),
}

struct Layer<B: Backend> {
    norm: B::Tensor, // [H]
    mixer: Mixer<B>,
}

pub struct NemotronH<B: Backend> {
    pub config: NemotronHConfig,
    embed: B::Tensor, // [V, H]
    layers: Vec<Layer<B>>,
    norm_f: B::Tensor,          // [H]
    lm_head: Option<B::Tensor>, // [V, H] (this rank's rows); None when tied to `embed`
    num_mamba: usize,
    num_attention: usize,
    /// The tensor-parallel group this model is a rank of (none: the whole model); `config`
    /// then holds the rank's counts (`nemotron_h/shard.rs`).
    tp: Tp<B>,
}

/// Refuse, before any weight is read, a backend without Nemotron-H's ops (or, for a
/// checkpoint with routed-expert `E` layers, without its sigmoid-routed relu² experts), naming
/// them and the device that runs them.
fn check_device(
    name: &str,
    supports: impl Fn(Feature) -> bool,
    architecture: &str,
    moe: bool,
) -> std::result::Result<(), LoadError> {
    if !supports(Feature::NemotronH) {
        return Err(LoadError::UnsupportedOnDevice(format!(
            "Nemotron-H ({architecture}) needs the Mamba-2 mixer and relu² MLPs, which the \
             {name} backend does not run yet: serve it with --device cpu"
        )));
    }
    if moe && !supports(Feature::NemotronHExperts) {
        return Err(LoadError::UnsupportedOnDevice(format!(
            "this Nemotron-H ({architecture}) has routed-expert (E) layers, whose \
             sigmoid-routed relu² experts the {name} backend does not run yet: serve it with \
             --device cpu"
        )));
    }
    Ok(())
}

fn shape_err(message: String) -> crate::backend::BackendError {
    crate::backend::BackendError::Shape {
        op: "nemotron_h forward",
        message,
    }
}

/// Layer `p`'s Mamba-2 mixer (`p` = `{root}.layers.{l}`), the `index`-th Mamba layer.
fn load_mamba<B: HybridOps>(
    (b, cut): (&B, &Cut),
    config: &NemotronHConfig,
    w: &Weights,
    p: &str,
    index: usize,
) -> std::result::Result<Mamba<B>, LoadError> {
    let (h, s, k) = (config.base.hidden_size, config.ssm, config.conv_kernel);
    let (inner, cd, nh) = (s.inner(), s.conv_dim(), s.heads);
    let m = format!("{p}.mixer");
    let mat =
        |name: &str, shape: &[usize]| w.get(&format!("{m}.{name}"), shape, TensorKind::Matrix);
    let vector = |name: &str, n: usize| w.get(&format!("{m}.{name}"), &[n], TensorKind::Norm);
    let f32s = |shape: &[usize], v: &[f32]| b.upload_f32(shape, v).map_err(upload_err);
    let up = |t: HostTensor<'_>| b.upload(&t).map_err(upload_err);
    // With a group, the rank's heads and groups only (`Cut`).
    let heads = |name: &str| -> std::result::Result<Vec<f32>, LoadError> {
        Ok(cut.heads(vector(name, nh)?).to_f32())
    };
    let neg_a: Vec<f32> = heads("A_log")?.iter().map(|x| -x.exp()).collect();
    let conv_bias = match config.conv_bias {
        true => cut.conv(config, vector("conv1d.bias", cd)?).to_f32(),
        // No bias: zeros for the rank's channels (the conv's rows, below).
        false => Vec::new(),
    };
    let conv = cut
        .conv(config, mat("conv1d.weight", &[cd, 1, k])?)
        .to_f32();
    let conv_bias = match conv_bias.is_empty() {
        true => vec![0.0; conv.len() / k],
        false => conv_bias,
    };
    let norm = cut.norm(config, vector("norm.weight", inner)?).to_f32();
    let (dt_bias, d) = (heads("dt_bias")?, heads("D")?);
    Ok(Mamba {
        in_proj: up(cut.in_proj(config, mat("in_proj.weight", &[inner + cd + nh, h])?))?,
        conv: f32s(&[conv.len() / k, k], &conv)?,
        conv_bias: f32s(&[conv_bias.len()], &conv_bias)?,
        neg_a: f32s(&[neg_a.len()], &neg_a)?,
        dt_bias: f32s(&[dt_bias.len()], &dt_bias)?,
        d: f32s(&[d.len()], &d)?,
        norm: f32s(&[norm.len()], &norm)?,
        out: up(cut.out(config, mat("out_proj.weight", &[h, inner])?))?,
        state: index,
    })
}

/// Layer `p`'s router, correction bias, routed experts (one tensor each in the released
/// layout, stacked in transformers' in-memory one) and shared expert; `m` the checkpoint's
/// settings, cut to the rank's widths by `cut`.
fn load_moe<B: HybridOps>(
    (b, cut): (&B, &Cut),
    (m, h): (&MoeConfig, usize),
    w: &Weights,
    p: &str,
) -> std::result::Result<Moe<B>, LoadError> {
    let (e, i, is) = (m.experts, m.intermediate, m.shared_intermediate);
    let mx = format!("{p}.mixer");
    let mat =
        |name: &str, shape: &[usize]| w.get(&format!("{mx}.{name}"), shape, TensorKind::Matrix);
    let up = |t: HostTensor<'_>| b.upload(&t).map_err(upload_err);
    let (ups, downs) = if w.contains(&format!("{mx}.experts.up_proj")) {
        (
            mat("experts.up_proj", &[e, i, h])?,
            mat("experts.down_proj", &[e, h, i])?,
        )
    } else {
        let (mut ups, mut downs) = (Vec::with_capacity(e), Vec::with_capacity(e));
        for x in 0..e {
            ups.push(mat(&format!("experts.{x}.up_proj.weight"), &[i, h])?);
            downs.push(mat(&format!("experts.{x}.down_proj.weight"), &[h, i])?);
        }
        (
            HostTensor::concat_rows(&ups).reshaped(vec![e, i, h]),
            HostTensor::concat_rows(&downs).reshaped(vec![e, h, i]),
        )
    };
    let (ups, downs) = cut.experts((ups, downs));
    let bias = format!("{mx}.gate.e_score_correction_bias");
    Ok(Moe {
        router: up(mat("gate.weight", &[e, h])?)?,
        bias: b
            .upload_f32(&[e], &w.get(&bias, &[e], TensorKind::Norm)?.to_f32())
            .map_err(upload_err)?,
        up: up(ups)?,
        down: up(downs)?,
        shared_up: up(cut.shared(mat("shared_experts.up_proj.weight", &[is, h])?, true))?,
        shared_down: up(cut.shared(mat("shared_experts.down_proj.weight", &[h, is])?, false))?,
    })
}

impl<B: HybridOps> NemotronH<B> {
    /// Load the checkpoint's weights onto `backend`, calling `layer_done(n)` after the n-th
    /// decoder layer.
    pub fn load(
        backend: &B,
        config: &NemotronHConfig,
        w: &Weights,
        layer_done: &mut dyn FnMut(usize),
    ) -> std::result::Result<Self, LoadError> {
        Self::load_sharded(backend, config, w, None, layer_done)
    }

    /// [`NemotronH::load`] as one rank of `tp`'s group (the whole model without one).
    pub fn load_sharded(
        backend: &B,
        config: &NemotronHConfig,
        w: &Weights,
        tp: Option<std::sync::Arc<dyn Collective<B>>>,
        layer_done: &mut dyn FnMut(usize),
    ) -> std::result::Result<Self, LoadError> {
        let tp = Tp(tp);
        let cut = Cut::new(config, tp.shard())?;
        let plan = &cut.plan;
        let c = &config.base;
        check_device(
            backend.name(),
            |f| backend.supports(f),
            &c.architecture,
            config.moe.is_some(),
        )?;
        check_backend(backend, c)?;
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
        // The released layout, or transformers' in-memory names.
        let root = match w.contains("model.embeddings.weight") {
            true => "model",
            false => "backbone",
        };
        let mut layers = Vec::with_capacity(config.layers.len());
        let (mut num_mamba, mut num_attention) = (0, 0);
        for (l, kind) in config.layers.iter().enumerate() {
            let p = format!("{root}.layers.{l}");
            let m = format!("{p}.mixer");
            let mixer = match kind {
                BlockType::Mamba => {
                    num_mamba += 1;
                    Mixer::Mamba(load_mamba((backend, &cut), config, w, &p, num_mamba - 1)?)
                }
                BlockType::Attention => {
                    num_attention += 1;
                    let qkv = plan.qkv(
                        mat(&format!("{m}.q_proj.weight"), &[nh * hd, h])?,
                        mat(&format!("{m}.k_proj.weight"), &[nkv * hd, h])?,
                        mat(&format!("{m}.v_proj.weight"), &[nkv * hd, h])?,
                    );
                    Mixer::Attention(Attention {
                        qkv: up(qkv)?,
                        o: up(plan.o(mat(&format!("{m}.o_proj.weight"), &[h, nh * hd])?))?,
                        cache: num_attention - 1,
                    })
                }
                BlockType::Mlp => Mixer::Mlp(Mlp {
                    up: up(crate::parallel::shard::rows_of(
                        plan.shard,
                        mat(&format!("{m}.up_proj.weight"), &[i, h])?,
                        plan.width.clone(),
                    ))?,
                    down: up(plan.down(mat(&format!("{m}.down_proj.weight"), &[h, i])?))?,
                }),
                BlockType::Moe => {
                    let moe = config.moe.as_ref().ok_or_else(|| LoadError::Config {
                        path: "config.json".into(),
                        message: format!("layer {l} is MoE but the config has no MoE settings"),
                    })?;
                    Mixer::Moe(load_moe((backend, &cut), (moe, h), w, &p)?)
                }
            };
            layers.push(Layer {
                norm: up(norm(&format!("{p}.norm.weight"), h)?)?,
                mixer,
            });
            layer_done(l + 1);
        }
        let embed_name = format!("{root}.embeddings.weight");
        // A tied head is the embedding (unless --requantize gives the head its own format); a
        // rank of several keeps its vocabulary rows of either.
        let sharded = plan.head_rows(
            c.tie_word_embeddings,
            (&embed_name, "lm_head.weight"),
            |n| mat(n, &[c.vocab_size, h]),
        )?;
        let lm_head = if let Some(rows) = sharded {
            Some(up(rows)?)
        } else if c.tie_word_embeddings {
            w.tied_head(&embed_name, &[c.vocab_size, h])?
                .map(up)
                .transpose()?
        } else {
            Some(up(mat("lm_head.weight", &[c.vocab_size, h])?)?)
        };
        Ok(Self {
            config: cut.local(config),
            embed: up(mat(&embed_name, &[c.vocab_size, h])?)?,
            layers,
            norm_f: up(norm(&format!("{root}.norm_f.weight"), h)?)?,
            lm_head,
            num_mamba,
            num_attention,
            tp,
        })
    }
}

/// Scratch of one forward over `T` rows, one set a mixer kind.
struct Bufs<T> {
    mixed: T, // Mamba: z | xBC | dt [T, nh·p + C + nh]
    y: T,     // Mamba: the gated, normed scan output [T, nh·p]
    qkv: T,   // attention: [T, (nh + 2·nkv)·hd]
    attn: T,  // attention: [T, nh·hd]
    up: T,    // MLP: [T, I]
    act: T,   // MLP: relu(up)² [T, I]
    /// MoE: the router's logits [T, E], the shared expert's up and relu² [T, Is] and its
    /// output [T, H] (none without MoE layers).
    moe: Option<(T, T, T, T)>,
}

impl<B: HybridOps> Model<B> for NemotronH<B> {
    fn forward(
        &self,
        b: &B,
        host: &BatchInputs,
        batch: &B::Batch,
        kv: &mut KvStorage<B>,
    ) -> Result<B::Tensor> {
        let c = &self.config.base;
        let s = self.config.ssm;
        let (t, h, hd, nh, nkv, i) = (
            host.num_tokens(),
            c.hidden_size,
            c.head_dim,
            c.num_attention_heads,
            c.num_key_value_heads,
            c.intermediate_size,
        );
        let eps = c.rms_norm_eps;
        let scale = 1.0 / (hd as f32).sqrt();
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
        let mut x = b.zeros(&[t, h])?; // residual stream [T, H]
        let mut xn = b.zeros(&[t, h])?; // normalised input of a block [T, H]
        let mut proj = b.zeros(&[t, h])?; // a mixer's output [T, H]
        let mut f = Bufs {
            mixed: b.zeros(&[t, s.inner() + s.conv_dim() + s.heads])?,
            y: b.zeros(&[t, s.inner()])?,
            qkv: b.zeros(&[t, (nh + 2 * nkv) * hd])?,
            attn: b.zeros(&[t, nh * hd])?,
            up: b.zeros(&[t, i])?,
            act: b.zeros(&[t, i])?,
            moe: match &self.config.moe {
                None => None,
                Some(m) => Some((
                    b.zeros(&[t, m.experts])?,
                    b.zeros(&[t, m.shared_intermediate])?,
                    b.zeros(&[t, m.shared_intermediate])?,
                    b.zeros(&[t, h])?,
                )),
            },
        };

        // x = embed[tokens]; xn = the first block's norm(x)
        b.embedding(&mut x, batch, &self.embed)?;
        b.rms_norm(&mut xn, &x, &self.layers[0].norm, eps)?;
        for (l, layer) in self.layers.iter().enumerate() {
            match &layer.mixer {
                // Mamba-2: z | xBC | dt = xn · in_projᵀ; y = gated_norm(scan(conv(xBC)), z)
                // from and into the sequences' slots; proj = y · out_projᵀ
                Mixer::Mamba(m) => {
                    b.matmul(&mut f.mixed, &xn, &m.in_proj)?;
                    let layer = Mamba2Layer {
                        heads: s,
                        kernel: self.config.conv_kernel,
                        conv: &m.conv,
                        conv_bias: &m.conv_bias,
                        neg_a: &m.neg_a,
                        dt_bias: &m.dt_bias,
                        d: &m.d,
                        norm: &m.norm,
                        dt_limit: self.config.dt_limit,
                        eps,
                    };
                    let (conv, ssm) = match (
                        state.conv.get_mut(m.state),
                        state.recurrent.get_mut(m.state),
                    ) {
                        (Some(c), Some(r)) => (c, r),
                        _ => {
                            return Err(shape_err(format!(
                                "state storage has no Mamba layer {}",
                                m.state
                            )));
                        }
                    };
                    b.mamba2(&mut f.y, &f.mixed, &layer, conv, ssm, host, batch)?;
                    b.matmul(&mut proj, &f.y, &m.out)?;
                }
                // Attention: qkv = xn · Wqkvᵀ; cache k, v (no rotary embedding); attend;
                // project.
                Mixer::Attention(a) => {
                    let (k, v) = match (k_caches.get_mut(a.cache), v_caches.get_mut(a.cache)) {
                        (Some(k), Some(v)) => (k, v),
                        _ => {
                            return Err(shape_err(format!(
                                "KV cache layer {} was not allocated",
                                a.cache
                            )));
                        }
                    };
                    b.matmul(&mut f.qkv, &xn, &a.qkv)?;
                    b.write_kv(k, v, &f.qkv, batch, nh)?;
                    b.paged_attention(&mut f.attn, &f.qkv, k, v, batch, nh, scale)?;
                    b.matmul(&mut proj, &f.attn, &a.o)?;
                }
                // MLP: proj = relu(xn · upᵀ)² · downᵀ
                Mixer::Mlp(m) => {
                    b.matmul(&mut f.up, &xn, &m.up)?;
                    b.relu2(&mut f.act, &f.up)?;
                    b.matmul(&mut proj, &f.act, &m.down)?;
                }
                // MoE: logits = xn · gateᵀ; proj = the routed relu² experts' weighted sum
                // + down_s(relu(xn · up_sᵀ)²)
                Mixer::Moe(m) => {
                    let (Some(cfg), Some((logits, s_up, s_act, shared))) =
                        (&self.config.moe, f.moe.as_mut())
                    else {
                        return Err(shape_err(format!(
                            "layer {l} is MoE but the config has no MoE settings"
                        )));
                    };
                    b.matmul(logits, &xn, &m.router)?;
                    let experts = (&m.up, &m.down);
                    b.fused_moe_relu2(&mut proj, &xn, logits, &m.bias, experts, cfg.routing)?;
                    b.matmul(s_up, &xn, &m.shared_up)?;
                    b.relu2(s_act, s_up)?;
                    b.matmul(shared, s_act, &m.shared_down)?;
                    b.add_assign(&mut proj, shared)?;
                }
            }
            self.tp.all_reduce(b, &mut proj)?;
            // x += mixer; xn = the next block's norm (or the final norm)
            let next = self.layers.get(l + 1).map_or(&self.norm_f, |n| &n.norm);
            b.add_rms_norm(&mut xn, &mut x, &proj, next, eps)?;
        }
        // logits = norm_f(x)[rows] · lm_headᵀ
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
        let c = &self.config.base;
        KvStorage::new(
            backend,
            self.num_attention,
            num_blocks,
            block_size,
            c.num_key_value_heads,
            c.head_dim,
        )
    }

    fn kv_bytes_per_token(&self, backend: &B) -> usize {
        let c = &self.config.base;
        2 * self.num_attention * c.num_key_value_heads * backend.kv_head_bytes(c.head_dim)
    }

    fn activation_bytes(&self, tokens: usize, logits_rows: usize) -> usize {
        let c = &self.config.base;
        let s = self.config.ssm;
        // x, xn, proj and every mixer's scratch (`Bufs`), plus the Mamba op's own copies (z,
        // xBC, dt, the conv's input and output, x, B, C, y); then the gathered rows and their
        // logits; doubled for allocator slack.
        let (inner, cd) = (s.inner(), s.conv_dim());
        let mamba = 2 * (2 * inner + cd + s.heads) + 4 * cd + 2 * inner;
        let attention = (2 * c.num_attention_heads + 2 * c.num_key_value_heads) * c.head_dim;
        // MoE: the logits, the shared expert's scratch and output, and each routed copy's
        // gathered row, up, relu² and output (`backend/cpu/moe.rs`).
        let moe = self.config.moe.map_or(0, |m| {
            let h = c.hidden_size;
            m.experts
                + 2 * m.shared_intermediate
                + h
                + m.routing.top_k * (2 * h + 2 * m.intermediate)
        });
        let per_token = 3 * c.hidden_size + mamba + attention + 2 * c.intermediate_size + moe;
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
        let s = self.config.ssm;
        Some(StateSpec {
            layers: self.num_mamba,
            conv_elements: (self.config.conv_kernel - 1) * s.conv_dim(),
            recurrent_elements: s.state_len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backend without the ops, and one without the routed experts given a checkpoint
    /// with `E` layers, refuse by name: the model, the ops, the backend, the device that runs it.
    #[test]
    fn a_backend_without_the_ops_refuses_by_name() {
        let e = check_device("cuda", |_| false, "NemotronHForCausalLM", false)
            .expect_err("refused")
            .to_string();
        for part in ["NemotronHForCausalLM", "Mamba-2", "cuda", "--device cpu"] {
            assert!(e.contains(part), "{part}: {e}");
        }
        let no_experts = |f| f != Feature::NemotronHExperts;
        check_device("cuda", no_experts, "NemotronHForCausalLM", false).expect("dense runs");
        let e = check_device("cuda", no_experts, "NemotronHForCausalLM", true)
            .expect_err("refused")
            .to_string();
        for part in [
            "routed-expert (E) layers",
            "relu² experts",
            "cuda",
            "--device cpu",
        ] {
            assert!(e.contains(part), "{part}: {e}");
        }
        let cpu = crate::backend::CpuBackend::default();
        check_device(
            cpu.name(),
            |f| cpu.supports(f),
            "NemotronHForCausalLM",
            true,
        )
        .expect("the cpu runs it");
    }
}
