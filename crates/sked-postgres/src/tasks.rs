//! Task operations. Every state change is a compare-and-set on the expected state (and, for a
//! running task, the attempt number); rows read to compute a change are locked `FOR UPDATE`.

use std::collections::HashMap;

use deadpool_postgres::{Object, Transaction};
use jiff::Timestamp;
use sked_core::{Task, TaskId, TaskState, Transition};
use sked_store::*;
use tokio_postgres::GenericClient;
use tokio_postgres::types::ToSql;

use crate::codec::{TASK_COLUMNS, col, db_err, ms, state, task_from_row, tasks_from_rows};
use crate::listen::notify_tasks_sql;

use sked_store::states::{ACTIVE, FINISHED};

type Param<'a> = &'a (dyn ToSql + Sync);

/// Inserts tasks. Tasks without a unique key go in with one `unnest` statement; each task with
/// a key goes in on its own, `ON CONFLICT DO NOTHING` against the partial unique index, and
/// returns the holder when the key is taken. Several statements need a transaction around
/// them: `c` is one whenever `tasks` has a unique key (see [`needs_transaction`]).
pub(crate) async fn insert_tasks<C: GenericClient + Sync>(
    c: &C,
    prepared: Option<&tokio_postgres::Statement>,
    channel: &str,
    tasks: &[TaskInsert],
    now: Timestamp,
) -> Result<Vec<TaskInserted>> {
    for t in tasks {
        t.task
            .validate()
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
    }
    let mut out: Vec<Option<TaskInserted>> = vec![None; tasks.len()];
    let plain: Vec<usize> = (0..tasks.len())
        .filter(|&i| tasks[i].task.unique_key.is_none())
        .collect();
    if !plain.is_empty() {
        let rows = Columns::of(plain.iter().map(|&i| &tasks[i]), now);
        let params: [Param<'_>; 14] = [
            &channel,
            &now,
            &rows.queue,
            &rows.kind,
            &rows.payload,
            &rows.priority,
            &rows.state,
            &rows.run_at,
            &rows.max_attempts,
            &rows.timeout_ms,
            &rows.backoff_base_ms,
            &rows.backoff_max_ms,
            &rows.schedule,
            &rows.nominal_at,
        ];
        let ids = match prepared {
            Some(stmt) => c.query(stmt, &params).await,
            None => c.query(PLAIN_INSERT.as_str(), &params).await,
        }
        .map_err(db_err)?;
        // Identity values are handed out in insertion order, which is the input order.
        for (k, row) in ids.iter().enumerate() {
            let i = plain[k];
            out[i] = Some(TaskInserted {
                id: col(row, 0)?,
                state: TaskState::parse(&rows.state[k])
                    .map_err(|e| StoreError::Backend(e.to_string()))?,
                duplicate: false,
            });
        }
    }
    for (i, t) in tasks.iter().enumerate() {
        if t.task.unique_key.is_some() {
            out[i] = Some(insert_unique(c, channel, t, now).await?);
        }
    }
    out.into_iter()
        .map(|o| o.ok_or_else(|| StoreError::Backend("a task was not inserted".into())))
        .collect()
}

/// Inserts tasks without unique keys, as many as given, and announces them: one statement.
static PLAIN_INSERT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "WITH ins AS ( \
               INSERT INTO sked_tasks (queue, kind, payload, priority, state, run_at, max_attempts, \
                 timeout_ms, backoff_base_ms, backoff_max_ms, schedule, nominal_at, created_at) \
               SELECT queue, kind, payload, priority, state, run_at, max_attempts, timeout_ms, \
                 backoff_base_ms, backoff_max_ms, schedule, nominal_at, $2 \
               FROM unnest($3::text[], $4::text[], $5::jsonb[], $6::int[], $7::text[], \
                 $8::timestamptz[], $9::int[], $10::bigint[], $11::bigint[], $12::bigint[], \
                 $13::text[], $14::timestamptz[]) WITH ORDINALITY \
                 AS u(queue, kind, payload, priority, state, run_at, max_attempts, timeout_ms, \
                 backoff_base_ms, backoff_max_ms, schedule, nominal_at, ord) \
               ORDER BY ord RETURNING id, run_at), \
             announced AS (SELECT {} FROM (SELECT min(run_at) AS first FROM ins) f) \
             SELECT id FROM ins, announced ORDER BY id",
        notify_tasks_sql("f.first")
    )
});

