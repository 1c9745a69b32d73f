//! Batch endings answered with [`TaskEnded`]: successes are checked and answered from a narrow
//! read of eight columns and written without building whole tasks. Successes without a result
//! that end at the same time, with the same attempt, share one `UPDATE … WHERE id IN rarray(?)`,
//! as a claim's leases do; successes with a result go as rows of parameters
//! ([`super::multi_row::end`]). Every other ending, and a success whose attempt no longer holds its
//! task, goes the way [`super::finish_many`] goes, which says why.
//!
//! A batch of [`READ_BEFORE_FROM`] successes or more is read before its write, on the store's
//! reader connection ([`read_before`]), so that the writer only writes. Its statements check
//! each attempt as they write; when one finds fewer rows running with their attempt than the
//! read did (a lease lost since), the write fails as [`changed_since_read`], is rolled back,
//! and the store ends the batch again with the read in its transaction.
//!
//! Reading whole rows to build whole tasks, then writing each ending's values, was a third of
//! a drained task's instructions; an `UPDATE … FROM (VALUES …) RETURNING` of the answer's
//! columns, with no read, cost more than this read (SQLite materializes both the `FROM` and
//! the returned rows).

use rusqlite::{Connection, Transaction, params};
use sked_core::{TaskId, TaskState};
use sked_store::*;

use super::multi_row;
use crate::codec::{db_err, from_ts, id_list, opt_ts, state, text, ts};

/// What a success's check and answer need of the rows of `?1` (an [`id_list`]).
pub(super) const READ: &str = "SELECT id, queue, state, attempt, run_at, started_at, schedule, max_attempts \
    FROM tasks WHERE id IN rarray(?1)";

/// Ends as succeeded at `?2`, without a result, the tasks of `?1` (an [`id_list`]) running
/// with attempt `?3`. What [`rules::finish`] makes of a success: the run time, the attempts
/// allowed and the last error stay.
pub(super) const SUCCEED: &str = "UPDATE OR FAIL tasks SET state = 'succeeded', finished_at = ?2, result = NULL, \
    lease_expires_at = NULL WHERE id IN rarray(?1) AND state = 'running' AND attempt = ?3";

/// Batches with at least this many successes read their rows before the write, on another
/// connection ([`read_before`]); smaller ones in the write's transaction. The trade is a
/// large claim's ([`multi_row::READ_LATER_FROM`]): the writer is freed of the read, but the read
/// pays a hop to another thread and a cold page cache.
pub(crate) const READ_BEFORE_FROM: usize = multi_row::READ_LATER_FROM;

/// The successes' rows of a batch of endings, read before its write ([`read_before`]).
pub(crate) struct ReadBefore(Vec<Row>);

/// The message of [`changed_since_read`]'s error.
const CHANGED: &str = "a task changed between the read of a batch of endings and its write";

/// Whether `e` is the error of a write that found a row changed since its [`read_before`]:
/// the write is rolled back, and the batch is to be ended again with the read in its
/// transaction.
pub(crate) fn changed_since_read(e: &StoreError) -> bool {
    matches!(e, StoreError::Conflict(m) if m == CHANGED)
}

/// A row as [`READ`] reads it.
struct Row {
    id: TaskId,
    queue: String,
    state: TaskState,
    attempt: i32,
    run_at: i64,
    started_at: Option<i64>,
    schedule: Option<String>,
    max_attempts: i32,
}

fn succeeds(p: &TaskFinishParams) -> bool {
    matches!(p.outcome, FinishOutcome::Succeeded { .. })
}

/// The ids of the successes of `ps`.
fn success_ids(ps: &[TaskFinishParams]) -> Vec<TaskId> {
    ps.iter().filter(|p| succeeds(p)).map(|p| p.id).collect()
}

/// Whether `ps` is ended from a [`read_before`]: it has [`READ_BEFORE_FROM`] successes or more,
/// and names no task twice (such a batch is ended one at a time).
pub(crate) fn reads_before(ps: &[TaskFinishParams]) -> bool {
    ps.iter().filter(|p| succeeds(p)).count() >= READ_BEFORE_FROM && !super::names_an_id_twice(ps)
}

/// What [`finish_many_lean`] needs of the successes' rows of `ps`, read on `conn` before the write.
pub(crate) fn read_before(conn: &Connection, ps: &[TaskFinishParams]) -> Result<ReadBefore> {
    Ok(ReadBefore(read(conn, &success_ids(ps))?))
}

