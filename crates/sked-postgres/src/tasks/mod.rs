//! Task operations. Every state change is a compare-and-set on the expected state (and, for a
//! running task, the attempt number); rows read to compute a change are locked `FOR UPDATE`.
//!
//! - [`insert`]: new tasks.
//! - [`claim`]: staging due tasks, claiming, heartbeats.
//! - [`endings`]: finishing attempts and rescuing expired ones.
//! - here: reading tasks and the operator's actions (cancel, retry, reschedule), pruning.

pub(crate) mod batches;
pub(crate) mod bulk;
pub(crate) mod claim;
pub(crate) mod dependents;
pub(crate) mod endings;
pub(crate) mod faster_statement;
mod insert;
mod insert_without_keys;
pub(crate) mod kept_stages;
pub(crate) mod workflows;

pub(crate) use claim::{Claims, claim, heartbeat};
pub(crate) use endings::{
    Successes, announce_room, announce_schedules, announce_tasks, expire, finish_many, rescue,
};
pub(crate) use insert::{insert_claimed, insert_many, insert_tasks};

use deadpool_postgres::{Object, Transaction};
use jiff::Timestamp;
use sked_core::{Task, TaskId, TaskState, Transition};
use sked_store::states::{FINISHED, TIMED};
use sked_store::*;
use tokio_postgres::types::ToSql;

use crate::codec::{TASK_COLUMNS, TASK_COLUMNS_LEAN, col, db_err, task_from_row};
use claim::positions::Key;
use endings::AttemptRows;

type Param<'a> = &'a (dyn ToSql + Sync);

/// `cond`, a condition on the state of tasks found by key, written so that PostgreSQL cannot
/// read them through the partial index whose predicate `cond` is (`IS TRUE`, which its proof
/// does not see through; the state is never NULL). Statistics taken while next to no task was
/// in that state make such an index look empty, so a read of all of it looks cheaper than
/// lookups by key; and a held snapshot keeps an entry in it for every task that passed
/// through the state since (a heartbeat read the running tasks' index whole, 210 ms a time,
/// after half an hour at 1,000 tasks a second).
pub(crate) fn by_key(cond: &str) -> String {
    format!("({cond}) IS TRUE")
}

async fn row_for_update(tx: &Transaction<'_>, id: TaskId) -> Result<Task> {
    let stmt = tx
        .prepare_cached(&format!(
            "SELECT {TASK_COLUMNS} FROM sked_tasks t WHERE t.id = $1 FOR UPDATE"
        ))
        .await
        .map_err(db_err)?;
    let row = tx.query_opt(&stmt, &[&id]).await.map_err(db_err)?;
    row.as_ref()
        .map(task_from_row)
        .transpose()?
        .ok_or_else(|| StoreError::task_not_found(id))
}