/// Whether inserting `tasks` takes more than one statement.
pub(crate) fn needs_transaction(tasks: &[TaskInsert]) -> bool {
    tasks.iter().any(|t| t.task.unique_key.is_some())
}

async fn insert_unique<C: GenericClient + Sync>(
    c: &C,
    channel: &str,
    t: &TaskInsert,
    now: Timestamp,
) -> Result<TaskInserted> {
    let rows = Columns::of(std::iter::once(t), now);
    let key = &t.task.unique_key;
    let sql = format!(
        "WITH ins AS ( \
           INSERT INTO sked_tasks (queue, kind, payload, priority, state, run_at, max_attempts, \
             timeout_ms, backoff_base_ms, backoff_max_ms, schedule, nominal_at, created_at, unique_key) \
           VALUES ($3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $2, $15) \
           ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state IN {ACTIVE} DO NOTHING \
           RETURNING id, run_at) \
         SELECT id, {} FROM ins",
        notify_tasks_sql("ins.run_at")
    );
    // A holder that finishes between the insert and the lookup frees the key: try again.
    for _ in 0..5 {
        let params: [Param<'_>; 15] = [
            &channel,
            &now,
            &rows.queue[0],
            &rows.kind[0],
            &rows.payload[0],
            &rows.priority[0],
            &rows.state[0],
            &rows.run_at[0],
            &rows.max_attempts[0],
            &rows.timeout_ms[0],
            &rows.backoff_base_ms[0],
            &rows.backoff_max_ms[0],
            &rows.schedule[0],
            &rows.nominal_at[0],
            key,
        ];
        if let Some(row) = c.query_opt(&sql, &params).await.map_err(db_err)? {
            return Ok(TaskInserted {
                id: col(&row, 0)?,
                state: state(&rows.state[0])?,
                duplicate: false,
            });
        }
        let holder = c
            .query_opt(
                &format!(
                    "SELECT id, state FROM sked_tasks WHERE unique_key = $1 AND state IN {ACTIVE}"
                ),
                &[key],
            )
            .await
            .map_err(db_err)?;
        if let Some(row) = holder {
            return Ok(TaskInserted {
                id: col(&row, 0)?,
                state: state(col(&row, 1)?)?,
                duplicate: true,
            });
        }
    }
    Err(StoreError::Unavailable(
        "the unique key kept changing hands; try again".into(),
    ))
}

/// Task fields as parallel arrays, for `unnest`.
#[derive(Default)]
struct Columns {
    queue: Vec<String>,
    kind: Vec<String>,
    payload: Vec<serde_json::Value>,
    priority: Vec<i32>,
    state: Vec<String>,
    run_at: Vec<Timestamp>,
    max_attempts: Vec<i32>,
    timeout_ms: Vec<Option<i64>>,
    backoff_base_ms: Vec<Option<i64>>,
    backoff_max_ms: Vec<Option<i64>>,
    schedule: Vec<Option<String>>,
    nominal_at: Vec<Option<Timestamp>>,
}

