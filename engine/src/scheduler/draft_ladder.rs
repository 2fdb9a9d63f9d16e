//! `--speculative-ladder`: the most drafts a step by the number of running sequences.
//!
//! A verify step of `k + 1` rows a sequence costs little more than a plain step while a step
//! is bandwidth-bound (small batches), and more and more as the batch grows, until drafts no
//! longer pay at all. The ladder writes that down: `1:3,2:2,8:1,32:0` reads "from 1 running
//! sequence 3 drafts, from 2: 2, from 8: 1, from 32: none". The acceptance policy
//! (`draft_policy.rs`) drafts at most what the ladder allows.

use std::fmt;

use super::config::MAX_DRAFTS;

/// Most rungs a ladder has (a handful describe any GPU; the fixed size keeps configs `Copy`).
pub const MAX_RUNGS: usize = 8;

/// Rungs stored: one more than a user writes, for the `--speculative-max-batch` rung.
const STORED_RUNGS: usize = MAX_RUNGS + 1;

/// From `from` running sequences on (until the next rung), `drafts` drafts a step at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rung {
    pub from: usize,
    pub drafts: usize,
}

/// Rungs in increasing `from`, the first from 1 running sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DraftLadder {
    rungs: [Rung; STORED_RUNGS],
    len: usize,
}

/// Why a `--speculative-ladder` value was refused; each message says how to write it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LadderError {
    #[error(
        "the ladder is empty: write rungs RUNNING:DRAFTS separated by commas, e.g. 1:3,2:2,8:1"
    )]
    Empty,
    #[error(
        "`{0}` is not a rung RUNNING:DRAFTS (running sequences, then drafts a step, both whole \
         numbers), e.g. 1:3,2:2,8:1"
    )]
    BadRung(String),
    #[error(
        "the first rung starts at {0} running sequences: start it at 1 (e.g. 1:3,...) so every \
         batch size has a rung"
    )]
    FirstRung(usize),
    #[error("rung `{next}` comes after rung `{prev}`: running counts must increase left to right")]
    NotIncreasing { prev: String, next: String },
    #[error(
        "rung `{0}` drafts more than {MAX_DRAFTS} tokens a step: lower it to {MAX_DRAFTS} or fewer"
    )]
    TooManyDrafts(String),
    #[error("{0} rungs are more than {MAX_RUNGS}: merge rungs")]
    TooManyRungs(usize),
    #[error("every rung drafts 0 tokens: serve without --speculative instead")]
    NeverDrafts,
}

impl DraftLadder {
    /// `drafts` a step up to `max_batch` running sequences, none above (`--num-drafts` and
    /// `--speculative-max-batch` without a ladder).
    pub fn flat(drafts: usize, max_batch: usize) -> Self {
        let mut ladder = Self::from_rungs(&[Rung { from: 1, drafts }]);
        ladder.push(Rung {
            from: max_batch.saturating_add(1),
            drafts: 0,
        });
        ladder
    }

    fn from_rungs(rungs: &[Rung]) -> Self {
        let mut ladder = Self {
            rungs: [Rung::default(); STORED_RUNGS],
            len: 0,
        };
        for &r in rungs {
            ladder.push(r);
        }
        ladder
    }

    /// Appends a rung (callers check the count first).
    fn push(&mut self, r: Rung) {
        if self.len < STORED_RUNGS {
            self.rungs[self.len] = r;
            self.len += 1;
        }
    }

    pub fn rungs(&self) -> &[Rung] {
        &self.rungs[..self.len]
    }

    /// The most drafts a step with `running` sequences (the last rung at or below it).
    pub fn cap(&self, running: usize) -> usize {
        self.rungs()
            .iter()
            .take_while(|r| r.from <= running)
            .last()
            .map_or(0, |r| r.drafts)
    }

    /// The most drafts a step at any batch size.
    pub fn max_drafts(&self) -> usize {
        self.rungs().iter().map(|r| r.drafts).max().unwrap_or(0)
    }

    /// The most drafts one step verifies in all, with at most `max_seqs` running: each of `n`
    /// running sequences verifies at most `cap(n)`. Sizes the runner's scratch state slots.
    pub fn max_drafts_in_step(&self, max_seqs: usize) -> usize {
        // cap is constant between rungs, so n · cap(n) peaks just below a rung or at max_seqs.
        let mut ends: Vec<usize> = self
            .rungs()
            .iter()
            .map(|r| r.from.saturating_sub(1))
            .collect();
        ends.push(max_seqs);
        ends.into_iter()
            .map(|n| n.min(max_seqs))
            .map(|n| n * self.cap(n))
            .max()
            .unwrap_or(0)
    }

    /// Drafting no more than `drafts` a step, nor above `max_batch` running sequences.
    pub fn limited(&self, drafts: Option<usize>, max_batch: Option<usize>) -> Self {
        let mut out = *self;
        for r in &mut out.rungs[..out.len] {
            r.drafts = r.drafts.min(drafts.unwrap_or(r.drafts));
            if max_batch.is_some_and(|m| r.from > m) {
                r.drafts = 0;
            }
        }
        if let Some(m) = max_batch
            && out.cap(m.saturating_add(1)) > 0
            && out.len < STORED_RUNGS
        {
            let at = out.rungs().iter().take_while(|r| r.from <= m).count();
            out.rungs.copy_within(at..out.len, at + 1);
            out.rungs[at] = Rung {
                from: m.saturating_add(1),
                drafts: 0,
            };
            out.len += 1;
        }
        out
    }
}

