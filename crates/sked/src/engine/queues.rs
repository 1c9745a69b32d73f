//! Queues: counts per state (bounded), pause, resume and concurrency limits.

use sked_store::{QueueInfo, QueueUpdateParams};

use super::Engine;
use crate::error::Result;

impl Engine {
    /// Every queue with its counts per state, each counted up to `count_limit`
    /// ([`sked_store::QUEUE_COUNT_LIMIT`] is the usual one): see [`QueueInfo::counts_at_least`].
    pub async fn queues(&self, count_limit: u64) -> Result<Vec<QueueInfo>> {
        Ok(self.inner.store.queue_list(count_limit).await?)
    }

    /// Pauses, resumes or limits a queue (created on first use).
    pub async fn queue_update(&self, params: QueueUpdateParams) -> Result<QueueInfo> {
        sked_core::validate_name("queue", &params.name)?;
        let q = self.inner.store.queue_update(params).await?;
        self.wake_workers();
        Ok(q)
    }
}
