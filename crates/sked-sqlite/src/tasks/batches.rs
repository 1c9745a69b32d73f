//! Batches: tasks joining one when inserted, their ends counted in the ending's write, and the
//! callbacks enqueued in the write that ends the batch (the rules:
//! `sked_store::rules::batches`). One writer orders every join, ending and close, so an ending
//! asks once whether any batch task is open at all and, most often, does nothing more.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use rusqlite::{Connection, OptionalExtension, Transaction, params};
use sked_core::{BatchId, NewTask, TaskId, TaskState};
use sked_store::*;

use crate::codec::{db_err, from_ts, id_list, opt_ts, state, text, ts};

/// The columns of a batch's row that [`info_from_row`] reads.
const COLUMNS: &str = "id, name, state, size, created_at, closed_at, done_at, on_success, \
    on_complete, success_task, complete_task";

fn info_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(BatchInfo, Option<String>)> {
    let callback = |i: usize| -> rusqlite::Result<Option<NewTask>> {
        let json: Option<String> = r.get(i)?;
        Ok(json.and_then(|j| serde_json::from_str(&j).ok()))
    };
    let state_text: String = r.get(2)?;
    Ok((
        BatchInfo {
            id: r.get(0)?,
            name: r.get(1)?,
            state: BatchState::parse(&state_text).unwrap_or(BatchState::Open),
            total: r.get::<_, i64>(3)?.max(0) as u64,
            counts: BTreeMap::new(),
            created_at: from_ts(r.get(4)?),
            closed_at: opt_ts(r.get(5)?),
            done_at: opt_ts(r.get(6)?),
            on_success: callback(7)?,
            on_complete: callback(8)?,
            on_success_task: r.get(9)?,
            on_complete_task: r.get(10)?,
        },
        Some(state_text),
    ))
}

fn not_found(id: BatchId) -> StoreError {
    StoreError::NotFound {
        what: "batch",
        id: id.to_string(),
    }
}

/// The batch `id` as stored, without counts.
fn row(conn: &Connection, id: BatchId) -> Result<BatchInfo> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM batches WHERE id = ?1"))
        .map_err(db_err)?
        .query_row([id], info_from_row)
        .optional()
        .map_err(db_err)?
        .map(|(info, _)| info)
        .ok_or_else(|| not_found(id))
}

/// Counts `b`'s tasks by state.
fn count(conn: &Connection, mut b: BatchInfo) -> Result<BatchInfo> {
    b.counts = counts(conn, b.id)?;
    Ok(b)
}

fn counts(conn: &Connection, id: BatchId) -> Result<BTreeMap<TaskState, u64>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT t.state, count(*) FROM batch_tasks b JOIN tasks t ON t.id = b.task \
             WHERE b.batch = ?1 GROUP BY t.state",
        )
        .map_err(db_err)?;
    let rows = stmt
        .query_map([id], |r| Ok((state(text(r, 0)?)?, r.get::<_, i64>(1)?)))
        .map_err(db_err)?;
    let mut out = BTreeMap::new();
    for row in rows {
        let (s, n) = row.map_err(db_err)?;
        out.insert(s, n.max(0) as u64);
    }
    Ok(out)
}

pub(crate) fn open(tx: &Transaction<'_>, p: &BatchOpenParams) -> Result<BatchInfo> {
    p.batch
        .validate()
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
    let json = |t: &Option<NewTask>| -> Result<Option<String>> {
        t.as_ref()
            .map(|t| serde_json::to_string(t).map_err(|e| StoreError::Backend(e.to_string())))
            .transpose()
    };
    tx.prepare_cached(
        "INSERT INTO batches (name, created_at, on_success, on_complete) VALUES (?1, ?2, ?3, ?4)",
    )
    .map_err(db_err)?
    .execute(params![
        p.batch.name,
        ts(p.now),
        json(&p.batch.on_success)?,
        json(&p.batch.on_complete)?
    ])
    .map_err(db_err)?;
    get(tx, tx.last_insert_rowid())
}

pub(crate) fn get(conn: &Connection, id: BatchId) -> Result<BatchInfo> {
    count(conn, row(conn, id)?)
}

