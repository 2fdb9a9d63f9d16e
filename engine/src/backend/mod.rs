//! The `Backend` trait: one method per op, output first, the same names and argument order on
//! every device. `cpu/` is the reference; the CUDA backend mirrors it op for op.

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
mod hybrid;
pub mod kernels;
pub mod kv_fp8;
pub mod moe_plan;
mod moe_shapes;
pub mod nvfp4_act;
mod params;
pub mod sampling;

use crate::kv_cache::StatePlan;
use crate::loader::HostTensor;

pub use cpu::CpuBackend;
pub use hybrid::{GdnLayer, HybridOps, Mamba2Layer};
pub(crate) use moe_shapes::{moe_dims, moe_relu2_dims};
pub use params::{ClampedExperts, MlaDims, SigmoidRouting};

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("{op}: {message}")]
    Shape { op: &'static str, message: String },
    #[error("{0}")]
    Device(String),
    /// A rank of the tensor-parallel group is gone (or out of step): no step can run again,
    /// so the engine fails every request and stops (`parallel/tcp.rs`).
    #[error("{0}")]
    GroupLost(String),
}

pub type Result<T> = std::result::Result<T, BackendError>;

/// What a backend answers for an op it does not run (its [`Backend::supports`] says no first,
/// so models refuse the checkpoint at load; this is the op's own refusal).
fn lacks(backend: &str, what: &str) -> BackendError {
    BackendError::Device(format!("the {backend} backend has no {what}"))
}

/// One step's flattened batch as the runner builds it on the host: a varlen list of tokens
/// from many sequences, where each goes in the paged KV cache, and which rows need logits.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchInputs {
    /// `[T]` token ids, sequences back to back.
    pub token_ids: Vec<u32>,
    /// `[T]` position of each token in its sequence.
    pub positions: Vec<u32>,
    /// `[T]` cache slot of each token: `block_id * block_size + offset`.
    pub slot_mapping: Vec<u32>,
    /// `[S + 1]` row offsets: sequence `s` owns rows `seq_starts[s]..seq_starts[s + 1]`.
    pub seq_starts: Vec<u32>,
    /// `[S]` tokens in the cache for each sequence once this step's are written.
    pub context_lens: Vec<u32>,
    /// `[S, max_blocks_per_seq]` block tables, padded with the null block 0; empty when the
    /// backend keeps the tables (`table_rows`).
    pub block_tables: Vec<u32>,
    /// The widest table a sequence of the batch may need, in blocks (for a CUDA graph's
    /// batch, a bucket: attention is launched for this reach).
    pub max_blocks_per_seq: usize,
    /// `[S]` each sequence's row in the block tables the backend keeps from step to step
    /// ([`Backend::keep_block_tables`], fed by [`Backend::write_block_tables`]); empty when
    /// the batch carries whole tables in `block_tables`.
    pub table_rows: Vec<u32>,
    pub block_size: usize,
    /// Rows whose logits are computed, in the order the logits come back.
    pub logits_rows: Vec<u32>,
    /// `[S]` each sequence's recurrent-state slot and what it does this step, for models with
    /// linear-attention layers; empty for the others.
    pub states: Vec<StatePlan>,
    /// The batch as the layers of KV groups 1.. see it (a model with sliding-window layers,
    /// `kv_cache/groups.rs`): the same rows, with each group's slot mapping and block tables
    /// (or table rows); this batch's own are group 0's. Empty with one group.
    pub groups: Vec<BatchInputs>,
}

impl BatchInputs {
    /// The same batch with every sequence's state plan made a padding row's: a forward over it
    /// moves no recurrent state (sizing a CUDA graph's capture runs the forward once more).
    pub fn without_state_effects(&self) -> Self {
        let mut b = self.clone();
        b.states.fill(StatePlan::padding());
        b
    }

    pub fn num_tokens(&self) -> usize {
        self.token_ids.len()
    }

    pub fn num_seqs(&self) -> usize {
        self.context_lens.len()
    }

    /// The batch the layers of KV group `group` read: this one for group 0.
    pub fn group(&self, group: usize) -> Option<&BatchInputs> {
        match group {
            0 => Some(self),
            g => self.groups.get(g - 1),
        }
    }

