//! A claim's leases and a batch of endings: one statement reads the rows, and few write them.
//! A large claim's leases are written without reading the rows ([`lease_ids`]); the store
//! reads them once the claim is committed, on a connection of its own ([`read_leased`]), so
//! that the writer goes on to the next writes meanwhile ([`lease_claimed`]).
//!
//! A statement that changes the state opens a cursor on every index whose predicate names the
//! state, whether or not the row enters or leaves it, and its start and end cost more than a
//! row. A claim of 1,000 tasks leased by one statement pays that once instead of 1,000 times.
//! Ids travel as one array, bound as a pointer and read with `rarray` (see
//! [`crate::codec::id_list`]): tasks leased until the same time share a statement. Endings
//! differ row by row, so they go as rows of parameters (`UPDATE … FROM (VALUES …)`), up to 64
//! to a statement. Each write repeats the state the rows were read in and checks the count, so
//! that it changes exactly the rows checked in this transaction.

use std::collections::HashSet;
use std::sync::LazyLock;

use jiff::{SignedDuration, Timestamp};
use rusqlite::{ToSql, Transaction, params};
use sked_core::{Task, TaskId};
use sked_store::*;

use super::{STATEMENT_ROWS, parameter_rows};
use crate::codec::{TASK_COLUMNS, db_err, id_list, task_from_row, ts};

/// The rows of the ids in `?1` (an [`id_list`]), in no particular order.
static READ: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id IN rarray(?1)"));

/// The rows of the ids in `?1` (an [`id_list`]) that the claim of worker `?2` started at `?3`
/// leased, in no particular order.
static READ_LEASED: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {TASK_COLUMNS} FROM tasks WHERE id IN rarray(?1) AND state = 'running' \
         AND worker = ?2 AND started_at = ?3"
    )
});

/// Leases the available tasks of `?1` (an [`id_list`]) to the worker `?4` from `?2` until
/// `?3`, or sooner: never past a task's timeout and the grace `?5` (milliseconds) after the
/// start, as [`sked_store::rules::lease_end`] says. Times are microseconds; the timeout and
/// the grace are at most [`sked_core::MAX_DURATION`] each, so the sum stays in range.
const LEASE: &str = "UPDATE OR FAIL tasks SET state = 'running', attempt = attempt + 1, started_at = ?2, \
    lease_expires_at = CASE WHEN timeout_ms IS NULL THEN ?3 \
      ELSE min(?3, ?2 + (timeout_ms + ?5) * 1000) END, \
    worker = ?4, cancel_requested = 0 \
    WHERE id IN rarray(?1) AND state = 'available'";

/// The values of one [`Ending`].
const PER_ENDING: usize = 8;

/// Ends the running attempts of `rows` [`Ending`]s, given as parameters, eight a row.
fn end_sql(rows: usize) -> String {
    format!(
        "UPDATE OR FAIL tasks SET state = e.column3, run_at = e.column4, max_attempts = e.column5, \
           finished_at = e.column6, last_error = coalesce(e.column7, tasks.last_error), \
           result = e.column8, lease_expires_at = NULL \
         FROM (VALUES {}) AS e \
         WHERE tasks.id = e.column1 AND tasks.state = 'running' AND tasks.attempt = e.column2",
        parameter_rows(rows, PER_ENDING)
    )
}

/// The statements of [`STATEMENT_ROWS`] endings, in that order.
static ENDS: LazyLock<[String; 4]> = LazyLock::new(|| STATEMENT_ROWS.map(end_sql));

/// Rows read together, found by id (a sorted list: no hashing on the hot path).
pub(crate) struct Rows(Vec<(TaskId, Option<Task>)>);

impl Rows {
    /// The row of `id`, taken out; `None` when it was not read or is taken.
    pub(crate) fn take(&mut self, id: TaskId) -> Option<Task> {
        let i = self.0.binary_search_by_key(&id, |(k, _)| *k).ok()?;
        self.0[i].1.take()
    }

    /// The row of `id`, if it was read and is not taken.
    pub(crate) fn get(&self, id: TaskId) -> Option<&Task> {
        let i = self.0.binary_search_by_key(&id, |(k, _)| *k).ok()?;
        self.0[i].1.as_ref()
    }

