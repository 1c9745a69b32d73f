//! The wire types of the HTTP API (`/v1`), defined once: the server answers with them, the
//! remote [`crate::Client`] reads them, and the CLI prints them (`--json` is these values,
//! serialized). The worker protocol's batch messages are in [`worker`]; the error body and
//! its codes in [`ErrorCode`].

mod batches;
mod error;
mod schedules;
pub mod worker;
mod workflows;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use sked_core::{NewTask, ScheduleDef, Task, TaskId, TaskState};
use sked_store::{ActivityBucket, Occurrence, QueueInfo, Schedule, TaskInserted, WorkerInfo};

pub use batches::BatchList;
pub use error::{ErrorBody, ErrorCode, ErrorDetail};
pub use schedules::{SchedulesApply, check_defs, describe, schedule_defs};
pub use workflows::{WorkflowCreated, WorkflowList, WorkflowTaskList};

/// `GET /v1/tasks`: tasks, newest first, without attempt history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TaskList {
    /// The tasks, newest first; without `include=payload` their payloads are left out, and
    /// without `include=result` their results.
    pub tasks: Vec<Task>,
    /// When more tasks match: the `before` that asks for the next page (the last id here).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub next_before: Option<sked_core::TaskId>,
}

/// `POST /v1/tasks/batch`: tasks enqueued in one transaction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = Batch))]
#[serde(deny_unknown_fields)]
pub struct TaskBatch {
    /// The tasks, all or none.
    #[cfg_attr(feature = "openapi", schema(max_items = 10000))]
    pub tasks: Vec<NewTask>,
}

/// The answer to `POST /v1/tasks/batch`: one line per task, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = BatchInserted))]
pub struct TasksInserted {
    /// Each task's id, and whether its unique key was held already.
    pub tasks: Vec<TaskInserted>,
}

/// `POST /v1/tasks/{id}/reschedule`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Reschedule {
    /// RFC 3339, or `+DURATION` from now.
    pub run_at: String,
}

/// A schedule as the API shows it: the stored fields, and its spec in words.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = Schedule))]
pub struct ScheduleView {
    /// The schedule.
    #[serde(flatten)]
    pub schedule: Schedule,
    /// The spec in words (`every day at 03:00`), when it can be said.
    pub description: Option<String>,
}

impl std::ops::Deref for ScheduleView {
    type Target = Schedule;

    fn deref(&self) -> &Schedule {
        &self.schedule
    }
}

impl From<Schedule> for ScheduleView {
    fn from(schedule: Schedule) -> ScheduleView {
        ScheduleView {
            description: sked_core::schedule::describe(&schedule.spec),
            schedule,
        }
    }
}

/// `GET /v1/calendars`: every calendar, by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CalendarList {
    /// The calendars, by name.
    pub calendars: Vec<sked_store::CalendarInfo>,
}

/// `PUT /v1/calendars/{name}`: a calendar's dates, and the zone they are in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CalendarDates {
    /// Dates (`2026-12-25`) on which no occurrence of a schedule that skips the calendar
    /// fires; 1 to 10,000 of them.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<String>))]
    pub dates: Vec<jiff::civil::Date>,
    /// An IANA time zone the dates are in; by default, each schedule's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
}

impl CalendarDates {
    /// The calendar named `name` of these dates.
    pub fn named(self, name: &str) -> sked_core::CalendarDef {
        sked_core::CalendarDef {
            name: name.to_string(),
            dates: self.dates,
            tz: self.tz,
        }
    }
}

/// `GET /v1/schedules`: a page of schedules by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScheduleList {
    /// The schedules.
    pub schedules: Vec<ScheduleView>,
    /// When more follow: the `after` that asks for the next page.
    #[serde(default)]
    pub next_after: Option<String>,
    /// How many schedules the filter takes in all (with `include=count`), counted up to
    /// `count_limit` (10,000 unless asked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// The count stopped at its limit: there are at least `count`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub count_at_least: bool,
}

/// How far `GET /v1/schedules?include=count` counts unless asked (`count_limit`).
pub const SCHEDULE_COUNT_LIMIT: u64 = 10_000;
/// The most `count_limit` may ask for.
pub const SCHEDULE_COUNT_LIMIT_MAX: u64 = 100_000_000;

/// `GET /v1/schedules/{name}/occurrences`: the ledger, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OccurrenceList {
    /// Each occurrence: enqueued, skipped, buffered or missed.
    pub occurrences: Vec<Occurrence>,
}

/// A schedule with its recent occurrences: what `sked schedule get` shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleDetail {
    /// The schedule.
    #[serde(flatten)]
    pub schedule: ScheduleView,
    /// Its latest occurrences, newest first.
    pub occurrences: Vec<Occurrence>,
}

