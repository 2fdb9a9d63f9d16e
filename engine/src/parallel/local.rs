//! [`LocalGroup`]: the ranks of a tensor-parallel group as threads of one process, their
//! collectives over host copies of the tensors (`Backend::to_host`, then `upload`), summed in
//! rank order so every rank gets the same bits. For the CPU reference and tests: it checks
//! the sharding's arithmetic; a device group would use NCCL.

use std::sync::{Arc, Barrier, Mutex};

use super::{Collective, Shard};
use crate::backend::{Backend, BackendError, Result};
use crate::loader::{DType, HostData, HostTensor};

/// Each rank's contribution to the collective under way: its values and shape.
type Slots = Vec<(Vec<f32>, Vec<usize>)>;

struct Shared {
    barrier: Barrier,
    slots: Mutex<Slots>,
}

/// One rank's handle on its group.
pub struct LocalGroup {
    shard: Shard,
    shared: Arc<Shared>,
}

impl LocalGroup {
    /// A group of `world` ranks: one handle each, to be moved to that rank's thread.
    pub fn new(world: usize) -> Vec<LocalGroup> {
        let shared = Arc::new(Shared {
            barrier: Barrier::new(world),
            slots: Mutex::new(vec![(Vec::new(), Vec::new()); world]),
        });
        (0..world)
            .map(|rank| LocalGroup {
                shard: Shard { rank, world },
                shared: shared.clone(),
            })
            .collect()
    }

    /// Every rank's values and shape, once all have put theirs.
    fn exchange<B: Backend>(&self, b: &B, t: &B::Tensor) -> Result<Slots> {
        let mine = (b.to_host(t)?, b.shape(t).to_vec());
        self.lock()?[self.shard.rank] = mine;
        self.shared.barrier.wait();
        let all = self.lock()?.clone();
        // Nobody writes the next collective's values before everyone has read these.
        self.shared.barrier.wait();
        Ok(all)
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Slots>> {
        self.shared
            .slots
            .lock()
            .map_err(|_| collective_err("a rank panicked".into()))
    }
}

fn collective_err(message: String) -> BackendError {
    BackendError::Shape {
        op: "collective",
        message,
    }
}

fn upload<B: Backend>(b: &B, shape: Vec<usize>, values: &[f32]) -> Result<B::Tensor> {
    let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    b.upload(&HostTensor {
        shape,
        data: HostData::Raw {
            dtype: DType::F32,
            bytes: std::borrow::Cow::Owned(bytes),
        },
    })
}

impl<B: Backend> Collective<B> for LocalGroup {
    fn shard(&self) -> Shard {
        self.shard
    }

    fn all_reduce_sum(&self, b: &B, t: &mut B::Tensor) -> Result<()> {
        let all = self.exchange(b, t)?;
        let shape = all[0].1.clone();
        let mut sum = vec![0f32; all[0].0.len()];
        for (values, s) in &all {
            if *s != shape {
                return Err(collective_err(format!(
                    "all_reduce over shapes {s:?} and {shape:?}"
                )));
            }
            for (a, v) in sum.iter_mut().zip(values) {
                *a += v;
            }
        }
        *t = upload(b, shape, &sum)?;
        Ok(())
    }

    fn all_gather_cols(&self, b: &B, part: &B::Tensor) -> Result<B::Tensor> {
        let all = self.exchange(b, part)?;
        let (rows, cols) = match all[0].1.as_slice() {
            [r, c] => (*r, *c),
            other => return Err(collective_err(format!("all_gather of {other:?}"))),
        };
        if all.iter().any(|(_, s)| *s != [rows, cols]) {
            return Err(collective_err("all_gather over different shapes".into()));
        }
        let world = all.len();
        let mut out = vec![0f32; rows * cols * world];
        for (r, (values, _)) in all.iter().enumerate() {
            for row in 0..rows {
                let to = row * cols * world + r * cols;
                out[to..to + cols].copy_from_slice(&values[row * cols..(row + 1) * cols]);
            }
        }
        upload(b, vec![rows, cols * world], &out)
    }
}
