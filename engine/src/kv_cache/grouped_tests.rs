use super::*;
use crate::kv_cache::groups::kv_groups;
use crate::kv_cache::hash::ROOT_HASH;
use crate::kv_cache::{KvCacheConfig, KvCacheManager};

const BS: usize = 4;
const W: usize = 8;
const KEY: HashKey = HashKey { k0: 11, k1: 22 };
const FULL: usize = 0;
const SLIDE: usize = 1;

/// A full group of one layer and a sliding group (window `W`) of three.
fn mgr(full_blocks: usize, sliding_blocks: usize, caching: bool) -> GroupedKvManager {
    let specs = kv_groups(&[Some(W), None, Some(W), Some(W)]);
    assert_eq!(specs[FULL].attention, Attention::Full);
    let groups = specs
        .into_iter()
        .zip([full_blocks, sliding_blocks])
        .map(|(spec, num_blocks)| GroupConfig { spec, num_blocks })
        .collect();
    let cfg = GroupedKvConfig {
        block_size: BS,
        groups,
        enable_prefix_caching: caching,
    };
    GroupedKvManager::with_hash_key(cfg, KEY).expect("valid config")
}

fn tokens(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32).map(|i| i * 7 + salt).collect()
}

/// Admits `req` the way the scheduler does: lookup, allocate the rest, cache what is computed.
fn admit(m: &mut GroupedKvManager, req: RequestId, toks: &[u32]) -> GroupedComputed {
    let hit = m.get_computed_blocks(req, toks);
    let n_new = toks.len() - hit.num_computed_tokens;
    assert!(m.allocate_slots(req, hit.num_computed_tokens, n_new, Some(&hit)));
    m.cache_blocks(req, toks, toks.len());
    m.check().expect("consistent");
    hit
}

fn nulls(table: &[BlockId]) -> usize {
    table.iter().take_while(|&&b| b == NULL_BLOCK).count()
}

#[test]
fn rejects_bad_configs() {
    let spec = |window| KvGroupSpec {
        attention: match window {
            0 => Attention::Full,
            w => Attention::Sliding { window: w },
        },
        layers: vec![0],
    };
    let cfg = |bs, num_blocks, window| GroupedKvConfig {
        block_size: bs,
        groups: vec![GroupConfig {
            spec: spec(window),
            num_blocks,
        }],
        enable_prefix_caching: true,
    };
    assert_eq!(
        GroupedKvManager::new(cfg(0, 8, 0)).err(),
        Some(KvCacheError::BlockSize(0))
    );
    assert_eq!(
        GroupedKvManager::new(cfg(4, 1, 4)).err(),
        Some(KvCacheError::NumBlocks(1))
    );
    let mut zero = cfg(4, 8, 4);
    zero.groups[0].spec.attention = Attention::Sliding { window: 0 };
    assert_eq!(
        GroupedKvManager::new(zero).err(),
        Some(KvCacheError::Window)
    );
}

#[test]
fn decode_releases_sliding_blocks_behind_the_window() {
    let mut m = mgr(64, 32, false);
    // Prefill 20 tokens: 5 blocks in both groups.
    assert!(m.allocate_slots(0, 0, 20, None));
    assert_eq!(m.block_ids(0, FULL).len(), 5);
    assert_eq!(m.block_ids(0, SLIDE).len(), 5);
    assert_eq!(m.num_free_blocks(SLIDE), 31 - 5);
    // Decode the token at 20: it sees keys 13..=20, so blocks 0..3 (keys 0..=11) go.
    assert!(m.allocate_slots(0, 20, 1, None));
    assert_eq!(m.block_ids(0, FULL).len(), 6, "the full group keeps all");
    assert_eq!(nulls(m.block_ids(0, FULL)), 0);
    let slide = m.block_ids(0, SLIDE).to_vec();
    assert_eq!(slide.len(), 6);
    assert_eq!(
        nulls(&slide),
        3,
        "keys 0..12 are behind every query from 20 on"
    );
    assert_eq!(m.num_free_blocks(SLIDE), 31 - 3);
    m.check().expect("consistent");
    // Every key a query at q >= 20 reads sits in a live block.
    for q in 20..24 {
        for p in q + 1 - W..=q {
            assert_ne!(slide[p / BS], NULL_BLOCK, "query {q} reads key {p}");
        }
    }
    // A long decode holds at most the window's blocks and one more.
    for pos in 21..200 {
        assert!(m.allocate_slots(0, pos, 1, None));
        let live = m.block_ids(0, SLIDE).len() - nulls(m.block_ids(0, SLIDE));
        assert!(live <= W.div_ceil(BS) + 1, "{live} live blocks at {pos}");
    }
    assert_eq!(m.block_ids(0, FULL).len(), 200_usize.div_ceil(BS));
    m.check().expect("consistent");
    m.free(0);
    assert_eq!(m.num_free_blocks(FULL), 63);
    assert_eq!(m.num_free_blocks(SLIDE), 31);
    m.check().expect("consistent");
}

