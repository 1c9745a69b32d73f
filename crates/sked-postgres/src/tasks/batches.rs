//! Batches: tasks joining one when inserted, their ends counted in the ending's transaction,
//! and the callbacks enqueued in the transaction that ends the batch (the rules:
//! `sked_store::rules::batches`).
//!
//! Every join, every end of a batch's task and the close lock the batch's row (in id order
//! when several), and each looks at the batch's open tasks after taking it, with a statement
//! whose snapshot follows the lock: of two last tasks ending at once, the second to take the
//! lock sees the first's end, so exactly one of them (or the close) finds none open and
//! enqueues the callbacks; a join after that finds the batch done and is refused.

use std::collections::{BTreeMap, BTreeSet};

use deadpool_postgres::{Object, Transaction};
use jiff::Timestamp;
use sked_core::{BatchId, NewTask, TaskId, TaskState};
use sked_store::*;
use tokio_postgres::GenericClient;

use crate::codec::{col, db_err, state};

/// The columns of a batch's row that [`info_from_row`] reads.
const COLUMNS: &str = "id, name, state, size, created_at, closed_at, done_at, on_success, \
    on_complete, success_task, complete_task";

fn info_from_row(r: &tokio_postgres::Row) -> Result<BatchInfo> {
    let callback = |i: usize| -> Result<Option<NewTask>> {
        let json: Option<serde_json::Value> = col(r, i)?;
        Ok(json.and_then(|j| serde_json::from_value(j).ok()))
    };
    Ok(BatchInfo {
        id: col(r, 0)?,
        name: col(r, 1)?,
        state: BatchState::parse(&col::<String>(r, 2)?).unwrap_or(BatchState::Open),
        total: col::<i64>(r, 3)?.max(0) as u64,
        counts: BTreeMap::new(),
        created_at: col(r, 4)?,
        closed_at: col(r, 5)?,
        done_at: col(r, 6)?,
        on_success: callback(7)?,
        on_complete: callback(8)?,
        on_success_task: col(r, 9)?,
        on_complete_task: col(r, 10)?,
    })
}

fn not_found(id: BatchId) -> StoreError {
    StoreError::NotFound {
        what: "batch",
        id: id.to_string(),
    }
}

async fn counts<C: GenericClient + Sync>(c: &C, id: BatchId) -> Result<BTreeMap<TaskState, u64>> {
    let rows = c
        .query(
            "SELECT t.state, count(*) FROM sked_batch_tasks b JOIN sked_tasks t ON t.id = b.task \
             WHERE b.batch = $1 GROUP BY t.state",
            &[&id],
        )
        .await
        .map_err(db_err)?;
    let mut out = BTreeMap::new();
    for r in &rows {
        out.insert(
            state(&col::<String>(r, 0)?)?,
            col::<i64>(r, 1)?.max(0) as u64,
        );
    }
    Ok(out)
}

async fn get_in<C: GenericClient + Sync>(c: &C, id: BatchId) -> Result<BatchInfo> {
    let row = c
        .query_opt(
            &format!("SELECT {COLUMNS} FROM sked_batches WHERE id = $1"),
            &[&id],
        )
        .await
        .map_err(db_err)?
        .ok_or_else(|| not_found(id))?;
    let mut b = info_from_row(&row)?;
    b.counts = counts(c, id).await?;
    Ok(b)
}

pub(crate) async fn get(c: &Object, id: BatchId) -> Result<BatchInfo> {
    get_in(&***c, id).await
}

pub(crate) async fn open(c: &Object, p: &BatchOpenParams) -> Result<BatchInfo> {
    p.batch
        .validate()
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
    let json = |t: &Option<NewTask>| {
        t.as_ref()
            .map(|t| serde_json::to_value(t).unwrap_or_default())
    };
    let row = c
        .query_one(
            "INSERT INTO sked_batches (name, created_at, on_success, on_complete) \
             VALUES ($1, $2, $3, $4) RETURNING id",
            &[
                &p.batch.name,
                &p.now,
                &json(&p.batch.on_success),
                &json(&p.batch.on_complete),
            ],
        )
        .await
        .map_err(db_err)?;
    get(c, col(&row, 0)?).await
}

pub(crate) async fn list(c: &Object, p: &BatchListParams) -> Result<Page<BatchInfo>> {
    let limit = p.limit.clamp(1, rules::STORE_LIST_LIMIT_MAX);
    let rows = c
        .query(
            &format!("SELECT {COLUMNS} FROM sked_batches WHERE id < $1 ORDER BY id DESC LIMIT $2"),
            &[&p.before_id.unwrap_or(i64::MAX), &(i64::from(limit) + 1)],
        )
        .await
        .map_err(db_err)?;
    let more = rows.len() > limit as usize;
    let mut items = Vec::with_capacity(limit as usize);
    for r in rows.iter().take(limit as usize) {
        let mut b = info_from_row(r)?;
        b.counts = counts(&***c, b.id).await?;
        items.push(b);
    }
    Ok(Page { items, more })
}