impl Columns {
    fn of<'a>(tasks: impl Iterator<Item = &'a TaskInsert>, now: Timestamp) -> Columns {
        let mut c = Columns::default();
        for t in tasks {
            let task = &t.task;
            let run_at = task.run_at.unwrap_or(now);
            c.queue.push(task.queue.clone());
            c.kind.push(task.kind.clone());
            c.payload.push(task.payload.clone());
            c.priority.push(task.priority);
            c.state
                .push(rules::state_for_run_at(run_at, now).as_str().to_string());
            c.run_at.push(run_at);
            c.max_attempts.push(task.max_attempts);
            c.timeout_ms.push(task.timeout.map(ms));
            c.backoff_base_ms.push(task.backoff.map(|b| ms(b.base)));
            c.backoff_max_ms.push(task.backoff.map(|b| ms(b.max)));
            c.schedule.push(t.schedule.clone());
            c.nominal_at.push(t.nominal_at);
        }
        c
    }
}

pub(crate) async fn insert_many(
    c: &mut Object,
    channel: &str,
    p: &TaskInsertParams,
) -> Result<Vec<TaskInserted>> {
    if p.tasks.is_empty() {
        return Ok(Vec::new());
    }
    let stmt = c.prepare_cached(&PLAIN_INSERT).await.map_err(db_err)?;
    if !needs_transaction(&p.tasks) {
        let client: &tokio_postgres::Client = c;
        return insert_tasks(client, Some(&stmt), channel, &p.tasks, p.now).await;
    }
    let tx = c.transaction().await.map_err(db_err)?;
    let out = insert_tasks(&*tx, Some(&stmt), channel, &p.tasks, p.now).await?;
    tx.commit().await.map_err(db_err)?;
    Ok(out)
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
    Ok(task)
}

pub(crate) async fn list(c: &mut Object, p: &TaskListParams) -> Result<Vec<Task>> {
    let states: Vec<&str> = p.states.iter().map(|s| s.as_str()).collect();
    let limit = i64::from(p.limit.clamp(1, sked_store::rules::STORE_LIST_LIMIT_MAX));
    let mut sql = format!("SELECT {TASK_COLUMNS} FROM sked_tasks t WHERE true");
    let mut params: Vec<Param<'_>> = Vec::new();
    if !states.is_empty() {
        params.push(&states);
        sql.push_str(&format!(" AND t.state = ANY(${})", params.len()));
    }
    for (column, value) in [
        ("queue", &p.queue),
        ("kind", &p.kind),
        ("schedule", &p.schedule),
    ] {
        if let Some(v) = value {
            params.push(v);
            sql.push_str(&format!(" AND t.{column} = ${}", params.len()));
        }
    }
    if let Some(before) = &p.before_id {
        params.push(before);
        sql.push_str(&format!(" AND t.id < ${}", params.len()));
    }
    params.push(&limit);
    sql.push_str(&format!(" ORDER BY t.id DESC LIMIT ${}", params.len()));
    let stmt = c.prepare_cached(&sql).await.map_err(db_err)?;
    let rows = c.query(&stmt, &params).await.map_err(db_err)?;
    tasks_from_rows(&rows)
}

/// Due scheduled/retrying tasks become available. Rows another node is staging are skipped.
const STAGE: &str = "UPDATE sked_tasks SET state = 'available' WHERE id IN ( \
    SELECT id FROM sked_tasks WHERE state IN ('scheduled', 'retrying') AND run_at <= $1 \
    ORDER BY run_at LIMIT 10000 FOR UPDATE SKIP LOCKED)";

/// Paused queues and queues with a concurrency limit.
const QUEUE_SETTINGS: &str = "SELECT q.name, q.paused, q.concurrency_limit FROM sked_queues q \
    WHERE q.paused OR q.concurrency_limit IS NOT NULL";