impl std::str::FromStr for DraftLadder {
    type Err = LadderError;

    fn from_str(s: &str) -> Result<Self, LadderError> {
        let parts: Vec<&str> = s.split(',').map(str::trim).collect();
        if parts.iter().all(|p| p.is_empty()) {
            return Err(LadderError::Empty);
        }
        if parts.len() > MAX_RUNGS {
            return Err(LadderError::TooManyRungs(parts.len()));
        }
        let mut rungs: Vec<Rung> = Vec::with_capacity(parts.len());
        for p in &parts {
            let rung = p
                .split_once(':')
                .and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?)))
                .map(|(from, drafts)| Rung { from, drafts })
                .filter(|r| r.from > 0)
                .ok_or_else(|| LadderError::BadRung(p.to_string()))?;
            if rung.drafts > MAX_DRAFTS {
                return Err(LadderError::TooManyDrafts(p.to_string()));
            }
            if let Some(prev) = rungs.last().copied()
                && rung.from <= prev.from
            {
                return Err(LadderError::NotIncreasing {
                    prev: show(prev),
                    next: p.to_string(),
                });
            }
            rungs.push(rung);
        }
        if rungs[0].from != 1 {
            return Err(LadderError::FirstRung(rungs[0].from));
        }
        if rungs.iter().all(|r| r.drafts == 0) {
            return Err(LadderError::NeverDrafts);
        }
        Ok(Self::from_rungs(&rungs))
    }
}

fn show(r: Rung) -> String {
    format!("{}:{}", r.from, r.drafts)
}

impl fmt::Display for DraftLadder {
    /// The flag's own syntax: `1:3,2:2,8:1,32:0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rungs: Vec<String> = self.rungs().iter().map(|&r| show(r)).collect();
        f.write_str(&rungs.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ladder(s: &str) -> DraftLadder {
        s.parse().expect("a valid ladder")
    }

    fn refused(s: &str) -> String {
        s.parse::<DraftLadder>()
            .expect_err("should be refused")
            .to_string()
    }

    #[test]
    fn the_cap_is_the_last_rung_at_or_below_the_batch() {
        let l = ladder("1:3,2:2,8:1,32:0");
        let caps: Vec<usize> = [1, 2, 7, 8, 31, 32, 500].map(|n| l.cap(n)).to_vec();
        assert_eq!(caps, [3, 2, 2, 1, 1, 0, 0]);
        assert_eq!(l.max_drafts(), 3);
        assert_eq!(l.to_string(), "1:3,2:2,8:1,32:0");
        // Without a 0 rung, the last rung holds at any batch.
        assert_eq!(ladder(" 1:4 , 4:2 ").cap(10_000), 2);
    }

    #[test]
    fn scratch_is_the_largest_step_not_drafts_times_seqs() {
        let l = ladder("1:3,2:2,8:1,32:0");
        // 7 sequences at 2 drafts, 31 at 1: 31, where 3 drafts × 31 sequences would be 93.
        assert_eq!(l.max_drafts_in_step(256), 31);
        assert_eq!(l.max_drafts_in_step(4), 8);
        assert_eq!(l.max_drafts_in_step(1), 3);
        assert_eq!(DraftLadder::flat(3, 32).max_drafts_in_step(256), 96);
        assert_eq!(DraftLadder::flat(3, 32).max_drafts_in_step(8), 24);
    }

    #[test]
    fn num_drafts_and_max_batch_limit_a_ladder() {
        let l = ladder("1:3,2:2,8:1");
        assert_eq!(l.limited(Some(2), None).to_string(), "1:2,2:2,8:1");
        assert_eq!(l.limited(None, Some(4)).to_string(), "1:3,2:2,5:0,8:0");
        assert_eq!(l.limited(None, Some(40)).to_string(), "1:3,2:2,8:1,41:0");
        assert_eq!(DraftLadder::flat(3, 32).to_string(), "1:3,33:0");
    }

    #[test]
    fn a_bad_ladder_is_refused_with_how_to_write_it() {
        assert!(refused("").starts_with("the ladder is empty"));
        assert!(refused("1:3,,8:1").starts_with("`` is not a rung"));
        assert!(refused("1-3").starts_with("`1-3` is not a rung RUNNING:DRAFTS"));
        assert!(refused("1:three").starts_with("`1:three` is not a rung"));
        assert!(refused("0:3").starts_with("`0:3` is not a rung"));
        assert!(refused("1:-1").starts_with("`1:-1` is not a rung"));
        assert_eq!(
            refused("2:3,8:1"),
            "the first rung starts at 2 running sequences: start it at 1 (e.g. 1:3,...) so every \
             batch size has a rung"
        );
        assert_eq!(
            refused("1:3,8:1,4:0"),
            "rung `4:0` comes after rung `8:1`: running counts must increase left to right"
        );
        assert!(refused("1:17").starts_with("rung `1:17` drafts more than 16"));
        assert!(refused("1:1,2:1,3:1,4:1,5:1,6:1,7:1,8:1,9:0").starts_with("9 rungs"));
        assert!(refused("1:0,8:0").contains("without --speculative"));
    }
}
