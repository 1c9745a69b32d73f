//! Task operations. Every state change is a compare-and-set on the expected state (and, for a
//! running task, the attempt number) inside a write transaction.
//!
//! The statements that write many rows of a hot path (bulk inserts, leases, endings) say
//! `OR FAIL`: a statement that may abort halfway makes SQLite copy every page it touches that an
//! earlier statement of the transaction changed into a statement journal first (5.6 % of a bulk
//! enqueue's instructions). With `OR FAIL` a failed statement keeps its earlier rows, and the
//! write fails whole: its savepoint, or its transaction when it is alone, takes them back
//! (`group_commit.rs`; `a_bulk_insert_that_fails_inside_a_statement_leaves_nothing`).

use jiff::Timestamp;
use rusqlite::{
    Connection, OptionalExtension, Transaction, params, params_from_iter, types::Value,
};
use sked_core::{Attempt, Task, TaskId, TaskState, Transition};
use sked_store::*;

use crate::codec::{
    TASK_COLUMNS, TASK_COLUMNS_LEAN, db_err, from_ts, id_list, opt_ts, task_from_row, ts,
};
use sked_store::rules;

use sked_store::states::{EXPIRABLE_ANY, FINISHED_ANY, NOT_STARTED};

use crate::partial_indexes;

pub(crate) mod batches;
pub(crate) mod bulk;
pub(crate) mod claim;
pub(crate) mod dependents;
mod finish_lean;
mod insert;
pub(crate) mod kept_stages;
mod multi_row;
pub(crate) mod workflows;

pub(crate) use claim::claim;
pub(crate) use finish_lean::{changed_since_read, finish_many_lean, read_before, reads_before};
pub(crate) use insert::{insert_claimed, insert_many, insert_many_after};
#[cfg(test)]
pub(crate) use multi_row::READ_LATER_FROM;

thread_local! {
    /// The earliest run time of the tasks an ending made claimable (released children, a
    /// batch's callbacks) in the write running on this thread: the store announces it once
    /// the write has committed ([`take_released`]).
    static RELEASED: std::cell::Cell<Option<Timestamp>> = const { std::cell::Cell::new(None) };
}

/// Notes that the write running on this thread made a task claimable at `at` (announced once
/// the write has committed).
pub(crate) fn note_released(at: Timestamp) {
    RELEASED.with(|r| r.set(Some(r.get().map_or(at, |was| was.min(at)))));
}

/// What the write that ran last on this thread made claimable, cleared.
pub(crate) fn take_released() -> Option<Timestamp> {
    RELEASED.with(|r| r.take())
}

pub(crate) use multi_row::{Leased, read_leased};

/// Rows written by one multi-row statement (an insert's, or a batch of endings'), largest
/// first: few enough that a statement's parameters stay far below SQLite's limit, many enough
/// that what a statement costs beyond its rows (cursors opened and closed, the program started
/// and reset) is paid rarely. A batch is written in statements of these sizes, so four
/// statements of a kind are ever prepared.
pub(crate) const STATEMENT_ROWS: [usize; 4] = [64, 16, 4, 1];

/// `(?1, …, ?k), (?k+1, …), …`: `rows` rows of `per_row` parameters.
pub(crate) fn parameter_rows(rows: usize, per_row: usize) -> String {
    let mut sql = String::new();
    for r in 0..rows {
        sql.push_str(if r == 0 { "(" } else { ", (" });
        for c in 0..per_row {
            let sep = if c == 0 { "" } else { ", " };
            sql.push_str(&format!("{sep}?{}", r * per_row + c + 1));
        }
        sql.push(')');
    }
    sql
}

/// The inserts into `into` (`table (columns)`) of [`STATEMENT_ROWS`] rows of `per_row` values,
/// in that order, for [`insert_rows`]: built once each, in a `LazyLock`.
pub(crate) fn row_inserts(into: &str, per_row: usize) -> [String; 4] {
    STATEMENT_ROWS.map(|rows| {
        format!(
            "INSERT OR FAIL INTO {into} VALUES {}",
            parameter_rows(rows, per_row)
        )
    })
}

