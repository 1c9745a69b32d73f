//! Conversions between rows and domain values.

use jiff::{SignedDuration, Timestamp};
use rusqlite::{ErrorCode, Row};
use sked_core::{Backoff, Task, TaskState};
use sked_store::StoreError;

pub(crate) fn db_err(e: rusqlite::Error) -> StoreError {
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            StoreError::Unavailable(format!("database is busy: {e}"))
        }
        Some(ErrorCode::ConstraintViolation) => StoreError::Conflict(e.to_string()),
        Some(ErrorCode::DiskFull | ErrorCode::CannotOpen | ErrorCode::ReadOnly) => {
            StoreError::Unavailable(e.to_string())
        }
        _ => StoreError::Backend(e.to_string()),
    }
}

pub(crate) fn ts(t: Timestamp) -> i64 {
    t.as_microsecond()
}

pub(crate) fn from_ts(us: i64) -> Timestamp {
    Timestamp::from_microsecond(us).unwrap_or(Timestamp::UNIX_EPOCH)
}

pub(crate) fn opt_ts(us: Option<i64>) -> Option<Timestamp> {
    us.map(from_ts)
}

pub(crate) fn ms(d: SignedDuration) -> i64 {
    d.as_millis() as i64
}

pub(crate) fn state(s: &str) -> rusqlite::Result<TaskState> {
    TaskState::parse(s).map_err(|e| {
        rusqlite::Error::InvalidColumnType(0, e.to_string(), rusqlite::types::Type::Text)
    })
}

pub(crate) fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or(serde_json::Value::Null)
}

/// Columns read by [`task_from_row`], in order.
pub(crate) const TASK_COLUMNS: &str = "id, queue, kind, payload, priority, state, run_at, attempt, \
    max_attempts, timeout_ms, unique_key, backoff_base_ms, backoff_max_ms, schedule, nominal_at, \
    created_at, started_at, finished_at, lease_expires_at, worker, cancel_requested, last_error, result";

pub(crate) fn task_from_row(r: &Row<'_>) -> rusqlite::Result<Task> {
    let backoff = match (r.get::<_, Option<i64>>(11)?, r.get::<_, Option<i64>>(12)?) {
        (Some(base), Some(max)) => Some(Backoff {
            base: SignedDuration::from_millis(base),
            max: SignedDuration::from_millis(max),
        }),
        _ => None,
    };
    Ok(Task {
        id: r.get(0)?,
        queue: r.get(1)?,
        kind: r.get(2)?,
        payload: json(&r.get::<_, String>(3)?),
        priority: r.get(4)?,
        state: state(&r.get::<_, String>(5)?)?,
        run_at: from_ts(r.get(6)?),
        attempt: r.get(7)?,
        max_attempts: r.get(8)?,
        timeout: r.get::<_, Option<i64>>(9)?.map(SignedDuration::from_millis),
        unique_key: r.get(10)?,
        backoff,
        schedule: r.get(13)?,
        nominal_at: opt_ts(r.get(14)?),
        created_at: from_ts(r.get(15)?),
        started_at: opt_ts(r.get(16)?),
        finished_at: opt_ts(r.get(17)?),
        lease_expires_at: opt_ts(r.get(18)?),
        worker: r.get(19)?,
        cancel_requested: r.get::<_, i64>(20)? != 0,
        last_error: r.get(21)?,
        result: r.get::<_, Option<String>>(22)?.map(|s| json(&s)),
        attempts: Vec::new(),
    })
}
