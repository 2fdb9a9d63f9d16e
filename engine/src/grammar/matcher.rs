//! A compiled grammar's per-sequence state: each running sequence's llguidance matcher, the
//! output tokens it has consumed, and the masks computed ahead for it (`workers.rs`).
//!
//! Before a mask the matcher is brought up to the tokens the row's history holds (new tokens
//! consumed, a shorter history after a preemption or rejected drafts rolled back), so the
//! sampler needs no hook in the scheduler and a recomputed sequence gets the same masks.
//! Speculative decoding samples a sequence's draft rows one after another, row `j` seeing the
//! drafts before it; a draft the grammar forbids leaves the rows after it free (their tokens
//! are never used: the row before the draft, masked, cannot have drawn it, so the draft is
//! rejected there). The runner also cuts such drafts before they are verified
//! ([`Constraint::valid_drafts`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use llguidance::Matcher;

use super::token_mask::{RowMask, TokenMask};
use super::workers;

/// A compiled grammar and each of its sequences' matcher. Cloning shares them (the `n`
/// choices of one request share one `Constraint`; each sequence gets its own matcher).
#[derive(Clone)]
pub struct Constraint(Arc<Shared>);

struct Shared {
    /// The grammar before any token, cloned for each new sequence.
    template: Mutex<Matcher>,
    /// Each running sequence's state, by `SampleRow::seq`.
    seqs: Mutex<HashMap<u64, Arc<SeqState>>>,
    /// The end-of-sequence id the trie knows.
    eos: u32,
    /// One value after another, never ending (`Grammars::compile_repeated`): no
    /// end-of-sequence id is ever allowed while the grammar can go on.
    endless: bool,
    stats: Counters,
}

/// Where this grammar's masks were computed (see [`MaskStats`]).
#[derive(Default)]
struct Counters {
    ahead: AtomicU64,
    inline: AtomicU64,
    waits: AtomicU64,
    requested: AtomicU64,
    done: AtomicU64,
}

/// Where a grammar's masks were computed so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MaskStats {
    /// Masks computed by a worker, ahead of sampling.
    pub ahead: u64,
    /// Masks computed by the sampling thread itself (no worker had started them, or the
    /// overlap is off).
    pub inline: u64,
    /// Times sampling found a worker computing its sequence's masks and waited for it.
    pub waits: u64,
    /// Jobs handed to the workers, and those of them finished (run or skipped as stale).
    pub requested: u64,
    pub done: u64,
}

/// One sequence: its matcher, and the newest job asked for it (older ones are skipped).
struct SeqState {
    matcher: Mutex<SeqMatcher>,
    latest: AtomicU64,
}

/// A matcher, the output tokens it has consumed and the masks computed along them.
struct SeqMatcher {
    matcher: Matcher,
    consumed: Vec<u32>,
    /// `(n, mask)`: the mask after `consumed[..n]`, ascending by `n`. Dropped from where
    /// `consumed` changes.
    ready: Vec<(usize, RowMask)>,
    /// The token after all of `consumed` that the grammar refused (a draft).
    refused: Option<u32>,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Constraint")
    }
}

/// Two params are equal when they hold the same compiled grammar.
impl PartialEq for Constraint {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Constraint {
    pub(super) fn new(template: Matcher, eos: u32, endless: bool) -> Self {
        Constraint(Arc::new(Shared {
            template: Mutex::new(template),
            seqs: Mutex::new(HashMap::new()),
            eos,
            endless,
            stats: Counters::default(),
        }))
    }

    fn fresh(&self) -> SeqMatcher {
        SeqMatcher {
            matcher: lock(&self.0.template).deep_clone(),
            consumed: Vec::new(),
            ready: Vec::new(),
            refused: None,
        }
    }

    fn seq_state(&self, id: u64) -> Arc<SeqState> {
        lock(&self.0.seqs)
            .entry(id)
            .or_insert_with(|| {
                Arc::new(SeqState {
                    matcher: Mutex::new(self.fresh()),
                    latest: AtomicU64::new(0),
                })
            })
            .clone()
    }

    /// Where this grammar's masks were computed so far.
    pub fn mask_stats(&self) -> MaskStats {
        let s = &self.0.stats;
        let get = |c: &AtomicU64| c.load(Ordering::SeqCst);
        MaskStats {
            ahead: get(&s.ahead),
            inline: get(&s.inline),
            waits: get(&s.waits),
            requested: get(&s.requested),
            done: get(&s.done),
        }
    }

    /// The mask of the row after `output` (`seq` keys the sequence's matcher; `None`: a fresh
    /// one that reads the whole output): ready when a worker computed it, waited for when one
    /// is computing it, computed here otherwise. Where the grammar allows ending, every id of
    /// `eos_ids` is allowed; once it is complete they are the only ones. `vocab`: the ids the
    /// mask covers (the model's logits).
    pub fn row_mask(
        &self,
        seq: Option<u64>,
        output: &[u32],
        eos_ids: &[u32],
        vocab: usize,
    ) -> RowMask {
        let Some(id) = seq else {
            let mut own = self.fresh();
            return self.mask_at(&mut own, output, eos_ids, vocab, workers::Who::Sampler);
        };
        let state = self.seq_state(id);
        let mut m = match state.matcher.try_lock() {
            Ok(m) => m,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                self.0.stats.waits.fetch_add(1, Ordering::Relaxed);
                lock(&state.matcher)
            }
        };
        self.mask_at(&mut m, output, eos_ids, vocab, workers::Who::Sampler)
    }

    /// [`Constraint::row_mask`] applied to `logits` (every forbidden token set to -inf).
    pub fn mask(&self, seq: Option<u64>, output: &[u32], logits: &mut [f32], eos_ids: &[u32]) {
        if let RowMask::Tokens(m) = self.row_mask(seq, output, eos_ids, logits.len()) {
            m.apply(logits);
        }
    }

