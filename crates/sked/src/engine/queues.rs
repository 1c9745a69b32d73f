//! Queues: counts per state (bounded), pause, resume and concurrency limits.

use sked_store::rules::LIST_LIMIT_MAX;
use sked_store::{Page, QueueInfo, QueueListParams, QueueUpdateParams};

use super::{Engine, every_page};
use crate::error::Result;

impl Engine {
    /// A page of queues by name (at most [`LIST_LIMIT_MAX`]) with their counts per state,
    /// each counted up to `count_limit` ([`sked_store::QUEUE_COUNT_LIMIT`] is the usual one):
    /// see [`QueueInfo::counts_at_least`].
    pub async fn queue_page(&self, mut params: QueueListParams) -> Result<Page<QueueInfo>> {
        params.limit = params.limit.clamp(1, LIST_LIMIT_MAX);
        Ok(self.inner.store.queue_list(params).await?)
    }

    /// Every queue, read page by page: for callers that want them all, at their own cost.
    pub async fn queues(&self, count_limit: u64) -> Result<Vec<QueueInfo>> {
        every_page(async |after| {
            self.queue_page(QueueListParams {
                after,
                limit: LIST_LIMIT_MAX,
                count_limit,
                now: self.now(),
            })
            .await
        })
        .await
    }

    /// Pauses, resumes or limits a queue (created on first use).
    pub async fn queue_update(&self, mut params: QueueUpdateParams) -> Result<QueueInfo> {
        sked_core::validate_name("queue", &params.name)?;
        params.now = Some(self.now());
        let q = self.inner.store.queue_update(params).await?;
        self.wake_workers();
        Ok(q)
    }
}
