//! Adaptive drafting: how many drafts the MTP head proposes this step.
//!
//! Two things decide it, once a step:
//!
//! 1. **The batch** (`DraftLadder`): the most drafts a step for this many running sequences.
//! 2. **Acceptance so far**: per draft position `p`, an exponentially weighted estimate of
//!    `a_p`, the chance draft `p` is accepted when the drafts before it were. With `k` drafts a
//!    verify step emits on average `E(k) = 1 + a_0 + a_0·a_1 + … + a_0·…·a_{k-1}` tokens and
//!    costs `T(k)` plain steps, so the policy drafts the `k` up to the ladder's cap with the
//!    most tokens per unit of time, `E(k) / T(k)`.
//! 3. **What a draft costs at this batch size** (`step_costs.rs`): `T(k)` as the engine timed
//!    its steady decode steps at this batch size, or `1 + c·k` before it has (`c`:
//!    `--speculative-draft-cost`, the prior). At `c = 0` drafts are free and the policy always
//!    drafts the cap (and times nothing).
//!
//! When acceptance falls, `k` falls, down to 0 (speculation off). Positions that are no longer
//! drafted get no new evidence, so every [`PROBE_EVERY`] steps below the cap the policy drafts
//! one more than its choice: a probe, which measures the next position and lets speculation
//! switch back on when acceptance recovers. A probe costs `c` of a step every `PROBE_EVERY`
//! steps (at `c = 0.43`, the H200's eager verify step, 2.7%). A batch size that drafts times a
//! plain step once it has none, and again every `PLAIN_REFRESH` of its drafting steps: a plain
//! probe of [`PLAIN_PROBE_STEPS`] steps without drafts (the first still verifies the drafts
//! proposed before it; the others are plain, and timed).
//!
//! The estimates start at [`PRIOR`] weighted as [`PRIOR_WEIGHT`] observations, then average
//! like a running mean until they reach the EWMA's weight [`ALPHA`]: a few dozen verify steps
//! decide, yet one unlucky run does not.

use super::config::MAX_DRAFTS;
use super::draft_ladder::DraftLadder;
use super::step_costs::StepCosts;

/// The estimate of each position's acceptance before any evidence: about what Qwen reports
/// for its MTP head, so a fresh engine drafts the ladder's cap.
pub const PRIOR: f64 = 0.7;
/// The prior counts as this many observations.
pub const PRIOR_WEIGHT: f64 = 4.0;
/// The EWMA's weight of a new observation once warm: an effective window of 32 verifies, in
/// which an estimate of 0.7 wobbles by ±0.06 (one standard deviation); at 1/16 (±0.08) one
/// sequence at acceptance 0.7 fell to 2 drafts on 7% of its steps.
pub const ALPHA: f64 = 1.0 / 32.0;
/// Steps below the ladder's cap between probes (a probe drafts one more than the choice).
pub const PROBE_EVERY: u32 = 16;
/// A different `k` is taken only when it yields this much more per unit of time than the
/// current one (2%): estimates wobble, and flipping between two near-equal choices gains
/// nothing.
pub const HYSTERESIS: f64 = 0.02;
/// Steps of a plain probe: one that verifies the drafts proposed before it, then
/// `step_costs::MIN_TIMED` plain ones.
pub const PLAIN_PROBE_STEPS: u32 = 3;

/// The policy's state: one per engine (acceptance is the model's on the traffic, not a
/// request's own).
#[derive(Debug, Clone, PartialEq)]
pub struct DraftPolicy {
    ladder: DraftLadder,
    draft_cost: f64,
    /// `a_p` estimates, and how many verify steps observed each position.
    acceptance: [f64; MAX_DRAFTS],
    observed: [u64; MAX_DRAFTS],
    /// Steps chosen below the cap since the last probe.
    since_probe: u32,
    /// The last choice but for probes (what the hysteresis compares against).
    current: usize,
    /// Step times by batch size and drafts, once the engine reports any.
    costs: StepCosts,
    timed: bool,
    /// Steps left of a plain probe.
    plain_left: u32,
}

