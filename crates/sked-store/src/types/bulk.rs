//! The types of operations on every task a filter matches, done in bounded batches: retry
//! finished tasks, cancel unfinished ones, delete finished ones.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use sked_core::{TaskId, TaskState};

/// What a bulk operation does to each task it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum BulkAction {
    /// A finished task (succeeded, dead, cancelled) runs again, as `task retry` does.
    Retry,
    /// A task that has not started is cancelled; a running one is asked to stop.
    Cancel,
    /// A finished task is deleted, with its attempts.
    Delete,
}

impl BulkAction {
    /// The states a task may be in for the action to apply.
    pub fn applies_to(self) -> &'static [TaskState] {
        use TaskState::*;
        match self {
            BulkAction::Retry => &[Succeeded, Dead, Cancelled],
            BulkAction::Cancel => &[Waiting, Scheduled, Available, Retrying, Running],
            BulkAction::Delete => &[Succeeded, Dead, Cancelled],
        }
    }

    /// Its name, as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            BulkAction::Retry => "retry",
            BulkAction::Cancel => "cancel",
            BulkAction::Delete => "delete",
        }
    }
}

/// Which tasks a bulk operation matches: all of the conditions given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkFilter {
    /// In one of these states (each one the action applies to; at least one).
    pub states: Vec<TaskState>,
    #[serde(default)]
    pub queue: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    /// Enqueued before this instant.
    #[serde(default)]
    pub before: Option<Timestamp>,
    /// Enqueued at or after this instant.
    #[serde(default)]
    pub since: Option<Timestamp>,
    /// Of this concurrency key.
    #[serde(default)]
    pub key: Option<String>,
    /// Of this unique key.
    #[serde(default)]
    pub unique_key: Option<String>,
    /// Of this workflow.
    #[serde(default)]
    pub workflow: Option<sked_core::WorkflowId>,
}

#[derive(Debug, Clone)]
pub struct TaskBulkParams {
    pub action: BulkAction,
    pub filter: BulkFilter,
    /// Only tasks with a larger id: where the previous batch ended.
    pub after: Option<TaskId>,
    /// At most this many tasks in this batch.
    pub limit: u32,
    pub now: Timestamp,
}

/// What one batch of a bulk operation did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkBatch {
    /// Tasks changed.
    pub changed: u64,
    /// The id the next batch starts after; `None` when no task matched past this batch.
    pub next_after: Option<TaskId>,
}
