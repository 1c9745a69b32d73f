//! The task columns every backend reads, named once. Backends select them in this order and
//! decode a row by these names ([`TaskColumn::at`]), so that no backend holds a list of
//! positions of its own; each backend's tests check its column list against [`TASK_COLUMNS`].

/// A column of a task row, in the order backends select them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)] // Named as the columns are.
pub enum TaskColumn {
    Id,
    Queue,
    Kind,
    Payload,
    Priority,
    State,
    RunAt,
    Attempt,
    MaxAttempts,
    TimeoutMs,
    UniqueKey,
    BackoffBaseMs,
    BackoffMaxMs,
    Schedule,
    NominalAt,
    CreatedAt,
    StartedAt,
    FinishedAt,
    LeaseExpiresAt,
    Worker,
    CancelRequested,
    LastError,
    Result,
}

impl TaskColumn {
    /// Its position in a row selected with [`TASK_COLUMNS`].
    pub const fn at(self) -> usize {
        self as usize
    }
}

/// The column names, in order.
pub const TASK_COLUMNS: [&str; 23] = [
    "id",
    "queue",
    "kind",
    "payload",
    "priority",
    "state",
    "run_at",
    "attempt",
    "max_attempts",
    "timeout_ms",
    "unique_key",
    "backoff_base_ms",
    "backoff_max_ms",
    "schedule",
    "nominal_at",
    "created_at",
    "started_at",
    "finished_at",
    "lease_expires_at",
    "worker",
    "cancel_requested",
    "last_error",
    "result",
];

/// Whether a backend's select list (`"id, queue, …"`, optionally qualified like `t.id`) names
/// the task columns in order.
pub fn selects_task_columns(list: &str) -> bool {
    let names: Vec<&str> = list
        .split(',')
        .map(|c| {
            let c = c.trim();
            c.rsplit_once('.').map_or(c, |(_, name)| name)
        })
        .collect();
    names == TASK_COLUMNS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_follow_the_names() {
        assert_eq!(TASK_COLUMNS[TaskColumn::Id.at()], "id");
        assert_eq!(
            TASK_COLUMNS[TaskColumn::BackoffMaxMs.at()],
            "backoff_max_ms"
        );
        assert_eq!(TASK_COLUMNS[TaskColumn::Result.at()], "result");
        assert_eq!(TaskColumn::Result.at() + 1, TASK_COLUMNS.len());
        assert!(selects_task_columns(&TASK_COLUMNS.join(", ")));
        assert!(!selects_task_columns("id, kind, queue"));
    }
}