    /// Start computing, on a worker, the masks of sequence `seq`'s rows after `tokens[..n]`
    /// for every `n` from `from` to `tokens.len()` (its next row, and a row after each of the
    /// drafts it will verify), unless a newer request for the sequence comes first. Returns at
    /// once.
    pub fn prefetch(&self, seq: u64, tokens: Vec<u32>, from: usize, eos_ids: &[u32], vocab: usize) {
        let state = self.seq_state(seq);
        let ticket = state.latest.fetch_add(1, Ordering::SeqCst) + 1;
        let stats = &self.0.stats;
        stats.requested.fetch_add(1, Ordering::SeqCst);
        let this = self.clone();
        let eos_ids = eos_ids.to_vec();
        workers::spawn(move || {
            if state.latest.load(Ordering::SeqCst) == ticket {
                let mut m = lock(&state.matcher);
                // Masks before this row are not asked for again (but after a preemption).
                let from = from.min(tokens.len());
                m.ready.retain(|&(n, _)| n >= from);
                for n in from..=tokens.len() {
                    let mask =
                        this.mask_at(&mut m, &tokens[..n], &eos_ids, vocab, workers::Who::Worker);
                    if matches!(mask, RowMask::Free) && m.consumed.len() < n {
                        break; // past a refused draft: no row after it is used
                    }
                }
            }
            this.0.stats.done.fetch_add(1, Ordering::SeqCst);
        });
    }

    /// How many of `drafts` (after `output`) the grammar accepts in a row, checked without
    /// moving the sequence's matcher past `output`. Drafts past the first refused one would be
    /// rejected in verification anyway (the row before it, masked, cannot draw it).
    pub fn valid_drafts(&self, seq: u64, output: &[u32], drafts: &[u32]) -> usize {
        if drafts.is_empty() {
            return 0;
        }
        let state = self.seq_state(seq);
        let mut m = lock(&state.matcher);
        match self.sync(&mut m, output) {
            Ok(true) if !m.matcher.is_stopped() => {}
            _ => return 0,
        }
        m.matcher
            .validate_tokens(drafts)
            .unwrap_or(0)
            .min(drafts.len())
    }

    /// The mask after `output`, from `m`'s ready ones or computed (and kept) now.
    fn mask_at(
        &self,
        m: &mut SeqMatcher,
        output: &[u32],
        eos_ids: &[u32],
        vocab: usize,
        who: workers::Who,
    ) -> RowMask {
        let n = output.len();
        if n <= m.consumed.len() && m.consumed[..n] == *output {
            if let Some((_, mask)) = m.ready.iter().find(|(k, _)| *k == n) {
                return mask.clone();
            }
        } else if n > m.consumed.len()
            && m.refused == Some(output[m.consumed.len()])
            && output[..m.consumed.len()] == m.consumed[..]
        {
            return RowMask::Free;
        }
        let mask = match self.sync(m, output) {
            // A speculative row after a draft the grammar forbids: never used.
            Ok(false) => return RowMask::Free,
            Ok(true) if m.matcher.is_stopped() => None,
            Ok(true) => {
                let counter = match who {
                    workers::Who::Worker => &self.0.stats.ahead,
                    workers::Who::Sampler => &self.0.stats.inline,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                m.matcher.compute_mask().map(Some).unwrap_or_else(|e| {
                    tracing::warn!("grammar matcher failed, ending the sequence: {e:#}");
                    None
                })
            }
            Err(e) => {
                // Only a bug gets here (the sampler only draws allowed tokens): end the
                // sequence rather than write past what the grammar accepts.
                tracing::warn!("grammar matcher failed, ending the sequence: {e:#}");
                None
            }
        };
        let mask = match mask {
            // The grammar is complete: end-of-sequence is the only choice.
            None => TokenMask::allowing(vocab, eos_ids.iter().copied()),
            Some(v) => {
                let mut mask = TokenMask::from_words(v.as_slice().to_vec(), v.len());
                // Ending is allowed where the value could be complete; the mask only knows
                // the trie's end-of-sequence id, so every one of `eos_ids` is allowed then.
                if self.0.endless {
                    mask.forbid(self.0.eos);
                } else if mask.allows(self.0.eos) {
                    for &e in eos_ids {
                        mask.allow(e);
                    }
                }
                mask
            }
        };
        let mask = RowMask::Tokens(Arc::new(mask));
        let at = m.ready.partition_point(|(k, _)| *k < n);
        m.ready.insert(at, (n, mask.clone()));
        mask
    }

    /// Bring `m` up to `output`: roll back what it consumed past the common prefix (a
    /// preempted, recomputed sequence, rejected drafts), then consume the new tokens. `false`:
    /// `output` holds a token the grammar forbids (a draft); `m` stands before it.
    fn sync(&self, m: &mut SeqMatcher, output: &[u32]) -> anyhow::Result<bool> {
        let common = m
            .consumed
            .iter()
            .zip(output)
            .take_while(|(a, b)| a == b)
            .count();
        if common < m.consumed.len() {
            let back = m.consumed.len() - common;
            if m.matcher.rollback(back).is_err() {
                *m = self.fresh();
            } else {
                m.consumed.truncate(common);
            }
            m.ready.retain(|&(k, _)| k <= common);
            m.refused = None;
        }
        let new = &output[m.consumed.len()..];
        if new.is_empty() {
            return Ok(true);
        }
        m.refused = None;
        let ok = m.matcher.try_consume_tokens(new)?;
        m.consumed.extend_from_slice(&new[..ok]);
        if ok < new.len() {
            m.refused = Some(new[ok]);
        }
        Ok(ok == new.len())
    }
}
