//! Tensor parallelism (issue 41): a model split over `world` ranks, each holding a slice of the
//! weights and computing its part of every step, the ranks' parts combined by collectives.
//!
//! The split (Megatron's, as vLLM's): attention by heads (each rank a contiguous range of query
//! heads and the key/value heads they read; with fewer key/value heads than ranks, each rank
//! keeps the one its query heads share), the MLP's gate|up by rows and `down` by columns, the LM
//! head by vocabulary rows. A block's attention output and MLP output are partial sums on each
//! rank, made whole by one all-reduce each; the head's logits are gathered by columns. Norms,
//! the embedding and the residual stream are replicated.
//!
//! [`Collective`] is what a model calls; [`local::LocalGroup`] runs the ranks as threads of one
//! process over host copies (the CPU reference and its tests: the sharded forward must equal
//! the unsharded one); [`tcp::TcpGroup`] runs them as processes joined by TCP, which
//! `met serve --tensor-parallel-size N --device cpu` starts ([`ranks`]: rank 0 sends each
//! step's batch, every rank runs it on its shard). NCCL is the device implementation (not
//! built yet: `docs/multi-gpu.md`).

use std::ops::Range;

use crate::backend::{Backend, Result};
use crate::loader::LoadError;

mod host;
pub mod local;
pub mod plan;
pub mod ranks;
pub mod shard;
pub mod tcp;
pub mod wire;

/// This rank's place in its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub rank: usize,
    pub world: usize,
    /// Expert parallelism (`--enable-expert-parallel`): the sparse blocks' routed experts are
    /// split whole over the ranks (each rank its slice of the experts, every one at full
    /// width) instead of each expert's width; attention stays split by heads.
    pub expert_parallel: bool,
}

impl Shard {
    /// One rank holding everything.
    pub const WHOLE: Shard = Shard::new(0, 1);

    /// Rank `rank` of `world`, experts split by width (tensor parallelism throughout).
    pub const fn new(rank: usize, world: usize) -> Self {
        Self {
            rank,
            world,
            expert_parallel: false,
        }
    }

    /// This rank's contiguous part of `n` items, `n` split evenly (checked at load by
    /// [`Shard::split`]).
    pub fn part(&self, n: usize) -> Range<usize> {
        let each = n / self.world;
        self.rank * each..(self.rank + 1) * each
    }

    /// This rank's part of `n` items named `what` (a config field), or an error that names it
    /// when `n` does not split evenly.
    pub fn split(&self, what: &str, n: usize) -> std::result::Result<Range<usize>, LoadError> {
        if !n.is_multiple_of(self.world) {
            return Err(LoadError::Config {
                path: "config.json".into(),
                message: format!(
                    "{what} = {n} does not split over a tensor-parallel size of {}: use a size \
                     that divides it",
                    self.world
                ),
            });
        }
        Ok(self.part(n))
    }

    /// The key/value heads this rank keeps for its query heads (of `nh`, with `nkv` key/value
    /// heads): its even share when `nkv` splits, else the one head its query heads share (the
    /// ranks must then be a multiple of `nkv`).
    pub fn kv_heads(&self, nh: usize, nkv: usize) -> std::result::Result<Range<usize>, LoadError> {
        self.split("num_attention_heads", nh)?;
        if nkv >= self.world {
            return self.split("num_key_value_heads", nkv);
        }
        if !self.world.is_multiple_of(nkv) {
            return Err(LoadError::Config {
                path: "config.json".into(),
                message: format!(
                    "num_key_value_heads = {nkv} is below the tensor-parallel size {} and does \
                     not divide it: use a size that divides {nkv} or is a multiple of it",
                    self.world
                ),
            });
        }
        let first_q = self.part(nh).start;
        let head = first_q / (nh / nkv);
        Ok(head..head + 1)
    }
}

/// The collectives a sharded model calls, one group of ranks; every rank calls the same ones
/// in the same order.
pub trait Collective<B: Backend>: Send + Sync {
    fn shard(&self) -> Shard;
    /// `t` becomes the sum of every rank's `t` (the same on every rank, summed in rank order).
    fn all_reduce_sum(&self, b: &B, t: &mut B::Tensor) -> Result<()>;
    /// Each rank's `[R, C]` side by side: `[R, world·C]`, rank `r`'s columns at `r·C`.
    fn all_gather_cols(&self, b: &B, part: &B::Tensor) -> Result<B::Tensor>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_split_evenly_or_share_a_kv_head() {
        let r = Shard::new;
        assert_eq!(r(1, 2).kv_heads(4, 2).expect("splits"), 1..2);
        // Fewer key/value heads than ranks: ranks 0, 1 read head 0; ranks 2, 3 head 1.
        assert_eq!(r(1, 4).kv_heads(4, 2).expect("shares"), 0..1);
        assert_eq!(r(2, 4).kv_heads(4, 2).expect("shares"), 1..2);
        assert_eq!(r(3, 4).kv_heads(8, 8).expect("splits"), 6..8);
        let e = r(0, 4).kv_heads(6, 6).expect_err("6 heads over 4");
        assert!(e.to_string().contains("num_attention_heads = 6"), "{e}");
        let e = r(0, 4).kv_heads(12, 3).expect_err("3 kv heads over 4");
        assert!(e.to_string().contains("num_key_value_heads = 3"), "{e}");
    }
}
