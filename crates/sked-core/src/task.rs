//! Tasks: their states, the named transitions between them, and what a new task looks like.
//!
//! ```text
//!  enqueue with parents ─► waiting ──last parent succeeded──► scheduled or available
//!  enqueue ─► scheduled ──stage──► available ──claim──► running ──complete──► succeeded
//!               ▲   ▲                 ▲                  │ │ │
//!               │   └──── snooze ─────┼──────────────────┘ │ └─fail (retryable)─► retrying ─stage─► available
//!   reschedule ─┘                     └──── rescue ────────┘   fail (fatal / out of attempts) ─► dead
//!  a parent dead or cancelled: waiting ─► cancelled (or it counts as done, if the task says so)
//!  cancel: waiting/scheduled/available/retrying ─► cancelled; running ─► running + cancel requested ─► cancelled
//!  not started by its deadline (`expires_at`): waiting/scheduled/available ─► expired
//!  retry (manual): succeeded/dead/cancelled/expired ─► available
//! ```

use std::fmt;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use crate::Backoff;
use crate::error::SpecError;
pub use crate::new_task::*;

/// Task ids are time-ordered integers (assigned by the store in insertion order).
pub type TaskId = i64;

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    /// Waiting for its parents (`depends_on`) to succeed (set by enqueue).
    Waiting,
    /// Waiting for its run_at (set by enqueue, reschedule and snooze).
    Scheduled,
    /// Due and waiting for a worker (set by enqueue, staging, rescue and manual retry).
    Available,
    /// Claimed by a worker holding a lease (set by claim only).
    Running,
    /// Failed and waiting for its backoff to pass (set by a retryable fail).
    Retrying,
    /// Finished well (set by complete).
    Succeeded,
    /// Failed for good: a fatal error, or out of attempts (set by fail and rescue).
    Dead,
    /// Cancelled before or while it ran (set by cancel, or by a worker acknowledging it).
    Cancelled,
    /// Not started by its deadline (`expires_at`): it never ran (set by the leader).
    Expired,
}

impl TaskState {
    pub const ALL: [TaskState; 9] = [
        TaskState::Waiting,
        TaskState::Scheduled,
        TaskState::Available,
        TaskState::Running,
        TaskState::Retrying,
        TaskState::Succeeded,
        TaskState::Dead,
        TaskState::Cancelled,
        TaskState::Expired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Waiting => "waiting",
            TaskState::Scheduled => "scheduled",
            TaskState::Available => "available",
            TaskState::Running => "running",
            TaskState::Retrying => "retrying",
            TaskState::Succeeded => "succeeded",
            TaskState::Dead => "dead",
            TaskState::Cancelled => "cancelled",
            TaskState::Expired => "expired",
        }
    }

    pub fn parse(s: &str) -> Result<TaskState, SpecError> {
        TaskState::ALL.into_iter().find(|st| st.as_str() == s).ok_or_else(|| {
            SpecError::new(format!(
                "unknown task state {s:?}: expected one of waiting, scheduled, available, running, retrying, succeeded, dead, cancelled, expired"
            ))
        })
    }

    /// Timed states (scheduled, retrying) become available when their run time comes.
    pub fn is_timed(self) -> bool {
        matches!(self, TaskState::Scheduled | TaskState::Retrying)
    }

    /// Finished states never change again except by a manual retry.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            TaskState::Succeeded | TaskState::Dead | TaskState::Cancelled | TaskState::Expired
        )
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every state change is one of these, applied by the store as a compare-and-set on
/// [`Transition::from_states`] (and, for a running task, on its attempt number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// A due scheduled/retrying task becomes available.
    Stage,
    /// A worker takes an available task; the attempt number grows by one and fences the lease.
    Claim,
    /// The last of a waiting task's parents succeeded: it becomes scheduled or available.
    Release,
    /// The lease holder reports success.
    Complete,
    /// The lease holder reports a failure (retrying or dead).
    Fail,
    /// The lease holder asks to run again later without spending an attempt.
    Snooze,
    /// A task that has not started is cancelled.
    Cancel,
    /// A running task is asked to stop; it stays running until its worker acknowledges.
    RequestCancel,
    /// An expired lease: the task is re-queued or dead.
    Rescue,
    /// A finished task is run again by hand.
    Retry,
    /// A task that has not started gets a new run_at.
    Reschedule,
    /// A scheduled run waiting to retry ends dead: its schedule's next occurrence was planned
    /// (moved by the scheduler).
    StopRetrying,
    /// A task that has not started by its deadline ends expired (by the leader).
    Expire,
}

