//! Parameter and result types of the [`crate::Store`] operations.

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use sked_core::{NewTask, RetryPolicy, TaskId, TaskState};

/// A task to insert, possibly on behalf of a schedule occurrence.
#[derive(Debug, Clone)]
pub struct TaskInsert {
    pub task: NewTask,
    pub schedule: Option<String>,
    pub nominal_at: Option<Timestamp>,
}

impl From<NewTask> for TaskInsert {
    fn from(task: NewTask) -> TaskInsert {
        TaskInsert {
            task,
            schedule: None,
            nominal_at: None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct TaskInsertParams {
    pub tasks: Vec<TaskInsert>,
    pub now: Timestamp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TaskInserted {
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub id: TaskId,
    pub state: TaskState,
    /// The unique key was already held: no task was inserted and `id` is the holder.
    pub duplicate: bool,
    /// A debounced enqueue found the holder not started yet: it took the new payload and run
    /// time (see [`sked_core::NewTask::debounce`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub debounced: bool,
}

#[derive(Debug, Clone, Default)]
pub struct TaskListParams {
    pub states: Vec<TaskState>,
    pub queue: Option<String>,
    pub kind: Option<String>,
    pub schedule: Option<String>,
    /// Of this concurrency key.
    pub key: Option<String>,
    /// Of this unique key.
    pub unique_key: Option<String>,
    /// Of this workflow.
    pub workflow: Option<sked_core::WorkflowId>,
    /// Enqueued at or after this instant.
    pub since: Option<Timestamp>,
    /// Enqueued before this instant.
    pub until: Option<Timestamp>,
    /// Only tasks with a smaller id (for paging).
    pub before_id: Option<TaskId>,
    pub limit: u32,
    /// Read payloads and results (else they are null and errors are cut short).
    pub with_payloads: bool,
}

/// One task, due now and without a unique key, to insert already leased to a worker that waits
/// for work on this node (see [`crate::Store::task_insert_claimed`]).
#[derive(Debug, Clone)]
pub struct TaskInsertClaimedParams {
    pub task: TaskInsert,
    pub worker: String,
    pub lease_ttl: SignedDuration,
    /// A task with a timeout is leased at most until its start, its timeout and this grace
    /// ([`crate::rules::lease_end`]).
    pub timeout_grace: SignedDuration,
    pub now: Timestamp,
}

#[derive(Debug, Clone)]
pub struct TaskClaimParams {
    /// Queues to claim from; empty means every queue.
    pub queues: Vec<String>,
    /// Kinds this worker can run; empty means any.
    pub kinds: Vec<String>,
    pub max: u32,
    /// Only tasks of at least this priority (a worker whose prefetch buffer is full asks
    /// only for tasks that would start before what it holds).
    pub min_priority: Option<i32>,
    pub worker: String,
    pub lease_ttl: SignedDuration,
    /// A task with a timeout is leased at most until its start, its timeout and this grace
    /// ([`crate::rules::lease_end`]).
    pub timeout_grace: SignedDuration,
    pub now: Timestamp,
}

#[derive(Debug, Clone)]
pub struct TaskHeartbeatParams {
    pub id: TaskId,
    pub attempt: i32,
    pub lease_ttl: SignedDuration,
    /// A task with a timeout is leased at most until its start, its timeout and this grace
    /// ([`crate::rules::lease_end`]).
    pub timeout_grace: SignedDuration,
    pub now: Timestamp,
    /// What the attempt reports of its progress (checked by [`sked_core::check_progress`]);
    /// kept, with the attempt, when the heartbeat extends the lease.
    pub progress: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HeartbeatReply {
    pub lease_expires_at: Timestamp,
    /// The task was cancelled: the worker should stop it and report `cancelled`.
    pub cancel_requested: bool,
}

/// How an attempt ended. Exhaustive on purpose (unlike the enums embedders match on): the
/// engine and every backend must handle each outcome, and a new one should fail their build.
#[derive(Debug, Clone, PartialEq)]
pub enum FinishOutcome {
    Succeeded {
        result: Option<serde_json::Value>,
    },
    /// A failure: retried with backoff while attempts remain and `retryable`, else dead.
    Failed {
        error: String,
        retryable: bool,
    },
    /// Run again at `until` without spending an attempt.
    Snoozed {
        until: Timestamp,
    },
    /// The worker stopped because a cancel was requested.
    Cancelled,
    /// The worker gives the task back unstarted or unfinished (shutting down, or its prefetch
    /// buffer made room for more urgent work): available again at once, no attempt spent.
    Released,
}

#[derive(Debug, Clone)]
pub struct TaskFinishParams {
    pub id: TaskId,
    pub attempt: i32,
    pub outcome: FinishOutcome,
    pub now: Timestamp,
    /// A random number in [0, 1) for the backoff jitter (fixed in tests).
    pub jitter: f64,
}

/// What an ended attempt left of its task: enough for the engine's metrics and wake-ups and
/// for batch answers, which name only the id and the state. [`crate::Store::task_finish_many_lean`]
/// answers this instead of the whole task, so that a store may end an attempt without reading
/// its row first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskEnded {
    pub id: TaskId,
    pub queue: String,
    pub state: TaskState,
    pub attempt: i32,
    pub run_at: Timestamp,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
    pub schedule: Option<String>,
}

impl From<&sked_core::Task> for TaskEnded {
    fn from(t: &sked_core::Task) -> TaskEnded {
        TaskEnded {
            id: t.id,
            queue: t.queue.clone(),
            state: t.state,
            attempt: t.attempt,
            run_at: t.run_at,
            started_at: t.started_at,
            finished_at: t.finished_at,
            schedule: t.schedule.clone(),
        }
    }
}

impl From<sked_core::Task> for TaskEnded {
    fn from(t: sked_core::Task) -> TaskEnded {
        TaskEnded {
            id: t.id,
            queue: t.queue,
            state: t.state,
            attempt: t.attempt,
            run_at: t.run_at,
            started_at: t.started_at,
            finished_at: t.finished_at,
            schedule: t.schedule,
        }
    }
}

#[derive(Debug, Clone)]
pub struct TaskCancelParams {
    pub id: TaskId,
    pub now: Timestamp,
}

#[derive(Debug, Clone)]
pub struct TaskRetryParams {
    pub id: TaskId,
    pub now: Timestamp,
}

#[derive(Debug, Clone)]
pub struct TaskRescheduleParams {
    pub id: TaskId,
    pub run_at: Timestamp,
    pub now: Timestamp,
}

#[derive(Debug, Clone)]
pub struct TaskRescueParams {
    pub now: Timestamp,
    pub limit: u32,
}

#[derive(Debug, Clone)]
pub struct TaskExpireParams {
    pub now: Timestamp,
    pub limit: u32,
}

#[derive(Debug, Clone)]
pub struct TaskPruneParams {
    /// Tasks that finished before this (and whose dedup window has ended by then) go, but
    /// in a queue with a retention of its own for their state: those go once they finished
    /// longer than it before `now`.
    pub finished_before: Timestamp,
    pub now: Timestamp,
    /// At most this many tasks are deleted.
    pub limit: u32,
    /// `None`: every finished task is looked at. `Some`: only those that finished at or after
    /// this, for a pass that goes on where a complete one ended. A store that keeps deleted
    /// rows for a while (PostgreSQL, behind a held snapshot) then does not visit the older
    /// entries of its index of finished tasks.
    pub finished_since: Option<Timestamp>,
}

/// A page of queues by name.
#[derive(Debug, Clone)]
pub struct QueueListParams {
    /// Only queues whose name sorts after this one (for paging).
    pub after: Option<String>,
    pub limit: u32,
    /// How far each state is counted (see [`QueueInfo::counts_at_least`]).
    pub count_limit: u64,
    /// The instant [`QueueInfo::held`] and [`QueueInfo::rate_window`] are taken at.
    pub now: Timestamp,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = Queue))]
pub struct QueueInfo {
    pub name: String,
    pub paused: bool,
    pub concurrency_limit: Option<u32>,
    /// At most so many tasks start in any window of the period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<sked_core::openapi::Rate>))]
    pub rate: Option<sked_core::RateLimit>,
    /// With a rate limit, in lists: the starts its window holds now (the current rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_window: Option<u64>,
    /// At most so many tasks of one concurrency key run at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_key: Option<u32>,
    /// At most so many tasks of one concurrency key start in any window of the period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<sked_core::openapi::Rate>))]
    pub per_key_rate: Option<sked_core::RateLimit>,
    /// How long its ended tasks are kept, by state, where not the server's retention.
    #[serde(
        default,
        skip_serializing_if = "crate::retention::QueueRetention::is_default"
    )]
    pub retention: crate::retention::QueueRetention,
    /// How long the retries of its tasks without a backoff of their own wait (see
    /// [`sked_core::Backoff`]); without one, the default exponential backoff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<sked_core::openapi::Backoff>))]
    pub backoff: Option<sked_core::Backoff>,
    /// The order in which the tasks of one key start (see [`KeyOrder`]).
    #[serde(default, skip_serializing_if = "KeyOrder::is_default")]
    pub key_order: KeyOrder,
    /// In a queue with [`KeyOrder::Strict`]: how many keys a dead task stops (their next
    /// tasks wait until it is retried or deleted), counted among the queue's first
    /// [`QUEUE_COUNT_LIMIT`] dead tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys_stopped: Option<u64>,
    /// In lists: why the queue's available tasks wait now, when they do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<Held>,
    /// Tasks per state; states with none are left out. A state is counted only up to the
    /// limit the caller gave ([`QUEUE_COUNT_LIMIT`] unless told otherwise): see `counts_at_least`.
    pub counts: BTreeMap<TaskState, u64>,
    /// States that have more tasks than the counting limit: their count is the limit.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub counts_at_least: BTreeSet<TaskState>,
}