/// Inserts `rows`, each of `N` values, with `inserts` (made by [`row_inserts`]): in multi-row
/// statements, so that what a statement costs beyond its rows is paid once for many.
pub(crate) fn insert_rows<const N: usize>(
    conn: &Connection,
    inserts: &[String; 4],
    rows: &[[&dyn rusqlite::ToSql; N]],
) -> Result<()> {
    let mut rest = rows;
    for (sql, size) in inserts.iter().zip(STATEMENT_ROWS) {
        while rest.len() >= size {
            let (now, later) = rest.split_at(size);
            let mut stmt = conn.prepare_cached(sql).map_err(db_err)?;
            for (i, row) in now.iter().enumerate() {
                for (j, v) in row.iter().enumerate() {
                    stmt.raw_bind_parameter(i * N + j + 1, v).map_err(db_err)?;
                }
            }
            stmt.raw_execute().map_err(db_err)?;
            rest = later;
        }
    }
    Ok(())
}

/// A task row by id.
static GET_ROW: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?1"));

fn get_row(conn: &Connection, id: TaskId) -> Result<Task> {
    conn.prepare_cached(&GET_ROW)
        .map_err(db_err)?
        .query_row([id], task_from_row)
        .optional()
        .map_err(db_err)?
        .ok_or_else(|| StoreError::task_not_found(id))
}

/// A task with its attempts, read in one transaction (as reads are: `crate::readers`).
pub(crate) fn get(conn: &Connection, id: TaskId) -> Result<Task> {
    let mut task = get_row(conn, id)?;
    let mut stmt = conn
        .prepare_cached(
            "SELECT attempt, worker, started_at, finished_at, outcome, error FROM task_attempts \
             WHERE task_id = ?1 ORDER BY attempt",
        )
        .map_err(db_err)?;
    task.attempts = stmt
        .query_map([id], |r| {
            Ok(Attempt {
                attempt: r.get(0)?,
                worker: r.get(1)?,
                started_at: from_ts(r.get(2)?),
                finished_at: opt_ts(r.get(3)?),
                outcome: r.get(4)?,
                error: r.get(5)?,
            })
        })
        .map_err(db_err)?
        .collect::<rusqlite::Result<_>>()
        .map_err(db_err)?;
    rules::add_current_attempt(&mut task);
    dependents::family(conn, &mut task)?;
    task.workflow = workflows::of_task(conn, id)?;
    task.batch = batches::of_task(conn, id)?;
    task.progress = conn
        .prepare_cached("SELECT progress FROM task_progress WHERE task_id = ?1 AND attempt = ?2")
        .map_err(db_err)?
        .query_row(params![id, task.attempt], |r| r.get::<_, String>(0))
        .optional()
        .map_err(db_err)?
        .map(|p| crate::codec::json(&p));
    Ok(task)
}

pub(crate) fn list(conn: &Connection, p: &TaskListParams) -> Result<TaskPage> {
    let columns = if p.with_payloads {
        TASK_COLUMNS
    } else {
        TASK_COLUMNS_LEAN
    };
    let mut sql = format!("SELECT {columns} FROM tasks WHERE 1 = 1");
    let mut args: Vec<Value> = Vec::new();
    if !p.states.is_empty() {
        sql.push_str(" AND state IN (");
        for (i, s) in p.states.iter().enumerate() {
            sql.push_str(if i == 0 { "?" } else { ", ?" });
            args.push(Value::Text(s.as_str().into()));
        }
        sql.push(')');
    }
    for (col, v) in [
        ("queue", &p.queue),
        ("kind", &p.kind),
        ("schedule", &p.schedule),
        ("concurrency_key", &p.key),
        ("unique_key", &p.unique_key),
    ] {
        if let Some(v) = v {
            sql.push_str(&format!(" AND {col} = ?"));
            args.push(Value::Text(v.clone()));
        }
    }
    if let Some(w) = p.workflow {
        args.push(Value::Integer(w));
        sql.push_str(&format!(" AND id IN {}", workflows::tasks_of("?")));
    }
    for (cond, t) in [("created_at >= ?", p.since), ("created_at < ?", p.until)] {
        if let Some(t) = t {
            sql.push_str(&format!(" AND {cond}"));
            args.push(Value::Integer(ts(t)));
        }
    }
    if let Some(before) = p.before_id {
        sql.push_str(" AND id < ?");
        args.push(Value::Integer(before));
    }
    // One row more than the page: it says whether more follow.
    let limit = p.limit.clamp(1, sked_store::rules::STORE_LIST_LIMIT_MAX);
    sql.push_str(" ORDER BY id DESC LIMIT ?");
    args.push(Value::Integer(i64::from(limit) + 1));
    let mut stmt = conn.prepare_cached(&sql).map_err(db_err)?;
    let rows = stmt
        .query_map(params_from_iter(args), task_from_row)
        .map_err(db_err)?;
    let mut page = sked_store::page::PageBuilder::new(limit);
    for row in rows {
        if !page.push(row.map_err(db_err)?) {
            break;
        }
    }
    let mut page = page.finish();
    let waiting: Vec<TaskId> = (page.items.iter())
        .filter(|t| t.state == TaskState::Waiting)
        .map(|t| t.id)
        .collect();
    let mut parents = dependents::waiting_for(conn, &waiting)?;
    for t in &mut page.items {
        t.waiting_for = parents.remove(&t.id).unwrap_or_default();
    }
    Ok(page)
}

