//! Where a step's wall time goes, for finding host overhead on the GPU machine:
//! `METRALE_STEP_PROFILE=N` makes the engine thread print, every N steps, the mean time a step
//! spent scheduling, building and launching the batch on the host, waiting for the device
//! (forward + sampling until the tokens are on the host), and updating and routing the results.
//! Off (no clock reads) unless set.

use std::time::{Duration, Instant};

/// The phases of one step, in order.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Phase {
    Schedule,
    /// Batch building, uploads and kernel or graph launches.
    Launch,
    /// Until the sampled tokens are on the host.
    Device,
    /// Scheduler update, event routing, metrics.
    Update,
}

const PHASES: [&str; 4] = ["schedule", "launch", "device", "update"];

#[derive(Debug, Default)]
pub(crate) struct StepProfile {
    every: u64,
    steps: u64,
    seqs: u64,
    sums: [Duration; 4],
    mark: Option<Instant>,
}

impl StepProfile {
    /// Means printed every `every` steps (the tuning's `debug.step_profile`; 0: off).
    pub(crate) fn every(every: u64) -> Self {
        Self {
            every,
            ..Self::default()
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.every > 0
    }

    /// Starts timing a step.
    pub(crate) fn start(&mut self) {
        if self.enabled() {
            self.mark = Some(Instant::now());
        }
    }

    /// Ends `phase` (begun at the previous mark) now.
    pub(crate) fn lap(&mut self, phase: Phase) {
        if let Some(m) = self.mark {
            let now = Instant::now();
            self.sums[phase as usize] += now - m;
            self.mark = Some(now);
        }
    }

    /// Ends the step; prints the means every `every` steps.
    pub(crate) fn finish(&mut self, seqs: usize) {
        if self.mark.take().is_none() {
            return;
        }
        self.steps += 1;
        self.seqs += seqs as u64;
        if self.steps < self.every {
            return;
        }
        let n = self.steps as f64;
        let parts: Vec<String> = PHASES
            .iter()
            .zip(&self.sums)
            .map(|(name, d)| format!("{name} {:.3}", d.as_secs_f64() * 1e3 / n))
            .collect();
        let total: f64 = self.sums.iter().map(Duration::as_secs_f64).sum::<f64>() * 1e3 / n;
        eprintln!(
            "met: step profile over {} steps (mean {:.1} seqs): {} ms; total {total:.3} ms",
            self.steps,
            self.seqs as f64 / n,
            parts.join(", ")
        );
        *self = Self {
            every: self.every,
            ..Self::default()
        };
    }
}
