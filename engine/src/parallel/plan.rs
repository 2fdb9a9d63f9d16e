//! What a rank of a dense decoder holds ([`Plan`], at load) and does ([`Tp`], each step):
//! the cuts of `parallel/mod.rs`'s table for q|k|v, `o_proj`, gate|up, `down` and the LM head,
//! shared by the families built on that decoder (Qwen3, Llama/Mistral).

use std::ops::Range;
use std::sync::Arc;

use super::{Collective, Shard, shard};
use crate::backend::{Backend, Result};
use crate::loader::{HostTensor, LoadError};

/// A rank's slice of a dense decoder: its query heads, key/value heads, MLP width and
/// vocabulary (everything for a group of one).
#[derive(Debug, Clone)]
pub struct Plan {
    pub shard: Shard,
    pub q_heads: Range<usize>,
    pub kv_heads: Range<usize>,
    pub width: Range<usize>,
    pub vocab: Range<usize>,
    head_dim: usize,
}

impl Plan {
    /// The slice of a decoder of `nh` query and `nkv` key/value heads of `hd`, MLP width
    /// `width` and `vocab` rows of head; an error names what does not split.
    pub fn new(
        shard: Shard,
        (nh, nkv, hd): (usize, usize, usize),
        width: usize,
        vocab: usize,
    ) -> std::result::Result<Self, LoadError> {
        Ok(Self {
            shard,
            q_heads: shard.split("num_attention_heads", nh)?,
            kv_heads: shard.kv_heads(nh, nkv)?,
            width: shard.split("intermediate_size", width)?,
            vocab: shard.split("vocab_size", vocab)?,
            head_dim: hd,
        })
    }

    fn dims(&self, heads: &Range<usize>) -> Range<usize> {
        heads.start * self.head_dim..heads.end * self.head_dim
    }

    /// This rank's rows of a `[nh·hd, _]` query projection (its query heads' `hd` each).
    pub fn q_dims(&self) -> Range<usize> {
        self.dims(&self.q_heads)
    }

    /// This rank's rows of a `[nkv·hd, _]` key or value projection.
    pub fn kv_dims(&self) -> Range<usize> {
        self.dims(&self.kv_heads)
    }

    /// This rank's q|k|v rows, fused.
    pub fn qkv(
        &self,
        q: HostTensor<'_>,
        k: HostTensor<'_>,
        v: HostTensor<'_>,
    ) -> HostTensor<'static> {
        let kv = self.kv_dims();
        HostTensor::concat_rows(&[
            shard::rows_of(self.shard, q, self.q_dims()),
            shard::rows_of(self.shard, k, kv.clone()),
            shard::rows_of(self.shard, v, kv),
        ])
    }

    /// `o_proj`'s columns of this rank's heads.
    pub fn o<'a>(&self, o: HostTensor<'a>) -> HostTensor<'a> {
        shard::cols_of(self.shard, o, self.q_dims())
    }

    /// This rank's gate|up rows, fused.
    pub fn gate_up(&self, gate: HostTensor<'_>, up: HostTensor<'_>) -> HostTensor<'static> {
        HostTensor::concat_rows(&[
            shard::rows_of(self.shard, gate, self.width.clone()),
            shard::rows_of(self.shard, up, self.width.clone()),
        ])
    }

    /// `down`'s columns of this rank's width.
    pub fn down<'a>(&self, down: HostTensor<'a>) -> HostTensor<'a> {
        shard::cols_of(self.shard, down, self.width.clone())
    }

    /// The head a rank of several keeps: its vocabulary rows of `head` (or of `embed` when
    /// the head is `tied` to it), read by `get`; `None` for a group of one, whose head is the
    /// family's own choice.
    pub fn head_rows<'a>(
        &self,
        tied: bool,
        (embed, head): (&str, &str),
        get: impl Fn(&str) -> std::result::Result<HostTensor<'a>, LoadError>,
    ) -> std::result::Result<Option<HostTensor<'a>>, LoadError> {
        shard::head_rows((self.shard, self.vocab.clone()), tied, (embed, head), get)
    }

    /// (query heads, key/value heads, MLP width) this rank computes.
    pub fn local(&self) -> (usize, usize, usize) {
        (self.q_heads.len(), self.kv_heads.len(), self.width.len())
    }
}

/// The group a rank's forward calls: its collectives, or nothing for the whole model.
pub struct Tp<B: Backend>(pub Option<Arc<dyn Collective<B>>>);

impl<B: Backend> Tp<B> {
    pub fn shard(&self) -> Shard {
        self.0.as_ref().map_or(Shard::WHOLE, |c| c.shard())
    }

    /// A row-parallel projection with a bias: `out = Σ_ranks x · wᵀ + bias`, the bias added
    /// once after the ranks' sum; without a group, one `matmul_bias` (one launch at one row on
    /// CUDA).
    pub fn matmul_bias_reduced(
        &self,
        b: &B,
        out: &mut B::Tensor,
        x: &B::Tensor,
        (w, bias): (&B::Tensor, &B::Tensor),
    ) -> Result<()> {
        match &self.0 {
            None => b.matmul_bias(out, x, w, bias),
            Some(c) => {
                b.matmul(out, x, w)?;
                c.all_reduce_sum(b, out)?;
                b.add_bias(out, bias)
            }
        }
    }

    /// Sums `t` over the ranks (a block's partial output).
    pub fn all_reduce(&self, b: &B, t: &mut B::Tensor) -> Result<()> {
        match &self.0 {
            Some(c) => c.all_reduce_sum(b, t),
            None => Ok(()),
        }
    }

    /// The ranks' vocabulary slices of the logits, side by side.
    pub fn logits(&self, b: &B, logits: B::Tensor) -> Result<B::Tensor> {
        match &self.0 {
            Some(c) => c.all_gather_cols(b, &logits),
            None => Ok(logits),
        }
    }
}
