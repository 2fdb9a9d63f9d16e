//! The pool of KV blocks: ref counts, an LRU free list, and the hash → block map of the
//! prefix cache.
//!
//! A block is on the free list exactly when its ref count is 0 (block 0, the null block, is
//! never on it and never handed out). A free block may still hold a cached hash: it stays
//! findable through `lookup` until `take_free` reuses it, which evicts the hash. The list is
//! intrusive and doubly linked (two `u32` arrays), so a cache hit on a free block leaves the
//! middle of the list in O(1).
//!
//! Order: `take_free` pops the head. Released blocks that hold a hash go to the tail (reused
//! last: least recently freed first); released blocks without a hash go to the head, since
//! reusing them evicts nothing.

use super::hash::{BlockHash, FastMap};

/// Index of a block in the KV cache tensors.
pub type BlockId = u32;

/// The reserved block 0: padding for block tables, never allocated.
pub const NULL_BLOCK: BlockId = 0;

#[derive(Debug)]
pub struct BlockPool {
    ref_cnt: Vec<u32>,
    hash: Vec<Option<BlockHash>>,
    // Free list links; index `num_blocks` is the sentinel (its `next` is the head).
    prev: Vec<u32>,
    next: Vec<u32>,
    num_free: usize,
    cached: FastMap<BlockHash, BlockId>,
}

impl BlockPool {
    /// `num_blocks` counts the null block; the caller checks `num_blocks >= 2` and that it
    /// fits a `u32`.
    pub fn new(num_blocks: usize) -> Self {
        debug_assert!((2..u32::MAX as usize).contains(&num_blocks));
        let sentinel = num_blocks as u32;
        let mut pool = Self {
            ref_cnt: vec![0; num_blocks],
            hash: vec![None; num_blocks],
            prev: vec![sentinel; num_blocks + 1],
            next: vec![sentinel; num_blocks + 1],
            num_free: 0,
            cached: FastMap::default(),
        };
        // The null block is permanently "in use" so nothing can free or allocate it.
        pool.ref_cnt[NULL_BLOCK as usize] = 1;
        for id in 1..sentinel {
            pool.push_back(id);
        }
        pool.num_free = num_blocks - 1;
        pool
    }

    pub fn num_blocks(&self) -> usize {
        self.ref_cnt.len()
    }

    /// Blocks that can ever be handed out (all but the null block).
    pub fn num_usable(&self) -> usize {
        self.num_blocks() - 1
    }

    /// Free blocks, cached-but-free ones included.
    pub fn num_free(&self) -> usize {
        self.num_free
    }

    /// Fraction of usable blocks held by requests.
    pub fn usage(&self) -> f32 {
        1.0 - self.num_free as f32 / self.num_usable() as f32
    }

    pub fn ref_count(&self, id: BlockId) -> u32 {
        self.ref_cnt[id as usize]
    }

    pub fn block_hash(&self, id: BlockId) -> Option<BlockHash> {
        self.hash[id as usize]
    }

    /// The block holding `hash`, whether in use or free.
    pub fn lookup(&self, hash: BlockHash) -> Option<BlockId> {
        self.cached.get(&hash).copied()
    }

    /// Hands out `n` blocks with ref count 1, appending them to `out`, evicting any hash they
    /// held. Returns false and changes nothing when fewer than `n` are free.
    pub fn take_free(&mut self, n: usize, out: &mut Vec<BlockId>) -> bool {
        if n > self.num_free {
            return false;
        }
        out.reserve(n);
        for _ in 0..n {
            let id = self.next[self.sentinel()];
            debug_assert!(id != self.sentinel() as u32 && id != NULL_BLOCK);
            self.unlink(id);
            if let Some(h) = self.hash[id as usize].take() {
                self.cached.remove(&h);
            }
            self.ref_cnt[id as usize] = 1;
            out.push(id);
        }
        self.num_free -= n;
        true
    }

    /// Takes one more reference to each block (a prefix-cache hit), pulling free ones off the
    /// free list.
    pub fn touch(&mut self, ids: &[BlockId]) {
        for &id in ids {
            if self.ref_cnt[id as usize] == 0 {
                self.unlink(id);
                self.num_free -= 1;
            }
            self.ref_cnt[id as usize] += 1;
        }
    }

