//! The PostgreSQL backend: many `sked` nodes on one database.
//!
//! - Tables are named `sked_*` and live in the connection's schema (its `search_path`), so they
//!   can share a database, and a transaction ([`enqueue_in`]), with the application's tables.
//! - Migrations are embedded and applied under an advisory lock, so nodes may start together.
//! - Claims take batches with `FOR UPDATE SKIP LOCKED`; bulk inserts are one `unnest` statement
//!   per batch; completions are one statement per batch.
//! - Every statement that makes work appear announces it with one `pg_notify` (see [`listen`]);
//!   nodes subscribe through [`Store::subscribe`] and poll only while the listener is down.
//! - A dropped connection or a restarted server gives `Unavailable` errors (HTTP 503) for as
//!   long as it lasts, bounded by timeouts, and the pool reconnects by itself.
//! - A primary that moves (a multi-host URL with `target_session_attrs=read-write`, and an HA
//!   manager that fails over) is followed the same way: a connection whose operation failed as
//!   unavailable or ran out of time is closed rather than handed back to the pool (it may be
//!   to a server that is now a standby, or hang on a cut network), new connections go to
//!   whichever host accepts writes, and the listener checks its own connection then.

#[cfg(feature = "bench")]
mod bench;
mod codec;
mod connection;
mod conninfo;
mod listen;
mod migrations;
mod observe;
mod queues;
mod schedules;
mod scratch;
mod tasks;
#[cfg(feature = "testing")]
pub mod testing;
mod tls;
mod transactional;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::Pool;
use sked_core::{Task, TaskId};
use sked_store::*;
use tokio::sync::broadcast;

pub use connection::{KEPT_PAYLOAD_BYTES, KEPT_STAGE_MIN, KEPT_STAGE_PART, PgOptions};
pub use scratch::ScratchSchema;
pub use transactional::enqueue_in;

use crate::codec::{db_err, pool_err};

/// A sked store in a PostgreSQL database.
#[derive(Debug)]
pub struct PgStore {
    pool: Pool,
    /// The channel this schema's announcements go to (`sked_<schema>`).
    channel: String,
    events: broadcast::Sender<StoreEvent>,
    op_timeout: Duration,
    /// Store operations run so far (for measuring how chatty a node is).
    operations: std::sync::atomic::AtomicU64,
    /// Where claims resume in the claim index (see [`tasks::claim::positions`]).
    positions: Arc<tasks::claim::positions::ClaimPositions>,
    /// Large claims over the same queues take turns (see [`tasks::claim::taking_turns`]).
    turns: tasks::claim::taking_turns::ClaimTurns,
    /// How large batches of successes find their rows (see [`tasks::faster_statement`]).
    success_plans: tasks::faster_statement::PlanChoice,
    listener: listen::Listener,
    /// When a rate limit lets held-back tasks start again, as claims found it.
    held: sked_store::rate::HeldUntil,
    /// How a workflow's large stages are kept until released ([`PgOptions::kept_stage_min`],
    /// [`PgOptions::kept_stage_part`]).
    keeping: tasks::kept_stages::Keeping,
}

impl PgStore {
    /// Connects, brings the schema up to date and starts listening for announcements.
    pub async fn connect(opts: PgOptions) -> Result<PgStore> {
        let (config, tls) = connection::settings(&opts)?;
        let pool = connection::pool(&config, &tls, &opts)?;
        let mut client = pool.get().await.map_err(pool_err)?;
        migrations::run(&mut client, opts.schema.as_deref()).await?;
        let row = client
            .query_one(
                "SELECT current_schema(), current_setting('autovacuum') = 'on'",
                &[],
            )
            .await
            .map_err(db_err)?;
        let (schema, autovacuum): (String, bool) = (row.get(0), row.get(1));
        if !autovacuum {
            // Every claim and ending leaves a dead row version; without vacuum none is ever
            // reclaimed.
            tracing::warn!(
                "autovacuum is off on this PostgreSQL: the task rows sked updates and deletes \
                 are never reclaimed, so its tables grow without bound and claims slow down; \
                 turn it on (autovacuum = on) or VACUUM the sked_* tables regularly"
            );
        }
        drop(client);
        let channel = listen::channel_for(&schema);
        let (events, _) = broadcast::channel(1024);
        let positions = Arc::new(tasks::claim::positions::ClaimPositions::default());
        let listener = listen::Listener::start(
            config,
            tls,
            channel.clone(),
            events.clone(),
            positions.clone(),
        );
        Ok(PgStore {
            pool,
            channel,
            events,
            op_timeout: opts.op_timeout,
            operations: std::sync::atomic::AtomicU64::new(0),
            positions,
            turns: Default::default(),
            success_plans: Default::default(),
            listener,
            held: Default::default(),
            keeping: tasks::kept_stages::Keeping {
                min: opts.kept_stage_min,
                part: opts.kept_stage_part,
            },
        })
    }

