//! What a draft really costs on this machine: decode steps timed by batch size and drafts.
//!
//! A verify step of `k + 1` rows a sequence costs little more than a plain step while a step
//! is bound by reading the weights (one sequence), and much more once the rows themselves
//! cost (a few sequences of a MoE model read k + 1 times the experts). One constant cost a
//! draft cannot hold both: on the H200 the 35B-A3B FP8 shape measured about 0.42 of a plain
//! step a draft at one sequence and 0.9 at eight (docs/performance-log), so a constant 0.35
//! kept drafting at eight sequences and lost 12%.
//!
//! [`StepCosts`] keeps a running mean of the wall time of steady decode steps (every sequence
//! one new token, every sequence verifying and proposing the same number of drafts) for each
//! batch bucket (1, 2, 3-4, 5-8, …) and draft count. The policy reads a draft's cost at a
//! bucket from them: `T(k) / T(0)` where both were timed, else the cost a draft measured at
//! another `k` of the bucket, else its prior. Plain steps are timed when the policy asks for
//! them (`needs_plain`): a bucket that drafts times a plain step again every
//! [`PLAIN_REFRESH`] of its steps, as contexts grow and step times drift.

use super::config::MAX_DRAFTS;

/// Batch buckets: `1, 2, 3-4, 5-8, …, 257-512`, then everything larger.
pub const BUCKETS: usize = 11;
/// Timed steps before a bucket's mean is trusted.
pub const MIN_TIMED: u32 = 2;
/// The running mean's weight of a new time once warm (an effective window of 16 steps).
pub const TIME_ALPHA: f64 = 1.0 / 16.0;
/// Steps a bucket drafts between two timed plain steps.
pub const PLAIN_REFRESH: u32 = 256;
/// The least a draft costs, in plain steps: each reads at least the head's 248k-row LM head
/// once more (about 0.04 of a plain step at the 35B-A3B shape on an H200). A timing that says
/// less is noise, or a "plain" step that pays for something a true plain step does not (with
/// speculation on, it still feeds the head's cache); without this floor a draft timed as free
/// won every tie with no drafts, and at acceptance 0 the engine kept drafting (0.74x plain at
/// C=1 on an H100, 2026-12-05).
pub const MIN_DRAFT_COST: f64 = 0.05;
/// Drafting steps after a plain timing before a suspect one is taken again: a bucket whose
/// drafting steps time below `plain · (1 + MIN_DRAFT_COST · k)` has a plain time from a slow
/// moment (a host hiccup), and the next plain probe replaces it rather than averaging into it.
pub const SUSPECT_REFRESH: u32 = 16;

