//! Batch endings answered with [`TaskEnded`]: successes are checked and answered from a narrow
//! read of eight columns and written without building whole tasks. Successes without a result
//! that end at the same time share one `UPDATE … WHERE id IN rarray(?)`, as a claim's leases
//! do; successes with a result go as rows of parameters ([`super::batch::end`]). Every other
//! ending, and a success whose attempt no longer holds its task, goes the way
//! [`super::finish_many`] goes, which says why.
//!
//! Reading whole rows to build whole tasks, then writing each ending's values, was a third of
//! a drained task's instructions; an `UPDATE … FROM (VALUES …) RETURNING` of the answer's
//! columns, with no read, cost more than this read (SQLite materializes both the `FROM` and
//! the returned rows).

use rusqlite::{Transaction, params};
use sked_core::{TaskId, TaskState};
use sked_store::*;

use super::batch;
use crate::codec::{db_err, from_ts, id_list, opt_ts, state, text, ts};

/// What a success's check and answer need of the rows of `?1` (an [`id_list`]).
pub(super) const READ: &str = "SELECT id, queue, state, attempt, run_at, started_at, schedule, max_attempts \
    FROM tasks WHERE id IN rarray(?1)";

/// Ends as succeeded at `?2`, without a result, the running tasks of `?1` (an [`id_list`]).
/// What [`rules::finish`] makes of a success: the run time, the attempts allowed and the
/// last error stay.
pub(super) const SUCCEED: &str = "UPDATE OR FAIL tasks SET state = 'succeeded', finished_at = ?2, result = NULL, \
    lease_expires_at = NULL WHERE id IN rarray(?1) AND state = 'running'";

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

/// The rows of `ids`, sorted by id; ids without a row are left out.
fn read(tx: &Transaction<'_>, ids: &[TaskId]) -> Result<Vec<Row>> {
    let mut rows = Vec::with_capacity(ids.len());
    if ids.is_empty() {
        return Ok(rows);
    }
    let list = id_list(ids);
    let mut stmt = tx.prepare_cached(READ).map_err(db_err)?;
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
/// narrow read, then every other ending the way `finish_many` writes it.
pub(crate) fn end_many(
    tx: &Transaction<'_>,
    ps: &[TaskFinishParams],
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
    let succeeds = |p: &TaskFinishParams| matches!(p.outcome, FinishOutcome::Succeeded { .. });
    let ids: Vec<TaskId> = ps.iter().filter(|p| succeeds(p)).map(|p| p.id).collect();
    let mut rows = read(tx, &ids)?;
    let mut out: Vec<Option<Result<TaskEnded>>> = Vec::with_capacity(ps.len());
    // Successes without a result, by finish time; successes with one, as endings.
    let mut plain: Vec<(i64, Vec<TaskId>)> = Vec::new();
    let mut with_result: Vec<batch::Ending> = Vec::new();
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
            None => match plain.iter_mut().find(|(at, _)| *at == now) {
                Some((_, same)) => same.push(p.id),
                None => plain.push((now, vec![p.id])),
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
    for (at, ids) in &plain {
        let list = id_list(ids);
        let n = stmt.execute(params![list, at]).map_err(db_err)?;
        if n != ids.len() {
            return Err(StoreError::Backend(format!(
                "ended {n} of {} attempts read as running",
                ids.len()
            )));
        }
    }
    batch::end(tx, &with_result, false)?;
    let mut rest = brief(super::finish_many(tx, &others)?).into_iter();
    Ok(out
        .into_iter()
        .map(|answer| match answer {
            Some(answer) => answer,
            None => rest.next().expect("an answer for every other ending"),
        })
        .collect())
}