pub(crate) async fn claim(c: &mut Object, p: &TaskClaimParams) -> Result<Vec<Task>> {
    let expires = p
        .now
        .checked_add(p.lease_ttl)
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
    let max = i64::from(p.max);
    let mut params: Vec<Param<'_>> = vec![&p.now, &expires, &p.worker, &max];
    let filter = candidates_filter(&p.queues, &p.kinds, &p.min_priority, &mut params);
    // Queues that are paused or limited are left to the slow path below.
    let sql = format!(
        "WITH picked AS ( \
           SELECT id FROM sked_tasks c WHERE {filter} AND NOT EXISTS ( \
             SELECT 1 FROM sked_queues q WHERE q.name = c.queue \
               AND (q.paused OR q.concurrency_limit IS NOT NULL)) \
           ORDER BY priority DESC, run_at, id LIMIT $4 FOR UPDATE SKIP LOCKED) \
         UPDATE sked_tasks t SET state = 'running', attempt = t.attempt + 1, started_at = $1, \
           lease_expires_at = $2, worker = $3, cancel_requested = false \
         FROM picked WHERE t.id = picked.id RETURNING {TASK_COLUMNS}"
    );
    let stage = c.prepare_cached(STAGE).await.map_err(db_err)?;
    let settings = c.prepare_cached(QUEUE_SETTINGS).await.map_err(db_err)?;
    let take = c.prepare_cached(&sql).await.map_err(db_err)?;
    let now: [Param<'_>; 1] = [&p.now];
    // Three statements in one round trip, run in order: the claim sees what staging made
    // available.
    let (_, settings, rows) = tokio::try_join!(
        c.execute(&stage, &now),
        c.query(&settings, &[]),
        c.query(&take, &params)
    )
    .map_err(db_err)?;
    let mut claimed = tasks_from_rows(&rows)?;
    let mut limited: Vec<String> = Vec::new();
    for row in &settings {
        let name: String = col(row, 0)?;
        let (paused, limit) = (col::<bool>(row, 1)?, col::<Option<i32>>(row, 2)?);
        if !paused && limit.is_some() && (p.queues.is_empty() || p.queues.contains(&name)) {
            limited.push(name);
        }
    }
    let left = p.max.saturating_sub(claimed.len() as u32);
    if left > 0 && !limited.is_empty() {
        claimed.extend(claim_limited(c, p, &limited, left, expires).await?);
    }
    // RETURNING has no order of its own.
    claimed.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then(a.run_at.cmp(&b.run_at))
            .then(a.id.cmp(&b.id))
    });
    Ok(claimed)
}

/// The `WHERE` of a claim's candidate scan, with its parameters appended to `params`.
fn candidates_filter<'a>(
    queues: &'a Vec<String>,
    kinds: &'a Vec<String>,
    min_priority: &'a Option<i32>,
    params: &mut Vec<Param<'a>>,
) -> String {
    let mut sql = String::from("state = 'available'");
    if !queues.is_empty() {
        params.push(queues);
        sql.push_str(&format!(" AND queue = ANY(${})", params.len()));
    }
    if !kinds.is_empty() {
        params.push(kinds);
        sql.push_str(&format!(" AND kind = ANY(${})", params.len()));
    }
    if let Some(min) = min_priority {
        params.push(min);
        sql.push_str(&format!(" AND priority >= ${}", params.len()));
    }
    sql
}

