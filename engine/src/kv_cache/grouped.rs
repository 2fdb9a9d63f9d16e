//! The KV cache of a model whose layers attend differently (Gemma 3, gpt-oss, windowed
//! Mistral): one [`BlockPool`] and one block table a request for each KV group (`groups.rs`).
//!
//! - A full group holds every block of a request, as [`KvCacheManager`](super::KvCacheManager)
//!   does.
//! - A sliding group of window `W` releases a request's blocks once no query that can still
//!   come reads them: every query of a step is at or after the request's computed tokens `c`
//!   (prefill chunks and speculative verify rows start there), and the query at `c` sees keys
//!   from `c - W + 1` on, so the blocks wholly before that key (`window_start_block`) go back to
//!   the pool when the next step is allocated. Their table entries become the null block, which
//!   the attention kernels never use as a visible key (they start at the window).
//! - Released blocks keep their prefix-cache hashes and go to the evictable end of the free
//!   list, like a finished request's.
//! - A cached prefix of `L` tokens (whole blocks) is a hit only when every full group holds
//!   all its blocks and every sliding group holds those the query at `L` reads
//!   (`window_start_block(L)..L / block_size`); the lookup finds the longest such `L`.
//!
//! All hashes are the same chained block hashes in every group (one per token block, computed
//! once a request); a group's pool maps them to its own block ids.

use super::block_pool::{BlockId, BlockPool, NULL_BLOCK};
use super::groups::{Attention, KvGroupSpec, peak_blocks, window_start_block};
use super::hash::{BlockHash, FastMap, HashKey};
use super::manager::{KvCacheError, PrefixCacheStats, extend_hashes};
use crate::scheduler::io::RequestId;

/// One group as the manager is built with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    pub spec: KvGroupSpec,
    /// Blocks in the group's pool, the null block included.
    pub num_blocks: usize,
}

impl GroupConfig {
    /// Each of `specs` with `full` blocks for a full-attention group and `sliding` for a
    /// sliding one (a fixed split, as the tests and the lab's checks size their pools).
    pub fn sized(specs: &[KvGroupSpec], full: usize, sliding: usize) -> Vec<GroupConfig> {
        specs
            .iter()
            .map(|spec| GroupConfig {
                spec: spec.clone(),
                num_blocks: match spec.attention {
                    Attention::Full => full,
                    Attention::Sliding { .. } => sliding,
                },
            })
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupedKvConfig {
    pub block_size: usize,
    pub groups: Vec<GroupConfig>,
    pub enable_prefix_caching: bool,
}

/// The cached prefix found for a request about to be admitted, a table a group (a sliding
/// group's entries before the window are the null block); hand it to `allocate_slots`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupedComputed {
    pub tables: Vec<Vec<BlockId>>,
    /// Tokens whose KV is in the cache (a whole number of blocks).
    pub num_computed_tokens: usize,
    num_query_tokens: usize,
}

#[derive(Debug)]
struct Group {
    attention: Attention,
    layers: usize,
    pool: BlockPool,
}

impl Group {
    /// The first table entry a request whose oldest query to come is at `query` still needs.
    fn first_needed(&self, query: usize, bs: usize) -> usize {
        match self.attention {
            Attention::Full => 0,
            Attention::Sliding { window } => window_start_block(query, window, bs),
        }
    }
}

/// One request's share of every group.
#[derive(Debug, Default)]
struct ReqKv {
    /// A table a group, token order; released entries are the null block.
    tables: Vec<Vec<BlockId>>,
    /// A group's leading entries already released (all the null block).
    released: Vec<usize>,
    /// Leading token blocks already offered to the prefix cache.
    num_cached_blocks: usize,
    hashes: Vec<BlockHash>,
}

#[derive(Debug)]
pub struct GroupedKvManager {
    groups: Vec<Group>,
    block_size: usize,
    caching: bool,
    key: HashKey,
    reqs: FastMap<RequestId, ReqKv>,
    stats: PrefixCacheStats,
}

impl GroupedKvManager {
    pub fn new(cfg: GroupedKvConfig) -> Result<Self, KvCacheError> {
        Self::with_hash_key(cfg, HashKey::random())
    }