/// The bucket of a step with `running` sequences.
pub fn bucket(running: usize) -> usize {
    let n = running.max(1);
    ((usize::BITS - (n - 1).leading_zeros()) as usize).min(BUCKETS - 1)
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Mean {
    secs: f64,
    timed: u32,
}

impl Mean {
    fn add(&mut self, secs: f64) {
        self.timed = self.timed.saturating_add(1);
        let w = (1.0 / self.timed as f64).max(TIME_ALPHA);
        self.secs += w * (secs - self.secs);
    }

    fn get(&self) -> Option<f64> {
        (self.timed >= MIN_TIMED && self.secs > 0.0).then_some(self.secs)
    }
}

/// Mean step times by (bucket, drafts), and each bucket's drafting steps since its last timed
/// plain step.
#[derive(Debug, Clone, PartialEq)]
pub struct StepCosts {
    means: [[Mean; MAX_DRAFTS + 1]; BUCKETS],
    since_plain: [u32; BUCKETS],
    /// A suspect plain time was taken again since the bucket's last regular refresh: if drafts
    /// still time that cheap, they are (a dense model at one sequence), and asking again every
    /// [`SUSPECT_REFRESH`] steps would only cost plain steps.
    rechecked: [bool; BUCKETS],
}

impl Default for StepCosts {
    fn default() -> Self {
        Self {
            means: [[Mean::default(); MAX_DRAFTS + 1]; BUCKETS],
            since_plain: [0; BUCKETS],
            rechecked: [false; BUCKETS],
        }
    }
}

impl StepCosts {
    /// A steady decode step of `running` sequences, each verifying and proposing `drafts`,
    /// took `secs`.
    pub fn record(&mut self, running: usize, drafts: usize, secs: f64) {
        if drafts > MAX_DRAFTS || !(secs > 0.0 && secs.is_finite()) {
            return;
        }
        let b = bucket(running);
        if drafts == 0 && self.since_plain[b] > 0 {
            if self.since_plain[b] >= PLAIN_REFRESH {
                self.rechecked[b] = false;
            } else if self.plain_suspect(b) && !self.rechecked[b] {
                self.means[b][0] = Mean::default();
                self.rechecked[b] = true;
            }
        }
        self.means[b][drafts].add(secs);
        if drafts == 0 {
            self.since_plain[b] = 0;
        }
    }

    /// Whether bucket `b`'s plain time says some draft count costs less than a draft can.
    fn plain_suspect(&self, b: usize) -> bool {
        let Some(plain) = self.means[b][0].get() else {
            return false;
        };
        (1..=MAX_DRAFTS).any(|k| {
            self.means[b][k]
                .get()
                .is_some_and(|t| t < plain * (1.0 + MIN_DRAFT_COST * k as f64))
        })
    }

    /// A step of `running` sequences that drafts (timed or not): counts toward the next plain
    /// step's timing.
    pub fn drafted(&mut self, running: usize) {
        let b = bucket(running);
        self.since_plain[b] = self.since_plain[b].saturating_add(1);
    }

    /// Whether the bucket of `running` wants a plain step timed: it has none yet, has drafted
    /// [`PLAIN_REFRESH`] steps since its last, or [`SUSPECT_REFRESH`] since a suspect one.
    pub fn needs_plain(&self, running: usize) -> bool {
        let b = bucket(running);
        self.means[b][0].get().is_none()
            || self.since_plain[b] >= PLAIN_REFRESH
            || (self.since_plain[b] >= SUSPECT_REFRESH
                && !self.rechecked[b]
                && self.plain_suspect(b))
    }

    /// What `k` drafts a sequence make a step of `running` sequences cost, in plain steps:
    /// measured where the bucket has the times, else `1 + c·k` with the cost a draft measured
    /// at another draft count of the bucket (the most timed), else with `prior`.
    pub fn step_cost(&self, running: usize, k: usize, prior: f64) -> f64 {
        if k == 0 {
            return 1.0;
        }
        let b = bucket(running);
        let Some(plain) = self.means[b][0].get() else {
            return 1.0 + prior * k as f64;
        };
        let floor = 1.0 + MIN_DRAFT_COST * k as f64;
        if let Some(t) = self.means[b].get(k).and_then(Mean::get) {
            return (t / plain).max(floor);
        }
        let per_draft = (1..=MAX_DRAFTS)
            .filter_map(|j| Some((j, self.means[b][j].get()?, self.means[b][j].timed)))
            .max_by_key(|&(_, _, timed)| timed)
            .map_or(prior, |(j, t, _)| {
                ((t / plain - 1.0) / j as f64).max(MIN_DRAFT_COST)
            });
        1.0 + per_draft * k as f64
    }

    /// The cost a draft measured at the bucket of `running` (what `step_cost` charges one
    /// draft beyond a plain step), for `/metrics`; `None` before both were timed.
    pub fn measured_draft_cost(&self, running: usize, k: usize) -> Option<f64> {
        let b = bucket(running);
        self.means[b][0].get()?;
        let timed = (1..=MAX_DRAFTS).any(|j| self.means[b][j].get().is_some());
        (timed && k > 0).then(|| (self.step_cost(running, k, 0.0) - 1.0) / k as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_double() {
        let b: Vec<usize> = [1, 2, 3, 4, 5, 8, 9, 16, 17, 512, 513, 100_000]
            .iter()
            .map(|&n| bucket(n))
            .collect();
        assert_eq!(b, [0, 1, 2, 2, 3, 3, 4, 4, 5, 9, 10, 10]);
        assert_eq!(bucket(0), 0);
    }

    #[test]
    fn the_prior_until_both_are_timed() {
        let mut c = StepCosts::default();
        assert_eq!(c.step_cost(8, 2, 0.35), 1.7);
        assert!(c.needs_plain(8));
        c.record(8, 2, 0.019);
        c.record(8, 2, 0.019);
        // Drafted steps alone: no plain time to divide by.
        assert_eq!(c.step_cost(8, 2, 0.35), 1.7);
        assert_eq!(c.measured_draft_cost(8, 2), None);
        c.record(8, 0, 0.007);
        assert_eq!(
            c.step_cost(8, 2, 0.35),
            1.7,
            "one plain time is not trusted"
        );
        c.record(8, 0, 0.007);
        assert!(!c.needs_plain(8));
        let two = c.step_cost(8, 2, 0.35);
        assert!((two - 19.0 / 7.0).abs() < 1e-9, "{two}");
        // Three drafts, never timed: the bucket's cost a draft, (19/7 - 1) / 2 each.
        let three = c.step_cost(8, 3, 0.35);
        assert!((three - (1.0 + 3.0 * 6.0 / 7.0)).abs() < 1e-9, "{three}");
        let d = c.measured_draft_cost(8, 2).expect("timed");
        assert!((d - 6.0 / 7.0).abs() < 1e-9, "{d}");
        // Other buckets keep the prior.
        assert_eq!(c.step_cost(1, 2, 0.35), 1.7);
        assert_eq!(c.step_cost(16, 2, 0.35), 1.7);
        assert_eq!(c.step_cost(5, 0, 0.35), 1.0);
    }

    #[test]
    fn a_drafting_bucket_times_a_plain_step_again_after_the_refresh() {
        let mut c = StepCosts::default();
        c.record(1, 0, 0.0035);
        c.record(1, 0, 0.0035);
        for _ in 0..PLAIN_REFRESH - 1 {
            c.drafted(1);
        }
        assert!(!c.needs_plain(1));
        c.drafted(1);
        assert!(c.needs_plain(1));
        c.record(1, 0, 0.0035);
        assert!(!c.needs_plain(1));
    }

    #[test]
    fn a_plain_time_from_a_slow_moment_is_taken_again_and_replaced() {
        let mut c = StepCosts::default();
        // A plain step timed during a hiccup (10 ms), drafts at their true 5 ms.
        for _ in 0..2 {
            c.record(1, 0, 0.010);
            c.record(1, 1, 0.005);
        }
        assert!(
            !c.needs_plain(1),
            "a suspect plain time waits a few drafting steps"
        );
        for _ in 0..SUSPECT_REFRESH {
            c.drafted(1);
        }
        assert!(c.needs_plain(1));
        // The probe's times replace the suspect mean instead of averaging into it.
        c.record(1, 0, 0.004);
        c.record(1, 0, 0.004);
        assert!((c.step_cost(1, 1, 0.0) - 1.25).abs() < 1e-9);
        assert!(!c.needs_plain(1));
        // Drafts that really are that cheap are asked about once, not every 16 steps.
        for _ in 0..40 {
            c.record(1, 1, 0.004);
        }
        for _ in 0..SUSPECT_REFRESH {
            c.drafted(1);
        }
        assert!(c.plain_suspect(bucket(1)));
        assert!(
            !c.needs_plain(1),
            "a confirmed plain time waits for the regular refresh"
        );
        for _ in SUSPECT_REFRESH..PLAIN_REFRESH {
            c.drafted(1);
        }
        assert!(c.needs_plain(1));
    }

    #[test]
    fn times_drift_with_the_running_mean_and_bad_times_are_ignored() {
        let mut c = StepCosts::default();
        for _ in 0..4 {
            c.record(2, 0, 0.004);
            c.record(2, 1, 0.005);
        }
        c.record(2, 1, f64::NAN);
        c.record(2, 1, -1.0);
        c.record(2, MAX_DRAFTS + 1, 0.1);
        assert!((c.step_cost(2, 1, 0.0) - 1.25).abs() < 1e-9);
        for _ in 0..200 {
            c.record(2, 1, 0.008);
        }
        assert!((c.step_cost(2, 1, 0.0) - 2.0).abs() < 1e-4);
        // A verify step timed below a plain one (noise) costs the least a draft can.
        for _ in 0..200 {
            c.record(2, 1, 0.001);
        }
        assert_eq!(c.step_cost(2, 1, 0.0), 1.0 + MIN_DRAFT_COST);
        assert_eq!(c.step_cost(2, 3, 0.0), 1.0 + 3.0 * MIN_DRAFT_COST);
    }
}
