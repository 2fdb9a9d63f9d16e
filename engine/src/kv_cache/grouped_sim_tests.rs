//! A scheduling simulation over the grouped manager: requests with shared prefixes, chunked
//! prefill under a token budget, decode steps verifying speculative drafts, preemption when a
//! pool runs dry, prefix hits and eviction. A fake KV store a group records what each slot
//! holds (a hash of the tokens up to its position); every row of every step checks that each
//! key its layers read is in a live block holding that very content. A block released too
//! early (and reused), a wrong prefix hit or a stale table would all fail it.

use super::*;
use crate::kv_cache::groups::kv_groups;

const BS: usize = 4;
const W: usize = 8;
const BUDGET: usize = 24;

/// A content stamp for the KV of position `tokens.len() - 1`: every token up to it.
fn stamp(tokens: &[u32]) -> u64 {
    tokens.iter().fold(0xcbf2_9ce4_8422_2325, |h, &t| {
        (h ^ u64::from(t)).wrapping_mul(0x100_0000_01b3)
    })
}

struct Req {
    id: RequestId,
    tokens: Vec<u32>,
    computed: usize,
    /// Finishes once it holds this many tokens.
    target: usize,
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Runs 24 requests to the end; returns (finished, preemptions, prefix-hit tokens).
fn run(seed: u64, full_blocks: usize, sliding_blocks: usize) -> (usize, u64, u64) {
    let specs = kv_groups(&[Some(W), None, Some(W)]);
    let windows: Vec<Option<usize>> = specs.iter().map(KvGroupSpec::window).collect();
    let groups = specs
        .into_iter()
        .zip([full_blocks, sliding_blocks])
        .map(|(spec, num_blocks)| GroupConfig { spec, num_blocks })
        .collect();
    let mut m = GroupedKvManager::with_hash_key(
        GroupedKvConfig {
            block_size: BS,
            groups,
            enable_prefix_caching: true,
        },
        HashKey { k0: 1, k1: seed },
    )
    .expect("valid");
    let mut store: Vec<Vec<Option<u64>>> = [full_blocks, sliding_blocks]
        .iter()
        .map(|&n| vec![None; n * BS])
        .collect();
    let mut rng = Rng(seed | 1);
    // Prompts: one of three shared heads, then a tail of their own.
    let heads: Vec<Vec<u32>> = (0..3)
        .map(|h| (0..20).map(|i| 1000 * h + i).collect())
        .collect();
    let mut waiting: Vec<Req> = (0..24)
        .map(|id| {
            let mut tokens = heads[rng.below(3)][..4 + rng.below(17)].to_vec();
            let tail = rng.below(30);
            tokens.extend((0..tail).map(|_| rng.below(50) as u32));
            let target = tokens.len() + 1 + rng.below(40);
            Req {
                id,
                tokens,
                computed: 0,
                target,
            }
        })
        .collect();
    waiting.reverse(); // popped from the back: request 0 first
    let mut running: Vec<Req> = Vec::new();
    let (mut finished, mut preemptions) = (0, 0u64);
    for _step in 0..5000 {
        if running.is_empty() && waiting.is_empty() {
            break;
        }
        let mut budget = BUDGET;
        // (index in running, start, own tokens, drafts) of each scheduled sequence.
        let mut plan: Vec<(usize, usize, usize, Vec<u32>)> = Vec::new();
        let mut i = 0;
        while i < running.len() && budget > 0 {
            let r = &running[i];
            let n = (r.tokens.len() - r.computed).min(budget);
            let decode = r.computed + n == r.tokens.len() && n == 1;
            let drafts: Vec<u32> = match decode {
                true => (0..rng.below(4).min(budget - 1))
                    .map(|_| rng.below(50) as u32)
                    .collect(),
                false => vec![],
            };
            let fits = loop {
                if m.allocate_slots(running[i].id, running[i].computed, n + drafts.len(), None) {
                    break true;
                }
                // Preempt the latest arrival; give up when that is this request itself.
                let mut victim = running.pop().expect("i is in range");
                m.free(victim.id);
                victim.computed = 0;
                preemptions += 1;
                let me = running.len() == i;
                waiting.push(victim);
                if me {
                    break false;
                }
            };
            if !fits {
                break;
            }
            budget -= n + drafts.len();
            plan.push((i, running[i].computed, n, drafts));
            i += 1;
        }
        // Admit while the budget and the pools allow, unless someone was just preempted.
        let admitting = plan.len() == running.len();
        while admitting && budget > 0 {
            let Some(r) = waiting.last() else { break };
            let hit = m.get_computed_blocks(r.id, &r.tokens);
            let start = hit.num_computed_tokens;
            let n = (r.tokens.len() - start).min(budget);
            if !m.allocate_slots(r.id, start, n, Some(&hit)) {
                break;
            }
            let mut r = waiting.pop().expect("looked at");
            r.computed = start;
            budget -= n;
            running.push(r);
            plan.push((running.len() - 1, start, n, vec![]));
        }

        // The forward: write each row's KV, then read every key each row's layers see.
        for (k, start, n, drafts) in &plan {
            let r = &running[*k];
            let mut seq = r.tokens[..start + n].to_vec();
            seq.extend(drafts);
            for (g, win) in windows.iter().enumerate() {
                let table = m.block_ids(r.id, g);
                for p in *start..seq.len() {
                    let b = table[p / BS];
                    assert_ne!(
                        b, NULL_BLOCK,
                        "request {} writes {p} into the null block",
                        r.id
                    );
                    store[g][b as usize * BS + p % BS] = Some(stamp(&seq[..=p]));
                }
                for q in *start..seq.len() {
                    let lo = win.map_or(0, |w| (q + 1).saturating_sub(w));
                    for p in lo..=q {
                        let b = table[p / BS];
                        assert_ne!(b, NULL_BLOCK, "group {g}: query {q} reads key {p}");
                        assert_eq!(
                            store[g][b as usize * BS + p % BS],
                            Some(stamp(&seq[..=p])),
                            "group {g}: request {} query {q} key {p} block {b}",
                            r.id
                        );
                    }
                }
            }
        }

        // Results: advance, accept some drafts and sample a token at the end, finish.
        let mut done = vec![];
        for (k, start, n, drafts) in plan {
            let r = &mut running[k];
            r.computed = start + n;
            if r.computed == r.tokens.len() {
                let accepted = rng.below(drafts.len() + 1);
                r.tokens.extend_from_slice(&drafts[..accepted]);
                r.computed += accepted;
                r.tokens.push(rng.below(50) as u32);
            }
            m.cache_blocks(r.id, &r.tokens, r.computed);
            if r.tokens.len() >= r.target {
                done.push(k);
            }
        }
        done.sort_unstable();
        for k in done.into_iter().rev() {
            let r = running.remove(k);
            m.free(r.id);
            finished += 1;
        }
        m.check().expect("consistent");
    }
    assert!(
        running.is_empty() && waiting.is_empty(),
        "every request finished"
    );
    for g in 0..2 {
        assert_eq!(m.num_free_blocks(g), m.num_usable_blocks(g));
    }
    (finished, preemptions, m.prefix_cache_stats().hits)
}

#[test]
fn every_key_read_is_live_and_right_under_scheduling() {
    let (mut preempted, mut hits) = (0, 0);
    for seed in 1..=12 {
        let (finished, p, h) = run(seed, 48, 24);
        assert_eq!(finished, 24);
        preempted += p;
        hits += h;
    }
    assert!(preempted > 0, "the pools are small enough to preempt");
    assert!(hits > 0, "the shared heads hit the prefix cache");
}

#[test]
fn roomy_pools_never_preempt() {
    for seed in 1..=4 {
        let (finished, preempted, _) = run(seed, 400, 200);
        assert_eq!((finished, preempted), (24, 0));
    }
}