/// With concurrency limits in play, the limited queues' rows are locked for the transaction,
/// so that nodes claiming at once cannot together exceed a limit.
async fn claim_limited(
    c: &mut Object,
    p: &TaskClaimParams,
    limited: &Vec<String>,
    max: u32,
    expires: Timestamp,
) -> Result<Vec<Task>> {
    let tx = c.transaction().await.map_err(db_err)?;
    let limits = tx
        .query(
            "SELECT q.name, q.concurrency_limit, \
               (SELECT count(*) FROM sked_tasks t WHERE t.state = 'running' AND t.queue = q.name) \
             FROM sked_queues q WHERE q.name = ANY($1) AND NOT q.paused \
               AND q.concurrency_limit IS NOT NULL ORDER BY q.name FOR UPDATE",
            &[limited],
        )
        .await
        .map_err(db_err)?;
    let mut quota: HashMap<String, i64> = HashMap::new();
    for row in &limits {
        let limit: i32 = col(row, 1)?;
        let running: i64 = col(row, 2)?;
        quota.insert(col(row, 0)?, i64::from(limit) - running);
    }
    let max = i64::from(max);
    let mut params: Vec<Param<'_>> = vec![&max];
    let filter = candidates_filter(limited, &p.kinds, &p.min_priority, &mut params);
    let candidates = tx
        .query(
            &format!(
                "SELECT id, queue FROM sked_tasks WHERE {filter} \
                 ORDER BY priority DESC, run_at, id LIMIT $1 FOR UPDATE SKIP LOCKED"
            ),
            &params,
        )
        .await
        .map_err(db_err)?;
    let mut chosen: Vec<TaskId> = Vec::new();
    for row in &candidates {
        let queue: String = col(row, 1)?;
        if let Some(left) = quota.get_mut(&queue) {
            if *left <= 0 {
                continue;
            }
            *left -= 1;
        }
        chosen.push(col(row, 0)?);
    }
    let rows = tx
        .query(
            &format!(
                "UPDATE sked_tasks t SET state = 'running', attempt = t.attempt + 1, started_at = $2, \
                   lease_expires_at = $3, worker = $4, cancel_requested = false \
                 WHERE t.id = ANY($1) RETURNING {TASK_COLUMNS}"
            ),
            &[&chosen, &p.now, &expires, &p.worker],
        )
        .await
        .map_err(db_err)?;
    tx.commit().await.map_err(db_err)?;
    tasks_from_rows(&rows)
}

/// The error for a compare-and-set that matched nothing: the task is gone, or not held so.
async fn stale_or_missing<C: GenericClient + Sync>(c: &C, id: TaskId, attempt: i32) -> StoreError {
    match c
        .query_opt("SELECT 1 FROM sked_tasks WHERE id = $1", &[&id])
        .await
    {
        Ok(Some(_)) => StoreError::StaleLease { id, attempt },
        Ok(None) => StoreError::task_not_found(id),
        Err(e) => db_err(e),
    }
}

pub(crate) async fn heartbeat(c: &mut Object, p: &TaskHeartbeatParams) -> Result<HeartbeatReply> {
    let expires = p
        .now
        .checked_add(p.lease_ttl)
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
    let stmt = c
        .prepare_cached(
            "UPDATE sked_tasks SET lease_expires_at = $3 \
             WHERE id = $1 AND state = 'running' AND attempt = $2 RETURNING cancel_requested",
        )
        .await
        .map_err(db_err)?;
    match c
        .query_opt(&stmt, &[&p.id, &p.attempt, &expires])
        .await
        .map_err(db_err)?
    {
        Some(row) => Ok(HeartbeatReply {
            lease_expires_at: expires,
            cancel_requested: col(&row, 0)?,
        }),
        None => {
            let client: &tokio_postgres::Client = c;
            Err(stale_or_missing(client, p.id, p.attempt).await)
        }
    }
}

/// Attempt history lines, as parallel arrays.
#[derive(Default)]
struct AttemptRows {
    task_id: Vec<TaskId>,
    attempt: Vec<i32>,
    worker: Vec<String>,
    started_at: Vec<Timestamp>,
    finished_at: Vec<Timestamp>,
    outcome: Vec<String>,
    error: Vec<Option<String>>,
}

impl AttemptRows {
    fn push(&mut self, task: &Task, outcome: &str, error: Option<&str>, finished_at: Timestamp) {
        self.task_id.push(task.id);
        self.attempt.push(task.attempt);
        self.worker.push(task.worker.clone().unwrap_or_default());
        self.started_at.push(task.started_at.unwrap_or(finished_at));
        self.finished_at.push(finished_at);
        self.outcome.push(outcome.to_string());
        self.error.push(error.map(str::to_string));
    }

