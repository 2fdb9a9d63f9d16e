//! The facade the scheduler talks to: per-request block tables over a [`BlockPool`], plus the
//! prefix cache (longest cached prefix on admission, full blocks cached once computed).

use super::block_pool::{BlockId, BlockPool};
use super::hash::{BlockHash, FastMap, HashKey, ROOT_HASH, hash_block};
use super::state::{StateCacheConfig, StateInit, StatePlan, StatePool};
use crate::scheduler::io::RequestId;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvCacheConfig {
    /// Tokens per block.
    pub block_size: usize,
    /// Blocks in the cache, the null block included.
    pub num_blocks: usize,
    /// `--enable-prefix-caching`: off means no hashing and no lookups at all.
    pub enable_prefix_caching: bool,
    /// Recurrent-state slots (models with linear-attention layers); `None` costs nothing.
    pub state: Option<StateCacheConfig>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KvCacheError {
    #[error("invalid KV cache config: block_size must be at least 1 (got {0})")]
    BlockSize(usize),
    #[error(
        "invalid KV cache config: need at least 2 blocks (one is the null block) and fewer than 2^32, got {0}"
    )]
    NumBlocks(usize),
    #[error("invalid KV cache config: a sliding window must be at least 1 position")]
    Window,
    #[error("invalid state cache config: --ssm-cache-slots must be at least 1")]
    StateSlots,
    #[error(
        "invalid state cache config: --ssm-checkpoint-interval {interval} must be a positive \
         multiple of the KV block size {block_size}"
    )]
    CheckpointInterval { interval: usize, block_size: usize },
}

/// The cached prefix found for a request about to be admitted; hand it to `allocate_slots`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ComputedBlocks {
    pub block_ids: Vec<BlockId>,
    /// `block_ids.len() * block_size`: tokens whose KV is already in the cache.
    pub num_computed_tokens: usize,
    /// Tokens looked up (for the queries counter; 0 when caching is off).
    num_query_tokens: usize,
    /// The state checkpoint at the end of the hit, for models with recurrent state.
    state_checkpoint: Option<u32>,
}

/// Prefix-cache counters, in tokens, over requests admitted with a lookup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefixCacheStats {
    /// `vllm:prefix_cache_queries_total`.
    pub queries: u64,
    /// `vllm:prefix_cache_hits_total`.
    pub hits: u64,
}

/// One request's share of the cache.
#[derive(Debug, Default)]
struct ReqKv {
    blocks: Vec<BlockId>,
    /// Leading blocks already offered to the prefix cache.
    num_cached_blocks: usize,
    /// Hashes of the request's full blocks computed so far (a prefix of its token blocks).
    hashes: Vec<BlockHash>,
}

#[derive(Debug)]
pub struct KvCacheManager {
    pool: BlockPool,
    block_size: usize,
    caching: bool,
    key: HashKey,
    reqs: FastMap<RequestId, ReqKv>,
    stats: PrefixCacheStats,
    state: Option<StatePool>,
}

impl KvCacheManager {
    /// A manager whose prefix hashes use a random per-process key.
    pub fn new(cfg: KvCacheConfig) -> Result<Self, KvCacheError> {
        Self::with_hash_key(cfg, HashKey::random())
    }