/// How far each queue's tasks of one state are counted unless a caller asks for more: counts
/// are read every few seconds (dashboard, `sked top`) and must not cost a scan of every task
/// kept. Counting stops here, and the state is marked `counts_at_least`.
pub const QUEUE_COUNT_LIMIT: u64 = 10_000;

/// The largest counting limit a caller may ask for.
pub const QUEUE_COUNT_LIMIT_MAX: u64 = 10_000_000;

impl QueueInfo {
    /// A queue with no tasks counted yet.
    pub fn new(name: String, paused: bool, concurrency_limit: Option<u32>) -> QueueInfo {
        QueueInfo {
            name,
            paused,
            concurrency_limit,
            rate: None,
            rate_window: None,
            per_key: None,
            per_key_rate: None,
            retention: Default::default(),
            backoff: None,
            key_order: KeyOrder::default(),
            keys_stopped: None,
            held: None,
            counts: BTreeMap::new(),
            counts_at_least: BTreeSet::new(),
        }
    }

    /// Records a row of [`crate::counts::queue_counts_sql`]: the counts in [`TaskState::ALL`]
    /// order, each taken with `LIMIT limit + 1`. More than `limit` means "at least `limit`";
    /// zero is left out.
    pub fn set_counts(&mut self, counts: [i64; crate::counts::COUNTS], limit: u64) {
        for (state, n) in TaskState::ALL.into_iter().zip(counts) {
            let n = n.max(0) as u64;
            if n > limit {
                self.counts.insert(state, limit);
                self.counts_at_least.insert(state);
            } else if n > 0 {
                self.counts.insert(state, n);
            }
        }
    }
}