    async fn insert(&self, tx: &Transaction<'_>) -> Result<()> {
        if self.task_id.is_empty() {
            return Ok(());
        }
        let stmt = tx
            .prepare_cached(
                "INSERT INTO sked_task_attempts (task_id, attempt, worker, started_at, finished_at, outcome, error) \
                 SELECT * FROM unnest($1::bigint[], $2::int[], $3::text[], $4::timestamptz[], \
                   $5::timestamptz[], $6::text[], $7::text[]) \
                 ON CONFLICT (task_id, attempt) DO UPDATE SET worker = excluded.worker, \
                   started_at = excluded.started_at, finished_at = excluded.finished_at, \
                   outcome = excluded.outcome, error = excluded.error",
            )
            .await
            .map_err(db_err)?;
        tx.execute(
            &stmt,
            &[
                &self.task_id,
                &self.attempt,
                &self.worker,
                &self.started_at,
                &self.finished_at,
                &self.outcome,
                &self.error,
            ],
        )
        .await
        .map_err(db_err)?;
        Ok(())
    }
}

/// New values of changed task rows, as parallel arrays, written with one statement.
#[derive(Default)]
struct RowChanges {
    id: Vec<TaskId>,
    state: Vec<String>,
    run_at: Vec<Timestamp>,
    max_attempts: Vec<i32>,
    finished_at: Vec<Option<Timestamp>>,
    last_error: Vec<Option<String>>,
    result: Vec<Option<serde_json::Value>>,
    /// Earliest run time among tasks left waiting or available (for the announcement).
    first_run_at: Option<Timestamp>,
    /// A task of a schedule changed state.
    schedules: bool,
}

impl RowChanges {
    fn push(&mut self, after: &Task) {
        self.id.push(after.id);
        self.state.push(after.state.as_str().to_string());
        self.run_at.push(after.run_at);
        self.max_attempts.push(after.max_attempts);
        self.finished_at.push(after.finished_at);
        self.last_error.push(after.last_error.clone());
        self.result.push(after.result.clone());
        if !after.state.is_finished() {
            self.first_run_at = Some(
                self.first_run_at
                    .map_or(after.run_at, |t| t.min(after.run_at)),
            );
        }
        self.schedules |= after.schedule.is_some();
    }

    /// Writes the changes (rows must be locked by the caller) and announces them.
    async fn write(&self, tx: &Transaction<'_>, channel: &str) -> Result<()> {
        if self.id.is_empty() {
            return Ok(());
        }
        let stmt = tx
            .prepare_cached(
                "UPDATE sked_tasks t SET state = u.state, run_at = u.run_at, \
                   max_attempts = u.max_attempts, finished_at = u.finished_at, \
                   last_error = u.last_error, result = u.result, lease_expires_at = NULL \
                 FROM unnest($1::bigint[], $2::text[], $3::timestamptz[], $4::int[], \
                   $5::timestamptz[], $6::text[], $7::jsonb[]) \
                   AS u(id, state, run_at, max_attempts, finished_at, last_error, result) \
                 WHERE t.id = u.id",
            )
            .await
            .map_err(db_err)?;
        tx.execute(
            &stmt,
            &[
                &self.id,
                &self.state,
                &self.run_at,
                &self.max_attempts,
                &self.finished_at,
                &self.last_error,
                &self.result,
            ],
        )
        .await
        .map_err(db_err)?;
        if let Some(first) = self.first_run_at {
            announce_tasks(&**tx, channel, Some(first)).await?;
        }
        if self.schedules {
            announce_schedules(&**tx, channel).await?;
        }
        Ok(())
    }
}

pub(crate) async fn announce_tasks<C: GenericClient + Sync>(
    c: &C,
    channel: &str,
    run_at: Option<Timestamp>,
) -> Result<()> {
    c.execute(
        &format!("SELECT {}", notify_tasks_sql("$2::timestamptz")),
        &[&channel, &run_at],
    )
    .await
    .map_err(db_err)?;
    Ok(())
}

pub(crate) async fn announce_schedules<C: GenericClient + Sync>(
    c: &C,
    channel: &str,
) -> Result<()> {
    c.execute("SELECT pg_notify($1, 's')", &[&channel])
        .await
        .map_err(db_err)?;
    Ok(())
}