    /// Build the batch for sequences given as (tokens to compute, start position, block table,
    /// rows wanting logits relative to the chunk). Used by the runner and by tests.
    pub fn build(block_size: usize, seqs: &[SeqChunk<'_>]) -> Self {
        Self::build_with_width(block_size, seqs, 1)
    }

    /// [`BatchInputs::build`] with block tables at least `min_blocks` wide (a CUDA graph's
    /// batch has a fixed shape).
    pub fn build_with_width(block_size: usize, seqs: &[SeqChunk<'_>], min_blocks: usize) -> Self {
        Self::build_tables(block_size, seqs, min_blocks, None)
    }

    /// [`BatchInputs::build_with_width`] for a backend that keeps the block tables: sequence
    /// `s` reads row `rows[s]` of them, and the batch carries no tables. Each chunk's
    /// `block_table` still gives its slots and the width.
    pub fn build_on_rows(
        block_size: usize,
        seqs: &[SeqChunk<'_>],
        min_blocks: usize,
        rows: &[u32],
    ) -> Self {
        Self::build_tables(block_size, seqs, min_blocks, Some(rows))
    }

    fn build_tables(
        block_size: usize,
        seqs: &[SeqChunk<'_>],
        min_blocks: usize,
        rows: Option<&[u32]>,
    ) -> Self {
        let max_blocks = seqs
            .iter()
            .map(|s| s.block_table.len())
            .max()
            .unwrap_or(0)
            .max(min_blocks)
            .max(1);
        let mut b = Self {
            max_blocks_per_seq: max_blocks,
            block_size,
            seq_starts: vec![0],
            ..Self::default()
        };
        for s in seqs {
            let row0 = b.token_ids.len() as u32;
            for (i, &t) in s.tokens.iter().enumerate() {
                let pos = s.start_pos + i;
                b.token_ids.push(t);
                b.positions.push(pos as u32);
                let block = s.block_table[pos / block_size];
                b.slot_mapping
                    .push(block * block_size as u32 + (pos % block_size) as u32);
            }
            b.seq_starts.push(b.token_ids.len() as u32);
            b.context_lens.push((s.start_pos + s.tokens.len()) as u32);
            if rows.is_none() {
                b.block_tables.extend_from_slice(s.block_table);
                b.block_tables
                    .resize(b.block_tables.len() + max_blocks - s.block_table.len(), 0);
            }
            b.logits_rows
                .extend(s.logits_rows.iter().map(|r| row0 + *r as u32));
        }
        b.table_rows = rows.map(<[u32]>::to_vec).unwrap_or_default();
        b
    }
}

/// One step's change to one row of the block tables a backend keeps
/// ([`Backend::write_block_tables`]): `ids` go to `start..`, and the row is then `len` long.
/// `start` 0 starts the row afresh (a sequence new to it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TableWrite<'a> {
    pub row: u32,
    pub start: usize,
    pub ids: &'a [u32],
    pub len: usize,
}

/// One sequence's part of a batch, for [`BatchInputs::build`].
#[derive(Debug, Clone)]
pub struct SeqChunk<'a> {
    pub tokens: &'a [u32],
    pub start_pos: usize,
    pub block_table: &'a [u32],
    /// Row indices within this chunk whose logits are wanted.
    pub logits_rows: Vec<usize>,
}

/// Rotary tables for one model: inverse frequency per rotated pair and the cos/sin scale.
#[derive(Debug, Clone, PartialEq)]
pub struct RopeTables {
    pub inv_freq: Vec<f32>,
    pub scale: f32,
    /// Leading dims of each head that are rotated (= 2 × `inv_freq.len()`).
    pub rotary_dim: usize,
}

/// What a checkpoint may need beyond the dense Qwen3 ops, from the table `met` and
/// `metralectl` share: a model's load asks [`Backend::supports`] before reading any weight, so
/// a device that lacks one refuses the checkpoint with a sentence instead of failing
/// mid-forward.
pub use metrale_protocol::support::Feature;

pub use cpu::hybrid::DeltaHeads;
pub use cpu::mamba2::SsmHeads;

/// A forward with several outputs, for [`Backend::graph_forward_many`].
pub type ForwardMany<'a, B> =
    dyn FnMut(&<B as Backend>::Batch) -> Result<Vec<<B as Backend>::Tensor>> + 'a;

/// Chained forwards for [`Backend::graph_chain`]: pass `i` on batch `i`, reading the inputs
/// (the backend's copies of the caller's tensors).
pub type ChainForward<'a, B> = dyn FnMut(
        &[&<B as Backend>::Batch],
        &[<B as Backend>::Tensor],
    ) -> Result<Vec<<B as Backend>::Tensor>>
    + 'a;

/// The device a model runs on. `Tensor` holds weights, activations and KV-cache layers;
/// `Batch` is the device copy of one step's [`BatchInputs`].
///
/// Matrices follow the checkpoints' layout: a weight `w` is `[n, k]` (out × in) and
/// `matmul(out, x, w)` computes `out[m, n] = Σ_k x[m, k] · w[n, k]`.
pub trait Backend: Send + Sync + 'static {
    type Tensor: Send + Sync;
    type Batch: Send;

