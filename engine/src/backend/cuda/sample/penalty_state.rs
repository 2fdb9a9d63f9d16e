//! Penalty counts kept on the device per running sequence, so a decode step does not rescan
//! and upload a request's whole history (`sampling::penalty_entries`) for every penalised row.
//!
//! A state is one u32 a vocabulary token (`sample.cu`'s `sample_penalty_absorb`): the token's
//! count in the output in bits 0..30, [`STATE_PROMPT`] when it occurs in the prompt; the token
//! is in the history when the word is not 0. `sample_prepare_*` reads the word of every column
//! beside its logit and applies the host's `penalise` with it. At Qwen3's vocabulary of 151,936
//! that is 594 KiB a sequence (256 penalised sequences: 148 MiB), kept under [`MAX_BYTES`]. A
//! dense array rather than a compact (token, count) list: it is updated by integer atomics in
//! any order with no device-side hashing or sorting, exact for any count, and reading it costs
//! the prepare kernel as much as the logits row it already copies.
//!
//! A state remembers how many tokens of the history it has absorbed and a few of them (the
//! first and last [`MARK`]), with the prompt length and vocabulary it was built for. A row of
//! a known sequence whose history still starts with those tokens, at least as long, only sends
//! the tokens appended since (one a step, a few with speculative decoding); anything else (an
//! unknown id, a shorter history after a rollback or a preemption, a history that is not an
//! extension, another prompt length or vocabulary) rebuilds the state from the whole history.
//! When several rows of one sequence come in one call (speculative drafts: each row is the
//! history before it plus the drafts it follows), the state absorbs the shortest history, the
//! committed one, and each longer row sends its few tokens past it as extras (at most
//! [`MAX_EXTRAS`]; more and the row takes the per-step entry list instead).
//!
//! States go when the runner says their sequence ended (`end`), when not seen for
//! [`STALE_CALLS`] calls that used states, and, least recently seen first, when a new one would
//! pass [`MAX_BYTES`]. Forgetting one only costs a rebuild: the tokens never depend on it.

use std::collections::{BTreeMap, HashMap};

use crate::backend::sampling::SampleRow;
use crate::sampling_params::SamplingParams;

/// A state word's flag for a token of the prompt (STATE_PROMPT in sample.cu); the host reads
/// state words only in tests.
#[cfg_attr(not(test), allow(dead_code))]
pub(super) const STATE_PROMPT: u32 = 1 << 31;
/// The most tokens a row may read past its state (MAX_EXTRAS in sample.cu).
pub(super) const MAX_EXTRAS: usize = 64;
/// Words of a segment of an absorb work list (ABSORB_WORDS in sample.cu).
pub(super) const ABSORB_WORDS: usize = 5;
/// Tokens at each end of the absorbed history compared to recognise a sequence.
const MARK: usize = 8;
/// Calls that used states after which a state not seen in any is dropped.
pub(super) const STALE_CALLS: u64 = 64;
/// The most bytes of states kept (about 440 sequences at Qwen3's vocabulary).
pub(super) const MAX_BYTES: usize = 256 << 20;

/// Does the row's sampling penalise anything (and so read a history at all)?
pub(super) fn penalised(p: &SamplingParams) -> bool {
    p.repetition_penalty != 1.0 || p.frequency_penalty != 0.0 || p.presence_penalty != 0.0
}

/// One sequence's state: its device buffer `buf` at `addr` and what it has absorbed.
struct State<B> {
    _buf: B,
    addr: u64,
    vocab: usize,
    num_prompt: usize,
    absorbed: usize,
    /// The first and the last `MARK` (or fewer) absorbed tokens.
    head: Vec<u32>,
    tail: Vec<u32>,
    last_seen: u64,
}

impl<B> State<B> {
    /// Is `history` (with `num_prompt` prompt tokens, over `vocab`) this state's history
    /// continued?
    fn continues(&self, history: &[u32], num_prompt: usize, vocab: usize) -> bool {
        self.vocab == vocab && self.num_prompt == num_prompt && self.extended_by(history)
    }

    /// Does `history` start with the absorbed tokens (as far as the marks tell)?
    fn extended_by(&self, history: &[u32]) -> bool {
        history.len() >= self.absorbed
            && history.starts_with(&self.head)
            && history[..self.absorbed].ends_with(&self.tail)
    }

    fn mark(&mut self, history: &[u32]) {
        self.absorbed = history.len();
        self.head = history[..history.len().min(MARK)].to_vec();
        self.tail = history[history.len().saturating_sub(MARK)..].to_vec();
    }
}

/// What a row's prepare reads: the state's address and the row's tokens past it, as
/// `(id, count in the output)`, distinct ids below the vocabulary.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct RowState {
    pub addr: u64,
    pub extras: Vec<(u32, u32)>,
}

/// The device work of one call: `segments` absorb segments (`ABSORB_WORDS` words each), then
/// their tokens, for `sample_penalty_absorb`; and per row of the call, its state, if any.
pub(super) struct Synced {
    pub work: Vec<u32>,
    pub segments: usize,
    pub rows: Vec<Option<RowState>>,
}

/// Every sequence's penalty state; `B` is the device buffer (a test uses `()`).
pub(in crate::backend::cuda) struct PenaltyStates<B> {
    states: HashMap<u64, State<B>>,
    /// Calls that used states so far: the clock of `last_seen`.
    calls: u64,
    /// States built from a whole history so far (for tests and the check's report).
    pub(super) rebuilds: u64,
    pub(super) max_bytes: usize,
}