/// `POST /v1/schedules/{name}/trigger`: the task enqueued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Triggered {
    /// Its id.
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub id: TaskId,
}

/// `GET /v1/tasks/{id}/held`: why an available task waits (`null`: it does not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TaskHeld {
    /// What holds it back, and until when if known.
    pub held: Option<sked_store::Held>,
}

/// `POST /v1/tasks/bulk`: one batch of a retry or cancel of every task a filter matches, or
/// (`dry_run`) how many it matches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct BulkRequest {
    /// `retry` (finished tasks), `cancel` (unfinished ones) or `delete` (finished ones).
    pub action: sked_store::BulkAction,
    /// The states to match (each one the action applies to).
    pub state: Vec<sked_core::TaskState>,
    /// Only tasks of this queue.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<sked_core::openapi::Name>))]
    pub queue: Option<String>,
    /// Only tasks of this kind.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<sked_core::openapi::Name>))]
    pub kind: Option<String>,
    /// Only tasks enqueued before this instant.
    #[serde(default)]
    pub before: Option<Timestamp>,
    /// Only tasks enqueued at or after this instant.
    #[serde(default)]
    pub since: Option<Timestamp>,
    /// Only tasks of this concurrency key.
    #[serde(default)]
    pub key: Option<String>,
    /// Only tasks of this unique key.
    #[serde(default)]
    pub unique_key: Option<String>,
    /// Only tasks of this workflow.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub workflow: Option<sked_core::WorkflowId>,
    /// Only tasks with a larger id: the previous batch's `next_after`.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub after: Option<TaskId>,
    /// Tasks in this batch at most (default 500, at most 10,000).
    #[serde(default)]
    pub limit: Option<u32>,
    /// Count the tasks that match; change nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// The batch size of a bulk request that names none.
pub const DEFAULT_BULK_BATCH: u32 = 500;

impl BulkRequest {
    /// Runs it on `engine`: the count for a dry run, else one batch.
    pub async fn run(&self, engine: &crate::Engine) -> crate::Result<BulkAnswer> {
        if self.dry_run {
            let n = engine.task_bulk_count(self.action, self.filter()).await?;
            return Ok(BulkAnswer {
                matched: Some(n),
                ..BulkAnswer::default()
            });
        }
        let limit = self.limit.unwrap_or(DEFAULT_BULK_BATCH);
        let batch = engine
            .task_bulk(self.action, self.filter(), self.after, limit)
            .await?;
        Ok(BulkAnswer {
            matched: None,
            changed: batch.changed,
            next_after: batch.next_after,
        })
    }

    /// The filter it names.
    pub fn filter(&self) -> sked_store::BulkFilter {
        sked_store::BulkFilter {
            states: self.state.clone(),
            queue: self.queue.clone(),
            kind: self.kind.clone(),
            before: self.before,
            since: self.since,
            key: self.key.clone(),
            unique_key: self.unique_key.clone(),
            workflow: self.workflow,
        }
    }
}

/// What a bulk request did: how many tasks match (a dry run), or what one batch changed and
/// where the next one starts (`null`: done).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BulkAnswer {
    /// A dry run: how many tasks match now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matched: Option<u64>,
    /// Tasks this batch changed.
    pub changed: u64,
    /// The `after` of the next batch; `null` when this one was the last.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub next_after: Option<TaskId>,
}

/// `POST /v1/schedules/{name}/backfill`: the range of past occurrences to enqueue, both ends
/// included.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct BackfillRequest {
    /// The first nominal time (RFC 3339).
    pub from: Timestamp,
    /// The last nominal time (RFC 3339), not later than now.
    pub to: Timestamp,
}

/// `PUT /v1/declared/{group}`: the schedules a group of code declares.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Declared {
    /// Every schedule the group declares.
    pub schedules: Vec<ScheduleDef>,
}

/// `GET /v1/cron/next`: the next fire times of an expression.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CronNext {
    /// The expression.
    pub expr: String,
    /// The zone the times are in.
    pub tz: String,
    /// RFC 3339 times with the zone's offset.
    pub times: Vec<String>,
}

/// `GET /v1/queues`: a page of queues by name, each with its counts per state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QueueList {
    /// The queues.
    pub queues: Vec<QueueInfo>,
    /// When more follow: the `after` that asks for the next page.
    #[serde(default)]
    pub next_after: Option<String>,
}