    fn name(&self) -> &'static str;

    /// The device in words, for `GET /version` and benchmark records (`cpu`, or the GPU's
    /// name, architecture, memory and driver).
    fn describe(&self) -> String {
        self.name().to_string()
    }

    /// Free and total bytes of device memory, for sizing the KV cache; `None` on the host.
    fn memory_info(&self) -> Option<(usize, usize)> {
        None
    }
    /// Bytes one cached head vector (a token's k or v for one kv head) of `head_dim` takes as
    /// this backend stores it.
    fn kv_head_bytes(&self, head_dim: usize) -> usize {
        4 * head_dim
    }
    /// Whether the KV cache holds FP8 values (`--kv-cache-dtype fp8`, see `kv_fp8.rs`).
    fn kv_cache_fp8(&self) -> bool {
        false
    }
    /// A zero-filled KV-cache layer `[num_blocks, block_size, num_kv_heads, head_dim]` in the
    /// cache's storage type.
    fn kv_zeros(&self, shape: &[usize]) -> Result<Self::Tensor> {
        self.zeros(shape)
    }

    /// A weight from the loader, in the backend's storage type.
    fn upload(&self, t: &HostTensor<'_>) -> Result<Self::Tensor>;
    /// A small parameter that the kernels read in f32 (gpt-oss's attention sinks), kept in f32
    /// whatever the storage type, so no op widens it again at every call. The CPU keeps
    /// everything in f32: [`Backend::upload`].
    fn upload_f32_weight(&self, t: &HostTensor<'_>) -> Result<Self::Tensor> {
        self.upload(t)
    }
    /// A zero-filled tensor of `shape`.
    fn zeros(&self, shape: &[usize]) -> Result<Self::Tensor>;
    /// The values of `t` as f32 on the host (for logits, tests and checks).
    fn to_host(&self, t: &Self::Tensor) -> Result<Vec<f32>>;
    fn shape<'t>(&self, t: &'t Self::Tensor) -> &'t [usize];
    fn prepare_batch(&self, b: &BatchInputs) -> Result<Self::Batch>;

