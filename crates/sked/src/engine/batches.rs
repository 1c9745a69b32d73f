//! Batches: opened, closed, read and waited for; tasks join them as they are enqueued.

use std::time::Duration;

use sked_core::{BatchId, NewBatch};
use sked_store::{BatchCloseParams, BatchInfo, BatchListParams, BatchOpenParams, BatchState, Page};

use super::Engine;
use crate::Result;

/// How often a wait on a batch reads it again.
const LOOK_EVERY: Duration = Duration::from_millis(250);

impl Engine {
    /// Opens a batch with its callbacks (checked as tasks, `Invalid` naming the problem).
    pub async fn batch_open(&self, batch: NewBatch) -> Result<BatchInfo> {
        batch.validate()?;
        Ok(self
            .inner
            .store
            .batch_open(BatchOpenParams {
                batch,
                now: self.now(),
            })
            .await?)
    }

    /// Closes a batch: its callbacks are enqueued once its tasks have all ended (at once when
    /// they have).
    pub async fn batch_close(&self, id: BatchId) -> Result<BatchInfo> {
        let b = self
            .inner
            .store
            .batch_close(BatchCloseParams {
                id,
                now: self.now(),
            })
            .await?;
        if b.state == BatchState::Done {
            self.wake_workers();
        }
        Ok(b)
    }

    /// A batch with its tasks counted by state.
    pub async fn batch(&self, id: BatchId) -> Result<BatchInfo> {
        Ok(self.inner.store.batch_get(id).await?)
    }

    /// Batches, newest first: at most `limit` (1 to 1,000) with ids below `before`.
    pub async fn batches(&self, before: Option<BatchId>, limit: u32) -> Result<Page<BatchInfo>> {
        Ok(self
            .inner
            .store
            .batch_list(BatchListParams {
                before_id: before,
                limit: sked_store::rules::list_limit(Some(limit)),
            })
            .await?)
    }

    /// The batch once it is done (its callbacks enqueued), or as it is when `wait` has passed
    /// first.
    pub async fn batch_wait(&self, id: BatchId, wait: Duration) -> Result<BatchInfo> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let b = self.batch(id).await?;
            let now = tokio::time::Instant::now();
            if b.state == BatchState::Done || now >= deadline {
                return Ok(b);
            }
            tokio::time::sleep(LOOK_EVERY.min(deadline - now)).await;
        }
    }
}
