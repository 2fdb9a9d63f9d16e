//! A tensor-parallel rank's slice of DeepSeek-V3 (issue 41, `parallel/mod.rs`): latent
//! attention by heads as vLLM splits it. The compressed row (`kv_a_proj_with_mqa`, its norm,
//! the cache) is every head's, so every rank computes and caches it whole; a rank keeps its
//! heads' rows of `q_proj`/`q_b_proj` (`nope + rope` a head) and of `kv_b_proj` (`nope + v` a
//! head), and its heads' columns of `o_proj`. The dense MLPs, the shared experts and every
//! routed expert are split by width, the head by vocabulary. The rank's model keeps a config of
//! its own counts ([`Cut::local`]); each block's outputs are all-reduced.

use std::ops::Range;

use super::DeepseekV3Config;
use crate::loader::{HostTensor, LoadError};
use crate::parallel::{Shard, shard};

pub(super) struct Cut {
    pub shard: Shard,
    heads: Range<usize>,
    pub vocab: Range<usize>,
}

impl Cut {
    pub fn new(config: &DeepseekV3Config, sh: Shard) -> Result<Self, LoadError> {
        let c = &config.base;
        sh.split("intermediate_size", c.intermediate_size)?;
        sh.split("moe_intermediate_size", config.moe_intermediate_size)?;
        Ok(Self {
            shard: sh,
            heads: sh.split("num_attention_heads", c.num_attention_heads)?,
            vocab: sh.split("vocab_size", c.vocab_size)?,
        })
    }

    /// The rank's config: its heads and widths in place of the checkpoint's.
    pub fn local(&self, config: &DeepseekV3Config) -> DeepseekV3Config {
        let mut l = config.clone();
        let world = self.shard.world;
        l.base.num_attention_heads = self.heads.len();
        l.base.num_key_value_heads = self.heads.len();
        l.base.intermediate_size /= world;
        l.moe_intermediate_size /= world;
        l
    }

    /// Rows of a `[heads · per, _]` projection by the rank's heads.
    pub fn head_rows<'a>(&self, t: HostTensor<'a>, per: usize) -> HostTensor<'a> {
        let r = self.heads.start * per..self.heads.end * per;
        shard::pick_rows(self.shard, t, &[r])
    }

    /// `o_proj`'s columns of the rank's heads (`v` a head).
    pub fn o<'a>(&self, t: HostTensor<'a>, v: usize) -> HostTensor<'a> {
        shard::cols_of(self.shard, t, self.heads.start * v..self.heads.end * v)
    }

    /// A SwiGLU of width `i`: its gate or up rows (`rows`), or its down columns.
    pub fn mlp<'a>(&self, t: HostTensor<'a>, i: usize, rows: bool) -> HostTensor<'a> {
        let r = self.shard.part(i);
        if rows {
            shard::pick_rows(self.shard, t, &[r])
        } else {
            shard::cols_of(self.shard, t, r)
        }
    }

    /// The stacked experts of width `i`, cut by width.
    pub fn experts<'a>(
        &self,
        (gate_up, down): (HostTensor<'a>, HostTensor<'a>),
        i: usize,
    ) -> (HostTensor<'a>, HostTensor<'a>) {
        let r = self.shard.part(i);
        (
            shard::experts_gate_up(self.shard, gate_up, r.clone()),
            shard::experts_down(self.shard, down, r),
        )
    }
}