/// Why a queue's available tasks wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = QueueHeld))]
pub struct Held {
    pub by: HeldBy,
    /// When a task may start again, when that is known (a rate window that frees).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<Timestamp>,
    /// (A task in a queue with strict order per key) the task that holds its key, which it
    /// waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behind: Option<Behind>,
}

/// The task that holds a key in a queue with [`KeyOrder::Strict`], which the key's other tasks
/// wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Behind {
    pub id: TaskId,
    /// Its state: unfinished, or dead (a dead task stops its key until it is retried or
    /// deleted).
    pub state: TaskState,
}

/// The order in which the tasks of one concurrency key start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum KeyOrder {
    /// As every queue's tasks start: by priority, then run time. A task waiting to retry does
    /// not hold its key's next tasks back.
    #[default]
    Priority,
    /// One at a time, in claim order (priority, run time, then enqueue order), and a task that
    /// started keeps its key until it ends well: while it waits to retry no other task of its
    /// key starts, and a dead one stops the key until it is retried or deleted. Needs a
    /// per-key limit of 1.
    Strict,
}

impl KeyOrder {
    /// Its name, as the API and the database spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyOrder::Priority => "priority",
            KeyOrder::Strict => "strict",
        }
    }

    pub fn is_default(&self) -> bool {
        *self == KeyOrder::Priority
    }
}

