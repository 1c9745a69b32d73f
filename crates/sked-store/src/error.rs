//! Store errors, with a [`ErrorKind`] that callers branch on.

use sked_core::{TaskId, TransitionError};

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    #[error("{what} {id} not found")]
    NotFound { what: &'static str, id: String },
    /// The caller's lease is gone: the task was rescued and maybe claimed by another worker.
    #[error(
        "task {id} is no longer held with attempt {attempt}: its lease expired or it was taken over"
    )]
    StaleLease { id: TaskId, attempt: i32 },
    /// The caller's attempt ran past the task's timeout and the grace after it: its lease is
    /// not extended any more, and the rescuer gives the task back.
    #[error(
        "task {id} attempt {attempt} ran past its timeout of {} and the grace after it: its lease is not extended; stop the work",
        sked_core::format_duration(*.timeout)
    )]
    TimedOut {
        id: TaskId,
        attempt: i32,
        timeout: jiff::SignedDuration,
    },
    #[error(transparent)]
    Transition(#[from] TransitionError),
    /// Something changed underneath (for example a schedule advanced by another node).
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("invalid input: {0}")]
    Invalid(String),
    /// The database cannot be reached right now; the operation may succeed later.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    #[error("store error: {0}")]
    Backend(String),
}

/// What kind of failure, for callers that map errors (to HTTP statuses, exit codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    NotFound,
    Conflict,
    Invalid,
    Unavailable,
    Internal,
}

impl StoreError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            StoreError::NotFound { .. } => ErrorKind::NotFound,
            StoreError::StaleLease { .. }
            | StoreError::TimedOut { .. }
            | StoreError::Transition(_)
            | StoreError::Conflict(_) => ErrorKind::Conflict,
            StoreError::Invalid(_) => ErrorKind::Invalid,
            StoreError::Unavailable(_) => ErrorKind::Unavailable,
            StoreError::Backend(_) => ErrorKind::Internal,
        }
    }

    pub fn task_not_found(id: TaskId) -> StoreError {
        StoreError::NotFound {
            what: "task",
            id: id.to_string(),
        }
    }

    pub fn queue_not_found(name: &str) -> StoreError {
        StoreError::NotFound {
            what: "queue",
            id: name.to_string(),
        }
    }

    pub fn calendar_not_found(name: &str) -> StoreError {
        StoreError::NotFound {
            what: "calendar",
            id: name.to_string(),
        }
    }

    pub fn schedule_not_found(name: &str) -> StoreError {
        StoreError::NotFound {
            what: "schedule",
            id: name.to_string(),
        }
    }
}
