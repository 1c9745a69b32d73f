//! [`Client`]: enqueue, schedules and status queries, and the worker protocol, with the same
//! calls whether sked is embedded (on an [`Engine`] and its store) or remote (over the HTTP
//! API of a `sked server`).

mod remote;

use std::sync::Arc;
use std::time::Duration;

use jiff::SignedDuration;
use sked_core::{NewTask, ScheduleDef, Task, TaskId};
use sked_store::{HeartbeatReply, QueueInfo, Schedule, ScheduleSyncReport, TaskInserted};

use crate::protocol::{Ending, Finished, Held};
use crate::{ClaimRequest, Engine, Result, TaskFilter};

use remote::Remote;
pub use remote::{RemoteOptions, path_segment};

/// A handle on sked, embedded or remote. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Client {
    inner: Inner,
}

#[derive(Clone, Debug)]
enum Inner {
    Embedded(Engine),
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
    pub fn remote(url: &str) -> Result<Client> {
        Client::remote_with(RemoteOptions::new(url))
    }

    /// Talks to a `sked server` with these options (a token, a timeout).
    pub fn remote_with(options: RemoteOptions) -> Result<Client> {
        Ok(Client {
            inner: Inner::Remote(Arc::new(Remote::new(options)?)),
        })
    }

    /// The engine, when embedded.
    pub fn engine(&self) -> Option<&Engine> {
        match &self.inner {
            Inner::Embedded(e) => Some(e),
            Inner::Remote(_) => None,
        }
    }

    /// The default lease of claimed tasks: the engine's when embedded, else 30 s.
    pub(crate) fn default_lease_ttl(&self) -> SignedDuration {
        match &self.inner {
            Inner::Embedded(e) => e.config().lease_ttl,
            Inner::Remote(_) => SignedDuration::from_secs(30),
        }
    }

    pub(crate) fn is_remote(&self) -> bool {
        matches!(self.inner, Inner::Remote(_))
    }

    // ---- tasks ----

    /// Enqueues one task; returns its id (or, with a unique key held, the holder's).
    pub async fn enqueue(&self, task: NewTask) -> Result<TaskInserted> {
        match &self.inner {
            Inner::Embedded(e) => e.enqueue(task).await,
            Inner::Remote(r) => r.post("/v1/tasks", &task).await,
        }
    }

    /// Enqueues tasks in one transaction (all or none).
    pub async fn enqueue_many(&self, tasks: Vec<NewTask>) -> Result<Vec<TaskInserted>> {
        match &self.inner {
            Inner::Embedded(e) => e.enqueue_many(tasks).await,
            Inner::Remote(r) => {
                let reply: TasksReply<TaskInserted> = r
                    .post("/v1/tasks/batch", &serde_json::json!({ "tasks": tasks }))
                    .await?;
                Ok(reply.tasks)
            }
        }
    }

    /// A task with its attempt history.
    pub async fn task(&self, id: TaskId) -> Result<Task> {
        match &self.inner {
            Inner::Embedded(e) => e.task(id).await,
            Inner::Remote(r) => r.get(&format!("/v1/tasks/{id}"), &[]).await,
        }
    }

