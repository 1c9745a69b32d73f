//! Tasks: enqueue (one or many, all or none), look up and list, cancel, retry, reschedule.

use jiff::Timestamp;
use sked_core::{NewTask, Task, TaskId, TaskState};
use sked_store::{
    BulkAction, BulkBatch, BulkFilter, FinishOutcome, TaskBulkParams, TaskCancelParams,
    TaskInsertClaimedParams, TaskInsertParams, TaskInserted, TaskListParams, TaskRescheduleParams,
    TaskRetryParams, rules,
};

use super::{Engine, lock};
use crate::error::{Error, Result};

/// Which tasks [`Engine::tasks`] lists, newest first. `TaskFilter::default()` is the newest
/// 100 tasks of every state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskFilter {
    /// Only tasks in one of these states (any state when empty).
    pub states: Vec<TaskState>,
    /// Only tasks of this queue.
    pub queue: Option<String>,
    /// Only tasks of this kind.
    pub kind: Option<String>,
    /// Only tasks made by this schedule.
    pub schedule: Option<String>,
    /// Only tasks of this concurrency key.
    pub key: Option<String>,
    /// Only tasks of this unique key.
    pub unique_key: Option<String>,
    /// Only tasks of this workflow.
    pub workflow: Option<sked_core::WorkflowId>,
    /// Only tasks enqueued at or after this instant.
    pub since: Option<Timestamp>,
    /// Only tasks enqueued before this instant.
    pub until: Option<Timestamp>,
    /// Only tasks with a smaller id: the next page after the last id seen.
    pub before: Option<TaskId>,
    /// At most this many (100 when `None`, at most 1,000).
    pub limit: Option<u32>,
    /// Read payloads and results too; without this they are null (and errors are cut to 1,024
    /// characters), which keeps a list of tasks with large payloads small.
    pub with_payloads: bool,
}

impl TaskFilter {
    /// Every task, newest first.
    pub fn new() -> TaskFilter {
        TaskFilter::default()
    }

    /// Only tasks in this state (call again for more states).
    pub fn state(mut self, state: TaskState) -> TaskFilter {
        self.states.push(state);
        self
    }

    /// Only tasks of this queue.
    pub fn queue(mut self, queue: impl Into<String>) -> TaskFilter {
        self.queue = Some(queue.into());
        self
    }

    /// Only tasks of this kind.
    pub fn kind(mut self, kind: impl Into<String>) -> TaskFilter {
        self.kind = Some(kind.into());
        self
    }

    /// Only tasks made by this schedule.
    pub fn schedule(mut self, schedule: impl Into<String>) -> TaskFilter {
        self.schedule = Some(schedule.into());
        self
    }

    /// Only tasks of this workflow.
    pub fn workflow(mut self, workflow: sked_core::WorkflowId) -> TaskFilter {
        self.workflow = Some(workflow);
        self
    }

    /// Only tasks older than this one (paging).
    pub fn before(mut self, id: TaskId) -> TaskFilter {
        self.before = Some(id);
        self
    }

    /// At most this many (between 1 and 1,000).
    pub fn limit(mut self, limit: u32) -> TaskFilter {
        self.limit = Some(limit);
        self
    }

    /// With payloads and results (a page then holds about 8 MiB at most).
    pub fn with_payloads(mut self) -> TaskFilter {
        self.with_payloads = true;
        self
    }

    pub(crate) fn into_params(self) -> TaskListParams {
        TaskListParams {
            states: self.states,
            queue: self.queue,
            kind: self.kind,
            schedule: self.schedule,
            key: self.key,
            unique_key: self.unique_key,
            workflow: self.workflow,
            since: self.since,
            until: self.until,
            before_id: self.before,
            limit: rules::list_limit(self.limit),
            with_payloads: self.with_payloads,
        }
    }
}

impl Engine {
    /// Enqueues one task; returns its id (or the id of the unfinished task holding its unique key).
    pub async fn enqueue(&self, task: NewTask) -> Result<TaskInserted> {
        Ok(self.enqueue_many(vec![task]).await?.remove(0))
    }

    /// Enqueues tasks in one transaction: all or none.
    pub async fn enqueue_many(&self, tasks: Vec<NewTask>) -> Result<Vec<TaskInserted>> {
        if tasks.is_empty() {
            return Ok(Vec::new());
        }
        for (i, t) in tasks.iter().enumerate() {
            t.validate().map_err(|e| {
                if tasks.len() == 1 {
                    Error::from(e)
                } else {
                    Error::Invalid(format!("task {i}: {e}"))
                }
            })?;
        }
        let now = self.now();
        let mut tasks = debounced(tasks, now)?;
        let spans = self.inner.config.telemetry.enqueue(&mut tasks);
        let result = self.insert(tasks, now).await;
        spans.end(&result);
        result
    }