    /// A manager with a fixed hash key (reproducible hashes, for tests and debugging).
    pub fn with_hash_key(cfg: KvCacheConfig, key: HashKey) -> Result<Self, KvCacheError> {
        if cfg.block_size == 0 {
            return Err(KvCacheError::BlockSize(cfg.block_size));
        }
        if !(2..u32::MAX as usize).contains(&cfg.num_blocks) {
            return Err(KvCacheError::NumBlocks(cfg.num_blocks));
        }
        if let Some(s) = cfg.state {
            if s.num_slots == 0 {
                return Err(KvCacheError::StateSlots);
            }
            let interval = s.checkpoint_interval;
            if interval == 0 || !interval.is_multiple_of(cfg.block_size) {
                return Err(KvCacheError::CheckpointInterval {
                    interval,
                    block_size: cfg.block_size,
                });
            }
        }
        Ok(Self {
            pool: BlockPool::new(cfg.num_blocks),
            block_size: cfg.block_size,
            caching: cfg.enable_prefix_caching,
            key,
            reqs: FastMap::default(),
            stats: PrefixCacheStats::default(),
            state: cfg.state.map(StatePool::new),
        })
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Blocks a single request could ever hold (all but the null block).
    pub fn num_usable_blocks(&self) -> usize {
        self.pool.num_usable()
    }

    pub fn num_free_blocks(&self) -> usize {
        self.pool.num_free()
    }

    /// Fraction of blocks held by requests; cached-but-free blocks count as free.
    pub fn usage(&self) -> f32 {
        self.pool.usage()
    }

    pub fn prefix_cache_stats(&self) -> PrefixCacheStats {
        self.stats
    }

    /// The request's block table, in token order (empty when it holds none).
    pub fn block_ids(&self, req: RequestId) -> &[BlockId] {
        self.reqs.get(&req).map_or(&[], |r| &r.blocks)
    }

    /// The longest cached prefix of `tokens` in full blocks, leaving at least one token to
    /// compute (the last prompt row must run to give logits to sample from). For a request
    /// that holds no blocks yet. Empty when prefix caching is off.
    pub fn get_computed_blocks(&mut self, req: RequestId, tokens: &[u32]) -> ComputedBlocks {
        if !self.caching || tokens.is_empty() {
            return ComputedBlocks::default();
        }
        let bs = self.block_size;
        let entry = self.reqs.entry(req).or_default();
        debug_assert!(
            entry.blocks.is_empty(),
            "lookup for request {req} that holds blocks"
        );
        extend_hashes(&mut entry.hashes, self.key, bs, tokens, tokens.len() / bs);
        let max_blocks = (tokens.len() - 1) / bs;
        let mut block_ids: Vec<BlockId> = entry.hashes[..max_blocks]
            .iter()
            .map_while(|&h| self.pool.lookup(h))
            .collect();
        // With recurrent state, a hit counts only up to the longest prefix that also has a
        // state checkpoint (at a multiple of the interval); the rest is recomputed.
        let mut state_checkpoint = None;
        if let Some(state) = self.state.as_mut() {
            let every = state.config().checkpoint_interval / bs;
            let mut n = block_ids.len() / every * every;
            while n > 0 {
                if let Some(slot) = state.lookup(entry.hashes[n - 1]) {
                    state_checkpoint = Some(slot);
                    break;
                }
                n -= every;
            }
            block_ids.truncate(n);
        }
        ComputedBlocks {
            num_computed_tokens: block_ids.len() * bs,
            block_ids,
            num_query_tokens: tokens.len(),
            state_checkpoint,
        }
    }

    /// Makes room for `num_new_tokens` after the `num_computed_tokens` already in the cache.
    /// On admission pass the `computed` prefix from `get_computed_blocks` (then
    /// `num_computed_tokens` is its token count). Returns the newly allocated blocks, or `None`
    /// when there are not enough free blocks, in which case nothing changed.
    pub fn allocate_slots(
        &mut self,
        req: RequestId,
        num_computed_tokens: usize,
        num_new_tokens: usize,
        computed: Option<&ComputedBlocks>,
    ) -> Option<&[BlockId]> {
        let hit: &[BlockId] = computed.map_or(&[], |c| &c.block_ids);
        debug_assert!(computed.is_none_or(|c| c.num_computed_tokens == num_computed_tokens));
        let held = self.reqs.get(&req).map_or(0, |r| r.blocks.len());
        debug_assert!(
            hit.is_empty() || held == 0,
            "prefix hit for request {req} holding blocks"
        );
        let needed = (num_computed_tokens + num_new_tokens).div_ceil(self.block_size);
        let num_new_blocks = needed.saturating_sub(held + hit.len());
        // Hit blocks sitting on the free list stop being free once touched.
        let revived = hit.iter().filter(|&&b| self.pool.ref_count(b) == 0).count();
        if num_new_blocks + revived > self.pool.num_free() {
            return None;
        }
        // Admission takes a state slot too; none free means the request waits.
        if let (Some(state), Some(c)) = (self.state.as_mut(), computed) {
            let init = match c.state_checkpoint {
                Some(slot) if num_computed_tokens > 0 => StateInit::Copy(slot),
                _ => StateInit::Zero,
            };
            if state.slot(req).is_none() && !state.allocate(req, init) {
                return None;
            }
        }

        let entry = self.reqs.entry(req).or_default();
        if let Some(c) = computed {
            self.pool.touch(hit);
            entry.blocks.extend_from_slice(hit);
            entry.num_cached_blocks = hit.len();
            if c.num_query_tokens > 0 {
                self.stats.queries += c.num_query_tokens as u64;
                self.stats.hits += c.num_computed_tokens as u64;
            }
        }
        let start = entry.blocks.len();
        let ok = self.pool.take_free(num_new_blocks, &mut entry.blocks);
        debug_assert!(ok, "capacity checked above");
        Some(&entry.blocks[start..])
    }

    /// Offers the request's full blocks among its first `num_computed_tokens` (KV written) to
    /// the prefix cache. `tokens` are all the request's tokens. No-op when caching is off.
    pub fn cache_blocks(&mut self, req: RequestId, tokens: &[u32], num_computed_tokens: usize) {
        if !self.caching {
            return;
        }
        let Some(entry) = self.reqs.get_mut(&req) else {
            return;
        };
        let full =
            (num_computed_tokens.min(tokens.len()) / self.block_size).min(entry.blocks.len());
        if full <= entry.num_cached_blocks {
            return;
        }
        extend_hashes(&mut entry.hashes, self.key, self.block_size, tokens, full);
        for i in entry.num_cached_blocks..full {
            // False means another block already holds this content: this one stays uncached.
            self.pool.cache(entry.blocks[i], entry.hashes[i]);
        }
        entry.num_cached_blocks = full;
        if let Some(state) = self.state.as_mut() {
            state.publish(req, num_computed_tokens);
        }
    }

    /// The state plan of `req`'s chunk `start..start + n` (`tokens` are all its tokens):
    /// `None` for models without recurrent state. Checkpoints are planned only with prefix
    /// caching on.
    pub fn state_plan(
        &mut self,
        req: RequestId,
        tokens: &[u32],
        start: usize,
        n: usize,
    ) -> Option<StatePlan> {
        let state = self.state.as_mut()?;
        let (key, bs) = (self.key, self.block_size);
        let hashes = &mut self.reqs.entry(req).or_default().hashes;
        let end = if self.caching { start + n } else { start };
        state.plan(req, start, end, &mut |boundary| {
            extend_hashes(hashes, key, bs, tokens, boundary / bs);
            hashes[boundary / bs - 1]
        })
    }

    /// The recurrent-state slots (read-only); `None` for models without recurrent state.
    pub fn state_pool(&self) -> Option<&StatePool> {
        self.state.as_ref()
    }

    /// Releases all of the request's blocks, tail first so that the head of its prefix, the
    /// part most likely shared, is evicted last.
    pub fn free(&mut self, req: RequestId) {
        if let Some(entry) = self.reqs.remove(&req) {
            self.pool.release(entry.blocks.iter().rev().copied());
        }
        if let Some(state) = self.state.as_mut() {
            state.free(req);
        }
    }

    /// Checks the pool's invariants and that ref counts equal the number of block tables that
    /// hold each block. O(num_blocks + total table length).
    pub fn check(&self) -> Result<(), String> {
        self.pool.check()?;
        if let Some(state) = &self.state {
            state.check()?;
        }
        let mut holders = vec![0u32; self.pool.num_blocks()];
        for (id, r) in &self.reqs {
            for &b in &r.blocks {
                if b == super::NULL_BLOCK {
                    return Err(format!("request {id} holds the null block"));
                }
                holders[b as usize] += 1;
            }
        }
        for (b, &n) in holders.iter().enumerate().skip(1) {
            let b = b as BlockId;
            if n > 1 && self.pool.block_hash(b).is_none() {
                return Err(format!(
                    "block {b} is shared by {n} requests but not cached"
                ));
            }
            if n != self.pool.ref_count(b) {
                return Err(format!(
                    "block {b}: {n} holders, ref count {}",
                    self.pool.ref_count(b)
                ));
            }
        }
        Ok(())
    }

    /// The underlying pool (read-only).
    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }
}

/// Extends `hashes` to cover the first `num_blocks` full blocks of `tokens`.
pub(super) fn extend_hashes(
    hashes: &mut Vec<BlockHash>,
    key: HashKey,
    bs: usize,
    tokens: &[u32],
    num_blocks: usize,
) {
    let num_blocks = num_blocks.min(tokens.len() / bs);
    hashes.reserve(num_blocks.saturating_sub(hashes.len()));
    while hashes.len() < num_blocks {
        let i = hashes.len();
        let parent = hashes.last().copied().unwrap_or(ROOT_HASH);
        hashes.push(hash_block(key, parent, &tokens[i * bs..(i + 1) * bs]));
    }
}

#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "state_tests.rs"]
mod state_tests;
