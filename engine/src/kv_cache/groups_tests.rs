use super::*;

/// Gemma 3's layout: every 6th layer global, the rest local with a window.
fn gemma3(layers: usize, window: usize) -> Vec<Option<usize>> {
    (0..layers)
        .map(|l| (!(l + 1).is_multiple_of(6)).then_some(window))
        .collect()
}

/// gpt-oss's layout: sliding and full layers alternating, sliding first.
fn gpt_oss(layers: usize) -> Vec<Option<usize>> {
    (0..layers)
        .map(|l| l.is_multiple_of(2).then_some(128))
        .collect()
}

#[test]
fn layers_group_by_attention_full_first() {
    let g = kv_groups(&gemma3(12, 1024));
    assert_eq!(g.len(), 2);
    assert_eq!(g[0].attention, Attention::Full);
    assert_eq!(g[0].layers, vec![5, 11]);
    assert_eq!(g[1].attention, Attention::Sliding { window: 1024 });
    assert_eq!(g[1].layers, vec![0, 1, 2, 3, 4, 6, 7, 8, 9, 10]);
    // No sliding layer: one group, as a cache without groups.
    let plain = kv_groups(&[None; 4]);
    assert_eq!(plain.len(), 1);
    assert_eq!(plain[0].layers, vec![0, 1, 2, 3]);
    // Two windows make two sliding groups.
    let two = kv_groups(&[Some(8), None, Some(4), Some(8)]);
    let kinds: Vec<_> = two.iter().map(|g| g.attention).collect();
    assert_eq!(
        kinds,
        vec![
            Attention::Full,
            Attention::Sliding { window: 4 },
            Attention::Sliding { window: 8 }
        ]
    );
}

#[test]
fn the_window_starts_at_the_block_of_the_first_visible_key() {
    // Window 8, blocks of 4: the query at 20 sees 13..=20, block 3 holds key 13.
    assert_eq!(window_start_block(20, 8, 4), 3);
    // The query at 19 sees 12..=19: block 3 starts at 12, blocks 0..3 are behind it.
    assert_eq!(window_start_block(19, 8, 4), 3);
    assert_eq!(window_start_block(18, 8, 4), 2);
    assert_eq!(window_start_block(3, 8, 4), 0, "inside the first window");
    assert_eq!(window_start_block(0, 1, 4), 0);
    assert_eq!(
        window_start_block(4, 1, 4),
        1,
        "a window of 1 sees only itself"
    );
}

#[test]
fn peak_blocks_is_the_window_and_the_step() {
    let full = Attention::Full;
    let slide = Attention::Sliding { window: 8 };
    assert_eq!(peak_blocks(full, 100, 16, 4), 25);
    // 7 keys behind the oldest query and 16 written: 23 positions over at most 7 blocks.
    assert_eq!(peak_blocks(slide, 100, 16, 4), 7);
    assert_eq!(
        peak_blocks(slide, 10, 16, 4),
        3,
        "never more than the sequence"
    );
    // Exhaustively: no query position and chunk needs more than the bound.
    for chunk in 1..20usize {
        for q in 0..60 {
            let held = (q + chunk).div_ceil(4) - window_start_block(q, 8, 4);
            assert!(
                held <= peak_blocks(slide, 1 << 20, chunk, 4),
                "q {q} chunk {chunk}"
            );
        }
    }
}

#[test]
fn the_budget_is_split_in_proportion_to_need() {
    let groups = kv_groups(&gemma3(12, 64));
    let shape = PlanShape {
        block_size: 16,
        layer_block_bytes: 1000,
        max_seq_len: 1024,
        max_num_seqs: 4,
        step_tokens: 256,
    };
    // Needs: full 4 × 64 blocks; sliding 4 × (4 + 3) + 16 = 44.
    assert_eq!(shape.group_blocks(Attention::Full, 4), 256);
    assert_eq!(shape.group_blocks(groups[1].attention, 4), 44);
    let need_bytes = (256 * 2 + 44 * 10) * 1000;
    let nulls = 12 * 1000;
    let plan = plan_groups(need_bytes + nulls, &shape, &groups);
    assert_eq!(plan[0].num_blocks, 257);
    assert_eq!(plan[1].num_blocks, 45);
    assert_eq!(planned_bytes(&plan, 1000), need_bytes + nulls);
    assert_eq!(full_length_seqs(&plan, &shape), 4);
    // Twice the budget: twice the blocks, and at least twice the sequences.
    let plan = plan_groups(2 * (need_bytes + nulls), &shape, &groups);
    assert!(planned_bytes(&plan, 1000) <= 2 * (need_bytes + nulls));
    assert!(full_length_seqs(&plan, &shape) >= 8);
    // One group takes the whole budget, as a cache without groups does.
    let one = plan_groups(65_000, &shape, &kv_groups(&[None; 2]));
    assert_eq!(one[0].num_blocks, 32);
}

