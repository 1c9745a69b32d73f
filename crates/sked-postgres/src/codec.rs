//! Conversions between rows and domain values, and from driver errors to [`StoreError`].

use jiff::SignedDuration;
use sked_core::{Task, TaskState};
use sked_store::StoreError;
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;

/// Maps a driver error: connection trouble is `Unavailable` (HTTP 503, try again), a unique
/// violation a `Conflict`, anything else a backend error.
pub(crate) fn db_err(e: tokio_postgres::Error) -> StoreError {
    let Some(db) = e.as_db_error() else {
        // No server answer: the connection is closed, broken or could not be made.
        return StoreError::Unavailable(format!("PostgreSQL connection failed: {}", causes(&e)));
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
        || *code == SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT
    {
        // Connection exceptions, shutdown, insufficient resources, lost races, a session the
        // server ended: try again.
        StoreError::Unavailable(format!("PostgreSQL: {}", db.message()))
    } else {
        StoreError::Backend(format!("PostgreSQL: {} ({})", db.message(), code.code()))
    }
}

/// An error and its causes, as `error: cause: cause's cause` (tokio-postgres says "error
/// performing TLS handshake" and leaves the why to its source).
fn causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        source = cause.source();
    }
    text
}

pub(crate) fn pool_err(e: deadpool_postgres::PoolError) -> StoreError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => db_err(e),
        other => StoreError::Unavailable(format!("no PostgreSQL connection: {other}")),
    }
}

/// Milliseconds of a duration checked by [`sked_core::check_duration`] (so they fit); one out of
/// range is stored as the farthest value rather than wrapped.
pub(crate) fn ms(d: SignedDuration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(if d.is_negative() { i64::MIN } else { i64::MAX })
}

pub(crate) fn state(s: &str) -> Result<TaskState, StoreError> {
    TaskState::parse(s).map_err(|e| StoreError::Backend(e.to_string()))
}

/// Columns read by [`task_from_row`]: [`sked_store::columns::TASK_COLUMNS`], as SQL (qualified
/// by `t.` for joins and RETURNING).
pub(crate) const TASK_COLUMNS: &str = "t.id, t.queue, t.kind, t.payload, t.priority, t.state, t.run_at, \
    t.attempt, t.max_attempts, t.timeout_ms, t.unique_key, t.backoff_base_ms, t.backoff_max_ms, \
    t.schedule, t.nominal_at, t.created_at, t.started_at, t.finished_at, t.lease_expires_at, \
    t.worker, t.cancel_requested, t.last_error, t.result, t.concurrency_key, t.traceparent, \
    t.backoff, t.expires_at";

/// [`TASK_COLUMNS`] for lists without payloads: payload and result read as null, the error
/// cut short, so that none of them is read whole (or de-TOASTed).
pub(crate) const TASK_COLUMNS_LEAN: &str = "t.id, t.queue, t.kind, 'null'::jsonb AS payload, \
    t.priority, t.state, t.run_at, t.attempt, t.max_attempts, t.timeout_ms, t.unique_key, \
    t.backoff_base_ms, t.backoff_max_ms, t.schedule, t.nominal_at, t.created_at, t.started_at, \
    t.finished_at, t.lease_expires_at, t.worker, t.cancel_requested, \
    left(t.last_error,1024) AS last_error, NULL::jsonb AS result, t.concurrency_key, t.traceparent, \
    t.backoff, t.expires_at";

/// A task from a row selected with [`TASK_COLUMNS`], by column name.
pub(crate) fn task_from_row(r: &Row) -> Result<Task, StoreError> {
    use sked_store::columns::TaskColumn as C;
    let backoff = sked_store::columns::backoff::from_columns(
        col(r, C::BackoffBaseMs.at())?,
        col(r, C::BackoffMaxMs.at())?,
        col::<Option<&str>>(r, C::Backoff.at())?,
    );
    Ok(Task {
        id: col(r, C::Id.at())?,
        queue: col(r, C::Queue.at())?,
        kind: col(r, C::Kind.at())?,
        payload: col(r, C::Payload.at())?,
        priority: col(r, C::Priority.at())?,
        state: state(col(r, C::State.at())?)?,
        run_at: col(r, C::RunAt.at())?,
        attempt: col(r, C::Attempt.at())?,
        max_attempts: col(r, C::MaxAttempts.at())?,
        timeout: col::<Option<i64>>(r, C::TimeoutMs.at())?.map(SignedDuration::from_millis),
        unique_key: col(r, C::UniqueKey.at())?,
        backoff,
        expires_at: col(r, C::ExpiresAt.at())?,
        schedule: col(r, C::Schedule.at())?,
        nominal_at: col(r, C::NominalAt.at())?,
        created_at: col(r, C::CreatedAt.at())?,
        started_at: col(r, C::StartedAt.at())?,
        finished_at: col(r, C::FinishedAt.at())?,
        lease_expires_at: col(r, C::LeaseExpiresAt.at())?,
        worker: col(r, C::Worker.at())?,
        cancel_requested: col(r, C::CancelRequested.at())?,
        last_error: col(r, C::LastError.at())?,
        result: col(r, C::Result.at())?,
        key: col(r, C::ConcurrencyKey.at())?,
        traceparent: col(r, C::Traceparent.at())?,
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
            super::TASK_COLUMNS_LEAN.contains(&format!(",{})", sked_store::page::LEAN_ERROR_CHARS))
        );
    }
}