/// `PUT /v1/queues/{name}/limit`: each limit given is set (`null` removes it), each left
/// out stays as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct QueueLimit {
    /// Tasks of the queue running at once (also read as `limit`).
    #[serde(
        default,
        alias = "limit",
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<u32>))]
    pub concurrency: Option<Option<u32>>,
    /// Tasks of the queue started in any window of a period, as `10/s`, `20/min`, `1000/d`.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<sked_core::openapi::Rate>))]
    pub rate: Option<Option<sked_core::RateLimit>>,
    /// Starts a quiet queue may make beyond its rate in one window (with `rate` only; the same
    /// as `10/s burst 5`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(maximum = 1000000))]
    pub burst: Option<u32>,
    /// Tasks of one concurrency key running at once; claims take keys in turn.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<u32>))]
    pub per_key: Option<Option<u32>>,
    /// Tasks of one concurrency key started in any window of a period (`5/s`); no burst.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<sked_core::openapi::Rate>))]
    pub per_key_rate: Option<Option<sked_core::RateLimit>>,
    /// The order in which one key's tasks start: `strict` (one at a time, and a task that
    /// started keeps its key until it ends well: its retries come before the key's next task,
    /// and a dead one stops the key until retried or deleted; needs `per_key` 1) or `priority`
    /// (the default: a task waiting to retry lets the key's next one start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_order: Option<sked_store::KeyOrder>,
}

impl QueueLimit {
    /// The per-key rate to set, checked: it takes no burst.
    pub fn per_key_rate(&self) -> Result<Option<Option<sked_core::RateLimit>>, String> {
        match self.per_key_rate {
            Some(Some(r)) if r.burst > 0 => Err(format!(
                "a per-key rate takes no burst: {} per {}",
                r.limit,
                sked_core::format_duration(r.period)
            )),
            other => Ok(other),
        }
    }

    /// Whether it changes anything.
    pub fn is_empty(&self) -> bool {
        self.concurrency.is_none()
            && self.rate.is_none()
            && self.burst.is_none()
            && self.per_key.is_none()
            && self.per_key_rate.is_none()
            && self.key_order.is_none()
    }

    /// The rate limit to set, with the burst in it: `None` leaves the rate as it is,
    /// `Some(None)` removes it. A burst needs a rate beside it, and is given once.
    pub fn rate_with_burst(&self) -> Result<Option<Option<sked_core::RateLimit>>, String> {
        let Some(burst) = self.burst else {
            return Ok(self.rate);
        };
        match self.rate {
            Some(Some(rate)) if rate.burst == 0 || rate.burst == burst => rate
                .with_burst(burst)
                .map(|r| Some(Some(r)))
                .map_err(|e| e.to_string()),
            Some(Some(rate)) => Err(format!(
                "the rate {rate} has a burst already: give the burst once"
            )),
            _ => Err(
                "a burst goes with a rate: set both, like {\"rate\": \"10/s\", \"burst\": 5}"
                    .to_string(),
            ),
        }
    }
}

/// `PUT /v1/queues/{name}/backoff`: how long the retries of the queue's tasks without a
/// backoff of their own wait (`null`: the default exponential backoff).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct QueueBackoffChange {
    /// `exp:BASE..MAX`, `fixed:D`, `linear:STEP..MAX` or a list of delays (`10s,1m,10m`).
    #[cfg_attr(feature = "openapi", schema(value_type = Option<sked_core::openapi::Backoff>))]
    pub backoff: Option<sked_core::Backoff>,
}

/// `PUT /v1/queues/{name}/retention`: how long the queue keeps its ended tasks, by the state
/// they ended in. Each state given is set (`null`: back to the server's `--retention`), each
/// left out stays as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct QueueRetentionChange {
    /// Succeeded tasks are kept this long after they ended (like `1d`).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<sked_core::openapi::Duration>))]
    pub succeeded: Option<Option<String>>,
    /// Dead tasks, likewise.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<sked_core::openapi::Duration>))]
    pub dead: Option<Option<String>>,
    /// Cancelled tasks, likewise.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<sked_core::openapi::Duration>))]
    pub cancelled: Option<Option<String>>,
    /// Expired tasks, likewise.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<sked_core::openapi::Duration>))]
    pub expired: Option<Option<String>>,
}

impl QueueRetentionChange {
    /// The retentions to set, checked: each state with its duration (`None`: the server's).
    pub fn changes(&self) -> Result<Vec<(TaskState, Option<SignedDuration>)>, String> {
        let given = [
            (TaskState::Succeeded, &self.succeeded),
            (TaskState::Dead, &self.dead),
            (TaskState::Cancelled, &self.cancelled),
            (TaskState::Expired, &self.expired),
        ];
        let mut out = Vec::new();
        for (state, keep) in given {
            let Some(keep) = keep else { continue };
            let keep = keep
                .as_deref()
                .map(sked_core::parse_duration)
                .transpose()
                .map_err(|e| format!("{state}: {e}"))?;
            sked_store::retention::QueueRetention::check(state, keep).map_err(|e| e.to_string())?;
            out.push((state, keep));
        }
        if out.is_empty() {
            return Err(
                "name a state whose retention to set: succeeded, dead, cancelled or \
                 expired (like \"1d\"; null: the server's --retention)"
                    .into(),
            );
        }
        Ok(out)
    }
}