    /// Puts a row read before back (a task of another id is ignored).
    pub(crate) fn put(&mut self, task: Task) {
        if let Ok(i) = self.0.binary_search_by_key(&task.id, |(k, _)| *k) {
            self.0[i].1 = Some(task);
        }
    }
}

/// The rows of `ids`; ids without a row are left out.
pub(crate) fn read(tx: &Transaction<'_>, ids: impl IntoIterator<Item = TaskId>) -> Result<Rows> {
    let ids: Vec<TaskId> = ids.into_iter().collect();
    let mut rows = Vec::with_capacity(ids.len());
    if !ids.is_empty() {
        let mut stmt = tx.prepare_cached(&READ).map_err(db_err)?;
        let found = stmt
            .query_map([id_list(&ids)], task_from_row)
            .map_err(db_err)?;
        for task in found {
            let task = task.map_err(db_err)?;
            rows.push((task.id, Some(task)));
        }
    }
    rows.sort_unstable_by_key(|(id, _)| *id);
    Ok(Rows(rows))
}

/// Leases the available tasks `ids` to `worker` from `now` until `wanted` (or sooner, by each
/// task's timeout and `grace`: [`sked_store::rules::lease_end`]), without reading them:
/// [`read_leased`] reads them after, in this transaction or, once it is committed, on another
/// connection.
pub(crate) fn lease_ids(
    tx: &Transaction<'_>,
    ids: &[TaskId],
    worker: &str,
    now: Timestamp,
    wanted: Timestamp,
    grace: SignedDuration,
) -> Result<()> {
    lease_some(tx, ids, ids.len(), worker, now, wanted, grace)
}

/// [`lease_ids`] of the `available` tasks among `ids` (the others are leased already).
fn lease_some(
    tx: &Transaction<'_>,
    ids: &[TaskId],
    available: usize,
    worker: &str,
    now: Timestamp,
    wanted: Timestamp,
    grace: SignedDuration,
) -> Result<()> {
    if available == 0 {
        return Ok(());
    }
    let grace = grace.clamp(SignedDuration::ZERO, sked_core::MAX_DURATION);
    let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(0);
    let n = tx
        .prepare_cached(LEASE)
        .map_err(db_err)?
        .execute(params![id_list(ids), ts(now), ts(wanted), worker, grace_ms])
        .map_err(db_err)?;
    // Every id was chosen in this transaction, which holds the write lock: one that was not
    // available is a fault in the claim that chose it.
    if n != available {
        return Err(StoreError::Backend(format!(
            "leased {n} of {available} tasks chosen as available"
        )));
    }
    Ok(())
}

/// The tasks of `ids` that `worker`'s claim at `now` leased ([`lease_ids`]), in the order of
/// `ids`. Read after the claim's commit, a task another write changed since is as that write
/// left it, and one it took from the worker (deleted, or rescued and leased again) is left
/// out: its lease runs out and rescue runs it again.
pub(crate) fn read_leased(
    conn: &rusqlite::Connection,
    ids: &[TaskId],
    worker: &str,
    now: Timestamp,
) -> Result<Vec<Task>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare_cached(&READ_LEASED).map_err(db_err)?;
    let found = stmt
        .query_map(params![id_list(ids), worker, ts(now)], task_from_row)
        .map_err(db_err)?;
    let mut rows = Vec::with_capacity(ids.len());
    for task in found {
        let task = task.map_err(db_err)?;
        rows.push((task.id, Some(task)));
    }
    rows.sort_unstable_by_key(|(id, _)| *id);
    let mut rows = Rows(rows);
    Ok(ids.iter().filter_map(|id| rows.take(*id)).collect())
}

/// Leases the available tasks `ids`, in that order, to `worker` from `now` until `wanted` (or
/// sooner, by each task's timeout and `grace`: [`sked_store::rules::lease_end`]); the tasks
/// after, read in this transaction.
pub(crate) fn lease(
    tx: &Transaction<'_>,
    ids: &[TaskId],
    worker: &str,
    now: Timestamp,
    wanted: Timestamp,
    grace: SignedDuration,
) -> Result<Vec<Task>> {
    lease_ids(tx, ids, worker, now, wanted, grace)?;
    read_all_leased(tx, ids, worker, now)
}