    /// A manager with a fixed hash key (reproducible hashes, for tests and debugging).
    pub fn with_hash_key(cfg: GroupedKvConfig, key: HashKey) -> Result<Self, KvCacheError> {
        if cfg.block_size == 0 {
            return Err(KvCacheError::BlockSize(cfg.block_size));
        }
        let mut groups = Vec::with_capacity(cfg.groups.len());
        for g in &cfg.groups {
            if !(2..u32::MAX as usize).contains(&g.num_blocks) {
                return Err(KvCacheError::NumBlocks(g.num_blocks));
            }
            if g.spec.window() == Some(0) {
                return Err(KvCacheError::Window);
            }
            groups.push(Group {
                attention: g.spec.attention,
                layers: g.spec.layers.len(),
                pool: BlockPool::new(g.num_blocks),
            });
        }
        if groups.is_empty() {
            return Err(KvCacheError::NumBlocks(0));
        }
        Ok(Self {
            groups,
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

    pub fn num_groups(&self) -> usize {
        self.groups.len()
    }

    pub fn attention(&self, group: usize) -> Attention {
        self.groups[group].attention
    }

    /// Blocks of `group` that can be handed out (all but its null block).
    pub fn num_usable_blocks(&self, group: usize) -> usize {
        self.groups[group].pool.num_usable()
    }

    pub fn num_free_blocks(&self, group: usize) -> usize {
        self.groups[group].pool.num_free()
    }

    /// Fraction of the cache's memory held by requests: each group's held blocks weighted by
    /// its layers (a block of every group has the same bytes a layer). Cached-but-free blocks
    /// count as free.
    pub fn usage(&self) -> f32 {
        // One group: the pool's own figure, to the last bit as the plain manager reports it.
        if let [only] = self.groups.as_slice() {
            return only.pool.usage();
        }
        let (mut held, mut all) = (0.0f64, 0.0f64);
        for g in &self.groups {
            let usable = g.pool.num_usable() as f64;
            held += g.layers as f64 * (usable - g.pool.num_free() as f64);
            all += g.layers as f64 * usable;
        }
        if all == 0.0 { 0.0 } else { (held / all) as f32 }
    }

    /// The longest sequence one request can grow to with the cache to itself, when its steps
    /// write at most `chunk` positions each (admission's bound; the smallest over groups).
    pub fn max_request_tokens(&self, chunk: usize) -> usize {
        let bs = self.block_size;
        self.groups
            .iter()
            .map(|g| match g.attention {
                Attention::Full => g.pool.num_usable() * bs,
                Attention::Sliding { .. } => {
                    // A sliding group bounds the length only when it cannot hold one step.
                    let huge = usize::MAX / 2;
                    if peak_blocks(g.attention, huge, chunk, bs) <= g.pool.num_usable() {
                        huge
                    } else {
                        g.pool.num_usable() * bs
                    }
                }
            })
            .min()
            .unwrap_or(0)
    }

    pub fn prefix_cache_stats(&self) -> PrefixCacheStats {
        self.stats
    }

    /// Leading entries of the request's table in `group` already released (the null block).
    pub fn num_released(&self, req: RequestId, group: usize) -> usize {
        self.reqs
            .get(&req)
            .and_then(|r| r.released.get(group))
            .copied()
            .unwrap_or(0)
    }

    /// The request's table in `group` (empty when it holds none).
    pub fn block_ids(&self, req: RequestId, group: usize) -> &[BlockId] {
        self.reqs
            .get(&req)
            .and_then(|r| r.tables.get(group))
            .map_or(&[], Vec::as_slice)
    }

    /// The longest cached prefix of `tokens` in whole blocks that every group can resume
    /// from (module doc), leaving at least one token to compute. For a request that holds no
    /// blocks yet. Empty when prefix caching is off.
    pub fn get_computed_blocks(&mut self, req: RequestId, tokens: &[u32]) -> GroupedComputed {
        if !self.caching || tokens.is_empty() {
            return GroupedComputed::default();
        }
        let bs = self.block_size;
        let entry = self.reqs.entry(req).or_default();
        debug_assert!(
            entry.tables.iter().all(Vec::is_empty),
            "lookup for request {req} that holds blocks"
        );
        extend_hashes(&mut entry.hashes, self.key, bs, tokens, tokens.len() / bs);
        let hashes = &entry.hashes;
        let mut n = (tokens.len() - 1) / bs;
        // Full groups: the leading run of hits.
        for g in self
            .groups
            .iter()
            .filter(|g| g.attention == Attention::Full)
        {
            n = hashes[..n]
                .iter()
                .take_while(|&&h| g.pool.lookup(h).is_some())
                .count();
        }
        // Sliding groups: the longest n whose window blocks all hit, in every group at once
        // (each group's answer only shrinks n, so repeat until none does).
        loop {
            let before = n;
            for g in &self.groups {
                if let Attention::Sliding { window } = g.attention {
                    n = longest_window_hit(&g.pool, &hashes[..n], window, bs);
                }
            }
            if n == before {
                break;
            }
        }
        let tables = self
            .groups
            .iter()
            .map(|g| {
                let first = g.first_needed(n * bs, bs).min(n);
                let mut t = vec![NULL_BLOCK; first];
                t.extend(
                    hashes[first..n]
                        .iter()
                        .map(|&h| g.pool.lookup(h).expect("checked above")),
                );
                t
            })
            .collect();
        GroupedComputed {
            tables,
            num_computed_tokens: n * bs,
            num_query_tokens: tokens.len(),
        }
    }

    /// Makes room for `num_new_tokens` after the `num_computed_tokens` already in the cache, in
    /// every group; on admission pass the `computed` prefix from `get_computed_blocks`. First
    /// releases the sliding groups' blocks that no query from `num_computed_tokens` on reads
    /// (whatever the outcome: they are never read again). Returns false when some group lacks
    /// free blocks, and then allocates nothing.
    pub fn allocate_slots(
        &mut self,
        req: RequestId,
        num_computed_tokens: usize,
        num_new_tokens: usize,
        computed: Option<&GroupedComputed>,
    ) -> bool {
        let bs = self.block_size;
        let ng = self.groups.len();
        debug_assert!(computed.is_none_or(|c| c.num_computed_tokens == num_computed_tokens));
        let entry = self.reqs.entry(req).or_default();
        entry.tables.resize_with(ng, Vec::new);
        entry.released.resize(ng, 0);
        self.release_behind_window(req, num_computed_tokens);
        let entry = self.reqs.get_mut(&req).expect("entry made above");
        let hits: Vec<&[BlockId]> = (0..ng)
            .map(|g| {
                computed
                    .and_then(|c| c.tables.get(g))
                    .map_or(&[][..], Vec::as_slice)
            })
            .collect();
        let needed = (num_computed_tokens + num_new_tokens).div_ceil(bs);
        // Every group must have room before any changes.
        let mut plans = Vec::with_capacity(ng);
        for (g, group) in self.groups.iter().enumerate() {
            let held = entry.tables[g].len();
            debug_assert!(
                hits[g].is_empty() || held == 0,
                "prefix hit for request {req} holding blocks"
            );
            let have = held + hits[g].len();
            let first = group.first_needed(num_computed_tokens, bs);
            // Entries from `have` on: the null block before the window, new blocks after.
            let nulls = first.clamp(have, needed.max(have)) - have;
            let fresh = needed.saturating_sub(have + nulls);
            let revived = hits[g]
                .iter()
                .filter(|&&b| b != NULL_BLOCK && group.pool.ref_count(b) == 0)
                .count();
            if fresh + revived > group.pool.num_free() {
                return false;
            }
            plans.push((nulls, fresh));
        }
        for (g, (group, (nulls, fresh))) in self.groups.iter_mut().zip(plans).enumerate() {
            let table = &mut entry.tables[g];
            if !hits[g].is_empty() {
                let live: Vec<BlockId> = hits[g]
                    .iter()
                    .copied()
                    .filter(|&b| b != NULL_BLOCK)
                    .collect();
                group.pool.touch(&live);
                table.extend_from_slice(hits[g]);
                entry.released[g] = hits[g].iter().take_while(|&&b| b == NULL_BLOCK).count();
            }
            table.resize(table.len() + nulls, NULL_BLOCK);
            if entry.released[g] == table.len() - nulls {
                entry.released[g] = table.len();
            }
            let ok = group.pool.take_free(fresh, table);
            debug_assert!(ok, "capacity checked above");
        }
        if let Some(c) = computed {
            entry.num_cached_blocks = c.num_computed_tokens / bs;
            if c.num_query_tokens > 0 {
                self.stats.queries += c.num_query_tokens as u64;
                self.stats.hits += c.num_computed_tokens as u64;
            }
        }
        true
    }

    /// Releases the blocks of `req`'s sliding groups that lie wholly before the window of a
    /// query at `oldest_query` and puts the null block in their place. They were cached (when
    /// caching is on) as soon as they were computed, so they join the evictable end of the free
    /// list with their hashes.
    fn release_behind_window(&mut self, req: RequestId, oldest_query: usize) {
        let bs = self.block_size;
        let Some(entry) = self.reqs.get_mut(&req) else {
            return;
        };
        for (g, group) in self.groups.iter_mut().enumerate() {
            let table = &mut entry.tables[g];
            let upto = group.first_needed(oldest_query, bs).min(table.len());
            let from = entry.released[g];
            if upto <= from {
                continue;
            }
            group.pool.release(
                table[from..upto]
                    .iter()
                    .copied()
                    .filter(|&b| b != NULL_BLOCK),
            );
            table[from..upto].fill(NULL_BLOCK);
            entry.released[g] = upto;
        }
    }

    /// Offers the request's full blocks among its first `num_computed_tokens` to every group's
    /// prefix cache. `tokens` are all the request's tokens. No-op when caching is off.
    pub fn cache_blocks(&mut self, req: RequestId, tokens: &[u32], num_computed_tokens: usize) {
        if !self.caching {
            return;
        }
        let bs = self.block_size;
        let Some(entry) = self.reqs.get_mut(&req) else {
            return;
        };
        let longest = entry.tables.iter().map(Vec::len).min().unwrap_or(0);
        let full = (num_computed_tokens.min(tokens.len()) / bs).min(longest);
        if full <= entry.num_cached_blocks {
            return;
        }
        extend_hashes(&mut entry.hashes, self.key, bs, tokens, full);
        for (g, group) in self.groups.iter_mut().enumerate() {
            for i in entry.num_cached_blocks..full {
                let b = entry.tables[g][i];
                // A released entry was cached before its release (it was computed then).
                if b != NULL_BLOCK {
                    group.pool.cache(b, entry.hashes[i]);
                }
            }
        }
        entry.num_cached_blocks = full;
    }

    /// Releases all of the request's blocks, tail first in every group.
    pub fn free(&mut self, req: RequestId) {
        if let Some(entry) = self.reqs.remove(&req) {
            for (group, table) in self.groups.iter_mut().zip(&entry.tables) {
                group
                    .pool
                    .release(table.iter().rev().copied().filter(|&b| b != NULL_BLOCK));
            }
        }
    }

    /// Checks every pool's invariants, that ref counts equal the number of tables holding each
    /// block, and that a sliding table's released entries are exactly its leading nulls.
    pub fn check(&self) -> Result<(), String> {
        for (g, group) in self.groups.iter().enumerate() {
            group.pool.check()?;
            let mut holders = vec![0u32; group.pool.num_blocks()];
            for (id, r) in &self.reqs {
                let Some(table) = r.tables.get(g) else {
                    continue;
                };
                let released = r.released.get(g).copied().unwrap_or(0);
                for (i, &b) in table.iter().enumerate() {
                    if (b == NULL_BLOCK) != (i < released) {
                        return Err(format!(
                            "group {g}: request {id} entry {i} is {b}, {released} released"
                        ));
                    }
                    holders[b as usize] += u32::from(b != NULL_BLOCK);
                }
            }
            for (b, &n) in holders.iter().enumerate().skip(1) {
                let b = b as BlockId;
                if n > 1 && group.pool.block_hash(b).is_none() {
                    return Err(format!("group {g}: block {b} shared by {n} but not cached"));
                }
                if n != group.pool.ref_count(b) {
                    return Err(format!(
                        "group {g}: block {b}: {n} holders, ref count {}",
                        group.pool.ref_count(b)
                    ));
                }
            }
        }
        Ok(())
    }

    /// Group `g`'s pool (read-only).
    pub fn pool(&self, group: usize) -> &BlockPool {
        &self.groups[group].pool
    }
}

/// The largest `n <= hashes.len()` whose blocks `window_start_block(n · bs)..n` are all cached
/// in `pool` (0 always qualifies: nothing to resume).
fn longest_window_hit(pool: &BlockPool, hashes: &[BlockHash], window: usize, bs: usize) -> usize {
    // run[i]: consecutive hits ending at block i.
    let mut run = Vec::with_capacity(hashes.len());
    let mut r = 0usize;
    for &h in hashes {
        r = if pool.lookup(h).is_some() { r + 1 } else { 0 };
        run.push(r);
    }
    (1..=hashes.len())
        .rev()
        .find(|&n| {
            let first = window_start_block(n * bs, window, bs).min(n);
            run[n - 1] >= n - first
        })
        .unwrap_or(0)
}

#[cfg(test)]
#[path = "grouped_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "grouped_sim_tests.rs"]
mod sim_tests;