/// The batch `task` joined, if any.
pub(crate) async fn of_task<C: GenericClient + Sync>(
    c: &C,
    task: TaskId,
) -> Result<Option<BatchId>> {
    let row = c
        .query_opt(
            "SELECT batch FROM sked_batch_tasks WHERE task = $1",
            &[&task],
        )
        .await
        .map_err(db_err)?;
    row.map(|r| col(&r, 0)).transpose()
}

/// Locks the rows of `batches` in id order; their states, by id.
async fn lock<C: GenericClient + Sync>(
    c: &C,
    batches: &[BatchId],
) -> Result<BTreeMap<BatchId, BatchState>> {
    let rows = c
        .query(
            "SELECT id, state FROM sked_batches WHERE id = ANY($1) ORDER BY id FOR UPDATE",
            &[&batches],
        )
        .await
        .map_err(db_err)?;
    let mut out = BTreeMap::new();
    for r in &rows {
        let s: String = col(r, 1)?;
        out.insert(
            col(r, 0)?,
            BatchState::parse(&s).unwrap_or(BatchState::Open),
        );
    }
    Ok(out)
}

/// The tasks just inserted (`joined`: each with the batch it names and the state it started
/// in) join their batches, each batch locked first: one that does not exist is `Invalid`, one
/// that is done a `Conflict` (the caller's transaction then makes nothing). The tasks are
/// flagged so that their endings tell their batches; one that started ended (cancelled by a
/// parent that failed) counts as ended at once.
pub(crate) async fn join<C: GenericClient + Sync>(
    c: &C,
    channel: &str,
    joined: &[(TaskId, BatchId, TaskState)],
    now: Timestamp,
) -> Result<()> {
    if joined.is_empty() {
        return Ok(());
    }
    let batches: Vec<BatchId> = (joined.iter())
        .map(|(_, b, _)| *b)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let states = lock(c, &batches).await?;
    for b in &batches {
        match states.get(b) {
            None => return Err(StoreError::Invalid(format!("batch: no batch {b}"))),
            Some(BatchState::Done) => {
                return Err(StoreError::Conflict(format!(
                    "batch {b} has ended: its callbacks were enqueued, and it takes no more tasks"
                )));
            }
            Some(_) => {}
        }
    }
    let tasks: Vec<TaskId> = joined.iter().map(|(t, _, _)| *t).collect();
    let of: Vec<BatchId> = joined.iter().map(|(_, b, _)| *b).collect();
    c.execute(
        "INSERT INTO sked_batch_tasks (task, batch) SELECT * FROM unnest($1::bigint[], $2::bigint[])",
        &[&tasks, &of],
    )
    .await
    .map_err(db_err)?;
    c.execute(
        "UPDATE sked_batches b SET size = b.size + n.n \
         FROM (SELECT batch, count(*) AS n FROM unnest($1::bigint[]) AS u(batch) GROUP BY batch) n \
         WHERE b.id = n.batch",
        &[&of],
    )
    .await
    .map_err(db_err)?;
    c.execute(
        "UPDATE sked_tasks SET has_children = true WHERE id = ANY($1)",
        &[&tasks],
    )
    .await
    .map_err(db_err)?;
    let ended: Vec<(TaskId, TaskState)> = (joined.iter())
        .filter(|(_, _, s)| s.is_finished())
        .map(|(t, _, s)| (*t, *s))
        .collect();
    self::ended(c, channel, &ended, now).await
}

/// Counts the ends in `ended` in their batches; a closed batch whose last task ended enqueues
/// its callbacks.
pub(crate) async fn ended<C: GenericClient + Sync>(
    c: &C,
    channel: &str,
    ended: &[(TaskId, TaskState)],
    now: Timestamp,
) -> Result<()> {
    let ids: Vec<TaskId> = (ended.iter())
        .filter(|(_, s)| s.is_finished())
        .map(|(id, _)| *id)
        .collect();
    if ids.is_empty() {
        return Ok(());
    }
    let rows = c
        .query(
            "UPDATE sked_batch_tasks SET open = false WHERE task = ANY($1) AND open \
             RETURNING batch",
            &[&ids],
        )
        .await
        .map_err(db_err)?;
    let batches: Vec<BatchId> = (rows.iter())
        .map(|r| col(r, 0))
        .collect::<Result<BTreeSet<BatchId>>>()?
        .into_iter()
        .collect();
    if batches.is_empty() {
        return Ok(());
    }
    for (b, s) in lock(c, &batches).await? {
        if s == BatchState::Closed && !has_open(c, b).await? {
            fire(c, channel, b, now).await?;
        }
    }
    Ok(())
}

