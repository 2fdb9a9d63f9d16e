//! Recurrent-state slots beside the paged KV cache, for models with linear-attention layers
//! (Qwen3.5's Gated DeltaNet): ids only, as for blocks; the runner owns the memory.
//!
//! A linear-attention layer's cache for a sequence is not one entry per token but a fixed-size
//! state (the conv window and the delta-rule matrix), overwritten every token. So:
//!
//! - Each running sequence holds one **slot** (`0..num_slots`), taken at admission (no free
//!   slot: the request waits) and released on finish, abort and preemption. A preempted
//!   sequence recomputes its state from its tokens when it is admitted again.
//! - A state cannot be shared up to an arbitrary prefix as KV blocks are, so prefix caching
//!   keeps **checkpoints**: the state after the first `P` tokens, for `P` a multiple of the
//!   checkpoint interval, in slots `num_slots..num_slots + num_checkpoints`, keyed by the hash
//!   of the block that ends at `P` (which names the whole prefix). A prefix hit is used only
//!   up to the longest such `P` with a checkpoint; the tokens after it are recomputed.
//! - A checkpoint is reserved when its boundary is scheduled (the runner writes it while
//!   computing that token), published once the step has computed it (the same moment its
//!   KV blocks enter the prefix cache), and evicted least recently used first.

use super::hash::{BlockHash, FastMap};
use crate::scheduler::io::RequestId;

/// The state cache's shape: `--ssm-cache-slots`, `--ssm-checkpoint-slots`,
/// `--ssm-checkpoint-interval`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateCacheConfig {
    /// Slots for running sequences.
    pub num_slots: usize,
    /// Slots for prefix checkpoints (0: prefix caching of hybrid models is off).
    pub num_checkpoints: usize,
    /// Tokens between checkpoints; a positive multiple of the block size.
    pub checkpoint_interval: usize,
}

impl StateCacheConfig {
    /// Slots of memory the runner allocates: sequences first, then checkpoints.
    pub fn total_slots(&self) -> usize {
        self.num_slots + self.num_checkpoints
    }
}

/// How a sequence's slot starts a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateInit {
    /// As the previous step left it.
    Continue,
    /// From zeros: the sequence starts at position 0.
    Zero,
    /// A copy of checkpoint slot `.0`: the sequence resumes after a cached prefix.
    Copy(u32),
}

/// Copy the state into checkpoint `slot` once `after` tokens of the chunk are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateSave {
    pub after: u32,
    pub slot: u32,
}

/// What a sequence's state slot does in one step: start as `init`, run the chunk, and save
/// checkpoints on the way. All inits of a step happen before any save.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatePlan {
    pub slot: u32,
    pub init: StateInit,
    pub saves: Vec<StateSave>,
}

/// The slot of a padding row (a CUDA graph's batch padded to its bucket): no state at all.
/// The row starts from zeros, writes nothing and saves nothing.
pub const NO_STATE: u32 = u32::MAX;

impl StatePlan {
    /// A padding row's plan: [`NO_STATE`], nothing to start, no saves.
    pub fn padding() -> Self {
        Self {
            slot: NO_STATE,
            init: StateInit::Continue,
            saves: Vec::new(),
        }
    }

    /// A padding row's plan ([`NO_STATE`]).
    pub fn is_padding(&self) -> bool {
        self.slot == NO_STATE
    }

    /// A step that only moves the state on (a decode step that neither starts the slot nor
    /// saves a checkpoint): what a replayed CUDA graph can do, as its launches are fixed.
    pub fn is_plain_continue(&self) -> bool {
        self.init == StateInit::Continue && self.saves.is_empty()
    }

    /// A lone sequence in slot 0 whose chunk starts at `start_pos`: from zeros at 0, else as
    /// the previous chunk left it, no saves (scoring, tests, checks).
    pub fn lone(start_pos: usize) -> Self {
        Self {
            slot: 0,
            init: if start_pos == 0 {
                StateInit::Zero
            } else {
                StateInit::Continue
            },
            saves: Vec::new(),
        }
    }
}

