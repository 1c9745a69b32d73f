//! [`Client`]: enqueue, schedules and status queries, and the worker protocol, with the same
//! calls whether sked is embedded (on an [`Engine`] and its store) or remote (over the HTTP
//! API of a `sked server`).

mod batches;
#[cfg(feature = "remote")]
mod remote;
mod schedules;
mod workflows;

#[cfg(feature = "remote")]
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use sked_core::{NewTask, Task, TaskId};
use sked_store::{HeartbeatReply, QueueInfo, QueueUpdateParams, TaskInserted};

use crate::api::worker::{Ending, Finished, Held};
use crate::api::{self, WorkerView};
use crate::{ClaimRequest, Engine, Result, TaskFilter};

#[cfg(feature = "remote")]
use remote::Remote;
#[cfg(feature = "remote")]
pub use remote::{RemoteOptions, UNREACHABLE, path_segment};

/// What a change to a queue does when no task or setting names the queue yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfMissing {
    /// Refuse it (`NotFound`): a mistyped name is not a new queue.
    Refuse,
    /// Set the queue up, to pause or limit it before its first task.
    Create,
}

impl IfMissing {
    /// The query string that asks the server for this.
    #[cfg(feature = "remote")]
    fn query(self) -> &'static str {
        match self {
            IfMissing::Refuse => "",
            IfMissing::Create => "?create=true",
        }
    }
}

/// A handle on sked, embedded or remote. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Client {
    inner: Inner,
}

#[derive(Clone, Debug)]
enum Inner {
    Embedded(Engine),
    #[cfg(feature = "remote")]
    Remote(Arc<Remote>),
}

impl From<Engine> for Client {
    fn from(engine: Engine) -> Client {
        Client::embedded(engine)
    }
}

impl Client {
    /// Works directly on an engine (and so on its store) in this process.
    pub fn embedded(engine: Engine) -> Client {
        Client {
            inner: Inner::Embedded(engine),
        }
    }

    /// Talks to a `sked server` at `url` (like `http://127.0.0.1:7070`).
    #[cfg(feature = "remote")]
    pub fn remote(url: &str) -> Result<Client> {
        Client::remote_with(RemoteOptions::new(url))
    }

    /// Talks to a `sked server` with these options (a token, a timeout).
    #[cfg(feature = "remote")]
    pub fn remote_with(options: RemoteOptions) -> Result<Client> {
        Ok(Client {
            inner: Inner::Remote(Arc::new(Remote::new(options)?)),
        })
    }

    /// The engine, when embedded.
    pub fn engine(&self) -> Option<&Engine> {
        match &self.inner {
            Inner::Embedded(e) => Some(e),
            #[cfg(feature = "remote")]
            Inner::Remote(_) => None,
        }
    }

    /// The default lease of claimed tasks: the engine's when embedded, else 30 s.
    pub(crate) fn default_lease_ttl(&self) -> SignedDuration {
        match &self.inner {
            Inner::Embedded(e) => e.config().lease_ttl,
            #[cfg(feature = "remote")]
            Inner::Remote(_) => SignedDuration::from_secs(30),
        }
    }

    pub(crate) fn is_remote(&self) -> bool {
        match self.inner {
            Inner::Embedded(_) => false,
            #[cfg(feature = "remote")]
            Inner::Remote(_) => true,
        }
    }

    // ---- tasks ----