impl DraftPolicy {
    pub fn new(ladder: DraftLadder, draft_cost: f64) -> Self {
        Self {
            ladder,
            draft_cost,
            acceptance: [PRIOR; MAX_DRAFTS],
            observed: [0; MAX_DRAFTS],
            since_probe: 0,
            current: ladder.max_drafts(),
            costs: StepCosts::default(),
            timed: false,
            plain_left: 0,
        }
    }

    /// A steady decode step (every sequence one new token, verifying and proposing `drafts`)
    /// of `running` sequences took `secs` of wall time.
    pub fn record_step(&mut self, running: usize, drafts: usize, secs: f64) {
        if self.draft_cost > 0.0 {
            self.timed = true;
            self.costs.record(running, drafts, secs);
        }
    }

    /// Drafts to propose this step with `running` sequences.
    pub fn choose(&mut self, running: usize) -> usize {
        let cap = self.ladder.cap(running).min(MAX_DRAFTS);
        if self.draft_cost <= 0.0 {
            // Drafts are free: the cap, whatever the acceptance.
            self.current = cap;
            return cap;
        }
        if self.plain_left > 0 {
            self.plain_left -= 1;
            return 0;
        }
        if self.timed && cap > 0 && self.current > 0 && self.costs.needs_plain(running) {
            self.plain_left = PLAIN_PROBE_STEPS - 1;
            return 0;
        }
        let now = self.rate(running, self.current.min(cap));
        let best = (0..=cap)
            .map(|k| (k, self.rate(running, k)))
            .fold((0, f64::MIN), |b, x| if x.1 >= b.1 { x } else { b });
        let mut k = if best.1 > now * (1.0 + HYSTERESIS) {
            best.0
        } else {
            self.current.min(cap)
        };
        if k < cap {
            self.since_probe += 1;
            if self.since_probe >= PROBE_EVERY {
                self.since_probe = 0;
                self.current = k;
                return k + 1;
            }
        } else {
            self.since_probe = 0;
        }
        k = k.min(cap);
        self.current = k;
        if k > 0 {
            self.costs.drafted(running);
        }
        k
    }

    /// One sequence's verify step: `proposed` drafts, the first `accepted` of them accepted.
    /// Positions up to the first rejection are evidence; those after it were never tried.
    pub fn observe(&mut self, proposed: usize, accepted: usize) {
        for p in 0..proposed.min(accepted + 1).min(MAX_DRAFTS) {
            self.observed[p] += 1;
            let w = (1.0 / (self.observed[p] as f64 + PRIOR_WEIGHT)).max(ALPHA);
            let x = if p < accepted { 1.0 } else { 0.0 };
            self.acceptance[p] += w * (x - self.acceptance[p]);
        }
    }

    /// Expected tokens per unit of time with `k` drafts at `running` sequences: `E(k) / T(k)`.
    fn rate(&self, running: usize, k: usize) -> f64 {
        let mut reach = 1.0;
        let mut tokens = 1.0;
        for a in &self.acceptance[..k] {
            reach *= a;
            tokens += reach;
        }
        tokens / self.costs.step_cost(running, k, self.draft_cost)
    }

    /// What a draft costs at `running` sequences and `k` drafts, in plain steps beyond one, as
    /// timed; the prior before both were.
    pub fn draft_cost(&self, running: usize, k: usize) -> f64 {
        self.costs
            .measured_draft_cost(running, k)
            .unwrap_or(self.draft_cost)
    }

    /// The current `a_p` estimates, position 0 first.
    pub fn acceptance(&self) -> &[f64; MAX_DRAFTS] {
        &self.acceptance
    }

    pub fn ladder(&self) -> &DraftLadder {
        &self.ladder
    }
}

#[cfg(test)]
#[path = "draft_policy_tests.rs"]
mod tests;