impl<B> Default for PenaltyStates<B> {
    fn default() -> Self {
        Self {
            states: HashMap::new(),
            calls: 0,
            rebuilds: 0,
            max_bytes: MAX_BYTES,
        }
    }
}

impl<B> PenaltyStates<B> {
    /// How many sequences have a state.
    pub(super) fn len(&self) -> usize {
        self.states.len()
    }

    /// Drops the states of sequences that ended.
    pub(super) fn end(&mut self, seqs: &[u64]) {
        for id in seqs {
            self.states.remove(id);
        }
    }

    /// Drops every state (after a failed update, whose tokens they may lack).
    pub(super) fn clear(&mut self) {
        self.states.clear();
    }

    /// Brings the states of the penalised rows among `idx` (of `rows`, logits of `vocab`
    /// columns) up to date: new or rebuilt states come from `alloc` (a zeroed buffer of `vocab`
    /// u32 and its device address; `None` when there is no memory: those rows take the entry
    /// list). Returns the absorb work to launch before the rows' prepare and each row's state.
    pub(super) fn sync(
        &mut self,
        rows: &[SampleRow<'_>],
        idx: &[usize],
        vocab: usize,
        mut alloc: impl FnMut(usize) -> Option<(B, u64)>,
    ) -> Synced {
        let mut groups: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        for &i in idx {
            if let Some(id) = rows[i].seq.filter(|_| penalised(rows[i].params)) {
                groups.entry(id).or_default().push(i);
            }
        }
        let mut out = Synced {
            work: Vec::new(),
            segments: 0,
            rows: vec![None; rows.len()],
        };
        if groups.is_empty() {
            return out;
        }
        self.calls += 1;
        let now = self.calls;
        self.states
            .retain(|id, s| groups.contains_key(id) || now - s.last_seen <= STALE_CALLS);
        let bytes = vocab * 4;
        let mut segments: Vec<[u32; ABSORB_WORDS]> = Vec::new();
        let mut tokens: Vec<u32> = Vec::new();
        for (&id, members) in &groups {
            // The committed history: the group's shortest (its first on ties).
            let base = members
                .iter()
                .copied()
                .min_by_key(|&i| rows[i].all_token_ids.len())
                .unwrap_or(members[0]);
            let (history, num_prompt) = (rows[base].all_token_ids, rows[base].num_prompt_tokens);
            let known = self
                .states
                .get(&id)
                .is_some_and(|s| s.continues(history, num_prompt, vocab));
            if !known {
                self.states.remove(&id);
                if !self.make_room(bytes, now) {
                    continue;
                }
                let Some((buf, addr)) = alloc(vocab) else {
                    continue;
                };
                self.rebuilds += 1;
                self.states.insert(
                    id,
                    State {
                        _buf: buf,
                        addr,
                        vocab,
                        num_prompt,
                        absorbed: 0,
                        head: Vec::new(),
                        tail: Vec::new(),
                        last_seen: now,
                    },
                );
            }
            let Some(s) = self.states.get_mut(&id) else {
                continue;
            };
            let from = s.absorbed;
            if history.len() > from {
                let n = history.len() - from;
                segments.push([
                    s.addr as u32,
                    (s.addr >> 32) as u32,
                    tokens.len() as u32,
                    n as u32,
                    num_prompt.saturating_sub(from).min(n) as u32,
                ]);
                tokens.extend_from_slice(&history[from..]);
            }
            s.mark(history);
            s.last_seen = now;
            for &i in members {
                let r = &rows[i];
                let h = r.all_token_ids;
                if r.num_prompt_tokens == num_prompt
                    && s.extended_by(h)
                    && h.len() - s.absorbed <= MAX_EXTRAS
                {
                    out.rows[i] = Some(RowState {
                        addr: s.addr,
                        extras: extras(h, s.absorbed, num_prompt, vocab),
                    });
                }
            }
        }
        out.segments = segments.len();
        let head = segments.len() * ABSORB_WORDS;
        out.work = Vec::with_capacity(head + tokens.len());
        for seg in &mut segments {
            seg[2] += head as u32;
            out.work.extend_from_slice(seg);
        }
        out.work.extend_from_slice(&tokens);
        out
    }

    /// Drops the least recently seen states not used in call `now` until `bytes` more fit;
    /// false when they cannot.
    fn make_room(&mut self, bytes: usize, now: u64) -> bool {
        loop {
            let used: usize = self.states.values().map(|s| s.vocab * 4).sum();
            if used + bytes <= self.max_bytes {
                return true;
            }
            let oldest = self
                .states
                .iter()
                .filter(|(_, s)| s.last_seen < now)
                .min_by_key(|(_, s)| s.last_seen)
                .map(|(&id, _)| id);
            match oldest {
                Some(id) => {
                    self.states.remove(&id);
                }
                None => return false,
            }
        }
    }
}

/// The tokens of `history` past `absorbed` as `(id, count in the output)`, distinct ids below
/// `vocab` in first-seen order: a prompt token counts 0 (it is only in the history).
fn extras(history: &[u32], absorbed: usize, num_prompt: usize, vocab: usize) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    for (p, &t) in history.iter().enumerate().skip(absorbed) {
        if t as usize >= vocab {
            continue;
        }
        let add = u32::from(p >= num_prompt);
        match out.iter_mut().find(|(id, _)| *id == t) {
            Some(e) => e.1 += add,
            None => out.push((t, add)),
        }
    }
    out
}