/// The tasks of `ids`, all leased to `worker` at `now` in this transaction, in that order.
fn read_all_leased(
    tx: &Transaction<'_>,
    ids: &[TaskId],
    worker: &str,
    now: Timestamp,
) -> Result<Vec<Task>> {
    let tasks = read_leased(tx, ids, worker, now)?;
    if tasks.len() != ids.len() {
        return Err(StoreError::Backend(format!(
            "read {} of {} tasks leased",
            tasks.len(),
            ids.len()
        )));
    }
    Ok(tasks)
}

/// Claims of at least this many tasks are read after their commit ([`Leased::Later`]), smaller
/// ones in their transaction. A read after the commit frees the writer sooner, but costs the
/// claim a hop to another thread and a cold page cache (SQLite drops a connection's cache
/// whenever another connection wrote): a drain's claims of 1,000 went faster, the Rust
/// worker's of up to 256 slower (BENCHMARKS.md). 500 lies between, and was not measured itself.
pub(crate) const READ_LATER_FROM: usize = 500;

/// A claim's leased tasks.
pub(crate) enum Leased {
    /// Read in the claim's transaction.
    Read(Vec<Task>),
    /// To read once the claim is committed ([`read_leased`]), in this order.
    Later(Vec<TaskId>),
}

/// Leases the available tasks among `ids`, in that order, as [`lease`] does, where
/// `inserted` of them the claim inserted running already (a kept stage's,
/// [`super::kept_stages::take`]); a claim of [`READ_LATER_FROM`] or more is left to read after
/// the commit.
pub(crate) fn lease_claimed(
    tx: &Transaction<'_>,
    ids: Vec<TaskId>,
    inserted: usize,
    worker: &str,
    now: Timestamp,
    wanted: Timestamp,
    grace: SignedDuration,
) -> Result<Leased> {
    lease_some(tx, &ids, ids.len() - inserted, worker, now, wanted, grace)?;
    if ids.len() < READ_LATER_FROM {
        return Ok(Leased::Read(read_all_leased(tx, &ids, worker, now)?));
    }
    Ok(Leased::Later(ids))
}

/// What an ending writes to its task's row: id, attempt, state, run time, attempts allowed,
/// finish time, error, result (JSON text).
pub(crate) type Ending = (
    TaskId,
    i32,
    &'static str,
    i64,
    i32,
    Option<i64>,
    Option<String>,
    Option<String>,
);

/// Writes `endings`, in order: each statement names a task at most once (`repeats`: whether
/// some task is named twice). `false` when a statement found fewer of its tasks running with
/// the ending's attempt than it named; it stops there, and the caller must not commit.
#[must_use = "a short write must not be committed"]
pub(crate) fn end(tx: &Transaction<'_>, endings: &[Ending], repeats: bool) -> Result<bool> {
    let mut rest = endings;
    while !rest.is_empty() {
        let distinct = match repeats {
            false => rest.len(),
            true => {
                let mut seen = HashSet::with_capacity(rest.len().min(STATEMENT_ROWS[0]));
                rest.iter().take_while(|e| seen.insert(e.0)).count()
            }
        };
        let (size, sql) = STATEMENT_ROWS
            .iter()
            .zip(ENDS.iter())
            .find(|(size, _)| **size <= distinct)
            .expect("statements of one ending");
        let (now, later) = rest.split_at(*size);
        let mut stmt = tx.prepare_cached(sql).map_err(db_err)?;
        for (i, e) in now.iter().enumerate() {
            let values: [&dyn ToSql; PER_ENDING] = [&e.0, &e.1, &e.2, &e.3, &e.4, &e.5, &e.6, &e.7];
            for (c, v) in values.into_iter().enumerate() {
                stmt.raw_bind_parameter(i * PER_ENDING + c + 1, v)
                    .map_err(db_err)?;
            }
        }
        if stmt.raw_execute().map_err(db_err)? != *size {
            return Ok(false);
        }
        rest = later;
    }
    Ok(true)
}

