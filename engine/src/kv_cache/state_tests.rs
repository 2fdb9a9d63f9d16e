//! The recurrent-state slots and prefix checkpoints of the cache manager (`state.rs`).

use super::*;
use crate::kv_cache::{StateInit, StateSave};

const BS: usize = 4;
const KEY: HashKey = HashKey { k0: 3, k1: 4 };
/// Two blocks between checkpoints.
const EVERY: usize = 2 * BS;

fn mgr(slots: usize, checkpoints: usize) -> KvCacheManager {
    let cfg = KvCacheConfig {
        block_size: BS,
        num_blocks: 64,
        enable_prefix_caching: true,
        state: Some(StateCacheConfig {
            num_slots: slots,
            num_checkpoints: checkpoints,
            checkpoint_interval: EVERY,
        }),
    };
    KvCacheManager::with_hash_key(cfg, KEY).expect("valid config")
}

fn tokens(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32).map(|i| i * 5 + salt).collect()
}

/// Admission as the scheduler does it: lookup, allocate, then the first chunk's plan.
fn admit(m: &mut KvCacheManager, req: RequestId, toks: &[u32]) -> Option<(usize, StatePlan)> {
    let hit = m.get_computed_blocks(req, toks);
    let start = hit.num_computed_tokens;
    m.allocate_slots(req, start, toks.len() - start, Some(&hit))?;
    let plan = m.state_plan(req, toks, start, toks.len() - start)?;
    m.check().expect("consistent");
    Some((start, plan))
}

#[test]
fn a_request_waits_for_a_free_slot_and_gets_it_back_on_free() {
    let mut m = mgr(2, 0);
    let (_, a) = admit(&mut m, 1, &tokens(5, 1)).expect("slot 0");
    let (_, b) = admit(&mut m, 2, &tokens(5, 2)).expect("slot 1");
    assert_ne!(a.slot, b.slot);
    assert_eq!((a.init, b.init), (StateInit::Zero, StateInit::Zero));
    let blocks_free = m.num_free_blocks();
    assert!(admit(&mut m, 3, &tokens(5, 3)).is_none(), "no slot left");
    assert_eq!(
        m.num_free_blocks(),
        blocks_free,
        "a refused admission takes nothing"
    );
    m.free(1);
    let (_, c) = admit(&mut m, 3, &tokens(5, 3)).expect("slot freed");
    assert_eq!(c.slot, a.slot);
    // Later chunks continue from the slot.
    m.allocate_slots(3, 5, 1, None).expect("room");
    let next = m.state_plan(3, &tokens(6, 3), 5, 1).expect("held");
    assert_eq!(next.init, StateInit::Continue);
    m.free(2);
    m.free(3);
    m.check().expect("consistent");
    assert_eq!(m.state_pool().map(StatePool::num_free_slots), Some(2));
}

#[test]
fn a_prefix_hit_resumes_from_the_last_checkpoint_only() {
    let mut m = mgr(2, 4);
    let a = tokens(21, 7);
    let (_, plan) = admit(&mut m, 1, &a).expect("admitted");
    // Checkpoints after 8 and 16 tokens, in checkpoint slots (2..6).
    let saves: Vec<u32> = plan.saves.iter().map(|s| s.after).collect();
    assert_eq!(saves, [8, 16]);
    assert!(plan.saves.iter().all(|s| (2..6).contains(&s.slot)));
    // Published once the step that writes them has computed their tokens.
    m.cache_blocks(1, &a, a.len());
    let mut b = a[..19].to_vec();
    b.extend([900, 901, 902]);
    m.free(1);

    // b shares 19 tokens: 4 full blocks (16 tokens) of KV, and a checkpoint at 16.
    let (start, plan_b) = admit(&mut m, 2, &b).expect("admitted");
    assert_eq!(start, 16);
    let slot16 = plan.saves[1].slot;
    assert_eq!(plan_b.init, StateInit::Copy(slot16));
    assert!(
        plan_b.saves.is_empty(),
        "its next boundary (24) is past its 22 tokens"
    );
    assert_eq!(m.prefix_cache_stats().hits, 16);

    // c shares 14 tokens: 3 blocks of KV, but the state only exists at 8.
    let mut c = a[..14].to_vec();
    c.extend([800, 801]);
    let (start, plan_c) = admit(&mut m, 3, &c).expect("admitted");
    assert_eq!(start, 8);
    assert_eq!(plan_c.init, StateInit::Copy(plan.saves[0].slot));
    assert_eq!(m.prefix_cache_stats().hits, 16 + 8);
    m.free(2);
    m.free(3);
    m.check().expect("consistent");
}

#[test]
fn checkpoints_are_evicted_least_recently_used_and_unfinished_ones_dropped() {
    let mut m = mgr(1, 1);
    let a = tokens(9, 1);
    let (_, pa) = admit(&mut m, 1, &a).expect("admitted");
    assert_eq!(pa.saves, [StateSave { after: 8, slot: 1 }]);
    m.cache_blocks(1, &a, 9);
    m.free(1);
    // Another prefix takes the only checkpoint slot: a's is evicted.
    let b = tokens(9, 2);
    let (_, pb) = admit(&mut m, 2, &b).expect("admitted");
    assert_eq!(pb.saves, [StateSave { after: 8, slot: 1 }]);
    m.cache_blocks(2, &b, 9);
    m.free(2);
    let (start, plan) = admit(&mut m, 3, &a).expect("admitted");
    assert_eq!(
        (start, plan.init),
        (0, StateInit::Zero),
        "a's KV is cached but its state is gone: recompute from the start"
    );
    // Request 3 re-plans a's checkpoint, evicting b's; aborted before its step completes,
    // the unfinished checkpoint is dropped rather than published.
    assert_eq!(plan.saves, [StateSave { after: 8, slot: 1 }]);
    m.free(3);
    m.check().expect("consistent");
    assert_eq!(m.state_pool().map(StatePool::num_checkpoints), Some(0));
    let (start, _) = admit(&mut m, 4, &a).expect("admitted");
    assert_eq!(start, 0);
    m.free(4);
    m.check().expect("consistent");
}

#[test]
fn bad_state_configs_are_refused_by_name() {
    let cfg = |slots, interval| KvCacheConfig {
        block_size: BS,
        num_blocks: 8,
        enable_prefix_caching: true,
        state: Some(StateCacheConfig {
            num_slots: slots,
            num_checkpoints: 1,
            checkpoint_interval: interval,
        }),
    };
    assert_eq!(
        KvCacheManager::new(cfg(0, 8)).err(),
        Some(KvCacheError::StateSlots)
    );
    let e = KvCacheManager::new(cfg(1, 6)).expect_err("refused");
    assert!(
        e.to_string().contains("multiple of the KV block size 4"),
        "{e}"
    );
}
