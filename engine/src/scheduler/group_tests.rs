//! The scheduler with KV groups (a model with sliding-window layers): a sliding group holds
//! only the window of a long sequence, and the tables the runner rebuilds from the step's
//! deltas (nulls behind the window included) are the scheduler's, step after step, through
//! chunked prefill and preemption. Hand-made runner outputs, no model.

use std::collections::HashMap;

use super::io::SchedulerOutput;
use super::tests::{BS, add, config, params, prompt, run};
use super::*;
use crate::kv_cache::groups::peak_blocks;
use crate::kv_cache::{Attention, GroupConfig, HashKey, NULL_BLOCK, kv_groups};

const W: usize = 8;

/// A scheduler for layers attending in `windows`, group `g` with `blocks[g]` blocks.
fn grouped(cfg: SchedulerConfig, windows: &[Option<usize>], blocks: &[usize]) -> Scheduler {
    let groups = kv_groups(windows)
        .into_iter()
        .zip(blocks)
        .map(|(spec, &num_blocks)| GroupConfig { spec, num_blocks })
        .collect();
    Scheduler::with_kv_groups(cfg, groups, HashKey { k0: 1, k1: 2 }).expect("valid config")
}

/// Every table the runner would hold, rebuilt from the deltas alone: (row, group) → ids.
#[derive(Default)]
struct RunnerTables(HashMap<(u32, usize), Vec<u32>>);

impl RunnerTables {
    fn apply(&mut self, out: &SchedulerOutput) {
        for s in &out.seqs {
            let deltas = std::iter::once((&s.table, &s.block_ids))
                .chain(s.group_tables.iter().map(|t| (&t.table, &t.block_ids)));
            for (g, (d, full)) in deltas.enumerate() {
                let row = self.0.entry((d.slot, g)).or_default();
                if d.new {
                    row.clear();
                }
                assert!(d.start <= row.len(), "a delta past the row's end");
                row.truncate(d.start);
                row.extend_from_slice(&d.new_block_ids);
                assert_eq!(row.len(), d.len);
                assert_eq!(row, full, "request {} group {g}: rebuilt table", s.req_id);
            }
        }
    }
}

/// Runs every request to the end, checking each step's tables; returns the most blocks the
/// sliding group (`sliding`) held at once and each request's output length.
fn drain(s: &mut Scheduler, sliding: usize) -> (usize, HashMap<u64, usize>) {
    let mut tables = RunnerTables::default();
    let mut peak = 0;
    let mut outputs: HashMap<u64, usize> = HashMap::new();
    for _ in 0..10_000 {
        if !s.has_unfinished_requests() {
            return (peak, outputs);
        }
        let out = s.schedule();
        tables.apply(&out);
        s.check_invariants().expect("invariants");
        // Every query of the step reads only live blocks of the sliding table.
        let kv = s.kv_cache();
        for q in &out.seqs {
            let table = match sliding {
                0 => &q.block_ids,
                g => &q.group_tables[g - 1].block_ids,
            };
            let first_key = (q.start_pos + 1).saturating_sub(W);
            let last_key = q.start_pos + q.token_ids.len() - 1;
            for p in first_key..=last_key {
                assert_ne!(table[p / BS], NULL_BLOCK, "request {} key {p}", q.req_id);
            }
        }
        let pool = kv.group_pool(sliding);
        peak = peak.max(pool.num_usable() - pool.num_free());
        let res = run(&out, |_| 7);
        for ev in s.update_from_output(&out, &res) {
            *outputs.entry(ev.req_id).or_default() += ev.new_token_ids.len();
        }
    }
    panic!("requests never finished");
}

#[test]
fn a_long_sequence_holds_only_the_window_of_its_sliding_layers() {
    // Full, sliding, full, sliding layers: group 0 full, group 1 sliding (window 8).
    let windows = [None, Some(W), None, Some(W)];
    let cfg = SchedulerConfig {
        max_model_len: 256,
        ..config()
    };
    // 64 sliding blocks hold 256 tokens; one sequence of 200 never needs more than its
    // window and one step's chunk.
    let mut s = grouped(cfg, &windows, &[65, 65]);
    add(&mut s, 1, prompt(120, 0), params(80));
    let (peak, outputs) = drain(&mut s, 1);
    assert_eq!(outputs[&1], 80);
    let bound = peak_blocks(
        Attention::Sliding { window: W },
        200,
        cfg.max_num_batched_tokens,
        BS,
    );
    assert!(
        peak <= bound,
        "sliding group held {peak} blocks, bound {bound}"
    );
    assert!(peak < 200 / BS / 4, "{peak} blocks is not a window's");
    // Everything is back in both pools.
    let kv = s.kv_cache();
    assert_eq!(kv.group_pool(0).num_free(), 64);
    assert_eq!(kv.group_pool(1).num_free(), 64);
}

#[test]
fn a_sliding_pool_smaller_than_one_sequence_still_serves_it() {
    // Mistral-like: every layer sliding, one group. 12 blocks (48 tokens) serve a sequence of
    // 200 tokens, which the plain manager would have to refuse.
    let windows = [Some(W), Some(W)];
    let cfg = SchedulerConfig {
        max_model_len: 256,
        ..config()
    };
    let mut s = grouped(cfg, &windows, &[13]);
    add(&mut s, 1, prompt(100, 1), params(100));
    let (peak, outputs) = drain(&mut s, 0);
    assert_eq!(outputs[&1], 100);
    assert!(peak <= 12, "{peak}");
}

#[test]
fn tables_rebuilt_from_deltas_survive_preemption_and_prefix_hits() {
    // Tight pools: requests preempt each other; shared prefixes hit the cache; the runner's
    // tables, rebuilt from deltas only, match the scheduler's at every step (`drain`).
    let windows = [Some(W), None];
    let cfg = SchedulerConfig {
        max_num_seqs: 4,
        max_num_batched_tokens: 12,
        max_prefill_with_decodes: None,
        max_model_len: 96,
        ..config()
    };
    let mut s = grouped(cfg, &windows, &[40, 14]);
    let shared = prompt(24, 5);
    for id in 1..=8u64 {
        let mut p = shared.clone();
        p.extend(prompt(4 + 3 * id as usize, id as u32 * 7));
        add(&mut s, id, p, params(20 + id as usize));
    }
    let (_, outputs) = drain(&mut s, 1);
    for id in 1..=8u64 {
        assert_eq!(outputs[&id], 20 + id as usize, "request {id}");
    }
    assert!(
        s.stats().num_preemptions > 0,
        "the pools were meant to run short"
    );
    assert!(
        s.stats().prefix_cache.hits > 0,
        "the shared prefix was meant to hit"
    );
}