    /// `out[t, :] = table[token_ids[t], :]`.
    fn embedding(
        &self,
        out: &mut Self::Tensor,
        batch: &Self::Batch,
        table: &Self::Tensor,
    ) -> Result<()>;
    /// `out = x / rms(x) * w` per row.
    fn rms_norm(
        &self,
        out: &mut Self::Tensor,
        x: &Self::Tensor,
        w: &Self::Tensor,
        eps: f32,
    ) -> Result<()>;
    /// `residual += x; out = rms_norm(residual) * w` per row (the decoder's residual stream).
    fn add_rms_norm(
        &self,
        out: &mut Self::Tensor,
        residual: &mut Self::Tensor,
        x: &Self::Tensor,
        w: &Self::Tensor,
        eps: f32,
    ) -> Result<()>;
    /// `out[m, n] = Σ_k x[m, k] · w[n, k]`.
    fn matmul(&self, out: &mut Self::Tensor, x: &Self::Tensor, w: &Self::Tensor) -> Result<()>;
    /// On a fused `qkv` `[T, (nh + 2·nkv) · hd]`: RMS-normalise every q and k head with
    /// `q_w`/`k_w` (`[hd]`), then rotate them by their token's position (neox halves).
    #[allow(clippy::too_many_arguments)]
    fn qk_norm_rope(
        &self,
        qkv: &mut Self::Tensor,
        batch: &Self::Batch,
        q_w: &Self::Tensor,
        k_w: &Self::Tensor,
        rope: &RopeTables,
        num_heads: usize,
        num_kv_heads: usize,
        eps: f32,
    ) -> Result<()>;
    /// [`Backend::qk_norm_rope`] then [`Backend::write_kv`] (heads and eps as one tuple). A
    /// backend may do both in one pass; this composition is the reference it is checked
    /// against.
    #[allow(clippy::too_many_arguments)]
    fn qk_norm_rope_write_kv(
        &self,
        qkv: &mut Self::Tensor,
        batch: &Self::Batch,
        q_w: &Self::Tensor,
        k_w: &Self::Tensor,
        rope: &RopeTables,
        (num_heads, num_kv_heads, eps): (usize, usize, f32),
        k_cache: &mut Self::Tensor,
        v_cache: &mut Self::Tensor,
    ) -> Result<()> {
        self.qk_norm_rope(qkv, batch, q_w, k_w, rope, num_heads, num_kv_heads, eps)?;
        self.write_kv(k_cache, v_cache, qkv, batch, num_heads)
    }
    /// Copy each token's k and v heads from the fused `qkv` into the layer's paged cache
    /// (`[num_blocks, block_size, nkv, hd]` each) at its slot.
    fn write_kv(
        &self,
        k_cache: &mut Self::Tensor,
        v_cache: &mut Self::Tensor,
        qkv: &Self::Tensor,
        batch: &Self::Batch,
        num_heads: usize,
    ) -> Result<()>;
    /// Causal attention of every q head in `qkv` over its sequence's cached keys and values
    /// up to and including its own position (GQA: head `h` reads kv head `h / (nh / nkv)`).
    /// `out` is `[T, nh · hd]`.
    #[allow(clippy::too_many_arguments)]
    fn paged_attention(
        &self,
        out: &mut Self::Tensor,
        qkv: &Self::Tensor,
        k_cache: &Self::Tensor,
        v_cache: &Self::Tensor,
        batch: &Self::Batch,
        num_heads: usize,
        scale: f32,
    ) -> Result<()>;
    /// [`Backend::qk_norm_rope_write_kv`] without the norm (Llama, Mistral): rotate every q and
    /// k head of `qkv` by its token's position (neox halves), then write each token's k and v
    /// heads to its cache slot.
    #[allow(clippy::too_many_arguments)]
    fn rope_write_kv(
        &self,
        qkv: &mut Self::Tensor,
        batch: &Self::Batch,
        rope: &RopeTables,
        num_heads: usize,
        num_kv_heads: usize,
        k_cache: &mut Self::Tensor,
        v_cache: &mut Self::Tensor,
    ) -> Result<()>;
    /// [`Backend::paged_attention`] for a sliding-window layer: the query at position `q` sees
    /// the keys at positions `p` with `q − window < p ≤ q` (transformers' sliding mask). Only
    /// backends that answer [`Feature::SlidingWindow`] run it.
    #[allow(clippy::too_many_arguments)]
    fn paged_attention_window(
        &self,
        _out: &mut Self::Tensor,
        _qkv: &Self::Tensor,
        _k_cache: &Self::Tensor,
        _v_cache: &Self::Tensor,
        _batch: &Self::Batch,
        _num_heads: usize,
        _scale: f32,
        _window: usize,
    ) -> Result<()> {
        Err(lacks(self.name(), "sliding-window attention"))
    }
    /// [`Backend::paged_attention`] (in a sliding `window` when it is `Some`, as
    /// [`Backend::paged_attention_window`]) with a learned sink a head: head `h`'s softmax has
    /// one more logit, `sinks[h]` (`[nh]`), in its denominator and no value (gpt-oss:
    /// `softmax([scores, sink])` without the sink's column). Only backends that answer
    /// [`Feature::GptOss`] run it.
    #[allow(clippy::too_many_arguments)]
    fn paged_attention_sinks(
        &self,
        _out: &mut Self::Tensor,
        _qkv: &Self::Tensor,
        _k_cache: &Self::Tensor,
        _v_cache: &Self::Tensor,
        _batch: &Self::Batch,
        (_num_heads, _scale): (usize, f32),
        _window: Option<usize>,
        _sinks: &Self::Tensor,
    ) -> Result<()> {
        Err(lacks(self.name(), "attention with sinks"))
    }
    /// `x[r, :] += bias` for every row of `x` `[.., n]` (`bias` `[n]`): a linear layer's bias.
    /// Only backends that answer [`Feature::GptOss`] run it.
    fn add_bias(&self, _x: &mut Self::Tensor, _bias: &Self::Tensor) -> Result<()> {
        Err(lacks(self.name(), "bias add"))
    }
    /// A linear layer with its bias: `out = x · wᵀ`, then `out[r, :] += bias`. A backend may
    /// fuse the two; this composition is the reference every fused version is checked against.
    fn matmul_bias(
        &self,
        out: &mut Self::Tensor,
        x: &Self::Tensor,
        w: &Self::Tensor,
        bias: &Self::Tensor,
    ) -> Result<()> {
        self.matmul(out, x, w)?;
        self.add_bias(out, bias)
    }
    /// gpt-oss's mixture of experts on `x` `[T, H]`, given the router's logits `[T, E]`
    /// (bias included): each token goes to its `top_k` experts of highest logit, weighted by
    /// the softmax over those `top_k` logits; expert `e` computes
    /// `down[e] · act(gate_up[e] · x + gate_up_bias[e]) + down_bias[e]` with
    /// `act(g | u) = (clamp(u, −limit, limit) + 1) · g' · sigmoid(alpha · g')`,
    /// `g' = min(g, limit)` (transformers' `GptOssExperts._apply_gate`). `out` `[T, H]` is the
    /// weighted sum. Only backends that answer [`Feature::GptOss`] run it.
    fn fused_moe_clamped(
        &self,
        _out: &mut Self::Tensor,
        _x: &Self::Tensor,
        _router_logits: &Self::Tensor,
        _experts: &ClampedExperts<'_, Self::Tensor>,
        _top_k: usize,
    ) -> Result<()> {
        Err(lacks(self.name(), "clamped-SwiGLU experts"))
    }
    /// gpt-oss's whole sparse block: `router_logits = x · routerᵀ + router_bias`
    /// ([`Backend::matmul_bias`], router `[E, H]`, bias `[E]`), then
    /// [`Backend::fused_moe_clamped`]. A backend may run the router's product and the routing
    /// as one launch; the logits are written either way.
    fn routed_moe_clamped(
        &self,
        out: &mut Self::Tensor,
        x: &Self::Tensor,
        (router, router_bias): (&Self::Tensor, &Self::Tensor),
        router_logits: &mut Self::Tensor,
        experts: &ClampedExperts<'_, Self::Tensor>,
        top_k: usize,
    ) -> Result<()> {
        self.matmul_bias(router_logits, x, router, router_bias)?;
        self.fused_moe_clamped(out, x, router_logits, experts, top_k)
    }
    /// Columns `start .. start + n` of each row of `x` (`n` = `weight`'s length), normalised in
    /// place: `x * rsqrt(mean(x²) + eps) * weight` over those columns (MiniMax-M2's q and k
    /// norms, each over all heads of the fused qkv; DeepSeek-V3's norm of the latent before
    /// its rotated part). Only backends that answer [`Feature::MiniMaxM2`] or
    /// [`Feature::DeepseekV3`] run it.
    fn rms_norm_cols(
        &self,
        _x: &mut Self::Tensor,
        _start: usize,
        _weight: &Self::Tensor,
        _eps: f32,
    ) -> Result<()> {
        Err(lacks(self.name(), "column-range RMSNorm"))
    }
    /// The first half of [`Backend::rms_norm_cols`] for a tensor-parallel rank that holds
    /// only some of the normed columns (MiniMax-M2's q and k norms, over every rank's heads):
    /// `out[r, j] = mean(x[r, ranges[j]]²)`, `out` `[T, ranges.len()]`. The ranks' means,
    /// averaged by an all-reduce, are then the whole row's, which
    /// [`Backend::rms_norm_cols_by`] divides by. Only backends that answer
    /// [`Feature::MiniMaxM2`] run it.
    fn mean_sq_cols(
        &self,
        _out: &mut Self::Tensor,
        _x: &Self::Tensor,
        _ranges: &[std::ops::Range<usize>],
    ) -> Result<()> {
        Err(lacks(self.name(), "column-range mean square"))
    }
    /// [`Backend::rms_norm_cols`] by a given mean square rather than the columns' own: columns
    /// `start .. start + n` of each row `r` of `x` become `x · rsqrt(ms[r, col] + eps) ·
    /// weight` (`ms` `[T, k]`, [`Backend::mean_sq_cols`]'s). Only backends that answer
    /// [`Feature::MiniMaxM2`] run it.
    fn rms_norm_cols_by(
        &self,
        _x: &mut Self::Tensor,
        _start: usize,
        _weight: &Self::Tensor,
        (_ms, _col): (&Self::Tensor, usize),
        _eps: f32,
    ) -> Result<()> {
        Err(lacks(
            self.name(),
            "column-range RMSNorm by a given mean square",
        ))
    }
    /// A mixture of experts routed by sigmoid scores: `s = sigmoid(router_logits)` `[T, E]`
    /// (f32), each token's `top_k` experts of highest `s + bias` (`bias` `[E]`, the
    /// checkpoint's `e_score_correction_bias`; ties to the lower index) among its
    /// `topk_group` best expert groups (see [`SigmoidRouting`]), weighted by their `s`
    /// (divided by the chosen ones' sum when `norm_topk_prob`) times `scaling`; experts as in
    /// [`Backend::fused_moe`]. Only backends that answer [`Feature::MiniMaxM2`] (one group) or
    /// [`Feature::DeepseekV3`] run it.
    #[allow(clippy::too_many_arguments)]
    fn fused_moe_sigmoid(
        &self,
        _out: &mut Self::Tensor,
        _x: &Self::Tensor,
        _router_logits: &Self::Tensor,
        _bias: &Self::Tensor,
        _experts: (&Self::Tensor, &Self::Tensor),
        _routing: SigmoidRouting,
    ) -> Result<()> {
        Err(lacks(self.name(), "sigmoid-routed experts"))
    }
    /// Multi-head latent attention's rotation and cache write: rotate the last `rope` values of
    /// every head of `q` (`[T, heads · (nope + rope)]`) and of every row of `latent`
    /// (`[T, latent + rope]`, the normalised `c_kv` then `k_pe`) by the row's position, then
    /// copy each `latent` row to its slot of `cache` (`[num_blocks, block_size, latent +
    /// rope]`). With `interleaved` (DeepSeek's released layout, transformers'
    /// `rope_interleave`) the rotated pairs are `(x[2i], x[2i + 1])` and come out as
    /// transformers leaves them, evens then odds; otherwise neox halves. Only backends that
    /// answer [`Feature::DeepseekV3`] run it.
    #[allow(clippy::too_many_arguments)]
    fn mla_rope_write_kv(
        &self,
        _q: &mut Self::Tensor,
        _latent: &mut Self::Tensor,
        _batch: &Self::Batch,
        _rope: &RopeTables,
        _dims: MlaDims,
        _interleaved: bool,
        _cache: &mut Self::Tensor,
    ) -> Result<()> {
        Err(lacks(self.name(), "multi-head latent attention"))
    }
    /// Causal multi-head latent attention of every head of `q` over its sequence's cached
    /// latent rows up to and including its own position, in the absorbed form: head `h`'s
    /// `q_nope` goes into the latent space through its key up-projection
    /// (`q_lat = W_UK[h]ᵀ · q_nope`, `W_UK[h]` the `nope` rows of `kv_b` for `h`), scores
    /// `scale · (q_lat · c_kv[p] + q_pe · k_pe[p])`, the softmax-weighted sum of the `c_kv[p]`,
    /// then its value up-projection (`W_UV[h]`, the next `v` rows). The same numbers as
    /// decompressing every cached row into per-head keys and values. `out` is
    /// `[T, heads · v]`. Only backends that answer [`Feature::DeepseekV3`] run it.
    #[allow(clippy::too_many_arguments)]
    fn mla_attention(
        &self,
        _out: &mut Self::Tensor,
        _q: &Self::Tensor,
        _kv_b: &Self::Tensor,
        _cache: &Self::Tensor,
        _batch: &Self::Batch,
        _dims: MlaDims,
        _scale: f32,
    ) -> Result<()> {
        Err(lacks(self.name(), "multi-head latent attention"))
    }
    /// `out = gelu_tanh(gate) * up` where `gate_up` is `[T, 2·I]` (gate first): Gemma's gated
    /// MLP (`gelu_pytorch_tanh`).
    fn gelu_tanh_mul(&self, out: &mut Self::Tensor, gate_up: &Self::Tensor) -> Result<()>;
    /// `x *= factor` elementwise (Gemma's embeddings, scaled by `sqrt(hidden)`).
    fn scale(&self, x: &mut Self::Tensor, factor: f32) -> Result<()>;
    /// Whether this backend runs checkpoints that need `feature`.
    fn supports(&self, _feature: Feature) -> bool {
        false
    }
    /// A mixture-of-experts MLP (Qwen3-MoE's sparse block) on `x` `[T, H]`, given the
    /// router's logits `[T, E]`: each token goes to the `top_k` experts of highest softmax
    /// probability (softmax in f32), weighted by those probabilities (renormalised to sum to
    /// one when `norm_topk_prob`); expert `e` computes `down[e] · (silu(g) * u)` with
    /// `g | u = gate_up[e] · x` (`gate_up` `[E, 2·I, H]`, gate rows first; `down` `[E, H, I]`).
    /// `out` `[T, H]` is the weighted sum over the chosen experts.
    #[allow(clippy::too_many_arguments)]
    fn fused_moe(
        &self,
        _out: &mut Self::Tensor,
        _x: &Self::Tensor,
        _router_logits: &Self::Tensor,
        _gate_up: &Self::Tensor,
        _down: &Self::Tensor,
        _top_k: usize,
        _norm_topk_prob: bool,
    ) -> Result<()> {
        Err(lacks(self.name(), "mixture-of-experts op"))
    }
    /// The whole sparse block: `router_logits = x · routerᵀ` (`router` `[E, H]`, logits
    /// `[T, E]`), then [`Backend::fused_moe`] with `experts` = (gate_up, down). A backend may
    /// run the router's product and the routing as one launch; the logits are written either
    /// way.
    #[allow(clippy::too_many_arguments)]
    fn routed_moe(
        &self,
        out: &mut Self::Tensor,
        x: &Self::Tensor,
        router: &Self::Tensor,
        router_logits: &mut Self::Tensor,
        (gate_up, down): (&Self::Tensor, &Self::Tensor),
        top_k: usize,
        norm_topk_prob: bool,
    ) -> Result<()> {
        self.matmul(router_logits, x, router)?;
        self.fused_moe(out, x, router_logits, gate_up, down, top_k, norm_topk_prob)
    }
    /// [`Backend::fused_moe`] on one rank of an expert-parallel group: every token is routed
    /// over all `E` experts of `router_logits` `[T, E]` as there, but only experts
    /// `first..first + e` are here (`gate_up` `[e, 2·I, H]`, `down` `[e, H, I]`); the others'
    /// shares are left out, so the ranks' outputs sum to the whole block's.
    fn fused_moe_slice(
        &self,
        _out: &mut Self::Tensor,
        _x: &Self::Tensor,
        _router_logits: &Self::Tensor,
        _experts: (&Self::Tensor, &Self::Tensor),
        _routing: (usize, bool),
        _first: usize,
    ) -> Result<()> {
        Err(lacks(self.name(), "expert-parallel experts"))
    }
    /// `out = silu(gate) * up` where `gate_up` is `[T, 2·I]` (gate first).
    fn silu_mul(&self, out: &mut Self::Tensor, gate_up: &Self::Tensor) -> Result<()>;
    /// The MLP's first half: `gate_up = x · wᵀ` (`w` is `[2·I, K]`, gate rows first), then
    /// `out = silu(gate) * up`. A backend may fuse the two and leave `gate_up` unwritten (its
    /// scratch); this composition is the reference every fused version is checked against.
    fn matmul_silu_mul(
        &self,
        out: &mut Self::Tensor,
        gate_up: &mut Self::Tensor,
        x: &Self::Tensor,
        w: &Self::Tensor,
    ) -> Result<()> {
        self.matmul(gate_up, x, w)?;
        self.silu_mul(out, gate_up)
    }
    /// `out[i, :] = x[logits_rows[i], :]`.
    fn gather_rows(
        &self,
        out: &mut Self::Tensor,
        x: &Self::Tensor,
        batch: &Self::Batch,
    ) -> Result<()>;
    /// Row-wise `log_softmax`, in place.
    fn log_softmax(&self, x: &mut Self::Tensor) -> Result<()>;
    /// One token for each of `rows` (each names its row of `logits` `[R, vocab]`), with
    /// logprobs where asked.
    fn sample(
        &self,
        logits: &Self::Tensor,
        rows: &[sampling::SampleRow<'_>],
    ) -> Result<Vec<sampling::Sampled>>;
    /// The sequences (`SampleRow::seq`) that will not be sampled again: a backend frees what
    /// it keeps for them (the CUDA sampler's penalty states). Forgetting is always safe.
    fn end_sequences(&self, _seqs: &[u64]) {}
    /// A copy of an LM head (`[vocab, hidden]`) in fewer bytes, for the MTP head's drafts
    /// only (the CUDA backend: FP8, half of bf16's bytes), or `None` to draft on the head
    /// itself (the CPU reference). Drafts only choose what the target verifies with its own
    /// head, so a rounded copy can change how many are accepted, never the output.
    fn draft_head(&self, _head: &Self::Tensor) -> Result<Option<Self::Tensor>> {
        Ok(None)
    }

    /// Whether the backend runs a model's KV groups (a batch for each,
    /// [`Backend::group_batch`]), so that sliding-window layers keep only their window.
    fn kv_groups(&self) -> bool {
        false
    }
    /// The batch that the layers of KV group `group` read (their slot mapping and block
    /// tables, `BatchInputs::groups`): `batch` itself for group 0.
    fn group_batch<'a>(&self, batch: &'a Self::Batch, group: usize) -> Result<&'a Self::Batch> {
        match group {
            0 => Ok(batch),
            g => Err(BackendError::Shape {
                op: "group_batch",
                message: format!("the {} backend keeps no KV group {g}", self.name()),
            }),
        }
    }

    /// Keep `rows` block tables of `width` blocks on the device from step to step, so a step
    /// sends only what changed ([`Backend::write_block_tables`]) and batches name rows
    /// ([`BatchInputs::build_on_rows`]). Returns the null row (every entry the null block 0,
    /// for padding rows), or `None` when the backend takes whole tables with every batch (the
    /// CPU: there is nothing to upload).
    /// A model with KV groups keeps `groups` such sets of tables (one a group, the rows
    /// shared; a group's batch, `BatchInputs::groups`, reads its own).
    fn keep_block_tables(
        &self,
        _groups: usize,
        _rows: usize,
        _width: usize,
    ) -> Result<Option<u32>> {
        Ok(None)
    }
    /// Apply one step's changes to KV group `group`'s tables, in order, before the step's
    /// batch is prepared.
    fn write_block_tables(&self, _group: usize, writes: &[TableWrite<'_>]) -> Result<()> {
        match writes.is_empty() {
            true => Ok(()),
            false => Err(BackendError::Shape {
                op: "write_block_tables",
                message: format!("the {} backend keeps no block tables", self.name()),
            }),
        }
    }

    /// Batch sizes (ascending) that decode steps are padded to for [`Backend::graph_forward`];
    /// `None` when the backend replays nothing (the CPU).
    fn graph_buckets(&self) -> Option<&'static [usize]> {
        None
    }
    /// Run a padded decode step's `forward` as a replayed graph (captured on the first step of
    /// its shape), returning its logits; `None` means "run `forward` yourself". A graph is
    /// keyed by the batch's shape (sequences, rows, block-table width, state saves) and the
    /// number of outputs.
    fn graph_forward(
        &self,
        batch_inputs: &BatchInputs,
        forward: &mut dyn FnMut(&Self::Batch) -> Result<Self::Tensor>,
    ) -> Result<Option<Self::Tensor>> {
        let outputs =
            self.graph_forward_many(batch_inputs, 1, &mut |b| forward(b).map(|t| vec![t]))?;
        Ok(outputs.and_then(|v| v.into_iter().next()))
    }
    /// [`Backend::graph_forward`] for a forward with `outputs` results (a verify step's logits
    /// and hidden states), each a view that the next replay of the same shape overwrites.
    fn graph_forward_many(
        &self,
        _batch_inputs: &BatchInputs,
        _outputs: usize,
        _forward: &mut ForwardMany<'_, Self>,
    ) -> Result<Option<Vec<Self::Tensor>>> {
        Ok(None)
    }
    /// Forwards chained on the device (the MTP head's drafts: each pass's token ids are the
    /// argmax of the pass before, [`Backend::argmax_ids`] then [`Backend::feed_tokens`]) as
    /// one replayed graph, captured on the first chain of its shape. `hosts[i]` is pass `i`'s
    /// batch (a fed pass's token ids are placeholders); `inputs` are copied into the graph's
    /// own buffers before each replay, so they may be another graph's outputs. `None` means
    /// "run the passes yourself"; the outputs are views the next replay of the shape
    /// overwrites.
    fn graph_chain(
        &self,
        _hosts: &[BatchInputs],
        _inputs: &[&Self::Tensor],
        _outputs: usize,
        _forward: &mut ChainForward<'_, Self>,
    ) -> Result<Option<Vec<Self::Tensor>>> {
        Ok(None)
    }
    /// Row `row` of `ids` (`[passes, R]` f32) := the argmax of each row of `logits` (`[R,
    /// vocab]` f32; lowest index on ties, the sampler's greedy rule), as exact f32 values, on
    /// the device. For [`Backend::graph_chain`]'s passes; the CPU never chains.
    fn argmax_ids(
        &self,
        _ids: &mut Self::Tensor,
        _row: usize,
        _logits: &Self::Tensor,
    ) -> Result<()> {
        Err(BackendError::Shape {
            op: "argmax_ids",
            message: format!(
                "the {} backend chains no forwards on the device",
                self.name()
            ),
        })
    }
    /// `batch`'s token ids := row `row` of `ids` (as [`Backend::argmax_ids`] wrote it; one id
    /// a row of the batch), on the device.
    fn feed_tokens(&self, _batch: &Self::Batch, _ids: &Self::Tensor, _row: usize) -> Result<()> {
        Err(BackendError::Shape {
            op: "feed_tokens",
            message: format!(
                "the {} backend chains no forwards on the device",
                self.name()
            ),
        })
    }
}
