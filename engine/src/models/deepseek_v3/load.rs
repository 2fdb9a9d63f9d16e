//! DeepSeek-V3's weights, by name, onto a backend: the attention's projections as released
//! (kept as they are: `kv_b_proj` is read by the latent attention head by head), the dense
//! MLPs and shared experts with gate|up fused, the routed experts stacked into `[E, 2·I, H]`
//! (gate rows first) and `[E, H, I]` from either layout: per expert
//! (`mlp.experts.{e}.{gate,up,down}_proj.weight`, the released checkpoints and what
//! transformers 5 saves) or fused (`mlp.experts.gate_up_proj`, `mlp.experts.down_proj`,
//! transformers 5's in-memory layout). The multi-token-prediction layer
//! (`model.layers.{num_hidden_layers}.*`) is never asked for.

use crate::backend::Backend;
use crate::loader::{DType, HostData, HostTensor, LoadError, TensorKind, Weights};

use super::DeepseekV3Config;
use super::shard::Cut;
use crate::models::llama::upload_err;

/// How a layer makes its query `[T, nh·(nope + rope)]`.
pub(super) enum QProj<B: Backend> {
    /// `q_proj` `[nh·(nope + rope), H]`.
    Direct(B::Tensor),
    /// `q_b_proj(q_a_layernorm(q_a_proj(x)))`: `a` `[q_lora_rank, H]`, `norm` `[q_lora_rank]`,
    /// `b` `[nh·(nope + rope), q_lora_rank]`.
    Lora {
        a: B::Tensor,
        norm: B::Tensor,
        b: B::Tensor,
    },
}

/// A SwiGLU MLP: `down · (silu(g) * u)`, `g | u = gate_up · x`.
pub(super) struct Dense<B: Backend> {
    pub gate_up: B::Tensor, // [2·I, H], gate rows first
    pub down: B::Tensor,    // [H, I]
    pub width: usize,       // I
}

/// The routed experts and their router, and the shared experts (one SwiGLU of
/// `n_shared_experts · moe_intermediate_size`).
pub(super) struct Moe<B: Backend> {
    pub router: B::Tensor,  // [E, H]
    pub bias: B::Tensor,    // [E], e_score_correction_bias
    pub gate_up: B::Tensor, // [E, 2·I, H], gate rows first
    pub down: B::Tensor,    // [E, H, I]
    pub shared: Option<Dense<B>>,
}

pub(super) enum Mlp<B: Backend> {
    Dense(Dense<B>),
    Moe(Moe<B>),
}

pub(super) struct Layer<B: Backend> {
    pub input_norm: B::Tensor, // [H]
    pub q: QProj<B>,
    pub kv_a: B::Tensor,      // [kv_lora_rank + rope, H]
    pub kv_norm: B::Tensor,   // [kv_lora_rank]
    pub kv_b: B::Tensor,      // [nh·(nope + v), kv_lora_rank]
    pub o: B::Tensor,         // [H, nh·v]
    pub post_norm: B::Tensor, // [H]
    pub mlp: Mlp<B>,
}

/// Layer `l` of the checkpoint.
pub(super) fn layer<B: Backend>(
    (backend, cut): (&B, &Cut),
    c: &DeepseekV3Config,
    w: &Weights,
    l: usize,
) -> Result<Layer<B>, LoadError> {
    let up = |t: HostTensor<'_>| backend.upload(&t).map_err(upload_err);
    let mat = |name: &str, shape: &[usize]| w.get(name, shape, TensorKind::Matrix);
    let norm = |name: &str, n: usize| w.get(name, &[n], TensorKind::Norm);
    let (h, nh) = (c.base.hidden_size, c.base.num_attention_heads);
    let (nope, rope, v, r) = (
        c.qk_nope_head_dim,
        c.qk_rope_head_dim,
        c.v_head_dim,
        c.kv_lora_rank,
    );
    let p = format!("model.layers.{l}");
    let a = format!("{p}.self_attn");
    let q_width = nh * (nope + rope);
    let q = match c.q_lora_rank {
        None => QProj::Direct(up(cut.head_rows(
            mat(&format!("{a}.q_proj.weight"), &[q_width, h])?,
            nope + rope,
        ))?),
        Some(qr) => QProj::Lora {
            a: up(mat(&format!("{a}.q_a_proj.weight"), &[qr, h])?)?,
            norm: up(norm(&format!("{a}.q_a_layernorm.weight"), qr)?)?,
            b: up(cut.head_rows(
                mat(&format!("{a}.q_b_proj.weight"), &[q_width, qr])?,
                nope + rope,
            ))?,
        },
    };
    let mlp = if c.is_moe(l) {
        Mlp::Moe(moe((backend, cut), c, w, &p)?)
    } else {
        Mlp::Dense(dense(
            (backend, cut),
            w,
            &format!("{p}.mlp"),
            (h, c.base.intermediate_size),
        )?)
    };
    Ok(Layer {
        input_norm: up(norm(&format!("{p}.input_layernorm.weight"), h)?)?,
        q,
        kv_a: up(mat(
            &format!("{a}.kv_a_proj_with_mqa.weight"),
            &[r + rope, h],
        )?)?,
        kv_norm: up(norm(&format!("{a}.kv_a_layernorm.weight"), r)?)?,
        kv_b: up(dequantized(cut.head_rows(
            mat(&format!("{a}.kv_b_proj.weight"), &[nh * (nope + v), r])?,
            nope + v,
        )))?,
        o: up(cut.o(mat(&format!("{a}.o_proj.weight"), &[h, nh * v])?, v))?,
        post_norm: up(norm(&format!("{p}.post_attention_layernorm.weight"), h)?)?,
        mlp,
    })
}

