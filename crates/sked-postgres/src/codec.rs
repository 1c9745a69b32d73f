//! Conversions between rows and domain values, and from driver errors to [`StoreError`].

use jiff::SignedDuration;
use sked_core::{Backoff, Task, TaskState};
use sked_store::StoreError;
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;

/// Maps a driver error: connection trouble is `Unavailable` (HTTP 503, try again), a unique
/// violation a `Conflict`, anything else a backend error.
pub(crate) fn db_err(e: tokio_postgres::Error) -> StoreError {
    let Some(db) = e.as_db_error() else {
        // No server answer: the connection is closed, broken or could not be made.
        return StoreError::Unavailable(format!("PostgreSQL connection failed: {e}"));
    };
    let code = db.code();
    if *code == SqlState::UNIQUE_VIOLATION {
        StoreError::Conflict(db.message().to_string())
    } else if code.code().starts_with("08")
        || code.code().starts_with("57P")
        || code.code().starts_with("53")
        || *code == SqlState::T_R_SERIALIZATION_FAILURE
        || *code == SqlState::T_R_DEADLOCK_DETECTED
        || *code == SqlState::READ_ONLY_SQL_TRANSACTION
    {
        // Connection exceptions, shutdown, insufficient resources, lost races: try again.
        StoreError::Unavailable(format!("PostgreSQL: {}", db.message()))
    } else {
        StoreError::Backend(format!("PostgreSQL: {} ({})", db.message(), code.code()))
    }
}

pub(crate) fn pool_err(e: deadpool_postgres::PoolError) -> StoreError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => db_err(e),
        other => StoreError::Unavailable(format!("no PostgreSQL connection: {other}")),
    }
}

pub(crate) fn ms(d: SignedDuration) -> i64 {
    d.as_millis() as i64
}

pub(crate) fn state(s: &str) -> Result<TaskState, StoreError> {
    TaskState::parse(s).map_err(|e| StoreError::Backend(e.to_string()))
}

/// Columns read by [`task_from_row`], in order (qualified by `t.` for joins and RETURNING).
pub(crate) const TASK_COLUMNS: &str = "t.id, t.queue, t.kind, t.payload, t.priority, t.state, t.run_at, \
    t.attempt, t.max_attempts, t.timeout_ms, t.unique_key, t.backoff_base_ms, t.backoff_max_ms, \
    t.schedule, t.nominal_at, t.created_at, t.started_at, t.finished_at, t.lease_expires_at, \
    t.worker, t.cancel_requested, t.last_error, t.result";

pub(crate) fn task_from_row(r: &Row) -> Result<Task, StoreError> {
    let backoff = match (col::<Option<i64>>(r, 11)?, col::<Option<i64>>(r, 12)?) {
        (Some(base), Some(max)) => Some(Backoff {
            base: SignedDuration::from_millis(base),
            max: SignedDuration::from_millis(max),
        }),
        _ => None,
    };
    Ok(Task {
        id: col(r, 0)?,
        queue: col(r, 1)?,
        kind: col(r, 2)?,
        payload: col(r, 3)?,
        priority: col(r, 4)?,
        state: state(col(r, 5)?)?,
        run_at: col(r, 6)?,
        attempt: col(r, 7)?,
        max_attempts: col(r, 8)?,
        timeout: col::<Option<i64>>(r, 9)?.map(SignedDuration::from_millis),
        unique_key: col(r, 10)?,
        backoff,
        schedule: col(r, 13)?,
        nominal_at: col(r, 14)?,
        created_at: col(r, 15)?,
        started_at: col(r, 16)?,
        finished_at: col(r, 17)?,
        lease_expires_at: col(r, 18)?,
        worker: col(r, 19)?,
        cancel_requested: col(r, 20)?,
        last_error: col(r, 21)?,
        result: col(r, 22)?,
        attempts: Vec::new(),
    })
}

pub(crate) fn tasks_from_rows(rows: &[Row]) -> Result<Vec<Task>, StoreError> {
    rows.iter().map(task_from_row).collect()
}

/// A column of a row, with a row-decoding error as a backend error.
pub(crate) fn col<'a, T: tokio_postgres::types::FromSql<'a>>(
    r: &'a Row,
    i: usize,
) -> Result<T, StoreError> {
    r.try_get(i)
        .map_err(|e| StoreError::Backend(format!("bad row: {e}")))
}
