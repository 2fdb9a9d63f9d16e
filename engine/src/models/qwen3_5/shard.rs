//! A tensor-parallel rank's slice of a Qwen3.5 hybrid (issue 41, `parallel/mod.rs`): the gated
//! attention layers by heads as Qwen3's (each head's query and gate rows together), the Gated
//! DeltaNet layers by heads too (the rank's key heads and the value heads that read them: its
//! q, k and v rows of `in_proj_qkv` and conv channels, its rows of `in_proj_z`, `in_proj_b`,
//! `in_proj_a`, `A_log` and `dt_bias`, its columns of `out_proj`), the MLPs (dense, the shared
//! expert, every routed expert) by width, the head by vocabulary. The rank's model keeps a
//! config of its own counts ([`Cut::local`]), so the forward and its state and cache sizes
//! read them unchanged; the block outputs are all-reduced.

use std::ops::Range;

use super::Qwen3_5Config;
use crate::loader::{HostTensor, LoadError};
use crate::parallel::{Shard, shard};

/// What rank `shard` keeps.
pub(super) struct Cut {
    pub shard: Shard,
    /// Gated attention's query heads and key/value heads.
    pub q_heads: Range<usize>,
    pub kv_heads: Range<usize>,
    /// Gated DeltaNet's key heads and value heads.
    k_heads: Range<usize>,
    v_heads: Range<usize>,
    /// The dense MLP's width, or the shared expert's.
    width: Range<usize>,
    pub vocab: Range<usize>,
}

impl Cut {
    pub fn new(config: &Qwen3_5Config, shard: Shard) -> Result<Self, LoadError> {
        let c = &config.base;
        let s = config.linear;
        let width = config
            .shared_expert_intermediate_size
            .unwrap_or(c.intermediate_size);
        Ok(Self {
            shard,
            q_heads: shard.split("num_attention_heads", c.num_attention_heads)?,
            kv_heads: shard.kv_heads(c.num_attention_heads, c.num_key_value_heads)?,
            k_heads: shard.split("linear_num_key_heads", s.nk)?,
            v_heads: shard.split("linear_num_value_heads", s.nv)?,
            width: shard.split(
                "intermediate_size (or shared_expert_intermediate_size)",
                width,
            )?,
            vocab: shard.split("vocab_size", c.vocab_size)?,
        })
    }

    /// The rank's config: its head counts and widths in place of the checkpoint's.
    pub fn local(&self, config: &Qwen3_5Config) -> Qwen3_5Config {
        let mut l = config.clone();
        l.base.num_attention_heads = self.q_heads.len();
        l.base.num_key_value_heads = self.kv_heads.len();
        l.linear.nk = self.k_heads.len();
        l.linear.nv = self.v_heads.len();
        match &mut l.shared_expert_intermediate_size {
            Some(shared) => *shared = self.width.len(),
            None => l.base.intermediate_size = self.width.len(),
        }
        if let Some(moe) = &mut l.base.moe {
            moe.moe_intermediate_size /= self.shard.world;
        }
        l
    }

    fn pick<'a>(&self, t: HostTensor<'a>, ranges: &[Range<usize>]) -> HostTensor<'a> {
        shard::pick_rows(self.shard, t, ranges)
    }

    /// `in_proj_qkv`'s rows, or the conv's channels (q and k of the rank's key heads, v of its
    /// value heads), of a config with `s`'s heads.
    pub fn delta_qkv<'a>(&self, config: &Qwen3_5Config, t: HostTensor<'a>) -> HostTensor<'a> {
        let s = config.linear;
        let k = |r: &Range<usize>, at: usize| at + r.start * s.dk..at + r.end * s.dk;
        let v =
            2 * s.nk * s.dk + self.v_heads.start * s.dv..2 * s.nk * s.dk + self.v_heads.end * s.dv;
        self.pick(t, &[k(&self.k_heads, 0), k(&self.k_heads, s.nk * s.dk), v])
    }

    /// Rows of `t` by value head: `per` rows each (`dv` for `in_proj_z`, 1 for `in_proj_b`,
    /// `in_proj_a`, `A_log`, `dt_bias`).
    pub fn value_heads<'a>(&self, t: HostTensor<'a>, per: usize) -> HostTensor<'a> {
        let r = self.v_heads.start * per..self.v_heads.end * per;
        self.pick(t, &[r])
    }

    /// `out_proj`'s columns of the rank's value heads.
    pub fn delta_out<'a>(&self, t: HostTensor<'a>, dv: usize) -> HostTensor<'a> {
        shard::cols_of(
            self.shard,
            t,
            self.v_heads.start * dv..self.v_heads.end * dv,
        )
    }

    /// Whether gated attention's query head `h` is this rank's.
    pub fn has_q_head(&self, h: usize) -> bool {
        self.q_heads.contains(&h)
    }

    /// Rows of a `[heads · hd, H]` projection by gated attention's key/value heads.
    pub fn kv_rows<'a>(&self, t: HostTensor<'a>, hd: usize) -> HostTensor<'a> {
        let r = self.kv_heads.start * hd..self.kv_heads.end * hd;
        self.pick(t, &[r])
    }

    /// `o_proj`'s columns of the rank's query heads.
    pub fn o<'a>(&self, t: HostTensor<'a>, hd: usize) -> HostTensor<'a> {
        shard::cols_of(
            self.shard,
            t,
            self.q_heads.start * hd..self.q_heads.end * hd,
        )
    }

    /// A SwiGLU's gate or up rows (`rows`) or its down columns, of the rank's width.
    pub fn mlp<'a>(&self, t: HostTensor<'a>, rows: bool) -> HostTensor<'a> {
        if rows {
            self.pick(t, std::slice::from_ref(&self.width))
        } else {
            shard::cols_of(self.shard, t, self.width.clone())
        }
    }
}