/// Closes batch `id` and, when its tasks have all ended, enqueues its callbacks.
pub(crate) async fn close(
    c: &mut Object,
    channel: &str,
    p: &BatchCloseParams,
) -> Result<BatchInfo> {
    let tx = c.transaction().await.map_err(db_err)?;
    let Some(s) = lock(&*tx, &[p.id]).await?.remove(&p.id) else {
        return Err(not_found(p.id));
    };
    if s == BatchState::Open {
        tx.execute(
            "UPDATE sked_batches SET state = 'closed', closed_at = $2 WHERE id = $1",
            &[&p.id, &p.now],
        )
        .await
        .map_err(db_err)?;
        if !has_open(&*tx, p.id).await? {
            fire(&*tx, channel, p.id, p.now).await?;
        }
    }
    let info = get_in(&*tx, p.id).await?;
    tx.commit().await.map_err(db_err)?;
    Ok(info)
}

/// Tasks run again by hand (`ids`) count as not ended in their batches, unless a batch is
/// done; each batch locked first.
pub(crate) async fn reopened(tx: &Transaction<'_>, ids: &[TaskId]) -> Result<()> {
    let rows = tx
        .query(
            "SELECT DISTINCT batch FROM sked_batch_tasks WHERE task = ANY($1) AND NOT open",
            &[&ids],
        )
        .await
        .map_err(db_err)?;
    if rows.is_empty() {
        return Ok(());
    }
    let batches: Vec<BatchId> = rows.iter().map(|r| col(r, 0)).collect::<Result<_>>()?;
    let open: Vec<BatchId> = (lock(&**tx, &batches).await?.into_iter())
        .filter(|(_, s)| *s != BatchState::Done)
        .map(|(b, _)| b)
        .collect();
    tx.execute(
        "UPDATE sked_batch_tasks SET open = true WHERE task = ANY($1) AND batch = ANY($2)",
        &[&ids, &open],
    )
    .await
    .map_err(db_err)?;
    Ok(())
}

/// Whether a task of batch `id` has not ended, by a statement of its own (its snapshot
/// follows the batch's lock).
async fn has_open<C: GenericClient + Sync>(c: &C, id: BatchId) -> Result<bool> {
    let row = c
        .query_opt(
            "SELECT 1 FROM sked_batch_tasks WHERE batch = $1 AND open LIMIT 1",
            &[&id],
        )
        .await
        .map_err(db_err)?;
    Ok(row.is_some())
}

/// Enqueues batch `id`'s callbacks (its row locked), with its counts, and marks it done.
async fn fire<C: GenericClient + Sync>(
    c: &C,
    channel: &str,
    id: BatchId,
    now: Timestamp,
) -> Result<()> {
    let b = get_in(c, id).await?;
    let (on_success, on_complete) =
        rules::batches::callbacks(id, b.on_success.as_ref(), b.on_complete.as_ref(), &b.counts);
    let mut made: [Option<TaskId>; 2] = [None, None];
    for (slot, insert) in [on_success, on_complete].into_iter().enumerate() {
        let Some(insert) = insert else { continue };
        // Boxed: an insert may end a batch (a task that joins it cancelled at once), which
        // inserts its callbacks.
        let inserted = Box::pin(super::insert_tasks(c, None, channel, &[insert], now)).await?;
        made[slot] = inserted.first().map(|t| t.id);
    }
    c.execute(
        "UPDATE sked_batches SET state = 'done', done_at = $2, success_task = $3, \
           complete_task = $4 WHERE id = $1",
        &[&id, &now, &made[0], &made[1]],
    )
    .await
    .map_err(db_err)?;
    Ok(())
}

/// Two parts of a `WITH` (as `workflows::forget_sql`): forget which batch the tasks `ids` (a
/// subquery, tasks being deleted in the same statement) joined, and delete the done batches
/// left with none.
pub(crate) fn forget_sql(ids: &str) -> String {
    format!(
        "batch_members AS (DELETE FROM sked_batch_tasks WHERE task IN {ids} RETURNING batch), \
         batches_emptied AS (DELETE FROM sked_batches b WHERE b.id IN (SELECT batch FROM batch_members) \
           AND b.state = 'done' AND NOT EXISTS (SELECT 1 FROM sked_batch_tasks m \
             WHERE m.batch = b.id AND m.task NOT IN {ids}))"
    )
}
