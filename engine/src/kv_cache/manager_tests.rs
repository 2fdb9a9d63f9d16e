use super::*;
use crate::kv_cache::NULL_BLOCK;

const BS: usize = 4;
const KEY: HashKey = HashKey { k0: 11, k1: 22 };

fn mgr(num_blocks: usize, caching: bool) -> KvCacheManager {
    let cfg = KvCacheConfig {
        block_size: BS,
        num_blocks,
        enable_prefix_caching: caching,
        state: None,
    };
    KvCacheManager::with_hash_key(cfg, KEY).expect("valid config")
}

fn tokens(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32).map(|i| i * 7 + salt).collect()
}

/// Admits `req` the way the scheduler does: lookup, allocate the rest, cache what is computed.
fn admit(m: &mut KvCacheManager, req: RequestId, toks: &[u32]) -> ComputedBlocks {
    let hit = m.get_computed_blocks(req, toks);
    let n_new = toks.len() - hit.num_computed_tokens;
    m.allocate_slots(req, hit.num_computed_tokens, n_new, Some(&hit))
        .expect("room");
    m.cache_blocks(req, toks, toks.len());
    m.check().expect("consistent");
    hit
}

fn assert_all_free(m: &KvCacheManager) {
    m.check().expect("consistent");
    assert_eq!(m.num_free_blocks(), m.num_usable_blocks());
    assert_eq!(m.usage(), 0.0);
    let mut free = m.pool().free_list();
    free.sort_unstable();
    let all: Vec<BlockId> = (1..m.pool().num_blocks() as BlockId).collect();
    assert_eq!(free, all, "every block back on the free list exactly once");
    for b in 1..m.pool().num_blocks() as BlockId {
        assert_eq!(m.pool().ref_count(b), 0, "block {b}");
    }
}

#[test]
fn rejects_bad_configs() {
    let cfg = |block_size, num_blocks| KvCacheConfig {
        block_size,
        num_blocks,
        enable_prefix_caching: true,
        state: None,
    };
    assert_eq!(
        KvCacheManager::new(cfg(0, 8)).err(),
        Some(KvCacheError::BlockSize(0))
    );
    assert_eq!(
        KvCacheManager::new(cfg(16, 1)).err(),
        Some(KvCacheError::NumBlocks(1))
    );
}

#[test]
fn null_block_is_never_allocated() {
    let mut m = mgr(6, true);
    let mut req = 0;
    while let Some(new) = m.allocate_slots(req, 0, BS, None) {
        assert!(!new.contains(&NULL_BLOCK));
        req += 1;
    }
    assert_eq!(req, 5, "exactly the 5 usable blocks");
    for r in 0..req {
        assert!(!m.block_ids(r).contains(&NULL_BLOCK));
    }
    m.check().expect("consistent");
}

#[test]
fn decode_allocates_a_block_only_when_the_last_one_fills() {
    let mut m = mgr(8, false);
    assert_eq!(m.allocate_slots(1, 0, 3, None).map(<[_]>::len), Some(1));
    assert_eq!(m.allocate_slots(1, 3, 1, None).map(<[_]>::len), Some(0));
    assert_eq!(m.allocate_slots(1, 4, 1, None).map(<[_]>::len), Some(1));
    assert_eq!(m.allocate_slots(1, 5, 7, None).map(<[_]>::len), Some(1));
    assert_eq!(m.block_ids(1).len(), 3);
    m.free(1);
    assert_all_free(&m);
}

#[test]
fn no_leak_after_every_request_frees() {
    let mut m = mgr(16, true);
    let shared = tokens(9, 1);
    let mut other = shared[..8].to_vec();
    other.extend([999, 998, 997]);
    admit(&mut m, 1, &shared);
    let hit = admit(&mut m, 2, &shared);
    assert_eq!(hit.num_computed_tokens, 8);
    let hit = admit(&mut m, 3, &other);
    assert_eq!(hit.num_computed_tokens, 8);
    admit(&mut m, 4, &tokens(13, 5));
    assert!(m.usage() > 0.0);
    for r in [3, 1, 4, 2] {
        m.free(r);
        m.check().expect("consistent");
    }
    assert_all_free(&m);
    m.free(2); // a second free of the same request is a no-op
    assert_all_free(&m);
}