impl std::str::FromStr for KeyOrder {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        match s {
            "priority" => Ok(KeyOrder::Priority),
            "strict" => Ok(KeyOrder::Strict),
            _ => Err(format!(
                "unknown key order {s:?}: expected strict (a task that started keeps its key \
                 until it ends well) or priority"
            )),
        }
    }
}

/// The limit that holds a queue's tasks back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum HeldBy {
    /// The queue is paused.
    Paused,
    /// As many of its tasks run as its concurrency limit lets.
    Concurrency,
    /// Its rate window (or a burst's bucket) is full.
    Rate,
    /// (A task's key) as many tasks of its key run as the per-key limit lets.
    PerKey,
    /// (A task's key) its key's rate window is full.
    PerKeyRate,
    /// (A task's key, in a queue with strict order per key) a task of its key that started has
    /// not ended well: see [`Held::behind`].
    KeyOrder,
}

impl HeldBy {
    /// Its name, as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            HeldBy::Paused => "paused",
            HeldBy::Concurrency => "concurrency",
            HeldBy::Rate => "rate",
            HeldBy::PerKey => "per_key",
            HeldBy::PerKeyRate => "per_key_rate",
            HeldBy::KeyOrder => "key_order",
        }
    }
}

impl QueueInfo {
    /// Notes the queue's rate window at `now` (its logged starts and burst bucket) and says
    /// why its tasks wait, if they do: paused, at the concurrency limit (running tasks as
    /// counted), or with a full rate window.
    pub fn set_held(
        &mut self,
        starts: &[(Timestamp, u32)],
        bucket: Option<Timestamp>,
        now: Timestamp,
    ) {
        let room = self.rate.map(|rate| {
            let from = rate.window_start(now);
            let within = starts.iter().filter(|(at, _)| *at > from);
            self.rate_window = Some(within.map(|(_, n)| u64::from(*n)).sum());
            rate.room(starts, bucket, now)
        });
        let running = self.counts.get(&TaskState::Running).copied().unwrap_or(0);
        self.held = if self.paused {
            Some(Held {
                by: HeldBy::Paused,
                until: None,
                behind: None,
            })
        } else if self
            .concurrency_limit
            .is_some_and(|l| running >= u64::from(l))
        {
            Some(Held {
                by: HeldBy::Concurrency,
                until: None,
                behind: None,
            })
        } else {
            room.filter(|r| r.allowed == 0).map(|r| Held {
                by: HeldBy::Rate,
                until: r.frees_at,
                behind: None,
            })
        };
    }
}

#[derive(Debug, Clone, Default)]
pub struct QueueUpdateParams {
    pub name: String,
    pub paused: Option<bool>,
    /// `Some(None)` removes the limit.
    pub concurrency_limit: Option<Option<u32>>,
    /// `Some(None)` removes the rate limit.
    pub rate: Option<Option<sked_core::RateLimit>>,
    /// `Some(None)` removes the per-key limit.
    pub per_key: Option<Option<u32>>,
    /// `Some(None)` removes the per-key rate limit (which takes no burst).
    pub per_key_rate: Option<Option<sked_core::RateLimit>>,
    /// Retentions to set, each for an ended state (`None`: back to the server's).
    pub retention: Vec<(TaskState, Option<SignedDuration>)>,
    /// The backoff of its tasks without one of their own (`Some(None)`: back to the default).
    pub backoff: Option<Option<sked_core::Backoff>>,
    /// The order of a key's tasks (strict needs a per-key limit of 1, as set after this
    /// update).
    pub key_order: Option<KeyOrder>,
    /// The instant the answer's [`QueueInfo::held`] and [`QueueInfo::rate_window`] are taken
    /// at, as in lists; `None` leaves them out.
    pub now: Option<Timestamp>,
    /// Refuse a queue that has neither settings nor tasks (`NotFound`, nothing created)
    /// instead of creating it: a mistyped name is not a new queue.
    pub must_exist: bool,
}