    /// Drops one reference to each block, in the order given; a block reaching 0 is freed
    /// (tail of the list if it holds a hash, head otherwise).
    pub fn release(&mut self, ids: impl IntoIterator<Item = BlockId>) {
        for id in ids {
            let rc = &mut self.ref_cnt[id as usize];
            debug_assert!(*rc > 0 && id != NULL_BLOCK, "release of free block {id}");
            if *rc == 0 || id == NULL_BLOCK {
                continue;
            }
            *rc -= 1;
            if *rc == 0 {
                if self.hash[id as usize].is_some() {
                    self.push_back(id);
                } else {
                    self.push_front(id);
                }
                self.num_free += 1;
            }
        }
    }

    /// Records that block `id` holds the full block `hash`. When another block already holds
    /// that content this one stays uncached (returns false): one block per hash.
    pub fn cache(&mut self, id: BlockId, hash: BlockHash) -> bool {
        debug_assert!(self.ref_cnt[id as usize] > 0 && self.hash[id as usize].is_none());
        if self.hash[id as usize].is_some() || self.cached.contains_key(&hash) {
            return false;
        }
        self.cached.insert(hash, id);
        self.hash[id as usize] = Some(hash);
        true
    }

    fn sentinel(&self) -> usize {
        self.ref_cnt.len()
    }

    fn unlink(&mut self, id: BlockId) {
        let (p, n) = (self.prev[id as usize], self.next[id as usize]);
        self.next[p as usize] = n;
        self.prev[n as usize] = p;
    }

    fn push_back(&mut self, id: BlockId) {
        let s = self.sentinel();
        let tail = self.prev[s];
        self.next[tail as usize] = id;
        self.prev[id as usize] = tail;
        self.next[id as usize] = s as u32;
        self.prev[s] = id;
    }

    fn push_front(&mut self, id: BlockId) {
        let s = self.sentinel();
        let head = self.next[s];
        self.prev[head as usize] = id;
        self.next[id as usize] = head;
        self.prev[id as usize] = s as u32;
        self.next[s] = id;
    }

    /// The free list, head (reused next) first.
    pub fn free_list(&self) -> Vec<BlockId> {
        let s = self.sentinel();
        let mut out = Vec::with_capacity(self.num_free);
        let mut id = self.next[s] as usize;
        while id != s && out.len() <= self.num_blocks() {
            out.push(id as BlockId);
            id = self.next[id] as usize;
        }
        out
    }