#[test]
fn chunked_prefill_keeps_the_window_of_the_chunks_first_row() {
    let mut m = mgr(64, 64, false);
    assert!(m.allocate_slots(0, 0, 16, None));
    // The second chunk's first row is at 16: it reads keys 9..=16, so blocks 0 and 1 go,
    // and the chunk's own 16 positions take 4 blocks.
    assert!(m.allocate_slots(0, 16, 16, None));
    let t = m.block_ids(0, SLIDE);
    assert_eq!((t.len(), nulls(t)), (8, 2));
    // Speculative verify rows: the lookahead past the chunk releases nothing more.
    assert!(m.allocate_slots(0, 32, 1 + 4, None));
    let t = m.block_ids(0, SLIDE).to_vec();
    assert_eq!((t.len(), nulls(&t)), (10, 6));
    assert!(t[(32 + 1 - W) / BS..].iter().all(|&b| b != NULL_BLOCK));
    m.check().expect("consistent");
}

#[test]
fn a_full_sliding_pool_fails_without_changing_any_table() {
    let mut m = mgr(64, 6, false);
    assert!(m.allocate_slots(0, 0, 16, None));
    let before: Vec<Vec<BlockId>> = (0..2).map(|g| m.block_ids(0, g).to_vec()).collect();
    let free = (m.num_free_blocks(FULL), m.num_free_blocks(SLIDE));
    // 16 more positions need 4 sliding blocks; one is free.
    assert!(!m.allocate_slots(1, 0, 16, None));
    assert_eq!(m.block_ids(1, FULL), &[] as &[BlockId]);
    assert_eq!(m.block_ids(1, SLIDE), &[] as &[BlockId]);
    assert_eq!((m.num_free_blocks(FULL), m.num_free_blocks(SLIDE)), free);
    for (g, t) in before.iter().enumerate() {
        assert_eq!(m.block_ids(0, g), t.as_slice());
    }
    // Once request 0 moves on, its released blocks make room.
    assert!(m.allocate_slots(0, 16, 1, None));
    assert_eq!(m.num_free_blocks(SLIDE), 2, "two released, one taken");
    m.free(0);
    assert!(m.allocate_slots(1, 0, 16, None));
    m.check().expect("consistent");
}

#[test]
fn a_prefix_hit_needs_only_the_window_in_sliding_groups() {
    let mut m = mgr(64, 12, true);
    let a = tokens(33, 1);
    admit(&mut m, 0, &a);
    // A decodes once: its sliding blocks 0..6 (keys before 26) are released, still cached.
    assert!(m.allocate_slots(0, 33, 1, None));
    assert_eq!(nulls(m.block_ids(0, SLIDE)), 6);
    // B shares A's first 32 tokens.
    let mut b = a[..32].to_vec();
    b.extend(tokens(8, 100));
    let hit = m.get_computed_blocks(1, &b);
    assert_eq!(hit.num_computed_tokens, 32);
    assert_eq!(hit.tables[FULL], m.block_ids(0, FULL)[..8].to_vec());
    // The query at 32 reads keys 25..=31: blocks 6 and 7; the rest is the null block.
    assert_eq!(nulls(&hit.tables[SLIDE]), 6);
    assert_eq!(hit.tables[SLIDE][6..], m.block_ids(0, SLIDE)[6..8]);
    let free_before = m.num_free_blocks(SLIDE);
    assert!(m.allocate_slots(1, 32, 8, Some(&hit)));
    // Two new sliding blocks for 32..40; the shared ones were held already, nothing revived.
    assert_eq!(m.num_free_blocks(SLIDE), free_before - 2);
    let t = m.block_ids(1, SLIDE);
    assert_eq!((t.len(), nulls(t)), (10, 6));
    assert_eq!(m.prefix_cache_stats().hits, 32);
    m.check().expect("consistent");
}

/// Caches `blocks` (token-block indices of `toks`) in `group`'s pool, free, as an earlier
/// request would have left them.
fn seed(m: &mut GroupedKvManager, group: usize, toks: &[u32], blocks: &[usize]) {
    let mut hashes = vec![];
    extend_hashes(&mut hashes, KEY, BS, toks, toks.len() / BS);
    assert_ne!(hashes[0], ROOT_HASH);
    let pool = &mut m.groups[group].pool;
    for &i in blocks {
        let mut got = vec![];
        assert!(pool.take_free(1, &mut got));
        assert!(pool.cache(got[0], hashes[i]));
        pool.release(got);
    }
}