/// A field that is present, `null` or not: `Some(None)` for `null`; absent fields take the
/// default, `None`.
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// A worker or node as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = Worker))]
pub struct WorkerView {
    /// What it told and what it holds.
    #[serde(flatten)]
    pub worker: WorkerInfo,
    /// Seen in the last three minutes and not stopped.
    pub alive: bool,
}

impl std::ops::Deref for WorkerView {
    type Target = WorkerInfo;

    fn deref(&self) -> &WorkerInfo {
        &self.worker
    }
}

/// `GET /v1/workers`: workers and nodes seen in the last day, most recently seen first, at
/// most `limit` of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerList {
    /// The workers and nodes.
    pub workers: Vec<WorkerView>,
    /// Whether more were seen than listed.
    #[serde(default)]
    pub more: bool,
}

/// `PUT /v1/workers/{id}`: a worker's sign of life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = WorkerBeat))]
#[serde(deny_unknown_fields)]
pub struct Beat {
    /// `worker` or `node`.
    #[serde(default = "worker_role")]
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^(worker|node)$", default = "worker")
    )]
    pub role: String,
    /// The queues it works (all when empty).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<sked_core::openapi::Name>, max_items = 100))]
    pub queues: Vec<String>,
    /// How many tasks it runs at once.
    #[serde(default)]
    pub concurrency: Option<u32>,
    /// It is leaving.
    #[serde(default)]
    pub stopping: bool,
}

fn worker_role() -> String {
    "worker".into()
}

/// An acknowledgement without a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Ack {
    /// Always `true`.
    pub ok: bool,
}

/// `GET /v1/cluster`: the node answering and the leader.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Cluster {
    /// The node answering.
    pub node: String,
    /// The holder of the leader lease, `None` while nobody holds it.
    pub leader: Option<String>,
    /// When the holder's lease runs out unless renewed.
    pub leader_until: Option<jiff::Timestamp>,
    /// The store's backend: `sqlite` or `postgres`.
    pub backend: String,
}

/// `GET /v1/activity`: ended work per bucket, oldest first, every bucket present.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Activity {
    /// The bucket width, like `1m`.
    pub bucket: String,
    /// The buckets.
    pub buckets: Vec<ActivityBucket>,
}

/// `GET /v1/kinds`: figures per task kind over the last `minutes`, by kind name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KindStatsList {
    /// The window, in minutes back from now.
    pub minutes: u32,
    /// True when more runs ended in the window than are read (10,000 ended tasks and as many
    /// failed attempts): the figures are then of a sample.
    pub sampled: bool,
    /// One entry per kind that ran or was cancelled in the window, by kind name.
    pub kinds: Vec<sked_store::kinds::KindStats>,
}

/// `GET /healthz`: liveness, without touching the database. Who the node is only to a client
/// the server trusts (the token, or without a token a loopback host name); anyone else gets
/// `status` alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Health {
    /// Always `ok`.
    pub status: String,
    /// This node's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Whether it holds the leader lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<bool>,
    /// `sqlite` or `postgres`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
}

/// What `sked top` shows: the cluster, queues, ended work, schedules and workers at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Overview {
    /// The node answering and the leader.
    pub cluster: Cluster,
    /// Queues with counts.
    pub queues: Vec<QueueInfo>,
    /// Ended work per minute over the last 15 minutes.
    pub activity: Activity,
    /// The first schedules by name (at most [`OVERVIEW_SCHEDULES`]).
    pub schedules: Vec<ScheduleView>,
    /// How many schedules there are in all, counted up to [`SCHEDULE_COUNT_LIMIT`].
    #[serde(default)]
    pub schedule_count: u64,
    /// There are at least `schedule_count`.
    #[serde(default)]
    pub schedule_count_at_least: bool,
    /// Workers and nodes.
    pub workers: Vec<WorkerView>,
}

/// The most schedules an [`Overview`] shows.
pub const OVERVIEW_SCHEDULES: u32 = 20;

/// What `sked task import` reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImportReport {
    /// Tasks created.
    pub imported: u64,
    /// Tasks whose unique key was held already (not created).
    pub duplicates: u64,
    /// How long it took.
    pub seconds: f64,
}
