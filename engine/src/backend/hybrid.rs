//! The ops of models with recurrent-state layers beyond Qwen3's ([`HybridOps`]): Qwen3.5's
//! Gated DeltaNet ([`HybridOps::gated_delta_net`]) and Nemotron-H's Mamba-2
//! ([`HybridOps::mamba2`]) and relu² experts ([`HybridOps::fused_moe_relu2`]), their
//! parameters, and the small ops around them. The CPU reference is `cpu/hybrid.rs`,
//! `cpu/mamba2.rs` and `cpu/moe.rs`; CUDA runs the Gated DeltaNet (`cuda/hybrid.rs`), the
//! Mamba-2 mixer and relu² (`cuda/mamba2.rs`) and the relu² experts (`cuda/nemotron_moe.rs`).

use super::{Backend, BatchInputs, DeltaHeads, Result, SigmoidRouting, SsmHeads, lacks};

/// One Gated DeltaNet layer's parameters for [`HybridOps::gated_delta_net`]; the tensors are
/// f32 ([`Backend::upload_f32`]).
pub struct GdnLayer<'a, T> {
    pub heads: DeltaHeads,
    /// Depthwise conv taps `K`.
    pub kernel: usize,
    /// `[C, K]` conv taps (`C = 2·nk·dk + nv·dv`: q, k and v of all heads).
    pub conv: &'a T,
    /// `[nv]` each: `−exp(A_log)` and `dt_bias`.
    pub neg_a: &'a T,
    pub dt_bias: &'a T,
    /// `[dv]`: the gated RMSNorm's weight.
    pub norm: &'a T,
    pub eps: f32,
}

/// One Mamba-2 layer's parameters for [`HybridOps::mamba2`]; the tensors are f32
/// ([`HybridOps::upload_f32`]).
pub struct Mamba2Layer<'a, T> {
    pub heads: SsmHeads,
    /// Depthwise conv taps `K`.
    pub kernel: usize,
    /// `[C, K]` conv taps and `[C]` their bias (zeros for a checkpoint without one); `C =
    /// nh·p + 2·G·N`: x, B and C of all heads and groups.
    pub conv: &'a T,
    pub conv_bias: &'a T,
    /// `[nh]` each: `−exp(A_log)`, `dt_bias` and the skip `D`.
    pub neg_a: &'a T,
    pub dt_bias: &'a T,
    pub d: &'a T,
    /// `[nh·p]`: the gated norm's weight (RMS over each group's `nh·p / G` channels).
    pub norm: &'a T,
    /// `dt` is clamped to this range after the softplus (`time_step_limit`).
    pub dt_limit: (f32, f32),
    pub eps: f32,
}

