//! Inserting tasks.

use jiff::Timestamp;
use rusqlite::{OptionalExtension, Transaction, params};
use sked_core::TaskId;
use sked_store::rules;
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
            .prepare_cached(&crate::indexed::UNIQUE_KEY_HOLDER)
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

/// Inserts tasks in order, each with the prepared one-row statement of [`insert_one`] (see
/// [`super::claim`] for why one row per statement is cheap).
pub(crate) fn insert_many(tx: &Transaction<'_>, p: &TaskInsertParams) -> Result<Vec<TaskInserted>> {
    p.tasks.iter().map(|t| insert_one(tx, t, p.now)).collect()
}