#[test]
fn the_hit_is_the_longest_prefix_whose_window_is_cached() {
    let toks = tokens(41, 3);
    // Full group: blocks 0..10 cached. Sliding: 4, 5, 6 and 8, 9; not 7.
    let mut m = mgr(64, 64, true);
    seed(&mut m, FULL, &toks, &(0..10).collect::<Vec<_>>());
    seed(&mut m, SLIDE, &toks, &[4, 5, 6, 8, 9]);
    // L = 40 needs blocks 8, 9 (keys 33..=39): cached, so L = 40 though 7 is missing.
    let hit = m.get_computed_blocks(0, &toks);
    assert_eq!(hit.num_computed_tokens, 40);
    assert_eq!(nulls(&hit.tables[SLIDE]), 8);

    // Without block 9 in the sliding pool: L = 36 needs 7 and 8 (keys 29..=35), L = 32 needs
    // 6 and 7, L = 28 needs 5 and 6 (keys 21..=27): the longest is 28.
    let mut m = mgr(64, 64, true);
    seed(&mut m, FULL, &toks, &(0..10).collect::<Vec<_>>());
    seed(&mut m, SLIDE, &toks, &[4, 5, 6, 8]);
    let hit = m.get_computed_blocks(0, &toks);
    assert_eq!(hit.num_computed_tokens, 28);
    assert_eq!(hit.tables[FULL].len(), 7);
    assert_eq!(nulls(&hit.tables[SLIDE]), 5);
    assert!(m.allocate_slots(0, 28, 13, Some(&hit)));
    m.check().expect("consistent");

    // The full group bounds it: with only blocks 0..5 there, L = 20 (blocks 3, 4).
    let mut m = mgr(64, 64, true);
    seed(&mut m, FULL, &toks, &(0..5).collect::<Vec<_>>());
    seed(&mut m, SLIDE, &toks, &[3, 4, 5, 6, 8, 9]);
    assert_eq!(m.get_computed_blocks(0, &toks).num_computed_tokens, 20);

    // No window cached anywhere (every other block): no hit.
    let mut m = mgr(64, 64, true);
    seed(&mut m, FULL, &toks, &(0..10).collect::<Vec<_>>());
    seed(&mut m, SLIDE, &toks, &[1, 3, 5, 7, 9]);
    assert_eq!(m.get_computed_blocks(0, &toks).num_computed_tokens, 0);
}

#[test]
fn released_blocks_are_evicted_like_finished_ones() {
    // Sliding pool of 12 usable blocks.
    let mut m = mgr(64, 13, true);
    let a = tokens(33, 5);
    admit(&mut m, 0, &a);
    for pos in 33..41 {
        assert!(m.allocate_slots(0, pos, 1, None));
        m.cache_blocks(0, &a, pos);
    }
    // Blocks 0..8 released (keys before 33), with their hashes: still findable.
    assert_eq!(nulls(m.block_ids(0, SLIDE)), 8);
    assert_eq!(m.num_free_blocks(SLIDE), 12 - 3);
    let mut hashes = vec![];
    extend_hashes(&mut hashes, KEY, BS, &a, 8);
    for &h in &hashes[..8] {
        assert!(m.pool(SLIDE).lookup(h).is_some(), "released, not evicted");
    }
    // Another request takes 6 sliding blocks: the one never cached, then released ones,
    // oldest first.
    assert!(m.allocate_slots(1, 0, 24, None));
    let evicted = hashes[..8]
        .iter()
        .filter(|&&h| m.pool(SLIDE).lookup(h).is_none())
        .count();
    assert_eq!(evicted, 5);
    assert!(m.pool(SLIDE).lookup(hashes[0]).is_none());
    assert!(m.pool(SLIDE).lookup(hashes[7]).is_some());
    m.check().expect("consistent");
}

#[test]
fn preemption_and_finish_return_every_group_s_blocks() {
    let mut m = mgr(40, 20, true);
    for r in 0..3 {
        admit(&mut m, r, &tokens(30, r as u32));
        for pos in 30..45 {
            assert!(m.allocate_slots(r, pos, 1, None));
        }
    }
    m.check().expect("consistent");
    assert!(m.usage() > 0.0);
    for r in 0..3 {
        m.free(r);
    }
    m.check().expect("consistent");
    assert_eq!(m.num_free_blocks(FULL), m.num_usable_blocks(FULL));
    assert_eq!(m.num_free_blocks(SLIDE), m.num_usable_blocks(SLIDE));
    assert_eq!(m.usage(), 0.0);
}