/// The footprint of the released shapes, as the planner counts it (printed with
/// `--nocapture`): KV bytes for the recipe's batch of full-length sequences, all layers keeping
/// every position against sliding layers keeping their window.
#[test]
fn released_shapes_keep_less_kv() {
    struct Case {
        name: &'static str,
        windows: Vec<Option<usize>>,
        token_layer_bytes: usize,
        max_seq_len: usize,
        max_num_seqs: usize,
        step_tokens: usize,
        /// Grouped / all-full bytes, at most.
        ratio_below: f64,
    }
    let bs = 16;
    let cases = [
        // Gemma 3 27B: 62 layers (10 global), 16 kv heads of 128, bf16; the recipe's shape.
        Case {
            name: "gemma3-27b 2 x 8192",
            windows: gemma3(62, 1024),
            token_layer_bytes: 2 * 16 * 128 * 2,
            max_seq_len: 8192,
            max_num_seqs: 2,
            step_tokens: 8192,
            ratio_below: 0.70,
        },
        Case {
            name: "gemma3-27b 1 x 131072",
            windows: gemma3(62, 1024),
            token_layer_bytes: 2 * 16 * 128 * 2,
            max_seq_len: 131_072,
            max_num_seqs: 1,
            step_tokens: 8192,
            ratio_below: 0.23,
        },
        // gpt-oss-20b: 24 layers alternating, 8 kv heads of 64.
        Case {
            name: "gpt-oss-20b 8 x 32768",
            windows: gpt_oss(24),
            token_layer_bytes: 2 * 8 * 64 * 2,
            max_seq_len: 32_768,
            max_num_seqs: 8,
            step_tokens: 8192,
            ratio_below: 0.52,
        },
        Case {
            name: "gpt-oss-120b 8 x 131072",
            windows: gpt_oss(36),
            token_layer_bytes: 2 * 8 * 64 * 2,
            max_seq_len: 131_072,
            max_num_seqs: 8,
            step_tokens: 8192,
            ratio_below: 0.51,
        },
    ];
    for c in cases {
        let groups = kv_groups(&c.windows);
        let shape = PlanShape {
            block_size: bs,
            layer_block_bytes: bs * c.token_layer_bytes,
            max_seq_len: c.max_seq_len,
            max_num_seqs: c.max_num_seqs,
            step_tokens: c.step_tokens,
        };
        let all_full = c.windows.len()
            * shape.group_blocks(Attention::Full, c.max_num_seqs)
            * shape.layer_block_bytes;
        let grouped_for = |seqs: usize| -> usize {
            groups
                .iter()
                .map(|g| {
                    g.layers.len() * shape.group_blocks(g.attention, seqs) * shape.layer_block_bytes
                })
                .sum()
        };
        let grouped = grouped_for(c.max_num_seqs);
        let ratio = grouped as f64 / all_full as f64;
        // The most full-length sequences the all-full bytes hold with the window.
        let mut seqs = c.max_num_seqs;
        while grouped_for(seqs + 1) <= all_full {
            seqs += 1;
        }
        // The planner splits that memory so that at least the recipe's batch fits.
        let plan = plan_groups(all_full, &shape, &groups);
        assert!(
            full_length_seqs(&plan, &shape) >= c.max_num_seqs,
            "{}",
            c.name
        );
        eprintln!(
            "{}: all layers {:.2} GiB, sliding window {:.2} GiB ({:.0}%); the same memory \
             holds {} sequences instead of {}",
            c.name,
            all_full as f64 / (1u64 << 30) as f64,
            grouped as f64 / (1u64 << 30) as f64,
            100.0 * ratio,
            seqs,
            c.max_num_seqs
        );
        assert!(ratio < c.ratio_below, "{}: ratio {ratio}", c.name);
        assert!(planned_bytes(&plan, shape.layer_block_bytes) <= all_full);
        assert!(seqs > c.max_num_seqs, "{}: {seqs} sequences", c.name);
    }
}