pub(crate) fn list(conn: &Connection, p: &BatchListParams) -> Result<Page<BatchInfo>> {
    let limit = p.limit.clamp(1, rules::STORE_LIST_LIMIT_MAX);
    let rows: Vec<BatchInfo> = {
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM batches WHERE id < ?1 ORDER BY id DESC LIMIT ?2"
            ))
            .map_err(db_err)?;
        stmt.query_map(
            params![p.before_id.unwrap_or(i64::MAX), i64::from(limit) + 1],
            info_from_row,
        )
        .map_err(db_err)?
        .map(|r| r.map(|(info, _)| info))
        .collect::<rusqlite::Result<_>>()
        .map_err(db_err)?
    };
    let more = rows.len() > limit as usize;
    let items = (rows.into_iter().take(limit as usize))
        .map(|b| count(conn, b))
        .collect::<Result<_>>()?;
    Ok(Page { items, more })
}

/// The batch `task` joined, if any.
pub(crate) fn of_task(conn: &Connection, task: TaskId) -> Result<Option<BatchId>> {
    conn.prepare_cached("SELECT batch FROM batch_tasks WHERE task = ?1")
        .map_err(db_err)?
        .query_row([task], |r| r.get(0))
        .optional()
        .map_err(db_err)
}

/// The tasks just inserted (`joined`: each with the batch it names and the state it started
/// in) join their batches: a batch that does not exist is `Invalid`, one that is done a
/// `Conflict` (the caller's write then makes nothing). A task that started ended (cancelled
/// by a parent that failed) counts as ended at once.
pub(crate) fn join(
    tx: &Connection,
    joined: &[(TaskId, BatchId, TaskState)],
    now: Timestamp,
) -> Result<()> {
    if joined.is_empty() {
        return Ok(());
    }
    let batches: BTreeSet<BatchId> = joined.iter().map(|(_, b, _)| *b).collect();
    for &b in &batches {
        match row(tx, b) {
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(StoreError::Invalid(format!("batch: no batch {b}")));
            }
            Err(e) => return Err(e),
            Ok(info) if info.state == BatchState::Done => {
                return Err(StoreError::Conflict(format!(
                    "batch {b} has ended: its callbacks were enqueued, and it takes no more tasks"
                )));
            }
            Ok(_) => {}
        }
    }
    let mut member = tx
        .prepare_cached("INSERT INTO batch_tasks (task, batch) VALUES (?1, ?2)")
        .map_err(db_err)?;
    let mut size = tx
        .prepare_cached("UPDATE batches SET size = size + 1 WHERE id = ?1")
        .map_err(db_err)?;
    for (task, batch, _) in joined {
        member.execute(params![task, batch]).map_err(db_err)?;
        size.execute([batch]).map_err(db_err)?;
    }
    let ended: Vec<(TaskId, TaskState)> = (joined.iter())
        .filter(|(_, _, s)| s.is_finished())
        .map(|(t, _, s)| (*t, *s))
        .collect();
    if !ended.is_empty() {
        self::ended(tx, &ended, now)?;
    }
    Ok(())
}

/// Counts the ends in `ended` in their batches; a closed batch whose last task ended enqueues
/// its callbacks.
pub(crate) fn ended(
    conn: &Connection,
    ended: &[(TaskId, TaskState)],
    now: Timestamp,
) -> Result<()> {
    let ids: Vec<TaskId> = (ended.iter())
        .filter(|(_, s)| s.is_finished())
        .map(|(id, _)| *id)
        .collect();
    if ids.is_empty() || !any_open(conn)? {
        return Ok(());
    }
    let batches: BTreeSet<BatchId> = {
        let mut stmt = conn
            .prepare_cached(
                "UPDATE batch_tasks SET open = 0 WHERE task IN rarray(?1) AND open = 1 \
                 RETURNING batch",
            )
            .map_err(db_err)?;
        stmt.query_map([id_list(&ids)], |r| r.get(0))
            .map_err(db_err)?
            .collect::<rusqlite::Result<_>>()
            .map_err(db_err)?
    };
    for b in batches {
        if row(conn, b)?.state == BatchState::Closed && !has_open(conn, b)? {
            fire(conn, b, now)?;
        }
    }
    Ok(())
}