#[test]
fn usage_weights_groups_by_layers() {
    let mut m = mgr(11, 11, false);
    // 40 tokens: all 10 full blocks; after moving to 40 only the window's 3 sliding ones.
    assert!(m.allocate_slots(0, 0, 40, None));
    assert!(m.allocate_slots(0, 40, 0, None));
    assert_eq!(m.num_free_blocks(FULL), 0);
    assert_eq!(m.num_free_blocks(SLIDE), 10 - 2);
    // One full layer at 10/10 and three sliding ones at 2/10.
    assert!((m.usage() - (10.0 + 3.0 * 2.0) / 40.0).abs() < 1e-6);
}

#[test]
fn the_longest_request_is_bounded_by_the_full_group() {
    let m = mgr(11, 11, false);
    assert_eq!(m.max_request_tokens(4), 10 * BS);
    // Sliding only: unbounded while the pool holds a step and the window.
    let only = GroupedKvManager::new(GroupedKvConfig {
        block_size: BS,
        groups: vec![GroupConfig {
            spec: kv_groups(&[Some(W)]).remove(0),
            num_blocks: 11,
        }],
        enable_prefix_caching: false,
    })
    .expect("valid");
    assert!(only.max_request_tokens(4) > 1 << 40);
    assert_eq!(
        only.max_request_tokens(64),
        10 * BS,
        "a 64-token step does not fit"
    );
}

/// One full group behaves exactly as the plain manager: the same tables, free counts and hits
/// over a random run of admissions, decodes and frees.
#[test]
fn one_full_group_matches_the_plain_manager() {
    let mut plain = KvCacheManager::with_hash_key(
        KvCacheConfig {
            block_size: BS,
            num_blocks: 40,
            enable_prefix_caching: true,
            state: None,
        },
        KEY,
    )
    .expect("valid");
    let mut grouped = GroupedKvManager::with_hash_key(
        GroupedKvConfig {
            block_size: BS,
            groups: vec![GroupConfig {
                spec: kv_groups(&[None, None]).remove(0),
                num_blocks: 40,
            }],
            enable_prefix_caching: true,
        },
        KEY,
    )
    .expect("valid");
    let mut rng = 0x9e37_79b9_u64;
    let mut next = |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % n) as usize
    };
    let mut live: Vec<(RequestId, Vec<u32>, usize)> = vec![];
    for id in 0..300u64 {
        match next(3) {
            0 if !live.is_empty() => {
                let (r, _, _) = live.swap_remove(next(live.len() as u64));
                plain.free(r);
                grouped.free(r);
            }
            1 if !live.is_empty() => {
                let k = next(live.len() as u64);
                let (r, toks, done) = &mut live[k];
                let a = plain.allocate_slots(*r, *done, 1, None).is_some();
                assert_eq!(a, grouped.allocate_slots(*r, *done, 1, None));
                if a {
                    toks.push(next(5) as u32);
                    *done += 1;
                    plain.cache_blocks(*r, toks, *done);
                    grouped.cache_blocks(*r, toks, *done);
                }
            }
            _ => {
                // Prompts share prefixes: a few salts, random lengths.
                let toks = tokens(1 + next(30), next(3) as u32);
                let h1 = plain.get_computed_blocks(id, &toks);
                let h2 = grouped.get_computed_blocks(id, &toks);
                assert_eq!(h1.block_ids, h2.tables[0]);
                let n = toks.len() - h1.num_computed_tokens;
                let a = plain
                    .allocate_slots(id, h1.num_computed_tokens, n, Some(&h1))
                    .is_some();
                assert_eq!(
                    a,
                    grouped.allocate_slots(id, h2.num_computed_tokens, n, Some(&h2))
                );
                if a {
                    plain.cache_blocks(id, &toks, toks.len());
                    grouped.cache_blocks(id, &toks, toks.len());
                    let len = toks.len();
                    live.push((id, toks, len));
                } else {
                    plain.free(id);
                    grouped.free(id);
                }
            }
        }
        for (r, _, _) in &live {
            assert_eq!(plain.block_ids(*r), grouped.block_ids(*r, 0));
        }
        assert_eq!(plain.num_free_blocks(), grouped.num_free_blocks(0));
        assert_eq!(plain.pool().free_list(), grouped.pool(0).free_list());
        assert_eq!(plain.usage(), grouped.usage());
        grouped.check().expect("consistent");
    }
    assert_eq!(plain.prefix_cache_stats(), grouped.prefix_cache_stats());
}