/// The SwiGLU MLP under `m` (`{m}.gate_proj`, `up_proj`, `down_proj`) of width `i`.
fn dense<B: Backend>(
    (backend, cut): (&B, &Cut),
    w: &Weights,
    m: &str,
    (h, i): (usize, usize),
) -> Result<Dense<B>, LoadError> {
    let mat = |name: &str, shape: &[usize]| w.get(name, shape, TensorKind::Matrix);
    // With a group, the rank's part of the width.
    let gate_up = HostTensor::concat_rows(&[
        cut.mlp(mat(&format!("{m}.gate_proj.weight"), &[i, h])?, i, true),
        cut.mlp(mat(&format!("{m}.up_proj.weight"), &[i, h])?, i, true),
    ]);
    let down = cut.mlp(mat(&format!("{m}.down_proj.weight"), &[h, i])?, i, false);
    Ok(Dense {
        gate_up: backend.upload(&gate_up).map_err(upload_err)?,
        down: backend.upload(&down).map_err(upload_err)?,
        width: cut.shard.part(i).len(),
    })
}

/// Layer `p`'s router, correction bias, routed and shared experts.
fn moe<B: Backend>(
    (backend, cut): (&B, &Cut),
    c: &DeepseekV3Config,
    w: &Weights,
    p: &str,
) -> Result<Moe<B>, LoadError> {
    let up = |t: HostTensor<'_>| backend.upload(&t).map_err(upload_err);
    let mat = |name: &str, shape: &[usize]| w.get(name, shape, TensorKind::Matrix);
    let (h, e, i) = (
        c.base.hidden_size,
        c.n_routed_experts,
        c.moe_intermediate_size,
    );
    let m = format!("{p}.mlp");
    let (gate_up, down) = if w.contains(&format!("{m}.experts.gate_up_proj")) {
        (
            mat(&format!("{m}.experts.gate_up_proj"), &[e, 2 * i, h])?,
            mat(&format!("{m}.experts.down_proj"), &[e, h, i])?,
        )
    } else {
        let mut gate_up = Vec::with_capacity(2 * e);
        let mut down = Vec::with_capacity(e);
        for x in 0..e {
            let ex = format!("{m}.experts.{x}");
            gate_up.push(mat(&format!("{ex}.gate_proj.weight"), &[i, h])?);
            gate_up.push(mat(&format!("{ex}.up_proj.weight"), &[i, h])?);
            down.push(mat(&format!("{ex}.down_proj.weight"), &[h, i])?);
        }
        (
            HostTensor::concat_rows(&gate_up).reshaped(vec![e, 2 * i, h]),
            HostTensor::concat_rows(&down).reshaped(vec![e, h, i]),
        )
    };
    let (gate_up, down) = cut.experts((gate_up, down), i);
    let shared = match c.n_shared_experts {
        0 => None,
        n => Some(dense(
            (backend, cut),
            w,
            &format!("{m}.shared_experts"),
            (h, n * i),
        )?),
    };
    Ok(Moe {
        router: up(mat(&format!("{m}.gate.weight"), &[e, h])?)?,
        // The bias is a vector; a dummy source gives it one constant, which moves no choice.
        // Kept in f32 on every backend: a bf16 copy would move choices where scores are close.
        bias: backend
            .upload_f32_weight(&w.get(
                &format!("{m}.gate.e_score_correction_bias"),
                &[e],
                TensorKind::Norm,
            )?)
            .map_err(upload_err)?,
        gate_up: up(gate_up)?,
        down: up(down)?,
        shared,
    })
}

/// `kv_b_proj` is read head by head by the latent attention, never through a GEMM, so an FP8
/// one is widened on the host (e4m3 · scale in f32, the CPU loader's values: the CPU reference
/// computes the same) and a backend keeps it in its compute type; other weights pass as they
/// are.
fn dequantized(t: HostTensor<'_>) -> HostTensor<'_> {
    if !t.is_fp8() {
        return t;
    }
    let bytes = t.to_f32().iter().flat_map(|v| v.to_le_bytes()).collect();
    HostTensor {
        shape: t.shape,
        data: HostData::Raw {
            dtype: DType::F32,
            bytes: std::borrow::Cow::Owned(bytes),
        },
    }
}
