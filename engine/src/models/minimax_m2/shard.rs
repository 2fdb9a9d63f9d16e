//! A tensor-parallel rank's slice of MiniMax-M2 (issue 41, `parallel/mod.rs`), on the dense
//! decoder's cuts (`parallel/plan.rs`):
//!
//! - attention by heads: the rank's q|k|v rows, `o_proj`'s columns of its heads, and the QK
//!   norms' weights of its heads. Those norms are RMS norms over all of q's heads and all of
//!   k's at once, so a rank's heads alone do not give their variance: each rank takes the mean
//!   square of its own q columns and of its k columns (`Backend::mean_sq_cols`, `[T, 2]`), one
//!   all-reduce averages them over the ranks, and the norm divides by that
//!   (`Backend::rms_norm_cols_by`). The ranks hold equal widths, so the average of their means
//!   is the mean over every head; with fewer key/value heads than ranks, each key/value head
//!   is held by as many ranks as any other, so it still counts once in k's. Partial rotary is
//!   per head, unchanged;
//! - the router and its correction bias replicated: every rank routes every token alike;
//! - every expert by width, as Qwen3-MoE's: its gate and up rows, its `down` columns;
//! - the head by vocabulary rows (of the embedding when tied), the logits gathered.
//!
//! The rank's model keeps a config of its own counts ([`Cut::local`]), so its forward and
//! cache size read them unchanged.

use super::MiniMaxM2Config;
use crate::loader::{HostTensor, LoadError};
use crate::parallel::plan::Plan;
use crate::parallel::{Shard, shard};

/// What rank `shard` keeps: the dense decoder's plan, the expert width being
/// `intermediate_size` (MiniMax-M2 has no dense MLP).
pub(super) struct Cut {
    pub plan: Plan,
}

impl Cut {
    pub fn new(config: &MiniMaxM2Config, sh: Shard) -> Result<Self, LoadError> {
        let c = &config.base;
        let heads = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        Ok(Self {
            plan: Plan::new(sh, heads, c.intermediate_size, c.vocab_size)?,
        })
    }

    /// The rank's config: its heads and expert width in place of the checkpoint's (the
    /// vocabulary stays whole: the logits are gathered).
    pub fn local(&self, config: &MiniMaxM2Config) -> MiniMaxM2Config {
        let mut l = config.clone();
        let (nh, nkv, i) = self.plan.local();
        l.base.num_attention_heads = nh;
        l.base.num_key_value_heads = nkv;
        l.base.intermediate_size = i;
        l
    }

    /// The q norm's weights `[nh·hd]` of the rank's query heads.
    pub fn q_norm<'a>(&self, t: HostTensor<'a>) -> HostTensor<'a> {
        shard::pick_elems(self.plan.shard, t, &[self.plan.q_dims()])
    }

    /// The k norm's weights `[nkv·hd]` of the rank's key/value heads.
    pub fn k_norm<'a>(&self, t: HostTensor<'a>) -> HostTensor<'a> {
        shard::pick_elems(self.plan.shard, t, &[self.plan.kv_dims()])
    }

    /// The stacked experts (`gate_up` `[E, 2·I, H]`, gate rows first; `down` `[E, H, I]`) cut
    /// to the rank's width.
    pub fn experts<'a>(
        &self,
        (gate_up, down): (HostTensor<'a>, HostTensor<'a>),
    ) -> (HostTensor<'a>, HostTensor<'a>) {
        let (sh, width) = (self.plan.shard, self.plan.width.clone());
        (
            shard::experts_gate_up(sh, gate_up, width.clone()),
            shard::experts_down(sh, down, width),
        )
    }
}
