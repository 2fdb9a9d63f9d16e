//! Qwen3-MoE (`Qwen3MoeForCausalLM`): Qwen3 whose MLP is, in the layers
//! [`MoeConfig::is_sparse`] picks, a sparse block: a router `[E, H]` and `E` SwiGLU experts of
//! width `moe_intermediate_size`, each token going to its top-k (see [`Backend::fused_moe`]).
//! Everything else (attention, norms, embedding, head, the dense layers' MLP) is Qwen3's, and
//! `qwen3.rs` loads and runs it: [`Qwen3Moe`] is [`Qwen3`] with sparse layers.
//!
//! Experts are stacked at load into `gate_up [E, 2·I, H]` and `down [E, H, I]`, from either
//! naming a checkpoint uses: per expert (`mlp.experts.{e}.gate_proj.weight`, `up_proj`,
//! `down_proj`: Qwen's Hub checkpoints and what transformers saves) or fused
//! (`mlp.experts.gate_up_proj` and `mlp.experts.down_proj`, transformers 5's in-memory layout).

use crate::backend::{Backend, Result};
use crate::loader::{HostTensor, LoadError, MoeConfig, TensorKind, Weights};
use crate::parallel::{Shard, shard};

use super::qwen3::Qwen3;

/// A Qwen3-MoE model: the Qwen3 forward with [`SparseMoe`] MLPs where the config says.
pub type Qwen3Moe<B> = Qwen3<B>;

/// One layer's sparse MLP.
pub struct SparseMoe<B: Backend> {
    pub router: B::Tensor,  // [E, H]
    pub gate_up: B::Tensor, // [E, 2·I, H], or this rank's experts [e, 2·I, H]
    pub down: B::Tensor,    // [E, H, I], or [e, H, I]
    pub top_k: usize,
    pub norm_topk_prob: bool,
    /// The first of this rank's experts under expert parallelism (its slice `first..first +
    /// e`); `None` when the rank holds every expert (whole, or each cut by width).
    pub first_expert: Option<usize>,
}

impl<B: Backend> SparseMoe<B> {
    /// The router and experts under `prefix` (`model.layers.{l}.mlp`); with a group of
    /// several ranks, this rank's slice of every expert's width (tensor parallelism), or with
    /// [`Shard::expert_parallel`] its slice of the experts, whole. Either way the block's
    /// output is a partial sum, which the caller all-reduces.
    pub fn load(
        w: &Weights,
        moe: &MoeConfig,
        (h, sh): (usize, Shard),
        prefix: &str,
        up: &dyn Fn(HostTensor<'_>) -> std::result::Result<B::Tensor, LoadError>,
    ) -> std::result::Result<Self, LoadError> {
        let (e, i) = (moe.num_experts, moe.moe_intermediate_size);
        let split = sh.world > 1 && sh.expert_parallel;
        let (width, mine) = match split {
            true => (0..i, sh.split("num_experts", e)?),
            false => (sh.split("moe_intermediate_size", i)?, 0..e),
        };
        let mat = |name: &str, shape: &[usize]| w.get(name, shape, TensorKind::Matrix);
        let experts = format!("{prefix}.experts");
        let (gate_up, down) = if w.contains(&format!("{experts}.gate_up_proj")) {
            (
                shard::experts(
                    mat(&format!("{experts}.gate_up_proj"), &[e, 2 * i, h])?,
                    mine.clone(),
                ),
                shard::experts(
                    mat(&format!("{experts}.down_proj"), &[e, h, i])?,
                    mine.clone(),
                ),
            )
        } else {
            // Only this rank's experts are read (all of them but under expert parallelism).
            let mut gate_up = Vec::with_capacity(2 * mine.len());
            let mut down = Vec::with_capacity(mine.len());
            for x in mine.clone() {
                let p = format!("{experts}.{x}");
                gate_up.push(mat(&format!("{p}.gate_proj.weight"), &[i, h])?);
                gate_up.push(mat(&format!("{p}.up_proj.weight"), &[i, h])?);
                down.push(mat(&format!("{p}.down_proj.weight"), &[h, i])?);
            }
            let n = mine.len();
            (
                HostTensor::concat_rows(&gate_up).reshaped(vec![n, 2 * i, h]),
                HostTensor::concat_rows(&down).reshaped(vec![n, h, i]),
            )
        };
        let (gate_up, down) = match split {
            true => (gate_up, down),
            false => (
                shard::experts_gate_up(sh, gate_up, width.clone()),
                shard::experts_down(sh, down, width),
            ),
        };
        Ok(Self {
            router: up(mat(&format!("{prefix}.gate.weight"), &[e, h])?)?,
            gate_up: up(gate_up)?,
            down: up(down)?,
            top_k: moe.num_experts_per_tok,
            norm_topk_prob: moe.norm_topk_prob,
            first_expert: split.then_some(mine.start),
        })
    }

    /// `out = Σ over each token's top-k experts of weight · expert(xn)`.
    pub fn forward(&self, b: &B, out: &mut B::Tensor, xn: &B::Tensor) -> Result<()> {
        let t = b.shape(xn)[0];
        let e = b.shape(&self.router)[0];
        // router_logits = xn · routerᵀ  [T, E]; then
        // out = Σ_k weight_k · down_k(silu(gate_k · xn) * (up_k · xn))
        let mut router_logits = b.zeros(&[t, e])?;
        if let Some(first) = self.first_expert {
            b.matmul(&mut router_logits, xn, &self.router)?;
            return b.fused_moe_slice(
                out,
                xn,
                &router_logits,
                (&self.gate_up, &self.down),
                (self.top_k, self.norm_topk_prob),
                first,
            );
        }
        b.routed_moe(
            out,
            xn,
            &self.router,
            &mut router_logits,
            (&self.gate_up, &self.down),
            self.top_k,
            self.norm_topk_prob,
        )
    }
}
