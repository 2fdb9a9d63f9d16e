//! The facade the scheduler talks to: per-request block tables over a [`BlockPool`], plus the
//! prefix cache (longest cached prefix on admission, full blocks cached once computed).

use super::block_pool::{BlockId, BlockPool};
use super::hash::{BlockHash, FastMap, HashKey, ROOT_HASH, hash_block};
use crate::scheduler::io::RequestId;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvCacheConfig {
    /// Tokens per block.
    pub block_size: usize,
    /// Blocks in the cache, the null block included.
    pub num_blocks: usize,
    /// `--enable-prefix-caching`: off means no hashing and no lookups at all.
    pub enable_prefix_caching: bool,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KvCacheError {
    #[error("invalid KV cache config: block_size must be at least 1 (got {0})")]
    BlockSize(usize),
    #[error(
        "invalid KV cache config: need at least 2 blocks (one is the null block) and fewer than 2^32, got {0}"
    )]
    NumBlocks(usize),
}

/// The cached prefix found for a request about to be admitted; hand it to `allocate_slots`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ComputedBlocks {
    pub block_ids: Vec<BlockId>,
    /// `block_ids.len() * block_size`: tokens whose KV is already in the cache.
    pub num_computed_tokens: usize,
    /// Tokens looked up (for the queries counter; 0 when caching is off).
    num_query_tokens: usize,
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
        Ok(Self {
            pool: BlockPool::new(cfg.num_blocks),
            block_size: cfg.block_size,
            caching: cfg.enable_prefix_caching,
            key,
            reqs: FastMap::default(),
            stats: PrefixCacheStats::default(),
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
        let block_ids: Vec<BlockId> = entry.hashes[..max_blocks]
            .iter()
            .map_while(|&h| self.pool.lookup(h))
            .collect();
        ComputedBlocks {
            num_computed_tokens: block_ids.len() * bs,
            block_ids,
            num_query_tokens: tokens.len(),
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
    }

    /// Releases all of the request's blocks, tail first so that the head of its prefix, the
    /// part most likely shared, is evicted last.
    pub fn free(&mut self, req: RequestId) {
        if let Some(entry) = self.reqs.remove(&req) {
            self.pool.release(entry.blocks.iter().rev().copied());
        }
    }

    /// Checks the pool's invariants and that ref counts equal the number of block tables that
    /// hold each block. O(num_blocks + total table length).
    pub fn check(&self) -> Result<(), String> {
        self.pool.check()?;
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
fn extend_hashes(
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
