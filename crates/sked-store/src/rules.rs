//! The state rules every backend applies the same way: what a finished attempt, a rescue or a
//! new run time does to a task. Backends only store the result.

use jiff::Timestamp;
use sked_core::{Attempt, Task, TaskState, state_after_failure};

use crate::{FinishOutcome, retry_delay};

/// A new or moved task waits in `scheduled` until its run time, else it is `available`.
pub fn state_for_run_at(run_at: Timestamp, now: Timestamp) -> TaskState {
    if run_at <= now {
        TaskState::Available
    } else {
        TaskState::Scheduled
    }
}

/// What ending an attempt changes on the task row.
#[derive(Debug, Clone, PartialEq)]
pub struct Finish {
    pub state: TaskState,
    pub run_at: Timestamp,
    pub max_attempts: i32,
    /// The attempt's error, kept as the task's `last_error`.
    pub error: Option<String>,
    pub result: Option<serde_json::Value>,
    /// How the attempt ended, for its line in the attempt history.
    pub outcome: &'static str,
}

impl Finish {
    /// The task row after the change.
    pub fn apply(&self, task: &Task, now: Timestamp) -> Task {
        Task {
            state: self.state,
            run_at: self.run_at,
            max_attempts: self.max_attempts,
            finished_at: self.state.is_finished().then_some(now),
            last_error: self.error.clone().or_else(|| task.last_error.clone()),
            result: self.result.clone(),
            lease_expires_at: None,
            ..task.clone()
        }
    }
}

/// Ends the running attempt of `task` with `outcome` at `now`.
pub fn finish(task: &Task, outcome: &FinishOutcome, now: Timestamp, jitter: f64) -> Finish {
    match outcome {
        FinishOutcome::Succeeded { result } => Finish {
            state: TaskState::Succeeded,
            run_at: task.run_at,
            max_attempts: task.max_attempts,
            error: None,
            result: result.clone(),
            outcome: "succeeded",
        },
        FinishOutcome::Failed { error, retryable } => {
            let state = if task.cancel_requested {
                TaskState::Cancelled
            } else {
                state_after_failure(task.attempt, task.max_attempts, *retryable)
            };
            let run_at = if state == TaskState::Retrying {
                let delay = retry_delay(task.backoff, task.attempt, jitter);
                now.checked_add(delay).unwrap_or(now)
            } else {
                task.run_at
            };
            Finish {
                state,
                run_at,
                max_attempts: task.max_attempts,
                error: Some(error.clone()),
                result: None,
                outcome: "failed",
            }
        }
        // The attempt number stays a growing fencing token; the snooze gives one back.
        FinishOutcome::Snoozed { until } => Finish {
            state: state_for_run_at(*until, now),
            run_at: *until,
            max_attempts: task.max_attempts.saturating_add(1),
            error: None,
            result: None,
            outcome: "snoozed",
        },
        // Given back: claimable again now, in its old place, the attempt given back like a snooze.
        FinishOutcome::Released => Finish {
            state: TaskState::Available,
            run_at: task.run_at,
            max_attempts: task.max_attempts.saturating_add(1),
            error: None,
            result: None,
            outcome: "released",
        },
        FinishOutcome::Cancelled => Finish {
            state: TaskState::Cancelled,
            run_at: task.run_at,
            max_attempts: task.max_attempts,
            error: None,
            result: None,
            outcome: "cancelled",
        },
    }
}

/// Where a running task whose lease expired goes, and the error recorded for the attempt.
pub fn rescue(task: &Task) -> (TaskState, String) {
    let state = if task.cancel_requested {
        TaskState::Cancelled
    } else if task.attempt >= task.max_attempts {
        TaskState::Dead
    } else {
        TaskState::Available
    };
    let error = format!(
        "lease expired: worker {} stopped heartbeating",
        task.worker.as_deref().unwrap_or("?")
    );
    (state, error)
}

/// The attempt the task row itself describes: the running one, or the one that finished it.
pub fn current_attempt(task: &Task) -> Option<Attempt> {
    let outcome = match task.state {
        TaskState::Running => "running",
        TaskState::Succeeded => "succeeded",
        TaskState::Dead => "failed",
        TaskState::Cancelled => "cancelled",
        _ => return None,
    };
    let (worker, started_at) = (task.worker.clone()?, task.started_at?);
    Some(Attempt {
        attempt: task.attempt,
        worker,
        started_at,
        finished_at: task.finished_at,
        outcome: outcome.into(),
        error: if task.state == TaskState::Dead {
            task.last_error.clone()
        } else {
            None
        },
    })
}

/// Completes a task's history: the stored attempts plus the one on the task row.
pub fn add_current_attempt(task: &mut Task) {
    if let Some(current) = current_attempt(task) {
        if !task.attempts.iter().any(|a| a.attempt == current.attempt) {
            task.attempts.push(current);
        }
    }
}

/// How a declared schedule compares with the stored one of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncAction {
    Create,
    Update,
    Unchanged,
}

/// Whether syncing `def` for `group` over `existing` creates, changes or keeps it. The paused
/// flag is not compared: an operator's pause survives a redeploy.
pub fn sync_action(
    existing: Option<&crate::Schedule>,
    def: &sked_core::ScheduleDef,
    group: &str,
) -> SyncAction {
    let Some(s) = existing else {
        return SyncAction::Create;
    };
    let same = s.spec == def.spec
        && s.tz == def.tz
        && s.task == def.task
        && s.overlap == def.overlap
        && s.catchup == def.catchup
        && s.catchup_window == def.catchup_window
        && s.declared_by.as_deref() == Some(group);
    if same {
        SyncAction::Unchanged
    } else {
        SyncAction::Update
    }
}

/// Records `name` in the report under `action`; whether the schedule must be written.
pub fn note_sync(report: &mut crate::ScheduleSyncReport, action: SyncAction, name: &str) -> bool {
    let list = match action {
        SyncAction::Unchanged => &mut report.unchanged,
        SyncAction::Create => &mut report.created,
        SyncAction::Update => &mut report.updated,
    };
    list.push(name.to_string());
    action != SyncAction::Unchanged
}

/// How many items a list returns when the caller does not say.
pub const LIST_LIMIT_DEFAULT: u32 = 100;
/// The most items one list request returns (a page; ask again with `before`).
pub const LIST_LIMIT_MAX: u32 = 1000;
/// The most rows a backend returns from one list statement, whatever it is asked.
pub const STORE_LIST_LIMIT_MAX: u32 = 10_000;

/// A list's page size: the default when none is asked for, else between 1 and
/// [`LIST_LIMIT_MAX`].
pub fn list_limit(asked: Option<u32>) -> u32 {
    asked.unwrap_or(LIST_LIMIT_DEFAULT).clamp(1, LIST_LIMIT_MAX)
}
