//! A claim's leases and a batch of endings, read and written together: one statement reads
//! the rows, and few write them.
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
use sked_core::{Task, TaskId, TaskState};
use sked_store::rules;
use sked_store::*;

use super::{STATEMENT_ROWS, parameter_rows};
use crate::codec::{TASK_COLUMNS, db_err, id_list, task_from_row, ts};

/// The rows of the ids in `?1` (an [`id_list`]), in no particular order.
static READ: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id IN rarray(?1)"));

/// Leases the available tasks of `?1` (an [`id_list`]) to the worker `?4` from `?2` until
/// `?3`.
const LEASE: &str = "UPDATE OR FAIL tasks SET state = 'running', attempt = attempt + 1, started_at = ?2, \
    lease_expires_at = ?3, worker = ?4, cancel_requested = 0 \
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

/// Leases the available tasks `ids`, in that order, to `worker` from `now` until `wanted` (or
/// sooner, by each task's timeout and `grace`: [`rules::lease_end`]); the tasks after.
pub(crate) fn lease(
    tx: &Transaction<'_>,
    ids: &[TaskId],
    worker: &str,
    now: Timestamp,
    (wanted, grace): (Timestamp, SignedDuration),
) -> Result<Vec<Task>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut rows = read(tx, ids.iter().copied())?;
    let mut tasks = Vec::with_capacity(ids.len());
    // The tasks by the end of their lease: all at `wanted` but those with a shorter timeout.
    let mut leases: Vec<(Timestamp, Vec<TaskId>)> = Vec::new();
    for id in ids {
        // Read in this transaction, which holds the write lock: a missing or taken row is a
        // fault in the claim that chose it.
        let mut task = rows
            .take(*id)
            .filter(|t| t.state == TaskState::Available)
            .ok_or_else(|| StoreError::Backend(format!("task {id} was not available to claim")))?;
        let expires = rules::lease_end(now, task.timeout, grace, wanted);
        match leases.iter_mut().find(|(at, _)| *at == expires) {
            Some((_, same)) => same.push(*id),
            None => leases.push((expires, vec![*id])),
        }
        task.state = TaskState::Running;
        task.attempt += 1;
        task.started_at = Some(now);
        task.lease_expires_at = Some(expires);
        task.worker = Some(worker.to_string());
        task.cancel_requested = false;
        tasks.push(task);
    }
    let mut stmt = tx.prepare_cached(LEASE).map_err(db_err)?;
    for (expires, ids) in &leases {
        let list = id_list(ids);
        let n = stmt
            .execute(params![list, ts(now), ts(*expires), worker])
            .map_err(db_err)?;
        if n != ids.len() {
            return Err(StoreError::Backend(format!(
                "leased {n} of {} tasks read as available",
                ids.len()
            )));
        }
    }
    Ok(tasks)
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

/// Writes `endings`, checked in this transaction, in order: each statement names a task at
/// most once (`repeats`: whether some task is named twice).
pub(crate) fn end(tx: &Transaction<'_>, endings: &[Ending], repeats: bool) -> Result<()> {
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
        let n = stmt.raw_execute().map_err(db_err)?;
        if n != *size {
            return Err(StoreError::Backend(format!(
                "ended {n} of {size} attempts read as running"
            )));
        }
        rest = later;
    }
    Ok(())
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

    #[test]
    fn the_batch_statements_find_rows_by_id() {
        let dir = tempfile::tempdir().unwrap();
        drop(crate::SqliteStore::open(dir.path().join("plan.db")).unwrap());
        let conn = rusqlite::Connection::open(dir.path().join("plan.db")).unwrap();
        rusqlite::vtab::array::load_module(&conn).unwrap();
        let others = [
            super::super::ended::READ,
            super::super::ended::SUCCEED,
            super::super::PRUNE_TASKS,
        ];
        for sql in [READ.as_str(), LEASE, &ENDS[0], &ENDS[3]]
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
