//! The parameter structs of the family-specific ops of [`super::Backend`]: gpt-oss's clamped
//! experts, sigmoid routing (MiniMax-M2, DeepSeek-V3's expert groups) and the head sizes of
//! multi-head latent attention (DeepSeek-V3).

#[cfg(doc)]
use super::Backend;

/// gpt-oss's experts for [`Backend::fused_moe_clamped`]: the stacked weights of
/// [`Backend::fused_moe`] with a bias after each product, and the clamped SwiGLU's constants.
pub struct ClampedExperts<'a, T> {
    /// `[E, 2·I, H]`, gate rows first (the checkpoint's interleaved rows split at load).
    pub gate_up: &'a T,
    /// `[E, 2·I]`, gate first.
    pub gate_up_bias: &'a T,
    /// `[E, H, I]`.
    pub down: &'a T,
    /// `[E, H]`.
    pub down_bias: &'a T,
    /// The sigmoid's gain (`swiglu_alpha`, 1.702).
    pub alpha: f32,
    /// The clamp (`swiglu_limit`, 7.0).
    pub limit: f32,
}

/// Routing by sigmoid scores for [`Backend::fused_moe_sigmoid`] (MiniMax-M2, DeepSeek-V3).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SigmoidRouting {
    pub top_k: usize,
    /// Divide the chosen scores by their sum.
    pub norm_topk_prob: bool,
    /// Multiply the weights by this (DeepSeek's `routed_scaling_factor`; 1 for MiniMax-M2).
    pub scaling: f32,
    /// Group-limited routing (DeepSeek-V3's `n_group`, `topk_group`): the experts are
    /// `n_group` consecutive groups, each scored by the sum of its two highest biased scores,
    /// and a token chooses its experts among those of its `topk_group` best groups only. 1 and
    /// 1 (MiniMax-M2) is plain top-k.
    pub n_group: usize,
    pub topk_group: usize,
}

impl SigmoidRouting {
    /// Top-k routing over all experts (no groups).
    pub fn ungrouped(top_k: usize, norm_topk_prob: bool, scaling: f32) -> Self {
        Self {
            top_k,
            norm_topk_prob,
            scaling,
            n_group: 1,
            topk_group: 1,
        }
    }
}

/// The head sizes of multi-head latent attention (DeepSeek-V2/V3) for
/// [`Backend::mla_rope_write_kv`] and [`Backend::mla_attention`]. A query row is `heads`
/// heads of `nope + rope` values (the rotated part last); a cached row is one latent of
/// `latent + rope` values (`kv_lora_rank` normalised `c_kv`, then the rotated `k_pe` that all
/// heads share); `kv_b_proj` (`[heads · (nope + v), latent]`) holds each head's key (`nope`
/// rows) and value (`v` rows) up-projections of the latent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MlaDims {
    pub heads: usize,
    pub nope: usize,
    pub rope: usize,
    pub v: usize,
    pub latent: usize,
}

impl MlaDims {
    /// Values of one query row, `heads · (nope + rope)`.
    pub fn q_width(&self) -> usize {
        self.heads * (self.nope + self.rope)
    }
    /// Values of one cached row, `latent + rope`.
    pub fn row(&self) -> usize {
        self.latent + self.rope
    }
    /// That a cache layer of `shape` holds these rows: its `(blocks, block_size)`, else the
    /// shape error of `op` that names the shape it wants.
    pub fn cache_blocks(
        &self,
        op: &'static str,
        shape: &[usize],
    ) -> Result<(usize, usize), super::BackendError> {
        match shape[..] {
            [blocks, bs, row] if row == self.row() => Ok((blocks, bs)),
            _ => Err(super::BackendError::Shape {
                op,
                message: format!(
                    "latent cache {shape:?} (want [blocks, block_size, {}])",
                    self.row()
                ),
            }),
        }
    }
}
