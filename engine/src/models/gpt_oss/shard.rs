//! A tensor-parallel rank's slice of gpt-oss (issue 41, `parallel/mod.rs`), on the dense
//! decoder's cuts (`parallel/plan.rs`):
//!
//! - attention by heads: the rank's q|k|v rows and their biases, each of its query heads'
//!   sink, `o_proj`'s columns of its heads. `o_proj`'s bias is added after the all-reduce (on
//!   every rank, so once); sliding and full layers alike;
//! - the router and its bias replicated: every rank routes every token alike;
//! - every expert by width: its gate and up rows and their biases (the clamped SwiGLU pairs
//!   gate `j` with up `j` only, so a rank's `j`s are whole), its `down` columns. `down`'s bias
//!   is added inside the experts' op, weighted by each token's routing weight, so no step
//!   after the all-reduce can add it: rank 0 keeps it and the others a zero bias, and the
//!   all-reduce sums it in once. MXFP4 experts are dequantized at load (`loader/mxfp4.rs`,
//!   before the interleaved rows are split) and cut as f32 values, so a cut need not fall on a
//!   32-value block;
//! - the head by vocabulary rows, the logits gathered.
//!
//! The rank's model keeps a config of its own counts ([`Cut::local`]), so its forward and
//! cache size read them unchanged.

use super::GptOssConfig;
use crate::loader::{HostData, HostTensor, LoadError};
use crate::parallel::plan::Plan;
use crate::parallel::{Shard, shard};

/// What rank `shard` keeps: the dense decoder's plan, the expert width being
/// `intermediate_size` (gpt-oss has no dense MLP).
pub(super) struct Cut {
    plan: Plan,
}

impl Cut {
    pub fn new(config: &GptOssConfig, sh: Shard) -> Result<Self, LoadError> {
        let c = &config.base;
        let heads = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        Ok(Self {
            plan: Plan::new(sh, heads, c.intermediate_size, c.vocab_size)?,
        })
    }

    /// The rank's config: its heads and expert width in place of the checkpoint's (the
    /// vocabulary stays whole: the logits are gathered).
    pub fn local(&self, config: &GptOssConfig) -> GptOssConfig {
        let mut l = config.clone();
        let (nh, nkv, i) = self.plan.local();
        l.base.num_attention_heads = nh;
        l.base.num_key_value_heads = nkv;
        l.base.intermediate_size = i;
        l
    }

    /// The rank's q|k|v rows, fused.
    pub fn qkv(&self, [q, k, v]: [HostTensor<'_>; 3]) -> HostTensor<'static> {
        self.plan.qkv(q, k, v)
    }

    /// The biases of the rank's q|k|v rows, fused.
    pub fn qkv_bias(&self, [q, k, v]: [HostTensor<'_>; 3]) -> HostTensor<'static> {
        let (sh, kv) = (self.plan.shard, self.plan.kv_dims());
        HostTensor::concat_rows(&[
            shard::pick_elems(sh, q, &[self.plan.q_dims()]),
            shard::pick_elems(sh, k, std::slice::from_ref(&kv)),
            shard::pick_elems(sh, v, &[kv]),
        ])
    }

    /// The sinks `[nh]` of the rank's query heads.
    pub fn sinks<'a>(&self, t: HostTensor<'a>) -> HostTensor<'a> {
        shard::pick_elems(self.plan.shard, t, std::slice::from_ref(&self.plan.q_heads))
    }

    /// `o_proj`'s columns of the rank's heads.
    pub fn o<'a>(&self, t: HostTensor<'a>) -> HostTensor<'a> {
        self.plan.o(t)
    }

    /// The experts as the loader stacks them (`gate_up` `[E, 2·I, H]` and its bias `[E, 2·I]`,
    /// gate first; `down` `[E, H, I]` and its bias `[E, H]`), cut to the rank's width; `down`'s
    /// bias is rank 0's alone (see the module's header).
    pub fn experts<'a>(&self, experts: [HostTensor<'a>; 4]) -> [HostTensor<'a>; 4] {
        let (sh, width) = (self.plan.shard, self.plan.width.clone());
        if sh.world == 1 {
            return experts;
        }
        let [gate_up, gate_up_bias, down, down_bias] = experts;
        let (e, two_i) = (gate_up_bias.shape[0], gate_up_bias.shape[1]);
        // The bias as `[E, 2·I, 1]`: each expert's gate and up rows of one value.
        let gate_up_bias =
            shard::experts_gate_up(sh, gate_up_bias.reshaped(vec![e, two_i, 1]), width.clone())
                .reshaped(vec![e, 2 * width.len()]);
        let down_bias = match sh.rank {
            0 => down_bias,
            _ => HostTensor {
                shape: down_bias.shape,
                data: HostData::Constant(0.0),
            },
        };
        [
            shard::experts_gate_up(sh, gate_up, width.clone()),
            gate_up_bias,
            shard::experts_down(sh, down, width),
            down_bias,
        ]
    }

    /// The head's rows of the rank's vocabulary.
    pub fn head<'a>(&self, t: HostTensor<'a>) -> HostTensor<'a> {
        shard::rows_of(self.plan.shard, t, self.plan.vocab.clone())
    }
}
