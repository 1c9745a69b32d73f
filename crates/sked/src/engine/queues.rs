//! Queues: counts per state (bounded), pause, resume and concurrency limits.

use sked_core::TaskState;
use sked_store::keyed::{KeyLimits, KeyUsageParams};
use sked_store::rules::LIST_LIMIT_MAX;
use sked_store::{
    BulkAction, BulkFilter, ErrorKind, Held, HeldBy, KeyOrder, Page, QueueInfo, QueueListParams,
    QueueUpdateParams, StoreError, TaskBulkParams,
};

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

    /// One queue, with its counts and why its tasks wait now.
    pub async fn queue(&self, name: &str) -> Result<QueueInfo> {
        sked_core::validate_name("queue", name)?;
        Ok(self.inner.store.queue_get(name, self.now()).await?)
    }

    /// Why a task that could start waits, if it does: its queue is paused or at a limit, its
    /// key is at the queue's per-key limit or rate, or (in strict order) a task of its key that
    /// started has not ended well. `None` for a task that is not available, or that the next
    /// claim may take.
    pub async fn task_held(&self, id: sked_core::TaskId) -> Result<Option<Held>> {
        let task = self.task(id).await?;
        if task.state != sked_core::TaskState::Available {
            return Ok(None);
        }
        let now = self.now();
        let queue = self.inner.store.queue_get(&task.queue, now).await?;
        if queue.held.is_some() {
            return Ok(queue.held);
        }
        let limits = KeyLimits {
            running: queue.per_key,
            rate: queue.per_key_rate,
            strict: queue.key_order == KeyOrder::Strict,
        };
        let Some(key) = task.key.filter(|_| limits.any()) else {
            return Ok(None);
        };
        let since = queue.per_key_rate.map_or(now, |r| r.window_start(now));
        let usage = self
            .inner
            .store
            .queue_key_usage(KeyUsageParams {
                queue: task.queue.clone(),
                key,
                since,
                strict: limits.strict,
            })
            .await?;
        if let Some(holder) = usage.holder.filter(|h| h.id != task.id) {
            return Ok(Some(Held {
                by: HeldBy::KeyOrder,
                until: None,
                behind: Some(holder),
            }));
        }
        if limits
            .running
            .is_some_and(|n| usage.running >= i64::from(n))
        {
            return Ok(Some(Held {
                by: HeldBy::PerKey,
                until: None,
                behind: None,
            }));
        }
        let (room, frees) = limits.room(usage.running, &usage.starts, now);
        Ok((room <= 0).then_some(Held {
            by: HeldBy::PerKeyRate,
            until: frees,
            behind: None,
        }))
    }

    /// Removes a queue that has no unfinished task: its ended tasks are deleted, in batches
    /// as a bulk delete deletes them, then its settings go (see
    /// [`sked_store::Store::queue_remove`]). An unfinished task in it is a `Conflict`, and
    /// nothing is deleted. Returns how many ended tasks went.
    pub async fn queue_remove(&self, name: &str) -> Result<u64> {
        sked_core::validate_name("queue", name)?;
        let store = &self.inner.store;
        let of = |finished: bool| BulkFilter {
            states: (TaskState::ALL.into_iter())
                .filter(|s| s.is_finished() == finished)
                .collect(),
            queue: Some(name.to_string()),
            ..BulkFilter::default()
        };
        let unfinished = store.task_bulk_count(of(false)).await?;
        if unfinished > 0 {
            return Err(StoreError::Conflict(format!(
                "queue {name} has {unfinished} unfinished tasks; it can be removed once they \
                 have ended (cancel them with `sked task cancel --state … --queue {name}`)"
            ))
            .into());
        }
        let (mut deleted, mut after) = (0, None);
        loop {
            let batch = store
                .task_bulk(TaskBulkParams {
                    action: BulkAction::Delete,
                    filter: of(true),
                    after,
                    limit: super::tasks::MAX_BULK_BATCH,
                    now: self.now(),
                })
                .await?;
            deleted += batch.changed;
            after = batch.next_after;
            if after.is_none() {
                break;
            }
        }
        match store.queue_remove(name).await {
            // Named by its ended tasks alone, which are gone.
            Err(e) if e.kind() == ErrorKind::NotFound && deleted > 0 => Ok(deleted),
            r => r.map(|()| deleted).map_err(Into::into),
        }
    }

    /// Pauses, resumes or limits a queue (created on first use, unless `must_exist`).
    pub async fn queue_update(&self, mut params: QueueUpdateParams) -> Result<QueueInfo> {
        sked_core::validate_name("queue", &params.name)?;
        if let Some(Some(b)) = &params.backoff {
            b.validate()?;
        }
        params.now = Some(self.now());
        let q = self.inner.store.queue_update(params).await?;
        self.wake_workers();
        Ok(q)
    }
}
