//! The threads that compute grammar masks off the engine thread, and the counters that show
//! where each mask was computed.
//!
//! The runner asks for a constrained sequence's next masks as soon as it knows the tokens
//! they follow (right after sampling, and again at the start of a step for what it could not
//! know then: a new sequence, the drafts to verify); a worker brings the sequence's matcher up
//! to them and computes them while the engine thread schedules and the backend runs the
//! forward. Sampling takes a mask that is ready, waits for one a worker is computing, and
//! computes one no worker has started itself. A mask is a pure function of the tokens it
//! follows, so who computes it never changes the result. Each grammar counts where its masks
//! were computed (`Constraint::mask_stats`).

use std::sync::OnceLock;

/// Who computed a mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Who {
    Worker,
    Sampler,
}

/// The mask workers: half the machine's cores, 1 to 8 (a mask takes tens to hundreds of
/// microseconds; a step's constrained rows share them). `None` when no thread could be
/// started: masks are then computed when sampling, as with the overlap off.
fn pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        rayon::ThreadPoolBuilder::new()
            .num_threads(cores.div_ceil(2).clamp(1, 8))
            .thread_name(|i| format!("metrale-grammar-{i}"))
            .build()
            .map_err(|e| {
                tracing::warn!("no grammar mask workers ({e}); masks are computed when sampling")
            })
            .ok()
    })
    .as_ref()
}

/// Run `job` on a mask worker (nothing happens when there are none: sampling computes).
pub(super) fn spawn(job: impl FnOnce() + Send + 'static) {
    let Some(pool) = pool() else { return };
    pool.spawn(move || {
        #[cfg(test)]
        hold::wait();
        job();
    });
}

/// A test hook: while a [`hold::Hold`] lives, jobs that start wait, so a test can see the
/// engine thread run a step while its masks are still being computed.
#[cfg(test)]
pub(crate) mod hold {
    use std::sync::{Condvar, Mutex, PoisonError};

    static HELD: Mutex<bool> = Mutex::new(false);
    static RELEASED: Condvar = Condvar::new();

    pub(crate) struct Hold(());

    /// Hold the workers until the returned value is dropped.
    pub(crate) fn hold() -> Hold {
        *HELD.lock().unwrap_or_else(PoisonError::into_inner) = true;
        Hold(())
    }

    impl Drop for Hold {
        fn drop(&mut self) {
            *HELD.lock().unwrap_or_else(PoisonError::into_inner) = false;
            RELEASED.notify_all();
        }
    }

    pub(super) fn wait() {
        let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        while *held {
            held = RELEASED.wait(held).unwrap_or_else(PoisonError::into_inner);
        }
    }
}