    /// Inserts checked tasks: handed to a claim waiting here, or into the store.
    async fn insert(&self, tasks: Vec<NewTask>, now: Timestamp) -> Result<Vec<TaskInserted>> {
        if let [task] = tasks.as_slice() {
            let waiter = lock(&self.inner.waiters).take_for(task, now);
            if let Some(waiter) = waiter {
                let task = tasks.into_iter().next().expect("one task");
                // On a task of its own, so that a caller that goes away mid-way (a client
                // that hung up) cannot leave the task leased to a claim that never gets it.
                let engine = self.clone();
                let handing =
                    tokio::spawn(async move { engine.hand_over(task, waiter, now).await });
                let inserted = handing
                    .await
                    .map_err(|e| Error::Internal(format!("handing a task over failed: {e}")))??;
                return Ok(vec![inserted]);
            }
        }
        let queues = enqueued_per_queue(&tasks);
        let first_waiting = tasks
            .iter()
            .filter_map(|t| t.run_at)
            .filter(|t| *t > now)
            .min();
        let inserted = self
            .inner
            .store
            .task_insert_many(TaskInsertParams {
                tasks: tasks.into_iter().map(Into::into).collect(),
                now,
            })
            .await?;
        for (queue, n) in queues {
            self.inner.metrics.enqueued(&queue, n);
        }
        if first_waiting.is_some() {
            self.saw_waiting(first_waiting);
        }
        self.wake_workers();
        Ok(inserted)
    }

    /// Inserts `task` leased to a claim waiting on this node and hands it over (see
    /// `waiting_claims`); gives it back at once if that claim has gone meanwhile.
    async fn hand_over(
        &self,
        task: NewTask,
        waiter: super::waiting_claims::Waiter,
        now: Timestamp,
    ) -> Result<TaskInserted> {
        let queue = task.queue.clone();
        let (inserted, leased) = self
            .inner
            .store
            .task_insert_claimed(TaskInsertClaimedParams {
                task: task.into(),
                worker: waiter.worker.clone(),
                lease_ttl: waiter.lease_ttl,
                timeout_grace: self.inner.config.timeout_grace,
                now,
            })
            .await?;
        self.inner.metrics.enqueued(&queue, 1);
        match leased {
            Some(task) => {
                if let Err(task) = waiter.send.send(task) {
                    self.finish(task.id, task.attempt, FinishOutcome::Released)
                        .await?;
                }
            }
            // Its queue is paused or limited: the waiting claim looks as usual.
            None => self.wake_workers(),
        }
        Ok(inserted)
    }

    /// A task with its attempt history.
    pub async fn task(&self, id: TaskId) -> Result<Task> {
        Ok(self.inner.store.task_get(id).await?)
    }

    /// Tasks matching the filter, newest first, without attempt history: the first page
    /// (see [`Engine::task_page`]).
    pub async fn tasks(&self, filter: TaskFilter) -> Result<Vec<Task>> {
        Ok(self.task_page(filter).await?.items)
    }

    /// A page of the tasks matching the filter, newest first: at most the filter's limit and
    /// about 8 MiB; `more` says whether to ask again with `before` the last id.
    pub async fn task_page(&self, filter: TaskFilter) -> Result<sked_store::TaskPage> {
        Ok(self.inner.store.task_list(filter.into_params()).await?)
    }

    /// Cancels a task that has not started; a running one is asked to stop (its worker hears
    /// it at its next heartbeat).
    pub async fn cancel(&self, id: TaskId) -> Result<Task> {
        let t = self
            .inner
            .store
            .task_cancel(TaskCancelParams {
                id,
                now: self.now(),
            })
            .await?;
        match &t.schedule {
            Some(schedule) if t.state.is_finished() => self.run_ended(schedule),
            _ => self.inner.schedules_changed.notify_waiters(),
        }
        if t.state.is_finished() {
            self.inner.task_waits.ended(t.id);
        }
        Ok(t)
    }

    /// One batch of a bulk retry or cancel: the action on the first `limit` tasks after
    /// `after` (by id) that `filter` matches. A filter's states must each be one the action
    /// applies to.
    pub async fn task_bulk(
        &self,
        action: BulkAction,
        filter: BulkFilter,
        after: Option<TaskId>,
        limit: u32,
    ) -> Result<BulkBatch> {
        check_bulk(action, &filter)?;
        let batch = self
            .inner
            .store
            .task_bulk(TaskBulkParams {
                action,
                filter,
                after,
                limit: limit.clamp(1, MAX_BULK_BATCH),
                now: self.now(),
            })
            .await?;
        if batch.changed > 0 {
            self.wake_workers();
            self.inner.task_waits.ended_some();
        }
        Ok(batch)
    }

