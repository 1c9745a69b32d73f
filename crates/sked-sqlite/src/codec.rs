//! Conversions between rows and domain values.

use jiff::{SignedDuration, Timestamp};
use rusqlite::{ErrorCode, Row};
use sked_core::{Task, TaskState};
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

/// `ids` as the parameter of `rarray(?)`: SQLite reads the values where they are, where a
/// JSON array read with `json_each` is written out, parsed and converted back, id by id.
pub(crate) fn id_list(ids: &[sked_core::TaskId]) -> rusqlite::vtab::array::Array {
    std::rc::Rc::new(
        ids.iter()
            .map(|&id| rusqlite::types::Value::Integer(id))
            .collect(),
    )
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

/// Milliseconds of a duration checked by [`sked_core::check_duration`] (so they fit); one out of
/// range is stored as the farthest value rather than wrapped.
pub(crate) fn ms(d: SignedDuration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(if d.is_negative() { i64::MIN } else { i64::MAX })
}

pub(crate) fn state(s: &str) -> rusqlite::Result<TaskState> {
    TaskState::parse(s).map_err(|e| {
        rusqlite::Error::InvalidColumnType(0, e.to_string(), rusqlite::types::Type::Text)
    })
}

pub(crate) fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or(serde_json::Value::Null)
}

/// Columns read by [`task_from_row`]: [`sked_store::columns::TASK_COLUMNS`], as SQL.
pub(crate) const TASK_COLUMNS: &str = "id, queue, kind, payload, priority, state, run_at, attempt, \
    max_attempts, timeout_ms, unique_key, backoff_base_ms, backoff_max_ms, schedule, nominal_at, \
    created_at, started_at, finished_at, lease_expires_at, worker, cancel_requested, last_error, result, \
    concurrency_key, traceparent, backoff, expires_at";

/// [`TASK_COLUMNS`] for lists without payloads: payload and result read as null, the error
/// cut short, so that none of them is read whole.
pub(crate) const TASK_COLUMNS_LEAN: &str = "id, queue, kind, 'null' AS payload, priority, state, run_at, \
    attempt, max_attempts, timeout_ms, unique_key, backoff_base_ms, backoff_max_ms, schedule, \
    nominal_at, created_at, started_at, finished_at, lease_expires_at, worker, cancel_requested, \
    substr(last_error,1,1024) AS last_error, NULL AS result, concurrency_key, traceparent, backoff, \
    expires_at";

/// A text column, borrowed from the row (no copy).
pub(crate) fn text<'r>(r: &'r Row<'_>, i: usize) -> rusqlite::Result<&'r str> {
    let value = r.get_ref(i)?;
    value
        .as_str()
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(i, value.data_type(), Box::new(e)))
}

/// A task from a row selected with [`TASK_COLUMNS`], by column name.
pub(crate) fn task_from_row(r: &Row<'_>) -> rusqlite::Result<Task> {
    use sked_store::columns::TaskColumn as C;
    let backoff = sked_store::columns::backoff::from_columns(
        r.get(C::BackoffBaseMs.at())?,
        r.get(C::BackoffMaxMs.at())?,
        r.get_ref(C::Backoff.at())?.as_str_or_null()?,
    );
    Ok(Task {
        id: r.get(C::Id.at())?,
        queue: r.get(C::Queue.at())?,
        kind: r.get(C::Kind.at())?,
        payload: json(text(r, C::Payload.at())?),
        priority: r.get(C::Priority.at())?,
        state: state(text(r, C::State.at())?)?,
        run_at: from_ts(r.get(C::RunAt.at())?),
        attempt: r.get(C::Attempt.at())?,
        max_attempts: r.get(C::MaxAttempts.at())?,
        timeout: r
            .get::<_, Option<i64>>(C::TimeoutMs.at())?
            .map(SignedDuration::from_millis),
        unique_key: r.get(C::UniqueKey.at())?,
        backoff,
        expires_at: opt_ts(r.get(C::ExpiresAt.at())?),
        schedule: r.get(C::Schedule.at())?,
        nominal_at: opt_ts(r.get(C::NominalAt.at())?),
        created_at: from_ts(r.get(C::CreatedAt.at())?),
        started_at: opt_ts(r.get(C::StartedAt.at())?),
        finished_at: opt_ts(r.get(C::FinishedAt.at())?),
        lease_expires_at: opt_ts(r.get(C::LeaseExpiresAt.at())?),
        worker: r.get(C::Worker.at())?,
        cancel_requested: r.get::<_, i64>(C::CancelRequested.at())? != 0,
        last_error: r.get(C::LastError.at())?,
        result: match r.get_ref(C::Result.at())? {
            rusqlite::types::ValueRef::Null => None,
            _ => Some(json(text(r, C::Result.at())?)),
        },
        key: r.get(C::ConcurrencyKey.at())?,
        traceparent: r.get(C::Traceparent.at())?,
        depends_on: Vec::new(),
        waiting_for: Vec::new(),
        dependents: Vec::new(),
        workflow: None,
        batch: None,
        on_parent_failure: sked_core::ParentFailure::Cancel,
        progress: None,
        attempts: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_task_columns_are_the_stores_list() {
        assert!(sked_store::columns::selects_task_columns(
            super::TASK_COLUMNS
        ));
        assert!(sked_store::columns::selects_task_columns(
            super::TASK_COLUMNS_LEAN
        ));
        assert!(
            super::TASK_COLUMNS_LEAN
                .contains(&format!("1,{})", sked_store::page::LEAN_ERROR_CHARS))
        );
    }
}