/// A checkpoint: its slot, when it was last used, and whether its state is written yet.
#[derive(Debug, Clone, Copy)]
struct Checkpoint {
    slot: u32,
    last_used: u64,
    /// `Some(req)` while `req`'s step that writes it has not completed.
    pending: Option<RequestId>,
}

/// One running sequence's slot and its checkpoints not yet published.
#[derive(Debug, Default)]
struct SeqState {
    slot: u32,
    /// Set at admission, consumed by the first plan.
    init: Option<StateInit>,
    /// (boundary in tokens, block hash) of checkpoints this sequence writes.
    pending: Vec<(usize, BlockHash)>,
}

#[derive(Debug)]
pub struct StatePool {
    cfg: StateCacheConfig,
    free_slots: Vec<u32>,
    free_checkpoints: Vec<u32>,
    checkpoints: FastMap<BlockHash, Checkpoint>,
    seqs: FastMap<RequestId, SeqState>,
    clock: u64,
}

impl StatePool {
    pub fn new(cfg: StateCacheConfig) -> Self {
        let n = cfg.num_slots as u32;
        let c = cfg.num_checkpoints as u32;
        Self {
            cfg,
            // Popped from the back: lowest ids first.
            free_slots: (0..n).rev().collect(),
            free_checkpoints: (n..n + c).rev().collect(),
            checkpoints: FastMap::default(),
            seqs: FastMap::default(),
            clock: 0,
        }
    }

    pub fn config(&self) -> StateCacheConfig {
        self.cfg
    }

    pub fn num_free_slots(&self) -> usize {
        self.free_slots.len()
    }

    /// The slot `req` holds, if any.
    pub fn slot(&self, req: RequestId) -> Option<u32> {
        self.seqs.get(&req).map(|s| s.slot)
    }

    /// Published checkpoints (for tests and metrics).
    pub fn num_checkpoints(&self) -> usize {
        self.checkpoints
            .values()
            .filter(|c| c.pending.is_none())
            .count()
    }

    /// The published checkpoint of the prefix that ends with the block hashed `hash`,
    /// marked used.
    pub(super) fn lookup(&mut self, hash: BlockHash) -> Option<u32> {
        self.clock += 1;
        let now = self.clock;
        let c = self.checkpoints.get_mut(&hash)?;
        if c.pending.is_some() {
            return None;
        }
        c.last_used = now;
        Some(c.slot)
    }

    /// Gives `req` a slot that starts as `init`; false (nothing changed) when none is free.
    pub(super) fn allocate(&mut self, req: RequestId, init: StateInit) -> bool {
        debug_assert!(!self.seqs.contains_key(&req), "request {req} holds a slot");
        let Some(slot) = self.free_slots.pop() else {
            return false;
        };
        self.seqs.insert(
            req,
            SeqState {
                slot,
                init: Some(init),
                pending: Vec::new(),
            },
        );
        true
    }

    /// The plan for `req`'s chunk of tokens `start..end`: its init, and a checkpoint save at
    /// each interval boundary in `(start, end]` whose prefix has none yet. `hash_at(b)` is the
    /// hash of the block that ends at token `b`. `None` when `req` holds no slot.
    pub(super) fn plan(
        &mut self,
        req: RequestId,
        start: usize,
        end: usize,
        hash_at: &mut dyn FnMut(usize) -> BlockHash,
    ) -> Option<StatePlan> {
        let interval = self.cfg.checkpoint_interval;
        let seq = self.seqs.get_mut(&req)?;
        let mut plan = StatePlan {
            slot: seq.slot,
            init: seq.init.take().unwrap_or(StateInit::Continue),
            saves: Vec::new(),
        };
        if self.cfg.num_checkpoints == 0 || interval == 0 {
            return Some(plan);
        }
        let first = (start / interval + 1) * interval;
        for boundary in (first..=end).step_by(interval) {
            let hash = hash_at(boundary);
            self.clock += 1;
            if let Some(c) = self.checkpoints.get_mut(&hash) {
                c.last_used = self.clock; // kept, or being written by another sequence
                continue;
            }
            let Some(slot) = take_checkpoint(&mut self.free_checkpoints, &mut self.checkpoints)
            else {
                break; // every checkpoint is being written this step
            };
            self.checkpoints.insert(
                hash,
                Checkpoint {
                    slot,
                    last_used: self.clock,
                    pending: Some(req),
                },
            );
            if let Some(seq) = self.seqs.get_mut(&req) {
                seq.pending.push((boundary, hash));
            }
            plan.saves.push(StateSave {
                after: (boundary - start) as u32,
                slot,
            });
        }
        Some(plan)
    }