impl Transition {
    /// The states a task must be in for this transition to apply.
    pub fn from_states(self) -> &'static [TaskState] {
        use TaskState::*;
        match self {
            Transition::Stage => &[Scheduled, Retrying],
            Transition::Release => &[Waiting],
            Transition::Claim => &[Available],
            Transition::Complete
            | Transition::Fail
            | Transition::Snooze
            | Transition::RequestCancel
            | Transition::Rescue => &[Running],
            Transition::Cancel | Transition::Reschedule => {
                &[Waiting, Scheduled, Available, Retrying]
            }
            Transition::Retry => &[Succeeded, Dead, Cancelled, Expired],
            Transition::StopRetrying => &[Retrying],
            Transition::Expire => &[Waiting, Scheduled, Available],
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Transition::Stage => "stage",
            Transition::Release => "release",
            Transition::Claim => "claim",
            Transition::Complete => "complete",
            Transition::Fail => "fail",
            Transition::Snooze => "snooze",
            Transition::Cancel => "cancel",
            Transition::RequestCancel => "request_cancel",
            Transition::Rescue => "rescue",
            Transition::Retry => "retry",
            Transition::Reschedule => "reschedule",
            Transition::StopRetrying => "stop_retrying",
            Transition::Expire => "expire",
        }
    }

    /// Checks that a task in `state` may take this transition.
    pub fn check(self, state: TaskState) -> Result<(), TransitionError> {
        if self.from_states().contains(&state) {
            Ok(())
        } else {
            Err(TransitionError {
                transition: self,
                state,
            })
        }
    }
}

/// A transition asked of a task in a state that does not allow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransitionError {
    pub transition: Transition,
    pub state: TaskState,
}

impl fmt::Display for TransitionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let allowed: Vec<&str> = self
            .transition
            .from_states()
            .iter()
            .map(|s| s.as_str())
            .collect();
        write!(
            f,
            "cannot {} a task that is {} (only a task that is {})",
            self.transition.name().replace('_', " "),
            self.state,
            allowed.join(" or ")
        )
    }
}

impl std::error::Error for TransitionError {}

/// The state a failed attempt leads to.
pub fn state_after_failure(attempt: i32, max_attempts: i32, retryable: bool) -> TaskState {
    if retryable && attempt < max_attempts {
        TaskState::Retrying
    } else {
        TaskState::Dead
    }
}

/// One attempt at running a task, as recorded in its history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = AttemptRecord))]
pub struct Attempt {
    pub attempt: i32,
    pub worker: String,
    pub started_at: Timestamp,
    pub finished_at: Option<Timestamp>,
    /// `succeeded`, `failed`, `snoozed`, `cancelled` or `rescued`.
    pub outcome: String,
    pub error: Option<String>,
}

