//! The [`Store`] trait is sked's only door to persistence: one method per operation, named
//! noun-first, each taking a `*Params` struct. Every backend (SQLite, PostgreSQL) implements it
//! and must pass the shared conformance suite (the `conformance` feature, for backends' tests).
//!
//! Every operation that depends on the time takes `now` explicitly, so tests control time and
//! backends never read a clock of their own.

#[cfg(feature = "bench")]
pub mod bench;
pub mod columns;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod counts;
mod error;
pub mod expiry;
pub mod kept;
pub mod keyed;
pub mod kinds;
pub mod page;
pub mod rate;
pub mod retention;
pub mod rules;
pub mod states;
mod types;

use async_trait::async_trait;
use sked_core::{Task, TaskId};

pub use error::{ErrorKind, Result, StoreError};
pub use page::{Page, TaskPage};
pub use types::*;

/// Persistence for tasks, queues, schedules, their occurrence ledger and leases.
///
/// Durability: when a method that writes returns `Ok`, the change is committed to disk.
#[async_trait]
pub trait Store: Send + Sync + std::fmt::Debug + 'static {
    /// A short name for logs and benchmarks (`sqlite`, `postgres`).
    fn backend(&self) -> &'static str;

    /// Changes made by other processes, when the backend announces them (PostgreSQL
    /// LISTEN/NOTIFY), and changes an operation makes beyond what it answers (tasks released
    /// by their parents' end). `None` means it does not: callers poll.
    fn subscribe(&self) -> Option<tokio::sync::broadcast::Receiver<StoreEvent>> {
        None
    }

    /// Whether announcements flow right now. Read it after [`Store::subscribe`]: later
    /// changes arrive as `Listening` and `Deaf` events.
    fn listening(&self) -> bool {
        false
    }

    /// The database server's clock, when nodes share one: every node measures its offset to it,
    /// so that leases and fire times agree however skewed the nodes' own clocks are. `None`
    /// for an embedded database.
    async fn server_time(&self) -> Result<Option<jiff::Timestamp>> {
        Ok(None)
    }

    /// Inserts tasks in one transaction. A task whose unique key is held by an unfinished task
    /// is not inserted; that task's id is returned with `duplicate: true`.
    async fn task_insert_many(&self, params: TaskInsertParams) -> Result<Vec<TaskInserted>>;

    /// Inserts one task and leases it at once to `worker`, as a claim would (attempt 1,
    /// running, the lease ending `lease_ttl` after `now`), unless its queue is paused or has a
    /// concurrency limit: then it is inserted available, as by [`Store::task_insert_many`],
    /// and announced. The leased task comes back with its answer. The task must be due at
    /// `now` and have no unique key.
    async fn task_insert_claimed(
        &self,
        params: TaskInsertClaimedParams,
    ) -> Result<(TaskInserted, Option<Task>)>;

    /// A task with its attempt history.
    async fn task_get(&self, id: TaskId) -> Result<Task>;

    /// The states of these tasks, in the order given (`None`: no such task): one read,
    /// however many.
    async fn task_states(
        &self,
        ids: Vec<TaskId>,
    ) -> Result<Vec<(TaskId, Option<sked_core::TaskState>)>>;

    /// A page of the tasks matching the filters, newest first, without attempt history; at
    /// most `limit` tasks and about [`page::LIST_BYTES_MAX`] bytes (read row by row with a
    /// [`page::PageBuilder`]). Without `with_payloads`, payloads and results are null and
    /// errors are cut to [`page::LEAN_ERROR_CHARS`], none of them read whole.
    async fn task_list(&self, params: TaskListParams) -> Result<TaskPage>;

    /// Makes due scheduled/retrying tasks available, then claims up to `max` available tasks in
    /// priority order, then run_at, then id; paused queues and queues at their concurrency
    /// limit give nothing. Each claimed task is `running` with a lease and a new attempt number.
    async fn task_claim(&self, params: TaskClaimParams) -> Result<Vec<Task>>;

    /// Extends the lease of a running task held with `attempt`.
    async fn task_heartbeat(&self, params: TaskHeartbeatParams) -> Result<HeartbeatReply>;

    /// Extends the leases of many running tasks (a worker's whole holding, each beat). One
    /// result per item, in order.
    async fn task_heartbeat_many(
        &self,
        params: Vec<TaskHeartbeatParams>,
    ) -> Result<Vec<Result<HeartbeatReply>>> {
        let mut out = Vec::with_capacity(params.len());
        for p in params {
            match self.task_heartbeat(p).await {
                Err(e) if e.kind() == ErrorKind::Unavailable => return Err(e),
                r => out.push(r),
            }
        }
        Ok(out)
    }

    /// Ends attempts (complete, fail, snooze, acknowledge cancel), each a compare-and-set on
    /// `running` and the attempt number. One result per item, in order.
    async fn task_finish_many(&self, params: Vec<TaskFinishParams>) -> Result<Vec<Result<Task>>>;

    /// [`Store::task_finish_many`], answering only what [`TaskEnded`] says of each task (the
    /// same checks, the same rows written, the same errors). Batch endings from workers go
    /// this way: a store may write successes without reading their rows.
    async fn task_finish_many_lean(
        &self,
        params: Vec<TaskFinishParams>,
    ) -> Result<Vec<Result<TaskEnded>>> {
        let answers = self.task_finish_many(params).await?;
        Ok(answers
            .into_iter()
            .map(|r| r.map(TaskEnded::from))
            .collect())
    }

    /// Inserts a workflow's tasks and their edges in one transaction, all or nothing: each
    /// task waits for the tasks its `after` names besides its own `depends_on`. A parent that
    /// does not exist is `Invalid`, naming it, and nothing is made.
    async fn workflow_create(&self, params: WorkflowCreateParams) -> Result<WorkflowCreated>;

    /// A workflow with its tasks counted by state. `NotFound` when there is none (or its
    /// tasks have all been pruned).
    async fn workflow_get(&self, id: sked_core::WorkflowId) -> Result<WorkflowInfo>;

    /// A page of workflows, newest first, each with its counts.
    async fn workflow_list(&self, params: WorkflowListParams) -> Result<Page<WorkflowInfo>>;

    /// A page of a workflow's tasks in the order they were made, each with the names of the
    /// tasks of the workflow it waits for. `NotFound` when there is no such workflow.
    async fn workflow_tasks(&self, params: WorkflowTasksParams) -> Result<Page<WorkflowNode>>;

    /// Opens a batch. Tasks join it with [`sked_core::NewTask::batch`]: a batch that does not
    /// exist is `Invalid`, one whose callbacks were enqueued is a `Conflict`, and the insert
    /// makes nothing.
    async fn batch_open(&self, params: BatchOpenParams) -> Result<BatchInfo>;

    /// Closes a batch (again: no change). When its tasks have all ended, its callbacks are
    /// enqueued in the same transaction; otherwise the end of its last task enqueues them, in
    /// that ending's transaction. Either way once. `NotFound` when there is no such batch.
    async fn batch_close(&self, params: BatchCloseParams) -> Result<BatchInfo>;

    /// A batch with its tasks counted by state. `NotFound` when there is none.
    async fn batch_get(&self, id: sked_core::BatchId) -> Result<BatchInfo>;

    /// A page of batches, newest first, each with its counts.
    async fn batch_list(&self, params: BatchListParams) -> Result<Page<BatchInfo>>;

    /// Cancels a task that has not started, or asks a running one to stop.
    async fn task_cancel(&self, params: TaskCancelParams) -> Result<Task>;

    /// Runs a finished task again (available now, with at least one attempt left).
    async fn task_retry(&self, params: TaskRetryParams) -> Result<Task>;

    /// Moves the run_at of a task that has not started.
    async fn task_reschedule(&self, params: TaskRescheduleParams) -> Result<Task>;

    /// Re-queues running tasks whose lease expired (or marks them dead when out of attempts,
    /// cancelled when a cancel was requested). Returns the rescued ids.
    async fn task_rescue(&self, params: TaskRescueParams) -> Result<Vec<TaskId>>;

    /// Ends `expired` the tasks that have not started by their deadline (`expires_at` at or
    /// before `now`, attempt 0, not running), at most `limit`, soonest deadline first, doing
    /// to the tasks waiting for them and to their batches what any end does. Returns their
    /// ids. Claims never take such a task, whether or not this has run.
    async fn task_expire(&self, params: TaskExpireParams) -> Result<Vec<TaskId>>;

    /// Deletes one task that has ended (succeeded, dead or cancelled), with its attempts: not
    /// found when there is no such task, a conflict when it has not ended.
    async fn task_delete(&self, id: TaskId) -> Result<()>;

    /// Deletes finished tasks that finished before the cutoff (and at or after
    /// `params.finished_since`, when given), oldest first within each queue. Returns how many.
    async fn task_prune(&self, params: TaskPruneParams) -> Result<u64>;

    /// The earliest run_at of a scheduled or retrying task: when a worker should look next.
    async fn task_next_run_at(&self) -> Result<Option<jiff::Timestamp>>;

    /// When a rate limit that held tasks back in one of this store's recent claims lets one
    /// start again: a worker that found nothing should look then too. Known without asking
    /// the database; `None` once that time has passed.
    fn task_held_until(&self, now: jiff::Timestamp) -> Option<jiff::Timestamp> {
        let _ = now;
        None
    }

    /// A page of the queues that have tasks or settings, by name, with counts per state, each
    /// counted up to `count_limit` (beyond it the state is marked `counts_at_least`). The cost
    /// is bounded by `limit` × states × `count_limit`, however many tasks and queues are kept.
    async fn queue_list(&self, params: QueueListParams) -> Result<Page<QueueInfo>>;

    /// Pauses, resumes or limits a queue (created on first use, unless
    /// [`QueueUpdateParams::must_exist`]).
    async fn queue_update(&self, params: QueueUpdateParams) -> Result<QueueInfo>;

    /// Removes a queue's settings (pause, limits) when no task of any state is in it, so that
    /// it leaves the list. A queue with tasks is a `Conflict` and keeps its settings; a queue
    /// with neither settings nor tasks is `NotFound`.
    async fn queue_remove(&self, name: &str) -> Result<()>;

    /// Acquires or renews a named lease. `None` when another holder has it.
    async fn lease_acquire(&self, params: LeaseAcquireParams) -> Result<Option<Lease>>;

    /// One queue's settings and counts and, at `now`, why its tasks wait (a queue never set or
    /// used has no settings and no tasks).
    async fn queue_get(&self, name: &str, now: jiff::Timestamp) -> Result<QueueInfo>;

    /// One concurrency key's running tasks and logged starts in its queue.
    async fn queue_key_usage(&self, params: keyed::KeyUsageParams) -> Result<keyed::KeyUsage>;

    /// Gives a lease up if `holder` has it.
    async fn lease_release(&self, name: &str, holder: &str) -> Result<()>;

    /// The current holder of a lease, if any holds it at `now`.
    async fn lease_get(&self, name: &str, now: jiff::Timestamp) -> Result<Option<Lease>>;

    /// One batch of a bulk operation: the action on the first `limit` tasks (by id, after
    /// `after`) that match the filter and are in a state it applies to, in one transaction.
    async fn task_bulk(&self, params: TaskBulkParams) -> Result<BulkBatch>;

    /// How many tasks a bulk operation's filter matches now (what `--dry-run` reports).
    async fn task_bulk_count(&self, filter: BulkFilter) -> Result<u64>;

    /// Creates or replaces a schedule. `next_fire_at` is used when the schedule is new or its
    /// spec, zone or paused flag changed; otherwise the stored one is kept.
    async fn schedule_upsert(&self, params: ScheduleUpsertParams) -> Result<Schedule>;

    /// Creates or replaces many schedules in one transaction (see [`ScheduleWriteParams`]):
    /// those that differ from the stored ones are written (their runs made ahead withdrawn),
    /// the same ones are left as they are, and with `prune` the group's schedules not among
    /// them are deleted. An invalid one, or a name given twice, changes nothing and is named in
    /// the error. Concurrent writes of one group run one after the other.
    async fn schedule_write_many(&self, params: ScheduleWriteParams) -> Result<ScheduleSyncReport>;

    async fn schedule_get(&self, name: &str) -> Result<Schedule>;

    /// A page of schedules by name: at most `limit` and about [`page::LIST_BYTES_MAX`] bytes
    /// (read row by row with a [`page::PageBuilder`]). Without `with_payloads`, the
    /// templates' payloads are null.
    async fn schedule_list(&self, params: ScheduleListParams) -> Result<Page<Schedule>>;

    /// How many schedules the filter takes, counted up to `limit` + 1: more than `limit` when
    /// the answer is above it (so that counting a million costs what counting `limit` costs).
    async fn schedule_count(&self, filter: ScheduleFilter, limit: u64) -> Result<u64>;

    /// Deletes a schedule and its ledger; its tasks stay, but for runs made ahead whose time
    /// has not come at `now`, which are withdrawn. `false` if there was none.
    async fn schedule_delete(&self, name: &str, now: jiff::Timestamp) -> Result<bool>;

    /// Creates or replaces a calendar, checked ([`sked_core::CalendarDef::validate`]: its
    /// dates sorted, each once). The schedules that skip it read its dates when they are next
    /// planned: an occurrence planned already (made ahead, at most the look-ahead before its
    /// time) keeps its outcome.
    async fn calendar_put(&self, params: CalendarPutParams) -> Result<CalendarInfo>;

    async fn calendar_get(&self, name: &str) -> Result<CalendarInfo>;

    /// Every calendar, by name.
    async fn calendar_list(&self) -> Result<Vec<CalendarInfo>>;

    /// Deletes a calendar; `false` if there was none. One that a schedule skips is a
    /// `Conflict` naming the schedules, and stays.
    async fn calendar_delete(&self, name: &str) -> Result<bool>;

    /// Pauses or resumes; on resume the next fire time is the one given.
    async fn schedule_set_paused(&self, params: SchedulePauseParams) -> Result<Schedule>;

    /// Unpaused schedules with an occurrence due at `now` or a buffered occurrence, each with
    /// its unfinished tasks.
    async fn schedule_due(&self, params: ScheduleDueParams) -> Result<Vec<DueSchedule>>;

    /// Applies a materialisation plan in one transaction: cancels, records every occurrence in
    /// the ledger (at most one row per schedule and nominal time), makes a run (its task or
    /// its workflow) per `enqueued` occurrence and advances the schedule; answers the runs. Fails with a conflict, changing
    /// nothing, when the schedule's next fire time is no longer `expected_next_fire_at`.
    async fn schedule_apply(&self, params: ScheduleApplyParams) -> Result<Vec<RunMade>>;

    /// One pass of the scheduler, in one transaction: plans the schedules whose time to be
    /// looked at has come (at most `limit`, oldest first; on PostgreSQL skipping those another
    /// node is planning), each through [`rules::plan_due`]: due occurrences become tasks or
    /// ledger lines, occurrences to come within the horizon are made ahead as tasks due at
    /// their time, and each schedule says when to be looked at again. Each occurrence gets at
    /// most one ledger line and one task, whatever the nodes do.
    async fn schedule_materialise(
        &self,
        params: ScheduleMaterialiseParams,
    ) -> Result<MaterialiseReport>;

    /// When the earliest schedule needs planning next (`None`: none does).
    async fn schedule_next_look_at(&self) -> Result<Option<jiff::Timestamp>>;

    /// Enqueues the given past occurrences that have no run yet, in one transaction: an
    /// occurrence the ledger has as enqueued or buffered is counted and left alone, a skipped
    /// or missed one becomes enqueued, a new one is recorded enqueued. Refused, changing
    /// nothing, for an occurrence not yet past (not earlier than the next fire time, or later
    /// than `now`).
    async fn schedule_backfill(&self, params: ScheduleBackfillParams) -> Result<BackfillReport>;

    /// A schedule's ledger, newest first.
    async fn occurrence_list(&self, params: OccurrenceListParams) -> Result<Vec<Occurrence>>;

    /// The earliest next fire time of an unpaused schedule.
    async fn schedule_next_fire_at(&self) -> Result<Option<jiff::Timestamp>>;

    /// Ended work per time bucket since `since`, across every node: tasks that succeeded, died
    /// or were cancelled (by their end time) and attempts that failed and were retried. Only
    /// buckets with something in them.
    async fn activity(&self, params: ActivityParams) -> Result<Vec<ActivityBucket>>;

    /// Runs that ended at or after `since`: ended tasks and failed attempts, at most `limit`
    /// of each, with their kinds and run times (see [`kinds::kind_stats`]).
    async fn run_samples(&self, params: kinds::RunSamplesParams) -> Result<Vec<kinds::RunSample>>;

    /// Records that a worker or node is alive (or, with `stopping`, that it said goodbye).
    async fn worker_beat(&self, params: WorkerBeatParams) -> Result<()>;

    /// Workers and nodes seen since `seen_since`, with how many tasks each runs now; most
    /// recently seen first, at most `limit`.
    async fn worker_list(&self, params: WorkerListParams) -> Result<Page<WorkerInfo>>;

    /// Forgets workers and nodes not seen since `before`. How many were forgotten.
    async fn worker_prune(&self, before: jiff::Timestamp) -> Result<u64>;
}
