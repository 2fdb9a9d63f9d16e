//! The tokenizer pool: request parsing, chat-template rendering, tokenization and
//! detokenization of whole prompts run here, on blocking threads, never on the async workers
//! that answer `/health` and stream tokens (issue 37: one 31 MB prompt froze every endpoint
//! for 20 s). At most `--tokenizer-workers` jobs run at once; the others wait their turn
//! without holding a thread.

use std::sync::Arc;

use tokio::sync::Semaphore;

use super::error::ApiError;

#[derive(Debug)]
pub struct Workers {
    permits: Arc<Semaphore>,
}

impl Workers {
    pub fn new(size: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(size.max(1))),
        }
    }

    /// Run `job` on a blocking thread once a place is free, and wait for its result.
    pub async fn run<T, F>(&self, job: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ApiError::ShuttingDown)?;
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            job()
        })
        .await
        .map_err(|e| ApiError::Internal(format!("a tokenizer worker failed: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    /// Never more jobs at once than places; every job runs.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn jobs_wait_for_a_place() {
        let workers = Arc::new(Workers::new(2));
        let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let jobs = (0..8).map(|i| {
            let (workers, now, most) = (workers.clone(), now.clone(), most.clone());
            async move {
                workers
                    .run(move || {
                        let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(n, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(20));
                        now.fetch_sub(1, Ordering::SeqCst);
                        i
                    })
                    .await
            }
        });
        let done = futures_util::future::join_all(jobs).await;
        assert_eq!(done.into_iter().flatten().sum::<i32>(), 28);
        assert_eq!(most.load(Ordering::SeqCst), 2);
    }
}