#[test]
fn cached_prefix_is_shared_and_survives_the_first_owner() {
    let mut m = mgr(16, true);
    let a = tokens(10, 3);
    admit(&mut m, 1, &a);
    let a_blocks = m.block_ids(1).to_vec();
    assert_eq!(a_blocks.len(), 3);

    let mut b = a[..8].to_vec();
    b.extend([5, 5, 5, 5]);
    let hit = admit(&mut m, 2, &b);
    assert_eq!(hit.block_ids, a_blocks[..2]);
    assert_eq!(hit.num_computed_tokens, 8);
    assert_eq!(m.block_ids(2)[..2], a_blocks[..2]);
    assert_ne!(m.block_ids(2)[2], a_blocks[2], "divergent block is private");
    assert_eq!(m.pool().ref_count(a_blocks[0]), 2);
    assert_eq!(
        m.prefix_cache_stats(),
        PrefixCacheStats {
            queries: 10 + 12,
            hits: 8
        }
    );

    m.free(1);
    assert_eq!(
        m.pool().ref_count(a_blocks[0]),
        1,
        "still held by request 2"
    );
    assert_eq!(m.pool().ref_count(a_blocks[2]), 0);
    // Eat every free block: the shared ones are in use and cannot be taken.
    let free = m.num_free_blocks();
    let fresh = m
        .allocate_slots(9, 0, free * BS, None)
        .expect("room")
        .to_vec();
    assert!(!fresh.contains(&a_blocks[0]) && !fresh.contains(&a_blocks[1]));
    m.free(9);
    let hit = m.get_computed_blocks(3, &b);
    assert_eq!(
        hit.block_ids,
        m.block_ids(2)[..2],
        "still cached after request 1 left"
    );
    m.free(3);
    m.free(2);
    assert_all_free(&m);
}

#[test]
fn a_fully_cached_prompt_still_computes_its_last_token() {
    let mut m = mgr(16, true);
    let a = tokens(8, 0);
    admit(&mut m, 1, &a);
    assert_eq!(m.get_computed_blocks(2, &a).num_computed_tokens, 4);
    let mut longer = a.clone();
    longer.push(77);
    assert_eq!(m.get_computed_blocks(3, &longer).num_computed_tokens, 8);
    assert_eq!(m.get_computed_blocks(4, &a[..1]).num_computed_tokens, 0);
}

#[test]
fn generated_tokens_fill_blocks_that_get_cached() {
    let mut m = mgr(16, true);
    let mut a = tokens(6, 0);
    admit(&mut m, 1, &a);
    // Two decode steps bring the sequence to 8 tokens, filling the second block.
    for t in [100, 101] {
        a.push(t);
        m.allocate_slots(1, a.len() - 1, 1, None).expect("room");
        m.cache_blocks(1, &a, a.len());
    }
    let mut b = a.clone();
    b.push(0);
    assert_eq!(m.get_computed_blocks(2, &b).block_ids, m.block_ids(1)[..2]);
}

#[test]
fn blocks_are_cached_only_once_computed() {
    let mut m = mgr(16, true);
    let a = tokens(12, 0);
    m.allocate_slots(1, 0, 12, None).expect("room");
    m.cache_blocks(1, &a, 5); // a chunk of 5 tokens ran: one full block
    assert_eq!(m.get_computed_blocks(2, &a).num_computed_tokens, 4);
    m.cache_blocks(1, &a, 12);
    assert_eq!(m.get_computed_blocks(3, &a).num_computed_tokens, 8);
}

#[test]
fn identical_prompts_computed_together_cache_one_copy() {
    let mut m = mgr(16, true);
    let a = tokens(9, 0);
    // Both admitted before either is computed: neither hits.
    for r in [1, 2] {
        let hit = m.get_computed_blocks(r, &a);
        assert_eq!(hit.num_computed_tokens, 0);
        m.allocate_slots(r, 0, 9, Some(&hit)).expect("room");
    }
    m.cache_blocks(1, &a, 9);
    m.cache_blocks(2, &a, 9);
    m.check().expect("consistent");
    assert_eq!(m.get_computed_blocks(3, &a).block_ids, m.block_ids(1)[..2]);
    m.free(1);
    m.free(2);
    m.free(3);
    assert_all_free(&m);
}