pub(crate) async fn get(c: &mut Object, id: TaskId) -> Result<Task> {
    let stmt = c
        .prepare_cached(&format!(
            "SELECT {TASK_COLUMNS} FROM sked_tasks t WHERE t.id = $1"
        ))
        .await
        .map_err(db_err)?;
    let attempts = c
        .prepare_cached(
            "SELECT attempt, worker, started_at, finished_at, outcome, error \
             FROM sked_task_attempts WHERE task_id = $1 ORDER BY attempt",
        )
        .await
        .map_err(db_err)?;
    // Both in one round trip.
    let params: [Param<'_>; 1] = [&id];
    let (row, attempt_rows) =
        tokio::try_join!(c.query_opt(&stmt, &params), c.query(&attempts, &params))
            .map_err(db_err)?;
    let mut task = row
        .as_ref()
        .map(task_from_row)
        .transpose()?
        .ok_or_else(|| StoreError::task_not_found(id))?;
    task.attempts = attempt_rows
        .iter()
        .map(|r| {
            Ok(sked_core::Attempt {
                attempt: col(r, 0)?,
                worker: col(r, 1)?,
                started_at: col(r, 2)?,
                finished_at: col(r, 3)?,
                outcome: col(r, 4)?,
                error: col(r, 5)?,
            })
        })
        .collect::<Result<_>>()?;
    rules::add_current_attempt(&mut task);
    dependents::family(&***c, &mut task).await?;
    task.workflow = workflows::of_task(&***c, id).await?;
    task.batch = batches::of_task(&***c, id).await?;
    let progress = c
        .query_opt(
            "SELECT progress FROM sked_task_progress WHERE task_id = $1 AND attempt = $2",
            &[&id, &task.attempt],
        )
        .await
        .map_err(db_err)?;
    task.progress = progress.map(|r| col(&r, 0)).transpose()?;
    Ok(task)
}

/// The states of `ids`, in their order (`None`: no such task).
pub(crate) async fn states(
    c: &mut Object,
    ids: &[TaskId],
) -> Result<Vec<(TaskId, Option<sked_core::TaskState>)>> {
    let stmt = c
        .prepare_cached("SELECT id, state FROM sked_tasks WHERE id = ANY($1)")
        .await
        .map_err(db_err)?;
    let mut found = std::collections::HashMap::new();
    for r in c.query(&stmt, &[&ids]).await.map_err(db_err)? {
        found.insert(
            col::<TaskId>(&r, 0)?,
            crate::codec::state(&col::<String>(&r, 1)?)?,
        );
    }
    Ok(ids.iter().map(|id| (*id, found.get(id).copied())).collect())
}

pub(crate) async fn list(c: &mut Object, p: &TaskListParams) -> Result<TaskPage> {
    use futures_util::TryStreamExt;
    let states: Vec<&str> = p.states.iter().map(|s| s.as_str()).collect();
    let limit = p.limit.clamp(1, sked_store::rules::STORE_LIST_LIMIT_MAX);
    // One row more than the page: it says whether more follow.
    let fetch = i64::from(limit) + 1;
    let columns = if p.with_payloads {
        TASK_COLUMNS
    } else {
        TASK_COLUMNS_LEAN
    };
    let mut sql = format!("SELECT {columns} FROM sked_tasks t WHERE true");
    let mut params: Vec<Param<'_>> = Vec::new();
    if !states.is_empty() {
        params.push(&states);
        sql.push_str(&format!(" AND t.state = ANY(${})", params.len()));
    }
    for (column, value) in [
        ("queue", &p.queue),
        ("kind", &p.kind),
        ("schedule", &p.schedule),
        ("concurrency_key", &p.key),
        ("unique_key", &p.unique_key),
    ] {
        if let Some(v) = value {
            params.push(v);
            sql.push_str(&format!(" AND t.{column} = ${}", params.len()));
        }
    }
    for (cond, t) in [("t.created_at >=", &p.since), ("t.created_at <", &p.until)] {
        if let Some(t) = t {
            params.push(t);
            sql.push_str(&format!(" AND {cond} ${}", params.len()));
        }
    }
    if let Some(w) = &p.workflow {
        params.push(w);
        let param = format!("${}", params.len());
        sql.push_str(&format!(" AND t.id IN {}", workflows::tasks_of(&param)));
    }
    if let Some(before) = &p.before_id {
        params.push(before);
        sql.push_str(&format!(" AND t.id < ${}", params.len()));
    }
    params.push(&fetch);
    sql.push_str(&format!(" ORDER BY t.id DESC LIMIT ${}", params.len()));
    let stmt = c.prepare_cached(&sql).await.map_err(db_err)?;
    // Row by row, so that a full page stops the reading.
    let rows = c
        .query_raw(&stmt, params.iter().copied())
        .await
        .map_err(db_err)?;
    futures_util::pin_mut!(rows);
    let mut page = sked_store::page::PageBuilder::new(limit);
    while let Some(row) = rows.try_next().await.map_err(db_err)? {
        if !page.push(task_from_row(&row)?) {
            break;
        }
    }
    let mut page = page.finish();
    dependents::fill_waiting_for(&***c, &mut page.items).await?;
    Ok(page)
}

/// Cancels a task; with what waited for it and runs anyway.
pub(crate) async fn cancel(
    c: &mut Object,
    channel: &str,
    p: &TaskCancelParams,
) -> Result<(Task, dependents::Released)> {
    let tx = c.transaction().await.map_err(db_err)?;
    let (task, released) = cancel_in(&tx, channel, p.id, p.now).await?;
    if task.schedule.is_some() {
        announce_schedules(&*tx, channel).await?;
    }
    tx.commit().await.map_err(db_err)?;
    Ok((task, released))
}

/// Cancels inside a caller's transaction (also materialisation's `replace`): a task that has
/// not started is cancelled, a running one is asked to stop. Returns the task as it is now,
/// with what its cancel released.
pub(crate) async fn cancel_in(
    tx: &Transaction<'_>,
    channel: &str,
    id: TaskId,
    now: Timestamp,
) -> Result<(Task, dependents::Released)> {
    let task = row_for_update(tx, id).await?;
    let row = if task.state == TaskState::Running {
        tx.query_one(
            &format!(
                "UPDATE sked_tasks t SET cancel_requested = true WHERE t.id = $1 RETURNING {TASK_COLUMNS}"
            ),
            &[&id],
        )
        .await
    } else {
        Transition::Cancel.check(task.state)?;
        tx.query_one(
            &format!(
                "UPDATE sked_tasks t SET state = 'cancelled', finished_at = $2 WHERE t.id = $1 \
                 RETURNING {TASK_COLUMNS}"
            ),
            &[&id, &now],
        )
        .await
    }
    .map_err(db_err)?;
    let task = task_from_row(&row)?;
    let released = dependents::release(tx, channel, [(task.id, task.state)], now).await?;
    Ok((task, released))
}

pub(crate) async fn retry(c: &mut Object, channel: &str, p: &TaskRetryParams) -> Result<Task> {
    let tx = c.transaction().await.map_err(db_err)?;
    let task = row_for_update(&tx, p.id).await?;
    Transition::Retry.check(task.state)?;
    // The row is about to describe a new attempt: keep the one that ended the task.
    if let Some(last) = rules::current_attempt(&task) {
        let mut rows = AttemptRows::default();
        rows.push(
            &task,
            &last.outcome,
            last.error.as_deref(),
            last.finished_at.unwrap_or(p.now),
        );
        rows.insert(&tx).await?;
    }
    let row = tx
        .query_one(
            &format!(
                "UPDATE sked_tasks t SET state = 'available', run_at = $2, finished_at = NULL, \
                   cancel_requested = false, lease_expires_at = NULL, expires_at = NULL, \
                   max_attempts = greatest(t.max_attempts, t.attempt + 1) \
                 WHERE t.id = $1 RETURNING {TASK_COLUMNS}"
            ),
            &[&p.id, &p.now],
        )
        .await
        .map_err(db_err)?;
    announce_tasks(&*tx, channel, Some(Key::before(task.priority, p.now)), None).await?;
    // Unfinished again: its batch waits for it, unless the batch is done; its children have
    // counted its end already.
    batches::reopened(&tx, &[p.id]).await?;
    dependents::counted(&*tx, p.id).await?;
    tx.commit().await.map_err(db_err)?;
    task_from_row(&row)
}

pub(crate) async fn reschedule(
    c: &mut Object,
    channel: &str,
    p: &TaskRescheduleParams,
) -> Result<Task> {
    let tx = c.transaction().await.map_err(db_err)?;
    let task = row_for_update(&tx, p.id).await?;
    rules::check_reschedule(&task, p.run_at)?;
    let state = rules::state_after_reschedule(task.state, p.run_at, p.now);
    let row = tx
        .query_one(
            &format!(
                "UPDATE sked_tasks t SET state = $2, run_at = $3 WHERE t.id = $1 RETURNING {TASK_COLUMNS}"
            ),
            &[&p.id, &state.as_str(), &p.run_at],
        )
        .await
        .map_err(db_err)?;
    let waiting = state.is_timed().then_some(p.run_at);
    announce_tasks(
        &*tx,
        channel,
        Some(Key::before(task.priority, p.run_at)),
        waiting,
    )
    .await?;
    tx.commit().await.map_err(db_err)?;
    task_from_row(&row)
}

/// `WITH RECURSIVE` items naming `g`, the queues of the finished tasks (one probe of
/// `sked_tasks_finished_queue` per queue), and `f`, the finished tasks of those queues that
/// `cond` keeps, with `columns` of theirs: each queue's tasks of each finished state are read
/// on that index oldest first (`t` names the task; `cond` may end with a `LIMIT` or `OFFSET`).
pub(crate) fn finished_by_queue(columns: &str, cond: &str) -> String {
    finished_in(
        &counts::queue_walk("g", "sked_tasks", &format!("state IN {FINISHED}")),
        columns,
        cond,
    )
}

/// `c.before`, for a `cond` of [`finished_in`]: when retention removes a queue's tasks of a
/// state, `$3` (now) less the queue's retention for the state, or `$1` where it has none.
const CUTOFF: &str = "c.before";

/// [`finished_by_queue`] of the tasks that finished at or after `since` (a placeholder), in
/// the walk from queue to queue as in each queue's read (`rest` follows that condition: more
/// of them with `AND`, or an `ORDER BY`, `LIMIT` or `OFFSET`). Each read starts at the bound,
/// and each probe of the walk compares the older entries' finish times inside the index
/// without visiting their rows: behind a held snapshot those are mostly tasks deleted
/// already, which the index keeps until vacuum may remove them.
pub(crate) fn finished_since_by_queue(columns: &str, since: &str, rest: &str) -> String {
    finished_in(
        &counts::queue_walk(
            "g",
            "sked_tasks",
            &format!("state IN {FINISHED} AND finished_at >= {since}"),
        ),
        columns,
        &format!("t.finished_at >= {since} {rest}"),
    )
}

/// [`finished_by_queue`] over the queues `g` names (`g(name) AS (…)`, a `WITH` item).
fn finished_in(g: &str, columns: &str, cond: &str) -> String {
    let states: Vec<String> = TaskState::ALL
        .iter()
        .filter(|s| s.is_finished())
        .map(|s| format!("('{}')", s.as_str()))
        .collect();
    // A cutoff per queue and state, when the condition names one: a column of the outer
    // rows, which the read of the index can take as its bound.
    let cutoff = match cond.contains(CUTOFF) {
        true => format!(
            "CROSS JOIN LATERAL (SELECT coalesce((SELECT $3::timestamptz - {} * \
               interval '1 millisecond' FROM sked_queues q WHERE q.name = g.name), \
               $1::timestamptz) AS before) c ",
            sked_store::retention::ms_sql("q", "s.state")
        ),
        false => String::new(),
    };
    // `state IN` lets PostgreSQL prove the index's predicate, which `= s.state` alone does not.
    format!(
        "{g}, f AS (SELECT x.* FROM g CROSS JOIN (VALUES {}) AS s(state) {cutoff}\
           CROSS JOIN LATERAL ( \
           SELECT {columns} FROM sked_tasks t \
           WHERE t.queue = g.name AND t.state IN {FINISHED} AND t.state = s.state AND {cond}) x \
         WHERE g.name IS NOT NULL)",
        states.join(", ")
    )
}

/// The statement that deletes the tasks the `f` of `finished` names (by `ctid`), at most `$2`,
/// with their attempts, and answers how many tasks it deleted.
///
/// The rows are deleted where the read found them (a TID scan), not looked up again by key:
/// with a snapshot held, a batch of 10,000 lookups took 55 of a pass's 110 ms (every version of
/// a task keeps its key's entry then), and the same pass by TID 64 ms. The delete asks the
/// state again, so a task retried since the read (whose new version PostgreSQL finds) is left,
/// and its attempts with it.
fn prune_sql(finished: &str) -> String {
    format!(
        "WITH RECURSIVE {finished}, \
           doomed AS (SELECT ctid FROM f LIMIT $2), \
           tasks AS (DELETE FROM sked_tasks WHERE ctid = ANY (ARRAY(SELECT ctid FROM doomed)) \
             AND state IN {FINISHED} RETURNING id, wait, workflow), \
           attempts AS (DELETE FROM sked_task_attempts WHERE task_id IN (SELECT id FROM tasks)), \
           progress AS (DELETE FROM sked_task_progress WHERE task_id IN (SELECT id FROM tasks)), \
           {}, {}, {} \
         SELECT count(*) FROM tasks",
        dependents::forget_sql("SELECT id FROM tasks", "SELECT wait FROM tasks"),
        workflows::forget_sql("(SELECT id FROM tasks)", "(SELECT workflow FROM tasks)"),
        batches::forget_sql("(SELECT id FROM tasks)")
    )
}

/// What retention removes of a queue's finished tasks of one state: finished before its
/// cutoff ([`CUTOFF`]: `$1`, or `$3` less the queue's retention for the state) and out of
/// their dedup window by then, oldest first, at most `$2`.
const PRUNABLE: &str = "t.finished_at < c.before \
    AND (t.unique_until IS NULL OR t.unique_until < c.before) ORDER BY t.finished_at LIMIT $2";

/// Finished tasks that retention removes, with their attempts: found queue by queue and state
/// by state, oldest first in each. In batches: each delete is short, and vacuum reclaims the
/// space.
pub(crate) static PRUNE: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| prune_sql(&finished_by_queue("t.ctid", PRUNABLE)));

