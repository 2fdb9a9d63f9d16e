//! FIFO continuous-batching scheduler with chunked prefill and preemption by recompute.
//!
//! There is no prefill or decode mode: each request has `num_computed_tokens` catching up to
//! its `num_tokens` (prompt + generated), and each step hands out a token budget, running
//! requests first. It does not decide admission: `add_request` takes a request that
//! `admission.rs` validated against the same limits and queues it. The engine core drives it:
//!
//! ```text
//! add_request / abort_request / finish_request   (between steps)
//! let out = scheduler.schedule();
//! let res = runner.execute(&out);
//! let events = scheduler.update_from_output(&out, &res);
//! drop(out);   // before the next schedule(), so token vectors are appended in place
//! ```

mod config;
mod core;
mod draft_ladder;
mod draft_policy;
pub mod io;
mod output;
mod step_costs;
mod table_rows;

pub use config::{MAX_DRAFTS, SchedulerConfig, SchedulerConfigError, SpeculativeConfig};
pub use core::Scheduler;
pub use draft_ladder::{DraftLadder, LadderError, MAX_RUNGS, Rung};
pub use draft_policy::DraftPolicy;
pub use output::{EngineEvent, FinishReason, FinishedRequest, SchedulerStats, SpecDecodeStats};

#[cfg(test)]
mod group_tests;
#[cfg(test)]
mod sim_tests;
#[cfg(test)]
mod stop_tests;
#[cfg(test)]
mod tests;