    /// How many tasks a bulk operation's filter matches now.
    pub async fn task_bulk_count(&self, action: BulkAction, filter: BulkFilter) -> Result<u64> {
        check_bulk(action, &filter)?;
        Ok(self.inner.store.task_bulk_count(filter).await?)
    }

    /// Deletes a task that has ended, with its attempts (see [`sked_store::Store::task_delete`]).
    pub async fn task_delete(&self, id: TaskId) -> Result<()> {
        self.inner.store.task_delete(id).await?;
        // A wait on it finds it gone at once rather than at its next look.
        self.inner.task_waits.ended(id);
        Ok(())
    }

    /// Runs a finished task again, now, with at least one attempt left.
    pub async fn retry(&self, id: TaskId) -> Result<Task> {
        let t = self
            .inner
            .store
            .task_retry(TaskRetryParams {
                id,
                now: self.now(),
            })
            .await?;
        self.wake_workers();
        Ok(t)
    }

    /// Moves a task that has not started to another run time.
    pub async fn reschedule(&self, id: TaskId, run_at: Timestamp) -> Result<Task> {
        let t = self
            .inner
            .store
            .task_reschedule(TaskRescheduleParams {
                id,
                run_at,
                now: self.now(),
            })
            .await?;
        self.saw_waiting(Some(run_at));
        self.wake_workers();
        Ok(t)
    }
}

/// How many of `tasks` go to each queue (a batch is nearly always one queue).
pub(super) fn enqueued_per_queue<'a>(
    tasks: impl IntoIterator<Item = &'a NewTask>,
) -> Vec<(String, usize)> {
    let mut out: Vec<(String, usize)> = Vec::new();
    for t in tasks {
        match out.iter_mut().find(|(q, _)| *q == t.queue) {
            Some((_, n)) => *n += 1,
            None => out.push((t.queue.clone(), 1)),
        }
    }
    out
}

/// A debounced task is due `debounce` after its enqueue (or at its own run time, when later).
fn debounced(mut tasks: Vec<NewTask>, now: Timestamp) -> Result<Vec<NewTask>> {
    for t in &mut tasks {
        if let Some(quiet) = t.debounce {
            let due = now
                .checked_add(quiet)
                .map_err(|e| Error::Invalid(format!("debounce: {e}")))?;
            t.run_at = Some(t.run_at.map_or(due, |at| at.max(due)));
        }
    }
    Ok(tasks)
}

/// The most tasks one batch of a bulk operation changes.
pub(crate) const MAX_BULK_BATCH: u32 = 10_000;

/// A bulk operation names at least one state, each one its action applies to, and valid names.
fn check_bulk(action: BulkAction, f: &BulkFilter) -> Result<()> {
    if f.states.is_empty() {
        return Err(Error::Invalid(format!(
            "name the states to {}: one or more of {}",
            action.as_str(),
            names(action.applies_to())
        )));
    }
    if let Some(s) = f.states.iter().find(|s| !action.applies_to().contains(s)) {
        return Err(Error::Invalid(format!(
            "{} does not apply to {s} tasks: it takes {}",
            action.as_str(),
            names(action.applies_to())
        )));
    }
    if let Some(q) = &f.queue {
        sked_core::validate_name("queue", q)?;
    }
    if let Some(k) = &f.kind {
        sked_core::validate_name("kind", k)?;
    }
    Ok(())
}

fn names(states: &[sked_core::TaskState]) -> String {
    states
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::engine::waiting_claims::Wanted;
    use crate::{ClaimRequest, EngineConfig};

    #[tokio::test]
    async fn a_task_for_a_claim_that_has_gone_is_given_back_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = sked_sqlite::SqliteStore::open(dir.path().join("sked.db")).unwrap();
        let engine = Engine::new(Arc::new(store), EngineConfig::default());
        let (_, handed) = lock(&engine.inner.waiters).wait(Wanted {
            queues: vec![],
            kinds: vec![],
            min_priority: None,
            worker: "gone".into(),
            lease_ttl: jiff::SignedDuration::from_secs(30),
        });
        let task = NewTask::new("k");
        let now = engine.now();
        let waiter = lock(&engine.inner.waiters)
            .take_for(&task, now)
            .expect("the waiting claim takes it");
        // The claim goes away while its task is being inserted.
        drop(handed);
        let inserted = engine.hand_over(task, waiter, now).await.unwrap();
        let t = engine.task(inserted.id).await.unwrap();
        assert_eq!(t.state, TaskState::Available, "given back, not stranded");
        let claimed = engine
            .claim(ClaimRequest {
                worker: "next".into(),
                max: 1,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(
            claimed.iter().map(|t| t.id).collect::<Vec<_>>(),
            vec![inserted.id]
        );
    }
}