#[test]
fn eviction_reuses_the_oldest_frees_and_a_prefix_tail_first() {
    let mut m = mgr(5, true); // 4 usable blocks
    let a = tokens(12, 0);
    m.allocate_slots(1, 0, 12, None).expect("room");
    m.cache_blocks(1, &a, 12);
    let ab = m.block_ids(1).to_vec();
    m.free(1);
    assert_eq!(m.usage(), 0.0, "cached-but-free blocks count as free");
    // The untouched block goes first, then request 1's blocks from its tail.
    let got = m.allocate_slots(2, 0, 2 * BS, None).expect("room").to_vec();
    assert!(!got.contains(&ab[0]) && !got.contains(&ab[1]));
    assert!(got.contains(&ab[2]), "the prefix's tail is evicted first");
    let mut again = a.clone();
    again.push(1);
    let hit = m.get_computed_blocks(3, &again);
    assert_eq!(hit.block_ids, ab[..2], "the prefix's head survives");
    m.free(3);

    // Blocks freed earlier are reused before blocks freed later.
    m.free(2); // uncached: to the head of the free list
    let b = tokens(4, 50);
    let got = m.allocate_slots(4, 0, 4, None).expect("room").to_vec();
    assert!(
        !ab[..2].contains(&got[0]),
        "an uncached block is reused first"
    );
    m.cache_blocks(4, &b, 4);
    m.free(4); // cached, freed after request 1's blocks
    let got = m.allocate_slots(5, 0, 3 * BS, None).expect("room").to_vec();
    assert!(
        got.contains(&ab[0]) && got.contains(&ab[1]),
        "request 1 freed longest ago"
    );
    let b_hit = m.get_computed_blocks(6, &[b.clone(), vec![0]].concat());
    assert_eq!(
        b_hit.num_computed_tokens, 4,
        "the most recent free survives"
    );
}

#[test]
fn failed_allocation_changes_nothing() {
    let mut m = mgr(6, true); // 5 usable blocks
    let a = tokens(8, 0);
    admit(&mut m, 1, &a);
    m.free(1); // 2 cached-but-free blocks
    m.allocate_slots(2, 0, 2 * BS, None).expect("room"); // 1 block left free besides them
    let mut big = a.clone();
    big.extend(tokens(8, 40));
    let hit = m.get_computed_blocks(3, &big);
    assert_eq!(hit.num_computed_tokens, 8);
    let snapshot = |m: &KvCacheManager| {
        let refs: Vec<u32> = (0..6).map(|b| m.pool().ref_count(b)).collect();
        (
            m.pool().free_list(),
            refs,
            m.block_ids(3).to_vec(),
            m.prefix_cache_stats(),
        )
    };
    let before = snapshot(&m);
    // Needs 2 new blocks after reviving the 2 hit blocks: only 1 left.
    assert!(m.allocate_slots(3, 8, 8, Some(&hit)).is_none());
    assert_eq!(snapshot(&m), before);
    // A running request that cannot grow keeps its table too.
    assert!(m.allocate_slots(2, 8, 4 * BS, None).is_none());
    assert_eq!(m.block_ids(2).len(), 2);
    m.check().expect("consistent");
    // With one token less it fits exactly.
    assert!(m.allocate_slots(3, 8, 4, Some(&hit)).is_some());
    assert_eq!(m.num_free_blocks(), 0);
    m.free(2);
    m.free(3);
    assert_all_free(&m);
}

#[test]
fn caching_off_hashes_nothing() {
    let mut m = mgr(16, false);
    let a = tokens(12, 0);
    admit(&mut m, 1, &a);
    let hit = admit(&mut m, 2, &a);
    assert_eq!(hit, ComputedBlocks::default());
    for b in 1..16 {
        assert_eq!(m.pool().block_hash(b), None);
    }
    assert_eq!(m.prefix_cache_stats(), PrefixCacheStats::default());
    m.free(1);
    m.free(2);
    assert_all_free(&m);
}
