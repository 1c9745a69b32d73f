//! The embedded SQLite backend: one file, WAL, `synchronous=FULL` (an `Ok` means the change is
//! on disk), migrations embedded in the binary.
//!
//! All writes go through one connection on a blocking thread: SQLite has one writer at a time
//! anyway. Every write runs in a short `BEGIN IMMEDIATE` transaction, which writes that arrive
//! meanwhile share (group commit, [`group_commit`]): one `fsync` for many callers, each answered once
//! it is on disk. A second connection reads the tasks a large claim leased once the claim is
//! committed, and the rows a large batch of endings checks before its write, while the writer
//! goes on with other writes.

#[cfg(feature = "bench")]
mod bench;
mod checkpoint;
mod codec;
mod group_commit;
mod migrations;
mod observe;
mod partial_indexes;
mod queues;
mod readers;
mod schedules;
mod tasks;
#[cfg(feature = "testing")]
pub mod testing;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rusqlite::{Connection, OpenFlags, Transaction};
use sked_core::{Task, TaskId};
use sked_store::kept::Keeping;
use sked_store::*;
use tasks::kept_stages::{self, Kept};

/// A sked store in one SQLite file.
#[derive(Clone)]
pub struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
    /// The store's reads (tasks, lists, counts, schedules), beside the writer.
    readers: Arc<readers::Readers>,
    /// The reads of a drain's own path, on a connection of their own so that they never wait
    /// behind a client's: the tasks a large claim leased, after its commit
    /// (`tasks::Leased::Later`), and the rows a large batch of endings checks, before its
    /// write (`tasks::read_before`).
    hot: Arc<readers::Readers>,
    /// Writes waiting for the connection, committed together (group commit).
    writes: Arc<group_commit::Queue>,
    path: PathBuf,
    _checkpointer: Arc<checkpoint::Checkpointer>,
    /// When a rate limit lets held-back tasks start again, as claims found it.
    held: Arc<sked_store::rate::HeldUntil>,
    /// Tasks made claimable by their parents' end, told once their write has committed: the
    /// only change of this store that the caller of the write does not see in its answer.
    released: tokio::sync::broadcast::Sender<StoreEvent>,
    /// How a workflow's large stages are kept until released (`tasks::kept_stages`).
    keeping: Keeping,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and brings its schema up to date.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore> {
        SqliteStore::open_keeping(path, Keeping::DEFAULT)
    }

    /// [`SqliteStore::open`], keeping a workflow's large stages until they are released as
    /// `keeping` says (docs/decisions/0027-kept-stages-on-sqlite.md); `Keeping::default()`
    /// makes every task a row from the start.
    pub fn open_keeping(path: impl AsRef<Path>, keeping: Keeping) -> Result<SqliteStore> {
        let path = path.as_ref().to_path_buf();
        create_private(&path)?;
        let mut conn = connect(&path)?;
        migrations::run(&mut conn)?;
        let conn = Arc::new(Mutex::new(conn));
        let checkpointer = checkpoint::Checkpointer::start(&path, Arc::downgrade(&conn));
        Ok(SqliteStore {
            conn,
            readers: Arc::new(readers::Readers::new(path.clone(), readers::MAX_READERS)),
            hot: Arc::new(readers::Readers::new(path.clone(), 1)),
            writes: Default::default(),
            path,
            _checkpointer: Arc::new(checkpointer),
            held: Default::default(),
            released: tokio::sync::broadcast::channel(64).0,
            keeping,
        })
    }

    /// Opens from a `sqlite://PATH` or `sqlite:PATH` URL, or a plain path.
    pub fn open_url(url: &str) -> Result<SqliteStore> {
        let path = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
            .unwrap_or(url);
        if path.is_empty() {
            return Err(StoreError::Invalid(format!(
                "no file path in database URL {url:?}"
            )));
        }
        SqliteStore::open(path)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` on the connection on a blocking thread (for the benchmark hooks).
    #[cfg(feature = "bench")]
    async fn run<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = conn.lock().unwrap_or_else(|e| e.into_inner());
            f(&mut conn)
        })
        .await
        .map_err(|e| StoreError::Backend(format!("store thread failed: {e}")))?
    }

    /// Runs `f` in a read transaction on a reader's connection ([`readers`]), on a blocking
    /// thread.
    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        self.readers.read(f).await
    }

    /// Runs `f` as [`SqliteStore::read`] does, once the kept parts that hold tasks of `which`
    /// are rows (`tasks::kept_stages`): reads find tasks by id or filter in rows only. The
    /// reader looks first; when such a part is there, the writer makes its rows and the reader
    /// looks again.
    async fn read_kept<T, F>(&self, which: Kept, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(&Connection) -> Result<T> + Send + Sync + 'static,
    {
        let f = Arc::new(f);
        loop {
            let (read, w) = (f.clone(), which.clone());
            let found = self
                .read(
                    move |conn| match kept_stages::touched(conn, &w)?.is_empty() {
                        true => read(conn).map(Some),
                        false => Ok(None),
                    },
                )
                .await?;
            if let Some(v) = found {
                return Ok(v);
            }
            let w = which.clone();
            self.write(move |tx| kept_stages::make(tx, &w)).await?;
        }
    }

    /// Runs `f` in a write transaction (`BEGIN IMMEDIATE`), committed durably (fsync) before
    /// its `Ok` is returned; writes that wait meanwhile share a transaction ([`group_commit`]).
    async fn write<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> Result<T> + Send + 'static,
    {
        let answer = self.writes.push(move |tx| {
            let answer = f(tx);
            // Taken whatever the answer, so that nothing is left for the next write.
            let released = tasks::take_released();
            answer.map(|v| (v, released))
        });
        let (writes, conn) = (self.writes.clone(), self.conn.clone());
        tokio::task::spawn_blocking(move || writes.run(&conn));
        let (value, released) = answer
            .await
            .map_err(|_| StoreError::Backend("the store thread failed during a write".into()))??;
        if let Some(run_at) = released {
            let _ = self.released.send(StoreEvent::Tasks {
                run_at: Some(run_at),
            });
        }
        Ok(value)
    }
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// How long a connection waits for another's lock before it fails as busy.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A connection to the database at `path`, with the settings every connection of the store has.
fn connect(path: &Path) -> Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| StoreError::Unavailable(format!("cannot open {}: {e}", path.display())))?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(codec::db_err)?;
    // `rarray(?)`: the lists of ids that batch statements take (see `codec::id_list`).
    rusqlite::vtab::array::load_module(&conn).map_err(codec::db_err)?;
    conn.execute_batch(&format!(
        "PRAGMA journal_mode = WAL;
         PRAGMA synchronous = FULL;
         PRAGMA foreign_keys = ON;
         PRAGMA temp_store = MEMORY;
         PRAGMA cache_size = -16384;
         PRAGMA wal_autocheckpoint = 0;
         PRAGMA journal_size_limit = {};",
        checkpoint::WAL_LIMIT
    ))
    .map_err(codec::db_err)?;
    Ok(conn)
}

/// A connection that only reads, with a page cache of 4 MiB: SQLite drops a connection's cache
/// whenever another one has written, so under writes a reader's cache holds little for long,
/// and a large one only holds memory.
fn connect_reader(path: &Path) -> Result<Connection> {
    let conn = connect(path)?;
    conn.execute_batch("PRAGMA query_only = ON; PRAGMA cache_size = -4096;")
        .map_err(codec::db_err)?;
    Ok(conn)
}

/// Creates the database file readable and writable by its owner only, unless it exists (its
/// journal files take the same mode from it): tasks, payloads and results are not for every
/// user of the machine.
fn create_private(path: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
        {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(StoreError::Unavailable(format!(
                    "cannot create {}: {e}",
                    path.display()
                )));
            }
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    /// Only the tasks released by their parents' end: every other change is made by the caller
    /// (one process owns the file), who knows of it. [`Store::listening`] stays false.
    fn subscribe(&self) -> Option<tokio::sync::broadcast::Receiver<StoreEvent>> {
        Some(self.released.subscribe())
    }

    async fn task_insert_many(&self, params: TaskInsertParams) -> Result<Vec<TaskInserted>> {
        self.write(move |tx| tasks::insert_many(tx, &params)).await
    }

    async fn task_insert_claimed(
        &self,
        params: TaskInsertClaimedParams,
    ) -> Result<(TaskInserted, Option<Task>)> {
        self.write(move |tx| tasks::insert_claimed(tx, &params))
            .await
    }

    async fn task_get(&self, id: TaskId) -> Result<Task> {
        self.read_kept(Kept::Family(id), move |conn| tasks::get(conn, id))
            .await
    }

    async fn task_states(
        &self,
        ids: Vec<TaskId>,
    ) -> Result<Vec<(TaskId, Option<sked_core::TaskState>)>> {
        self.read_kept(Kept::Ids(ids.clone()), move |conn| {
            tasks::dependents::parent_states(conn, &ids)
        })
        .await
    }

    async fn task_list(&self, params: TaskListParams) -> Result<TaskPage> {
        self.read_kept(Kept::All, move |conn| tasks::list(conn, &params))
            .await
    }

    /// A large claim's tasks are read after the commit, on the drain's own reader (`hot`;
    /// `tasks::Leased`).
    async fn task_claim(&self, params: TaskClaimParams) -> Result<Vec<Task>> {
        let (now, worker) = (params.now, params.worker.clone());
        let (leased, held) = self.write(move |tx| tasks::claim(tx, &params)).await?;
        if let Some(at) = held {
            self.held.note(at, now);
        }
        let ids = match leased {
            tasks::Leased::Read(tasks) => return Ok(tasks),
            tasks::Leased::Later(ids) => ids,
        };
        self.hot
            .read(move |conn| tasks::read_leased(conn, &ids, &worker, now))
            .await
    }

    async fn task_heartbeat(&self, params: TaskHeartbeatParams) -> Result<HeartbeatReply> {
        self.write(move |tx| tasks::heartbeat(tx, &params)).await
    }

    /// One transaction (one sync to disk) for the whole batch.
    async fn task_heartbeat_many(
        &self,
        params: Vec<TaskHeartbeatParams>,
    ) -> Result<Vec<Result<HeartbeatReply>>> {
        self.write(move |tx| Ok(params.iter().map(|p| tasks::heartbeat(tx, p)).collect()))
            .await
    }

    async fn task_finish_many(&self, params: Vec<TaskFinishParams>) -> Result<Vec<Result<Task>>> {
        self.write(move |tx| tasks::finish_many(tx, &params)).await
    }

    /// Successes checked from a narrow read and written without building whole tasks
    /// (`tasks::finish_many_lean`); a large batch's read is made before the write, on the drain's own
    /// reader (`hot`).
    async fn task_finish_many_lean(
        &self,
        params: Vec<TaskFinishParams>,
    ) -> Result<Vec<Result<TaskEnded>>> {
        if !tasks::reads_before(&params) {
            return self
                .write(move |tx| tasks::finish_many_lean(tx, &params, None))
                .await;
        }
        let params = Arc::new(params);
        let p = params.clone();
        let before = self
            .hot
            .read(move |conn| tasks::read_before(conn, &p))
            .await?;
        let p = params.clone();
        match self
            .write(move |tx| tasks::finish_many_lean(tx, &p, Some(before)))
            .await
        {
            // A lease was lost since the read: the batch again, read in its transaction.
            Err(e) if tasks::changed_since_read(&e) => {
                self.write(move |tx| tasks::finish_many_lean(tx, &params, None))
                    .await
            }
            out => out,
        }
    }

    async fn workflow_create(&self, params: WorkflowCreateParams) -> Result<WorkflowCreated> {
        let keeping = self.keeping;
        self.write(move |tx| tasks::workflows::create(tx, params, keeping))
            .await
    }

    async fn workflow_get(&self, id: sked_core::WorkflowId) -> Result<WorkflowInfo> {
        self.read(move |conn| tasks::workflows::get(conn, id)).await
    }

    async fn workflow_list(&self, params: WorkflowListParams) -> Result<Page<WorkflowInfo>> {
        self.read(move |conn| tasks::workflows::list(conn, &params))
            .await
    }

    async fn workflow_tasks(&self, params: WorkflowTasksParams) -> Result<Page<WorkflowNode>> {
        self.read_kept(Kept::Workflow(params.id), move |conn| {
            tasks::workflows::tasks(conn, &params)
        })
        .await
    }

    async fn batch_open(&self, params: BatchOpenParams) -> Result<BatchInfo> {
        self.write(move |tx| tasks::batches::open(tx, &params))
            .await
    }

    async fn batch_close(&self, params: BatchCloseParams) -> Result<BatchInfo> {
        self.write(move |tx| tasks::batches::close(tx, &params))
            .await
    }

    async fn batch_get(&self, id: sked_core::BatchId) -> Result<BatchInfo> {
        self.read(move |conn| tasks::batches::get(conn, id)).await
    }

    async fn batch_list(&self, params: BatchListParams) -> Result<Page<BatchInfo>> {
        self.read(move |conn| tasks::batches::list(conn, &params))
            .await
    }

    async fn task_cancel(&self, params: TaskCancelParams) -> Result<Task> {
        self.write(move |tx| {
            kept_stages::make(tx, &Kept::Family(params.id))?;
            tasks::cancel(tx, params.id, params.now)
        })
        .await
    }

    async fn task_retry(&self, params: TaskRetryParams) -> Result<Task> {
        self.write(move |tx| {
            kept_stages::make(tx, &Kept::Family(params.id))?;
            tasks::retry(tx, &params)
        })
        .await
    }

    async fn task_bulk(&self, params: TaskBulkParams) -> Result<BulkBatch> {
        self.write(move |tx| {
            kept_stages::make(tx, &Kept::All)?;
            tasks::bulk::batch(tx, &params)
        })
        .await
    }

    async fn task_delete(&self, id: TaskId) -> Result<()> {
        self.write(move |tx| {
            kept_stages::make(tx, &Kept::Family(id))?;
            tasks::delete_one(tx, id)
        })
        .await
    }

    async fn task_bulk_count(&self, filter: BulkFilter) -> Result<u64> {
        self.read_kept(Kept::All, move |conn| tasks::bulk::count(conn, &filter))
            .await
    }

    async fn task_reschedule(&self, params: TaskRescheduleParams) -> Result<Task> {
        self.write(move |tx| {
            kept_stages::make(tx, &Kept::Family(params.id))?;
            tasks::reschedule(tx, &params)
        })
        .await
    }

    async fn task_rescue(&self, params: TaskRescueParams) -> Result<Vec<TaskId>> {
        self.write(move |tx| tasks::rescue(tx, &params)).await
    }

    async fn task_expire(&self, params: TaskExpireParams) -> Result<Vec<TaskId>> {
        self.write(move |tx| tasks::expire(tx, &params)).await
    }

    async fn task_prune(&self, params: TaskPruneParams) -> Result<u64> {
        self.write(move |tx| tasks::prune(tx, &params)).await
    }

    async fn task_next_run_at(&self) -> Result<Option<jiff::Timestamp>> {
        self.read(tasks::next_run_at).await
    }

    fn task_held_until(&self, now: jiff::Timestamp) -> Option<jiff::Timestamp> {
        self.held.get(now)
    }

    async fn queue_list(&self, params: QueueListParams) -> Result<Page<QueueInfo>> {
        self.read(move |conn| queues::list(conn, &params)).await
    }

    async fn queue_get(&self, name: &str, now: jiff::Timestamp) -> Result<QueueInfo> {
        let name = name.to_string();
        self.read(move |conn| queues::get(conn, &name, now)).await
    }

    async fn queue_key_usage(
        &self,
        params: sked_store::keyed::KeyUsageParams,
    ) -> Result<sked_store::keyed::KeyUsage> {
        self.read(move |conn| queues::key_usage(conn, &params))
            .await
    }

    async fn queue_update(&self, params: QueueUpdateParams) -> Result<QueueInfo> {
        // A queue given a limit has its claims walk rows: its released parts are made rows.
        self.write(move |tx| {
            let info = queues::update(tx, &params)?;
            kept_stages::make(tx, &Kept::ReleasedIfLimited(params.name.clone()))?;
            Ok(info)
        })
        .await
    }

    async fn queue_remove(&self, name: &str) -> Result<()> {
        let name = name.to_string();
        self.write(move |tx| {
            kept_stages::make(tx, &Kept::All)?;
            queues::remove(tx, &name)
        })
        .await
    }

    async fn lease_acquire(&self, params: LeaseAcquireParams) -> Result<Option<Lease>> {
        self.write(move |tx| queues::lease_acquire(tx, &params))
            .await
    }

    async fn lease_release(&self, name: &str, holder: &str) -> Result<()> {
        let (name, holder) = (name.to_string(), holder.to_string());
        self.write(move |tx| queues::lease_release(tx, &name, &holder))
            .await
    }

    async fn lease_get(&self, name: &str, now: jiff::Timestamp) -> Result<Option<Lease>> {
        let name = name.to_string();
        self.read(move |conn| queues::lease_get(conn, &name, now))
            .await
    }

    async fn schedule_upsert(&self, params: ScheduleUpsertParams) -> Result<Schedule> {
        self.write(move |tx| schedules::upsert(tx, &params)).await
    }

    async fn schedule_write_many(&self, params: ScheduleWriteParams) -> Result<ScheduleSyncReport> {
        self.write(move |tx| schedules::write_many(tx, &params))
            .await
    }

    async fn schedule_get(&self, name: &str) -> Result<Schedule> {
        let name = name.to_string();
        self.read(move |conn| schedules::get(conn, &name)).await
    }

    async fn schedule_list(&self, params: ScheduleListParams) -> Result<Page<Schedule>> {
        self.read(move |conn| schedules::list(conn, &params)).await
    }

    async fn schedule_count(&self, filter: ScheduleFilter, limit: u64) -> Result<u64> {
        self.read(move |conn| schedules::count(conn, &filter, limit))
            .await
    }

    async fn schedule_delete(&self, name: &str, now: jiff::Timestamp) -> Result<bool> {
        let name = name.to_string();
        self.write(move |tx| schedules::delete(tx, &name, now))
            .await
    }

    async fn calendar_put(&self, params: CalendarPutParams) -> Result<CalendarInfo> {
        self.write(move |tx| schedules::calendars::put(tx, &params))
            .await
    }

    async fn calendar_get(&self, name: &str) -> Result<CalendarInfo> {
        let name = name.to_string();
        self.read(move |conn| schedules::calendars::get(conn, &name))
            .await
    }

    async fn calendar_list(&self) -> Result<Vec<CalendarInfo>> {
        self.read(schedules::calendars::list).await
    }

    async fn calendar_delete(&self, name: &str) -> Result<bool> {
        let name = name.to_string();
        self.write(move |tx| schedules::calendars::delete(tx, &name))
            .await
    }

    async fn schedule_set_paused(&self, params: SchedulePauseParams) -> Result<Schedule> {
        self.write(move |tx| schedules::set_paused(tx, &params))
            .await
    }

    async fn schedule_due(&self, params: ScheduleDueParams) -> Result<Vec<DueSchedule>> {
        self.read(move |conn| schedules::due(conn, &params)).await
    }

    async fn schedule_apply(&self, params: ScheduleApplyParams) -> Result<Vec<RunMade>> {
        self.write(move |tx| schedules::apply(tx, &params)).await
    }

    async fn schedule_backfill(&self, params: ScheduleBackfillParams) -> Result<BackfillReport> {
        self.write(move |tx| schedules::backfill(tx, &params)).await
    }

    async fn occurrence_list(&self, params: OccurrenceListParams) -> Result<Vec<Occurrence>> {
        self.read(move |conn| schedules::occurrences(conn, &params))
            .await
    }

    async fn schedule_next_fire_at(&self) -> Result<Option<jiff::Timestamp>> {
        self.read(schedules::next_fire_at).await
    }

    async fn schedule_materialise(
        &self,
        params: ScheduleMaterialiseParams,
    ) -> Result<MaterialiseReport> {
        self.write(move |tx| schedules::plans::materialise(tx, &params))
            .await
    }

    async fn schedule_next_look_at(&self) -> Result<Option<jiff::Timestamp>> {
        self.read(schedules::plans::next_look_at).await
    }

    async fn activity(&self, params: ActivityParams) -> Result<Vec<ActivityBucket>> {
        self.read(move |conn| observe::activity(conn, &params))
            .await
    }

    async fn run_samples(
        &self,
        params: sked_store::kinds::RunSamplesParams,
    ) -> Result<Vec<sked_store::kinds::RunSample>> {
        self.read(move |conn| observe::run_samples(conn, &params))
            .await
    }

    async fn worker_beat(&self, params: WorkerBeatParams) -> Result<()> {
        self.write(move |tx| observe::worker_beat(tx, &params))
            .await
    }

    async fn worker_list(&self, params: WorkerListParams) -> Result<Page<WorkerInfo>> {
        self.read(move |conn| observe::worker_list(conn, &params))
            .await
    }

    async fn worker_prune(&self, before: jiff::Timestamp) -> Result<u64> {
        self.write(move |tx| observe::worker_prune(tx, before))
            .await
    }
}

#[cfg(test)]
mod conformance {
    sked_store::conformance_tests!(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = crate::SqliteStore::open(dir.path().join("sked.db")).expect("open");
        Some((store, dir))
    });
}

/// The suite's cases that make workflows, with every stage that qualifies kept in parts of two
/// that claims take once released (docs/decisions/0027-kept-stages-on-sqlite.md): what the
/// store answers must be what it answers with rows.
#[cfg(test)]
mod conformance_kept_stages {
    sked_store::conformance_tests!(@cases async {
        let dir = tempfile::tempdir().expect("tempdir");
        let keeping = sked_store::kept::Keeping { min: Some(1), part: Some(2) };
        let store = crate::SqliteStore::open_keeping(dir.path().join("sked.db"), keeping)
            .expect("open");
        Some((store, dir))
    };
        a_workflow_is_made_whole_and_runs_in_its_order, a_workflow_with_a_missing_parent_makes_nothing,
        a_workflow_fails_is_cancelled_and_goes_with_its_tasks, stages_wait_as_their_tasks_would_alone,
        a_scheduled_workflow_runs_whole_and_counts_as_one_run, a_workflow_run_made_ahead_is_withdrawn_whole,
        a_workflow_schedule_is_triggered_and_backfilled_whole, a_workflow_run_with_a_dead_task_is_a_dead_run);
}

#[cfg(test)]
mod tests;
