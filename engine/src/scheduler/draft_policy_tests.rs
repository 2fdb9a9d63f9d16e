//! The policy driven by synthetic acceptance: each step every running sequence verifies what
//! the policy chose, each draft accepted with a given probability while those before it were
//! (what `METRALE_SPEC_FORCE_ACCEPT` does in the runner).

use super::*;
use crate::scheduler::step_costs::MIN_DRAFT_COST;

/// A number in `[0, 1)` from a counter (splitmix64): the same sequence every run.
fn noise(i: u64) -> f64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
}

struct Sim {
    policy: DraftPolicy,
    draws: u64,
    /// The drafts the last step proposed (what the next one verifies).
    prev: usize,
}

impl Sim {
    fn new(ladder: &str, cost: f64) -> Self {
        Self {
            policy: DraftPolicy::new(ladder.parse().expect("ladder"), cost),
            draws: 0,
            prev: 0,
        }
    }

    /// As [`Sim::run`] on a machine where a step of `running` sequences verifying and
    /// proposing `k` drafts takes `plain · (1 + cost·k)` seconds, reported to the policy as
    /// the scheduler does (steady steps only).
    fn run_timed(
        &mut self,
        steps: usize,
        running: usize,
        rate: f64,
        (plain, cost): (f64, f64),
    ) -> Vec<usize> {
        (0..steps)
            .map(|_| {
                let k = self.run(1, running, rate)[0];
                if k == self.prev {
                    let secs = plain * (1.0 + cost * k as f64);
                    self.policy.record_step(running, k, secs);
                }
                self.prev = k;
                k
            })
            .collect()
    }

    /// `steps` steps with `running` sequences at acceptance `rate`; each step's choice.
    fn run(&mut self, steps: usize, running: usize, rate: f64) -> Vec<usize> {
        (0..steps)
            .map(|_| {
                let k = self.policy.choose(running);
                for _ in 0..running {
                    let accepted = (0..k)
                        .take_while(|_| {
                            self.draws += 1;
                            noise(self.draws) < rate
                        })
                        .count();
                    self.policy.observe(k, accepted);
                }
                k
            })
            .collect()
    }
}

const LADDER: &str = "1:3,2:2,8:1,32:0";
/// A draft's cost once the verify step is as cheap as issue 33 asks (≥ 1.65× at 0.7, C=1,
/// needs c ≤ 0.18).
const CHEAP: f64 = 0.15;

fn count(choices: &[usize], k: usize) -> usize {
    choices.iter().filter(|&&c| c == k).count()
}

/// The first step that chose `k` drafts.
fn first(choices: &[usize], k: usize) -> usize {
    let at = choices.iter().position(|&c| c == k);
    at.unwrap_or_else(|| panic!("never {k} drafts: {choices:?}"))
}

#[test]
fn at_acceptance_0_drafting_stops_after_a_short_warm_up_and_only_probes() {
    let mut sim = Sim::new(LADDER, CHEAP);
    let choices = sim.run(400, 1, 0.0);
    let first_off = choices.iter().position(|&k| k == 0).expect("never stopped");
    assert!(first_off <= 20, "still drafting after {first_off} steps");
    // From then on only probes draft: one draft every PROBE_EVERY steps.
    let rest = &choices[first_off..];
    assert!(rest.iter().all(|&k| k <= 1), "{rest:?}");
    let probes = count(rest, 1);
    let expected = rest.len() / PROBE_EVERY as usize;
    assert!(
        probes.abs_diff(expected) <= 1,
        "{probes} probes in {} steps",
        rest.len()
    );
}

#[test]
fn at_acceptance_0_7_it_keeps_3_drafts_at_c1() {
    let mut sim = Sim::new(LADDER, CHEAP);
    let choices = sim.run(2_000, 1, 0.7);
    assert_eq!(choices[0], 3, "a fresh engine drafts the cap");
    let three = count(&choices, 3);
    assert!(
        three * 100 >= choices.len() * 99 && choices.iter().all(|&k| k >= 2),
        "3 drafts on {three} of {} steps, estimates {:?}",
        choices.len(),
        sim.policy.acceptance()
    );
}

#[test]
fn the_ladder_caps_the_drafts_by_running_sequences() {
    let mut sim = Sim::new(LADDER, CHEAP);
    for (running, want) in [(2, 2), (7, 2), (8, 1), (31, 1), (32, 0), (100, 0), (1, 3)] {
        let choices = sim.run(200, running, 0.9);
        assert_eq!(count(&choices, want), choices.len(), "{running} running");
    }
}