    /// Connects with default options to a `postgres://` URL.
    pub async fn connect_url(url: &str) -> Result<PgStore> {
        PgStore::connect(PgOptions::new(url)).await
    }

    /// The connection pool, for applications that share it (see [`enqueue_in`]). Its
    /// connections end a transaction left idle for longer than
    /// [`PgOptions::idle_in_transaction_timeout`]; a transaction of the application's that
    /// waits longer between statements sets its own (`SET LOCAL
    /// idle_in_transaction_session_timeout = …`).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// How many store operations this store has run (each one or a few statements).
    pub fn operations(&self) -> u64 {
        self.operations.load(std::sync::atomic::Ordering::Relaxed)
    }

    async fn client(&self) -> Result<deadpool_postgres::Object> {
        self.pool.get().await.map_err(pool_err)
    }

    /// Moves this store's claim positions back to the first of tasks it has just made
    /// claimable or waiting (priority, run time, whether it waits), and notes when the first
    /// of those that wait is due, without waiting for its own announcement to come back
    /// through the listener: a claim that follows at once sees them.
    fn claimable(&self, tasks: impl IntoIterator<Item = (i32, jiff::Timestamp, bool)>) {
        let mut first: Option<tasks::claim::positions::Key> = None;
        let mut waiting: Option<jiff::Timestamp> = None;
        for (priority, run_at, waits) in tasks {
            let key = tasks::claim::positions::Key::before(priority, run_at);
            first = Some(first.map_or(key, |f| f.covering(key)));
            if waits {
                waiting = Some(waiting.map_or(run_at, |w| w.min(run_at)));
            }
        }
        if let Some(first) = first {
            self.positions.move_back(first);
        }
        if let Some(at) = waiting {
            self.positions.waiting(at);
        }
    }

    /// Waiting tasks this store released (`released`) may lie in released parts of kept
    /// stages: claims look at parts again, without waiting for the release's announcement.
    fn released(&self, released: &[(i32, jiff::Timestamp, bool)]) {
        if !released.is_empty() {
            self.positions.released();
        }
    }

    /// Tells other nodes that room may have freed under a concurrency or per-key limit when
    /// `ended` holds a task of a queue claimed under its lock: their claims waiting on it look
    /// again (this node's are woken by its engine). A failure only leaves them to their next
    /// poll.
    async fn announce_room<'a>(&self, ended: impl IntoIterator<Item = &'a String>) {
        // Without the settings (a queue changed since the last claim), the database says.
        let locked = self.positions.locked_queues();
        let mut queues: Vec<String> = ended
            .into_iter()
            .filter(|q| locked.as_ref().is_none_or(|l| l.contains(q)))
            .cloned()
            .collect();
        if queues.is_empty() {
            return;
        }
        queues.sort_unstable();
        queues.dedup();
        let sent = self
            .op(async |c, ch| tasks::announce_room(c, ch, &queues).await)
            .await;
        if let Err(e) = sent {
            tracing::debug!(error = %e, "the announcement of freed room failed");
        }
    }

    /// Runs one operation on a pooled connection, bounded by the operation timeout. A
    /// connection whose operation failed as unavailable, or ran out of time, is closed instead
    /// of going back to the pool: it may lead to a server that no longer takes writes, or
    /// hang on a cut network, and the next operation must not inherit it. Then, or when no
    /// connection can be had, the listener checks its own. (An operation its caller drops,
    /// a long-poll that ends, say, gives its connection back as usual.)
    async fn op<T, F>(&self, f: F) -> Result<T>
    where
        F: AsyncFnOnce(&mut deadpool_postgres::Object, &str) -> Result<T>,
    {
        self.op_until(tokio::time::Instant::now() + self.op_timeout, f)
            .await
    }

    /// [`Self::op`], with the time it has already begun: it fails as late at `deadline`.
    async fn op_until<T, F>(&self, deadline: tokio::time::Instant, f: F) -> Result<T>
    where
        F: AsyncFnOnce(&mut deadpool_postgres::Object, &str) -> Result<T>,
    {
        self.operations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let late = || {
            StoreError::Unavailable(format!(
                "PostgreSQL did not answer within {:?}",
                self.op_timeout
            ))
        };
        let object = match tokio::time::timeout_at(deadline, self.client()).await {
            Ok(Ok(object)) => object,
            Ok(Err(e)) => {
                self.listener.doubt();
                return Err(e);
            }
            Err(_) => {
                self.listener.doubt();
                return Err(late());
            }
        };
        let mut client = connection::Pooled {
            object: Some(object),
            close: false,
            listener: &self.listener,
        };
        let result = tokio::time::timeout_at(deadline, f(client.object(), &self.channel))
            .await
            .unwrap_or_else(|_| Err(late()));
        client.close = matches!(result, Err(StoreError::Unavailable(_)));
        result
    }
}