pub(crate) fn heartbeat(tx: &Transaction<'_>, p: &TaskHeartbeatParams) -> Result<HeartbeatReply> {
    let current = match get_row(tx, p.id) {
        Ok(task) => Some(task),
        Err(StoreError::NotFound { .. }) => None,
        Err(e) => return Err(e),
    };
    let expires = rules::heartbeat(
        current.as_ref(),
        p.id,
        p.attempt,
        p.now,
        p.lease_ttl,
        p.timeout_grace,
    )?;
    // The row was read in this transaction, which holds the write lock: it is still held so.
    let cancel_requested: bool = tx
        .prepare_cached(
            "UPDATE tasks SET lease_expires_at = ?3 WHERE id = ?1 AND state = 'running' AND attempt = ?2 \
             RETURNING cancel_requested",
        )
        .map_err(db_err)?
        .query_row(params![p.id, p.attempt, ts(expires)], |r| r.get(0))
        .map_err(db_err)?;
    if let Some(progress) = &p.progress {
        tx.prepare_cached(
            "INSERT INTO task_progress (task_id, attempt, progress) VALUES (?1, ?2, ?3) \
             ON CONFLICT (task_id) DO UPDATE SET attempt = excluded.attempt, progress = excluded.progress",
        )
        .map_err(db_err)?
        .execute(params![p.id, p.attempt, progress.to_string()])
        .map_err(db_err)?;
    }
    Ok(HeartbeatReply {
        lease_expires_at: expires,
        cancel_requested,
    })
}