#[test]
fn acceptance_per_position_sets_the_depth() {
    // Position 0 usually right, the rest usually wrong: one draft pays, three do not.
    let mut sim = Sim::new(LADDER, CHEAP);
    sim.run(300, 1, 0.7);
    for _ in 0..300 {
        let k = sim.policy.choose(1);
        sim.policy.observe(k, k.min(1));
    }
    let a = *sim.policy.acceptance();
    assert!(a[0] > 0.95 && a[1] < 0.2, "{a:?}");
    let k: Vec<usize> = (0..20).map(|_| sim.policy.choose(1)).collect();
    assert!(count(&k, 1) >= 18, "{k:?}");
}

#[test]
fn the_cost_of_a_draft_sets_how_much_acceptance_pays() {
    // The verify step of issue 33's table (3.5 ms plain, 9.4 ms with 3 drafts: 0.56 of a
    // plain step a draft): at acceptance 0.7 one draft gives the most tokens per unit of time
    // (1.09× plain; two 1.03×, three 0.95×, as measured there: 0.98×).
    let mut sim = Sim::new(LADDER, 0.56);
    let choices = sim.run(500, 1, 0.7);
    // Every PROBE_EVERY steps a probe drafts 2.
    let ones = count(&choices[100..], 1);
    assert!(ones >= 400 - 400 / 16 - 4, "{:?}", &choices[100..]);
    // Free drafts: always the cap, even when none is accepted (the engine before adaptive
    // drafting).
    let mut sim = Sim::new(LADDER, 0.0);
    let choices = sim.run(300, 1, 0.0);
    assert_eq!(count(&choices, 3), 300);
}

#[test]
fn speculation_switches_back_on_when_acceptance_recovers() {
    let mut sim = Sim::new(LADDER, CHEAP);
    let off = sim.run(500, 1, 0.0);
    assert_eq!(off[off.len() - 1], 0);
    let on = sim.run(600, 1, 0.7);
    let back = first(&on, 3);
    assert!(back < 300, "back at 3 drafts only after {back} steps");
    assert_eq!(count(&on[back + 100..], 3), on.len() - back - 100);
    // With more sequences a step, each probe brings more evidence: faster.
    let mut sim = Sim::new(LADDER, CHEAP);
    sim.run(500, 4, 0.0);
    let on = sim.run(300, 4, 0.7);
    let back = first(&on, 2);
    assert!(back < 100, "back at 2 drafts only after {back} steps");
}

#[test]
fn timed_steps_replace_the_prior_cost_by_batch_size() {
    // The 35B-A3B FP8 shape on the H200 at acceptance 0.7 (docs/performance-log, part 11): a
    // draft cost about 0.42 of a plain step at one sequence and 0.9 at eight. With the prior
    // 0.35 everywhere the policy drafted 2 at eight and lost 12%; timed, it stops there and
    // keeps drafting at one.
    let mut sim = Sim::new("1:3", 0.35);
    let eight = sim.run_timed(2_000, 8, 0.7, (0.0069, 0.9));
    let drafting = eight[200..].iter().filter(|&&k| k > 0).count();
    assert!(
        drafting <= 1_800 / 16 + 4,
        "{drafting} drafting steps of 1800"
    );
    let cost = sim.policy.draft_cost(8, 1);
    assert!((cost - 0.9).abs() < 0.01, "{cost}");
    // One sequence, cheap drafts: the cap, but for a plain probe every PLAIN_REFRESH steps.
    let one = sim.run_timed(2_000, 1, 0.7, (0.0035, 0.15));
    let three = count(&one[200..], 3);
    assert!(
        three >= 1_800 - 1_800 / 256 * 3 - 30,
        "{three} of 1800 at 3 drafts"
    );
    let plain = count(&one[200..], 0);
    assert!(
        plain >= 1_800 / 300 * 3,
        "{plain} plain steps: the probes stopped"
    );
    // Untimed (an engine that reports nothing) never probes plain.
    let mut sim = Sim::new("1:3", 0.15);
    assert_eq!(count(&sim.run(1_000, 1, 0.7), 0), 0);
}

#[test]
fn drafts_timed_as_free_do_not_keep_drafting_at_acceptance_0() {
    // An H100 at forced acceptance 0 (2026-12-05): with speculation on, a step with no drafts
    // still fed the head's cache on an eager path, so a one-draft step timed no slower than
    // it; T(1) / T(0) was clamped to 1, a draft tied with none, ties went to drafting, and the
    // engine drafted every step at 0.74x plain. Drafts always cost something.
    let mut sim = Sim::new("1:3", 0.35);
    let choices = sim.run_timed(600, 1, 0.0, (0.005, 0.0));
    let drafting = choices[100..].iter().filter(|&&k| k > 0).count();
    assert!(
        drafting <= 500 / PROBE_EVERY as usize + 4,
        "{drafting} drafting steps of 500"
    );
    let cost = sim.policy.draft_cost(1, 1);
    assert!((cost - MIN_DRAFT_COST).abs() < 1e-9, "{cost}");
}