    /// Enqueues one task; returns its id (or, with a unique key held, the holder's). A task
    /// without a `traceparent` continues the caller's current OpenTelemetry span, if any.
    pub async fn enqueue(&self, task: NewTask) -> Result<TaskInserted> {
        match &self.inner {
            Inner::Embedded(e) => e.enqueue(task).await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                let mut task = [task];
                crate::telemetry::continue_current(&mut task);
                let [task] = task;
                r.post("/v1/tasks", &task).await
            }
        }
    }

    /// Enqueues tasks in one transaction (all or none).
    pub async fn enqueue_many(&self, tasks: Vec<NewTask>) -> Result<Vec<TaskInserted>> {
        match &self.inner {
            Inner::Embedded(e) => e.enqueue_many(tasks).await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                let mut tasks = tasks;
                crate::telemetry::continue_current(&mut tasks);
                let reply: api::TasksInserted =
                    r.post("/v1/tasks/batch", &api::TaskBatch { tasks }).await?;
                Ok(reply.tasks)
            }
        }
    }

    /// A task with its attempt history.
    pub async fn task(&self, id: TaskId) -> Result<Task> {
        match &self.inner {
            Inner::Embedded(e) => e.task(id).await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => r.get(&format!("/v1/tasks/{id}"), &[]).await,
        }
    }

    /// The task once it has ended (succeeded, dead or cancelled), or as it is when `wait` has
    /// passed first. A server holds one request at most its `--max-wait` (60 s by default).
    pub async fn task_wait(&self, id: TaskId, wait: std::time::Duration) -> Result<Task> {
        match &self.inner {
            Inner::Embedded(e) => e.task_wait(id, wait).await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => r.task_wait(id, wait).await,
        }
    }

    /// Tasks matching the filter, newest first: the first page.
    pub async fn tasks(&self, filter: TaskFilter) -> Result<Vec<Task>> {
        Ok(self.task_page(filter).await?.tasks)
    }

    /// A page of the tasks matching the filter, newest first, with the `before` of the next
    /// page when more match.
    pub async fn task_page(&self, filter: TaskFilter) -> Result<api::TaskList> {
        match &self.inner {
            Inner::Embedded(e) => {
                let page = e.task_page(filter).await?;
                Ok(api::TaskList {
                    next_before: page.next_before(),
                    tasks: page.items,
                })
            }
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                let states: Vec<&str> = filter.states.iter().map(|s| s.as_str()).collect();
                let mut query = vec![(
                    "limit",
                    sked_store::rules::list_limit(filter.limit).to_string(),
                )];
                if !states.is_empty() {
                    query.push(("state", states.join(",")));
                }
                for (k, v) in [
                    ("queue", filter.queue),
                    ("kind", filter.kind),
                    ("schedule", filter.schedule),
                    ("key", filter.key),
                    ("unique_key", filter.unique_key),
                    ("workflow", filter.workflow.map(|w| w.to_string())),
                    ("since", filter.since.map(|t| t.to_string())),
                    ("until", filter.until.map(|t| t.to_string())),
                    ("before", filter.before.map(|i| i.to_string())),
                ] {
                    if let Some(v) = v {
                        query.push((k, v));
                    }
                }
                if filter.with_payloads {
                    query.push(("include", "payload,result".into()));
                }
                r.get("/v1/tasks", &query).await
            }
        }
    }

    /// Cancels a task (a running one is asked to stop).
    pub async fn cancel(&self, id: TaskId) -> Result<Task> {
        match &self.inner {
            Inner::Embedded(e) => e.cancel(id).await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => r.post(&format!("/v1/tasks/{id}/cancel"), &()).await,
        }
    }

    /// Deletes a task that has ended, with its attempts. One that has not ended is a
    /// `Conflict` (cancel it first); one that does not exist, `NotFound`.
    pub async fn task_delete(&self, id: TaskId) -> Result<()> {
        match &self.inner {
            Inner::Embedded(e) => e.task_delete(id).await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => r.delete(&format!("/v1/tasks/{id}")).await,
        }
    }

    /// Why an available task waits, if it does (see [`Engine::task_held`]).
    pub async fn task_held(&self, id: TaskId) -> Result<Option<sked_store::Held>> {
        match &self.inner {
            Inner::Embedded(e) => e.task_held(id).await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                let h: api::TaskHeld = r.get(&format!("/v1/tasks/{id}/held"), &[]).await?;
                Ok(h.held)
            }
        }
    }

    /// One batch of a bulk retry or cancel, or (`dry_run`) how many tasks it matches.
    pub async fn task_bulk(&self, req: &api::BulkRequest) -> Result<api::BulkAnswer> {
        match &self.inner {
            Inner::Embedded(e) => req.run(e).await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => r.post("/v1/tasks/bulk", req).await,
        }
    }

    /// Runs a finished task again.
    pub async fn retry(&self, id: TaskId) -> Result<Task> {
        match &self.inner {
            Inner::Embedded(e) => e.retry(id).await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => r.post(&format!("/v1/tasks/{id}/retry"), &()).await,
        }
    }

    /// Moves a task that has not started to another run time.
    pub async fn reschedule(&self, id: TaskId, run_at: Timestamp) -> Result<Task> {
        match &self.inner {
            Inner::Embedded(e) => e.reschedule(id, run_at).await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                let body = api::Reschedule {
                    run_at: run_at.to_string(),
                };
                r.post(&format!("/v1/tasks/{id}/reschedule"), &body).await
            }
        }
    }

    // ---- queues ----

    /// One queue, with its counts and why its tasks wait.
    pub async fn queue(&self, name: &str) -> Result<QueueInfo> {
        match &self.inner {
            Inner::Embedded(e) => e.queue(name).await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                r.get(&format!("/v1/queues/{}", path_segment(name)), &[])
                    .await
            }
        }
    }

    /// Every queue with its counts per state, each counted up to `count_limit`
    /// ([`sked_store::QUEUE_COUNT_LIMIT`] is the usual one; more than that is marked in
    /// [`QueueInfo::counts_at_least`]), read page by page.
    pub async fn queues(&self, count_limit: u64) -> Result<Vec<QueueInfo>> {
        match &self.inner {
            Inner::Embedded(e) => e.queues(count_limit).await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                let query = [("count_limit", count_limit.to_string())];
                r.every_page("/v1/queues", &query, |l: api::QueueList| {
                    (l.queues, l.next_after)
                })
                .await
            }
        }
    }

    /// Pauses a queue: its tasks wait; running ones finish. A queue that no task or setting
    /// names is refused (`NotFound`) unless `missing` says to create it.
    pub async fn queue_pause(&self, name: &str, missing: IfMissing) -> Result<QueueInfo> {
        self.queue_update(name, "pause", missing, |p| p.paused = Some(true))
            .await
    }

    /// Resumes a paused queue (a queue no task or setting names: as [`Client::queue_pause`]).
    pub async fn queue_resume(&self, name: &str, missing: IfMissing) -> Result<QueueInfo> {
        self.queue_update(name, "resume", missing, |p| p.paused = Some(false))
            .await
    }

    /// Limits how many tasks of the queue run at once (`None` removes the limit).
    pub async fn queue_limit(
        &self,
        name: &str,
        limit: Option<u32>,
        missing: IfMissing,
    ) -> Result<QueueInfo> {
        let limits = api::QueueLimit {
            concurrency: Some(limit),
            ..Default::default()
        };
        self.queue_limits(name, limits, missing).await
    }

    /// Sets the queue's limits that `limits` names (a `None` inside removes that limit).
    pub async fn queue_limits(
        &self,
        name: &str,
        limits: api::QueueLimit,
        missing: IfMissing,
    ) -> Result<QueueInfo> {
        match &self.inner {
            Inner::Embedded(_) => {
                let rate = limits.rate_with_burst().map_err(crate::Error::Invalid)?;
                let key_rate = limits.per_key_rate().map_err(crate::Error::Invalid)?;
                self.queue_update(name, "limit", missing, |p| {
                    p.concurrency_limit = limits.concurrency;
                    p.rate = rate;
                    p.per_key = limits.per_key;
                    p.per_key_rate = key_rate;
                    p.key_order = limits.key_order;
                })
                .await
            }
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                let path = format!("/v1/queues/{}/limit{}", path_segment(name), missing.query());
                r.put(&path, &limits).await
            }
        }
    }

    /// Sets how long the retries of the queue's tasks without a backoff of their own wait
    /// (`None`: the default exponential backoff).
    pub async fn queue_backoff(
        &self,
        name: &str,
        backoff: Option<sked_core::Backoff>,
        missing: IfMissing,
    ) -> Result<QueueInfo> {
        match &self.inner {
            Inner::Embedded(_) => {
                self.queue_update(name, "backoff", missing, |p| p.backoff = Some(backoff))
                    .await
            }
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                let path = format!(
                    "/v1/queues/{}/backoff{}",
                    path_segment(name),
                    missing.query()
                );
                r.put(&path, &api::QueueBackoffChange { backoff }).await
            }
        }
    }

    /// Sets how long the queue keeps its ended tasks for the states `retention` names (a `null`
    /// inside: the server's retention).
    pub async fn queue_retention(
        &self,
        name: &str,
        retention: api::QueueRetentionChange,
        missing: IfMissing,
    ) -> Result<QueueInfo> {
        match &self.inner {
            Inner::Embedded(_) => {
                let changes = retention.changes().map_err(crate::Error::Invalid)?;
                self.queue_update(name, "retention", missing, |p| p.retention = changes)
                    .await
            }
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                let path = format!(
                    "/v1/queues/{}/retention{}",
                    path_segment(name),
                    missing.query()
                );
                r.put(&path, &retention).await
            }
        }
    }

    /// Removes a queue that has no unfinished task: its ended tasks are deleted, its pause and
    /// limits go, and it leaves the list. An unfinished task in it is a `Conflict`; a queue no
    /// task or setting names, `NotFound`.
    pub async fn queue_remove(&self, name: &str) -> Result<()> {
        match &self.inner {
            Inner::Embedded(e) => e.queue_remove(name).await.map(|_| ()),
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                r.delete(&format!("/v1/queues/{}", path_segment(name)))
                    .await
            }
        }
    }

    #[cfg_attr(not(feature = "remote"), allow(unused_variables))]
    async fn queue_update(
        &self,
        name: &str,
        action: &str,
        missing: IfMissing,
        change: impl FnOnce(&mut QueueUpdateParams),
    ) -> Result<QueueInfo> {
        match &self.inner {
            Inner::Embedded(e) => {
                let mut params = QueueUpdateParams {
                    name: name.to_string(),
                    must_exist: missing == IfMissing::Refuse,
                    ..QueueUpdateParams::default()
                };
                change(&mut params);
                e.queue_update(params).await
            }
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                let path = format!(
                    "/v1/queues/{}/{action}{}",
                    path_segment(name),
                    missing.query()
                );
                r.post(&path, &()).await
            }
        }
    }

    // ---- what operators look at ----

    /// Workers and nodes seen in the last day, most recently seen first: the 1,000 seen last.
    pub async fn workers(&self) -> Result<Vec<WorkerView>> {
        match &self.inner {
            Inner::Embedded(e) => Ok(e
                .workers()
                .await?
                .into_iter()
                .map(|w| WorkerView {
                    alive: e.is_alive(&w),
                    worker: w,
                })
                .collect()),
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                let query = [("limit", sked_store::rules::LIST_LIMIT_MAX.to_string())];
                let reply: api::WorkerList = r.get("/v1/workers", &query).await?;
                Ok(reply.workers)
            }
        }
    }

    /// The node answering and the cluster's leader.
    pub async fn cluster(&self) -> Result<api::Cluster> {
        match &self.inner {
            Inner::Embedded(e) => e.cluster().await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => r.get("/v1/cluster", &[]).await,
        }
    }

    /// Ended work per minute over the last `minutes` minutes (1 to 1440), oldest first.
    pub async fn activity(&self, minutes: u32) -> Result<api::Activity> {
        match &self.inner {
            Inner::Embedded(e) => Ok(api::Activity {
                bucket: "1m".into(),
                buckets: e.activity(minutes).await?,
            }),
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                let query = [("minutes", minutes.to_string())];
                r.get("/v1/activity", &query).await
            }
        }
    }

    // ---- the worker protocol ----

    /// Claims due tasks (long-polling up to `req.wait`).
    pub async fn claim(&self, req: ClaimRequest) -> Result<Vec<Task>> {
        match &self.inner {
            Inner::Embedded(e) => e.claim(req).await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => r.claim(req).await,
        }
    }

    /// Extends the leases of held tasks. One result per task; the whole call fails only when
    /// sked cannot be reached.
    pub async fn heartbeat_many(
        &self,
        held: &[Held],
        lease_ttl: Option<SignedDuration>,
    ) -> Result<Vec<Result<HeartbeatReply>>> {
        match &self.inner {
            Inner::Embedded(e) => {
                let items: Vec<(TaskId, i32, Option<serde_json::Value>)> = (held.iter())
                    .map(|h| (h.id, h.attempt, h.progress.clone()))
                    .collect();
                e.heartbeat_many(&items, lease_ttl).await
            }
            #[cfg(feature = "remote")]
            Inner::Remote(r) => r.heartbeat_many(held, lease_ttl).await,
        }
    }

    /// Ends attempts. One result per item.
    pub async fn finish_many(
        &self,
        items: Vec<(TaskId, i32, Ending)>,
    ) -> Result<Vec<Result<Finished>>> {
        match &self.inner {
            Inner::Embedded(e) => {
                let now = e.now();
                let items = items
                    .into_iter()
                    .map(|(id, attempt, end)| (id, attempt, end.into_outcome(now)))
                    .collect();
                Ok(e.finish_many(items)
                    .await?
                    .into_iter()
                    .map(|r| {
                        r.map(|t| Finished {
                            id: t.id,
                            state: t.state,
                        })
                    })
                    .collect())
            }
            #[cfg(feature = "remote")]
            Inner::Remote(r) => r.finish_many(items).await,
        }
    }

    /// Tells sked this worker is alive (or, with `stopping`, that it is leaving), for the
    /// dashboard's list of workers. Advisory: send it every minute (the worker does).
    pub async fn beat(&self, presence: &crate::Presence) -> Result<()> {
        match &self.inner {
            Inner::Embedded(e) => {
                e.beat(presence).await;
                Ok(())
            }
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                let body = api::Beat {
                    role: presence.role.clone(),
                    queues: presence.queues.clone(),
                    concurrency: presence.concurrency,
                    stopping: presence.stopping,
                };
                let path = format!("/v1/workers/{}", path_segment(&presence.id));
                let _: api::Ack = r.put(&path, &body).await?;
                Ok(())
            }
        }
    }

    /// Waits until tasks may have become claimable since `after` (a value this returned
    /// before; 0 at first), or `timeout`. Safe to drop.
    pub async fn work_changed(&self, after: u64, timeout: Duration) -> Result<u64> {
        match &self.inner {
            Inner::Embedded(e) => Ok(e.work_changed(after, timeout).await),
            #[cfg(feature = "remote")]
            Inner::Remote(r) => r.work_changed(after, timeout).await,
        }
    }
}
