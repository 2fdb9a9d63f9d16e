//! The KV cache manager the scheduler serves with: the plain [`KvCacheManager`] for a model
//! whose layers all attend to every position (one block table a request), or the
//! [`GroupedKvManager`] for a model with sliding-window layers (a block table a KV group, the
//! sliding groups' blocks behind the window released). The scheduler talks to either through
//! this one type; group 0 is what a single-table view (tests, the runner's first table) sees.

use super::block_pool::{BlockId, BlockPool};
use super::grouped::{GroupedComputed, GroupedKvConfig, GroupedKvManager};
use super::hash::HashKey;
use super::manager::{
    ComputedBlocks, KvCacheConfig, KvCacheError, KvCacheManager, PrefixCacheStats,
};
use super::state::{StatePlan, StatePool};
use crate::scheduler::io::RequestId;

// One a scheduler, made once: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum ServingKv {
    Plain(KvCacheManager),
    Grouped(GroupedKvManager),
}

/// A cached prefix found on admission, for [`ServingKv::allocate_slots`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Computed {
    Plain(ComputedBlocks),
    Grouped(GroupedComputed),
}

impl Computed {
    /// Tokens whose KV is already in the cache.
    pub fn num_computed_tokens(&self) -> usize {
        match self {
            Self::Plain(c) => c.num_computed_tokens,
            Self::Grouped(c) => c.num_computed_tokens,
        }
    }
}

impl ServingKv {
    pub fn plain(cfg: KvCacheConfig, key: HashKey) -> Result<Self, KvCacheError> {
        KvCacheManager::with_hash_key(cfg, key).map(Self::Plain)
    }

    pub fn grouped(cfg: GroupedKvConfig, key: HashKey) -> Result<Self, KvCacheError> {
        GroupedKvManager::with_hash_key(cfg, key).map(Self::Grouped)
    }

    pub fn block_size(&self) -> usize {
        match self {
            Self::Plain(m) => m.block_size(),
            Self::Grouped(m) => m.block_size(),
        }
    }

    /// Block tables a request holds: one a KV group.
    pub fn num_groups(&self) -> usize {
        match self {
            Self::Plain(_) => 1,
            Self::Grouped(m) => m.num_groups(),
        }
    }

    /// Usable blocks of group 0 (the plain manager's only pool).
    pub fn num_usable_blocks(&self) -> usize {
        match self {
            Self::Plain(m) => m.num_usable_blocks(),
            Self::Grouped(m) => m.num_usable_blocks(0),
        }
    }

    /// Free blocks of group 0.
    pub fn num_free_blocks(&self) -> usize {
        match self {
            Self::Plain(m) => m.num_free_blocks(),
            Self::Grouped(m) => m.num_free_blocks(0),
        }
    }

    /// The longest sequence one request can grow to with the cache to itself, when its steps
    /// write at most `chunk` positions each (admission's bound).
    pub fn max_request_tokens(&self, chunk: usize) -> usize {
        match self {
            Self::Plain(m) => m.num_usable_blocks() * m.block_size(),
            Self::Grouped(m) => m.max_request_tokens(chunk),
        }
    }

    pub fn usage(&self) -> f32 {
        match self {
            Self::Plain(m) => m.usage(),
            Self::Grouped(m) => m.usage(),
        }
    }

    pub fn prefix_cache_stats(&self) -> PrefixCacheStats {
        match self {
            Self::Plain(m) => m.prefix_cache_stats(),
            Self::Grouped(m) => m.prefix_cache_stats(),
        }
    }

    /// The request's table in group 0.
    pub fn block_ids(&self, req: RequestId) -> &[BlockId] {
        self.group_block_ids(req, 0)
    }

    /// The request's table in `group` (released entries are the null block).
    pub fn group_block_ids(&self, req: RequestId, group: usize) -> &[BlockId] {
        match self {
            Self::Plain(m) if group == 0 => m.block_ids(req),
            Self::Plain(_) => &[],
            Self::Grouped(m) => m.block_ids(req, group),
        }
    }

    /// Leading entries of the request's table in `group` that were released (the null block).
    pub fn num_released(&self, req: RequestId, group: usize) -> usize {
        match self {
            Self::Plain(_) => 0,
            Self::Grouped(m) => m.num_released(req, group),
        }
    }

    pub fn get_computed_blocks(&mut self, req: RequestId, tokens: &[u32]) -> Computed {
        match self {
            Self::Plain(m) => Computed::Plain(m.get_computed_blocks(req, tokens)),
            Self::Grouped(m) => Computed::Grouped(m.get_computed_blocks(req, tokens)),
        }
    }

    /// No cached prefix (a request whose every prompt row must be computed).
    pub fn nothing_computed(&self) -> Computed {
        match self {
            Self::Plain(_) => Computed::Plain(ComputedBlocks::default()),
            Self::Grouped(_) => Computed::Grouped(GroupedComputed::default()),
        }
    }

    /// Room for `num_new_tokens` after `num_computed_tokens` in every table of the request
    /// (see the managers' `allocate_slots`); false, with nothing changed, when blocks are short.
    pub fn allocate_slots(
        &mut self,
        req: RequestId,
        num_computed_tokens: usize,
        num_new_tokens: usize,
        computed: Option<&Computed>,
    ) -> bool {
        match self {
            Self::Plain(m) => {
                let c = match computed {
                    Some(Computed::Plain(c)) => Some(c),
                    _ => None,
                };
                m.allocate_slots(req, num_computed_tokens, num_new_tokens, c)
                    .is_some()
            }
            Self::Grouped(m) => {
                let c = match computed {
                    Some(Computed::Grouped(c)) => Some(c),
                    _ => None,
                };
                m.allocate_slots(req, num_computed_tokens, num_new_tokens, c)
            }
        }
    }

    pub fn cache_blocks(&mut self, req: RequestId, tokens: &[u32], num_computed_tokens: usize) {
        match self {
            Self::Plain(m) => m.cache_blocks(req, tokens, num_computed_tokens),
            Self::Grouped(m) => m.cache_blocks(req, tokens, num_computed_tokens),
        }
    }

    /// The state plan of a chunk (models with recurrent state, which are never grouped).
    pub fn state_plan(
        &mut self,
        req: RequestId,
        tokens: &[u32],
        start: usize,
        n: usize,
    ) -> Option<StatePlan> {
        match self {
            Self::Plain(m) => m.state_plan(req, tokens, start, n),
            Self::Grouped(_) => None,
        }
    }

    pub fn state_pool(&self) -> Option<&StatePool> {
        match self {
            Self::Plain(m) => m.state_pool(),
            Self::Grouped(_) => None,
        }
    }

    pub fn free(&mut self, req: RequestId) {
        match self {
            Self::Plain(m) => m.free(req),
            Self::Grouped(m) => m.free(req),
        }
    }

    pub fn check(&self) -> Result<(), String> {
        match self {
            Self::Plain(m) => m.check(),
            Self::Grouped(m) => m.check(),
        }
    }

    /// Group 0's pool (read-only).
    pub fn pool(&self) -> &BlockPool {
        self.group_pool(0)
    }

    /// Group `group`'s pool (read-only); the plain manager has only group 0.
    pub fn group_pool(&self, group: usize) -> &BlockPool {
        match self {
            Self::Plain(m) => m.pool(),
            Self::Grouped(m) => m.pool(group),
        }
    }

    /// The grouped manager, when the model has sliding layers.
    pub fn as_grouped(&self) -> Option<&GroupedKvManager> {
        match self {
            Self::Plain(_) => None,
            Self::Grouped(m) => Some(m),
        }
    }
}