/// The error of a write that ended fewer attempts than it had read as running in its own
/// transaction, which holds the write lock: a fault in the read or the write.
pub(crate) fn short_write() -> StoreError {
    StoreError::Backend("a batch ending found fewer attempts running than it read".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plan of `sql`, one detail a line.
    fn plan(conn: &rusqlite::Connection, sql: &str) -> String {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let rows = stmt.query_map([], |r| r.get::<_, String>(3)).unwrap();
        rows.map(Result::unwrap).collect::<Vec<_>>().join("\n")
    }

    /// Read after its claim's commit, a claim gives its tasks in claim order, as any write
    /// since left them, and leaves out those that no longer hold its lease.
    #[test]
    fn a_claim_reads_what_it_still_holds_in_claim_order() {
        let dir = tempfile::tempdir().unwrap();
        drop(crate::SqliteStore::open(dir.path().join("read.db")).unwrap());
        let mut conn = crate::connect(&dir.path().join("read.db")).unwrap();
        for _ in 0..5 {
            conn.execute(
                "INSERT INTO tasks (queue, kind, payload, priority, state, run_at, max_attempts, \
                   created_at) VALUES ('default', 'k', '{}', 0, 'available', 0, 25, 0)",
                [],
            )
            .unwrap();
        }
        let now = Timestamp::from_second(1_000).unwrap();
        let wanted = Timestamp::from_second(1_060).unwrap();
        let claimed: Vec<TaskId> = vec![4, 2, 5, 1];
        let tx = conn.transaction().unwrap();
        lease_ids(&tx, &claimed, "w1", now, wanted, SignedDuration::ZERO).unwrap();
        tx.commit().unwrap();
        // Since the commit: task 2 was rescued and leased again (to another worker), task 5
        // deleted, and task 1's cancel asked for.
        conn.execute_batch(
            "UPDATE tasks SET attempt = 2, worker = 'w2', started_at = started_at + 1 WHERE id = 2;
             DELETE FROM tasks WHERE id = 5;
             UPDATE tasks SET cancel_requested = 1 WHERE id = 1;",
        )
        .unwrap();
        let tasks = read_leased(&conn, &claimed, "w1", now).unwrap();
        let ids: Vec<TaskId> = tasks.iter().map(|t| t.id).collect();
        assert_eq!(ids, [4, 1]);
        assert!(
            tasks
                .iter()
                .all(|t| t.attempt == 1 && t.lease_expires_at == Some(wanted))
        );
        assert!(tasks[1].cancel_requested);
        // A lease of a task that is not available is refused whole.
        let tx = conn.transaction().unwrap();
        let err = lease_ids(&tx, &[3, 4], "w1", now, wanted, SignedDuration::ZERO);
        assert!(err.is_err(), "{err:?}");
    }

    #[test]
    fn the_batch_statements_find_rows_by_id() {
        let dir = tempfile::tempdir().unwrap();
        drop(crate::SqliteStore::open(dir.path().join("plan.db")).unwrap());
        let conn = rusqlite::Connection::open(dir.path().join("plan.db")).unwrap();
        rusqlite::vtab::array::load_module(&conn).unwrap();
        let others = [
            super::super::finish_lean::READ,
            super::super::finish_lean::SUCCEED,
            super::super::PRUNE_TASKS,
        ];
        for sql in [READ.as_str(), &READ_LEASED, LEASE, &ENDS[0], &ENDS[3]]
            .into_iter()
            .chain(others)
        {
            let mut sql = sql.to_string();
            for p in (1..=STATEMENT_ROWS[0] * PER_ENDING).rev() {
                sql = sql.replace(&format!("?{p}"), "NULL");
            }
            let plan = plan(&conn, &sql);
            assert!(
                plan.contains("tasks USING INTEGER PRIMARY KEY (rowid=?)"),
                "{sql}:\n{plan}"
            );
            assert!(!plan.contains("SCAN tasks"), "{sql}:\n{plan}");
        }
        let attempts = plan(&conn, &super::super::PRUNE_ATTEMPTS.replace("?1", "NULL"));
        assert!(
            attempts.contains("task_attempts USING PRIMARY KEY (task_id=?)"),
            "{attempts}"
        );
    }
}