#[derive(Debug, Clone)]
pub struct LeaseAcquireParams {
    pub name: String,
    pub holder: String,
    pub ttl: SignedDuration,
    pub now: Timestamp,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub name: String,
    pub holder: String,
    /// Grows by one each time the lease changes hands: a fencing token.
    pub token: i64,
    pub expires_at: Timestamp,
}

/// Which buckets of ended work to count: from `since`, each `bucket` long.
#[derive(Debug, Clone)]
pub struct ActivityParams {
    pub since: Timestamp,
    pub bucket: SignedDuration,
}

/// Work ended within one bucket of time.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ActivityBucket {
    pub start: Timestamp,
    pub succeeded: u64,
    /// Attempts that failed and were retried (a task that ran out of attempts is `dead`).
    pub failed: u64,
    pub dead: u64,
    pub cancelled: u64,
    /// Tasks that ended expired: not started by their deadline.
    #[serde(default)]
    pub expired: u64,
}

/// A process's sign of life.
#[derive(Debug, Clone)]
pub struct WorkerBeatParams {
    pub id: String,
    /// `worker` (claims tasks) or `node` (a server: API, scheduling, maybe built-in executors).
    pub role: String,
    /// The queues it works; empty for all.
    pub queues: Vec<String>,
    pub concurrency: Option<u32>,
    /// It is shutting down: recorded as stopped.
    pub stopping: bool,
    pub now: Timestamp,
}

/// The workers and nodes seen lately, most recently seen first.
#[derive(Debug, Clone)]
pub struct WorkerListParams {
    pub seen_since: Timestamp,
    pub limit: u32,
}

/// A worker or node as last seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = WorkerRecord))]
pub struct WorkerInfo {
    pub id: String,
    pub role: String,
    pub queues: Vec<String>,
    pub concurrency: Option<u32>,
    pub started_at: Timestamp,
    pub last_seen_at: Timestamp,
    pub stopped_at: Option<Timestamp>,
    /// Tasks it holds a lease on now.
    pub running: u64,
}

/// The backoff a failed attempt waits, given the task's own policy (else the default).
pub fn retry_delay(
    backoff: Option<&sked_core::Backoff>,
    attempt: i32,
    jitter: f64,
) -> SignedDuration {
    match backoff {
        Some(b) => b.delay(attempt, jitter),
        None => RetryPolicy::default().delay(attempt, jitter),
    }
}

/// A change announced by the backend, made by this or another process. Exhaustive on purpose:
/// the engine's wake-ups must handle each event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreEvent {
    /// Tasks were inserted or may have become claimable. `run_at`, when known, is when the
    /// first of them that waits (scheduled or retrying) is due, or, when none waits, the
    /// earliest run time among them.
    Tasks { run_at: Option<Timestamp> },
    /// A schedule changed, or a scheduled task finished (overlap and buffers depend on it).
    Schedules,
    /// A lease was given up: followers may take it at once.
    LeaseReleased { name: String },
    /// An attempt ended in a queue with a concurrency or per-key limit: room may have freed
    /// under it, which no task announcement says.
    Room,
    /// Announcements flow (again). Anything may have changed while they did not.
    Listening,
    /// Announcements stopped (the connection dropped): poll until `Listening`.
    Deaf,
}

mod batches;
mod bulk;
mod schedules;
mod workflows;
pub use batches::*;
pub use bulk::*;
pub use schedules::*;
pub use workflows::*;