    /// Publishes `req`'s checkpoints at boundaries up to `num_computed_tokens`.
    pub(super) fn publish(&mut self, req: RequestId, num_computed_tokens: usize) {
        let Some(seq) = self.seqs.get_mut(&req) else {
            return;
        };
        seq.pending.retain(|&(boundary, hash)| {
            if boundary > num_computed_tokens {
                return true;
            }
            if let Some(c) = self.checkpoints.get_mut(&hash) {
                c.pending = None;
            }
            false
        });
    }

    /// Releases `req`'s slot and drops the checkpoints it had not finished writing.
    pub(super) fn free(&mut self, req: RequestId) {
        let Some(seq) = self.seqs.remove(&req) else {
            return;
        };
        self.free_slots.push(seq.slot);
        for (_, hash) in seq.pending {
            if let Some(c) = self.checkpoints.remove(&hash) {
                self.free_checkpoints.push(c.slot);
            }
        }
    }

    /// Every slot is free or held by exactly one sequence or checkpoint.
    pub fn check(&self) -> Result<(), String> {
        let total = self.cfg.total_slots();
        let mut seen = vec![false; total];
        let mut mark = |slot: u32, what: &str| -> Result<(), String> {
            let s = slot as usize;
            if s >= total || std::mem::replace(&mut seen[s], true) {
                return Err(format!(
                    "state slot {slot} ({what}) out of range or held twice"
                ));
            }
            Ok(())
        };
        for &s in &self.free_slots {
            if s as usize >= self.cfg.num_slots {
                return Err(format!("checkpoint slot {s} on the sequence free list"));
            }
            mark(s, "free")?;
        }
        for (id, seq) in &self.seqs {
            if seq.slot as usize >= self.cfg.num_slots {
                return Err(format!("request {id} holds checkpoint slot {}", seq.slot));
            }
            mark(seq.slot, "sequence")?;
            for (_, hash) in &seq.pending {
                match self.checkpoints.get(hash) {
                    Some(c) if c.pending == Some(*id) => {}
                    _ => return Err(format!("request {id}'s pending checkpoint is not its own")),
                }
            }
        }
        for &s in &self.free_checkpoints {
            mark(s, "free checkpoint")?;
        }
        for c in self.checkpoints.values() {
            if (c.slot as usize) < self.cfg.num_slots {
                return Err(format!("checkpoint in sequence slot {}", c.slot));
            }
            mark(c.slot, "checkpoint")?;
        }
        match seen.iter().position(|s| !s) {
            Some(s) => Err(format!("state slot {s} is neither free nor held")),
            None => Ok(()),
        }
    }
}

/// A free checkpoint slot, else the least recently used published one's (evicted).
fn take_checkpoint(
    free: &mut Vec<u32>,
    checkpoints: &mut FastMap<BlockHash, Checkpoint>,
) -> Option<u32> {
    if let Some(slot) = free.pop() {
        return Some(slot);
    }
    let (&hash, _) = checkpoints
        .iter()
        .filter(|(_, c)| c.pending.is_none())
        .min_by_key(|(_, c)| c.last_used)?;
    checkpoints.remove(&hash).map(|c| c.slot)
}