    /// Checks every structural invariant; returns the first broken one. O(num_blocks).
    pub fn check(&self) -> Result<(), String> {
        let free = self.free_list();
        if free.len() != self.num_free {
            return Err(format!(
                "free list has {} blocks, count says {}",
                free.len(),
                self.num_free
            ));
        }
        let mut seen = vec![false; self.num_blocks()];
        for &id in &free {
            if id == NULL_BLOCK || seen[id as usize] {
                return Err(format!("block {id} on the free list twice or null"));
            }
            seen[id as usize] = true;
        }
        for (id, (&rc, &on_list)) in self.ref_cnt.iter().zip(&seen).enumerate().skip(1) {
            if (rc == 0) != on_list {
                return Err(format!("block {id}: ref {rc} but on free list: {on_list}"));
            }
        }
        if self.ref_cnt[NULL_BLOCK as usize] != 1 || self.hash[NULL_BLOCK as usize].is_some() {
            return Err("null block touched".into());
        }
        for (h, &id) in &self.cached {
            if self.hash[id as usize] != Some(*h) {
                return Err(format!(
                    "map points {h:?} at block {id} which holds another hash"
                ));
            }
        }
        let with_hash = self.hash.iter().filter(|h| h.is_some()).count();
        if with_hash != self.cached.len() {
            return Err(format!(
                "{with_hash} blocks hold hashes, map has {}",
                self.cached.len()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(pool: &mut BlockPool, n: usize) -> Vec<BlockId> {
        let mut v = Vec::new();
        assert!(
            pool.take_free(n, &mut v),
            "wanted {n} blocks, {} free",
            pool.num_free()
        );
        v
    }

    #[test]
    fn null_block_is_never_handed_out() {
        let mut pool = BlockPool::new(5);
        let got = take(&mut pool, 4);
        assert_eq!(got, vec![1, 2, 3, 4]);
        assert!(!pool.take_free(1, &mut Vec::new()), "only 4 usable blocks");
        pool.release(got.iter().rev().copied());
        // Reuse after churn still never yields block 0.
        for _ in 0..10 {
            let got = take(&mut pool, 4);
            assert!(!got.contains(&NULL_BLOCK));
            pool.release(got);
        }
        pool.check().expect("consistent");
    }

    #[test]
    fn shared_block_is_freed_when_the_last_reference_goes() {
        let mut pool = BlockPool::new(4);
        let b = take(&mut pool, 1)[0];
        pool.touch(&[b]);
        assert_eq!(pool.ref_count(b), 2);
        pool.release([b]);
        assert_eq!(pool.num_free(), 2, "still held once");
        pool.release([b]);
        assert_eq!(pool.num_free(), 3);
        assert_eq!(pool.usage(), 0.0);
        pool.check().expect("consistent");
    }

    #[test]
    fn cached_free_block_stays_findable_until_reused() {
        let mut pool = BlockPool::new(3);
        let b = take(&mut pool, 1)[0];
        assert!(pool.cache(b, BlockHash(7)));
        pool.release([b]);
        assert_eq!(pool.lookup(BlockHash(7)), Some(b), "free but cached");
        assert_eq!(pool.usage(), 0.0, "cached-but-free counts as free");
        // A hit pulls it off the free list.
        pool.touch(&[b]);
        assert_eq!(pool.num_free(), 1);
        pool.release([b]);
        // Taking every block reuses it and evicts the hash.
        let all = take(&mut pool, 2);
        assert!(all.contains(&b));
        assert_eq!(pool.lookup(BlockHash(7)), None);
        assert_eq!(pool.block_hash(b), None);
        pool.check().expect("consistent");
    }

    #[test]
    fn one_block_per_hash() {
        let mut pool = BlockPool::new(3);
        let v = take(&mut pool, 2);
        assert!(pool.cache(v[0], BlockHash(1)));
        assert!(
            !pool.cache(v[1], BlockHash(1)),
            "content already cached in another block"
        );
        assert_eq!(pool.lookup(BlockHash(1)), Some(v[0]));
        assert_eq!(pool.block_hash(v[1]), None);
        pool.check().expect("consistent");
    }

    #[test]
    fn eviction_is_lru_and_uncached_blocks_go_first() {
        let mut pool = BlockPool::new(7);
        let v = take(&mut pool, 6); // [1..=6]
        for (i, &b) in v[..4].iter().enumerate() {
            assert!(pool.cache(b, BlockHash(100 + i as u128)));
        }
        // Free cached 3 first, then cached 1, then uncached 5 and 6.
        pool.release([3, 1, 5, 6]);
        assert_eq!(pool.free_list(), vec![6, 5, 3, 1]);
        // Free cached 4 then 2 later: they go behind the older frees.
        pool.release([4, 2]);
        assert_eq!(pool.free_list(), vec![6, 5, 3, 1, 4, 2]);
        let got = take(&mut pool, 4);
        assert_eq!(got, vec![6, 5, 3, 1]);
        assert_eq!(pool.lookup(BlockHash(102)), None, "block 3 evicted");
        assert_eq!(
            pool.lookup(BlockHash(103)),
            Some(4),
            "freed later, still cached"
        );
        assert_eq!(pool.lookup(BlockHash(101)), Some(2));
        pool.check().expect("consistent");
    }

    #[test]
    fn failed_take_changes_nothing() {
        let mut pool = BlockPool::new(4);
        let v = take(&mut pool, 2);
        pool.cache(v[0], BlockHash(9));
        pool.release([v[0]]);
        let before = (pool.free_list(), pool.num_free(), pool.lookup(BlockHash(9)));
        let mut out = vec![42];
        assert!(!pool.take_free(3, &mut out));
        assert_eq!(out, vec![42]);
        assert_eq!(
            (pool.free_list(), pool.num_free(), pool.lookup(BlockHash(9))),
            before
        );
        pool.check().expect("consistent");
    }
}