async fn lock_rows(tx: &Transaction<'_>, ids: &[TaskId]) -> Result<HashMap<TaskId, Task>> {
    let stmt = tx
        .prepare_cached(&format!(
            "SELECT {TASK_COLUMNS} FROM sked_tasks t WHERE t.id = ANY($1) ORDER BY t.id FOR UPDATE"
        ))
        .await
        .map_err(db_err)?;
    let rows = tx.query(&stmt, &[&ids]).await.map_err(db_err)?;
    rows.iter()
        .map(|r| task_from_row(r).map(|t| (t.id, t)))
        .collect()
}

pub(crate) async fn finish_many(
    c: &mut Object,
    channel: &str,
    ps: &[TaskFinishParams],
) -> Result<Vec<Result<Task>>> {
    if ps.is_empty() {
        return Ok(Vec::new());
    }
    let tx = c.transaction().await.map_err(db_err)?;
    let ids: Vec<TaskId> = ps.iter().map(|p| p.id).collect();
    let mut current = lock_rows(&tx, &ids).await?;
    let mut changes = RowChanges::default();
    let mut attempts = AttemptRows::default();
    let mut out = Vec::with_capacity(ps.len());
    for p in ps {
        let Some(task) = current.get(&p.id) else {
            out.push(Err(StoreError::task_not_found(p.id)));
            continue;
        };
        if task.state != TaskState::Running || task.attempt != p.attempt {
            out.push(Err(StoreError::StaleLease {
                id: p.id,
                attempt: p.attempt,
            }));
            continue;
        }
        let change = rules::finish(task, &p.outcome, p.now, p.jitter);
        let after = change.apply(task, p.now);
        if !change.state.is_finished() {
            attempts.push(task, change.outcome, change.error.as_deref(), p.now);
        }
        changes.push(&after);
        current.insert(p.id, after.clone());
        out.push(Ok(after));
    }
    changes.write(&tx, channel).await?;
    attempts.insert(&tx).await?;
    tx.commit().await.map_err(db_err)?;
    Ok(out)
}

pub(crate) async fn cancel(c: &mut Object, channel: &str, p: &TaskCancelParams) -> Result<Task> {
    let tx = c.transaction().await.map_err(db_err)?;
    let task = cancel_in(&tx, p.id, p.now).await?;
    if task.schedule.is_some() {
        announce_schedules(&*tx, channel).await?;
    }
    tx.commit().await.map_err(db_err)?;
    Ok(task)
}

/// Cancels inside a caller's transaction (also materialisation's `replace`): a task that has
/// not started is cancelled, a running one is asked to stop. Returns the task as it is now.
pub(crate) async fn cancel_in(tx: &Transaction<'_>, id: TaskId, now: Timestamp) -> Result<Task> {
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
    task_from_row(&row)
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
                   cancel_requested = false, lease_expires_at = NULL, \
                   max_attempts = greatest(t.max_attempts, t.attempt + 1) \
                 WHERE t.id = $1 RETURNING {TASK_COLUMNS}"
            ),
            &[&p.id, &p.now],
        )
        .await
        .map_err(db_err)?;
    announce_tasks(&*tx, channel, Some(p.now)).await?;
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
    Transition::Reschedule.check(task.state)?;
    let state = rules::state_for_run_at(p.run_at, p.now);
    let row = tx
        .query_one(
            &format!(
                "UPDATE sked_tasks t SET state = $2, run_at = $3 WHERE t.id = $1 RETURNING {TASK_COLUMNS}"
            ),
            &[&p.id, &state.as_str(), &p.run_at],
        )
        .await
        .map_err(db_err)?;
    announce_tasks(&*tx, channel, Some(p.run_at)).await?;
    tx.commit().await.map_err(db_err)?;
    task_from_row(&row)
}