fn record_attempt(
    tx: &Transaction<'_>,
    task: &Task,
    outcome: &str,
    error: Option<&str>,
    now: Timestamp,
) -> Result<()> {
    tx.prepare_cached(
        "INSERT OR REPLACE INTO task_attempts (task_id, attempt, worker, started_at, finished_at, outcome, error) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )
    .map_err(db_err)?
    .execute(params![
        task.id,
        task.attempt,
        task.worker.as_deref().unwrap_or(""),
        task.started_at.map(ts).unwrap_or(ts(now)),
        ts(now),
        outcome,
        error,
    ])
    .map_err(db_err)?;
    Ok(())
}

/// Whether some task is named by two of `ps`.
fn names_an_id_twice(ps: &[TaskFinishParams]) -> bool {
    let mut ids: Vec<TaskId> = ps.iter().map(|p| p.id).collect();
    ids.sort_unstable();
    ids.windows(2).any(|w| w[0] == w[1])
}

/// Ends attempts: the rows read together, each ending checked and computed in order (an id
/// given twice finds the task as its first ending left it), and the endings written together
/// ([`multi_row::end`]).
pub(crate) fn finish_many(
    tx: &Transaction<'_>,
    ps: &[TaskFinishParams],
) -> Result<Vec<Result<Task>>> {
    let mut rows = multi_row::read(tx, ps.iter().map(|p| p.id))?;
    let mut out: Vec<Result<Task>> = Vec::with_capacity(ps.len());
    let mut endings: Vec<multi_row::Ending> = Vec::with_capacity(ps.len());
    // An id given twice finds its first ending: each ending's task goes back to `rows`.
    let repeats = names_an_id_twice(ps);
    let backoffs = queue_backoffs(
        tx,
        &rules::queues_for_backoff(
            (ps.iter()).filter_map(|p| rows.get(p.id).map(|t| (t, &p.outcome))),
        ),
    )?;
    for p in ps {
        let current = rows.take(p.id);
        if let Err(e) = rules::held(current.as_ref(), p.id, p.attempt) {
            if let Some(task) = current {
                rows.put(task);
            }
            out.push(Err(e));
            continue;
        }
        let Some(task) = current else {
            out.push(Err(StoreError::task_not_found(p.id)));
            continue;
        };
        let change = rules::finish(
            &task,
            &p.outcome,
            p.now,
            p.jitter,
            backoffs.get(&task.queue),
        );
        if !change.state.is_finished() {
            record_attempt(tx, &task, change.outcome, change.error.as_deref(), p.now)?;
        }
        endings.push((
            p.id,
            p.attempt,
            change.state.as_str(),
            ts(change.run_at),
            change.max_attempts,
            change.state.is_finished().then_some(ts(p.now)),
            change.error.clone(),
            change.result.as_ref().map(|r| r.to_string()),
        ));
        let after = change.applied(task, p.now);
        if repeats {
            rows.put(after.clone());
        }
        out.push(Ok(after));
    }
    if !multi_row::end(tx, &endings, repeats)? {
        return Err(multi_row::short_write());
    }
    if let Some(now) = ps.iter().map(|p| p.now).max() {
        let ended = out.iter().flatten().map(|t| (t.id, t.state));
        dependents::release(tx, ended, now)?;
    }
    Ok(out)
}

pub(crate) fn cancel(tx: &Transaction<'_>, id: TaskId, now: Timestamp) -> Result<Task> {
    let task = cancel_only(tx, id, now)?;
    dependents::release(tx, [(task.id, task.state)], now)?;
    Ok(task)
}

/// [`cancel`], leaving the tasks waiting for it to the caller.
pub(crate) fn cancel_only(tx: &Transaction<'_>, id: TaskId, now: Timestamp) -> Result<Task> {
    let task = get_row(tx, id)?;
    let sql = if task.state == TaskState::Running {
        format!(
            "UPDATE tasks SET cancel_requested = 1 WHERE id = ?1 AND state = 'running' RETURNING {TASK_COLUMNS}"
        )
    } else {
        Transition::Cancel.check(task.state)?;
        format!(
            "UPDATE tasks SET state = 'cancelled', finished_at = ?2 WHERE id = ?1 \
             AND state IN {NOT_STARTED} RETURNING {TASK_COLUMNS}"
        )
    };
    let mut stmt = tx.prepare_cached(&sql).map_err(db_err)?;
    let row = if task.state == TaskState::Running {
        stmt.query_row(params![id], task_from_row)
    } else {
        stmt.query_row(params![id, ts(now)], task_from_row)
    };
    row.map_err(db_err)
}

pub(crate) fn retry(tx: &Transaction<'_>, p: &TaskRetryParams) -> Result<Task> {
    let task = get_row(tx, p.id)?;
    Transition::Retry.check(task.state)?;
    // The row is about to describe a new attempt: keep the one that ended the task.
    if let Some(last) = rules::current_attempt(&task) {
        let finished = last.finished_at.unwrap_or(p.now);
        record_attempt(tx, &task, &last.outcome, last.error.as_deref(), finished)?;
    }
    let again = tx
        .prepare_cached(&format!(
            "UPDATE tasks SET state = 'available', run_at = ?2, finished_at = NULL, cancel_requested = 0, \
             lease_expires_at = NULL, expires_at = NULL, \
             max_attempts = max(max_attempts, attempt + 1) \
             WHERE id = ?1 AND {FINISHED_ANY} RETURNING {TASK_COLUMNS}"
        ))
        .map_err(db_err)?
        .query_row(params![p.id, ts(p.now)], task_from_row)
        .map_err(db_err)?;
    // Unfinished again: its batch waits for it, unless the batch is done; its children have
    // counted its end already.
    batches::reopened(tx, &[again.id])?;
    dependents::counted(tx, again.id)?;
    Ok(again)
}

pub(crate) fn reschedule(tx: &Transaction<'_>, p: &TaskRescheduleParams) -> Result<Task> {
    let task = get_row(tx, p.id)?;
    rules::check_reschedule(&task, p.run_at)?;
    let state = rules::state_after_reschedule(task.state, p.run_at, p.now);
    tx.prepare_cached(&format!(
        "UPDATE tasks SET state = ?2, run_at = ?3 WHERE id = ?1 \
         AND state IN {NOT_STARTED} RETURNING {TASK_COLUMNS}"
    ))
    .map_err(db_err)?
    .query_row(params![p.id, state.as_str(), ts(p.run_at)], task_from_row)
    .map_err(db_err)
}

pub(crate) fn rescue(tx: &Transaction<'_>, p: &TaskRescueParams) -> Result<Vec<TaskId>> {
    let expired: Vec<Task> = {
        let mut stmt = tx
            .prepare_cached(&format!(
                "SELECT {TASK_COLUMNS} FROM tasks WHERE state = 'running' AND lease_expires_at < ?1 \
                 ORDER BY lease_expires_at LIMIT ?2"
            ))
            .map_err(db_err)?;
        let rows = stmt
            .query_map(params![ts(p.now), p.limit], task_from_row)
            .map_err(db_err)?;
        rows.collect::<rusqlite::Result<_>>().map_err(db_err)?
    };
    let mut rescued = Vec::with_capacity(expired.len());
    for task in expired {
        Transition::Rescue.check(task.state)?;
        let (state, error) = rules::rescue(&task);
        let finished_at = state.is_finished().then_some(ts(p.now));
        let n = tx
            .prepare_cached(
                "UPDATE tasks SET state = ?3, run_at = ?4, finished_at = ?5, last_error = ?6, \
                 lease_expires_at = NULL WHERE id = ?1 AND state = 'running' AND attempt = ?2",
            )
            .map_err(db_err)?
            .execute(params![
                task.id,
                task.attempt,
                state.as_str(),
                ts(p.now),
                finished_at,
                error
            ])
            .map_err(db_err)?;
        if n == 1 {
            record_attempt(tx, &task, "rescued", Some(&error), p.now)?;
            rescued.push(task.id);
            dependents::release(tx, [(task.id, state)], p.now)?;
        }
    }
    Ok(rescued)
}

/// Ends `expired` the tasks past their deadline that have not started (see
/// [`Store::task_expire`]).
pub(crate) fn expire(tx: &Transaction<'_>, p: &TaskExpireParams) -> Result<Vec<TaskId>> {
    let due: Vec<TaskId> = {
        let mut stmt = tx
            .prepare_cached(&partial_indexes::EXPIRING)
            .map_err(db_err)?;
        let rows = stmt
            .query_map(params![ts(p.now), p.limit], |r| r.get(0))
            .map_err(db_err)?;
        rows.collect::<rusqlite::Result<_>>().map_err(db_err)?
    };
    if due.is_empty() {
        return Ok(due);
    }
    let expired: Vec<TaskId> = {
        let mut stmt = tx
            .prepare_cached(&format!(
                "UPDATE tasks SET state = 'expired', finished_at = ?2, last_error = ?3 \
                 WHERE id IN rarray(?1) AND attempt = 0 AND {EXPIRABLE_ANY} RETURNING id"
            ))
            .map_err(db_err)?;
        let rows = stmt
            .query_map(
                params![id_list(&due), ts(p.now), sked_store::expiry::REASON],
                |r| r.get(0),
            )
            .map_err(db_err)?;
        rows.collect::<rusqlite::Result<_>>().map_err(db_err)?
    };
    dependents::release(
        tx,
        expired.iter().map(|&id| (id, TaskState::Expired)),
        p.now,
    )?;
    Ok(expired)
}

/// Ends `expired` every task past its deadline at `now` that has not started, a batch at a
/// time: before a claim, so that no claim takes one.
pub(crate) fn expire_all(tx: &Transaction<'_>, now: Timestamp) -> Result<()> {
    const BATCH: u32 = 1000;
    while expire(tx, &TaskExpireParams { now, limit: BATCH })?.len() == BATCH as usize {}
    Ok(())
}

/// The attempts of the tasks of `?1` (an [`id_list`]), which retention removes.
pub(super) const PRUNE_ATTEMPTS: &str = "DELETE FROM task_attempts WHERE task_id IN rarray(?1)";
/// The tasks of `?1` (an [`id_list`]), which retention removes.
pub(super) const PRUNE_TASKS: &str = "DELETE FROM tasks WHERE id IN rarray(?1)";

/// Deletes the tasks `ids` (ended, or runs made ahead withdrawn) with everything kept of them: attempts, edges, progress,
/// their place in a workflow (and a workflow left with none). A statement a table for the
/// whole batch: SQLite's one writer waits for retention, and a statement a task cost twice
/// the time (a pass of 10,000 held the writer for 60–90 ms).
/// Deletes task `id` if it has ended ([`rules::check_delete`]).
pub(crate) fn delete_one(tx: &Transaction<'_>, id: TaskId) -> Result<()> {
    let found: Option<String> = tx
        .prepare_cached("SELECT state FROM tasks WHERE id = ?1")
        .map_err(db_err)?
        .query_row([id], |r| r.get(0))
        .optional()
        .map_err(db_err)?;
    let Some(s) = found else {
        return Err(StoreError::task_not_found(id));
    };
    rules::check_delete(id, crate::codec::state(&s).map_err(db_err)?)?;
    delete(tx, &[id])
}

pub(crate) fn delete(tx: &Transaction<'_>, ids: &[TaskId]) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let list = id_list(ids);
    let waits = dependents::waits_of(tx, &list)?;
    for sql in [
        PRUNE_ATTEMPTS,
        PRUNE_TASKS,
        "DELETE FROM task_progress WHERE task_id IN rarray(?1)",
    ] {
        tx.prepare_cached(sql)
            .map_err(db_err)?
            .execute([&list])
            .map_err(db_err)?;
    }
    dependents::prune(tx, &list, &waits)?;
    workflows::forget(tx, &list)?;
    batches::forget(tx, &list)
}

pub(crate) fn prune(tx: &Transaction<'_>, p: &TaskPruneParams) -> Result<u64> {
    let cutoff = ts(p.finished_before);
    let mut args = vec![cutoff, i64::from(p.limit), ts(p.now)];
    let sql: &str = match p.finished_since {
        None => &partial_indexes::PRUNABLE,
        Some(since) => {
            args.push(ts(since));
            &partial_indexes::PRUNABLE_SINCE
        }
    };
    let ids: Vec<TaskId> = {
        let mut stmt = tx.prepare_cached(sql).map_err(db_err)?;
        let rows = stmt
            .query_map(rusqlite::params_from_iter(&args), |r| r.get(0))
            .map_err(db_err)?;
        rows.collect::<rusqlite::Result<_>>().map_err(db_err)?
    };
    delete(tx, &ids)?;
    // The occurrence ledger follows the same retention.
    tx.prepare_cached(
        "DELETE FROM occurrences WHERE (schedule, nominal_at) IN \
         (SELECT schedule, nominal_at FROM occurrences WHERE recorded_at < ?1 LIMIT ?2)",
    )
    .map_err(db_err)?
    .execute(params![cutoff, p.limit])
    .map_err(db_err)?;
    Ok(ids.len() as u64)
}

pub(crate) fn next_run_at(conn: &Connection) -> Result<Option<Timestamp>> {
    let us: Option<i64> = conn
        .prepare_cached(&partial_indexes::NEXT_RUN_AT)
        .map_err(db_err)?
        .query_row([], |r| r.get(0))
        .map_err(db_err)?;
    Ok(us.map(from_ts))
}

/// The default backoffs of these queues, those that have one.
fn queue_backoffs(
    conn: &Connection,
    queues: &[String],
) -> Result<std::collections::HashMap<String, sked_core::Backoff>> {
    let mut found = std::collections::HashMap::new();
    for q in queues {
        let spec: Option<String> = conn
            .prepare_cached("SELECT backoff FROM queues WHERE name = ?1")
            .map_err(db_err)?
            .query_row([q], |r| r.get(0))
            .optional()
            .map_err(db_err)?
            .flatten();
        if let Some(b) = sked_store::rules::queue_backoff_of_column(spec.as_deref())? {
            found.insert(q.clone(), b);
        }
    }
    Ok(found)
}
