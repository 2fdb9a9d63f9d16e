//! [`LocalGroup`]: the ranks of a tensor-parallel group as threads of one process, their
//! collectives over host copies of the tensors (`Backend::to_host`, then `upload`), summed in
//! rank order so every rank gets the same bits. For the CPU reference and tests: it checks
//! the sharding's arithmetic; a device group would use NCCL.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::host::{self, HostValues, collective_err};
use super::{Collective, Shard};
use crate::backend::{Backend, Result};

/// Each rank's contribution to the collective under way: its values and shape.
type Slots = Vec<HostValues>;

struct State {
    slots: Slots,
    /// Ranks arrived at the barrier under way, and how many barriers have opened.
    arrived: usize,
    generation: u64,
    /// A rank that left the group (its handle dropped, a panic included): the others' next
    /// wait fails instead of waiting for it forever.
    left: Option<usize>,
}

struct Shared {
    world: usize,
    state: Mutex<State>,
    opened: Condvar,
}

/// One rank's handle on its group.
pub struct LocalGroup {
    shard: Shard,
    shared: Arc<Shared>,
}

impl LocalGroup {
    /// A group of `world` ranks: one handle each, to be moved to that rank's thread.
    pub fn new(world: usize) -> Vec<LocalGroup> {
        Self::with_experts(world, false)
    }

    /// [`LocalGroup::new`], the experts split whole over the ranks when `expert_parallel`.
    pub fn with_experts(world: usize, expert_parallel: bool) -> Vec<LocalGroup> {
        let shared = Arc::new(Shared {
            world,
            state: Mutex::new(State {
                slots: vec![(Vec::new(), Vec::new()); world],
                arrived: 0,
                generation: 0,
                left: None,
            }),
            opened: Condvar::new(),
        });
        (0..world)
            .map(|rank| LocalGroup {
                shard: Shard {
                    expert_parallel,
                    ..Shard::new(rank, world)
                },
                shared: shared.clone(),
            })
            .collect()
    }

    /// Every rank's values and shape, once all have put theirs.
    fn exchange<B: Backend>(&self, b: &B, t: &B::Tensor) -> Result<Slots> {
        let mine = host::download(b, t)?;
        self.lock()?.slots[self.shard.rank] = mine;
        self.barrier()?;
        let all = self.lock()?.slots.clone();
        // Nobody writes the next collective's values before everyone has read these.
        self.barrier()?;
        Ok(all)
    }

    /// Waits for every rank; an error, not a hang, once a rank has left the group.
    fn barrier(&self) -> Result<()> {
        let mut st = self.lock()?;
        st.arrived += 1;
        if st.arrived == self.shared.world {
            st.arrived = 0;
            st.generation += 1;
            self.shared.opened.notify_all();
            return Ok(());
        }
        let generation = st.generation;
        while st.generation == generation {
            if let Some(rank) = st.left {
                return Err(collective_err(format!(
                    "rank {rank} left the group before this collective"
                )));
            }
            st = self
                .shared
                .opened
                .wait(st)
                .map_err(|_| collective_err("a rank panicked".into()))?;
        }
        Ok(())
    }

    fn lock(&self) -> Result<MutexGuard<'_, State>> {
        self.shared
            .state
            .lock()
            .map_err(|_| collective_err("a rank panicked".into()))
    }
}

impl Drop for LocalGroup {
    fn drop(&mut self) {
        let mut st = match self.shared.state.lock() {
            Ok(st) => st,
            Err(poisoned) => poisoned.into_inner(),
        };
        st.left.get_or_insert(self.shard.rank);
        self.shared.opened.notify_all();
    }
}

impl<B: Backend> Collective<B> for LocalGroup {
    fn shard(&self) -> Shard {
        self.shard
    }

    fn all_reduce_sum(&self, b: &B, t: &mut B::Tensor) -> Result<()> {
        let all = self.exchange(b, t)?;
        *t = host::upload(b, &host::sum(&all)?)?;
        Ok(())
    }

    fn all_gather_cols(&self, b: &B, part: &B::Tensor) -> Result<B::Tensor> {
        let all = self.exchange(b, part)?;
        host::upload(b, &host::cols(&all)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::CpuBackend;

    #[test]
    fn ranks_sum_in_order_and_a_rank_that_leaves_fails_the_others_not_hangs() {
        let b = CpuBackend::default();
        let threads: Vec<_> = LocalGroup::new(3)
            .into_iter()
            .map(|g| {
                std::thread::spawn(move || {
                    let b = CpuBackend::default();
                    let r = g.shard.rank as f32;
                    let mut t = host::upload(&b, &(vec![r, 10.0 * r], vec![1, 2])).expect("tensor");
                    Collective::<CpuBackend>::all_reduce_sum(&g, &b, &mut t).expect("reduce");
                    let cols =
                        Collective::<CpuBackend>::all_gather_cols(&g, &b, &t).expect("gather");
                    (
                        b.to_host(&t).expect("host"),
                        b.to_host(&cols).expect("host"),
                    )
                })
            })
            .collect();
        for t in threads {
            let (sum, gathered) = t.join().expect("a rank");
            assert_eq!(sum, [3.0, 30.0]);
            assert_eq!(gathered, [3.0, 30.0, 3.0, 30.0, 3.0, 30.0]);
        }
        // Rank 1 leaves (its thread ended, or panicked): rank 0's collective fails.
        let mut group = LocalGroup::new(2);
        drop(group.pop());
        let g = group.pop().expect("rank 0");
        let mut t = host::upload(&b, &(vec![1.0], vec![1, 1])).expect("tensor");
        let e = Collective::<CpuBackend>::all_reduce_sum(&g, &b, &mut t).expect_err("no rank 1");
        assert!(e.to_string().contains("rank 1 left the group"), "{e}");
    }
}
