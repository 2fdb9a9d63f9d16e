//! KV groups: the layers of a model put together by how they attend (full attention, or a
//! sliding window of `W` positions), and the split of a KV memory budget between the groups'
//! block pools ([`GroupedKvManager`](super::grouped::GroupedKvManager) keeps one pool a group).
//!
//! A full-attention layer needs every position of a sequence; a sliding layer only the last
//! `W - 1` before its oldest query, plus what the step being computed writes. Sizing each
//! group's pool by what the configured batch of full-length sequences needs in it
//! ([`PlanShape::group_blocks`]) keeps the pools in the same proportion as their demand, so
//! neither runs out long before the other.

/// How the layers of one group attend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Attention {
    /// Every position before the query.
    Full,
    /// The query at `q` sees keys `q - window < p <= q`.
    Sliding { window: usize },
}

/// One KV group: the layers (model order) that share a block pool and a block table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvGroupSpec {
    pub attention: Attention,
    pub layers: Vec<usize>,
}

impl KvGroupSpec {
    pub fn window(&self) -> Option<usize> {
        match self.attention {
            Attention::Full => None,
            Attention::Sliding { window } => Some(window),
        }
    }
}

/// The groups of a model whose layer `l` attends in `windows[l]` (`None`: full attention).
/// Full attention first, then sliding groups by window; a model without sliding layers has one
/// group, the layout of a cache without groups.
pub fn kv_groups(windows: &[Option<usize>]) -> Vec<KvGroupSpec> {
    let mut groups: Vec<KvGroupSpec> = Vec::new();
    for (l, w) in windows.iter().enumerate() {
        let attention = match w {
            None => Attention::Full,
            Some(window) => Attention::Sliding { window: *window },
        };
        match groups.iter_mut().find(|g| g.attention == attention) {
            Some(g) => g.layers.push(l),
            None => groups.push(KvGroupSpec {
                attention,
                layers: vec![l],
            }),
        }
    }
    groups.sort_by_key(|g| g.attention);
    groups
}

/// The first block a query at `query` (and every later one) can read through a window of
/// `window` positions: the blocks before it lie wholly before key `query - window + 1`.
pub fn window_start_block(query: usize, window: usize, block_size: usize) -> usize {
    (query + 1).saturating_sub(window) / block_size
}

/// The most blocks one sequence of `len` tokens holds at once in a group of `attention`,
/// when the steps that compute it write at most `chunk` positions each (the prefill chunk,
/// or a decode row with its speculative drafts): a sliding group holds the window behind the
/// step's oldest query and the step's own positions, `W - 1 + chunk` positions, spread over
/// at most one block more than they fill.
pub fn peak_blocks(attention: Attention, len: usize, chunk: usize, block_size: usize) -> usize {
    let full = len.div_ceil(block_size);
    match attention {
        Attention::Full => full,
        Attention::Sliding { window } => {
            full.min((window.saturating_sub(1) + chunk.max(1)).div_ceil(block_size) + 1)
        }
    }
}

/// The shape a KV budget is split for: `max_num_seqs` sequences of `max_seq_len` tokens,
/// computed in steps of at most `step_tokens` positions (`max_num_batched_tokens`, drafts
/// included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanShape {
    pub block_size: usize,
    /// Bytes of one block of one layer (k and v).
    pub layer_block_bytes: usize,
    pub max_seq_len: usize,
    pub max_num_seqs: usize,
    pub step_tokens: usize,
}

impl PlanShape {
    /// Blocks `seqs` full-length sequences hold at most in a group of `attention`. A full
    /// group: all their positions. A sliding group: each sequence's window behind its oldest
    /// query (`W - 1` positions, two blocks of slack for alignment and its own decode row), and
    /// the positions the step writes, which all sequences share (`step_tokens`), one more
    /// block a sequence for where its part of the step starts.
    pub fn group_blocks(&self, attention: Attention, seqs: usize) -> usize {
        let bs = self.block_size;
        let full = seqs * self.max_seq_len.div_ceil(bs);
        match attention {
            Attention::Full => full,
            Attention::Sliding { window } => {
                let per_seq = window.saturating_sub(1).div_ceil(bs) + 3;
                full.min(seqs * per_seq + self.step_tokens.div_ceil(bs))
            }
        }
    }

    /// How many full-length sequences `usable` blocks of a group of `attention` hold.
    pub fn seqs_fitting(&self, attention: Attention, usable: usize) -> usize {
        let per_seq = self.max_seq_len.div_ceil(self.block_size).max(1);
        let full = usable / per_seq;
        match attention {
            Attention::Full => full,
            Attention::Sliding { window } => {
                let per_seq = window.saturating_sub(1).div_ceil(self.block_size) + 3;
                let shared = self.step_tokens.div_ceil(self.block_size);
                full.max(usable.saturating_sub(shared) / per_seq)
            }
        }
    }
}

/// One group's share of a KV budget, as [`plan_groups`] sizes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannedGroup {
    pub attention: Attention,
    /// Layers in the group.
    pub layers: usize,
    /// Blocks in the group's pool, its null block included.
    pub num_blocks: usize,
}

impl PlannedGroup {
    /// Blocks that can be handed out (all but the null block).
    pub fn usable(&self) -> usize {
        self.num_blocks.saturating_sub(1)
    }

    /// Bytes of the group's pool.
    pub fn bytes(&self, layer_block_bytes: usize) -> usize {
        self.num_blocks * self.layers * layer_block_bytes
    }
}

/// Splits `budget` bytes between the pools of `groups` in proportion to what each needs for
/// `shape`'s batch of full-length sequences ([`PlanShape::group_blocks`]), so that the pools
/// run short together. Each pool gets one block more, its null block.
pub fn plan_groups(budget: usize, shape: &PlanShape, groups: &[KvGroupSpec]) -> Vec<PlannedGroup> {
    let lbb = shape.layer_block_bytes;
    let needs: Vec<usize> = groups
        .iter()
        .map(|g| shape.group_blocks(g.attention, shape.max_num_seqs).max(1))
        .collect();
    let nulls: usize = groups.iter().map(|g| g.layers.len() * lbb).sum();
    let demand: usize = groups
        .iter()
        .zip(&needs)
        .map(|(g, n)| n * g.layers.len() * lbb)
        .sum();
    let scale = budget.saturating_sub(nulls) as f64 / demand.max(1) as f64;
    groups
        .iter()
        .zip(needs)
        .map(|(g, need)| PlannedGroup {
            attention: g.attention,
            layers: g.layers.len(),
            num_blocks: (scale * need as f64).floor() as usize + 1,
        })
        .collect()
}

/// The bytes the pools of `plan` take.
pub fn planned_bytes(plan: &[PlannedGroup], layer_block_bytes: usize) -> usize {
    plan.iter().map(|g| g.bytes(layer_block_bytes)).sum()
}

/// How many full-length sequences every pool of `plan` holds at once (the capacity report's
/// `max_batch_size × max_seq_len`).
pub fn full_length_seqs(plan: &[PlannedGroup], shape: &PlanShape) -> usize {
    plan.iter()
        .map(|g| shape.seqs_fitting(g.attention, g.usable()))
        .min()
        .unwrap_or(0)
}

#[cfg(test)]
#[path = "groups_tests.rs"]
mod tests;
