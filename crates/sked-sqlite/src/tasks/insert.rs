//! Inserting tasks: those without a unique key as one statement per batch, each with a key on
//! its own.

use jiff::Timestamp;
use rusqlite::{OptionalExtension, Transaction, params};
use sked_core::TaskId;
use sked_store::rules;
use sked_store::states::ACTIVE;
use sked_store::*;

use crate::codec::{db_err, ms, ts};

/// Inserts one task inside the caller's transaction.
pub(crate) fn insert_one(
    tx: &Transaction<'_>,
    t: &TaskInsert,
    now: Timestamp,
) -> Result<TaskInserted> {
    let task = &t.task;
    task.validate()
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
    if let Some(key) = &task.unique_key {
        let held: Option<(TaskId, String)> = tx
            .prepare_cached(&format!(
                "SELECT id, state FROM tasks WHERE unique_key = ?1 AND state IN {ACTIVE}"
            ))
            .map_err(db_err)?
            .query_row([key], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()
            .map_err(db_err)?;
        if let Some((id, state)) = held {
            let state = crate::codec::state(&state).map_err(db_err)?;
            return Ok(TaskInserted {
                id,
                state,
                duplicate: true,
            });
        }
    }
    let run_at = task.run_at.unwrap_or(now);
    let state = rules::state_for_run_at(run_at, now);
    let payload =
        serde_json::to_string(&task.payload).map_err(|e| StoreError::Invalid(e.to_string()))?;
    let mut stmt = tx
        .prepare_cached(
            "INSERT INTO tasks (queue, kind, payload, priority, state, run_at, max_attempts, timeout_ms, \
             unique_key, backoff_base_ms, backoff_max_ms, schedule, nominal_at, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
        )
        .map_err(db_err)?;
    stmt.execute(params![
        task.queue,
        task.kind,
        payload,
        task.priority,
        state.as_str(),
        ts(run_at),
        task.max_attempts,
        task.timeout.map(ms),
        task.unique_key,
        task.backoff.map(|b| ms(b.base)),
        task.backoff.map(|b| ms(b.max)),
        t.schedule,
        t.nominal_at.map(ts),
        ts(now),
    ])
    .map_err(db_err)?;
    Ok(TaskInserted {
        id: tx.last_insert_rowid(),
        state,
        duplicate: false,
    })
}

/// Inserts tasks: those without a unique key with one statement (see [`super::claim`] for why), each
/// with a key on its own ([`insert_one`]).
pub(crate) fn insert_many(tx: &Transaction<'_>, p: &TaskInsertParams) -> Result<Vec<TaskInserted>> {
    let mut out: Vec<Option<TaskInserted>> = vec![None; p.tasks.len()];
    let mut plain: Vec<usize> = Vec::with_capacity(p.tasks.len());
    let mut rows: Vec<serde_json::Value> = Vec::with_capacity(p.tasks.len());
    for (i, t) in p.tasks.iter().enumerate() {
        if t.task.unique_key.is_some() {
            continue;
        }
        let task = &t.task;
        task.validate()
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
        let run_at = task.run_at.unwrap_or(p.now);
        let payload =
            serde_json::to_string(&task.payload).map_err(|e| StoreError::Invalid(e.to_string()))?;
        rows.push(serde_json::json!([
            task.queue,
            task.kind,
            payload,
            task.priority,
            rules::state_for_run_at(run_at, p.now).as_str(),
            ts(run_at),
            task.max_attempts,
            task.timeout.map(ms),
            task.backoff.map(|b| ms(b.base)),
            task.backoff.map(|b| ms(b.max)),
            t.schedule,
            t.nominal_at.map(ts),
        ]));
        plain.push(i);
    }
    if !rows.is_empty() {
        let n = tx
            .prepare_cached(
                "INSERT INTO tasks (queue, kind, payload, priority, state, run_at, max_attempts, \
                   timeout_ms, backoff_base_ms, backoff_max_ms, schedule, nominal_at, created_at) \
                 SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, \
                   value ->> 5, value ->> 6, value ->> 7, value ->> 8, value ->> 9, value ->> 10, \
                   value ->> 11, ?2 \
                 FROM json_each(?1) ORDER BY key",
            )
            .map_err(db_err)?
            .execute(params![
                serde_json::Value::Array(rows).to_string(),
                ts(p.now)
            ])
            .map_err(db_err)?;
        // One statement under the write lock: AUTOINCREMENT hands out consecutive ids in
        // insertion order, which is the input order.
        let first = tx.last_insert_rowid() - n as i64 + 1;
        for (k, &i) in plain.iter().enumerate() {
            let t = &p.tasks[i];
            let run_at = t.task.run_at.unwrap_or(p.now);
            out[i] = Some(TaskInserted {
                id: first + k as i64,
                state: rules::state_for_run_at(run_at, p.now),
                duplicate: false,
            });
        }
    }
    for (i, t) in p.tasks.iter().enumerate() {
        if t.task.unique_key.is_some() {
            out[i] = Some(insert_one(tx, t, p.now)?);
        }
    }
    out.into_iter()
        .map(|o| o.ok_or_else(|| StoreError::Backend("a task was not inserted".into())))
        .collect()
}
