//! Batch endings answered with [`TaskEnded`]: successes are written without reading their rows
//! first. A success needs nothing of the row but the check that its attempt still holds the
//! task, which the statement's `WHERE` makes, and the few columns it returns are what the
//! answer needs: a drained task counts 10 % fewer instructions than when its ending read the
//! row and built the whole task. Every other ending, and a success whose attempt no longer
//! holds its task, goes the way [`super::finish_many`] goes, which says why.

use std::sync::LazyLock;

use rusqlite::{ToSql, Transaction};
use sked_core::{TaskId, TaskState};
use sked_store::*;

use super::{STATEMENT_ROWS, parameter_rows};
use crate::codec::{db_err, from_ts, opt_ts, ts};

/// The values of one success: id, attempt, finish time, result (JSON text).
const PER_SUCCESS: usize = 4;

/// Ends, as succeeded, the running attempts of `rows` successes given as parameters (four a
/// row) and returns what [`TaskEnded`] needs of each task it ended. The `SET` is what
/// [`rules::finish`] makes of a success: the run time, the attempts allowed and the last error
/// stay.
fn succeed_sql(rows: usize) -> String {
    format!(
        "UPDATE tasks SET state = 'succeeded', finished_at = e.column3, result = e.column4, \
           lease_expires_at = NULL \
         FROM (VALUES {}) AS e \
         WHERE tasks.id = e.column1 AND tasks.state = 'running' AND tasks.attempt = e.column2 \
         RETURNING id, queue, attempt, run_at, started_at, finished_at, schedule",
        parameter_rows(rows, PER_SUCCESS)
    )
}

/// The statements of [`STATEMENT_ROWS`] successes, in that order.
static SUCCEEDS: LazyLock<[String; 4]> = LazyLock::new(|| STATEMENT_ROWS.map(succeed_sql));

/// A success to write: id, attempt, finish time, result.
type Success = (TaskId, i32, i64, Option<String>);

/// Writes `successes` (no id twice) and answers the tasks they ended, sorted by id; a success
/// whose attempt no longer holds its task (or that names none) changes nothing and is left out.
fn succeed(tx: &Transaction<'_>, successes: &[Success]) -> Result<Vec<TaskEnded>> {
    let mut ended = Vec::with_capacity(successes.len());
    let mut rest = successes;
    while !rest.is_empty() {
        let (size, sql) = STATEMENT_ROWS
            .iter()
            .zip(SUCCEEDS.iter())
            .find(|(size, _)| **size <= rest.len())
            .expect("statements of one success");
        let (now, later) = rest.split_at(*size);
        let mut stmt = tx.prepare_cached(sql).map_err(db_err)?;
        for (i, s) in now.iter().enumerate() {
            let values: [&dyn ToSql; PER_SUCCESS] = [&s.0, &s.1, &s.2, &s.3];
            for (c, v) in values.into_iter().enumerate() {
                stmt.raw_bind_parameter(i * PER_SUCCESS + c + 1, v)
                    .map_err(db_err)?;
            }
        }
        let mut rows = stmt.raw_query();
        while let Some(r) = rows.next().map_err(db_err)? {
            ended.push(TaskEnded {
                id: r.get(0).map_err(db_err)?,
                queue: r.get(1).map_err(db_err)?,
                state: TaskState::Succeeded,
                attempt: r.get(2).map_err(db_err)?,
                run_at: from_ts(r.get(3).map_err(db_err)?),
                started_at: opt_ts(r.get(4).map_err(db_err)?),
                finished_at: opt_ts(r.get(5).map_err(db_err)?),
                schedule: r.get(6).map_err(db_err)?,
            });
        }
        rest = later;
    }
    ended.sort_unstable_by_key(|t| t.id);
    Ok(ended)
}

/// Ends attempts as [`super::finish_many`] does, answering with [`TaskEnded`]: without an id
/// given twice, the successes are written first without a read, then every other ending, and
/// every success that wrote nothing, the way `finish_many` does.
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
    let successes: Vec<Success> = ps
        .iter()
        .filter_map(|p| match &p.outcome {
            FinishOutcome::Succeeded { result } => Some((
                p.id,
                p.attempt,
                ts(p.now),
                result.as_ref().map(|r| r.to_string()),
            )),
            _ => None,
        })
        .collect();
    let ended = succeed(tx, &successes)?;
    let ids: Vec<TaskId> = ended.iter().map(|t| t.id).collect();
    let mut ended: Vec<Option<TaskEnded>> = ended.into_iter().map(Some).collect();
    let mut out: Vec<Option<Result<TaskEnded>>> = Vec::with_capacity(ps.len());
    let mut others: Vec<TaskFinishParams> = Vec::new();
    for p in ps {
        let written = match p.outcome {
            FinishOutcome::Succeeded { .. } => ids.binary_search(&p.id).ok(),
            _ => None,
        };
        match written {
            Some(i) => out.push(ended[i].take().map(Ok)),
            None => {
                out.push(None);
                others.push(p.clone());
            }
        }
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