#[async_trait]
impl Store for PgStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    fn subscribe(&self) -> Option<broadcast::Receiver<StoreEvent>> {
        Some(self.events.subscribe())
    }

    fn listening(&self) -> bool {
        self.listener.up.load(std::sync::atomic::Ordering::SeqCst)
    }

    async fn server_time(&self) -> Result<Option<jiff::Timestamp>> {
        self.op(async |c, _| connection::server_time(c).await.map(Some))
            .await
    }

    async fn task_insert_many(&self, params: TaskInsertParams) -> Result<Vec<TaskInserted>> {
        let inserted = self
            .op(async |c, ch| tasks::insert_many(c, ch, &params).await)
            .await?;
        self.claimable(params.tasks.iter().map(|t| {
            let run_at = t.task.run_at.unwrap_or(params.now);
            let waits = sked_store::rules::state_for_run_at(run_at, params.now).is_timed();
            (t.task.priority, run_at, waits)
        }));
        Ok(inserted)
    }

    async fn task_insert_claimed(
        &self,
        params: TaskInsertClaimedParams,
    ) -> Result<(TaskInserted, Option<Task>)> {
        let (inserted, task) = self
            .op(async |c, ch| tasks::insert_claimed(c, ch, &params).await)
            .await?;
        if task.is_none() {
            let run_at = params.task.task.run_at.unwrap_or(params.now);
            self.claimable([(params.task.task.priority, run_at, false)]);
        }
        Ok((inserted, task))
    }

    async fn task_get(&self, id: TaskId) -> Result<Task> {
        self.op(async |c, _| {
            tasks::kept_stages::make_rows_of(&***c, &[id], true).await?;
            tasks::get(c, id).await
        })
        .await
    }

    async fn task_states(
        &self,
        ids: Vec<TaskId>,
    ) -> Result<Vec<(TaskId, Option<sked_core::TaskState>)>> {
        self.op(async |c, _| {
            tasks::kept_stages::make_rows_of(&***c, &ids, false).await?;
            tasks::states(c, &ids).await
        })
        .await
    }

    async fn task_list(&self, params: TaskListParams) -> Result<TaskPage> {
        self.op(async |c, _| {
            tasks::kept_stages::make_all_rows(&***c).await?;
            tasks::list(c, &params).await
        })
        .await
    }

    async fn task_claim(&self, params: TaskClaimParams) -> Result<Vec<Task>> {
        let (pool, positions) = (&self.pool, &self.positions);
        let part = self.keeping.part.unwrap_or(KEPT_STAGE_PART);
        // The turn is taken before a connection, which a claim waiting for it does not hold,
        // and within the operation's time.
        let deadline = tokio::time::Instant::now() + self.op_timeout;
        let turn = self.turns.wait(&params, deadline).await?;
        let (claimed, held) = self
            .op_until(deadline, async |c, channel| {
                let claims = tasks::Claims {
                    pool,
                    channel,
                    positions,
                    part,
                };
                tasks::claim(c, claims, &params).await
            })
            .await?;
        drop(turn);
        if let Some(at) = held {
            self.held.note(at, params.now);
        }
        Ok(claimed)
    }

    async fn task_heartbeat(&self, params: TaskHeartbeatParams) -> Result<HeartbeatReply> {
        self.op(async |c, _| tasks::heartbeat(c, &params).await)
            .await
    }

    async fn task_finish_many(&self, params: Vec<TaskFinishParams>) -> Result<Vec<Result<Task>>> {
        let (ended, released) = self
            .op(async |c, ch| tasks::finish_many(c, ch, &params, &self.success_plans).await)
            .await?;
        self.announce_room(ended.iter().flatten().map(|t| &t.queue))
            .await;
        self.released(&released);
        self.claimable(
            (ended.iter().flatten())
                .filter(|t| !t.state.is_finished())
                .map(|t| (t.priority, t.run_at, t.state.is_timed()))
                .chain(released),
        );
        Ok(ended)
    }

    /// A batch of successes, each task named once, returns only what [`TaskEnded`] needs;
    /// any other batch goes as [`Store::task_finish_many`] does.
    async fn task_finish_many_lean(
        &self,
        params: Vec<TaskFinishParams>,
    ) -> Result<Vec<Result<TaskEnded>>> {
        let Some(successes) = tasks::Successes::of(&params) else {
            let answers = self.task_finish_many(params).await?;
            return Ok(answers
                .into_iter()
                .map(|r| r.map(TaskEnded::from))
                .collect());
        };
        let (ended, released) = self
            .op(async |c, ch| {
                successes
                    .write::<TaskEnded>(c, ch, &self.success_plans)
                    .await
            })
            .await?;
        self.announce_room(ended.iter().flatten().map(|t| &t.queue))
            .await;
        self.released(&released);
        self.claimable(released);
        Ok(ended)
    }

    async fn workflow_create(&self, params: WorkflowCreateParams) -> Result<WorkflowCreated> {
        let created = self
            .op(async |c, ch| tasks::workflows::create(c, ch, &params, self.keeping).await)
            .await?;
        self.claimable(params.tasks.iter().map(|t| {
            let run_at = t.insert.task.run_at.unwrap_or(params.now);
            let waits = sked_store::rules::state_for_run_at(run_at, params.now).is_timed();
            (t.insert.task.priority, run_at, waits)
        }));
        Ok(created)
    }

    async fn workflow_get(&self, id: sked_core::WorkflowId) -> Result<WorkflowInfo> {
        self.op(async |c, _| tasks::workflows::get(c, id).await)
            .await
    }

    async fn workflow_list(&self, params: WorkflowListParams) -> Result<Page<WorkflowInfo>> {
        self.op(async |c, _| tasks::workflows::list(c, &params).await)
            .await
    }

    async fn workflow_tasks(&self, params: WorkflowTasksParams) -> Result<Page<WorkflowNode>> {
        self.op(async |c, _| {
            tasks::kept_stages::make_workflow_rows(&***c, params.id).await?;
            tasks::workflows::tasks(c, &params).await
        })
        .await
    }

    async fn batch_open(&self, params: BatchOpenParams) -> Result<BatchInfo> {
        self.op(async |c, _| tasks::batches::open(c, &params).await)
            .await
    }

    async fn batch_close(&self, params: BatchCloseParams) -> Result<BatchInfo> {
        self.op(async |c, ch| tasks::batches::close(c, ch, &params).await)
            .await
    }

    async fn batch_get(&self, id: sked_core::BatchId) -> Result<BatchInfo> {
        self.op(async |c, _| tasks::batches::get(c, id).await).await
    }

    async fn batch_list(&self, params: BatchListParams) -> Result<Page<BatchInfo>> {
        self.op(async |c, _| tasks::batches::list(c, &params).await)
            .await
    }

    async fn task_cancel(&self, params: TaskCancelParams) -> Result<Task> {
        let (task, released) = self
            .op(async |c, ch| {
                tasks::kept_stages::make_rows_of(&***c, &[params.id], true).await?;
                tasks::cancel(c, ch, &params).await
            })
            .await?;
        self.released(&released);
        self.claimable(released);
        Ok(task)
    }

    async fn task_retry(&self, params: TaskRetryParams) -> Result<Task> {
        let task = self
            .op(async |c, ch| {
                tasks::kept_stages::make_rows_of(&***c, &[params.id], true).await?;
                tasks::retry(c, ch, &params).await
            })
            .await?;
        self.claimable([(task.priority, task.run_at, task.state.is_timed())]);
        Ok(task)
    }

    async fn task_bulk(&self, params: TaskBulkParams) -> Result<BulkBatch> {
        let (batch, claimable) = self
            .op(async |c, ch| {
                tasks::kept_stages::make_all_rows(&***c).await?;
                tasks::bulk::batch(c, ch, &params).await
            })
            .await?;
        self.released(&claimable);
        self.claimable(claimable);
        Ok(batch)
    }

    async fn task_delete(&self, id: TaskId) -> Result<()> {
        self.op(async |c, _| {
            tasks::kept_stages::make_rows_of(&***c, &[id], true).await?;
            tasks::bulk::delete_one(c, id).await
        })
        .await
    }

    async fn task_bulk_count(&self, filter: BulkFilter) -> Result<u64> {
        self.op(async |c, _| {
            tasks::kept_stages::make_all_rows(&***c).await?;
            tasks::bulk::count(c, &filter).await
        })
        .await
    }

    async fn task_reschedule(&self, params: TaskRescheduleParams) -> Result<Task> {
        let task = self
            .op(async |c, ch| {
                tasks::kept_stages::make_rows_of(&***c, &[params.id], true).await?;
                tasks::reschedule(c, ch, &params).await
            })
            .await?;
        self.claimable([(task.priority, task.run_at, task.state.is_timed())]);
        Ok(task)
    }

    async fn task_rescue(&self, params: TaskRescueParams) -> Result<Vec<TaskId>> {
        let rescued = self
            .op(async |c, ch| tasks::rescue(c, ch, &params).await)
            .await?;
        if !rescued.is_empty() {
            self.positions.forget();
        }
        Ok(rescued)
    }

    async fn task_expire(&self, params: TaskExpireParams) -> Result<Vec<TaskId>> {
        let expired = self
            .op(async |c, ch| tasks::expire(c, ch, &params).await)
            .await?;
        if !expired.is_empty() {
            self.positions.forget();
        }
        Ok(expired)
    }

    async fn task_prune(&self, params: TaskPruneParams) -> Result<u64> {
        self.op(async |c, _| tasks::prune(c, &params).await).await
    }

    async fn task_next_run_at(&self) -> Result<Option<jiff::Timestamp>> {
        self.op(async |c, _| tasks::next_run_at(c).await).await
    }

    fn task_held_until(&self, now: jiff::Timestamp) -> Option<jiff::Timestamp> {
        self.held.get(now)
    }

    async fn queue_list(&self, params: QueueListParams) -> Result<Page<QueueInfo>> {
        self.op(async |c, _| queues::list(c, &params).await).await
    }

    async fn queue_get(&self, name: &str, now: jiff::Timestamp) -> Result<QueueInfo> {
        self.op(async |c, _| queues::get(c, name, now).await).await
    }

    async fn queue_key_usage(
        &self,
        params: sked_store::keyed::KeyUsageParams,
    ) -> Result<sked_store::keyed::KeyUsage> {
        self.op(async |c, _| queues::key_usage(c, &params).await)
            .await
    }

    async fn queue_update(&self, params: QueueUpdateParams) -> Result<QueueInfo> {
        let info = self
            .op(async |c, ch| queues::update(c, ch, &params).await)
            .await?;
        // A resumed or widened queue's tasks may lie anywhere in claim order.
        self.positions.forget();
        Ok(info)
    }

    async fn queue_remove(&self, name: &str) -> Result<()> {
        self.op(async |c, _| {
            tasks::kept_stages::make_all_rows(&***c).await?;
            queues::remove(c, name).await
        })
        .await
    }

    async fn lease_acquire(&self, params: LeaseAcquireParams) -> Result<Option<Lease>> {
        self.op(async |c, _| queues::lease_acquire(c, &params).await)
            .await
    }

    async fn lease_release(&self, name: &str, holder: &str) -> Result<()> {
        self.op(async |c, ch| queues::lease_release(c, ch, name, holder).await)
            .await
    }

    async fn lease_get(&self, name: &str, now: jiff::Timestamp) -> Result<Option<Lease>> {
        self.op(async |c, _| queues::lease_get(c, name, now).await)
            .await
    }

    async fn schedule_upsert(&self, params: ScheduleUpsertParams) -> Result<Schedule> {
        self.op(async |c, ch| schedules::upsert(c, ch, &params).await)
            .await
    }

    async fn schedule_write_many(&self, params: ScheduleWriteParams) -> Result<ScheduleSyncReport> {
        self.op(async |c, ch| schedules::write_many(c, ch, &params).await)
            .await
    }

    async fn schedule_get(&self, name: &str) -> Result<Schedule> {
        self.op(async |c, _| schedules::get(&***c, name).await)
            .await
    }

    async fn schedule_list(&self, params: ScheduleListParams) -> Result<Page<Schedule>> {
        self.op(async |c, _| schedules::list(c, &params).await)
            .await
    }

    async fn schedule_count(&self, filter: ScheduleFilter, limit: u64) -> Result<u64> {
        self.op(async |c, _| schedules::count(c, &filter, limit).await)
            .await
    }

    async fn schedule_delete(&self, name: &str, now: jiff::Timestamp) -> Result<bool> {
        self.op(async |c, ch| schedules::delete(c, ch, name, now).await)
            .await
    }

    async fn calendar_put(&self, params: CalendarPutParams) -> Result<CalendarInfo> {
        self.op(async |c, _| schedules::calendars::put(c, &params).await)
            .await
    }

    async fn calendar_get(&self, name: &str) -> Result<CalendarInfo> {
        self.op(async |c, _| schedules::calendars::get(&***c, name).await)
            .await
    }

    async fn calendar_list(&self) -> Result<Vec<CalendarInfo>> {
        self.op(async |c, _| schedules::calendars::list(c).await)
            .await
    }

    async fn calendar_delete(&self, name: &str) -> Result<bool> {
        self.op(async |c, _| schedules::calendars::delete(c, name).await)
            .await
    }

    async fn schedule_set_paused(&self, params: SchedulePauseParams) -> Result<Schedule> {
        self.op(async |c, ch| schedules::set_paused(c, ch, &params).await)
            .await
    }

    async fn schedule_due(&self, params: ScheduleDueParams) -> Result<Vec<DueSchedule>> {
        self.op(async |c, _| schedules::plans::due(c, &params).await)
            .await
    }

    async fn schedule_apply(&self, params: ScheduleApplyParams) -> Result<Vec<RunMade>> {
        self.op(async |c, ch| schedules::plans::apply(c, ch, &params).await)
            .await
    }

    async fn schedule_backfill(&self, params: ScheduleBackfillParams) -> Result<BackfillReport> {
        self.op(async |c, ch| schedules::plans::backfill(c, ch, &params).await)
            .await
    }

    async fn occurrence_list(&self, params: OccurrenceListParams) -> Result<Vec<Occurrence>> {
        self.op(async |c, _| schedules::plans::occurrences(c, &params).await)
            .await
    }

    async fn schedule_next_fire_at(&self) -> Result<Option<jiff::Timestamp>> {
        self.op(async |c, _| schedules::plans::next_fire_at(c).await)
            .await
    }

    async fn schedule_materialise(
        &self,
        params: ScheduleMaterialiseParams,
    ) -> Result<MaterialiseReport> {
        self.op(async |c, ch| schedules::plans::materialise(c, ch, &params).await)
            .await
    }

    async fn schedule_next_look_at(&self) -> Result<Option<jiff::Timestamp>> {
        self.op(async |c, _| schedules::plans::next_look_at(c).await)
            .await
    }

    async fn activity(&self, params: ActivityParams) -> Result<Vec<ActivityBucket>> {
        self.op(async |c, _| observe::activity(c, &params).await)
            .await
    }

    async fn run_samples(
        &self,
        params: sked_store::kinds::RunSamplesParams,
    ) -> Result<Vec<sked_store::kinds::RunSample>> {
        self.op(async |c, _| observe::run_samples(c, &params).await)
            .await
    }

    async fn worker_beat(&self, params: WorkerBeatParams) -> Result<()> {
        self.op(async |c, _| observe::worker_beat(c, &params).await)
            .await
    }

    async fn worker_list(&self, params: WorkerListParams) -> Result<Page<WorkerInfo>> {
        self.op(async |c, _| observe::worker_list(c, &params).await)
            .await
    }

    async fn worker_prune(&self, before: jiff::Timestamp) -> Result<u64> {
        self.op(async |c, _| observe::worker_prune(c, before).await)
            .await
    }
}
