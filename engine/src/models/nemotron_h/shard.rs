//! A tensor-parallel rank's slice of Nemotron-H (issue 41, `parallel/mod.rs`): attention and
//! the relu² MLPs as a dense decoder's (`parallel/plan.rs`), the Mamba-2 mixers by heads. A
//! rank keeps `heads / N` heads and the `groups / N` groups of B and C they read (so `N` must
//! divide the groups): its rows of `in_proj`'s z, x, B, C and dt, its conv channels, `A_log`,
//! `D`, `dt_bias`, its channels of the grouped norm, and its columns of `out_proj`. The MoE
//! layers as DeepSeek-V3's: every rank routes every token over all experts (the router is
//! whole), and every routed expert and the shared one are split by width (relu² is elementwise,
//! so the ranks' partial `down` products sum to the whole). The rank's model keeps a config of
//! its own counts ([`Cut::local`]); the block outputs are all-reduced.

use std::ops::Range;

use super::NemotronHConfig;
use crate::loader::{HostTensor, LoadError};
use crate::parallel::plan::Plan;
use crate::parallel::{Shard, shard};

pub(super) struct Cut {
    pub plan: Plan,
    heads: Range<usize>,
    groups: Range<usize>,
    /// The rank's part of each routed expert's width and of the shared expert's (none
    /// without MoE layers).
    moe: Option<(Range<usize>, Range<usize>)>,
}

impl Cut {
    pub fn new(config: &NemotronHConfig, sh: Shard) -> Result<Self, LoadError> {
        let c = &config.base;
        let s = config.ssm;
        Ok(Self {
            plan: Plan::new(
                sh,
                (c.num_attention_heads, c.num_key_value_heads, c.head_dim),
                c.intermediate_size,
                c.vocab_size,
            )?,
            heads: sh.split("mamba_num_heads", s.heads)?,
            groups: sh.split("n_groups", s.groups)?,
            moe: match &config.moe {
                None => None,
                Some(m) => Some((
                    sh.split("moe_intermediate_size", m.intermediate)?,
                    sh.split("moe_shared_expert_intermediate_size", m.shared_intermediate)?,
                )),
            },
        })
    }

    /// The rank's config: its head counts, groups and MLP width in place of the checkpoint's.
    pub fn local(&self, config: &NemotronHConfig) -> NemotronHConfig {
        let mut l = config.clone();
        let (nh, nkv, i) = self.plan.local();
        l.base.num_attention_heads = nh;
        l.base.num_key_value_heads = nkv;
        l.base.intermediate_size = i;
        l.ssm.heads = self.heads.len();
        l.ssm.groups = self.groups.len();
        if let (Some(m), Some((routed, shared))) = (&mut l.moe, &self.moe) {
            m.intermediate = routed.len();
            m.shared_intermediate = shared.len();
        }
        l
    }

    /// The stacked routed experts `up` `[E, I, H]` and `down` `[E, H, I]`: the rank's width of
    /// each.
    pub fn experts<'a>(
        &self,
        (up, down): (HostTensor<'a>, HostTensor<'a>),
    ) -> (HostTensor<'a>, HostTensor<'a>) {
        match &self.moe {
            Some((r, _)) => (
                shard::experts_up(self.plan.shard, up, r.clone()),
                shard::experts_down(self.plan.shard, down, r.clone()),
            ),
            None => (up, down),
        }
    }

    /// The shared expert's `up` rows (`rows`) or `down` columns of the rank's width.
    pub fn shared<'a>(&self, t: HostTensor<'a>, rows: bool) -> HostTensor<'a> {
        match (&self.moe, rows) {
            (Some((_, r)), true) => shard::rows_of(self.plan.shard, t, r.clone()),
            (Some((_, r)), false) => shard::cols_of(self.plan.shard, t, r.clone()),
            (None, _) => t,
        }
    }

    fn per(r: &Range<usize>, n: usize, at: usize) -> Range<usize> {
        at + r.start * n..at + r.end * n
    }

    /// The conv's channels of this rank (x of its heads, B and C of its groups), from `at`.
    fn xbc(&self, config: &NemotronHConfig, at: usize) -> [Range<usize>; 3] {
        let s = config.ssm;
        let (inner, gn) = (s.heads * s.head_dim, s.groups * s.state);
        [
            Self::per(&self.heads, s.head_dim, at),
            Self::per(&self.groups, s.state, at + inner),
            Self::per(&self.groups, s.state, at + inner + gn),
        ]
    }

    /// `in_proj`'s rows: z of the rank's heads, its xBC channels, dt of its heads.
    pub fn in_proj<'a>(&self, config: &NemotronHConfig, t: HostTensor<'a>) -> HostTensor<'a> {
        let s = config.ssm;
        let (inner, cd) = (s.inner(), s.conv_dim());
        let [x, b, c] = self.xbc(config, inner);
        let z = Self::per(&self.heads, s.head_dim, 0);
        let dt = Self::per(&self.heads, 1, inner + cd);
        shard::pick_rows(self.plan.shard, t, &[z, x, b, c, dt])
    }

    /// The conv's weight or bias rows (its xBC channels).
    pub fn conv<'a>(&self, config: &NemotronHConfig, t: HostTensor<'a>) -> HostTensor<'a> {
        shard::pick_rows(self.plan.shard, t, &self.xbc(config, 0))
    }

    /// A per-head vector (`A_log`, `D`, `dt_bias`): the rank's heads.
    pub fn heads<'a>(&self, t: HostTensor<'a>) -> HostTensor<'a> {
        shard::pick_rows(self.plan.shard, t, std::slice::from_ref(&self.heads))
    }

    /// The grouped norm's weight: the rank's heads' channels.
    pub fn norm<'a>(&self, config: &NemotronHConfig, t: HostTensor<'a>) -> HostTensor<'a> {
        let r = Self::per(&self.heads, config.ssm.head_dim, 0);
        shard::pick_rows(self.plan.shard, t, &[r])
    }

    /// `out_proj`'s columns of the rank's heads.
    pub fn out<'a>(&self, config: &NemotronHConfig, t: HostTensor<'a>) -> HostTensor<'a> {
        let r = Self::per(&self.heads, config.ssm.head_dim, 0);
        shard::cols_of(self.plan.shard, t, r)
    }
}