/// The ops of a model with linear-attention layers (Qwen3.5's Gated DeltaNet) beyond Qwen3's.
/// A backend without them answers [`Feature::HybridLayers`](super::Feature::HybridLayers) false and refuses them.
pub trait HybridOps: Backend {
    /// A tensor of f32 values whatever the compute type (small parameters: the Gated
    /// DeltaNet's conv taps, decay and norm).
    fn upload_f32(&self, shape: &[usize], data: &[f32]) -> Result<Self::Tensor>;
    /// A zero-filled f32 tensor (the recurrent-state slots).
    fn zeros_f32(&self, shape: &[usize]) -> Result<Self::Tensor>;
    /// `x *= sigmoid(gate)` elementwise (gated attention's output gate).
    fn sigmoid_mul(&self, x: &mut Self::Tensor, gate: &Self::Tensor) -> Result<()>;
    /// `x += y` elementwise (the residual stream).
    fn add_assign(&self, x: &mut Self::Tensor, y: &Self::Tensor) -> Result<()>;
    /// Qwen3.5-MoE's shared expert: `out[t] = routed[t] + sigmoid(gate[t]) · out[t]` per row
    /// (`gate` `[T, 1]`).
    fn add_gated(
        &self,
        out: &mut Self::Tensor,
        routed: &Self::Tensor,
        gate: &Self::Tensor,
    ) -> Result<()>;
    /// Row `to` of a `[rows, n]` f32 state tensor becomes a copy of row `from`, or zeros.
    fn state_row(&self, t: &mut Self::Tensor, from: Option<usize>, to: usize) -> Result<()>;
    /// Gated DeltaNet's mixer after its input projection. `mixed` `[T, C + nv·dv + 2·nv]` is
    /// `qkv | z | b | a` per row. Each sequence `s` of the batch (its plan `host.states[s]`,
    /// its state in row `plan.slot` of `conv_state` `[slots, (K − 1)·C]` and `recurrent`
    /// `[slots, nv·dk·dv]`) runs, over its rows in order:
    ///
    /// - `qkv' = silu(causal depthwise conv(window | qkv))`, the window being the slot's last
    ///   `K − 1` inputs, which it then replaces;
    /// - the gated delta rule (`backend/cpu/hybrid.rs`) from and into the slot's state, with
    ///   `beta = sigmoid(b)`, `g = neg_a · softplus(a + dt_bias)`, q and k L2-normalised;
    /// - `out = rms_norm(core) · norm · silu(z)` per value head, `out` `[T, nv·dv]`;
    ///
    /// and after `save.after` of its rows copies both states into row `save.slot` (prefix
    /// checkpoints, speculative scratch). Starting the slots (zeros, checkpoint copies) is the
    /// caller's ([`HybridOps::state_row`]). A padding row's plan
    /// ([`crate::kv_cache::NO_STATE`], no saves) runs from zeros and writes no slot.
    #[allow(clippy::too_many_arguments)]
    fn gated_delta_net(
        &self,
        out: &mut Self::Tensor,
        mixed: &Self::Tensor,
        layer: &GdnLayer<'_, Self::Tensor>,
        conv_state: &mut Self::Tensor,
        recurrent: &mut Self::Tensor,
        host: &BatchInputs,
        batch: &Self::Batch,
    ) -> Result<()>;
    /// Nemotron-H's Mamba-2 mixer after its input projection. `mixed` `[T, nh·p + C + nh]` is
    /// `z | xBC | dt` per row. Each sequence `s` of the batch (its plan `host.states[s]`, its
    /// state in row `plan.slot` of `conv_state` `[slots, (K − 1)·C]` and `ssm_state`
    /// `[slots, nh·p·N]`) runs, over its rows in order:
    ///
    /// - `xBC' = silu(causal depthwise conv(window | xBC) + bias)`, the window being the
    ///   slot's last `K − 1` inputs, which it then replaces; `xBC'` splits into `x` `[nh, p]`,
    ///   `B` and `C` `[G, N]` (head `h` reads group `h / (nh / G)`);
    /// - the selective state space recurrence from and into the slot's state, per head:
    ///   `dt = clamp(softplus(dt + dt_bias), dt_limit)`, `S = exp(dt · neg_a) · S + dt · x Bᵀ`,
    ///   `y = S C + D · x` (`backend/cpu/mamba2.rs`);
    /// - `out = rms_norm_grouped(y · silu(z)) · norm`, `out` `[T, nh·p]`, RMS over each of
    ///   the `G` groups of channels;
    ///
    /// and after `save.after` of its rows copies both states into row `save.slot`, as
    /// [`HybridOps::gated_delta_net`] does. Only backends that answer [`Feature::NemotronH`](super::Feature::NemotronH)
    /// run it.
    #[allow(clippy::too_many_arguments)]
    fn mamba2(
        &self,
        _out: &mut Self::Tensor,
        _mixed: &Self::Tensor,
        _layer: &Mamba2Layer<'_, Self::Tensor>,
        _conv_state: &mut Self::Tensor,
        _ssm_state: &mut Self::Tensor,
        _host: &BatchInputs,
        _batch: &Self::Batch,
    ) -> Result<()> {
        Err(lacks(self.name(), "Mamba-2 mixer"))
    }
    /// `out = relu(x)²` elementwise (Nemotron-H's MLP activation). Only backends that answer
    /// [`Feature::NemotronH`](super::Feature::NemotronH) run it.
    fn relu2(&self, _out: &mut Self::Tensor, _x: &Self::Tensor) -> Result<()> {
        Err(lacks(self.name(), "relu² activation"))
    }
    /// Nemotron-H's routed experts (its `E` layers): routed as
    /// [`Backend::fused_moe_sigmoid`] (`router_logits` `[T, E]`, `bias` `[E]`, `routing`), but
    /// each expert is not gated: `down[e] · relu(up[e] · x)²` with `up` `[E, I, H]` and `down`
    /// `[E, H, I]` (transformers' `NemotronHExperts`). `out` `[T, H]` is the weighted sum. Only
    /// backends that answer [`Feature::NemotronH`](super::Feature::NemotronH) run it.
    fn fused_moe_relu2(
        &self,
        _out: &mut Self::Tensor,
        _x: &Self::Tensor,
        _router_logits: &Self::Tensor,
        _bias: &Self::Tensor,
        _experts: (&Self::Tensor, &Self::Tensor),
        _routing: SigmoidRouting,
    ) -> Result<()> {
        Err(lacks(self.name(), "relu² experts"))
    }
}