pub(crate) async fn rescue(
    c: &mut Object,
    channel: &str,
    p: &TaskRescueParams,
) -> Result<Vec<TaskId>> {
    // Most of the time nothing has expired: find that out in one statement, without a
    // transaction.
    let any = c
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM sked_tasks WHERE state = 'running' AND lease_expires_at < $1)",
        )
        .await
        .map_err(db_err)?;
    if !col::<bool>(&c.query_one(&any, &[&p.now]).await.map_err(db_err)?, 0)? {
        return Ok(Vec::new());
    }
    let tx = c.transaction().await.map_err(db_err)?;
    let limit = i64::from(p.limit);
    let stmt = tx
        .prepare_cached(&format!(
            "SELECT {TASK_COLUMNS} FROM sked_tasks t WHERE t.state = 'running' AND t.lease_expires_at < $1 \
             ORDER BY t.lease_expires_at LIMIT $2 FOR UPDATE SKIP LOCKED"
        ))
        .await
        .map_err(db_err)?;
    let rows = tx.query(&stmt, &[&p.now, &limit]).await.map_err(db_err)?;
    let expired = tasks_from_rows(&rows)?;
    let mut changes = RowChanges::default();
    let mut attempts = AttemptRows::default();
    for task in &expired {
        Transition::Rescue.check(task.state)?;
        let (state, error) = rules::rescue(task);
        let after = Task {
            state,
            run_at: p.now,
            finished_at: state.is_finished().then_some(p.now),
            last_error: Some(error.clone()),
            lease_expires_at: None,
            ..task.clone()
        };
        attempts.push(task, "rescued", Some(&error), p.now);
        changes.push(&after);
    }
    changes.write(&tx, channel).await?;
    attempts.insert(&tx).await?;
    tx.commit().await.map_err(db_err)?;
    Ok(expired.iter().map(|t| t.id).collect())
}

pub(crate) async fn prune(c: &mut Object, p: &TaskPruneParams) -> Result<u64> {
    let limit = i64::from(p.limit);
    let tx = c.transaction().await.map_err(db_err)?;
    // The leader runs this every minute, mostly to find nothing: both statements are prepared
    // once per connection.
    let tasks = tx
        .prepare_cached(&format!(
            // Oldest first, in batches: each delete is short, and vacuum reclaims the space.
            "WITH doomed AS ( \
               SELECT id FROM sked_tasks WHERE state IN {FINISHED} AND finished_at < $1 \
               ORDER BY finished_at LIMIT $2), \
             attempts AS (DELETE FROM sked_task_attempts WHERE task_id IN (SELECT id FROM doomed)), \
             tasks AS (DELETE FROM sked_tasks WHERE id IN (SELECT id FROM doomed) RETURNING 1) \
             SELECT count(*) FROM tasks"
        ))
        .await
        .map_err(db_err)?;
    // The occurrence ledger follows the same retention.
    let ledger = tx
        .prepare_cached(
            "DELETE FROM sked_occurrences WHERE (schedule, nominal_at) IN ( \
               SELECT schedule, nominal_at FROM sked_occurrences WHERE recorded_at < $1 LIMIT $2)",
        )
        .await
        .map_err(db_err)?;
    let params: [Param<'_>; 2] = [&p.finished_before, &limit];
    let (deleted, _) =
        tokio::try_join!(tx.query_one(&tasks, &params), tx.execute(&ledger, &params))
            .map_err(db_err)?;
    tx.commit().await.map_err(db_err)?;
    Ok(col::<i64>(&deleted, 0)? as u64)
}

pub(crate) async fn next_run_at(c: &mut Object) -> Result<Option<Timestamp>> {
    let stmt = c
        .prepare_cached(
            "SELECT min(run_at) FROM sked_tasks WHERE state IN ('scheduled', 'retrying')",
        )
        .await
        .map_err(db_err)?;
    let row = c.query_one(&stmt, &[]).await.map_err(db_err)?;
    col(&row, 0)
}