    /// Tasks matching the filter, newest first.
    pub async fn tasks(&self, filter: TaskFilter) -> Result<Vec<Task>> {
        match &self.inner {
            Inner::Embedded(e) => e.tasks(filter).await,
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
                    ("before", filter.before.map(|i| i.to_string())),
                ] {
                    if let Some(v) = v {
                        query.push((k, v));
                    }
                }
                let reply: TasksReply<Task> = r.get("/v1/tasks", &query).await?;
                Ok(reply.tasks)
            }
        }
    }

    /// Cancels a task (a running one is asked to stop).
    pub async fn cancel(&self, id: TaskId) -> Result<Task> {
        match &self.inner {
            Inner::Embedded(e) => e.cancel(id).await,
            Inner::Remote(r) => r.post(&format!("/v1/tasks/{id}/cancel"), &()).await,
        }
    }

    /// Runs a finished task again.
    pub async fn retry(&self, id: TaskId) -> Result<Task> {
        match &self.inner {
            Inner::Embedded(e) => e.retry(id).await,
            Inner::Remote(r) => r.post(&format!("/v1/tasks/{id}/retry"), &()).await,
        }
    }

    // ---- schedules and queues ----

    /// Creates or replaces a schedule (made at run time: no declaring group).
    pub async fn schedule_put(&self, def: ScheduleDef) -> Result<Schedule> {
        match &self.inner {
            Inner::Embedded(e) => e.schedule_put(def).await,
            Inner::Remote(r) => r.post("/v1/schedules", &def).await,
        }
    }

    /// One schedule.
    pub async fn schedule(&self, name: &str) -> Result<Schedule> {
        match &self.inner {
            Inner::Embedded(e) => e.schedule(name).await,
            Inner::Remote(r) => {
                r.get(&format!("/v1/schedules/{}", path_segment(name)), &[])
                    .await
            }
        }
    }

    /// Every schedule.
    pub async fn schedules(&self) -> Result<Vec<Schedule>> {
        match &self.inner {
            Inner::Embedded(e) => e.schedules().await,
            Inner::Remote(r) => {
                let reply: SchedulesReply = r.get("/v1/schedules", &[]).await?;
                Ok(reply.schedules)
            }
        }
    }

    /// Deletes a schedule; its tasks stay.
    pub async fn schedule_delete(&self, name: &str) -> Result<()> {
        match &self.inner {
            Inner::Embedded(e) => e.schedule_delete(name).await,
            Inner::Remote(r) => {
                r.delete(&format!("/v1/schedules/{}", path_segment(name)))
                    .await
            }
        }
    }

    /// Declares the schedules of `group` (see [`Engine::schedules_sync`]).
    pub async fn schedules_sync(
        &self,
        group: &str,
        defs: Vec<ScheduleDef>,
    ) -> Result<ScheduleSyncReport> {
        match &self.inner {
            Inner::Embedded(e) => e.schedules_sync(group, defs).await,
            Inner::Remote(r) => {
                r.put(
                    &format!("/v1/declared/{}", path_segment(group)),
                    &serde_json::json!({ "schedules": defs }),
                )
                .await
            }
        }
    }

    /// Every queue with its counts per state, each counted up to `count_limit`
    /// ([`sked_store::QUEUE_COUNT_LIMIT`] is the usual one; more than that is marked in
    /// [`QueueInfo::counts_at_least`]).
    pub async fn queues(&self, count_limit: u64) -> Result<Vec<QueueInfo>> {
        match &self.inner {
            Inner::Embedded(e) => e.queues(count_limit).await,
            Inner::Remote(r) => {
                let query = [("count_limit", count_limit.to_string())];
                let reply: QueuesReply = r.get("/v1/queues", &query).await?;
                Ok(reply.queues)
            }
        }
    }

    // ---- the worker protocol ----

    /// Claims due tasks (long-polling up to `req.wait`).
    pub async fn claim(&self, req: ClaimRequest) -> Result<Vec<Task>> {
        match &self.inner {
            Inner::Embedded(e) => e.claim(req).await,
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
                let items: Vec<(TaskId, i32)> = held.iter().map(|h| (h.id, h.attempt)).collect();
                e.heartbeat_many(&items, lease_ttl).await
            }
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
            Inner::Remote(r) => {
                let body = serde_json::json!({
                    "role": presence.role,
                    "queues": presence.queues,
                    "concurrency": presence.concurrency,
                    "stopping": presence.stopping,
                });
                let path = format!("/v1/workers/{}", path_segment(&presence.id));
                let _: serde_json::Value = r.put(&path, &body).await?;
                Ok(())
            }
        }
    }

    /// Waits until tasks may have become claimable since `after` (a value this returned
    /// before; 0 at first), or `timeout`. Safe to drop.
    pub async fn work_changed(&self, after: u64, timeout: Duration) -> Result<u64> {
        match &self.inner {
            Inner::Embedded(e) => Ok(e.work_changed(after, timeout).await),
            Inner::Remote(r) => r.work_changed(after, timeout).await,
        }
    }
}

#[derive(serde::Deserialize)]
struct TasksReply<T> {
    tasks: Vec<T>,
}

#[derive(serde::Deserialize)]
struct SchedulesReply {
    schedules: Vec<Schedule>,
}

#[derive(serde::Deserialize)]
struct QueuesReply {
    queues: Vec<QueueInfo>,
}