/// Closes batch `id` and, when its tasks have all ended, enqueues its callbacks.
pub(crate) fn close(tx: &Transaction<'_>, p: &BatchCloseParams) -> Result<BatchInfo> {
    let b = row(tx, p.id)?;
    if b.state == BatchState::Open {
        tx.prepare_cached("UPDATE batches SET state = 'closed', closed_at = ?2 WHERE id = ?1")
            .map_err(db_err)?
            .execute(params![p.id, ts(p.now)])
            .map_err(db_err)?;
        if !has_open(tx, p.id)? {
            fire(tx, p.id, p.now)?;
        }
    }
    get(tx, p.id)
}

/// Tasks run again by hand (`ids`) count as not ended in their batches, unless a batch is done.
pub(crate) fn reopened(conn: &Connection, ids: &[TaskId]) -> Result<()> {
    conn.prepare_cached(
        "UPDATE batch_tasks SET open = 1 WHERE task IN rarray(?1) AND open = 0 \
         AND batch IN (SELECT id FROM batches WHERE state <> 'done')",
    )
    .map_err(db_err)?
    .execute([id_list(ids)])
    .map_err(db_err)?;
    Ok(())
}

/// Forgets which batch the tasks of `list` (being deleted) joined, and the done batches left
/// with no task.
pub(crate) fn forget(tx: &Transaction<'_>, list: &rusqlite::vtab::array::Array) -> Result<()> {
    let batches: Vec<i64> = {
        let mut stmt = tx
            .prepare_cached("SELECT DISTINCT batch FROM batch_tasks WHERE task IN rarray(?1)")
            .map_err(db_err)?;
        stmt.query_map([list], |r| r.get(0))
            .map_err(db_err)?
            .collect::<rusqlite::Result<_>>()
            .map_err(db_err)?
    };
    if batches.is_empty() {
        return Ok(());
    }
    tx.prepare_cached("DELETE FROM batch_tasks WHERE task IN rarray(?1)")
        .map_err(db_err)?
        .execute([list])
        .map_err(db_err)?;
    tx.prepare_cached(
        "DELETE FROM batches WHERE id IN rarray(?1) AND state = 'done' \
         AND NOT EXISTS (SELECT 1 FROM batch_tasks b WHERE b.batch = batches.id)",
    )
    .map_err(db_err)?
    .execute([id_list(&batches)])
    .map_err(db_err)?;
    Ok(())
}

/// Whether any task of any batch has not ended.
fn any_open(conn: &Connection) -> Result<bool> {
    conn.prepare_cached("SELECT 1 FROM batch_tasks WHERE open = 1 LIMIT 1")
        .map_err(db_err)?
        .exists([])
        .map_err(db_err)
}

/// Whether a task of batch `id` has not ended.
fn has_open(conn: &Connection, id: BatchId) -> Result<bool> {
    conn.prepare_cached("SELECT 1 FROM batch_tasks WHERE batch = ?1 AND open = 1 LIMIT 1")
        .map_err(db_err)?
        .exists([id])
        .map_err(db_err)
}

/// Enqueues batch `id`'s callbacks, with its counts, and marks it done; what it enqueued is
/// announced once the write has committed.
fn fire(conn: &Connection, id: BatchId, now: Timestamp) -> Result<()> {
    let b = row(conn, id)?;
    let counts = counts(conn, id)?;
    let (on_success, on_complete) =
        rules::batches::callbacks(id, b.on_success.as_ref(), b.on_complete.as_ref(), &counts);
    let mut made: [Option<TaskId>; 2] = [None, None];
    for (slot, insert) in [on_success, on_complete].into_iter().enumerate() {
        let Some(insert) = insert else { continue };
        super::note_released(insert.task.run_at.unwrap_or(now));
        let params = TaskInsertParams {
            tasks: vec![insert],
            now,
        };
        // Within the write that ends the batch.
        let inserted = super::insert_many(conn, &params)?;
        made[slot] = inserted.first().map(|t| t.id);
    }
    conn.prepare_cached(
        "UPDATE batches SET state = 'done', done_at = ?2, success_task = ?3, complete_task = ?4 \
         WHERE id = ?1",
    )
    .map_err(db_err)?
    .execute(params![id, ts(now), made[0], made[1]])
    .map_err(db_err)?;
    Ok(())
}