/// [`PRUNE`] over the tasks that finished at or after `$4` ([`finished_since_by_queue`]).
pub(crate) static PRUNE_SINCE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    prune_sql(&finished_since_by_queue(
        "t.ctid",
        "$4",
        &format!("AND {PRUNABLE}"),
    ))
});

pub(crate) async fn prune(c: &mut Object, p: &TaskPruneParams) -> Result<u64> {
    let limit = i64::from(p.limit);
    let tx = c.transaction().await.map_err(db_err)?;
    let params: [Param<'_>; 2] = [&p.finished_before, &limit];
    let mut task_params = params.to_vec();
    task_params.push(&p.now);
    let sql: &str = match &p.finished_since {
        None => &PRUNE,
        Some(since) => {
            task_params.push(since);
            &PRUNE_SINCE
        }
    };
    // The leader runs this every minute, mostly to find nothing: its statements are prepared
    // once per connection.
    let tasks = tx.prepare_cached(sql).await.map_err(db_err)?;
    // The occurrence ledger follows the same retention.
    let ledger = tx
        .prepare_cached(
            "DELETE FROM sked_occurrences WHERE (schedule, nominal_at) IN ( \
               SELECT schedule, nominal_at FROM sked_occurrences WHERE recorded_at < $1 LIMIT $2)",
        )
        .await
        .map_err(db_err)?;
    let (deleted, _) = tokio::try_join!(
        tx.query_one(&tasks, &task_params),
        tx.execute(&ledger, &params)
    )
    .map_err(db_err)?;
    tx.commit().await.map_err(db_err)?;
    Ok(col::<i64>(&deleted, 0)? as u64)
}

/// When the earliest waiting task is due.
static NEXT_RUN_AT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!("SELECT min(run_at) FROM sked_tasks WHERE state IN {TIMED}")
});

pub(crate) async fn next_run_at(c: &mut Object) -> Result<Option<Timestamp>> {
    let stmt = c.prepare_cached(&NEXT_RUN_AT).await.map_err(db_err)?;
    let row = c.query_one(&stmt, &[]).await.map_err(db_err)?;
    col(&row, 0)
}