/// A task as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Task {
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub id: TaskId,
    pub queue: String,
    pub kind: String,
    /// Null in lists that leave payloads out (without `include=payload`).
    #[serde(default)]
    pub payload: serde_json::Value,
    pub priority: i32,
    pub state: TaskState,
    pub run_at: Timestamp,
    pub attempt: i32,
    pub max_attempts: i32,
    #[serde(with = "crate::serde_duration::option")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::Duration>))]
    pub timeout: Option<SignedDuration>,
    pub unique_key: Option<String>,
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::BackoffSpec>))]
    pub backoff: Option<Backoff>,
    /// Its deadline to start: not started by then, it ends `expired` and never runs. Once it
    /// has started, its retries are not held to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Timestamp>,
    pub schedule: Option<String>,
    pub nominal_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
    pub lease_expires_at: Option<Timestamp>,
    pub worker: Option<String>,
    pub cancel_requested: bool,
    pub last_error: Option<String>,
    pub result: Option<serde_json::Value>,
    /// Its concurrency key, if it has one.
    #[serde(default)]
    pub key: Option<String>,
    /// The W3C trace context its claims and runs continue (see [`crate::NewTask::traceparent`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The tasks it waits or waited for (`depends_on`), in id order. Filled by single-task
    /// reads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<i64>))]
    pub depends_on: Vec<TaskId>,
    /// Of its parents, those that have not ended yet, while it is `waiting` (in lists too).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<i64>))]
    pub waiting_for: Vec<TaskId>,
    /// The tasks that name it in their `depends_on`, in id order. Filled by single-task reads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<i64>))]
    pub dependents: Vec<TaskId>,
    /// What a parent that ends dead or cancelled does to it. Filled by single-task reads.
    #[serde(default, skip_serializing_if = "ParentFailure::is_cancel")]
    pub on_parent_failure: ParentFailure,
    /// What its running attempt last reported of its progress with a heartbeat (a number from
    /// 0 to 100, or a small JSON object). Filled by single-task reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<serde_json::Value>,
    /// The batch it belongs to, if any. Filled by single-task reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub batch: Option<crate::BatchId>,
    /// The workflow it belongs to, if any. Filled by single-task reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<TaskWorkflow>,
    /// Filled by single-task reads; empty in lists.
    #[serde(default)]
    pub attempts: Vec<Attempt>,
}

/// The workflow a task belongs to, and its name there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TaskWorkflow {
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub id: crate::WorkflowId,
    /// The task's name in the workflow.
    pub name: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transitions_allow_only_their_from_states() {
        for t in [
            Transition::Stage,
            Transition::Release,
            Transition::Claim,
            Transition::Complete,
            Transition::Fail,
            Transition::Snooze,
            Transition::Cancel,
            Transition::RequestCancel,
            Transition::Rescue,
            Transition::Retry,
            Transition::Reschedule,
            Transition::StopRetrying,
            Transition::Expire,
        ] {
            for s in TaskState::ALL {
                assert_eq!(
                    t.check(s).is_ok(),
                    t.from_states().contains(&s),
                    "{t:?} from {s}"
                );
            }
        }
        assert!(Transition::Claim.check(TaskState::Running).is_err());
        let err = Transition::Cancel.check(TaskState::Succeeded).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot cancel a task that is succeeded (only a task that is waiting or scheduled or available or retrying)"
        );
    }

    #[test]
    fn failure_retries_until_attempts_run_out() {
        assert_eq!(state_after_failure(1, 3, true), TaskState::Retrying);
        assert_eq!(state_after_failure(3, 3, true), TaskState::Dead);
        assert_eq!(state_after_failure(1, 3, false), TaskState::Dead);
    }

    #[test]
    fn new_task_validation_names_the_problem() {
        let mut t = NewTask::new("email");
        assert!(t.validate().is_ok());
        t.max_attempts = 0;
        assert!(t.validate().unwrap_err().message().contains("max_attempts"));
        let mut t = NewTask::new("");
        assert!(t.validate().unwrap_err().message().contains("kind"));
        t.kind = "k".into();
        t.payload = serde_json::Value::String("x".repeat(MAX_PAYLOAD_BYTES + 1));
        assert!(t.validate().unwrap_err().message().contains("payload"));
    }

    #[test]
    fn progress_is_a_percent_or_a_small_object() {
        use serde_json::json;
        for ok in [
            json!(0),
            json!(42.5),
            json!(100),
            json!({"step": "upload"}),
            json!({"percent": 7}),
        ] {
            assert!(check_progress(&ok).is_ok(), "{ok}");
        }
        for bad in [
            json!(-1),
            json!(101),
            json!("half"),
            json!([1]),
            json!({"percent": "x"}),
            json!(null),
        ] {
            assert!(check_progress(&bad).is_err(), "{bad}");
        }
        let big = json!({ "log": "x".repeat(MAX_PROGRESS_BYTES) });
        assert!(
            check_progress(&big)
                .unwrap_err()
                .message()
                .contains("limit")
        );
    }

    #[test]
    fn state_names_round_trip() {
        for s in TaskState::ALL {
            assert_eq!(TaskState::parse(s.as_str()).unwrap(), s);
        }
        assert!(TaskState::parse("done").is_err());
    }
}