/// The rows of `ids`, sorted by id; ids without a row are left out.
fn read(conn: &Connection, ids: &[TaskId]) -> Result<Vec<Row>> {
    let mut rows = Vec::with_capacity(ids.len());
    if ids.is_empty() {
        return Ok(rows);
    }
    let list = id_list(ids);
    let mut stmt = conn.prepare_cached(READ).map_err(db_err)?;
    let found = stmt
        .query_map([list], |r| {
            Ok(Row {
                id: r.get(0)?,
                queue: r.get(1)?,
                state: state(text(r, 2)?)?,
                attempt: r.get(3)?,
                run_at: r.get(4)?,
                started_at: r.get(5)?,
                schedule: r.get(6)?,
                max_attempts: r.get(7)?,
            })
        })
        .map_err(db_err)?;
    for row in found {
        rows.push(row.map_err(db_err)?);
    }
    rows.sort_unstable_by_key(|r| r.id);
    Ok(rows)
}

/// Ends attempts as [`super::finish_many`] does, answering with [`TaskEnded`]: without an id
/// given twice, the successes whose attempt holds their task are written first, from the
/// narrow read (`before`, or in `tx`), then every other ending the way `finish_many` writes
/// it. From a read before, a success whose attempt lost its task since fails the whole write
/// as [`changed_since_read`].
pub(crate) fn finish_many_lean(
    tx: &Transaction<'_>,
    ps: &[TaskFinishParams],
    before: Option<ReadBefore>,
) -> Result<Vec<Result<TaskEnded>>> {
    let brief = |answers: Vec<Result<sked_core::Task>>| -> Vec<Result<TaskEnded>> {
        answers
            .into_iter()
            .map(|r| r.map(TaskEnded::from))
            .collect()
    };
    if super::names_an_id_twice(ps) {
        // Each ending must find the task as the one before it left it: one at a time.
        return Ok(brief(super::finish_many(tx, ps)?));
    }
    let read_before = before.is_some();
    let mut rows = match before {
        Some(ReadBefore(rows)) => rows,
        None => read(tx, &success_ids(ps))?,
    };
    let short = || match read_before {
        true => StoreError::Conflict(CHANGED.into()),
        false => multi_row::short_write(),
    };
    let mut out: Vec<Option<Result<TaskEnded>>> = Vec::with_capacity(ps.len());
    // Successes without a result, by finish time and attempt; successes with one, as endings.
    let mut plain: Vec<((i64, i32), Vec<TaskId>)> = Vec::new();
    let mut with_result: Vec<multi_row::Ending> = Vec::new();
    let mut others: Vec<TaskFinishParams> = Vec::new();
    for p in ps {
        let FinishOutcome::Succeeded { result } = &p.outcome else {
            out.push(None);
            others.push(p.clone());
            continue;
        };
        let held = rows
            .binary_search_by_key(&p.id, |r| r.id)
            .ok()
            .map(|i| &mut rows[i])
            .filter(|r| r.state == TaskState::Running && r.attempt == p.attempt);
        let Some(row) = held else {
            out.push(None);
            others.push(p.clone());
            continue;
        };
        let now = ts(p.now);
        match result {
            None => match plain.iter_mut().find(|(k, _)| *k == (now, p.attempt)) {
                Some((_, same)) => same.push(p.id),
                None => plain.push(((now, p.attempt), vec![p.id])),
            },
            Some(result) => with_result.push((
                p.id,
                p.attempt,
                TaskState::Succeeded.as_str(),
                row.run_at,
                row.max_attempts,
                Some(now),
                None,
                Some(result.to_string()),
            )),
        }
        out.push(Some(Ok(TaskEnded {
            id: p.id,
            queue: std::mem::take(&mut row.queue),
            state: TaskState::Succeeded,
            attempt: p.attempt,
            run_at: from_ts(row.run_at),
            started_at: opt_ts(row.started_at),
            finished_at: Some(p.now),
            schedule: row.schedule.take(),
        })));
    }
    let mut stmt = tx.prepare_cached(SUCCEED).map_err(db_err)?;
    for ((at, attempt), ids) in &plain {
        let list = id_list(ids);
        if stmt.execute(params![list, at, attempt]).map_err(db_err)? != ids.len() {
            return Err(short());
        }
    }
    if !multi_row::end(tx, &with_result, false)? {
        return Err(short());
    }
    if let Some(now) = ps.iter().map(|p| p.now).max() {
        let succeeded = out.iter().flatten().flatten().map(|t| (t.id, t.state));
        super::dependents::release(tx, succeeded, now)?;
    }
    let mut rest = brief(super::finish_many(tx, &others)?).into_iter();
    Ok(out
        .into_iter()
        .map(|answer| match answer {
            Some(answer) => answer,
            None => rest.next().expect("an answer for every other ending"),
        })
        .collect())
}
